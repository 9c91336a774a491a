// One token's softmax and top-k by a whole block, in the CPU's order (moe::route's): shared by
// the router's last block (moe_route.cu) and, with FERROLM_ROUTE_TOPK_LATE, the one-token
// expert launches that take the choices from the router's logits themselves (moe_decode.cu).
#pragma once
#include "common.cuh"

// Experts a lane holds: n_expert <= 32 * TOPK_PER_LANE.
#define TOPK_PER_LANE 8
#define NEG_INF __int_as_float(0xff800000)

// Does (p, e) come before (q, f) in the CPU's order (descending probability, then lower id)?
static __device__ __forceinline__ bool ranks_before(float p, int e, float q, int f) {
    return p > q || (p == q && e < f);
}

// topk_token for one token by a whole block (every thread calls it, thread `tid` of `nthreads`
// >= n_expert; the block's threads in any shape): thread e takes expert e's probability, the sum keeps topk_token's order (lane l adds experts
// l, l + 32, ... in turn, then warp_sum), and each expert's slot is its rank, how many experts
// rank before it (ranks_before is a strict order, so topk_token's j-th round picks the expert
// of rank j), counted by `parts` threads an expert. The same bits, in a few hundred
// instructions a thread where one warp's k rounds took over a thousand in a row on the
// router launch's chain (session 36's ncu). A slot no expert takes (NaN logits) gets id
// n_expert, which the expert kernels skip, and weight 0.
static __device__ __forceinline__ void topk_token_block(const float *l, int *__restrict__ ids,
                                                        float *__restrict__ weights, int t,
                                                        int n_expert, int k, int gating,
                                                        const float *__restrict__ bias,
                                                        int tid, int nthreads) {
    __shared__ float p[32 * TOPK_PER_LANE];
    __shared__ float red[32];
    __shared__ float inv_sum;
    __shared__ int pick_e[32];
    __shared__ float pick_p[32];
    const int lane = tid % WARP_SIZE, warp = tid / WARP_SIZE;
    const bool raw = gating == 2, mine = tid < n_expert;
    float v = NEG_INF;
    if (mine) {
        v = bias != nullptr ? __fadd_rn(l[tid], bias[tid]) : l[tid];
    }
    if (tid < k) {
        pick_e[tid] = n_expert;
        pick_p[tid] = 0.0f;
    }
    if (!raw) {
        // The largest logit (exact in any order), each expert's e^(l - max) and the sum.
        const float wm = warp_max(v);
        if (lane == 0) {
            red[warp] = wm;
        }
        __syncthreads();
        float mx = NEG_INF;
        for (int w = 0; w < (n_expert + WARP_SIZE - 1) / WARP_SIZE; ++w) {
            mx = fmaxf(mx, red[w]);
        }
        const float pe = mine ? exp_rn(v - mx) : 0.0f;
        if (mine) {
            p[tid] = pe;
        }
        __syncthreads();
        if (warp == 0) {
            float sum = 0.0f;
            for (int i = 0; i < TOPK_PER_LANE; ++i) {
                const int e = lane + WARP_SIZE * i;
                sum += e < n_expert ? p[e] : 0.0f;
            }
            sum = warp_sum(sum);
            if (lane == 0) {
                inv_sum = 1.0f / sum;
            }
        }
        __syncthreads();
        v = pe >= 0.0f ? pe * inv_sum : -1.0f; // as topk_token (NaN: -1)
    }
    __syncthreads(); // p's exponentials read
    if (mine) {
        p[tid] = v;
    }
    __syncthreads();
    // Expert e's rank by `parts` adjacent threads (a power of two), each over a share of the
    // experts, their counts summed across the group.
    int parts = 1;
    while (parts < WARP_SIZE && 2 * parts * n_expert <= nthreads) {
        parts *= 2;
    }
    const int e = tid / parts, part = tid % parts;
    const bool ranks = e < n_expert;
    const float pe = ranks ? p[e] : 0.0f;
    int r = 0;
    if (ranks) {
        for (int f = part; f < n_expert; f += parts) {
            r += ranks_before(p[f], f, pe, e);
        }
    }
    for (int o = 1; o < parts; o *= 2) {
        r += __shfl_xor_sync(FULL_MASK, r, o);
    }
    // As topk_token's rounds, which start below every probability and at -inf for logits: a
    // logit of -inf is never picked.
    const bool eligible = raw ? pe > NEG_INF : pe > -2.0f;
    if (ranks && eligible && part == 0 && r < k) {
        pick_e[r] = e;
        pick_p[r] = pe;
    }
    __syncthreads();
    float my_p = tid < k ? pick_p[tid] : 0.0f;
    if (gating == 1) {
        // Slot order, as the CPU's iterator sum.
        float s = 0.0f;
        for (int j = 0; j < k; ++j) {
            s += pick_p[j];
        }
        my_p = my_p / s;
    } else if (raw) {
        // As topk_token: the maximum of the k picked, e^(l - max) summed in slot order.
        float m = NEG_INF;
        for (int j = 0; j < k; ++j) {
            m = fmaxf(m, pick_p[j]);
        }
        const float ex = exp_rn(__fsub_rn(my_p, m));
        __syncthreads(); // every thread has read pick_p
        if (tid < k) {
            pick_p[tid] = ex;
        }
        __syncthreads();
        float s = 0.0f;
        for (int j = 0; j < k; ++j) {
            s = __fadd_rn(s, pick_p[j]);
        }
        my_p = __fmul_rn(ex, __fdiv_rn(1.0f, s));
    }
    if (tid < k) {
        ids[(size_t)t * k + tid] = pick_e[tid];
        weights[(size_t)t * k + tid] = my_p;
    }
}

