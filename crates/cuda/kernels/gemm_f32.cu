// f32 weights times f32 activations, for weights stored as floats (F32/F16/BF16 files, formats
// without an int8 kernel, dequantized at upload; MoE routers): dst[t][r] = Σ_c x[t][c] · w[r][c].
//
// Every output is the CPU's f32 dot (common.cuh's cpu_dot_reduce and cpu_dot_tail): F32
// products have the CPU's bits on any shape, which the F32 goldens need where an f32 product
// feeds a quantized one (gpt-oss's MXFP4 experts; docs/parity.md). A warp computes
// GEMM_ROWS rows × GEMM_TOKENS tokens, its lanes holding the CPU's 64 chains of each; after
// the walk, lane i·GEMM_TOKENS + t keeps output (row i, token t) and adds its tail. Weights and
// activations come straight from global memory. A block's warps are GEMM_WARPS along the rows
// times 1-4 along the tokens (blockDim.y / GEMM_WARPS, the plan's `gemm_f32_token_warps`):
// warps of one token group share those tokens' rows, and warps of one row group the weight's,
// through L1, so a 2048-token prefill's router reads about half the bytes from L2 with four
// token groups as with one (session 44). Each warp's walk is the same whatever the layout.
//
// Launch (crates/cuda/src/ops/gemm_f32.rs must agree): block (32, GEMM_WARPS · TW), grid
// (ceil(nrows / (GEMM_WARPS · GEMM_ROWS)), ceil(ntok / (TW · GEMM_TOKENS))); any shape.
#include "common.cuh"

#define GEMM_ROWS 4
#define GEMM_TOKENS 8
#define GEMM_WARPS 4
#define GEMM_TOKEN_WARPS_MAX 4
static_assert(GEMM_ROWS * GEMM_TOKENS == WARP_SIZE, "a lane an output");

extern "C" __global__ void __launch_bounds__(GEMM_WARPS *GEMM_TOKEN_WARPS_MAX *WARP_SIZE)
    gemm_f32(const float *__restrict__ w, const float *__restrict__ x, float *__restrict__ dst,
             int ncols, int nrows, int ntok) {
    dependent_launch_entry();
    const int lane = threadIdx.x;
    const int rw = threadIdx.y % GEMM_WARPS, tw = threadIdx.y / GEMM_WARPS;
    const int row0 = (blockIdx.x * GEMM_WARPS + rw) * GEMM_ROWS;
    const int tok0 = (blockIdx.y * (blockDim.y / GEMM_WARPS) + tw) * GEMM_TOKENS;
    if (row0 >= nrows || tok0 >= ntok) {
        return; // whole warps
    }
    const int nt = min(GEMM_TOKENS, ntok - tok0);
    // Rows past nrows re-read the last one; never written. Tokens past ntok are not read. The
    // tile's rows and tokens as one base pointer each and offsets from it (fewer registers
    // than a pointer each, so four token warps fit the launch bound without spills).
    const float *w0 = w + (size_t)row0 * ncols, *x0 = x + (size_t)tok0 * ncols;
    int wo[GEMM_ROWS];
#pragma unroll
    for (int i = 0; i < GEMM_ROWS; ++i) {
        wo[i] = (min(row0 + i, nrows - 1) - row0) * ncols;
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
#pragma unroll 1
    for (int c = lane; c < n64; c += 64) {
        float wa[GEMM_ROWS], wb[GEMM_ROWS];
#pragma unroll
        for (int i = 0; i < GEMM_ROWS; ++i) {
            wa[i] = __ldg(w0 + wo[i] + c);
            wb[i] = __ldg(w0 + wo[i] + c + 32);
        }
#pragma unroll
        for (int t = 0; t < GEMM_TOKENS; ++t) {
            if (t < nt) { // uniform
                const float xa = __ldg(x0 + t * ncols + c), xb = __ldg(x0 + t * ncols + c + 32);
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
        const float tail = cpu_dot_tail(w0 + wo[i] + n64, x0 + t * ncols + n64, ncols - n64);
        dst[(size_t)(tok0 + t) * nrows + row0 + i] = __fadd_rn(mine, tail);
    }
}
