// Q4_K and Q6_K weights unpacked to f16 in f16 arithmetic, shared by the f16 GEMM's
// batched-decode forms (gemm_wgmma.cu's gemm_wgmma_q4k_decode*, Q4_K) and the f16 mat-vec
// (matvec_f16.cu, both), so that both multiply the same f16 weights (sm_80+). A code q
// goes to f16 exactly as the mantissa of 1024 + q and the offset is taken off exactly; then
// Q4_K: one f16 fma gives dl * q - ml, with dl = d * sc and ml = dmin * m computed in f32 and
// rounded to f16; Q6_K: one f16 product gives (q - 32) * dl, dl = d * sc likewise.
#pragma once
#ifndef FERROLM_COMMON_CUH
#error "include common.cuh before kquant_f16.cuh"
#endif

// (lo, hi) rounded to f16, lo in the low half.
static __device__ __forceinline__ uint32_t pack_f16x2(float lo, float hi) {
    uint32_t r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// The four codes in the bytes of v (each below 16) as f16 pairs dl * q - ml, dl2 and nml2 the
// pairs (dl, dl) and (-ml, -ml).
static __device__ __forceinline__ uint2 q4_quad_f16x2(uint32_t v, uint32_t dl2, uint32_t nml2) {
    const uint32_t lo = __byte_perm(v, 0x64646464u, 0x4140), hi = __byte_perm(v, 0x64646464u, 0x4342);
    uint32_t a, b;
    asm("{\n .reg .b32 t;\n sub.f16x2 t, %1, %2;\n fma.rn.f16x2 %0, t, %3, %4;\n}"
        : "=r"(a)
        : "r"(lo), "r"(0x64006400u), "r"(dl2), "r"(nml2));
    asm("{\n .reg .b32 t;\n sub.f16x2 t, %1, %2;\n fma.rn.f16x2 %0, t, %3, %4;\n}"
        : "=r"(b)
        : "r"(hi), "r"(0x64006400u), "r"(dl2), "r"(nml2));
    return make_uint2(a, b);
}

// The four 6-bit codes in the bytes of q as f16 pairs (q - 32) · dl, dl2 the pair (dl, dl): q
// goes to f16 exactly as the mantissa of 1024 + q, 1056 is taken off exactly, one rounding.
static __device__ __forceinline__ uint2 q6_quad_f16x2(uint32_t q, uint32_t dl2) {
    const uint32_t lo = __byte_perm(q, 0x64646464u, 0x4140), hi = __byte_perm(q, 0x64646464u, 0x4342);
    uint32_t a, b;
    asm("{\n .reg .b32 t;\n sub.f16x2 t, %1, %2;\n mul.rn.f16x2 %0, t, %3;\n}"
        : "=r"(a)
        : "r"(lo), "r"(0x64206420u), "r"(dl2));
    asm("{\n .reg .b32 t;\n sub.f16x2 t, %1, %2;\n mul.rn.f16x2 %0, t, %3;\n}"
        : "=r"(b)
        : "r"(hi), "r"(0x64206420u), "r"(dl2));
    return make_uint2(a, b);
}
