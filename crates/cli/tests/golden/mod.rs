//! Logits goldens through the binary: llama.cpp's logits (a JSON golden as
//! `../shared/golden/README.md` describes) against `ferrolm logits --all` teacher-forced over
//! each case's prompt and greedy tokens, with the bars of `crates/engine/tests/golden_tiny.rs`:
//! F32 files max |Δlogit| ≤ 2e-2 and no top-1 miss where llama.cpp's margin is ≥ 0.05;
//! quantized files top-1 agreement ≥ 97% and p95 |Δlogit| ≤ 0.1.

#![allow(dead_code)]

use serde_json::Value;
use std::path::Path;
use std::process::Command;

fn argmax(x: &[f64]) -> usize {
    (0..x.len()).max_by(|&a, &b| x[a].total_cmp(&x[b])).unwrap()
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

pub struct Stats {
    pub max_abs: f64,
    pub p95_abs: f64,
    pub top1_agree: usize,
    pub top1_total: usize,
    /// Disagreements where llama.cpp's top-1/top-2 margin was at least 0.05.
    pub clear_misses: usize,
}

/// Runs every case of the golden `json` on the CPU with `flags` added (`-ctk q8_0`, say); the
/// model is the file the golden names, in `model_dir`.
pub fn compare(json: &Path, model_dir: &Path, flags: &[&str]) -> Stats {
    let g: Value = serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
    let model = model_dir.join(g["model"].as_str().unwrap());
    let model = model.to_str().unwrap();
    let (mut diffs, mut agree, mut total, mut clear_misses) = (Vec::new(), 0, 0, 0);
    for case in g["cases"].as_array().unwrap() {
        let greedy = case["greedy"].as_array().unwrap();
        let tokens: Vec<String> = case["prompt"]
            .as_array()
            .unwrap()
            .iter()
            .chain(&greedy[..greedy.len() - 1])
            .map(Value::to_string)
            .collect();
        // greedy_logits[0] repeats the prompt's last row; the rest follow greedy tokens.
        let mut want: Vec<Vec<f64>> = case["prompt_logits"]
            .as_array()
            .unwrap()
            .iter()
            .map(floats)
            .collect();
        want.extend(
            case["greedy_logits"].as_array().unwrap()[1..]
                .iter()
                .map(floats),
        );
        let tokens = tokens.join(" ");
        let mut args = vec![
            "logits",
            "-m",
            model,
            "--backend",
            "cpu",
            "--all",
            "-c",
            "256",
            "--tokens",
            &tokens,
        ];
        args.extend_from_slice(flags);
        let out = Command::new(env!("CARGO_BIN_EXE_ferrolm"))
            .args(&args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let ours: Value = serde_json::from_slice(&out.stdout).unwrap();
        let rows: Vec<Vec<f64>> = ours["logits"]
            .as_array()
            .unwrap()
            .iter()
            .map(floats)
            .collect();
        assert_eq!(rows.len(), want.len());
        for (row, want) in rows.iter().zip(&want) {
            diffs.extend(row.iter().zip(want).map(|(a, b)| (a - b).abs()));
            total += 1;
            if argmax(row) == argmax(want) {
                agree += 1;
            } else {
                let mut sorted = want.clone();
                sorted.sort_by(|x, y| y.total_cmp(x));
                clear_misses += usize::from(sorted[0] - sorted[1] >= 0.05);
            }
        }
    }
    diffs.sort_by(f64::total_cmp);
    let stats = Stats {
        max_abs: *diffs.last().unwrap(),
        p95_abs: diffs[diffs.len() * 95 / 100],
        top1_agree: agree,
        top1_total: total,
        clear_misses,
    };
    println!(
        "{} {}: max |Δ| {:.3e}, p95 |Δ| {:.3e}, top-1 {agree}/{total} ({clear_misses} clear misses)",
        json.file_name().unwrap().to_string_lossy(),
        flags.join(" "),
        stats.max_abs,
        stats.p95_abs,
    );
    stats
}

/// The bars of an F32 golden (llama.cpp's precise configuration: mirror it with an f32 cache).
pub fn check_f32(s: &Stats, what: &str) {
    assert!(s.max_abs <= 2e-2, "{what}: max |Δlogit| {}", s.max_abs);
    assert_eq!(
        s.clear_misses, 0,
        "{what}: top-1 differs where the margin is clear"
    );
}

/// The bars of a quantized golden.
pub fn check_quantized(s: &Stats, what: &str) {
    assert!(
        s.top1_agree * 100 >= s.top1_total * 97,
        "{what}: top-1 {}/{}",
        s.top1_agree,
        s.top1_total
    );
    assert!(s.p95_abs <= 0.1, "{what}: p95 |Δlogit| {}", s.p95_abs);
}
