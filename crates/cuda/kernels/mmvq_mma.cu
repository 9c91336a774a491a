// Quantized weights times 2-64 Q8_1 activation rows on the tensor cores, for the steps of a
// batched decode (one token of each of several sequences): dst[j][row] = W[row] · y[j].
//
// Where mmq.cu unpacks a weight tile into shared memory and mmvq.cu dots rows on CUDA cores,
// here each warp loads its weights straight into the int8 MMA's A fragments (registers) and
// reuses them for every activation row: the weights are read once a launch, with no shared
// memory stage and no barrier in the k loop. The activations come from L1/L2 (a few hundred
// KB); at 33-64 rows their loads are most of the kernel's (docs/perf.md, issue 16).
//
// Launch (crates/cuda/src/ops/mmvq_mma.rs must agree): block (32, MMA_MV_WARPS), grid
// ceil(nrows / (16 MT)); entry mmvq_mma_<type>_m<MT>_t<NT> takes up to 8 NT activation rows.
// A warp holds MT tiles of 16 weight rows; the block's warps take interleaved super-blocks of
// the same rows (warp w: super-blocks w, w + MMA_MV_WARPS, ..), and their sums meet in shared
// memory in a fixed order. K must be a multiple of 256 (the K-quants' super-block).
//
// Rounding contract: mmq's per-sub-block order (mmq_mma.cuh): per 32-wide sub-block the MMA's
// integer dot is exact, then acc = fma(d_w * d_y, isum, acc) and, with a minimum, acc =
// fma(m_w, d_y Σq_y, acc); Q6_K adds fma(d_y, d_lo * isum_lo + d_hi * isum_hi, acc). Each
// warp's sub-blocks go in ascending order, then the warps' sums are added in the order of
// mma_matvec_reduce. Within f32 rounding of the CPU (the tensor-core contract, cuda-parity),
// the same bits every run.
#include "common.cuh"
#include "quant.cuh"
#include "mmvq.cuh"
#include "mmq_tile.cuh"
#include "mmq_mma.cuh" // the int8 MMA wrappers and the biased integer accumulators
#include "mma_rows.cuh" // the weight fragments (MmaRows)

#define MMA_MV_WARPS 8
// `flags` bits (ops/mmvq_mma.rs): the activations are Q8_K (one scale a super-block, written in
// each of its 8 blocks); the activation buffer is 8-byte aligned.
#define MMA_MV_Q8K_SCALES 1
#define MMA_MV_Y_ALIGNED8 2

// The sums of the block's warps, added in a fixed order: warps 4-7 into 0-3, then 1-3 into 0
// (acc = ((w0 + w4) + (w1 + w5)) + (w2 + w6) + (w3 + w7)); warp 0 returns true and holds them.
template <int N>
static __device__ __forceinline__ bool mma_matvec_reduce(float (&acc)[N]) {
    static_assert(MMA_MV_WARPS == 8, "two rounds of four");
    __shared__ float part[4][N][WARP_SIZE];
    const int w = threadIdx.y, lane = threadIdx.x;
    if (w >= 4) {
#pragma unroll
        for (int i = 0; i < N; ++i) {
            part[w - 4][i][lane] = acc[i];
        }
    }
    __syncthreads();
    if (w < 4) {
#pragma unroll
        for (int i = 0; i < N; ++i) {
            acc[i] += part[w][i][lane];
        }
    }
    __syncthreads();
    if (w >= 1 && w < 4) {
#pragma unroll
        for (int i = 0; i < N; ++i) {
            part[w - 1][i][lane] = acc[i];
        }
    }
    __syncthreads();
    if (w != 0) {
        return false;
    }
#pragma unroll
    for (int i = 0; i < N; ++i) {
        acc[i] = acc[i] + part[0][i][lane] + part[1][i][lane] + part[2][i][lane];
    }
    return true;
}

template <int TYPE, int MT, int NT>
static __device__ __forceinline__ void mma_matvec(const void *__restrict__ vx,
                                                  const block_q8_1 *__restrict__ vy,
                                                  float *__restrict__ dst, int ncols_x,
                                                  int nrows_x, int nrows_y, int flags) {
    typedef MmaRows<TYPE> R;
    typedef typename R::block block;
    const int lane = threadIdx.x, g = lane / 4, t = lane % 4;
    const int bpr = ncols_x / QK_K, ybpr = ncols_x / QK8_1;
    const int row0 = blockIdx.x * 16 * MT;
    const block *x = (const block *)vx;

    // Rows and columns past the end re-read the last one (never written).
    const block *rows[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            rows[mt][h] = x + (size_t)min(row0 + 16 * mt + g + 8 * h, nrows_x - 1) * bpr;
        }
    }
    // The first activation block of row j (clamped), recomputed where used: pointers kept for
    // every tile would hold 6 registers a tile.
    auto yrow = [&](int j) { return vy + min(j, nrows_y - 1) * ybpr; };

    float acc[MT * NT * 4];
#pragma unroll
    for (int i = 0; i < MT * NT * 4; ++i) {
        acc[i] = 0.0f;
    }
    // The next super-block's weights are asked of L2 while this one's MMAs run, and loaded at
    // the top of their own iteration. Loading them into registers ahead instead held 48 more
    // registers a thread with two row tiles: 3-11% slower a step at 8-32 rows, level at 64
    // (H200, docs/perf.md).
    typename R::Raw cur[MT];
#pragma unroll 1
    for (int kb = threadIdx.y; kb < bpr; kb += MMA_MV_WARPS) {
        const int kn = min(kb + MMA_MV_WARPS, bpr - 1);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
            R::load(cur[mt], rows[mt][0] + kb, rows[mt][1] + kb, t);
            // Lane l asks for 128-byte line l % 2 of the tile's row l / 2.
            const int r = min(row0 + 16 * mt + lane / 2, nrows_x - 1);
            const char *p = (const char *)(x + (size_t)r * bpr + kn) + 128 * (lane % 2);
            asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
        }
        // Q8_K activations: one scale a super-block, in each of its 8 blocks; read once.
        float dsb[NT][2];
        if (flags & MMA_MV_Q8K_SCALES) {
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                dsb[nt][0] = yrow(8 * nt + 2 * t)[kb * (QK_K / QK8_1)].d;
                dsb[nt][1] = yrow(8 * nt + 2 * t + 1)[kb * (QK_K / QK8_1)].d;
            }
        }
#pragma unroll
        for (int s = 0; s < QK_K / QK8_1; ++s) {
            const int yb = kb * (QK_K / QK8_1) + s;
            // Rows of 36-byte blocks are 8-byte multiples (widths of 256s): odd blocks of an
            // 8-aligned buffer give a lane its 8 code bytes in one load.
            const bool aligned8 = (flags & MMA_MV_Y_ALIGNED8) && s % 2 == 1;
            typename R::Frag f[MT];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                f[mt] = R::frag(cur[mt], s);
            }
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                int b[2];
                R::acts(yrow(8 * nt + g) + yb, t, aligned8, b);
                // Loaded, not shuffled from the lanes that read those columns' codes: the
                // shuffle waits for their load, 3-6% slower a step at 8-32 rows (H200).
                const bool q8k = flags & MMA_MV_Q8K_SCALES;
                const float dy[2] = {q8k ? dsb[nt][0] : yrow(8 * nt + 2 * t)[yb].d,
                                     q8k ? dsb[nt][1] : yrow(8 * nt + 2 * t + 1)[yb].d};
                float sy[2];
                act_sums<TYPE>(b, dy, sy);
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    R::dot(f[mt], b, dy, sy, *(float(*)[4])(acc + 4 * (mt * NT + nt)));
                }
            }
        }
    }

    if (!mma_matvec_reduce(acc)) {
        return;
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int row = row0 + 16 * mt + g + 8 * (i / 2), col = 8 * nt + 2 * t + i % 2;
                if (row < nrows_x && col < nrows_y) {
                    dst[(size_t)col * nrows_x + row] = acc[4 * (mt * NT + nt) + i];
                }
            }
        }
    }
}

// Two blocks an SM (128 registers a thread) with one row tile a warp, one block with two.
#define MMA_MV_ENTRY(NAME, TYPE, MT, NT)                                                            \
    extern "C" __global__ void __launch_bounds__(MMA_MV_WARPS *WARP_SIZE, 3 - MT)                   \
        mmvq_mma_##NAME##_m##MT##_t##NT(const void *__restrict__ vx,                                \
                                        const block_q8_1 *__restrict__ vy,                          \
                                        float *__restrict__ dst, int ncols_x, int nrows_x,          \
                                        int nrows_y, int prefetch, int flags) {                     \
        weights_to_l2_then_wait<TYPE>(prefetch, vx, nullptr, ncols_x, nrows_x, 0,                  \
                                      blockIdx.x * 16 * MT, 16 * MT);                               \
        mma_matvec<TYPE, MT, NT>(vx, vy, dst, ncols_x, nrows_x, nrows_y, flags);                    \
    }

#define MMA_MV_FORMAT(NAME, TYPE)                                                                   \
    MMA_MV_ENTRY(NAME, TYPE, 1, 1)                                                                  \
    MMA_MV_ENTRY(NAME, TYPE, 1, 2)                                                                  \
    MMA_MV_ENTRY(NAME, TYPE, 1, 3)                                                                  \
    MMA_MV_ENTRY(NAME, TYPE, 1, 4)                                                                  \
    MMA_MV_ENTRY(NAME, TYPE, 1, 5)                                                                  \
    MMA_MV_ENTRY(NAME, TYPE, 1, 6)                                                                  \
    MMA_MV_ENTRY(NAME, TYPE, 1, 7)                                                                  \
    MMA_MV_ENTRY(NAME, TYPE, 1, 8)                                                                  \
    MMA_MV_ENTRY(NAME, TYPE, 2, 5)                                                                  \
    MMA_MV_ENTRY(NAME, TYPE, 2, 6)                                                                  \
    MMA_MV_ENTRY(NAME, TYPE, 2, 7)                                                                  \
    MMA_MV_ENTRY(NAME, TYPE, 2, 8)

MMA_MV_FORMAT(q4_k, GGML_TYPE_Q4_K)
MMA_MV_FORMAT(q6_k, GGML_TYPE_Q6_K)
