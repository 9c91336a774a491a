//! The plan's MoE answers (`moe.rs`), without a GPU.

use super::tests::{err, h200, parse, plan};
use super::*;
use crate::ops::MmqOrder::{Blocks, Subs};
use GgmlType::{F32, Q4K, Q6K, Q8_0};

/// OLMoE-1B-7B (64 experts, top-8, n_ff 1024) and Qwen3-30B-A3B (128, top-8, n_ff 768); from
/// 256 tokens the f16 GEMMs on Hopper, the int8 ones without them.
#[test]
fn moe_path_by_tokens() {
    let f16 = plan(&[]);
    let p = plan(&[("FERROLM_GEMM_F16", "0")]);
    let shape = |tokens, n_embd, n_ff, down| MoeShape {
        tokens,
        gate: Q4K,
        up: Q4K,
        down,
        n_embd,
        n_ff,
        n_used: 8,
        n_expert: 64,
    };
    let q8k = ActQuant::Q8K;
    for (n_embd, n_ff) in [(2048, 1024), (2048, 768)] {
        for down in [Q4K, Q6K] {
            let decode = |gate_up_warps| {
                MoePath::MatVec(ExpertMatVec {
                    fused: true,
                    wide: true,
                    x_quant: q8k,
                    h_quant: q8k,
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
                })
            };
            // One token's gate/up in blocks of 4 warps (MOE_GATE_UP_WARPS_ONE), more in 8.
            assert_eq!(p.moe(&shape(1, n_embd, n_ff, down)), decode(4));
            assert_eq!(p.moe(&shape(8, n_embd, n_ff, down)), decode(8));
            for (n, gate_up) in [(100, Blocks), (512, Subs), (2048, Subs)] {
                let down_order = if down == Q4K { gate_up } else { Subs };
                let want = MoePath::Gemm(ExpertGemm::Int8 {
                    grouped: true,
                    x_quant: q8k,
                    h_quant: q8k,
                    gate_up,
                    down: down_order,
                    matvec_mma: None,
                    index_one_block: false, // 800 pairs and more
                });
                assert_eq!(p.moe(&shape(n, n_embd, n_ff, down)), want, "{n} tokens");
                let f16_want = if n >= F16_GEMM_MIN_ROWS {
                    MoePath::F16
                } else {
                    want
                };
                assert_eq!(
                    f16.moe(&shape(n, n_embd, n_ff, down)),
                    f16_want,
                    "{n} tokens"
                );
            }
        }
    }
    let float = MoeShape {
        gate: F32,
        up: F32,
        down: F32,
        ..shape(1, 2048, 1024, F32)
    };
    assert_eq!(p.moe(&float), MoePath::Gemm(ExpertGemm::Float));
    // Gate and up of two formats: the per-slot path.
    let mixed = MoeShape {
        up: Q6K,
        ..shape(1, 2048, 1024, Q6K)
    };
    assert!(matches!(p.moe(&mixed), MoePath::MatVec(m) if !m.fused));
    // More slots than the decode kernels take: the GEMM from the first token.
    let many = MoeShape {
        n_used: 17,
        ..shape(8, 2048, 1024, Q6K)
    };
    assert!(matches!(p.moe(&many), MoePath::Gemm(_)));
    // Int8 experts of widths the GEMM does not take (the shape-space goldens: n_ff 96, n_embd
    // 320): the decode kernels in slices; floats still their own kernels.
    for (n_embd, n_ff) in [(256, 96), (320, 64)] {
        let odd = shape(76, n_embd, n_ff, Q8_0);
        assert!(matches!(p.moe(&odd), MoePath::MatVecSlices(m) if m.fused));
        assert!(matches!(
            p.moe(&shape(8, n_embd, n_ff, Q8_0)),
            MoePath::MatVec(_)
        ));
        let float = MoeShape {
            gate: F32,
            up: F32,
            down: F32,
            ..odd
        };
        assert_eq!(p.moe(&float), MoePath::Gemm(ExpertGemm::Float));
    }
}

#[test]
fn moe_switches() {
    let s = |tokens| MoeShape {
        tokens,
        gate: Q4K,
        up: Q4K,
        down: Q6K,
        n_embd: 2048,
        n_ff: 1024,
        n_used: 8,
        n_expert: 64,
    };
    let unfused = plan(&[("FERROLM_MOE_FUSED", "0"), ("FERROLM_MMVQ_WIDE", "0")]);
    assert!(matches!(unfused.moe(&s(1)), MoePath::MatVec(m) if !m.fused && !m.wide));
    // The gate/up block's warps, set for every token count.
    let eight = plan(&[("FERROLM_MOE_GATE_UP_WARPS", "8")]);
    assert!(matches!(eight.moe(&s(1)), MoePath::MatVec(m) if m.gate_up_warps == 8));
    // The down weights' prefetch from the gate/up kernel: off unless switched on.
    assert!(matches!(plan(&[]).moe(&s(1)), MoePath::MatVec(m) if !m.down_prefetch));
    let prefetch = plan(&[("FERROLM_MOE_DOWN_PREFETCH", "1")]);
    assert!(matches!(prefetch.moe(&s(1)), MoePath::MatVec(m) if m.down_prefetch));
    // h quantized by the gate/up launch: off unless switched on.
    assert!(matches!(plan(&[]).moe(&s(1)), MoePath::MatVec(m) if !m.h_in_gate_up));
    let h_in = plan(&[("FERROLM_MOE_H_IN_GATE_UP", "1")]);
    assert!(matches!(h_in.moe(&s(1)), MoePath::MatVec(m) if m.h_in_gate_up));
    // One token's router top-k by the whole block: on unless switched off.
    assert!(plan(&[]).route_topk_block());
    assert!(!plan(&[("FERROLM_ROUTE_TOPK_BLOCK", "0")]).route_topk_block());
    assert!(plan(&[]).route_keep_sums());
    assert!(!plan(&[("FERROLM_ROUTE_KEEP_SUMS", "0")]).route_keep_sums());
    assert!(!plan(&[]).route_spread_out());
    assert!(plan(&[("FERROLM_ROUTE_SPREAD_OUT", "1")]).route_spread_out());
    // The tight entries: down's by default, gate/up and down by bits.
    assert!(matches!(plan(&[]).moe(&s(1)), MoePath::MatVec(m) if !m.tight_gate_up && m.tight_down));
    let off = plan(&[("FERROLM_MOE_TIGHT", "0")]);
    assert!(matches!(off.moe(&s(1)), MoePath::MatVec(m) if !m.tight_gate_up && !m.tight_down));
    let both = plan(&[("FERROLM_MOE_TIGHT", "3")]);
    assert!(matches!(both.moe(&s(1)), MoePath::MatVec(m) if m.tight_gate_up && m.tight_down));
    // Down's rows before its wait: on unless switched off; the rows asked of L2 in bulk: off
    // unless switched on.
    assert!(matches!(plan(&[]).moe(&s(1)), MoePath::MatVec(m) if m.down_early && !m.bulk_l2));
    let bulk = plan(&[
        ("FERROLM_MOE_DOWN_EARLY", "0"),
        ("FERROLM_MOE_BULK_L2", "1"),
    ]);
    assert!(matches!(bulk.moe(&s(1)), MoePath::MatVec(m) if !m.down_early && m.bulk_l2));
    // The rows' L1 requests: off unless switched on.
    assert!(matches!(plan(&[]).moe(&s(1)), MoePath::MatVec(m) if !m.rows_l1));
    let l1 = plan(&[("FERROLM_MOE_ROWS_L1", "1")]);
    assert!(matches!(l1.moe(&s(1)), MoePath::MatVec(m) if m.rows_l1));
    // One token's down tasks dealt straight to the warps: on unless switched off.
    assert!(matches!(plan(&[]).moe(&s(1)), MoePath::MatVec(m) if m.down_direct));
    let search = plan(&[("FERROLM_MOE_DOWN_DIRECT", "0")]);
    assert!(matches!(search.moe(&s(1)), MoePath::MatVec(m) if !m.down_direct));
    // And gate/up's: on unless switched off.
    assert!(matches!(plan(&[]).moe(&s(1)), MoePath::MatVec(m) if m.gate_up_direct));
    let masks = plan(&[("FERROLM_MOE_GATE_UP_DIRECT", "0")]);
    assert!(matches!(masks.moe(&s(1)), MoePath::MatVec(m) if !m.gate_up_direct));
    // The K-quants' lean one-token shape: on unless switched off.
    assert!(matches!(plan(&[]).moe(&s(1)), MoePath::MatVec(m) if m.lean));
    let wide = plan(&[("FERROLM_MOE_LEAN", "0")]);
    assert!(matches!(wide.moe(&s(1)), MoePath::MatVec(m) if !m.lean));
    let two = plan(&[("FERROLM_MOE_GATE_UP_WARPS", "2")]);
    assert!(matches!(two.moe(&s(4)), MoePath::MatVec(m) if m.gate_up_warps == 2));
    let bad = super::tests::parse(&[("FERROLM_MOE_GATE_UP_WARPS", "16")]);
    assert!(bad
        .unwrap_err()
        .to_string()
        .contains("FERROLM_MOE_GATE_UP_WARPS=16"));
    let per_expert = plan(&[("FERROLM_MOE_GROUPED", "0")]);
    // 128 experts (Qwen3-30B-A3B), Q4_K gate and up unpacked in the GEMM: the f16 GEMMs from
    // 16 pairs an expert (256 tokens); expanded (Q6_K, or the unpacking off), from 64 (1,024).
    let wide = |tokens| MoeShape {
        n_expert: 128,
        n_ff: 768,
        ..s(tokens)
    };
    let f16 = plan(&[]);
    assert_eq!(f16.moe(&wide(256)), MoePath::F16);
    assert_eq!(f16.moe(&s(512)), MoePath::F16);
    let expanded = |tokens| MoeShape {
        gate: Q6K,
        up: Q6K,
        ..wide(tokens)
    };
    assert!(matches!(f16.moe(&expanded(512)), MoePath::Gemm(_)));
    assert_eq!(f16.moe(&expanded(1024)), MoePath::F16);
    let no_unpack = plan(&[("FERROLM_GEMM_F16_UNPACK", "0")]);
    assert!(matches!(no_unpack.moe(&wide(512)), MoePath::Gemm(_)));
    assert_eq!(no_unpack.moe(&wide(1024)), MoePath::F16);
    let f16_32 = plan(&[("FERROLM_F16_EXPERTS_PAIRS", "32")]);
    assert!(matches!(f16_32.moe(&wide(256)), MoePath::Gemm(_)));
    assert_eq!(f16_32.moe(&wide(512)), MoePath::F16);
    assert!(matches!(
        per_expert.moe(&s(512)),
        MoePath::Gemm(ExpertGemm::Int8 { grouped: false, .. })
    ));
}

/// A batched step's experts take the tensor-core mat-vec from 2 tokens to 2 pairs an expert on
/// average (OLMoE: 64 experts, top-8), in the per-sub-block order only; a single sequence's
/// ubatch keeps the decode kernels and the GEMM.
#[test]
fn batched_steps_take_the_expert_mma() {
    let s = |tokens, down| MoeShape {
        tokens,
        gate: Q4K,
        up: Q4K,
        down,
        n_embd: 2048,
        n_ff: 1024,
        n_used: 8,
        n_expert: 64,
    };
    let mma = |p: &Plan, tokens, down| match p.moe(&s(tokens, down)) {
        MoePath::Gemm(ExpertGemm::Int8 { matvec_mma, .. }) => matvec_mma,
        _ => None,
    };
    let batches = plan(&[]).for_sequence_batches();
    for down in [Q4K, Q6K] {
        assert!(matches!(batches.moe(&s(1, down)), MoePath::MatVec(_)));
        assert_eq!(mma(&batches, 2, down), Some(1));
        assert_eq!(mma(&batches, 16, down), Some(1), "2 pairs an expert");
        let gemm = batches.moe(&s(17, down));
        assert!(matches!(
            gemm,
            MoePath::Gemm(ExpertGemm::Int8 {
                matvec_mma: None,
                gate_up: Subs,
                ..
            })
        ));
    }
    let want = MoePath::Gemm(ExpertGemm::Int8 {
        grouped: true,
        x_quant: ActQuant::Q8K,
        h_quant: ActQuant::Q8K,
        gate_up: Subs,
        down: Subs,
        matvec_mma: Some(1),
        index_one_block: true,
    });
    assert_eq!(batches.moe(&s(8, Q6K)), want);
    // Past one block's pairs, or without the decode fusions: the two index launches.
    let index_one_block = |p: &Plan, tokens| match p.moe(&s(tokens, Q4K)) {
        MoePath::Gemm(ExpertGemm::Int8 {
            index_one_block, ..
        }) => index_one_block,
        other => panic!("{other:?}"),
    };
    assert!(index_one_block(&batches, 64));
    assert!(!index_one_block(&batches, 65));
    let unfused = plan(&[("FERROLM_CUDA_FUSE", "0")]).for_sequence_batches();
    assert!(!index_one_block(&unfused, 8));
    let off = plan(&[("FERROLM_MOE_STEP_FUSE", "0")]).for_sequence_batches();
    assert!(!index_one_block(&off, 8));
    // A single sequence's 8 tokens: the decode kernels, whose bits it keeps.
    assert!(matches!(plan(&[]).moe(&s(8, Q6K)), MoePath::MatVec(_)));
    let off = plan(&[("FERROLM_MOE_MMA", "0")]).for_sequence_batches();
    assert!(matches!(off.moe(&s(8, Q6K)), MoePath::MatVec(_)));
    assert_eq!(mma(&off, 16, Q6K), None);
    let four = plan(&[("FERROLM_MOE_MMA_TILES", "4")]).for_sequence_batches();
    assert_eq!(mma(&four, 8, Q6K), Some(4));
    assert!(err(&[("FERROLM_MOE_MMA_TILES", "3")]).contains("1, 2 or 4"));
    // More pairs an expert than the default limit, when asked.
    assert_eq!(mma(&batches, 32, Q6K), None);
    let eight = plan(&[("FERROLM_MOE_MMA_PAIRS", "8")]).for_sequence_batches();
    assert_eq!(mma(&eight, 32, Q6K), Some(1));
    // The CPU's integer-scale order, forced: the kernel has only the per-sub-block one.
    let cpu_order = plan(&[("FERROLM_CUDA_INT_SCALES", "1")]).for_sequence_batches();
    assert_eq!(mma(&cpu_order, 16, Q6K), None);
    // A down format without the kernel (Q8_0), or widths not whole super-blocks: the others.
    assert_eq!(mma(&batches, 64, Q8_0), None);
    let odd = MoeShape {
        n_ff: 1056,
        ..s(64, Q6K)
    };
    assert!(!matches!(
        batches.moe(&odd),
        MoePath::Gemm(ExpertGemm::Int8 {
            matvec_mma: Some(_),
            ..
        })
    ));
}

#[test]
fn router_logits_by_tokens() {
    let p = plan(&[]);
    assert_eq!(p.router_logits(8, 2048), RouterLogits::MatVecTopk);
    let unfused = plan(&[("FERROLM_CUDA_FUSE", "0")]);
    assert_eq!(unfused.router_logits(8, 2048), RouterLogits::MatVec);
    assert_eq!(p.router_logits(1, 4096), RouterLogits::MatVecTopk);
    let gemm = |token_warps| RouterLogits::Gemm { token_warps };
    assert_eq!(p.router_logits(9, 2048), gemm(2));
    assert_eq!(p.router_logits(2048, 4096), gemm(4));
    assert_eq!(p.router_logits(1, 2050), gemm(1));
    assert_eq!(p.router_logits(1, 4160), gemm(1));
    let one = plan(&[("FERROLM_GEMM_F32_TOKEN_WARPS", "1")]);
    assert_eq!(one.router_logits(2048, 4096), gemm(1));
}

/// The norm before the router joins its launch where the fused norm and the one-launch
/// routing both run, unless either switch is off.
#[test]
fn norm_route_where_both_fusions_run() {
    let p = plan(&[]);
    assert!(p.norm_route(1, 2880) && p.norm_route(1, 2048) && p.norm_route(1, 4096));
    // Past NORM_ROUTE_MAX_ROWS tokens each block's norms one after another cost more than the
    // launch saved.
    assert!(!p.norm_route(NORM_ROUTE_MAX_ROWS + 1, 2048));
    assert!(plan(&[("FERROLM_NORM_ROUTE_ROWS", "8")]).norm_route(8, 2048));
    // Too many tokens or too wide for the router's mat-vec; not whole Q8_1 blocks.
    assert!(!p.norm_route(9, 2048) && !p.norm_route(1, 4160) && !p.norm_route(1, 2052));
    assert!(!plan(&[("FERROLM_NORM_ROUTE", "0")]).norm_route(1, 2048));
    assert!(!plan(&[("FERROLM_CUDA_FUSE", "0")]).norm_route(1, 2048));
}

/// The routed norm's launch as one cluster of blocks: on sm_90 with the switch on, for every
/// router whose block share of rows and the tokens' rows fit the block's shared memory.
#[test]
fn norm_route_cluster_where_its_rows_fit() {
    assert_eq!(
        plan(&[]).norm_route_cluster(1, 2048, 128),
        None,
        "off by default"
    );
    let on = [("FERROLM_NORM_ROUTE_CLUSTER", "1")];
    let p = plan(&on);
    // qwen3-30b-a3b (128 experts of 2048: 16 a block), OLMoE (64: 8), gpt-oss-20b (32 of 2880).
    assert_eq!(p.norm_route_cluster(1, 2048, 128), Some(8));
    assert_eq!(p.norm_route_cluster(1, 2048, 64), Some(8));
    assert_eq!(p.norm_route_cluster(1, 2880, 32), Some(8));
    // 60 experts: 8 a block leave the last block 4; 5 experts take 5 blocks of one.
    assert_eq!(p.norm_route_cluster(1, 2048, 60), Some(8));
    assert_eq!(p.norm_route_cluster(1, 2048, 5), Some(5));
    // 16 rows of 4096 floats are 256 KB: the block an expert then.
    assert_eq!(p.norm_route_cluster(1, 4096, 128), None);
    assert_eq!(p.norm_route_cluster(1, 4096, 64), Some(8));
    let ampere = DeviceFacts {
        cc: (8, 0),
        ..h200()
    };
    assert_eq!(
        Plan::new(parse(&on).unwrap(), ampere).norm_route_cluster(1, 2048, 128),
        None
    );
}

/// The L2 prefetch beside a captured step: off unless asked, its two forms by number, and
/// nothing past them.
#[test]
fn l2_ahead_switch() {
    use crate::ops::L2AheadForm::{Bulk, Dry, Lines};
    let how = |form, blocks| Some(crate::ops::L2AheadHow { form, blocks });
    assert_eq!(plan(&[]).l2_ahead(), None);
    assert_eq!(plan(&[("FERROLM_L2_AHEAD", "0")]).l2_ahead(), None);
    assert_eq!(
        plan(&[("FERROLM_L2_AHEAD", "1")]).l2_ahead(),
        how(Lines, 32)
    );
    assert_eq!(plan(&[("FERROLM_L2_AHEAD", "2")]).l2_ahead(), how(Bulk, 32));
    let dry8 = [("FERROLM_L2_AHEAD", "3"), ("FERROLM_L2_AHEAD_BLOCKS", "8")];
    assert_eq!(plan(&dry8).l2_ahead(), how(Dry, 8));
    assert!(err(&[("FERROLM_L2_AHEAD", "4")]).contains("FERROLM_L2_AHEAD"));
    assert!(err(&[("FERROLM_L2_AHEAD_BLOCKS", "0")]).contains("FERROLM_L2_AHEAD_BLOCKS"));
}
