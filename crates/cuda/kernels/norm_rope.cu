// RMS norm and rotary embeddings, matching crates/cpu/src/{norm,rope}.rs operation for
// operation: the same f64 sum of squares (only its order differs), the same f32 roundings, and
// RoPE angles built by the same repeated f32 products. Products that the CPU rounds separately
// are written with __fmul_rn/__fadd_rn so that NVRTC does not fuse them into FMAs.
#include "common.cuh"

// out[g] = x[g] / sqrt(mean(x[g]^2) + eps) * w for each n-element group g (a row, or one head
// for per-head norms); blockIdx.x is the group. out may be x (in place): each element is read
// and then written by the same thread.
extern "C" __global__ void rms_norm_f32(const float *x, const float *__restrict__ w, float *out,
                                        int n, float eps) {
    __shared__ double scratch[32];
    const size_t base = (size_t)blockIdx.x * n;
    double sum = 0.0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const double v = x[base + i];
        sum += v * v; // exact square; a fused add changes nothing
    }
    sum = block_sum(sum, scratch);
    const float mean = (float)(sum / (double)n);
    const float scale = 1.0f / sqrtf(mean + eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        out[base + i] = __fmul_rn(__fmul_rn(x[base + i], scale), w[i]);
    }
}

// x: [n_tokens][width], width = heads * head_dim, rotated in place; token t at position pos[t]
// (device memory, so a captured graph can replay with new positions). One thread per pair.
// theta_scale = base^(-2/head_dim), computed once on the host as the CPU does.
template <bool NEOX>
static __device__ __forceinline__ void rope(float *x, const uint32_t *__restrict__ pos,
                                            int n_tokens, int width, int head_dim,
                                            float theta_scale) {
    const int half = head_dim / 2;
    const int pairs_per_row = width / 2;
    const int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= n_tokens * pairs_per_row) {
        return;
    }
    const int t = idx / pairs_per_row, p = idx % pairs_per_row;
    const int head = p / half, i = p % half;
    // ggml's angle: pos * theta_scale^i by repeated multiplication, rounded at each step.
    float theta = (float)pos[t];
    for (int k = 0; k < i; ++k) {
        theta = __fmul_rn(theta, theta_scale);
    }
    const float c = cosf(theta), s = sinf(theta);
    const int a = NEOX ? i : 2 * i;
    const int b = NEOX ? i + half : 2 * i + 1;
    float *h = x + (size_t)t * width + (size_t)head * head_dim;
    const float x0 = h[a], x1 = h[b];
    h[a] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
    h[b] = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
}

extern "C" __global__ void rope_norm_f32(float *x, const uint32_t *__restrict__ pos, int n_tokens,
                                         int width, int head_dim, float theta_scale) {
    rope<false>(x, pos, n_tokens, width, head_dim, theta_scale);
}

extern "C" __global__ void rope_neox_f32(float *x, const uint32_t *__restrict__ pos, int n_tokens,
                                         int width, int head_dim, float theta_scale) {
    rope<true>(x, pos, n_tokens, width, head_dim, theta_scale);
}
