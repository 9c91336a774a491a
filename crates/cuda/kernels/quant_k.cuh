// The K-quant formats' kernels (Q4_K, Q5_K, Q6_K: 256-element super-blocks), included by
// quant.cuh in place; the block layouts and shared helpers are quant.cuh's.
#pragma once
#ifndef FERROLM_QUANT_K_IN_PLACE
#error "quant_k.cuh is part of quant.cuh: include quant.cuh"
#endif

// Q4_K and Q5_K: iqs in {0, 2, .., 30}; with t = iqs / 2, the thread takes bytes
// 4(t%4)..+4 and 16 + 4(t%4)..+4 of 32-byte group g = t / 4: low nibbles are sub-block 2g
// (activation block 2g), high nibbles sub-block 2g + 1.
template <> struct WeightFormat<GGML_TYPE_Q4_K> {
    typedef block_q4_K block;
    static constexpr int qk = QK_K, qi = 32, vdr = 2;
    static constexpr bool scale16 = false; // one scale per 32 elements (mmq)
    static constexpr bool has_min = true; // m != 0 in tile_codes (mmq)
    static constexpr bool int_scales = true; // tile_scales_int (mmq)
    // mmq sums the sub-blocks' integer dots times their 6-bit scales in integers, and the mins
    // times the activation sums in a second accumulator, as llama.cpp's CPU does for Q4_K
    // (mmq_mma.cuh, "integer-scale order").

    static __device__ __forceinline__ float vec_dot(const block *b, const block_q8_1 *y, int iqs) {
        const int t = iqs / 2, g = t / 4, l4 = t % 4;
        const int *q4 = (const int *)(b->qs + 32 * g + 4 * l4);
        const int v[2] = {q4[0], q4[4]};
        uint16_t aux[2];
        scales_k4(b->scales, g, aux);
        const uint8_t *sc = (const uint8_t *)aux;
        float sumf_d = 0.0f, sumf_m = 0.0f;
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const block_q8_1 *yi = y + 2 * g + i;
            const int u0 = get_int_b4(yi->qs, l4), u1 = get_int_b4(yi->qs, l4 + 4);
            const int dot = dp4a((v[1] >> (4 * i)) & 0x0F0F0F0F, u1,
                                 dp4a((v[0] >> (4 * i)) & 0x0F0F0F0F, u0, 0));
            const int sumu = sum_bytes(u1, sum_bytes(u0, 0));
            const float d8 = yi->d;
            sumf_d += d8 * (float)(dot * sc[i]);
            sumf_m += d8 * (float)(sumu * sc[i + 2]);
        }
        return f16_bits_to_f32(b->d) * sumf_d - f16_bits_to_f32(b->dmin) * sumf_m;
    }

    // The wide walk (mmvq.cuh), wide_lanes = 8 lanes a block: lane t takes code bytes
    // 16t..16t+15 in one 16-byte load, half h = t % 2 of group g = t / 2, i.e. 16 elements of
    // sub-block 2g (low nibbles) and the same 16 of sub-block 2g + 1 (high nibbles).
    // Activation block kby + 2g + j (j = 0, 1) from `y` (Q8Global or Q8Shared).
    static constexpr bool wide = true;
    static constexpr int wide_lanes = 8;
    template <typename A>
    static __device__ __forceinline__ float vec_dot_wide(const block *b, const A &y, int kby,
                                                         int t) {
        const int g = (int)((unsigned)t >> 1), h = t & 1; // t >= 0: shifts, not signed division
        // The head (d, dmin, scales) in one 16-byte load, the same for the block's 8 lanes.
        const int4 head = __ldg((const int4 *)b);
        const int4 v4 = __ldg((const int4 *)(b->qs + 16 * t));
        const int v[4] = {v4.x, v4.y, v4.z, v4.w};
        const uint32_t sm = scales_k4_head(head, g);
        const int4 a0 = y.q16(kby + 2 * g, h), a1 = y.q16(kby + 2 * g + 1, h);
        const int u0s[4] = {a0.x, a0.y, a0.z, a0.w}, u1s[4] = {a1.x, a1.y, a1.z, a1.w};
        int dot0 = 0, dot1 = 0, sum0 = 0, sum1 = 0;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int u0 = u0s[i], u1 = u1s[i];
            dot0 = dp4a(v[i] & 0x0F0F0F0F, u0, dot0);
            dot1 = dp4a_us((uint32_t)v[i] & 0xF0F0F0F0u, u1, dot1); // 16 times the codes
            sum0 = sum_bytes(u0, sum0);
            sum1 = sum_bytes(u1, sum1);
        }
        dot1 >>= 4; // exact: a multiple of 16
        const float d0 = y.d(kby + 2 * g), d1 = y.d(kby + 2 * g + 1);
        const int sc0 = sm & 0xff, sc1 = (sm >> 8) & 0xff, m0 = (sm >> 16) & 0xff, m1 = sm >> 24;
        const float sumf_d = d0 * (float)(dot0 * sc0) + d1 * (float)(dot1 * sc1);
        const float sumf_m = d0 * (float)(sum0 * m0) + d1 * (float)(sum1 * m1);
        return f16_bits_to_f32((uint16_t)(head.x & 0xffff)) * sumf_d -
               f16_bits_to_f32((uint16_t)((uint32_t)head.x >> 16)) * sumf_m;
    }

    // mmq: pair p (sub-blocks 2p, 2p + 1, low and high nibbles of code bytes 32p..+32) of the
    // block at byte `ofs` of a 16-byte-aligned shared row; q[8j + i] is int i of sub-block 2p + j.
    static constexpr int unpack_group = 2;
    static __device__ __forceinline__ void tile_group_codes(const char *row, int ofs, int p,
                                                            int (&q)[16]) {
        const int4 *v = (const int4 *)(row + ofs + 16 + 32 * p); // qs follows 16 bytes of head
        const int4 a = v[0], b = v[1];
        const int w[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            q[i] = w[i] & 0x0F0F0F0F;
            q[8 + i] = (w[i] >> 4) & 0x0F0F0F0F;
        }
    }

    // Sub-block sub's scale d (both halves) and offset m, x = d * code + m.
    static __device__ __forceinline__ void tile_sub_scales(const block *b, int sub, float d[2],
                                                           float &m) {
        uint16_t aux[2];
        scales_k4(b->scales, sub / 2, aux);
        // Bytes by shifts, not through a pointer: that would put aux in local memory.
        d[0] = d[1] = f16_bits_to_f32(b->d) * (float)((aux[0] >> (8 * (sub % 2))) & 0xff);
        m = -f16_bits_to_f32(b->dmin) * (float)((aux[1] >> (8 * (sub % 2))) & 0xff);
    }

    // For the integer-scale order: sub-block sub's 6-bit scale and min, and the block's d and
    // dmin (the codes are tile_group_codes').
    static __device__ __forceinline__ void tile_scales_int(const block *b, int sub, int &sc,
                                                           int &m, float &d, float &dmin) {
        uint16_t aux[2];
        scales_k4(b->scales, sub / 2, aux);
        sc = (aux[0] >> (8 * (sub % 2))) & 0xff;
        m = (aux[1] >> (8 * (sub % 2))) & 0xff;
        d = f16_bits_to_f32(b->d);
        dmin = f16_bits_to_f32(b->dmin);
    }

    // Element i as f32, rounded as ferrolm-quant's dequantize (embed.cu): sub-block j = i / 32,
    // x = (d * sc) * q - dmin * m, each product rounded on its own (__fmul_rn: NVRTC would
    // fuse them), q the low (j even) or high nibble of code byte 32 (j / 2) + i % 32.
    static __device__ __forceinline__ float dequant(const block *b, int i) {
        const int j = i / 32;
        int sc, m;
        float d, dmin;
        tile_scales_int(b, j, sc, m, d, dmin);
        const float dl = __fmul_rn(d, (float)sc);
        const float ml = __fmul_rn(dmin, (float)m);
        const int q = (b->qs[32 * (j / 2) + i % 32] >> (4 * (j % 2))) & 0xF;
        return __fsub_rn(__fmul_rn(dl, (float)q), ml);
    }
};

template <> struct WeightFormat<GGML_TYPE_Q5_K> {
    typedef block_q5_K block;
    static constexpr int qk = QK_K, qi = 32, vdr = 2;
    static constexpr bool scale16 = false; // one scale per 32 elements (mmq)
    static constexpr bool has_min = true; // m != 0 in tile_codes (mmq)
    static constexpr bool int_scales = false; // see WeightFormat<GGML_TYPE_Q4_K>
    static constexpr bool wide = false; // no vec_dot_wide (mmvq.cuh)

    static __device__ __forceinline__ float vec_dot(const block *b, const block_q8_1 *y, int iqs) {
        const int t = iqs / 2, g = t / 4, l4 = t % 4;
        const int *ql = (const int *)(b->qs + 32 * g + 4 * l4);
        const int *qh = (const int *)(b->qh + 4 * l4);
        const int vl[2] = {ql[0], ql[4]};
        // Bit 2g + i of each qh byte is the fifth bit of sub-block 2g + i.
        const int vh[2] = {qh[0] >> (2 * g), qh[4] >> (2 * g)};
        uint16_t aux[2];
        scales_k4(b->scales, g, aux);
        const uint8_t *sc = (const uint8_t *)aux;
        float sumf_d = 0.0f, sumf_m = 0.0f;
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const int v0 = ((vl[0] >> (4 * i)) & 0x0F0F0F0F) | (((vh[0] >> i) << 4) & 0x10101010);
            const int v1 = ((vl[1] >> (4 * i)) & 0x0F0F0F0F) | (((vh[1] >> i) << 4) & 0x10101010);
            const block_q8_1 *yi = y + 2 * g + i;
            const int u0 = get_int_b4(yi->qs, l4), u1 = get_int_b4(yi->qs, l4 + 4);
            const int dot = dp4a(v1, u1, dp4a(v0, u0, 0));
            const int sumu = sum_bytes(u1, sum_bytes(u0, 0));
            const float d8 = yi->d;
            sumf_d += d8 * (float)(dot * sc[i]);
            sumf_m += d8 * (float)(sumu * sc[i + 2]);
        }
        return f16_bits_to_f32(b->d) * sumf_d - f16_bits_to_f32(b->dmin) * sumf_m;
    }

    static __device__ __forceinline__ void tile_codes(const block *b, int sub, int q[8],
                                                      float d[2], float &m) {
        const int g = sub / 2, h = sub % 2;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const int vh = get_int_b4(b->qh, i) >> sub;
            q[i] = ((get_int_b4(b->qs + 32 * g, i) >> (4 * h)) & 0x0F0F0F0F) |
                   ((vh << 4) & 0x10101010);
        }
        uint16_t aux[2];
        scales_k4(b->scales, g, aux);
        // Bytes by shifts, not through a pointer: that would put aux in local memory.
        d[0] = d[1] = f16_bits_to_f32(b->d) * (float)((aux[0] >> (8 * h)) & 0xff);
        m = -f16_bits_to_f32(b->dmin) * (float)((aux[1] >> (8 * h)) & 0xff);
    }
};

// Q6_K: iqs in 0..31, one int of ql each; n = iqs / 16 picks the 128-element half, r = iqs % 16
// the bytes 4r..+4 of that half's 64 ql bytes. The low nibbles are elements 128n + 4r (r < 8)
// or 128n + 32 + 4(r-8) (r >= 8); the high nibbles the same plus 64 (see dequantize_row_q6_K).
template <> struct WeightFormat<GGML_TYPE_Q6_K> {
    typedef block_q6_K block;
    static constexpr int qk = QK_K, qi = 32, vdr = 1;
    static constexpr bool scale16 = true; // a scale per 16 elements: d[0], d[1] (mmq)
    static constexpr bool has_min = false; // m != 0 in tile_codes (mmq)
    static constexpr bool int_scales = false; // see WeightFormat<GGML_TYPE_Q4_K>

    static __device__ __forceinline__ float vec_dot(const block *b, const block_q8_1 *y, int iqs) {
        const int n = iqs / 16, r = iqs % 16, half = r / 8, l4 = r % 8;
        const int vl = get_int_b2(b->ql, iqs);
        const int vh = get_int_b2(b->qh, 8 * n + l4) >> (2 * half);
        const int8_t *sc = b->scales + 8 * n + r / 4;
        float sumf = 0.0f;
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const block_q8_1 *yi = y + 4 * n + half + 2 * i;
            const int u = get_int_b4(yi->qs, l4);
            const int q = ((vl >> (4 * i)) & 0x0F0F0F0F) | (((vh >> (4 * i)) << 4) & 0x30303030);
            // Codes are stored 32 above their value: subtract 32 * sum(u) exactly.
            const int dot = dp4a(q, u, 0) - 32 * sum_bytes(u, 0);
            sumf += yi->d * (float)(dot * sc[4 * i]);
        }
        return f16_bits_to_f32(b->d) * sumf;
    }

    // The wide walk (mmvq.cuh), wide_lanes = 8 lanes a block: lane t takes positions
    // l = 8r..8r+7 (r = t % 4) of 128-element half n = t / 4, i.e. ql bytes 64n + l and
    // 64n + 32 + l and qh bytes 32n + l, which hold elements 128n + 32k + l for k = 0..3
    // (activation block 4n + k, scale 8n + 2k + r / 2). Blocks are only 2-byte aligned.
    // Activation block kby + 4n + k from `y` (Q8Global or Q8Shared).
    static constexpr bool wide = true;
    static constexpr int wide_lanes = 8;
    template <typename A>
    static __device__ __forceinline__ float vec_dot_wide(const block *b, const A &y, int kby,
                                                         int t) {
        const int n = (int)((unsigned)t >> 2), r = t & 3; // t >= 0
        // Each 8-byte piece is followed by more of the block: get_int2_b2 may read past it.
        const uint32_t *w = (const uint32_t *)((size_t)b & ~(size_t)3);
        const uint32_t sh = (uint32_t)((size_t)b & 3) * 8u;
        const int2 l0 = get_int2_b2(w, 64 * n + 8 * r, sh),
                   l1 = get_int2_b2(w, 64 * n + 32 + 8 * r, sh),
                   h2 = get_int2_b2(w, 128 + 32 * n + 8 * r, sh);
        const int lo[2][2] = {{l0.x, l0.y}, {l1.x, l1.y}};
        const int hi[2] = {h2.x, h2.y};
        float sumf = 0.0f;
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const int yk = kby + 4 * n + k;
            const int2 a = y.q8(yk, r);
            const int us[2] = {a.x, a.y};
            int dot = 0, sum = 0;
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                const int u = us[i];
                const int q = ((lo[k % 2][i] >> (4 * (k / 2))) & 0x0F0F0F0F) |
                              (((hi[i] >> (2 * k)) & 0x03030303) << 4);
                dot = dp4a(q, u, dot);
                sum = sum_bytes(u, sum);
            }
            // Codes are stored 32 above their value: subtract 32 * sum(u) exactly.
            const int sc = b->scales[8 * n + 2 * k + r / 2];
            sumf += y.d(yk) * (float)((dot - 32 * sum) * sc);
        }
        return f16_bits_to_f32(b->d) * sumf;
    }

    // mmq: half h (sub-blocks 4h..4h + 3) of the block at byte `ofs` (even: 210-byte blocks)
    // of a 16-byte-aligned shared row. Element 32j + l of the half has its low nibble in
    // ql[64h + 32(j % 2) + l] (bits 4(j / 2)..) and its high two bits in qh[32h + l] (bits
    // 2j..); codes are stored 32 above their value, so the int8 code is q - 32 and m = 0.
    // q[8j + i] is int i of sub-block 4h + j.
    static constexpr int unpack_group = 4;
    static __device__ __forceinline__ void tile_group_codes(const char *row, int ofs, int h,
                                                            int (&q)[32]) {
        int lo[16], hi[8];
        load_words_b2<16>(row, ofs + 64 * h, lo);
        load_words_b2<8>(row, ofs + 128 + 32 * h, hi);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                const int l4 = (lo[8 * (j % 2) + i] >> (4 * (j / 2))) & 0x0F0F0F0F;
                const int h2 = ((hi[i] >> (2 * j)) & 0x03030303) << 4;
                q[8 * j + i] = __vsub4(l4 | h2, 0x20202020);
            }
        }
    }

    // Sub-block sub's two scales (elements 0-15, 16-31); m = 0.
    static __device__ __forceinline__ void tile_sub_scales(const block *b, int sub, float d[2],
                                                           float &m) {
        const float db = f16_bits_to_f32(b->d);
        d[0] = db * (float)b->scales[2 * sub];
        d[1] = db * (float)b->scales[2 * sub + 1];
        m = 0.0f;
    }

    // Element i as f32, rounded as ferrolm-quant's dequantize (embed.cu): x = (d * scales[i /
    // 16]) * (q - 32), products unfused; in half n = i / 128, with r = i % 128, l = r % 32,
    // quarter c = r / 32: the low nibble of ql[64n + l + 32 (c % 2)] (c < 2) or its high
    // nibble (c >= 2), and bits 2c of qh[32n + l] (ggml's dequantize_row_q6_K). d is read a
    // byte at a time: blocks of 210 bytes leave it only 2-byte aligned.
    static __device__ __forceinline__ float dequant(const block *b, int i) {
        const int n = i / 128, r = i % 128, l = r % 32, c = r / 32;
        const uint8_t ql = b->ql[64 * n + l + 32 * (c % 2)];
        const int lo = c < 2 ? (ql & 0xF) : (ql >> 4);
        const int hi = (b->qh[32 * n + l] >> (2 * c)) & 3;
        const int q = (lo | (hi << 4)) - 32;
        const uint16_t d = (uint16_t)(((const uint8_t *)&b->d)[0] | (((const uint8_t *)&b->d)[1] << 8));
        const float dl = __fmul_rn(f16_bits_to_f32(d), (float)b->scales[i / 16]);
        return __fmul_rn(dl, (float)q);
    }
};

// ---- activation quantizers (quantize.cu, and the fused norms of norm_rope.cu) ----------------
