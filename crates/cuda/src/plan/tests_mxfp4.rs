//! The plan's answers for MXFP4 weights (gpt-oss's experts; dense MXFP4 matrices in parity
//! checks): the kernels of a Q4_0-like format, a per-block chain on the CPU.

use super::tests::plan;
use super::tests_matmul::tiles;
use super::*;
use crate::ops::MmqOrder::Subs;
use GgmlType::Mxfp4;

#[test]
fn mxfp4_dense_gemm() {
    let p = plan(&[]);
    // Q8_1 activations (the CPU's x86 Q8_0 codes and scales), never Q8_K.
    assert_eq!(p.act_quant(Mxfp4, 4096), ActQuant::Q8_1);
    assert!(!p.lanes(Mxfp4, 32) && !p.integer_scales(Mxfp4, 4096, 32));
    // Rows of a multiple of 256 on the tiles, in the per-sub-block order at any token count.
    assert_eq!(
        p.matmul(Mxfp4, 2048, 2048, 100),
        tiles(1, &[(0, 100, Subs)])
    );
    // gpt-oss's 2880-wide rows: the CUDA-core chain in short ubatches (the CPU's bits), the
    // tiles from 256 rows (the last k step partly zero).
    assert_eq!(p.matmul(Mxfp4, 2880, 2880, 255), Matmul::Gemm(Gemm::Small));
    assert!(matches!(
        p.matmul(Mxfp4, 2880, 2880, 300),
        Matmul::Gemm(Gemm::Tiles { .. })
    ));
    assert_eq!(
        p.matmul(Mxfp4, 2880, 2880, 1),
        Matmul::MatVec { wide: false }
    );
}

/// gpt-oss-20b's experts (32, top-4, 2880 → 2880 → 2880): the decode kernels, the grouped
/// GEMM for more tokens (2880 is no multiple of 256: its last k step partly zero), and from 64
/// pairs an expert on average the f16 GEMMs on MXFP4 expanded, biases and swiglu_oai around
/// them.
#[test]
fn mxfp4_experts() {
    let p = plan(&[]);
    let shape = |tokens, n_embd, n_ff| MoeShape {
        tokens,
        gate: Mxfp4,
        up: Mxfp4,
        down: Mxfp4,
        n_embd,
        n_ff,
        n_used: 4,
        n_expert: 32,
    };
    let how = |gate_up_warps| ExpertMatVec {
        fused: true,
        wide: true,
        x_quant: ActQuant::Q8_1,
        h_quant: ActQuant::Q8_1,
        gate_up_warps,
        down_prefetch: false,
        h_in_gate_up: false,
        rows_l1: false,
        tight_gate_up: false,
        tight_down: true,
        down_early: true,
        bulk_l2: false,
        down_direct: true,
        gate_up_direct: true,
        lean: true,
    };
    assert_eq!(p.moe(&shape(1, 2880, 2880)), MoePath::MatVec(how(4)));
    assert_eq!(p.moe(&shape(8, 2880, 2880)), MoePath::MatVec(how(8)));

    // From 36 pairs to 512 (128 tokens) one block builds the experts' index.
    let gemm = |index_one_block| {
        MoePath::Gemm(ExpertGemm::Int8 {
            grouped: true,
            x_quant: ActQuant::Q8_1,
            h_quant: ActQuant::Q8_1,
            gate_up: Subs,
            down: Subs,
            matvec_mma: None,
            index_one_block,
        })
    };
    assert_eq!(p.moe(&shape(9, 2880, 2880)), gemm(true));
    assert_eq!(p.moe(&shape(128, 2880, 2880)), gemm(true));
    assert_eq!(p.moe(&shape(129, 2880, 2880)), gemm(false));
    assert_eq!(p.moe(&shape(511, 2880, 2880)), gemm(false));
    assert_eq!(p.moe(&shape(512, 2880, 2880)), MoePath::F16);
    assert_eq!(p.moe(&shape(2048, 2048, 1024)), MoePath::F16);
    // MXFP4 is expanded, never unpacked in the GEMM.
    assert!(!p.f16_unpack(Mxfp4));
    let int8 = plan(&[("FERROLM_GEMM_F16", "0")]);
    assert_eq!(int8.moe(&shape(512, 2880, 2880)), gemm(false));
    assert_eq!(int8.moe(&shape(2048, 2880, 2880)), gemm(false));
}
