// Quantized mat-vec for decode: dst[j][row] = W[row] · y[j] for up to 8 activation columns,
// W in a ggml block format, y already quantized to Q8_1 (quantize.cu). One template over the
// format traits of quant.cuh; the extern "C" entry points at the end only name instances.
//
// Launch (crates/cuda/src/ops/mmvq.rs must agree): block (32, MMVQ_NWARPS), grid
// ceil(nrows / mmvq_rows(ncols)). All the block's threads walk the row's weight blocks together
// (mmvq_accumulate in mmvq.cuh); the partial sums meet in shared memory and one warp reduces them.
// Every entry's `prefetch` has the block ask L2 for its weight rows before it waits for the
// kernel ahead (weights_to_l2_then_wait in mmvq.cuh); the results do not change. `bias` (and
// the pair kernels' bias_a, bias_b): null, or a vector added to each output row (q/k/v/o
// biases), as add_bias_f32 adds it, so fused and separate agree bit for bit.
#include "common.cuh"
#include "quant.cuh"
#include "mmvq.cuh"
#include "norm.cuh"

#define MMVQ_NWARPS 4
#define MMVQ_MAX_COLS 8

// Output v of row `row`, plus that row's bias when there is one.
static __device__ __forceinline__ float with_bias(float v, const float *__restrict__ bias,
                                                  int row) {
    return bias != nullptr ? __fadd_rn(v, bias[row]) : v;
}

// Rows per CUDA block: with several columns, two rows share each activation load.
template <int NCOLS> struct MmvqRows {
    static constexpr int value = NCOLS == 1 ? 1 : 2;
};

template <int TYPE, int NCOLS>
static __device__ __forceinline__ void mul_mat_vec_q(const void *__restrict__ vx,
                                                     const block_q8_1 *__restrict__ vy,
                                                     float *__restrict__ dst,
                                                     const float *__restrict__ bias, int ncols_x,
                                                     int nrows_x, int bx) {
    typedef WeightFormat<TYPE> F;
    constexpr int ROWS = MmvqRows<NCOLS>::value;
    constexpr int THREADS = MMVQ_NWARPS * WARP_SIZE;

    const int tid = threadIdx.y * WARP_SIZE + threadIdx.x;
    const int row0 = bx * ROWS;
    const int blocks_per_row = ncols_x / F::qk;
    const int blocks_per_col_y = ncols_x / QK8_1;
    const typename F::block *x = (const typename F::block *)vx;

    // A last odd row re-reads its neighbour rather than branching; never written.
    const typename F::block *rows[ROWS];
#pragma unroll
    for (int i = 0; i < ROWS; ++i) {
        rows[i] = x + (size_t)min(row0 + i, nrows_x - 1) * blocks_per_row;
    }
    const block_q8_1 *cols[NCOLS];
#pragma unroll
    for (int j = 0; j < NCOLS; ++j) {
        cols[j] = vy + (size_t)j * blocks_per_col_y;
    }

    float acc[NCOLS][ROWS];
#pragma unroll
    for (int j = 0; j < NCOLS; ++j) {
#pragma unroll
        for (int i = 0; i < ROWS; ++i) {
            acc[j][i] = 0.0f;
        }
    }
    // The compiler's own choice, except where it unrolled the loop before the loop moved to
    // mmvq.cuh (Q4_K, one column) and now would not: kept as the timings in docs/parity.md saw it.
    constexpr int UNROLL = TYPE == GGML_TYPE_Q4_K && NCOLS == 1 ? 2 : 0;
    mmvq_accumulate<TYPE, NCOLS, ROWS, THREADS, UNROLL>(rows, cols, NCOLS, blocks_per_row, tid,
                                                        acc);

    __shared__ float partial[MMVQ_NWARPS - 1][NCOLS][ROWS][WARP_SIZE];
    if (threadIdx.y > 0) {
#pragma unroll
        for (int j = 0; j < NCOLS; ++j) {
#pragma unroll
            for (int i = 0; i < ROWS; ++i) {
                partial[threadIdx.y - 1][j][i][threadIdx.x] = acc[j][i];
            }
        }
    }
    __syncthreads();
    if (threadIdx.y > 0) {
        return;
    }
#pragma unroll
    for (int j = 0; j < NCOLS; ++j) {
#pragma unroll
        for (int i = 0; i < ROWS; ++i) {
#pragma unroll
            for (int w = 0; w < MMVQ_NWARPS - 1; ++w) {
                acc[j][i] += partial[w][j][i][threadIdx.x];
            }
            acc[j][i] = warp_sum(acc[j][i]);
            // Compile-time i: the accumulators stay in registers.
            if (threadIdx.x == i && row0 + i < nrows_x) {
                dst[(size_t)j * nrows_x + row0 + i] = with_bias(acc[j][i], bias, row0 + i);
            }
        }
    }
}

#define MMVQ_ENTRY(NAME, TYPE, N)                                                                   \
    extern "C" __global__ void __launch_bounds__(MMVQ_NWARPS *WARP_SIZE)                            \
        mmvq_##NAME##_n##N(const void *__restrict__ vx, const block_q8_1 *__restrict__ vy,          \
                           float *__restrict__ dst, const float *__restrict__ bias, int ncols_x,   \
                           int nrows_x, int prefetch) {                                             \
        weights_to_l2_then_wait<TYPE>(prefetch, vx, nullptr, ncols_x, nrows_x, 0,                  \
                                      blockIdx.x * MmvqRows<N>::value, MmvqRows<N>::value);         \
        mul_mat_vec_q<TYPE, N>(vx, vy, dst, bias, ncols_x, nrows_x, blockIdx.x);                    \
    }

#define MMVQ_FORMAT(NAME, TYPE)                                                                     \
    MMVQ_ENTRY(NAME, TYPE, 1)                                                                       \
    MMVQ_ENTRY(NAME, TYPE, 2)                                                                       \
    MMVQ_ENTRY(NAME, TYPE, 3)                                                                       \
    MMVQ_ENTRY(NAME, TYPE, 4)                                                                       \
    MMVQ_ENTRY(NAME, TYPE, 5)                                                                       \
    MMVQ_ENTRY(NAME, TYPE, 6)                                                                       \
    MMVQ_ENTRY(NAME, TYPE, 7)                                                                       \
    MMVQ_ENTRY(NAME, TYPE, 8)

MMVQ_FORMAT(q4_0, GGML_TYPE_Q4_0)
MMVQ_FORMAT(q4_1, GGML_TYPE_Q4_1)
MMVQ_FORMAT(q5_0, GGML_TYPE_Q5_0)
MMVQ_FORMAT(q5_1, GGML_TYPE_Q5_1)
MMVQ_FORMAT(q8_0, GGML_TYPE_Q8_0)
MMVQ_FORMAT(q4_k, GGML_TYPE_Q4_K)
MMVQ_FORMAT(q5_k, GGML_TYPE_Q5_K)
MMVQ_FORMAT(q6_k, GGML_TYPE_Q6_K)
MMVQ_FORMAT(mxfp4, GGML_TYPE_MXFP4)

// The pair kernels' outputs for row `row`, from the two finished dots: with GLU, silu(a) * b
// (swiglu_f32's expression, so fused and unfused agree bit for bit); without, each that exists.
template <bool GLU>
static __device__ __forceinline__ void store_pair(const float (&ab)[2], int row, bool has_a,
                                                  bool has_b, float *dst_a, float *dst_b,
                                                  const float *bias_a, const float *bias_b) {
    if (GLU) {
        dst_a[row] = silu_mul(ab[0], ab[1]);
    } else {
        if (has_a) {
            dst_a[row] = with_bias(ab[0], bias_a, row);
        }
        if (has_b) {
            dst_b[row] = with_bias(ab[1], bias_b, row);
        }
    }
}

// Two mat-vecs over one Q8_1 activation row in one launch, for decode: row r of A and row r of
// B (both in format TYPE, same ncols). With GLU, dst_a[r] = silu(A[r]·y) * (B[r]·y) (gate and
// up with SwiGLU fused; nrows_a == nrows_b); without, dst_a[r] = A[r]·y for r < nrows_a and
// dst_b[r] = B[r]·y for r < nrows_b (q and k). Each dot product is summed exactly as
// mul_mat_vec_q<TYPE, 1> sums it, so the results are bit-identical to two separate launches.
// Launch: block (32, MMVQ_NWARPS), grid max(nrows_a, nrows_b).
template <int TYPE, bool GLU>
static __device__ __forceinline__ void mul_mat_vec_q_pair(
    const void *__restrict__ va, const void *__restrict__ vb, const block_q8_1 *__restrict__ vy,
    float *__restrict__ dst_a, float *__restrict__ dst_b, const float *__restrict__ bias_a,
    const float *__restrict__ bias_b, int ncols_x, int nrows_a, int nrows_b) {
    typedef WeightFormat<TYPE> F;
    constexpr int THREADS = MMVQ_NWARPS * WARP_SIZE;
    constexpr int THREADS_PER_BLOCK = F::qi / F::vdr;
    constexpr int BLOCKS_PER_ITER = THREADS / THREADS_PER_BLOCK;

    const int tid = threadIdx.y * WARP_SIZE + threadIdx.x;
    const int row = blockIdx.x;
    const bool has_a = row < nrows_a, has_b = row < nrows_b;
    const int blocks_per_row = ncols_x / F::qk;
    const typename F::block *a = (const typename F::block *)va + (size_t)row * blocks_per_row;
    const typename F::block *b = (const typename F::block *)vb + (size_t)row * blocks_per_row;

    float acc[2] = {0.0f, 0.0f};
    const int iqs = F::vdr * (tid % THREADS_PER_BLOCK);
    for (int kbx = tid / THREADS_PER_BLOCK; kbx < blocks_per_row; kbx += BLOCKS_PER_ITER) {
        const int kby = kbx * (F::qk / QK8_1);
        if (has_a) {
            acc[0] += F::vec_dot(a + kbx, vy + kby, iqs);
        }
        if (has_b) {
            acc[1] += F::vec_dot(b + kbx, vy + kby, iqs);
        }
    }

    __shared__ float partial[MMVQ_NWARPS - 1][2][WARP_SIZE];
    if (threadIdx.y > 0) {
        partial[threadIdx.y - 1][0][threadIdx.x] = acc[0];
        partial[threadIdx.y - 1][1][threadIdx.x] = acc[1];
    }
    __syncthreads();
    if (threadIdx.y > 0) {
        return;
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
#pragma unroll
        for (int w = 0; w < MMVQ_NWARPS - 1; ++w) {
            acc[i] += partial[w][i][threadIdx.x];
        }
        acc[i] = warp_sum(acc[i]);
    }
    if (threadIdx.x == 0) {
        store_pair<GLU>(acc, row, has_a, has_b, dst_a, dst_b, bias_a, bias_b);
    }
}

#define MMVQ_PAIR_ENTRIES(NAME, TYPE)                                                               \
    extern "C" __global__ void __launch_bounds__(MMVQ_NWARPS *WARP_SIZE) mmvq_pair_##NAME(         \
        const void *__restrict__ va, const void *__restrict__ vb,                                   \
        const block_q8_1 *__restrict__ vy, float *__restrict__ dst_a, float *__restrict__ dst_b,   \
        const float *__restrict__ bias_a, const float *__restrict__ bias_b, int ncols_x,            \
        int nrows_a, int nrows_b, int prefetch) {                                                   \
        weights_to_l2_then_wait<TYPE>(prefetch, va, vb, ncols_x, nrows_a, nrows_b,                  \
                                      blockIdx.x, 1);                                               \
        mul_mat_vec_q_pair<TYPE, false>(va, vb, vy, dst_a, dst_b, bias_a, bias_b, ncols_x, nrows_a, \
                                        nrows_b);                                                   \
    }                                                                                               \
    extern "C" __global__ void __launch_bounds__(MMVQ_NWARPS *WARP_SIZE) mmvq_glu_##NAME(          \
        const void *__restrict__ va, const void *__restrict__ vb,                                   \
        const block_q8_1 *__restrict__ vy, float *__restrict__ dst_a, float *__restrict__ dst_b,   \
        const float *__restrict__ bias_a, const float *__restrict__ bias_b, int ncols_x,            \
        int nrows_a, int nrows_b, int prefetch) {                                                   \
        weights_to_l2_then_wait<TYPE>(prefetch, va, vb, ncols_x, nrows_a, nrows_b,                  \
                                      blockIdx.x, 1);                                               \
        mul_mat_vec_q_pair<TYPE, true>(va, vb, vy, dst_a, dst_b, bias_a, bias_b, ncols_x, nrows_a,  \
                                       nrows_b);                                                    \
    }

MMVQ_PAIR_ENTRIES(q4_0, GGML_TYPE_Q4_0)
MMVQ_PAIR_ENTRIES(q4_1, GGML_TYPE_Q4_1)
MMVQ_PAIR_ENTRIES(q5_0, GGML_TYPE_Q5_0)
MMVQ_PAIR_ENTRIES(q5_1, GGML_TYPE_Q5_1)
MMVQ_PAIR_ENTRIES(q8_0, GGML_TYPE_Q8_0)
MMVQ_PAIR_ENTRIES(q4_k, GGML_TYPE_Q4_K)
MMVQ_PAIR_ENTRIES(q5_k, GGML_TYPE_Q5_K)
MMVQ_PAIR_ENTRIES(q6_k, GGML_TYPE_Q6_K)
MMVQ_PAIR_ENTRIES(mxfp4, GGML_TYPE_MXFP4)

// ---- the wide walk (mmvq.cuh): a warp per row, for Q4_K and Q8_0 ------------------------------
// (Q6_K has a wide walk too, which the MoE kernels use, but as a dense mat-vec it measured slower
// than the kernels above: docs/perf.md.)
// Same results as above up to f32 summation order; FERROLM_MMVQ_WIDE=0 goes back to the kernels
// above. Launch: block (32, MMVQ_NWARPS), grid ceil(nrows / (MMVQ_NWARPS * mmvq_rows(ncols)))
// for mmvq_wide_*, ceil(max(nrows_a, nrows_b) / MMVQ_NWARPS) for the pair and GLU kernels.
#define WIDE_UNROLL(N) ((N) <= 2 ? 4 : 1)

template <int TYPE, int NCOLS>
static __device__ __forceinline__ void mul_mat_vec_q_wide(const void *__restrict__ vx,
                                                          const block_q8_1 *__restrict__ vy,
                                                          float *__restrict__ dst,
                                                          const float *__restrict__ bias,
                                                          int ncols_x, int nrows_x, int stage,
                                                          int bx) {
    typedef WeightFormat<TYPE> F;
    constexpr int ROWS = MmvqRows<NCOLS>::value;
    const int blocks_per_row = ncols_x / F::qk;
    const int blocks_per_col_y = ncols_x / QK8_1;
    // With `stage`, the activations come through shared memory (every warp of the block first).
    const Q8Shared ys = stage_q8_1(stage, vy, NCOLS * blocks_per_col_y);
    const int row0 = (bx * MMVQ_NWARPS + threadIdx.y) * ROWS;
    if (row0 >= nrows_x) {
        return; // whole warps
    }
    const typename F::block *x = (const typename F::block *)vx;
    const typename F::block *rows[ROWS];
#pragma unroll
    for (int i = 0; i < ROWS; ++i) {
        rows[i] = x + (size_t)min(row0 + i, nrows_x - 1) * blocks_per_row;
    }
    float acc[NCOLS][ROWS] = {};
    if (stage) {
        Q8Shared cols[NCOLS];
#pragma unroll
        for (int j = 0; j < NCOLS; ++j) {
            cols[j] = Q8Shared{ys.q + 2 * j * blocks_per_col_y, ys.s + j * blocks_per_col_y};
        }
        mmvq_accumulate_wide<TYPE, NCOLS, ROWS, WIDE_UNROLL(NCOLS)>(rows, cols, NCOLS,
                                                                    blocks_per_row, threadIdx.x,
                                                                    acc);
    } else {
        Q8Global cols[NCOLS];
#pragma unroll
        for (int j = 0; j < NCOLS; ++j) {
            cols[j] = Q8Global{vy + (size_t)j * blocks_per_col_y};
        }
        mmvq_accumulate_wide<TYPE, NCOLS, ROWS, WIDE_UNROLL(NCOLS)>(rows, cols, NCOLS,
                                                                    blocks_per_row, threadIdx.x,
                                                                    acc);
    }
#pragma unroll
    for (int j = 0; j < NCOLS; ++j) {
#pragma unroll
        for (int i = 0; i < ROWS; ++i) {
            const float v = warp_sum(acc[j][i]);
            if (threadIdx.x == 0 && row0 + i < nrows_x) {
                dst[(size_t)j * nrows_x + row0 + i] = with_bias(v, bias, row0 + i);
            }
        }
    }
}

// A row's one or two dots from the activations `y` (Q8Global or Q8Shared).
template <int TYPE, typename A>
static __device__ __forceinline__ void wide_pair_dots(const typename WeightFormat<TYPE>::block *a,
                                                      const typename WeightFormat<TYPE>::block *b,
                                                      bool has_a, bool has_b, const A &y,
                                                      int blocks_per_row, float (&ab)[2]) {
    typedef typename WeightFormat<TYPE>::block B;
    const A cols[1] = {y};
    if (has_a && has_b) {
        const B *const rows[2] = {a, b};
        float acc[1][2] = {};
        mmvq_accumulate_wide<TYPE, 1, 2, 4>(rows, cols, 1, blocks_per_row, threadIdx.x, acc);
        ab[0] = acc[0][0];
        ab[1] = acc[0][1];
    } else {
        const B *const rows[1] = {has_a ? a : b};
        float acc[1][1] = {};
        mmvq_accumulate_wide<TYPE, 1, 1, 4>(rows, cols, 1, blocks_per_row, threadIdx.x, acc);
        ab[has_a ? 0 : 1] = acc[0][0];
    }
}

// The pair and GLU kernels' contract (see mul_mat_vec_q_pair) with a warp per row r. A row that
// only one matrix has is walked alone, so every dot is summed as mul_mat_vec_q_wide<TYPE, 1>
// sums it.
template <int TYPE, bool GLU>
static __device__ __forceinline__ void mul_mat_vec_q_wide_pair(
    const void *__restrict__ va, const void *__restrict__ vb, const block_q8_1 *__restrict__ vy,
    float *__restrict__ dst_a, float *__restrict__ dst_b, const float *__restrict__ bias_a,
    const float *__restrict__ bias_b, int ncols_x, int nrows_a, int nrows_b, int stage, int bx) {
    typedef WeightFormat<TYPE> F;
    typedef typename F::block B;
    const int blocks_per_row = ncols_x / F::qk;
    const Q8Shared ys = stage_q8_1(stage, vy, ncols_x / QK8_1);
    const int row = bx * MMVQ_NWARPS + threadIdx.y;
    const bool has_a = row < nrows_a, has_b = row < nrows_b;
    if (!has_a && !has_b) {
        return; // whole warps
    }
    const B *a = (const B *)va + (size_t)row * blocks_per_row;
    const B *b = (const B *)vb + (size_t)row * blocks_per_row;
    float ab[2] = {0.0f, 0.0f};
    if (stage) {
        wide_pair_dots<TYPE>(a, b, has_a, has_b, ys, blocks_per_row, ab);
    } else {
        wide_pair_dots<TYPE>(a, b, has_a, has_b, Q8Global{vy}, blocks_per_row, ab);
    }
    ab[0] = warp_sum(ab[0]);
    ab[1] = warp_sum(ab[1]);
    if (threadIdx.x == 0) {
        store_pair<GLU>(ab, row, has_a, has_b, dst_a, dst_b, bias_a, bias_b);
    }
}

#define MMVQ_WIDE_ENTRY(NAME, TYPE, N)                                                              \
    extern "C" __global__ void __launch_bounds__(MMVQ_NWARPS *WARP_SIZE)                            \
        mmvq_wide_##NAME##_n##N(const void *__restrict__ vx, const block_q8_1 *__restrict__ vy,     \
                                float *__restrict__ dst, const float *__restrict__ bias,            \
                                int ncols_x, int nrows_x, int prefetch, int stage) {                \
        weights_to_l2_then_wait<TYPE>(prefetch, vx, nullptr, ncols_x, nrows_x, 0,                  \
                                      blockIdx.x * MMVQ_NWARPS * MmvqRows<N>::value,                \
                                      MMVQ_NWARPS * MmvqRows<N>::value);                            \
        mul_mat_vec_q_wide<TYPE, N>(vx, vy, dst, bias, ncols_x, nrows_x, stage, blockIdx.x);        \
    }

#define MMVQ_WIDE_FORMAT(NAME, TYPE)                                                                \
    MMVQ_WIDE_ENTRY(NAME, TYPE, 1)                                                                  \
    MMVQ_WIDE_ENTRY(NAME, TYPE, 2)                                                                  \
    MMVQ_WIDE_ENTRY(NAME, TYPE, 3)                                                                  \
    MMVQ_WIDE_ENTRY(NAME, TYPE, 4)                                                                  \
    MMVQ_WIDE_ENTRY(NAME, TYPE, 5)                                                                  \
    MMVQ_WIDE_ENTRY(NAME, TYPE, 6)                                                                  \
    MMVQ_WIDE_ENTRY(NAME, TYPE, 7)                                                                  \
    MMVQ_WIDE_ENTRY(NAME, TYPE, 8)                                                                  \
    extern "C" __global__ void __launch_bounds__(MMVQ_NWARPS *WARP_SIZE) mmvq_wide_pair_##NAME(    \
        const void *__restrict__ va, const void *__restrict__ vb,                                   \
        const block_q8_1 *__restrict__ vy, float *__restrict__ dst_a, float *__restrict__ dst_b,   \
        const float *__restrict__ bias_a, const float *__restrict__ bias_b, int ncols_x,            \
        int nrows_a, int nrows_b, int prefetch, int stage) {                                        \
        weights_to_l2_then_wait<TYPE>(prefetch, va, vb, ncols_x, nrows_a, nrows_b,                  \
                                      blockIdx.x * MMVQ_NWARPS, MMVQ_NWARPS);                       \
        mul_mat_vec_q_wide_pair<TYPE, false>(va, vb, vy, dst_a, dst_b, bias_a, bias_b, ncols_x,    \
                                             nrows_a, nrows_b, stage, blockIdx.x);                  \
    }                                                                                               \
    extern "C" __global__ void __launch_bounds__(MMVQ_NWARPS *WARP_SIZE) mmvq_wide_glu_##NAME(     \
        const void *__restrict__ va, const void *__restrict__ vb,                                   \
        const block_q8_1 *__restrict__ vy, float *__restrict__ dst_a, float *__restrict__ dst_b,   \
        const float *__restrict__ bias_a, const float *__restrict__ bias_b, int ncols_x,            \
        int nrows_a, int nrows_b, int prefetch, int stage) {                                        \
        weights_to_l2_then_wait<TYPE>(prefetch, va, vb, ncols_x, nrows_a, nrows_b,                  \
                                      blockIdx.x * MMVQ_NWARPS, MMVQ_NWARPS);                       \
        mul_mat_vec_q_wide_pair<TYPE, true>(va, vb, vy, dst_a, dst_b, bias_a, bias_b, ncols_x,     \
                                            nrows_a, nrows_b, stage, blockIdx.x);                   \
    }

MMVQ_WIDE_FORMAT(q4_k, GGML_TYPE_Q4_K)
MMVQ_WIDE_FORMAT(q8_0, GGML_TYPE_Q8_0)

// ---- q, k and v of one token in one launch (FERROLM_QKV_ONE) ---------------------------------
// Blocks below pair_blocks are mmvq_wide_pair_<AB>'s blocks (a and b: q and k), the rest the
// blocks of c's own launch (v), block bx - pair_blocks of it: the wide walk (WIDE_C), or the
// block-per-row kernel (Q6_K, whose dense wide walk measured slower). Each block runs the
// routine and block index of the launch it replaces: the same bits as the two launches. No
// activation staging (the launcher takes this kernel only without it). Launch: block (32,
// MMVQ_NWARPS), grid pair_blocks + the blocks of c's launch.
template <int TAB, int TC, bool WIDE_C>
static __device__ __forceinline__ void
mmvq_triple_then_wait(int prefetch, const void *va, const void *vb, const void *vc, int ncols_x,
                      int nrows_a, int nrows_b, int nrows_c, int pair_blocks) {
    const int bx = blockIdx.x;
    if (bx < pair_blocks) {
        weights_to_l2_then_wait<TAB>(prefetch, va, vb, ncols_x, nrows_a, nrows_b,
                                     bx * MMVQ_NWARPS, MMVQ_NWARPS);
    } else {
        const int rows = WIDE_C ? MMVQ_NWARPS : 1;
        weights_to_l2_then_wait<TC>(prefetch, vc, nullptr, ncols_x, nrows_c, 0,
                                    (bx - pair_blocks) * rows, rows);
    }
}

template <int TAB, int TC, bool WIDE_C>
static __device__ __forceinline__ void
mmvq_triple(const void *__restrict__ va, const void *__restrict__ vb, const void *__restrict__ vc,
            const block_q8_1 *__restrict__ vy, float *__restrict__ dst_a,
            float *__restrict__ dst_b, float *__restrict__ dst_c, const float *__restrict__ bias_a,
            const float *__restrict__ bias_b, const float *__restrict__ bias_c, int ncols_x,
            int nrows_a, int nrows_b, int nrows_c, int pair_blocks) {
    const int bx = blockIdx.x;
    if (bx < pair_blocks) {
        mul_mat_vec_q_wide_pair<TAB, false>(va, vb, vy, dst_a, dst_b, bias_a, bias_b, ncols_x,
                                            nrows_a, nrows_b, 0, bx);
    } else if (WIDE_C) {
        mul_mat_vec_q_wide<TC, 1>(vc, vy, dst_c, bias_c, ncols_x, nrows_c, 0, bx - pair_blocks);
    } else {
        mul_mat_vec_q<TC, 1>(vc, vy, dst_c, bias_c, ncols_x, nrows_c, bx - pair_blocks);
    }
}

// ---- the attention's norm in the q/k/v launch (FERROLM_NORM_IN_QKV) --------------------------
// Every block takes the norm of the one token's row x (+ add) itself, as add_rms_norm_q8_1_f32
// would with its own block (add_norm_scale_as: the same bits), quantizes it into shared memory
// as that kernel quantizes it (Q8_K groups, or Q8_1 blocks: the same bytes), then runs the
// triple on that copy. With `add`, the residual x + add is written back once: each block takes
// a ticket after it has read x, and the last to arrive (every other block done reading)
// writes it and resets the ticket counter for the next launch. Shared memory (dynamic):
// NORM_TRIPLE_SMEM(n) bytes.
#define NORM_TRIPLE_MAXV 8
#define NORM_TRIPLE_SMEM(n) ((n) * 4 + (n) / QK8_1 * 36)

static __device__ __forceinline__ const block_q8_1 *
norm_into_shared(float *x, const float *__restrict__ add,
                 const float *__restrict__ norm_w, float eps, int n, int nt, int q8k,
                 unsigned *__restrict__ ticket) {
    extern __shared__ int4 norm_smem[];
    __shared__ double scratch[32];
    __shared__ unsigned my_ticket;
    float *o = (float *)norm_smem;
    block_q8_1 *q = (block_q8_1 *)(o + n);
    const int bt = blockDim.x * blockDim.y, tid = threadIdx.y * blockDim.x + threadIdx.x;
    const float scale = add_norm_scale_as<NORM_TRIPLE_MAXV>(x, add, n, nt, eps, o, scratch);
    if (add != nullptr && tid == 0) {
        my_ticket = atomicAdd(ticket, 1u); // this block's reads of x are done (the barrier above)
    }
    for (int i = tid; i < n; i += bt) {
        o[i] = __fmul_rn(__fmul_rn(o[i], scale), norm_w[i]);
    }
    __syncthreads();
    const int warp = threadIdx.y, nwarps = blockDim.y;
    if (q8k) {
        for (int g = warp; g < n / QK_K; g += nwarps) {
            quantize_q8_k_warp(o + g * QK_K, q + g * 8);
        }
    } else {
        for (int b = warp; b < n / QK8_1; b += nwarps) {
            quantize_q8_1_warp(o[b * QK8_1 + threadIdx.x], q + b);
        }
    }
    if (add != nullptr && my_ticket == gridDim.x - 1) {
        for (int i = tid; i < n; i += bt) {
            x[i] += add[i];
        }
        if (tid == 0) {
            *ticket = 0;
        }
    }
    __syncthreads();
    return q;
}

#define MMVQ_TRIPLE(NAME, TAB, TC, WIDE_C)                                                         \
    extern "C" __global__ void __launch_bounds__(MMVQ_NWARPS *WARP_SIZE) mmvq_wide_triple_##NAME( \
        const void *__restrict__ va, const void *__restrict__ vb, const void *__restrict__ vc,     \
        const block_q8_1 *__restrict__ vy, float *__restrict__ dst_a, float *__restrict__ dst_b,   \
        float *__restrict__ dst_c, const float *__restrict__ bias_a,                               \
        const float *__restrict__ bias_b, const float *__restrict__ bias_c, int ncols_x,           \
        int nrows_a, int nrows_b, int nrows_c, int pair_blocks, int prefetch) {                    \
        mmvq_triple_then_wait<TAB, TC, WIDE_C>(prefetch, va, vb, vc, ncols_x, nrows_a, nrows_b,    \
                                               nrows_c, pair_blocks);                              \
        mmvq_triple<TAB, TC, WIDE_C>(va, vb, vc, vy, dst_a, dst_b, dst_c, bias_a, bias_b, bias_c,  \
                                     ncols_x, nrows_a, nrows_b, nrows_c, pair_blocks);             \
    }                                                                                               \
    extern "C" __global__ void __launch_bounds__(MMVQ_NWARPS *WARP_SIZE) mmvq_norm_triple_##NAME( \
        float *x, const float *__restrict__ add, const float *__restrict__ norm_w,   \
        float eps, int norm_threads, int q8k, unsigned *__restrict__ ticket,                       \
        const void *__restrict__ va, const void *__restrict__ vb, const void *__restrict__ vc,     \
        float *__restrict__ dst_a, float *__restrict__ dst_b, float *__restrict__ dst_c,           \
        const float *__restrict__ bias_a, const float *__restrict__ bias_b,                        \
        const float *__restrict__ bias_c, int ncols_x, int nrows_a, int nrows_b, int nrows_c,      \
        int pair_blocks, int prefetch) {                                                           \
        mmvq_triple_then_wait<TAB, TC, WIDE_C>(prefetch, va, vb, vc, ncols_x, nrows_a, nrows_b,    \
                                               nrows_c, pair_blocks);                              \
        const block_q8_1 *vy =                                                                     \
            norm_into_shared(x, add, norm_w, eps, ncols_x, norm_threads, q8k, ticket);             \
        mmvq_triple<TAB, TC, WIDE_C>(va, vb, vc, vy, dst_a, dst_b, dst_c, bias_a, bias_b, bias_c,  \
                                     ncols_x, nrows_a, nrows_b, nrows_c, pair_blocks);             \
    }

MMVQ_TRIPLE(q4_k_q4_k, GGML_TYPE_Q4_K, GGML_TYPE_Q4_K, true)
MMVQ_TRIPLE(q4_k_q6_k, GGML_TYPE_Q4_K, GGML_TYPE_Q6_K, false)
MMVQ_TRIPLE(q8_0_q8_0, GGML_TYPE_Q8_0, GGML_TYPE_Q8_0, true)

// The FFN's norm in one token's gate/up launch (FERROLM_NORM_IN_GLU): norm_into_shared, then
// mmvq_wide_glu_<NAME>'s walk on that copy: the same bits as the norm's launch and then that
// kernel. Launch: mmvq_wide_glu's grid and block, NORM_TRIPLE_SMEM(ncols) bytes of dynamic
// shared memory.
#define MMVQ_NORM_GLU(NAME, TYPE)                                                                  \
    extern "C" __global__ void __launch_bounds__(MMVQ_NWARPS *WARP_SIZE) mmvq_norm_glu_##NAME(    \
        float *x, const float *__restrict__ add, const float *__restrict__ norm_w, float eps,      \
        int norm_threads, int q8k, unsigned *__restrict__ ticket, const void *__restrict__ va,     \
        const void *__restrict__ vb, float *__restrict__ dst, int ncols_x, int nrows_a,            \
        int nrows_b, int prefetch) {                                                               \
        weights_to_l2_then_wait<TYPE>(prefetch, va, vb, ncols_x, nrows_a, nrows_b,                 \
                                      blockIdx.x * MMVQ_NWARPS, MMVQ_NWARPS);                      \
        const block_q8_1 *vy =                                                                     \
            norm_into_shared(x, add, norm_w, eps, ncols_x, norm_threads, q8k, ticket);             \
        mul_mat_vec_q_wide_pair<TYPE, true>(va, vb, vy, dst, dst, nullptr, nullptr, ncols_x,      \
                                            nrows_a, nrows_b, 0, blockIdx.x);                      \
    }

MMVQ_NORM_GLU(q4_k, GGML_TYPE_Q4_K)
MMVQ_NORM_GLU(q8_0, GGML_TYPE_Q8_0)
