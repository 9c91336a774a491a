// RMS norm and rotary embeddings, matching crates/cpu/src/{norm,rope}.rs operation for
// operation: the same f64 sum of squares (only its order differs), the same f32 roundings, and
// RoPE angles built by the same repeated f32 products. Products that the CPU rounds separately
// are written with __fmul_rn/__fadd_rn so that NVRTC does not fuse them into FMAs, and the FMAs
// the CPU does fuse (RoPE's rotation) with __fmaf_rn.
#include "common.cuh"
#include "norm.cuh"
#include "quant.cuh"
#include "rope.cuh"

// out[g] = x[g] / sqrt(mean(x[g]^2) + eps) * w for the n-element group g at x + g * n (a row, or
// one head for per-head norms). out may be x (in place): each element is read and then written
// by the same thread.
static __device__ __forceinline__ void rms_norm_group(const float *x, const float *__restrict__ w,
                                                      float *out, int n, float eps, int g) {
    __shared__ double scratch[32];
    const size_t base = (size_t)g * n;
    double sum = 0.0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const double v = x[base + i];
        sum += v * v; // exact square; a fused add changes nothing
    }
    sum = block_sum(sum, scratch);
    const float mean = (float)(sum / (double)n);
    const float scale = 1.0f / sqrtf(mean + eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        out[base + i] = __fmul_rn(__fmul_rn(x[base + i], scale), w[i]);
    }
}

// blockIdx.x is the group.
extern "C" __global__ void rms_norm_f32(const float *x, const float *__restrict__ w, float *out,
                                        int n, float eps) {
    dependent_launch_entry();
    rms_norm_group(x, w, out, n, eps, blockIdx.x);
}

// One normed element o at row offset `at` of add_rms_norm_q8_1_f32's outputs: out, its f16 copy
// where asked, and (Q8_1) its warp's activation block; a warp's 32 consecutive elements are one
// Q8_1 block (blockDim.x is a multiple of 32).
static __device__ __forceinline__ void store_normed(float o, size_t at, float *out,
                                                    uint16_t *__restrict__ out16,
                                                    block_q8_1 *__restrict__ outq, int q8k) {
    out[at] = o;
    if (out16 != nullptr) {
        out16[at] = f32_to_f16_bits(o);
    }
    if (!q8k) {
        quantize_q8_1_warp(o, outq + at / QK8_1);
    }
}

// The Q8_K pass over a normed row `src` of n values into its blocks `outq` (after a barrier:
// the 256-value groups span warps).
static __device__ __forceinline__ void quantize_row_q8_k(const float *src,
                                                         block_q8_1 *__restrict__ outq, int n) {
    __syncthreads();
    const int warp = threadIdx.x / WARP_SIZE, nwarps = blockDim.x / WARP_SIZE;
    for (int g = warp; g < n / QK_K; g += nwarps) {
        quantize_q8_k_warp(src + (size_t)g * QK_K, outq + g * 8);
    }
}

// Most elements of a row add_rms_norm_exact stages in shared memory for the Q8_K pass.
#define NORM_STAGE_MAX 4096

// add_rms_norm_q8_1_f32 where the row is exactly R elements a thread (n == R * blockDim.x: a
// decode row of 2,048 or 4,096 over norm_threads' 512 or 1,024): its loops without the guarded
// iterations that NORM_REGS leaves past R, and the Q8_K pass reading the normed row from shared
// memory instead of back from L2 after the barrier. This launch is one block at one token, so
// its warps' instruction chains and round trips are the step's (session 36). The same
// operations on the same values: the same bits. `row`: NORM_STAGE_MAX floats of shared memory.
template <int R>
static __device__ __forceinline__ void
add_rms_norm_exact(float *x, const float *__restrict__ add, const NormWeights &wr, float *out,
                   block_q8_1 *__restrict__ outq, int n, float eps, int q8k,
                   uint16_t *__restrict__ out16, double *scratch, float *row) {
    const size_t base = (size_t)blockIdx.x * n;
    const bool staged = q8k && n <= NORM_STAGE_MAX;
    float xr[NORM_REGS];
    const float scale = add_norm_scale_exact<R>(x, add, base, n, eps, true, xr, scratch);
#pragma unroll
    for (int k = 0; k < R; ++k) {
        const int i = threadIdx.x + k * blockDim.x;
        const float o = __fmul_rn(__fmul_rn(xr[k], scale), wr.v[k]);
        store_normed(o, base + i, out, out16, outq, q8k);
        if (staged) {
            row[i] = o;
        }
    }
    if (q8k) {
        quantize_row_q8_k(staged ? row : out + base, outq + base / QK8_1, n);
    }
}

// The fusion of add_f32, rms_norm_f32 and quantize_q8_1 (or quantize_q8_k when q8k), bit for
// bit: when `add` is not null, x += add first (written back); then out = rms_norm(x) * w as
// rms_norm_f32, and outq = the activation blocks of out. Launch as rms_norm_f32 (same block
// size: the sum's order depends on it); n a multiple of 32 (of 256 with q8k). A decode step's
// row is one block, so its latency is the kernel's: the weights come before the wait and x
// stays in registers between the passes. With `out16` (else null), out rounded to f16 there
// too, as gemm_wgmma.cu's round_f16 would round it for the f16 products after a batched norm.
extern "C" __global__ void add_rms_norm_q8_1_f32(float *x, const float *__restrict__ add,
                                                 const float *__restrict__ w, float *out,
                                                 block_q8_1 *__restrict__ outq, int n, float eps,
                                                 int q8k, uint16_t *__restrict__ out16) {
    const NormWeights wr = norm_weights_then_wait(w, n);
    __shared__ double scratch[32];
    const size_t base = (size_t)blockIdx.x * n;
    const int tail = threadIdx.x + NORM_REGS * blockDim.x; // first element not in registers
    float xr[NORM_REGS];
    const float scale = add_norm_scale(x, add, base, n, eps, true, xr, scratch);
#pragma unroll
    for (int k = 0; k < NORM_REGS; ++k) {
        const int i = threadIdx.x + k * blockDim.x;
        if (i < n) {
            store_normed(__fmul_rn(__fmul_rn(xr[k], scale), wr.v[k]), base + i, out, out16, outq,
                         q8k);
        }
    }
    for (int i = tail; i < n; i += blockDim.x) {
        store_normed(__fmul_rn(__fmul_rn(x[base + i], scale), w[i]), base + i, out, out16, outq,
                     q8k);
    }
    if (q8k) {
        quantize_row_q8_k(out + base, outq + base / QK8_1, n);
    }
}

// add_rms_norm_q8_1_f32 on rows of exactly 2, 4 or 8 elements a thread (the plan's
// FERROLM_NORM_EXACT; the host checks n == R * blockDim.x): the same arguments, the same bits.
// Its own entry, so that the general kernel keeps its small shared memory.
extern "C" __global__ void add_rms_norm_exact_q8_1_f32(float *x, const float *__restrict__ add,
                                                       const float *__restrict__ w, float *out,
                                                       block_q8_1 *__restrict__ outq, int n,
                                                       float eps, int q8k,
                                                       uint16_t *__restrict__ out16) {
    const NormWeights wr = norm_weights_then_wait(w, n);
    __shared__ double scratch[32];
    __shared__ float row[NORM_STAGE_MAX];
    switch (n / (int)blockDim.x) {
    case 2:
        add_rms_norm_exact<2>(x, add, wr, out, outq, n, eps, q8k, out16, scratch, row);
        break;
    case 4:
        add_rms_norm_exact<4>(x, add, wr, out, outq, n, eps, q8k, out16, scratch, row);
        break;
    default: // 8
        add_rms_norm_exact<8>(x, add, wr, out, outq, n, eps, q8k, out16, scratch, row);
        break;
    }
}

// table[t * half + i] = rope_cos_sin(pos[t], i, ...) for every token and pair of a pass: made
// once a pass, then read by every layer's rotation instead of each head rebuilding its angle
// chain and double cos/sin. One thread an entry.
extern "C" __global__ void rope_table_f32(float2 *__restrict__ table,
                                          const uint32_t *__restrict__ pos, int n_tokens, int half,
                                          float theta_scale, const float *__restrict__ ff,
                                          RopeScale rs) {
    dependent_launch_entry();
    const int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < n_tokens * half) {
        table[idx] = rope_cos_sin(pos[idx / half], idx % half, theta_scale, ff, rs);
    }
}

// x: [n_tokens][width], width = heads * head_dim, rotated in place; token t at position pos[t]
// (device memory, so a captured graph can replay with new positions). One thread per pair.
// cos and sin from `table` (rope_table_f32 of the same pass and arguments) or, when it is null,
// computed here: the same bits either way.
template <bool NEOX>
static __device__ __forceinline__ void rope(float *x, const uint32_t *__restrict__ pos,
                                            int n_tokens, int width, int head_dim,
                                            float theta_scale, const float *__restrict__ ff,
                                            RopeScale rs, const float2 *__restrict__ table,
                                            int idx) {
    const int half = head_dim / 2;
    const int pairs_per_row = width / 2;
    if (idx >= n_tokens * pairs_per_row) {
        return;
    }
    const int t = idx / pairs_per_row, p = idx % pairs_per_row;
    const int head = p / half, i = p % half;
    const float2 cs = table ? table[t * half + i] : rope_cos_sin(pos[t], i, theta_scale, ff, rs);
    const float c = cs.x, s = cs.y;
    const int a = NEOX ? i : 2 * i;
    const int b = NEOX ? i + half : 2 * i + 1;
    float *h = x + (size_t)t * width + (size_t)head * head_dim;
    const float x0 = h[a], x1 = h[b];
    // One product and one FMA each, as the CPU (and ggml's compiled loop) rounds them.
    h[a] = __fmaf_rn(x0, c, -__fmul_rn(x1, s));
    h[b] = __fmaf_rn(x0, s, __fmul_rn(x1, c));
}

extern "C" __global__ void rope_norm_f32(float *x, const uint32_t *__restrict__ pos, int n_tokens,
                                         int width, int head_dim, float theta_scale,
                                         const float *__restrict__ ff, RopeScale rs,
                                         const float2 *__restrict__ table) {
    dependent_launch_entry();
    rope<false>(x, pos, n_tokens, width, head_dim, theta_scale, ff, rs, table,
                blockIdx.x * blockDim.x + threadIdx.x);
}

extern "C" __global__ void rope_neox_f32(float *x, const uint32_t *__restrict__ pos, int n_tokens,
                                         int width, int head_dim, float theta_scale,
                                         const float *__restrict__ ff, RopeScale rs,
                                         const float2 *__restrict__ table) {
    dependent_launch_entry();
    rope<true>(x, pos, n_tokens, width, head_dim, theta_scale, ff, rs, table,
               blockIdx.x * blockDim.x + threadIdx.x);
}

// q and k rotated in one launch: the first n_tokens * width_q / 2 threads take q's pairs, the
// rest k's; each pair exactly as rope_*_f32 rotates it.
template <bool NEOX>
static __device__ __forceinline__ void rope_qk(float *q, float *k, const uint32_t *pos,
                                               int n_tokens, int width_q, int width_k,
                                               int head_dim, float theta_scale,
                                               const float *ff, RopeScale rs,
                                               const float2 *table) {
    const int idx = blockIdx.x * blockDim.x + threadIdx.x;
    const int q_pairs = n_tokens * width_q / 2;
    if (idx < q_pairs) {
        rope<NEOX>(q, pos, n_tokens, width_q, head_dim, theta_scale, ff, rs, table, idx);
    } else {
        rope<NEOX>(k, pos, n_tokens, width_k, head_dim, theta_scale, ff, rs, table, idx - q_pairs);
    }
}

extern "C" __global__ void rope_qk_norm_f32(float *q, float *k, const uint32_t *__restrict__ pos,
                                            int n_tokens, int width_q, int width_k, int head_dim,
                                            float theta_scale, const float *__restrict__ ff,
                                            RopeScale rs, const float2 *__restrict__ table) {
    dependent_launch_entry();
    rope_qk<false>(q, k, pos, n_tokens, width_q, width_k, head_dim, theta_scale, ff, rs, table);
}

extern "C" __global__ void rope_qk_neox_f32(float *q, float *k, const uint32_t *__restrict__ pos,
                                            int n_tokens, int width_q, int width_k, int head_dim,
                                            float theta_scale, const float *__restrict__ ff,
                                            RopeScale rs, const float2 *__restrict__ table) {
    dependent_launch_entry();
    rope_qk<true>(q, k, pos, n_tokens, width_q, width_k, head_dim, theta_scale, ff, rs, table);
}

// The q/k norms and RoPE of one pass in one launch, bit for bit as rms_norm_f32 in place on q,
// then on k (n-element groups, weights wq and wk), then rope_qk_*_f32: block b < gq takes q's
// group b, the rest k's; it normalizes its group, syncs, and rotates the heads inside it (n is a
// multiple of head_dim and divides both widths, so a group is whole heads of one row). Launch
// as rms_norm_f32 (the same block size for this n: the sum's order depends on it), grid gq + gk.
template <bool NEOX>
static __device__ __forceinline__ void
qk_norm_rope(float *q, const float *__restrict__ wq, float *k, const float *__restrict__ wk,
             const uint32_t *__restrict__ pos, int n_tokens, int width_q, int width_k, int n,
             int head_dim, float theta_scale, const float *ff, RopeScale rs,
             const float2 *table, float eps) {
    const int gq = n_tokens * width_q / n;
    const bool is_q = (int)blockIdx.x < gq;
    const int g = is_q ? blockIdx.x : blockIdx.x - gq;
    float *x = is_q ? q : k;
    const int width = is_q ? width_q : width_k;
    rms_norm_group(x, is_q ? wq : wk, x, n, eps, g);
    __syncthreads(); // the rotation pairs elements that other threads normalized
    const int first_pair = g * (n / 2); // rope's pair index: row-major, width / 2 a row
    for (int p = threadIdx.x; p < n / 2; p += blockDim.x) {
        rope<NEOX>(x, pos, n_tokens, width, head_dim, theta_scale, ff, rs, table,
                   first_pair + p);
    }
}

extern "C" __global__ void qk_norm_rope_norm_f32(float *q, const float *__restrict__ wq, float *k,
                                                 const float *__restrict__ wk,
                                                 const uint32_t *__restrict__ pos, int n_tokens,
                                                 int width_q, int width_k, int n, int head_dim,
                                                 float theta_scale, const float *__restrict__ ff,
                                                 RopeScale rs, const float2 *__restrict__ table,
                                                 float eps) {
    dependent_launch_entry();
    qk_norm_rope<false>(q, wq, k, wk, pos, n_tokens, width_q, width_k, n, head_dim, theta_scale, ff,
                        rs, table, eps);
}

extern "C" __global__ void qk_norm_rope_neox_f32(float *q, const float *__restrict__ wq, float *k,
                                                 const float *__restrict__ wk,
                                                 const uint32_t *__restrict__ pos, int n_tokens,
                                                 int width_q, int width_k, int n, int head_dim,
                                                 float theta_scale, const float *__restrict__ ff,
                                                 RopeScale rs, const float2 *__restrict__ table,
                                                 float eps) {
    dependent_launch_entry();
    qk_norm_rope<true>(q, wq, k, wk, pos, n_tokens, width_q, width_k, n, head_dim, theta_scale, ff,
                       rs, table, eps);
}

// qk_norm_rope_neox_f32 where each group is one head (n == head_dim) and a thread's elements
// tid + j * blockDim.x (j < J = n / blockDim.x: 2, 4 or 8) hold whole NEOX pairs (j and
// j + J / 2): the normed values stay in registers for the rotation, without rms_norm_group's
// stores, the barrier, and rope's reloads and index divisions, which were most of a one-token
// launch's few hundred instructions a warp in a row (session 36's ncu). The same operations on
// the same values: the same bits. Launch as qk_norm_rope_neox_f32.
template <int J>
static __device__ __forceinline__ void
head_norm_rope_neox(float *q, const float *__restrict__ wq, float *k, const float *__restrict__ wk,
                    const uint32_t *__restrict__ pos, int n_tokens, int width_q, int width_k,
                    int n, float theta_scale, const float *__restrict__ ff, RopeScale rs,
                    const float2 *__restrict__ table, float eps) {
    __shared__ double scratch[32];
    const int gq = n_tokens * width_q / n;
    const bool is_q = (int)blockIdx.x < gq;
    const int g = is_q ? blockIdx.x : blockIdx.x - gq;
    float *x = (is_q ? q : k) + (size_t)g * n;
    const float *__restrict__ w = is_q ? wq : wk;
    const int threads = blockDim.x, tid = threadIdx.x;
    float v[J];
#pragma unroll
    for (int j = 0; j < J; ++j) {
        v[j] = x[tid + j * threads];
    }
    // rope<true>'s pairs i (elements i and i + half) of this head, row t.
    const int half = n / 2, t = g / ((is_q ? width_q : width_k) / n);
    float2 cs[J / 2];
#pragma unroll
    for (int j = 0; j < J / 2; ++j) {
        const int i = tid + j * threads;
        cs[j] = table ? table[t * half + i] : rope_cos_sin(pos[t], i, theta_scale, ff, rs);
    }
    head_norm_rope_neox_regs<J>(v, w, tid, threads, n, eps, cs,
                                [&](double sum) { return block_sum(sum, scratch); });
#pragma unroll
    for (int j = 0; j < J; ++j) {
        x[tid + j * threads] = v[j];
    }
}

extern "C" __global__ void qk_norm_head_rope_neox_f32(
    float *q, const float *__restrict__ wq, float *k, const float *__restrict__ wk,
    const uint32_t *__restrict__ pos, int n_tokens, int width_q, int width_k, int n,
    int head_dim, float theta_scale, const float *__restrict__ ff, RopeScale rs,
    const float2 *__restrict__ table, float eps) {
    dependent_launch_entry();
    switch (n / (int)blockDim.x) {
    case 2:
        head_norm_rope_neox<2>(q, wq, k, wk, pos, n_tokens, width_q, width_k, n, theta_scale, ff,
                               rs, table, eps);
        break;
    case 4:
        head_norm_rope_neox<4>(q, wq, k, wk, pos, n_tokens, width_q, width_k, n, theta_scale, ff,
                               rs, table, eps);
        break;
    default: // 8 (the host checks)
        head_norm_rope_neox<8>(q, wq, k, wk, pos, n_tokens, width_q, width_k, n, theta_scale, ff,
                               rs, table, eps);
        break;
    }
}

// The rotations above with the KV store in their launch (`FERROLM_ROPE_STORE`): after a key
// pair is rotated, the thread that rotated it stores it, and the value pair at the same place,
// in an f16 or f32 cache at its row's position, as kv_store_f16/f32 (attention.cu) would: the
// same bits, one launch where there were two. v has k's width (one head size for both).
template <bool NEOX, typename T>
static __device__ __forceinline__ void kv_store_pair(const float *k, const float *v, T *kc, T *vc,
                                                     KvPages pages,
                                                     const uint32_t *__restrict__ pos, int width,
                                                     int head_dim, int idx) {
    const int half = head_dim / 2;
    const int pairs_per_row = width / 2;
    const int t = idx / pairs_per_row, p = idx % pairs_per_row;
    const int head = p / half, i = p % half;
    const int a = NEOX ? i : 2 * i;
    const int b = NEOX ? i + half : 2 * i + 1;
    const size_t src = (size_t)t * width + (size_t)head * head_dim;
    const size_t dst = pages.row(head, (int)pos[t]) * head_dim;
    // k's pair as this thread's rotation wrote it.
    kc[dst + a] = kv_elem(k[src + a], kc);
    kc[dst + b] = kv_elem(k[src + b], kc);
    vc[dst + a] = kv_elem(v[src + a], vc);
    vc[dst + b] = kv_elem(v[src + b], vc);
}

// rope_qk_*_f32, then each key pair (thread q_pairs + j rotated pair j) stored with its values.
template <bool NEOX, typename T>
static __device__ __forceinline__ void
rope_qk_store(float *q, float *k, const float *v, T *kc, T *vc, KvPages pages,
              const uint32_t *__restrict__ pos, int n_tokens, int width_q, int width_k,
              int head_dim, float theta_scale, const float *ff, RopeScale rs,
              const float2 *table) {
    rope_qk<NEOX>(q, k, pos, n_tokens, width_q, width_k, head_dim, theta_scale, ff, rs, table);
    const int j = (int)(blockIdx.x * blockDim.x + threadIdx.x) - n_tokens * width_q / 2;
    if (j >= 0 && j < n_tokens * width_k / 2) {
        kv_store_pair<NEOX>(k, v, kc, vc, pages, pos, width_k, head_dim, j);
    }
}

// qk_norm_rope_*_f32, then each k group's block stores the pairs its threads rotated.
template <bool NEOX, typename T>
static __device__ __forceinline__ void
qk_norm_rope_store(float *q, const float *__restrict__ wq, float *k, const float *__restrict__ wk,
                   const float *v, T *kc, T *vc, KvPages pages, const uint32_t *__restrict__ pos,
                   int n_tokens, int width_q, int width_k, int n, int head_dim, float theta_scale,
                   const float *ff, RopeScale rs, const float2 *table, float eps) {
    qk_norm_rope<NEOX>(q, wq, k, wk, pos, n_tokens, width_q, width_k, n, head_dim, theta_scale,
                       ff, rs, table, eps);
    const int gq = n_tokens * width_q / n;
    if ((int)blockIdx.x >= gq) {
        const int first_pair = ((int)blockIdx.x - gq) * (n / 2);
        for (int p = threadIdx.x; p < n / 2; p += blockDim.x) {
            kv_store_pair<NEOX>(k, v, kc, vc, pages, pos, width_k, head_dim, first_pair + p);
        }
    }
}

#define ROPE_QK_STORE(NAME, NEOX, T)                                                              \
    extern "C" __global__ void NAME(float *q, float *k, const float *v, T *kc, T *vc,              \
                                    KvPages pages, const uint32_t *__restrict__ pos,               \
                                    int n_tokens, int width_q, int width_k, int head_dim,          \
                                    float theta_scale, const float *__restrict__ ff, RopeScale rs, \
                                    const float2 *__restrict__ table) {                            \
        dependent_launch_entry();                                                                  \
        rope_qk_store<NEOX, T>(q, k, v, kc, vc, pages, pos, n_tokens, width_q, width_k, head_dim,  \
                               theta_scale, ff, rs, table);                                        \
    }
ROPE_QK_STORE(rope_qk_store_norm_f16, false, uint16_t)
ROPE_QK_STORE(rope_qk_store_neox_f16, true, uint16_t)
ROPE_QK_STORE(rope_qk_store_norm_f32, false, float)
ROPE_QK_STORE(rope_qk_store_neox_f32, true, float)

#define QK_NORM_ROPE_STORE(NAME, NEOX, T)                                                         \
    extern "C" __global__ void NAME(float *q, const float *__restrict__ wq, float *k,              \
                                    const float *__restrict__ wk, const float *v, T *kc, T *vc,    \
                                    KvPages pages, const uint32_t *__restrict__ pos,               \
                                    int n_tokens, int width_q, int width_k, int n, int head_dim,   \
                                    float theta_scale, const float *__restrict__ ff, RopeScale rs, \
                                    const float2 *__restrict__ table, float eps) {                 \
        dependent_launch_entry();                                                                  \
        qk_norm_rope_store<NEOX, T>(q, wq, k, wk, v, kc, vc, pages, pos, n_tokens, width_q,        \
                                    width_k, n, head_dim, theta_scale, ff, rs, table, eps);        \
    }
QK_NORM_ROPE_STORE(qk_norm_rope_store_norm_f16, false, uint16_t)
QK_NORM_ROPE_STORE(qk_norm_rope_store_neox_f16, true, uint16_t)
QK_NORM_ROPE_STORE(qk_norm_rope_store_norm_f32, false, float)
QK_NORM_ROPE_STORE(qk_norm_rope_store_neox_f32, true, float)
