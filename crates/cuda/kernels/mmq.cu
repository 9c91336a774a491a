// Quantized GEMM for prefill: dst[t][r] = W[r] · y[t] for many activation rows, W in a ggml
// block format, y already quantized to Q8_1 (quantize.cu), on the int8 tensor cores
// (mma.sync s8·s8 → s32). The tile machinery is mmq_tile.cuh and mmq_mma.cuh (shared with
// moe_gemm.cu); one template over the format traits of quant.cuh and a tile shape, the
// extern "C" entry points at the end only name instances: mmq_<format>_<tile>.
//
// Launch (crates/cuda/src/ops/mmq.rs must agree): block (32, C::NWARPS), grid
// (ceil(nrows / C::BM), ceil(ntok / C::BN)), MmqSmem<TYPE, C, 1>::bytes of dynamic shared
// memory; ncols a multiple of MMQ_BK; `order` one of MMQ_ORDER_* (mmq_mma.cuh: how
// integer-scale formats sum, ignored by the others). Every tile shape gives the same bits.
#include "common.cuh"
#include "quant.cuh"
#include "mmq_tile.cuh"
#include "mmq_mma.cuh"

// The tile shapes (mmq.rs MMQ_TILES): 8 warps of 32 × 64, 8 warps of 32 × 32, 4 warps of
// 32 × 32 (two blocks fit an SM: for matrices too small to fill the GPU with larger tiles).
typedef MmqCfg<128, 128, 4, 2> MmqTile128x128;
typedef MmqCfg<128, 64, 4, 2> MmqTile128x64;
typedef MmqCfg<64, 64, 2, 2> MmqTile64x64;

template <int TYPE, class C, int ORDERS>
static __device__ __forceinline__ void mul_mat_q(const void *__restrict__ vx,
                                                 const block_q8_1 *__restrict__ vy,
                                                 float *__restrict__ dst, int ncols, int nrows,
                                                 int ntok, int order) {
    extern __shared__ __align__(16) char mmq_smem[];
    __shared__ int yrow[C::BN];
    mmq_check_smem<TYPE, C, 1>();

    const int tid = threadIdx.y * WARP_SIZE + threadIdx.x;
    const int row0 = blockIdx.x * C::BM, tok0 = blockIdx.y * C::BN;
    for (int i = tid; i < C::BN; i += C::THREADS) {
        yrow[i] = tok0 + i < ntok ? tok0 + i : -1; // tokens past the end are zeros
    }
    float acc[1][C::TM][C::TN][4], accm[1][C::TM][C::TN][4];
    mmq_acc_zero<C>(acc[0]);
    mmq_acc_zero<C>(accm[0]);
    const void *const w[1] = {vx};
    __syncthreads();
    mmq_k_loop<TYPE, C, 1, ORDERS>(mmq_smem, w, nrows, row0, vy, yrow, ncols, order, acc, accm);

#pragma unroll
    for (int tm = 0; tm < C::TM; ++tm) {
#pragma unroll
        for (int tn = 0; tn < C::TN; ++tn) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int row = row0 + mmq_acc_row<C>(tm, i), tok = tok0 + mmq_acc_col<C>(tn, i);
                if (row < nrows && tok < ntok) {
                    dst[(size_t)tok * nrows + row] = acc[0][tm][tn][i] - accm[0][tm][tn][i];
                }
            }
        }
    }
}

#define MMQ_ENTRY(NAME, TYPE, TILE)                                                                 \
    extern "C" __global__ void __launch_bounds__(MmqTile##TILE::THREADS)                            \
        mmq_##NAME##_##TILE(const void *__restrict__ vx, const block_q8_1 *__restrict__ vy,         \
                            float *__restrict__ dst, int ncols, int nrows, int ntok, int order) {   \
        mul_mat_q<TYPE, MmqTile##TILE, MMQ_ORDERS_DENSE>(vx, vy, dst, ncols, nrows, ntok, order);   \
    }

// The last n % 4 tokens of an integer-scale format's GEMM (MMQ_ORDER_BLOCKS), at most 3
// tokens: the smallest tile.
#define MMQ_BLOCKS_ENTRY(NAME, TYPE)                                                                \
    extern "C" __global__ void __launch_bounds__(MmqTile64x64::THREADS)                             \
        mmq_##NAME##_blocks(const void *__restrict__ vx, const block_q8_1 *__restrict__ vy,         \
                            float *__restrict__ dst, int ncols, int nrows, int ntok, int order) {   \
        mul_mat_q<TYPE, MmqTile64x64, MMQ_ORDERS_BLOCKS>(vx, vy, dst, ncols, nrows, ntok, order);   \
    }

#define MMQ_FORMAT(NAME, TYPE)                                                                      \
    MMQ_ENTRY(NAME, TYPE, 128x128)                                                                  \
    MMQ_ENTRY(NAME, TYPE, 128x64)                                                                   \
    MMQ_ENTRY(NAME, TYPE, 64x64)

MMQ_FORMAT(q4_0, GGML_TYPE_Q4_0)
MMQ_FORMAT(q4_1, GGML_TYPE_Q4_1)
MMQ_FORMAT(q8_0, GGML_TYPE_Q8_0)
MMQ_FORMAT(q4_k, GGML_TYPE_Q4_K)
MMQ_BLOCKS_ENTRY(q4_k, GGML_TYPE_Q4_K)
MMQ_FORMAT(q5_k, GGML_TYPE_Q5_K)
MMQ_FORMAT(q6_k, GGML_TYPE_Q6_K)
