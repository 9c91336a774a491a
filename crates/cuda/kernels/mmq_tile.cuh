// The int8 tensor-core tile machinery shared by mmq.cu (dense GEMM) and moe_gemm.cu (grouped
// per-expert GEMM): a block computes a BM × BN tile of W · yᵀ (BM weight rows, BN activation
// rows), MMQ_BK = 256 elements of k per step. The k loop and the MMAs are in mmq_mma.cuh.
//
// Per k step, double-buffered in dynamic shared memory:
//   1. cp.async copies the next step's raw weight blocks (each row's bytes for 256 elements)
//      and raw Q8_1 activation blocks, while the current step computes;
//   2. the block unpacks the current raw weight blocks from shared memory to int8 codes, with
//      each 32-element sub-block's scale d and offset m beside them (x = d * code + m; formats
//      with a scale per 16 elements, F::scale16, keep two d), and reads each activation
//      sub-block's d_y and d_y * Σcodes (exact integer sum, as the CPU and mmvq do);
//   3. each warp multiplies its WM weight rows by its WN activation rows straight from the raw
//      Q8_1 copy: one integer MMA per 32-wide sub-block (two k=16 MMAs for scale16 formats),
//      then acc += (d_w * d_y) * isum (+ m_w * d_y Σq_y for formats with a minimum).
//
// Which activation rows a tile reads is the caller's choice (`yrow`, in shared memory): the
// dense GEMM takes consecutive tokens, the MoE GEMM gathers tokens by the expert-sorted index.
#pragma once
#ifndef FERROLM_COMMON_CUH
#error "include common.cuh and quant.cuh before mmq_tile.cuh"
#endif

#define MMQ_BK 256
#define MMQ_SUBS (MMQ_BK / 32)
// One token's Q8_1 blocks of a k step: 8 × 36 bytes, 18 copies of 16 bytes. The shared row
// is 16 bytes longer (76 ints): the 8 token rows of a B fragment then start 12 banks apart,
// and with the 4 lanes of a row they cover all 32 banks.
#define MMQ_Y_ROW 288
#define MMQ_Y_STRIDE 304
// Unpacked weight row: 256 codes + 16 bytes (68 ints), so the 8 rows of an ldmatrix phase
// start 4 banks apart.
#define MMQ_WQ_STRIDE 272

// Block tile BM × BN, warps WARPS_M × WARPS_N, each warp WM × WN of it: TM × TN MMA tiles of
// 16 × 8. Block shape (32, NWARPS); warp w takes rows (w % WARPS_M) * WM.., tokens
// (w / WARPS_M) * WN...
template <int BM_, int BN_, int WARPS_M_, int WARPS_N_> struct MmqCfg {
    static constexpr int BM = BM_, BN = BN_, WARPS_M = WARPS_M_, WARPS_N = WARPS_N_;
    static constexpr int NWARPS = WARPS_M * WARPS_N, THREADS = NWARPS * WARP_SIZE;
    static constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N;
    static constexpr int TM = WM / 16, TN = WN / 8;
    static_assert(WM % 16 == 0 && WN % 8 == 0 && TM >= 1 && TN >= 1, "warp tile");
};

// One weight row's raw bytes per k step. Q6_K's 210-byte blocks are only 2-byte aligned and
// MXFP4's 17-byte blocks byte-aligned, so their copy covers the aligned 16-byte chunks around
// them (at most 16 - alignof(block) bytes before) and the unpack starts `start % 16` bytes in;
// every other format's bytes are 16-byte multiples. Row strides are 16 bytes past a multiple
// of 128 where the format allows (Q4_0, Q8_0, Q4_K, and Q6_K padded to 272), so eight rows'
// 16-byte loads at one offset fall in distinct banks. MXFP4 takes the smallest odd multiple of
// 16 (176): eight rows still start in distinct 16-byte bank groups, and the grouped gate/up
// GEMM's two matrices then fit two blocks an SM (105 KB each, against 129 KB at 272).
template <int TYPE> struct MmqRaw {
    typedef WeightFormat<TYPE> F;
    static constexpr int bytes = (MMQ_BK / F::qk) * (int)sizeof(typename F::block);
    static constexpr bool aligned = bytes % 16 == 0;
    static constexpr int around = (bytes + 16 - (int)alignof(typename F::block) + 15) / 16 * 16;
    static constexpr int stride = aligned                    ? bytes
                                  : TYPE == GGML_TYPE_MXFP4 ? around + 16 * (1 - around / 16 % 2)
                                                            : around + (144 - around % 128) % 128;
    static constexpr int chunks = (aligned ? bytes : around) / 16;
    // 32-bit scales kept per unpacked (row, sub-block): d, d of the high 16, m; integer-scale
    // formats keep their 6-bit scale as f32 and as int, and the min as f32 instead.
    static constexpr int scales =
        F::int_scales ? 3 : 1 + (F::scale16 ? 1 : 0) + (F::has_min ? 1 : 0);
    // Per unpacked row: the block's d and dmin (integer-scale formats, one block a k step).
    static constexpr int row_scales = F::int_scales ? 2 : 0;
    static_assert(!F::int_scales || F::qk == MMQ_BK, "integer-scale formats: one block a k step");
};

// Dynamic shared memory, in bytes from its start (all offsets multiples of 16):
//   stage s (2 of them): NMAT raw weight tiles [BM][MmqRaw::stride], raw Q8_1 [BN][Y_STRIDE];
//   one unpacked weight tile: codes [BM][WQ_STRIDE], scales [scales][SUBS][BM] and
//   [row_scales][BM], 32 bits each;
//   activation scales [SUBS][BN] of float2 {d_y, d_y Σq_y} ({d_y, Σq_y} for integer-scale
//   formats).
// crates/cuda/src/ops/mmq.rs (smem_bytes) computes `bytes` the same way; kernels trap if
// launched with less.
template <int TYPE, class C, int NMAT> struct MmqSmem {
    typedef MmqRaw<TYPE> R;
    static constexpr int w_raw = C::BM * R::stride;
    static constexpr int stage = NMAT * w_raw + C::BN * MMQ_Y_STRIDE;
    static constexpr int wq = 2 * stage;
    static constexpr int wsc = wq + C::BM * MMQ_WQ_STRIDE;
    static constexpr int ysc = wsc + (R::scales * MMQ_SUBS + R::row_scales) * C::BM * 4;
    static constexpr int bytes = ysc + MMQ_SUBS * C::BN * 8;
    static __device__ __forceinline__ int w_raw_at(int s, int mat) { return s * stage + mat * w_raw; }
    static __device__ __forceinline__ int y_raw_at(int s) { return s * stage + NMAT * w_raw; }
};

static __device__ __forceinline__ unsigned mmq_dynamic_smem() {
    unsigned n;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(n));
    return n;
}

// k steps of a row of ncols: the last one partial where ncols is not a multiple of MMQ_BK
// (32-element block formats only: rows of 2880 in gpt-oss). Its missing sub-blocks are staged
// as zero bytes, weights and activations alike, which unpack to codes and scales that add
// exactly nothing (a zero scale, or zero codes against a zero activation block).
static __device__ __forceinline__ int mmq_k_steps(int ncols) {
    return (ncols + MMQ_BK - 1) / MMQ_BK;
}

// Bytes of a k step from k0 that exist in a row of ncols, for blocks of `block_bytes` per
// `qk` elements.
static __device__ __forceinline__ int mmq_step_bytes(int k0, int ncols, int qk, int block_bytes) {
    return min(MMQ_BK, ncols - k0) / qk * block_bytes;
}

// Where weight row `row`'s blocks for columns k0.. start, in bytes from the matrix.
template <int TYPE>
static __device__ __forceinline__ size_t mmq_raw_start(size_t row_bytes, int row, int k0) {
    typedef WeightFormat<TYPE> F;
    return (size_t)row * row_bytes + (size_t)(k0 / F::qk) * sizeof(typename F::block);
}

// Queue the copy of weight rows row0..row0+BM (rows past nrows re-read the last one; their
// results are never written), columns k0..k0+MMQ_BK of a matrix of nrows × row_bytes with
// rows of ncols (columns past ncols: zero bytes).
template <int TYPE, class C>
static __device__ __forceinline__ void mmq_stage_weights(char *dst, const char *x,
                                                         size_t row_bytes, int nrows, int row0,
                                                         int k0, int ncols) {
    typedef WeightFormat<TYPE> F;
    typedef MmqRaw<TYPE> R;
    const int tid = threadIdx.y * WARP_SIZE + threadIdx.x;
    const int step_bytes = mmq_step_bytes(k0, ncols, F::qk, (int)sizeof(typename F::block));
    for (int i = tid; i < C::BM * R::chunks; i += C::THREADS) {
        const int r = i / R::chunks, c = i % R::chunks;
        const int row = min(row0 + r, nrows - 1);
        const size_t start = mmq_raw_start<TYPE>(row_bytes, row, k0);
        // The unaligned formats copy the 16-byte chunks around their blocks (unpacked from
        // `start % 16` bytes in); the others their blocks from `start`, which rows of a length
        // that is not a multiple of MMQ_BK leave only 4-byte aligned (cp_async16_any).
        const size_t src = (R::aligned ? start : start & ~(size_t)15) + 16 * c;
        // Only this step's blocks of this row are read: nothing past the matrix, and a
        // partial last step stops at the row's end; the rest of a chunk is zero-filled.
        const size_t end = start + step_bytes;
        const int n = src >= end ? 0 : (int)min((size_t)16, end - src);
        cp_async16_any(dst + r * R::stride + 16 * c, x + src, n, x);
    }
}

// Queue the copy of activation rows yrow[0..BN) (Q8_1 rows of row_bytes, ncols elements; a
// negative yrow is a row of zeros), columns k0..k0+MMQ_BK (past ncols: zero bytes).
template <class C>
static __device__ __forceinline__ void mmq_stage_acts(char *dst, const char *y, size_t row_bytes,
                                                      const int *yrow, int k0, int ncols) {
    constexpr int CHUNKS = MMQ_Y_ROW / 16;
    const int tid = threadIdx.y * WARP_SIZE + threadIdx.x;
    const size_t kofs = (size_t)(k0 / QK8_1) * sizeof(block_q8_1);
    const int step_bytes = mmq_step_bytes(k0, ncols, QK8_1, (int)sizeof(block_q8_1));
    for (int i = tid; i < C::BN * CHUNKS; i += C::THREADS) {
        const int n = i / CHUNKS, c = i % CHUNKS;
        const int row = yrow[n];
        const int bytes = row >= 0 ? max(0, min(16, step_bytes - 16 * c)) : 0;
        // Rows of a length that is not a multiple of 128 are 4-byte aligned only.
        const char *src = y + (bytes > 0 ? (size_t)row * row_bytes + kofs + 16 * c : 0);
        cp_async16_any(dst + n * MMQ_Y_STRIDE + 16 * c, src, bytes, y);
    }
}

// Sub-blocks a thread unpacks at once: F::unpack_group where the format has one, else 1.
template <class F, class = void> struct MmqGroup {
    static constexpr int value = 1;
};
template <class F> struct MmqGroup<F, decltype((void)F::unpack_group, void())> {
    static constexpr int value = F::unpack_group;
};

// Where row r's staged block for this k step starts, in bytes from the row's shared copy.
template <int TYPE>
static __device__ __forceinline__ int mmq_raw_delta(size_t row_bytes, int nrows, int row0, int r,
                                                    int k0) {
    if (MmqRaw<TYPE>::aligned) {
        return 0;
    }
    const int row = min(row0 + r, nrows - 1);
    return (int)(mmq_raw_start<TYPE>(row_bytes, row, k0) & 15);
}

// Sub-block s of unpacked row r: its scales (integer-scale formats in the integer-scale order:
// their 6-bit scale and min, and at s == 0 the block's d and dmin).
template <int TYPE, class C>
static __device__ __forceinline__ void mmq_store_scales(float *wsc, const typename WeightFormat<TYPE>::block *b,
                                                        int r, int s, float (&d)[2], float m,
                                                        bool int_order) {
    typedef WeightFormat<TYPE> F;
    if constexpr (F::int_scales) {
        if (int_order) {
            int sc, mi;
            float bd, bdmin;
            F::tile_scales_int(b, s, sc, mi, bd, bdmin);
            wsc[(0 * MMQ_SUBS + s) * C::BM + r] = (float)sc;
            wsc[(1 * MMQ_SUBS + s) * C::BM + r] = (float)mi;
            ((int *)wsc)[(2 * MMQ_SUBS + s) * C::BM + r] = sc;
            if (s == 0) {
                wsc[3 * MMQ_SUBS * C::BM + r] = bd;
                wsc[3 * MMQ_SUBS * C::BM + C::BM + r] = bdmin;
            }
            return;
        }
    }
    int k = 0;
    wsc[(k++ * MMQ_SUBS + s) * C::BM + r] = d[0];
    if (F::scale16) {
        wsc[(k++ * MMQ_SUBS + s) * C::BM + r] = d[1];
    }
    if (F::has_min) {
        wsc[(k * MMQ_SUBS + s) * C::BM + r] = m;
    }
}

// Raw weight blocks (staged by mmq_stage_weights for the same row0, k0) → int8 codes and
// scales of the unpacked tile. Thread i takes row i % BM, so lanes take consecutive rows: the
// scale stores hit distinct banks, and so do the 16-byte loads of grouped formats (8 lanes a
// phase, rows 16 bytes apart modulo 128).
template <int TYPE, class C, int NMAT>
static __device__ __forceinline__ void mmq_unpack_weights(char *smem, const char *raw,
                                                          size_t row_bytes, int nrows, int row0,
                                                          int k0, bool int_order) {
    typedef WeightFormat<TYPE> F;
    typedef MmqRaw<TYPE> R;
    typedef MmqSmem<TYPE, C, NMAT> L;
    typedef typename F::block Block;
    constexpr int G = MmqGroup<F>::value;
    float *wsc = (float *)(smem + L::wsc);
    const int tid = threadIdx.y * WARP_SIZE + threadIdx.x;
    for (int i = tid; i < C::BM * (MMQ_SUBS / G); i += C::THREADS) {
        const int r = i % C::BM, grp = i / C::BM;
        const int delta = mmq_raw_delta<TYPE>(row_bytes, nrows, row0, r, k0);
        const char *row = raw + r * R::stride;
        int q[8 * G];
        float d[G][2], m[G];
        if constexpr (G > 1) {
            static_assert(F::qk == MMQ_BK, "grouped formats: one block a k step");
            F::tile_group_codes(row, delta, grp, q);
            if (!(F::int_scales && int_order)) { // else mmq_store_scales reads its own
#pragma unroll
                for (int j = 0; j < G; ++j) {
                    F::tile_sub_scales((const Block *)(row + delta), G * grp + j, d[j], m[j]);
                }
            }
        } else {
            const Block *b = (const Block *)(row + delta) + 32 * grp / F::qk;
            F::tile_codes(b, (32 * grp % F::qk) / 32, q, d[0], m[0]);
        }
#pragma unroll
        for (int j = 0; j < G; ++j) {
            const int s = G * grp + j;
            int4 *dst = (int4 *)(smem + L::wq + r * MMQ_WQ_STRIDE + 32 * s);
            dst[0] = make_int4(q[8 * j], q[8 * j + 1], q[8 * j + 2], q[8 * j + 3]);
            dst[1] = make_int4(q[8 * j + 4], q[8 * j + 5], q[8 * j + 6], q[8 * j + 7]);
            const Block *b = (const Block *)(row + delta) + 32 * s / F::qk;
            mmq_store_scales<TYPE, C>(wsc, b, r, s, d[j], m[j], int_order);
        }
    }
}

// d_y and d_y * Σq_y of each staged activation sub-block (the sum only where the weights have
// a minimum to multiply it by; integer-scale formats in their order keep Σq_y itself, exact in
// f32).
// Zero-filled rows give d_y = 0.
template <int TYPE, class C, int NMAT>
static __device__ __forceinline__ void mmq_act_scales(char *smem, const char *yraw,
                                                      bool int_order) {
    typedef MmqSmem<TYPE, C, NMAT> L;
    float2 *ysc = (float2 *)(smem + L::ysc);
    const int tid = threadIdx.y * WARP_SIZE + threadIdx.x;
    for (int i = tid; i < C::BN * MMQ_SUBS; i += C::THREADS) {
        const int n = i % C::BN, s = i / C::BN;
        const block_q8_1 *b = (const block_q8_1 *)(yraw + n * MMQ_Y_STRIDE) + s;
        const float d = b->d;
        int sum = 0;
        if (WeightFormat<TYPE>::has_min) {
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                sum = sum_bytes(get_int_b4(b->qs, j), sum);
            }
        }
        const bool raw_sum = WeightFormat<TYPE>::int_scales && int_order;
        ysc[s * C::BN + n] = make_float2(d, raw_sum ? (float)sum : d * (float)sum);
    }
}
