// Quantized GEMM for prefill: dst[t][r] = W[r] · y[t] for many activation rows, W in a ggml
// block format, y already quantized to Q8_1 (quantize.cu), on the int8 tensor cores
// (mma.sync s8·s8 → s32). The tile machinery is mmq_tile.cuh and mmq_mma.cuh (shared with
// moe_gemm.cu); one template over the format traits of quant.cuh and a tile shape, the
// extern "C" entry points at the end only name instances: mmq_<format>_<tile>.
//
// Launch (crates/cuda/src/ops/mmq.rs must agree): block (32, C::NWARPS), grid
// (ceil(nrows / C::BM), ceil(ntok / C::BN), splits), MmqSmem<TYPE, C, 1>::bytes of dynamic
// shared memory; ncols a multiple of MMQ_BK (of 32 for 32-element block formats: the last k
// step partly zero, mmq_tile.cuh); `order` one of MMQ_ORDER_* (mmq_mma.cuh: how
// integer-scale formats sum, ignored by the others). Every tile shape gives the same bits.
// Split-K (splits > 1, for GEMMs whose tiles alone leave SMs idle: a batched decode step's
// few rows): share z takes k steps z·split_steps.. into part[z] (splits × ntok × nrows
// floats), and each tile's last share adds them in z order into dst; done[] holds a zeroed
// counter per tile (x + y·gridDim.x). Bits depend on the split count, not on timing.
#include "common.cuh"
#include "quant.cuh"
#include "mmq_tile.cuh"
#include "mmq_mma.cuh"

// The tile shapes (mmq.rs MMQ_TILES): 8 warps of 32 × 64, 8 warps of 32 × 32, 4 warps of
// 32 × 32 (two blocks fit an SM: for matrices too small to fill the GPU with larger tiles),
// and 4 warps of 32 × 32 over 32 tokens (a batched decode step's few rows: a 64-token tile
// would compute half or more of its columns for nothing).
typedef MmqCfg<128, 128, 4, 2> MmqTile128x128;
typedef MmqCfg<128, 64, 4, 2> MmqTile128x64;
typedef MmqCfg<64, 64, 2, 2> MmqTile64x64;
typedef MmqCfg<128, 32, 4, 1> MmqTile128x32;

template <int TYPE, class C, int ORDERS>
static __device__ __forceinline__ void mul_mat_q(const void *__restrict__ vx,
                                                 const block_q8_1 *__restrict__ vy,
                                                 float *__restrict__ dst, int ncols, int nrows,
                                                 int ntok, int order, float *__restrict__ part,
                                                 unsigned *__restrict__ done, int split_steps) {
    extern __shared__ __align__(16) char mmq_smem[];
    __shared__ int yrow[C::BN];
    mmq_check_smem<TYPE, C, 1>();

    const int tid = threadIdx.y * WARP_SIZE + threadIdx.x;
    const int row0 = blockIdx.x * C::BM, tok0 = blockIdx.y * C::BN;
    for (int i = tid; i < C::BN; i += C::THREADS) {
        yrow[i] = tok0 + i < ntok ? tok0 + i : -1; // tokens past the end are zeros
    }
    float acc[1][C::TM][C::TN][4], accm[1][C::TM][C::TN][4];
    mmq_acc_zero<C>(acc[0]);
    mmq_acc_zero<C>(accm[0]);
    const void *const w[1] = {vx};
    __syncthreads();
    const int splits = gridDim.z, ks0 = blockIdx.z * split_steps;
    const int steps = mmq_k_steps(ncols);
    const int ks1 = splits == 1 ? steps : min(steps, ks0 + split_steps);
    mmq_k_loop<TYPE, C, 1, ORDERS>(mmq_smem, w, nrows, row0, vy, yrow, ncols, order, acc, accm,
                                   ks0, ks1);

    // Unsplit, the tile goes straight to dst; a split writes its share to part[z] instead.
    float *out = splits == 1 ? dst : part + (size_t)blockIdx.z * ntok * nrows;
#pragma unroll
    for (int tm = 0; tm < C::TM; ++tm) {
#pragma unroll
        for (int tn = 0; tn < C::TN; ++tn) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int row = row0 + mmq_acc_row<C>(tm, i), tok = tok0 + mmq_acc_col<C>(tn, i);
                if (row < nrows && tok < ntok) {
                    out[(size_t)tok * nrows + row] = acc[0][tm][tn][i] - accm[0][tm][tn][i];
                }
            }
        }
    }
    if (splits == 1) {
        return;
    }
    add_splits_if_last<16>(done, blockIdx.y * gridDim.x + blockIdx.x, dst, part,
                           (size_t)ntok * nrows, splits, nrows, tok0, min(C::BN, ntok - tok0),
                           row0, min(C::BM, nrows - row0), tid, C::THREADS);
}

// The CUDA-core GEMM for 32-element block formats, in the CPU's arithmetic, for what the
// tensor-core tiles do not take: short Q8_0 and Q5_0 ubatches, and rows whose length is not a
// multiple of MMQ_BK (SmolLM2-135M's 576, Qwen2.5-0.5B's 896). Bit-identical to the CPU:
// - Q8_0 and Q5_0 in the CPU's eight-lane order (ferrolm_cpu::matmul::lanes, llama.cpp's x86
//   Q8_0 and Q5_0 arithmetic): per output, lane l adds fma(d_w · d_y, Σ_{i<4} w[4l+i] ·
//   y[4l+i], lane) block after block (Q5_0's w = q - 16), and the lanes fold ((0+4) + (2+6)) +
//   ((1+5) + (3+7)) at the end;
// - Q4_0, Q4_1, Q5_1 and MXFP4 in the per-block chain of mmq_mma.cuh's MMQ_ORDER_SUBS (the
//   CPU's order; MXFP4's w are the doubled E2M1 values, d_w the halved E8M0 scale, as
//   ferrolm_cpu's mxfp4 matmul and llama.cpp's x86 MXFP4 gemm): acc = fma(d_w · d_y, Σ w·y,
//   acc), then acc = fma(m_w, d_y Σy, acc) for Q4_1 and Q5_1.
// Integer dots are exact (dp4a; |dot| <= 32 · 128 · 128 < 2^22 made f32 by the MMQ_BIAS trick).
//
// Launch (mmq.rs agrees): block (LANES_T, LANES_T), grid (ceil(nrows / LANES_BM),
// ceil(ntok / LANES_BN)); ncols % 32 == 0. Thread (tx, ty) owns rows tx + LANES_T·i
// (i < LANES_RM) and tokens ty + LANES_T·j (j < LANES_RN) of the tile; LANES_KB blocks of 32
// columns a step, staged in shared memory as aligned int8 codes (blocks are 2-byte aligned).
#define LANES_T 16
#define LANES_RM 4
#define LANES_RN 2
#define LANES_BM (LANES_T * LANES_RM)
#define LANES_BN (LANES_T * LANES_RN)
#define LANES_KB 4

template <int TYPE>
static __device__ __forceinline__ void mmq_small(const void *__restrict__ vx,
                                                 const block_q8_1 *__restrict__ vy,
                                                 float *__restrict__ dst, int ncols, int nrows,
                                                 int ntok) {
    typedef WeightFormat<TYPE> F;
    static_assert(F::qk == 32 && !F::scale16, "32-element blocks with one scale");
    constexpr bool LANES = TYPE == GGML_TYPE_Q8_0 || TYPE == GGML_TYPE_Q5_0, MIN = F::has_min;
    constexpr int NL = LANES ? 8 : 1;
    // Rows padded to 9 ints: a warp's 16 rows then fall in distinct banks.
    __shared__ int wq[LANES_KB][LANES_BM][9];
    __shared__ float wd[LANES_KB][LANES_BM], wm[LANES_KB][LANES_BM];
    __shared__ int yq[LANES_KB][LANES_BN][9];
    __shared__ float yd[LANES_KB][LANES_BN], ys[LANES_KB][LANES_BN];
    const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * LANES_T + tx;
    const int row0 = blockIdx.x * LANES_BM, tok0 = blockIdx.y * LANES_BN;
    const int nblk = ncols / QK8_1;
    const typename F::block *w = (const typename F::block *)vx;
    float acc[LANES_RM][LANES_RN][NL];
#pragma unroll
    for (int i = 0; i < LANES_RM; ++i) {
#pragma unroll
        for (int j = 0; j < LANES_RN; ++j) {
#pragma unroll
            for (int l = 0; l < NL; ++l) {
                acc[i][j][l] = 0.0f;
            }
        }
    }
    for (int b0 = 0; b0 < nblk; b0 += LANES_KB) {
        // One weight block a thread (row e / KB, block e % KB); zeros past the matrix leave
        // the sums unchanged.
        for (int e = tid; e < LANES_BM * LANES_KB; e += LANES_T * LANES_T) {
            const int r = e / LANES_KB, kb = e % LANES_KB, b = b0 + kb;
            int q[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            float d[2] = {0.0f, 0.0f}, m = 0.0f;
            if (row0 + r < nrows && b < nblk) {
                F::tile_codes(w + (size_t)(row0 + r) * nblk + b, 0, q, d, m);
            }
#pragma unroll
            for (int l = 0; l < 8; ++l) {
                wq[kb][r][l] = q[l];
            }
            wd[kb][r] = d[0];
            wm[kb][r] = m;
        }
        for (int e = tid; e < LANES_BN * LANES_KB; e += LANES_T * LANES_T) {
            const int t = e / LANES_KB, kb = e % LANES_KB, b = b0 + kb;
            const bool in = tok0 + t < ntok && b < nblk;
            const block_q8_1 *blk = vy + (size_t)(tok0 + t) * nblk + b;
            int sum = 0;
#pragma unroll
            for (int l = 0; l < 8; ++l) {
                const int v = in ? get_int_b4(blk->qs, l) : 0;
                yq[kb][t][l] = v;
                sum = sum_bytes(v, sum);
            }
            const float dy = in ? blk->d : 0.0f;
            yd[kb][t] = dy;
            ys[kb][t] = dy * (float)sum; // as mmq_act_scales
        }
        __syncthreads();
#pragma unroll
        for (int kb = 0; kb < LANES_KB; ++kb) {
            int x[LANES_RN][8];
            float dy[LANES_RN], sy[LANES_RN];
#pragma unroll
            for (int j = 0; j < LANES_RN; ++j) {
#pragma unroll
                for (int l = 0; l < 8; ++l) {
                    x[j][l] = yq[kb][ty + LANES_T * j][l];
                }
                dy[j] = yd[kb][ty + LANES_T * j];
                sy[j] = ys[kb][ty + LANES_T * j];
            }
#pragma unroll
            for (int i = 0; i < LANES_RM; ++i) {
                int q[8];
#pragma unroll
                for (int l = 0; l < 8; ++l) {
                    q[l] = wq[kb][tx + LANES_T * i][l];
                }
                const float dw = wd[kb][tx + LANES_T * i], mw = wm[kb][tx + LANES_T * i];
#pragma unroll
                for (int j = 0; j < LANES_RN; ++j) {
                    const float s = __fmul_rn(dw, dy[j]);
                    if (LANES) {
#pragma unroll
                        for (int l = 0; l < 8; ++l) {
                            const float dot = mmq_unbias(dp4a(q[l], x[j][l], MMQ_BIAS));
                            acc[i][j][l] = __fmaf_rn(s, dot, acc[i][j][l]);
                        }
                    } else {
                        int dot = MMQ_BIAS;
#pragma unroll
                        for (int l = 0; l < 8; ++l) {
                            dot = dp4a(q[l], x[j][l], dot);
                        }
                        acc[i][j][0] = __fmaf_rn(s, mmq_unbias(dot), acc[i][j][0]);
                        if (MIN) {
                            acc[i][j][0] = __fmaf_rn(mw, sy[j], acc[i][j][0]);
                        }
                    }
                }
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < LANES_RM; ++i) {
#pragma unroll
        for (int j = 0; j < LANES_RN; ++j) {
            const int row = row0 + tx + LANES_T * i, tok = tok0 + ty + LANES_T * j;
            if (row < nrows && tok < ntok) {
                const float *l = acc[i][j];
                float out = l[0];
                if (LANES) {
                    const float h0 = __fadd_rn(l[0], l[4 % NL]), h1 = __fadd_rn(l[1 % NL], l[5 % NL]);
                    const float h2 = __fadd_rn(l[2 % NL], l[6 % NL]), h3 = __fadd_rn(l[3 % NL], l[7 % NL]);
                    out = __fadd_rn(__fadd_rn(h0, h2), __fadd_rn(h1, h3));
                }
                dst[(size_t)tok * nrows + row] = out;
            }
        }
    }
}

#define MMQ_SMALL_ENTRY(NAME, TYPE)                                                                 \
    extern "C" __global__ void __launch_bounds__(LANES_T *LANES_T)                                 \
        NAME(const void *__restrict__ vx, const block_q8_1 *__restrict__ vy,                        \
             float *__restrict__ dst, int ncols, int nrows, int ntok) {                             \
        dependent_launch_entry();                                                                   \
        mmq_small<TYPE>(vx, vy, dst, ncols, nrows, ntok);                                           \
    }

MMQ_SMALL_ENTRY(mmq_q8_0_lanes, GGML_TYPE_Q8_0)
MMQ_SMALL_ENTRY(mmq_q4_0_chain, GGML_TYPE_Q4_0)
MMQ_SMALL_ENTRY(mmq_q4_1_chain, GGML_TYPE_Q4_1)
MMQ_SMALL_ENTRY(mmq_q5_0_lanes, GGML_TYPE_Q5_0)
MMQ_SMALL_ENTRY(mmq_q5_1_chain, GGML_TYPE_Q5_1)
MMQ_SMALL_ENTRY(mmq_mxfp4_chain, GGML_TYPE_MXFP4)

#define MMQ_ENTRY(NAME, TYPE, TILE)                                                                 \
    extern "C" __global__ void __launch_bounds__(MmqTile##TILE::THREADS)                            \
        mmq_##NAME##_##TILE(const void *__restrict__ vx, const block_q8_1 *__restrict__ vy,         \
                            float *__restrict__ dst, int ncols, int nrows, int ntok, int order,     \
                            float *__restrict__ part, unsigned *__restrict__ done,                  \
                            int split_steps) {                                                      \
        dependent_launch_entry();                                                                   \
        mul_mat_q<TYPE, MmqTile##TILE, MMQ_ORDERS_DENSE>(vx, vy, dst, ncols, nrows, ntok, order,    \
                                                         part, done, split_steps);                  \
    }

// The last n % 4 tokens of an integer-scale format's GEMM (MMQ_ORDER_BLOCKS), at most 3
// tokens: the smallest tile.
#define MMQ_BLOCKS_ENTRY(NAME, TYPE)                                                                \
    extern "C" __global__ void __launch_bounds__(MmqTile64x64::THREADS)                             \
        mmq_##NAME##_blocks(const void *__restrict__ vx, const block_q8_1 *__restrict__ vy,         \
                            float *__restrict__ dst, int ncols, int nrows, int ntok, int order) {   \
        dependent_launch_entry();                                                                   \
        mul_mat_q<TYPE, MmqTile64x64, MMQ_ORDERS_BLOCKS>(vx, vy, dst, ncols, nrows, ntok, order,    \
                                                         nullptr, nullptr, 0);                      \
    }

#define MMQ_FORMAT(NAME, TYPE)                                                                      \
    MMQ_ENTRY(NAME, TYPE, 128x128)                                                                  \
    MMQ_ENTRY(NAME, TYPE, 128x64)                                                                   \
    MMQ_ENTRY(NAME, TYPE, 64x64)                                                                    \
    MMQ_ENTRY(NAME, TYPE, 128x32)

MMQ_FORMAT(q4_0, GGML_TYPE_Q4_0)
MMQ_FORMAT(q4_1, GGML_TYPE_Q4_1)
MMQ_FORMAT(q5_0, GGML_TYPE_Q5_0)
MMQ_FORMAT(q5_1, GGML_TYPE_Q5_1)
MMQ_FORMAT(q8_0, GGML_TYPE_Q8_0)
MMQ_FORMAT(q4_k, GGML_TYPE_Q4_K)
MMQ_BLOCKS_ENTRY(q4_k, GGML_TYPE_Q4_K)
MMQ_FORMAT(q5_k, GGML_TYPE_Q5_K)
MMQ_FORMAT(q6_k, GGML_TYPE_Q6_K)
MMQ_FORMAT(mxfp4, GGML_TYPE_MXFP4)
