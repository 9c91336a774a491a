// Quantized weights times up to 64 Q8_1 activation rows on the tensor cores, the activations
// staged in shared memory: the larger steps of a batched decode (one token of each of several
// sequences), dst[j][row] = W[row] · y[j].
//
// mmvq_mma.cu loads each warp's weights straight into MMA fragments and its activations from
// L1/L2 one MMA's worth at a time; from 33 rows those loads are most of its work and hold its
// registers (255 a thread, one block an SM: docs/perf.md, issue 16). Here a block's warps take
// consecutive tiles of 16 weight rows over the same super-blocks, and each super-block's
// activations come into shared memory once for all of them (cp.async, double-buffered, in
// mmq_tile.cuh's row layout, each sub-block's d_y and Σq_y beside them); the weights still go
// from memory straight to the A fragments, read once a launch. Split-K over gridDim.y fills the
// GPU where the row blocks alone do not: share z takes super-blocks z·share.. into part[z], and
// each row block's last share adds the shares in z order (mmq.cu's split-K).
//
// Launch (crates/cuda/src/ops/mmvq_staged.rs must agree): block (32, STG_WARPS), grid
// (ceil(nrows / STG_ROWS), splits), STG_SMEM bytes of dynamic shared memory; entry
// mmvq_staged_<type>_<order>_t<NT> takes up to 8 NT activation rows. K a multiple of 256.
//
// Rounding contract: mmq's (mmq_mma.cuh), each output's terms in mmq's order: MMQ_ORDER_SUBS
// for both formats, or MMQ_ORDER_BLOCKS for Q4_K with Q8_K activations. One share gives mmq's
// bits for that order; shares add within f32 rounding of one (as mmq's split-K).
#include "common.cuh"
#include "quant.cuh"
#include "mmvq.cuh"
#include "mmq_tile.cuh"
#include "mmq_mma.cuh"
#include "mma_rows.cuh"

#define STG_WARPS 8
#define STG_ROWS (16 * STG_WARPS)
#define STG_MAX_COLS 64
// One stage: STG_MAX_COLS raw activation rows of a super-block (MMQ_Y_STRIDE apart); then the
// scales of the current one, float2 [MMQ_SUBS][STG_MAX_COLS].
#define STG_Y_BYTES (STG_MAX_COLS * MMQ_Y_STRIDE)
#define STG_YSC (2 * STG_Y_BYTES)
#define STG_SMEM (STG_YSC + MMQ_SUBS * STG_MAX_COLS * 8)

// Q4_K rows g, g + 8 of a 16-row tile in the MMA's natural k order (mma_rows.cuh's
// MmaRows<Q4_K> permutes k so that a lane's codes are one 8-byte load; here the activations'
// B fragments come from shared memory in mmq's layout, whose banks suit the natural order).
struct Q4kNatural {
    typedef block_q4_K block;
    typedef MmaRows<GGML_TYPE_Q4_K>::Frag Frag;
    struct Raw {
        int4 head[2]; // d, dmin, scales of rows g, g + 8
        int q[2][4][2]; // row h, pair p: code bytes 32p + 4t.. and 32p + 16 + 4t..
    };

    static __device__ __forceinline__ void load(Raw &r, const block *b0, const block *b1,
                                                int t) {
        const block *b[2] = {b0, b1};
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            r.head[h] = ld_stream4(b[h]);
#pragma unroll
            for (int p = 0; p < 4; ++p) {
                r.q[h][p][0] = __ldg((const int *)(b[h]->qs + 32 * p + 4 * t));
                r.q[h][p][1] = __ldg((const int *)(b[h]->qs + 32 * p + 16 + 4 * t));
            }
        }
    }

    // Sub-block s's A fragment: slots 4t.. and 16 + 4t.. of rows g and g + 8.
    static __device__ __forceinline__ void codes(const Raw &r, int s, int (&a)[4]) {
        const int p = s / 2, sh = 4 * (s % 2);
        a[0] = (r.q[0][p][0] >> sh) & 0x0F0F0F0F;
        a[1] = (r.q[1][p][0] >> sh) & 0x0F0F0F0F;
        a[2] = (r.q[0][p][1] >> sh) & 0x0F0F0F0F;
        a[3] = (r.q[1][p][1] >> sh) & 0x0F0F0F0F;
    }

    static __device__ __forceinline__ Frag frag(const Raw &r, int s) {
        Frag f;
        codes(r, s, f.a);
        MmaRows<GGML_TYPE_Q4_K>::scales(r.head, s, f);
        return f;
    }

    static __device__ __forceinline__ void dot(const Frag &f, const int (&b)[2],
                                               const float (&dy)[2], const float (&sy)[2],
                                               float (&c)[4]) {
        MmaRows<GGML_TYPE_Q4_K>::dot(f, b, dy, sy, c);
    }
};

// The fragment source of each format: Q4_K above, Q6_K's mma_rows.cuh rows (natural order).
template <int TYPE> struct StagedRows;
template <> struct StagedRows<GGML_TYPE_Q4_K> : Q4kNatural {};
template <> struct StagedRows<GGML_TYPE_Q6_K> : MmaRows<GGML_TYPE_Q6_K> {};

// The thread's B fragment of sub-block s for activation row n (natural order: bytes 4t.. and
// 16 + 4t..), from a staged row.
static __device__ __forceinline__ void staged_b(const char *ystage, int n, int s, int t,
                                                int (&b)[2]) {
    const int *yq = (const int *)(ystage + n * MMQ_Y_STRIDE + 36 * s + 4);
    b[0] = yq[t];
    b[1] = yq[4 + t];
}

// Queue the copy of super-block kb of activation rows 0..8 NT (rows past nrows_y: zeros).
template <int NT>
static __device__ __forceinline__ void staged_acts(char *dst, const char *y, size_t y_row,
                                                   int nrows_y, int kb, int tid) {
    constexpr int CHUNKS = MMQ_Y_ROW / 16;
    for (int i = tid; i < 8 * NT * CHUNKS; i += STG_WARPS * WARP_SIZE) {
        const int n = i / CHUNKS, c = i % CHUNKS;
        const bool live = n < nrows_y;
        const char *src = live ? y + (size_t)n * y_row + (size_t)kb * MMQ_Y_ROW + 16 * c : y;
        cp_async16_any(dst + n * MMQ_Y_STRIDE + 16 * c, src, live ? 16 : 0, y);
    }
    cp_async_commit();
}

// {d_y, d_y Σq_y} of every staged sub-block ({d_y, Σq_y} where `raw_sum`: the integer-scale
// order), as mmq_act_scales computes them; the sum only where the weights have a minimum.
template <int TYPE, int NT>
static __device__ __forceinline__ void staged_scales(float2 *ysc, const char *ystage,
                                                     bool raw_sum, int tid) {
    for (int i = tid; i < 8 * NT * MMQ_SUBS; i += STG_WARPS * WARP_SIZE) {
        const int n = i % (8 * NT), s = i / (8 * NT);
        const block_q8_1 *b = (const block_q8_1 *)(ystage + n * MMQ_Y_STRIDE) + s;
        const float d = b->d;
        int sum = 0;
        if (WeightFormat<TYPE>::has_min) {
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                sum = sum_bytes(get_int_b4(b->qs, j), sum);
            }
        }
        ysc[s * STG_MAX_COLS + n] = make_float2(d, raw_sum ? (float)sum : d * (float)sum);
    }
}

// One super-block in MMQ_ORDER_SUBS: per sub-block and column tile, the format's dot
// (mmq_mma's arithmetic).
template <int TYPE, int NT>
static __device__ __forceinline__ void staged_subs(const typename StagedRows<TYPE>::Raw &cur,
                                                   const char *ystage, const float2 *ysc,
                                                   float (&acc)[NT * 4]) {
    typedef StagedRows<TYPE> R;
    const int g = threadIdx.x / 4, t = threadIdx.x % 4;
#pragma unroll
    for (int s = 0; s < MMQ_SUBS; ++s) {
        const typename R::Frag f = R::frag(cur, s);
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            int b[2];
            staged_b(ystage, 8 * nt + g, s, t, b);
            const float4 ys = *(const float4 *)&ysc[s * STG_MAX_COLS + 8 * nt + 2 * t];
            const float dy[2] = {ys.x, ys.z}, sy[2] = {ys.y, ys.w};
            R::dot(f, b, dy, sy, *(float(*)[4])(acc + 4 * nt));
        }
    }
}

// One Q4_K super-block in MMQ_ORDER_BLOCKS (mmq_mma_blocks' arithmetic): the sub-blocks' dots
// times their 6-bit scales summed in an int, the mins' Σ m·Σq_y in f32 (exact), each into its
// accumulator with the block's d·d_y and dmin·d_y.
template <int NT>
static __device__ __forceinline__ void staged_blocks(const Q4kNatural::Raw &cur,
                                                     const char *ystage, const float2 *ysc,
                                                     float (&acc)[NT * 4],
                                                     float (&accm)[NT * 4]) {
    const int g = threadIdx.x / 4, t = threadIdx.x % 4;
    int isum[NT * 4];
#pragma unroll
    for (int s = 0; s < MMQ_SUBS; ++s) {
        int a[4], sc[2], mi;
        Q4kNatural::codes(cur, s, a);
        q4k_scale_min(cur.head[0], s, sc[0], mi);
        q4k_scale_min(cur.head[1], s, sc[1], mi);
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            int b[2];
            staged_b(ystage, 8 * nt + g, s, t, b);
            int dot[4] = {0, 0, 0, 0};
            mma_s8_k32(dot, a, b);
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int scaled = sc[i / 2] * dot[i];
                isum[4 * nt + i] = s == 0 ? scaled : isum[4 * nt + i] + scaled;
            }
        }
    }
    float m[MMQ_SUBS][2], d[2], dmin[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int s = 0; s < MMQ_SUBS; ++s) {
            int sc, mi;
            q4k_scale_min(cur.head[h], s, sc, mi);
            m[s][h] = (float)mi;
        }
        d[h] = f16_bits_to_f32((uint16_t)(cur.head[h].x & 0xffff));
        dmin[h] = f16_bits_to_f32((uint16_t)((uint32_t)cur.head[h].x >> 16));
    }
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        const int n = 8 * nt + 2 * t;
        float imin[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int s = 0; s < MMQ_SUBS; ++s) {
            const float4 ys = *(const float4 *)&ysc[s * STG_MAX_COLS + n];
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                imin[i] = __fmaf_rn(m[s][i / 2], i % 2 ? ys.w : ys.y, imin[i]);
            }
        }
        const float4 y0 = *(const float4 *)&ysc[n];
        const float dy[2] = {y0.x, y0.z};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int h = i / 2, c = i % 2;
            acc[4 * nt + i] = __fmaf_rn((float)isum[4 * nt + i], __fmul_rn(d[h], dy[c]),
                                        acc[4 * nt + i]);
            accm[4 * nt + i] =
                __fmaf_rn(imin[i], __fmul_rn(dmin[h], dy[c]), accm[4 * nt + i]);
        }
    }
}

// ORDER: MMQ_ORDER_SUBS, or MMQ_ORDER_BLOCKS (Q4_K, Q8_K activations). `share` super-blocks a
// split (gridDim.y of them); part: gridDim.y × nrows_y × nrows floats and done: a zeroed
// counter per row block, when gridDim.y > 1.
template <int TYPE, int ORDER, int NT>
static __device__ __forceinline__ void staged_matvec(const void *__restrict__ vx,
                                                     const block_q8_1 *__restrict__ vy,
                                                     float *__restrict__ dst, int ncols,
                                                     int nrows, int nrows_y,
                                                     float *__restrict__ part,
                                                     unsigned *__restrict__ done, int share) {
    typedef StagedRows<TYPE> R;
    typedef typename R::block block;
    constexpr bool BLOCKS = ORDER == MMQ_ORDER_BLOCKS;
    static_assert(!BLOCKS || TYPE == GGML_TYPE_Q4_K, "the integer-scale order is Q4_K's");
    extern __shared__ __align__(16) char smem[];
    if (mmq_dynamic_smem() < (unsigned)STG_SMEM) {
        __trap(); // launched with less shared memory than the layout needs
    }
    float2 *ysc = (float2 *)(smem + STG_YSC);
    const int lane = threadIdx.x, g = lane / 4, t = lane % 4;
    const int tid = threadIdx.y * WARP_SIZE + lane;
    const int bpr = ncols / QK_K;
    const size_t y_row = (size_t)(ncols / QK8_1) * sizeof(block_q8_1);
    const int row0 = blockIdx.x * STG_ROWS + 16 * threadIdx.y;
    const int kb0 = blockIdx.y * share, kb1 = min(bpr, kb0 + share);
    const block *x = (const block *)vx;
    // Rows past the end re-read the last one (never written).
    const block *r0 = x + (size_t)min(row0 + g, nrows - 1) * bpr;
    const block *r1 = x + (size_t)min(row0 + g + 8, nrows - 1) * bpr;

    float acc[NT * 4], accm[NT * 4];
#pragma unroll
    for (int i = 0; i < NT * 4; ++i) {
        acc[i] = 0.0f;
        accm[i] = 0.0f;
    }
    if (kb0 < kb1) {
        staged_acts<NT>(smem, (const char *)vy, y_row, nrows_y, kb0, tid);
    }
#pragma unroll 1
    for (int kb = kb0; kb < kb1; ++kb) {
        const int st = (kb - kb0) & 1;
        const char *ystage = smem + st * STG_Y_BYTES;
        // This super-block's weights, loaded before the barriers; the next one's prefetched to L2.
        typename R::Raw cur;
        R::load(cur, r0 + kb, r1 + kb, t);
        if (kb + 1 < kb1) {
            // Lane l: line l % 2 of row l / 2's next block, and its last byte's line (a
            // block of 144 or 210 bytes can meet three).
            const int r = min(row0 + lane / 2, nrows - 1);
            const char *p = (const char *)(x + (size_t)r * bpr + kb + 1);
            asm volatile("prefetch.global.L2 [%0];" ::"l"(p + 128 * (lane % 2)));
            if (lane % 2) {
                asm volatile("prefetch.global.L2 [%0];" ::"l"(p + sizeof(block) - 1));
            }
        }
        cp_async_wait<0>(); // this thread's copies of super-block kb
        __syncthreads();    // everyone's; and every warp is done with kb - 1's stage and scales
        if (kb + 1 < kb1) {
            staged_acts<NT>(smem + (st ^ 1) * STG_Y_BYTES, (const char *)vy, y_row, nrows_y,
                            kb + 1, tid);
        }
        staged_scales<TYPE, NT>(ysc, ystage, BLOCKS, tid);
        __syncthreads();
        if constexpr (BLOCKS) {
            staged_blocks<NT>(cur, ystage, ysc, acc, accm);
        } else {
            staged_subs<TYPE, NT>(cur, ystage, ysc, acc);
        }
    }

    // One share: straight to dst; several: this share to part[z], then the row block's last.
    const int splits = gridDim.y;
    float *out = splits == 1 ? dst : part + (size_t)blockIdx.y * nrows_y * nrows;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int row = row0 + g + 8 * (i / 2), col = 8 * nt + 2 * t + i % 2;
            if (row < nrows && col < nrows_y) {
                out[(size_t)col * nrows + row] = acc[4 * nt + i] - accm[4 * nt + i];
            }
        }
    }
    if (splits == 1) {
        return;
    }
    const int first = blockIdx.x * STG_ROWS;
    add_splits_if_last<8>(done, blockIdx.x, dst, part, (size_t)nrows_y * nrows, splits, nrows,
                          0, nrows_y, first, min(STG_ROWS, nrows - first), tid,
                          STG_WARPS * WARP_SIZE);
}

// The block's rows of its share requested from L2 before the wait on the previous kernel
// (weights: no kernel writes them), then the wait.
template <int TYPE>
static __device__ __forceinline__ void staged_prefetch_then_wait(int prefetch, const void *vx,
                                                                 int ncols, int nrows,
                                                                 int share) {
    typedef typename StagedRows<TYPE>::block block;
    if (prefetch) {
        const int bpr = ncols / QK_K, kb0 = blockIdx.y * share, kb1 = min(bpr, kb0 + share);
        const int row0 = blockIdx.x * STG_ROWS, rows = min(STG_ROWS, nrows - row0);
        const int bytes = (kb1 - kb0) * (int)sizeof(block); // a row's share
        const int lines = (bytes + 127) / 128 + 1;            // however it meets the lines
        const int tid = threadIdx.y * WARP_SIZE + threadIdx.x;
        for (int i = tid; i < rows * lines; i += STG_WARPS * WARP_SIZE) {
            const int r = row0 + i / lines;
            const char *p = (const char *)((const block *)vx + (size_t)r * bpr + kb0);
            asm volatile("prefetch.global.L2 [%0];" ::"l"(p + min(128 * (i % lines), bytes - 1)));
        }
    }
    dependent_launch_entry();
}

// Two blocks an SM (128 registers a thread): the per-sub-block order fits them with at most 12
// bytes spilled (ptxas, sm_90a, at 56-64 rows); the integer-scale order spills more there.
#define STG_ENTRY(NAME, TYPE, ORDER_NAME, ORDER, NT)                                              \
    extern "C" __global__ void __launch_bounds__(STG_WARPS *WARP_SIZE, 2)                         \
        mmvq_staged_##NAME##_##ORDER_NAME##_t##NT(                                               \
            const void *__restrict__ vx, const block_q8_1 *__restrict__ vy,                       \
            float *__restrict__ dst, int ncols, int nrows, int nrows_y, float *part,              \
            unsigned *done, int share, int prefetch) {                                            \
        staged_prefetch_then_wait<TYPE>(prefetch, vx, ncols, nrows, share);                       \
        staged_matvec<TYPE, ORDER, NT>(vx, vy, dst, ncols, nrows, nrows_y, part, done, share);    \
    }

// Column tiles 3-8 (17-64 rows): below, mmvq_mma's activation loads are few. Every format of
// mmvq_mma (ops/formats.rs's matvec_mma) in MMQ_ORDER_SUBS, and the integer-scale ones
// (gemm_blocks) in MMQ_ORDER_BLOCKS too.
#define STG_ORDER(NAME, TYPE, ORDER_NAME, ORDER)                                                  \
    STG_ENTRY(NAME, TYPE, ORDER_NAME, ORDER, 3)                                                   \
    STG_ENTRY(NAME, TYPE, ORDER_NAME, ORDER, 4)                                                   \
    STG_ENTRY(NAME, TYPE, ORDER_NAME, ORDER, 5)                                                   \
    STG_ENTRY(NAME, TYPE, ORDER_NAME, ORDER, 6)                                                   \
    STG_ENTRY(NAME, TYPE, ORDER_NAME, ORDER, 7)                                                   \
    STG_ENTRY(NAME, TYPE, ORDER_NAME, ORDER, 8)
#define STG_FORMAT(NAME, TYPE) STG_ORDER(NAME, TYPE, subs, MMQ_ORDER_SUBS)
#define STG_BLOCKS_FORMAT(NAME, TYPE) STG_ORDER(NAME, TYPE, blocks, MMQ_ORDER_BLOCKS)

STG_FORMAT(q4_k, GGML_TYPE_Q4_K)
STG_FORMAT(q6_k, GGML_TYPE_Q6_K)
STG_BLOCKS_FORMAT(q4_k, GGML_TYPE_Q4_K)
