//! deepseek2 on the CPU against llama.cpp: a tiny random model with everything DeepSeek-V2-Lite
//! has (multi-head latent attention with a shared RoPE key part and YaRN with DeepSeek's
//! mscale, a leading dense block, then MoE blocks with shared experts and a scale on the expert
//! weights), its recipe and goldens made by `tools/goldens/make_deepseek2_goldens.py` into
//! `goldens/deepseek2` (the models are regenerated from the recipe, byte for byte the files
//! llama.cpp ran); the bars are the tiny goldens' (`golden`).

mod golden;

use ferrolm_gguf::Value;
use std::path::{Path, PathBuf};

fn json(ty: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!(
        "../../goldens/deepseek2/tiny-deepseek2-{ty}.json.gz"
    ))
}

/// The F32 file against llama.cpp's precise configuration (no flash attention, F32 cache).
#[test]
fn tiny_deepseek2_f32_matches_llama_cpp() {
    let s = golden::compare(&json("f32"), &["--cache-type", "f32"]);
    golden::check_f32(&s, "tiny-deepseek2-f32");
}

/// llama.cpp's Q8_0 and Q4_K_M files against its defaults (flash attention, F16 cache).
#[test]
fn tiny_deepseek2_quantized_match_llama_cpp() {
    for ty in ["q8_0", "q4_k_m"] {
        let s = golden::compare(&json(ty), &[]);
        golden::check_quantized(&s, &format!("tiny-deepseek2-{ty}"));
    }
}

/// Queries through the low rank (`attn_q_a`, its norm, `attn_q_b`: the full DeepSeek-V2's
/// form) against llama.cpp, precise and with its defaults.
#[test]
fn tiny_deepseek2_q_lora_matches_llama_cpp() {
    let s = golden::compare(&json("qlora-f32"), &["--cache-type", "f32"]);
    golden::check_f32(&s, "tiny-deepseek2-qlora-f32");
    let s = golden::compare(&json("qlora-q8_0"), &[]);
    golden::check_quantized(&s, "tiny-deepseek2-qlora-q8_0");
}

/// A copy of the golden F32 model in `tmp` as `name`, without the key `drop` and with the keys
/// of `set`.
fn variant(tmp: &Path, name: &str, drop: &str, set: &[(&str, Value)]) -> PathBuf {
    golden::variant(&json("f32"), tmp, name, drop, set, &|_| None)
}

/// The golden can fail: the same model without DeepSeek's mscale (no log multiplier), with
/// the expert weights unscaled, or with no leading dense block read (block 0 then needs
/// expert tensors it lacks, so that one is refused instead) misses the F32 bars by far, so an
/// engine that ignored any of them would too.
#[test]
fn without_mscale_or_weights_scale_the_golden_fails() {
    let tmp = tempfile::tempdir().unwrap();
    let no_mscale = variant(
        tmp.path(),
        "no-mscale.gguf",
        "deepseek2.rope.scaling.yarn_log_multiplier",
        &[],
    );
    let unscaled = variant(
        tmp.path(),
        "unscaled.gguf",
        "",
        &[("deepseek2.expert_weights_scale", Value::F32(1.0))],
    );
    for (what, model) in [
        ("without mscale", no_mscale),
        ("unscaled experts", unscaled),
    ] {
        let s = golden::compare_on(&json("f32"), &model, &["--cache-type", "f32"]);
        assert!(s.check(true).is_err(), "{what}: {s} still meets the bars");
    }
}

/// What ferrolm does not run is refused with its name: grouped expert routing, sigmoid gating
/// (DeepSeek-V3's), and the split attn_k_b/attn_v_b form that newer converters mark with
/// `attention.key_length_mla`.
#[test]
fn unsupported_deepseek2_features_are_named() {
    let tmp = tempfile::tempdir().unwrap();
    let cases = [
        ("deepseek2.expert_group_count", Value::U32(4)),
        ("deepseek2.expert_gating_func", Value::U32(2)),
        ("deepseek2.attention.key_length_mla", Value::U32(96)),
    ];
    for (i, (key, value)) in cases.into_iter().enumerate() {
        let path = variant(tmp.path(), &format!("v{i}.gguf"), "", &[(key, value)]);
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_ferrolm"))
            .args(["logits", "-m", path.to_str().unwrap(), "--tokens", "1 2"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{key}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(err.contains(key), "{key}: {err}");
    }
}
