// Decode attention for a whole batch of sequences in one launch (f16 caches): every row of the
// pass is a query of some sequence at some position, and reads that sequence's own KV cache
// through a per-row table instead of one launch per sequence (ops/attention_rows.rs builds it).
//
// The table, per row t of the pass (n_rows = gridDim.z of the attention kernel):
//   kv[t], kv[n_rows + t]           this layer's K and V pools (f16, paged as attention.cu's
//                                   caches: common.cuh's KvPages)
//   pages[t]                        the row's sequence's block table
//   meta[t], meta[n_rows + t]       its block shift, and the row's split count, at most its
//                                   work's (0: the row is not in this launch: another path
//                                   serves it, or padding)
//   work[t], work[n_rows + t], work[2 n_rows + t], work[3 n_rows + t]
//                                   the row's flash-decoding partials m, l, acc and its
//                                   finished-split counters, already offset to the row's slot
//                                   (its sequence's DecodeWork; the row's [n_head][n_split]
//                                   partials at the start of its slot)
//
// The arithmetic per row is the decode by KV group's (attention_group.cuh's attn_group_block:
// K and V tiles staged by cp.async, four lanes a key's scores, the softmax and V a warp a head,
// the group's last split block combining the splits) on the row's own
// pointers: a row's bits depend on its own query, cache and split count only, never on the
// other rows, and equal a single sequence's grouped decode at the same split count.
#include "attention_tc.cuh"

// Tiles in flight a block: a split of ROWS_SPLIT_KEYS (32) keys is one tile, so a row's blocks
// mostly walk one; two stages (where a single sequence's decode takes three) leave room for
// more blocks an SM.
#define ROWS_STAGES 2

// Head g's row of position pos[t] = f16(k/v[t][g*head_dim..]) for every row t with meta's split
// count > 0;
// k, v: [n_rows][n_kv_head * head_dim] f32. Grid-stride over elements.
extern "C" __global__ void kv_store_rows_f16(const float *__restrict__ k,
                                             const float *__restrict__ v,
                                             const unsigned long long *__restrict__ kv,
                                             const int *__restrict__ meta,
                                             const unsigned long long *__restrict__ pages,
                                             const uint32_t *__restrict__ pos, int n_rows,
                                             int n_kv_head, int head_dim) {
    dependent_launch_entry();
    const int width = n_kv_head * head_dim;
    const size_t total = (size_t)n_rows * width;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        const int t = (int)(i / width);
        if (meta[n_rows + t] == 0) {
            continue;
        }
        const int c = (int)(i % width), g = c / head_dim, d = c % head_dim;
        const KvPages pg = {(const uint32_t *)pages[t], meta[t], n_kv_head};
        const size_t at = pg.row(g, (int)pos[t]) * head_dim + d;
        ((uint16_t *)kv[t])[at] = f32_to_f16_bits(k[i]);
        ((uint16_t *)kv[n_rows + t])[at] = f32_to_f16_bits(v[i]);
    }
}

// grid (max split count, n_kv_head, n_rows); block ATTN_NWARPS warps; dynamic shared memory
// GroupLayout<D, G, ROWS_STAGES>::BYTES, or with TC (attention_tc.cuh) TcLayout's
// (ops/attention_rows.rs's rows_smem_bytes, rows_tc_smem_bytes). q, out:
// [n_rows][n_head][D]. `window`: the layer's sliding window (0: none); a row sees keys
// attn_first_key..pos[t]. `sinks`: null, or a logit per query head joining the combine
// (attention.cuh).
template <int D, int G, bool TC>
static __device__ __forceinline__ void attn_decode_rows(
    const float *__restrict__ q, const unsigned long long *__restrict__ kv,
    const int *__restrict__ meta, const unsigned long long *__restrict__ pages,
    const unsigned long long *__restrict__ work, const uint32_t *__restrict__ pos,
    float *__restrict__ out, int n_head, float scale, int window,
    const float *__restrict__ sinks) {
    const int n_rows = gridDim.z;
    const int split = blockIdx.x, g = blockIdx.y, t = blockIdx.z;
    const int n_split = meta[n_rows + t];
    if (n_split == 0 && split == 0) {
        // A row this launch does not serve reads zeros until its own path (which runs after,
        // in stream order) writes it: a padding row of a captured batch stays finite.
        for (int j = threadIdx.x; j < G * D; j += blockDim.x) {
            out[((size_t)t * n_head + g * G) * D + j] = 0.0f;
        }
    }
    if (split >= n_split) {
        return; // a row of fewer splits, or one this launch does not serve
    }
    const KvPages pg = {(const uint32_t *)pages[t], meta[t], (int)gridDim.y};
    const float *q_row = q + (size_t)t * n_head * D;
    const uint16_t *kc = (const uint16_t *)kv[t], *vc = (const uint16_t *)kv[n_rows + t];
    float *m = (float *)work[t], *l = (float *)work[n_rows + t];
    float *acc = (float *)work[2 * n_rows + t];
    int *done = (int *)work[3 * n_rows + t];
    float *out_row = out + (size_t)t * n_head * D;
    const int n_keys = (int)pos[t] + 1;
    if constexpr (TC) {
        attn_group_block_tc<D, G, ROWS_STAGES>(QueriesInMemory<D>{q_row}, kc, vc, pg, n_keys,
                                               split, n_split, g, m, l, acc, done, out_row, scale,
                                               window, sinks);
    } else {
        attn_group_block<D, G, ROWS_STAGES>(QueriesInMemory<D>{q_row}, kc, vc, pg, n_keys, split,
                                            n_split, g, m, l, acc, done, out_row, scale, window,
                                            sinks);
    }
}

#define ROWS_ENTRY(NAME, D, G, TC)                                                                 \
    extern "C" __global__ void __launch_bounds__(ATTN_NWARPS *WARP_SIZE)                          \
        NAME(const float *q, const unsigned long long *kv, const int *meta,                       \
             const unsigned long long *pages, const unsigned long long *work,                     \
             const uint32_t *pos, float *out, int n_head, float scale, int window,                \
             const float *sinks) {                                                                \
        dependent_launch_entry();                                                                 \
        attn_decode_rows<D, G, TC>(q, kv, meta, pages, work, pos, out, n_head, scale, window,    \
                                   sinks);                                                        \
    }
#define ROWS_INSTANCE(D, G) ROWS_ENTRY(attn_decode_rows_d##D##_g##G, D, G, false)
// Every group size up to 8 (SmolLM2's 3, Qwen2.5's 7 too): one query head a KV head to 8.
#define ROWS_INSTANCES(D)                                                                         \
    ROWS_INSTANCE(D, 1)                                                                           \
    ROWS_INSTANCE(D, 2)                                                                           \
    ROWS_INSTANCE(D, 3)                                                                           \
    ROWS_INSTANCE(D, 4)                                                                           \
    ROWS_INSTANCE(D, 5)                                                                           \
    ROWS_INSTANCE(D, 6)                                                                           \
    ROWS_INSTANCE(D, 7)                                                                           \
    ROWS_INSTANCE(D, 8)
// Every head size of ops/attention.rs's ATTN_HEAD_DIMS.
ROWS_INSTANCES(32)
ROWS_INSTANCES(64)
ROWS_INSTANCES(80)
ROWS_INSTANCES(96)
ROWS_INSTANCES(128)
ROWS_INSTANCES(192)
ROWS_INSTANCES(256)

// On the tensor cores (FERROLM_ATTN_TC): ops/attention.rs's ATTN_TC_GROUPS and ATTN_TC_DIMS.
#define ROWS_TC_INSTANCE(D, G) ROWS_ENTRY(attn_decode_rows_tc_d##D##_g##G, D, G, true)
#define ROWS_TC_INSTANCES(D)                                                                      \
    ROWS_TC_INSTANCE(D, 4)                                                                        \
    ROWS_TC_INSTANCE(D, 8)
ROWS_TC_INSTANCES(64)
ROWS_TC_INSTANCES(128)
ROWS_TC_INSTANCES(256)
