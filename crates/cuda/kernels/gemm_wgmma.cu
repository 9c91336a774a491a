// f16 GEMM on Hopper's warpgroup MMA (wgmma) for long prefill ubatches:
// out[t][r] = sum_c x[t][c] * w[r][c], with x (tokens) and w (weight rows) as f16 in device memory,
// both K-major, and out f32. The quantized weights are expanded to f16 first (`dequant_f16_*`, with
// ferrolm-quant's dequantize roundings, then rounded to f16), the f32 activations rounded to f16
// (`round_f16`). Contract (ops/gemm_wgmma/): the tensor-core one, within a stated tolerance of
// the CPU; not the CPU's integer products.
//
// Structure: a block of three warpgroups computes a 128-token x 256-row tile. Warpgroup 0's first
// thread brings 64-column slices of both operands into a ring of shared-memory stages with the
// bulk tensor copy (TMA, 128-byte swizzle), completing on the stage's "full" barrier; warpgroups 1
// and 2 each multiply 64 tokens by the 256 rows (wgmma m64n256k16, four per stage) and give the
// stage back on its "empty" barrier once their MMAs have read it. The Q4_K variant
// (gemm_wgmma_q4k*, below) unpacks the weight's blocks in shared memory instead; its decode
// forms (gemm_wgmma_q4k_decode*) take a batched decode step's few tokens, k split over
// blocks.
#include "common.cuh"
#include "quant.cuh"
#include "kquant_f16.cuh"

#define WG_BM 128
#define WG_BN 256
#define WG_BK 64
#define WG_STAGES 4
#define WG_A_BYTES (WG_BM * WG_BK * 2)
#define WG_B_BYTES (WG_BN * WG_BK * 2)
#define WG_STAGE_BYTES (WG_A_BYTES + WG_B_BYTES)
// Stages, their barriers, and up to 1 KB to align the first stage to the swizzle's 1024 bytes.
#define WG_SMEM (WG_STAGES * WG_STAGE_BYTES + (2 * WG_STAGES + 2) * 8 + 1024)

// A CUtensorMap (cuda.h) by value: the driver's opaque 128-byte descriptor of one operand.
struct __align__(64) TmaMap {
    uint64_t words[16];
};

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FERROLM_WGMMA 1

// Box (c0, c1) of `map` (c0 the contiguous dimension) into shared memory at dst, counted on bar.
static __device__ __forceinline__ void tma_load(void *dst, const TmaMap *map, uint64_t *bar, int c0,
                                                int c1) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%3, %4}], [%2];" ::"r"(smem_u32(dst)),
                 "l"((uint64_t)map), "r"(smem_u32(bar)), "r"(c0), "r"(c1)
                 : "memory");
}

// Shared-memory matrix descriptor of a K-major tile of 128-byte rows in the 128-byte swizzle:
// 8-row groups 1024 bytes apart.
static __device__ __forceinline__ uint64_t wgmma_desc(const void *p) {
    const uint64_t addr = smem_u32(p);
    return ((addr & 0x3FFFF) >> 4) | (1ull << 16) | ((uint64_t)(1024 >> 4) << 32) | (1ull << 62);
}

// d (+)= a * b; d is overwritten where `accumulate` is 0 (the first k step), so it needs no
// zeroing: an ordinary write to the accumulators would serialize the MMAs (ptxas C7515).
static __device__ __forceinline__ void wgmma_m64n256k16(float (&d)[128], uint64_t a, uint64_t b,
                                                        int accumulate) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
        "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
        "}, %128, %129, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
          "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
          "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
          "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
          "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
          "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
          "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
          "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
          "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "l"(a), "l"(b), "r"(accumulate));
}

static __device__ __forceinline__ void wgmma_fence() {
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
static __device__ __forceinline__ void wgmma_commit() {
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
template <int N> static __device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
#endif

// The tile a block computes: x rows [tok0, tok0 + 128) (those below tok_end are stored),
// weight rows from wrow0 of the weight's map; its row0 + i < n_rows (of the map's matrix or
// expert) are stored at out[t * ldo + col0 + row0 + i].
struct WgTile {
    int tok0, tok_end, wrow0, row0, col0, ldo;
};

#ifdef FERROLM_WGMMA
// Consumer warpgroup c (0 or 1) of a block: its 64 tokens of the tile times the 256 weight
// rows over `steps` stages of the ring (each A_BYTES of tokens, then the weight's 256 rows),
// then the f32 sums stored.
template <int STAGES, int A_BYTES = WG_A_BYTES>
static __device__ __forceinline__ void consume(float *__restrict__ out, int n_rows, int steps,
                                               WgTile tile, const uint8_t *smem, uint64_t *full,
                                               uint64_t *empty, int c, int tid) {
    if (tile.tok0 + c * 64 >= tile.tok_end) {
        // None of this warpgroup's 64 tokens is in the batch (a batched decode step's few
        // rows, a prompt's last tile): it only gives the stages back.
        for (int i = 0; i < steps; ++i) {
            const int s = i % STAGES;
            mbar_wait(&full[s], (i / STAGES) & 1);
            if (tid % 32 == 0) mbar_arrive(&empty[s]);
        }
        return;
    }
    float d[128];
    for (int i = 0; i < steps; ++i) {
        const int s = i % STAGES;
        mbar_wait(&full[s], (i / STAGES) & 1);
        const uint8_t *a = smem + s * (A_BYTES + WG_B_BYTES) + c * 64 * 128;
        const uint8_t *b = smem + s * (A_BYTES + WG_B_BYTES) + A_BYTES;
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < WG_BK / 16; ++kk) {
            wgmma_m64n256k16(d, wgmma_desc(a + kk * 32), wgmma_desc(b + kk * 32), i | kk);
        }
        wgmma_commit();
        if (STAGES > 2) {
            // The stage before this one is read once only this stage's MMAs may be in flight.
            wgmma_wait<1>();
            if (i > 0 && tid % 32 == 0) mbar_arrive(&empty[(i + STAGES - 1) % STAGES]);
        } else {
            // Two stages: this one back as soon as its MMAs are done, so that the producer,
            // already filling the other, need not wait for the next stage's MMAs to start.
            wgmma_wait<0>();
            if (tid % 32 == 0) mbar_arrive(&empty[s]);
        }
    }
    wgmma_wait<0>();
    // Accumulator layout of m64nNk16: warp w, lane l holds rows 16w + l/4 (+8) and column
    // pairs 8j + 2(l%4) of each 8-column group j.
    const int warp = tid / 32, lane = tid % 32;
    const int t_lo = tile.tok0 + c * 64 + warp * 16 + lane / 4;
#pragma unroll
    for (int j = 0; j < 32; ++j) {
        const int r = tile.row0 + 8 * j + 2 * (lane % 4);
        if (r >= n_rows) continue;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int t = t_lo + 8 * h;
            if (t < tile.tok_end) {
                *(float2 *)(out + (size_t)t * tile.ldo + tile.col0 + r) =
                    make_float2(d[4 * j + 2 * h], d[4 * j + 2 * h + 1]);
            }
        }
    }
}

// One block's 128 x 256 tile over k columns, both operands f16 by TMA; `bars` the stages'
// barriers, initialized.
static __device__ __forceinline__ void gemm_tile(const TmaMap *x_map, const TmaMap *w_map,
                                                 float *__restrict__ out, int n_rows, int k,
                                                 WgTile tile, uint8_t *smem, uint64_t *full,
                                                 uint64_t *empty) {
    const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
    const int steps = (k + WG_BK - 1) / WG_BK;
    if (wg == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
        if (tid == 0) {
            for (int i = 0; i < steps; ++i) {
                const int s = i % WG_STAGES;
                if (i >= WG_STAGES) mbar_wait(&empty[s], ((i / WG_STAGES) - 1) & 1);
                uint8_t *a = smem + s * WG_STAGE_BYTES;
                mbar_expect_tx(&full[s], WG_STAGE_BYTES);
                tma_load(a, x_map, &full[s], i * WG_BK, tile.tok0);
                tma_load(a + WG_A_BYTES, w_map, &full[s], i * WG_BK, tile.wrow0);
            }
        }
    } else {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
        consume<WG_STAGES>(out, n_rows, steps, tile, smem, full, empty, wg - 1, tid);
    }
}

// STAGES stages of STAGE_BYTES in dynamic shared memory (aligned to the swizzle's 1024
// bytes), RAW bytes after them, then the barriers: full and empty a stage, SLOTS for the raw
// slots; initialized by thread 0 (a stage full on `full_count` arrivals, empty on
// `empty_count`: lane 0 of each consumer warp); the caller synchronizes the block before use.
template <int STAGES, int RAW, int SLOTS = 2, int STAGE_BYTES = WG_STAGE_BYTES>
static __device__ __forceinline__ uint8_t *stages(uint64_t **full, uint64_t **empty,
                                                  uint32_t full_count, uint32_t empty_count = 8) {
    extern __shared__ uint8_t smem_raw[];
    uint8_t *smem = (uint8_t *)(((size_t)smem_raw + 1023) & ~(size_t)1023);
    *full = (uint64_t *)(smem + STAGES * STAGE_BYTES + RAW);
    *empty = *full + STAGES;
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(&(*full)[s], full_count);
            mbar_init(&(*empty)[s], empty_count); // lane 0 of each consumer warp
        }
        for (int s = 0; s < SLOTS; ++s) mbar_init(*empty + STAGES + s, 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    return smem;
}

// Block x's expert and its token tile there: slot j is tile j - Σ_{e' < e} ceil(counts[e'] /
// 128) of the expert e whose tiles it falls in; e = n_expert past the last tile. Found by
// thread 0 and shared, which synchronizes the block.
static __device__ __forceinline__ int2 expert_slot(const int *__restrict__ index, int n_expert) {
    __shared__ int2 slot;
    if (threadIdx.x == 0) {
        int e = 0, before = 0;
        for (; e < n_expert; ++e) {
            const int tiles = (index[e] + WG_BM - 1) / WG_BM;
            if ((int)blockIdx.x < before + tiles) break;
            before += tiles;
        }
        slot = make_int2(e, (int)blockIdx.x - before);
    }
    __syncthreads();
    return slot;
}
#endif

// out[t][r] for t < n_tok, r < n_rows; k columns. Grid (n_tok / 128, n_rows / 256), rounded up;
// 384 threads; WG_SMEM bytes of dynamic shared memory. x_map: f16 [n_tok][k], box 64 x 128;
// w_map: f16 [n_rows][k], box 64 x 256; both 128-byte swizzled (ops/gemm_wgmma/).
extern "C" __global__ void __launch_bounds__(384, 1)
    gemm_wgmma_f16(const __grid_constant__ TmaMap x_map, const __grid_constant__ TmaMap w_map,
                   float *__restrict__ out, int n_tok, int n_rows, int k) {
    dependent_launch_entry();
#ifdef FERROLM_WGMMA
    uint64_t *full, *empty;
    uint8_t *smem = stages<WG_STAGES, 0>(&full, &empty, 1);
    __syncthreads();
    const int row0 = blockIdx.y * WG_BN;
    const WgTile tile = {(int)blockIdx.x * WG_BM, n_tok, row0, row0, 0, n_rows};
    gemm_tile(&x_map, &w_map, out, n_rows, k, tile, smem, full, empty);
#endif
}

// The experts' products of a prefill batch, grouped: x_map holds the pairs' activation rows
// in expert-sorted order (moe_gather_f16), w_map the experts' weights stacked, expert e's
// n_rows from row e * n_rows; out[q][r] for the pair at sorted position q. index: counts[E],
// offsets[E + 1] (moe_gemm.cu's moe_count/moe_scatter). Grid (ceil(pairs / 128) + E, n_rows /
// 256 rounded up), x over (expert, token tile) slots (expert_slot); slots past the last exit.
extern "C" __global__ void __launch_bounds__(384, 1)
    gemm_wgmma_f16_experts(const __grid_constant__ TmaMap x_map,
                           const __grid_constant__ TmaMap w_map, float *__restrict__ out,
                           const int *__restrict__ index, int n_expert, int n_rows, int k) {
    dependent_launch_entry();
#ifdef FERROLM_WGMMA
    uint64_t *full, *empty;
    uint8_t *smem = stages<WG_STAGES, 0>(&full, &empty, 1);
    const int2 slot = expert_slot(index, n_expert); // synchronizes the block
    const int e = slot.x, slot_tile = slot.y;
    if (e >= n_expert) return;
    const int *offsets = index + n_expert;
    const int row0 = blockIdx.y * WG_BN;
    const WgTile tile = {offsets[e] + slot_tile * WG_BM, offsets[e + 1], e * n_rows + row0, row0, 0,
                         n_rows};
    gemm_tile(&x_map, &w_map, out, n_rows, k, tile, smem, full, empty);
#endif
}

// ---- Q4_K weights unpacked in the GEMM ----------------------------------------------------
// The same tiles and consumers, but the weight comes in as its Q4_K blocks: the producer
// warpgroup's first thread brings a 256-column super-block of the tile's 256 rows (36 KB) by
// TMA into one of two raw slots, and its 128 threads write each 64-column stage of it as f16
// into the swizzled layout the MMAs read, two rows a thread, with the same bits as
// dequant_f16_q4_k (Expand8<Q4_K>): the product is bit for bit the expanded path's, without the
// f16 copy of the weight in memory. A stage is full on the x copy's bytes and 129 arrivals.
#define WQ_STAGES 3
#define WQ_BLOCK_BYTES 144
#define WQ_RAW_BYTES (WG_BN * WQ_BLOCK_BYTES)
#define WQ_SMEM (WQ_STAGES * WG_STAGE_BYTES + 2 * WQ_RAW_BYTES + (2 * WQ_STAGES + 2) * 8 + 1024)

#ifdef FERROLM_WGMMA
// The four codes in the bytes of v (each below 16) as dl * q - ml, each product rounded on its
// own (Expand8<Q4_K>'s roundings), as f16 pairs. q goes to f32 exactly through the bits of
// 2^23 + q, which costs no conversion instruction.
static __device__ __forceinline__ uint2 q4_quad_f16(uint32_t v, float dl, float ml) {
    float x[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
        const float q = __fsub_rn(__uint_as_float(__byte_perm(v, 0x4B000000u, 0x7540 | e)), 8388608.0f);
        x[e] = __fsub_rn(__fmul_rn(dl, q), ml);
    }
    return make_uint2(pack_f16x2(x[0], x[1]), pack_f16x2(x[2], x[3]));
}

// ---- A batched decode step's few tokens: the unpacking is the work ----------------------
// With at most 64 tokens one warpgroup's MMAs take a stage in a fraction of the time its
// unpacking takes, so the decode variant (gemm_wgmma_q4k_decode) unpacks with two warpgroups
// (0 and 2, a row a thread) while warpgroup 1 multiplies, and unpacks in f16 arithmetic: a code
// q goes to f16 exactly as the mantissa of 1024 + q, 1024 is taken off exactly, then one f16
// fma gives dl * q - ml with dl and ml rounded to f16 (about two instructions a weight, where
// Expand8's f32 roundings take five). Not the expanded path's bits: the contract is the f16
// GEMM's tolerance (ops/gemm_wgmma/).

// Columns 64m.. 64m + 63 of the Q4_K block at blk (sub-blocks 2m, 2m + 1: the low and high
// nibbles of code bytes 32m..) as f16 into the 128-byte swizzled row brow of a B stage, whose
// 16-byte chunk c sits at chunk c ^ sw (sw the row's index mod 8): in f32 with Expand8's
// roundings (q4_quad_f16), or, F16X2, in f16 arithmetic (q4_quad_f16x2).
template <bool F16X2>
static __device__ __forceinline__ void q4k_row_f16(const uint8_t *blk, int m, uint8_t *brow,
                                                   int sw) {
    uint16_t aux[2];
    scales_k4(blk + 4, m, aux);
    const float d = f16_bits_to_f32(*(const uint16_t *)blk);
    const float dmin = f16_bits_to_f32(*(const uint16_t *)(blk + 2));
    const float dl0 = __fmul_rn(d, (float)(aux[0] & 0xff)), dl1 = __fmul_rn(d, (float)(aux[0] >> 8));
    const float ml0 = __fmul_rn(dmin, (float)(aux[1] & 0xff));
    const float ml1 = __fmul_rn(dmin, (float)(aux[1] >> 8));
    // The f16 arithmetic's operands (unused, and dropped, in the f32 one).
    const uint32_t dl2[2] = {pack_f16x2(dl0, dl0), pack_f16x2(dl1, dl1)};
    const uint32_t nml2[2] = {pack_f16x2(-ml0, -ml0), pack_f16x2(-ml1, -ml1)};
    // Sub-block j's (0 or 1) four codes of v, by the one arithmetic or the other.
    const auto quad = [&](uint32_t v, int j) {
        return F16X2 ? q4_quad_f16x2(v, dl2[j], nml2[j])
                     : q4_quad_f16(v, j ? dl1 : dl0, j ? ml1 : ml0);
    };
    const uint4 q0 = *(const uint4 *)(blk + 16 + 32 * m), q1 = *(const uint4 *)(blk + 32 + 32 * m);
    const uint32_t w[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
#pragma unroll
    for (int c = 0; c < 4; ++c) {
        const uint2 a = quad(w[2 * c] & 0x0F0F0F0Fu, 0), b = quad(w[2 * c + 1] & 0x0F0F0F0Fu, 0);
        *(uint4 *)(brow + ((c ^ sw) << 4)) = make_uint4(a.x, a.y, b.x, b.y);
        const uint2 e = quad((w[2 * c] >> 4) & 0x0F0F0F0Fu, 1);
        const uint2 f = quad((w[2 * c + 1] >> 4) & 0x0F0F0F0Fu, 1);
        *(uint4 *)(brow + (((4 + c) ^ sw) << 4)) = make_uint4(e.x, e.y, f.x, f.y);
    }
}

// The producer of a tile of Q4_K weights over `blocks` super-blocks from sb0, run by the
// THREADS threads that unpack (u their index; u 0 also issues the copies; they meet on named
// barrier 1): x stages (A_BYTES of tokens) by TMA into a ring of STAGES, the weight's
// super-blocks by TMA into a ring of SLOTS raw slots (raw_full their barriers; SLOTS - 1
// super-blocks in flight while one is unpacked), each stage's 256 x 64 weight written as f16,
// WG_BN / THREADS rows a thread, by q4k_row_f16<F16X2> (Expand8's bits, or the decode forms'
// f16 arithmetic). A box starts at a block's first byte, which must be on a 16-byte boundary
// of its row: Q4_K's 144-byte blocks are, Q6_K's 210-byte blocks mostly not (a box at byte 210
// was an illegal instruction on the H100, session 44), so Q6_K has no producer here.
template <int THREADS, bool F16X2, int STAGES = WQ_STAGES, int SLOTS = 2,
          int A_BYTES = WG_A_BYTES>
static __device__ __forceinline__ void produce_q4k(const TmaMap *x_map, const TmaMap *w_map,
                                                   int sb0, int blocks, WgTile tile, uint8_t *smem,
                                                   uint64_t *full, uint64_t *empty, int u) {
    constexpr int STAGE_BYTES = A_BYTES + WG_B_BYTES, RAW_BYTES = WG_BN * WQ_BLOCK_BYTES;
    uint64_t *raw_full = empty + STAGES;
    uint8_t *raw = smem + STAGES * STAGE_BYTES;
    const int steps = blocks * 4;
    // Super-block sb into its slot.
    const auto fetch = [&](int sb) {
        const int n = sb % SLOTS;
        mbar_expect_tx(&raw_full[n], RAW_BYTES);
        tma_load(raw + n * RAW_BYTES, w_map, &raw_full[n], (sb0 + sb) * WQ_BLOCK_BYTES, tile.wrow0);
    };
    if (u == 0) {
        for (int sb = 0; sb < SLOTS - 1 && sb < blocks; ++sb) fetch(sb);
    }
    for (int i = 0; i < steps; ++i) {
        const int s = i % STAGES, sb = i / 4, m = i % 4;
        const uint8_t *slot = raw + (sb % SLOTS) * RAW_BYTES;
        if (m == 0) {
            // Every unpacking thread is done with super-block sb - 1, whose slot takes
            // sb + SLOTS - 1.
            asm volatile("bar.sync 1, %0;" ::"n"(THREADS) : "memory");
            if (u == 0 && sb + SLOTS - 1 < blocks) fetch(sb + SLOTS - 1);
            mbar_wait(&raw_full[sb % SLOTS], (sb / SLOTS) & 1);
        }
        if (i >= STAGES) mbar_wait(&empty[s], ((i / STAGES) - 1) & 1);
        uint8_t *a = smem + s * STAGE_BYTES;
        if (u == 0) {
            mbar_expect_tx(&full[s], A_BYTES);
            tma_load(a, x_map, &full[s], (sb0 * 4 + i) * WG_BK, tile.tok0);
        }
#pragma unroll 1
        for (int h = 0; h < WG_BN / THREADS; ++h) {
            const int r = u + THREADS * h;
            q4k_row_f16<F16X2>(slot + r * WQ_BLOCK_BYTES, m, a + A_BYTES + r * 128, r % 8);
        }
        // The MMAs read the stage through the async proxy.
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        mbar_arrive(&full[s]);
    }
}

// A Q4_K tile over `blocks` super-blocks from sb0.
static __device__ __forceinline__ void gemm_tile_q4k(const TmaMap *x_map, const TmaMap *w_map,
                                                     float *__restrict__ out, int n_rows, int sb0,
                                                     int blocks, WgTile tile, uint8_t *smem,
                                                     uint64_t *full, uint64_t *empty) {
    const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
    if (wg == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 56;");
        produce_q4k<128, false>(x_map, w_map, sb0, blocks, tile, smem, full, empty, tid);
    } else {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 224;");
        consume<WQ_STAGES>(out, n_rows, blocks * 4, tile, smem, full, empty, wg - 1, tid);
    }
}

// Split-K, after a consumer thread's stores (ctid its index among the 256 consumer threads):
// the tile's last split to finish (counted in done[tile], which it resets for the next launch)
// adds the splits' shares in split order into out, whichever finished first: the same bits
// every run. part holds gridDim.z planes of n_tok x n_rows. VECS: add_split_planes's outputs
// in flight a thread (the prefill kernel's consumers keep one, within their registers).
template <int VECS>
static __device__ __forceinline__ void add_splits(float *__restrict__ out,
                                                  const float *__restrict__ part,
                                                  unsigned *__restrict__ done, int n_tok,
                                                  int n_rows, WgTile tile, int ctid) {
    __shared__ bool last;
    const int t = blockIdx.y * gridDim.x + blockIdx.x;
    // The consumers' shares, then one thread's fence and count.
    asm volatile("bar.sync 2, 256;" ::: "memory");
    if (ctid == 0) last = block_fence_count(done + t, gridDim.z);
    asm volatile("bar.sync 2, 256;" ::: "memory");
    if (!last) return;
    const int toks = min(WG_BM, n_tok - tile.tok0), rows = min(WG_BN, n_rows - tile.row0);
    add_split_planes<VECS>(out, part, (size_t)n_tok * n_rows, gridDim.z, n_rows, tile.tok0, toks,
                     tile.row0, rows, ctid, 256);
    if (ctid == 0) done[t] = 0;
}
#endif

// gemm_wgmma_f16 with a Q4_K weight: w_map the raw blocks as bytes [n_rows][k / 256 * 144],
// box 144 x 256, unswizzled; k a multiple of 256. WQ_SMEM bytes of dynamic shared memory.
// Split-K over grid z (a batched decode step's one token tile would leave most SMs idle):
// share z takes super-blocks z * split_blocks.. (none empty) into part[z] (gridDim.z planes of
// n_tok x n_rows floats), added into out by add_splits; done holds a zeroed counter per tile.
// Unsplit (grid z 1), part and done are not read.
extern "C" __global__ void __launch_bounds__(384, 1)
    gemm_wgmma_q4k(const __grid_constant__ TmaMap x_map, const __grid_constant__ TmaMap w_map,
                   float *__restrict__ out, int n_tok, int n_rows, int k, float *__restrict__ part,
                   unsigned *__restrict__ done, int split_blocks) {
    dependent_launch_entry();
#ifdef FERROLM_WGMMA
    uint64_t *full, *empty;
    uint8_t *smem = stages<WQ_STAGES, 2 * WQ_RAW_BYTES>(&full, &empty, 129);
    __syncthreads();
    const int split = gridDim.z > 1;
    const int sb0 = blockIdx.z * split_blocks;
    const int blocks = split ? min(k / 256 - sb0, split_blocks) : k / 256;
    const int row0 = blockIdx.y * WG_BN;
    const WgTile tile = {(int)blockIdx.x * WG_BM, n_tok, row0, row0, 0, n_rows};
    float *dst = split ? part + (size_t)blockIdx.z * n_tok * n_rows : out;
    gemm_tile_q4k(&x_map, &w_map, dst, n_rows, split ? sb0 : 0, blocks, tile, smem, full, empty);
    if (split && threadIdx.x >= 128) add_splits<1>(out, part, done, n_tok, n_rows, tile, threadIdx.x - 128);
#endif
}

#ifdef FERROLM_WGMMA
// A batched decode step's tile of Q4_K weights (at most 64 tokens: one consumer warpgroup,
// warpgroup 1), unpacked by warpgroups 0 and 2 in f16 arithmetic (produce_q4k<256, true,
// ...>) through STAGES f16 stages of A_BYTES of tokens and SLOTS raw slots. Grid y covers
// ceil(n_rows / 256) tiles of each of the launch's matrices (one, or two of one shape: gate
// and up), map j's products going to out[j]; grid z the k shares, map j's in planes
// j * gridDim.z.. of part.
template <int STAGES, int SLOTS, int A_BYTES>
static __device__ __forceinline__ void decode_tile(const TmaMap *x_map, const TmaMap *w_map0,
                                                   const TmaMap *w_map1, float *out0, float *out1,
                                                   int n_tok, int n_rows, int k,
                                                   float *__restrict__ part,
                                                   unsigned *__restrict__ done, int split_blocks) {
    uint64_t *full, *empty;
    uint8_t *smem = stages<STAGES, SLOTS * WQ_RAW_BYTES, SLOTS, A_BYTES + WG_B_BYTES>(
        &full, &empty, 257, 4);
    __syncthreads();
    const int split = gridDim.z > 1;
    const int sb0 = blockIdx.z * split_blocks;
    const int blocks = split ? min(k / 256 - sb0, split_blocks) : k / 256;
    const int tiles = (n_rows + WG_BN - 1) / WG_BN, j = (int)blockIdx.y / tiles;
    const int row0 = ((int)blockIdx.y % tiles) * WG_BN;
    const WgTile tile = {0, n_tok, row0, row0, 0, n_rows};
    float *out = j == 0 ? out0 : out1;
    float *planes = part + (size_t)j * gridDim.z * n_tok * n_rows;
    float *dst = split ? planes + (size_t)blockIdx.z * n_tok * n_rows : out;
    if (threadIdx.x / 128 == 1) {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 240;");
        consume<STAGES, A_BYTES>(dst, n_rows, blocks * 4, tile, smem, full, empty, 0,
                                 threadIdx.x % 128);
    } else {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 80;");
        produce_q4k<256, true, STAGES, SLOTS, A_BYTES>(
            x_map, j == 0 ? w_map0 : w_map1, split ? sb0 : 0, blocks, tile, smem, full, empty,
            threadIdx.x < 128 ? threadIdx.x : threadIdx.x - 128);
    }
    if (split && threadIdx.x >= 128) add_splits<4>(out, planes, done, n_tok, n_rows, tile, threadIdx.x - 128);
}
#endif

// A decode entry point: decode_tile with the given f16 stages, raw slots and A bytes.
#define DECODE_ENTRY(NAME, STAGES, SLOTS, A_BYTES)                                               \
    extern "C" __global__ void __launch_bounds__(384, 1)                                         \
        NAME(const __grid_constant__ TmaMap x_map, const __grid_constant__ TmaMap w_map0,       \
             const __grid_constant__ TmaMap w_map1, float *out0, float *out1, int n_tok,        \
             int n_rows, int k, float *__restrict__ part, unsigned *__restrict__ done,          \
             int split_blocks) {                                                                \
        dependent_launch_entry();                                                               \
        DECODE_BODY(STAGES, SLOTS, A_BYTES)                                                     \
    }
#ifdef FERROLM_WGMMA
#define DECODE_BODY(STAGES, SLOTS, A_BYTES)                                                      \
    decode_tile<STAGES, SLOTS, A_BYTES>(&x_map, &w_map0, &w_map1, out0, out1, n_tok, n_rows, k,  \
                                        part, done, split_blocks);
#else
#define DECODE_BODY(STAGES, SLOTS, A_BYTES)
#endif

// gemm_wgmma_q4k for a batched decode step of at most 64 tokens (n_tok <= 64) over one or two
// matrices of one shape (decode_tile; w_map1 and out1 read only by a second matrix's tiles),
// with gemm_wgmma_q4k's stages and raw slots (x_map's box 128 tokens); split-K as
// gemm_wgmma_q4k's, grid (1, tiles x matrices, shares).
DECODE_ENTRY(gemm_wgmma_q4k_decode, WQ_STAGES, 2, WG_A_BYTES)

// The same with three super-blocks of weights in flight where that one keeps one (its
// copies, about 37 KB each, set its pace): x_map's box is 64 tokens (the step's at most),
// two f16 stages, four raw slots; WD_SMEM bytes of dynamic shared memory. The same bits.
#define WD_STAGES 2
#define WD_SLOTS 4
#define WD_TOKENS 64
#define WD_A_BYTES (WD_TOKENS * WG_BK * 2)
#define WD_SMEM (WD_STAGES * (WD_A_BYTES + WG_B_BYTES) + WD_SLOTS * WQ_RAW_BYTES + (2 * WD_STAGES + WD_SLOTS) * 8 + 1024)
DECODE_ENTRY(gemm_wgmma_q4k_decode_deep, WD_STAGES, WD_SLOTS, WD_A_BYTES)

// gemm_wgmma_f16_experts with Q4_K weights (maps as gemm_wgmma_q4k's, the experts stacked),
// and two of them side by side when `maps` is 2 (gate and up): grid y covers ceil(n_rows / 256)
// tiles of each, map j's products stored at columns j * n_rows.. of out's rows of maps * n_rows.
extern "C" __global__ void __launch_bounds__(384, 1)
    gemm_wgmma_q4k_experts(const __grid_constant__ TmaMap x_map,
                           const __grid_constant__ TmaMap w_map0,
                           const __grid_constant__ TmaMap w_map1, float *__restrict__ out,
                           const int *__restrict__ index, int n_expert, int n_rows, int k,
                           int maps) {
    dependent_launch_entry();
#ifdef FERROLM_WGMMA
    uint64_t *full, *empty;
    uint8_t *smem = stages<WQ_STAGES, 2 * WQ_RAW_BYTES>(&full, &empty, 129);
    const int2 slot = expert_slot(index, n_expert); // synchronizes the block
    const int e = slot.x, slot_tile = slot.y;
    if (e >= n_expert) return;
    const int *offsets = index + n_expert;
    const int tiles = (n_rows + WG_BN - 1) / WG_BN, j = (int)blockIdx.y / tiles;
    const int row0 = ((int)blockIdx.y % tiles) * WG_BN;
    const WgTile tile = {offsets[e] + slot_tile * WG_BM, offsets[e + 1], e * n_rows + row0, row0,
                         j * n_rows, maps * n_rows};
    gemm_tile_q4k(&x_map, j == 0 ? &w_map0 : &w_map1, out, n_rows, 0, k / 256, tile, smem, full,
                  empty);
#endif
}

// The GEMM's operands. Kept in this file: nothing else reads f16 matrices.

// y[i] = f16(x[i]) for i < n (n a multiple of 8), eight a thread.
extern "C" __global__ void round_f16(const float *__restrict__ x, uint16_t *__restrict__ y,
                                     size_t n) {
    dependent_launch_entry();
    for (size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 8; i < n;
         i += (size_t)gridDim.x * blockDim.x * 8) {
        const float4 a = *(const float4 *)(x + i), b = *(const float4 *)(x + i + 4);
        uint4 o;
        o.x = (uint32_t)f32_to_f16_bits(a.x) | ((uint32_t)f32_to_f16_bits(a.y) << 16);
        o.y = (uint32_t)f32_to_f16_bits(a.z) | ((uint32_t)f32_to_f16_bits(a.w) << 16);
        o.z = (uint32_t)f32_to_f16_bits(b.x) | ((uint32_t)f32_to_f16_bits(b.y) << 16);
        o.w = (uint32_t)f32_to_f16_bits(b.z) | ((uint32_t)f32_to_f16_bits(b.w) << 16);
        *(uint4 *)(y + i) = o;
    }
}

// Eight elements from i0 (a multiple of 8) of block b as f16 bits, two a word: each as
// WeightFormat::dequant gives it (ferrolm-quant's dequantize), rounded to f16. The K-quants
// decode their scale once for the eight (they share a sub-block), with the same roundings.
template <int TYPE> struct Expand8 {
    typedef WeightFormat<TYPE> W;
    static __device__ __forceinline__ void get(const typename W::block *b, int i0, uint32_t h[4]) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            h[j] = (uint32_t)f32_to_f16_bits(W::dequant(b, i0 + 2 * j)) |
                   ((uint32_t)f32_to_f16_bits(W::dequant(b, i0 + 2 * j + 1)) << 16);
        }
    }
};

template <> struct Expand8<GGML_TYPE_Q4_K> {
    typedef WeightFormat<GGML_TYPE_Q4_K> W;
    static __device__ __forceinline__ void get(const block_q4_K *b, int i0, uint32_t h[4]) {
        const int j = i0 / 32;
        int sc, m;
        float d, dmin;
        W::tile_scales_int(b, j, sc, m, d, dmin);
        const float dl = __fmul_rn(d, (float)sc), ml = __fmul_rn(dmin, (float)m);
        const uint2 qs = *(const uint2 *)(b->qs + 32 * (j / 2) + i0 % 32);
        const int shift = 4 * (j % 2);
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const uint32_t w = k < 2 ? qs.x : qs.y;
            const int q0 = (w >> (16 * (k % 2) + shift)) & 0xF;
            const int q1 = (w >> (16 * (k % 2) + 8 + shift)) & 0xF;
            h[k] = (uint32_t)f32_to_f16_bits(__fsub_rn(__fmul_rn(dl, (float)q0), ml)) |
                   ((uint32_t)f32_to_f16_bits(__fsub_rn(__fmul_rn(dl, (float)q1), ml)) << 16);
        }
    }
};

template <> struct Expand8<GGML_TYPE_Q6_K> {
    static __device__ __forceinline__ void get(const block_q6_K *b, int i0, uint32_t h[4]) {
        const int n = i0 / 128, r = i0 % 128, l0 = r % 32, c = r / 32;
        const uint16_t dbits =
            (uint16_t)(((const uint8_t *)&b->d)[0] | (((const uint8_t *)&b->d)[1] << 8));
        const float dl = __fmul_rn(f16_bits_to_f32(dbits), (float)b->scales[i0 / 16]);
        const uint8_t *ql = b->ql + 64 * n + l0 + 32 * (c % 2), *qh = b->qh + 32 * n + l0;
        float x[8];
#pragma unroll
        for (int e = 0; e < 8; ++e) {
            const int lo = c < 2 ? (ql[e] & 0xF) : (ql[e] >> 4);
            const int hi = (qh[e] >> (2 * c)) & 3;
            x[e] = __fmul_rn(dl, (float)((lo | (hi << 4)) - 32));
        }
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            h[k] = (uint32_t)f32_to_f16_bits(x[2 * k]) | ((uint32_t)f32_to_f16_bits(x[2 * k + 1]) << 16);
        }
    }
};

// MXFP4: elements i0.. (i0 in {0, 8, 16, 24}) are the low nibbles of code bytes i0..i0 + 7, or
// the high ones of bytes i0 - 16.., each the doubled E2M1 value times the halved E8M0 scale:
// ggml's dequantized value, exact in f32, then rounded to f16.
template <> struct Expand8<GGML_TYPE_MXFP4> {
    static __device__ __forceinline__ void get(const block_mxfp4 *b, int i0, uint32_t h[4]) {
        const float d = e8m0_to_f32_half(b->e);
        const int byte0 = i0 % 16;
        float x[8];
#pragma unroll
        for (int w = 0; w < 2; ++w) {
            const int2 v = mxfp4_values(get_int_b1(b->qs + byte0, w));
            const int codes = i0 < 16 ? v.x : v.y;
#pragma unroll
            for (int k = 0; k < 4; ++k) {
                x[4 * w + k] = __fmul_rn(d, (float)(int8_t)(codes >> (8 * k)));
            }
        }
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            h[k] = (uint32_t)f32_to_f16_bits(x[2 * k]) | ((uint32_t)f32_to_f16_bits(x[2 * k + 1]) << 16);
        }
    }
};

// A quantized matrix of rows x cols expanded to f16 (Expand8). Row r goes to output row
// (r / group) * stride + offset + r % group (group = stride = rows, offset 0: the same layout;
// the experts' gate and up interleaved a group of n_ff rows each). A block a row at a time,
// eight elements a thread.
template <int TYPE>
static __device__ __forceinline__ void dequant_rows_f16(const uint8_t *__restrict__ w,
                                                        uint16_t *__restrict__ out, int rows,
                                                        int cols, int group, int stride,
                                                        int offset) {
    typedef WeightFormat<TYPE> W;
    typedef typename W::block B;
    const int blocks_a_row = cols / W::qk;
    // Rows over blocks, columns over threads: no division in the loop but by qk (a constant).
    for (int r = blockIdx.x; r < rows; r += gridDim.x) {
        const B *row = (const B *)w + (size_t)r * blocks_a_row;
        uint16_t *o = out + ((size_t)(r / group) * stride + offset + r % group) * cols;
        for (int c = threadIdx.x * 8; c < cols; c += blockDim.x * 8) {
            uint32_t h[4];
            Expand8<TYPE>::get(row + c / W::qk, c % W::qk, h);
            *(uint4 *)(o + c) = make_uint4(h[0], h[1], h[2], h[3]);
        }
    }
}

#define DEQUANT_F16_INSTANCE(NAME, TYPE)                                                          \
    extern "C" __global__ void dequant_f16_##NAME(const uint8_t *w, uint16_t *out, int rows,     \
                                                  int cols, int group, int stride, int offset) {  \
        dependent_launch_entry();                                                                 \
        dequant_rows_f16<TYPE>(w, out, rows, cols, group, stride, offset);                        \
    }

DEQUANT_F16_INSTANCE(q4_0, GGML_TYPE_Q4_0)
DEQUANT_F16_INSTANCE(q4_1, GGML_TYPE_Q4_1)
DEQUANT_F16_INSTANCE(q8_0, GGML_TYPE_Q8_0)
DEQUANT_F16_INSTANCE(q4_k, GGML_TYPE_Q4_K)
DEQUANT_F16_INSTANCE(q6_k, GGML_TYPE_Q6_K)
DEQUANT_F16_INSTANCE(mxfp4, GGML_TYPE_MXFP4)

// The experts' f16 path around the grouped GEMM (ops/gemm_wgmma/experts.rs). Sorted positions
// q below offsets[E] (the pairs that have an expert) are computed, a block a row at a time (grid
// at most the batch's pairs), the row's columns over its threads.

// xs[q] = f16(x[sorted[q] / n_used]): the pairs' activation rows in expert order, eight
// elements a thread.
extern "C" __global__ void moe_gather_f16(const float *__restrict__ x, const int *__restrict__ sorted,
                                          const int *__restrict__ index, uint16_t *__restrict__ xs,
                                          int n_expert, int n_used, int n_embd) {
    dependent_launch_entry();
    const int used = index[2 * n_expert];
    for (int q = blockIdx.x; q < used; q += gridDim.x) {
        const float *row = x + (size_t)(sorted[q] / n_used) * n_embd;
        for (int c = threadIdx.x * 8; c < n_embd; c += blockDim.x * 8) {
            const float4 a = *(const float4 *)(row + c), b = *(const float4 *)(row + c + 4);
            uint4 o;
            o.x = (uint32_t)f32_to_f16_bits(a.x) | ((uint32_t)f32_to_f16_bits(a.y) << 16);
            o.y = (uint32_t)f32_to_f16_bits(a.z) | ((uint32_t)f32_to_f16_bits(a.w) << 16);
            o.z = (uint32_t)f32_to_f16_bits(b.x) | ((uint32_t)f32_to_f16_bits(b.y) << 16);
            o.w = (uint32_t)f32_to_f16_bits(b.z) | ((uint32_t)f32_to_f16_bits(b.w) << 16);
            *(uint4 *)(xs + (size_t)q * n_embd + c) = o;
        }
    }
}

// h[q][j] = f16(act(gu[q][j], gu[q][n_ff + j])) (the CPU's SwiGLU roundings, then f16; gpt-oss:
// the expert's biases first and swiglu_oai, ExpertEpilogue), gu the interleaved gate and up
// products of sorted position q, whose expert is the last with offsets[e] <= q.
extern "C" __global__ void moe_swiglu_f16(const float *__restrict__ gu, const int *__restrict__ index,
                                          uint16_t *__restrict__ h, int n_expert, int n_ff,
                                          const float *__restrict__ gate_bias,
                                          const float *__restrict__ up_bias, float alpha,
                                          float limit) {
    dependent_launch_entry();
    const ExpertEpilogue ep{gate_bias, up_bias, nullptr, alpha, limit};
    const int used = index[2 * n_expert];
    for (int q = blockIdx.x; q < used; q += gridDim.x) {
        const float *row = gu + (size_t)q * 2 * n_ff;
        const int e = gate_bias != nullptr ? last_at_most(index + n_expert, n_expert, q) : 0;
        for (int j = threadIdx.x; j < n_ff; j += blockDim.x) {
            h[(size_t)q * n_ff + j] = f32_to_f16_bits(ep.act(e, j, n_ff, row[j], row[n_ff + j]));
        }
    }
}

// y[p] = weights[p] * ys[q] for p = sorted[q]: the down products back in pair order, scaled
// by their routing weight (gpt-oss: plus the expert's down bias first, ExpertEpilogue), for
// moe_combine; four elements a thread.
extern "C" __global__ void moe_unsort_weighted(const float *__restrict__ ys,
                                               const int *__restrict__ sorted,
                                               const int *__restrict__ index,
                                               const float *__restrict__ weights,
                                               float *__restrict__ y, int n_expert, int n_embd,
                                               const float *__restrict__ down_bias) {
    dependent_launch_entry();
    const ExpertEpilogue ep{nullptr, nullptr, down_bias, 0.0f, 0.0f};
    const int used = index[2 * n_expert];
    for (int q = blockIdx.x; q < used; q += gridDim.x) {
        const int p = sorted[q];
        const float w = weights[p];
        const int e = down_bias != nullptr ? last_at_most(index + n_expert, n_expert, q) : 0;
        for (int c = threadIdx.x * 4; c < n_embd; c += blockDim.x * 4) {
            const float4 v = *(const float4 *)(ys + (size_t)q * n_embd + c);
            *(float4 *)(y + (size_t)p * n_embd + c) =
                make_float4(__fmul_rn(w, ep.down(e, c, n_embd, v.x)),
                            __fmul_rn(w, ep.down(e, c + 1, n_embd, v.y)),
                            __fmul_rn(w, ep.down(e, c + 2, n_embd, v.z)),
                            __fmul_rn(w, ep.down(e, c + 3, n_embd, v.w)));
        }
    }
}
