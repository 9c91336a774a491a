//! gpt-oss on the CPU against llama.cpp: tiny random models with everything a released file
//! has (MXFP4 experts with biases, attention sinks, a sliding window on block 0, YaRN, biased
//! projections), made with their goldens by `tools/goldens/make_gpt_oss_goldens.py` into
//! `goldens/gpt-oss`; the bars are the tiny goldens' (`golden`).

mod golden;

use std::path::PathBuf;

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
    let json = dir().join("tiny-gpt-oss-mxfp4-f32.json");
    let s = golden::compare(&json, &dir(), &["--cache-type", "f32"]);
    golden::check_quantized(&s, "tiny-gpt-oss-mxfp4-f32");
    assert!(s.p95_abs <= 1e-4, "p95 |Δlogit| {}", s.p95_abs);
    assert_eq!(s.clear_misses, 0, "top-1 differs where the margin is clear");
}

/// llama.cpp's `MXFP4_MOE` file type (experts MXFP4, other matrices Q8_0), as the released
/// files are, against llama.cpp's defaults (flash attention, F16 cache).
#[test]
fn tiny_gpt_oss_q8_0_matches_llama_cpp() {
    let json = dir().join("tiny-gpt-oss-mxfp4-q8_0.json");
    let s = golden::compare(&json, &dir(), &[]);
    golden::check_quantized(&s, "tiny-gpt-oss-mxfp4-q8_0");
}

/// A file without the sliding window (which llama.cpp requires for gpt-oss) is refused with
/// the key's name, not run with full attention everywhere.
#[test]
fn missing_sliding_window_is_named() {
    use ferrolm_gguf::{GgufFile, GgufWriter};
    let src = GgufFile::open(dir().join("tiny-gpt-oss-mxfp4-f32.gguf")).unwrap();
    let mut w = GgufWriter::new();
    for (k, v) in src.metadata() {
        if k != "gpt-oss.attention.sliding_window" {
            w.set(k, v.clone());
        }
    }
    for t in src.tensors() {
        w.add_tensor(&t.name, t.ty, &t.dims).unwrap();
    }
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("no-window.gguf");
    let mut out = w.create(&path).unwrap();
    for t in src.tensors() {
        out.write_tensor(src.tensor_data(t)).unwrap();
    }
    out.finish().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ferrolm"))
        .args(["logits", "-m", path.to_str().unwrap(), "--tokens", "1 2"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("gpt-oss.attention.sliding_window"), "{err}");
}
