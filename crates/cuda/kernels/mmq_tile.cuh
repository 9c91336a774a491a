// The int8 tensor-core tile machinery shared by mmq.cu (dense GEMM) and moe_gemm.cu (the
// grouped per-expert GEMM): one block computes an MMQ_BM × MMQ_BN tile of W · yᵀ, MMQ_BK
// elements of k at a time.
//
// Per k step the block unpacks MMQ_BM weight rows to int8 codes in shared memory with each
// 32-element sub-block's scale d and offset m beside them (x = d * code + m; formats with a
// scale per 16 elements, F::scale16, keep two d per sub-block), copies MMQ_BN activation rows'
// Q8_1 codes with d_y and d_y * Σcodes, then each warp multiplies its 16 weight rows by all
// MMQ_BN activation rows, one integer MMA per 32-wide sub-block and 8 rows (two k=16 MMAs for
// scale16 formats), and adds d_w * d_y * isum + m_w * d_y * Σq_y to f32 registers. The offset
// term uses the exact integer sum of the activation codes, as the CPU and mmvq do.
//
// Which activation rows a tile reads is the caller's choice (`yrow`, in shared memory): the
// dense GEMM takes consecutive tokens, the MoE GEMM gathers tokens by the expert-sorted index.
// Block shape: (32, MMQ_NWARPS). Accumulator acc[n][i] of a thread holds weight row
// mmq_acc_row(i) and activation column mmq_acc_col(n, i) of the tile.
#pragma once
#ifndef FERROLM_COMMON_CUH
#error "include common.cuh and quant.cuh before mmq_tile.cuh"
#endif

#define MMQ_NWARPS 4
#define MMQ_THREADS (MMQ_NWARPS * WARP_SIZE)
#define MMQ_BM (16 * MMQ_NWARPS)
#define MMQ_BN 64
#define MMQ_BK 256
#define MMQ_SUBS (MMQ_BK / 32)
// Ints per shared row: 64 of codes plus 4 of padding, so a fragment's 32 lanes hit 32 banks.
#define MMQ_STRIDE (MMQ_BK / 4 + 4)

struct MmqWeightTile {
    int q[MMQ_BM][MMQ_STRIDE];
    float d[MMQ_BM][MMQ_SUBS][2]; // [1] only read for scale16 formats
    float m[MMQ_BM][MMQ_SUBS];
};

struct MmqActTile {
    int q[MMQ_BN][MMQ_STRIDE];
    float d[MMQ_BN][MMQ_SUBS];
    float sum[MMQ_BN][MMQ_SUBS]; // d * Σ codes
};

static __device__ __forceinline__ void mma_s8_k32(int c[4], const int a[4], const int b[2]) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Half of the k=32 fragments: a0/a1 rows g and g + 8, bytes 4t4.. of a 16-wide k slice.
static __device__ __forceinline__ void mma_s8_k16(int c[4], int a0, int a1, int b) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 "
                 "{%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};\n"
                 : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
                 : "r"(a0), "r"(a1), "r"(b));
}

static __device__ __forceinline__ int mmq_acc_row(int i) {
    return 16 * threadIdx.y + threadIdx.x / 4 + 8 * (i / 2);
}

static __device__ __forceinline__ int mmq_acc_col(int n, int i) {
    return 8 * n + 2 * (threadIdx.x % 4) + i % 2;
}

static __device__ __forceinline__ void mmq_acc_zero(float acc[MMQ_BN / 8][4]) {
#pragma unroll
    for (int n = 0; n < MMQ_BN / 8; ++n) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            acc[n][i] = 0.0f;
        }
    }
}

// Weight rows row0.. of x (blocks_per_row blocks each, nrows in all), columns k0..k0+MMQ_BK;
// rows past the end re-read the last row (their results are never written).
template <int TYPE>
static __device__ __forceinline__ void mmq_load_weights(MmqWeightTile &t,
                                                        const typename WeightFormat<TYPE>::block *x,
                                                        int blocks_per_row, int row0, int nrows,
                                                        int k0) {
    typedef WeightFormat<TYPE> F;
    const int tid = threadIdx.y * WARP_SIZE + threadIdx.x;
    for (int i = tid; i < MMQ_BM * MMQ_SUBS; i += MMQ_THREADS) {
        const int r = i / MMQ_SUBS, s = i % MMQ_SUBS;
        const int row = min(row0 + r, nrows - 1);
        const int k = k0 + 32 * s;
        int q[8];
        float d[2], m;
        F::tile_codes(x + (size_t)row * blocks_per_row + k / F::qk, (k % F::qk) / 32, q, d, m);
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            t.q[r][8 * s + j] = q[j];
        }
        t.d[r][s][0] = d[0];
        t.d[r][s][1] = d[1];
        t.m[r][s] = m;
    }
}

// Activation rows yrow[0..MMQ_BN) of y (Q8_1, blocks_per_row blocks each), columns
// k0..k0+MMQ_BK; a negative yrow is a row of zeros.
static __device__ __forceinline__ void mmq_load_acts(MmqActTile &t, const block_q8_1 *y,
                                                     int blocks_per_row, const int *yrow, int k0) {
    const int tid = threadIdx.y * WARP_SIZE + threadIdx.x;
    for (int i = tid; i < MMQ_BN * MMQ_SUBS; i += MMQ_THREADS) {
        const int n = i / MMQ_SUBS, s = i % MMQ_SUBS;
        const int row = yrow[n];
        int sum = 0;
        float d = 0.0f;
        if (row >= 0) {
            const block_q8_1 *b = y + (size_t)row * blocks_per_row + k0 / QK8_1 + s;
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                const int u = get_int_b4(b->qs, j);
                t.q[n][8 * s + j] = u;
                sum = sum_bytes(u, sum);
            }
            d = f16_bits_to_f32(b->d);
        } else {
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                t.q[n][8 * s + j] = 0;
            }
        }
        t.d[n][s] = d;
        t.sum[n][s] = d * (float)sum;
    }
}

// acc += the tile product of one loaded k step (call between two __syncthreads).
template <int TYPE>
static __device__ __forceinline__ void mmq_mma(const MmqWeightTile &w, const MmqActTile &y,
                                               float acc[MMQ_BN / 8][4]) {
    constexpr bool S16 = WeightFormat<TYPE>::scale16;
    const int g = threadIdx.x / 4, t4 = threadIdx.x % 4;
    const int r0 = 16 * threadIdx.y + g;
#pragma unroll
    for (int s = 0; s < MMQ_SUBS; ++s) {
        const int a[4] = {w.q[r0][8 * s + t4], w.q[r0 + 8][8 * s + t4], w.q[r0][8 * s + 4 + t4],
                          w.q[r0 + 8][8 * s + 4 + t4]};
        const float da0 = w.d[r0][s][0], da1 = w.d[r0 + 8][s][0];
        const float ma0 = w.m[r0][s], ma1 = w.m[r0 + 8][s];
        const float db0 = S16 ? w.d[r0][s][1] : 0.0f, db1 = S16 ? w.d[r0 + 8][s][1] : 0.0f;
#pragma unroll
        for (int n = 0; n < MMQ_BN / 8; ++n) {
            const int b[2] = {y.q[8 * n + g][8 * s + t4], y.q[8 * n + g][8 * s + 4 + t4]};
            // c0, c1: row r0, columns 8n + 2t4, +1; c2, c3: row r0 + 8, same columns.
            const int n0 = 8 * n + 2 * t4;
            const float d0 = y.d[n0][s], d1 = y.d[n0 + 1][s];
            const float s0 = y.sum[n0][s], s1 = y.sum[n0 + 1][s];
            if (S16) {
                // Two scales per sub-block: the low and high 16 elements as separate MMAs.
                int lo[4] = {0, 0, 0, 0}, hi[4] = {0, 0, 0, 0};
                mma_s8_k16(lo, a[0], a[1], b[0]);
                mma_s8_k16(hi, a[2], a[3], b[1]);
                acc[n][0] += d0 * (da0 * (float)lo[0] + db0 * (float)hi[0]) + ma0 * s0;
                acc[n][1] += d1 * (da0 * (float)lo[1] + db0 * (float)hi[1]) + ma0 * s1;
                acc[n][2] += d0 * (da1 * (float)lo[2] + db1 * (float)hi[2]) + ma1 * s0;
                acc[n][3] += d1 * (da1 * (float)lo[3] + db1 * (float)hi[3]) + ma1 * s1;
            } else {
                int c[4] = {0, 0, 0, 0};
                mma_s8_k32(c, a, b);
                acc[n][0] += da0 * d0 * (float)c[0] + ma0 * s0;
                acc[n][1] += da0 * d1 * (float)c[1] + ma0 * s1;
                acc[n][2] += da1 * d0 * (float)c[2] + ma1 * s0;
                acc[n][3] += da1 * d1 * (float)c[3] + ma1 * s1;
            }
        }
    }
}
