// Shared by attention.cu (one sequence's decode) and attention_rows.cu (a batch's decode
// rows): flash-decoding's combine of split partials, and the decode by KV group.
#pragma once
#include "attention.cuh"

#define ATTN_MAX_SPLITS 256
#define ATTN_MAX_COMBINE_HEADS 8
// Floats of shared scratch the walk's combine needs for nh heads (combine_heads_wide; one head:
// combine_head_in_walk, whose ATTN_COMBINE_ALONE_SCRATCH(1) is the same size).
#define ATTN_COMBINE_SCRATCH(NH) (512 + ATTN_MAX_COMBINE_HEADS + (NH) * ATTN_MAX_SPLITS)

// Flash-decoding's combine of heads h0 .. h0 + nh - 1 of query row t, by the whole block:
// out = Σ_s acc_s w_s / Σ_s l_s w_s with w_s = e^(m_s - m) over the splits (0 for an empty one,
// whose acc is 0), the head's sink (if `sinks`) in m and the denominator. The splits of an
// output element are summed in ROWS = blockDim.x / (head_dim / 4) interleaved sets (set r:
// splits r, r + ROWS, .., in order), and the sets are added in order: combine_heads_alone and
// combine_heads_wide keep that order, so they give the same bits. Loads bypass L1 (__ldcg): in
// the fused use, other blocks wrote the partials. `scratch`: ATTN_COMBINE_SCRATCH(nh) floats of
// shared memory, 16-byte aligned.

// The combine's first step: a warp a head finds m, each split's weight (into sw[i][s]) and the
// denominator (into sl[i]).
static __device__ __forceinline__ void combine_weights(const float *part_m, const float *part_l,
                                                       int n_head, int n_split, int h0, int nh,
                                                       int t, const float *sinks, float *sl,
                                                       float *sw) {
    const int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
    const int n_warps = blockDim.x / WARP_SIZE;
    // A lane's splits (lane, lane + 32, ..: at most ATTN_MAX_SPLITS / 32) are loaded at once,
    // then taken in that order: one round trip to L2 where a loop took one a split.
    constexpr int LANE_SPLITS = ATTN_MAX_SPLITS / WARP_SIZE;
    for (int i = warp; i < nh; i += n_warps) {
        const size_t base = ((size_t)t * n_head + h0 + i) * n_split;
        float ms[LANE_SPLITS], ls[LANE_SPLITS];
#pragma unroll
        for (int j = 0; j < LANE_SPLITS; ++j) {
            const int s = lane + j * WARP_SIZE;
            ms[j] = s < n_split ? __ldcg(part_m + base + s) : ATTN_NEG_INF;
            ls[j] = s < n_split ? __ldcg(part_l + base + s) : 0.0f;
        }
        float m = ATTN_NEG_INF;
#pragma unroll
        for (int j = 0; j < LANE_SPLITS; ++j) {
            if (lane + j * WARP_SIZE < n_split) {
                m = fmaxf(m, ms[j]);
            }
        }
        m = warp_max(m);
        const float sink = sinks != nullptr ? sinks[h0 + i] : ATTN_NEG_INF;
        m = fmaxf(m, sink);
        float l = 0.0f;
#pragma unroll
        for (int j = 0; j < LANE_SPLITS; ++j) {
            const int s = lane + j * WARP_SIZE;
            if (s < n_split) {
                const float w = ms[j] == ATTN_NEG_INF ? 0.0f : expf(ms[j] - m);
                sw[i * n_split + s] = w;
                l += ls[j] * w;
            }
        }
        l = warp_sum(l);
        if (sinks != nullptr) {
            l += expf(sink - m); // the sink's weight: no value row
        }
        if (lane == 0) {
            sl[i] = l;
        }
    }
}

// A set's CHUNK splits from s0 (splits s0, s0 + rows, ..), loaded at once (predicated, so they
// are all in flight), then added to a in order with their weights w.
template <int CHUNK>
static __device__ __forceinline__ void load_set_chunk(const float4 *acc, int n_chunk, int s0,
                                                      int rows, int n_split, float4 (&v)[CHUNK]) {
#pragma unroll
    for (int j = 0; j < CHUNK; ++j) {
        const int s = s0 + j * rows;
        if (s < n_split) {
            v[j] = __ldcg(acc + (size_t)s * n_chunk);
        }
    }
}
template <int CHUNK>
static __device__ __forceinline__ void add_set_chunk(const float4 (&v)[CHUNK], const float *w,
                                                     int s0, int rows, int n_split, float4 &a) {
#pragma unroll
    for (int j = 0; j < CHUNK; ++j) {
        const int s = s0 + j * rows;
        if (s < n_split) {
            const float ws = w[s];
            a.x += ws * v[j].x;
            a.y += ws * v[j].y;
            a.z += ws * v[j].z;
            a.w += ws * v[j].w;
        }
    }
}

// The combine's own launch (attn_decode_combine, attn_decode_combine_q8k): heads h0 .. h0 +
// nh - 1 of row t, blockDim.x / nh threads a head (the split kernels' block, so the fused
// combine's sets, sums and bits), a thread's first CHUNK splits asked for before the weights'
// step, so the partials and the maxima travel from L2 together (one round trip, not two or
// more). `stage`: null, or nh * head_dim floats of shared memory that get the
// outputs too. `scratch`: ATTN_COMBINE_ALONE_SCRATCH(nh) floats, 16-byte aligned.
#define ATTN_COMBINE_ALONE_SCRATCH(NH) ((NH) * 512 + ATTN_MAX_COMBINE_HEADS + (NH) * ATTN_MAX_SPLITS)
template <int CHUNK>
static __device__ __forceinline__ void combine_heads_alone(const float *part_m,
                                                           const float *part_l,
                                                           const float *part_acc, float *out,
                                                           int n_head, int n_split, int head_dim,
                                                           int h0, int nh, int t,
                                                           const float *sinks, float *scratch,
                                                           float *stage) {
    const int per = blockDim.x / nh, i = threadIdx.x / per, tid = threadIdx.x % per;
    float *red = scratch + i * 512, *sl = scratch + nh * 512, *sw = sl + ATTN_MAX_COMBINE_HEADS;
    const int n_chunk = head_dim / 4;
    const int c = tid % n_chunk, r = tid / n_chunk, rows = per / n_chunk;
    const size_t base = ((size_t)t * n_head + h0 + i) * n_split;
    const float4 *acc = (const float4 *)(part_acc + base * head_dim) + c;
    const int mine = r < rows ? n_split : 0; // idle threads past the last whole set load nothing
    float4 v[CHUNK];
    load_set_chunk<CHUNK>(acc, n_chunk, r, rows, mine, v);
    combine_weights(part_m, part_l, n_head, n_split, h0, nh, t, sinks, sl, sw);
    __syncthreads();
    const float *w = sw + i * n_split;
    float4 a = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    add_set_chunk<CHUNK>(v, w, r, rows, mine, a);
    for (int s0 = r + CHUNK * rows; s0 < mine; s0 += CHUNK * rows) {
        load_set_chunk<CHUNK>(acc, n_chunk, s0, rows, mine, v);
        add_set_chunk<CHUNK>(v, w, s0, rows, mine, a);
    }
    if (r < rows) {
        *(float4 *)&red[r * head_dim + 4 * c] = a; // rows * head_dim <= 4 * per <= 512
    }
    __syncthreads();
    for (int j = tid; j < head_dim; j += per) {
        float sum = 0.0f;
        for (int rr = 0; rr < rows; ++rr) {
            sum += red[rr * head_dim + j];
        }
        const float o = sum / sl[i];
        out[((size_t)t * n_head + h0 + i) * head_dim + j] = o;
        if (stage != nullptr) {
            stage[i * head_dim + j] = o;
        }
    }
}

// The combine of the walk's last block where a KV group has one head (and of the group-less
// walk): combine_heads_alone for head h of row t, a set's 8 splits in flight at once (the
// walk's registers are its own), kept out of line as the walk's tail.
static __device__ __noinline__ void combine_head_in_walk(const float *part_m, const float *part_l,
                                                         const float *part_acc, float *out,
                                                         int n_head, int n_split, int head_dim,
                                                         int h, int t, const float *sinks,
                                                         float *scratch) {
    static_assert(ATTN_COMBINE_ALONE_SCRATCH(1) == ATTN_COMBINE_SCRATCH(1), "the walk's scratch");
    combine_heads_alone<8>(part_m, part_l, part_acc, out, n_head, n_split, head_dim, h, 1, t,
                           sinks, scratch, nullptr);
}

// The combine of a KV group's heads in the walk's last block (nh > 1, blockDim.x = BLOCK):
// a thread a (head, float4 of the head), all of its sets in registers, CHUNK splits' loads in
// flight at once, the sets added in order: combine_heads_alone's bits, with the heads side by
// side where a head at a time would take a synchronized round trip to L2 each.
template <int D, int BLOCK>
static __device__ __noinline__ void combine_heads_wide(const float *part_m, const float *part_l,
                                                       const float *part_acc, float *out,
                                                       int n_split, int h0, int nh,
                                                       const float *sinks, float *scratch) {
    constexpr int N_CHUNK = D / 4, ROWS = BLOCK / N_CHUNK;
    constexpr int CHUNK = ROWS * ((8 + ROWS - 1) / ROWS); // whole sets of about 8 splits
    static_assert(ROWS >= 1, "a set is a whole head");
    float *sl = scratch + 512, *sw = sl + ATTN_MAX_COMBINE_HEADS;
    combine_weights(part_m, part_l, 0, n_split, h0, nh, 0, sinks, sl, sw);
    __syncthreads();
    for (int p = threadIdx.x; p < nh * N_CHUNK; p += BLOCK) {
        const int i = p / N_CHUNK, c = p % N_CHUNK;
        const float4 *acc = (const float4 *)(part_acc + (size_t)(h0 + i) * n_split * D) + c;
        const float *w = sw + i * n_split;
        float4 a[ROWS];
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
            a[r] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
        for (int s0 = 0; s0 < n_split; s0 += CHUNK) {
            float4 v[CHUNK];
#pragma unroll
            for (int j = 0; j < CHUNK; ++j) {
                if (s0 + j < n_split) {
                    v[j] = __ldcg(acc + (size_t)(s0 + j) * N_CHUNK);
                }
            }
#pragma unroll
            for (int j = 0; j < CHUNK; ++j) {
                if (s0 + j < n_split) {
                    const float ws = w[s0 + j];
                    float4 &ar = a[j % ROWS]; // s0 is a multiple of ROWS
                    ar.x += ws * v[j].x;
                    ar.y += ws * v[j].y;
                    ar.z += ws * v[j].z;
                    ar.w += ws * v[j].w;
                }
            }
        }
        float4 sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
            sum.x += a[r].x;
            sum.y += a[r].y;
            sum.z += a[r].z;
            sum.w += a[r].w;
        }
        const float den = sl[i];
        float *o = out + (size_t)(h0 + i) * D + 4 * c;
        o[0] = sum.x / den;
        o[1] = sum.y / den;
        o[2] = sum.z / den;
        o[3] = sum.w / den;
    }
}

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
// - softmax and V: 4 / G warps a head where G divides 4, each a contiguous share of the tile's
//   keys, else a warp a head (warp w: heads w and w + 4, those below G); a lane holds ceil(D / 32)
//   consecutive elements of the head's output (LaneDims), reads its share of a V row a key and
//   takes the key's weight by a shuffle. Warps that share a head merge at the end, in warp
//   order.
// Against attn_decode_split (a key per warp step, one query head a block): the same formula,
// f32 sums in another order. Partials as attn_decode_split writes them (per query head), so
// attn_decode_combine and combine_head_in_walk serve both; with `done`, the group's last block
// combines its G heads. attn_group_block is one block's work for one query row, whose
// pointers the caller offsets to that row: attention.cu's attn_decode_group (a sequence's
// rows, grid (n_split, n_kv_head, n_q)) and attention_rows.cu's attn_decode_rows (a row a
// sequence, through the rows table). Block ATTN_NWARPS warps; dynamic shared memory
// GroupLayout<D, G, STAGES>::BYTES (crates/cuda/src/ops/attention.rs's
// group_smem_bytes_staged agrees).
#define ATTN_GROUP_TILE 32
#define ATTN_GROUP_STAGES 3

// Tiles in flight by default: three, two for heads over 128 (three tiles of 256 and 8 heads a
// group would pass the 99 KiB a block gets on sm_86/sm_89).
static __host__ __device__ constexpr int group_stages(int d) {
    return d > 128 ? 2 : ATTN_GROUP_STAGES;
}

// Keys k0..k1 of split `split` of `n_split` over a row of n_keys keys (its window's, or all:
// attn_first_key), split evenly.
struct GroupSplit {
    int k0, k1;
    __device__ __forceinline__ GroupSplit(int n_keys, int window, int split, int n_split) {
        const int first = attn_first_key(n_keys, window);
        const int chunk = (n_keys - first + n_split - 1) / n_split;
        k0 = first + split * chunk;
        k1 = min(n_keys, k0 + chunk);
    }
    __device__ __forceinline__ int tiles(int tile) const {
        return k1 > k0 ? (k1 - k0 + tile - 1) / tile : 0;
    }
};

// After a block's partials: with `done` (else attn_decode_combine runs next), the group's last
// split block to finish combines its G heads into out_row (counted on head h0's counter, which
// it resets for the next launch or graph replay). `scratch`: the block's whole dynamic shared
// memory, free by then (ATTN_COMBINE_SCRATCH(G) floats at least).
template <int D, int G>
static __device__ __forceinline__ void group_combine_when_last(
    const float *part_m, const float *part_l, const float *part_acc, int *done, float *out_row,
    int n_split, int h0, const float *sinks, float *scratch) {
    if (done == nullptr) {
        return;
    }
    __shared__ bool last;
    __syncthreads(); // the block's partials, then one thread's fence and count
    if (threadIdx.x == 0) {
        int *c = done + h0;
        last = block_fence_count((unsigned *)c, n_split);
        if (last) {
            *c = 0;
        }
    }
    __syncthreads();
    if (last) {
        // The row's own partials and output (t = 0: the pointers are the row's already).
        if constexpr (G > 1) {
            combine_heads_wide<D, ATTN_NWARPS * WARP_SIZE>(part_m, part_l, part_acc, out_row,
                                                           n_split, h0, G, sinks, scratch);
        } else {
            combine_head_in_walk(part_m, part_l, part_acc, out_row, 0, n_split, D, h0, 0, sinks,
                                 scratch);
        }
    }
}

// STAGES_: tiles in flight (0: ATTN_GROUP_STAGES, two for heads over 128; a batch's rows take
// 2, whose blocks mostly walk one tile: the smaller stage lets more of them share an SM).
template <int D, int G, int STAGES_ = 0> struct GroupLayout {
    static constexpr int CHUNKS = D / 8;                       // 16-byte chunks a row
    static constexpr int SWIZZLE = CHUNKS % 8 == 0 ? 4 : 0;    // K's chunk flip on odd keys
    static constexpr int TILE_BYTES = ATTN_GROUP_TILE * D * 2; // K or V of one tile
    static constexpr int STAGE_BYTES = 2 * TILE_BYTES;
    static constexpr int STAGES = STAGES_ > 0 ? STAGES_ : group_stages(D);
    static_assert(STAGES >= 2, "the ring needs a stage to fill while one is read");
    static_assert(G <= ATTN_MAX_COMBINE_HEADS, "the combine's scratch holds 8 heads");
    static constexpr int Q_OFFSET = STAGES * STAGE_BYTES;
    static constexpr int S_OFFSET = Q_OFFSET + G * D * 4;
    // The last block's combine reuses the whole of it as its scratch (two stages of 32-wide
    // heads are smaller than eight heads' scratch).
    static constexpr int TILES_END = S_OFFSET + G * ATTN_GROUP_TILE * 4;
    static constexpr int COMBINE_BYTES = ATTN_COMBINE_SCRATCH(G) * 4;
    static constexpr int BYTES = TILES_END > COMBINE_BYTES ? TILES_END : COMBINE_BYTES;
    // Warps a head (each a share of a tile's keys) and heads a warp (at most: warps past G's
    // last head have one fewer where ATTN_NWARPS does not divide G).
    static constexpr int WK = G < ATTN_NWARPS && ATTN_NWARPS % G == 0 ? ATTN_NWARPS / G : 1;
    static constexpr int HW = WK > 1 ? 1 : (G + ATTN_NWARPS - 1) / ATTN_NWARPS;
    static constexpr int KPW = ATTN_GROUP_TILE / WK; // keys a warp takes of a tile
};

// Starts the copy of ROWS keys base.. (n of them live) and their values into sk and sv, each
// row CHUNKS 16-byte chunks, zero-filled past the live keys: chunk c of row r of K (V when
// is_v) goes to byte offset(is_v, r, c) of its tile. Shared by the group block and its
// tensor-core twin, which differ in the tiles' swizzles. kh and vh: one KV head's keys and
// values (the same pages and head, rows of one size). Key `skip`, if among the live ones, is
// neither copied nor zero-filled: a walk that made that key itself writes it (AttnRotate). A
// dead row is always zero-filled, even where it is `skip`'s (a split's last tile past its
// range): its weight is zero, and zero times stale bits could be a NaN.
template <int ROWS, int CHUNKS, typename Offset>
static __device__ __forceinline__ void copy_kv_tile(char *sk, char *sv, const KvHead<KvF16> &kh,
                                                    const KvHead<KvF16> &vh, int base, int n,
                                                    Offset offset, int skip = -1) {
    constexpr int PER_TENSOR = ROWS * CHUNKS, THREADS = ATTN_NWARPS * WARP_SIZE;
    static_assert(2 * PER_TENSOR % THREADS == 0, "whole copy rounds");
    if constexpr (PER_TENSOR % THREADS == 0) {
        // A thread's K and V chunks are of the same rows: each key's place in the pool (a
        // page-table load, which the copy's address waits on) is looked up once for both, and
        // all of its rows' lookups are issued before any copy, so that they share one round
        // trip (behind the skip test's branches, each copy waited for its own).
        constexpr int IT = PER_TENSOR / THREADS;
        size_t at[IT];
#pragma unroll
        for (int it = 0; it < IT; ++it) {
            const int idx = threadIdx.x + it * THREADS;
            const int r = idx / CHUNKS, c = idx % CHUNKS;
            at[it] = kh.pages.row(kh.g, base + (r < n ? r : 0)) * kh.row_bytes + 16 * c;
        }
#pragma unroll
        for (int it = 0; it < IT; ++it) {
            const int idx = threadIdx.x + it * THREADS;
            const int r = idx / CHUNKS, c = idx % CHUNKS;
            const bool live = r < n;
            if (live && base + r == skip) {
                continue;
            }
            cp_async16(sk + offset(false, r, c), kh.base + at[it], live ? 16 : 0);
            cp_async16(sv + offset(true, r, c), vh.base + at[it], live ? 16 : 0);
        }
    } else {
#pragma unroll
        for (int it = 0; it < 2 * PER_TENSOR / THREADS; ++it) {
            const int idx = threadIdx.x + it * THREADS;
            const bool is_v = idx >= PER_TENSOR;
            const int rem = is_v ? idx - PER_TENSOR : idx;
            const int r = rem / CHUNKS, c = rem % CHUNKS;
            const bool live = r < n;
            if (live && base + r == skip) {
                continue;
            }
            const int key = base + (live ? r : 0);
            const uint16_t *src = (const uint16_t *)(is_v ? vh.row(key) : kh.row(key)) + 8 * c;
            cp_async16((is_v ? sv : sk) + offset(is_v, r, c), src, live ? 16 : 0);
        }
    }
}

// The walk's queries as they are in memory (q_row's G heads from h0), read after the kernel's
// wait at its start; no key of its own. The group blocks' `rot` (attn_group_block and its
// tensor-core twin): queries() gives the G heads' queries (with its shared memory: from the
// layout's BYTES on) and may make the newest key itself: skip() names the key the tile copies
// leave out, patch() writes it into a tile's stage (any thread, before the barrier ahead of
// the tile's use; `offset`: the layout's chunk offsets); first_head() places the block's G
// query heads. attention.cu's AttnRotate and AttnRotateRow norm and rotate them there.
template <int D> struct QueriesInMemory {
    const float *q_row;
    __device__ __forceinline__ int skip() const {
        return -1;
    }
    __device__ __forceinline__ const float *queries(char *, int h0, int, int, int) const {
        return q_row + (size_t)h0 * D;
    }
    template <typename Offset>
    __device__ __forceinline__ void patch(char *, char *, int, Offset) const {}
    // The block's first query head: KV head g's G heads (the tensor-core walk asks; a rot that
    // splits a KV head's queries over blocks says which of them are this block's).
    __device__ __forceinline__ int first_head(int g, int G) const {
        return g * G;
    }
};

// Byte offset of chunk c of row r of the group block's K tile (chunks swizzled by the row's
// parity) or V tile.
template <int D> struct GroupOffset {
    static constexpr int CHUNKS = D / 8, SWIZZLE = CHUNKS % 8 == 0 ? 4 : 0;
    __device__ __forceinline__ int operator()(bool is_v, int r, int c) const {
        const int pc = is_v ? c : c ^ ((r & 1) * SWIZZLE);
        return (r * CHUNKS + pc) * 16;
    }
};

// Starts the copy of tile `tile` (keys base.. of the block's range, n of them live) into stage
// `stage`: every thread D / 16 chunks, zero-filled past the live keys; K's rows swizzled by
// parity; key `skip` left for the block's rot to write (copy_kv_tile's).
template <int D, int G, int STAGES>
static __device__ __forceinline__ void group_load_tile(char *smem, const KvHead<KvF16> &kh,
                                                       const KvHead<KvF16> &vh, int base, int n,
                                                       int stage, int skip) {
    typedef GroupLayout<D, G, STAGES> L;
    static_assert(GroupOffset<D>::SWIZZLE == L::SWIZZLE, "one swizzle");
    char *sk = smem + stage * L::STAGE_BYTES, *sv = sk + L::TILE_BYTES;
    copy_kv_tile<ATTN_GROUP_TILE, L::CHUNKS>(sk, sv, kh, vh, base, n, GroupOffset<D>(), skip);
}

// FERROLM_ATTN_BULK: a tile of the group block by sm_90's bulk copies, one thread's requests
// (a K and a V request a run of keys that one block of the table holds: 8 KB each for a whole
// tile in one block), completing on the stage's mbarrier, in place of 128 threads' 16-byte
// cp.async copies (30% of the walk's issue slots at 16,384 keys, session 39's ncu). Rows land
// as they are (no chunk flip: the reads take GroupLinear). Rows past the n live ones are not
// written: the group block never reads their values, and their scores are not kept. The
// rotating walk's own key is copied as the cache holds it and patched after the tile's wait.
struct GroupLinear {
    int chunks;
    __device__ __forceinline__ int operator()(bool, int r, int c) const {
        return (r * chunks + c) * 16;
    }
};

// One thread's requests for keys base .. base + n - 1 (n >= 1) into sk and sv, counted on bar.
static __device__ __forceinline__ void bulk_load_tile(char *sk, char *sv, const KvHead<KvF16> &kh,
                                                      const KvHead<KvF16> &vh, int base, int n,
                                                      uint64_t *bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    // (A key patched into this stage was fenced by its writers before the barrier ahead.)
    mbar_expect_tx(bar, (uint32_t)(2 * n * kh.row_bytes));
    const int block = 1 << kh.pages.shift;
    for (int a = base; a < base + n;) {
        const int e = min(base + n, (a / block + 1) * block);
        const size_t at = kh.pages.row(kh.g, a) * kh.row_bytes;
        const uint32_t bytes = (uint32_t)((e - a) * kh.row_bytes);
        const size_t dst = (size_t)(a - base) * kh.row_bytes;
        bulk_copy_to_smem(sk + dst, kh.base + at, bytes, bar);
        bulk_copy_to_smem(sv + dst, vh.base + at, bytes, bar);
        a = e;
    }
#endif
}

// Adds the weighted value rows of keys kk .. kk + 7 of a warp's (key e's row at vrows + e D,
// its weight p in lane KEY_LANES e) to the lane's output elements: the eight rows and weights
// fetched before the FMAs (a latency chain a key otherwise), the keys in order.
template <int D, int KEY_LANES>
static __device__ __forceinline__ void add_eight_value_rows(float p, const uint16_t *vrows,
                                                            int kk, int lane,
                                                            float (&acc)[LaneDims<D>::N]) {
    constexpr int DL = LaneDims<D>::N;
    float vf[8][DL], pk[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) {
        v_row_f16<D>(vrows + (kk + e) * D, lane, vf[e]);
        pk[e] = __shfl_sync(FULL_MASK, p, KEY_LANES * (kk + e));
    }
#pragma unroll
    for (int e = 0; e < 8; ++e) {
#pragma unroll
        for (int j = 0; j < DL; ++j) {
            acc[j] += pk[e] * vf[e][j];
        }
    }
}

// The weighted value rows of a warp's nk keys, in key order: eight at a time
// (add_eight_value_rows), then one at a time. ONE_ROUND: nk is at most 8 (a warp's share of
// the lane-scores walk), so eight keys are a single round.
template <int D, int KEY_LANES, bool ONE_ROUND>
static __device__ __forceinline__ void add_value_rows(float p, const uint16_t *vrows, int nk,
                                                      int lane, float (&acc)[LaneDims<D>::N]) {
    constexpr int DL = LaneDims<D>::N;
    int kk = 0;
    if constexpr (ONE_ROUND) {
        if (nk == 8) {
            add_eight_value_rows<D, KEY_LANES>(p, vrows, 0, lane, acc);
            return;
        }
    } else {
        for (; kk + 8 <= nk; kk += 8) {
            add_eight_value_rows<D, KEY_LANES>(p, vrows, kk, lane, acc);
        }
    }
    for (; kk < nk; ++kk) {
        float vf[DL];
        v_row_f16<D>(vrows + kk * D, lane, vf);
        const float pk = __shfl_sync(FULL_MASK, p, KEY_LANES * kk);
#pragma unroll
        for (int j = 0; j < DL; ++j) {
            acc[j] += pk * vf[j];
        }
    }
}

// The group block's softmax step and V over a warp's 8 keys where one head is the block's
// (attn_group_block's LANE_SCORES): lane L holds key L / 4's unscaled score s (all four lanes
// of a key the same), `live` whether that key is; nk the warp's live keys; vrows their value
// rows. The same steps as the shared-memory path: scaled scores rounded before use (no fused
// subtract), the max and sum over the keys, then the rows (add_value_rows).
template <int D>
static __device__ __forceinline__ void attn_lane_scores_step(float s, float scale, bool live,
                                                             int nk, const uint16_t *vrows,
                                                             int lane, float &m, float &l,
                                                             float (&acc)[LaneDims<D>::N]) {
    constexpr int DL = LaneDims<D>::N;
    const float sc = live ? __fmul_rn(s, scale) : ATTN_NEG_INF;
    float mx = sc;
#pragma unroll
    for (int o = 16; o >= 4; o >>= 1) {
        mx = fmaxf(mx, __shfl_xor_sync(FULL_MASK, mx, o));
    }
    const float m_new = fmaxf(m, mx);
    const float corr = expf(m - m_new); // 0 on the first tile (m = -inf)
    const float p = live ? expf(sc - m_new) : 0.0f;
    float ps = p;
#pragma unroll
    for (int o = 16; o >= 4; o >>= 1) {
        ps += __shfl_xor_sync(FULL_MASK, ps, o);
    }
    l = l * corr + ps;
#pragma unroll
    for (int j = 0; j < DL; ++j) {
        acc[j] *= corr;
    }
    m = m_new;
    add_value_rows<D, 4, true>(p, vrows, nk, lane, acc);
}

// Block (split, KV head g) of one query row: q_row the row's [n_head][D] queries, its keys
// 0..n_keys - 1 in kc / vc through `pages`; part_m / part_l the row's [n_head][n_split]
// partials, part_acc [n_head][n_split][D], done its [n_head] counters (null: no combine
// here), out_row its [n_head][D] output. STAGES: GroupLayout's.
// `rot`: the queries and perhaps the newest key (QueriesInMemory's contract above). BULK: the
// tiles by bulk copies (bulk_load_tile; sm_90).
template <int D, int G, int STAGES = 0, typename Rot = QueriesInMemory<D>, bool BULK = false>
static __device__ __forceinline__ void attn_group_block(
    Rot rot, const uint16_t *__restrict__ kc, const uint16_t *__restrict__ vc, KvPages pages,
    int n_keys, int split, int n_split, int g, float *__restrict__ part_m,
    float *__restrict__ part_l, float *__restrict__ part_acc, int *__restrict__ done,
    float *__restrict__ out_row, float scale, int window, const float *__restrict__ sinks) {
    typedef GroupLayout<D, G, STAGES> L;
    constexpr int DL = LaneDims<D>::N; // output elements a lane holds
    static_assert(ATTN_NWARPS == 4 && ATTN_GROUP_TILE == 32, "thread (key, part) per tile");
    extern __shared__ __align__(16) char smem[];
    float *sq = (float *)(smem + L::Q_OFFSET);
    float *ss = (float *)(smem + L::S_OFFSET); // [G][tile] scaled scores
    const int h0 = g * G;
    const int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
    const GroupSplit range(n_keys, window, split, n_split);
    const int k0 = range.k0, k1 = range.k1, n_tiles = range.tiles(ATTN_GROUP_TILE);
    const KvHead<KvF16> kh(kc, pages, g, D), vh(vc, pages, g, D);
    // Stage s's bulk copies complete on bars[s] (its k-th tile: phase k % 2).
    __shared__ uint64_t bars[BULK ? L::STAGES : 1];
    constexpr int SWIZZLE = BULK ? 0 : L::SWIZZLE;
    if constexpr (BULK) {
        if (threadIdx.x == 0) {
#pragma unroll
            for (int s = 0; s < L::STAGES; ++s) {
                mbar_init(&bars[s], 1);
            }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
            asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
#pragma unroll
            for (int s = 0; s < L::STAGES - 1; ++s) {
                if (s < n_tiles) {
                    const int base = k0 + s * ATTN_GROUP_TILE;
                    char *sk = smem + s * L::STAGE_BYTES;
                    bulk_load_tile(sk, sk + L::TILE_BYTES, kh, vh, base,
                                   min(ATTN_GROUP_TILE, k1 - base), &bars[s]);
                }
            }
        }
    } else {
#pragma unroll
        for (int s = 0; s < L::STAGES - 1; ++s) {
            if (s < n_tiles) {
                const int base = k0 + s * ATTN_GROUP_TILE;
                group_load_tile<D, G, STAGES>(smem, kh, vh, base,
                                              min(ATTN_GROUP_TILE, k1 - base), s, rot.skip());
            }
            cp_async_commit(); // possibly empty: group i stays tile i
        }
    }
    const float *qg = rot.queries(smem + L::BYTES, h0, g, k0, k1);
    if (BULK && rot.skip() < 0) {
        __syncthreads(); // the barriers' initialization, before any thread waits on them
    }
    if (rot.skip() >= 0) {
        __syncthreads(); // rot's queries and key, written by other warps
#pragma unroll
        for (int s = 0; s < L::STAGES - 1; ++s) {
            if (!BULK && s < n_tiles) {
                char *sk = smem + s * L::STAGE_BYTES;
                rot.patch(sk, sk + L::TILE_BYTES, k0 + s * ATTN_GROUP_TILE, GroupOffset<D>());
            }
        }
    }
    // One head a block (G = 1): each thread's quarter of the query stays in registers, and the
    // scores stay in the lanes that made them (below).
    constexpr bool LANE_SCORES = G == 1 && L::WK == ATTN_NWARPS;
    constexpr int Q_ROUNDS = (L::CHUNKS + 3) / 4;
    // Bulk tiles land unflipped, so a quarter warp's two keys (rows a multiple of 128 bytes
    // apart) would read the same banks: odd keys take the rounds in swapped pairs (round j reads
    // chunk set j ^ 1), each round's dot kept apart and the rounds added in the sets' order.
    constexpr bool ROUND_FLIP = BULK && LANE_SCORES && L::CHUNKS % 8 == 0;
    const int flip = ROUND_FLIP ? (threadIdx.x / 4) & 1 : 0;
    float4 qr[LANE_SCORES ? Q_ROUNDS : 1][2];
    if constexpr (LANE_SCORES) {
        const int part = threadIdx.x % 4;
#pragma unroll
        for (int j = 0; j < Q_ROUNDS; ++j) {
            const int c = part + 4 * (j ^ flip);
            if (L::CHUNKS % 4 != 0 && c >= L::CHUNKS) {
                break;
            }
            qr[j][0] = *(const float4 *)&qg[c * 8];
            qr[j][1] = *(const float4 *)&qg[c * 8 + 4];
        }
    } else {
        for (int i = threadIdx.x; i < G * D; i += blockDim.x) {
            sq[i] = qg[i];
        }
    }
    // This warp's heads (warp % G + ATTN_NWARPS u, those below G) and its share of each tile's
    // keys.
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
        if constexpr (BULK) {
            mbar_wait(&bars[it % L::STAGES], (uint32_t)(it / L::STAGES) & 1);
            // The rotating walk's own key, over what the copy found in the cache; ordered
            // before the stage's next bulk copy by the proxy fence.
            const int base = k0 + it * ATTN_GROUP_TILE, key_at = rot.skip();
            if (key_at >= base && key_at < base + ATTN_GROUP_TILE) {
                char *sk = smem + (it % L::STAGES) * L::STAGE_BYTES;
                rot.patch(sk, sk + L::TILE_BYTES, base, GroupLinear{L::CHUNKS});
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
                asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
            }
        } else {
            cp_async_wait<L::STAGES - 2>(); // this thread's copies of tile it
        }
        __syncthreads(); // everyone's; and tile it - 1's stage is free to refill
        {
            const int nt = it + L::STAGES - 1;
            if (nt < n_tiles) {
                const int base = k0 + nt * ATTN_GROUP_TILE;
                char *sk = smem + (nt % L::STAGES) * L::STAGE_BYTES;
                if constexpr (BULK) {
                    // The requests' warp rotates, so that no warp takes every tile's.
                    if ((int)threadIdx.x == WARP_SIZE * (nt % ATTN_NWARPS)) {
                        bulk_load_tile(sk, sk + L::TILE_BYTES, kh, vh, base,
                                       min(ATTN_GROUP_TILE, k1 - base), &bars[nt % L::STAGES]);
                    }
                } else {
                    group_load_tile<D, G, STAGES>(smem, kh, vh, base,
                                                  min(ATTN_GROUP_TILE, k1 - base),
                                                  nt % L::STAGES, rot.skip());
                    rot.patch(sk, sk + L::TILE_BYTES, base, GroupOffset<D>());
                }
            }
            if constexpr (!BULK) {
                cp_async_commit();
            }
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
        float rd[ROUND_FLIP ? Q_ROUNDS : 1]; // ROUND_FLIP: round j's dot
#pragma unroll
        for (int j = 0; j < Q_ROUNDS; ++j) {
            const int c = part + 4 * (j ^ flip);
            if (L::CHUNKS % 4 != 0 && c >= L::CHUNKS) {
                break; // D = 80: the row's last round has two chunks
            }
            const uint4 w =
                *(const uint4 *)(sk + (key * L::CHUNKS + (c ^ ((key & 1) * SWIZZLE))) * 16);
            const uint32_t words[4] = {w.x, w.y, w.z, w.w};
            float kf[8];
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                kf[2 * e] = f16_bits_to_f32((uint16_t)(words[e] & 0xffff));
                kf[2 * e + 1] = f16_bits_to_f32((uint16_t)(words[e] >> 16));
            }
#pragma unroll
            for (int i = 0; i < G; ++i) {
                const float4 qa = LANE_SCORES ? qr[j][0] : *(const float4 *)&sq[i * D + c * 8];
                const float4 qb = LANE_SCORES ? qr[j][1] : *(const float4 *)&sq[i * D + c * 8 + 4];
                const float dot = qa.x * kf[0] + qa.y * kf[1] + qa.z * kf[2] + qa.w * kf[3] +
                                  qb.x * kf[4] + qb.y * kf[5] + qb.z * kf[6] + qb.w * kf[7];
                if constexpr (ROUND_FLIP) {
                    rd[j] = dot;
                } else {
                    s[i] += dot;
                }
            }
        }
        if constexpr (ROUND_FLIP) {
#pragma unroll
            for (int j = 0; j < Q_ROUNDS; ++j) {
                s[0] += flip ? rd[j ^ 1] : rd[j];
            }
        }
#pragma unroll
        for (int i = 0; i < G; ++i) {
            s[i] += __shfl_xor_sync(FULL_MASK, s[i], 1);
            s[i] += __shfl_xor_sync(FULL_MASK, s[i], 2);
            if (!LANE_SCORES && part == 0 && key < n_live) {
                ss[i * ATTN_GROUP_TILE + key] = s[i] * scale;
            }
        }
        // Softmax step and V for this warp's heads over its keys kw0 .. kw0 + KPW.
        const int nk = min(L::KPW, n_live - kw0); // warp-uniform
        if constexpr (LANE_SCORES) {
            // The warp's 8 keys are the ones its lanes scored (key 8 warp + lane / 4, each in
            // four lanes): no trip through shared memory and no barrier. The sum over keys by
            // the butterfly's steps 16, 8, 4 adds them in warp_sum's order over lanes 0..7
            // (its other steps add zeros), so the bits are the shared-memory path's.
            if (nk > 0) {
                attn_lane_scores_step<D>(s[0], scale, lane / 4 < nk, nk,
                                         sv + kw0 * D, lane, m[0], l[0], acc[0]);
            }
            continue;
        }
        __syncthreads();
        if (nk <= 0) {
            continue;
        }
#pragma unroll
        for (int u = 0; u < L::HW; ++u) {
            const int hi = hw0 + ATTN_NWARPS * u;
            if (hi >= G) {
                break; // warp-uniform
            }
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
            add_value_rows<D, 1, false>(p, sv + kw0 * D, nk, lane, acc[u]);
        }
    }
    cp_async_wait<0>();
    __syncthreads(); // the stages are free: the warps' states meet there
    // Warps that share a head merge in warp order (warp hi, hi + G, ..); a lone warp writes.
    float *sm = (float *)smem, *sl = sm + ATTN_NWARPS * L::HW;
    float *sacc = sl + ATTN_NWARPS * L::HW; // [warp][u][D]
#pragma unroll
    for (int u = 0; u < L::HW; ++u) {
        if (hw0 + ATTN_NWARPS * u >= G) {
            break; // a head this warp does not hold
        }
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
            if (hi >= G) {
                break;
            }
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
            const size_t pidx = (size_t)(h0 + hi) * n_split + split;
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
    group_combine_when_last<D, G>(part_m, part_l, part_acc, done, out_row, n_split, h0, sinks,
                                  (float *)smem); // the stages are free again
}
