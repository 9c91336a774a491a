// The MMAs and the k loop of the int8 tile GEMM (layout and loads: mmq_tile.cuh).
//
// Rounding contract (the same for every tile shape, since each output's terms are added in
// the same order: k steps, then sub-blocks, ascending): per 32-wide sub-block the MMA's
// integer dot is exact, then acc = fma(d_w * d_y, isum, acc), and for formats with a minimum
// acc = fma(m_w, d_y Σq_y, acc); scale16 formats add fma(d_y, d_lo * isum_lo + d_hi * isum_hi,
// acc). Every rounding is pinned with __fmaf_rn / __fmul_rn, so results do not depend on the
// compiler's contraction choices.
//
// Integer-scale order (F::int_scales, Q4_K, with Q8_K activations: one d_y per block): the
// arithmetic of llama.cpp's CPU, and of ferrolm's (crates/cpu matmul, `Format::INT_SCALES`).
// The sub-blocks' dots times their 6-bit scales are summed exactly over a pair of sub-blocks
// (MMQ_ORDER_PAIRS) or the whole block (MMQ_ORDER_BLOCKS), then acc = fma(Σ, d·d_y, acc); the
// mins times the activation sums go the same way into accm = fma(Σ m·Σq_y, dmin·d_y, accm),
// and the result is acc - accm. The results are the CPU's bits. Which order a token takes is
// the caller's: the CPU's dense matmul takes pairs for the first n - n % 4 of n >= 4 tokens,
// blocks for the rest; its expert matmuls take blocks. MMQ_ORDER_SUBS keeps the per-sub-block
// arithmetic above (FERROLM_CUDA_INT_SCALES=0, and activations that are not Q8_K).
//
// Accumulator acc[tm][tn][i] of a thread holds tile row mmq_acc_row<C>(tm, i) and tile column
// (activation row) mmq_acc_col<C>(tn, i); accm likewise (zero unless int_scales).
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

// A thread's place in the tile: its MMA fragment coordinates (g = lane / 4, t4 = lane % 4), its
// warp's first weight row wr and token wc, and the shared address its ldmatrix reads from in
// the unpacked weight codes `wq`.
struct MmqWarp {
    int g, t4, wr, wc;
    unsigned a_addr;
};

template <class C> static __device__ __forceinline__ MmqWarp mmq_warp(const char *wq) {
    const int lane = threadIdx.x;
    const int wr = (threadIdx.y % C::WARPS_M) * C::WM, wc = (threadIdx.y / C::WARPS_M) * C::WN;
    const unsigned a_addr = (unsigned)__cvta_generic_to_shared(wq) +
                            (wr + lane % 16) * MMQ_WQ_STRIDE + 16 * (lane / 16);
    return {lane / 4, lane % 4, wr, wc, a_addr};
}

#define MMQ_ORDER_SUBS 0
#define MMQ_ORDER_PAIRS 1
#define MMQ_ORDER_BLOCKS 2
// Which orders a kernel compiles (a bit per MMQ_ORDER_*): each adds its registers to the
// kernel's, so an entry point takes only those it runs.
#define MMQ_ORDERS_DENSE ((1 << MMQ_ORDER_SUBS) | (1 << MMQ_ORDER_PAIRS))
#define MMQ_ORDERS_BLOCKS ((1 << MMQ_ORDER_SUBS) | (1 << MMQ_ORDER_BLOCKS))

// The block's d and dmin of the thread's rows (integer-scale formats).
template <class C> struct MmqRowScales {
    float d[C::TM][2], dmin[C::TM][2];
};

template <class C>
static __device__ __forceinline__ MmqRowScales<C> mmq_row_scales(const float *wrow) {
    MmqRowScales<C> rs;
    const int wr = (threadIdx.y % C::WARPS_M) * C::WM, g = threadIdx.x / 4;
#pragma unroll
    for (int tm = 0; tm < C::TM; ++tm) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int r = wr + 16 * tm + g + 8 * h;
            rs.d[tm][h] = wrow[r];
            rs.dmin[tm][h] = wrow[C::BM + r];
        }
    }
    return rs;
}

// Integer-scale order, pairs: per pair of sub-blocks the two MMAs' dots times the scales
// (products and their sum are integers below 2^24, so exact in f32), then one fma each into
// acc and accm.
template <int TYPE, class C, int NMAT>
static __device__ __forceinline__ void mmq_mma_pairs(const char *smem, const char *yraw,
                                                     float (&acc)[C::TM][C::TN][4],
                                                     float (&accm)[C::TM][C::TN][4]) {
    typedef MmqSmem<TYPE, C, NMAT> L;
    const float *wsc = (const float *)(smem + L::wsc);
    const float *wm = wsc + MMQ_SUBS * C::BM;
    const float2 *ysc = (const float2 *)(smem + L::ysc);
    const auto [g, t4, wr, wc, a_addr] = mmq_warp<C>(smem + L::wq);
    const MmqRowScales<C> rs = mmq_row_scales<C>(wsc + 3 * MMQ_SUBS * C::BM);
#pragma unroll
    for (int p = 0; p < MMQ_SUBS / 2; ++p) {
        int a[2][C::TM][4];
        float sc[2][C::TM][2], m[2][C::TM][2];
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            const int s = 2 * p + j;
#pragma unroll
            for (int tm = 0; tm < C::TM; ++tm) {
                ldmatrix_x4(a[j][tm], a_addr + 16 * tm * MMQ_WQ_STRIDE + 32 * s);
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int r = s * C::BM + wr + 16 * tm + g + 8 * h;
                    sc[j][tm][h] = wsc[r];
                    m[j][tm][h] = wm[r];
                }
            }
        }
#pragma unroll
        for (int tn = 0; tn < C::TN; ++tn) {
            const int n = wc + 8 * tn;
            int b[2][2];
            float bs[2][2], dy[2];
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                const int s = 2 * p + j;
                const int *yq = (const int *)(yraw + (n + g) * MMQ_Y_STRIDE + 36 * s + 4);
                b[j][0] = yq[t4];
                b[j][1] = yq[4 + t4];
                // Columns n + 2t4 and n + 2t4 + 1: {d_y, Σq_y} of each.
                const float4 ys = *(const float4 *)&ysc[s * C::BN + n + 2 * t4];
                bs[j][0] = ys.y;
                bs[j][1] = ys.w;
                dy[0] = ys.x; // one d_y per block (Q8_K)
                dy[1] = ys.z;
            }
#pragma unroll
            for (int tm = 0; tm < C::TM; ++tm) {
                int i0[4] = {MMQ_BIAS, MMQ_BIAS, MMQ_BIAS, MMQ_BIAS};
                int i1[4] = {MMQ_BIAS, MMQ_BIAS, MMQ_BIAS, MMQ_BIAS};
                mma_s8_k32(i0, a[0][tm], b[0]);
                mma_s8_k32(i1, a[1][tm], b[1]);
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const int h = i / 2, c = i % 2;
                    const float isum = __fmaf_rn(sc[1][tm][h], mmq_unbias(i1[i]),
                                                 __fmul_rn(sc[0][tm][h], mmq_unbias(i0[i])));
                    acc[tm][tn][i] =
                        __fmaf_rn(isum, __fmul_rn(rs.d[tm][h], dy[c]), acc[tm][tn][i]);
                    const float imin = __fmaf_rn(m[1][tm][h], bs[1][c],
                                                 __fmul_rn(m[0][tm][h], bs[0][c]));
                    accm[tm][tn][i] =
                        __fmaf_rn(imin, __fmul_rn(rs.dmin[tm][h], dy[c]), accm[tm][tn][i]);
                }
            }
        }
    }
}

// Integer-scale order, blocks: per output the eight sub-blocks' dots times their scales summed
// in an int (exact) and converted once; then the mins, Σ m·Σq_y in f32 (products and sums
// below 2^22: exact), both into their accumulators.
template <int TYPE, class C, int NMAT>
static __device__ __forceinline__ void mmq_mma_blocks(const char *smem, const char *yraw,
                                                      float (&acc)[C::TM][C::TN][4],
                                                      float (&accm)[C::TM][C::TN][4]) {
    typedef MmqSmem<TYPE, C, NMAT> L;
    const float *wsc = (const float *)(smem + L::wsc);
    const float *wm = wsc + MMQ_SUBS * C::BM;
    const int *wsi = (const int *)(wsc + 2 * MMQ_SUBS * C::BM);
    const float2 *ysc = (const float2 *)(smem + L::ysc);
    const auto [g, t4, wr, wc, a_addr] = mmq_warp<C>(smem + L::wq);
    int isum[C::TM][C::TN][4];
#pragma unroll
    for (int s = 0; s < MMQ_SUBS; ++s) {
        int a[C::TM][4], sc[C::TM][2];
#pragma unroll
        for (int tm = 0; tm < C::TM; ++tm) {
            ldmatrix_x4(a[tm], a_addr + 16 * tm * MMQ_WQ_STRIDE + 32 * s);
            sc[tm][0] = wsi[s * C::BM + wr + 16 * tm + g];
            sc[tm][1] = wsi[s * C::BM + wr + 16 * tm + g + 8];
        }
#pragma unroll
        for (int tn = 0; tn < C::TN; ++tn) {
            const int *yq = (const int *)(yraw + (wc + 8 * tn + g) * MMQ_Y_STRIDE + 36 * s + 4);
            const int b[2] = {yq[t4], yq[4 + t4]};
#pragma unroll
            for (int tm = 0; tm < C::TM; ++tm) {
                int dot[4] = {0, 0, 0, 0};
                mma_s8_k32(dot, a[tm], b);
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    isum[tm][tn][i] = s == 0 ? sc[tm][i / 2] * dot[i]
                                             : isum[tm][tn][i] + sc[tm][i / 2] * dot[i];
                }
            }
        }
    }
    const MmqRowScales<C> rs = mmq_row_scales<C>(wsc + 3 * MMQ_SUBS * C::BM);
#pragma unroll
    for (int tm = 0; tm < C::TM; ++tm) {
        float m[MMQ_SUBS][2];
#pragma unroll
        for (int s = 0; s < MMQ_SUBS; ++s) {
            m[s][0] = wm[s * C::BM + wr + 16 * tm + g];
            m[s][1] = wm[s * C::BM + wr + 16 * tm + g + 8];
        }
#pragma unroll
        for (int tn = 0; tn < C::TN; ++tn) {
            const int n = wc + 8 * tn + 2 * t4;
            float imin[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
            for (int s = 0; s < MMQ_SUBS; ++s) {
                const float4 ys = *(const float4 *)&ysc[s * C::BN + n];
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    imin[i] = __fmaf_rn(m[s][i / 2], i % 2 ? ys.w : ys.y, imin[i]);
                }
            }
            const float4 y0 = *(const float4 *)&ysc[n];
            const float dy[2] = {y0.x, y0.z};
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int h = i / 2, c = i % 2;
                acc[tm][tn][i] = __fmaf_rn((float)isum[tm][tn][i],
                                           __fmul_rn(rs.d[tm][h], dy[c]), acc[tm][tn][i]);
                accm[tm][tn][i] = __fmaf_rn(imin[i], __fmul_rn(rs.dmin[tm][h], dy[c]),
                                            accm[tm][tn][i]);
            }
        }
    }
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
    const auto [g, t4, wr, wc, a_addr] = mmq_warp<C>(smem + L::wq);
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

// out = acc - accm, the GEMM's result.
template <class C>
static __device__ __forceinline__ void mmq_acc_result(const float (&acc)[C::TM][C::TN][4],
                                                      const float (&accm)[C::TM][C::TN][4],
                                                      float (&out)[C::TM][C::TN][4]) {
#pragma unroll
    for (int tm = 0; tm < C::TM; ++tm) {
#pragma unroll
        for (int tn = 0; tn < C::TN; ++tn) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                out[tm][tn][i] = acc[tm][tn][i] - accm[tm][tn][i];
            }
        }
    }
}

// The whole k loop of a tile: acc[mat] - accm[mat] = rows row0.. of w[mat] (nrows × ncols, a
// weight matrix in format TYPE) times activation rows yrow[0..BN) of y (Q8_1 rows of ncols),
// for NMAT matrices that share the activations (MoE gate and up), in MMQ_ORDER_* `order`
// (one of ORDERS; any other sums as MMQ_ORDER_SUBS).
// ncols % MMQ_BK == 0, or ncols % 32 == 0 for 32-element block formats (mmq_k_steps). The
// caller zeroes acc and accm, fills yrow and syncs before; `smem`
// holds MmqSmem<TYPE, C, NMAT>::bytes. A split-K share takes k steps ks0..ks1 only.
template <int TYPE, class C, int NMAT, int ORDERS>
static __device__ __forceinline__ void mmq_k_loop(char *smem, const void *const (&w)[NMAT],
                                                  int nrows, int row0, const block_q8_1 *y,
                                                  const int *yrow, int ncols, int order,
                                                  float (&acc)[NMAT][C::TM][C::TN][4],
                                                  float (&accm)[NMAT][C::TM][C::TN][4],
                                                  int ks0 = 0, int ks1 = -1) {
    typedef WeightFormat<TYPE> F;
    typedef MmqSmem<TYPE, C, NMAT> L;
    const size_t w_row = (size_t)(ncols / F::qk) * sizeof(typename F::block);
    const size_t y_row = (size_t)(ncols / QK8_1) * sizeof(block_q8_1);
    // k steps ks0..ks1 (a split-K share; all of them by default).
    const int steps = ks1 < 0 ? mmq_k_steps(ncols) : ks1;
    if (ks0 >= steps) {
        return;
    }
    // Stage `st` of the ring receives k step `ks`.
    auto stage = [&](int ks, int st) {
#pragma unroll
        for (int mat = 0; mat < NMAT; ++mat) {
            mmq_stage_weights<TYPE, C>(smem + L::w_raw_at(st, mat), (const char *)w[mat], w_row,
                                       nrows, row0, ks * MMQ_BK, ncols);
        }
        mmq_stage_acts<C>(smem + L::y_raw_at(st), (const char *)y, y_row, yrow, ks * MMQ_BK,
                          ncols);
        cp_async_commit();
    };
    stage(ks0, 0);
    for (int ks = ks0; ks < steps; ++ks) {
        const int st = (ks - ks0) & 1;
        // The other stage was last read before the previous step's final barrier.
        if (ks + 1 < steps) {
            stage(ks + 1, st ^ 1);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads(); // every thread's copies of step ks have landed
        mmq_act_scales<TYPE, C, NMAT>(smem, smem + L::y_raw_at(st), order != MMQ_ORDER_SUBS);
#pragma unroll
        for (int mat = 0; mat < NMAT; ++mat) {
            mmq_unpack_weights<TYPE, C, NMAT>(smem, smem + L::w_raw_at(st, mat), w_row, nrows,
                                              row0, ks * MMQ_BK, order != MMQ_ORDER_SUBS);
            __syncthreads();
            const char *yraw = smem + L::y_raw_at(st);
            constexpr bool PAIRS = F::int_scales && (ORDERS >> MMQ_ORDER_PAIRS & 1);
            constexpr bool BLOCKS = F::int_scales && (ORDERS >> MMQ_ORDER_BLOCKS & 1);
            if (PAIRS && order == MMQ_ORDER_PAIRS) {
                mmq_mma_pairs<TYPE, C, NMAT>(smem, yraw, acc[mat], accm[mat]);
            } else if (BLOCKS && order == MMQ_ORDER_BLOCKS) {
                mmq_mma_blocks<TYPE, C, NMAT>(smem, yraw, acc[mat], accm[mat]);
            } else {
                mmq_mma<TYPE, C, NMAT>(smem, yraw, acc[mat]);
            }
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
