// f32 activations to the activation blocks of quant.cuh, bit for bit as the CPU backend (and
// llama.cpp's x86 CPU backend) quantizes them: Q8_1 (BlockQ8_1::quantize_x86: d = absmax / 127,
// q = x · (127 / absmax) rounded half to even, d rounded to f16) or Q8_K (BlockQ8K::quantize). IEEE
// division and no fused multiply-adds on these paths (NVRTC's defaults: prec-div, no fast math).
#include "common.cuh"
#include "quant.cuh"

// Launch: one thread per element, blockDim.x a multiple of 32 (one warp = one block), grid
// (ceil(cols / blockDim.x), rows). cols must be a multiple of 32.
extern "C" __global__ void quantize_q8_1(const float *__restrict__ x, block_q8_1 *__restrict__ y,
                                         int cols) {
    dependent_launch_entry();
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= cols) {
        return; // whole warps only, since cols % 32 == 0
    }
    const size_t row = blockIdx.y;
    quantize_q8_1_warp(x[row * cols + i], y + row * (cols / QK8_1) + i / QK8_1);
}

// Launch: a warp per 256 values, blockDim.x a multiple of 32, grid (ceil(cols / 256 /
// warps per block), rows). cols must be a multiple of 256.
extern "C" __global__ void quantize_q8_k(const float *__restrict__ x, block_q8_1 *__restrict__ y,
                                         int cols) {
    dependent_launch_entry();
    const int g = (blockIdx.x * blockDim.x + threadIdx.x) / WARP_SIZE;
    if (g >= cols / QK_K) {
        return; // whole warps
    }
    const size_t row = blockIdx.y;
    quantize_q8_k_warp(x + row * cols + (size_t)g * QK_K, y + row * (cols / QK8_1) + g * 8);
}
