// Causal attention with grouped-query heads over the KV cache (attention.cuh has the cache
// layout and its conventions): the KV store and flash-decoding, per query head and by KV
// group, with its combine. The prefills are attention_prefill.cu's.
#include "attention.cuh"

// Head g's row of position pos0 + t (in `pages`) = k/v[t][g*head_dim..] as the cache's
// elements (kv_elem, common.cuh); k, v: [n][n_kv_head * head_dim] f32.

template <typename T>
static __device__ __forceinline__ void kv_store(const float *__restrict__ k,
                                                const float *__restrict__ v, T *__restrict__ kc,
                                                T *__restrict__ vc, const uint32_t *__restrict__ pos0,
                                                int n, int n_kv_head, int head_dim, KvPages pages) {
    const int width = n_kv_head * head_dim;
    const size_t total = (size_t)n * width;
    const int p0 = (int)*pos0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        const int t = (int)(i / width);
        const int c = (int)(i % width), g = c / head_dim, d = c % head_dim;
        const size_t at = pages.row(g, p0 + t) * head_dim + d;
        kc[at] = kv_elem(k[i], kc);
        vc[at] = kv_elem(v[i], vc);
    }
}

extern "C" __global__ void kv_store_f16(const float *__restrict__ k, const float *__restrict__ v,
                                        uint16_t *__restrict__ kc, uint16_t *__restrict__ vc,
                                        const uint32_t *__restrict__ pos0, int n, int n_kv_head,
                                        int head_dim, KvPages pages) {
    dependent_launch_entry();
    kv_store(k, v, kc, vc, pos0, n, n_kv_head, head_dim, pages);
}

extern "C" __global__ void kv_store_f32(const float *__restrict__ k, const float *__restrict__ v,
                                        float *__restrict__ kc, float *__restrict__ vc,
                                        const uint32_t *__restrict__ pos0, int n, int n_kv_head,
                                        int head_dim, KvPages pages) {
    dependent_launch_entry();
    kv_store(k, v, kc, vc, pos0, n, n_kv_head, head_dim, pages);
}

// Head g's row of position pos0 + t = blocks of k/v[t][g*head_dim..], one warp per 32-element block (the
// CPU's quantizers, quant.cuh). Grid-stride over blocks, whole warps; head_dim % 32 == 0.
template <typename BLOCK, void (*QUANTIZE)(float, BLOCK *)>
static __device__ __forceinline__ void kv_store_blocks(const float *__restrict__ k,
                                                       const float *__restrict__ v, BLOCK *kc,
                                                       BLOCK *vc, const uint32_t *pos0, int n,
                                                       int n_kv_head, int head_dim, KvPages pages) {
    const int width = n_kv_head * head_dim;
    const size_t blocks = (size_t)n * width / 32;
    const int p0 = (int)*pos0;
    const size_t warps = (size_t)gridDim.x * blockDim.x / WARP_SIZE;
    for (size_t b = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / WARP_SIZE; b < blocks;
         b += warps) {
        const size_t i = b * 32 + threadIdx.x % WARP_SIZE;
        const int t = (int)(i / width);
        const int c = (int)(i % width), g = c / head_dim, d = c % head_dim;
        const size_t at = (pages.row(g, p0 + t) * head_dim + d) / 32;
        QUANTIZE(k[i], kc + at);
        QUANTIZE(v[i], vc + at);
    }
}

extern "C" __global__ void kv_store_q8_0(const float *k, const float *v, block_q8_0 *kc,
                                         block_q8_0 *vc, const uint32_t *pos0, int n,
                                         int n_kv_head, int head_dim, KvPages pages) {
    dependent_launch_entry();
    kv_store_blocks<block_q8_0, quantize_q8_0_warp>(k, v, kc, vc, pos0, n, n_kv_head, head_dim,
                                                    pages);
}

extern "C" __global__ void kv_store_q4_0(const float *k, const float *v, block_q4_0 *kc,
                                         block_q4_0 *vc, const uint32_t *pos0, int n,
                                         int n_kv_head, int head_dim, KvPages pages) {
    dependent_launch_entry();
    kv_store_blocks<block_q4_0, quantize_q4_0_warp>(k, v, kc, vc, pos0, n, n_kv_head, head_dim,
                                                    pages);
}

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
    for (int i = 0; i < LaneDims<D>::N; ++i) {
        if (LaneDims<D>::in_row(lane + WARP_SIZE * i)) {
            sacc_w[warp * D + lane + WARP_SIZE * i] = st.acc[i];
        }
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

#define ATTN_MAX_SPLITS 256
#define ATTN_MAX_COMBINE_HEADS 8
// Floats of shared scratch combine_heads needs for nh heads.
#define ATTN_COMBINE_SCRATCH(NH) (512 + ATTN_MAX_COMBINE_HEADS + (NH) * ATTN_MAX_SPLITS)
static __device__ __noinline__ void combine_heads(const float *part_m, const float *part_l,
                                                  const float *part_acc, float *out, int n_head,
                                                  int n_split, int head_dim, int h0, int nh,
                                                  int t, const float *sinks, float *scratch);

// Flash-decoding, pass 1. grid (n_split, n_head, n_q); block ATTN_NWARPS warps.
// q: [n_q][n_head][D]; query t sees keys first..pos[t] (inclusive; first = attn_first_key, 0
// without a window). Split s takes a contiguous chunk of ceil(visible / n_split) of them, so a
// windowed layer reads only its window at any depth; warps stripe over it. Writes part_m/part_l
// [n_q][n_head][n_split] and part_acc [n_q][n_head][n_split][D] (unnormalised). With `done`
// not null, the head's last block to finish then combines them into out as pass 2 would.
template <int D, typename F>
static __device__ __forceinline__ void attn_decode_split(
    const float *__restrict__ q, const void *__restrict__ kc, const void *__restrict__ vc,
    const uint32_t *__restrict__ pos, float *__restrict__ part_m, float *__restrict__ part_l,
    float *__restrict__ part_acc, int *__restrict__ done, float *__restrict__ out, int n_head,
    int n_kv_head, KvPages pages, float scale, int window, const float *__restrict__ sinks) {
    __shared__ float sq[D];
    __shared__ float sm[ATTN_NWARPS], sl[ATTN_NWARPS];
    __shared__ float sacc[ATTN_NWARPS * D];
    const int split = blockIdx.x, n_split = gridDim.x, h = blockIdx.y, t = blockIdx.z;
    const int g = h / (n_head / n_kv_head);
    const int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
    const int n_keys = (int)pos[t] + 1, first = attn_first_key(n_keys, window);
    const int chunk = (n_keys - first + n_split - 1) / n_split;
    const int k0 = first + split * chunk, k1 = min(n_keys, k0 + chunk);
    for (int j = threadIdx.x; j < D; j += blockDim.x) {
        sq[j] = q[((size_t)t * n_head + h) * D + j];
    }
    __syncthreads();
    const KvHead<F> kh(kc, pages, g, D), vh(vc, pages, g, D);
    WarpState<D> st;
    st.init();
    for (int key = k0 + warp; key < k1; key += ATTN_NWARPS) {
        const uint8_t *kr = kh.row(key), *vr = vh.row(key);
        float dot = 0.0f;
#pragma unroll
        for (int i = 0; i < LaneDims<D>::N; ++i) {
            const int j = lane + WARP_SIZE * i;
            if (LaneDims<D>::in_row(j)) {
                dot += sq[j] * F::get(kr, j);
            }
        }
        const float s = warp_sum(dot) * scale;
        st.add(s, [vr](int j) { return F::get(vr, j); });
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
    __shared__ __align__(16) float scratch[ATTN_COMBINE_SCRATCH(1)];
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
        combine_heads(part_m, part_l, part_acc, out, n_head, n_split, D, h, 1, t, sinks, scratch);
    }
}

// Flash-decoding's combine of heads h0 .. h0 + nh - 1 of query row t, by the whole block:
// out = Σ_s acc_s w_s / Σ_s l_s w_s with w_s = e^(m_s - m) over the splits (0 for an empty one,
// whose acc is 0), the head's sink (if `sinks`) in m and the denominator. First a warp a head
// finds m, the weights (kept in shared memory) and the sum; then the block's threads take a
// float4 of the head each, in ATTN_COMBINE_ROWS interleaved sets
// of splits, so many independent loads are in flight (the tail of a fused launch is one block),
// and the sets are added in order. Loads bypass L1 (__ldcg): in the fused use, other blocks wrote
// the partials. A set is blockDim.x / (head_dim / 4) threads' worth of float4s; where head_dim / 4
// does not divide blockDim.x (80, 96) the threads past the last whole set stay idle. blockDim.x:
// a multiple of 32, at least head_dim / 4, at most 128; `scratch`: ATTN_COMBINE_SCRATCH(nh)
// floats of shared memory, 16-byte aligned.
static __device__ __noinline__ void combine_heads(const float *part_m, const float *part_l,
                                                  const float *part_acc, float *out, int n_head,
                                                  int n_split, int head_dim, int h0, int nh,
                                                  int t, const float *sinks, float *scratch) {
    float *red = scratch, *sl = red + 512, *sw = sl + ATTN_MAX_COMBINE_HEADS;
    const int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
    const int n_warps = blockDim.x / WARP_SIZE;
    for (int i = warp; i < nh; i += n_warps) {
        const size_t base = ((size_t)t * n_head + h0 + i) * n_split;
        float m = ATTN_NEG_INF;
        for (int s = lane; s < n_split; s += WARP_SIZE) {
            m = fmaxf(m, __ldcg(part_m + base + s));
        }
        m = warp_max(m);
        const float sink = sinks != nullptr ? sinks[h0 + i] : ATTN_NEG_INF;
        m = fmaxf(m, sink);
        float l = 0.0f;
        for (int s = lane; s < n_split; s += WARP_SIZE) {
            const float ms = __ldcg(part_m + base + s);
            const float w = ms == ATTN_NEG_INF ? 0.0f : expf(ms - m);
            sw[i * n_split + s] = w;
            l += __ldcg(part_l + base + s) * w;
        }
        l = warp_sum(l);
        if (sinks != nullptr) {
            l += expf(sink - m); // the sink's weight: no value row
        }
        if (lane == 0) {
            sl[i] = l;
        }
    }
    __syncthreads();
    const int n_chunk = head_dim / 4;
    const int c = threadIdx.x % n_chunk, r = threadIdx.x / n_chunk, rows = blockDim.x / n_chunk;
    for (int i = 0; i < nh; ++i) {
        const size_t base = ((size_t)t * n_head + h0 + i) * n_split;
        const float *w = sw + i * n_split;
        float4 a = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 8
        for (int s = r; s < n_split && r < rows; s += rows) {
            const float4 v = __ldcg((const float4 *)(part_acc + (base + s) * head_dim) + c);
            const float ws = w[s];
            a.x += ws * v.x;
            a.y += ws * v.y;
            a.z += ws * v.z;
            a.w += ws * v.w;
        }
        if (r < rows) {
            *(float4 *)&red[r * head_dim + 4 * c] = a; // rows * head_dim <= 4 * blockDim.x <= 512
        }
        __syncthreads();
        for (int j = threadIdx.x; j < head_dim; j += blockDim.x) {
            float sum = 0.0f;
            for (int rr = 0; rr < rows; ++rr) {
                sum += red[rr * head_dim + j];
            }
            out[((size_t)t * n_head + h0 + i) * head_dim + j] = sum / sl[i];
        }
        __syncthreads();
    }
}

// Flash-decoding, pass 2: grid (n_head, n_q), block ATTN_NWARPS warps (the split kernels'
// block, so that combine_heads sums in the same sets as their fused combine); out
// [n_q][n_head][D].
extern "C" __global__ void attn_decode_combine(const float *__restrict__ part_m,
                                               const float *__restrict__ part_l,
                                               const float *__restrict__ part_acc,
                                               float *__restrict__ out, int n_head, int n_split,
                                               int head_dim, const float *__restrict__ sinks) {
    dependent_launch_entry();
    __shared__ __align__(16) float scratch[ATTN_COMBINE_SCRATCH(1)];
    combine_heads(part_m, part_l, part_acc, out, n_head, n_split, head_dim, blockIdx.x, 1,
                  blockIdx.y, sinks, scratch);
}

#define ATTN_INSTANCES(D)                                                                         \
    extern "C" __global__ void attn_decode_split_d##D(                                           \
        const float *q, const uint16_t *kc, const uint16_t *vc, const uint32_t *pos,              \
        float *part_m, float *part_l, float *part_acc, int *done, float *out, int n_head,         \
        int n_kv_head, KvPages pages, float scale, int window, const float *sinks) {              \
        dependent_launch_entry();                                                                 \
        attn_decode_split<D, KvF16>(q, kc, vc, pos, part_m, part_l, part_acc, done, out, n_head,  \
                                    n_kv_head, pages, scale, window, sinks);                      \
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

// Flash-decoding over a cache of element type F (NAME: q8_0, q4_0, f32; attention.cuh's
// KvBlocks / KvF32).
#define ATTN_TYPED_INSTANCES(NAME, F, D)                                                         \
    extern "C" __global__ void attn_decode_split_##NAME##_d##D(                                  \
        const float *q, const void *kc, const void *vc, const uint32_t *pos, float *part_m,      \
        float *part_l, float *part_acc, int *done, float *out, int n_head, int n_kv_head,        \
        KvPages pages, float scale, int window, const float *sinks) {                            \
        dependent_launch_entry();                                                                \
        attn_decode_split<D, F>(q, kc, vc, pos, part_m, part_l, part_acc, done, out, n_head,     \
                                n_kv_head, pages, scale, window, sinks);                         \
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

// Flash-decoding by KV group (f16 cache), pass 1 and the fused combine: the G = n_head /
// n_kv_head query heads that share a KV head read its keys and values once, a block per (split,
// KV head, query row). The walk is bound by memory latency, so K and V come into shared memory
// by cp.async, ATTN_GROUP_TILE keys a tile, ATTN_GROUP_STAGES tiles in flight (two for heads
// over 128: three tiles of 256 and 8 heads a group would take 105 KiB, past the 99 KiB a block
// gets on sm_86/sm_89), while the block works on an earlier tile:
// - scores: thread (key, part) dots a quarter of the key's row (16-byte chunks part + 4j) with
//   all G queries, and two shuffles add the quarters; where a row is whole 128-byte lines (D a
//   multiple of 64), K rows are stored with chunk bit 2 flipped on odd keys, so the eight lanes
//   of a shared-memory phase hit eight bank groups;
// - softmax and V: a warp a head (G >= 4; heads w and w + 4 for G = 8) or, for G < 4, 4 / G
//   warps a head, each a contiguous share of the tile's keys; a lane holds ceil(D / 32)
//   consecutive elements of the head's output (LaneDims), reads its share of a V row a key and
//   takes the key's weight by a shuffle. Warps that share a head merge at the end, in warp
//   order.
// Against attn_decode_split (a key per warp step, one query head a block): the same formula,
// f32 sums in another order. Partials as attn_decode_split writes them (per query head), so
// attn_decode_combine and combine_heads serve both; with `done`, the group's last block
// combines its G heads. grid (n_split, n_kv_head, n_q); block ATTN_NWARPS warps; dynamic
// shared memory attn_group_smem_bytes(D, G) (crates/cuda/src/ops/attention.rs agrees).
#define ATTN_GROUP_TILE 32
#define ATTN_GROUP_STAGES 3

template <int D, int G> struct GroupLayout {
    static constexpr int CHUNKS = D / 8;                       // 16-byte chunks a row
    static constexpr int SWIZZLE = CHUNKS % 8 == 0 ? 4 : 0;    // K's chunk flip on odd keys
    static constexpr int TILE_BYTES = ATTN_GROUP_TILE * D * 2; // K or V of one tile
    static constexpr int STAGE_BYTES = 2 * TILE_BYTES;
    static constexpr int STAGES = D > 128 ? 2 : ATTN_GROUP_STAGES; // tiles in flight
    static constexpr int Q_OFFSET = STAGES * STAGE_BYTES;
    static constexpr int S_OFFSET = Q_OFFSET + G * D * 4;
    static constexpr int BYTES = S_OFFSET + G * ATTN_GROUP_TILE * 4;
    // Warps a head (each a share of a tile's keys) and heads a warp.
    static constexpr int WK = G >= ATTN_NWARPS ? 1 : ATTN_NWARPS / G;
    static constexpr int HW = G >= ATTN_NWARPS ? G / ATTN_NWARPS : 1;
    static constexpr int KPW = ATTN_GROUP_TILE / WK; // keys a warp takes of a tile
};

// Starts the copy of tile `tile` (keys base.. of the block's range, n of them live) into stage
// `stage`: every thread D / 16 chunks, zero-filled past the live keys.
template <int D, int G>
static __device__ __forceinline__ void group_load_tile(char *smem, const KvHead<KvF16> &kh,
                                                       const KvHead<KvF16> &vh, int base, int n,
                                                       int stage) {
    typedef GroupLayout<D, G> L;
    char *sk = smem + stage * L::STAGE_BYTES, *sv = sk + L::TILE_BYTES;
    constexpr int PER_TENSOR = ATTN_GROUP_TILE * L::CHUNKS;
    static_assert(2 * PER_TENSOR % (ATTN_NWARPS * WARP_SIZE) == 0, "whole copy rounds");
#pragma unroll
    for (int it = 0; it < 2 * PER_TENSOR / (ATTN_NWARPS * WARP_SIZE); ++it) {
        const int idx = threadIdx.x + it * ATTN_NWARPS * WARP_SIZE;
        const bool is_v = idx >= PER_TENSOR;
        const int rem = is_v ? idx - PER_TENSOR : idx;
        const int r = rem / L::CHUNKS, c = rem % L::CHUNKS;
        const bool live = r < n;
        const int key = base + (live ? r : 0);
        const uint16_t *src = (const uint16_t *)(is_v ? vh.row(key) : kh.row(key)) + 8 * c;
        const int pc = is_v ? c : c ^ ((r & 1) * L::SWIZZLE);
        cp_async16((is_v ? sv : sk) + (r * L::CHUNKS + pc) * 16, src, live ? 16 : 0);
    }
}

template <int D, int G>
static __device__ __forceinline__ void attn_decode_group(
    const float *__restrict__ q, const uint16_t *__restrict__ kc, const uint16_t *__restrict__ vc,
    const uint32_t *__restrict__ pos, float *__restrict__ part_m, float *__restrict__ part_l,
    float *__restrict__ part_acc, int *__restrict__ done, float *__restrict__ out, int n_head,
    KvPages pages, float scale, int window, const float *__restrict__ sinks) {
    typedef GroupLayout<D, G> L;
    constexpr int DL = LaneDims<D>::N; // output elements a lane holds
    static_assert(ATTN_NWARPS == 4 && ATTN_GROUP_TILE == 32, "thread (key, part) per tile");
    extern __shared__ __align__(16) char smem[];
    float *sq = (float *)(smem + L::Q_OFFSET);
    float *ss = (float *)(smem + L::S_OFFSET); // [G][tile] scaled scores
    const int split = blockIdx.x, n_split = gridDim.x, g = blockIdx.y, t = blockIdx.z;
    const int h0 = g * G;
    const int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
    const int n_keys = (int)pos[t] + 1, first = attn_first_key(n_keys, window);
    const int chunk = (n_keys - first + n_split - 1) / n_split;
    const int k0 = first + split * chunk, k1 = min(n_keys, k0 + chunk);
    const int n_tiles = k1 > k0 ? (k1 - k0 + ATTN_GROUP_TILE - 1) / ATTN_GROUP_TILE : 0;
    const KvHead<KvF16> kh(kc, pages, g, D), vh(vc, pages, g, D);
#pragma unroll
    for (int s = 0; s < L::STAGES - 1; ++s) {
        if (s < n_tiles) {
            const int base = k0 + s * ATTN_GROUP_TILE;
            group_load_tile<D, G>(smem, kh, vh, base, min(ATTN_GROUP_TILE, k1 - base), s);
        }
        cp_async_commit(); // possibly empty: group i stays tile i
    }
    for (int i = threadIdx.x; i < G * D; i += blockDim.x) {
        sq[i] = q[((size_t)t * n_head + h0) * D + i];
    }
    // This warp's heads (warp % G + ATTN_NWARPS u) and its share of each tile's keys.
    const int hw0 = L::WK == 1 ? warp : warp % G, kw0 = L::WK == 1 ? 0 : (warp / G) * L::KPW;
    float m[L::HW], l[L::HW], acc[L::HW][DL];
#pragma unroll
    for (int u = 0; u < L::HW; ++u) {
        m[u] = ATTN_NEG_INF;
        l[u] = 0.0f;
#pragma unroll
        for (int j = 0; j < DL; ++j) {
            acc[u][j] = 0.0f;
        }
    }
    const int key = threadIdx.x / 4, part = threadIdx.x % 4; // the scores' thread roles
    for (int it = 0; it < n_tiles; ++it) {
        cp_async_wait<L::STAGES - 2>(); // this thread's copies of tile it
        __syncthreads(); // everyone's; and tile it - 1's stage is free to refill
        {
            const int nt = it + L::STAGES - 1;
            if (nt < n_tiles) {
                const int base = k0 + nt * ATTN_GROUP_TILE;
                group_load_tile<D, G>(smem, kh, vh, base, min(ATTN_GROUP_TILE, k1 - base),
                                      nt % L::STAGES);
            }
            cp_async_commit();
        }
        const char *sk = smem + (it % L::STAGES) * L::STAGE_BYTES;
        const uint16_t *sv = (const uint16_t *)(sk + L::TILE_BYTES);
        const int base = k0 + it * ATTN_GROUP_TILE, n_live = min(ATTN_GROUP_TILE, k1 - base);
        // Scores (every lane computes, so the shuffles see the whole warp; dead keys unused).
        float s[G];
#pragma unroll
        for (int i = 0; i < G; ++i) {
            s[i] = 0.0f;
        }
#pragma unroll
        for (int j = 0; j < (L::CHUNKS + 3) / 4; ++j) {
            const int c = part + 4 * j;
            if (L::CHUNKS % 4 != 0 && c >= L::CHUNKS) {
                break; // D = 80: the row's last round has two chunks
            }
            const uint4 w =
                *(const uint4 *)(sk + (key * L::CHUNKS + (c ^ ((key & 1) * L::SWIZZLE))) * 16);
            const uint32_t words[4] = {w.x, w.y, w.z, w.w};
            float kf[8];
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                kf[2 * e] = f16_bits_to_f32((uint16_t)(words[e] & 0xffff));
                kf[2 * e + 1] = f16_bits_to_f32((uint16_t)(words[e] >> 16));
            }
#pragma unroll
            for (int i = 0; i < G; ++i) {
                const float4 qa = *(const float4 *)&sq[i * D + c * 8];
                const float4 qb = *(const float4 *)&sq[i * D + c * 8 + 4];
                s[i] += qa.x * kf[0] + qa.y * kf[1] + qa.z * kf[2] + qa.w * kf[3] +
                        qb.x * kf[4] + qb.y * kf[5] + qb.z * kf[6] + qb.w * kf[7];
            }
        }
#pragma unroll
        for (int i = 0; i < G; ++i) {
            s[i] += __shfl_xor_sync(FULL_MASK, s[i], 1);
            s[i] += __shfl_xor_sync(FULL_MASK, s[i], 2);
            if (part == 0 && key < n_live) {
                ss[i * ATTN_GROUP_TILE + key] = s[i] * scale;
            }
        }
        __syncthreads();
        // Softmax step and V for this warp's heads over its keys kw0 .. kw0 + KPW.
        const int nk = min(L::KPW, n_live - kw0); // warp-uniform
        if (nk <= 0) {
            continue;
        }
#pragma unroll
        for (int u = 0; u < L::HW; ++u) {
            const int hi = hw0 + ATTN_NWARPS * u;
            const bool live = lane < nk;
            const float sc = live ? ss[hi * ATTN_GROUP_TILE + kw0 + lane] : ATTN_NEG_INF;
            const float m_new = fmaxf(m[u], warp_max(sc));
            const float corr = expf(m[u] - m_new); // 0 on the first tile (m = -inf)
            const float p = live ? expf(sc - m_new) : 0.0f;
            l[u] = l[u] * corr + warp_sum(p);
#pragma unroll
            for (int j = 0; j < DL; ++j) {
                acc[u][j] *= corr;
            }
            m[u] = m_new;
            // Eight keys at a time, their rows and weights fetched before the FMAs (a
            // latency chain a key otherwise); keys in order either way.
            const uint16_t *vrows = sv + kw0 * D;
            int kk = 0;
            for (; kk + 8 <= nk; kk += 8) {
                float vf[8][DL], pk[8];
#pragma unroll
                for (int e = 0; e < 8; ++e) {
                    v_row_f16<D>(vrows + (kk + e) * D, lane, vf[e]);
                    pk[e] = __shfl_sync(FULL_MASK, p, kk + e);
                }
#pragma unroll
                for (int e = 0; e < 8; ++e) {
#pragma unroll
                    for (int j = 0; j < DL; ++j) {
                        acc[u][j] += pk[e] * vf[e][j];
                    }
                }
            }
            for (; kk < nk; ++kk) {
                float vf[DL];
                v_row_f16<D>(vrows + kk * D, lane, vf);
                const float pk = __shfl_sync(FULL_MASK, p, kk);
#pragma unroll
                for (int j = 0; j < DL; ++j) {
                    acc[u][j] += pk * vf[j];
                }
            }
        }
    }
    cp_async_wait<0>();
    __syncthreads(); // the stages are free: the warps' states meet there
    // Warps that share a head merge in warp order (warp hi, hi + G, ..); a lone warp writes.
    float *sm = (float *)smem, *sl = sm + ATTN_NWARPS * L::HW;
    float *sacc = sl + ATTN_NWARPS * L::HW; // [warp][u][D]
#pragma unroll
    for (int u = 0; u < L::HW; ++u) {
        if (lane == 0) {
            sm[warp * L::HW + u] = m[u];
            sl[warp * L::HW + u] = l[u];
        }
#pragma unroll
        for (int j = 0; j < DL; ++j) {
            if (LaneDims<D>::in_row(lane * DL + j)) {
                sacc[(warp * L::HW + u) * D + lane * DL + j] = acc[u][j];
            }
        }
    }
    __syncthreads();
    if (warp < (L::WK == 1 ? ATTN_NWARPS : G)) {
#pragma unroll
        for (int u = 0; u < L::HW; ++u) {
            const int hi = hw0 + ATTN_NWARPS * u;
            float mm = ATTN_NEG_INF;
            for (int wk = 0; wk < L::WK; ++wk) {
                mm = fmaxf(mm, sm[(warp + G * wk) * L::HW + u]);
            }
            float ll = 0.0f, a[DL];
#pragma unroll
            for (int j = 0; j < DL; ++j) {
                a[j] = 0.0f;
            }
            for (int wk = 0; wk < L::WK; ++wk) {
                const int w = (warp + G * wk) * L::HW + u;
                const float f = sm[w] == ATTN_NEG_INF ? 0.0f : expf(sm[w] - mm);
                ll += sl[w] * f;
#pragma unroll
                for (int j = 0; j < DL; ++j) {
                    if (LaneDims<D>::in_row(lane * DL + j)) {
                        a[j] += sacc[w * D + lane * DL + j] * f;
                    }
                }
            }
            const size_t pidx = ((size_t)t * n_head + h0 + hi) * n_split + split;
#pragma unroll
            for (int j = 0; j < DL; ++j) {
                if (LaneDims<D>::in_row(lane * DL + j)) {
                    part_acc[pidx * D + lane * DL + j] = a[j];
                }
            }
            if (lane == 0) {
                part_m[pidx] = mm; // -inf for an empty split
                part_l[pidx] = ll;
            }
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
        combine_heads(part_m, part_l, part_acc, out, n_head, n_split, D, h0, G, t, sinks,
                      (float *)smem); // the stages are free again
    }
}

#define ATTN_GROUP_INSTANCE(D, G)                                                                 \
    extern "C" __global__ void __launch_bounds__(ATTN_NWARPS *WARP_SIZE)                          \
        attn_decode_group_d##D##_g##G(const float *q, const uint16_t *kc, const uint16_t *vc,    \
                                      const uint32_t *pos, float *part_m, float *part_l,          \
                                      float *part_acc, int *done, float *out, int n_head,         \
                                      KvPages pages, float scale, int window,                     \
                                      const float *sinks) {                                       \
        dependent_launch_entry();                                                                 \
        attn_decode_group<D, G>(q, kc, vc, pos, part_m, part_l, part_acc, done, out, n_head,      \
                                pages, scale, window, sinks);                                     \
    }
#define ATTN_GROUP_INSTANCES(D)                                                                   \
    ATTN_GROUP_INSTANCE(D, 1)                                                                     \
    ATTN_GROUP_INSTANCE(D, 2)                                                                     \
    ATTN_GROUP_INSTANCE(D, 4)                                                                     \
    ATTN_GROUP_INSTANCE(D, 8)
ATTN_GROUP_INSTANCES(32)
ATTN_GROUP_INSTANCES(64)
ATTN_GROUP_INSTANCES(80)
ATTN_GROUP_INSTANCES(96)
ATTN_GROUP_INSTANCES(128)
ATTN_GROUP_INSTANCES(192)
ATTN_GROUP_INSTANCES(256)
