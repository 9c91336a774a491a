// f32 weights times f32 activations, for weights stored as floats (F32/F16/BF16 files, formats
// without an int8 kernel, dequantized at upload; MoE routers): dst[t][r] = Σ_c x[t][c] · w[r][c].
//
// Every output is the CPU's f32 dot (common.cuh's cpu_dot_reduce and cpu_dot_tail): F32
// products have the CPU's bits on any shape, which the F32 goldens need where an f32 product
// feeds a quantized one (gpt-oss's MXFP4 experts; docs/parity.md). A warp computes
// GEMM_ROWS rows × GEMM_TOKENS tokens, its lanes holding the CPU's 64 chains of each; after
// the walk, lane i·GEMM_TOKENS + t keeps output (row i, token t) and adds its tail. Weights and
// activations come straight from global memory (the block's warps share the tokens' rows
// through L1).
//
// Launch (crates/cuda/src/ops/gemm_f32.rs must agree): block (32, GEMM_WARPS), grid
// (ceil(nrows / (GEMM_WARPS · GEMM_ROWS)), ceil(ntok / GEMM_TOKENS)); any shape.
#include "common.cuh"

#define GEMM_ROWS 4
#define GEMM_TOKENS 8
#define GEMM_WARPS 4
static_assert(GEMM_ROWS * GEMM_TOKENS == WARP_SIZE, "a lane an output");

extern "C" __global__ void __launch_bounds__(GEMM_WARPS *WARP_SIZE)
    gemm_f32(const float *__restrict__ w, const float *__restrict__ x, float *__restrict__ dst,
             int ncols, int nrows, int ntok) {
    dependent_launch_entry();
    const int lane = threadIdx.x;
    const int row0 = (blockIdx.x * GEMM_WARPS + threadIdx.y) * GEMM_ROWS;
    const int tok0 = blockIdx.y * GEMM_TOKENS, nt = min(GEMM_TOKENS, ntok - tok0);
    if (row0 >= nrows) {
        return; // whole warps
    }
    // Rows past nrows and tokens past ntok re-read the last ones; never written.
    const float *wr[GEMM_ROWS], *xt[GEMM_TOKENS];
#pragma unroll
    for (int i = 0; i < GEMM_ROWS; ++i) {
        wr[i] = w + (size_t)min(row0 + i, nrows - 1) * ncols;
    }
#pragma unroll
    for (int t = 0; t < GEMM_TOKENS; ++t) {
        xt[t] = x + (size_t)(tok0 + min(t, nt - 1)) * ncols;
    }
    float c0[GEMM_ROWS][GEMM_TOKENS], c1[GEMM_ROWS][GEMM_TOKENS];
#pragma unroll
    for (int i = 0; i < GEMM_ROWS; ++i) {
#pragma unroll
        for (int t = 0; t < GEMM_TOKENS; ++t) {
            c0[i][t] = c1[i][t] = 0.0f;
        }
    }
    const int n64 = ncols / 64 * 64;
#pragma unroll 2
    for (int c = lane; c < n64; c += 64) {
        float wa[GEMM_ROWS], wb[GEMM_ROWS];
#pragma unroll
        for (int i = 0; i < GEMM_ROWS; ++i) {
            wa[i] = __ldg(wr[i] + c);
            wb[i] = __ldg(wr[i] + c + 32);
        }
#pragma unroll
        for (int t = 0; t < GEMM_TOKENS; ++t) {
            if (t < nt) { // uniform
                const float xa = __ldg(xt[t] + c), xb = __ldg(xt[t] + c + 32);
#pragma unroll
                for (int i = 0; i < GEMM_ROWS; ++i) {
                    c0[i][t] = fmaf(wa[i], xa, c0[i][t]);
                    c1[i][t] = fmaf(wb[i], xb, c1[i][t]);
                }
            }
        }
    }
    float mine = 0.0f;
#pragma unroll
    for (int i = 0; i < GEMM_ROWS; ++i) {
#pragma unroll
        for (int t = 0; t < GEMM_TOKENS; ++t) {
            if (t < nt) {
                const float s = cpu_dot_reduce(c0[i][t], c1[i][t]);
                mine = lane == i * GEMM_TOKENS + t ? s : mine;
            }
        }
    }
    const int i = lane / GEMM_TOKENS, t = lane % GEMM_TOKENS;
    if (row0 + i < nrows && t < nt) {
        const float tail = cpu_dot_tail(wr[i] + n64, xt[t] + n64, ncols - n64);
        dst[(size_t)(tok0 + t) * nrows + row0 + i] = __fadd_rn(mine, tail);
    }
}
