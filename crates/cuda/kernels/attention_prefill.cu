// The prefill attention kernels over the KV cache (attention.cuh has the cache layout and its
// conventions): the scalar tiled prefill, and the prefills in the CPU's arithmetic for short
// ubatches (ggml's, and the CPU's f32 order). The tensor-core prefill is flash_attn.cu's.
#include "attention.cuh"

// Flash attention over a ubatch: grid (ceil(n_q / ATTN_NWARPS), n_head); block ATTN_NWARPS
// warps, one query row each. K/V tiles of ATTN_TILE_K keys (half that for heads over 128, so
// that the f32 tiles stay within 48 KiB of static shared memory) are staged in shared memory as
// f32 by the whole block, from the first key any of its rows sees; query t sees keys
// attn_first_key(pos[t] + 1, window)..pos[t].
template <int D, typename F>
static __device__ __forceinline__ void attn_prefill(
    const float *__restrict__ q, const void *__restrict__ kc, const void *__restrict__ vc,
    const uint32_t *__restrict__ pos, float *__restrict__ out, int n_q, int n_head, int n_kv_head,
    KvPages pages, float scale, int window, const float *__restrict__ sinks) {
    typedef LaneDims<D> L;
    constexpr int TILE = D > 128 ? ATTN_TILE_K / 2 : ATTN_TILE_K;
    __shared__ float sk[TILE * D];
    __shared__ float sv[TILE * D];
    __shared__ float sq[ATTN_NWARPS * D];
    __shared__ int s_keys, s_first;
    const int h = blockIdx.y, g = h / (n_head / n_kv_head);
    const int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
    const int t = blockIdx.x * ATTN_NWARPS + warp;
    const bool active = t < n_q;
    const int my_keys = active ? (int)pos[t] + 1 : 0;
    const int my_first = attn_first_key(my_keys, window);
    if (threadIdx.x == 0) {
        s_keys = 0;
        s_first = 0x7fffffff;
    }
    __syncthreads();
    if (lane == 0 && active) {
        atomicMax(&s_keys, my_keys);
        atomicMin(&s_first, my_first);
    }
#pragma unroll
    for (int i = 0; i < L::N; ++i) {
        const int j = lane + WARP_SIZE * i;
        if (L::in_row(j)) {
            sq[warp * D + j] = active ? q[((size_t)t * n_head + h) * D + j] : 0.0f;
        }
    }
    __syncthreads();
    const int n_keys = s_keys, block_first = s_first; // the block has an active row
    const KvHead<F> kh(kc, pages, g, D), vh(vc, pages, g, D);
    const float *qr = sq + warp * D;
    WarpState<D> st;
    st.init();
    for (int k0 = block_first; k0 < n_keys; k0 += TILE) {
        const int nk = min(TILE, n_keys - k0);
        __syncthreads(); // the previous tile is no longer read
        for (int i = threadIdx.x; i < nk * D; i += blockDim.x) {
            sk[i] = F::get(kh.row(k0 + i / D), i % D);
            sv[i] = F::get(vh.row(k0 + i / D), i % D);
        }
        __syncthreads();
        const int upto = min(nk, my_keys - k0); // causal: keys < my_keys
        // Window: keys >= my_first (a warp-uniform bound, so the sums' shuffles stay whole).
        for (int kk = max(0, my_first - k0); kk < upto; ++kk) {
            const float *kr = sk + kk * D;
            float dot = 0.0f;
#pragma unroll
            for (int i = 0; i < L::N; ++i) {
                const int j = lane + WARP_SIZE * i;
                if (L::in_row(j)) {
                    dot += qr[j] * kr[j];
                }
            }
            const float s = warp_sum(dot) * scale;
            const float *vr = sv + kk * D;
            st.add(s, [vr](int j) { return vr[j]; });
        }
    }
    if (!active) {
        return;
    }
    if (sinks != nullptr) {
        st.add_sink(sinks[h]);
    }
    const float inv = 1.0f / st.l;
#pragma unroll
    for (int i = 0; i < L::N; ++i) {
        const int j = lane + WARP_SIZE * i;
        if (L::in_row(j)) {
            out[((size_t)t * n_head + h) * D + j] = st.acc[i] * inv;
        }
    }
}

// Σ prod[0..D) in the order of ggml's x86 f16 dot product (the CPU's attention::dot_f16): 64
// elements a step into sixteen lanes of four accumulators (lane l of accumulator a takes
// element 16a + l), the accumulators folded (0+2) + (1+3), the lanes halved 8, 4, 2, 1; then
// the elements past the last whole 64 (heads of 32, 80, 96) added one by one in f64, rounded to
// f32 at the end (ggml's leftover loop, which sums in ggml_float). Every warp computes it
// (lanes 0-15 hold the lanes, lane 0 the leftovers) and all its lanes return it.
template <int D>
static __device__ __forceinline__ float dot_f16_order(const float *prod, int lane) {
    constexpr int WHOLE = D / 64 * 64;
    float r = 0.0f;
    if (WHOLE > 0 && lane < 16) {
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
    if constexpr (WHOLE < D) {
        if (lane == 0) {
            double sum = (double)r;
            for (int j = WHOLE; j < D; ++j) {
                sum = __dadd_rn(sum, (double)prod[j]);
            }
            r = (float)sum;
        }
    }
    return __shfl_sync(FULL_MASK, r, 0);
}

// ggml's CPU flash attention for ubatches under 64 rows (ggml_compute_forward_flash_attn_ext_f16
// _one_chunk), reproduced so that CUDA agrees with llama.cpp's CPU, and ferrolm's, which does the
// same (crates/cpu/src/attention.rs): Q rounded to f16, each score an f32 dot of f16 values times
// scale, keys in order with an online softmax, the output accumulated in f16 and rounded at every
// step (V·vs added by an FMA), the running sum S = S·ms + vs by an FMA, and the score summed
// in the CPU's order (dot_f16_order). Only e^x may round differently (libm's expf there, the
// correctly rounded value here). grid (n_q, n_head), block D threads rounded up to whole warps
// (thread j < D owns element j of the row's output; the others, for D = 80, only take part in
// the warps' sums).
template <int D>
static __device__ __forceinline__ void attn_prefill_f16ref(
    const float *__restrict__ q, const uint16_t *__restrict__ kc, const uint16_t *__restrict__ vc,
    const uint32_t *__restrict__ pos, float *__restrict__ out, int n_q, int n_head, int n_kv_head,
    KvPages pages, float scale, int window, const float *__restrict__ sinks) {
    __shared__ float prod[2][D];
    const int t = blockIdx.x, h = blockIdx.y;
    const int g = h / (n_head / n_kv_head);
    const int lane = threadIdx.x % WARP_SIZE;
    const bool own = threadIdx.x < D;
    const int j = own ? threadIdx.x : 0; // an element the idle threads read harmlessly
    const size_t row = ((size_t)t * n_head + h) * D;
    const float qj = __half2float(__float2half_rn(q[row + j]));
    const KvHead<KvF16> kh(kc, pages, g, D), vh(vc, pages, g, D);
    float m = ATTN_NEG_INF, l = 0.0f;
    __half acc = __float2half_rn(0.0f);
    const int n_keys = (int)pos[t] + 1;
    for (int key = attn_first_key(n_keys, window); key < n_keys; ++key) {
        float *buf = prod[key % 2]; // alternating buffers: one barrier a key
        if (own) {
            buf[j] = qj * KvF16::get(kh.row(key), j); // exact: f16 × f16
        }
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
        const float v = KvF16::get(vh.row(key), j);
        acc = __float2half_rn(__fmaf_rn(v, vs, __half2float(acc)));
        l = __fmaf_rn(l, ms, vs);
    }
    float a = __half2float(acc);
    if (sinks != nullptr) {
        // The CPU's closing sink step (ggml's): on the f32 accumulator, rescaled if the sink is
        // the new maximum, its weight added to the sum.
        const float sk = sinks[h];
        float ms = 1.0f, vs = 1.0f;
        if (sk > m) {
            ms = exp_rn(m - sk);
            a = __fmul_rn(a, ms);
        } else {
            vs = exp_rn(sk - m);
        }
        l = __fmaf_rn(l, ms, vs);
    }
    if (own) {
        out[row + j] = a * (1.0f / l);
    }
}

// The CPU's f32 attention (crates/cpu/src/attention.rs, for ubatches of 64 rows and more):
// each score a dot of f32 q and the cache's values summed in eight lanes (lane i takes elements
// 8c + i in order), the lanes added in order, times scale; softmax as norm::softmax (maximum,
// e^(s - max) summed key by key, times 1 / Σ); the output Σ_k w_k · v_k key by key, products
// and sums rounded apart. Only e^x may round differently (libm's expf there). Over an f16
// cache, or an f32 one (attn_prefill_f32ref_f32_*: the CPU's path for -ctk f32 at any size).
//
// A warp per (query row, head), F32REF_WARPS a block, grid ceil(n_q · n_head / F32REF_WARPS):
// lane 8g + i keeps lane i of key k0 + g's dot, four keys at a time, so no barriers; the
// scores are computed three times (maximum, sum, output) rather than kept, so any number of
// keys fits.
#define F32REF_WARPS 4

template <int D, typename F> struct F32RefRow {
    KvHead<F> k;    // the KV head's keys (first: the struct is built from it)
    float q[D / 8]; // q[8c + i] for this lane's i
    int n_keys, g, i;
    float scale;
    // The score of key k0 + g (the caller keeps it below n_keys for the lanes it reads).
    __device__ __forceinline__ float score(int k0) const {
        const int key = min(k0 + g, n_keys - 1);
        const uint8_t *kr = k.row(key);
        float a = 0.0f;
#pragma unroll
        for (int c = 0; c < D / 8; ++c) {
            a = __fadd_rn(a, __fmul_rn(q[c], F::get(kr, 8 * c + i)));
        }
        float r = __shfl_sync(FULL_MASK, a, 8 * g);
#pragma unroll
        for (int l = 1; l < 8; ++l) {
            r = __fadd_rn(r, __shfl_sync(FULL_MASK, a, 8 * g + l));
        }
        return __fmul_rn(r, scale);
    }
};

template <int D, typename F>
static __device__ __forceinline__ void attn_prefill_f32ref(
    const float *__restrict__ q, const void *__restrict__ kc, const void *__restrict__ vc,
    const uint32_t *__restrict__ pos, float *__restrict__ out, int n_q, int n_head, int n_kv_head,
    KvPages pages, float scale, int window, const float *__restrict__ sinks) {
    const int lane = threadIdx.x % WARP_SIZE;
    const int w = blockIdx.x * F32REF_WARPS + threadIdx.x / WARP_SIZE;
    if (w >= n_q * n_head) {
        return; // the whole warp
    }
    const int t = w / n_head, h = w % n_head;
    const int kvh = h / (n_head / n_kv_head);
    const size_t row = ((size_t)t * n_head + h) * D;
    F32RefRow<D, F> r{KvHead<F>(kc, pages, kvh, D)};
    r.g = lane / 8;
    r.i = lane % 8;
#pragma unroll
    for (int c = 0; c < D / 8; ++c) {
        r.q[c] = q[row + 8 * c + r.i];
    }
    r.n_keys = (int)pos[t] + 1;
    r.scale = scale;
    // The window's keys first..n_keys - 1, in order (the CPU's slice of them).
    const int first = attn_first_key(r.n_keys, window);
    const KvHead<F> vh(vc, pages, kvh, D);

    float m = ATTN_NEG_INF;
    for (int k0 = first; k0 < r.n_keys; k0 += 4) {
        const float s = r.score(k0);
        if (k0 + r.g < r.n_keys) {
            m = fmaxf(m, s);
        }
    }
#pragma unroll
    for (int off = 8; off < WARP_SIZE; off *= 2) {
        m = fmaxf(m, __shfl_xor_sync(FULL_MASK, m, off));
    }
    // With a sink, the CPU's softmax_with_sink: the sink in the maximum, the sum in f64 with the
    // sink's term last, 1 / Σ rounded from f64.
    const bool sink = sinks != nullptr;
    const float sk = sink ? sinks[h] : 0.0f;
    if (sink) {
        m = fmaxf(m, sk);
    }
    float sum = 0.0f;
    double dsum = 0.0;
    for (int k0 = first; k0 < r.n_keys; k0 += 4) {
        const float e = exp_rn(__fsub_rn(r.score(k0), m));
        for (int g = 0; g < 4 && k0 + g < r.n_keys; ++g) {
            const float eg = __shfl_sync(FULL_MASK, e, 8 * g);
            if (sink) {
                dsum = __dadd_rn(dsum, (double)eg);
            } else {
                sum = __fadd_rn(sum, eg);
            }
        }
    }
    const float inv = sink ? (float)__ddiv_rn(1.0, __dadd_rn(dsum, (double)exp_rn(sk - m)))
                           : __fdiv_rn(1.0f, sum);
    typedef LaneDims<D> L;
    float o[L::N];
#pragma unroll
    for (int j = 0; j < L::N; ++j) {
        o[j] = 0.0f;
    }
    for (int k0 = first; k0 < r.n_keys; k0 += 4) {
        const float wk = __fmul_rn(exp_rn(__fsub_rn(r.score(k0), m)), inv);
        for (int g = 0; g < 4 && k0 + g < r.n_keys; ++g) {
            const float wg = __shfl_sync(FULL_MASK, wk, 8 * g);
            const uint8_t *vr = vh.row(k0 + g);
#pragma unroll
            for (int j = 0; j < L::N; ++j) {
                if (L::in_row(lane + WARP_SIZE * j)) {
                    o[j] = __fadd_rn(o[j], __fmul_rn(wg, F::get(vr, lane + WARP_SIZE * j)));
                }
            }
        }
    }
#pragma unroll
    for (int j = 0; j < L::N; ++j) {
        if (L::in_row(lane + WARP_SIZE * j)) {
            out[row + lane + WARP_SIZE * j] = o[j];
        }
    }
}
#define ATTN_INSTANCES(D)                                                                         \
    extern "C" __global__ void attn_prefill_f16ref_d##D(                                          \
        const float *q, const uint16_t *kc, const uint16_t *vc, const uint32_t *pos, float *out,  \
        int n_q, int n_head, int n_kv_head, KvPages pages, float scale, int window,                   \
        const float *sinks) {                                                                     \
        dependent_launch_entry();                                                                 \
        attn_prefill_f16ref<D>(q, kc, vc, pos, out, n_q, n_head, n_kv_head, pages, scale,         \
                                window, sinks);                                                   \
    }                                                                                             \
    extern "C" __global__ void attn_prefill_f32ref_d##D(                                          \
        const float *q, const uint16_t *kc, const uint16_t *vc, const uint32_t *pos, float *out,  \
        int n_q, int n_head, int n_kv_head, KvPages pages, float scale, int window,                   \
        const float *sinks) {                                                                     \
        dependent_launch_entry();                                                                 \
        attn_prefill_f32ref<D, KvF16>(q, kc, vc, pos, out, n_q, n_head, n_kv_head, pages, scale,  \
                                      window, sinks);                                             \
    }                                                                                             \
    extern "C" __global__ void attn_prefill_f32ref_f32_d##D(                                      \
        const float *q, const float *kc, const float *vc, const uint32_t *pos, float *out,        \
        int n_q, int n_head, int n_kv_head, KvPages pages, float scale, int window,                   \
        const float *sinks) {                                                                     \
        dependent_launch_entry();                                                                 \
        attn_prefill_f32ref<D, KvF32>(q, kc, vc, pos, out, n_q, n_head, n_kv_head, pages, scale,  \
                                      window, sinks);                                             \
    }                                                                                             \
    extern "C" __global__ void attn_prefill_d##D(const float *q, const uint16_t *kc,              \
                                                 const uint16_t *vc, const uint32_t *pos,         \
                                                 float *out, int n_q, int n_head, int n_kv_head,  \
                                                 KvPages pages, float scale, int window,              \
                                                 const float *sinks) {                            \
        dependent_launch_entry();                                                                 \
        attn_prefill<D, KvF16>(q, kc, vc, pos, out, n_q, n_head, n_kv_head, pages, scale,         \
                               window, sinks);                                                    \
    }

// Every head size the CPU runs, to 256 (llama-family tiny 32, Qwen-style and Phi 80, 96,
// deepseek2's key head 192, Gemma 3's 256); ops/attention.rs's ATTN_HEAD_DIMS lists them.
ATTN_INSTANCES(32)
ATTN_INSTANCES(64)
ATTN_INSTANCES(80)
ATTN_INSTANCES(96)
ATTN_INSTANCES(128)
ATTN_INSTANCES(192)
ATTN_INSTANCES(256)

// The scalar prefill over a cache of element type F (NAME: q8_0, q4_0, f32; attention.cuh's
// KvBlocks / KvF32).
#define ATTN_TYPED_INSTANCES(NAME, F, D)                                                         \
    extern "C" __global__ void attn_prefill_##NAME##_d##D(                                       \
        const float *q, const void *kc, const void *vc, const uint32_t *pos, float *out,         \
        int n_q, int n_head, int n_kv_head, KvPages pages, float scale, int window,                  \
        const float *sinks) {                                                                    \
        dependent_launch_entry();                                                                \
        attn_prefill<D, F>(q, kc, vc, pos, out, n_q, n_head, n_kv_head, pages, scale, window,    \
                           sinks);                                                               \
    }

// The head sizes whose rows are whole 32-element blocks (not 80: KvCache::new refuses a
// block cache for it, as the CPU's KvType::check does); an f32 cache holds 80 too.
#define ATTN_TYPED_HEADS(NAME, F)                                                                \
    ATTN_TYPED_INSTANCES(NAME, F, 32)                                                            \
    ATTN_TYPED_INSTANCES(NAME, F, 64)                                                            \
    ATTN_TYPED_INSTANCES(NAME, F, 96)                                                            \
    ATTN_TYPED_INSTANCES(NAME, F, 128)                                                           \
    ATTN_TYPED_INSTANCES(NAME, F, 192)                                                           \
    ATTN_TYPED_INSTANCES(NAME, F, 256)
ATTN_TYPED_HEADS(q8_0, KvBlocks<GGML_TYPE_Q8_0>)
ATTN_TYPED_HEADS(q4_0, KvBlocks<GGML_TYPE_Q4_0>)
ATTN_TYPED_HEADS(f32, KvF32)
ATTN_TYPED_INSTANCES(f32, KvF32, 80)
