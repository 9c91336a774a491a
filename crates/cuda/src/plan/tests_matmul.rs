//! The plan's matrix-product answers (`matmul.rs`), without a GPU.

use super::tests::{err, h200, parse, plan};
use super::*;
use crate::ops::MmqOrder::{Blocks, Pairs, Subs};
use GgmlType::{F32, Q4K, Q4_1, Q5K, Q5_0, Q5_1, Q6K, Q8_0};

#[test]
fn partner_formats() {
    let p = plan(&[]);
    assert_eq!(p.act_quant(Q4K, 4096), ActQuant::Q8K);
    assert_eq!(p.act_quant(Q6K, 256), ActQuant::Q8K);
    assert_eq!(p.act_quant(Q4K, 576), ActQuant::Q8_1);
    assert_eq!(p.act_quant(Q8_0, 4096), ActQuant::Q8_1);
    assert_eq!(p.act_quant(Q4_1, 4096), ActQuant::Q8_1);
    let off = plan(&[("FERROLM_CUDA_Q8K", "0")]);
    assert_eq!(off.act_quant(Q4K, 4096), ActQuant::Q8_1);
}

#[test]
fn auto_fills_the_gpu_before_it_grows_tiles() {
    let occ = |i: usize| if i == 2 { 2 } else { 1 };
    // 8192 × 512: 256 tiles of 128×128, two nearly full waves.
    assert_eq!(auto_tile(8192, 512, 0, 132, occ), 0);
    // 2048 × 512: 64 tiles of 128×128 leave half the SMs idle; 128 of 128×64 do not.
    assert_eq!(auto_tile(2048, 512, 0, 132, occ), 1);
    // A tile that fits nowhere is never chosen.
    assert_eq!(
        auto_tile(8192, 512, 0, 132, |i| if i == 0 { 0 } else { 1 }),
        1
    );
}

/// The launches of a dense GEMM follow the CPU's `Order::Dense`: pairs for whole groups of
/// four tokens, blocks for the rest (and for calls under four tokens); other formats one
/// launch in the per-sub-block order; expert GEMMs blocks; from 256 rows every format the
/// per-sub-block order.
#[test]
fn integer_scale_order_splits_like_the_cpu() {
    let p = plan(&[]);
    let dense = |ty, n| p.dense_order(ty, 4096, n);
    assert_eq!(dense(Q4K, 22), [(0, 20, Pairs), (20, 2, Blocks)]);
    assert_eq!(dense(Q4K, 252), [(0, 252, Pairs)]);
    assert_eq!(dense(Q4K, 255), [(0, 252, Pairs), (252, 3, Blocks)]);
    assert_eq!(dense(Q4K, 256), [(0, 256, Subs)]);
    assert_eq!(dense(Q4K, 512), [(0, 512, Subs)]);
    assert_eq!(dense(Q4K, 3), [(0, 3, Blocks)]);
    assert_eq!(dense(Q4K, 4), [(0, 4, Pairs)]);
    assert_eq!(dense(Q6K, 22), [(0, 22, Subs)]);
    assert_eq!(dense(Q8_0, 22), [(0, 22, Subs)]);
    assert_eq!(p.expert_order(Q4K, 2048, 255), Blocks);
    assert_eq!(p.expert_order(Q4K, 2048, 2048), Subs);
    assert_eq!(p.expert_order(Q6K, 1024, 8), Subs);
}

#[test]
fn int_scales_switch_forces_either_order() {
    let on = plan(&[("FERROLM_CUDA_INT_SCALES", "1")]);
    assert_eq!(
        on.dense_order(Q4K, 4096, 514),
        [(0, 512, Pairs), (512, 2, Blocks)]
    );
    assert_eq!(on.expert_order(Q4K, 2048, 2048), Blocks);
    let off = plan(&[("FERROLM_CUDA_INT_SCALES", "0")]);
    assert_eq!(off.dense_order(Q4K, 4096, 22), [(0, 22, Subs)]);
    // Q8_1 activations have no per-block scale: never the integer order.
    let q8_1 = plan(&[("FERROLM_CUDA_INT_SCALES", "1"), ("FERROLM_CUDA_Q8K", "0")]);
    assert_eq!(q8_1.dense_order(Q4K, 4096, 22), [(0, 22, Subs)]);
}

pub(super) fn tiles(tile: usize, launches: &[(usize, usize, MmqOrder)]) -> Matmul {
    split(tile, launches, 1)
}

fn split(tile: usize, launches: &[(usize, usize, MmqOrder)], splits: usize) -> Matmul {
    Matmul::Gemm(Gemm::Tiles {
        tile,
        launches: launches.to_vec(),
        splits,
    })
}

/// The dense matmuls of the four benchmark presets (Q4_K_M: Q4_K, with Q6_K for some
/// `ffn_down`) at 1, 8, 100, 512 and 2048 tokens on an H200.
#[test]
fn benchmark_shapes() {
    let p = plan(&[]);
    let wide = Matmul::MatVec { wide: true };
    let narrow = Matmul::MatVec { wide: false };
    // (type, rows, cols, tile at 100, 512, 2048 tokens, split-K ways at 512)
    let shapes = [
        (Q4K, 8192, 2048, [1, 0, 0], 1),  // smollm2-1.7b gate/up
        (Q4K, 2048, 2048, [1, 1, 0], 1),  // smollm2-1.7b q, olmoe-1b-7b q
        (Q6K, 2048, 8192, [1, 1, 0], 1),  // smollm2-1.7b down
        (Q4K, 12288, 4096, [0, 0, 0], 1), // qwen3-8b gate/up
        (Q4K, 4096, 4096, [1, 0, 0], 1),  // qwen3-8b q
        (Q4K, 1024, 4096, [1, 1, 0], 2),  // qwen3-8b k: 64 tiles of 132
        (Q6K, 4096, 12288, [1, 0, 0], 1), // qwen3-8b down
        (Q4K, 4096, 2048, [1, 0, 0], 1),  // qwen3-30b-a3b q
        (Q4K, 512, 2048, [1, 1, 1], 4),   // qwen3-30b-a3b k: 32 tiles
        (Q4K, 2048, 4096, [1, 1, 0], 1),  // qwen3-30b-a3b o
    ];
    for (ty, rows, cols, tile, ways) in shapes {
        let mv = if ty == Q4K { &wide } else { &narrow };
        assert_eq!(&p.matmul(ty, rows, cols, 1), mv);
        assert_eq!(&p.matmul(ty, rows, cols, 8), mv);
        let short = if ty == Q4K { Pairs } else { Subs };
        assert_eq!(
            p.matmul(ty, rows, cols, 100),
            tiles(tile[0], &[(0, 100, short)])
        );
        assert_eq!(
            p.matmul(ty, rows, cols, 512),
            split(tile[1], &[(0, 512, Subs)], ways)
        );
        assert_eq!(
            p.matmul(ty, rows, cols, 2048),
            tiles(tile[2], &[(0, 2048, Subs)])
        );
    }
}

/// A batched decode step's 9-64 rows: one column of 64-wide tiles, k split over the SMs its
/// tiles leave idle (qwen3-8b's shapes); never in a single sequence's short ubatch, whose
/// GEMMs keep the CPU's bits, nor under `FERROLM_MMQ_SPLIT_K=0`.
#[test]
fn batched_steps_split_k() {
    let batches = plan(&[("FERROLM_MMVQ_MMA", "0")]).for_sequence_batches();
    let sub = |n| [(0, n, Subs)];
    // (rows, cols, (tile, ways) to 32 rows, at 64): q (32 tiles), k (8 tiles: shares of 2
    // steps), gate/up (96 tiles), down (Q6_K, 48 steps). 128×32 tiles to 32 rows where
    // splitting fills the GPU with them.
    for (ty, rows, cols, few, many) in [
        (Q4K, 4096, 4096, (3, 8), (1, 4)),
        (Q4K, 1024, 4096, (1, 8), (1, 8)),
        (Q4K, 12288, 4096, (3, 2), (1, 1)),
        (Q6K, 4096, 12288, (3, 8), (1, 4)),
    ] {
        for (n, (tile, ways)) in [(9, few), (32, few), (64, many)] {
            assert_eq!(
                batches.matmul(ty, rows, cols, n),
                split(tile, &sub(n), ways),
                "{ty} {rows}x{cols} at {n}"
            );
        }
    }
    // 128 rows: one column of 128-wide tiles, four shares.
    assert_eq!(batches.matmul(Q4K, 4096, 4096, 128), split(0, &sub(128), 4));
    let single = plan(&[]);
    assert_eq!(
        single.matmul(Q4K, 4096, 4096, 32),
        tiles(1, &[(0, 32, Pairs)])
    );
    assert_eq!(single.matmul(Q6K, 4096, 12288, 32), tiles(1, &sub(32)));
    let off =
        plan(&[("FERROLM_MMQ_SPLIT_K", "0"), ("FERROLM_MMVQ_MMA", "0")]).for_sequence_batches();
    assert_eq!(off.matmul(Q4K, 4096, 4096, 32), tiles(1, &sub(32)));
}

/// A batched decode step's 2-64 rows of Q4_K and Q6_K weights take the tensor-core mat-vec,
/// two row tiles a warp from 33 rows; a single sequence's passes, other formats, widths that
/// are not whole super-blocks and more rows keep their kernels.
#[test]
fn batched_steps_take_the_mma_matvec() {
    let batches = plan(&[]).for_sequence_batches();
    let mma = |two_tiles| Matmul::MatVecMma { two_tiles };
    for ty in [Q4K, Q6K] {
        for (n, two) in [
            (2, false),
            (8, false),
            (9, false),
            (32, false),
            (33, true),
            (64, true),
        ] {
            assert_eq!(batches.matmul(ty, 4096, 4096, n), mma(two), "{ty} at {n}");
        }
    }
    assert_eq!(
        batches.matmul(Q4K, 4096, 4096, 1),
        Matmul::MatVec { wide: true }
    );
    assert!(matches!(
        batches.matmul(Q4K, 4096, 4096, 65),
        Matmul::Gemm(_)
    ));
    assert!(matches!(
        batches.matmul(Q5K, 4096, 4096, 32),
        Matmul::Gemm(_)
    ));
    assert!(!matches!(
        batches.matmul(Q4K, 2048, 576, 32),
        Matmul::MatVecMma { .. }
    ));
    let single = plan(&[]);
    assert_eq!(
        single.matmul(Q4K, 4096, 4096, 8),
        Matmul::MatVec { wide: true }
    );
    let one_tile = plan(&[("FERROLM_MMVQ_MMA_TILES", "1")]).for_sequence_batches();
    assert_eq!(one_tile.matmul(Q4K, 4096, 4096, 64), mma(false));
    let off = plan(&[("FERROLM_MMVQ_MMA", "0")]).for_sequence_batches();
    assert_eq!(
        off.matmul(Q4K, 4096, 4096, 8),
        Matmul::MatVec { wide: true }
    );
}

#[test]
fn matmul_switches_and_formats() {
    let p = plan(&[]);
    assert_eq!(p.matmul(F32, 2048, 2048, 1), Matmul::Float);
    assert_eq!(
        p.matmul(Q4K, 2048, 2048, 9),
        tiles(1, &[(0, 8, Pairs), (8, 1, Blocks)])
    );
    // SmolLM2-135M's 576-wide rows: the CUDA-core kernel for Q8_0, slices for Q4_K.
    assert_eq!(p.matmul(Q8_0, 576, 576, 100), Matmul::Gemm(Gemm::Small));
    let slices = Matmul::MatVecSlices { wide: true };
    assert_eq!(p.matmul(Q4K, 1536, 576, 100), slices);
    // Q8_0 on eight lanes under 256 rows, unless switched off.
    assert_eq!(p.matmul(Q8_0, 2048, 2048, 255), Matmul::Gemm(Gemm::Small));
    // From 256 rows the tensor-core contract: 64 tiles on 132 SMs split k in two.
    assert_eq!(
        p.matmul(Q8_0, 2048, 2048, 256),
        split(1, &[(0, 256, Subs)], 2)
    );
    // Q5_0, summed in eight lanes on the CPU too; Q5_1 (a per-block chain) on the tiles.
    assert_eq!(p.matmul(Q5_0, 2048, 2048, 255), Matmul::Gemm(Gemm::Small));
    assert_eq!(
        p.matmul(Q5_0, 2048, 2048, 256),
        split(1, &[(0, 256, Subs)], 2)
    );
    assert_eq!(p.matmul(Q5_1, 2048, 2048, 100), tiles(1, &[(0, 100, Subs)]));
    // Qwen2.5-0.5B's 896-wide rows: the CUDA-core kernels for both in short ubatches, the
    // tiles (the last k step partly zero) from 256 rows.
    assert_eq!(p.matmul(Q5_0, 896, 896, 255), Matmul::Gemm(Gemm::Small));
    assert_eq!(p.matmul(Q5_1, 4864, 896, 255), Matmul::Gemm(Gemm::Small));
    for ty in [Q5_0, Q5_1] {
        let how = p.matmul(ty, 4864, 896, 300);
        assert!(matches!(how, Matmul::Gemm(Gemm::Tiles { .. })), "{how:?}");
    }
    assert_eq!(p.act_quant(Q5_0, 896), ActQuant::Q8_1);
    let lanes_off = plan(&[("FERROLM_CUDA_Q8_0_LANES", "0")]);
    assert_eq!(
        lanes_off.matmul(Q8_0, 2048, 2048, 100),
        tiles(1, &[(0, 100, Subs)])
    );
    assert_eq!(
        lanes_off.matmul(Q5_0, 2048, 2048, 100),
        tiles(1, &[(0, 100, Subs)])
    );
    let no_mmq = plan(&[("FERROLM_CUDA_MMQ", "0")]);
    assert_eq!(no_mmq.matmul(Q4K, 2048, 2048, 512), slices);
    let tile = plan(&[("FERROLM_MMQ_TILE", "64x64")]);
    assert_eq!(
        tile.matmul(Q4K, 2048, 2048, 512),
        tiles(2, &[(0, 512, Subs)])
    );
    let narrow = plan(&[("FERROLM_MMVQ_WIDE", "0")]);
    assert_eq!(
        narrow.matmul(Q4K, 2048, 2048, 1),
        Matmul::MatVec { wide: false }
    );
    assert_eq!(Gemm::Small.with_tile(0), Gemm::Small);
}

/// Passes of several sequences take the tensor-core orders at any size; a forced CPU order
/// stays forced.
#[test]
fn sequence_batches_take_the_fast_orders() {
    let one = plan(&[]);
    let many = one.for_sequence_batches();
    assert!(one.integer_scales(GgmlType::Q4K, 4096, 32));
    assert!(!many.integer_scales(GgmlType::Q4K, 4096, 32));
    assert!(one.lanes(GgmlType::Q8_0, 32) && one.lanes(GgmlType::Q5_0, 32));
    assert!(!many.lanes(GgmlType::Q8_0, 32) && !many.lanes(GgmlType::Q5_0, 32));
    assert_eq!(
        many.dense_order(GgmlType::Q4K, 4096, 32),
        vec![(0, 32, MmqOrder::Subs)]
    );
    let forced = plan(&[("FERROLM_CUDA_INT_SCALES", "1")]).for_sequence_batches();
    assert!(forced.integer_scales(GgmlType::Q4K, 4096, 32));
}

/// The f16 wgmma GEMM: long ubatches of formats with an f16 expansion, on a device that runs
/// it, unless `FERROLM_GEMM_F16=0`.
#[test]
fn f16_gemm_by_rows_format_and_device() {
    let p = plan(&[]);
    assert!(p.f16_gemm(Q4K, 4096, 4096, F16_GEMM_MIN_ROWS));
    assert!(p.f16_gemm(Q6K, 1024, 4096, 2048));
    assert!(p.f16_gemm(Q8_0, 2880, 2880, 512));
    assert!(!p.f16_gemm(Q4K, 4096, 4096, F16_GEMM_MIN_ROWS - 1));
    assert!(
        !p.f16_gemm(Q5K, 4096, 4096, 2048),
        "no f16 expansion of Q5_K"
    );
    assert!(!p.f16_gemm(Q8_0, 4095, 4096, 2048), "an odd row count");
    assert!(!plan(&[("FERROLM_GEMM_F16", "0")]).f16_gemm(Q4K, 4096, 4096, 2048));
    assert!(!plan(&[("FERROLM_CUDA_INT_SCALES", "1")]).f16_gemm(Q4K, 4096, 4096, 2048));
    assert!(!p.f16_gemm(Q4K, 4096, 0, 2048), "no columns");
    // A batched decode step of up to BATCH_GRAPH_MAX sequences never; a longer mixed pass may.
    let many = p.for_sequence_batches();
    assert!(!many.f16_gemm(Q4K, 4096, 4096, BATCH_GRAPH_MAX));
    assert!(many.f16_gemm(Q4K, 4096, 4096, BATCH_GRAPH_MAX + 1));
    let ampere = DeviceFacts {
        cc: (8, 0),
        f16_gemm: false,
        ..h200()
    };
    assert!(!Plan::new(parse(&[]).unwrap(), ampere).f16_gemm(Q4K, 4096, 4096, 2048));
}

/// Q4_K weights are unpacked in the f16 GEMM (no f16 copy), other formats expanded, unless
/// `FERROLM_GEMM_F16_UNPACK=0`.
#[test]
fn f16_unpack_by_format_and_switch() {
    let p = plan(&[]);
    assert!(p.f16_unpack(Q4K));
    assert!(!p.f16_unpack(Q6K));
    assert!(!p.f16_unpack(Q8_0));
    assert!(!plan(&[("FERROLM_GEMM_F16_UNPACK", "0")]).f16_unpack(Q4K));
}

/// The f16 mat-vec off, for the tests of the decode products it comes ahead of.
const NO_F16_MATVEC: (&str, &str) = ("FERROLM_F16_MATVEC", "0");

/// Gate and up in one launch of the f16 decode GEMM (`FERROLM_F16_DECODE_PAIR`, on): split
/// as their tiles together say, and only where each alone takes that GEMM.
#[test]
fn gate_and_up_pair_on_the_f16_decode_gemm() {
    let off = plan(&[("FERROLM_F16_DECODE_PAIR", "0")]).for_sequence_batches();
    assert!(off.f16_decode(Q4K, 12288, 4096, 64).is_some());
    assert_eq!(off.f16_decode_pair(Q4K, 12288, 4096, 64), None, "off");
    let pair = plan(&[]).for_sequence_batches();
    // qwen3-8b's gate and up: 96 tiles of 256 rows on 132 SMs, unsplit (each alone: 2 shares).
    assert_eq!(pair.f16_decode(Q4K, 12288, 4096, 64), Some(2));
    assert_eq!(pair.f16_decode_pair(Q4K, 12288, 4096, 64), Some(1));
    // Where each alone stays off that GEMM, so does the pair.
    assert_eq!(pair.f16_decode_pair(Q4K, 4096, 4096, 64), None);
    assert_eq!(pair.f16_decode_pair(Q4K, 12288, 4096, 16), None);
    assert_eq!(
        plan(&[]).f16_decode_pair(Q4K, 12288, 4096, 64),
        None,
        "one sequence"
    );
    // Forced shares: each alone's.
    let forced = plan(&[("FERROLM_F16_DECODE_SPLITS", "2")]).for_sequence_batches();
    assert_eq!(forced.f16_decode_pair(Q4K, 12288, 4096, 64), Some(2));
}

/// A batched decode step's Q4_K products from F16_DECODE_MIN_ROWS to F16_DECODE_MAX_ROWS rows
/// take the unpacking f16 GEMM where k, split over the SMs the tiles leave idle, keeps
/// F16_DECODE_MIN_SHARE_BLOCKS super-blocks a share; a single sequence's passes, other
/// formats, and the switches keep the mat-vecs. (The f16 mat-vec, ahead of it, switched off.)
#[test]
fn batched_steps_take_the_f16_decode_gemm() {
    let one = plan(&[NO_F16_MATVEC]);
    let many = one.for_sequence_batches();
    // qwen3-8b's gate and up: 48 tiles of 256 rows on 132 SMs, two shares of 8 super-blocks.
    assert_eq!(one.f16_decode(Q4K, 12288, 4096, 64), None, "one sequence");
    assert_eq!(many.f16_decode(Q4K, 12288, 4096, 64), Some(2));
    assert_eq!(
        many.f16_decode(Q4K, 12288, 4096, F16_DECODE_MAX_ROWS),
        Some(2)
    );
    assert_eq!(
        many.f16_decode(Q4K, 12288, 4096, F16_DECODE_MAX_ROWS + 1),
        None
    );
    assert_eq!(
        many.f16_decode(Q4K, 12288, 4096, F16_DECODE_MIN_ROWS - 1),
        None
    );
    // Enough tiles to fill half the GPU: unsplit.
    assert_eq!(many.f16_decode(Q4K, 151_936, 4096, 64), Some(1));
    // q (16 tiles: 8 shares of 2 super-blocks) stays on the mat-vec; down takes 8 shares of 6.
    assert_eq!(many.f16_decode(Q4K, 4096, 4096, 64), None);
    assert_eq!(many.f16_decode(Q4K, 4096, 12288, 64), Some(8));
    assert_eq!(many.f16_decode(Q6K, 12288, 4096, 64), None, "no unpacking");
    assert_eq!(
        many.f16_decode(Q4K, 12288, 576, 64),
        None,
        "not whole blocks"
    );
    for off in [
        ("FERROLM_F16_DECODE", "0"),
        ("FERROLM_GEMM_F16", "0"),
        ("FERROLM_GEMM_F16_UNPACK", "0"),
        ("FERROLM_CUDA_INT_SCALES", "1"),
    ] {
        let p = plan(&[NO_F16_MATVEC, off]).for_sequence_batches();
        assert_eq!(p.f16_decode(Q4K, 12288, 4096, 64), None, "{off:?}");
    }
    let rows = plan(&[NO_F16_MATVEC, ("FERROLM_F16_DECODE_ROWS", "16")]).for_sequence_batches();
    assert_eq!(rows.f16_decode(Q4K, 12288, 4096, 15), None);
    assert!(rows.f16_decode(Q4K, 12288, 4096, 16).is_some());
    assert!(rows.f16_decode(Q4K, 12288, 4096, 32).is_some());
    assert_eq!(
        many.f16_decode(Q4K, 12288, 4096, 32),
        None,
        "the default's fewest rows"
    );
    // Unsplit, gate's 16 super-blocks a block.
    let unsplit = plan(&[NO_F16_MATVEC, ("FERROLM_MMQ_SPLIT_K", "0")]).for_sequence_batches();
    assert_eq!(unsplit.f16_decode(Q4K, 12288, 4096, 64), Some(1));
    // Forced shares take the GEMM whatever their size.
    let forced = plan(&[NO_F16_MATVEC, ("FERROLM_F16_DECODE_SPLITS", "3")]).for_sequence_batches();
    assert_eq!(forced.f16_decode(Q4K, 4096, 4096, 64), Some(3));
    assert_eq!(
        forced.f16_decode(Q4K, 4096, 512, 64),
        Some(2),
        "two super-blocks"
    );
    assert!(err(&[("FERROLM_F16_DECODE_ROWS", "1")]).contains("FERROLM_F16_DECODE_ROWS"));
    assert!(err(&[("FERROLM_F16_DECODE_SPLITS", "0")]).contains("FERROLM_F16_DECODE_SPLITS"));
}

/// With `FERROLM_MMVQ_MMA_STAGED=1`, a batched decode step's Q4_K and Q6_K products of
/// STAGED_DEFAULT_ROWS to 64 rows take the staged mat-vec, ahead of the f16 decode GEMM and
/// `mmvq_mma`, in the pass's GEMM order (per sub-block; the integer-scale blocks under
/// `FERROLM_CUDA_INT_SCALES=1`), k split over twice the SMs the row blocks leave idle. Off by
/// default, on one sequence, below its rows, and for formats without it. (The f16 mat-vec,
/// ahead of it, switched off.)
#[test]
fn batched_steps_take_the_staged_matvec_when_switched_on() {
    let off = plan(&[NO_F16_MATVEC]).for_sequence_batches();
    assert_eq!(
        off.staged_matvec(Q4K, 4096, 4096, 64),
        None,
        "off by default"
    );
    let on = plan(&[NO_F16_MATVEC, ("FERROLM_MMVQ_MMA_STAGED", "1")]);
    let many = on.for_sequence_batches();
    assert_eq!(on.staged_matvec(Q4K, 4096, 4096, 64), None, "one sequence");
    // gate/up: the f16 decode GEMM's, ahead of it by default.
    assert_eq!(many.staged_matvec(Q4K, 12288, 4096, 64), None);
    assert_eq!(many.f16_decode(Q4K, 12288, 4096, 64), Some(2));
    let many = plan(&[
        NO_F16_MATVEC,
        ("FERROLM_MMVQ_MMA_STAGED", "1"),
        ("FERROLM_F16_DECODE_FIRST", "0"),
    ])
    .for_sequence_batches();
    // qwen3-8b's q: 32 row blocks on 264 slots, 16 super-blocks: 8 shares of 2.
    assert_eq!(many.staged_matvec(Q4K, 4096, 4096, 64), Some((Subs, 8)));
    assert_eq!(
        many.matmul(Q4K, 4096, 4096, 64),
        Matmul::MatVecStaged {
            order: Subs,
            splits: 8
        }
    );
    // down: 48 super-blocks, 8 shares of 6.
    assert_eq!(many.staged_matvec(Q6K, 4096, 12288, 64), Some((Subs, 8)));
    // gate/up with FERROLM_F16_DECODE_FIRST=0: 96 row blocks, two shares; it takes them from
    // the f16 decode GEMM.
    assert_eq!(many.staged_matvec(Q4K, 12288, 4096, 64), Some((Subs, 2)));
    assert_eq!(many.f16_decode(Q4K, 12288, 4096, 64), None);
    // The output: enough row blocks, unsplit.
    assert_eq!(many.staged_matvec(Q6K, 151_936, 4096, 64), Some((Subs, 1)));
    // Rows: from 33 by default, from FERROLM_MMVQ_MMA_STAGED_ROWS when set, never past 64.
    assert_eq!(many.staged_matvec(Q4K, 4096, 4096, 32), None);
    assert_eq!(many.staged_matvec(Q4K, 4096, 4096, 65), None);
    assert!(matches!(
        many.matmul(Q4K, 4096, 4096, 32),
        Matmul::MatVecMma { .. }
    ));
    let rows = plan(&[
        NO_F16_MATVEC,
        ("FERROLM_MMVQ_MMA_STAGED", "1"),
        ("FERROLM_MMVQ_MMA_STAGED_ROWS", "17"),
    ])
    .for_sequence_batches();
    assert_eq!(rows.staged_matvec(Q4K, 4096, 4096, 16), None);
    assert!(rows.staged_matvec(Q4K, 4096, 4096, 17).is_some());
    // The integer-scale order where forced, for Q4_K over Q8_K activations only.
    let int = plan(&[
        NO_F16_MATVEC,
        ("FERROLM_MMVQ_MMA_STAGED", "1"),
        ("FERROLM_CUDA_INT_SCALES", "1"),
    ])
    .for_sequence_batches();
    assert_eq!(int.staged_matvec(Q4K, 4096, 4096, 64), Some((Blocks, 8)));
    assert_eq!(int.staged_matvec(Q6K, 4096, 4096, 64), Some((Subs, 8)));
    let q8_1 = plan(&[
        NO_F16_MATVEC,
        ("FERROLM_MMVQ_MMA_STAGED", "1"),
        ("FERROLM_CUDA_INT_SCALES", "1"),
        ("FERROLM_CUDA_Q8K", "0"),
    ])
    .for_sequence_batches();
    assert_eq!(q8_1.staged_matvec(Q4K, 4096, 4096, 64), Some((Subs, 8)));
    // Formats and widths without the kernel.
    assert_eq!(many.staged_matvec(Q8_0, 4096, 4096, 64), None);
    assert_eq!(many.staged_matvec(Q4K, 4096, 576, 64), None);
    // Shares: forced (never past the kernel's counters), or none without split-K.
    let forced = plan(&[
        NO_F16_MATVEC,
        ("FERROLM_MMVQ_MMA_STAGED", "1"),
        ("FERROLM_MMVQ_MMA_STAGED_SPLITS", "3"),
    ])
    .for_sequence_batches();
    assert_eq!(forced.staged_matvec(Q4K, 4096, 4096, 64), Some((Subs, 3)));
    assert_eq!(
        forced.staged_matvec(Q6K, 151_936, 4096, 64),
        Some((Subs, 1))
    );
    // (Unsplit, every Q4_K product keeps a whole share for the f16 decode GEMM, which comes
    // ahead unless told otherwise.)
    let unsplit = plan(&[
        NO_F16_MATVEC,
        ("FERROLM_MMVQ_MMA_STAGED", "1"),
        ("FERROLM_MMQ_SPLIT_K", "0"),
        ("FERROLM_F16_DECODE_FIRST", "0"),
    ])
    .for_sequence_batches();
    assert_eq!(unsplit.staged_matvec(Q4K, 4096, 4096, 64), Some((Subs, 1)));
    assert!(err(&[("FERROLM_MMVQ_MMA_STAGED_ROWS", "16")]).contains("FERROLM_MMVQ_MMA_STAGED_ROWS"));
    assert!(
        err(&[("FERROLM_MMVQ_MMA_STAGED_SPLITS", "0")]).contains("FERROLM_MMVQ_MMA_STAGED_SPLITS")
    );
}

/// A batched step's Q4_K and Q6_K products of 17-64 rows (33-64 below 4096 columns) take the
/// f16 mat-vec, on by default, ahead of the staged and tensor-core mat-vecs and behind the f16
/// decode GEMM where that takes a product, k split over twice the SMs the row blocks leave idle. Not on one sequence, below its
/// rows, for other formats, where the f16 path is off, nor with `FERROLM_F16_MATVEC=0`.
#[test]
fn batched_steps_take_the_f16_matvec() {
    let off = plan(&[("FERROLM_F16_MATVEC", "0")]).for_sequence_batches();
    assert_eq!(off.f16_matvec(Q4K, 4096, 4096, 64), None, "switched off");
    assert!(plan(&[]).f16_matvec_stage(GgmlType::Q6K));
    assert!(!plan(&[("FERROLM_F16_MATVEC_Q6K_STAGE", "0")]).f16_matvec_stage(GgmlType::Q6K));
    assert!(!plan(&[]).f16_matvec_stage(GgmlType::Q4K));
    assert!(plan(&[("FERROLM_F16_MATVEC_Q4K_STAGE", "1")]).f16_matvec_stage(GgmlType::Q4K));
    // The cluster sum: on by default; it takes 2-8 shares and needs no scratch there.
    let off = [("FERROLM_F16_MATVEC_CLUSTER", "0")];
    assert!(!plan(&off).f16_matvec_how(GgmlType::Q4K).cluster_sum);
    let how = plan(&[]).f16_matvec_how(GgmlType::Q6K);
    assert_eq!((how.stage_weights, how.cluster_sum), (true, true));
    use crate::ops::MatVecF16;
    assert_eq!(MatVecF16::scratch(how, 8, 64, 4096), 0);
    assert_eq!(MatVecF16::scratch(how, 1, 64, 4096), 0);
    assert_eq!(MatVecF16::scratch(how, 12, 64, 4096), 12 * 64 * 4096);
    assert!(plan(&[]).f16_matvec_together());
    assert!(!plan(&[("FERROLM_F16_MATVEC_ONE", "0")]).f16_matvec_together());
    let scratch = crate::ops::MatVecF16How::default();
    assert_eq!(MatVecF16::scratch(scratch, 8, 64, 4096), 8 * 64 * 4096);
    let on = plan(&[]);
    let many = on.for_sequence_batches();
    assert_eq!(on.f16_matvec(Q4K, 4096, 4096, 64), None, "one sequence");
    // qwen3-8b's q: 32 row blocks of 128 on 264 slots, 16 super-blocks: 8 shares of 2.
    assert_eq!(many.f16_matvec(Q4K, 4096, 4096, 64), Some(8));
    // gate/up: the f16 decode GEMM's (2 shares of 8 super-blocks), ahead of it by default;
    // 32-row steps (below the GEMM's rows) stay.
    assert_eq!(many.f16_matvec(Q4K, 12288, 4096, 64), None);
    assert_eq!(many.f16_decode(Q4K, 12288, 4096, 64), Some(2));
    assert!(many.f16_matvec(Q4K, 12288, 4096, 32).is_some());
    // With FERROLM_F16_DECODE_FIRST=0: 96 row blocks, two shares; the GEMM gives them up.
    let behind = plan(&[("FERROLM_F16_DECODE_FIRST", "0")]).for_sequence_batches();
    assert_eq!(behind.f16_matvec(Q4K, 12288, 4096, 64), Some(2));
    assert_eq!(behind.f16_decode(Q4K, 12288, 4096, 64), None);
    // Ahead of the staged mat-vec where both are on.
    let both = plan(&[("FERROLM_MMVQ_MMA_STAGED", "1")]).for_sequence_batches();
    assert_eq!(both.f16_matvec(Q4K, 4096, 4096, 64), Some(8));
    assert_eq!(both.staged_matvec(Q4K, 4096, 4096, 64), None);
    assert_eq!(both.staged_matvec(Q6K, 4096, 4096, 64), None);
    // Q6_K's down and the output (1,187 row blocks: past the split counters, unsplit).
    assert_eq!(many.f16_matvec(Q6K, 4096, 12288, 64), Some(8));
    assert_eq!(many.f16_matvec(Q6K, 151_936, 4096, 64), Some(1));
    // Counting the format's blocks an SM: Q6_K's down in one wave of 4 shares, Q4_K as before.
    let occ = plan(&[("FERROLM_F16_MATVEC_OCCUPANCY", "1")]).for_sequence_batches();
    assert_eq!(occ.f16_matvec(Q6K, 4096, 12288, 64), Some(4));
    assert_eq!(occ.f16_matvec(Q4K, 4096, 4096, 64), Some(8));
    // Rows: from 17 by default (33 for rows under 4096 elements), from FERROLM_F16_MATVEC_ROWS
    // when set, never past 64.
    assert_eq!(many.f16_matvec(Q4K, 4096, 4096, 16), None);
    assert!(many.f16_matvec(Q4K, 4096, 4096, 17).is_some());
    assert_eq!(many.f16_matvec(Q4K, 2048, 2048, 32), None);
    assert!(many.f16_matvec(Q4K, 2048, 2048, 33).is_some());
    assert_eq!(many.f16_matvec(Q4K, 4096, 4096, 65), None);
    let rows = plan(&[("FERROLM_F16_MATVEC_ROWS", "9")]).for_sequence_batches();
    assert_eq!(rows.f16_matvec(Q4K, 4096, 4096, 8), None);
    assert!(rows.f16_matvec(Q4K, 4096, 4096, 9).is_some());
    // Formats and widths without the kernel; the f16 path switched off.
    assert_eq!(many.f16_matvec(Q8_0, 4096, 4096, 64), None);
    assert_eq!(many.f16_matvec(Q4K, 4096, 576, 64), None);
    let no_f16 = plan(&[("FERROLM_GEMM_F16", "0")]).for_sequence_batches();
    assert_eq!(no_f16.f16_matvec(Q4K, 4096, 4096, 64), None);
    // Shares: forced, or none without split-K.
    let forced = plan(&[("FERROLM_F16_MATVEC_SPLITS", "3")]).for_sequence_batches();
    assert_eq!(forced.f16_matvec(Q4K, 4096, 4096, 64), Some(3));
    let unsplit = plan(&[("FERROLM_MMQ_SPLIT_K", "0")]).for_sequence_batches();
    assert_eq!(unsplit.f16_matvec(Q6K, 4096, 4096, 64), Some(1));
    // (Unsplit, a Q4_K product keeps a whole share for the f16 decode GEMM, ahead of it.)
    assert_eq!(unsplit.f16_decode(Q4K, 4096, 4096, 64), Some(1));
    let unsplit_behind = plan(&[
        ("FERROLM_MMQ_SPLIT_K", "0"),
        ("FERROLM_F16_DECODE_FIRST", "0"),
    ])
    .for_sequence_batches();
    assert_eq!(unsplit_behind.f16_matvec(Q4K, 4096, 4096, 64), Some(1));
    // The f16 decode GEMM ahead of the staged mat-vec too: one kernel a product; q (shares
    // of 2 super-blocks) stays on the f16 mat-vec.
    assert_eq!(many.f16_decode(Q4K, 4096, 4096, 64), None);
    assert_eq!(both.f16_decode(Q4K, 12288, 4096, 64), Some(2));
    assert_eq!(both.staged_matvec(Q4K, 12288, 4096, 64), None);
    assert!(err(&[("FERROLM_F16_MATVEC_ROWS", "0")]).contains("FERROLM_F16_MATVEC_ROWS"));
    assert!(err(&[("FERROLM_F16_MATVEC_SPLITS", "17")]).contains("FERROLM_F16_MATVEC_SPLITS"));
}

/// A batched step's norms and SwiGLU keep an f16 copy where the f16 products after them take
/// one (qwen3-8b's 4096 and 12288 wide activations from F16_MATVEC_DEFAULT_ROWS rows, 2048
/// wide ones from F16_MATVEC_NARROW_ROWS), long ubatches too (the f16 GEMM); not one token,
/// not a single sequence's few rows, not with the switch off or the f16 path off.
#[test]
fn f16_copies_where_f16_products_follow() {
    let one = plan(&[]);
    let many = one.for_sequence_batches();
    for cols in [4096, 12288] {
        assert!(many.f16_copy(cols, 64), "{cols}");
        assert!(many.f16_copy(cols, F16_MATVEC_DEFAULT_ROWS), "{cols}");
        assert!(!many.f16_copy(cols, F16_MATVEC_DEFAULT_ROWS - 1), "{cols}");
        assert!(!many.f16_copy(cols, 1), "{cols}");
    }
    assert!(!many.f16_copy(2048, F16_MATVEC_NARROW_ROWS - 1));
    assert!(many.f16_copy(2048, F16_MATVEC_NARROW_ROWS));
    assert!(!one.f16_copy(4096, 16), "a single sequence's ubatch of 16");
    assert!(one.f16_copy(4096, 512), "a long ubatch: the f16 GEMM");
    for off in [("FERROLM_F16_COPY", "0"), ("FERROLM_GEMM_F16", "0")] {
        let p = plan(&[off]).for_sequence_batches();
        assert!(!p.f16_copy(4096, 64), "{off:?}");
    }
}

/// The fewest super-blocks a share keeps for the f16 decode GEMM to take a product
/// (`FERROLM_F16_DECODE_SHARE_BLOCKS`, default F16_DECODE_MIN_SHARE_BLOCKS): qwen3-8b's down
/// (4,096 rows of 12,288: 16 tiles, 8 shares of 6) takes it by default and leaves it at 8;
/// at 2, o and q (8 shares of 2) take it too. Q6_K never does (no decode form: its blocks
/// do not start on the copy engine's 16-byte steps).
#[test]
fn share_blocks_decide_the_f16_decode_gemm() {
    let batches =
        |env: &[(&str, &str)]| plan(&[env, &[NO_F16_MATVEC]].concat()).for_sequence_batches();
    assert_eq!(batches(&[]).f16_decode(Q4K, 4096, 12288, 64), Some(8));
    let long = [("FERROLM_F16_DECODE_SHARE_BLOCKS", "8")];
    assert_eq!(batches(&long).f16_decode(Q4K, 4096, 12288, 64), None);
    assert_eq!(batches(&[]).f16_decode(Q4K, 4096, 4096, 64), None);
    let short = [("FERROLM_F16_DECODE_SHARE_BLOCKS", "2")];
    assert_eq!(batches(&short).f16_decode(Q4K, 4096, 4096, 64), Some(8));
    assert_eq!(batches(&short).f16_decode(Q6K, 4096, 12288, 64), None);
    assert!(GemmWgmma::decodes(Q4K, 4352) && !GemmWgmma::decodes(Q6K, 4096));
    assert!(!GemmWgmma::decodes(Q4K, 4100));
}
