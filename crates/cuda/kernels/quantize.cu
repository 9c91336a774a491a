// f32 activations to Q8_1 blocks, bit for bit as ferrolm-quant's BlockQ8_1::quantize (and
// ggml's quantize_row_q8_1_ref): d = absmax / 127, q = round(x / d) half away from zero,
// s = d * sum(q), d and s rounded to f16 to nearest even. IEEE division and no fused
// multiply-adds on these paths (NVRTC's defaults: prec-div, no fast math).
//
// Launch: one thread per element, blockDim.x a multiple of 32 (one warp = one Q8_1 block),
// grid (ceil(cols / blockDim.x), rows). cols must be a multiple of 32.
#include "common.cuh"
#include "quant.cuh"

extern "C" __global__ void quantize_q8_1(const float *__restrict__ x, block_q8_1 *__restrict__ y,
                                         int cols) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= cols) {
        return; // whole warps only, since cols % 32 == 0
    }
    const size_t row = blockIdx.y;
    const float xi = x[row * cols + i];
    const float amax = warp_max(fabsf(xi));
    const float d = amax / 127.0f;
    const float id = d == 0.0f ? 0.0f : 1.0f / d;
    const int q = (int)roundf(xi * id);
    const int sum = warp_sum(q);
    block_q8_1 *b = y + row * (cols / QK8_1) + i / QK8_1;
    b->qs[i % QK8_1] = (int8_t)q;
    if (i % QK8_1 == 0) {
        b->d = f32_to_f16_bits(d);
        b->s = f32_to_f16_bits((float)sum * d);
    }
}
