// Quantized GEMM for prefill: dst[t][r] = W[r] · y[t] for many activation rows, W in a ggml
// block format, y already quantized to Q8_1 (quantize.cu), on the int8 tensor cores
// (mma.sync s8·s8 → s32). The tile machinery is mmq_tile.cuh (shared with moe_gemm.cu); one
// template over the format traits of quant.cuh, the extern "C" entry points at the end only
// name instances.
//
// Launch (crates/cuda/src/ops/mmq.rs must agree): block (32, MMQ_NWARPS), grid
// (ceil(nrows / MMQ_BM), ceil(ntok / MMQ_BN)); ncols a multiple of MMQ_BK.
#include "common.cuh"
#include "quant.cuh"
#include "mmq_tile.cuh"

template <int TYPE>
static __device__ __forceinline__ void mul_mat_q(const void *__restrict__ vx,
                                                 const block_q8_1 *__restrict__ vy,
                                                 float *__restrict__ dst, int ncols, int nrows,
                                                 int ntok) {
    typedef WeightFormat<TYPE> F;
    __shared__ MmqWeightTile wt;
    __shared__ MmqActTile yt;
    __shared__ int yrow[MMQ_BN];

    const int tid = threadIdx.y * WARP_SIZE + threadIdx.x;
    const int row0 = blockIdx.x * MMQ_BM, tok0 = blockIdx.y * MMQ_BN;
    if (tid < MMQ_BN) {
        yrow[tid] = tok0 + tid < ntok ? tok0 + tid : -1; // tokens past the end are zeros
    }
    const typename F::block *x = (const typename F::block *)vx;

    float acc[MMQ_BN / 8][4];
    mmq_acc_zero(acc);
    __syncthreads();
    for (int k0 = 0; k0 < ncols; k0 += MMQ_BK) {
        mmq_load_weights<TYPE>(wt, x, ncols / F::qk, row0, nrows, k0);
        mmq_load_acts(yt, vy, ncols / QK8_1, yrow, k0);
        __syncthreads();
        mmq_mma<TYPE>(wt, yt, acc);
        __syncthreads();
    }

#pragma unroll
    for (int n = 0; n < MMQ_BN / 8; ++n) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int row = row0 + mmq_acc_row(i), tok = tok0 + mmq_acc_col(n, i);
            if (row < nrows && tok < ntok) {
                dst[(size_t)tok * nrows + row] = acc[n][i];
            }
        }
    }
}

#define MMQ_ENTRY(NAME, TYPE)                                                                       \
    extern "C" __global__ void __launch_bounds__(MMQ_THREADS)                                       \
        mmq_##NAME(const void *__restrict__ vx, const block_q8_1 *__restrict__ vy,                  \
                   float *__restrict__ dst, int ncols, int nrows, int ntok) {                       \
        mul_mat_q<TYPE>(vx, vy, dst, ncols, nrows, ntok);                                           \
    }

MMQ_ENTRY(q4_0, GGML_TYPE_Q4_0)
MMQ_ENTRY(q4_1, GGML_TYPE_Q4_1)
MMQ_ENTRY(q8_0, GGML_TYPE_Q8_0)
MMQ_ENTRY(q4_k, GGML_TYPE_Q4_K)
MMQ_ENTRY(q5_k, GGML_TYPE_Q5_K)
MMQ_ENTRY(q6_k, GGML_TYPE_Q6_K)
