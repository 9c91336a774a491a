// Elementwise f32 ops of the forward pass, each the CPU's expression (crates/cpu/src/norm.rs)
// with the same rounding order. Grid-stride loops: any grid size is correct.
#include "common.cuh"

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

// gate = silu(gate) * up = gate / (1 + exp(-gate)) * up.
extern "C" __global__ void swiglu_f32(float *__restrict__ gate, const float *__restrict__ up,
                                      int n) {
    dependent_launch_entry();
    GRID_STRIDE(i, n) {
        gate[i] = silu_mul(gate[i], up[i]);
    }
}

// The Walsh-Hadamard rotation of a quantized KV cache (crates/cpu/src/hadamard.rs, ggml's
// ggml_compute_forward_fwht): each chunk of n (a power of two, 64 or 128) scaled by 1/sqrt(n),
// then butterflies (u, v) -> (u + v, u - v) over strides 1, 2, .. n/2, in place, in the CPU's
// roundings. A block of n threads per chunk (thread j owns element j), grid: the chunks.
extern "C" __global__ void hadamard_f32(float *__restrict__ x, float scale, int n) {
    dependent_launch_entry();
    __shared__ float s[128];
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
