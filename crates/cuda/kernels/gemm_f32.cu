// f32 weights times f32 activations, for weights stored as floats (F32/F16/BF16 files, formats
// without an int8 kernel, dequantized at upload; MoE routers): dst[t][r] = Σ_c x[t][c] · w[r][c].
//
// Every output is the CPU's f32 dot (common.cuh's cpu_dot_reduce and cpu_dot_tail): F32
// products have the CPU's bits on any shape, which the F32 goldens need where an f32 product
// feeds a quantized one (gpt-oss's MXFP4 experts; docs/parity.md). A warp computes
// GEMM_ROWS rows × GEMM_TOKENS tokens, its lanes holding the CPU's 64 chains of each; after
// the walk, lane i·GEMM_TOKENS + t keeps output (row i, token t) and adds its tail.
//
// A block's warps are GEMM_WARPS along the rows times TW = 1-4 along the tokens (blockDim.y /
// GEMM_WARPS, the plan's `gemm_f32_token_warps`). Its tile's weight rows and token rows come
// 64 columns at a time into a ring of GEMM_STAGES shared-memory stages by cp.async, two
// stages ahead of the warps, which read their operands from there: the walk waited on an L2
// round trip every 64 columns when each warp loaded its own (session 44's ncu of a
// 2048-token router, 160 µs at 24% of warps active). Each chain still adds its columns in
// order, so the same bits whatever the layout.
//
// Launch (crates/cuda/src/ops/gemm_f32.rs must agree): block (32, GEMM_WARPS · TW), grid
// (ceil(nrows / (GEMM_WARPS · GEMM_ROWS)), ceil(ntok / (TW · GEMM_TOKENS))), dynamic shared
// memory GEMM_STAGES · (GEMM_WARPS · GEMM_ROWS + TW · GEMM_TOKENS) · 64 floats; any shape.
#include "common.cuh"

#define GEMM_ROWS 4
#define GEMM_TOKENS 8
#define GEMM_WARPS 4
#define GEMM_TOKEN_WARPS_MAX 4
#define GEMM_STAGES 3
static_assert(GEMM_ROWS * GEMM_TOKENS == WARP_SIZE, "a lane an output");

extern "C" __global__ void __launch_bounds__(GEMM_WARPS *GEMM_TOKEN_WARPS_MAX *WARP_SIZE)
    gemm_f32(const float *__restrict__ w, const float *__restrict__ x, float *__restrict__ dst,
             int ncols, int nrows, int ntok) {
    dependent_launch_entry();
    extern __shared__ float4 gemm_ring[];
    const int lane = threadIdx.x, tid = threadIdx.y * WARP_SIZE + lane;
    const int token_warps = blockDim.y / GEMM_WARPS;
    const int rw = threadIdx.y % GEMM_WARPS, tw = threadIdx.y / GEMM_WARPS;
    // The block's tile: BR weight rows from brow, token_warps · GEMM_TOKENS tokens from btok;
    // a stage holds its `lines` rows (weights first) of 64 floats.
    constexpr int BR = GEMM_WARPS * GEMM_ROWS;
    const int brow = blockIdx.x * BR, btok = blockIdx.y * token_warps * GEMM_TOKENS;
    const int lines = BR + token_warps * GEMM_TOKENS;
    const int n64 = ncols / 64 * 64, chunks = n64 / 64;
    // Chunk kc's 64 columns of every line into stage `st`, 16 bytes a copy. Lines past the
    // matrix re-read its last row (their outputs are never written).
    const auto fetch = [&](int kc, int st) {
        float *ring = (float *)gemm_ring + (size_t)st * lines * 64;
        for (int q = tid; q < lines * 16; q += blockDim.y * WARP_SIZE) {
            const int line = q / 16, part = q % 16;
            const float *src = line < BR
                                   ? w + (size_t)min(brow + line, nrows - 1) * ncols
                                   : x + (size_t)min(btok + line - BR, ntok - 1) * ncols;
            src += kc * 64 + part * 4;
            cp_async16_any((char *)(ring + line * 64 + part * 4), (const char *)src, 16,
                           (const char *)src);
        }
    };
#pragma unroll
    for (int st = 0; st < GEMM_STAGES - 1; ++st) {
        if (st < chunks) {
            fetch(st, st);
        }
        cp_async_commit();
    }
    float c0[GEMM_ROWS][GEMM_TOKENS], c1[GEMM_ROWS][GEMM_TOKENS];
#pragma unroll
    for (int i = 0; i < GEMM_ROWS; ++i) {
#pragma unroll
        for (int t = 0; t < GEMM_TOKENS; ++t) {
            c0[i][t] = c1[i][t] = 0.0f;
        }
    }
#pragma unroll 1
    for (int kc = 0; kc < chunks; ++kc) {
        cp_async_wait<GEMM_STAGES - 2>();
        __syncthreads(); // chunk kc landed for every thread; chunk kc - 1's stage is free
        if (kc + GEMM_STAGES - 1 < chunks) {
            fetch(kc + GEMM_STAGES - 1, (kc + GEMM_STAGES - 1) % GEMM_STAGES);
        }
        cp_async_commit();
        const float *ring = (const float *)gemm_ring + (size_t)(kc % GEMM_STAGES) * lines * 64;
        const float *ws = ring + rw * GEMM_ROWS * 64 + lane;
        const float *xs = ring + (BR + tw * GEMM_TOKENS) * 64 + lane;
        float wa[GEMM_ROWS], wb[GEMM_ROWS];
#pragma unroll
        for (int i = 0; i < GEMM_ROWS; ++i) {
            wa[i] = ws[i * 64];
            wb[i] = ws[i * 64 + 32];
        }
#pragma unroll
        for (int t = 0; t < GEMM_TOKENS; ++t) {
            const float xa = xs[t * 64], xb = xs[t * 64 + 32];
#pragma unroll
            for (int i = 0; i < GEMM_ROWS; ++i) {
                c0[i][t] = fmaf(wa[i], xa, c0[i][t]);
                c1[i][t] = fmaf(wb[i], xb, c1[i][t]);
            }
        }
    }
    cp_async_wait<0>();
    const int row0 = brow + rw * GEMM_ROWS, tok0 = btok + tw * GEMM_TOKENS;
    if (row0 >= nrows || tok0 >= ntok) {
        return; // whole warps, past the last barrier
    }
    const int nt = min(GEMM_TOKENS, ntok - tok0);
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
        const float *wr = w + (size_t)(row0 + i) * ncols, *xt = x + (size_t)(tok0 + t) * ncols;
        dst[(size_t)(tok0 + t) * nrows + row0 + i] =
            __fadd_rn(mine, cpu_dot_tail(wr + n64, xt + n64, ncols - n64));
    }
}
