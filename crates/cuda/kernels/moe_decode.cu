// MoE experts for decode (1..8 tokens), the router's choices read from device memory:
//   h[s]   = silu(gate_e · x[t]) * (up_e · x[t])          for every slot s = t*k + j, e = ids[s]
//   out[t] += Σ_j weights[t*k+j] · (down_e · hq[t*k+j])    (hq: h quantized to Q8_1, quantize.cu)
// (out[t] = the sum where `overwrite`: no residual, no clearing launch before)
// (gpt-oss: each product plus its expert's bias, and swiglu_oai for silu: common.cuh's
// ExpertEpilogue.)
// Gate/up and down are stacked [n_expert * rows][cols] matrices in a ggml block format; expert
// e owns rows e*rows.. . Dots go through mmvq.cuh's walk (quant.cuh's dp4a dot products).
//
// Sharing: with several tokens, a slot's expert may also be chosen by other tokens. The first
// slot that names an expert leads: its warps read the expert's rows once and dot them with every
// member's activations (a mat-mat of up to NTOK columns); the other members' blocks do nothing.
// Leaders and members come from warp ballots over ids, so nothing is sorted and there is no host
// sync. Every output is written by one warp, and the k down results of a token are summed in
// slot order by one thread: deterministic, no atomics.
//
// Exactness: every dot is a warp of 32 threads walking one row, and its bits do not depend on
// how many columns or rows share the walk (mmvq.cuh), so the fused kernels and the per-slot
// path below (FERROLM_MOE_FUSED=0) agree bit for bit. Q4_K, Q6_K and MXFP4 take mmvq.cuh's
// wide walk; the `_narrow` entries (FERROLM_MMVQ_WIDE=0) keep the narrow one.
//
// Launches (crates/cuda/src/ops/moe_decode.rs must agree), block (32, MOE_NWARPS) unless said:
// - moe_gate_up_<type>_n<NTOK>: block (32, W), W <= MOE_NWARPS warps (the plan's), grid
//   (ceil(n_ff / (W * GR)), NTOK * k), GR = MOE_GATE_ROWS(TYPE, NTOK); warp = GR rows of gate
//   and the same of up. A warp's rows and walk do not depend on W, so neither do the bits.
//   With down_l2 (the down weights; null: none), each block also asks L2 for its share of its
//   slot's expert's down rows (down_share_to_l2), down_bytes an expert. At one token, with hq
//   (null: none), the launch also quantizes h for down (quantize_h_in_last_block; hq_done: one
//   u32 a slot and 256-row group, zero between launches).
// - moe_down_<type>_n<NTOK>: grid ceil(n_embd / DR), DR = MOE_DOWN_ROWS(TYPE, NTOK); the block's
//   warps share out the leading experts, each warp DR output rows of its experts, or half of
//   them when there are at most MOE_NWARPS / 2 leaders (moe_down_tasks; at one token with
//   MOE_WALK_ONE_TOKEN, moe_down_one_token deals the same tasks without the search).
// - moe_{gate_up,down}_lean_<type>_n1 (Q4_K, Q5_K, Q6_K): as the n1 entries in MXFP4's lean
//   shape (MOE_GATE_ROWS_AS, MOE_DOWN_ROWS_AS, MOE_MIN_BLOCKS_AS with LEAN).
// Both take `walk`, the MOE_WALK_* bits below.
// - moe_slot_matvec_<type>: grid ceil(rows / MOE_NWARPS); warp = one row of one slot's expert.
// - moe_combine: grid ceil(n_embd / 128), 128 threads.
#include "common.cuh"
#include "quant.cuh"
#include "mmvq.cuh"

#define MOE_NWARPS 8
// Rows a warp walks together. An expert row is short (1-4 KB), so at one or two tokens a warp
// takes several: more independent loads in flight and fewer warps paying the routing set-up.
// MXFP4 at one token takes half as many, in blocks of at most 80 registers (three an SM, not
// two): more warps in flight (gpt-oss-20b tg128 +5% on the H200; Q4_K and Q6_K lost with it,
// docs/perf.md session 20).
// The `lean_` entries (FERROLM_MOE_LEAN: Q4_K, Q5_K and Q6_K at one token) take the same
// shape: each warp's instruction chain half as long, twice the warps (session 36: a one-token
// expert kernel's time is its warps' chains).
// The `tight_` entries (LEAN 2; FERROLM_MOE_TIGHT: Q4_K and Q6_K at one token) take the lean
// shape in four blocks an SM (64 registers), where the lean entries fit three: one wave of
// blocks for a 2,048-row down (512 blocks), and for OLMoE's gate/up. Down's walk keeps two
// steps in flight (its rows are in L1 by then: MOE_WALK_DOWN_EARLY) and deals one token's
// tasks directly (moe_down's ONE); gate/up keeps the lean walk.
#define MOE_LEAN(T, N) ((T) == GGML_TYPE_MXFP4 && (N) == 1)
#define MOE_GATE_ROWS_AS(LEAN, N) ((LEAN) ? 2 : (N) <= 2 ? 4 : 1)
#define MOE_DOWN_ROWS_AS(LEAN, N) ((LEAN) ? 4 : (N) <= 2 ? 8 : 2)
#define MOE_MIN_BLOCKS_AS(LEAN, N) ((LEAN) == 2 ? 4 : (LEAN) ? 3 : (N) <= 2 ? 2 : 1)
#define MOE_GATE_ROWS(T, N) MOE_GATE_ROWS_AS(MOE_LEAN(T, N), N)
#define MOE_DOWN_ROWS(T, N) MOE_DOWN_ROWS_AS(MOE_LEAN(T, N), N)
// Slots (tokens × experts a token) a launch takes, as 32-bit ballot words.
#define MOE_MAX_SLOTS 128
#define MOE_MASK_WORDS (MOE_MAX_SLOTS / WARP_SIZE)
// Steps of a row walk in flight together: with few tokens the unrolled steps keep loads in
// flight; with more, the columns do, and unrolling further only costs registers and compile time.
#define MOE_UNROLL(N) ((N) <= 2 ? 4 : 1)
#define MOE_DOWN_UNROLL_AS(LEAN, N) ((LEAN) == 2 ? 2 : MOE_UNROLL(N))
// Blocks an SM must fit: at one or two tokens, two (<= 128 registers), for more latency hiding
// on these memory-bound kernels; more tokens need their registers for the columns.
#define MOE_MIN_BLOCKS(T, N) MOE_MIN_BLOCKS_AS(MOE_LEAN(T, N), N)
// The bits of the kernels' `walk` argument: the activations through shared memory
// (stage_q8_1; wide walks only), a warp's rows asked of L1 before its walk (rows_to_l1), one
// token's down tasks dealt straight to the warps (moe_down_one_token), one token's gate/up slot
// walked without the members' masks, one token's down rows asked for before the wait, one
// token's rows asked of L2 in bulk.
#define MOE_WALK_STAGE 1
#define MOE_WALK_ROWS_L1 2
#define MOE_WALK_ONE_TOKEN 4
#define MOE_WALK_GATE_UP_ONE 8
// One token's down rows asked for before the wait for the kernel ahead
// (moe_down_rows_then_wait), and one token's expert rows asked of L2 in bulk, a request a
// warp's rows (gate/up: before the activations' stage; down: in place of L1 where early).
#define MOE_WALK_DOWN_EARLY 16
#define MOE_WALK_BULK_L2 32

// Bit q of the mask: slot q (< nslots) names expert e. Every lane gets the same mask.
static __device__ __forceinline__ void slots_of(const int *__restrict__ ids, int nslots, int e,
                                                uint32_t (&mask)[MOE_MASK_WORDS]) {
#pragma unroll
    for (int w = 0; w < MOE_MASK_WORDS; ++w) {
        const int q = WARP_SIZE * w + threadIdx.x;
        mask[w] = __ballot_sync(FULL_MASK, q < nslots && ids[q] == e);
    }
}

// The mask of slot s alone. With one token, no two slots name one expert (the top-k picks
// distinct ones), so a slot leads itself and the search for leaders (a chain of dependent loads
// of ids before any weight load) is skipped. Were an expert named twice, each slot would walk
// it for itself: the same bits, only without the shared read.
static __device__ __forceinline__ void only_slot(int s, uint32_t (&mask)[MOE_MASK_WORDS]) {
#pragma unroll
    for (int w = 0; w < MOE_MASK_WORDS; ++w) {
        mask[w] = w == s / WARP_SIZE ? 1u << (s % WARP_SIZE) : 0u;
    }
}

// Removes the lowest slot from the mask and returns it, or -1 when the mask is empty.
static __device__ __forceinline__ int pop_slot(uint32_t (&mask)[MOE_MASK_WORDS]) {
    int slot = -1;
#pragma unroll
    for (int w = 0; w < MOE_MASK_WORDS; ++w) {
        if (slot < 0 && mask[w] != 0) {
            slot = WARP_SIZE * w + __ffs(mask[w]) - 1;
            mask[w] &= mask[w] - 1;
        }
    }
    return slot;
}

// Up to NTOK member slots taken from the mask (-1 past the last); returns how many.
template <int NTOK>
static __device__ __forceinline__ int take_members(uint32_t (&mask)[MOE_MASK_WORDS],
                                                   int (&member)[NTOK]) {
    int live = 0;
#pragma unroll
    for (int j = 0; j < NTOK; ++j) {
        member[j] = pop_slot(mask);
        live += member[j] >= 0;
    }
    return live;
}

// Σ_j w[j] · d[j * stride] in slot order: the one expression both paths combine with.
static __device__ __forceinline__ float slot_sum(const float *w, const float *d, int stride,
                                                 int k) {
    float s = 0.0f;
    for (int j = 0; j < k; ++j) {
        s += w[j] * d[(size_t)j * stride];
    }
    return s;
}

// One bulk request to L2 (one thread's) for the `n` bytes at `p` of a tensor that ends at `end`:
// its ends rounded out to 16 bytes, as the request needs, but never past `end` rounded down.
// Nothing is read or written, so no bits change (sm_90; nothing before it).
static __device__ __forceinline__ void bytes_to_l2(const void *p, long long n, const void *end) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const unsigned long long a = (unsigned long long)p & ~15ull;
    const unsigned long long b = min(((unsigned long long)p + n + 15) & ~15ull,
                                     (unsigned long long)end & ~15ull);
    if (b > a) {
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(a), "r"((unsigned)(b - a))
                     : "memory");
    }
#endif
}

// Asks L2 for this block's share (blockIdx.x of gridDim.x) of expert e's down weights (`bytes`
// from `down` + e * bytes; both multiples of 16, the host checks, so bytes_to_l2 rounds
// nothing), one thread's bulk request: the down kernel after this one then reads them from L2,
// where they came in while gate and up ran.
static __device__ __forceinline__ void down_share_to_l2(const char *down, long long bytes, int e) {
    if (down == nullptr || threadIdx.x != 0 || threadIdx.y != 0) {
        return;
    }
    const long long share = (bytes / gridDim.x + 15) / 16 * 16, off = share * blockIdx.x;
    if (off < bytes) {
        const char *expert = down + e * bytes;
        bytes_to_l2(expert + off, min(share, bytes - off), expert + bytes);
    }
}

template <int TYPE, int NTOK, bool WIDE, int GR, int UNROLL>
static __device__ __forceinline__ void
moe_gate_up(const void *__restrict__ gate, const void *__restrict__ up,
            const block_q8_1 *__restrict__ x, const int *__restrict__ ids, float *__restrict__ h,
            int n_embd, int n_ff, int n_expert, int k, int walk, ExpertEpilogue ep,
            const char *down_l2, long long down_bytes, int bx, int by) {
    typedef WeightFormat<TYPE> F;
    typedef typename F::block B;
    const int bpc = n_embd / QK8_1;
    // With MOE_WALK_STAGE, the NTOK tokens' activations come through shared memory (mmvq.cuh;
    // wide walks only).
    constexpr bool CAN_STAGE = WIDE && F::wide;
    const bool staged = CAN_STAGE && (walk & MOE_WALK_STAGE);
    const int s = by, r0 = (bx * blockDim.y + threadIdx.y) * GR;
    if (NTOK == 1 && (walk & MOE_WALK_BULK_L2) && r0 < n_ff && threadIdx.x == 0) {
        // The warp's gate and up rows asked of L2 in bulk ahead of the activations' stage and
        // its barrier: every byte of them in flight at once, where the walk asks for a few
        // steps at a time.
        const int e = ids[s];
        if (e >= 0 && e < n_expert) {
            const long long row_bytes = (long long)(n_embd / F::qk) * sizeof(typename F::block);
            const long long first = ((long long)e * n_ff + r0) * row_bytes;
            const long long n = (long long)min(GR, n_ff - r0) * row_bytes;
            const long long total = (long long)n_expert * n_ff * row_bytes;
            bytes_to_l2((const char *)gate + first, n, (const char *)gate + total);
            bytes_to_l2((const char *)up + first, n, (const char *)up + total);
        }
    }
    const Q8Shared xs = stage_q8_1(staged, x, NTOK * bpc);
    if (r0 >= n_ff) {
        return; // whole warps
    }
    const int e = ids[s];
    if (e < 0 || e >= n_expert) {
        if (threadIdx.x < GR && r0 + threadIdx.x < n_ff) {
            h[(size_t)s * n_ff + r0 + threadIdx.x] = 0.0f; // a bad id contributes nothing
        }
        return;
    }
    down_share_to_l2(down_l2, down_bytes, e);
    uint32_t mask[MOE_MASK_WORDS];
    if constexpr (NTOK == 1) {
        only_slot(s, mask); // one token's slots name distinct experts: each leads its own
    } else {
        slots_of(ids, NTOK * k, e, mask);
        uint32_t first[MOE_MASK_WORDS];
#pragma unroll
        for (int w = 0; w < MOE_MASK_WORDS; ++w) {
            first[w] = mask[w];
        }
        if (pop_slot(first) != s) {
            return; // an earlier slot leads this expert
        }
    }
    const int bpr = n_embd / F::qk;
    // rows[i]: gate row r0 + i, rows[GR + i]: the same row of up. A row past n_ff re-reads the
    // last one; never written.
    const B *rows[2 * GR];
#pragma unroll
    for (int i = 0; i < GR; ++i) {
        const size_t row = (size_t)e * n_ff + min(r0 + i, n_ff - 1);
        rows[i] = (const B *)gate + row * bpr;
        rows[GR + i] = (const B *)up + row * bpr;
    }
    if (walk & MOE_WALK_ROWS_L1) {
        rows_to_l1(rows, bpr * (int)sizeof(B), threadIdx.x);
    }
    // At one token with MOE_WALK_GATE_UP_ONE the slot walks for itself straight away
    // (only_slot's mask gives the same one member), without the masks' rounds, which put
    // local-memory round trips ahead of the walk. Otherwise more members than NTOK only if a
    // token named an expert twice: another round.
    const bool direct = NTOK == 1 && (walk & MOE_WALK_GATE_UP_ONE);
    for (int round = 0;; ++round) {
        int member[NTOK];
        int live;
        if (direct) {
            if (round > 0) {
                return;
            }
            member[0] = s;
            live = 1;
        } else {
            live = take_members<NTOK>(mask, member);
            if (live == 0) {
                return;
            }
        }
        float acc[NTOK][2 * GR] = {};
        if constexpr (CAN_STAGE) {
            if (staged) {
                Q8Shared cols[NTOK];
#pragma unroll
                for (int j = 0; j < NTOK; ++j) {
                    const int t = member[j] >= 0 ? member[j] / k : 0;
                    cols[j] = Q8Shared{xs.q + 2 * t * bpc, xs.s + t * bpc};
                }
                mmvq_accumulate_warp<TYPE, NTOK, 2 * GR, UNROLL, WIDE>(rows, cols, live, bpr,
                                                                      threadIdx.x, acc);
            }
        }
        if (!staged) {
            Q8Global cols[NTOK];
#pragma unroll
            for (int j = 0; j < NTOK; ++j) {
                cols[j] = Q8Global{x + (size_t)(member[j] >= 0 ? member[j] / k : 0) * bpc};
            }
            mmvq_accumulate_warp<TYPE, NTOK, 2 * GR, UNROLL, WIDE>(rows, cols, live, bpr,
                                                                  threadIdx.x, acc);
        }
#pragma unroll
        for (int j = 0; j < NTOK; ++j) {
            // Every lane has every row's sums; lane i takes row r0 + i's activation, so the GR
            // activations (a few hundred instructions each with gpt-oss's or SiLU's exact
            // exponentials) run side by side rather than one after another in lane 0.
            float g = 0.0f, u = 0.0f;
#pragma unroll
            for (int i = 0; i < GR; ++i) {
                const float gs = warp_sum(acc[j][i]), us = warp_sum(acc[j][GR + i]);
                if (threadIdx.x == i) {
                    g = gs;
                    u = us;
                }
            }
            const int i = threadIdx.x;
            if (i < GR && j < live && r0 + i < n_ff) {
                h[(size_t)member[j] * n_ff + r0 + i] = ep.act(e, r0 + i, n_ff, g, u);
            }
        }
    }
}

// Output rows c0 + r0.. (TR of them) of expert e's down weights (expert 0's for a bad id, never
// walked; a row past n_embd re-reads the last one, never written), asked of L1 with rows_l1.
template <int TYPE, int TR>
static __device__ __forceinline__ void
down_rows_of(const void *__restrict__ down, int e, bool valid, bool rows_l1, int c0, int r0,
             int n_embd, int bpr, const typename WeightFormat<TYPE>::block *(&rows)[TR]) {
    typedef typename WeightFormat<TYPE>::block B;
#pragma unroll
    for (int i = 0; i < TR; ++i) {
        const size_t row = (size_t)(valid ? e : 0) * n_embd + min(c0 + r0 + i, n_embd - 1);
        rows[i] = (const B *)down + row * bpr;
    }
    if (valid && rows_l1) {
        rows_to_l1(rows, bpr * (int)sizeof(B), threadIdx.x);
    }
}

// The down walk of `rows` with the live member slots' h (from shared memory where staged,
// else hq) into acc[j][i] (member j, row i).
template <int TYPE, int NTOK, int TR, int UNROLL, bool WIDE>
static __device__ __forceinline__ void
down_accumulate(const typename WeightFormat<TYPE>::block *const (&rows)[TR],
                const int (&member)[NTOK], int live, const block_q8_1 *__restrict__ hq,
                Q8Shared hs, bool staged, int bpr, int bpc, float (&acc)[NTOK][TR]) {
    typedef WeightFormat<TYPE> F;
    if constexpr (WIDE && F::wide) {
        if (staged) {
            Q8Shared cols[NTOK];
#pragma unroll
            for (int j = 0; j < NTOK; ++j) {
                const int m = member[j] >= 0 ? member[j] : 0;
                cols[j] = Q8Shared{hs.q + 2 * m * bpc, hs.s + m * bpc};
            }
            mmvq_accumulate_warp<TYPE, NTOK, TR, UNROLL, WIDE>(rows, cols, live, bpr,
                                                              threadIdx.x, acc);
            return;
        }
    }
    Q8Global cols[NTOK];
#pragma unroll
    for (int j = 0; j < NTOK; ++j) {
        cols[j] = Q8Global{hq + (size_t)(member[j] >= 0 ? member[j] : 0) * bpc};
    }
    mmvq_accumulate_warp<TYPE, NTOK, TR, UNROLL, WIDE>(rows, cols, live, bpr, threadIdx.x, acc);
}

// Rows [r0, r0 + TR) of block row c0's down products for the slots of one leading expert e
// (mask: its slots), into d[r0 + i][slot].
template <int TYPE, int NTOK, bool WIDE, int TR, int DR, int UNROLL>
static __device__ __forceinline__ void
moe_down_walk(const void *__restrict__ down, const block_q8_1 *__restrict__ hq, Q8Shared hs,
              bool staged, bool rows_l1, int e, uint32_t (&mask)[MOE_MASK_WORDS], int c0, int r0, int n_embd,
              int n_ff, int n_expert, ExpertEpilogue ep, float (&d)[DR][MOE_MAX_SLOTS]) {
    typedef WeightFormat<TYPE> F;
    const int bpr = n_ff / F::qk, bpc = n_ff / QK8_1;
    const bool valid = e >= 0 && e < n_expert;
    const typename F::block *rows[TR];
    down_rows_of<TYPE, TR>(down, e, valid, rows_l1, c0, r0, n_embd, bpr, rows);
    for (;;) {
        int member[NTOK];
        const int live = take_members<NTOK>(mask, member);
        if (live == 0) {
            return;
        }
        float acc[NTOK][TR] = {};
        if (valid) {
            down_accumulate<TYPE, NTOK, TR, UNROLL, WIDE>(rows, member, live, hq, hs, staged, bpr,
                                                          bpc, acc);
        }
#pragma unroll
        for (int j = 0; j < NTOK; ++j) {
#pragma unroll
            for (int i = 0; i < TR; ++i) {
                const float v = warp_sum(acc[j][i]);
                if (threadIdx.x == 0 && j < live) {
                    // A bad id's row stays 0 (bias too); a row past n_embd is never read.
                    const int c = min(c0 + r0 + i, n_embd - 1);
                    d[r0 + i][member[j]] = valid ? ep.down(e, c, n_embd, v) : v;
                }
            }
        }
    }
}

// The block's warps walk the leading experts in slot order as tasks: task t goes to warp
// t % MOE_NWARPS. A leader is one task of all DR rows, or, when there are few leaders (top-4
// routing of one token leaves half of the warps without one), two tasks of DR / 2 rows each.
// A row's dot is the same walk either way (mmvq.cuh), so the split changes no bits.
template <int TYPE, int NTOK, bool WIDE, int DR, int UNROLL, int PARTS>
static __device__ __forceinline__ void
moe_down_tasks(const void *__restrict__ down, const block_q8_1 *__restrict__ hq, Q8Shared hs,
               bool staged, bool rows_l1, const int *__restrict__ ids, int nslots, int c0, int n_embd,
               int n_ff, int n_expert, ExpertEpilogue ep, float (&d)[DR][MOE_MAX_SLOTS]) {
    constexpr int TR = DR / PARTS;
    uint32_t todo[MOE_MASK_WORDS];
#pragma unroll
    for (int w = 0; w < MOE_MASK_WORDS; ++w) {
        const int q = WARP_SIZE * w + threadIdx.x;
        todo[w] = __ballot_sync(FULL_MASK, q < nslots);
    }
    for (int nth = 0;; ++nth) {
        const int s = pop_slot(todo);
        if (s < 0) {
            return;
        }
        uint32_t mask[MOE_MASK_WORDS];
        if constexpr (NTOK == 1) {
            only_slot(s, mask); // slot s leads itself (only_slot)
        } else {
            slots_of(ids, nslots, ids[s], mask);
        }
#pragma unroll
        for (int w = 0; w < MOE_MASK_WORDS; ++w) {
            todo[w] &= ~mask[w];
        }
        // Only the warps of the leader's tasks read its expert's id.
        bool mine = false;
#pragma unroll
        for (int part = 0; part < PARTS; ++part) {
            mine |= (nth * PARTS + part) % MOE_NWARPS == (int)threadIdx.y;
        }
        if (!mine) {
            continue;
        }
        const int e = ids[s];
#pragma unroll
        for (int part = 0; part < PARTS; ++part) {
            if ((nth * PARTS + part) % MOE_NWARPS == (int)threadIdx.y) {
                uint32_t left[MOE_MASK_WORDS];
#pragma unroll
                for (int w = 0; w < MOE_MASK_WORDS; ++w) {
                    left[w] = mask[w];
                }
                moe_down_walk<TYPE, NTOK, WIDE, TR, DR, UNROLL>(down, hq, hs, staged, rows_l1, e, left, c0,
                                                                part * TR, n_embd, n_ff,
                                                                n_expert, ep, d);
            }
        }
    }
}

// One token's moe_down_tasks: its k slots name distinct experts (the top-k), so each slot leads
// itself, and task t (slot t / PARTS, rows (t % PARTS) * TR..) goes to warp t % MOE_NWARPS as
// there, without the walk over every slot's masks that puts several hundred instructions (and
// local memory) ahead of a warp's first weight load (session 36's ncu). Each row is the same
// walk, so the same bits.
template <int TYPE, bool WIDE, int DR, int UNROLL, int PARTS>
static __device__ __forceinline__ void
moe_down_one_token(const void *__restrict__ down, const block_q8_1 *__restrict__ hq, Q8Shared hs,
                   bool staged, bool rows_l1, const int *__restrict__ ids, int k, int c0,
                   int n_embd, int n_ff, int n_expert, ExpertEpilogue ep,
                   float (&d)[DR][MOE_MAX_SLOTS]) {
    typedef WeightFormat<TYPE> F;
    constexpr int TR = DR / PARTS;
    const int bpr = n_ff / F::qk, bpc = n_ff / QK8_1;
    for (int t = threadIdx.y; t < k * PARTS; t += MOE_NWARPS) {
        const int s = t / PARTS, r0 = t % PARTS * TR;
        const int e = ids[s];
        const bool valid = e >= 0 && e < n_expert;
        const typename F::block *rows[TR];
        down_rows_of<TYPE, TR>(down, e, valid, rows_l1, c0, r0, n_embd, bpr, rows);
        float acc[1][TR] = {};
        if (valid) {
            const int member[1] = {s};
            down_accumulate<TYPE, 1, TR, UNROLL, WIDE>(rows, member, 1, hq, hs, staged, bpr, bpc,
                                                       acc);
        }
        // Lane i writes row r0 + i (every lane has every row's sum).
        float v = 0.0f;
#pragma unroll
        for (int i = 0; i < TR; ++i) {
            const float vs = warp_sum(acc[0][i]);
            if (threadIdx.x == i) {
                v = vs;
            }
        }
        const int i = threadIdx.x;
        if (i < TR) {
            // A bad id's row stays 0 (bias too); a row past n_embd is never read.
            const int c = min(c0 + r0 + i, n_embd - 1);
            d[r0 + i][s] = valid ? ep.down(e, c, n_embd, v) : v;
        }
    }
}

// Distinct experts among the launch's slots.
static __device__ __forceinline__ int moe_leaders(const int *__restrict__ ids, int nslots) {
    uint32_t todo[MOE_MASK_WORDS];
#pragma unroll
    for (int w = 0; w < MOE_MASK_WORDS; ++w) {
        const int q = WARP_SIZE * w + threadIdx.x;
        todo[w] = __ballot_sync(FULL_MASK, q < nslots);
    }
    int leaders = 0;
    for (int s; (s = pop_slot(todo)) >= 0; ++leaders) {
        uint32_t mask[MOE_MASK_WORDS];
        slots_of(ids, nslots, ids[s], mask);
#pragma unroll
        for (int w = 0; w < MOE_MASK_WORDS; ++w) {
            todo[w] &= ~mask[w];
        }
    }
    return leaders;
}

// One token's down rows asked for before the wait for the kernel ahead, with
// MOE_WALK_DOWN_EARLY (and MOE_WALK_ONE_TOKEN), then the wait. ids is the router's, written at
// least two launches back (gate/up runs between), and the kernel ahead lets this one start
// only once the kernel before it has finished: ids is final here, and the weights are the
// model's, which no kernel writes. Each warp takes its tasks as moe_down_one_token deals them
// and asks L1 for each task's rows (with MOE_WALK_BULK_L2, L2 in one bulk request), so the walk
// after the wait finds them near. Nothing is written, so no bits change.
template <int TYPE, int NTOK, int DR>
static __device__ __forceinline__ void
moe_down_rows_early(const void *__restrict__ down, const int *__restrict__ ids, int n_embd,
                    int n_ff, int n_expert, int k, int walk, int bx) {
    constexpr int EARLY = MOE_WALK_ONE_TOKEN | MOE_WALK_DOWN_EARLY;
    if (NTOK == 1 && (walk & EARLY) == EARLY) {
        typedef WeightFormat<TYPE> F;
        const int parts = DR % 2 == 0 && 2 * k <= MOE_NWARPS ? 2 : 1, tr = DR / parts;
        const long long row_bytes = (long long)(n_ff / F::qk) * sizeof(typename F::block);
        const char *end = (const char *)down + (long long)n_expert * n_embd * row_bytes;
        for (int t = threadIdx.y; t < k * parts; t += MOE_NWARPS) {
            const int e = ids[t / parts], r0 = bx * DR + t % parts * tr;
            if (e < 0 || e >= n_expert || r0 >= n_embd) {
                continue;
            }
            const char *p = (const char *)down + ((long long)e * n_embd + r0) * row_bytes;
            const int n = (int)(min(tr, n_embd - r0) * row_bytes);
            if (walk & MOE_WALK_BULK_L2) {
                if (threadIdx.x == 0) {
                    bytes_to_l2(p, n, end);
                }
            } else {
                bytes_to_l1(p, n, threadIdx.x);
            }
        }
    }
}

template <int TYPE, int NTOK, int DR>
static __device__ __forceinline__ void
moe_down_rows_then_wait(const void *__restrict__ down, const int *__restrict__ ids, int n_embd,
                        int n_ff, int n_expert, int k, int walk) {
    moe_down_rows_early<TYPE, NTOK, DR>(down, ids, n_embd, n_ff, n_expert, k, walk, blockIdx.x);
    dependent_launch_entry();
}

// ONE: the tight entry, which deals one token's tasks directly whatever `walk` says (the
// leaders' search compiled out, and its registers with it).
template <int TYPE, int NTOK, bool WIDE, int DR, int UNROLL, bool ONE = false>
static __device__ __forceinline__ void
moe_down(const void *__restrict__ down, const block_q8_1 *__restrict__ hq,
         const int *__restrict__ ids, const float *__restrict__ weights, float *__restrict__ out,
         int n_embd, int n_ff, int n_expert, int k, int walk, ExpertEpilogue ep, int overwrite,
         int bx) {
    typedef WeightFormat<TYPE> F;
    const int nslots = NTOK * k, c0 = bx * DR;
    const int bpc = n_ff / QK8_1;
    // With MOE_WALK_STAGE, every slot's activations come through shared memory (mmvq.cuh; wide
    // walks only).
    constexpr bool CAN_STAGE = WIDE && F::wide;
    const bool staged = CAN_STAGE && (walk & MOE_WALK_STAGE);
    const bool rows_l1 = walk & MOE_WALK_ROWS_L1;
    const bool one_token = ONE || (walk & MOE_WALK_ONE_TOKEN);
    const Q8Shared hs = stage_q8_1(staged, hq, nslots * bpc);
    // d[i][s]: row c0 + i of slot s's down product.
    __shared__ float d[DR][MOE_MAX_SLOTS];
    const int leaders = NTOK == 1 ? nslots : moe_leaders(ids, nslots); // see only_slot
    if (NTOK == 1 && one_token) {
        if (DR % 2 == 0 && 2 * leaders <= MOE_NWARPS) {
            moe_down_one_token<TYPE, WIDE, DR, UNROLL, (DR % 2 == 0 ? 2 : 1)>(
                down, hq, hs, staged, rows_l1, ids, k, c0, n_embd, n_ff, n_expert, ep, d);
        } else {
            moe_down_one_token<TYPE, WIDE, DR, UNROLL, 1>(down, hq, hs, staged, rows_l1, ids, k,
                                                          c0, n_embd, n_ff, n_expert, ep, d);
        }
    } else if (DR % 2 == 0 && 2 * leaders <= MOE_NWARPS) {
        moe_down_tasks<TYPE, NTOK, WIDE, DR, UNROLL, (DR % 2 == 0 ? 2 : 1)>(
            down, hq, hs, staged, rows_l1, ids, nslots, c0, n_embd, n_ff, n_expert, ep, d);
    } else {
        moe_down_tasks<TYPE, NTOK, WIDE, DR, UNROLL, 1>(down, hq, hs, staged, rows_l1, ids, nslots, c0,
                                                        n_embd, n_ff, n_expert, ep, d);
    }
    __syncthreads();
    const int tid = threadIdx.y * WARP_SIZE + threadIdx.x;
    if (tid < NTOK * DR) {
        const int t = tid / DR, i = tid % DR, c = c0 + i;
        if (c < n_embd) {
            // Written over out: the bits of adding to zeros (0 + -0 is +0).
            float *o = out + (size_t)t * n_embd + c;
            const float sum = slot_sum(weights + t * k, &d[i][t * k], 1, k);
            *o = overwrite ? __fadd_rn(0.0f, sum) : *o + sum;
        }
    }
}

// The per-slot path's mat-vec: dst[slot][r] = W_e[r] · x[x_row], e = ids[slot].
template <int TYPE, bool WIDE>
static __device__ __forceinline__ void
moe_slot_matvec(const void *__restrict__ w, const block_q8_1 *__restrict__ x,
                const int *__restrict__ ids, float *__restrict__ dst, int slot, int x_row,
                int rows, int cols, int n_expert, const float *__restrict__ bias) {
    typedef WeightFormat<TYPE> F;
    typedef typename F::block B;
    const int r = blockIdx.x * MOE_NWARPS + threadIdx.y;
    if (r >= rows) {
        return;
    }
    const int e = ids[slot];
    const bool valid = e >= 0 && e < n_expert;
    const int bpr = cols / F::qk;
    const B *const row[1] = {(const B *)w + ((size_t)(valid ? e : 0) * rows + r) * bpr};
    const Q8Global col[1] = {Q8Global{x + (size_t)x_row * (cols / QK8_1)}};
    float acc[1][1] = {};
    if (valid) {
        mmvq_accumulate_warp<TYPE, 1, 1, MOE_UNROLL(1), WIDE>(row, col, 1, bpr, threadIdx.x, acc);
    }
    const float v = warp_sum(acc[0][0]);
    if (threadIdx.x == 0) {
        // gpt-oss's expert bias (null for the other models): the fused kernels' epilogue.
        dst[(size_t)slot * rows + r] =
            valid && bias != nullptr ? __fadd_rn(v, bias[(size_t)e * rows + r]) : v;
    }
}

// The per-slot path's combine: out[t][c] += Σ_j weights[t][j] · d[t*k + j][c].
extern "C" __global__ void moe_combine(const float *__restrict__ d,
                                       const float *__restrict__ weights, float *__restrict__ out,
                                       int n, int n_embd, int k) {
    dependent_launch_entry();
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= n_embd) {
        return;
    }
    for (int t = 0; t < n; ++t) {
        out[(size_t)t * n_embd + c] +=
            slot_sum(weights + t * k, d + (size_t)t * k * n_embd + c, n_embd, k);
    }
}

// One token's h quantized by the gate/up launch itself (hq: null for none): every block of the
// launch calls it after its rows (whole warps; every block, the bad-id ones too). A block's rows
// lie in one group of QK_K rows of its slot (the host checks that blockDim.y * GR divides QK_K
// and n_ff is whole groups); the block counts itself in done[slot][group], and the group's last
// block (which resets the count for the next launch) quantizes the group's 256 values, read back
// from L2, as quantize.cu's kernel does (Q8_K with q8k, else 8 blocks of Q8_1): the same bits,
// one launch fewer on the token's chain. Not inlined: its registers stay out of the walk's
// allocation (inlined, ptxas spilled more of the walk whether the switch was on or off).
template <int GR>
static __device__ __noinline__ void quantize_h_in_last_block(const float *h,
                                                                block_q8_1 *__restrict__ hq,
                                                                int q8k, unsigned *done,
                                                                int n_ff, int bx, int by) {
    if (hq == nullptr) {
        return;
    }
    __shared__ bool last;
    __shared__ float group[QK_K];
    const int s = by, rows = blockDim.y * GR, g = bx * rows / QK_K;
    __syncthreads(); // the block's rows of h written
    if (threadIdx.x == 0 && threadIdx.y == 0) {
        last = block_fence_count(done + s * (n_ff / QK_K) + g, QK_K / rows);
    }
    __syncthreads();
    if (!last || threadIdx.y != 0) {
        return;
    }
    const size_t first = (size_t)s * n_ff + (size_t)g * QK_K;
    const int lane = threadIdx.x;
    if (q8k) {
        // From L2 (other blocks wrote them) into shared memory, where quantize_q8_k_warp reads.
#pragma unroll
        for (int j = 0; j < QK_K / WARP_SIZE; ++j) {
            group[j * WARP_SIZE + lane] = __ldcg(h + first + j * WARP_SIZE + lane);
        }
        __syncwarp();
        quantize_q8_k_warp(group, hq + first / QK8_1);
    } else {
#pragma unroll
        for (int b = 0; b < QK_K / QK8_1; ++b) {
            quantize_q8_1_warp(__ldcg(h + first + b * QK8_1 + lane), hq + first / QK8_1 + b);
        }
    }
    if (lane == 0) {
        done[s * (n_ff / QK_K) + g] = 0;
    }
}

// One token count's pair of entries, `moe_{gate_up,down}_<NAME>_n<N>`, in the shape LEAN picks.
#define MOE_ENTRIES_AS(NAME, TYPE, N, WIDE, LEAN)                                                   \
    extern "C" __global__ void __launch_bounds__(MOE_NWARPS *WARP_SIZE, MOE_MIN_BLOCKS_AS(LEAN, N)) \
        moe_gate_up_##NAME##_n##N(const void *__restrict__ gate, const void *__restrict__ up,       \
                                  const block_q8_1 *__restrict__ x, const int *__restrict__ ids,    \
                                  float *__restrict__ h, int n_embd, int n_ff, int n_expert,        \
                                  int k, int walk, const float *__restrict__ gate_bias,             \
                                  const float *__restrict__ up_bias, float alpha, float limit,      \
                                  const char *down_l2, long long down_bytes,                        \
                                  block_q8_1 *__restrict__ hq, int hq_k, unsigned *hq_done) {       \
        dependent_launch_entry();                                                                   \
        const ExpertEpilogue ep{gate_bias, up_bias, nullptr, alpha, limit};                         \
        moe_gate_up<TYPE, N, WIDE, MOE_GATE_ROWS_AS(LEAN, N), MOE_UNROLL(N)>(                       \
            gate, up, x, ids, h, n_embd, n_ff, n_expert, k, walk, ep, down_l2, down_bytes,          \
            blockIdx.x, blockIdx.y);                                                                \
        if (N == 1) {                                                                               \
            quantize_h_in_last_block<MOE_GATE_ROWS_AS(LEAN, N)>(h, hq, hq_k, hq_done, n_ff,         \
                                                                blockIdx.x, blockIdx.y);            \
        }                                                                                           \
    }                                                                                               \
    extern "C" __global__ void __launch_bounds__(MOE_NWARPS *WARP_SIZE, MOE_MIN_BLOCKS_AS(LEAN, N)) \
        moe_down_##NAME##_n##N(const void *__restrict__ down, const block_q8_1 *__restrict__ hq,    \
                               const int *__restrict__ ids, const float *__restrict__ weights,      \
                               float *__restrict__ out, int n_embd, int n_ff, int n_expert,         \
                               int k, int walk, const float *__restrict__ down_bias,                \
                               int overwrite) {                                                     \
        moe_down_rows_then_wait<TYPE, N, MOE_DOWN_ROWS_AS(LEAN, N)>(down, ids, n_embd, n_ff,       \
                                                                   n_expert, k, walk);             \
        const ExpertEpilogue ep{nullptr, nullptr, down_bias, 0.0f, 0.0f};                          \
        moe_down<TYPE, N, WIDE, MOE_DOWN_ROWS_AS(LEAN, N), MOE_DOWN_UNROLL_AS(LEAN, N),            \
                 (LEAN) == 2>(                                                                     \
            down, hq, ids, weights, out, n_embd, n_ff, n_expert, k, walk, ep, overwrite,            \
            blockIdx.x);                                                                            \
    }
#define MOE_ENTRIES(NAME, TYPE, N, WIDE) MOE_ENTRIES_AS(NAME, TYPE, N, WIDE, MOE_LEAN(TYPE, N))

#define MOE_FORMAT(NAME, TYPE, WIDE)                                                                \
    MOE_ENTRIES(NAME, TYPE, 1, WIDE)                                                                \
    MOE_ENTRIES(NAME, TYPE, 2, WIDE)                                                                \
    MOE_ENTRIES(NAME, TYPE, 3, WIDE)                                                                \
    MOE_ENTRIES(NAME, TYPE, 4, WIDE)                                                                \
    MOE_ENTRIES(NAME, TYPE, 5, WIDE)                                                                \
    MOE_ENTRIES(NAME, TYPE, 6, WIDE)                                                                \
    MOE_ENTRIES(NAME, TYPE, 7, WIDE)                                                                \
    MOE_ENTRIES(NAME, TYPE, 8, WIDE)                                                                \
    extern "C" __global__ void __launch_bounds__(MOE_NWARPS *WARP_SIZE)                             \
        moe_slot_matvec_##NAME(const void *__restrict__ w, const block_q8_1 *__restrict__ x,        \
                               const int *__restrict__ ids, float *__restrict__ dst, int slot,      \
                               int x_row, int rows, int cols, int n_expert,                         \
                               const float *__restrict__ bias) {                                    \
        dependent_launch_entry();                                                                   \
        moe_slot_matvec<TYPE, WIDE>(w, x, ids, dst, slot, x_row, rows, cols, n_expert, bias);       \
    }

MOE_FORMAT(q4_0, GGML_TYPE_Q4_0, true)
MOE_FORMAT(q4_1, GGML_TYPE_Q4_1, true)
MOE_FORMAT(q5_0, GGML_TYPE_Q5_0, true)
MOE_FORMAT(q5_1, GGML_TYPE_Q5_1, true)
// Q8_0's experts keep the narrow walk (its wide walk, 1 lane a block, is measured on dense rows
// only: mmvq.cu).
MOE_FORMAT(q8_0, GGML_TYPE_Q8_0, false)
MOE_FORMAT(q4_k, GGML_TYPE_Q4_K, true)
MOE_FORMAT(q5_k, GGML_TYPE_Q5_K, true)
MOE_FORMAT(q6_k, GGML_TYPE_Q6_K, true)
MOE_FORMAT(mxfp4, GGML_TYPE_MXFP4, true)
// FERROLM_MOE_LEAN: the K-quants' one-token entries in MXFP4's lean shape.
MOE_ENTRIES_AS(lean_q4_k, GGML_TYPE_Q4_K, 1, true, true)
MOE_ENTRIES_AS(lean_q5_k, GGML_TYPE_Q5_K, 1, true, true)
MOE_ENTRIES_AS(lean_q6_k, GGML_TYPE_Q6_K, 1, true, true)
MOE_ENTRIES_AS(tight_q4_k, GGML_TYPE_Q4_K, 1, true, 2)
MOE_ENTRIES_AS(tight_q6_k, GGML_TYPE_Q6_K, 1, true, 2)
// FERROLM_MMVQ_WIDE=0: the narrow walk for the formats that have a wide one.
MOE_FORMAT(narrow_q4_k, GGML_TYPE_Q4_K, false)
MOE_FORMAT(narrow_q6_k, GGML_TYPE_Q6_K, false)
MOE_FORMAT(narrow_mxfp4, GGML_TYPE_MXFP4, false)

