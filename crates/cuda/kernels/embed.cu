// Embedding gather: rows of a ggml-format table for token ids in device memory, dequantized to
// f32 with the same roundings as ferrolm-quant's dequantize (products written with
// __fmul_rn/__fsub_rn so that NVRTC does not fuse them), hence bit-identical rows.
#include "common.cuh"
#include "quant.cuh"

#define GGML_TYPE_F32 0
#define GGML_TYPE_F16 1

// Element i of the block at p as f32: the block formats through their `WeightFormat<TYPE>::
// dequant` (quant.cuh, the one definition of each layout), the float formats here.
template <int TYPE> struct Dequant {
    typedef WeightFormat<TYPE> W;
    static constexpr int qk = W::qk, bytes = sizeof(typename W::block);
    static __device__ __forceinline__ float get(const uint8_t *p, int i) {
        return W::dequant((const typename W::block *)p, i);
    }
};

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
        dependent_launch_entry();                                                                 \
        embed_rows<TYPE>(table, ids, out, n, cols);                                               \
    }

EMBED_INSTANCE(f32, GGML_TYPE_F32)
EMBED_INSTANCE(f16, GGML_TYPE_F16)
EMBED_INSTANCE(q8_0, GGML_TYPE_Q8_0)
EMBED_INSTANCE(q4_k, GGML_TYPE_Q4_K)
EMBED_INSTANCE(q6_k, GGML_TYPE_Q6_K)
