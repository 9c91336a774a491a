// Quantized GEMM for prefill: dst[t][r] = W[r] · y[t] for many activation rows, W in a ggml
// block format, y already quantized to Q8_1 (quantize.cu), on the int8 tensor cores
// (mma.sync m16n8k32 s8·s8 → s32). One template over the format traits of quant.cuh
// (`tile_codes`); the extern "C" entry points at the end only name instances.
//
// Launch (crates/cuda/src/ops/mmq.rs must agree): block (32, MMQ_NWARPS), grid
// (ceil(nrows / MMQ_BM), ceil(ntok / MMQ_BN)); ncols a multiple of MMQ_BK. Per k step of
// MMQ_BK = 256 elements the block unpacks MMQ_BM weight rows to int8 codes in shared memory
// with each 32-element sub-block's scale d and offset m beside them (x = d * code + m), copies
// MMQ_BN activation rows' Q8_1 codes with d_x and d_x * Σcodes, then each warp multiplies its
// 16 weight rows by all MMQ_BN tokens, one integer MMA per 32-wide sub-block and 8 tokens, and
// adds d_w * d_x * isum + m_w * d_x * Σq_x to f32 registers. The offset term uses the exact
// integer sum of the activation codes, as the CPU and mmvq do.
#include "common.cuh"
#include "quant.cuh"

#define MMQ_NWARPS 4
#define MMQ_BM (16 * MMQ_NWARPS)
#define MMQ_BN 64
#define MMQ_BK 256
#define MMQ_SUBS (MMQ_BK / 32)
// Ints per shared row: 64 of codes plus 4 of padding, so a fragment's 32 lanes hit 32 banks.
#define MMQ_STRIDE (MMQ_BK / 4 + 4)

static __device__ __forceinline__ void mma_s8(int c[4], const int a[4], const int b[2]) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

template <int TYPE>
static __device__ __forceinline__ void mul_mat_q(const void *__restrict__ vx,
                                                 const block_q8_1 *__restrict__ vy,
                                                 float *__restrict__ dst, int ncols, int nrows,
                                                 int ntok) {
    typedef WeightFormat<TYPE> F;
    constexpr int THREADS = MMQ_NWARPS * WARP_SIZE;
    __shared__ int xs[MMQ_BM][MMQ_STRIDE];
    __shared__ float xd[MMQ_BM][MMQ_SUBS], xm[MMQ_BM][MMQ_SUBS];
    __shared__ int ys[MMQ_BN][MMQ_STRIDE];
    __shared__ float yd[MMQ_BN][MMQ_SUBS], ysum[MMQ_BN][MMQ_SUBS];

    const int tid = threadIdx.y * WARP_SIZE + threadIdx.x;
    const int lane = threadIdx.x, g = lane / 4, t4 = lane % 4;
    const int row0 = blockIdx.x * MMQ_BM, tok0 = blockIdx.y * MMQ_BN;
    const int blocks_per_row = ncols / F::qk, blocks_per_tok = ncols / QK8_1;
    const typename F::block *x = (const typename F::block *)vx;

    float acc[MMQ_BN / 8][4];
#pragma unroll
    for (int n = 0; n < MMQ_BN / 8; ++n) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            acc[n][i] = 0.0f;
        }
    }

    for (int k0 = 0; k0 < ncols; k0 += MMQ_BK) {
        // Weights: MMQ_BM rows x MMQ_SUBS sub-blocks; rows past the end re-read the last row.
        for (int i = tid; i < MMQ_BM * MMQ_SUBS; i += THREADS) {
            const int r = i / MMQ_SUBS, s = i % MMQ_SUBS;
            const int row = min(row0 + r, nrows - 1);
            const int k = k0 + 32 * s;
            int q[8];
            float d, m;
            F::tile_codes(x + (size_t)row * blocks_per_row + k / F::qk, (k % F::qk) / 32, q, d, m);
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                xs[r][8 * s + j] = q[j];
            }
            xd[r][s] = d;
            xm[r][s] = m;
        }
        // Activations: tokens past the end are zeros.
        for (int i = tid; i < MMQ_BN * MMQ_SUBS; i += THREADS) {
            const int n = i / MMQ_SUBS, s = i % MMQ_SUBS;
            const int tok = tok0 + n;
            int sum = 0;
            float d = 0.0f;
            if (tok < ntok) {
                const block_q8_1 *b = vy + (size_t)tok * blocks_per_tok + k0 / QK8_1 + s;
#pragma unroll
                for (int j = 0; j < 8; ++j) {
                    const int u = get_int_b4(b->qs, j);
                    ys[n][8 * s + j] = u;
                    sum = sum_bytes(u, sum);
                }
                d = f16_bits_to_f32(b->d);
            } else {
#pragma unroll
                for (int j = 0; j < 8; ++j) {
                    ys[n][8 * s + j] = 0;
                }
            }
            yd[n][s] = d;
            ysum[n][s] = d * (float)sum;
        }
        __syncthreads();

        const int r0 = 16 * threadIdx.y + g;
#pragma unroll
        for (int s = 0; s < MMQ_SUBS; ++s) {
            const int a[4] = {xs[r0][8 * s + t4], xs[r0 + 8][8 * s + t4], xs[r0][8 * s + 4 + t4],
                              xs[r0 + 8][8 * s + 4 + t4]};
            const float da0 = xd[r0][s], da1 = xd[r0 + 8][s];
            const float ma0 = xm[r0][s], ma1 = xm[r0 + 8][s];
#pragma unroll
            for (int n = 0; n < MMQ_BN / 8; ++n) {
                const int b[2] = {ys[8 * n + g][8 * s + t4], ys[8 * n + g][8 * s + 4 + t4]};
                int c[4] = {0, 0, 0, 0};
                mma_s8(c, a, b);
                // c0, c1: row r0, tokens 8n + 2t4, +1; c2, c3: row r0 + 8, same tokens.
                const int n0 = 8 * n + 2 * t4;
                const float d0 = yd[n0][s], d1 = yd[n0 + 1][s];
                const float s0 = ysum[n0][s], s1 = ysum[n0 + 1][s];
                acc[n][0] += da0 * d0 * (float)c[0] + ma0 * s0;
                acc[n][1] += da0 * d1 * (float)c[1] + ma0 * s1;
                acc[n][2] += da1 * d0 * (float)c[2] + ma1 * s0;
                acc[n][3] += da1 * d1 * (float)c[3] + ma1 * s1;
            }
        }
        __syncthreads();
    }

    const int r = row0 + 16 * threadIdx.y + g;
#pragma unroll
    for (int n = 0; n < MMQ_BN / 8; ++n) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int row = r + 8 * (i / 2), tok = tok0 + 8 * n + 2 * t4 + i % 2;
            if (row < nrows && tok < ntok) {
                dst[(size_t)tok * nrows + row] = acc[n][i];
            }
        }
    }
}

#define MMQ_ENTRY(NAME, TYPE)                                                                       \
    extern "C" __global__ void __launch_bounds__(MMQ_NWARPS *WARP_SIZE)                             \
        mmq_##NAME(const void *__restrict__ vx, const block_q8_1 *__restrict__ vy,                  \
                   float *__restrict__ dst, int ncols, int nrows, int ntok) {                       \
        mul_mat_q<TYPE>(vx, vy, dst, ncols, nrows, ntok);                                           \
    }

MMQ_ENTRY(q4_0, GGML_TYPE_Q4_0)
MMQ_ENTRY(q4_1, GGML_TYPE_Q4_1)
MMQ_ENTRY(q8_0, GGML_TYPE_Q8_0)
MMQ_ENTRY(q4_k, GGML_TYPE_Q4_K)
MMQ_ENTRY(q5_k, GGML_TYPE_Q5_K)
