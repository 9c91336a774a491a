// Weights asked of L2 ahead of the launches that read them, by a small kernel on a stream of
// its own beside one token's decode chain (a branch of the captured graph).
//
// Why: one token's chain of an MoE model leaves DRAM idle while its latency-bound launches run
// (the router's norm, dots and top-k move a few KB), and the next layer's attention weights are
// known long before their launches wait for the kernel ahead. A launch on the chain that asks
// for them holds the chain back until its requests are served (sessions 38-46); a kernel off
// the chain holds nothing back. Nothing read into registers, so no bits change anywhere.
//
// The chain's router launches count themselves on state[0] as they start (moe_route.cu,
// `progress`); group g of spans is asked for once the (g + 1)-th of this step's router launches
// has started.
#include "common.cuh"

// Bytes [addr, addr + bytes) of one weight (addr 16-byte aligned).
struct L2Span {
    unsigned long long addr, bytes;
};

// The longest a wait for the chain lasts before this kernel stops asking (a chain that does
// not count itself as the plan expects): it only ever delays prefetches, never the chain.
#define L2_AHEAD_PATIENCE_NS 2000000ull
// Bytes one bulk request asks for (form 2).
#define L2_AHEAD_BULK_BYTES 4096u

static __device__ __forceinline__ unsigned load_relaxed_u32(const unsigned *p) {
    unsigned v;
    asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

static __device__ __forceinline__ unsigned long long global_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// Whether *progress reached `target` (counting with wrap-around) before the patience ran out;
// lane 0 polls, the warp gets its answer.
static __device__ bool progress_reached(const unsigned *progress, unsigned target) {
    int reached = 0;
    if (threadIdx.x == 0) {
        const unsigned long long t0 = global_ns();
        while (!(reached = (int)(load_relaxed_u32(progress) - target) >= 0) &&
               global_ns() - t0 < L2_AHEAD_PATIENCE_NS) {
            __nanosleep(200);
        }
    }
    return __shfl_sync(FULL_MASK, reached, 0) != 0;
}

// Asks L2 for one span, spread over the grid's lanes: a 128-byte line a request (form 1, and
// form 2 before sm_90) or L2_AHEAD_BULK_BYTES a bulk request, served by the asking SM's copy
// engine (form 2).
static __device__ __forceinline__ void span_to_l2(const L2Span s, int form) {
    if (form == 3) {
        return; // the waits alone (bisecting)
    }
    const char *p = (const char *)s.addr;
    const unsigned long long me = (unsigned long long)blockIdx.x * WARP_SIZE + threadIdx.x;
    const unsigned long long lanes = (unsigned long long)gridDim.x * WARP_SIZE;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (form == 2) {
        for (unsigned long long off = me * L2_AHEAD_BULK_BYTES; off < s.bytes;
             off += lanes * L2_AHEAD_BULK_BYTES) {
            // A multiple of 16 bytes, none past the span.
            const unsigned n =
                (unsigned)min((unsigned long long)L2_AHEAD_BULK_BYTES, s.bytes - off) & ~15u;
            if (n > 0) {
                asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p + off), "r"(n)
                             : "memory");
            }
        }
        return;
    }
#endif
    for (unsigned long long off = me * 128; off < s.bytes; off += lanes * 128) {
        asm volatile("prefetch.global.L2 [%0];" ::"l"(p + off));
    }
}

// state[0]: the router launches' count; state[1]: its value when this step began (this
// kernel's own); state[2]: this launch's blocks done. Group g is spans [group_end[g - 1],
// group_end[g]), asked for once the step's router launch g has started; the step makes
// n_groups router launches. Blocks of one warp, so that a block fits beside any of the chain's
// kernels on its SM.
extern "C" __global__ void __launch_bounds__(WARP_SIZE)
    l2_ahead(const L2Span *__restrict__ spans, const int *__restrict__ group_end, int n_groups,
             unsigned *state, int form) {
    dependent_launch_entry();
    const unsigned base = load_relaxed_u32(state + 1);
    bool on_time = true;
    int first = 0;
    for (int g = 0; g < n_groups && on_time; ++g) {
        on_time = progress_reached(state, base + (unsigned)g + 1);
        for (int s = first; on_time && s < group_end[g]; ++s) {
            span_to_l2(spans[s], form);
        }
        first = group_end[g];
    }
    // The last block to finish moves the base on to where the count stands after the step's
    // launches (every block has read the old base by then); after a wait that ran out, to
    // where the count stands now.
    if (threadIdx.x == 0) {
        __threadfence();
        if (atomicAdd(state + 2, 1u) == gridDim.x - 1) {
            state[2] = 0;
            state[1] = on_time ? base + (unsigned)n_groups : load_relaxed_u32(state);
        }
    }
}
