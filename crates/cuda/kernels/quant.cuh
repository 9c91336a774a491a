// ggml block layouts and their dot products with Q8_1 activations, defined once.
//
// Each weight format is a `WeightFormat<TYPE>` specialisation: the block struct, its geometry
// (`qk` elements per block, `qi` 32-bit ints of codes per block, `vdr` ints one thread takes per
// call), `vec_dot`, which returns one thread's share of `block · activations`, and for mmq
// `tile_codes`: one 32-element sub-block as int8 codes with x = d * code + m (`scale16`
// formats: d[0] for the first 16 elements, d[1] for the last 16; `has_min` formats have an
// m != 0). Q4_K and Q6_K instead give mmq a group of sub-blocks at a time from 16-byte loads
// (`unpack_group`, `tile_group_codes`, scales from `tile_sub_scales`): their per-sub-block
// 4-byte loads, one row a lane, were most of the GEMM's shared-memory bank conflicts. The
// formats with an embedding gather also give `dequant`: one element as f32, in the roundings
// of ferrolm-quant's dequantize. Kernels (mmvq.cu, mmq.cu, embed.cu) are templates over these
// traits; there is no per-type copy of a kernel.
//
// The structs are the on-disk GGUF layouts (ferrolm-quant's `Block*` structs), read in place.
// f16 fields are raw bits (`uint16_t`), converted with f16_bits_to_f32.
//
// Exactness: unlike llama.cpp, code biases (Q4_0's 8, Q6_K's 32) and block minimums (Q4_1,
// Q4_K, Q5_K) are applied through the exact integer sum of the activation codes (a dp4a against
// 0x01010101), never through Q8_1's f16-rounded `s`. The integer part of every dot is then
// exact, and only f32 products of scales round: CUDA agrees with ferrolm's CPU matmul (which
// does the same) to f32 summation order.
#pragma once
#ifndef FERROLM_COMMON_CUH
#error "include common.cuh before quant.cuh"
#endif

// ggml type ids (GgmlType in crates/gguf), used as template arguments.
#define GGML_TYPE_Q4_0 2
#define GGML_TYPE_Q4_1 3
#define GGML_TYPE_Q5_0 6
#define GGML_TYPE_Q5_1 7
#define GGML_TYPE_Q8_0 8
#define GGML_TYPE_Q4_K 12
#define GGML_TYPE_Q5_K 13
#define GGML_TYPE_Q6_K 14
#define GGML_TYPE_MXFP4 39

#define QK8_1 32
#define QK_K 256

// ---- block layouts ------------------------------------------------------------------------

// Activations, x = d * q: ggml's block_q8_1 layout, except that the scale is an f32 and there
// is no `s`. Quantized either as ggml's Q8_1 (d = absmax / 127 per 32 values, rounded to f16 and
// widened back) or as its Q8_K (one f32 scale per 256 values, in each of the 8 blocks), so the
// codes and scales are exactly those llama.cpp's CPU pairs with each weight format.
struct block_q8_1 {
    float d;
    int8_t qs[QK8_1];
};
static_assert(sizeof(block_q8_1) == 36, "block_q8_1");

// Where a wide walk (mmvq.cuh) reads its Q8_1 activations: block `blk`'s scale, and its codes as
// four ints (`part` 0-1: bytes 16·part..) or two (`part` 0-3: bytes 8·part..). The same values
// either way; only the loads differ.
// Q8Global: the blocks as quantize.cu wrote them (4-byte aligned: the loads are 4 bytes wide).
struct Q8Global {
    const block_q8_1 *y;
    __device__ __forceinline__ float d(int blk) const { return y[blk].d; }
    __device__ __forceinline__ int4 q16(int blk, int part) const {
        const int *p = (const int *)y[blk].qs + 4 * part;
        return make_int4(p[0], p[1], p[2], p[3]);
    }
    __device__ __forceinline__ int2 q8(int blk, int part) const {
        const int *p = (const int *)y[blk].qs + 2 * part;
        return make_int2(p[0], p[1]);
    }
};

// Q8Shared: blocks staged in shared memory by stage_q8_1 (mmvq.cuh), codes (32 bytes a block,
// 16-byte aligned) apart from scales: one 16- or 8-byte shared load where Q8Global makes four
// or two global ones.
struct Q8Shared {
    const int4 *q;
    const float *s;
    __device__ __forceinline__ float d(int blk) const { return s[blk]; }
    __device__ __forceinline__ int4 q16(int blk, int part) const { return q[2 * blk + part]; }
    __device__ __forceinline__ int2 q8(int blk, int part) const {
        return ((const int2 *)q)[4 * blk + part];
    }
};

// x = d * (q - 8); element i < 16 in the low nibble of qs[i], element 16 + i in the high one.
struct block_q4_0 {
    uint16_t d;
    uint8_t qs[16];
};
static_assert(sizeof(block_q4_0) == 18, "block_q4_0");

// x = d * q + m; nibbles as Q4_0.
struct block_q4_1 {
    uint16_t d;
    uint16_t m;
    uint8_t qs[16];
};
static_assert(sizeof(block_q4_1) == 20, "block_q4_1");

// x = d * (q - 16), q 5 bits: the low 4 as Q4_0's nibbles, bit i of qh (little-endian u32)
// the fifth bit of element i. 22 bytes: later blocks are only 2-byte aligned.
struct block_q5_0 {
    uint16_t d;
    uint8_t qh[4];
    uint8_t qs[16];
};
static_assert(sizeof(block_q5_0) == 22, "block_q5_0");

// x = d * q + m; codes as Q5_0.
struct block_q5_1 {
    uint16_t d;
    uint16_t m;
    uint8_t qh[4];
    uint8_t qs[16];
};
static_assert(sizeof(block_q5_1) == 24, "block_q5_1");

// x = d * q.
struct block_q8_0 {
    uint16_t d;
    int8_t qs[32];
};
static_assert(sizeof(block_q8_0) == 34, "block_q8_0");

// Eight 32-element sub-blocks, x = d * sc[j] * q - dmin * m[j] with 6-bit sc/m packed in
// `scales`; byte l of 32-byte group g holds element 64g + l (low nibble) and 64g + 32 + l (high).
struct block_q4_K {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[12];
    uint8_t qs[QK_K / 2];
};
static_assert(sizeof(block_q4_K) == 144, "block_q4_K");

// Q4_K plus a fifth bit: bit j of qh[l] is the high bit of element 32j + l.
struct block_q5_K {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[12];
    uint8_t qh[QK_K / 8];
    uint8_t qs[QK_K / 2];
};
static_assert(sizeof(block_q5_K) == 176, "block_q5_K");

// Sixteen 16-element sub-blocks, x = d * scales[j] * (q - 32), q 6 bits: low 4 in ql, high 2 in
// qh (see ggml's dequantize_row_q6_K for the interleaving).
struct block_q6_K {
    uint8_t ql[QK_K / 2];
    uint8_t qh[QK_K / 4];
    int8_t scales[QK_K / 16];
    uint16_t d;
};
static_assert(sizeof(block_q6_K) == 210, "block_q6_K");

// MXFP4: x = kvalues_mxfp4[q] * 2^(e - 128) (ggml's doubled E2M1 values, so the E8M0 scale
// 2^(e - 127) is halved); nibbles as Q4_0. 17 bytes: later blocks are only byte-aligned.
struct block_mxfp4 {
    uint8_t e;
    uint8_t qs[16];
};
static_assert(sizeof(block_mxfp4) == 17, "block_mxfp4");

// ---- helpers --------------------------------------------------------------------------------

// Four bytes at int index i32 of a 2-byte-aligned array (blocks of 18, 34 or 210 bytes leave
// later blocks only 2-byte aligned).
static __device__ __forceinline__ int get_int_b2(const void *x, int i32) {
    const uint16_t *x16 = (const uint16_t *)x;
    return (int)((uint32_t)x16[2 * i32] | ((uint32_t)x16[2 * i32 + 1] << 16));
}

// The two ints `ofs` bytes (a multiple of 4) into a 2-byte-aligned block from its 4-byte-aligned
// start `w` and the shift `sh` (0 or 16) that aligns it, where the next four bytes lie in the
// block too: three aligned 4-byte loads and two funnel shifts (get_int_b2 takes four 2-byte
// loads).
static __device__ __forceinline__ int2 get_int2_b2(const uint32_t *w, int ofs, uint32_t sh) {
    const uint32_t *p = w + ofs / 4;
    const uint32_t w0 = __ldg(p), w1 = __ldg(p + 1), w2 = __ldg(p + 2);
    return make_int2((int)__funnelshift_r(w0, w1, sh), (int)__funnelshift_r(w1, w2, sh));
}

// Four bytes at int index i32 of a byte-aligned array (MXFP4's 17-byte blocks).
static __device__ __forceinline__ int get_int_b1(const void *x, int i32) {
    const uint8_t *x8 = (const uint8_t *)x + 4 * i32;
    return (int)((uint32_t)x8[0] | ((uint32_t)x8[1] << 8) | ((uint32_t)x8[2] << 16) |
                 ((uint32_t)x8[3] << 24));
}

static __device__ __forceinline__ int get_int_b4(const void *x, int i32) {
    return ((const int *)x)[i32];
}

// N ints from byte `ofs` (even) of a 16-byte-aligned shared row, through 16-byte loads of the
// chunks around them (reads up to 16 bytes past the last: the caller's buffer must hold them).
template <int O, int N>
static __device__ __forceinline__ void words_from_chunks(const int (&w)[N + 4], int sh,
                                                         int (&out)[N]) {
#pragma unroll
    for (int k = 0; k < N; ++k) {
        out[k] = __funnelshift_r(w[O + k], w[O + k + 1], sh);
    }
}

template <int N>
static __device__ __forceinline__ void load_words_b2(const char *row, int ofs, int (&out)[N]) {
    static_assert(N % 4 == 0, "whole chunks");
    const int4 *c = (const int4 *)(row + (ofs & ~15));
    int w[N + 4];
#pragma unroll
    for (int i = 0; i < N / 4 + 1; ++i) {
        const int4 v = c[i];
        w[4 * i] = v.x;
        w[4 * i + 1] = v.y;
        w[4 * i + 2] = v.z;
        w[4 * i + 3] = v.w;
    }
    // Whole ints start O = (ofs % 16) / 4 ints in, and a 2-byte offset shifts by 16 bits. The
    // branch is uniform wherever the rows of a tile share their alignment (row sizes that are
    // multiples of 16 bytes).
    const int sh = (ofs & 3) * 8;
    switch ((ofs >> 2) & 3) {
    case 0: words_from_chunks<0, N>(w, sh, out); break;
    case 1: words_from_chunks<1, N>(w, sh, out); break;
    case 2: words_from_chunks<2, N>(w, sh, out); break;
    default: words_from_chunks<3, N>(w, sh, out); break;
    }
}

// Bits 0..3 of h4 as bit 4 of bytes 0..3: the fifth bits of four Q5_0/Q5_1 codes in place.
static __device__ __forceinline__ int q5_high_bits(int h4) {
    return ((h4 & 1) << 4) | ((h4 & 2) << 11) | ((h4 & 4) << 18) | ((h4 & 8) << 25);
}

// Int i (0..3) of a Q5_0/Q5_1 block's codes from its qs int v and qh word: the low nibbles
// (elements 4i..4i + 3, hi = 0) or the high ones (elements 16 + 4i.., hi = 1), as 5-bit
// unsigned bytes.
static __device__ __forceinline__ int q5_codes(int v, int qh, int i, int hi) {
    return ((v >> (4 * hi)) & 0x0F0F0F0F) | q5_high_bits((qh >> (16 * hi + 4 * i)) & 0xF);
}

// Sum of the four signed bytes of u, added to acc.
static __device__ __forceinline__ int sum_bytes(int u, int acc) {
    return dp4a(0x01010101, u, acc);
}

// The 6-bit scales (sc[0..1]) and mins (sc[2..3]) of sub-blocks 2j and 2j + 1 of a Q4_K/Q5_K
// block, as ggml's get_scale_min_k4 unpacks them, two at a time through 16-bit words.
static __device__ __forceinline__ void scales_k4(const uint8_t *scales, int j, uint16_t aux[2]) {
    const uint16_t *s = (const uint16_t *)scales;
    if (j < 2) {
        aux[0] = s[j] & 0x3f3f;
        aux[1] = s[j + 2] & 0x3f3f;
    } else {
        aux[0] = ((s[j + 2] >> 0) & 0x0f0f) | ((s[j - 2] & 0xc0c0) >> 2);
        aux[1] = ((s[j + 2] >> 4) & 0x0f0f) | ((s[j] & 0xc0c0) >> 2);
    }
}

// The 6-bit scales and mins of sub-blocks 2j and 2j + 1 of a Q4_K/Q5_K block from its first
// 16 bytes held in registers (h.y, h.z, h.w: scale bytes 0-3, 4-7, 8-11), as the bytes
// [sc(2j), sc(2j + 1), m(2j), m(2j + 1)] of one word: scales_k4's integers (aux[0] its low
// half, aux[1] its high), gathered by byte permutes. j need not be uniform: both layouts are
// computed and one taken. (One 16-byte load of the head takes the place of the scale and
// d/dmin loads: five 2-byte loads and their addresses a block.)
static __device__ __forceinline__ uint32_t scales_k4_head(int4 h, int j) {
    // Bytes q, q + 1 of the first four scale bytes and of the next four (q = 2j for j < 2,
    // 2j - 4 past): the whole six bits for j < 2, the top two bits past.
    const bool odd = j & 1;
    const uint32_t yz = __byte_perm((uint32_t)h.y, (uint32_t)h.z, odd ? 0x7632u : 0x5410u);
    // Past j = 1, the low four bits: the scales' from the low nibbles of bytes q, q + 1 of the
    // last four, the mins' from their high nibbles.
    const uint32_t w = __byte_perm((uint32_t)h.w, 0u, odd ? 0x3232u : 0x1010u);
    const uint32_t low4 = (w & 0x00000f0fu) | ((w >> 4) & 0x0f0f0000u);
    return j < 2 ? yz & 0x3f3f3f3fu : low4 | ((yz >> 2) & 0x30303030u);
}

// ---- formats --------------------------------------------------------------------------------

template <int TYPE> struct WeightFormat;

template <> struct WeightFormat<GGML_TYPE_Q4_0> {
    typedef block_q4_0 block;
    static constexpr int qk = 32, qi = 4, vdr = 2;
    static constexpr bool scale16 = false; // one scale per 32 elements (mmq)
    static constexpr bool has_min = false; // m != 0 in tile_codes (mmq)
    static constexpr bool int_scales = false; // see WeightFormat<GGML_TYPE_Q4_K>
    static constexpr bool wide = false; // no vec_dot_wide (mmvq.cuh)

    // iqs in {0, 2}: codes ints iqs, iqs + 1 (low nibbles: elements 4iqs.., high: 16 + 4iqs..).
    static __device__ __forceinline__ float vec_dot(const block *b, const block_q8_1 *y, int iqs) {
        int sumi = 0, sumu = 0;
#pragma unroll
        for (int i = 0; i < vdr; ++i) {
            const int v = get_int_b2(b->qs, iqs + i);
            const int u0 = get_int_b4(y->qs, iqs + i);
            const int u1 = get_int_b4(y->qs, iqs + i + qi);
            sumi = dp4a(v & 0x0F0F0F0F, u0, sumi);
            sumi = dp4a((v >> 4) & 0x0F0F0F0F, u1, sumi);
            sumu = sum_bytes(u0, sum_bytes(u1, sumu));
        }
        return f16_bits_to_f32(b->d) * y->d * (float)(sumi - 8 * sumu);
    }

    // mmq: the 32 codes of sub-block `sub` as int8 (4 a int), x = d * code + m.
    static __device__ __forceinline__ void tile_codes(const block *b, int sub, int q[8],
                                                      float d[2], float &m) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int v = get_int_b2(b->qs, i);
            q[i] = __vsub4(v & 0x0F0F0F0F, 0x08080808);
            q[i + 4] = __vsub4((v >> 4) & 0x0F0F0F0F, 0x08080808);
        }
        d[0] = d[1] = f16_bits_to_f32(b->d);
        m = 0.0f;
    }

    // Element i as f32, x = (q - 8) * d, rounded as ferrolm-quant's dequantize (the KV cache).
    static __device__ __forceinline__ float dequant(const block *b, int i) {
        const int q = i < 16 ? (b->qs[i] & 0x0F) : (b->qs[i - 16] >> 4);
        return __fmul_rn((float)(q - 8), f16_bits_to_f32(b->d));
    }
};

template <> struct WeightFormat<GGML_TYPE_Q4_1> {
    typedef block_q4_1 block;
    static constexpr int qk = 32, qi = 4, vdr = 2;
    static constexpr bool scale16 = false; // one scale per 32 elements (mmq)
    static constexpr bool has_min = true; // m != 0 in tile_codes (mmq)
    static constexpr bool int_scales = false; // see WeightFormat<GGML_TYPE_Q4_K>
    static constexpr bool wide = false; // no vec_dot_wide (mmvq.cuh)

    static __device__ __forceinline__ float vec_dot(const block *b, const block_q8_1 *y, int iqs) {
        int sumi = 0, sumu = 0;
#pragma unroll
        for (int i = 0; i < vdr; ++i) {
            const int v = get_int_b4(b->qs, iqs + i);
            const int u0 = get_int_b4(y->qs, iqs + i);
            const int u1 = get_int_b4(y->qs, iqs + i + qi);
            sumi = dp4a(v & 0x0F0F0F0F, u0, sumi);
            sumi = dp4a((v >> 4) & 0x0F0F0F0F, u1, sumi);
            sumu = sum_bytes(u0, sum_bytes(u1, sumu));
        }
        const float d8 = y->d;
        return f16_bits_to_f32(b->d) * d8 * (float)sumi + f16_bits_to_f32(b->m) * d8 * (float)sumu;
    }

    static __device__ __forceinline__ void tile_codes(const block *b, int sub, int q[8],
                                                      float d[2], float &m) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int v = get_int_b4(b->qs, i);
            q[i] = v & 0x0F0F0F0F;
            q[i + 4] = (v >> 4) & 0x0F0F0F0F;
        }
        d[0] = d[1] = f16_bits_to_f32(b->d);
        m = f16_bits_to_f32(b->m);
    }

    // Element i as f32, x = d * q + m, rounded as ferrolm-quant's dequantize.
    static __device__ __forceinline__ float dequant(const block *b, int i) {
        const int q = i < 16 ? (b->qs[i] & 0x0F) : (b->qs[i - 16] >> 4);
        return __fadd_rn(__fmul_rn(f16_bits_to_f32(b->d), (float)q), f16_bits_to_f32(b->m));
    }
};

// Q5_0 and Q5_1: the walk of Q4_0 and Q4_1 (iqs in {0, 2}), the fifth bits from qh. The code
// bias (16) of Q5_0 and the minimum of Q5_1 go through the exact integer sum of the
// activation codes, as for Q4_0 and Q4_1.
template <> struct WeightFormat<GGML_TYPE_Q5_0> {
    typedef block_q5_0 block;
    static constexpr int qk = 32, qi = 4, vdr = 2;
    static constexpr bool scale16 = false; // one scale per 32 elements (mmq)
    static constexpr bool has_min = false; // m != 0 in tile_codes (mmq)
    static constexpr bool int_scales = false; // see WeightFormat<GGML_TYPE_Q4_K>
    static constexpr bool wide = false; // no vec_dot_wide (mmvq.cuh)

    static __device__ __forceinline__ float vec_dot(const block *b, const block_q8_1 *y, int iqs) {
        const int qh = get_int_b2(b->qh, 0);
        int sumi = 0, sumu = 0;
#pragma unroll
        for (int i = 0; i < vdr; ++i) {
            const int v = get_int_b2(b->qs, iqs + i);
            const int u0 = get_int_b4(y->qs, iqs + i);
            const int u1 = get_int_b4(y->qs, iqs + i + qi);
            sumi = dp4a(q5_codes(v, qh, iqs + i, 0), u0, sumi);
            sumi = dp4a(q5_codes(v, qh, iqs + i, 1), u1, sumi);
            sumu = sum_bytes(u0, sum_bytes(u1, sumu));
        }
        return f16_bits_to_f32(b->d) * y->d * (float)(sumi - 16 * sumu);
    }

    // mmq: the 32 codes as int8 (q - 16), x = d * code.
    static __device__ __forceinline__ void tile_codes(const block *b, int sub, int q[8],
                                                      float d[2], float &m) {
        const int qh = get_int_b2(b->qh, 0);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int v = get_int_b2(b->qs, i);
            q[i] = __vsub4(q5_codes(v, qh, i, 0), 0x10101010);
            q[i + 4] = __vsub4(q5_codes(v, qh, i, 1), 0x10101010);
        }
        d[0] = d[1] = f16_bits_to_f32(b->d);
        m = 0.0f;
    }
};

template <> struct WeightFormat<GGML_TYPE_Q5_1> {
    typedef block_q5_1 block;
    static constexpr int qk = 32, qi = 4, vdr = 2;
    static constexpr bool scale16 = false; // one scale per 32 elements (mmq)
    static constexpr bool has_min = true; // m != 0 in tile_codes (mmq)
    static constexpr bool int_scales = false; // see WeightFormat<GGML_TYPE_Q4_K>
    static constexpr bool wide = false; // no vec_dot_wide (mmvq.cuh)

    static __device__ __forceinline__ float vec_dot(const block *b, const block_q8_1 *y, int iqs) {
        const int qh = get_int_b4(b->qh, 0);
        int sumi = 0, sumu = 0;
#pragma unroll
        for (int i = 0; i < vdr; ++i) {
            const int v = get_int_b4(b->qs, iqs + i);
            const int u0 = get_int_b4(y->qs, iqs + i);
            const int u1 = get_int_b4(y->qs, iqs + i + qi);
            sumi = dp4a(q5_codes(v, qh, iqs + i, 0), u0, sumi);
            sumi = dp4a(q5_codes(v, qh, iqs + i, 1), u1, sumi);
            sumu = sum_bytes(u0, sum_bytes(u1, sumu));
        }
        const float d8 = y->d;
        return f16_bits_to_f32(b->d) * d8 * (float)sumi + f16_bits_to_f32(b->m) * d8 * (float)sumu;
    }

    static __device__ __forceinline__ void tile_codes(const block *b, int sub, int q[8],
                                                      float d[2], float &m) {
        const int qh = get_int_b4(b->qh, 0);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int v = get_int_b4(b->qs, i);
            q[i] = q5_codes(v, qh, i, 0);
            q[i + 4] = q5_codes(v, qh, i, 1);
        }
        d[0] = d[1] = f16_bits_to_f32(b->d);
        m = f16_bits_to_f32(b->m);
    }
};

template <> struct WeightFormat<GGML_TYPE_Q8_0> {
    typedef block_q8_0 block;
    static constexpr int qk = 32, qi = 8, vdr = 2;
    static constexpr bool scale16 = false; // one scale per 32 elements (mmq)
    static constexpr bool has_min = false; // m != 0 in tile_codes (mmq)
    static constexpr bool int_scales = false; // see WeightFormat<GGML_TYPE_Q4_K>

    static __device__ __forceinline__ float vec_dot(const block *b, const block_q8_1 *y, int iqs) {
        int sumi = 0;
#pragma unroll
        for (int i = 0; i < vdr; ++i) {
            sumi = dp4a(get_int_b2(b->qs, iqs + i), get_int_b4(y->qs, iqs + i), sumi);
        }
        return f16_bits_to_f32(b->d) * y->d * (float)sumi;
    }

    // The wide walk (mmvq.cuh), wide_lanes = 1: a lane takes a whole block, activation block
    // kby from `y` (Q8Global or Q8Shared), and multiplies its whole integer dot by both scales
    // (the CPU's per-block product). A block is 34 bytes at 2-byte alignment: it is read as the
    // aligned words around it, the last one a half word where the block ends mid-word (no read
    // past the matrix), and the codes shifted into place.
    static constexpr bool wide = true;
    static constexpr int wide_lanes = 1;
    template <typename A>
    static __device__ __forceinline__ float vec_dot_wide(const block *b, const A &y, int kby,
                                                         int) {
        const size_t at = (size_t)b;
        const int *w = (const int *)(at & ~(size_t)3);
        const bool mid = (at & 2) != 0; // d in word 0's high half, the codes in words 1..8
        int v[9];
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            v[k] = __ldg(w + k);
        }
        v[8] = mid ? __ldg(w + 8) : (int)__ldg((const unsigned short *)(w + 8));
        const int4 a0 = y.q16(kby, 0), a1 = y.q16(kby, 1);
        const int u[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
        int sumi = 0;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const int c = mid ? v[i + 1] : (int)__funnelshift_r(v[i], v[i + 1], 16);
            sumi = dp4a(c, u[i], sumi);
        }
        const uint16_t d = (uint16_t)(mid ? (uint32_t)v[0] >> 16 : (uint32_t)v[0]);
        return f16_bits_to_f32(d) * y.d(kby) * (float)sumi;
    }

    static __device__ __forceinline__ void tile_codes(const block *b, int sub, int q[8],
                                                      float d[2], float &m) {
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            q[i] = get_int_b2(b->qs, i);
        }
        d[0] = d[1] = f16_bits_to_f32(b->d);
        m = 0.0f;
    }

    // Element i as f32, x = q * d, rounded as ferrolm-quant's dequantize (embed.cu).
    static __device__ __forceinline__ float dequant(const block *b, int i) {
        return __fmul_rn((float)b->qs[i], f16_bits_to_f32(b->d));
    }
};

#define FERROLM_QUANT_K_IN_PLACE
#include "quant_k.cuh"
#undef FERROLM_QUANT_K_IN_PLACE

// Q8_1 of the 32 values a warp holds (one each, lane = position) as the CPU backend makes it
// (ferrolm-quant's BlockQ8_1::quantize_x86, ggml's x86 quantize_row_q8_0/_q8_1): d = absmax /
// 127, codes x · (127 / absmax) rounded half to even, d stored as its f16 rounding.
static __device__ __forceinline__ void quantize_q8_1_warp(float x, block_q8_1 *b) {
    const float amax = warp_max(fabsf(x));
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    b->qs[threadIdx.x % WARP_SIZE] = (int8_t)__float2int_rn(__fmul_rn(x, id));
    if (threadIdx.x % WARP_SIZE == 0) {
        b->d = __half2float(__float2half_rn(d));
    }
}

// Q8_0 of the 32 values of a warp (lane i holds x[i]) into b, as ferrolm-quant's
// BlockQ8_0::quantize_x86 (ggml's x86 quantize_row_q8_0, what llama.cpp fills a q8_0 KV cache
// with): d = absmax / 127 stored as f16, q = x · (127 / absmax) rounded half to even.
static __device__ __forceinline__ void quantize_q8_0_warp(float x, block_q8_0 *b) {
    const float amax = warp_max(fabsf(x));
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    b->qs[threadIdx.x % WARP_SIZE] = (int8_t)__float2int_rn(__fmul_rn(x, id));
    if (threadIdx.x % WARP_SIZE == 0) {
        b->d = f32_to_f16_bits(d);
    }
}

// Q4_0 of the 32 values of a warp into b, as BlockQ4_0::quantize (ggml's quantize_row_q4_0_ref):
// the first value of largest magnitude, sign kept, maps to code 0: d = max / -8, q =
// min(15, (int)(x / d + 8.5)) truncated, packed two a byte (element i low, i + 16 high).
static __device__ __forceinline__ void quantize_q4_0_warp(float x, block_q4_0 *b) {
    const int lane = threadIdx.x % WARP_SIZE;
    float best = fabsf(x), best_v = x;
    int best_i = lane;
#pragma unroll
    for (int offset = WARP_SIZE / 2; offset > 0; offset >>= 1) {
        const float ob = __shfl_xor_sync(FULL_MASK, best, offset);
        const float ov = __shfl_xor_sync(FULL_MASK, best_v, offset);
        const int oi = __shfl_xor_sync(FULL_MASK, best_i, offset);
        if (ob > best || (ob == best && oi < best_i)) {
            best = ob;
            best_v = ov;
            best_i = oi;
        }
    }
    const float max = best == 0.0f ? 0.0f : best_v; // no magnitude above 0: +0, as the CPU
    const float d = max / -8.0f;
    const float id = d == 0.0f ? 0.0f : 1.0f / d;
    const float c = __fadd_rn(__fmul_rn(x, id), 8.5f);
    const int q = min(15, c <= 0.0f ? 0 : (int)c); // Rust's saturating `as u8`
    const int hi = __shfl_down_sync(FULL_MASK, q, 16);
    if (lane < 16) {
        b->qs[lane] = (uint8_t)(q | (hi << 4));
    }
    if (lane == 0) {
        b->d = f32_to_f16_bits(d);
    }
}

// Q8_K of the 256 values at x, by one warp, into the 8 blocks at y (ggml's quantize_row_q8_K):
// the value of largest magnitude (the first, on ties) maps to -127, iscale = -127 / that value,
// codes nearest_int(iscale * x) (round half to even) capped at 127, d = 1 / iscale.
static __device__ __forceinline__ void quantize_q8_k_warp(const float *x, block_q8_1 *y) {
    const int lane = threadIdx.x % WARP_SIZE;
    float v[8];
    float best = 0.0f, best_v = 0.0f;
    int best_i = QK_K;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        v[j] = x[8 * lane + j];
        if (fabsf(v[j]) > best) { // strict: the first of equals within the lane
            best = fabsf(v[j]);
            best_v = v[j];
            best_i = 8 * lane + j;
        }
    }
#pragma unroll
    for (int offset = WARP_SIZE / 2; offset > 0; offset >>= 1) {
        const float ob = __shfl_xor_sync(FULL_MASK, best, offset);
        const float ov = __shfl_xor_sync(FULL_MASK, best_v, offset);
        const int oi = __shfl_xor_sync(FULL_MASK, best_i, offset);
        if (ob > best || (ob == best && oi < best_i)) {
            best = ob;
            best_v = ov;
            best_i = oi;
        }
    }
    const float iscale = best == 0.0f ? 0.0f : __fdiv_rn(-127.0f, best_v);
    int packed[2] = {0, 0};
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        const int q = min(127, __float2int_rn(__fmul_rn(iscale, v[j])));
        packed[j / 4] |= (q & 0xff) << (8 * (j % 4));
    }
    // Values 8 lane.. are codes 8 (lane % 4).. of block lane / 4.
    block_q8_1 *b = y + lane / 4;
    int *qs = (int *)b->qs + 2 * (lane % 4);
    qs[0] = packed[0];
    qs[1] = packed[1];
    if (lane % 4 == 0) {
        b->d = best == 0.0f ? 0.0f : __fdiv_rn(1.0f, iscale);
    }
}

// ggml's e2m1 values, doubled (kvalues_mxfp4), of the eight 4-bit codes in `v` (two a byte):
// .x byte k is the value of byte k's low nibble, .y of its high nibble. Per half of v, one
// permute picks each code's magnitude from the table of codes 0-7, one from that of 8-15 (the
// negatives), and a third keeps the one the code's sign bit names; two more gather the halves.
static __device__ __forceinline__ int2 mxfp4_values(int v) {
    const uint32_t pos0 = 0x03020100u, pos1 = 0x0c080604u; // 0, 1, 2, 3 | 4, 6, 8, 12
    const uint32_t neg0 = 0xfdfeff00u, neg1 = 0xf4f8fafcu; // their negatives (-0 as 0)
    const uint32_t idx = (uint32_t)v & 0x77777777u;         // selectors 0-7: byte of (pos0, pos1)
    const uint32_t side = ((uint32_t)v & 0x88888888u) >> 1; // 4 where the sign bit is set
    uint32_t half[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        // Codes of bytes 2h and 2h + 1 in nibble order (low, high, low, high).
        const uint32_t s = (idx >> (16 * h)) & 0xFFFFu;
        const uint32_t p = __byte_perm(pos0, pos1, s), n = __byte_perm(neg0, neg1, s);
        half[h] = __byte_perm(p, n, 0x3210u | ((side >> (16 * h)) & 0xFFFFu));
    }
    return make_int2((int)__byte_perm(half[0], half[1], 0x6420u),
                     (int)__byte_perm(half[0], half[1], 0x7531u));
}

// The doubled E2M1 magnitudes of the four codes in s's low 16 bits, a byte each, where the
// code's sign bit is clear, and 0 where it is set: prmt's generic mode reads a selector
// nibble's high bit as "replicate the selected byte's sign", and no magnitude has one.
// (Inline PTX: __byte_perm documents only the selector's low three bits.)
static __device__ __forceinline__ int mxfp4_magnitudes(uint32_t s) {
    uint32_t r;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(0x03020100u), "r"(0x0c080604u), "r"(s));
    return (int)r;
}

// Block b's E8M0 exponent, and its 16 code bytes as four ints, from the five aligned 4-byte
// words around the block: blocks of 17 bytes are only byte-aligned, and byte loads cost an
// instruction a byte. The words end at the 4-byte boundary after the block's last byte, never
// further: device MXFP4 buffers are padded past their last block (QuantMatrix::upload), and
// staged GEMM rows hold the 16-byte chunks around their blocks (mmq_tile.cuh).
static __device__ __forceinline__ uint8_t mxfp4_load(const block_mxfp4 *b, int (&codes)[4]) {
    const size_t at = (size_t)b;
    const int *w = (const int *)(at & ~(size_t)3);
    const int o = (int)(at & 3);
    int v[5];
#pragma unroll
    for (int k = 0; k < 5; ++k) {
        v[k] = w[k];
    }
    // The codes start at byte o + 1 of the window: word 1 itself when o == 3.
    const int sh = 8 * ((o + 1) & 3);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        codes[i] = o == 3 ? v[i + 1] : (int)__funnelshift_r(v[i], v[i + 1], sh);
    }
    return (uint8_t)((uint32_t)v[0] >> (8 * o));
}

// 2^(e - 128) as an f32, bit for bit as ggml's ggml_e8m0_to_fp32_half (and ferrolm-quant's).
static __device__ __forceinline__ float e8m0_to_f32_half(uint8_t e) {
    const uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    return __uint_as_float(bits);
}

// MXFP4 (gpt-oss's experts): iqs in {0, 2}, as Q4_0, with the nibbles mapped to the doubled
// E2M1 values; the integer dot is exact, as the CPU's.
template <> struct WeightFormat<GGML_TYPE_MXFP4> {
    typedef block_mxfp4 block;
    static constexpr int qk = 32, qi = 4, vdr = 2;
    static constexpr bool scale16 = false; // one scale per 32 elements (mmq)
    static constexpr bool has_min = false; // m != 0 in tile_codes (mmq)
    static constexpr bool int_scales = false; // see WeightFormat<GGML_TYPE_Q4_K>

    static __device__ __forceinline__ float vec_dot(const block *b, const block_q8_1 *y, int iqs) {
        int sumi = 0;
#pragma unroll
        for (int i = 0; i < vdr; ++i) {
            const int2 v = mxfp4_values(get_int_b1(b->qs, iqs + i));
            sumi = dp4a(v.x, get_int_b4(y->qs, iqs + i), sumi);
            sumi = dp4a(v.y, get_int_b4(y->qs, iqs + i + qi), sumi);
        }
        return e8m0_to_f32_half(b->e) * y->d * (float)sumi;
    }

    // The wide walk (mmvq.cuh), wide_lanes = 1: a lane takes a whole block (mxfp4_load's five
    // aligned words), activation block kby from `y` (Q8Global or Q8Shared). Each block's
    // product is vec_dot's expression; only the f32 sum over blocks goes another way.
    static constexpr bool wide = true;
    static constexpr int wide_lanes = 1;
    //
    // The codes go through the lookup as they lie, four nibbles (two bytes: elements j, j + 16,
    // j + 1, j + 17) a permute: the activations are permuted into that order instead, once a
    // step for all of a warp's rows. A code's sign bit is the selector's sign-replicate bit
    // (mxfp4_magnitudes), so one permute gives the positive codes' magnitudes, another (signs
    // flipped) the negative ones', and the integer dot is their difference: the same sum as
    // vec_dot's, in about half the instructions.
    template <typename A>
    static __device__ __forceinline__ float vec_dot_wide(const block *b, const A &y, int kby,
                                                         int) {
        int codes[4];
        const uint8_t e = mxfp4_load(b, codes);
        const int4 a0 = y.q16(kby, 0), a1 = y.q16(kby, 1);
        const int lo[4] = {a0.x, a0.y, a0.z, a0.w}, hi[4] = {a1.x, a1.y, a1.z, a1.w};
        int pos = 0, neg = 0;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int x0 = (int)__byte_perm(lo[i], hi[i], 0x5140u);
            const int x1 = (int)__byte_perm(lo[i], hi[i], 0x7362u);
            const uint32_t c = (uint32_t)codes[i], n = c ^ 0x88888888u;
            pos = dp4a(mxfp4_magnitudes(c), x0, pos);
            pos = dp4a(mxfp4_magnitudes(c >> 16), x1, pos);
            neg = dp4a(mxfp4_magnitudes(n), x0, neg);
            neg = dp4a(mxfp4_magnitudes(n >> 16), x1, neg);
        }
        return e8m0_to_f32_half(e) * y.d(kby) * (float)(pos - neg);
    }

    // mmq: the 32 doubled E2M1 values as int8 codes (|code| <= 12), x = d * code with the
    // halved E8M0 scale as d: the CPU's integer dot and its per-block scale product.
    static __device__ __forceinline__ void tile_codes(const block *b, int sub, int q[8],
                                                      float d[2], float &m) {
        int codes[4];
        const uint8_t e = mxfp4_load(b, codes);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int2 v = mxfp4_values(codes[i]);
            q[i] = v.x;
            q[i + 4] = v.y;
        }
        d[0] = d[1] = e8m0_to_f32_half(e);
        m = 0.0f;
    }
};
