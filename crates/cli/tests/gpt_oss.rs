//! gpt-oss on the CPU against llama.cpp: tiny random models with everything a released file
//! has (MXFP4 experts with biases, attention sinks, a sliding window on block 0, YaRN, biased
//! projections), their recipe and goldens made by `tools/goldens/make_gpt_oss_goldens.py` into
//! `goldens/gpt-oss` (the models are regenerated from the recipe, byte for byte the files
//! llama.cpp ran); the bars are the tiny goldens' (`golden`).

mod golden;

use ferrolm_gguf::{TensorInfo, Value};
use std::path::{Path, PathBuf};

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../goldens/gpt-oss")
}

/// MXFP4 experts, the rest F32, against llama.cpp's precise configuration (no flash attention,
/// F32 cache). The experts' activations are quantized to Q8_0, so this is a quantized file and
/// takes the quantized bars; but it is computed as llama.cpp computes it (the MXFP4 dots in its
/// order, the sinks and the window in its softmax), so the typical logit is the golden's to its
/// 6 digits: p95 |Δ| ≤ 1e-4 and no clear top-1 miss. (A few positions differ by up to ~0.03
/// where an activation lands on the other side of a Q8_0 rounding boundary after f32 matmuls
/// that differ in the last bit; one position's keys carry that to the rest of its case.)
#[test]
fn tiny_gpt_oss_f32_matches_llama_cpp() {
    let s = golden::compare(&f32_json(), &["--cache-type", "f32"]);
    golden::check_quantized(&s, "tiny-gpt-oss-mxfp4-f32");
    assert!(s.p95_abs <= 1e-4, "p95 |Δlogit| {}", s.p95_abs);
    assert_eq!(s.clear_misses, 0, "top-1 differs where the margin is clear");
}

/// llama.cpp's `MXFP4_MOE` file type (experts MXFP4, other matrices Q8_0), as the released
/// files are, against llama.cpp's defaults (flash attention, F16 cache).
#[test]
fn tiny_gpt_oss_q8_0_matches_llama_cpp() {
    let json = dir().join("tiny-gpt-oss-mxfp4-q8_0.json.gz");
    let s = golden::compare(&json, &[]);
    golden::check_quantized(&s, "tiny-gpt-oss-mxfp4-q8_0");
}

fn f32_json() -> PathBuf {
    dir().join("tiny-gpt-oss-mxfp4-f32.json.gz")
}

/// A copy of the golden F32 model in `tmp` as `name`, without the key `drop`, with the keys
/// of `set`, and with each tensor's bytes as `data` gives them (`None`: unchanged).
fn variant(
    tmp: &Path,
    name: &str,
    drop: &str,
    set: &[(&str, Value)],
    data: &dyn Fn(&TensorInfo) -> Option<Vec<u8>>,
) -> PathBuf {
    golden::variant(&f32_json(), tmp, name, drop, set, data)
}

/// The goldens can fail: the same model without its sinks (each -1e30, so it weighs nothing in
/// the softmax) or without its window (one wider than every case) misses the bars by far, so
/// an engine that ignored either would too.
#[test]
fn without_sinks_or_window_the_golden_fails() {
    let tmp = tempfile::tempdir().unwrap();
    let no_sinks = variant(tmp.path(), "no-sinks.gguf", "", &[], &|t| {
        t.name.ends_with("attn_sinks.weight").then(|| {
            let n = t.n_elements() as usize;
            (-1e30f32).to_le_bytes().repeat(n)
        })
    });
    let window = "gpt-oss.attention.sliding_window";
    let no_window = variant(
        tmp.path(),
        "no-window.gguf",
        "",
        &[(window, Value::U32(4096))],
        &|_| None,
    );
    for (what, model) in [
        ("without sinks", no_sinks),
        ("without the window", no_window),
    ] {
        let s = golden::compare_on(&f32_json(), &model, &["--cache-type", "f32"]);
        assert!(s.check(false).is_err(), "{what}: {s} still meets the bars");
    }
}

/// A file without the sliding window (which llama.cpp requires for gpt-oss) is refused with
/// the key's name, not run with full attention everywhere.
#[test]
fn missing_sliding_window_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let window = "gpt-oss.attention.sliding_window";
    let path = variant(tmp.path(), "no-window.gguf", window, &[], &|_| None);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ferrolm"))
        .args(["logits", "-m", path.to_str().unwrap(), "--tokens", "1 2"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains(window), "{err}");
}
