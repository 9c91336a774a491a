// Weight rows loaded straight into the A fragments of int8 `mma.sync` (m16n8k32 / m16n8k16), for
// the tensor-core mat-vecs: the dense one (mmvq_mma.cu) and the experts' (moe_mma.cu). A warp
// takes a tile of 16 weight rows of one super-block at a time; no shared memory.
//
// Each dot is in mmq's per-sub-block order (mmq_mma.cuh's MMQ_ORDER_SUBS): per 32-wide
// sub-block the MMA's integer dot is exact, then acc = fma(d_w * d_y, isum, acc) and, with a
// minimum, acc = fma(m_w, d_y Σq_y, acc); Q6_K adds fma(d_y, d_lo * isum_lo + d_hi * isum_hi,
// acc). The scales are rounded as mmq's unpack rounds them (tile_sub_scales), so a walk over
// the sub-blocks in ascending order gives the GEMM's bits.
#pragma once
#ifndef FERROLM_COMMON_CUH
#error "include common.cuh, quant.cuh, mmq_tile.cuh and mmq_mma.cuh before mma_rows.cuh"
#endif

// Weight bytes read once: past L1.
static __device__ __forceinline__ int2 ld_stream2(const void *p) {
    int2 v;
    asm("ld.global.nc.L1::no_allocate.v2.s32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
    return v;
}

static __device__ __forceinline__ int4 ld_stream4(const void *p) {
    int4 v;
    asm("ld.global.nc.L1::no_allocate.v4.s32 {%0, %1, %2, %3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p));
    return v;
}

// Byte k (0-3) of w, sign-extended.
static __device__ __forceinline__ int sbyte(int w, int k) { return (int)(int8_t)(w >> (8 * k)); }

// Sub-block s's 6-bit scale and min of a Q4_K block whose first 16 bytes are `hd` (d, dmin,
// then the 12 scale bytes), as scales_k4 (get_scale_min_k4) unpacks them.
static __device__ __forceinline__ void q4k_scale_min(const int4 &hd, int s, int &sc, int &m) {
    // 16-bit word k of the 12 scale bytes (head bytes 4..15), as scales_k4 reads them.
    const int w[3] = {hd.y, hd.z, hd.w};
    auto s16 = [&](int k) { return (uint32_t)(w[k / 2] >> (16 * (k % 2))) & 0xffffu; };
    const int j = s / 2;
    uint32_t sc2, m2;
    if (j < 2) {
        sc2 = s16(j) & 0x3f3f;
        m2 = s16(j + 2) & 0x3f3f;
    } else {
        sc2 = (s16(j + 2) & 0x0f0f) | ((s16(j - 2) & 0xc0c0) >> 2);
        m2 = ((s16(j + 2) >> 4) & 0x0f0f) | ((s16(j) & 0xc0c0) >> 2);
    }
    sc = (sc2 >> (8 * (s % 2))) & 0xff;
    m = (m2 >> (8 * (s % 2))) & 0xff;
}

// One weight format's fragments. A thread (g = lane / 4, t = lane % 4) holds, per tile of 16
// rows, rows g and g + 8: `load` issues one super-block's loads into a `Raw`, `frag` unpacks
// sub-block s of it (A fragment and scales), `acts` gives the thread's B fragment of activation
// block yb (of the row its column g names) in the k order the A fragments use, and `dot` runs
// the sub-block's MMAs into c as the contract says.
template <int TYPE> struct MmaRows;

// Q4_K: one k32 MMA a sub-block. The k order within a sub-block is permuted so that a lane's
// codes are 8 consecutive bytes: MMA slots 4t..4t+3 hold elements 8t..8t+3 and slots 16 + 4t..
// elements 8t + 4..; the activations are read in the same order.
template <> struct MmaRows<GGML_TYPE_Q4_K> {
    typedef block_q4_K block;
    struct Raw {
        int4 head[2];   // d, dmin, scales of rows g, g + 8
        int2 q[2][4];   // code bytes 32p + 8t.. of each row, pairs p = 0..3
    };

    static __device__ __forceinline__ void load(Raw &r, const block *b0, const block *b1,
                                                int t) {
        const block *b[2] = {b0, b1};
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            r.head[h] = ld_stream4(b[h]);
#pragma unroll
            for (int p = 0; p < 4; ++p) {
                r.q[h][p] = ld_stream2(b[h]->qs + 32 * p + 8 * t);
            }
        }
    }

    // aligned8: the lane's 8 bytes are 8-byte aligned (odd blocks of an 8-aligned buffer).
    static __device__ __forceinline__ void acts(const block_q8_1 *yb, int t, bool aligned8,
                                                int (&b)[2]) {
        if (aligned8) {
            const int2 v = *(const int2 *)(yb->qs + 8 * t);
            b[0] = v.x;
            b[1] = v.y;
        } else {
            const int *q = (const int *)yb->qs;
            b[0] = q[2 * t];
            b[1] = q[2 * t + 1];
        }
    }

    // Sub-block s of rows g, g + 8: the A fragment, and d_w = d * sc, m_w = -dmin * m of each
    // row (tile_sub_scales' roundings).
    struct Frag {
        int a[4];
        float dw[2], mw[2];
    };

    static __device__ __forceinline__ Frag frag(const Raw &r, int s) {
        Frag f;
        const int p = s / 2, sh = 4 * (s % 2);
        f.a[0] = (r.q[0][p].x >> sh) & 0x0F0F0F0F;
        f.a[1] = (r.q[1][p].x >> sh) & 0x0F0F0F0F;
        f.a[2] = (r.q[0][p].y >> sh) & 0x0F0F0F0F;
        f.a[3] = (r.q[1][p].y >> sh) & 0x0F0F0F0F;
        scales(r.head, s, f);
        return f;
    }

    // d_w and m_w of sub-block s of rows g, g + 8 (tile_sub_scales' roundings) from their
    // blocks' first 16 bytes.
    static __device__ __forceinline__ void scales(const int4 (&head)[2], int s, Frag &f) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int4 hd = head[h];
            int sc, m;
            q4k_scale_min(hd, s, sc, m);
            f.dw[h] = f16_bits_to_f32((uint16_t)(hd.x & 0xffff)) * (float)sc;
            f.mw[h] = -f16_bits_to_f32((uint16_t)((uint32_t)hd.x >> 16)) * (float)m;
        }
    }

    // c[i] (row g + 8 (i / 2), column 2t + i % 2) += the sub-block's product; dy, sy: d_y and
    // d_y Σq_y of the thread's two columns.
    static __device__ __forceinline__ void dot(const Frag &f, const int (&b)[2],
                                               const float (&dy)[2], const float (&sy)[2],
                                               float (&c)[4]) {
        int isum[4] = {MMQ_BIAS, MMQ_BIAS, MMQ_BIAS, MMQ_BIAS};
        mma_s8_k32(isum, f.a, b);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            c[i] = __fmaf_rn(__fmul_rn(f.dw[i / 2], dy[i % 2]), mmq_unbias(isum[i]), c[i]);
            c[i] = __fmaf_rn(f.mw[i / 2], sy[i % 2], c[i]);
        }
    }
};

// Q6_K: a scale per 16 elements, so two k16 MMAs a sub-block, in the natural k order. Blocks
// are 210 bytes (2-byte aligned): 16-bit loads, through L1 (a lane's words share sectors).
template <> struct MmaRows<GGML_TYPE_Q6_K> {
    typedef block_q6_K block;
    struct Raw {
        int lo[2][8];   // ql words 64n + 32q + 16c + 4t, index 4n + 2q + c
        int hi[2][4];   // qh words 32n + 16c + 4t, index 2n + c
        int sc[2][4];   // the 16 int8 scales
        int d[2];
    };

    static __device__ __forceinline__ void load(Raw &r, const block *b0, const block *b1,
                                                int t) {
        const block *b[2] = {b0, b1};
#pragma unroll
        for (int h = 0; h < 2; ++h) {
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                r.lo[h][i] = get_int_b2(b[h]->ql, 4 * i + t); // byte 16 i + 4t
            }
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                r.hi[h][i] = get_int_b2(b[h]->qh, 4 * i + t);
                r.sc[h][i] = get_int_b2(b[h]->scales, i);
            }
            r.d[h] = *(const uint16_t *)&b[h]->d;
        }
    }

    static __device__ __forceinline__ void acts(const block_q8_1 *yb, int t, bool, int (&b)[2]) {
        const int *q = (const int *)yb->qs;
        b[0] = q[t];
        b[1] = q[4 + t];
    }

    // Sub-block s of rows g, g + 8: a[half][row] (int8 codes, 32 subtracted), d[half][row].
    struct Frag {
        int a[2][2];
        float d[2][2];
    };

    static __device__ __forceinline__ Frag frag(const Raw &r, int s) {
        Frag f;
        const int n = s / 4, j = s % 4;
#pragma unroll
        for (int hc = 0; hc < 2; ++hc) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int lo = r.lo[h][4 * n + 2 * (j % 2) + hc], hi = r.hi[h][2 * n + hc];
                const int q = ((lo >> (4 * (j / 2))) & 0x0F0F0F0F) |
                              (((hi >> (2 * j)) & 0x03030303) << 4);
                f.a[hc][h] = (int)__vsub4((unsigned)q, 0x20202020u);
                const int k = 2 * s + hc;
                f.d[hc][h] =
                    f16_bits_to_f32((uint16_t)r.d[h]) * (float)sbyte(r.sc[h][k / 4], k % 4);
            }
        }
        return f;
    }

    static __device__ __forceinline__ void dot(const Frag &f, const int (&b)[2],
                                               const float (&dy)[2], const float (&)[2],
                                               float (&c)[4]) {
        int lo[4] = {MMQ_BIAS, MMQ_BIAS, MMQ_BIAS, MMQ_BIAS};
        int hi[4] = {MMQ_BIAS, MMQ_BIAS, MMQ_BIAS, MMQ_BIAS};
        mma_s8_k16(lo, f.a[0][0], f.a[0][1], b[0]);
        mma_s8_k16(hi, f.a[1][0], f.a[1][1], b[1]);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const float x = __fmaf_rn(f.d[1][i / 2], mmq_unbias(hi[i]),
                                      __fmul_rn(f.d[0][i / 2], mmq_unbias(lo[i])));
            c[i] = __fmaf_rn(dy[i % 2], x, c[i]);
        }
    }
};

// sy = d_y Σq_y of the thread's two columns (2t, 2t + 1) of a sub-block whose B fragment is b,
// for formats with a minimum (Σq_y from an MMA against all-ones weights); zeros for the others,
// whose `dot` does not read them.
template <int TYPE>
static __device__ __forceinline__ void act_sums(const int (&b)[2], const float (&dy)[2],
                                                float (&sy)[2]) {
    sy[0] = sy[1] = 0.0f;
    if constexpr (WeightFormat<TYPE>::has_min) {
        const int ones[4] = {0x01010101, 0x01010101, 0x01010101, 0x01010101};
        int ys[4] = {MMQ_BIAS, MMQ_BIAS, MMQ_BIAS, MMQ_BIAS};
        mma_s8_k32(ys, ones, b);
        sy[0] = __fmul_rn(dy[0], mmq_unbias(ys[0]));
        sy[1] = __fmul_rn(dy[1], mmq_unbias(ys[1]));
    }
}
