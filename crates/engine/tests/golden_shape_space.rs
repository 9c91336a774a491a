//! Parity with llama.cpp across the shapes real files have: every golden in
//! `goldens/shape-space` (tiny random models of widths that are not powers of two, head
//! sizes 64/80/128, GQA 1-8, RoPE bases 1e4-1e6, tied and untied outputs, 6-12 experts with
//! top-2 to top-5, odd vocab sizes; each as llama.cpp quantized it to Q8_0 and Q4_K_M, made by
//! `tools/goldens/shape_space.py`) meets the bars of the tiny goldens (`common::logits`). The
//! models are regenerated from the recipes beside the goldens, and must be byte for byte the
//! files llama.cpp ran (`ferrolm_testkit::model_for`).
//!
//! A row that misses the 97% top-1 bar for a cause that is measured and named goes on
//! [`KNOWN_GAPS`] (see docs/parity.md), held to a looser bar so that it still fails on a
//! regression; the test says when one starts to meet the full bar.
//!
//! `FERROLM_TEST_BACKEND=cuda` runs them on GPU 0 (see `common`).

mod common;

use common::logits;
use std::path::{Path, PathBuf};

/// Goldens that miss the bar, why (found with `tools/parity/llama_dump.py`: the first tensor
/// that is not bit-identical with llama.cpp's), and the top-1 agreement (percent) they keep.
/// Empty since the goldens were regenerated from recipes: the two causes docs/parity.md
/// names (ggml's tiled flash attention past 64 rows; Q5_1's f16-rounded activation sum) are
/// still there, but with these weights they flip no top-1 past the bar.
const KNOWN_GAPS: &[(&str, &str, usize)] = &[];

fn goldens() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../goldens/shape-space");
    let mut out: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{dir:?}: {e}"))
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(".json.gz"))
        .collect();
    out.sort();
    out
}

/// Every golden, each judged on its own; the failures are listed together.
fn check_all(type_suffix: &str) {
    let all: Vec<PathBuf> = goldens()
        .into_iter()
        .filter(|p| {
            p.to_string_lossy()
                .ends_with(&format!("-{type_suffix}.json.gz"))
        })
        .collect();
    // A row per architecture at least: an empty or half-copied folder must not pass.
    assert!(all.len() >= 5, "only {} {type_suffix} goldens", all.len());
    let mut failed = Vec::new();
    for json in &all {
        let name = json.file_name().unwrap().to_string_lossy();
        let stem = name.trim_end_matches(".json.gz");
        let s = logits::compare(json, false);
        println!("{stem}: {s}");
        let verdict = s.check(false);
        match KNOWN_GAPS.iter().find(|g| g.0 == stem) {
            None => {
                if let Err(e) = verdict {
                    failed.push(format!("{stem}: {e}"));
                }
            }
            Some((_, why, floor)) => {
                println!("  known gap ({why})");
                if verdict.is_ok() {
                    println!("  now meets the full bar: take it off KNOWN_GAPS");
                } else if s.top1_agree * 100 < s.top1_total * floor || s.p95_abs > 0.1 {
                    failed.push(format!("{stem}: below its known-gap bar of {floor}%: {s}"));
                }
            }
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

#[test]
fn q8_0_shapes_match_llama_cpp() {
    check_all("q8_0");
}

#[test]
fn q4_k_m_shapes_match_llama_cpp() {
    check_all("q4_k_m");
}
