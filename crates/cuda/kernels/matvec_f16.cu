// Q4_K and Q6_K weights times up to 64 f16 activation rows on the f16 tensor cores: the larger
// steps of a batched decode (one token of each of several sequences), dst[j][row] = W[row] ·
// x[j], x the activations rounded to f16 (gemm_wgmma.cu's round_f16).
//
// Why f16 and not int8 (mmvq_mma.cu, mmvq_staged.cu): an int8 MMA's integer sums must be scaled
// a sub-block at a time, per output, so at 64 rows those f32 operations outnumber the MMAs many
// times over (docs/perf.md, session 29). Unpacked to f16 (kquant_f16.cuh's arithmetic, the f16
// GEMM's), a weight carries its scale into the MMA: the unpacking is per weight, once for all
// the rows, and the MMAs do the rest.
//
// A block takes 128 weight rows over the same super-blocks: Q4_K's 4 warps 32 rows each (two
// tiles of 16, so that each staged activation fragment serves two MMAs), Q6_K's 8 warps 16 each
// (its 210-byte blocks take twice the registers a row); each super-block's activation rows come
// into shared memory once for all of them (cp.async, double-buffered); each warp's weights go
// from memory straight into registers (the next super-block's loaded while this one's are
// multiplied), unpacked into the MMA's A fragments. Split-K over gridDim.y fills the GPU where
// the row blocks alone do not: share z takes super-blocks z·share.. into part[z], and each row
// block's last share adds the shares in z order.
//
// The k order within a super-block is permuted (the same for weights and activations, so the
// sums are the product's). Q4_K: a lane's codes are 8 consecutive bytes of each 32-byte group m
// (bytes 32m + 8t.., low nibbles sub-block 2m, high nibbles 2m + 1), and MMA step (m, j, h)
// (j: the nibble, h: the half of the 8 bytes) puts elements 64m + 32j + 8t + 4h + e (e 0-3) at
// the lane's slots 2t, 2t + 1, 2t + 8, 2t + 9; its activations are one 16-byte shared load a
// lane for both halves, a row's 16-byte chunks swizzled by the row's parity (chunk c at
// c ^ 4(n & 1)). Q6_K: a lane's codes are the 4 bytes 16i + 4t.. of ql (i 0-7) and step (i, j)
// puts elements 128(i / 4) + 16(i % 4) + 64j + 4t + e at those slots (each step inside one
// 16-element scale); its activations are one 8-byte load, chunks at c ^ 2(n & 3). Either way a
// quarter (half) warp's loads meet every bank once.
//
// Launch (crates/cuda/src/ops/matvec_f16.rs must agree): block (32, MvfFormat<TYPE>::WARPS),
// grid (the matrices' ceil(nrows / MVF_ROWS) together, splits), MVF_SMEM bytes of dynamic
// shared memory; entry matvec_f16_<type>_t<NT> takes up to 8 NT activation rows and up to
// MVF_MATS matrices (MvfMats). K a multiple of 256.
//
// Rounding contract: the f16 GEMM's (ops/gemm_wgmma/): Q4_K's weights as kquant_f16.cuh unpacks
// them, Q6_K's as (q - 32) · f16(d · sc) rounded once in f16, the activations rounded to f16,
// products summed in f32 by the MMAs in a fixed order; shares added in z order. The same bits
// every run.
#include "common.cuh"
#include "quant.cuh"
#include "mmvq.cuh"
#include "mmq_tile.cuh" // mmq_dynamic_smem
#include "mmq_mma.cuh"
#include "mma_rows.cuh" // ld_stream2, ld_stream4, sbyte
#include "mma_f16.cuh"
#include "kquant_f16.cuh"

#define MVF_ROWS 128
#define MVF_MAX_COLS 64
// A super-block of one activation row as f16.
#define MVF_ROW_BYTES 512
#define MVF_STAGE_BYTES (MVF_MAX_COLS * MVF_ROW_BYTES)
#define MVF_SMEM (2 * MVF_STAGE_BYTES)
// Q6_K's weights through shared memory (the `_ws` entries, FERROLM_F16_MATVEC_Q6K_STAGE): a
// block's 128 rows of one super-block, each row's 210 bytes inside the 16-byte-aligned span of
// 224 that holds them (14 cp.async chunks; the host takes these entries only where rows lie a
// multiple of 16 bytes apart, so every row's block sits at the same offset in its span), a
// row's span MVF_WS_ROW bytes from the next (240: the 4-byte words a quarter warp's 8 rows read
// meet every bank once). A lane's 16-bit loads of 210-byte blocks from memory, 33 a row a
// super-block, filled the load queue (ncu: lg throttle the first stall of Q6_K's down, session
// 32); the copies are 7 a thread a super-block, and the codes come from shared memory.
#define MVF_WS_ROW 240
#define MVF_WS_CHUNKS 14
#define MVF_WS_STAGE_BYTES (MVF_ROWS * MVF_WS_ROW)
#define MVF_WS_SMEM (2 * MVF_STAGE_BYTES + 2 * MVF_WS_STAGE_BYTES)
// Q4_K's weights through shared memory (the `q4_k_ws` entries, FERROLM_F16_MATVEC_Q4K_STAGE):
// its 144-byte blocks are 16-byte aligned where the matrix is (9 cp.async chunks a row), and
// rows 144 bytes apart already meet every bank once for a quarter warp's loads (a head's 16
// bytes of 8 rows at 4-word offsets, a code's 8 bytes of 8 rows and 4 lanes at 2-word ones).
// A register set of rows less (no next super-block in registers), and more bytes in flight:
// the register path's Q4_K launches ran at 11% occupancy and 14% of DRAM (session 35's ncu).
#define MVF_WS4_ROW 144
#define MVF_WS4_CHUNKS 9
#define MVF_WS4_SMEM (2 * MVF_STAGE_BYTES + 2 * MVF_ROWS * MVF_WS4_ROW)

// Q4_K: a row's super-block as a lane holds it, the 16-byte head (d, dmin, 12 scale bytes) and
// its 8 code bytes of each of the four 32-byte groups.
struct MvfQ4kRow {
    int4 head;
    int2 q[4];
};

// 16-bit word k (0-5) of a Q4_K head's 12 scale bytes (head bytes 4..15), k known only at
// run time: selects, not an indexed (local-memory) array.
static __device__ __forceinline__ uint32_t mvf_scale_word(const int4 &hd, int k) {
    const uint32_t w = (uint32_t)(k < 2 ? hd.y : k < 4 ? hd.z : hd.w);
    return (w >> (16 * (k % 2))) & 0xffffu;
}

// Group m's f16 pairs (dl, dl) and (-ml, -ml) of sub-blocks 2m (j 0) and 2m + 1 (j 1), as
// gemm_wgmma.cu's q4k_row_f16 computes them (get_scale_min_k4's unpacking, q4k_scale_min's);
// m known only at run time.
static __device__ __forceinline__ void mvf_scales(const int4 &hd, int m, uint32_t (&dl2)[2],
                                                  uint32_t (&nml2)[2]) {
    const float d = f16_bits_to_f32((uint16_t)(hd.x & 0xffff));
    const float dmin = f16_bits_to_f32((uint16_t)((uint32_t)hd.x >> 16));
    uint32_t sc2, m2;
    if (m < 2) {
        sc2 = mvf_scale_word(hd, m) & 0x3f3f;
        m2 = mvf_scale_word(hd, m + 2) & 0x3f3f;
    } else {
        sc2 = (mvf_scale_word(hd, m + 2) & 0x0f0f) | ((mvf_scale_word(hd, m - 2) & 0xc0c0) >> 2);
        m2 = ((mvf_scale_word(hd, m + 2) >> 4) & 0x0f0f) | ((mvf_scale_word(hd, m) & 0xc0c0) >> 2);
    }
#pragma unroll
    for (int j = 0; j < 2; ++j) {
        const int sc = (sc2 >> (8 * j)) & 0xff, mi = (m2 >> (8 * j)) & 0xff;
        const float dl = __fmul_rn(d, (float)sc), ml = __fmul_rn(dmin, (float)mi);
        dl2[j] = pack_f16x2(dl, dl);
        nml2[j] = pack_f16x2(-ml, -ml);
    }
}

// Q6_K: a row's super-block as a lane holds it: ql's bytes 16i + 4t.. (i 0-7), qh's bytes
// 32n + 16c + 4t.. (index 2n + c), the 16 scales and d. Blocks are 210 bytes (2-byte
// aligned): 16-bit loads, through L1 (a row's four lanes share its sectors).
struct MvfQ6kRow {
    int lo[8];
    int hi[4];
    int sc[4];
    int d;
};

template <int TYPE> struct MvfFormat;

template <> struct MvfFormat<GGML_TYPE_Q4_K> {
    typedef block_q4_K block;
    typedef MvfQ4kRow Row;
    static constexpr int WARPS = 4, TILES = 2;
    // Through shared memory: a row's span and its 16-byte chunks (MVF_WS4_ROW).
    static constexpr int WS_ROW = MVF_WS4_ROW, WS_CHUNKS = MVF_WS4_CHUNKS, WS_SMEM = MVF_WS4_SMEM;

    static __device__ __forceinline__ void load(Row &r, const block *b, int t) {
        r.head = ld_stream4(b);
#pragma unroll
        for (int m = 0; m < 4; ++m) {
            r.q[m] = ld_stream2(b->qs + 32 * m + 8 * t);
        }
    }

    // The same bytes from a staged block (shared memory: plain loads, not the global stream).
    static __device__ __forceinline__ void load_staged(Row &r, const block *b, int t) {
        r.head = *(const int4 *)b;
#pragma unroll
        for (int m = 0; m < 4; ++m) {
            r.q[m] = *(const int2 *)(b->qs + 32 * m + 8 * t);
        }
    }

    // A row's 16-byte activation chunk c sits at chunk swizzle(n) ^ c.
    static __device__ __forceinline__ int swizzle(int n) { return 4 * (n & 1); }

    // One super-block: rows[r] is the lane's row g + 8r of the warp's 32 (tiles r / 2). Where
    // `more`, super-block kb_next of the rows wr is loaded into `next` once group 0's
    // fragments are made: a quarter of a step after this step's own loads were waited for,
    // and three quarters before the next step waits for these (the compiler waits for every
    // weight load at once, so loads issued at the top of a step would be waited for at its
    // first use).
    template <int NT>
    static __device__ __forceinline__ void super_block(const Row (&rows)[4], const char *stage,
                                                       float (&acc)[2][NT][4], Row (&next)[4],
                                                       const block *const (&wr)[4], int kb_next,
                                                       bool more) {
        const int g = threadIdx.x / 4, t = threadIdx.x % 4;
        // The four lanes of a row each unpack one group's scales (lane t: group t), and take
        // the others' from them: a quarter of the scale arithmetic.
        uint32_t own_dl2[4][2], own_nml2[4][2];
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            mvf_scales(rows[r].head, t, own_dl2[r], own_nml2[r]);
        }
#pragma unroll
        for (int m = 0; m < 4; ++m) {
            if (m == 1 && more) {
#pragma unroll
                for (int r = 0; r < 4; ++r) {
                    load(next[r], wr[r] + kb_next, t);
                }
            }
            uint32_t dl2[4][2], nml2[4][2];
            const int from = (threadIdx.x & ~3) | m;
#pragma unroll
            for (int r = 0; r < 4; ++r) {
#pragma unroll
                for (int j = 0; j < 2; ++j) {
                    dl2[r][j] = __shfl_sync(FULL_MASK, own_dl2[r][j], from);
                    nml2[r][j] = __shfl_sync(FULL_MASK, own_nml2[r][j], from);
                }
            }
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                // A fragments of steps h = 0, 1 (the code bytes' two halves) for both tiles.
                uint32_t a[2][2][4];
#pragma unroll
                for (int h = 0; h < 2; ++h) {
#pragma unroll
                    for (int tile = 0; tile < 2; ++tile) {
                        const int r0 = 2 * tile, r1 = 2 * tile + 1;
                        const uint32_t v0 = h ? rows[r0].q[m].y : rows[r0].q[m].x;
                        const uint32_t v1 = h ? rows[r1].q[m].y : rows[r1].q[m].x;
                        const uint32_t c0 = (v0 >> (4 * j)) & 0x0F0F0F0Fu;
                        const uint32_t c1 = (v1 >> (4 * j)) & 0x0F0F0F0Fu;
                        const uint2 w0 = q4_quad_f16x2(c0, dl2[r0][j], nml2[r0][j]);
                        const uint2 w1 = q4_quad_f16x2(c1, dl2[r1][j], nml2[r1][j]);
                        a[h][tile][0] = w0.x; // row g, slots 2t, 2t + 1
                        a[h][tile][1] = w1.x; // row g + 8
                        a[h][tile][2] = w0.y; // row g, slots 2t + 8, 2t + 9
                        a[h][tile][3] = w1.y;
                    }
                }
                // Each column tile's activations of both steps in one 16-byte load.
                uint4 b[NT];
                const int c = 8 * m + 4 * j + t;
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) {
                    const int n = 8 * nt + g;
                    b[nt] = *(const uint4 *)(stage + n * MVF_ROW_BYTES + 16 * (c ^ swizzle(n)));
                }
#pragma unroll
                for (int h = 0; h < 2; ++h) {
#pragma unroll
                    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
                        for (int tile = 0; tile < 2; ++tile) {
                            mma_m16n8k16_f16(acc[tile][nt], a[h][tile], h ? b[nt].z : b[nt].x,
                                             h ? b[nt].w : b[nt].y);
                        }
                    }
                }
            }
        }
    }
};

template <> struct MvfFormat<GGML_TYPE_Q6_K> {
    typedef block_q6_K block;
    typedef MvfQ6kRow Row;
    static constexpr int WARPS = 8, TILES = 1;
    static constexpr int WS_ROW = MVF_WS_ROW, WS_CHUNKS = MVF_WS_CHUNKS, WS_SMEM = MVF_WS_SMEM;

    static __device__ __forceinline__ void load(Row &r, const block *b, int t) {
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            r.lo[i] = get_int_b2(b->ql, 4 * i + t);
        }
#pragma unroll
        for (int c = 0; c < 4; ++c) {
            r.hi[c] = get_int_b2(b->qh, 4 * c + t);
            r.sc[c] = get_int_b2(b->scales, c);
        }
        r.d = b->d;
    }

    // Its loads are generic: the same from a staged block.
    static __device__ __forceinline__ void load_staged(Row &r, const block *b, int t) {
        load(r, b, t);
    }

    static __device__ __forceinline__ int swizzle(int n) { return 2 * (n & 3); }

    // One super-block: rows[r] is the lane's row g + 8r of the warp's 16; `next` as Q4_K's.
    template <int NT>
    static __device__ __forceinline__ void super_block(const Row (&rows)[2], const char *stage,
                                                       float (&acc)[1][NT][4], Row (&next)[2],
                                                       const block *const (&wr)[2], int kb_next,
                                                       bool more) {
        const int g = threadIdx.x / 4, t = threadIdx.x % 4;
        float d[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            d[r] = f16_bits_to_f32((uint16_t)rows[r].d);
        }
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            if (i == 2 && more) {
#pragma unroll
                for (int r = 0; r < 2; ++r) {
                    load(next[r], wr[r] + kb_next, t);
                }
            }
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                // Codes: ql's nibble j, qh's bit pair (element / 32) % 4 of the half; scale
                // 8(i / 4) + (i % 4) + 4j.
                const int shift = 2 * ((i % 4) / 2) + 4 * j, k = 8 * (i / 4) + (i % 4) + 4 * j;
                uint32_t a[4];
#pragma unroll
                for (int r = 0; r < 2; ++r) {
                    const uint32_t q = ((rows[r].lo[i] >> (4 * j)) & 0x0F0F0F0Fu) |
                                       (((rows[r].hi[2 * (i / 4) + i % 2] >> shift) & 0x03030303u)
                                        << 4);
                    const float dl = __fmul_rn(d[r], (float)sbyte(rows[r].sc[k / 4], k % 4));
                    const uint2 w = q6_quad_f16x2(q, pack_f16x2(dl, dl));
                    a[r] = w.x;     // row g + 8r, slots 2t, 2t + 1
                    a[2 + r] = w.y; // slots 2t + 8, 2t + 9
                }
                // Elements 128(i / 4) + 16(i % 4) + 64j + 4t..: one 8-byte load a column tile.
                const int c = 16 * (i / 4) + 2 * (i % 4) + 8 * j + t / 2;
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) {
                    const int n = 8 * nt + g;
                    const uint2 b = *(const uint2 *)(stage + n * MVF_ROW_BYTES +
                                                     16 * (c ^ swizzle(n)) + 8 * (t % 2));
                    mma_m16n8k16_f16(acc[0][nt], a, b.x, b.y);
                }
            }
        }
    }
};

// Queue the copy of super-block kb of activation rows 0..8 NT (rows past nrows_y: zeros), each
// row's chunk c at c ^ swizzle(n). A thread copies one chunk c of every STEP-th row from row
// tid / CHUNKS: STEP is a multiple of the swizzle's period, so the chunk's place in each of its
// rows is the same, and its addresses only step (the div/mod form cost ~15 instructions a copy).
template <int TYPE, int NT>
static __device__ __forceinline__ void mvf_stage(char *dst, const uint16_t *x, int ncols,
                                                 int nrows_y, int kb, int tid) {
    typedef MvfFormat<TYPE> F;
    constexpr int CHUNKS = MVF_ROW_BYTES / 16, STEP = F::WARPS * WARP_SIZE / CHUNKS;
    static_assert(STEP % 4 == 0 && (8 * NT) % STEP == 0, "a thread's rows share their swizzle");
    const int c = tid % CHUNKS, n0 = tid / CHUNKS;
    char *d = dst + n0 * MVF_ROW_BYTES + 16 * (c ^ F::swizzle(n0));
    const uint16_t *s = x + (size_t)n0 * ncols + (size_t)kb * 256 + 8 * c;
#pragma unroll
    for (int i = 0; i < 8 * NT / STEP; ++i) {
        const bool live = n0 + STEP * i < nrows_y;
        cp_async16(d + STEP * MVF_ROW_BYTES * i, live ? s : x, live ? 16 : 0);
        s += (size_t)STEP * ncols;
    }
    cp_async_commit();
}

// Queue the copy of super-block kb of the block's weight rows from row0 (rows past nrows re-read
// the last one, never written) into `dst`, a row's WS_CHUNKS 16-byte chunks (Q6_K: the 224-byte
// span round its 210-byte block; Q4_K: its 144-byte block) every WS_ROW bytes; bytes past the
// matrix's end are not read. Not committed: the caller's group takes it.
template <int TYPE>
static __device__ __forceinline__ void mvf_stage_weights(char *dst,
                                                         const typename MvfFormat<TYPE>::block *w,
                                                         int nrows, int bpr, int kb, int tid,
                                                         int row0) {
    typedef MvfFormat<TYPE> F;
    const char *end = (const char *)(w + (size_t)nrows * bpr);
    constexpr int THREADS = F::WARPS * WARP_SIZE;
    for (int i = tid; i < MVF_ROWS * F::WS_CHUNKS; i += THREADS) {
        const int r = i / F::WS_CHUNKS, c = i % F::WS_CHUNKS;
        const typename F::block *b = w + (size_t)min(row0 + r, nrows - 1) * bpr + kb;
        const char *src = (const char *)((size_t)b & ~(size_t)15) + 16 * c;
        const int bytes = src >= end ? 0 : (int)min((ptrdiff_t)16, end - src);
        cp_async16(dst + r * F::WS_ROW + 16 * c, bytes > 0 ? src : (const char *)w, bytes);
    }
}

// Up to MVF_MATS matrices of one format and width on the same activations in one launch (a
// batched step's q, k and v): matrix m takes the grid's row blocks end[m - 1] to end[m], its
// outputs dst[m] and (split through a scratch) part[m]: gridDim.y planes of nrows_y × nrows[m]
// floats. One matrix: end[0] the grid's x. Passed by value (ops/matvec_f16.rs's MvfMatsArg must
// agree).
#define MVF_MATS 3
struct MvfMats {
    const void *w[MVF_MATS];
    float *dst[MVF_MATS];
    float *part[MVF_MATS];
    int nrows[MVF_MATS];
    int end[MVF_MATS];
};

// This block's matrix of mats, picked by selects (an indexed parameter array would be copied
// to local memory), and its row block of it.
struct MvfMat {
    const void *w;
    float *dst, *part;
    int nrows, rb;
};
static __device__ __forceinline__ MvfMat mvf_pick(const MvfMats &mats) {
    const int b = blockIdx.x;
    const bool m0 = b < mats.end[0], m1 = !m0 && b < mats.end[1];
    MvfMat m;
    m.w = m0 ? mats.w[0] : m1 ? mats.w[1] : mats.w[2];
    m.dst = m0 ? mats.dst[0] : m1 ? mats.dst[1] : mats.dst[2];
    m.part = m0 ? mats.part[0] : m1 ? mats.part[1] : mats.part[2];
    m.nrows = m0 ? mats.nrows[0] : m1 ? mats.nrows[1] : mats.nrows[2];
    m.rb = m0 ? b : m1 ? b - mats.end[0] : b - mats.end[1];
    return m;
}

// The block's matrix of mats (mvf_pick), the lane's weight rows g + 8r of the warp's (rows past
// the end re-read the last one, never written) and its share's first super-block of them,
// loaded before the wait on the previous kernel (no kernel writes weights); then the wait. WS:
// the block's first super-block is queued for shared memory instead, in a group of its own.
template <int TYPE> struct MvfStart {
    static constexpr int RL = 2 * MvfFormat<TYPE>::TILES;
    MvfMat mat;                               // the block's matrix (mvf_pick's)
    const typename MvfFormat<TYPE>::block *w; // its weights
    const typename MvfFormat<TYPE>::block *wr[RL];
    typename MvfFormat<TYPE>::Row cur[RL];
};

template <int TYPE, bool WS>
static __device__ __forceinline__ MvfStart<TYPE>
mvf_weights_then_wait(const MvfMats &mats, int ncols, int share) {
    typedef MvfFormat<TYPE> F;
    typedef typename F::block block;
    MvfStart<TYPE> st;
    st.mat = mvf_pick(mats);
    const block *__restrict__ w = (const block *)st.mat.w;
    const int nrows = st.mat.nrows, rb = st.mat.rb;
    st.w = w;
    const int g = threadIdx.x / 4, t = threadIdx.x % 4;
    const int bpr = ncols / QK_K;
    const int row0 = rb * MVF_ROWS + 16 * F::TILES * threadIdx.y;
    const int kb0 = blockIdx.y * share;
#pragma unroll
    for (int r = 0; r < MvfStart<TYPE>::RL; ++r) {
        st.wr[r] = w + (size_t)min(row0 + g + 8 * r, nrows - 1) * bpr;
        if (!WS && kb0 < bpr) {
            F::load(st.cur[r], st.wr[r] + kb0, t);
        }
    }
    if constexpr (WS) {
        extern __shared__ __align__(16) char smem[];
        if (mmq_dynamic_smem() < (unsigned)F::WS_SMEM) {
            __trap(); // launched with less shared memory than the copies below fill
        }
        if (kb0 < bpr) {
            mvf_stage_weights<TYPE>(smem + 2 * MVF_STAGE_BYTES, w, nrows, bpr, kb0,
                                    threadIdx.y * WARP_SIZE + threadIdx.x, rb * MVF_ROWS);
        }
        cp_async_commit();
        dependent_launch_entry();
        return st;
    }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    // The rest of the share's rows asked of L2 in one bulk request a row (lane t == 0 of its
    // four), so that each later step's loads wait on L2, not on memory; the request needs 16-byte
    // alignment and size, which Q4_K's 144-byte blocks have and Q6_K's 210 do not.
    const int rest = min(bpr, kb0 + share) - kb0 - 1;
    if (sizeof(block) % 16 == 0 && t == 0 && rest > 0) {
#pragma unroll
        for (int r = 0; r < MvfStart<TYPE>::RL; ++r) {
            asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(st.wr[r] + kb0 + 1),
                         "r"(rest * (int)sizeof(block))
                         : "memory");
        }
    }
#endif
    dependent_launch_entry();
    return st;
}

// A row block's shares added in its cluster (FERROLM_F16_MATVEC_CLUSTER; sm_90): the launch
// makes each row block's gridDim.y shares one cluster, and each block leaves its share of the
// tile in its own shared memory, outputs [col][row] MVF_SUM_LD floats apart (the pad puts a
// warp's stores in 32 banks); after the cluster's barrier, block z adds every z'th float4 of
// the tile over the blocks in share order, as add_split_planes does (the same bits), and writes
// it to dst; a second barrier keeps each block's memory until the others have read it. No
// scratch, no counter, no last block: the sum is spread over the cluster's SMs and stays on
// chip.
#define MVF_SUM_LD (MVF_ROWS + 4)
// The most shares a cluster sum takes (the portable cluster size).
#define MVF_CLUSTER_MAX 8
static_assert(MVF_MAX_COLS * MVF_SUM_LD * 4 <= MVF_SMEM, "the tile fits the stages");
template <int TILES, int NT>
static __device__ __forceinline__ void mvf_cluster_sum(const float (&acc)[TILES][NT][4],
                                                       float *__restrict__ dst, int nrows,
                                                       int nrows_y, int row0, int tid,
                                                       int threads) {
    extern __shared__ __align__(16) char smem[];
    float *tile = (float *)smem;
    const int g = threadIdx.x / 4, t = threadIdx.x % 4;
    __syncthreads(); // every warp is done with the stages this overwrites
#pragma unroll
    for (int tl = 0; tl < TILES; ++tl) {
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int r = 16 * TILES * threadIdx.y + 16 * tl + g + 8 * (i / 2);
                tile[(8 * nt + 2 * t + i % 2) * MVF_SUM_LD + r] = acc[tl][nt][i];
            }
        }
    }
    cluster_arrive_release();
    cluster_wait();
    const int splits = gridDim.y, quads = MVF_ROWS / 4;
    // Each block's tile as the cluster addresses it (a block's window is linear).
    uint32_t base[MVF_CLUSTER_MAX];
#pragma unroll
    for (int z = 0; z < MVF_CLUSTER_MAX; ++z) {
        base[z] = z < splits ? cluster_smem(tile, z) : 0;
    }
    for (int u = blockIdx.y * threads + tid; u < 8 * NT * quads; u += splits * threads) {
        const int col = u / quads, r = 4 * (u % quads);
        const uint32_t at = 4 * (col * MVF_SUM_LD + r);
        // Every share's float4 asked for at once, then added in share order.
        float4 v[MVF_CLUSTER_MAX];
#pragma unroll
        for (int z = 0; z < MVF_CLUSTER_MAX; ++z) {
            if (z < splits) {
                v[z] = load_in_cluster(base[z] + at);
            }
        }
        float4 sum = v[0];
#pragma unroll
        for (int z = 1; z < MVF_CLUSTER_MAX; ++z) {
            if (z < splits) {
                add_float4_rn(sum, v[z]);
            }
        }
        const float s4[4] = {sum.x, sum.y, sum.z, sum.w};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            if (col < nrows_y && row0 + r + e < nrows) {
                dst[(size_t)col * nrows + row0 + r + e] = s4[e];
            }
        }
    }
    cluster_arrive_relaxed();
    cluster_wait();
}

// `share` super-blocks a split (gridDim.y of them); the block's st.mat.part: gridDim.y ×
// nrows_y × st.mat.nrows floats and done: a zeroed counter per row block of the grid, when
// gridDim.y > 1 and the shares are not one cluster. st as mvf_weights_then_wait leaves it. WS:
// the weights through shared memory (F::WS_SMEM), the same arithmetic in the same order: the
// same bits as the register path.
template <int TYPE, int NT, bool WS>
static __device__ __forceinline__ void matvec_f16(MvfStart<TYPE> &st,
                                                  const uint16_t *__restrict__ x, int ncols,
                                                  int nrows_y, unsigned *__restrict__ done,
                                                  int share) {
    float *__restrict__ dst = st.mat.dst;
    float *__restrict__ part = st.mat.part;
    const int nrows = st.mat.nrows;
    typedef MvfFormat<TYPE> F;
    constexpr int RL = MvfStart<TYPE>::RL, THREADS = F::WARPS * WARP_SIZE;
    extern __shared__ __align__(16) char smem[];
    const int lane = threadIdx.x, g = lane / 4, t = lane % 4;
    const int tid = threadIdx.y * WARP_SIZE + lane;
    const int bpr = ncols / QK_K;
    const int first = st.mat.rb * MVF_ROWS, row0 = first + 16 * F::TILES * threadIdx.y;
    const int kb0 = blockIdx.y * share, kb1 = min(bpr, kb0 + share);
    if (mmq_dynamic_smem() < (unsigned)(WS ? F::WS_SMEM : MVF_SMEM)) {
        __trap(); // launched with less shared memory than the layout needs
    }
    float acc[F::TILES][NT][4];
#pragma unroll
    for (int tile = 0; tile < F::TILES; ++tile) {
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                acc[tile][nt][i] = 0.0f;
            }
        }
    }
    if (kb0 < kb1) {
        mvf_stage<TYPE, NT>(smem, x, ncols, nrows_y, kb0, tid);
    }
    // Two register sets of weights taken in turn (a copy from one to the other would be
    // hoisted by the compiler, and wait for the loads it copies): step kb reads one and fills
    // the other with kb + 1; the stage is the step's parity too.
    typename F::Row alt[RL];
#pragma unroll 1
    for (int kb = kb0; kb < kb1; kb += 2) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int k = kb + half;
            if (k < kb1) {
                typename F::Row(&use)[RL] = half ? alt : st.cur;
                typename F::Row(&fill)[RL] = half ? st.cur : alt;
                cp_async_wait<0>(); // this thread's copies of super-block k
                __syncthreads();    // everyone's; and every warp is done with k - 1's stage
                if (k + 1 < kb1) {
                    if constexpr (WS) {
                        mvf_stage_weights<TYPE>(smem + 2 * MVF_STAGE_BYTES +
                                                    (half ^ 1) * MVF_ROWS * F::WS_ROW,
                                                st.w, nrows, bpr, k + 1, tid, first);
                    }
                    mvf_stage<TYPE, NT>(smem + (half ^ 1) * MVF_STAGE_BYTES, x, ncols, nrows_y,
                                        k + 1, tid);
                }
                if constexpr (WS) {
                    // The warp's rows of super-block k, from the stage at the blocks' offset
                    // in their spans (the same for every row), as the register path holds them.
                    const int off = (int)((size_t)(st.wr[0] + k) & 15);
                    const char *ws = smem + 2 * MVF_STAGE_BYTES + half * MVF_ROWS * F::WS_ROW + off;
#pragma unroll
                    for (int r = 0; r < RL; ++r) {
                        const int rr = 16 * F::TILES * threadIdx.y + g + 8 * r;
                        F::load_staged(use[r], (const typename F::block *)(ws + rr * F::WS_ROW),
                                       t);
                    }
                }
                F::template super_block<NT>(use, smem + half * MVF_STAGE_BYTES, acc, fill, st.wr,
                                            k + 1, !WS && k + 1 < kb1);
            }
        }
    }

    // One share: straight to dst; several in one cluster: added there (mvf_cluster_sum);
    // several otherwise: this share to part[z], then the row block's last.
    const int splits = gridDim.y;
    if (splits > 1 && splits <= MVF_CLUSTER_MAX && (int)cluster_blocks() == splits) {
        mvf_cluster_sum<F::TILES, NT>(acc, dst, nrows, nrows_y, first, tid, THREADS);
        return;
    }
    float *out = splits == 1 ? dst : part + (size_t)blockIdx.y * nrows_y * nrows;
#pragma unroll
    for (int tile = 0; tile < F::TILES; ++tile) {
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int row = row0 + 16 * tile + g + 8 * (i / 2), col = 8 * nt + 2 * t + i % 2;
                if (row < nrows && col < nrows_y) {
                    out[(size_t)col * nrows + row] = acc[tile][nt][i];
                }
            }
        }
    }
    if (splits == 1) {
        return;
    }
    add_splits_if_last<16>(done, blockIdx.x, dst, part, (size_t)nrows_y * nrows, splits,
                               nrows, 0, nrows_y, first, min(MVF_ROWS, nrows - first), tid,
                               THREADS);
}

// 8 warps an SM: Q4_K two blocks of 4 (255 registers a thread at most), Q6_K one of 8; 64 KB of
// shared memory a block.
#define MVF_ENTRY_AS(NAME, TYPE, NT, WS)                                                          \
    extern "C" __global__ void __launch_bounds__(MvfFormat<TYPE>::WARPS *WARP_SIZE,               \
                                                 8 / MvfFormat<TYPE>::WARPS)                      \
        matvec_f16_##NAME##_t##NT(const MvfMats mats, const uint16_t *__restrict__ x, int ncols,  \
                                  int nrows_y, unsigned *done, int share) {                       \
        MvfStart<TYPE> st = mvf_weights_then_wait<TYPE, WS>(mats, ncols, share);                  \
        matvec_f16<TYPE, NT, WS>(st, x, ncols, nrows_y, done, share);                             \
    }
#define MVF_ENTRY(NAME, TYPE, NT) MVF_ENTRY_AS(NAME, TYPE, NT, false)

// Column tiles 1-8 (1-64 rows).
#define MVF_FORMAT(NAME, TYPE)                                                                    \
    MVF_ENTRY(NAME, TYPE, 1)                                                                      \
    MVF_ENTRY(NAME, TYPE, 2)                                                                      \
    MVF_ENTRY(NAME, TYPE, 3)                                                                      \
    MVF_ENTRY(NAME, TYPE, 4)                                                                      \
    MVF_ENTRY(NAME, TYPE, 5)                                                                      \
    MVF_ENTRY(NAME, TYPE, 6)                                                                      \
    MVF_ENTRY(NAME, TYPE, 7)                                                                      \
    MVF_ENTRY(NAME, TYPE, 8)

MVF_FORMAT(q4_k, GGML_TYPE_Q4_K)
MVF_FORMAT(q6_k, GGML_TYPE_Q6_K)
// Q4_K with its weights through shared memory (MVF_WS4_SMEM bytes), column tiles 1-8.
MVF_ENTRY_AS(q4_k_ws, GGML_TYPE_Q4_K, 1, true)
MVF_ENTRY_AS(q4_k_ws, GGML_TYPE_Q4_K, 2, true)
MVF_ENTRY_AS(q4_k_ws, GGML_TYPE_Q4_K, 3, true)
MVF_ENTRY_AS(q4_k_ws, GGML_TYPE_Q4_K, 4, true)
MVF_ENTRY_AS(q4_k_ws, GGML_TYPE_Q4_K, 5, true)
MVF_ENTRY_AS(q4_k_ws, GGML_TYPE_Q4_K, 6, true)
MVF_ENTRY_AS(q4_k_ws, GGML_TYPE_Q4_K, 7, true)
MVF_ENTRY_AS(q4_k_ws, GGML_TYPE_Q4_K, 8, true)
// Q6_K with its weights through shared memory (MVF_WS_SMEM bytes), column tiles 1-8.
MVF_ENTRY_AS(q6_k_ws, GGML_TYPE_Q6_K, 1, true)
MVF_ENTRY_AS(q6_k_ws, GGML_TYPE_Q6_K, 2, true)
MVF_ENTRY_AS(q6_k_ws, GGML_TYPE_Q6_K, 3, true)
MVF_ENTRY_AS(q6_k_ws, GGML_TYPE_Q6_K, 4, true)
MVF_ENTRY_AS(q6_k_ws, GGML_TYPE_Q6_K, 5, true)
MVF_ENTRY_AS(q6_k_ws, GGML_TYPE_Q6_K, 6, true)
MVF_ENTRY_AS(q6_k_ws, GGML_TYPE_Q6_K, 7, true)
MVF_ENTRY_AS(q6_k_ws, GGML_TYPE_Q6_K, 8, true)
