// RoPE's angles, and one head's RMS norm with its NEOX rotation on a thread's registers:
// shared by norm_rope.cu's launches and attention.cu's decode walk that rotates its own heads
// (FERROLM_ATTN_ROPE), so that both give the same bits.
#pragma once
#include "common.cuh"

// The scaling part of ggml_rope_ext's parameters (RopeScale in ops/norm_rope.rs): angles times
// freq_scale, mixed with the unscaled ones by YaRN's ramp over [corr_low, corr_high] when
// ext_factor != 0; cos and sin times mscale (the magnitude, YaRN's gain included, computed on
// the host as the CPU computes it). No scaling: 1, 0, 1, 0, 0.
struct RopeScale {
    float freq_scale, ext_factor, mscale, corr_low, corr_high;
};

// cos and sin (times mscale) of pair i's angle at position p, each step rounded as
// crates/cpu/src/rope.rs rounds it. theta_scale = base^(-2/head_dim), computed once on the host
// as the CPU does; ff: head_dim / 2 frequency divisors (llama3's rope_freqs) or null.
static __device__ __forceinline__ float2 rope_cos_sin(uint32_t p, int i, float theta_scale,
                                                      const float *__restrict__ ff,
                                                      RopeScale rs) {
    // ggml's angle: pos * theta_scale^i by repeated multiplication, rounded at each step.
    float theta = (float)p;
    for (int k = 0; k < i; ++k) {
        theta = __fmul_rn(theta, theta_scale);
    }
    // ggml's rope_yarn: divide by the pair's factor, interpolate, mix by the ramp.
    const float theta_extrap = ff ? __fdiv_rn(theta, ff[i]) : theta;
    const float theta_interp = __fmul_rn(rs.freq_scale, theta_extrap);
    float angle = theta_interp;
    if (rs.ext_factor != 0.0f) {
        const float y = __fdiv_rn(__fsub_rn((float)i, rs.corr_low),
                                  fmaxf(0.001f, __fsub_rn(rs.corr_high, rs.corr_low)));
        const float ramp_mix = __fmul_rn(__fsub_rn(1.0f, fminf(1.0f, fmaxf(0.0f, y))), rs.ext_factor);
        angle = __fmaf_rn(theta_interp, __fsub_rn(1.0f, ramp_mix), __fmul_rn(theta_extrap, ramp_mix));
    }
    // Correctly rounded (nearly always) as the CPU's libm cosf/sinf, from double evaluations.
    return make_float2(__fmul_rn((float)cos((double)angle), rs.mscale),
                       __fmul_rn((float)sin((double)angle), rs.mscale));
}

// rope<true>'s rotation (norm_rope.cu) of a thread's pairs (v[j], v[j + J / 2]), each by its
// cos and sin cs[j]: one product and one FMA each, as the CPU rounds them.
template <int J>
static __device__ __forceinline__ void neox_rotate_regs(float (&v)[J], const float2 (&cs)[J / 2]) {
#pragma unroll
    for (int j = 0; j < J / 2; ++j) {
        const float c = cs[j].x, s = cs[j].y;
        const float x0 = v[j], x1 = v[j + J / 2];
        v[j] = __fmaf_rn(x0, c, -__fmul_rn(x1, s));
        v[j + J / 2] = __fmaf_rn(x0, s, __fmul_rn(x1, c));
    }
}

// One head's RMS norm and NEOX rotation on the values its threads hold: v[j] is element
// tid + j * threads (J of them, 2, 4 or 8) of the head's n, so that j and j + J / 2 are a
// rotation pair (elements i and i + n / 2). The sum is rms_norm_group's, in its order: a
// thread's elements in turn in f64, then `sum_all` over the head's threads (the norm launch's
// block_sum, or a warp's sum where one warp holds the head: the same tree for 32 threads).
// cs[j]: pair tid + j * threads's cos and sin (rope_cos_sin). The values stay in place.
template <int J, typename SumAll>
static __device__ __forceinline__ void head_norm_rope_neox_regs(float (&v)[J],
                                                                const float *__restrict__ w,
                                                                int tid, int threads, int n,
                                                                float eps,
                                                                const float2 (&cs)[J / 2],
                                                                SumAll sum_all) {
    double sum = 0.0;
#pragma unroll
    for (int j = 0; j < J; ++j) {
        const double d = v[j];
        sum += d * d; // exact square; a fused add changes nothing
    }
    sum = sum_all(sum);
    const float mean = (float)(sum / (double)n);
    const float scale = 1.0f / sqrtf(mean + eps);
#pragma unroll
    for (int j = 0; j < J; ++j) {
        v[j] = __fmul_rn(__fmul_rn(v[j], scale), w[tid + j * threads]);
    }
    neox_rotate_regs<J>(v, cs);
}
