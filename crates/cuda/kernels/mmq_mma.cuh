// The MMAs and the k loop of the int8 tile GEMM (layout and loads: mmq_tile.cuh).
//
// Rounding contract (the same for every tile shape, since each output's terms are added in
// the same order: k steps, then sub-blocks, ascending): per 32-wide sub-block the MMA's
// integer dot is exact, then acc = fma(d_w * d_y, isum, acc), and for formats with a minimum
// acc = fma(m_w, d_y Σq_y, acc); scale16 formats add fma(d_y, d_lo * isum_lo + d_hi * isum_hi,
// acc). Every rounding is pinned with __fmaf_rn / __fmul_rn, so results do not depend on the
// compiler's contraction choices.
//
// Accumulator acc[tm][tn][i] of a thread holds tile row mmq_acc_row<C>(tm, i) and tile column
// (activation row) mmq_acc_col<C>(tn, i).
#pragma once
#ifndef FERROLM_COMMON_CUH
#error "include common.cuh, quant.cuh and mmq_tile.cuh before mmq_mma.cuh"
#endif

static __device__ __forceinline__ void mma_s8_k32(int c[4], const int a[4], const int b[2]) {
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Half of the k=32 fragments: a0/a1 rows g and g + 8, bytes 4t4.. of a 16-wide k slice.
static __device__ __forceinline__ void mma_s8_k16(int c[4], int a0, int a1, int b) {
    asm("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 "
        "{%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};\n"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a0), "r"(a1), "r"(b));
}

// The A fragment of a 16 × 32 int8 slice: four 8 × 16-byte matrices (rows 0-7 and 8-15, bytes
// 0-15 and 16-31), which is exactly the m16n8k32 register order a0..a3. Lane l gives the
// address of row l % 16, byte 16 * (l / 16).
static __device__ __forceinline__ void ldmatrix_x4(int a[4], unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
                 : "r"(addr));
}

// MMAs start their integer accumulators at MMQ_BIAS = 1.5 * 2^23 as f32 bits, so the result
// `MMQ_BIAS + isum` is the f32 1.5 * 2^23 + isum (|isum| <= 32 * 128 * 128 < 2^22 keeps it in
// that binade), and one exact f32 subtraction gives isum: the int-to-float conversion
// instruction, at a quarter of the FP32 rate, is never needed.
#define MMQ_BIAS 0x4B400000
static __device__ __forceinline__ float mmq_unbias(int biased) {
    return __int_as_float(biased) - 12582912.0f;
}

template <class C> static __device__ __forceinline__ int mmq_acc_row(int tm, int i) {
    return (threadIdx.y % C::WARPS_M) * C::WM + 16 * tm + threadIdx.x / 4 + 8 * (i / 2);
}

template <class C> static __device__ __forceinline__ int mmq_acc_col(int tn, int i) {
    return (threadIdx.y / C::WARPS_M) * C::WN + 8 * tn + 2 * (threadIdx.x % 4) + i % 2;
}

// acc += the product of the unpacked weight tile and the staged activations `yraw` (call
// between two __syncthreads).
template <int TYPE, class C, int NMAT>
static __device__ __forceinline__ void mmq_mma(const char *smem, const char *yraw,
                                               float (&acc)[C::TM][C::TN][4]) {
    typedef WeightFormat<TYPE> F;
    typedef MmqSmem<TYPE, C, NMAT> L;
    constexpr bool S16 = F::scale16, MIN = F::has_min;
    const float *wsc = (const float *)(smem + L::wsc);
    const float2 *ysc = (const float2 *)(smem + L::ysc);
    const int lane = threadIdx.x, g = lane / 4, t4 = lane % 4;
    const int wr = (threadIdx.y % C::WARPS_M) * C::WM, wc = (threadIdx.y / C::WARPS_M) * C::WN;
    const unsigned a_addr = (unsigned)__cvta_generic_to_shared(smem + L::wq) +
                            (wr + lane % 16) * MMQ_WQ_STRIDE + 16 * (lane / 16);
#pragma unroll
    for (int s = 0; s < MMQ_SUBS; ++s) {
        int a[C::TM][4];
        float da[C::TM][2], db[C::TM][2], ma[C::TM][2];
#pragma unroll
        for (int tm = 0; tm < C::TM; ++tm) {
            ldmatrix_x4(a[tm], a_addr + 16 * tm * MMQ_WQ_STRIDE + 32 * s);
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int r = (s * C::BM) + wr + 16 * tm + g + 8 * h;
                da[tm][h] = wsc[r];
                db[tm][h] = S16 ? wsc[MMQ_SUBS * C::BM + r] : 0.0f;
                ma[tm][h] = MIN ? wsc[(S16 ? 2 : 1) * MMQ_SUBS * C::BM + r] : 0.0f;
            }
        }
#pragma unroll
        for (int tn = 0; tn < C::TN; ++tn) {
            const int n = wc + 8 * tn;
            const int *yq = (const int *)(yraw + (n + g) * MMQ_Y_STRIDE + 36 * s + 4);
            const int b[2] = {yq[t4], yq[4 + t4]};
            // Columns n + 2t4 and n + 2t4 + 1: {d_y, d_y Σq} of each.
            const float4 ys = *(const float4 *)&ysc[s * C::BN + n + 2 * t4];
            const float dy[2] = {ys.x, ys.z}, sy[2] = {ys.y, ys.w};
#pragma unroll
            for (int tm = 0; tm < C::TM; ++tm) {
                float *c = acc[tm][tn];
                if (S16) {
                    int lo[4] = {MMQ_BIAS, MMQ_BIAS, MMQ_BIAS, MMQ_BIAS};
                    int hi[4] = {MMQ_BIAS, MMQ_BIAS, MMQ_BIAS, MMQ_BIAS};
                    mma_s8_k16(lo, a[tm][0], a[tm][1], b[0]);
                    mma_s8_k16(hi, a[tm][2], a[tm][3], b[1]);
#pragma unroll
                    for (int i = 0; i < 4; ++i) {
                        // c0, c1: row g, columns 2t4, +1; c2, c3: row g + 8.
                        const float x = __fmaf_rn(db[tm][i / 2], mmq_unbias(hi[i]),
                                                  __fmul_rn(da[tm][i / 2], mmq_unbias(lo[i])));
                        c[i] = __fmaf_rn(dy[i % 2], x, c[i]);
                    }
                } else {
                    int isum[4] = {MMQ_BIAS, MMQ_BIAS, MMQ_BIAS, MMQ_BIAS};
                    mma_s8_k32(isum, a[tm], b);
#pragma unroll
                    for (int i = 0; i < 4; ++i) {
                        c[i] = __fmaf_rn(__fmul_rn(da[tm][i / 2], dy[i % 2]), mmq_unbias(isum[i]),
                                         c[i]);
                        if (MIN) {
                            c[i] = __fmaf_rn(ma[tm][i / 2], sy[i % 2], c[i]);
                        }
                    }
                }
            }
        }
    }
}

template <class C> static __device__ __forceinline__ void mmq_acc_zero(float (&acc)[C::TM][C::TN][4]) {
#pragma unroll
    for (int tm = 0; tm < C::TM; ++tm) {
#pragma unroll
        for (int tn = 0; tn < C::TN; ++tn) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                acc[tm][tn][i] = 0.0f;
            }
        }
    }
}

// The whole k loop of a tile: acc[mat] = rows row0.. of w[mat] (nrows × ncols, a weight
// matrix in format TYPE) times activation rows yrow[0..BN) of y (Q8_1 rows of ncols), for
// NMAT matrices that share the activations (MoE gate and up). ncols % MMQ_BK == 0. The
// caller zeroes acc, fills yrow and syncs before; `smem` holds MmqSmem<TYPE, C, NMAT>::bytes.
template <int TYPE, class C, int NMAT>
static __device__ __forceinline__ void mmq_k_loop(char *smem, const void *const (&w)[NMAT],
                                                  int nrows, int row0, const block_q8_1 *y,
                                                  const int *yrow, int ncols,
                                                  float (&acc)[NMAT][C::TM][C::TN][4]) {
    typedef WeightFormat<TYPE> F;
    typedef MmqSmem<TYPE, C, NMAT> L;
    const size_t w_row = (size_t)(ncols / F::qk) * sizeof(typename F::block);
    const size_t y_row = (size_t)(ncols / QK8_1) * sizeof(block_q8_1);
    const int steps = ncols / MMQ_BK;
    // Stage `st` of the ring receives k step `ks`.
    auto stage = [&](int ks, int st) {
#pragma unroll
        for (int mat = 0; mat < NMAT; ++mat) {
            mmq_stage_weights<TYPE, C>(smem + L::w_raw_at(st, mat), (const char *)w[mat], w_row,
                                       nrows, row0, ks * MMQ_BK);
        }
        mmq_stage_acts<C>(smem + L::y_raw_at(st), (const char *)y, y_row, yrow, ks * MMQ_BK);
        cp_async_commit();
    };
    stage(0, 0);
    for (int ks = 0; ks < steps; ++ks) {
        const int st = ks & 1;
        // The other stage was last read before the previous step's final barrier.
        if (ks + 1 < steps) {
            stage(ks + 1, st ^ 1);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads(); // every thread's copies of step ks have landed
        mmq_act_scales<TYPE, C, NMAT>(smem, smem + L::y_raw_at(st));
#pragma unroll
        for (int mat = 0; mat < NMAT; ++mat) {
            mmq_unpack_weights<TYPE, C, NMAT>(smem, smem + L::w_raw_at(st, mat), w_row, nrows,
                                              row0, ks * MMQ_BK);
            __syncthreads();
            mmq_mma<TYPE, C, NMAT>(smem, smem + L::y_raw_at(st), acc[mat]);
            __syncthreads(); // the unpacked tile and this stage are free again
        }
    }
}

// Launch guard: a kernel given less dynamic shared memory than its layout needs stops with an
// error instead of writing past it.
template <int TYPE, class C, int NMAT> static __device__ __forceinline__ void mmq_check_smem() {
    if (mmq_dynamic_smem() < (unsigned)MmqSmem<TYPE, C, NMAT>::bytes) {
        __trap();
    }
}
