// Plain f32 GEMM for weights stored as floats (F32/F16/BF16 files, and formats without an int8
// kernel, dequantized at upload): dst[t][r] = Σ_c x[t][c] · w[r][c]. Correctness first: these
// weights appear in tiny test models and small tensors, not on the fast path of quantized files.
//
// Launch (crates/cuda/src/ops/gemm_f32.rs must agree): block (GEMM_TILE, GEMM_TILE), grid
// (ceil(nrows / GEMM_TILE), ceil(ntok / GEMM_TILE)); any shape.
#include "common.cuh"

#define GEMM_TILE 16

extern "C" __global__ void gemm_f32(const float *__restrict__ w, const float *__restrict__ x,
                                    float *__restrict__ dst, int ncols, int nrows, int ntok) {
    __shared__ float ws[GEMM_TILE][GEMM_TILE + 1];
    __shared__ float xs[GEMM_TILE][GEMM_TILE + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.x * GEMM_TILE + tx;
    const int tok = blockIdx.y * GEMM_TILE + ty;
    float acc = 0.0f;
    for (int c0 = 0; c0 < ncols; c0 += GEMM_TILE) {
        // Thread (tx, ty) loads w[row0 + ty][c0 + tx] and x[tok0 + ty][c0 + tx]: coalesced in c.
        const int wr = blockIdx.x * GEMM_TILE + ty, xt = blockIdx.y * GEMM_TILE + ty;
        const int c = c0 + tx;
        ws[ty][tx] = (wr < nrows && c < ncols) ? w[(size_t)wr * ncols + c] : 0.0f;
        xs[ty][tx] = (xt < ntok && c < ncols) ? x[(size_t)xt * ncols + c] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < GEMM_TILE; ++k) {
            acc = fmaf(ws[tx][k], xs[ty][k], acc);
        }
        __syncthreads();
    }
    if (row < nrows && tok < ntok) {
        dst[(size_t)tok * nrows + row] = acc;
    }
}
