// Shared by attention.cu (the KV store and flash-decoding) and attention_prefill.cu (the
// prefills): the cache layout, its element types and the warp's online softmax state.
//
// Causal attention with grouped-query heads over a paged KV cache (common.cuh's KvPages: blocks
// of positions, each [n_kv_head][positions][head_dim]), f32 accumulation. The cache is f16, f32
// (-ctk/-ctv f32), or (q8_0, q4_0) quant.cuh's blocks of 32 elements, which flash-decoding and
// the scalar prefill read through KvF16 / KvF32 / KvBlocks (dequantized to f32 per element, as
// the CPU's).
//
// Positions and key counts are read from device memory, so a captured CUDA graph replays with
// new positions without re-capture. Query head h reads KV head h / (n_head / n_kv_head).
// Scores are dot(q, k) * scale, as the CPU computes them; exponentials use expf (not __expf).
// Every kernel takes `window`: a sliding window (gemma3, gpt-oss) of that many positions ending
// at the query's own (common.cuh's attn_first_key), or 0 for every key from 0. Keys before the
// window are skipped, not masked: whole splits and tiles start at the first visible key.
// Every kernel takes `sinks` too: null, or one logit per query head (gpt-oss's attention sinks)
// that joins the head's softmax maximum and denominator and has no value row, as ggml's
// soft_max with sinks; flash-decoding adds it once, in the combine of its splits.
#pragma once
#include "common.cuh"
#include "quant.cuh"

// Keys one prefill block stages in shared memory per tile.
#define ATTN_TILE_K 32
// Warps per attention block (decode: keys striped across warps; prefill: one query each).
#define ATTN_NWARPS 4
// No math.h under NVRTC: -inf from its bits.
#define ATTN_NEG_INF __int_as_float(0xff800000)

// The cache's element types: element i of a head's history (i = key * D + j) as f32.
struct KvF16 {
    static constexpr int qk = 1, bytes = 2;
    static __device__ __forceinline__ float get(const uint8_t *p, size_t i) {
        return f16_bits_to_f32(((const uint16_t *)p)[i]);
    }
};

struct KvF32 {
    static constexpr int qk = 1, bytes = 4;
    static __device__ __forceinline__ float get(const uint8_t *p, size_t i) {
        return ((const float *)p)[i];
    }
};

template <int TYPE> struct KvBlocks {
    typedef WeightFormat<TYPE> W;
    static constexpr int qk = W::qk, bytes = sizeof(typename W::block);
    static __device__ __forceinline__ float get(const uint8_t *p, size_t i) {
        return W::dequant((const typename W::block *)p + i / qk, (int)(i % qk));
    }
};

// One KV head's rows in a paged cache of format F (common.cuh's KvPages): row(key) is the
// key's first byte, its element j F::get(row(key), j).
template <typename F> struct KvHead {
    const uint8_t *base;
    KvPages pages;
    int g;
    size_t row_bytes;
    __device__ __forceinline__ KvHead(const void *cache, KvPages pages, int g, int d)
        : base((const uint8_t *)cache), pages(pages), g(g), row_bytes((size_t)d / F::qk * F::bytes) {}
    __device__ __forceinline__ const uint8_t *row(int key) const {
        return base + pages.row(g, key) * row_bytes;
    }
};

// One warp's online softmax state for one query row: lane holds dims lane + 32 i (those of
// the row: LaneDims).
template <int D> struct WarpState {
    typedef LaneDims<D> L;
    float m, l, acc[L::N];

    __device__ __forceinline__ void init() {
        m = ATTN_NEG_INF;
        l = 0.0f;
#pragma unroll
        for (int i = 0; i < L::N; ++i) {
            acc[i] = 0.0f;
        }
    }

    // Adds key with score s and value row vrow (f32, lane-strided).
    template <typename VROW> __device__ __forceinline__ void add(float s, VROW vrow) {
        const float m_new = fmaxf(m, s);
        const float corr = expf(m - m_new); // 0 on the first key (m = -inf)
        const float p = expf(s - m_new);
        l = l * corr + p;
#pragma unroll
        for (int i = 0; i < L::N; ++i) {
            const int j = threadIdx.x % WARP_SIZE + WARP_SIZE * i;
            if (L::in_row(j)) {
                acc[i] = acc[i] * corr + p * vrow(j);
            }
        }
        m = m_new;
    }

    // Joins a sink logit s (gpt-oss): in the maximum and the sum, with no value row.
    __device__ __forceinline__ void add_sink(float s) {
        const float m_new = fmaxf(m, s);
        const float corr = expf(m - m_new);
        l = l * corr + expf(s - m_new);
#pragma unroll
        for (int i = 0; i < L::N; ++i) {
            acc[i] *= corr;
        }
        m = m_new;
    }
};
