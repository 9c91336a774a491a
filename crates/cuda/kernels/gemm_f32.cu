// Plain f32 GEMM for weights stored as floats (F32/F16/BF16 files, and formats without an int8
// kernel, dequantized at upload; OLMoE's router): dst[t][r] = Σ_c x[t][c] · w[r][c].
//
// Every output is one fmaf chain over c ascending from 0 (the tile shape does not enter the
// result). A block computes GEMM_BM rows × GEMM_T·RN tokens, each thread GEMM_RM × RN of them
// (rows tx + GEMM_T·i, tokens ty + GEMM_T·j), from GEMM_BK columns staged in shared memory per
// step, transposed so that a thread's reads are consecutive across the warp. Two widths:
// gemm_f32 (RN = 4, 64 tokens a block) and gemm_f32_narrow (RN = 1, 16 tokens), for matrices
// with few rows (OLMoE's 64-expert router), whose wide tiles would leave most SMs idle.
//
// Launch (crates/cuda/src/ops/gemm_f32.rs must agree): block (GEMM_T, GEMM_T), grid
// (ceil(nrows / GEMM_BM), ceil(ntok / (GEMM_T·RN))); any shape.
#include "common.cuh"

#define GEMM_T 16
#define GEMM_RM 4
#define GEMM_BM (GEMM_T * GEMM_RM)
#define GEMM_BK 16

template <int RN>
static __device__ __forceinline__ void gemm_f32_tile(const float *__restrict__ w,
                                                     const float *__restrict__ x,
                                                     float *__restrict__ dst, int ncols,
                                                     int nrows, int ntok) {
    constexpr int BN = GEMM_T * RN;
    __shared__ float ws[GEMM_BK][GEMM_BM + 1];
    __shared__ float xs[GEMM_BK][BN + 1];
    const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * GEMM_T + tx;
    const int row0 = blockIdx.x * GEMM_BM, tok0 = blockIdx.y * BN;
    float acc[GEMM_RM][RN];
#pragma unroll
    for (int i = 0; i < GEMM_RM; ++i) {
#pragma unroll
        for (int j = 0; j < RN; ++j) {
            acc[i][j] = 0.0f;
        }
    }
    for (int c0 = 0; c0 < ncols; c0 += GEMM_BK) {
        // Element e of a tile: row (or token) e / GEMM_BK, column e % GEMM_BK, so a warp's
        // loads run along columns; out-of-range elements are zeros, which leave the chains
        // unchanged.
        for (int e = tid; e < GEMM_BM * GEMM_BK; e += GEMM_T * GEMM_T) {
            const int r = e / GEMM_BK, c = c0 + e % GEMM_BK;
            ws[e % GEMM_BK][r] =
                row0 + r < nrows && c < ncols ? w[(size_t)(row0 + r) * ncols + c] : 0.0f;
        }
        for (int e = tid; e < BN * GEMM_BK; e += GEMM_T * GEMM_T) {
            const int t = e / GEMM_BK, c = c0 + e % GEMM_BK;
            xs[e % GEMM_BK][t] =
                tok0 + t < ntok && c < ncols ? x[(size_t)(tok0 + t) * ncols + c] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < GEMM_BK; ++k) {
            float a[GEMM_RM], b[RN];
#pragma unroll
            for (int i = 0; i < GEMM_RM; ++i) {
                a[i] = ws[k][tx + GEMM_T * i];
            }
#pragma unroll
            for (int j = 0; j < RN; ++j) {
                b[j] = xs[k][ty + GEMM_T * j];
            }
#pragma unroll
            for (int i = 0; i < GEMM_RM; ++i) {
#pragma unroll
                for (int j = 0; j < RN; ++j) {
                    acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
                }
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < GEMM_RM; ++i) {
#pragma unroll
        for (int j = 0; j < RN; ++j) {
            const int row = row0 + tx + GEMM_T * i, tok = tok0 + ty + GEMM_T * j;
            if (row < nrows && tok < ntok) {
                dst[(size_t)tok * nrows + row] = acc[i][j];
            }
        }
    }
}

extern "C" __global__ void __launch_bounds__(GEMM_T *GEMM_T)
    gemm_f32(const float *__restrict__ w, const float *__restrict__ x, float *__restrict__ dst,
             int ncols, int nrows, int ntok) {
    dependent_launch_entry();
    gemm_f32_tile<4>(w, x, dst, ncols, nrows, ntok);
}

extern "C" __global__ void __launch_bounds__(GEMM_T *GEMM_T)
    gemm_f32_narrow(const float *__restrict__ w, const float *__restrict__ x,
                    float *__restrict__ dst, int ncols, int nrows, int ntok) {
    dependent_launch_entry();
    gemm_f32_tile<1>(w, x, dst, ncols, nrows, ntok);
}
