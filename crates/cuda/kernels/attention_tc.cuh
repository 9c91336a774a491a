// Decode by KV group on the tensor cores (FERROLM_ATTN_TC; attention.cu's attn_decode_group_tc
// for one sequence's rows, attention_rows.cu's attn_decode_rows_tc for a batch's): the
// attention_group.cuh block's formula and partials, with its two products on f16 mma.sync
// (m16n8k16, f32 accumulators) instead of f32 FMAs a key and head:
// - scores S[32 keys][8 heads] = K · qᵀ: the keys are f16 (exact in an f16 operand); q is f32,
//   so it goes in as two f16 terms, q = q_hi + 2⁻¹¹ q_lo (q_hi = f16(q), q_lo = f16(2¹¹ (q -
//   q_hi)): the low term scaled up out of f16's subnormals), about 2⁻²² of |q| apart. Warp w
//   takes keys 16 (w % 2).. of the tile over the dimensions' half w / 2, each K fragment into
//   both terms' MMAs, and the two halves are added after. q is first scaled by a power of two
//   where its largest element would pass f16's range, the scores by its inverse after (exact);
// - the softmax step a warp a head (heads w and w + 4), a lane a key, as the group block's;
//   its weights P in [0, 1] become P_hi + 2⁻¹¹ P_lo the same way;
// - O[D][8 heads] = O corr + Vᵀ · Pᵀ: warp w takes the 16-dimension slices w, w + 4, .. of
//   the output for every head, V's rows read transposed by ldmatrix; each tile's two products
//   start from zero and join O in f32 (the tensor cores' own sums, which truncate, stay within
//   32 keys).
// K and V tiles come in by cp.async as in the group block, each 16-byte chunk c of row r at
// chunk c ^ (r % 8), so the eight rows an ldmatrix phase reads fall in distinct banks (D a
// multiple of 64). Heads past G are zero queries and zero weights.
// Against the group block: the same formula in another f32 order (each MMA's sums), with
// q and P carried to about 2⁻²² relative: within cuda-parity's f32 attention bound. Partials
// as attn_decode_split writes them; with `done`, the group's last block combines its G heads
// (group_combine_when_last).
#pragma once
#include "attention_group.cuh"
#include "mma_f16.cuh"

#define TC_TILE ATTN_GROUP_TILE // keys a tile: two MMA row blocks of 16

// Shared memory, in bytes from its start: STAGES stages of a K and a V tile [32 keys][D]
// f16 (chunks swizzled); q_hi and q_lo [8 heads][D + 8] f16 (rows padded so the eight heads
// of a B fragment fall in distinct banks); the scores over the dimensions' two halves [2][32
// keys][9] f32 (a head a column, padded so a warp's 32 keys of one head fall in distinct
// banks);
// P_hi and P_lo [8 heads][40] f16; each head's rescale factor [8] f32; the prescale's
// exponent. The combine reuses all of it.
template <int D, int G, int STAGES_> struct TcLayout {
    static constexpr int CHUNKS = D / 8;
    static constexpr int TILE_BYTES = TC_TILE * D * 2;
    static constexpr int STAGE_BYTES = 2 * TILE_BYTES;
    static constexpr int STAGES = STAGES_ > 0 ? STAGES_ : group_stages(D);
    static constexpr int Q_STRIDE = D + 8; // halves
    static constexpr int P_STRIDE = TC_TILE + 8;
    static constexpr int Q_HI = STAGES * STAGE_BYTES;
    static constexpr int Q_LO = Q_HI + 8 * Q_STRIDE * 2;
    static constexpr int S = Q_LO + 8 * Q_STRIDE * 2;
    static constexpr int S_STRIDE = 9; // floats a key
    static constexpr int P_HI = S + 2 * TC_TILE * S_STRIDE * 4;
    static constexpr int P_LO = P_HI + 8 * P_STRIDE * 2;
    static constexpr int CORR = P_LO + 8 * P_STRIDE * 2;
    static constexpr int SHIFT = CORR + 8 * 4;
    static constexpr int END = SHIFT + 16;
    static constexpr int COMBINE_BYTES = ATTN_COMBINE_SCRATCH(G) * 4;
    static constexpr int BYTES = END > COMBINE_BYTES ? END : COMBINE_BYTES;
    static_assert(D % 64 == 0 && G <= 8 && STAGES >= 2, "head sizes of whole 8-chunk groups");
};

// x as f16 bits (nearest even) and the f16 bits of what that leaves times 2^11 (exact: a
// power of two), so that hi + 2^-11 lo is x to about 2^-22 without f16's subnormals.
#define TC_LO_SCALE 2048.0f
#define TC_LO_UNSCALE (1.0f / 2048.0f)
static __device__ __forceinline__ void tc_split(float x, uint16_t &hi, uint16_t &lo) {
    hi = f32_to_f16_bits(x);
    lo = f32_to_f16_bits((x - f16_bits_to_f32(hi)) * TC_LO_SCALE);
}

// Byte offset of chunk c of row r in a swizzled [rows][D] f16 tile.
template <int D> static __device__ __forceinline__ int tc_chunk(int r, int c) {
    return (r * (D / 8) + (c ^ (r & 7))) * 16;
}

// Byte offset of chunk c of row r of a K or V tile (both swizzled alike), as copy_kv_tile and
// a Rot's patch take it.
template <int D> struct TcOffset {
    __device__ __forceinline__ int operator()(bool, int r, int c) const {
        return tc_chunk<D>(r, c);
    }
};

// Starts the copy of keys base.. (n live) into stage `stage`, zero-filled past the live keys,
// but for key `skip` (copy_kv_tile's), which `rot` then writes (patch).
template <int D, int G, int STAGES, typename Rot>
static __device__ __forceinline__ void tc_load_tile(char *smem, const KvHead<KvF16> &kh,
                                                    const KvHead<KvF16> &vh, int base, int n,
                                                    int stage, const Rot &rot) {
    typedef TcLayout<D, G, STAGES> L;
    char *sk = smem + stage * L::STAGE_BYTES, *sv = sk + L::TILE_BYTES;
    copy_kv_tile<TC_TILE, L::CHUNKS>(sk, sv, kh, vh, base, n, TcOffset<D>(), rot.skip());
}

// attn_group_block's contract and arguments (attention_group.cuh), on the tensor cores. `rot`
// gives the G heads' queries (QueriesInMemory: q_row's; attention.cu's AttnRotate: normed and
// rotated here) and may hold the newest key itself: rot.skip() names the key the tile copies
// leave out and rot.patch writes it into the tile's stage (any thread; before the barrier
// ahead of the tile's use). rot's shared memory: from TcLayout::BYTES on.
template <int D, int G, int STAGES = 0, typename Rot = QueriesInMemory<D>>
static __device__ __forceinline__ void attn_group_block_tc(
    Rot rot, const uint16_t *__restrict__ kc, const uint16_t *__restrict__ vc, KvPages pages,
    int n_keys, int split, int n_split, int g, float *__restrict__ part_m,
    float *__restrict__ part_l, float *__restrict__ part_acc, int *__restrict__ done,
    float *__restrict__ out_row, float scale, int window, const float *__restrict__ sinks) {
    typedef TcLayout<D, G, STAGES> L;
    constexpr int MT = D / 16 / ATTN_NWARPS; // 16-dimension output slices a warp
    constexpr int HW = (G + ATTN_NWARPS - 1) / ATTN_NWARPS; // heads a warp's softmax
    static_assert(ATTN_NWARPS == 4 && TC_TILE == 32, "warp roles");
    extern __shared__ __align__(16) char smem[];
    uint16_t *qhi = (uint16_t *)(smem + L::Q_HI), *qlo = (uint16_t *)(smem + L::Q_LO);
    float *ss = (float *)(smem + L::S); // [2][32 keys][S_STRIDE]: a head a column
    uint16_t *phi = (uint16_t *)(smem + L::P_HI), *plo = (uint16_t *)(smem + L::P_LO);
    float *corr_s = (float *)(smem + L::CORR);
    int *shift_s = (int *)(smem + L::SHIFT);
    const int h0 = rot.first_head(g, G);
    const int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
    const int gq = lane / 4, tq = lane % 4; // MMA fragment coordinates
    const GroupSplit range(n_keys, window, split, n_split);
    const int k0 = range.k0, k1 = range.k1, n_tiles = range.tiles(TC_TILE);
    const KvHead<KvF16> kh(kc, pages, g, D), vh(vc, pages, g, D);
#pragma unroll
    for (int s = 0; s < L::STAGES - 1; ++s) {
        if (s < n_tiles) {
            const int base = k0 + s * TC_TILE;
            tc_load_tile<D, G, STAGES>(smem, kh, vh, base, min(TC_TILE, k1 - base), s, rot);
        }
        cp_async_commit(); // possibly empty: group i stays tile i
    }
    const float *qg = rot.queries(smem + L::BYTES, h0, g, k0, k1);
    // q's largest magnitude sets the prescale: 2^-shift brings it under 2^15, f16's range.
    if (threadIdx.x == 0) {
        *shift_s = 0;
    }
    __syncthreads(); // (and rot's queries and key are in shared memory)
#pragma unroll
    for (int s = 0; s < L::STAGES - 1; ++s) {
        if (s < n_tiles) {
            char *sk = smem + s * L::STAGE_BYTES;
            rot.patch(sk, sk + L::TILE_BYTES, k0 + s * TC_TILE, TcOffset<D>());
        }
    }
    {
        float amax = 0.0f;
        for (int i = threadIdx.x; i < G * D; i += blockDim.x) {
            amax = fmaxf(amax, fabsf(qg[i]));
        }
        amax = warp_max(amax);
        int e = 0;
        frexpf(amax, &e); // amax = m 2^e, m in [0.5, 1)
        if (lane == 0 && e > 15) {
            atomicMax(shift_s, e - 15);
        }
    }
    __syncthreads();
    const int shift = *shift_s;
    for (int i = threadIdx.x; i < 8 * D; i += blockDim.x) {
        const int h = i / D, d = i % D;
        const float x = h < G ? ldexpf(qg[h * D + d], -shift) : 0.0f;
        tc_split(x, qhi[h * L::Q_STRIDE + d], qlo[h * L::Q_STRIDE + d]);
    }
    // Weights of the heads past G stay zero; their factors one.
    for (int i = threadIdx.x; i < 8 * L::P_STRIDE; i += blockDim.x) {
        if (i / L::P_STRIDE >= G) {
            phi[i] = 0;
            plo[i] = 0;
        }
    }
    if (threadIdx.x < 8) {
        corr_s[threadIdx.x] = 1.0f;
    }
    float m[HW], l[HW];
#pragma unroll
    for (int u = 0; u < HW; ++u) {
        m[u] = ATTN_NEG_INF;
        l[u] = 0.0f;
    }
    float acc[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            acc[mt][i] = 0.0f;
        }
    }
    const float unshift = ldexpf(1.0f, shift);
    for (int it = 0; it < n_tiles; ++it) {
        cp_async_wait<L::STAGES - 2>(); // this thread's copies of tile it
        __syncthreads(); // everyone's; the last tile's stage, scores and weights are free
        {
            const int nt = it + L::STAGES - 1;
            if (nt < n_tiles) {
                const int base = k0 + nt * TC_TILE;
                char *sk = smem + (nt % L::STAGES) * L::STAGE_BYTES;
                tc_load_tile<D, G, STAGES>(smem, kh, vh, base, min(TC_TILE, k1 - base),
                                           nt % L::STAGES, rot);
                rot.patch(sk, sk + L::TILE_BYTES, base, TcOffset<D>());
            }
            cp_async_commit();
        }
        const char *sk = smem + (it % L::STAGES) * L::STAGE_BYTES;
        const char *sv = sk + L::TILE_BYTES;
        const int base = k0 + it * TC_TILE, n_live = min(TC_TILE, k1 - base);
        // Scores: warp w, keys 16 (w % 2).. over the dimensions' half w / 2, both terms of q.
        {
            const int kb = 16 * (warp % 2), half = warp / 2;
            float ch[4] = {0.0f, 0.0f, 0.0f, 0.0f}, cl[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
            for (int j = 0; j < D / 32; ++j) {
                const int ks = half * (D / 32) + j;
                uint32_t a[4];
                const int k_at = tc_chunk<D>(kb + lane % 16, 2 * ks + lane / 16);
                ldmatrix_b16_x4(a, shared_addr(sk + k_at));
                const int at = gq * L::Q_STRIDE + 16 * ks + 2 * tq;
                const uint32_t *bh = (const uint32_t *)(qhi + at);
                const uint32_t *bl = (const uint32_t *)(qlo + at);
                mma_m16n8k16_f16(ch, a, bh[0], bh[4]); // halves at + 8: four words on
                mma_m16n8k16_f16(cl, a, bl[0], bl[4]);
            }
            // (key kb + gq (+8), heads 2tq, 2tq + 1).
            float *sp = ss + half * TC_TILE * L::S_STRIDE;
            float c[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                c[i] = ch[i] + cl[i] * TC_LO_UNSCALE;
            }
            sp[(kb + gq) * L::S_STRIDE + 2 * tq] = c[0];
            sp[(kb + gq) * L::S_STRIDE + 2 * tq + 1] = c[1];
            sp[(kb + gq + 8) * L::S_STRIDE + 2 * tq] = c[2];
            sp[(kb + gq + 8) * L::S_STRIDE + 2 * tq + 1] = c[3];
        }
        __syncthreads();
        // The softmax step, a warp a head (w, w + 4), a lane a key.
#pragma unroll
        for (int u = 0; u < HW; ++u) {
            const int hi = warp + ATTN_NWARPS * u;
            if (hi >= G) {
                break; // warp-uniform
            }
            const bool live = lane < n_live;
            const float dot = ss[lane * L::S_STRIDE + hi] + ss[(TC_TILE + lane) * L::S_STRIDE + hi];
            const float sc = live ? dot * unshift * scale : ATTN_NEG_INF;
            const float m_new = fmaxf(m[u], warp_max(sc));
            const float corr = expf(m[u] - m_new); // 0 on the first tile (m = -inf)
            const float p = live ? expf(sc - m_new) : 0.0f;
            l[u] = l[u] * corr + warp_sum(p);
            m[u] = m_new;
            tc_split(p, phi[hi * L::P_STRIDE + lane], plo[hi * L::P_STRIDE + lane]);
            if (lane == 0) {
                corr_s[hi] = corr;
            }
        }
        __syncthreads();
        // O = O corr + Vᵀ · Pᵀ for this warp's dimension slices: the tile's products from
        // zero, P_hi's and P_lo's apart.
        float thi[MT][4], tlo[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                thi[mt][i] = 0.0f;
                tlo[mt][i] = 0.0f;
            }
        }
#pragma unroll
        for (int kk = 0; kk < 2; ++kk) {
            uint32_t b[2][2];
#pragma unroll
            for (int part = 0; part < 2; ++part) {
                const uint16_t *pp = (part == 0 ? phi : plo) + gq * L::P_STRIDE + 16 * kk + 2 * tq;
                b[part][0] = *(const uint32_t *)pp;
                b[part][1] = *(const uint32_t *)(pp + 8);
            }
            // Matrix i of the ldmatrix: keys 16kk + 8 (i / 2).., dimensions 16 slice + 8 (i % 2).
            const int key = 16 * kk + lane % 8 + 8 * (lane / 16);
            const int half = (lane / 8) % 2;
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                const int slice = warp + ATTN_NWARPS * mt;
                uint32_t a[4];
                ldmatrix_b16_x4_trans(a, shared_addr(sv + tc_chunk<D>(key, 2 * slice + half)));
                mma_m16n8k16_f16(thi[mt], a, b[0][0], b[0][1]);
                mma_m16n8k16_f16(tlo[mt], a, b[1][0], b[1][1]);
            }
        }
        const float cr[2] = {corr_s[2 * tq], corr_s[2 * tq + 1]};
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                acc[mt][i] = acc[mt][i] * cr[i % 2] + (thi[mt][i] + tlo[mt][i] * TC_LO_UNSCALE);
            }
        }
    }
    cp_async_wait<0>();
    __syncthreads(); // the stages are free
    // Partials: acc (dimension 16 slice + gq (+8), heads 2tq, 2tq + 1) of the heads below G.
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        const int d0 = 16 * (warp + ATTN_NWARPS * mt) + gq;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int h = 2 * tq + i % 2, d = d0 + 8 * (i / 2);
            if (h < G) {
                part_acc[((size_t)(h0 + h) * n_split + split) * D + d] = acc[mt][i];
            }
        }
    }
#pragma unroll
    for (int u = 0; u < HW; ++u) {
        const int hi = warp + ATTN_NWARPS * u;
        if (hi < G && lane == 0) {
            const size_t pidx = (size_t)(h0 + hi) * n_split + split;
            part_m[pidx] = m[u]; // -inf for an empty split
            part_l[pidx] = l[u];
        }
    }
    group_combine_when_last<D, G>(part_m, part_l, part_acc, done, out_row, n_split, h0, sinks,
                                  (float *)smem); // the stages are free again
}
