// The residual add and RMS norm of one row as add_rms_norm_q8_1_f32 (norm_rope.cu) computes
// them, shared with the MoE router that takes the norm in its own launch (moe_route.cu): the
// f64 sum of squares in one order for a given block size, so both give the same bits.
#pragma once
#include "common.cuh"

// Elements a thread keeps in registers between the norm's two passes (rows past
// NORM_REGS * blockDim.x read the rest again).
#define NORM_REGS 8

struct NormWeights {
    float v[NORM_REGS];
};

// The thread's norm weights (i = threadIdx.x + k * blockDim.x), loaded before the wait for the
// kernel ahead: they are model weights, which no kernel writes, so under PDL their load
// overlaps that kernel's tail.
static __device__ __forceinline__ NormWeights norm_weights_then_wait(const float *__restrict__ w,
                                                                     int n) {
    NormWeights r;
#pragma unroll
    for (int k = 0; k < NORM_REGS; ++k) {
        const int i = threadIdx.x + k * blockDim.x;
        r.v[k] = i < n ? w[i] : 0.0f;
    }
    dependent_launch_entry();
    return r;
}

// Element i of the norm's input: x, or x + add (one f32 add); written back to x when
// `write_x` (then a later read of x[i] by this thread is the sum already).
static __device__ __forceinline__ float norm_input(float *x, const float *add, size_t i,
                                                   bool write_x) {
    float xi = x[i];
    if (add != nullptr) {
        xi += add[i];
        if (write_x) {
            x[i] = xi;
        }
    }
    return xi;
}

// 1 / sqrt(mean(v²) + eps) of the row v = x (+ add) at x + base, n elements; the thread's
// first NORM_REGS elements of v are left in xr. The whole block calls it (a block sum).
static __device__ __forceinline__ float add_norm_scale(float *x, const float *add, size_t base,
                                                       int n, float eps, bool write_x,
                                                       float (&xr)[NORM_REGS],
                                                       double *scratch) {
    double sum = 0.0;
#pragma unroll
    for (int k = 0; k < NORM_REGS; ++k) {
        const int i = threadIdx.x + k * blockDim.x;
        if (i < n) {
            xr[k] = norm_input(x, add, base + i, write_x);
            const double v = xr[k];
            sum += v * v;
        }
    }
    for (int i = threadIdx.x + NORM_REGS * blockDim.x; i < n; i += blockDim.x) {
        const double v = norm_input(x, add, base + i, write_x);
        sum += v * v;
    }
    sum = block_sum(sum, scratch);
    const float mean = (float)(sum / (double)n);
    return 1.0f / sqrtf(mean + eps);
}

// add_norm_scale where the row is exactly R elements a thread (n == R * blockDim.x, R <=
// NORM_REGS): the same sums in the same order, without the guarded iterations past R.
template <int R>
static __device__ __forceinline__ float add_norm_scale_exact(float *x, const float *add,
                                                             size_t base, int n, float eps,
                                                             bool write_x,
                                                             float (&xr)[NORM_REGS],
                                                             double *scratch) {
    static_assert(R <= NORM_REGS, "registers a thread");
    double sum = 0.0;
#pragma unroll
    for (int k = 0; k < R; ++k) {
        xr[k] = norm_input(x, add, base + threadIdx.x + k * blockDim.x, write_x);
        const double v = xr[k];
        sum += v * v;
    }
    sum = block_sum(sum, scratch);
    const float mean = (float)(sum / (double)n);
    return 1.0f / sqrtf(mean + eps);
}

// add_norm_scale's result for the row x (+ add) of n elements as a block of nt threads computes
// it (nt = norm_threads(n), ops/norm_rope.rs), by a block of any bt threads (bt a multiple of
// 32 dividing nt, nt / bt <= MAXV, 1-D or 2-D with blockDim.x = 32): thread tid stands for the
// reference's threads tid + j * bt, so the f64 partial sums, the warp sums of the reference's
// warps and the sum over them are taken in the same order: the same bits. Writes v = x (+ add)
// to vx (n floats, shared); writes nothing to x. Every thread of the block calls it.
template <int MAXV>
static __device__ __forceinline__ float add_norm_scale_as(const float *x,
                                                          const float *__restrict__ add, int n,
                                                          int nt, float eps, float *vx,
                                                          double *scratch) {
    const int bt = blockDim.x * blockDim.y, tid = threadIdx.y * blockDim.x + threadIdx.x;
    const int lane = tid % WARP_SIZE, warp = tid / WARP_SIZE, nv = nt / bt;
#pragma unroll
    for (int j = 0; j < MAXV; ++j) {
        if (j < nv) {
            double sum = 0.0;
            for (int i = tid + j * bt; i < n; i += nt) {
                float xi = x[i];
                if (add != nullptr) {
                    xi += add[i];
                }
                vx[i] = xi;
                const double v = xi;
                sum += v * v;
            }
            sum = warp_sum(sum);
            if (lane == 0) {
                scratch[warp + j * (bt / WARP_SIZE)] = sum; // the reference's warp (tid + j bt) / 32
            }
        }
    }
    __syncthreads();
    double v = lane < nt / WARP_SIZE ? scratch[lane] : 0.0;
    v = warp_sum(v);
    const float mean = (float)(v / (double)n);
    return 1.0f / sqrtf(mean + eps);
}
