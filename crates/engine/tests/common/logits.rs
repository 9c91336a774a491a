//! Whole-model logits against a llama.cpp golden (the JSON shape of `../shared/golden`'s tiny
//! goldens), and the bars every such golden meets: F32 files max |Δlogit| ≤ 2e-2 and no top-1
//! miss where llama.cpp's top-1/top-2 margin is ≥ 0.05; quantized files top-1 agreement ≥ 97%
//! and p95 |Δlogit| ≤ 0.1.

use ferrolm_engine::{KvType, Logits, Session};
use ferrolm_gguf::GgufFile;
use serde_json::Value;
use std::path::Path;

struct Case {
    /// prompt followed by the greedy continuation, teacher-forced as one sequence
    tokens: Vec<u32>,
    /// llama.cpp's logits for each position of `tokens` that it has
    expected: Vec<Vec<f32>>,
}

/// The golden at `json`: (model file name, n_vocab, cases).
fn cases(json: &Path) -> (String, usize, Vec<Case>) {
    let text = std::fs::read_to_string(json).unwrap_or_else(|e| panic!("{json:?}: {e}"));
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
    let model = v["model"].as_str().unwrap().to_owned();
    (model, v["n_vocab"].as_u64().unwrap() as usize, cases)
}

pub struct Stats {
    pub max_abs: f32,
    pub p95_abs: f32,
    pub top1_agree: usize,
    pub top1_total: usize,
    /// Disagreements where llama.cpp's top-1/top-2 margin was at least 0.05.
    pub clear_misses: usize,
}

impl Stats {
    /// The bars, or why they are not met.
    pub fn check(&self, f32_model: bool) -> Result<(), String> {
        if f32_model {
            if self.max_abs > 2e-2 {
                return Err(format!("max |Δlogit| {}", self.max_abs));
            }
            if self.clear_misses > 0 {
                return Err(format!(
                    "{} top-1 misses with a clear margin",
                    self.clear_misses
                ));
            }
        } else {
            if self.top1_agree * 100 < self.top1_total * 97 {
                return Err(format!(
                    "top-1 agreement {}/{}",
                    self.top1_agree, self.top1_total
                ));
            }
            if self.p95_abs > 0.1 {
                return Err(format!("p95 |Δlogit| {}", self.p95_abs));
            }
        }
        Ok(())
    }
}

impl std::fmt::Display for Stats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "max |Δ| {:.3e}, p95 |Δ| {:.3e}, top-1 {}/{} ({} clear misses)",
            self.max_abs, self.p95_abs, self.top1_agree, self.top1_total, self.clear_misses
        )
    }
}

fn argmax(x: &[f32]) -> usize {
    (0..x.len()).max_by(|&a, &b| x[a].total_cmp(&x[b])).unwrap()
}

/// Teacher-forced logits of every case of the golden `json` (its model file beside it),
/// against llama.cpp's. F32 goldens come from llama.cpp's precise configuration (F32 KV cache,
/// no flash attention); the quantized ones from its defaults (F16 cache, flash attention), and
/// we mirror each.
pub fn compare(json: &Path, f32_model: bool) -> Stats {
    let kv = super::kv_type(if f32_model { KvType::F32 } else { KvType::F16 });
    let (model_name, n_vocab, cases) = cases(json);
    let file = GgufFile::open(json.with_file_name(model_name)).unwrap();
    let model = super::load(&file);
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
    Stats {
        max_abs: *diffs.last().unwrap(),
        p95_abs: diffs[diffs.len() * 95 / 100],
        top1_agree: agree,
        top1_total: total,
        clear_misses,
    }
}
