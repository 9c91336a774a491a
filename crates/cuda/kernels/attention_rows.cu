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
// The arithmetic per row is flash-decoding's (f16 keys dotted a lane per key with the G query
// heads of a KV head, the warp's online softmax per 32 keys, V rows a lane per ceil(D / 32)
// elements (common.cuh's LaneDims), warps merged, the group's last split block combining the
// splits in order): a row's bits depend on its own query, cache and split count only, never on
// the other rows.
#include "common.cuh"

#define ROWS_NWARPS 4
#define ROWS_NEG_INF __int_as_float(0xff800000)

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

// Head h's combine for one row: out = Σ_s acc_s e^(m_s - m) / Σ_s l_s e^(m_s - m) over the
// non-empty splits in split order (attention.cu's combine_head; partials of the row's slot),
// the head's sink (if `sinks`) in m and the denominator.
static __device__ __forceinline__ void rows_combine_head(const float *part_m, const float *part_l,
                                                         const float *part_acc, float *out_row,
                                                         int n_split, int head_dim, int h,
                                                         const float *sinks) {
    const size_t base = (size_t)h * n_split;
    float m = ROWS_NEG_INF;
    for (int s = 0; s < n_split; ++s) {
        m = fmaxf(m, __ldcg(part_m + base + s));
    }
    const float sink = sinks != nullptr ? sinks[h] : ROWS_NEG_INF;
    m = fmaxf(m, sink);
    for (int j = threadIdx.x; j < head_dim; j += blockDim.x) {
        float l = 0.0f, a = 0.0f;
        for (int s = 0; s < n_split; ++s) {
            const float ms = __ldcg(part_m + base + s);
            if (ms == ROWS_NEG_INF) {
                continue;
            }
            const float w = expf(ms - m);
            l += __ldcg(part_l + base + s) * w;
            a += __ldcg(part_acc + (base + s) * head_dim + j) * w;
        }
        if (sinks != nullptr) {
            l += expf(sink - m); // the sink's weight: no value row
        }
        out_row[(size_t)h * head_dim + j] = a / l;
    }
}

// grid (max split count, n_kv_head, n_rows); block ROWS_NWARPS warps. q, out: [n_rows][n_head][D].
// `window`: the layer's sliding window (0: none); a row sees keys attn_first_key..pos[t].
// `sinks`: null, or a logit per query head joining the combine (attention.cuh).
template <int D, int G>
static __device__ __forceinline__ void attn_decode_rows(
    const float *__restrict__ q, const unsigned long long *__restrict__ kv,
    const int *__restrict__ meta, const unsigned long long *__restrict__ pages,
    const unsigned long long *__restrict__ work,
    const uint32_t *__restrict__ pos, float *__restrict__ out, int n_head, float scale,
    int window, const float *__restrict__ sinks) {
    constexpr int DL = LaneDims<D>::N; // V elements a lane holds
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
    const uint16_t *kc = (const uint16_t *)kv[t];
    const uint16_t *vc = (const uint16_t *)kv[n_rows + t];
    float *part_m = (float *)work[t];
    float *part_l = (float *)work[n_rows + t];
    float *part_acc = (float *)work[2 * n_rows + t];
    int *done = (int *)work[3 * n_rows + t];

    __shared__ __align__(16) float sq[G][D];
    __shared__ float sm[ROWS_NWARPS][G], sl[ROWS_NWARPS][G];
    __shared__ float sacc[ROWS_NWARPS][G][D];
    const int h0 = g * G;
    const int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
    // The row's visible keys (its window's, or all: attn_first_key), split evenly.
    const int n_keys = (int)pos[t] + 1, first = attn_first_key(n_keys, window);
    const int chunk = (n_keys - first + n_split - 1) / n_split;
    const int k0 = first + split * chunk, k1 = min(n_keys, k0 + chunk);
    for (int i = threadIdx.x; i < G * D; i += blockDim.x) {
        sq[i / D][i % D] = q[((size_t)t * n_head + h0) * D + i];
    }
    __syncthreads();
    float m[G], l[G], acc[G][DL];
#pragma unroll
    for (int i = 0; i < G; ++i) {
        m[i] = ROWS_NEG_INF;
        l[i] = 0.0f;
#pragma unroll
        for (int j = 0; j < DL; ++j) {
            acc[i][j] = 0.0f;
        }
    }
    for (int base = k0 + warp * WARP_SIZE; base < k1; base += ROWS_NWARPS * WARP_SIZE) {
        const int key = base + lane;
        const bool live = key < k1;
        float s[G];
#pragma unroll
        for (int i = 0; i < G; ++i) {
            s[i] = 0.0f;
        }
        if (live) {
            const uint4 *kr = (const uint4 *)(kc + pg.row(g, key) * D);
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
            const float sc = live ? s[i] * scale : ROWS_NEG_INF;
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
            float vf[DL];
            v_row_f16<D>(vc + pg.row(g, base + kk) * D, lane, vf);
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
    // The block's warps merged per head.
#pragma unroll
    for (int i = 0; i < G; ++i) {
        if (lane == 0) {
            sm[warp][i] = m[i];
            sl[warp][i] = l[i];
        }
#pragma unroll
        for (int j = 0; j < DL; ++j) {
            if (LaneDims<D>::in_row(lane * DL + j)) {
                sacc[warp][i][lane * DL + j] = acc[i][j];
            }
        }
    }
    __syncthreads();
    for (int i = 0; i < G; ++i) {
        float mm = ROWS_NEG_INF;
        for (int w = 0; w < ROWS_NWARPS; ++w) {
            mm = fmaxf(mm, sm[w][i]);
        }
        const size_t part = (size_t)(h0 + i) * n_split + split;
        for (int j = threadIdx.x; j < D; j += blockDim.x) {
            float a = 0.0f;
            for (int w = 0; w < ROWS_NWARPS; ++w) {
                a += sm[w][i] == ROWS_NEG_INF ? 0.0f : sacc[w][i][j] * expf(sm[w][i] - mm);
            }
            part_acc[part * D + j] = a;
        }
        if (threadIdx.x == 0) {
            float ll = 0.0f;
            for (int w = 0; w < ROWS_NWARPS; ++w) {
                ll += sm[w][i] == ROWS_NEG_INF ? 0.0f : sl[w][i] * expf(sm[w][i] - mm);
            }
            part_m[part] = mm; // -inf for an empty split
            part_l[part] = ll;
        }
    }
    // The group's last split block to finish combines its G heads (counted on head h0's
    // counter) and resets the counter for the next launch or graph replay.
    __shared__ bool last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        int *c = done + h0;
        last = atomicAdd(c, 1) == n_split - 1;
        if (last) {
            *c = 0;
        }
    }
    __syncthreads();
    if (last) {
        __threadfence();
        for (int i = 0; i < G; ++i) {
            rows_combine_head(part_m, part_l, part_acc, out + (size_t)t * n_head * D, n_split, D,
                              h0 + i, sinks);
        }
    }
}

#define ROWS_INSTANCE(D, G)                                                                       \
    extern "C" __global__ void __launch_bounds__(ROWS_NWARPS *WARP_SIZE)                          \
        attn_decode_rows_d##D##_g##G(const float *q, const unsigned long long *kv,              \
                                     const int *meta, const unsigned long long *pages,           \
                                     const unsigned long long *work, const uint32_t *pos,        \
                                     float *out, int n_head, float scale, int window,            \
                                     const float *sinks) {                                       \
        dependent_launch_entry();                                                                 \
        attn_decode_rows<D, G>(q, kv, meta, pages, work, pos, out, n_head, scale, window,        \
                               sinks);                                                            \
    }
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
// Every head size of ops/attention.rs's ATTN_HEAD_DIMS (static shared memory: at 256 and 8
// heads a group, 40 KiB of the 48).
ROWS_INSTANCES(32)
ROWS_INSTANCES(64)
ROWS_INSTANCES(80)
ROWS_INSTANCES(96)
ROWS_INSTANCES(128)
ROWS_INSTANCES(192)
ROWS_INSTANCES(256)
