//! gemma3 on the CPU against llama.cpp: a tiny random model with everything a released Gemma 3
//! text model has (embeddings scaled by sqrt(n_embd), q/k norms, norms after attention and FFN,
//! a GELU-gated FFN, five sliding blocks per global one with their own RoPE base, linear RoPE
//! scaling on the global blocks, tied output), its recipe and goldens made by
//! `tools/goldens/make_gemma3_goldens.py` into `goldens/gemma3` (the models are regenerated from
//! the recipe, byte for byte the files llama.cpp ran); the bars are the tiny goldens' (`golden`).

mod golden;

use ferrolm_gguf::Value;
use std::path::{Path, PathBuf};

fn json(ty: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join(format!("../../goldens/gemma3/tiny-gemma3-{ty}.json.gz"))
}

/// The F32 file against llama.cpp's precise configuration (no flash attention, F32 cache).
#[test]
fn tiny_gemma3_f32_matches_llama_cpp() {
    let s = golden::compare(&json("f32"), &["--cache-type", "f32"]);
    golden::check_f32(&s, "tiny-gemma3-f32");
}

/// llama.cpp's Q8_0 and Q4_K_M files against its defaults (flash attention, F16 cache).
#[test]
fn tiny_gemma3_quantized_match_llama_cpp() {
    for ty in ["q8_0", "q4_k_m"] {
        let s = golden::compare(&json(ty), &[]);
        golden::check_quantized(&s, &format!("tiny-gemma3-{ty}"));
    }
}

/// A copy of the golden F32 model in `tmp` as `name`, without the key `drop` and with the keys
/// of `set`.
fn variant(tmp: &Path, name: &str, drop: &str, set: &[(&str, Value)]) -> PathBuf {
    golden::variant(&json("f32"), tmp, name, drop, set, &|_| None)
}

/// The golden can fail: the same model with a window wider than every case (no block slides)
/// or with the global blocks' RoPE unscaled misses the F32 bars by far, so an engine that
/// ignored either would too.
#[test]
fn without_window_or_scaling_the_golden_fails() {
    let tmp = tempfile::tempdir().unwrap();
    let no_window = variant(
        tmp.path(),
        "no-window.gguf",
        "",
        &[("gemma3.attention.sliding_window", Value::U32(4096))],
    );
    let unscaled = variant(
        tmp.path(),
        "unscaled.gguf",
        "",
        &[("gemma3.rope.scaling.factor", Value::F32(1.0))],
    );
    for (what, model) in [("without the window", no_window), ("unscaled", unscaled)] {
        let s = golden::compare_on(&json("f32"), &model, &["--cache-type", "f32"]);
        assert!(s.check(true).is_err(), "{what}: {s} still meets the bars");
    }
}

/// A file without the sliding window is refused with the key's name, not run with full
/// attention everywhere; so is a key ferrolm does not read (gemma2's logit softcapping).
#[test]
fn missing_window_and_unknown_keys_are_named() {
    let tmp = tempfile::tempdir().unwrap();
    let window = "gemma3.attention.sliding_window";
    let softcap = "gemma3.final_logit_softcapping";
    let cases = [
        (variant(tmp.path(), "no-window.gguf", window, &[]), window),
        (
            variant(
                tmp.path(),
                "softcap.gguf",
                "",
                &[(softcap, Value::F32(30.0))],
            ),
            softcap,
        ),
    ];
    for (path, key) in cases {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_ferrolm"))
            .args(["logits", "-m", path.to_str().unwrap(), "--tokens", "1 2"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(err.contains(key), "{err}");
    }
}
