// Quantized mat-vec for decode: dst[j][row] = W[row] · y[j] for up to 8 activation columns,
// W in a ggml block format, y already quantized to Q8_1 (quantize.cu). One template over the
// format traits of quant.cuh; the extern "C" entry points at the end only name instances.
//
// Launch (crates/cuda/src/ops/mmvq.rs must agree): block (32, MMVQ_NWARPS), grid
// ceil(nrows / mmvq_rows(ncols)). All the block's threads walk the row's weight blocks together
// (mmvq_accumulate in mmvq.cuh); the partial sums meet in shared memory and one warp reduces them.
#include "common.cuh"
#include "quant.cuh"
#include "mmvq.cuh"

#define MMVQ_NWARPS 4
#define MMVQ_MAX_COLS 8

// Rows per CUDA block: with several columns, two rows share each activation load.
template <int NCOLS> struct MmvqRows {
    static constexpr int value = NCOLS == 1 ? 1 : 2;
};

template <int TYPE, int NCOLS>
static __device__ __forceinline__ void mul_mat_vec_q(const void *__restrict__ vx,
                                                     const block_q8_1 *__restrict__ vy,
                                                     float *__restrict__ dst, int ncols_x,
                                                     int nrows_x) {
    typedef WeightFormat<TYPE> F;
    constexpr int ROWS = MmvqRows<NCOLS>::value;
    constexpr int THREADS = MMVQ_NWARPS * WARP_SIZE;

    const int tid = threadIdx.y * WARP_SIZE + threadIdx.x;
    const int row0 = blockIdx.x * ROWS;
    const int blocks_per_row = ncols_x / F::qk;
    const int blocks_per_col_y = ncols_x / QK8_1;
    const typename F::block *x = (const typename F::block *)vx;

    // A last odd row re-reads its neighbour rather than branching; never written.
    const typename F::block *rows[ROWS];
#pragma unroll
    for (int i = 0; i < ROWS; ++i) {
        rows[i] = x + (size_t)min(row0 + i, nrows_x - 1) * blocks_per_row;
    }
    const block_q8_1 *cols[NCOLS];
#pragma unroll
    for (int j = 0; j < NCOLS; ++j) {
        cols[j] = vy + (size_t)j * blocks_per_col_y;
    }

    float acc[NCOLS][ROWS];
#pragma unroll
    for (int j = 0; j < NCOLS; ++j) {
#pragma unroll
        for (int i = 0; i < ROWS; ++i) {
            acc[j][i] = 0.0f;
        }
    }
    // The compiler's own choice, except where it unrolled the loop before the loop moved to
    // mmvq.cuh (Q4_K, one column) and now would not: kept as the timings in docs/parity.md saw it.
    constexpr int UNROLL = TYPE == GGML_TYPE_Q4_K && NCOLS == 1 ? 2 : 0;
    mmvq_accumulate<TYPE, NCOLS, ROWS, THREADS, UNROLL>(rows, cols, NCOLS, blocks_per_row, tid,
                                                        acc);

    __shared__ float partial[MMVQ_NWARPS - 1][NCOLS][ROWS][WARP_SIZE];
    if (threadIdx.y > 0) {
#pragma unroll
        for (int j = 0; j < NCOLS; ++j) {
#pragma unroll
            for (int i = 0; i < ROWS; ++i) {
                partial[threadIdx.y - 1][j][i][threadIdx.x] = acc[j][i];
            }
        }
    }
    __syncthreads();
    if (threadIdx.y > 0) {
        return;
    }
#pragma unroll
    for (int j = 0; j < NCOLS; ++j) {
#pragma unroll
        for (int i = 0; i < ROWS; ++i) {
#pragma unroll
            for (int w = 0; w < MMVQ_NWARPS - 1; ++w) {
                acc[j][i] += partial[w][j][i][threadIdx.x];
            }
            acc[j][i] = warp_sum(acc[j][i]);
            // Compile-time i: the accumulators stay in registers.
            if (threadIdx.x == i && row0 + i < nrows_x) {
                dst[(size_t)j * nrows_x + row0 + i] = acc[j][i];
            }
        }
    }
}

#define MMVQ_ENTRY(NAME, TYPE, N)                                                                   \
    extern "C" __global__ void __launch_bounds__(MMVQ_NWARPS *WARP_SIZE)                            \
        mmvq_##NAME##_n##N(const void *__restrict__ vx, const block_q8_1 *__restrict__ vy,          \
                           float *__restrict__ dst, int ncols_x, int nrows_x) {                    \
        mul_mat_vec_q<TYPE, N>(vx, vy, dst, ncols_x, nrows_x);                                      \
    }

#define MMVQ_FORMAT(NAME, TYPE)                                                                     \
    MMVQ_ENTRY(NAME, TYPE, 1)                                                                       \
    MMVQ_ENTRY(NAME, TYPE, 2)                                                                       \
    MMVQ_ENTRY(NAME, TYPE, 3)                                                                       \
    MMVQ_ENTRY(NAME, TYPE, 4)                                                                       \
    MMVQ_ENTRY(NAME, TYPE, 5)                                                                       \
    MMVQ_ENTRY(NAME, TYPE, 6)                                                                       \
    MMVQ_ENTRY(NAME, TYPE, 7)                                                                       \
    MMVQ_ENTRY(NAME, TYPE, 8)

MMVQ_FORMAT(q4_0, GGML_TYPE_Q4_0)
MMVQ_FORMAT(q4_1, GGML_TYPE_Q4_1)
MMVQ_FORMAT(q8_0, GGML_TYPE_Q8_0)
MMVQ_FORMAT(q4_k, GGML_TYPE_Q4_K)
MMVQ_FORMAT(q5_k, GGML_TYPE_Q5_K)
MMVQ_FORMAT(q6_k, GGML_TYPE_Q6_K)
