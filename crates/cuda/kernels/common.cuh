// Shared by every kernel file: integer types, f16 helpers, warp and block reductions.
//
// Compiled by NVRTC at run time (see crates/cuda/src/nvrtc.rs), so only headers that NVRTC can
// see are allowed: cuda_fp16.h comes from the toolkit's include folder (or the PyPI package
// nvidia-cuda-runtime in CI); there is no C standard library, hence the typedefs below.
#pragma once
#define FERROLM_COMMON_CUH

#include <cuda_fp16.h>

typedef signed char int8_t;
typedef unsigned char uint8_t;
typedef short int16_t;
typedef unsigned short uint16_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long long int64_t;
typedef unsigned long long uint64_t;

#define WARP_SIZE 32
#define FULL_MASK 0xffffffffu

// f16 stored as raw little-endian bits in a block struct. Conversions go through cuda_fp16.h so
// that they round exactly as ferrolm-quant does on the host (round to nearest even).
static __device__ __forceinline__ float f16_bits_to_f32(uint16_t h) {
    return __half2float(__ushort_as_half(h));
}

static __device__ __forceinline__ uint16_t f32_to_f16_bits(float x) {
    return __half_as_ushort(__float2half_rn(x));
}

// A row of D elements shared by the 32 lanes of a warp: each lane holds N = ceil(D / 32) of them
// (lane + 32 i, or lane * N + i, as the kernel lays them out). For a D that is not a multiple of
// 32 (80) some slots fall past the row: in_row says which exist; the others are never read or
// written (their values stay zero).
template <int D> struct LaneDims {
    static constexpr int N = (D + WARP_SIZE - 1) / WARP_SIZE;
    static __device__ __forceinline__ bool in_row(int j) { return D % WARP_SIZE == 0 || j < D; }
};

// The first key a query sees whose own is key n_keys - 1: with a sliding window of `window`
// positions (gemma3, gpt-oss) the keys (p - window, p], as the CPU's attention takes them
// (crates/cpu/src/attention.rs: n_keys.saturating_sub(window)); every key from 0 for window 0.
static __device__ __forceinline__ int attn_first_key(int n_keys, int window) {
    return window > 0 ? max(0, n_keys - window) : 0;
}

// The paged KV cache (crates/cuda/src/ops/kv_cache.rs): a layer's keys, and its values, are a
// pool of blocks of 2^shift positions shared by every sequence, block b holding
// [n_kv_head][2^shift][row]; a sequence's position p lives in its block blocks[p >> shift].
// Passed by value to every kernel that reads or writes a sequence's cache (ops' KvPagesArg has
// the same layout).
struct KvPages {
    const uint32_t *blocks;
    int shift;
    int n_kv_head;
    // The row (of the cache's row size) of KV head g's position p.
    __device__ __forceinline__ size_t row(int g, int p) const {
        const size_t b = (size_t)__ldg(blocks + (p >> shift)) * n_kv_head + g;
        return (b << shift) | (size_t)(p & ((1 << shift) - 1));
    }
};

// A K or V element as an f16 or f32 cache holds it: f16 bits, or the f32 as it is (-ctk f32:
// the CPU's f32 cache). The second argument picks the overload.
static __device__ __forceinline__ uint16_t kv_elem(float x, uint16_t *) {
    return f32_to_f16_bits(x);
}
static __device__ __forceinline__ float kv_elem(float x, float *) {
    return x;
}

// A lane's share of a V row of D f16 elements (row: its first element, in global or shared
// memory, 4-byte aligned), as f32: the N consecutive elements from lane * N, zeros past the row.
// Whole shares (D a multiple of 64) load 8 or 4 bytes at a time.
template <int D>
static __device__ __forceinline__ void v_row_f16(const uint16_t *row, int lane, float *out) {
    constexpr int N = LaneDims<D>::N;
    const uint16_t *r = row + lane * N;
    if constexpr (D % WARP_SIZE == 0 && N % 4 == 0) {
#pragma unroll
        for (int i = 0; i < N / 4; ++i) {
            const uint2 w = ((const uint2 *)r)[i];
            out[4 * i] = f16_bits_to_f32((uint16_t)(w.x & 0xffff));
            out[4 * i + 1] = f16_bits_to_f32((uint16_t)(w.x >> 16));
            out[4 * i + 2] = f16_bits_to_f32((uint16_t)(w.y & 0xffff));
            out[4 * i + 3] = f16_bits_to_f32((uint16_t)(w.y >> 16));
        }
    } else if constexpr (D % WARP_SIZE == 0 && N == 2) {
        const uint32_t w = *(const uint32_t *)r;
        out[0] = f16_bits_to_f32((uint16_t)(w & 0xffff));
        out[1] = f16_bits_to_f32((uint16_t)(w >> 16));
    } else {
#pragma unroll
        for (int i = 0; i < N; ++i) {
            out[i] = LaneDims<D>::in_row(lane * N + i) ? f16_bits_to_f32(r[i]) : 0.0f;
        }
    }
}

// Four signed-byte products added to c (sm_61+: one instruction).
static __device__ __forceinline__ int dp4a(int a, int b, int c) {
    return __dp4a(a, b, c);
}

// c + the dot of a's four bytes as unsigned with b's four as signed.
static __device__ __forceinline__ int dp4a_us(uint32_t a, int b, int c) {
    int d;
    asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}

// e^x rounded to f32 from a double evaluation: correctly rounded nearly always, as the CPU's libm
// expf (within 0.502 ulp), where CUDA's expf is off by up to 2 ulp. The paths that must agree
// with the CPU's roundings (SiLU, the router's softmax, ggml-arithmetic attention) use it.
static __device__ __forceinline__ float exp_rn(float x) {
    return (float)exp((double)x);
}

// The last i in [0, n) with a[i] <= v, for a non-decreasing a with a[0] <= v (binary search):
// in an MoE index's prefix sums (offsets, tile starts), the expert that owns position v, since
// an empty expert's entry equals the next one's.
static __device__ __forceinline__ int last_at_most(const int *__restrict__ a, int n, int v) {
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (a[mid] <= v) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    return lo;
}

// SwiGLU of one element, silu(g) * u = g / (1 + exp(-g)) * u, rounded step by step as the CPU's
// norm::swiglu (explicit _rn: no contraction), so every kernel that applies it agrees bit for bit.
static __device__ __forceinline__ float silu_mul(float g, float u) {
    return __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, exp_rn(-g))), u);
}

// gpt-oss's swiglu_oai of one element (the CPU's norm::swiglu_oai): the gate clamped above at
// `limit`, the up clamped to +-limit, x / (1 + exp(alpha * -x)) * (y + 1), step by step.
static __device__ __forceinline__ float swiglu_oai(float g, float u, float alpha, float limit) {
    const float x = fminf(g, limit), y = fminf(fmaxf(u, -limit), limit);
    return __fmul_rn(__fdiv_rn(x, __fadd_rn(1.0f, exp_rn(__fmul_rn(alpha, -x)))),
                     __fadd_rn(y, 1.0f));
}

// The experts' epilogue (moe_decode.cu, moe_gemm.cu): gpt-oss's biases, [n_expert][rows] f32
// each, added to the gate, up and down products before the activation and the routing weight
// (the CPU's order), and its swiglu_oai when limit > 0; null biases and limit 0 for the other
// models, whose kernels keep their bits.
struct ExpertEpilogue {
    const float *gate_bias, *up_bias, *down_bias;
    float alpha, limit;

    // act(gate + gate_bias, up + up_bias) of row `row` of expert e's n_ff.
    __device__ __forceinline__ float act(int e, int row, int n_ff, float g, float u) const {
        if (gate_bias != nullptr) {
            const size_t i = (size_t)e * n_ff + row;
            g = __fadd_rn(g, gate_bias[i]);
            u = __fadd_rn(u, up_bias[i]);
        }
        return limit > 0.0f ? swiglu_oai(g, u, alpha, limit) : silu_mul(g, u);
    }

    // down + down_bias of row `row` of expert e's n_embd.
    __device__ __forceinline__ float down(int e, int row, int n_embd, float v) const {
        return down_bias != nullptr ? __fadd_rn(v, down_bias[(size_t)e * n_embd + row]) : v;
    }
};

template <typename T>
static __device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
    for (int offset = WARP_SIZE / 2; offset > 0; offset >>= 1) {
        v += __shfl_xor_sync(FULL_MASK, v, offset);
    }
    return v;
}

// The CPU's f32 dot (ferrolm_cpu::matmul::dot_f32_avx512_order, its AVX-512 dot) by one warp,
// so that an F32 product on the GPU has the CPU's bits. The CPU keeps 64 fused multiply-add
// chains over 64-column steps (chain c: columns 64s + c); a warp holds chain `lane` in c0 and
// chain `lane + 32` in c1, each summed over s ascending with fmaf. cpu_dot_reduce then adds
// them as the CPU does, (c + c+16) + (c+32 + c+48) for c < 16 and _mm512_reduce_add_ps's
// halving tree: float addition commutes bit for bit, so xor partners give every lane the sum.
static __device__ __forceinline__ float cpu_dot_reduce(float c0, float c1) {
    const float lo = __fadd_rn(c0, __shfl_xor_sync(FULL_MASK, c0, 16));
    const float hi = __fadd_rn(c1, __shfl_xor_sync(FULL_MASK, c1, 16));
    float v = __fadd_rn(lo, hi);
#pragma unroll
    for (int offset = 8; offset > 0; offset >>= 1) {
        v = __fadd_rn(v, __shfl_xor_sync(FULL_MASK, v, offset));
    }
    return v;
}

// The CPU dot's tail past the last whole 64 columns (n < 64 products), in its scalar order:
// eight sums (from 0) of rounded products over groups of eight, added in order, then the rest
// in order (those two sums start from -0.0, as Rust's f32 sum). The whole dot:
// cpu_dot_reduce(..) + this.
static __device__ __forceinline__ float cpu_dot_tail(const float *a, const float *b, int n) {
    float acc[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        acc[i] = 0.0f;
    }
    const int done = n / 8 * 8;
    for (int c = 0; c < done; c += 8) {
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            acc[i] = __fadd_rn(acc[i], __fmul_rn(a[c + i], b[c + i]));
        }
    }
    float rest = -0.0f;
    for (int c = done; c < n; ++c) {
        rest = __fadd_rn(rest, __fmul_rn(a[c], b[c]));
    }
    float s = -0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        s = __fadd_rn(s, acc[i]);
    }
    return __fadd_rn(s, rest);
}

static __device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int offset = WARP_SIZE / 2; offset > 0; offset >>= 1) {
        v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, offset));
    }
    return v;
}

// Sum over a whole 1-D block (blockDim.x a multiple of 32, at most 1024); every thread gets the
// result. `scratch` holds 32 values. The order of additions is fixed by the block size alone,
// so a given launch is deterministic.
// dependent_launch_entry (below): the first statement of every kernel (crates/cuda/src/ops/
// launch.rs checks it). Under
// programmatic dependent launch (sm_90+, the plan's FERROLM_CUDA_PDL) this kernel's blocks may be
// scheduled before the kernel ahead of it on the stream has finished: wait for it and for its
// writes, then let the kernel after this one be scheduled in turn. Without the launch attribute
// both instructions return at once.
//
// Its two halves, apart: for a kernel that must let the kernel after it be scheduled later than
// its own start, it starts with dependent_launch_wait_only (launch.rs's check takes it too) and
// calls dependent_launch_next where the next one may come in.
static __device__ __forceinline__ void dependent_launch_wait_only() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

static __device__ __forceinline__ void dependent_launch_next() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

static __device__ __forceinline__ void dependent_launch_entry() {
    dependent_launch_wait_only();
    dependent_launch_next();
}

// 16 bytes global → shared (address d) without registers, bypassing L1 (sm_80+); only the
// first `src_bytes` are read, the rest of the 16 are zero-filled.
static __device__ __forceinline__ void cp_async16_to(uint32_t d, const void *src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src),
                 "r"(src_bytes));
}

static __device__ __forceinline__ void cp_async16(void *dst, const void *src, int src_bytes) {
    cp_async16_to((uint32_t)__cvta_generic_to_shared(dst), src, src_bytes);
}

static __device__ __forceinline__ void cp_async4(void *dst, const void *src, int src_bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(
                     (uint32_t)__cvta_generic_to_shared(dst)),
                 "l"(src), "r"(src_bytes));
}

// 16 bytes to dst (src_bytes of them from src, the rest zero), asynchronously: one copy where
// src is 16-byte aligned, else four of 4 bytes (src then 4-byte aligned: the rows of a
// 32-element block format whose length is not a multiple of 256). `base` stands in for src
// where nothing is read.
static __device__ __forceinline__ void cp_async16_any(char *dst, const char *src, int src_bytes,
                                                      const char *base) {
    if (((size_t)src & 15) == 0) {
        cp_async16(dst, src_bytes > 0 ? src : base, src_bytes);
        return;
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const int n = max(0, min(4, src_bytes - 4 * j));
        cp_async4(dst + 4 * j, n > 0 ? src + 4 * j : base, n);
    }
}

static __device__ __forceinline__ uint32_t smem_u32(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

// Shared-memory mbarriers (sm_90: the bulk and tensor copies complete on them; the callers run
// them on sm_90 only, and before it the bodies are empty).
static __device__ __forceinline__ void mbar_init(uint64_t *bar, uint32_t count) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count));
#endif
}

// Arrives on bar, which is to expect `bytes` more of copies' transactions in this phase.
static __device__ __forceinline__ void mbar_expect_tx(uint64_t *bar, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)),
                 "r"(bytes)
                 : "memory");
#endif
}

static __device__ __forceinline__ void mbar_arrive(uint64_t *bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(bar)) : "memory");
#endif
}

// Waits for the phase of the given parity of bar to complete.
static __device__ __forceinline__ void mbar_wait(uint64_t *bar, uint32_t parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    uint32_t done = 0;
    do {
        asm volatile("{\n .reg .pred p;\n"
                     " mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     " selp.u32 %0, 1, 0, p;\n}"
                     : "=r"(done)
                     : "r"(smem_u32(bar)), "r"(parity)
                     : "memory");
    } while (!done);
#endif
}

// One bulk copy of `bytes` (a multiple of 16, both addresses 16-byte aligned) from global
// memory into this block's shared memory, its completion counted on bar's transactions.
static __device__ __forceinline__ void bulk_copy_to_smem(void *dst, const void *src,
                                                         uint32_t bytes, uint64_t *bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], "
                 "%2, [%3];" ::"r"(smem_u32(dst)),
                 "l"(src), "r"(bytes), "r"(smem_u32(bar))
                 : "memory");
#endif
}

// Thread-block clusters (sm_90; the callers take them on sm_90 only, and before it the bodies
// are empty and the cluster is one block). A thread's arrival at the cluster's barrier and its
// wait there (every thread of every block arrives, then waits, before it arrives again):
// `release` publishes the thread's shared-memory stores to the cluster, `acquire` sees the
// others'.
static __device__ __forceinline__ void cluster_arrive_relaxed() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
#endif
}
static __device__ __forceinline__ void cluster_arrive_release() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
#endif
}
static __device__ __forceinline__ void cluster_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
#endif
}

// Blocks in this block's cluster (1 where the launch took none).
static __device__ __forceinline__ unsigned cluster_blocks() {
    unsigned n = 1;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm("mov.u32 %0, %%cluster_nctarank;" : "=r"(n));
#endif
    return n;
}

// This block's shared-memory address p as the cluster's block `rank` holds the same variable.
static __device__ __forceinline__ uint32_t cluster_smem(const void *p, unsigned rank) {
    uint32_t remote = smem_u32(p);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(remote), "r"(rank));
#endif
    return remote;
}

// v into *p of the cluster's block `rank` (p: this block's address of the same variable).
static __device__ __forceinline__ void store_in_block(float *p, unsigned rank, float v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("st.shared::cluster.f32 [%0], %1;" ::"r"(cluster_smem(p, rank)), "f"(v) : "memory");
#endif
}

// The float4 at a cluster shared-memory address (cluster_smem's).
static __device__ __forceinline__ float4 load_in_cluster(uint32_t at) {
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                 : "r"(at));
#endif
    return v;
}

static __device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::);
}

// Wait until at most N committed groups of this thread are still in flight.
template <int N> static __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// acc += v lane by lane, each add rounded once (split shares summed in a fixed order).
static __device__ __forceinline__ void add_float4_rn(float4 &acc, const float4 &v) {
    acc.x = __fadd_rn(acc.x, v.x);
    acc.y = __fadd_rn(acc.y, v.y);
    acc.z = __fadd_rn(acc.z, v.z);
    acc.w = __fadd_rn(acc.w, v.w);
}

// A split-K product's last share (mmq.cu, mmvq_staged.cu, matvec_f16.cu, gemm_wgmma.cu):
// dst[c][r] = Σ_z part[z][c][r] in z order (the same bits every run), over a block's region of
// `cols` columns from col0 and `rows` rows from row0 of a [column][ld] layout, the shares'
// planes `plane` floats apart; thread tid of nthreads. Where ld, row0 and rows allow 16-byte
// loads, a thread keeps VECS outputs of four rows in flight and asks for a share of
// all of them at once: a round trip to L2 a share, where an output at a time took one an
// output (64 of them a thread at 64 tokens, the product's whole time: docs/perf.md, session
// 29). One row at a time otherwise. Loads bypass L1: other blocks wrote the shares.
template <int VECS>
static __device__ __forceinline__ void add_split_planes(float *__restrict__ dst,
                                                        const float *__restrict__ part,
                                                        size_t plane, int splits, int ld,
                                                        int col0, int cols, int row0, int rows,
                                                        int tid, int nthreads) {
    const bool aligned = ((size_t)dst % 16 == 0) && ((size_t)part % 16 == 0) && plane % 4 == 0;
    // Offsets in an int: the region's last one must fit.
    const bool small = (size_t)(col0 + cols) * ld <= (size_t)0x7fffffff;
    if (aligned && small && ld % 4 == 0 && row0 % 4 == 0 && rows % 4 == 0) {
        const int quads = rows / 4, n = cols * quads;
        for (int base = 0; base < n; base += VECS * nthreads) {
            float4 acc[VECS];
            int at[VECS];
#pragma unroll
            for (int i = 0; i < VECS; ++i) {
                const int e = base + i * nthreads + tid;
                at[i] = e < n ? (col0 + e / quads) * ld + row0 + 4 * (e % quads) : -1;
                acc[i] = at[i] >= 0 ? __ldcg((const float4 *)(part + at[i]))
                                    : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            }
            for (int z = 1; z < splits; ++z) {
                const float *pz = part + z * plane;
#pragma unroll
                for (int i = 0; i < VECS; ++i) {
                    if (at[i] >= 0) {
                        add_float4_rn(acc[i], __ldcg((const float4 *)(pz + at[i])));
                    }
                }
            }
#pragma unroll
            for (int i = 0; i < VECS; ++i) {
                if (at[i] >= 0) {
                    *(float4 *)(dst + at[i]) = acc[i];
                }
            }
        }
        return;
    }
    for (int e = tid; e < cols * rows; e += nthreads) {
        const size_t at = (size_t)(col0 + e / rows) * ld + row0 + e % rows;
        float sum = __ldcg(part + at);
        for (int z = 1; z < splits; ++z) {
            sum = __fadd_rn(sum, __ldcg(part + at + z * plane));
        }
        dst[at] = sum;
    }
}

// One thread's count of its block in *counter, after a barrier that follows the block's stores
// (every thread's, which other blocks will read through L2): its fence before the count
// publishes them all (a fence is cumulative; cooperative groups' grid sync does the same), and
// where the count makes this block the last of `blocks`, a second fence orders the readers'
// loads after every other block's. Whether this block is the last. A fence by one thread where
// every thread fenced before: ncu counted membar stalls on the router's 512 threads (session 32).
static __device__ __forceinline__ bool block_fence_count(unsigned *counter, unsigned blocks) {
    __threadfence();
    const bool last = atomicAdd(counter, 1u) == blocks - 1;
    if (last) {
        __threadfence();
    }
    return last;
}

// The split-K tail the block-wide split kernels share (mmq.cu, mmvq_staged.cu, matvec_f16.cu;
// every thread of the block calls it after storing its share): the tile's last share to finish
// (counted in done[tile], which it resets for the next launch) adds the shares into dst by
// add_split_planes, whichever finished first: the same bits every run.
template <int VECS>
static __device__ __forceinline__ void add_splits_if_last(
    unsigned *__restrict__ done, int tile, float *__restrict__ dst, const float *__restrict__ part,
    size_t plane, int splits, int ld, int col0, int cols, int row0, int rows, int tid,
    int nthreads) {
    __shared__ bool last;
    __syncthreads(); // the block's shares, then one thread's fence and count
    if (tid == 0) {
        last = block_fence_count(done + tile, splits);
    }
    __syncthreads();
    if (!last) {
        return;
    }
    add_split_planes<VECS>(dst, part, plane, splits, ld, col0, cols, row0, rows, tid, nthreads);
    if (tid == 0) {
        done[tile] = 0;
    }
}

template <typename T>
static __device__ __forceinline__ T block_sum(T v, T *scratch) {
    const int lane = threadIdx.x % WARP_SIZE;
    const int warp = threadIdx.x / WARP_SIZE;
    v = warp_sum(v);
    if (blockDim.x == WARP_SIZE) {
        return v;
    }
    __syncthreads(); // scratch may still be read by a previous call
    if (lane == 0) {
        scratch[warp] = v;
    }
    __syncthreads();
    v = lane < (int)(blockDim.x / WARP_SIZE) ? scratch[lane] : (T)0;
    return warp_sum(v);
}
