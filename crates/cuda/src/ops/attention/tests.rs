//! The attention launchers' tables against the kernel sources, without a GPU.

use super::*;

#[test]
fn f32ref_block_matches_the_kernel() {
    let src = ATTENTION_PREFILL.source;
    assert!(src.contains(&format!("#define F32REF_WARPS {F32REF_WARPS}")));
}

/// Every kernel the launcher loads is instantiated in attention.cu, attention_prefill.cu
/// and flash_attn.cu, at every head size its table lists, and no block-cache kernel at a
/// size blocks cannot hold.
#[test]
fn every_head_size_has_its_kernels() {
    let (src, flash) = (ATTENTION.source, FLASH_ATTN.source);
    for q in KvFormat::ALL {
        assert!(src.contains(&format!("kv_store_{}(", q.name())), "{q:?}");
    }
    for d in ATTN_HEAD_DIMS {
        assert!(src.contains(&format!("\nATTN_GROUP_INSTANCES({d})")), "{d}");
        let mma = format!("\nFLASH_INSTANCE({d})");
        assert_eq!(flash.contains(&mma), MMA_HEAD_DIMS.contains(&d), "{d}");
    }
    // Decode and prefill instance each head size and format with macros of the same names:
    // the block formats at the sizes of whole blocks, f32 at every size (80 on its own).
    for src in [ATTENTION.source, ATTENTION_PREFILL.source] {
        for d in ATTN_HEAD_DIMS {
            assert!(src.contains(&format!("\nATTN_INSTANCES({d})\n")), "{d}");
            let typed = format!("ATTN_TYPED_INSTANCES(NAME, F, {d})");
            assert_eq!(src.contains(&typed), KvFormat::Q8_0.holds(d), "{d}");
        }
        for (q, f) in [
            (KvFormat::Q8_0, "KvBlocks<GGML_TYPE_Q8_0>"),
            (KvFormat::Q4_0, "KvBlocks<GGML_TYPE_Q4_0>"),
            (KvFormat::F32, "KvF32"),
        ] {
            let heads = format!("\nATTN_TYPED_HEADS({}, {f})\n", q.name());
            assert!(src.contains(&heads), "{q:?}");
        }
        assert!(src.contains("\nATTN_TYPED_INSTANCES(f32, KvF32, 80)\n"));
    }
    // The CPU-order prefill over f32 caches, in the same macro as its f16 instance.
    assert!(ATTENTION_PREFILL
        .source
        .contains("void attn_prefill_f32ref_f32_d##D("));
    assert!(!KvFormat::Q4_0.holds(80) && KvFormat::F16.holds(80));
    assert!(ATTN_HEAD_DIMS.iter().all(|&d| KvFormat::F32.holds(d)));
    assert_eq!(KvFormat::F32.row_bytes(80), 320);
    assert_eq!(
        KvFormat::Q8_0.row_bytes(64) * 64,
        KvFormat::F16.row_bytes(64) * 34
    );
}

#[test]
fn head_dims() {
    assert_eq!(dim_index(32).unwrap(), 0);
    assert_eq!(dim_index(80).unwrap(), 2);
    assert_eq!(dim_index(192).unwrap(), 5);
    assert_eq!(dim_index(256).unwrap(), 6);
    assert!(dim_index(48).is_err());
    assert!(dim_index(512).is_err());
    // 2 stages of K and V tiles, 64 keys of (D + 8) halves: the kernel's layout.
    assert_eq!(flash_smem_bytes(64), 36_864);
    assert_eq!(flash_smem_bytes(80), 45_056);
    assert_eq!(flash_smem_bytes(128), 69_632);
    // The grouped decode at 256 and 8 heads a group, two stages: 73 KiB, within the 99 KiB
    // of an sm_86/sm_89 block (the most of any size); three stages at 128.
    assert_eq!(group_smem_bytes(256, 8), 74_752);
    assert_eq!(group_smem_bytes(128, 8), 54_272);
    assert_eq!(group_smem_bytes(192, 8), 56_320);
    let most = ATTN_HEAD_DIMS
        .map(|d| group_smem_bytes(d, 8))
        .into_iter()
        .max();
    assert!(most.unwrap() <= 99 * 1024);
    // On the tensor cores: 77 KiB at 256 and 8 heads a group (two stages), within it too.
    assert_eq!(group_tc_smem_bytes(256, 8), 77_616);
    let most_tc = ATTN_TC_DIMS
        .iter()
        .flat_map(|&d| ATTN_TC_GROUPS.map(|g| group_tc_smem_bytes(d, g)))
        .max();
    assert!(most_tc.unwrap() <= 99 * 1024);
}
