// Flash-attention prefill on the f16 tensor cores (mma.sync m16n8k16, f16·f16 → f32), over the
// paged f16 KV cache of attention.cu (common.cuh's KvPages). The scalar attn_prefill in
// attention.cu computes the same function in f32 and stays as the reference path.
//
//   out[t][h] = Σ_k softmax_k(q[t][h] · K[k][g] / sqrt(D)) · V[k][g],  k = first..=pos[t],
//   g = h / (n_head / n_kv_head), first = attn_first_key(pos[t] + 1, window) (0 without one).
//
// Rounding (the contract stated in cuda-parity): Q is scaled by scale·log2(e) and rounded to
// f16 once; the probabilities P = 2^(S - m) are rounded to f16 before P·V, and the row sums l
// add those rounded values (so the output is an exact convex combination of V rows in the
// rounded weights). Every product is accumulated in f32; m, l and O stay f32 in registers.
//
// Launch (crates/cuda/src/ops/attention.rs must agree): block FA_NWARPS warps; grid
// (ceil(n_q * group / FA_BQ), n_kv_head), group = n_head / n_kv_head; dynamic shared memory
// FA_STAGES * 2 * FA_BK * (D + FA_PAD) halves. A block owns FA_BQ "rows", each a (token, query
// head) pair of one KV group, numbered token-major (row r: token r / group, head r % group of
// the group), so the K/V tiles it stages serve every query head that shares them. Warp w owns
// rows 16w..16w+15. Key tiles of FA_BK keys are copied with cp.async, two stages deep, and only
// up to the largest position of the block's rows, from the tile of the first key any of them
// sees (a sliding window skips the tiles before it); a tile is masked only when some row of
// the block stops inside it or, with a window, starts after its first key. Rows past n_q are
// computed as if at position 0 and never written. A head's sink (`sinks` not null) joins its
// row's maximum and sum once, after the keys.
#include "common.cuh"
#include "mma_f16.cuh"

#define FA_NWARPS 4
#define FA_BQ (16 * FA_NWARPS)
#define FA_BK 64
#define FA_STAGES 2
// Halves of padding per shared row: rows FA_PAD * 2 = 16 bytes apart modulo 128, so the eight
// 16-byte rows one ldmatrix 8×8 reads land in distinct banks.
#define FA_PAD 8
#define FA_NEG_INF __int_as_float(0xff800000)
#define FA_LOG2E 1.4426950408889634f

// Two f32 rounded to f16 (nearest even), lo in the low half: one register of an mma fragment.
static __device__ __forceinline__ uint32_t fa_pack(float lo, float hi) {
    return (uint32_t)f32_to_f16_bits(lo) | ((uint32_t)f32_to_f16_bits(hi) << 16);
}

static __device__ __forceinline__ float fa_lo(uint32_t x) {
    return f16_bits_to_f32((uint16_t)(x & 0xffffu));
}

static __device__ __forceinline__ float fa_hi(uint32_t x) {
    return f16_bits_to_f32((uint16_t)(x >> 16));
}

// A running maximum to subtract: 0 while a row has seen no key (m = -inf), so that every score
// (-inf too) minus it is -inf or finite and its exponent 0 or finite, never NaN.
static __device__ __forceinline__ float fa_finite(float m) {
    return m == FA_NEG_INF ? 0.0f : m;
}

// Queues the copy of keys k0..k0+FA_BK-1 of K and V into one stage; keys >= n_keys are zeros.
template <int D>
static __device__ __forceinline__ void fa_load_tile(uint16_t *stage, const uint16_t *kc,
                                                    const uint16_t *vc, KvPages pages, int kvh,
                                                    int k0, int n_keys) {
    constexpr int STRIDE = D + FA_PAD, CHUNKS = D / 8, TILE = FA_BK * STRIDE;
    for (int i = threadIdx.x; i < FA_BK * CHUNKS; i += FA_NWARPS * WARP_SIZE) {
        const int key = i / CHUNKS, c = i % CHUNKS;
        const bool valid = k0 + key < n_keys;
        const size_t at = pages.row(kvh, valid ? k0 + key : 0) * D + 8 * c;
        const uint32_t dst = shared_addr(stage + key * STRIDE + 8 * c);
        cp_async16_to(dst, kc + at, valid ? 16 : 0);
        cp_async16_to(dst + TILE * 2, vc + at, valid ? 16 : 0);
    }
}

template <int D>
static __device__ __forceinline__ void flash_prefill(
    const float *__restrict__ q, const uint16_t *__restrict__ kc, const uint16_t *__restrict__ vc,
    const uint32_t *__restrict__ pos, float *__restrict__ out, int n_q, int n_head, int n_kv_head,
    KvPages pages, float scale, int window, const float *__restrict__ sinks) {
    constexpr int STRIDE = D + FA_PAD; // halves per shared row
    constexpr int TILE = FA_BK * STRIDE;
    static_assert(D % 16 == 0 && D <= 128, "whole k-steps; O and Q fit the registers to 128");
    constexpr int DK = D / 16;      // k-steps of S = Q·Kᵀ (odd for D = 80)
    constexpr int DN = D / 8;       // 8-wide column tiles of O
    constexpr int KN = FA_BK / 8;   // 8-key column tiles of S
    constexpr int KC = FA_BK / 16;  // 16-key k-steps of O += P·V
    extern __shared__ __align__(16) uint16_t fa_tiles[]; // [FA_STAGES][K tile, V tile]
    __shared__ int s_max_pos, s_min_pos;

    const int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
    const int g = lane / 4, t4 = lane % 4;
    const int group = n_head / n_kv_head, kvh = blockIdx.y;
    // Later rows see more keys: the heaviest blocks start first.
    const int row_base = (gridDim.x - 1 - blockIdx.x) * FA_BQ + warp * 16 + g;

    if (threadIdx.x == 0) {
        s_max_pos = 0;
        s_min_pos = 0x7fffffff;
    }
    __syncthreads();
    // This thread's two rows (fragment rows g and g + 8 of its warp).
    int row_pos[2], row_first[2], row_head[2];
    bool active[2];
    size_t row_at[2]; // element offset of the row in q and out
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        const int r = row_base + 8 * i, t = r / group;
        active[i] = t < n_q;
        row_pos[i] = active[i] ? (int)pos[t] : 0;
        row_first[i] = attn_first_key(row_pos[i] + 1, window);
        row_head[i] = kvh * group + r % group;
        row_at[i] = ((size_t)t * n_head + row_head[i]) * D;
        if (active[i] && t4 == 0) {
            atomicMax(&s_max_pos, row_pos[i]);
            atomicMin(&s_min_pos, row_pos[i]);
        }
    }

    // Q as A fragments, scaled into the log2 domain and rounded to f16 once.
    const float qs = scale * FA_LOG2E;
    uint32_t qf[DK][4];
#pragma unroll
    for (int kk = 0; kk < DK; ++kk) {
#pragma unroll
        for (int half = 0; half < 2; ++half) { // columns 16kk + 2t4 (+ 8)
#pragma unroll
            for (int i = 0; i < 2; ++i) { // rows g, g + 8
                float2 v = make_float2(0.0f, 0.0f);
                if (active[i]) {
                    v = *(const float2 *)(q + row_at[i] + 16 * kk + 8 * half + 2 * t4);
                }
                qf[kk][2 * half + i] = fa_pack(v.x * qs, v.y * qs);
            }
        }
    }
    __syncthreads();
    const int n_keys = s_max_pos + 1;  // keys any row of the block sees
    const int all_see = s_min_pos + 1; // keys every row sees: no mask needed below this
    // The window: keys from the first the earliest row sees; below the last row's first key
    // some row masks (never when window is 0: both are 0).
    const int lo = attn_first_key(all_see, window), masked_below = attn_first_key(n_keys, window);

    float o[DN][4];
#pragma unroll
    for (int j = 0; j < DN; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            o[j][e] = 0.0f;
        }
    }
    float m[2] = {FA_NEG_INF, FA_NEG_INF}, l[2] = {0.0f, 0.0f};

    const int tile0 = lo / FA_BK, n_tiles = (n_keys + FA_BK - 1) / FA_BK - tile0;
    fa_load_tile<D>(fa_tiles, kc, vc, pages, kvh, tile0 * FA_BK, n_keys);
    cp_async_commit();
    for (int it = 0; it < n_tiles; ++it) {
        const int k0 = (tile0 + it) * FA_BK;
        if (it + 1 < n_tiles) {
            fa_load_tile<D>(fa_tiles + ((it + 1) % FA_STAGES) * 2 * TILE, kc, vc, pages, kvh,
                            k0 + FA_BK, n_keys);
        }
        cp_async_commit(); // possibly empty: keeps "all but one group" meaning tile it
        cp_async_wait<1>();
        __syncthreads();
        const uint16_t *ks = fa_tiles + (it % FA_STAGES) * 2 * TILE;
        const uint16_t *vs = ks + TILE;

        // S = Q·Kᵀ: 16 rows × FA_BK keys per warp. One ldmatrix.x4 gives the B fragments of two
        // k-steps of one 8-key tile (K rows are the B columns, so no transpose); an odd last
        // k-step (D = 80) takes an x2.
        float s[KN][4];
#pragma unroll
        for (int j = 0; j < KN; ++j) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                s[j][e] = 0.0f;
            }
#pragma unroll
            for (int kk = 0; kk + 1 < DK; kk += 2) {
                uint32_t b[4];
                const uint16_t *row = ks + (8 * j + lane % 8) * STRIDE;
                ldmatrix_b16_x4(b, shared_addr(row + 16 * kk + 8 * (lane / 8)));
                mma_m16n8k16_f16(s[j], qf[kk], b[0], b[1]);
                mma_m16n8k16_f16(s[j], qf[kk + 1], b[2], b[3]);
            }
            if constexpr (DK % 2 != 0) {
                uint32_t b[2];
                const uint16_t *row = ks + (8 * j + lane % 8) * STRIDE;
                ldmatrix_b16_x2(b, shared_addr(row + 16 * (DK - 1) + 8 * (lane / 8 % 2)));
                mma_m16n8k16_f16(s[j], qf[DK - 1], b[0], b[1]);
            }
        }
        // Causal and window mask: element e of tile j is row g + 8(e / 2), key k0 + 8j + 2t4 +
        // e % 2.
        if (k0 + FA_BK > all_see || k0 < masked_below) {
#pragma unroll
            for (int j = 0; j < KN; ++j) {
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int key = k0 + 8 * j + 2 * t4 + e % 2;
                    if (key > row_pos[e / 2] || key < row_first[e / 2]) {
                        s[j][e] = FA_NEG_INF;
                    }
                }
            }
        }

        // Online softmax. Without a window key 0 is in the first tile and every row sees it;
        // with one a row may see none of a tile before its first key, so its m stays -inf
        // until then: the exponents then subtract 0 instead (corr e^-inf = 0, P 0), never
        // -inf - -inf.
        float m_new[2] = {m[0], m[1]};
#pragma unroll
        for (int j = 0; j < KN; ++j) {
            m_new[0] = fmaxf(m_new[0], fmaxf(s[j][0], s[j][1]));
            m_new[1] = fmaxf(m_new[1], fmaxf(s[j][2], s[j][3]));
        }
#pragma unroll
        for (int i = 0; i < 2; ++i) { // the four lanes of a row hold its 64 keys
            m_new[i] = fmaxf(m_new[i], __shfl_xor_sync(FULL_MASK, m_new[i], 1));
            m_new[i] = fmaxf(m_new[i], __shfl_xor_sync(FULL_MASK, m_new[i], 2));
            const float corr = exp2f(m[i] - fa_finite(m_new[i])); // 0 on a row's first keys
            m[i] = m_new[i];
            l[i] *= corr;
#pragma unroll
            for (int j = 0; j < DN; ++j) {
                o[j][2 * i] *= corr;
                o[j][2 * i + 1] *= corr;
            }
        }
        // P as A fragments of P·V: k-step c covers S tiles 2c (registers 0, 1) and 2c + 1 (2, 3).
        uint32_t pf[KC][4];
#pragma unroll
        for (int c = 0; c < KC; ++c) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
#pragma unroll
                for (int i = 0; i < 2; ++i) {
                    const float *sj = s[2 * c + h];
                    const float mi = fa_finite(m[i]);
                    const uint32_t p = fa_pack(exp2f(sj[2 * i] - mi), exp2f(sj[2 * i + 1] - mi));
                    pf[c][2 * h + i] = p;
                    l[i] += fa_lo(p) + fa_hi(p);
                }
            }
        }

        // O += P·V: V rows are keys (the k dimension), so ldmatrix.trans; one x4 gives the B
        // fragments of one 16-key step for two 8-wide column tiles.
#pragma unroll
        for (int c = 0; c < KC; ++c) {
#pragma unroll
            for (int j = 0; j < DN; j += 2) {
                uint32_t b[4];
                const uint16_t *row = vs + (16 * c + lane % 8 + 8 * (lane / 8 % 2)) * STRIDE;
                ldmatrix_b16_x4_trans(b, shared_addr(row + 8 * j + 8 * (lane / 16)));
                mma_m16n8k16_f16(o[j], pf[c], b[0], b[1]);
                mma_m16n8k16_f16(o[j + 1], pf[c], b[2], b[3]);
            }
        }
        __syncthreads(); // this stage is refilled by the copy queued in the next iteration
    }

#pragma unroll
    for (int i = 0; i < 2; ++i) {
        l[i] += __shfl_xor_sync(FULL_MASK, l[i], 1);
        l[i] += __shfl_xor_sync(FULL_MASK, l[i], 2);
        if (!active[i]) {
            continue;
        }
        // The head's sink (gpt-oss), in the log2 domain: in the maximum and the sum, no value.
        float corr = 1.0f;
        if (sinks != nullptr) {
            const float sk = sinks[row_head[i]] * FA_LOG2E;
            const float m_new = fmaxf(m[i], sk);
            corr = exp2f(m[i] - m_new);
            l[i] = l[i] * corr + exp2f(sk - m_new);
        }
        const float inv = corr / l[i];
#pragma unroll
        for (int j = 0; j < DN; ++j) {
            *(float2 *)(out + row_at[i] + 8 * j + 2 * t4) =
                make_float2(o[j][2 * i] * inv, o[j][2 * i + 1] * inv);
        }
    }
}

#define FLASH_INSTANCE(D)                                                                         \
    extern "C" __global__ void __launch_bounds__(FA_NWARPS *WARP_SIZE) flash_attn_prefill_d##D(  \
        const float *q, const uint16_t *kc, const uint16_t *vc, const uint32_t *pos, float *out,  \
        int n_q, int n_head, int n_kv_head, KvPages pages, float scale, int window,               \
        const float *sinks) {                                                                     \
        dependent_launch_entry();                                                                 \
        flash_prefill<D>(q, kc, vc, pos, out, n_q, n_head, n_kv_head, pages, scale, window,       \
                         sinks);                                                                  \
    }

// Head sizes to 128 (ops/attention.rs's MMA_HEAD_DIMS); at 256 the Q fragments and the O
// accumulator alone would take 192 registers a thread, so the plan runs the scalar prefill.
FLASH_INSTANCE(32)
FLASH_INSTANCE(64)
FLASH_INSTANCE(80)
FLASH_INSTANCE(96)
FLASH_INSTANCE(128)
