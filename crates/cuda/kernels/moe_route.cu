// MoE routing: router logits = x · Wrᵀ in f32 (the CPU's f32 dots, bit for bit), then softmax
// over all experts and top-k, one warp per token, as the CPU's moe::route: probabilities
// p = exp(l - max) * (1 / Σ exp), experts taken in descending p with ties to the lower id,
// optionally renormalised p / Σ picked p (summed in slot order). Outputs ids[t][k] (i32) and
// weights[t][k] (f32), slot 0 the most probable.
// The top-k's `gating` (the CPU's MoeGating): 0 keeps the picked probabilities, 1 renormalises
// them, 2 (gpt-oss) takes the top-k of the logits themselves and a softmax over the k picked
// (in slot order, as the CPU's norm::softmax). `bias`: null, or the router's bias (gpt-oss),
// added to each logit before anything else.
//
// Launches (crates/cuda/src/ops/moe_route.rs must agree):
// - moe_logits_small (n <= ROUTE_SMALL_N tokens, decode): block ROUTE_THREADS, grid n_expert,
//   dynamic shared memory (1 + n) * n_embd floats (n_embd <= SMALL_MAX_EMBD, n_embd % 4 == 0).
// - anything else takes gemm_f32.cu's f32 GEMM (the router is an n_expert × n_embd matrix),
//   whose outputs have the same bits.
// - moe_topk: block (32, TOPK_WARPS), grid ceil(n / TOPK_WARPS).
// - moe_route_small: both in one launch for n <= ROUTE_SMALL_N tokens, as moe_logits_small,
//   with a counter (one u32, zero between launches).
// - moe_route_small and add_rms_norm_route_small take ROUTE_TOPK_BLOCK in `gating` too (one
//   token's top-k by the last block's threads together: topk_token_block).
// - add_rms_norm_route_small: norm_rope.cu's add_rms_norm_q8_1_f32 and moe_route_small in one
//   launch: block as that norm (ops/norm_rope.rs's norm_threads; at most 1024), grid n_expert,
//   the same shared memory and counter as moe_route_small.
#include "common.cuh"
#include "norm.cuh"
#include "quant.cuh"

#define ROUTE_THREADS 256
#define ROUTE_SMALL_N 8
#define SMALL_MAX_EMBD 4096
#define TOPK_WARPS 4
// Experts a lane holds: n_expert <= 32 * TOPK_PER_LANE.
#define TOPK_PER_LANE 8
#define NEG_INF __int_as_float(0xff800000)

// The fused norm's dynamic shared memory (add_rms_norm_route_small): [1 + n][n_embd / 4], the
// block's expert row, then the n tokens' normed rows.
extern __shared__ float4 route_stage[];

// The logits of expert blockIdx.x from its row `ws` and the n tokens' rows from `xs0` (n_embd
// apart; in global or shared memory): warp w takes tokens w, w + (warps a block), ..., each
// the CPU's f32 dot (common.cuh's cpu_dot_reduce).
static __device__ __forceinline__ void logits_rows(const float *ws, const float *xs0,
                                                   float *logits, int n, int n_embd,
                                                   int n_expert);

// logits[t][e] = Σ_i x[t][i] · w[e][i] for t < n <= ROUTE_SMALL_N, n_embd % 4 == 0 and
// n_embd <= SMALL_MAX_EMBD (the host checks): a warp a token, straight from global memory (the
// rows are a few KB: latency sets this kernel's time, and with every token on its own warp
// the rows' loads are in flight together; staging them in shared memory first took 21 µs for
// 8 tokens of qwen3-30b-a3b, session 27).
static __device__ __forceinline__ void logits_small(const float *__restrict__ x,
                                                    const float *__restrict__ w, float *logits,
                                                    int n, int n_embd, int n_expert) {
    logits_rows(w + (size_t)blockIdx.x * n_embd, x, logits, n, n_embd, n_expert);
}

// The CPU's f32 dot of ws and xs (n_embd long), one warp; every lane gets it.
static __device__ __forceinline__ float cpu_order_dot(const float *ws, const float *xs,
                                                      int n_embd, int lane) {
    const int n64 = n_embd / 64 * 64;
    float c0 = 0.0f, c1 = 0.0f;
#pragma unroll 4
    for (int c = lane; c < n64; c += 64) {
        c0 = fmaf(ws[c], xs[c], c0);
        c1 = fmaf(ws[c + 32], xs[c + 32], c1);
    }
    return __fadd_rn(cpu_dot_reduce(c0, c1), cpu_dot_tail(ws + n64, xs + n64, n_embd - n64));
}

static __device__ __forceinline__ void logits_rows(const float *ws, const float *xs0,
                                                   float *logits, int n, int n_embd,
                                                   int n_expert) {
    const int e = blockIdx.x, lane = threadIdx.x % WARP_SIZE;
    for (int t = threadIdx.x / WARP_SIZE; t < n; t += blockDim.x / WARP_SIZE) {
        const float s = cpu_order_dot(ws, xs0 + (size_t)t * n_embd, n_embd, lane);
        if (lane == 0) {
            logits[(size_t)t * n_expert + e] = s;
        }
    }
}

extern "C" __global__ void __launch_bounds__(ROUTE_THREADS)
    moe_logits_small(const float *__restrict__ x, const float *__restrict__ w,
                     float *__restrict__ logits, int n, int n_embd, int n_expert) {
    dependent_launch_entry();
    logits_small(x, w, logits, n, n_embd, n_expert);
}

// Does (p, e) come before (q, f) in the CPU's order (descending probability, then lower id)?
static __device__ __forceinline__ bool ranks_before(float p, int e, float q, int f) {
    return p > q || (p == q && e < f);
}

// Softmax and top-k of one token's logits, one warp: lane l holds experts l, l + 32, ... (PER
// of them, n_expert <= 32 * PER); k rounds of a warp-wide arg-max, the winner struck out
// (probabilities are >= 0, so -1 is below every live one). Lane j keeps slot j (k <= 32).
template <int PER>
static __device__ __forceinline__ void topk_token_lanes(const float *l, int *__restrict__ ids,
                                                        float *__restrict__ weights, int t,
                                                        int n_expert, int k, int gating,
                                                        const float *__restrict__ bias,
                                                        int lane) {
    float p[PER];
    float mx = NEG_INF;
#pragma unroll
    for (int i = 0; i < PER; ++i) {
        const int e = lane + WARP_SIZE * i;
        if (e < n_expert) {
            p[i] = bias != nullptr ? __fadd_rn(l[e], bias[e]) : l[e];
        } else {
            p[i] = NEG_INF;
        }
        mx = fmaxf(mx, p[i]);
    }
    // Logits ranked as they are (gating 2): struck out to -inf; probabilities (>= 0) to -1.
    const bool raw = gating == 2;
    if (!raw) {
        mx = warp_max(mx);
        float sum = 0.0f;
#pragma unroll
        for (int i = 0; i < PER; ++i) {
            const int e = lane + WARP_SIZE * i;
            p[i] = e < n_expert ? exp_rn(p[i] - mx) : -1.0f;
            sum += e < n_expert ? p[i] : 0.0f;
        }
        const float inv = 1.0f / warp_sum(sum);
#pragma unroll
        for (int i = 0; i < PER; ++i) {
            p[i] = p[i] >= 0.0f ? p[i] * inv : -1.0f;
        }
    }
    const float struck = raw ? NEG_INF : -1.0f;

    int my_e = 0;
    float my_p = 0.0f;
    for (int j = 0; j < k; ++j) {
        // This lane's best: a later i has a higher id, so only a strictly greater p wins.
        float bp = raw ? NEG_INF : -2.0f;
        int be = n_expert;
#pragma unroll
        for (int i = 0; i < PER; ++i) {
            if (p[i] > bp) {
                bp = p[i];
                be = lane + WARP_SIZE * i;
            }
        }
#pragma unroll
        for (int offset = WARP_SIZE / 2; offset > 0; offset >>= 1) {
            const float op = __shfl_xor_sync(FULL_MASK, bp, offset);
            const int oe = __shfl_xor_sync(FULL_MASK, be, offset);
            if (ranks_before(op, oe, bp, be)) {
                bp = op;
                be = oe;
            }
        }
#pragma unroll
        for (int i = 0; i < PER; ++i) {
            if (lane + WARP_SIZE * i == be) {
                p[i] = struck;
            }
        }
        if (lane == j) {
            my_e = be;
            my_p = bp;
        }
    }
    if (gating == 1) {
        // Slot order, as the CPU's iterator sum.
        float s = 0.0f;
        for (int j = 0; j < k; ++j) {
            s += __shfl_sync(FULL_MASK, my_p, j);
        }
        my_p = my_p / s;
    } else if (raw) {
        // The k picked logits through one softmax, as norm::softmax: the maximum, e^(l - max)
        // summed in slot order, times 1 / Σ.
        float m = NEG_INF;
        for (int j = 0; j < k; ++j) {
            m = fmaxf(m, __shfl_sync(FULL_MASK, my_p, j));
        }
        const float e = exp_rn(__fsub_rn(my_p, m));
        float s = 0.0f;
        for (int j = 0; j < k; ++j) {
            s = __fadd_rn(s, __shfl_sync(FULL_MASK, e, j));
        }
        my_p = __fmul_rn(e, __fdiv_rn(1.0f, s));
    }
    if (lane < k) {
        ids[(size_t)t * k + lane] = my_e;
        weights[(size_t)t * k + lane] = my_p;
    }
}

// topk_token_lanes with as few experts a lane as n_expert allows: the lane's loops (a scan
// and a strike-out a round, k rounds, and the softmax's exponentials) are unrolled over PER
// entries, guarded past n_expert, so the unused ones only cost instructions on the router
// launch's chain (OLMoE's 64 experts take 2 a lane, qwen3-30b-a3b's 128 take 4, where all
// took 8). Entries past n_expert never win a round and add nothing: the same bits.
static __device__ __forceinline__ void topk_token(const float *l, int *__restrict__ ids,
                                                  float *__restrict__ weights, int t,
                                                  int n_expert, int k, int gating,
                                                  const float *__restrict__ bias, int lane) {
    if (n_expert <= 2 * WARP_SIZE) {
        topk_token_lanes<2>(l, ids, weights, t, n_expert, k, gating, bias, lane);
    } else if (n_expert <= 4 * WARP_SIZE) {
        topk_token_lanes<4>(l, ids, weights, t, n_expert, k, gating, bias, lane);
    } else {
        topk_token_lanes<TOPK_PER_LANE>(l, ids, weights, t, n_expert, k, gating, bias, lane);
    }
}

extern "C" __global__ void __launch_bounds__(TOPK_WARPS *WARP_SIZE)
    moe_topk(const float *__restrict__ logits, int *__restrict__ ids, float *__restrict__ weights,
             int n, int n_expert, int k, int gating, const float *__restrict__ bias) {
    dependent_launch_entry();
    const int t = blockIdx.x * TOPK_WARPS + threadIdx.y;
    if (t < n) { // whole warps
        topk_token(logits + (size_t)t * n_expert, ids, weights, t, n_expert, k, gating, bias,
                   threadIdx.x);
    }
}

// The `gating` argument's bit past the gating itself (bits 0-1: 0, 1 or 2, as topk_token
// takes them): one token's top-k by the whole last block (topk_token_block).
#define ROUTE_TOPK_BLOCK 4
// And the bit that keeps one token's x + add in shared memory for the residual's write-back
// (add_rms_norm_route_small).
#define ROUTE_KEEP_SUMS 8
// And the bit that spreads the norm's outputs (out, outq) over the blocks, after each block's
// count, where block 0 wrote them all before its own (add_rms_norm_route_small).
#define ROUTE_SPREAD_OUT 16

// topk_token for one token by a whole block (every thread calls it; blockDim.x >= n_expert):
// thread e takes expert e's probability, the sum keeps topk_token's order (lane l adds experts
// l, l + 32, ... in turn, then warp_sum), and each expert's slot is its rank, how many experts
// rank before it (ranks_before is a strict order, so topk_token's j-th round picks the expert
// of rank j), counted by `parts` threads an expert. The same bits, in a few hundred
// instructions a thread where one warp's k rounds took over a thousand in a row on the
// router launch's chain (session 36's ncu). A slot no expert takes (NaN logits) gets id
// n_expert, which the expert kernels skip, and weight 0.
static __device__ __forceinline__ void topk_token_block(const float *l, int *__restrict__ ids,
                                                        float *__restrict__ weights, int t,
                                                        int n_expert, int k, int gating,
                                                        const float *__restrict__ bias) {
    __shared__ float p[32 * TOPK_PER_LANE];
    __shared__ float red[32];
    __shared__ float inv_sum;
    __shared__ int pick_e[32];
    __shared__ float pick_p[32];
    const int tid = threadIdx.x, lane = tid % WARP_SIZE, warp = tid / WARP_SIZE;
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
    while (parts < WARP_SIZE && 2 * parts * n_expert <= (int)blockDim.x) {
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

// After a block has written its logits: counts it in *done, and in the last block to finish
// (which resets the count for the next launch) takes the softmax and top-k of every token as
// moe_topk does, a warp a token. Returns whether this block was the last.
static __device__ __forceinline__ bool topk_in_last_block(const float *logits,
                                                          int *__restrict__ ids,
                                                          float *__restrict__ weights,
                                                          unsigned *done, int n, int n_expert,
                                                          int k, int gating,
                                                          const float *__restrict__ bias) {
    __shared__ bool last;
    __syncthreads(); // the block's logits, then one thread's fence and count (block_fence_count)
    if (threadIdx.x == 0) {
        last = block_fence_count(done, gridDim.x);
    }
    __syncthreads();
    if (!last) {
        return false;
    }
    __shared__ float ls[ROUTE_SMALL_N * 32 * TOPK_PER_LANE];
    for (int i = threadIdx.x; i < n * n_expert; i += blockDim.x) {
        ls[i] = __ldcg(logits + i); // from L2: other blocks wrote them
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        *done = 0;
    }
    const int how = gating & 3;
    if ((gating & ROUTE_TOPK_BLOCK) && n == 1 && n_expert <= (int)blockDim.x) {
        topk_token_block(ls, ids, weights, 0, n_expert, k, how, bias);
        return true;
    }
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    for (int t = warp; t < n; t += blockDim.x / WARP_SIZE) {
        topk_token(ls + t * n_expert, ids, weights, t, n_expert, k, how, bias, lane);
    }
    return true;
}

// moe_logits_small then moe_topk in one launch (decode's routing was two short launches a
// layer): every block writes its expert's logits as moe_logits_small does, and the last block
// to finish takes the top-k. The same bits as the two kernels.
extern "C" __global__ void __launch_bounds__(ROUTE_THREADS)
    moe_route_small(const float *__restrict__ x, const float *__restrict__ w, float *logits,
                    int *__restrict__ ids, float *__restrict__ weights, unsigned *done, int n,
                    int n_embd, int n_expert, int k, int gating,
                    const float *__restrict__ bias) {
    dependent_launch_entry();
    logits_small(x, w, logits, n, n_embd, n_expert);
    topk_in_last_block(logits, ids, weights, done, n, n_expert, k, gating, bias);
}

// The block's expert row into the start of the shared stage, and the thread's norm weights, both
// before the wait for the kernel ahead: model weights, which no kernel writes.
static __device__ __forceinline__ NormWeights router_row_then_wait(const float *__restrict__ w,
                                                                   const float *__restrict__ norm_w,
                                                                   int n_embd) {
    const float4 *we = (const float4 *)(w + (size_t)blockIdx.x * n_embd);
    for (int i = threadIdx.x; i < n_embd / 4; i += blockDim.x) {
        route_stage[i] = __ldg(we + i);
    }
    return norm_weights_then_wait(norm_w, n_embd);
}

// The norm of the n rows of x + add (add_rms_norm_q8_1_f32's, with `add`: the block is the
// norm's, so the f64 sums have its order and the rows its bits) into xs (n rows of n_embd, in
// shared memory); the writer block also writes out and outq as the norm does; `sums`: null, or
// n_embd floats of shared memory that get row 0's x + add (for n = 1). Ends with a barrier. The
// whole block calls it.
static __device__ __forceinline__ void norm_rows_into(float *x, const float *add,
                                                      const NormWeights &wr,
                                                      const float *__restrict__ norm_w,
                                                      float *out, block_q8_1 *__restrict__ outq,
                                                      float eps, int q8k, float *xs0, int n,
                                                      int n_embd, bool writer,
                                                      float *sums = nullptr) {
    __shared__ double scratch[32];
    for (int t = 0; t < n; ++t) {
        const size_t base = (size_t)t * n_embd;
        float *xs = xs0 + base;
        float xr[NORM_REGS];
        const float scale =
            add_norm_scale(x, add, base, n_embd, eps, false, xr, scratch);
        // As add_rms_norm_q8_1_f32's output pass (a warp's 32 elements are one Q8_1 block).
#pragma unroll
        for (int j = 0; j < NORM_REGS; ++j) {
            const int i = threadIdx.x + j * blockDim.x;
            if (i < n_embd) {
                const float o = __fmul_rn(__fmul_rn(xr[j], scale), wr.v[j]);
                xs[i] = o;
                if (sums != nullptr) {
                    sums[i] = xr[j];
                }
                if (writer) {
                    out[base + i] = o;
                    if (!q8k) {
                        quantize_q8_1_warp(o, outq + (base + i) / QK8_1);
                    }
                }
            }
        }
        for (int i = threadIdx.x + NORM_REGS * blockDim.x; i < n_embd; i += blockDim.x) {
            const float v = norm_input(x, add, base + i, false);
            const float o = __fmul_rn(__fmul_rn(v, scale), norm_w[i]);
            xs[i] = o;
            if (sums != nullptr) {
                sums[i] = v;
            }
            if (writer) {
                out[base + i] = o;
                if (!q8k) {
                    quantize_q8_1_warp(o, outq + (base + i) / QK8_1);
                }
            }
        }
    }
    __syncthreads(); // the staged rows (and the writer's out) complete
    if (writer && q8k) {
        const int warp = threadIdx.x / WARP_SIZE, nwarps = blockDim.x / WARP_SIZE;
        for (int g = warp; g < n * (n_embd / QK_K); g += nwarps) {
            quantize_q8_k_warp(out + (size_t)g * QK_K, outq + (size_t)g * 8);
        }
    }
}

// The norm's outputs out and outq for the n normed rows in xs0 (shared memory, every block's
// the same), a share a block: warp w of block b takes activation block b + w * gridDim.x (256
// values with q8k, else 32), writes its values to out and quantizes them as the norm's writer
// does (quantize_q8_k_warp over the same 256 values, or quantize_q8_1_warp over the same 32):
// the same bits, from shared memory, where the writer block read its Q8_K rows back from out.
static __device__ __forceinline__ void write_normed_share(const float *xs0, float *out,
                                                          block_q8_1 *__restrict__ outq, int q8k,
                                                          int n, int n_embd) {
    const int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
    const int group = q8k ? QK_K : QK8_1, groups = n * n_embd / group;
    const int stride = gridDim.x * (blockDim.x / WARP_SIZE);
    for (int g = blockIdx.x + warp * gridDim.x; g < groups; g += stride) {
        const float *src = xs0 + (size_t)g * group;
        for (int i = lane; i < group; i += WARP_SIZE) {
            out[(size_t)g * group + i] = src[i];
        }
        if (q8k) {
            quantize_q8_k_warp(src, outq + (size_t)g * (QK_K / QK8_1));
        } else {
            quantize_q8_1_warp(src[lane], outq + g);
        }
    }
}

// One count on `progress` (where given) a launch, by block 0 after the wait: a step's router
// launches counted as they start.
static __device__ __forceinline__ void count_progress(unsigned *progress) {
    if (progress != nullptr && blockIdx.x == 0 && threadIdx.x == 0) {
        atomicAdd(progress, 1u);
    }
}

// add_rms_norm_q8_1_f32 (with `add`) and moe_route_small in one launch, for the norm before an
// MoE FFN: the norm's launch was the router's only input, a few KB. Every block takes the norm
// of the n rows of x + add itself, into shared memory after its expert's row; block 0 also
// writes out and outq as the norm does. x is read by every block, so only the last block to
// finish (all reads done) writes x + add back, after the top-k; one token's sums come from the
// block's shared memory, where they were kept at the norm (reading x and add again from L2 was
// a round trip on the layer's chain). With ROUTE_SPREAD_OUT, no block writes out and outq
// before its count: each writes its share of them after it (write_normed_share), so that the
// writer's extra work (and its Q8_K pass's read back from L2) is not ahead of the last count.
// The same bits as the two kernels. With `progress`, block 0 counts the launch on it once the
// kernel ahead is done (l2_ahead.cu times its requests by that count).
extern "C" __global__ void __launch_bounds__(1024)
    add_rms_norm_route_small(float *x, const float *add, const float *__restrict__ norm_w,
                             float *out, block_q8_1 *__restrict__ outq, float eps, int q8k,
                             const float *__restrict__ w, float *logits, int *__restrict__ ids,
                             float *__restrict__ weights, unsigned *done, int n, int n_embd,
                             int n_expert, int k, int gating, const float *__restrict__ bias,
                             unsigned *progress) {
    const NormWeights wr = router_row_then_wait(w, norm_w, n_embd);
    count_progress(progress);
    __shared__ float sums[SMALL_MAX_EMBD]; // one token's x + add
    float *ws = (float *)route_stage;
    const bool keep = (gating & ROUTE_KEEP_SUMS) && n == 1;
    const bool spread = gating & ROUTE_SPREAD_OUT;
    norm_rows_into(x, add, wr, norm_w, out, outq, eps, q8k, ws + n_embd, n, n_embd,
                   !spread && blockIdx.x == 0, keep ? sums : nullptr);
    logits_rows(ws, ws + n_embd, logits, n, n_embd, n_expert);
    if (topk_in_last_block(logits, ids, weights, done, n, n_expert, k, gating, bias)) {
        for (int i = threadIdx.x; i < n * n_embd; i += blockDim.x) {
            x[i] = keep ? sums[i] : x[i] + add[i];
        }
    }
    if (spread) {
        write_normed_share(ws + n_embd, out, outq, q8k, n, n_embd);
    }
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define ROUTE_CLUSTER 1
#endif

// The block's share of the router's rows for add_rms_norm_route_cluster: experts [first, first
// + mine), per = ceil(n_expert / gridDim.x) a block; into the start of the shared stage, with
// the thread's norm weights, before the wait for the kernel ahead (model weights).
struct ClusterShare {
    NormWeights wr;
    int per, first, mine;
};
static __device__ __forceinline__ ClusterShare
router_rows_then_wait(const float *__restrict__ w, const float *__restrict__ norm_w, int n_embd,
                      int n_expert) {
#ifdef ROUTE_CLUSTER
    // Every block of the cluster has started before any block writes into block 0 (the wait
    // for this arrival is just before the first such write).
    cluster_arrive_relaxed();
#endif
    ClusterShare c;
    c.per = (n_expert + gridDim.x - 1) / gridDim.x;
    c.first = blockIdx.x * c.per;
    c.mine = max(min(c.per, n_expert - c.first), 0);
    const float4 *we = (const float4 *)(w + (size_t)c.first * n_embd);
    for (int i = threadIdx.x; i < c.mine * n_embd / 4; i += blockDim.x) {
        route_stage[i] = __ldg(we + i);
    }
    c.wr = norm_weights_then_wait(norm_w, n_embd);
    return c;
}

// add_rms_norm_route_small on one thread-block cluster (sm_90): the grid is one cluster of
// gridDim.x blocks, each with its share of the experts' rows (router_rows_then_wait). Every
// block takes the norm as add_rms_norm_route_small's blocks do; its warps take its (expert,
// token) logits and store them into block 0's shared memory; after the cluster's barrier (every
// block's reads of x done) block 0 takes the top-k and writes x + add back. No atomics and no
// round trip through global memory for the logits, and 8 blocks where that kernel has one an
// expert. The same bits. Dynamic shared memory: (per + n) rows of n_embd floats. Its parameters
// are add_rms_norm_route_small's, so one launch sequence serves both; logits and done go unused.
extern "C" __global__ void __launch_bounds__(1024)
    add_rms_norm_route_cluster(float *x, const float *add, const float *__restrict__ norm_w,
                               float *out, block_q8_1 *__restrict__ outq, float eps, int q8k,
                               const float *__restrict__ w, float *logits,
                               int *__restrict__ ids, float *__restrict__ weights,
                               unsigned *done, int n, int n_embd, int n_expert, int k,
                               int gating, const float *__restrict__ bias, unsigned *progress) {
    const ClusterShare c = router_rows_then_wait(w, norm_w, n_embd, n_expert);
    count_progress(progress);
#ifdef ROUTE_CLUSTER
    __shared__ float cluster_logits[ROUTE_SMALL_N * 32 * TOPK_PER_LANE];
    float *ws = (float *)route_stage, *xs = ws + (size_t)c.per * n_embd;
    norm_rows_into(x, add, c.wr, norm_w, out, outq, eps, q8k, xs, n, n_embd, blockIdx.x == 0);
    cluster_wait();
    const int lane = threadIdx.x % WARP_SIZE, nwarps = blockDim.x / WARP_SIZE;
    for (int p = threadIdx.x / WARP_SIZE; p < c.mine * n; p += nwarps) {
        const int e = p % c.mine, t = p / c.mine;
        const float s =
            cpu_order_dot(ws + (size_t)e * n_embd, xs + (size_t)t * n_embd, n_embd, lane);
        if (lane == 0) {
            store_in_block(cluster_logits + t * n_expert + c.first + e, 0, s);
        }
    }
    cluster_arrive_release();
    cluster_wait();
    if (blockIdx.x != 0) {
        return;
    }
    for (int t = threadIdx.x / WARP_SIZE; t < n; t += nwarps) {
        topk_token(cluster_logits + t * n_expert, ids, weights, t, n_expert, k, gating & 3, bias,
                   lane);
    }
    for (int i = threadIdx.x; i < n * n_embd; i += blockDim.x) {
        x[i] = x[i] + add[i];
    }
#else
    __trap(); // launched only on sm_90 and later (the plan's norm_route_cluster)
#endif
}

// A tensor split's share of the experts (crates/model/src/split.rs): dst[i] = src[i] - first
// where src[i] is one of the `count` experts from `first` this rank holds, else -1, which every
// expert kernel takes as a slot that adds nothing. Grid ceil(n / 256), block 256.
extern "C" __global__ void moe_localize(const int *__restrict__ src, int *__restrict__ dst, int n,
                                        int first, int count) {
    dependent_launch_entry();
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        const int e = src[i] - first;
        dst[i] = e >= 0 && e < count ? e : -1;
    }
}
