// Elementwise f32 ops of the forward pass, each the CPU's expression (crates/cpu/src/norm.rs)
// with the same rounding order. Grid-stride loops: any grid size is correct.
#include "common.cuh"
#include "quant.cuh"

#define GRID_STRIDE(i, n)                                                                           \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (size_t)(n);                \
         i += (size_t)gridDim.x * blockDim.x)

// acc += x.
extern "C" __global__ void add_f32(float *__restrict__ acc, const float *__restrict__ x, int n) {
    dependent_launch_entry();
    GRID_STRIDE(i, n) {
        acc[i] += x[i];
    }
}

// x[t] += b for every width-element row t.
extern "C" __global__ void add_bias_f32(float *__restrict__ x, const float *__restrict__ b, int n,
                                        int width) {
    dependent_launch_entry();
    GRID_STRIDE(i, n) {
        x[i] += b[i % width];
    }
}

// gate = silu(gate) * up = gate / (1 + exp(-gate)) * up; with `gate16` (else null), also
// that rounded to f16 there, as gemm_wgmma.cu's round_f16 would round it for an f16 product.
extern "C" __global__ void swiglu_f32(float *__restrict__ gate, const float *__restrict__ up,
                                      int n, uint16_t *__restrict__ gate16) {
    dependent_launch_entry();
    GRID_STRIDE(i, n) {
        const float g = silu_mul(gate[i], up[i]);
        gate[i] = g;
        if (gate16 != nullptr) {
            gate16[i] = f32_to_f16_bits(g);
        }
    }
}

// gate = swiglu_oai(gate, up) (gpt-oss's experts; common.cuh).
extern "C" __global__ void swiglu_oai_f32(float *__restrict__ gate, const float *__restrict__ up,
                                          int n, float alpha, float limit) {
    dependent_launch_entry();
    GRID_STRIDE(i, n) {
        gate[i] = swiglu_oai(gate[i], up[i], alpha, limit);
    }
}

// gate = gelu(gate) * up, GELU's tanh form as the CPU writes it (norm::geglu):
// 0.5 x (1 + tanh(sqrt(2/pi) x (1 + 0.044715 x^2))) * up, each product and sum rounded in the
// CPU's order (no contraction); tanhf is within 2 ulp of the CPU's tanh.
extern "C" __global__ void geglu_f32(float *__restrict__ gate, const float *__restrict__ up,
                                     int n) {
    dependent_launch_entry();
    const float sqrt_2_over_pi = 0.7978846f, coef_a = 0.044715f;
    GRID_STRIDE(i, n) {
        const float x = gate[i];
        const float inner = __fmul_rn(__fmul_rn(sqrt_2_over_pi, x),
                                      __fadd_rn(1.0f, __fmul_rn(__fmul_rn(coef_a, x), x)));
        const float g = __fmul_rn(__fmul_rn(0.5f, x), __fadd_rn(1.0f, tanhf(inner)));
        gate[i] = __fmul_rn(g, up[i]);
    }
}

// x *= s (gemma3's embedding scale).
extern "C" __global__ void scale_f32(float *__restrict__ x, float s, int n) {
    dependent_launch_entry();
    GRID_STRIDE(i, n) {
        x[i] = __fmul_rn(x[i], s);
    }
}

// A strided copy of columns (the CPU's copy_cols, deepseek2's latent attention): in each of
// `rows` rows, `count` runs of `width` values, run i read from column src_off + i * src_step
// of a src_width row and written from column dst_off + i * dst_step of a dst_width row.
// Element e of the grid walks row, run and column in that order.
extern "C" __global__ void copy_cols_f32(float *__restrict__ dst, const float *__restrict__ src,
                                         int rows, int width, int count, int src_width,
                                         int src_off, int src_step, int dst_width, int dst_off,
                                         int dst_step) {
    dependent_launch_entry();
    const size_t per_row = (size_t)count * width;
    GRID_STRIDE(e, per_row * rows) {
        const size_t row = e / per_row;
        const int run = (int)((e % per_row) / width), col = (int)(e % width);
        dst[row * dst_width + dst_off + (size_t)run * dst_step + col] =
            src[row * src_width + src_off + (size_t)run * src_step + col];
    }
}

// The Walsh-Hadamard rotation of a quantized KV cache (crates/cpu/src/hadamard.rs, ggml's
// ggml_compute_forward_fwht): each chunk of n (a power of two, 64 to 256) scaled by 1/sqrt(n),
// then butterflies (u, v) -> (u + v, u - v) over strides 1, 2, .. n/2, in place, in the CPU's
// roundings. A block of n threads per chunk (thread j owns element j), grid: the chunks.
extern "C" __global__ void hadamard_f32(float *__restrict__ x, float scale, int n) {
    dependent_launch_entry();
    __shared__ float s[256];
    float *row = x + (size_t)blockIdx.x * n;
    const int j = threadIdx.x;
    s[j] = __fmul_rn(row[j], scale);
    for (int len = 1; len < n; len *= 2) {
        __syncthreads();
        const float u = s[j & ~len], v = s[j | len];
        __syncthreads();
        s[j] = (j & len) ? __fsub_rn(u, v) : __fadd_rn(u, v);
    }
    row[j] = s[j];
}

// x rounded through Q8_0 blocks in place: each 32 values become f16(d) · q with d and q from
// quantize_q8_0_warp, the x86 quantizer the CPU applies to a query before its integer dots with a
// q8_0 or q4_0 K (llama.cpp's vec_dot_type). Scores of a query so rounded, taken in f32 against the
// dequantized keys, are the CPU's integer dots up to f32 rounding: each product of two codes times
// their f16 scales is exact in f32. Grid-stride over warps, a block of 32 values a warp; n a
// multiple of 32.
extern "C" __global__ void round_q8_0_f32(float *__restrict__ x, int n) {
    dependent_launch_entry();
    __shared__ block_q8_0 blocks[256 / WARP_SIZE];
    const int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
    block_q8_0 *b = &blocks[warp];
    const int warps = gridDim.x * blockDim.x / WARP_SIZE;
    for (int w = (blockIdx.x * blockDim.x + threadIdx.x) / WARP_SIZE; w * WARP_SIZE < n;
         w += warps) {
        float *v = x + (size_t)w * WARP_SIZE;
        quantize_q8_0_warp(v[lane], b);
        __syncwarp();
        v[lane] = f16_bits_to_f32(b->d) * (float)b->qs[lane];
        __syncwarp(); // the block is reused by the next step
    }
}

// A row's best so far: value and index (GREEDY_NONE: no value seen yet).
#define GREEDY_NONE 0xffffffffu
struct GreedyBest {
    float v;
    uint32_t i;
};

// The larger of two partial bests, the lower index on a tie (-0 == +0, as the host's walk: the
// first index holding the maximum).
static __device__ __forceinline__ GreedyBest greedy_better(GreedyBest a, GreedyBest b) {
    if (a.i == GREEDY_NONE) {
        return b;
    }
    if (b.i == GREEDY_NONE || a.v > b.v) {
        return a;
    }
    if (b.v > a.v) {
        return b;
    }
    return a.i < b.i ? a : b;
}

static __device__ __forceinline__ GreedyBest greedy_warp(GreedyBest x) {
#pragma unroll
    for (int offset = WARP_SIZE / 2; offset > 0; offset >>= 1) {
        GreedyBest o;
        o.v = __shfl_xor_sync(FULL_MASK, x.v, offset);
        o.i = __shfl_xor_sync(FULL_MASK, x.i, offset);
        x = greedy_better(x, o);
    }
    return x;
}

// The block's best, every thread's partial given; the result in every thread. `red` holds a
// partial a warp.
static __device__ __forceinline__ GreedyBest greedy_block(GreedyBest x, GreedyBest *red) {
    const int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
    x = greedy_warp(x);
    if (lane == 0) {
        red[warp] = x;
    }
    __syncthreads();
    GreedyBest b = {0.0f, GREEDY_NONE};
    for (int w = 0; w < (int)(blockDim.x / WARP_SIZE); ++w) {
        b = greedy_better(b, red[w]); // in warp order: the same result in every thread
    }
    return b;
}

// Greedy choices of each row of x ([rows][width], a block a row): the first index of the
// row's largest value, NaNs passed over, 0 where the row starts with NaN (the host's argmax,
// ferrolm-engine's sampler), over the row as it is (picks[2r]) and with the n_banned ids of
// `banned` taken as -inf (picks[2r + 1]: an ignore_eos request's choice). Exact: compares
// only. Block GREEDY_THREADS threads.
#define GREEDY_THREADS 256
extern "C" __global__ void __launch_bounds__(GREEDY_THREADS)
    greedy_rows_f32(const float *__restrict__ x, uint32_t *__restrict__ picks, int width,
                    const uint32_t *__restrict__ banned, int n_banned) {
    dependent_launch_entry();
    __shared__ GreedyBest red[2][GREEDY_THREADS / WARP_SIZE];
    const float *row = x + (size_t)blockIdx.x * width;
    GreedyBest best = {0.0f, GREEDY_NONE}, allowed = {0.0f, GREEDY_NONE};
    for (int i = threadIdx.x; i < width; i += blockDim.x) {
        const float v = row[i];
        bool ban = false;
        for (int j = 0; j < n_banned; ++j) {
            ban |= banned[j] == (uint32_t)i;
        }
        const float a = ban ? __int_as_float(0xff800000) : v; // -inf: the row as the ban leaves it
        // Each thread walks increasing i: only a larger value replaces its best.
        if (!isnan(v) && (best.i == GREEDY_NONE || v > best.v)) {
            best = {v, (uint32_t)i};
        }
        if (!isnan(a) && (allowed.i == GREEDY_NONE || a > allowed.v)) {
            allowed = {a, (uint32_t)i};
        }
    }
    best = greedy_block(best, red[0]);
    allowed = greedy_block(allowed, red[1]);
    if (threadIdx.x == 0) {
        // The walk starts at index 0, and a NaN there is never replaced (NaN < x is false);
        // a banned index 0 holds -inf, not NaN.
        bool first_banned = false;
        for (int j = 0; j < n_banned; ++j) {
            first_banned |= banned[j] == 0u;
        }
        const bool nan_first = isnan(row[0]);
        picks[2 * blockIdx.x] = nan_first ? 0u : best.i;
        picks[2 * blockIdx.x + 1] = nan_first && !first_banned ? 0u : allowed.i;
    }
}
