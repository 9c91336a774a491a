//! A llama.cpp logits golden (the JSON shape of `../shared/golden`'s tiny goldens, plain or
//! gzip-compressed) and the bars every such golden meets: F32 files max |Δlogit| ≤ 2e-2 and no
//! top-1 miss where llama.cpp's top-1/top-2 margin is ≥ 0.05; quantized files top-1
//! agreement ≥ 97% and p95 |Δlogit| ≤ 0.1.

use flate2::read::GzDecoder;
use serde_json::Value;
use std::io::Read;
use std::path::{Path, PathBuf};

/// The JSON at `path`, or at `path.gz` when only that exists; `.gz` files are decompressed.
pub fn read_json(path: &Path) -> Value {
    let gz = PathBuf::from(format!("{}.gz", path.display()));
    let path = if !path.exists() && gz.exists() {
        gz.as_path()
    } else {
        path
    };
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let text = if path.extension().is_some_and(|x| x == "gz") {
        let mut s = String::new();
        GzDecoder::new(&bytes[..])
            .read_to_string(&mut s)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        s
    } else {
        String::from_utf8(bytes).unwrap()
    };
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// One case, teacher-forced: llama.cpp's logits for each position of `tokens` it has.
pub struct Case {
    /// The prompt followed by the greedy continuation, as one sequence.
    pub tokens: Vec<u32>,
    pub expected: Vec<Vec<f32>>,
}

pub struct Golden {
    /// Where the golden was read from.
    pub path: PathBuf,
    /// The whole document (the maker's fields: `recipe`, `type`, `model_sha256`, ...).
    pub json: Value,
    /// The model file's name.
    pub model: String,
    pub n_vocab: usize,
    pub cases: Vec<Case>,
}

impl Golden {
    /// The golden at `path` (or `path.gz`).
    pub fn open(path: &Path) -> Self {
        let json = read_json(path);
        let floats = |rows: &Value| -> Vec<Vec<f32>> {
            rows.as_array()
                .unwrap()
                .iter()
                .map(|r| r.as_array().unwrap().iter().map(as_f32).collect())
                .collect()
        };
        let ids = |a: &Value| -> Vec<u32> {
            a.as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap() as u32)
                .collect()
        };
        let cases = json["cases"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                let greedy = ids(&c["greedy"]);
                let mut expected = floats(&c["prompt_logits"]);
                // greedy_logits[0] repeats the prompt's last row; the rest follow greedy tokens.
                expected.extend(floats(&c["greedy_logits"]).into_iter().skip(1));
                let mut tokens = ids(&c["prompt"]);
                tokens.extend_from_slice(&greedy[..greedy.len() - 1]);
                Case { tokens, expected }
            })
            .collect();
        Self {
            path: path.to_owned(),
            model: json["model"].as_str().unwrap().to_owned(),
            n_vocab: json["n_vocab"].as_u64().unwrap() as usize,
            json,
            cases,
        }
    }

    /// The model file the golden was made on: regenerated from its recipe into `cache` (see
    /// [`crate::model_for`]), or, for goldens without a recipe, the shared tiny model of
    /// that name ([`crate::shared_golden`]).
    pub fn model_path(&self, cache: &Path) -> PathBuf {
        if self.json.get("recipe").is_some() {
            crate::model_for(self, cache)
        } else {
            crate::shared_golden(&self.model)
        }
    }
}

fn as_f32(x: &Value) -> f32 {
    x.as_f64().unwrap() as f32
}

fn argmax(x: &[f32]) -> usize {
    (0..x.len()).max_by(|&a, &b| x[a].total_cmp(&x[b])).unwrap()
}

/// Rows of our logits against the golden's, as they come.
#[derive(Default)]
pub struct Tally {
    diffs: Vec<f32>,
    agree: usize,
    total: usize,
    clear_misses: usize,
}

impl Tally {
    pub fn row(&mut self, ours: &[f32], want: &[f32]) {
        assert_eq!(ours.len(), want.len(), "row widths");
        self.diffs
            .extend(ours.iter().zip(want).map(|(a, b)| (a - b).abs()));
        self.total += 1;
        if argmax(ours) == argmax(want) {
            self.agree += 1;
        } else {
            let mut sorted = want.to_vec();
            sorted.sort_by(|x, y| y.total_cmp(x));
            self.clear_misses += usize::from(sorted[0] - sorted[1] >= 0.05);
        }
    }

    pub fn stats(mut self) -> Stats {
        self.diffs.sort_by(f32::total_cmp);
        Stats {
            max_abs: *self.diffs.last().expect("no rows compared"),
            p95_abs: self.diffs[self.diffs.len() * 95 / 100],
            top1_agree: self.agree,
            top1_total: self.total,
            clear_misses: self.clear_misses,
        }
    }
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
