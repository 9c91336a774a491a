// Grouped expert GEMM for MoE prefill, with the routes already chosen: ids[p], weights[p] for
// each (token, slot) pair p = token * n_used + slot.
//
//   1. moe_count, moe_scatter: the expert-sorted index, on the device. `index` holds
//      counts[E], offsets[E + 1] (prefix sums of counts) and tile_starts[E + 1] (prefix sums
//      of ceil(count / BN), the GEMM tiles of each expert); `sorted` lists pair ids by
//      expert, by pair id within an expert (so the order, and every result, is reproducible).
//      A pair whose id is outside [0, E) joins no segment and contributes nothing.
//   2. moe_gate_up_<type>: h[q] = silu(gate_e · x[t]) * (up_e · x[t]) for the pair at sorted
//      position q (token t, expert e), SwiGLU fused into the GEMM's epilogue.
//   3. (quantize.cu turns h into Q8_1, rows in sorted order.)
//   4. moe_down_<type>: y[p] = weights[p] * (down_e · h[q]), stored by pair id p.
//   (gpt-oss: each product plus its expert's bias and swiglu_oai for silu, common.cuh's
//   ExpertEpilogue; null biases for the other models.)
//   5. moe_combine: out[t] = Σ_slot y[t * n_used + slot], slots in order (no atomics).
//
// GEMM launch (crates/cuda/src/ops/moe_gemm.rs must agree), BM, BN from MoeTileCfg below:
// block (32, MoeTileCfg::NWARPS), grid (ceil(rows / BM), tile slots), dynamic shared memory
// MmqSmem<TYPE, MoeTileCfg, NMAT>::bytes with NMAT = 2 for gate/up, 1 for down. With expert < 0 the slots cover every expert: the host
// cannot know the counts, so it launches ceil(pairs / BN) + E slots (an upper bound on
// Σ ceil(count / BN)), and slot j finds its expert by binary search in tile_starts;
// slots past the last tile exit at once. With expert >= 0 (the per-expert fallback) slot j is
// tile j of that expert, ceil(pairs / BN) slots. Weights are stacked: expert e owns rows
// e * rows.. of its matrix.
#include "common.cuh"
#include "quant.cuh"
#include "mmq_tile.cuh"
#include "mmq_mma.cuh"

// The GEMM tile of both expert kernels (moe_gemm.rs MOE_TILE): experts see
// few tokens each, so a small tile in tokens; 4 warps of 32 × 32.
typedef MmqCfg<64, 64, 2, 2> MoeTileCfg;

#define MOE_INDEX_THREADS 256

// Block e: counts[e] = #{p : ids[p] == e}. Grid (E), block (MOE_INDEX_THREADS).
extern "C" __global__ void moe_count(const int *__restrict__ ids, int npairs, int n_expert,
                                     int *__restrict__ index) {
    dependent_launch_entry();
    __shared__ int scratch[32];
    const int e = blockIdx.x;
    int c = 0;
    for (int p = threadIdx.x; p < npairs; p += blockDim.x) {
        c += ids[p] == e;
    }
    c = block_sum(c, scratch);
    if (threadIdx.x == 0) {
        index[e] = c;
    }
}

// Block e: offsets[e], tile_starts[e] (block E - 1 also the totals), then the pairs of expert
// e in ascending order at sorted[offsets[e]..]. Grid (E), block (MOE_INDEX_THREADS).
extern "C" __global__ void moe_scatter(const int *__restrict__ ids, int npairs, int n_expert,
                                       int *__restrict__ index, int *__restrict__ sorted) {
    dependent_launch_entry();
    __shared__ int scratch[32];
    __shared__ int warp_count[MOE_INDEX_THREADS / WARP_SIZE];
    const int e = blockIdx.x;
    const int *counts = index;
    int *offsets = index + n_expert, *tile_starts = index + 2 * n_expert + 1;

    int before = 0, tiles_before = 0;
    for (int i = threadIdx.x; i < e; i += blockDim.x) {
        before += counts[i];
        tiles_before += (counts[i] + MoeTileCfg::BN - 1) / MoeTileCfg::BN;
    }
    before = block_sum(before, scratch);
    tiles_before = block_sum(tiles_before, scratch);
    if (threadIdx.x == 0) {
        offsets[e] = before;
        tile_starts[e] = tiles_before;
        if (e == n_expert - 1) {
            offsets[n_expert] = before + counts[e];
            tile_starts[n_expert] = tiles_before + (counts[e] + MoeTileCfg::BN - 1) / MoeTileCfg::BN;
        }
    }

    // Ordered compaction, one block-wide chunk at a time: a pair's rank is the number of
    // earlier matching pairs (ballots within a warp, warp totals across the block).
    const int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
    int base = before;
    for (int p0 = 0; p0 < npairs; p0 += blockDim.x) {
        const int p = p0 + threadIdx.x;
        const bool hit = p < npairs && ids[p] == e;
        const unsigned ballot = __ballot_sync(FULL_MASK, hit);
        if (lane == 0) {
            warp_count[warp] = __popc(ballot);
        }
        __syncthreads();
        int rank = base + __popc(ballot & ((1u << lane) - 1u)), total = 0;
        for (int w = 0; w < (int)(blockDim.x / WARP_SIZE); ++w) {
            rank += w < warp ? warp_count[w] : 0;
            total += warp_count[w];
        }
        if (hit) {
            sorted[rank] = p;
        }
        base += total;
        __syncthreads(); // warp_count is rewritten by the next chunk
    }
}

// moe_count and moe_scatter in one block, for a batched decode step's few pairs: the same
// index and the same order in `sorted` (a pair's rank among its expert's is the number of
// earlier pairs with that expert), one launch where those take two of E blocks each.
// Grid (1), block (MOE_INDEX_THREADS); npairs <= MOE_INDEX_ONE_BLOCK_PAIRS and
// n_expert <= MOE_INDEX_ONE_BLOCK_EXPERTS (moe_gemm.rs checks both).
#define MOE_INDEX_ONE_BLOCK_PAIRS 512
#define MOE_INDEX_ONE_BLOCK_EXPERTS 1024
extern "C" __global__ void __launch_bounds__(MOE_INDEX_THREADS)
    moe_index_one_block(const int *__restrict__ ids, int npairs, int n_expert,
                        int *__restrict__ index, int *__restrict__ sorted) {
    dependent_launch_entry();
    __shared__ int s_ids[MOE_INDEX_ONE_BLOCK_PAIRS];
    // Counts, then (from the scan on) offsets.
    __shared__ int s_at[MOE_INDEX_ONE_BLOCK_EXPERTS];
    __shared__ int s_warp[2][MOE_INDEX_THREADS / WARP_SIZE];
    const int tid = threadIdx.x, lane = tid % WARP_SIZE, warp = tid / WARP_SIZE;
    const int nwarps = blockDim.x / WARP_SIZE;
    int *counts = index, *offsets = index + n_expert, *tile_starts = index + 2 * n_expert + 1;
    for (int e = tid; e < n_expert; e += blockDim.x) {
        s_at[e] = 0;
    }
    __syncthreads();
    for (int p = tid; p < npairs; p += blockDim.x) {
        const int e = ids[p];
        s_ids[p] = e;
        if (e >= 0 && e < n_expert) {
            atomicAdd(&s_at[e], 1); // integer counts: the order does not matter
        }
    }
    __syncthreads();
    // Exclusive prefix sums of the counts and of their GEMM tiles, blockDim experts a round.
    int base = 0, tile_base = 0;
    for (int e0 = 0; e0 < n_expert; e0 += blockDim.x) {
        const int e = e0 + tid;
        const int c = e < n_expert ? s_at[e] : 0;
        const int tiles = (c + MoeTileCfg::BN - 1) / MoeTileCfg::BN;
        int ci = c, ti = tiles;
#pragma unroll
        for (int o = 1; o < WARP_SIZE; o <<= 1) {
            const int a = __shfl_up_sync(FULL_MASK, ci, o), b = __shfl_up_sync(FULL_MASK, ti, o);
            if (lane >= o) {
                ci += a;
                ti += b;
            }
        }
        if (lane == WARP_SIZE - 1) {
            s_warp[0][warp] = ci;
            s_warp[1][warp] = ti;
        }
        __syncthreads();
        int c_before = 0, t_before = 0, c_round = 0, t_round = 0;
        for (int w = 0; w < nwarps; ++w) {
            c_before += w < warp ? s_warp[0][w] : 0;
            t_before += w < warp ? s_warp[1][w] : 0;
            c_round += s_warp[0][w];
            t_round += s_warp[1][w];
        }
        if (e < n_expert) {
            const int at = base + c_before + ci - c;
            counts[e] = c;
            offsets[e] = at;
            tile_starts[e] = tile_base + t_before + ti - tiles;
            s_at[e] = at; // this thread's own entry, read above
        }
        base += c_round;
        tile_base += t_round;
        __syncthreads(); // s_warp is rewritten by the next round
    }
    if (tid == 0) {
        offsets[n_expert] = base;
        tile_starts[n_expert] = tile_base;
    }
    for (int p = tid; p < npairs; p += blockDim.x) {
        const int e = s_ids[p];
        if (e >= 0 && e < n_expert) {
            int rank = 0;
            for (int q = 0; q < p; ++q) {
                rank += s_ids[q] == e;
            }
            sorted[s_at[e] + rank] = p;
        }
    }
}

// The GEMM tile of this block: expert e, sorted positions p0..p_end (at most BN of them
// are this tile's). False when the slot has no rows.
struct MoeTile {
    int e, p0, p_end;
};

static __device__ __forceinline__ bool moe_tile(const int *index, int n_expert, int expert,
                                                MoeTile &t) {
    const int *offsets = index + n_expert, *tile_starts = index + 2 * n_expert + 1;
    const int j = blockIdx.y;
    int e = expert, tile = j;
    if (expert < 0) {
        if (j >= tile_starts[n_expert]) {
            return false;
        }
        // The last e with tile_starts[e] <= j; tile_starts[e + 1] > j then, so e has tiles.
        e = last_at_most(tile_starts, n_expert, j);
        tile = j - tile_starts[e];
    }
    t.e = e;
    t.p0 = offsets[e] + tile * MoeTileCfg::BN;
    t.p_end = offsets[e + 1];
    return t.p0 < t.p_end;
}

template <int TYPE>
static __device__ __forceinline__ void moe_gate_up(const void *__restrict__ vgate,
                                                   const void *__restrict__ vup,
                                                   const block_q8_1 *__restrict__ xq,
                                                   const int *__restrict__ sorted,
                                                   const int *__restrict__ index,
                                                   float *__restrict__ h, int n_embd, int n_ff,
                                                   int n_expert, int n_used, int expert,
                                                   int order, ExpertEpilogue ep) {
    typedef WeightFormat<TYPE> F;
    typedef MoeTileCfg C;
    extern __shared__ __align__(16) char moe_smem[];
    mmq_check_smem<TYPE, C, 2>();
    MoeTile t;
    if (!moe_tile(index, n_expert, expert, t)) {
        return; // the whole block: every thread read the same index
    }
    __shared__ int yrow[C::BN];
    const int tid = threadIdx.y * WARP_SIZE + threadIdx.x;
    for (int i = tid; i < C::BN; i += C::THREADS) {
        yrow[i] = t.p0 + i < t.p_end ? sorted[t.p0 + i] / n_used : -1; // token of the pair
    }
    const int bpr = n_embd / F::qk, row0 = blockIdx.x * C::BM;
    const void *const w[2] = {(const typename F::block *)vgate + (size_t)t.e * n_ff * bpr,
                              (const typename F::block *)vup + (size_t)t.e * n_ff * bpr};

    // One activation tile per k step serves both matrices: acc[0] gate, acc[1] up.
    float acc[2][C::TM][C::TN][4], accm[2][C::TM][C::TN][4], gate[C::TM][C::TN][4],
        up[C::TM][C::TN][4];
    mmq_acc_zero<C>(acc[0]);
    mmq_acc_zero<C>(acc[1]);
    mmq_acc_zero<C>(accm[0]);
    mmq_acc_zero<C>(accm[1]);
    __syncthreads(); // yrow
    mmq_k_loop<TYPE, C, 2, MMQ_ORDERS_BLOCKS>(moe_smem, w, n_ff, row0, xq, yrow, n_embd, order,
                                              acc, accm);
    mmq_acc_result<C>(acc[0], accm[0], gate);
    mmq_acc_result<C>(acc[1], accm[1], up);

#pragma unroll
    for (int tm = 0; tm < C::TM; ++tm) {
#pragma unroll
        for (int tn = 0; tn < C::TN; ++tn) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int row = row0 + mmq_acc_row<C>(tm, i), q = t.p0 + mmq_acc_col<C>(tn, i);
                if (row < n_ff && q < t.p_end) {
                    h[(size_t)q * n_ff + row] = ep.act(t.e, row, n_ff, gate[tm][tn][i], up[tm][tn][i]);
                }
            }
        }
    }
}

template <int TYPE>
static __device__ __forceinline__ void moe_down(const void *__restrict__ vdown,
                                                const block_q8_1 *__restrict__ hq,
                                                const int *__restrict__ sorted,
                                                const int *__restrict__ index,
                                                const float *__restrict__ weights,
                                                float *__restrict__ y, int n_ff, int n_embd,
                                                int n_expert, int expert, int order,
                                                ExpertEpilogue ep) {
    typedef WeightFormat<TYPE> F;
    typedef MoeTileCfg C;
    extern __shared__ __align__(16) char moe_smem[];
    mmq_check_smem<TYPE, C, 1>();
    MoeTile t;
    if (!moe_tile(index, n_expert, expert, t)) {
        return;
    }
    __shared__ int yrow[C::BN], pair[C::BN];
    const int tid = threadIdx.y * WARP_SIZE + threadIdx.x;
    for (int i = tid; i < C::BN; i += C::THREADS) {
        const bool in = t.p0 + i < t.p_end;
        yrow[i] = in ? t.p0 + i : -1; // h rows are in sorted order
        pair[i] = in ? sorted[t.p0 + i] : 0;
    }
    const int bpr = n_ff / F::qk, row0 = blockIdx.x * C::BM;
    const void *const w[1] = {(const typename F::block *)vdown + (size_t)t.e * n_embd * bpr};
    __syncthreads(); // yrow, pair

    float acc[1][C::TM][C::TN][4], accm[1][C::TM][C::TN][4], out[C::TM][C::TN][4];
    mmq_acc_zero<C>(acc[0]);
    mmq_acc_zero<C>(accm[0]);
    mmq_k_loop<TYPE, C, 1, MMQ_ORDERS_BLOCKS>(moe_smem, w, n_embd, row0, hq, yrow, n_ff, order,
                                              acc, accm);
    mmq_acc_result<C>(acc[0], accm[0], out);

#pragma unroll
    for (int tm = 0; tm < C::TM; ++tm) {
#pragma unroll
        for (int tn = 0; tn < C::TN; ++tn) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int row = row0 + mmq_acc_row<C>(tm, i), c = mmq_acc_col<C>(tn, i);
                if (row < n_embd && t.p0 + c < t.p_end) {
                    const int p = pair[c];
                    y[(size_t)p * n_embd + row] = weights[p] * ep.down(t.e, row, n_embd, out[tm][tn][i]);
                }
            }
        }
    }
}

// out[t][d] = Σ_slot y[t * n_used + slot][d] over the slots with a valid expert, in slot order.
extern "C" __global__ void moe_combine(const float *__restrict__ y, const int *__restrict__ ids,
                                       float *__restrict__ out, int ntok, int n_used, int n_embd,
                                       int n_expert) {
    dependent_launch_entry();
    const int total = ntok * n_embd;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        const int t = i / n_embd, d = i % n_embd;
        float s = 0.0f;
        for (int slot = 0; slot < n_used; ++slot) {
            const int p = t * n_used + slot, e = ids[p];
            if (e >= 0 && e < n_expert) {
                s += y[(size_t)p * n_embd + d];
            }
        }
        out[i] = s;
    }
}

// Float experts (F32/F16/BF16 files, held as f32 since upload): each (token, slot) pair's FFN
// straight from the routes, a warp per output (lanes split k, then a warp sum), for models
// whose experts have no int8 kernel. p = t·n_used + slot, e = ids[p]; pairs without an expert
// give zeros, which moe_combine skips.
// Launch: block (32, FLOAT_WARPS), grid (npairs, ceil(n_ff or n_embd / FLOAT_WARPS)).
#define FLOAT_WARPS 8

// h[p][j] = silu(gate_e[j] · x_t) · (up_e[j] · x_t).
extern "C" __global__ void __launch_bounds__(FLOAT_WARPS *WARP_SIZE)
    moe_f32_gate_up(const float *__restrict__ gate, const float *__restrict__ up,
                    const float *__restrict__ x, const int *__restrict__ ids,
                    float *__restrict__ h, int n_embd, int n_ff, int n_expert, int n_used) {
    dependent_launch_entry();
    const int p = blockIdx.x, j = blockIdx.y * FLOAT_WARPS + threadIdx.y, lane = threadIdx.x;
    const int e = ids[p];
    if (j >= n_ff) {
        return;
    }
    float sg = 0.0f, su = 0.0f;
    if (e >= 0 && e < n_expert) {
        const float *xr = x + (size_t)(p / n_used) * n_embd;
        const float *g = gate + ((size_t)e * n_ff + j) * n_embd;
        const float *u = up + ((size_t)e * n_ff + j) * n_embd;
        for (int c = lane; c < n_embd; c += WARP_SIZE) {
            sg = fmaf(g[c], xr[c], sg);
            su = fmaf(u[c], xr[c], su);
        }
    }
    sg = warp_sum(sg);
    su = warp_sum(su);
    if (lane == 0) {
        h[(size_t)p * n_ff + j] = e >= 0 && e < n_expert ? silu_mul(sg, su) : 0.0f;
    }
}

// y[p][i] = weights[p] · (down_e[i] · h[p]).
extern "C" __global__ void __launch_bounds__(FLOAT_WARPS *WARP_SIZE)
    moe_f32_down(const float *__restrict__ down, const float *__restrict__ h,
                 const int *__restrict__ ids, const float *__restrict__ weights,
                 float *__restrict__ y, int n_ff, int n_embd, int n_expert) {
    dependent_launch_entry();
    const int p = blockIdx.x, i = blockIdx.y * FLOAT_WARPS + threadIdx.y, lane = threadIdx.x;
    const int e = ids[p];
    if (i >= n_embd) {
        return;
    }
    float s = 0.0f;
    if (e >= 0 && e < n_expert) {
        const float *dr = down + ((size_t)e * n_embd + i) * n_ff;
        const float *hr = h + (size_t)p * n_ff;
        for (int c = lane; c < n_ff; c += WARP_SIZE) {
            s = fmaf(dr[c], hr[c], s);
        }
    }
    s = warp_sum(s);
    if (lane == 0) {
        y[(size_t)p * n_embd + i] = e >= 0 && e < n_expert ? weights[p] * s : 0.0f;
    }
}

#define MOE_ENTRIES(NAME, TYPE)                                                                     \
    extern "C" __global__ void __launch_bounds__(MoeTileCfg::THREADS) moe_gate_up_##NAME(                   \
        const void *__restrict__ vgate, const void *__restrict__ vup,                               \
        const block_q8_1 *__restrict__ xq, const int *__restrict__ sorted,                          \
        const int *__restrict__ index, float *__restrict__ h, int n_embd, int n_ff, int n_expert,   \
        int n_used, int expert, int order, const float *__restrict__ gate_bias,                     \
        const float *__restrict__ up_bias, float alpha, float limit) {                              \
        dependent_launch_entry();                                                                   \
        const ExpertEpilogue ep{gate_bias, up_bias, nullptr, alpha, limit};                         \
        moe_gate_up<TYPE>(vgate, vup, xq, sorted, index, h, n_embd, n_ff, n_expert, n_used,         \
                          expert, order, ep);                                                       \
    }                                                                                               \
    extern "C" __global__ void __launch_bounds__(MoeTileCfg::THREADS) moe_down_##NAME(                      \
        const void *__restrict__ vdown, const block_q8_1 *__restrict__ hq,                          \
        const int *__restrict__ sorted, const int *__restrict__ index,                              \
        const float *__restrict__ weights, float *__restrict__ y, int n_ff, int n_embd,             \
        int n_expert, int expert, int order, const float *__restrict__ down_bias) {                 \
        dependent_launch_entry();                                                                   \
        const ExpertEpilogue ep{nullptr, nullptr, down_bias, 0.0f, 0.0f};                           \
        moe_down<TYPE>(vdown, hq, sorted, index, weights, y, n_ff, n_embd, n_expert, expert,       \
                       order, ep);                                                                  \
    }

MOE_ENTRIES(q4_0, GGML_TYPE_Q4_0)
MOE_ENTRIES(q4_1, GGML_TYPE_Q4_1)
MOE_ENTRIES(q5_0, GGML_TYPE_Q5_0)
MOE_ENTRIES(q5_1, GGML_TYPE_Q5_1)
MOE_ENTRIES(q8_0, GGML_TYPE_Q8_0)
MOE_ENTRIES(q4_k, GGML_TYPE_Q4_K)
MOE_ENTRIES(q5_k, GGML_TYPE_Q5_K)
MOE_ENTRIES(q6_k, GGML_TYPE_Q6_K)
MOE_ENTRIES(mxfp4, GGML_TYPE_MXFP4)
