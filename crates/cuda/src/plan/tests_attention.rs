//! The plan's attention answers, without a GPU: which kernel runs a ubatch, decode by KV group
//! and its splits, sliding windows, query rounding, the batched rows, every head size.

use super::tests::{err, plan};
use super::*;

#[test]
fn attention_by_rows_unless_forced() {
    use PrefillKernel::{F16Ref, F32Ref, Mma, Scalar};
    let p = plan(&[]);
    let prefill = |p: &Plan, n| p.attention(n, KvFormat::F16, 4, 128);
    let decode = Attn::Decode {
        fused_combine: true,
        kernel: DecodeKernel::GroupTensorCores,
    };
    assert_eq!(prefill(&p, 1), decode);
    assert_eq!(prefill(&p, 8), decode);
    assert_eq!(prefill(&p, 9), Attn::Prefill(F16Ref));
    assert_eq!(prefill(&p, GGML_SMALL_ROWS - 1), Attn::Prefill(F16Ref));
    assert_eq!(prefill(&p, GGML_SMALL_ROWS), Attn::Prefill(F32Ref));
    assert_eq!(prefill(&p, 100), Attn::Prefill(F32Ref));
    assert_eq!(prefill(&p, REF_MAX_ROWS - 1), Attn::Prefill(F32Ref));
    assert_eq!(prefill(&p, REF_MAX_ROWS), Attn::Prefill(Mma));
    assert_eq!(prefill(&p, 2048), Attn::Prefill(Mma));
    let f32 = plan(&[("FERROLM_ATTN", "f32")]);
    assert_eq!(prefill(&f32, 9), Attn::Prefill(F32Ref));
    assert_eq!(prefill(&f32, 2048), Attn::Prefill(Mma));
    let mma = plan(&[("FERROLM_ATTN_MMA", "1")]);
    assert_eq!(prefill(&mma, 9), Attn::Prefill(Mma));
    assert_eq!(mma.attention(1, KvFormat::F16, 4, 128), decode);
    let scalar = plan(&[("FERROLM_ATTN_MMA", "0")]);
    assert_eq!(prefill(&scalar, 2048), Attn::Prefill(Scalar));
    // A quantized cache: decode a block per query head, every prefill on the kernel that
    // reads blocks.
    for q in [KvFormat::Q8_0, KvFormat::Q4_0] {
        for n in [9, GGML_SMALL_ROWS, 2048] {
            assert_eq!(p.attention(n, q, 4, 128), Attn::Prefill(Scalar));
            assert_eq!(mma.attention(n, q, 4, 128), Attn::Prefill(Scalar));
        }
        assert_eq!(
            p.attention(8, q, 4, 128),
            Attn::Decode {
                fused_combine: true,
                kernel: DecodeKernel::Split
            }
        );
    }
}

/// Decode by KV group where a kernel has the group size (f16 caches), unless switched off; on
/// the tensor cores for the groups and head sizes they have, unless `FERROLM_ATTN_TC=0`.
#[test]
fn decode_grouped_for_the_group_sizes_it_has() {
    let kernel = |p: &Plan, group, head_dim| match p.attention(1, KvFormat::F16, group, head_dim) {
        Attn::Decode { kernel, .. } => kernel,
        other => panic!("{other:?}"),
    };
    let p = plan(&[("FERROLM_ATTN_TC", "0")]);
    for g in [1, 2, 4, 8] {
        assert_eq!(kernel(&p, g, 128), DecodeKernel::Group, "group {g}");
    }
    for g in [3, 5, 6, 16] {
        assert_eq!(kernel(&p, g, 128), DecodeKernel::Split, "group {g}");
    }
    let off = plan(&[("FERROLM_ATTN_GROUPED", "0")]);
    assert_eq!(kernel(&off, 4, 128), DecodeKernel::Split);
    let tc = plan(&[]);
    for (g, d) in [(4, 64), (4, 128), (8, 128), (8, 256)] {
        assert_eq!(
            kernel(&tc, g, d),
            DecodeKernel::GroupTensorCores,
            "{g} of {d}"
        );
        assert!(tc.attn_tensor_cores(g, d));
    }
    for (g, d) in [(1, 128), (2, 128), (4, 96), (8, 80)] {
        assert_eq!(kernel(&tc, g, d), DecodeKernel::Group, "{g} of {d}");
    }
    assert!(!p.attn_tensor_cores(4, 128), "switched off");
    let tc_split = plan(&[("FERROLM_ATTN_GROUPED", "0")]);
    assert_eq!(kernel(&tc_split, 4, 128), DecodeKernel::Split);
    assert_eq!(
        plan(&[]).attention(1, KvFormat::Q8_0, 4, 128),
        Attn::Decode {
            fused_combine: true,
            kernel: DecodeKernel::Split
        },
        "block caches keep the split kernel"
    );
}

#[test]
fn decode_splits_by_context() {
    let p = plan(&[]); // 132 SMs: 528 blocks
    assert_eq!(p.decode_splits(1, 8), 1);
    assert_eq!(p.decode_splits(1000, 8), 8);
    // Short contexts: up to four splits of 32 keys or more.
    assert_eq!(p.decode_splits(20, 8), 1);
    assert_eq!(p.decode_splits(100, 8), 4);
    assert_eq!(p.decode_splits(128, 8), 4);
    assert_eq!(p.decode_splits(600, 8), 5);
    assert_eq!(p.decode_splits(4224, 8), 33);
    assert_eq!(p.decode_splits(16_512, 8), 66);
    assert_eq!(p.decode_splits(16_512, 16), 33);
    assert_eq!(p.decode_splits(1 << 20, 1), ATTN_MAX_SPLITS);
    let p = plan(&[("FERROLM_ATTN_SPLIT_KEYS", "256")]);
    assert_eq!(p.decode_splits(16_384, 8), 64);
    assert_eq!(p.decode_splits(16_384, 16), 64);
    assert_eq!(plan(&[("FERROLM_ATTN_SPLIT_KEYS", "auto")]), plan(&[]));
}

/// A windowed layer splits its window as a context of that length, within the cache's work.
#[test]
fn window_splits_follow_the_window() {
    let p = plan(&[]);
    let cap = p.decode_splits(32_768, 8); // 66: the work a 32k cache gets
    assert_eq!(p.window_splits(cap, None, 8), cap);
    assert_eq!(p.window_splits(cap, Some(512), 8), 4); // gemma3-1b's window
    assert_eq!(p.window_splits(cap, Some(1024), 8), 8); // gemma3-4b's
    assert_eq!(p.window_splits(cap, Some(128), 8), 4); // gpt-oss's
    assert_eq!(p.window_splits(2, Some(1024), 8), 2); // a short cache's work bounds it
    assert_eq!(p.window_splits(cap, Some(1 << 20), 8), cap);
}

/// Queries round through Q8_0 over a quantized cache (the CPU's integer dots), not over f16 nor
/// under `FERROLM_ATTN=f32`.
#[test]
fn queries_round_for_a_quantized_cache() {
    let p = plan(&[]);
    assert!(p.round_query(KvFormat::Q8_0) && p.round_query(KvFormat::Q4_0));
    assert!(!p.round_query(KvFormat::F16));
    assert!(!plan(&[("FERROLM_ATTN", "f32")]).round_query(KvFormat::Q8_0));
}

/// One launch for a batch's decode rows where the kernel has the shape (f16, groups up to 8,
/// the head sizes of ATTN_HEAD_DIMS), unless switched off; multi-sequence steps captured at
/// powers of two.
#[test]
fn batched_decode_attention_and_its_graph_sizes() {
    assert!(plan(&[]).batched_attention(KvFormat::F16, 9, 3, 64));
    let p = plan(&[("FERROLM_ATTN_BATCHED", "1")]);
    assert!(p.batched_attention(KvFormat::F16, 9, 3, 64));
    assert!(p.batched_attention(KvFormat::F16, 32, 4, 128));
    assert!(!p.batched_attention(KvFormat::Q8_0, 32, 4, 128));
    assert!(!p.batched_attention(KvFormat::F16, 64, 4, 128));
    assert!(p.batched_attention(KvFormat::F16, 32, 32, 80));
    assert!(!p.batched_attention(KvFormat::F16, 32, 32, 48));
    let off = plan(&[("FERROLM_ATTN_BATCHED", "0")]);
    assert!(!off.batched_attention(KvFormat::F16, 9, 3, 64));
    let sizes: Vec<Option<usize>> = [1, 2, 3, 8, 33, 256, 257]
        .map(|n| p.batch_graph_size(n))
        .into();
    assert_eq!(
        sizes,
        [None, Some(2), Some(4), Some(8), Some(64), Some(256), None]
    );
    assert_eq!(off.batch_graph_size(8), None);
    // Splits from the row's own keys, capped by its cache's partials.
    let k = ROWS_SPLIT_KEYS;
    let splits: Vec<usize> = [(1, 8), (k, 8), (k + 1, 8), (4000, 8), (4000, 0)]
        .map(|(keys, cap)| p.rows_splits(keys, cap))
        .into();
    assert_eq!(splits, [1, 1, 2, 8, 1]);
    assert_eq!(
        plan(&[("FERROLM_ATTN_BATCHED", "1"), ("FERROLM_CUDA_GRAPH", "0")]).batch_graph_size(8),
        None
    );
}

/// Every head size has every decode kernel; prefill of heads past [`MMA_HEAD_DIMS`] (192, 256)
/// takes the scalar kernel wherever the tensor-core one would run, forced or not.
#[test]
fn attention_at_every_head_size() {
    use crate::ops::ATTN_HEAD_DIMS;
    use PrefillKernel::{F16Ref, F32Ref, Mma, Scalar};
    let (p, mma) = (plan(&[]), plan(&[("FERROLM_ATTN_MMA", "1")]));
    assert_eq!(ATTN_HEAD_DIMS, [32, 64, 80, 96, 128, 192, 256]);
    for d in ATTN_HEAD_DIMS {
        let long = if d <= 128 { Mma } else { Scalar };
        let kernel = if [64, 128, 256].contains(&d) {
            DecodeKernel::GroupTensorCores
        } else {
            DecodeKernel::Group
        };
        let decode = Attn::Decode {
            fused_combine: true,
            kernel,
        };
        assert_eq!(p.attention(1, KvFormat::F16, 4, d), decode, "{d}");
        assert_eq!(p.attention(9, KvFormat::F16, 4, d), Attn::Prefill(F16Ref));
        assert_eq!(p.attention(100, KvFormat::F16, 4, d), Attn::Prefill(F32Ref));
        assert_eq!(p.attention(2048, KvFormat::F16, 4, d), Attn::Prefill(long));
        assert_eq!(mma.attention(9, KvFormat::F16, 4, d), Attn::Prefill(long));
        assert!(p.batched_attention(KvFormat::F16, 8, 2, d), "{d}");
    }
    assert!(!MMA_HEAD_DIMS.contains(&192) && !MMA_HEAD_DIMS.contains(&256));
}

/// Decode attention's splits are combined in a launch of their own unless
/// FERROLM_ATTN_COMBINE_WALK=1 puts them in the walk's.
#[test]
fn splits_combine_in_their_own_launch() {
    assert!(!plan(&[]).combine_in_walk());
    assert!(plan(&[("FERROLM_ATTN_COMBINE_WALK", "1")]).combine_in_walk());
    assert_eq!(plan(&[("FERROLM_ATTN_COMBINE_WALK", "0")]), plan(&[]));
    assert!(err(&[("FERROLM_ATTN_COMBINE_WALK", "2")]).contains("FERROLM_ATTN_COMBINE_WALK"));
    assert!(plan(&[]).combine_quantizes());
    assert!(!plan(&[("FERROLM_ATTN_COMBINE_Q8K", "0")]).combine_quantizes());
    assert!(err(&[("FERROLM_ATTN_COMBINE_Q8K", "x")]).contains("FERROLM_ATTN_COMBINE_Q8K"));
}
