// The f16 tensor-core fragments shared by flash_attn.cu (the prefill) and attention_tc.cuh
// (decode by KV group): ldmatrix loads of 8×8 b16 matrices from shared memory and the
// m16n8k16 f16 MMA with f32 accumulators (sm_80+).
#pragma once
#ifndef FERROLM_COMMON_CUH
#error "include common.cuh before mma_f16.cuh"
#endif

static __device__ __forceinline__ uint32_t shared_addr(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

// Four 8×8 b16 matrices; lanes 8i..8i+7 give the row addresses of matrix i. Lane T receives
// (row T/4, columns 2(T%4), +1) of each, or with .trans (rows 2(T%4), +1, column T/4).
static __device__ __forceinline__ void ldmatrix_b16_x4(uint32_t r[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

// Two 8×8 b16 matrices: lanes 0-7 and 8-15 give the row addresses (the others' are unused).
static __device__ __forceinline__ void ldmatrix_b16_x2(uint32_t r[2], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(addr));
}

static __device__ __forceinline__ void ldmatrix_b16_x4_trans(uint32_t r[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

// c (16×8 f32) += a (16×16 f16, row-major) · b (16×8 f16, column-major).
static __device__ __forceinline__ void mma_m16n8k16_f16(float c[4], const uint32_t a[4],
                                                        uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
