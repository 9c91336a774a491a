// Causal attention with grouped-query heads over a head-major KV cache ([n_kv_head][n_ctx]
// [head_dim], as crates/cpu/src/kv.rs's LayerKv), f32 accumulation. The cache is f16, or
// (-ctk/-ctv q8_0, q4_0) quant.cuh's blocks of 32 elements, which flash-decoding and the scalar
// prefill read through KvF16 / KvBlocks (dequantized to f32 per element, as the CPU's).
//
// Positions and key counts are read from device memory, so a captured CUDA graph replays with
// new positions without re-capture. Query head h reads KV head h / (n_head / n_kv_head).
// Scores are dot(q, k) * scale, as the CPU computes them; exponentials use expf (not __expf).
#include "common.cuh"
#include "quant.cuh"

// Keys one prefill block stages in shared memory per tile.
#define ATTN_TILE_K 32
// Warps per attention block (decode: keys striped across warps; prefill: one query each).
#define ATTN_NWARPS 4
// No math.h under NVRTC: -inf from its bits.
#define ATTN_NEG_INF __int_as_float(0xff800000)

// kc/vc[g][pos0 + t][:] = f16(k/v[t][g*head_dim..]); k, v: [n][n_kv_head * head_dim] f32.
extern "C" __global__ void kv_store_f16(const float *__restrict__ k, const float *__restrict__ v,
                                        uint16_t *__restrict__ kc, uint16_t *__restrict__ vc,
                                        const uint32_t *__restrict__ pos0, int n, int n_kv_head,
                                        int head_dim, int n_ctx) {
    dependent_launch_entry();
    const int width = n_kv_head * head_dim;
    const size_t total = (size_t)n * width;
    const size_t p0 = *pos0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        const size_t t = i / width;
        const int c = (int)(i % width), g = c / head_dim, d = c % head_dim;
        const size_t at = ((size_t)g * n_ctx + p0 + t) * head_dim + d;
        kc[at] = f32_to_f16_bits(k[i]);
        vc[at] = f32_to_f16_bits(v[i]);
    }
}

// The cache's element types: element i of a head's history (i = key * D + j) as f32.
struct KvF16 {
    static constexpr int qk = 1, bytes = 2;
    static __device__ __forceinline__ float get(const uint8_t *p, size_t i) {
        return f16_bits_to_f32(((const uint16_t *)p)[i]);
    }
};

template <int TYPE> struct KvBlocks {
    typedef WeightFormat<TYPE> W;
    static constexpr int qk = W::qk, bytes = sizeof(typename W::block);
    static __device__ __forceinline__ float get(const uint8_t *p, size_t i) {
        return W::dequant((const typename W::block *)p + i / qk, (int)(i % qk));
    }
};

// One KV head's history in a cache of format F, from element `first` (a multiple of 32).
template <typename F> struct KvHead {
    const uint8_t *p;
    __device__ __forceinline__ KvHead(const void *cache, size_t first)
        : p((const uint8_t *)cache + first / F::qk * F::bytes) {}
    __device__ __forceinline__ float operator()(size_t i) const { return F::get(p, i); }
};

// kc/vc[g][pos0 + t][:] = blocks of k/v[t][g*head_dim..], one warp per 32-element block (the
// CPU's quantizers, quant.cuh). Grid-stride over blocks, whole warps; head_dim % 32 == 0.
template <typename BLOCK, void (*QUANTIZE)(float, BLOCK *)>
static __device__ __forceinline__ void kv_store_blocks(const float *__restrict__ k,
                                                       const float *__restrict__ v, BLOCK *kc,
                                                       BLOCK *vc, const uint32_t *pos0, int n,
                                                       int n_kv_head, int head_dim, int n_ctx) {
    const int width = n_kv_head * head_dim;
    const size_t blocks = (size_t)n * width / 32;
    const size_t p0 = *pos0;
    const size_t warps = (size_t)gridDim.x * blockDim.x / WARP_SIZE;
    for (size_t b = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / WARP_SIZE; b < blocks;
         b += warps) {
        const size_t i = b * 32 + threadIdx.x % WARP_SIZE;
        const size_t t = i / width;
        const int c = (int)(i % width), g = c / head_dim, d = c % head_dim;
        const size_t at = (((size_t)g * n_ctx + p0 + t) * head_dim + d) / 32;
        QUANTIZE(k[i], kc + at);
        QUANTIZE(v[i], vc + at);
    }
}

extern "C" __global__ void kv_store_q8_0(const float *k, const float *v, block_q8_0 *kc,
                                         block_q8_0 *vc, const uint32_t *pos0, int n,
                                         int n_kv_head, int head_dim, int n_ctx) {
    dependent_launch_entry();
    kv_store_blocks<block_q8_0, quantize_q8_0_warp>(k, v, kc, vc, pos0, n, n_kv_head, head_dim,
                                                    n_ctx);
}

extern "C" __global__ void kv_store_q4_0(const float *k, const float *v, block_q4_0 *kc,
                                         block_q4_0 *vc, const uint32_t *pos0, int n,
                                         int n_kv_head, int head_dim, int n_ctx) {
    dependent_launch_entry();
    kv_store_blocks<block_q4_0, quantize_q4_0_warp>(k, v, kc, vc, pos0, n, n_kv_head, head_dim,
                                                    n_ctx);
}

// One warp's online softmax state for one query row: lane holds dims lane + 32 i.
template <int D> struct WarpState {
    float m, l, acc[D / WARP_SIZE];

    __device__ __forceinline__ void init() {
        m = ATTN_NEG_INF;
        l = 0.0f;
#pragma unroll
        for (int i = 0; i < D / WARP_SIZE; ++i) {
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
        for (int i = 0; i < D / WARP_SIZE; ++i) {
            acc[i] = acc[i] * corr + p * vrow(threadIdx.x % WARP_SIZE + WARP_SIZE * i);
        }
        m = m_new;
    }
};

// Merges the ATTN_NWARPS warp states of a block (through shared memory) into warp 0's view:
// returns in every thread of the block the merged m and l; sacc[D] holds the merged acc.
template <int D>
static __device__ __forceinline__ void merge_warps(const WarpState<D> &st, float *sm, float *sl,
                                                   float *sacc_w, float &m_out, float &l_out) {
    const int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
    if (lane == 0) {
        sm[warp] = st.m;
        sl[warp] = st.l;
    }
#pragma unroll
    for (int i = 0; i < D / WARP_SIZE; ++i) {
        sacc_w[warp * D + lane + WARP_SIZE * i] = st.acc[i];
    }
    __syncthreads();
    float m = ATTN_NEG_INF;
    for (int w = 0; w < ATTN_NWARPS; ++w) {
        m = fmaxf(m, sm[w]);
    }
    float l = 0.0f;
    for (int w = 0; w < ATTN_NWARPS; ++w) {
        l += sm[w] == ATTN_NEG_INF ? 0.0f : sl[w] * expf(sm[w] - m);
    }
    // Thread j < D merges dim j into row 0 of sacc_w.
    for (int j = threadIdx.x; j < D; j += blockDim.x) {
        float a = 0.0f;
        for (int w = 0; w < ATTN_NWARPS; ++w) {
            a += sm[w] == ATTN_NEG_INF ? 0.0f : sacc_w[w * D + j] * expf(sm[w] - m);
        }
        sacc_w[j] = a; // only thread j reads and writes column j
    }
    __syncthreads();
    m_out = m;
    l_out = l;
}

static __device__ __forceinline__ void combine_head(const float *part_m, const float *part_l,
                                                    const float *part_acc, float *out, int n_head,
                                                    int n_split, int head_dim, int h, int t);

// Flash-decoding, pass 1. grid (n_split, n_head, n_q); block ATTN_NWARPS warps.
// q: [n_q][n_head][D]; query t sees keys 0..pos[t] (inclusive). Split s takes a contiguous
// chunk of ceil(n_keys / n_split) keys; warps stripe over it. Writes part_m/part_l
// [n_q][n_head][n_split] and part_acc [n_q][n_head][n_split][D] (unnormalised). With `done`
// not null, the head's last block to finish then combines them into out as pass 2 would.
template <int D, typename F>
static __device__ __forceinline__ void attn_decode_split(
    const float *__restrict__ q, const void *__restrict__ kc, const void *__restrict__ vc,
    const uint32_t *__restrict__ pos, float *__restrict__ part_m, float *__restrict__ part_l,
    float *__restrict__ part_acc, int *__restrict__ done, float *__restrict__ out, int n_head,
    int n_kv_head, int n_ctx, float scale) {
    __shared__ float sq[D];
    __shared__ float sm[ATTN_NWARPS], sl[ATTN_NWARPS];
    __shared__ float sacc[ATTN_NWARPS * D];
    const int split = blockIdx.x, n_split = gridDim.x, h = blockIdx.y, t = blockIdx.z;
    const int g = h / (n_head / n_kv_head);
    const int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
    const int n_keys = (int)pos[t] + 1;
    const int chunk = (n_keys + n_split - 1) / n_split;
    const int k0 = split * chunk, k1 = min(n_keys, k0 + chunk);
    for (int j = threadIdx.x; j < D; j += blockDim.x) {
        sq[j] = q[((size_t)t * n_head + h) * D + j];
    }
    __syncthreads();
    const KvHead<F> kh(kc, (size_t)g * n_ctx * D), vh(vc, (size_t)g * n_ctx * D);
    WarpState<D> st;
    st.init();
    for (int key = k0 + warp; key < k1; key += ATTN_NWARPS) {
        const size_t r = (size_t)key * D;
        float dot = 0.0f;
#pragma unroll
        for (int i = 0; i < D / WARP_SIZE; ++i) {
            const int j = lane + WARP_SIZE * i;
            dot += sq[j] * kh(r + j);
        }
        const float s = warp_sum(dot) * scale;
        st.add(s, [vh, r](int j) { return vh(r + j); });
    }
    float m, l;
    merge_warps<D>(st, sm, sl, sacc, m, l);
    const size_t part = ((size_t)t * n_head + h) * n_split + split;
    if (threadIdx.x == 0) {
        part_m[part] = m; // -inf for an empty split
        part_l[part] = l;
    }
    for (int j = threadIdx.x; j < D; j += blockDim.x) {
        part_acc[part * D + j] = sacc[j];
    }
    if (done == nullptr) {
        return; // attn_decode_combine runs next
    }
    // The head's last split block to finish combines (the pass-2 kernel's arithmetic, so the
    // result is the same), and resets the counter for the next launch or graph replay.
    __shared__ bool last;
    __threadfence(); // this block's partials are visible before it is counted
    __syncthreads();
    if (threadIdx.x == 0) {
        int *c = done + (size_t)t * n_head + h;
        last = atomicAdd(c, 1) == n_split - 1;
        if (last) {
            *c = 0;
        }
    }
    __syncthreads();
    if (last) {
        __threadfence();
        combine_head(part_m, part_l, part_acc, out, n_head, n_split, D, h, t);
    }
}

// Flash-decoding's combine of head h of query row t: out = Σ_s acc_s e^(m_s - m) / Σ_s l_s
// e^(m_s - m) over the non-empty splits, in split order; threads share out the head's elements.
// Loads bypass L1 (__ldcg): in the split kernel's fused use, other blocks wrote the partials.
static __device__ __forceinline__ void combine_head(const float *part_m, const float *part_l,
                                                    const float *part_acc, float *out, int n_head,
                                                    int n_split, int head_dim, int h, int t) {
    const size_t base = ((size_t)t * n_head + h) * n_split;
    float m = ATTN_NEG_INF;
    for (int s = 0; s < n_split; ++s) {
        m = fmaxf(m, __ldcg(part_m + base + s));
    }
    for (int j = threadIdx.x; j < head_dim; j += blockDim.x) {
        float l = 0.0f, a = 0.0f;
        for (int s = 0; s < n_split; ++s) {
            const float ms = __ldcg(part_m + base + s);
            if (ms == ATTN_NEG_INF) {
                continue;
            }
            const float w = expf(ms - m);
            l += __ldcg(part_l + base + s) * w;
            a += __ldcg(part_acc + (base + s) * head_dim + j) * w;
        }
        out[((size_t)t * n_head + h) * head_dim + j] = a / l;
    }
}

// Flash-decoding, pass 2: grid (n_head, n_q), block D threads; out [n_q][n_head][D].
extern "C" __global__ void attn_decode_combine(const float *__restrict__ part_m,
                                               const float *__restrict__ part_l,
                                               const float *__restrict__ part_acc,
                                               float *__restrict__ out, int n_head, int n_split,
                                               int head_dim) {
    dependent_launch_entry();
    combine_head(part_m, part_l, part_acc, out, n_head, n_split, head_dim, blockIdx.x,
                 blockIdx.y);
}

// Flash attention over a ubatch: grid (ceil(n_q / ATTN_NWARPS), n_head); block ATTN_NWARPS
// warps, one query row each. K/V tiles of ATTN_TILE_K keys are staged in shared memory as f32
// by the whole block; query t sees keys 0..pos[t].
template <int D, typename F>
static __device__ __forceinline__ void attn_prefill(
    const float *__restrict__ q, const void *__restrict__ kc, const void *__restrict__ vc,
    const uint32_t *__restrict__ pos, float *__restrict__ out, int n_q, int n_head, int n_kv_head,
    int n_ctx, float scale) {
    __shared__ float sk[ATTN_TILE_K * D];
    __shared__ float sv[ATTN_TILE_K * D];
    __shared__ float sq[ATTN_NWARPS * D];
    __shared__ int s_keys;
    const int h = blockIdx.y, g = h / (n_head / n_kv_head);
    const int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
    const int t = blockIdx.x * ATTN_NWARPS + warp;
    const bool active = t < n_q;
    const int my_keys = active ? (int)pos[t] + 1 : 0;
    if (threadIdx.x == 0) {
        s_keys = 0;
    }
    __syncthreads();
    if (lane == 0) {
        atomicMax(&s_keys, my_keys);
    }
#pragma unroll
    for (int i = 0; i < D / WARP_SIZE; ++i) {
        const int j = lane + WARP_SIZE * i;
        sq[warp * D + j] = active ? q[((size_t)t * n_head + h) * D + j] : 0.0f;
    }
    __syncthreads();
    const int n_keys = s_keys;
    const KvHead<F> kh(kc, (size_t)g * n_ctx * D), vh(vc, (size_t)g * n_ctx * D);
    const float *qr = sq + warp * D;
    WarpState<D> st;
    st.init();
    for (int k0 = 0; k0 < n_keys; k0 += ATTN_TILE_K) {
        const int nk = min(ATTN_TILE_K, n_keys - k0);
        __syncthreads(); // the previous tile is no longer read
        for (int i = threadIdx.x; i < nk * D; i += blockDim.x) {
            sk[i] = kh((size_t)k0 * D + i);
            sv[i] = vh((size_t)k0 * D + i);
        }
        __syncthreads();
        const int upto = min(nk, my_keys - k0); // causal: keys < my_keys
        for (int kk = 0; kk < upto; ++kk) {
            const float *kr = sk + kk * D;
            float dot = 0.0f;
#pragma unroll
            for (int i = 0; i < D / WARP_SIZE; ++i) {
                const int j = lane + WARP_SIZE * i;
                dot += qr[j] * kr[j];
            }
            const float s = warp_sum(dot) * scale;
            const float *vr = sv + kk * D;
            st.add(s, [vr](int j) { return vr[j]; });
        }
    }
    if (!active) {
        return;
    }
    const float inv = 1.0f / st.l;
#pragma unroll
    for (int i = 0; i < D / WARP_SIZE; ++i) {
        out[((size_t)t * n_head + h) * D + lane + WARP_SIZE * i] = st.acc[i] * inv;
    }
}

// Σ prod[0..D) in the order of ggml's x86 f16 dot product (the CPU's attention::dot_f16): 64
// elements a step into sixteen lanes of four accumulators (lane l of accumulator a takes
// element 16a + l), the accumulators folded (0+2) + (1+3), the lanes halved 8, 4, 2, 1. Every
// warp computes it (lanes 0-15 hold the lanes) and all its lanes return it.
template <int D>
static __device__ __forceinline__ float dot_f16_order(const float *prod, int lane) {
    float r = 0.0f;
    if (lane < 16) {
        float a[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            a[i] = prod[16 * i + lane];
#pragma unroll
            for (int step = 1; step < D / 64; ++step) {
                a[i] += prod[64 * step + 16 * i + lane];
            }
        }
        r = (a[0] + a[2]) + (a[1] + a[3]);
    }
#pragma unroll
    for (int width = 8; width >= 1; width /= 2) {
        r += __shfl_down_sync(FULL_MASK, r, width);
    }
    return __shfl_sync(FULL_MASK, r, 0);
}

// ggml's CPU flash attention for ubatches under 64 rows (ggml_compute_forward_flash_attn_ext_f16
// _one_chunk), reproduced so that CUDA agrees with llama.cpp's CPU, and ferrolm's, which does the
// same (crates/cpu/src/attention.rs): Q rounded to f16, each score an f32 dot of f16 values times
// scale, keys in order with an online softmax, the output accumulated in f16 and rounded at every
// step (V·vs added by an FMA), the running sum S = S·ms + vs by an FMA, and the score summed
// in the CPU's order (dot_f16_order). Only e^x may round differently (libm's expf there, the
// correctly rounded value here). grid (n_q, n_head), block D threads (thread j owns element j
// of the row's output).
template <int D>
static __device__ __forceinline__ void attn_prefill_f16ref(
    const float *__restrict__ q, const uint16_t *__restrict__ kc, const uint16_t *__restrict__ vc,
    const uint32_t *__restrict__ pos, float *__restrict__ out, int n_q, int n_head, int n_kv_head,
    int n_ctx, float scale) {
    static_assert(D % 64 == 0 && D <= 128, "dot_f16 order: 64 or 128");
    __shared__ float prod[2][D];
    const int t = blockIdx.x, h = blockIdx.y, j = threadIdx.x;
    const int g = h / (n_head / n_kv_head);
    const int lane = j % WARP_SIZE;
    const size_t row = ((size_t)t * n_head + h) * D;
    const float qj = __half2float(__float2half_rn(q[row + j]));
    const uint16_t *kh = kc + (size_t)g * n_ctx * D;
    const uint16_t *vh = vc + (size_t)g * n_ctx * D;
    float m = ATTN_NEG_INF, l = 0.0f;
    __half acc = __float2half_rn(0.0f);
    const int n_keys = (int)pos[t] + 1;
    for (int key = 0; key < n_keys; ++key) {
        float *buf = prod[key % 2]; // alternating buffers: one barrier a key
        buf[j] = qj * f16_bits_to_f32(kh[(size_t)key * D + j]); // exact: f16 × f16
        __syncthreads();
        const float s = __fmul_rn(dot_f16_order<D>(buf, lane), scale); // not fused below
        float ms = 1.0f, vs = 1.0f;
        if (s > m) {
            ms = exp_rn(m - s);
            m = s;
            acc = __float2half_rn(__half2float(acc) * ms);
        } else {
            vs = exp_rn(s - m);
        }
        const float v = f16_bits_to_f32(vh[(size_t)key * D + j]);
        acc = __float2half_rn(__fmaf_rn(v, vs, __half2float(acc)));
        l = __fmaf_rn(l, ms, vs);
    }
    out[row + j] = __half2float(acc) * (1.0f / l);
}

// The CPU's f32 attention (crates/cpu/src/attention.rs, for ubatches of 64 rows and more):
// each score a dot of f32 q and the cache's values summed in eight lanes (lane i takes elements
// 8c + i in order), the lanes added in order, times scale; softmax as norm::softmax (maximum,
// e^(s - max) summed key by key, times 1 / Σ); the output Σ_k w_k · v_k key by key, products
// and sums rounded apart. Only e^x may round differently (libm's expf there).
//
// A warp per (query row, head), F32REF_WARPS a block, grid ceil(n_q · n_head / F32REF_WARPS):
// lane 8g + i keeps lane i of key k0 + g's dot, four keys at a time, so no barriers; the
// scores are computed three times (maximum, sum, output) rather than kept, so any number of
// keys fits.
#define F32REF_WARPS 4

template <int D> struct F32RefRow {
    float q[D / 8]; // q[8c + i] for this lane's i
    const uint16_t *k;
    int n_keys, g, i;
    float scale;
    // The score of key k0 + g (the caller keeps it below n_keys for the lanes it reads).
    __device__ __forceinline__ float score(int k0) const {
        const int key = min(k0 + g, n_keys - 1);
        const uint16_t *kr = k + (size_t)key * D;
        float a = 0.0f;
#pragma unroll
        for (int c = 0; c < D / 8; ++c) {
            a = __fadd_rn(a, __fmul_rn(q[c], f16_bits_to_f32(kr[8 * c + i])));
        }
        float r = __shfl_sync(FULL_MASK, a, 8 * g);
#pragma unroll
        for (int l = 1; l < 8; ++l) {
            r = __fadd_rn(r, __shfl_sync(FULL_MASK, a, 8 * g + l));
        }
        return __fmul_rn(r, scale);
    }
};

template <int D>
static __device__ __forceinline__ void attn_prefill_f32ref(
    const float *__restrict__ q, const uint16_t *__restrict__ kc, const uint16_t *__restrict__ vc,
    const uint32_t *__restrict__ pos, float *__restrict__ out, int n_q, int n_head, int n_kv_head,
    int n_ctx, float scale) {
    const int lane = threadIdx.x % WARP_SIZE;
    const int w = blockIdx.x * F32REF_WARPS + threadIdx.x / WARP_SIZE;
    if (w >= n_q * n_head) {
        return; // the whole warp
    }
    const int t = w / n_head, h = w % n_head;
    const int kvh = h / (n_head / n_kv_head);
    const size_t row = ((size_t)t * n_head + h) * D;
    F32RefRow<D> r;
    r.g = lane / 8;
    r.i = lane % 8;
#pragma unroll
    for (int c = 0; c < D / 8; ++c) {
        r.q[c] = q[row + 8 * c + r.i];
    }
    r.k = kc + (size_t)kvh * n_ctx * D;
    r.n_keys = (int)pos[t] + 1;
    r.scale = scale;
    const uint16_t *vh = vc + (size_t)kvh * n_ctx * D;

    float m = ATTN_NEG_INF;
    for (int k0 = 0; k0 < r.n_keys; k0 += 4) {
        const float s = r.score(k0);
        if (k0 + r.g < r.n_keys) {
            m = fmaxf(m, s);
        }
    }
#pragma unroll
    for (int off = 8; off < WARP_SIZE; off *= 2) {
        m = fmaxf(m, __shfl_xor_sync(FULL_MASK, m, off));
    }
    float sum = 0.0f;
    for (int k0 = 0; k0 < r.n_keys; k0 += 4) {
        const float e = exp_rn(__fsub_rn(r.score(k0), m));
        for (int g = 0; g < 4 && k0 + g < r.n_keys; ++g) {
            sum = __fadd_rn(sum, __shfl_sync(FULL_MASK, e, 8 * g));
        }
    }
    const float inv = __fdiv_rn(1.0f, sum);
    float o[D / WARP_SIZE];
#pragma unroll
    for (int j = 0; j < D / WARP_SIZE; ++j) {
        o[j] = 0.0f;
    }
    for (int k0 = 0; k0 < r.n_keys; k0 += 4) {
        const float wk = __fmul_rn(exp_rn(__fsub_rn(r.score(k0), m)), inv);
        for (int g = 0; g < 4 && k0 + g < r.n_keys; ++g) {
            const float wg = __shfl_sync(FULL_MASK, wk, 8 * g);
            const uint16_t *vr = vh + (size_t)(k0 + g) * D;
#pragma unroll
            for (int j = 0; j < D / WARP_SIZE; ++j) {
                o[j] = __fadd_rn(o[j], __fmul_rn(wg, f16_bits_to_f32(vr[lane + WARP_SIZE * j])));
            }
        }
    }
#pragma unroll
    for (int j = 0; j < D / WARP_SIZE; ++j) {
        out[row + lane + WARP_SIZE * j] = o[j];
    }
}

#define ATTN_INSTANCES(D)                                                                         \
    extern "C" __global__ void attn_decode_split_d##D(                                           \
        const float *q, const uint16_t *kc, const uint16_t *vc, const uint32_t *pos,              \
        float *part_m, float *part_l, float *part_acc, int *done, float *out, int n_head,         \
        int n_kv_head, int n_ctx, float scale) {                                                  \
        dependent_launch_entry();                                                                 \
        attn_decode_split<D, KvF16>(q, kc, vc, pos, part_m, part_l, part_acc, done, out, n_head,  \
                                    n_kv_head, n_ctx, scale);                                     \
    }                                                                                             \
    extern "C" __global__ void attn_prefill_f16ref_d##D(                                          \
        const float *q, const uint16_t *kc, const uint16_t *vc, const uint32_t *pos, float *out,  \
        int n_q, int n_head, int n_kv_head, int n_ctx, float scale) {                             \
        dependent_launch_entry();                                                                 \
        attn_prefill_f16ref<D>(q, kc, vc, pos, out, n_q, n_head, n_kv_head, n_ctx, scale);        \
    }                                                                                             \
    extern "C" __global__ void attn_prefill_f32ref_d##D(                                          \
        const float *q, const uint16_t *kc, const uint16_t *vc, const uint32_t *pos, float *out,  \
        int n_q, int n_head, int n_kv_head, int n_ctx, float scale) {                             \
        dependent_launch_entry();                                                                 \
        attn_prefill_f32ref<D>(q, kc, vc, pos, out, n_q, n_head, n_kv_head, n_ctx, scale);        \
    }                                                                                             \
    extern "C" __global__ void attn_prefill_d##D(const float *q, const uint16_t *kc,              \
                                                 const uint16_t *vc, const uint32_t *pos,         \
                                                 float *out, int n_q, int n_head, int n_kv_head,  \
                                                 int n_ctx, float scale) {                        \
        dependent_launch_entry();                                                                 \
        attn_prefill<D, KvF16>(q, kc, vc, pos, out, n_q, n_head, n_kv_head, n_ctx, scale);        \
    }

ATTN_INSTANCES(64)
ATTN_INSTANCES(128)

// Flash-decoding and the scalar prefill over a quantized cache (NAME: q8_0, q4_0).
#define ATTN_QUANT_INSTANCES(NAME, TYPE, D)                                                      \
    extern "C" __global__ void attn_decode_split_##NAME##_d##D(                                  \
        const float *q, const void *kc, const void *vc, const uint32_t *pos, float *part_m,      \
        float *part_l, float *part_acc, int *done, float *out, int n_head, int n_kv_head,        \
        int n_ctx, float scale) {                                                                \
        dependent_launch_entry();                                                                \
        attn_decode_split<D, KvBlocks<TYPE>>(q, kc, vc, pos, part_m, part_l, part_acc, done,     \
                                             out, n_head, n_kv_head, n_ctx, scale);              \
    }                                                                                            \
    extern "C" __global__ void attn_prefill_##NAME##_d##D(                                       \
        const float *q, const void *kc, const void *vc, const uint32_t *pos, float *out,         \
        int n_q, int n_head, int n_kv_head, int n_ctx, float scale) {                            \
        dependent_launch_entry();                                                                \
        attn_prefill<D, KvBlocks<TYPE>>(q, kc, vc, pos, out, n_q, n_head, n_kv_head, n_ctx,      \
                                        scale);                                                  \
    }

ATTN_QUANT_INSTANCES(q8_0, GGML_TYPE_Q8_0, 64)
ATTN_QUANT_INSTANCES(q8_0, GGML_TYPE_Q8_0, 128)
ATTN_QUANT_INSTANCES(q4_0, GGML_TYPE_Q4_0, 64)
ATTN_QUANT_INSTANCES(q4_0, GGML_TYPE_Q4_0, 128)
// Flash-decoding by KV group (f16 cache), pass 1 and the fused combine: the G = n_head /
// n_kv_head query heads that share a KV head read its keys and values once, a block per (split,
// KV head, query row). Each warp takes 32 keys at a time, a key a lane: the lane's K row comes in
// 16-byte loads and is dotted with all G queries (shared memory, broadcast), the warp's online
// softmax steps once per 32 keys, and V is read a row per key with each lane holding D / 32
// elements, the keys' weights passed by shuffles. Against attn_decode_split (a key per warp step,
// one query head a block): the same formula, f32 sums in another order. Partials as
// attn_decode_split writes them (per query head), so attn_decode_combine and combine_head serve
// both; with `done`, the group's last block combines its G heads.
// grid (n_split, n_kv_head, n_q); block ATTN_NWARPS warps.
template <int D, int G>
static __device__ __forceinline__ void attn_decode_group(
    const float *__restrict__ q, const uint16_t *__restrict__ kc, const uint16_t *__restrict__ vc,
    const uint32_t *__restrict__ pos, float *__restrict__ part_m, float *__restrict__ part_l,
    float *__restrict__ part_acc, int *__restrict__ done, float *__restrict__ out, int n_head,
    int n_ctx, float scale) {
    constexpr int DL = D / WARP_SIZE; // V elements a lane holds
    static_assert(DL == 2 || DL == 4, "head sizes 64 and 128");
    __shared__ __align__(16) float sq[G][D];
    __shared__ float sm[ATTN_NWARPS][G], sl[ATTN_NWARPS][G];
    __shared__ float sacc[ATTN_NWARPS][G][D];
    const int split = blockIdx.x, n_split = gridDim.x, g = blockIdx.y, t = blockIdx.z;
    const int h0 = g * G;
    const int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
    const int n_keys = (int)pos[t] + 1;
    const int chunk = (n_keys + n_split - 1) / n_split;
    const int k0 = split * chunk, k1 = min(n_keys, k0 + chunk);
    for (int i = threadIdx.x; i < G * D; i += blockDim.x) {
        sq[i / D][i % D] = q[((size_t)t * n_head + h0) * D + i];
    }
    __syncthreads();
    const uint16_t *kh = kc + (size_t)g * n_ctx * D;
    const uint16_t *vh = vc + (size_t)g * n_ctx * D;
    float m[G], l[G], acc[G][DL];
#pragma unroll
    for (int i = 0; i < G; ++i) {
        m[i] = ATTN_NEG_INF;
        l[i] = 0.0f;
#pragma unroll
        for (int j = 0; j < DL; ++j) {
            acc[i][j] = 0.0f;
        }
    }
    for (int base = k0 + warp * WARP_SIZE; base < k1; base += ATTN_NWARPS * WARP_SIZE) {
        const int key = base + lane;
        const bool live = key < k1;
        float s[G];
#pragma unroll
        for (int i = 0; i < G; ++i) {
            s[i] = 0.0f;
        }
        if (live) {
            const uint4 *kr = (const uint4 *)(kh + (size_t)key * D);
#pragma unroll
            for (int c = 0; c < D / 8; ++c) {
                const uint4 w = kr[c];
                const uint32_t words[4] = {w.x, w.y, w.z, w.w};
                float kf[8];
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    kf[2 * e] = f16_bits_to_f32((uint16_t)(words[e] & 0xffff));
                    kf[2 * e + 1] = f16_bits_to_f32((uint16_t)(words[e] >> 16));
                }
#pragma unroll
                for (int i = 0; i < G; ++i) {
                    const float4 qa = *(const float4 *)&sq[i][c * 8];
                    const float4 qb = *(const float4 *)&sq[i][c * 8 + 4];
                    s[i] += qa.x * kf[0] + qa.y * kf[1] + qa.z * kf[2] + qa.w * kf[3] +
                            qb.x * kf[4] + qb.y * kf[5] + qb.z * kf[6] + qb.w * kf[7];
                }
            }
        }
        // The tile's online softmax step, a head at a time; p[i] is this lane's key's weight.
        float p[G];
#pragma unroll
        for (int i = 0; i < G; ++i) {
            const float sc = live ? s[i] * scale : ATTN_NEG_INF;
            const float m_new = fmaxf(m[i], warp_max(sc));
            const float corr = expf(m[i] - m_new); // 0 on the first tile (m = -inf)
            p[i] = live ? expf(sc - m_new) : 0.0f;
            l[i] = l[i] * corr + warp_sum(p[i]);
#pragma unroll
            for (int j = 0; j < DL; ++j) {
                acc[i][j] *= corr;
            }
            m[i] = m_new;
        }
        const int nk = min(WARP_SIZE, k1 - base);
#pragma unroll 4
        for (int kk = 0; kk < nk; ++kk) {
            const uint16_t *vr = vh + (size_t)(base + kk) * D + lane * DL;
            float vf[DL];
            if constexpr (DL == 4) {
                const uint2 w = *(const uint2 *)vr;
                vf[0] = f16_bits_to_f32((uint16_t)(w.x & 0xffff));
                vf[1] = f16_bits_to_f32((uint16_t)(w.x >> 16));
                vf[2] = f16_bits_to_f32((uint16_t)(w.y & 0xffff));
                vf[3] = f16_bits_to_f32((uint16_t)(w.y >> 16));
            } else {
                const uint32_t w = *(const uint32_t *)vr;
                vf[0] = f16_bits_to_f32((uint16_t)(w & 0xffff));
                vf[1] = f16_bits_to_f32((uint16_t)(w >> 16));
            }
#pragma unroll
            for (int i = 0; i < G; ++i) {
                const float pk = __shfl_sync(FULL_MASK, p[i], kk);
#pragma unroll
                for (int j = 0; j < DL; ++j) {
                    acc[i][j] += pk * vf[j];
                }
            }
        }
    }
    // The block's warps merged per head, as merge_warps does for one head.
#pragma unroll
    for (int i = 0; i < G; ++i) {
        if (lane == 0) {
            sm[warp][i] = m[i];
            sl[warp][i] = l[i];
        }
#pragma unroll
        for (int j = 0; j < DL; ++j) {
            sacc[warp][i][lane * DL + j] = acc[i][j];
        }
    }
    __syncthreads();
    for (int i = 0; i < G; ++i) {
        float mm = ATTN_NEG_INF;
        for (int w = 0; w < ATTN_NWARPS; ++w) {
            mm = fmaxf(mm, sm[w][i]);
        }
        const size_t part = ((size_t)t * n_head + h0 + i) * n_split + split;
        for (int j = threadIdx.x; j < D; j += blockDim.x) {
            float a = 0.0f;
            for (int w = 0; w < ATTN_NWARPS; ++w) {
                a += sm[w][i] == ATTN_NEG_INF ? 0.0f : sacc[w][i][j] * expf(sm[w][i] - mm);
            }
            part_acc[part * D + j] = a;
        }
        if (threadIdx.x == 0) {
            float ll = 0.0f;
            for (int w = 0; w < ATTN_NWARPS; ++w) {
                ll += sm[w][i] == ATTN_NEG_INF ? 0.0f : sl[w][i] * expf(sm[w][i] - mm);
            }
            part_m[part] = mm; // -inf for an empty split
            part_l[part] = ll;
        }
    }
    if (done == nullptr) {
        return; // attn_decode_combine runs next
    }
    // The group's last split block to finish combines its G heads (counted on head h0's
    // counter) and resets the counter for the next launch or graph replay.
    __shared__ bool last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        int *c = done + (size_t)t * n_head + h0;
        last = atomicAdd(c, 1) == n_split - 1;
        if (last) {
            *c = 0;
        }
    }
    __syncthreads();
    if (last) {
        __threadfence();
        for (int i = 0; i < G; ++i) {
            combine_head(part_m, part_l, part_acc, out, n_head, n_split, D, h0 + i, t);
        }
    }
}

#define ATTN_GROUP_INSTANCE(D, G)                                                                 \
    extern "C" __global__ void __launch_bounds__(ATTN_NWARPS *WARP_SIZE)                          \
        attn_decode_group_d##D##_g##G(const float *q, const uint16_t *kc, const uint16_t *vc,    \
                                      const uint32_t *pos, float *part_m, float *part_l,          \
                                      float *part_acc, int *done, float *out, int n_head,         \
                                      int n_ctx, float scale) {                                   \
        dependent_launch_entry();                                                                 \
        attn_decode_group<D, G>(q, kc, vc, pos, part_m, part_l, part_acc, done, out, n_head,      \
                                n_ctx, scale);                                                    \
    }
#define ATTN_GROUP_INSTANCES(D)                                                                   \
    ATTN_GROUP_INSTANCE(D, 1)                                                                     \
    ATTN_GROUP_INSTANCE(D, 2)                                                                     \
    ATTN_GROUP_INSTANCE(D, 4)                                                                     \
    ATTN_GROUP_INSTANCE(D, 8)
ATTN_GROUP_INSTANCES(64)
ATTN_GROUP_INSTANCES(128)
