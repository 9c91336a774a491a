// The inner loop of the quantized mat-vec, shared by mmvq.cu (dense weights) and moe_decode.cu
// (expert-indexed weights): ROWS weight rows in a ggml block format dotted with NCOLS Q8_1
// activation rows, by a group of THREADS cooperating threads.
//
// Each thread of the group takes `vdr` ints of codes of one weight block per step, so consecutive
// threads read consecutive bytes of a row, and the group walks the row's blocks together. The
// thread's partial sums are added to acc[j][i] (row i, column j); the caller reduces them over
// the group (a warp_sum, or shared memory across warps). For each accumulator the order of
// additions depends only on THREADS and the row length, never on ROWS, NCOLS or UNROLL, so a
// column computed alone and the same column computed beside others get the same bits.
#pragma once
#ifndef FERROLM_COMMON_CUH
#error "include common.cuh and quant.cuh before mmvq.cuh"
#endif

template <int TYPE, int NCOLS, int ROWS>
static __device__ __forceinline__ void
mmvq_step(const typename WeightFormat<TYPE>::block *const (&rows)[ROWS],
          const block_q8_1 *const (&cols)[NCOLS], int ncols, int kbx, int iqs,
          float (&acc)[NCOLS][ROWS]) {
    typedef WeightFormat<TYPE> F;
    const int kby = kbx * (F::qk / QK8_1);
#pragma unroll
    for (int j = 0; j < NCOLS; ++j) {
        if (j < ncols) {
#pragma unroll
            for (int i = 0; i < ROWS; ++i) {
                acc[j][i] += F::vec_dot(rows[i] + kbx, cols[j] + kby, iqs);
            }
        }
    }
}

// rows[i]: the first block of weight row i; cols[j]: the first Q8_1 block of activation row j.
// Columns j >= ncols are skipped (callers with fewer live columns than NCOLS). UNROLL > 0
// unrolls that many steps of the walk so that their loads are in flight together; 0 leaves it
// to the compiler (mmvq.cu's choice, kept as it was measured).
template <int TYPE, int NCOLS, int ROWS, int THREADS, int UNROLL>
static __device__ __forceinline__ void
mmvq_accumulate(const typename WeightFormat<TYPE>::block *const (&rows)[ROWS],
                const block_q8_1 *const (&cols)[NCOLS], int ncols, int blocks_per_row, int tid,
                float (&acc)[NCOLS][ROWS]) {
    typedef WeightFormat<TYPE> F;
    constexpr int THREADS_PER_BLOCK = F::qi / F::vdr;
    constexpr int BLOCKS_PER_ITER = THREADS / THREADS_PER_BLOCK;
    static_assert(THREADS % THREADS_PER_BLOCK == 0, "threads per weight block");

    const int iqs = F::vdr * (tid % THREADS_PER_BLOCK);
    const int first = tid / THREADS_PER_BLOCK;
    if constexpr (UNROLL == 0) {
        for (int kbx = first; kbx < blocks_per_row; kbx += BLOCKS_PER_ITER) {
            mmvq_step<TYPE, NCOLS, ROWS>(rows, cols, ncols, kbx, iqs, acc);
        }
    } else {
#pragma unroll UNROLL
        for (int kbx = first; kbx < blocks_per_row; kbx += BLOCKS_PER_ITER) {
            mmvq_step<TYPE, NCOLS, ROWS>(rows, cols, ncols, kbx, iqs, acc);
        }
    }
}

// The wide walk, for formats with a vec_dot_wide (Q4_K, Q6_K, MXFP4): one warp per row,
// F::wide_lanes lanes a weight block (8 for the K-quants, 1 for MXFP4), so a warp step covers
// WARP_SIZE / wide_lanes blocks and each lane loads 16-24 bytes of codes at once (against 4-8
// in the walk above): fewer instructions per weight byte, and more bytes in flight per warp.
// The order of additions into each accumulator depends only on the row length (as above: never
// on ROWS, NCOLS or UNROLL).
template <int TYPE, int NCOLS, int ROWS, int UNROLL, typename A>
static __device__ __forceinline__ void
mmvq_accumulate_wide(const typename WeightFormat<TYPE>::block *const (&rows)[ROWS],
                     const A (&cols)[NCOLS], int ncols, int blocks_per_row, int lane,
                     float (&acc)[NCOLS][ROWS]) {
    typedef WeightFormat<TYPE> F;
    static_assert(F::wide, "no vec_dot_wide for this format");
    constexpr int LANES = F::wide_lanes, BLOCKS_PER_STEP = WARP_SIZE / LANES;
    const int t = lane % LANES;
#pragma unroll UNROLL
    for (int kbx = lane / LANES; kbx < blocks_per_row; kbx += BLOCKS_PER_STEP) {
        const int kby = kbx * (F::qk / QK8_1);
#pragma unroll
        for (int j = 0; j < NCOLS; ++j) {
            if (j < ncols) {
#pragma unroll
                for (int i = 0; i < ROWS; ++i) {
                    acc[j][i] += F::vec_dot_wide(rows[i] + kbx, cols[j], kby, t);
                }
            }
        }
    }
}

// A warp's walk over its rows: the wide walk when WIDE and the format has one, else the walk
// above with the warp as the group (which reads activations from global memory only: A is
// Q8Global there). Callers reduce acc with warp_sum.
template <int TYPE, int NCOLS, int ROWS, int UNROLL, bool WIDE, typename A>
static __device__ __forceinline__ void
mmvq_accumulate_warp(const typename WeightFormat<TYPE>::block *const (&rows)[ROWS],
                     const A (&cols)[NCOLS], int ncols, int blocks_per_row, int lane,
                     float (&acc)[NCOLS][ROWS]) {
    if constexpr (WIDE && WeightFormat<TYPE>::wide) {
        mmvq_accumulate_wide<TYPE, NCOLS, ROWS, UNROLL>(rows, cols, ncols, blocks_per_row, lane,
                                                        acc);
    } else {
        const block_q8_1 *ptrs[NCOLS];
#pragma unroll
        for (int j = 0; j < NCOLS; ++j) {
            ptrs[j] = cols[j].y;
        }
        mmvq_accumulate<TYPE, NCOLS, ROWS, WARP_SIZE, UNROLL>(rows, ptrs, ncols, blocks_per_row,
                                                              lane, acc);
    }
}

// The `n` bytes at `p` asked of L1 by the warp's lanes, a 128-byte line a lane and request (the
// last request, clamped to the last byte, takes the line the bytes end in). Nothing is read
// into registers, so no bits change.
static __device__ __forceinline__ void bytes_to_l1(const char *p, int n, int lane) {
    for (int off = lane * 128; off < n + 127; off += WARP_SIZE * 128) {
        asm volatile("prefetch.global.L1 [%0];" ::"l"(p + min(off, n - 1)));
    }
}

// Asks L1 for the ROWS rows (`bytes` each) a warp is about to walk, so that every line is on its
// way at once. The walk itself holds only some rows' loads in its registers at a time and waits
// on memory once a round: about eight rounds a warp in the one-token expert kernels, which is
// what their time is (session 36's ncu).
template <int ROWS, typename B>
static __device__ __forceinline__ void rows_to_l1(const B *const (&rows)[ROWS], int bytes,
                                                  int lane) {
#pragma unroll
    for (int i = 0; i < ROWS; ++i) {
        bytes_to_l1((const char *)rows[i], bytes, lane);
    }
}

// Shared memory stage_q8_1 needs for n Q8_1 blocks: 32 code bytes and a 4-byte scale each.
#define Q8_STAGE_BYTES(n) ((n) * 36)

// With `stage`, copies Q8_1 blocks [0, n) of y into the block's dynamic shared memory
// (Q8_STAGE_BYTES(n), given at launch) as Q8Shared reads them: the n blocks' codes, then their
// scales; by all of the block's threads, with coalesced 4-byte loads, then a barrier. Without,
// an empty view (and no barrier). Every thread of the block calls it, before any returns. Wide
// walks read every activation block once a row: from shared memory, a 16-byte load where
// global memory took four 4-byte ones at 36-byte strides.
static __device__ __forceinline__ Q8Shared stage_q8_1(bool stage, const block_q8_1 *y, int n) {
    extern __shared__ int4 q8_stage[];
    if (!stage) {
        return Q8Shared{};
    }
    int *q = (int *)q8_stage;
    float *d = (float *)q8_stage + 8 * n;
    const int *src = (const int *)y;
    const int tid = threadIdx.y * blockDim.x + threadIdx.x, nt = blockDim.x * blockDim.y;
    for (int i = tid; i < 9 * n; i += nt) {
        const int b = i / 9, w = i % 9, v = src[i];
        if (w == 0) {
            d[b] = __int_as_float(v);
        } else {
            q[8 * b + w - 1] = v;
        }
    }
    __syncthreads();
    return Q8Shared{(const int4 *)q, d};
}

// Asks L2 (L1 with `l1`) for rows [row0, row0 + count) of a weight matrix (clamped to nrows),
// spread over the block's threads, a 128-byte line each. Weights never depend on an earlier
// kernel, so a kernel may do this before waiting for the one ahead of it: under programmatic
// dependent launch (ops/launch.rs) its weights then stream in while that kernel finishes. L1
// is the asking SM's, which is where the block that asks reads them.
template <int TYPE>
static __device__ __forceinline__ void prefetch_rows_l2(const void *w, int ncols, int nrows,
                                                        int row0, int count, bool l1 = false) {
    typedef WeightFormat<TYPE> F;
    const size_t row_bytes = (size_t)(ncols / F::qk) * sizeof(typename F::block);
    const int row1 = min(nrows, row0 + count);
    if (row0 >= row1) {
        return;
    }
    const char *p = (const char *)w + (size_t)row0 * row_bytes;
    const size_t bytes = (size_t)(row1 - row0) * row_bytes;
    const int tid = threadIdx.y * blockDim.x + threadIdx.x, nt = blockDim.x * blockDim.y;
    for (size_t off = (size_t)tid * 128; off < bytes; off += (size_t)nt * 128) {
        if (l1) {
            asm volatile("prefetch.global.L1 [%0];" ::"l"(p + off));
        } else {
            asm volatile("prefetch.global.L2 [%0];" ::"l"(p + off));
        }
    }
}

// A mat-vec kernel's first statement in place of dependent_launch_entry(): its block's weight
// rows of `a` (and of `b`, when given) requested from L2 when `prefetch` (from L1 when it is
// 2: FERROLM_CUDA_PREFETCH_L1), then the wait.
template <int TYPE>
static __device__ __forceinline__ void weights_to_l2_then_wait(int prefetch, const void *a,
                                                               const void *b, int ncols,
                                                               int nrows_a, int nrows_b,
                                                               int row0, int count) {
    if (prefetch) {
        prefetch_rows_l2<TYPE>(a, ncols, nrows_a, row0, count, prefetch == 2);
        if (b != nullptr) {
            prefetch_rows_l2<TYPE>(b, ncols, nrows_b, row0, count, prefetch == 2);
        }
    }
    dependent_launch_entry();
}
