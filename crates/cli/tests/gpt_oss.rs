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
/// F32 cache): the F32 bars.
#[test]
fn tiny_gpt_oss_f32_matches_llama_cpp() {
    let json = dir().join("tiny-gpt-oss-mxfp4-f32.json");
    let s = golden::compare(&json, &dir(), &["--cache-type", "f32"]);
    golden::check_f32(&s, "tiny-gpt-oss-mxfp4-f32");
}

/// llama.cpp's `MXFP4_MOE` file type (experts MXFP4, other matrices Q8_0), as the released
/// files are, against llama.cpp's defaults (flash attention, F16 cache).
#[test]
fn tiny_gpt_oss_q8_0_matches_llama_cpp() {
    let json = dir().join("tiny-gpt-oss-mxfp4-q8_0.json");
    let s = golden::compare(&json, &dir(), &[]);
    golden::check_quantized(&s, "tiny-gpt-oss-mxfp4-q8_0");
}
