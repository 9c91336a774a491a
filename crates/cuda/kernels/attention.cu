// Causal attention with grouped-query heads over the KV cache (attention.cuh has the cache
// layout and its conventions): the KV store and flash-decoding, per query head and by KV
// group, with its combine. The prefills are attention_prefill.cu's.
#include "attention_tc.cuh"
#include "rope.cuh"

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
    __syncthreads(); // the block's partials, then one thread's fence and count
    if (threadIdx.x == 0) {
        int *c = done + (size_t)t * n_head + h;
        last = block_fence_count((unsigned *)c, n_split);
        if (last) {
            *c = 0;
        }
    }
    __syncthreads();
    if (last) {
        combine_head_in_walk(part_m, part_l, part_acc, out, n_head, n_split, D, h, t, sinks,
                             scratch);
    }
}


// Flash-decoding, pass 2: grid (n_head, n_q), block ATTN_NWARPS warps (the split kernels'
// block, so that the combine sums in the same sets as their fused combine); out
// [n_q][n_head][D].
extern "C" __global__ void attn_decode_combine(const float *__restrict__ part_m,
                                               const float *__restrict__ part_l,
                                               const float *__restrict__ part_acc,
                                               float *__restrict__ out, int n_head, int n_split,
                                               int head_dim, const float *__restrict__ sinks) {
    dependent_launch_entry();
    __shared__ __align__(16) float scratch[ATTN_COMBINE_ALONE_SCRATCH(1)];
    combine_heads_alone<24>(part_m, part_l, part_acc, out, n_head, n_split, head_dim, blockIdx.x,
                            1, blockIdx.y, sinks, scratch, nullptr);
}

// Pass 2 with the output quantized as well, for the product after attention (the
// quantize_q8_k launch it replaces: the same codes): grid (n_head * D / QK_K, n_q), block
// QK_K / D * ATTN_NWARPS warps, a head to each ATTN_NWARPS warps (attn_decode_combine's
// arithmetic), then a warp writes the block's Q8_K block of outq (rows of n_head * D / QK8_1
// block_q8_1s, as quantize_q8_k's). D: 64 (4 heads a block; 12 splits a set's chunk to keep
// 512 threads' registers), 128, 256.
#define ATTN_COMBINE_Q8K(D, CHUNK)                                                                \
    extern "C" __global__ void __launch_bounds__(QK_K / D * ATTN_NWARPS * WARP_SIZE)              \
        attn_decode_combine_q8k_d##D(const float *__restrict__ part_m,                            \
                                     const float *__restrict__ part_l,                            \
                                     const float *__restrict__ part_acc, float *__restrict__ out, \
                                     block_q8_1 *__restrict__ outq, int n_head, int n_split,      \
                                     const float *__restrict__ sinks) {                           \
        dependent_launch_entry();                                                                 \
        constexpr int NH = QK_K / D;                                                              \
        __shared__ __align__(16) float scratch[ATTN_COMBINE_ALONE_SCRATCH(NH)];                  \
        __shared__ float stage[QK_K];                                                             \
        combine_heads_alone<CHUNK>(part_m, part_l, part_acc, out, n_head, n_split, D,             \
                                   blockIdx.x * NH, NH, blockIdx.y, sinks, scratch, stage);       \
        __syncthreads();                                                                          \
        if (threadIdx.x < WARP_SIZE) {                                                            \
            quantize_q8_k_warp(stage, outq + (size_t)blockIdx.y * (n_head * D / QK8_1) +          \
                                          (size_t)blockIdx.x * (QK_K / QK8_1));                   \
        }                                                                                         \
    }
ATTN_COMBINE_Q8K(64, 12)
ATTN_COMBINE_Q8K(128, 24)
ATTN_COMBINE_Q8K(256, 24)

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

// Flash-decoding by KV group over one sequence's query rows (attention_group.cuh's
// attn_group_block, or with TC attention_tc.cuh's attn_group_block_tc, on row t's pointers):
// grid (n_split, n_kv_head, n_q); partials [n_q][n_head][n_split], counters [n_q][n_head], out
// [n_q][n_head][D].
template <int D, int G, bool TC>
static __device__ __forceinline__ void attn_decode_group(
    const float *__restrict__ q, const uint16_t *__restrict__ kc, const uint16_t *__restrict__ vc,
    const uint32_t *__restrict__ pos, float *__restrict__ part_m, float *__restrict__ part_l,
    float *__restrict__ part_acc, int *__restrict__ done, float *__restrict__ out, int n_head,
    KvPages pages, float scale, int window, const float *__restrict__ sinks) {
    const int t = blockIdx.z, n_split = gridDim.x;
    const size_t parts = (size_t)t * n_head * n_split;
    const float *q_row = q + (size_t)t * n_head * D;
    int *done_row = done == nullptr ? nullptr : done + (size_t)t * n_head;
    float *out_row = out == nullptr ? nullptr : out + (size_t)t * n_head * D;
    if constexpr (TC) {
        attn_group_block_tc<D, G>(QueriesInMemory<D>{q_row}, kc, vc, pages, (int)pos[t] + 1,
                                  blockIdx.x, n_split, blockIdx.y, part_m + parts, part_l + parts,
                                  part_acc + parts * D, done_row, out_row, scale, window, sinks);
    } else {
        attn_group_block<D, G>(QueriesInMemory<D>{q_row}, kc, vc, pages, (int)pos[t] + 1,
                               blockIdx.x, n_split, blockIdx.y, part_m + parts, part_l + parts,
                               part_acc + parts * D, done_row, out_row, scale, window, sinks);
    }
}

#define ATTN_GROUP_ENTRY(NAME, D, G, TC)                                                          \
    extern "C" __global__ void __launch_bounds__(ATTN_NWARPS *WARP_SIZE)                          \
        NAME(const float *q, const uint16_t *kc, const uint16_t *vc, const uint32_t *pos,         \
             float *part_m, float *part_l, float *part_acc, int *done, float *out, int n_head,    \
             KvPages pages, float scale, int window, const float *sinks) {                        \
        dependent_launch_entry();                                                                 \
        attn_decode_group<D, G, TC>(q, kc, vc, pos, part_m, part_l, part_acc, done, out, n_head,  \
                                    pages, scale, window, sinks);                                 \
    }
#define ATTN_GROUP_INSTANCE(D, G) ATTN_GROUP_ENTRY(attn_decode_group_d##D##_g##G, D, G, false)
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

// On the tensor cores (FERROLM_ATTN_TC): ops/attention.rs's ATTN_TC_GROUPS and ATTN_TC_DIMS.
#define ATTN_GROUP_TC_INSTANCE(D, G)                                                              \
    ATTN_GROUP_ENTRY(attn_decode_group_tc_d##D##_g##G, D, G, true)
#define ATTN_GROUP_TC_INSTANCES(D)                                                                \
    ATTN_GROUP_TC_INSTANCE(D, 4)                                                                  \
    ATTN_GROUP_TC_INSTANCE(D, 8)
ATTN_GROUP_TC_INSTANCES(64)
ATTN_GROUP_TC_INSTANCES(128)
ATTN_GROUP_TC_INSTANCES(256)

// The newest key's staged row (key, then value: D f16 each) into its tile (sk, sv: the stage
// of keys base.., chunks at `offset`), if this block's split holds it and it is in this tile
// (another split's last tile may pass over it: a dead row there, zero-filled).
template <int D, typename Offset>
static __device__ __forceinline__ void patch_key(const uint16_t *staged, bool owner, int key,
                                                 char *sk, char *sv, int base, Offset offset) {
    constexpr int CHUNKS = D / 8;
    const int r = key - base;
    if (!owner || r < 0 || r >= ATTN_GROUP_TILE || (int)threadIdx.x >= 2 * CHUNKS) {
        return;
    }
    const bool is_v = (int)threadIdx.x >= CHUNKS;
    const int c = threadIdx.x % CHUNKS;
    const uint4 w = *(const uint4 *)(staged + (is_v ? D : 0) + 8 * c);
    *(uint4 *)((is_v ? sv : sk) + offset(is_v, r, c)) = w;
}

// The newest key and value as the cache holds them (kv_store_f16's f16), into the cache at
// `key` (unless kc is null: another block stores them) and into the block's stage `ks`, `vs`
// (lane's elements lane + 32 j).
template <int J>
static __device__ __forceinline__ void store_key(const float (&kv)[J], const float *v_head,
                                                 uint16_t *kc, uint16_t *vc, size_t at,
                                                 uint16_t *ks, uint16_t *vs, int lane) {
#pragma unroll
    for (int j = 0; j < J; ++j) {
        const int d = lane + j * WARP_SIZE;
        // (kv_elem's pointer picks the cache's element type: vc's, as kc may be null.)
        const uint16_t kb = kv_elem(kv[j], vc), vb = kv_elem(v_head[d], vc);
        if (kc != nullptr) {
            kc[at + d] = kb;
            vc[at + d] = vb;
        }
        ks[d] = kb;
        vs[d] = vb;
    }
}

// One token's decode walk by KV group that makes its own queries and newest key
// (FERROLM_ATTN_ROPE, in place of the q/k norm and rotation's launch and kv_store_f16's): q,
// k and v as the q/k/v products left them (q [n_head][D], k and v [n_kv_head][D]). Each block
// norms (wq) and rotates (NEOX, position pos[0]) its G query heads, a warp a head; the split
// that holds position pos[0] also norms (wk) and rotates its KV head's key and stores key and
// value in the cache as kv_store_f16 does, and into its tile (copy_kv_tile leaves that row
// out). The tiles of the older keys, which earlier steps wrote, are asked for before the wait
// for the kernel ahead. The same bits as the three launches.
// - per-head norms (ROWS false; qwen3's), on the tensor-core walk: each head as
//   qk_norm_head_rope_neox_f32 norms it (one warp is that kernel's block for heads of 64 and
//   128: the same sums). Shared memory after TcLayout::BYTES: the queries [G][D] f32, then
//   the key and value [D] f16.
// - whole-row norms (ROWS; OLMoE's, a weight an element of the row, FERROLM_ATTN_ROPE_ROWS), on
//   the group block: each block takes the sums of squares of the whole q row (and, in the
//   owning split, of the k row) in rms_norm_f32's order (row_scales), then norms and rotates
//   its own heads as qk_norm_rope_neox_f32 does. The rows' widths are the grid's (n_kv_head =
//   gridDim.y KV heads of D, G query heads each). Shared memory after GroupLayout::BYTES: the
//   two rows' 32 warp sums (f64), then as above.
template <int D, int G, bool ROWS> struct AttnRotate {
    const float *q, *k, *v, *wq, *wk;
    uint16_t *kc, *vc;
    KvPages pages;
    int key; // pos[0], the newest key
    float eps, theta_scale;
    const float *ff;
    RopeScale rs;
    const float2 *table;
    const uint16_t *staged; // the key, then the value (set by queries)
    bool owner;             // this block's split holds the key (set by queries)
    // -1, or which half (0, 1) of its KV head's 2G query heads the block takes (the split
    // entry, attn_decode_group_tc_rope_d<D>_g<2G>h2): both halves rotate the key for their
    // tiles, half 0 stores it.
    int half;

    __device__ __forceinline__ int skip() const {
        return key;
    }

    __device__ __forceinline__ int first_head(int g, int g_heads) const {
        return half < 0 ? g * g_heads : (2 * g + half) * g_heads;
    }

    // rms_norm_group's scales of the q row and (with `both`) the k row, each of `width` =
    // 4 norm_threads(width) elements (the host checks; at most 4 * ROW_MAX_VT * 128), as the
    // norm launch's block of T = norm_threads(width) threads sums them: thread t's f64 sum of
    // elements t, t + T, t + 2T, t + 3T in turn, then block_sum's trees (each warp of T, then
    // the T / 32 warp sums). Here each of the 128 threads takes T / 128 of those threads, all
    // their loads first, so that both rows come from L2 in one round trip. `sums`: 64 doubles
    // of shared memory. The whole block calls it.
    static constexpr int ROW_MAX_VT = 4;
    static __device__ __forceinline__ float2 row_scales(const float *xq, int width_q,
                                                        const float *xk, int width_k, bool both,
                                                        float eps, double *sums) {
        const int lane = threadIdx.x % WARP_SIZE;
        const int tq = width_q / 4, tk = width_k / 4; // norm_threads of each row
        float vq[ROW_MAX_VT][4], vk[ROW_MAX_VT][4];
#pragma unroll
        for (int u = 0; u < ROW_MAX_VT; ++u) {
            const int t = threadIdx.x + u * ATTN_NWARPS * WARP_SIZE;
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                vq[u][e] = t < tq ? xq[t + e * tq] : 0.0f;
                vk[u][e] = both && t < tk ? xk[t + e * tk] : 0.0f;
            }
        }
#pragma unroll
        for (int u = 0; u < ROW_MAX_VT; ++u) {
            const int t = threadIdx.x + u * ATTN_NWARPS * WARP_SIZE; // warp-uniform bounds
            double sq = 0.0, sk = 0.0;
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const double dq = vq[u][e], dk = vk[u][e];
                sq += dq * dq; // exact squares; a fused add changes nothing
                sk += dk * dk;
            }
            if (t < tq) {
                sq = warp_sum(sq);
                if (lane == 0) {
                    sums[t / WARP_SIZE] = sq;
                }
            }
            if (both && t < tk) {
                sk = warp_sum(sk);
                if (lane == 0) {
                    sums[32 + t / WARP_SIZE] = sk;
                }
            }
        }
        __syncthreads();
        double sq = lane < tq / WARP_SIZE ? sums[lane] : 0.0;
        double sk = both && lane < tk / WARP_SIZE ? sums[32 + lane] : 0.0;
        sq = warp_sum(sq);
        sk = warp_sum(sk);
        const float mq = (float)(sq / (double)width_q), mk = (float)(sk / (double)width_k);
        return make_float2(1.0f / sqrtf(mq + eps), 1.0f / sqrtf(mk + eps));
    }

    __device__ __forceinline__ const float *queries(char *extra, int h0, int g, int k0, int k1) {
        constexpr int J = D / WARP_SIZE;
        static_assert(J == 2 || J == 4, "a head is one warp's 2 or 4 elements a lane");
        dependent_launch_entry(); // the tiles' copies above went ahead of it
        double *sums = (double *)extra;
        float *qf = (float *)(extra + (ROWS ? 2 * 32 * sizeof(double) : 0));
        uint16_t *ks = (uint16_t *)(qf + G * D), *vs = ks + D;
        staged = ks;
        owner = k0 <= key && key < k1;
        float2 scales = make_float2(0.0f, 0.0f);
        if constexpr (ROWS) {
            const int width_k = gridDim.y * D;
            scales = row_scales(q, G * width_k, k, width_k, owner, eps, sums);
        }
        const int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
        float2 cs[J / 2];
#pragma unroll
        for (int j = 0; j < J / 2; ++j) {
            const int i = lane + j * WARP_SIZE;
            cs[j] = table ? table[i] : rope_cos_sin((uint32_t)key, i, theta_scale, ff, rs);
        }
        for (int h = warp; h < G + (owner ? 1 : 0); h += ATTN_NWARPS) {
            const bool is_k = h == G;
            const size_t at = (size_t)(is_k ? g : h0 + h) * D; // the head's place in its row
            const float *x = (is_k ? k : q) + at, *w = is_k ? wk : wq;
            float val[J];
#pragma unroll
            for (int j = 0; j < J; ++j) {
                val[j] = x[lane + j * WARP_SIZE];
            }
            if constexpr (ROWS) {
                const float scale = is_k ? scales.y : scales.x;
#pragma unroll
                for (int j = 0; j < J; ++j) {
                    val[j] = __fmul_rn(__fmul_rn(val[j], scale), w[at + lane + j * WARP_SIZE]);
                }
                neox_rotate_regs<J>(val, cs);
            } else {
                head_norm_rope_neox_regs<J>(val, w, lane, WARP_SIZE, D, eps, cs,
                                            [](double sum) { return warp_sum(sum); });
            }
            if (!is_k) {
#pragma unroll
                for (int j = 0; j < J; ++j) {
                    qf[h * D + lane + j * WARP_SIZE] = val[j];
                }
                continue;
            }
            store_key<J>(val, v + at, half <= 0 ? kc : nullptr, vc, pages.row(g, key) * D, ks,
                         vs, lane);
        }
        return qf;
    }

    template <typename Offset>
    __device__ __forceinline__ void patch(char *sk, char *sv, int base, Offset offset) const {
        patch_key<D>(staged, owner, key, sk, sv, base, offset);
    }
};

// The rotating walk's block (the tensor-core walk, or with ROWS the group block): its older
// keys' tile copies go ahead of the wait for the kernel ahead (AttnRotate::queries waits):
// they read only the cache's rows before pos[0], which earlier steps wrote, through the pass's
// block table and positions, which the host wrote before the step's first kernel. Nothing the
// kernel ahead writes is read before the wait. `g`: the block's KV head.
// BULK (the group block only): its tiles by bulk copies (attention_group.cuh's bulk_load_tile).
template <int D, int G, bool ROWS, bool BULK = false>
static __device__ __forceinline__ void
attn_rope_tiles_then_wait(const AttnRotate<D, G, ROWS> &rot, float *part_m, float *part_l,
                          float *part_acc, int *done, float *out, float scale, int window,
                          const float *sinks, int g) {
    if constexpr (ROWS) {
        attn_group_block<D, G, 0, AttnRotate<D, G, ROWS>, BULK>(
            rot, rot.kc, rot.vc, rot.pages, rot.key + 1, blockIdx.x, gridDim.x, g, part_m, part_l,
            part_acc, done, out, scale, window, sinks);
    } else {
        attn_group_block_tc<D, G>(rot, rot.kc, rot.vc, rot.pages, rot.key + 1, blockIdx.x,
                                  gridDim.x, g, part_m, part_l, part_acc, done, out, scale,
                                  window, sinks);
    }
}

// An entry of the rotating walk (ops/attention.rs's decode with a DecodeRotation): G query
// heads a block, whole-row norms or not, `HALF` and `KV_HEAD` the block's AttnRotate::half and
// KV head.
#define ATTN_ROPE_ENTRY(NAME, D, G, ROWS, HALF, KV_HEAD)                                          \
    ATTN_ROPE_ENTRY_B(NAME, D, G, ROWS, HALF, KV_HEAD, false)
#define ATTN_ROPE_ENTRY_B(NAME, D, G, ROWS, HALF, KV_HEAD, BULK)                                  \
    extern "C" __global__ void __launch_bounds__(ATTN_NWARPS *WARP_SIZE)                          \
        NAME(const float *q, const float *k, const float *v, const float *wq, const float *wk,    \
             float eps, uint16_t *kc, uint16_t *vc, const uint32_t *pos, float *part_m,           \
             float *part_l, float *part_acc, int *done, float *out, KvPages pages, float scale,   \
             int window, const float *sinks, float theta_scale, const float *ff, RopeScale rs,   \
             const float2 *table) {                                                               \
        attn_rope_tiles_then_wait<D, G, ROWS, BULK>(                                              \
            AttnRotate<D, G, ROWS>{q, k, v, wq, wk, kc, vc, pages, (int)pos[0], eps,              \
                                   theta_scale, ff, rs, table, nullptr, false, HALF},             \
            part_m, part_l, part_acc, done, out, scale, window, sinks, KV_HEAD);                  \
    }
// ops/attention.rs's ATTN_ROPE_DIMS and ATTN_TC_GROUPS.
#define ATTN_GROUP_TC_ROPE_INSTANCE(D, G)                                                         \
    ATTN_ROPE_ENTRY(attn_decode_group_tc_rope_d##D##_g##G, D, G, false, -1, blockIdx.y)
ATTN_GROUP_TC_ROPE_INSTANCE(64, 4)
ATTN_GROUP_TC_ROPE_INSTANCE(64, 8)
ATTN_GROUP_TC_ROPE_INSTANCE(128, 4)
ATTN_GROUP_TC_ROPE_INSTANCE(128, 8)

// FERROLM_ATTN_HEAD_SPLIT: groups of 8 query heads a KV head walked by two blocks of 4 each
// (grid (n_split, 2 n_kv_head): KV head blockIdx.y / 2, half blockIdx.y % 2), twice the blocks
// and each block's chain of heads to norm, rotate and score half as long, where a short
// context leaves few blocks. The K and V tiles are read by both. Each block's q prescale is
// its own 4 heads' (attention_tc.cuh), so the bits are the 8-head block's where neither
// block's largest q passes 2^15 (no prescale), else within the tensor-core walk's bound.
#define ATTN_GROUP_TC_ROPE_HALF_INSTANCE(D)                                                       \
    ATTN_ROPE_ENTRY(attn_decode_group_tc_rope_d##D##_g8h2, D, 4, false, (int)(blockIdx.y % 2),   \
                    blockIdx.y / 2)
ATTN_GROUP_TC_ROPE_HALF_INSTANCE(64)
ATTN_GROUP_TC_ROPE_HALF_INSTANCE(128)

// Whole-row norms, one query head a KV head (ops/attention.rs's ATTN_ROPE_DIMS):
// norm_threads(width), the norm launch's block, must be a multiple of the block's 128 threads
// and a quarter of the width, at most 512 (the host checks; OLMoE's 2,048-wide rows take 512).
#define ATTN_GROUP_ROPE_ROW_INSTANCE(D, G)                                                        \
    ATTN_ROPE_ENTRY(attn_decode_group_rope_row_d##D##_g##G, D, G, true, -1, blockIdx.y)
ATTN_GROUP_ROPE_ROW_INSTANCE(64, 1)
ATTN_GROUP_ROPE_ROW_INSTANCE(128, 1)
// FERROLM_ATTN_BULK: the same with its tiles by bulk copies (sm_90).
#define ATTN_GROUP_ROPE_ROW_BULK_INSTANCE(D)                                                      \
    ATTN_ROPE_ENTRY_B(attn_decode_group_rope_row_bulk_d##D##_g1, D, 1, true, -1, blockIdx.y, true)
ATTN_GROUP_ROPE_ROW_BULK_INSTANCE(64)
ATTN_GROUP_ROPE_ROW_BULK_INSTANCE(128)
