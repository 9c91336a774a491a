// The MoE experts of a batched decode step on the tensor cores: moe_gemm.cu's grouped GEMM for
// few pairs an expert. The same inputs and outputs as its moe_gate_up_<type> / moe_down_<type>
// (the expert-sorted index of moe_count and moe_scatter; h rows in sorted order; y by pair id,
// summed by moe_combine), but each warp loads 16 rows of its expert's weights straight into int8
// MMA fragments (mma_rows.cuh) and multiplies them with the expert's pairs, 8 to an MMA.
//
// Why: at 8-64 tokens an expert sees 1-16 pairs. The GEMM's 64-pair tiles then compute mostly
// padding, and unpack every weight through shared memory at each tile step; here the weights
// are read once, into registers, with no barrier.
//
// Rounding contract: the GEMM's per-sub-block order (MMQ_ORDER_SUBS, mmq_mma.cuh), each output
// one chain over the sub-blocks in ascending order: the same bits as the grouped GEMM in that
// order (cuda-parity checks it bit for bit).
//
// Launch (crates/cuda/src/ops/moe_gemm.rs must agree): block (32, MOE_MMA_WARPS), grid
// (ceil(rows / (16 MOE_MMA_WARPS)), E); block (x, e) takes 16 rows a warp of expert e's matrices
// (gate and up together, or down) for all its pairs, NT column tiles of 8 pairs at a time.
// Experts without pairs exit at once. Widths are whole super-blocks (256), activation rows
// 8-byte aligned.
#include "common.cuh"
#include "quant.cuh"
#include "mmq_tile.cuh"
#include "mmq_mma.cuh"
#include "mma_rows.cuh"

#define MOE_MMA_WARPS 4

// A super-block's sub-blocks of NT > 1 column tiles: each sub-block's activations asked for
// just before its MMAs (the registers of NT tiles' worth ahead would not fit).
template <int TYPE, int NMAT, int NT>
static __device__ __forceinline__ void
moe_mma_subs(const typename MmaRows<TYPE>::Raw (&cur)[NMAT], const block_q8_1 *y, int kb,
             const int (&yb)[NT], const int (&yd)[NT][2], int live, int t,
             float (&acc)[NMAT][NT][4]) {
    typedef MmaRows<TYPE> R;
#pragma unroll
    for (int s = 0; s < QK_K / QK8_1; ++s) {
        const int blk = kb * (QK_K / QK8_1) + s;
        typename R::Frag f[NMAT];
#pragma unroll
        for (int m = 0; m < NMAT; ++m) {
            f[m] = R::frag(cur[m], s);
        }
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            if (nt >= live) {
                break; // the same for the whole warp
            }
            int b[2];
            // Rows of 36-byte blocks are 8-byte multiples (widths of 256s): odd blocks give
            // a lane its 8 code bytes in one load.
            R::acts(y + yb[nt] + blk, t, s % 2 == 1, b);
            const float dy[2] = {y[yd[nt][0] + blk].d, y[yd[nt][1] + blk].d};
            float sy[2];
            act_sums<TYPE>(b, dy, sy);
#pragma unroll
            for (int m = 0; m < NMAT; ++m) {
                R::dot(f[m], b, dy, sy, acc[m][nt]);
            }
        }
    }
}

// acc[m] (NMAT matrices, NT column tiles) of 16 rows from row0 of each matrix in w, expert
// rows already applied, times the pairs at sorted positions c0.. (at most 8 NT of them, `live`
// tiles with a pair) whose activation rows yrow(q) of y gives; columns past q_end re-read the
// last pair (never stored).
template <int TYPE, int NMAT, int NT, class YRow>
static __device__ __forceinline__ void
moe_mma_tile(const typename MmaRows<TYPE>::block *const (&w)[NMAT], const block_q8_1 *y, int bpr,
             int nrows, int row0, int c0, int q_end, int live, YRow yrow,
             float (&acc)[NMAT][NT][4]) {
    typedef MmaRows<TYPE> R;
    typedef typename R::block block;
    const int lane = threadIdx.x, g = lane / 4, t = lane % 4;
    const int ybpr = bpr * (QK_K / QK8_1);
    const block *rows[NMAT][2];
#pragma unroll
    for (int m = 0; m < NMAT; ++m) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            rows[m][h] = w[m] + (size_t)min(row0 + g + 8 * h, nrows - 1) * bpr;
        }
    }
    // Activation rows of the lane's B column (g) and of its two output columns (2t, 2t + 1).
    int yb[NT], yd[NT][2];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        const int q = c0 + 8 * nt;
        yb[nt] = yrow(min(q + g, q_end - 1)) * ybpr;
        yd[nt][0] = yrow(min(q + 2 * t, q_end - 1)) * ybpr;
        yd[nt][1] = yrow(min(q + 2 * t + 1, q_end - 1)) * ybpr;
#pragma unroll
        for (int m = 0; m < NMAT; ++m) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                acc[m][nt][i] = 0.0f;
            }
        }
    }
#pragma unroll 1
    for (int kb = 0; kb < bpr; ++kb) {
        typename R::Raw cur[NMAT];
#pragma unroll
        for (int m = 0; m < NMAT; ++m) {
            R::load(cur[m], rows[m][0] + kb, rows[m][1] + kb, t);
            if (kb + 1 < bpr) {
                // Lane l asks L2 for 128-byte line l % 2 of the tile's row l / 2, next block.
                const block *r = w[m] + (size_t)min(row0 + lane / 2, nrows - 1) * bpr + kb + 1;
                asm volatile("prefetch.global.L2 [%0];" ::"l"((const char *)r + 128 * (lane % 2)));
            }
        }
        if constexpr (NT == 1) {
            // One column tile: the super-block's activations (codes and scales of its eight
            // sub-blocks) asked for together, right after its weights, so that the sub-blocks'
            // MMAs wait on one round trip to L1/L2 rather than one each. The same products in
            // the same order.
            int bs[QK_K / QK8_1][2];
            float ds[QK_K / QK8_1][2];
#pragma unroll
            for (int s = 0; s < QK_K / QK8_1; ++s) {
                const int blk = kb * (QK_K / QK8_1) + s;
                R::acts(y + yb[0] + blk, t, s % 2 == 1, bs[s]);
                ds[s][0] = y[yd[0][0] + blk].d;
                ds[s][1] = y[yd[0][1] + blk].d;
            }
#pragma unroll
            for (int s = 0; s < QK_K / QK8_1; ++s) {
                float sy[2];
                act_sums<TYPE>(bs[s], ds[s], sy);
#pragma unroll
                for (int m = 0; m < NMAT; ++m) {
                    R::dot(R::frag(cur[m], s), bs[s], ds[s], sy, acc[m][0]);
                }
            }
        } else {
            moe_mma_subs<TYPE, NMAT, NT>(cur, y, kb, yb, yd, live, t, acc);
        }
    }
}

// The pairs of expert blockIdx.y: sorted positions p0..p_end (moe_scatter's offsets); false
// when it has none.
static __device__ __forceinline__ bool moe_mma_pairs(const int *index, int n_expert, int &p0,
                                                     int &p_end) {
    const int *offsets = index + n_expert;
    p0 = offsets[blockIdx.y];
    p_end = offsets[blockIdx.y + 1];
    return p0 < p_end;
}

// h[q][row] = act(gate_e · x[token(q)], up_e · x[token(q)]) for the pairs q of expert e.
template <int TYPE, int NT>
static __device__ __forceinline__ void
moe_mma_gate_up(const void *__restrict__ vgate, const void *__restrict__ vup,
                const block_q8_1 *__restrict__ xq, const int *__restrict__ sorted,
                const int *__restrict__ index, float *__restrict__ h, int n_embd, int n_ff,
                int n_expert, int n_used, ExpertEpilogue ep) {
    typedef typename MmaRows<TYPE>::block block;
    int p0, p_end;
    const int row0 = (blockIdx.x * MOE_MMA_WARPS + threadIdx.y) * 16;
    if (row0 >= n_ff || !moe_mma_pairs(index, n_expert, p0, p_end)) {
        return; // whole warps
    }
    const int e = blockIdx.y, bpr = n_embd / QK_K;
    const block *const w[2] = {(const block *)vgate + (size_t)e * n_ff * bpr,
                               (const block *)vup + (size_t)e * n_ff * bpr};
    auto token = [&](int q) { return sorted[q] / n_used; };
    const int g = threadIdx.x / 4, t = threadIdx.x % 4;
    for (int c0 = p0; c0 < p_end; c0 += 8 * NT) {
        const int live = min(NT, (p_end - c0 + 7) / 8);
        float acc[2][NT][4];
        moe_mma_tile<TYPE, 2, NT>(w, xq, bpr, n_ff, row0, c0, p_end, live, token, acc);
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int row = row0 + g + 8 * (i / 2), q = c0 + 8 * nt + 2 * t + i % 2;
                if (nt < live && row < n_ff && q < p_end) {
                    h[(size_t)q * n_ff + row] = ep.act(e, row, n_ff, acc[0][nt][i], acc[1][nt][i]);
                }
            }
        }
    }
}

// y[p][row] = weights[p] · (down_e · hq[q]) for the pairs q (pair id p = sorted[q]) of expert e.
template <int TYPE, int NT>
static __device__ __forceinline__ void
moe_mma_down(const void *__restrict__ vdown, const block_q8_1 *__restrict__ hq,
             const int *__restrict__ sorted, const int *__restrict__ index,
             const float *__restrict__ weights, float *__restrict__ y, int n_ff, int n_embd,
             int n_expert, ExpertEpilogue ep) {
    typedef typename MmaRows<TYPE>::block block;
    int p0, p_end;
    const int row0 = (blockIdx.x * MOE_MMA_WARPS + threadIdx.y) * 16;
    if (row0 >= n_embd || !moe_mma_pairs(index, n_expert, p0, p_end)) {
        return;
    }
    const int e = blockIdx.y, bpr = n_ff / QK_K;
    const block *const w[1] = {(const block *)vdown + (size_t)e * n_embd * bpr};
    auto same = [](int q) { return q; }; // h rows are in sorted order
    const int g = threadIdx.x / 4, t = threadIdx.x % 4;
    for (int c0 = p0; c0 < p_end; c0 += 8 * NT) {
        const int live = min(NT, (p_end - c0 + 7) / 8);
        float acc[1][NT][4];
        moe_mma_tile<TYPE, 1, NT>(w, hq, bpr, n_embd, row0, c0, p_end, live, same, acc);
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int row = row0 + g + 8 * (i / 2), q = c0 + 8 * nt + 2 * t + i % 2;
                if (nt < live && row < n_embd && q < p_end) {
                    const int p = sorted[q];
                    y[(size_t)p * n_embd + row] = weights[p] * ep.down(e, row, n_embd, acc[0][nt][i]);
                }
            }
        }
    }
}

// At most two column tiles: four blocks an SM (128 registers a thread); four tiles: two.
#define MOE_MMA_MIN_BLOCKS(NT) ((NT) <= 2 ? 4 : 2)

#define MOE_MMA_ENTRIES(NAME, TYPE, NT)                                                             \
    extern "C" __global__ void __launch_bounds__(MOE_MMA_WARPS *WARP_SIZE, MOE_MMA_MIN_BLOCKS(NT)) \
        moe_mma_gate_up_##NAME##_t##NT(                                                             \
            const void *__restrict__ vgate, const void *__restrict__ vup,                           \
            const block_q8_1 *__restrict__ xq, const int *__restrict__ sorted,                      \
            const int *__restrict__ index, float *__restrict__ h, int n_embd, int n_ff,             \
            int n_expert, int n_used, const float *__restrict__ gate_bias,                          \
            const float *__restrict__ up_bias, float alpha, float limit) {                          \
        dependent_launch_entry();                                                                   \
        const ExpertEpilogue ep{gate_bias, up_bias, nullptr, alpha, limit};                         \
        moe_mma_gate_up<TYPE, NT>(vgate, vup, xq, sorted, index, h, n_embd, n_ff, n_expert,       \
                                  n_used, ep);                                                      \
    }                                                                                               \
    extern "C" __global__ void __launch_bounds__(MOE_MMA_WARPS *WARP_SIZE, MOE_MMA_MIN_BLOCKS(NT)) \
        moe_mma_down_##NAME##_t##NT(                                                                \
            const void *__restrict__ vdown, const block_q8_1 *__restrict__ hq,                      \
            const int *__restrict__ sorted, const int *__restrict__ index,                          \
            const float *__restrict__ weights, float *__restrict__ y, int n_ff, int n_embd,         \
            int n_expert, const float *__restrict__ down_bias) {                                    \
        dependent_launch_entry();                                                                   \
        const ExpertEpilogue ep{nullptr, nullptr, down_bias, 0.0f, 0.0f};                           \
        moe_mma_down<TYPE, NT>(vdown, hq, sorted, index, weights, y, n_ff, n_embd, n_expert, ep);  \
    }

#define MOE_MMA_FORMAT(NAME, TYPE)                                                                  \
    MOE_MMA_ENTRIES(NAME, TYPE, 1)                                                                  \
    MOE_MMA_ENTRIES(NAME, TYPE, 2)                                                                  \
    MOE_MMA_ENTRIES(NAME, TYPE, 4)

MOE_MMA_FORMAT(q4_k, GGML_TYPE_Q4_K)
MOE_MMA_FORMAT(q6_k, GGML_TYPE_Q6_K)
