//! Whole-model parity with llama.cpp on the tiny random models in `../shared/golden`.

mod common;

use common::golden;
use ferrolm_engine::{KvType, Logits, Session};
use ferrolm_gguf::GgufFile;
use serde_json::Value;

struct Case {
    /// prompt followed by the greedy continuation, teacher-forced as one sequence
    tokens: Vec<u32>,
    /// llama.cpp's logits for each position of `tokens` that it has
    expected: Vec<Vec<f32>>,
}

fn cases(stem: &str) -> (usize, Vec<Case>) {
    let text = std::fs::read_to_string(golden(&format!("{stem}.json"))).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    let floats = |rows: &Value| -> Vec<Vec<f32>> {
        rows.as_array()
            .unwrap()
            .iter()
            .map(|r| {
                r.as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_f64().unwrap() as f32)
                    .collect()
            })
            .collect()
    };
    let ids = |a: &Value| -> Vec<u32> {
        a.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect()
    };
    let cases = v["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let prompt = ids(&c["prompt"]);
            let greedy = ids(&c["greedy"]);
            let mut expected = floats(&c["prompt_logits"]);
            // greedy_logits[0] repeats the prompt's last row; the rest follow greedy tokens.
            expected.extend(floats(&c["greedy_logits"]).into_iter().skip(1));
            let mut tokens = prompt;
            tokens.extend_from_slice(&greedy[..greedy.len() - 1]);
            Case { tokens, expected }
        })
        .collect();
    (v["n_vocab"].as_u64().unwrap() as usize, cases)
}

struct Stats {
    max_abs: f32,
    p95_abs: f32,
    top1_agree: usize,
    top1_total: usize,
    /// Disagreements where llama.cpp's top-1/top-2 margin was at least 0.05.
    clear_misses: usize,
}

fn argmax(x: &[f32]) -> usize {
    (0..x.len()).max_by(|&a, &b| x[a].total_cmp(&x[b])).unwrap()
}

/// F32 goldens come from llama.cpp's precise configuration (F32 KV cache, no flash attention);
/// the quantized ones from its defaults (F16 cache, flash attention), and we mirror each.
fn compare(stem: &str) -> Stats {
    let kv = common::kv_type(if stem.ends_with("f32") {
        KvType::F32
    } else {
        KvType::F16
    });
    let file = GgufFile::open(golden(&format!("{stem}.gguf"))).unwrap();
    let model = common::load(&file);
    let (n_vocab, cases) = cases(stem);
    assert_eq!(model.cfg.n_vocab, n_vocab);
    let mut diffs = Vec::new();
    let (mut agree, mut total, mut clear_misses) = (0, 0, 0);
    for case in &cases {
        let mut s = Session::with_kv_type(&model, 256, kv);
        let ours = s.eval(&case.tokens, Logits::All).unwrap();
        for (row, want) in ours.chunks_exact(n_vocab).zip(&case.expected) {
            diffs.extend(row.iter().zip(want).map(|(a, b)| (a - b).abs()));
            let (a, b) = (argmax(row), argmax(want));
            total += 1;
            if a == b {
                agree += 1;
            } else {
                let mut sorted = want.clone();
                sorted.sort_by(|x, y| y.total_cmp(x));
                if sorted[0] - sorted[1] >= 0.05 {
                    clear_misses += 1;
                }
            }
        }
    }
    diffs.sort_by(f32::total_cmp);
    let stats = Stats {
        max_abs: *diffs.last().unwrap(),
        p95_abs: diffs[diffs.len() * 95 / 100],
        top1_agree: agree,
        top1_total: total,
        clear_misses,
    };
    println!(
        "{stem}: max |Δ| {:.3e}, p95 |Δ| {:.3e}, top-1 {}/{} ({} clear misses)",
        stats.max_abs, stats.p95_abs, stats.top1_agree, stats.top1_total, stats.clear_misses
    );
    stats
}

fn check_f32(stem: &str) {
    let s = compare(stem);
    assert!(s.max_abs <= 2e-2, "{stem}: max |Δlogit| {}", s.max_abs);
    assert_eq!(
        s.clear_misses, 0,
        "{stem}: top-1 differs where the margin is clear"
    );
}

fn check_quantized(stem: &str) {
    let s = compare(stem);
    assert!(
        s.top1_agree * 100 >= s.top1_total * 97,
        "{stem}: top-1 agreement {}/{}",
        s.top1_agree,
        s.top1_total
    );
    assert!(s.p95_abs <= 0.1, "{stem}: p95 |Δlogit| {}", s.p95_abs);
}

#[test]
fn llama_f32() {
    check_f32("tiny-llama-f32");
}
#[test]
fn qwen3_f32() {
    check_f32("tiny-qwen3-f32");
}
#[test]
fn olmoe_f32() {
    check_f32("tiny-olmoe-f32");
}
#[test]
fn qwen3moe_f32() {
    check_f32("tiny-qwen3moe-f32");
}
#[test]
fn llama_q8_0() {
    check_quantized("tiny-llama-q8_0");
}
#[test]
fn qwen3_q8_0() {
    check_quantized("tiny-qwen3-q8_0");
}
#[test]
fn olmoe_q8_0() {
    check_quantized("tiny-olmoe-q8_0");
}
#[test]
fn qwen3moe_q8_0() {
    check_quantized("tiny-qwen3moe-q8_0");
}
#[test]
fn llama_q4_k_m() {
    check_quantized("tiny-llama-q4_k_m");
}
#[test]
fn qwen3_q4_k_m() {
    check_quantized("tiny-qwen3-q4_k_m");
}
#[test]
fn olmoe_q4_k_m() {
    check_quantized("tiny-olmoe-q4_k_m");
}
#[test]
fn qwen3moe_q4_k_m() {
    check_quantized("tiny-qwen3moe-q4_k_m");
}
