// Embedding gather: rows of a ggml-format table for token ids in device memory, dequantized to
// f32 with the same roundings as ferrolm-quant's dequantize (products written with
// __fmul_rn/__fsub_rn so that NVRTC does not fuse them), hence bit-identical rows.
#include "common.cuh"
#include "quant.cuh"

#define GGML_TYPE_F32 0
#define GGML_TYPE_F16 1

template <int TYPE> struct Dequant;

template <> struct Dequant<GGML_TYPE_F32> {
    static constexpr int qk = 1, bytes = 4;
    static __device__ __forceinline__ float get(const uint8_t *b, int) {
        return __uint_as_float((uint32_t)b[0] | ((uint32_t)b[1] << 8) | ((uint32_t)b[2] << 16) |
                               ((uint32_t)b[3] << 24));
    }
};

template <> struct Dequant<GGML_TYPE_F16> {
    static constexpr int qk = 1, bytes = 2;
    static __device__ __forceinline__ float get(const uint8_t *b, int) {
        return f16_bits_to_f32((uint16_t)(b[0] | (b[1] << 8)));
    }
};

// x = q * d.
template <> struct Dequant<GGML_TYPE_Q8_0> {
    static constexpr int qk = 32, bytes = sizeof(block_q8_0);
    static __device__ __forceinline__ float get(const uint8_t *p, int i) {
        const block_q8_0 *b = (const block_q8_0 *)p;
        return __fmul_rn((float)b->qs[i], f16_bits_to_f32(b->d));
    }
};

// Sub-block j = i / 32: x = (d * sc) * q - dmin * m, q the low (j even) or high nibble of
// byte 32 (j / 2) + i % 32.
template <> struct Dequant<GGML_TYPE_Q4_K> {
    static constexpr int qk = QK_K, bytes = sizeof(block_q4_K);
    static __device__ __forceinline__ float get(const uint8_t *p, int i) {
        const block_q4_K *b = (const block_q4_K *)p;
        const int j = i / 32;
        const uint8_t *s = b->scales;
        uint8_t sc, m;
        if (j < 4) {
            sc = s[j] & 63;
            m = s[j + 4] & 63;
        } else {
            sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
            m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
        }
        const float dl = __fmul_rn(f16_bits_to_f32(b->d), (float)sc);
        const float ml = __fmul_rn(f16_bits_to_f32(b->dmin), (float)m);
        const int q = (b->qs[32 * (j / 2) + i % 32] >> (4 * (j % 2))) & 0xF;
        return __fsub_rn(__fmul_rn(dl, (float)q), ml);
    }
};

// x = (d * scales[i / 16]) * (q - 32); the ql/qh interleaving of ggml's dequantize_row_q6_K:
// in half n = i / 128, with r = i % 128, l = r % 32, quarter c = r / 32: the low nibble of
// ql[64n + l + 32 (c % 2)] (c < 2) or its high nibble (c >= 2), and bits 2c of qh[32n + l].
template <> struct Dequant<GGML_TYPE_Q6_K> {
    static constexpr int qk = QK_K, bytes = sizeof(block_q6_K);
    static __device__ __forceinline__ float get(const uint8_t *p, int i) {
        const block_q6_K *b = (const block_q6_K *)p;
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

// out[t][c] = table[ids[t]][c] for c < cols; row_bytes = cols / qk * block bytes. One thread
// per output element, grid-stride.
template <int TYPE>
static __device__ __forceinline__ void embed_rows(const uint8_t *__restrict__ table,
                                                  const uint32_t *__restrict__ ids,
                                                  float *__restrict__ out, int n, int cols) {
    typedef Dequant<TYPE> F;
    const size_t row_bytes = (size_t)(cols / F::qk) * F::bytes;
    const size_t total = (size_t)n * cols;
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < total;
         e += (size_t)gridDim.x * blockDim.x) {
        const size_t t = e / cols;
        const int c = (int)(e % cols);
        const uint8_t *row = table + (size_t)ids[t] * row_bytes;
        out[e] = F::get(row + (size_t)(c / F::qk) * F::bytes, c % F::qk);
    }
}

#define EMBED_INSTANCE(NAME, TYPE)                                                                \
    extern "C" __global__ void embed_##NAME(const uint8_t *table, const uint32_t *ids,            \
                                            float *out, int n, int cols) {                        \
        embed_rows<TYPE>(table, ids, out, n, cols);                                               \
    }

EMBED_INSTANCE(f32, GGML_TYPE_F32)
EMBED_INSTANCE(f16, GGML_TYPE_F16)
EMBED_INSTANCE(q8_0, GGML_TYPE_Q8_0)
EMBED_INSTANCE(q4_k, GGML_TYPE_Q4_K)
EMBED_INSTANCE(q6_k, GGML_TYPE_Q6_K)
