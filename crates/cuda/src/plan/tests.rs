//! The plan's answers, without a GPU: plans built from explicit environments and an H200's
//! facts.

use super::*;
use crate::plan::switches::tile_from_env;
use GgmlType::{Q4K, Q4_0, Q4_1, Q5_0, Q5_1, Q6K, Q8_0};

/// An H200: 132 SMs, cc 9.0; one block of the 128×128 and 128×64 tiles per SM, two of 64×64
/// and 128×32.
pub(super) fn h200() -> DeviceFacts {
    let formats = [
        Q4_0,
        Q4_1,
        Q5_0,
        Q5_1,
        Q8_0,
        Q4K,
        GgmlType::Q5K,
        Q6K,
        GgmlType::Mxfp4,
    ];
    DeviceFacts {
        sms: 132,
        cc: (9, 0),
        mmq_blocks_per_sm: formats.iter().map(|&t| (t, [1, 1, 2, 2])).collect(),
        f16_gemm: true,
    }
}

pub(super) fn parse(vars: &[(&str, &str)]) -> Result<Switches> {
    let vars: Vec<(String, String)> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Switches::parse(&|name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()))
}

/// The plan under `vars` (the rest unset) on an H200.
pub(super) fn plan(vars: &[(&str, &str)]) -> Plan {
    Plan::new(parse(vars).unwrap(), h200())
}

pub(super) fn err(vars: &[(&str, &str)]) -> String {
    parse(vars).unwrap_err().to_string()
}

#[test]
fn unset_empty_and_documented_values() {
    assert_eq!(parse(&[]).unwrap(), Switches::default());
    assert_eq!(
        parse(&[("FERROLM_CUDA_MMQ", "")]).unwrap(),
        Switches::default()
    );
    assert_eq!(
        parse(&[("FERROLM_CUDA_FUSE", "1")]).unwrap(),
        Switches::default()
    );
    assert!(!parse(&[("FERROLM_CUDA_FUSE", "0")]).unwrap().fuse);
    assert!(!parse(&[("FERROLM_MOE_FUSED", " 0 ")]).unwrap().moe_fused);
    assert!(parse(&[("FERROLM_CUDA_PROFILE", "1")]).unwrap().profile);
    assert!(!parse(&[("FERROLM_ATTN", "f32")]).unwrap().attn_ggml_small);
    let s = parse(&[
        ("FERROLM_ATTN_MMA", "auto"),
        ("FERROLM_CUDA_INT_SCALES", "0"),
    ])
    .unwrap();
    assert_eq!((s.attn_mma, s.int_scales), (None, Some(false)));
    assert_eq!(
        parse(&[("FERROLM_MMQ_TILE", "64x64")]).unwrap().mmq_tile,
        Some(2)
    );
}

#[test]
fn bad_values_name_the_variable_and_the_choices() {
    let e = err(&[("FERROLM_CUDA_MMQ", "maybe")]);
    assert!(
        e.contains("FERROLM_CUDA_MMQ=maybe") && e.contains("0 (off)"),
        "{e}"
    );
    let e = err(&[("FERROLM_CUDA_PROFILE", "yes")]);
    assert!(e.contains("FERROLM_CUDA_PROFILE=yes") && e.contains("0 (off, the default"));
    let e = err(&[("FERROLM_ATTN_MMA", "2")]);
    assert!(
        e.contains("FERROLM_ATTN_MMA=2") && e.contains("auto"),
        "{e}"
    );
    let e = err(&[("FERROLM_CUDA_INT_SCALES", "auto")]);
    assert!(e.contains("FERROLM_CUDA_INT_SCALES=auto"), "{e}");
    let e = err(&[("FERROLM_ATTN", "f16")]);
    assert!(e.contains("FERROLM_ATTN=f16") && e.contains("f32"), "{e}");
    let e = err(&[("FERROLM_ATTN_SPLIT_KEYS", "8")]);
    assert!(
        e.contains("FERROLM_ATTN_SPLIT_KEYS=8") && e.contains("16 to"),
        "{e}"
    );
    let e = err(&[("FERROLM_MMQ_TILE", "256x256")]);
    assert!(e.contains("128x128") && e.contains("256x256"), "{e}");
    for name in [
        "FERROLM_CUDA_FUSE",
        "FERROLM_NORM_ROUTE",
        "FERROLM_CUDA_GRAPH",
        "FERROLM_CUDA_Q8_0_LANES",
        "FERROLM_MOE_GROUPED",
        "FERROLM_MMVQ_WIDE",
        "FERROLM_MOE_FUSED",
        "FERROLM_CUDA_Q8K",
        "FERROLM_CUDA_PDL",
        "FERROLM_CUDA_PREFETCH",
        "FERROLM_ATTN_GROUPED",
        "FERROLM_ATTN_BATCHED",
        "FERROLM_ROPE_TABLE",
        "FERROLM_MMVQ_STAGE",
        "FERROLM_MMQ_SPLIT_K",
        "FERROLM_GEMM_F16",
        "FERROLM_GEMM_F16_UNPACK",
    ] {
        assert!(err(&[(name, "off")]).contains(&format!("{name}=off")));
    }
}

#[test]
fn tile_names() {
    assert_eq!(tile_from_env(None).unwrap(), None);
    assert_eq!(tile_from_env(Some("auto")).unwrap(), None);
    assert_eq!(tile_from_env(Some("64x64")).unwrap(), Some(2));
}

/// One line a switch, then the device and thresholds.
#[test]
fn display_prints_every_switch() {
    let text = plan(&[("FERROLM_MMQ_TILE", "128x64")]).to_string();
    assert_eq!(text.lines().count(), 92, "{text}");
    assert!(text.contains("132 SMs, cc 9.0"));
    assert!(text
        .lines()
        .any(|l| l.starts_with("FERROLM_MMQ_TILE") && l.contains("128x64")));
    assert!(text
        .lines()
        .any(|l| l.starts_with("FERROLM_CUDA_MMQ") && l.contains(" 1 ")));
}

#[test]
fn fusions_follow_the_switch() {
    let (on, off) = (plan(&[]), plan(&[("FERROLM_CUDA_FUSE", "0")]));
    assert!(on.fused_norm(2048) && !on.fused_norm(2047) && !off.fused_norm(2048));
    assert!(on.pair_matvec(1) && !on.pair_matvec(2) && !off.pair_matvec(1));
    assert_eq!(
        off.attention(1, KvFormat::F16, 4, 128),
        Attn::Decode {
            fused_combine: false,
            kernel: DecodeKernel::GroupTensorCores
        }
    );
    assert!(on.graphs() && !plan(&[("FERROLM_CUDA_GRAPH", "0")]).graphs());
    assert!(
        !plan(&[("FERROLM_CUDA_PROFILE", "1")]).graphs(),
        "profiling turns graphs off"
    );
}

/// Programmatic dependent launch: on from Hopper on, off before it or when switched off; the
/// weight prefetch of small matrices with it unless switched off, of every matrix when asked.
/// Staged activations and a carveout only when asked for, on any device; the per-head norms
/// in registers unless switched off.
#[test]
fn dependent_launch_from_hopper_unless_off() {
    let plain = LaunchMode {
        head_norm_regs: true,
        norm_exact: true,
        ..LaunchMode::default()
    };
    assert!(
        !plan(&[("FERROLM_QK_NORM_REGS", "0")])
            .launch_mode()
            .head_norm_regs
    );
    assert!(
        !plan(&[("FERROLM_NORM_EXACT", "0")])
            .launch_mode()
            .norm_exact
    );
    // The default: PDL, and the prefetch for matrices up to PREFETCH_MAX_MB_AUTO alone.
    let pdl = LaunchMode {
        dependent: true,
        weight_prefetch: true,
        weight_prefetch_max: PREFETCH_MAX_MB_AUTO << 20,
        ..plain
    };
    assert_eq!(plan(&[]).launch_mode(), pdl);
    assert_eq!(
        plan(&[("FERROLM_CUDA_PREFETCH_MAX_MB", "0")]).launch_mode(),
        LaunchMode {
            weight_prefetch: false,
            weight_prefetch_max: 0,
            ..pdl
        }
    );
    assert_eq!(plan(&[("FERROLM_CUDA_PDL", "0")]).launch_mode(), plain);
    assert_eq!(
        plan(&[("FERROLM_MMVQ_STAGE", "1")]).launch_mode(),
        LaunchMode {
            stage_activations: true,
            ..pdl
        }
    );
    assert_eq!(
        plan(&[("FERROLM_CUDA_PREFETCH", "1")]).launch_mode(),
        LaunchMode {
            weight_prefetch_max: 0,
            ..pdl
        }
    );
    let l1 = plan(&[("FERROLM_CUDA_PREFETCH_L1", "1")]).launch_mode();
    assert_eq!(
        (l1.weight_prefetch, l1.weight_prefetch_l1, l1.prefetch_arg()),
        (true, true, 2)
    );
    assert_eq!(
        plan(&[("FERROLM_CUDA_PDL", "0"), ("FERROLM_CUDA_PREFETCH", "1")]).launch_mode(),
        plain
    );
    // The prefetch for small matrices alone: on with its limit, every size with the plain one.
    let small = plan(&[("FERROLM_CUDA_PREFETCH_MAX_MB", "16")]).launch_mode();
    assert_eq!(
        (
            small.prefetch_arg_for(16 << 20),
            small.prefetch_arg_for((16 << 20) + 1)
        ),
        (1, 0)
    );
    let all = plan(&[("FERROLM_CUDA_PREFETCH", "1")]).launch_mode();
    assert_eq!(all.prefetch_arg_for(1 << 30), 1);
    assert_eq!(
        (
            pdl.prefetch_arg_for(PREFETCH_MAX_MB_AUTO << 20),
            pdl.prefetch_arg_for((PREFETCH_MAX_MB_AUTO << 20) + 1)
        ),
        (1, 0)
    );
    let none = plan(&[("FERROLM_CUDA_PREFETCH_MAX_MB", "0")]).launch_mode();
    assert_eq!(none.prefetch_arg_for(1), 0);
    // One carveout for every kernel where asked, with or without PDL.
    assert_eq!(
        plan(&[("FERROLM_CUDA_CARVEOUT", "100")]).launch_mode(),
        LaunchMode {
            carveout: Some(100),
            ..pdl
        }
    );
    assert!(err(&[("FERROLM_CUDA_CARVEOUT", "101")]).contains("FERROLM_CUDA_CARVEOUT"));
    let ampere = DeviceFacts {
        cc: (8, 0),
        ..h200()
    };
    assert_eq!(Plan::new(parse(&[]).unwrap(), ampere).launch_mode(), plain);
}

/// `FERROLM_TIMING_SKIP`: kernel names (or their starts) in the launch mode, as listed; names
/// only.
#[test]
fn timing_skip_lists_kernel_names() {
    assert!(plan(&[]).launch_mode().skip.is_empty());
    let skip = plan(&[("FERROLM_TIMING_SKIP", "moe_down, quantize_q8_k")]).launch_mode();
    assert_eq!(skip.skip, ["moe_down", "quantize_q8_k"]);
    assert!(plan(&[("FERROLM_TIMING_SKIP", "moe_down")])
        .to_string()
        .contains("moe_down"));
    for bad in ["moe_down,", "moe-down", "a b"] {
        assert!(err(&[("FERROLM_TIMING_SKIP", bad)]).contains("FERROLM_TIMING_SKIP"));
    }
}

#[test]
fn batched_attention_splits_follow_a_rows_keys_and_the_switch() {
    let auto = plan(&[]);
    // ROWS_SPLIT_KEYS keys a split, at least one, at most the cache's partials.
    assert_eq!(auto.rows_splits(1, 8), 1);
    assert_eq!(auto.rows_splits(ROWS_SPLIT_KEYS + 1, 8), 2);
    assert_eq!(auto.rows_splits(100 * ROWS_SPLIT_KEYS, 8), 8);
    let short = plan(&[("FERROLM_ROWS_SPLIT_KEYS", "64")]);
    assert_eq!(short.rows_splits(300, 8), 5);
    assert_eq!(short.rows_splits(300, 2), 2);
    assert!(err(&[("FERROLM_ROWS_SPLIT_KEYS", "8")]).contains("FERROLM_ROWS_SPLIT_KEYS"));
}

#[test]
fn kv_block_is_a_power_of_two_from_the_switch() {
    assert_eq!(plan(&[]).kv_block(4096), KV_BLOCK);
    assert_eq!(plan(&[("FERROLM_KV_BLOCK", "16")]).kv_block(4096), 16);
    assert_eq!(
        plan(&[("FERROLM_KV_BLOCK", "65536")]).kv_block(70_000),
        65536
    );
    // Never past the context rounded up: one block a sequence.
    assert_eq!(plan(&[("FERROLM_KV_BLOCK", "65536")]).kv_block(300), 512);
    assert_eq!(plan(&[]).kv_block(5), 16);
    assert!(plan(&[]).kv_pool());
    assert!(!plan(&[("FERROLM_KV_POOL", "0")]).kv_pool());
    assert!(!plan(&[]).rope_store());
    assert!(plan(&[("FERROLM_ROPE_STORE", "1")]).rope_store());
    // The walk that rotates its own heads: on unless switched off, and never unfused.
    assert!(plan(&[]).attn_rope());
    assert!(!plan(&[("FERROLM_ATTN_ROPE", "0")]).attn_rope());
    assert!(!plan(&[("FERROLM_CUDA_FUSE", "0")]).attn_rope());
    // The rotating walk's head split: on unless switched off.
    assert!(plan(&[]).attn_head_split());
    assert!(!plan(&[("FERROLM_ATTN_HEAD_SPLIT", "0")]).attn_head_split());
    // The whole-row walk's bulk copies: on unless switched off, and sm_90 only.
    assert!(plan(&[]).attn_bulk());
    assert!(!plan(&[("FERROLM_ATTN_BULK", "0")]).attn_bulk());
    let ampere = DeviceFacts {
        cc: (8, 0),
        ..h200()
    };
    let bulk = parse(&[("FERROLM_ATTN_BULK", "1")]).unwrap();
    assert!(!Plan::new(bulk, ampere).attn_bulk());
    // Whole-row norms on the group block: on unless switched off, and only with the walk's.
    assert!(plan(&[]).attn_rope_rows());
    assert!(!plan(&[("FERROLM_ATTN_ROPE_ROWS", "0")]).attn_rope_rows());
    assert!(!plan(&[("FERROLM_ATTN_ROPE", "0")]).attn_rope_rows());
    let unfused = [("FERROLM_ROPE_STORE", "1"), ("FERROLM_CUDA_FUSE", "0")];
    assert!(!plan(&unfused).rope_store());
    assert!(plan(&[]).qkv_one(1));
    assert!(!plan(&[("FERROLM_QKV_ONE", "0")]).qkv_one(1));
    assert!(!plan(&[]).qkv_one(2));
    assert!(!plan(&[("FERROLM_CUDA_FUSE", "0")]).qkv_one(1));
    // The norm joins that launch only where asked, and only where the launch is taken.
    assert!(!plan(&[]).norm_in_qkv(1));
    let on = [("FERROLM_NORM_IN_QKV", "1")];
    assert!(plan(&on).norm_in_qkv(1));
    assert!(!plan(&on).norm_in_qkv(2));
    assert!(!plan(&[on[0], ("FERROLM_QKV_ONE", "0")]).norm_in_qkv(1));
    assert!(!plan(&[on[0], ("FERROLM_CUDA_FUSE", "0")]).norm_in_qkv(1));
    assert!(!plan(&[]).norm_in_glu(1));
    let on = [("FERROLM_NORM_IN_GLU", "1")];
    assert!(plan(&on).norm_in_glu(1));
    assert!(!plan(&on).norm_in_glu(2));
    assert!(!plan(&[on[0], ("FERROLM_CUDA_FUSE", "0")]).norm_in_glu(1));
    assert!(plan(&[]).pinned_logits());
    assert!(!plan(&[("FERROLM_PINNED_LOGITS", "0")]).pinned_logits());
    assert!(plan(&[]).greedy_on_device());
    assert!(!plan(&[("FERROLM_GREEDY_ON_DEVICE", "0")]).greedy_on_device());
    assert!(err(&[("FERROLM_GREEDY_ON_DEVICE", "2")]).contains("FERROLM_GREEDY_ON_DEVICE"));
    assert!(err(&[("FERROLM_PINNED_LOGITS", "yes")]).contains("FERROLM_PINNED_LOGITS"));
    for bad in ["8", "48", "many"] {
        assert!(err(&[("FERROLM_KV_BLOCK", bad)]).contains("FERROLM_KV_BLOCK"));
    }
}
