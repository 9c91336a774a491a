//! Logits goldens through the binary: llama.cpp's logits (`ferrolm_testkit::golden`: a JSON
//! golden as `../shared/golden/README.md` describes, plain or `.gz`) against
//! `ferrolm logits --all` teacher-forced over each case's prompt and greedy tokens, with the
//! bars every golden meets (`Stats::check`).

#![allow(dead_code)]

use ferrolm_testkit::{Golden, Stats, Tally};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The model the golden at `json` was made on: regenerated from its recipe (checked against
/// llama.cpp's sha256) or, for goldens without one, the shared tiny model.
pub fn model(json: &Path) -> PathBuf {
    Golden::open(json).model_path(Path::new(env!("CARGO_TARGET_TMPDIR")))
}

/// Runs every case of the golden `json` on the CPU with `flags` added (`-ctk q8_0`, say), on
/// the golden's own model.
pub fn compare(json: &Path, flags: &[&str]) -> Stats {
    compare_on(json, &model(json), flags)
}

/// As [`compare`], on the model file `model` (a changed copy, say).
pub fn compare_on(json: &Path, model: &Path, flags: &[&str]) -> Stats {
    let g = Golden::open(json);
    let mut tally = Tally::default();
    for case in &g.cases {
        let tokens: Vec<String> = case.tokens.iter().map(u32::to_string).collect();
        let tokens = tokens.join(" ");
        let mut args = vec![
            "logits",
            "-m",
            model.to_str().unwrap(),
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
        let rows = ours["logits"].as_array().unwrap();
        assert_eq!(rows.len(), case.expected.len());
        for (row, want) in rows.iter().zip(&case.expected) {
            let row: Vec<f32> = row
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap() as f32)
                .collect();
            tally.row(&row, want);
        }
    }
    let stats = tally.stats();
    println!(
        "{} {}: {stats}",
        json.file_name().unwrap().to_string_lossy(),
        flags.join(" ")
    );
    stats
}

/// The bars of an F32 golden (llama.cpp's precise configuration: mirror it with an f32 cache).
pub fn check_f32(s: &Stats, what: &str) {
    if let Err(e) = s.check(true) {
        panic!("{what}: {e}");
    }
}

/// The bars of a quantized golden.
pub fn check_quantized(s: &Stats, what: &str) {
    if let Err(e) = s.check(false) {
        panic!("{what}: {e}");
    }
}

/// A copy of the model of the golden at `json` in `dir` as `name`, without the key `drop`,
/// with the keys of `set`, and with each tensor's bytes as `data` gives them (`None`:
/// unchanged): the goldens' "can fail" variants.
pub fn variant(
    json: &Path,
    dir: &Path,
    name: &str,
    drop: &str,
    set: &[(&str, ferrolm_gguf::Value)],
    data: &dyn Fn(&ferrolm_gguf::TensorInfo) -> Option<Vec<u8>>,
) -> PathBuf {
    let src = ferrolm_gguf::GgufFile::open(model(json)).unwrap();
    let mut w = ferrolm_gguf::GgufWriter::new();
    for (k, v) in src.metadata() {
        if k != drop {
            w.set(k, v.clone());
        }
    }
    for (k, v) in set {
        w.set(k, v.clone());
    }
    for t in src.tensors() {
        w.add_tensor(&t.name, t.ty, &t.dims).unwrap();
    }
    let path = dir.join(name);
    let mut out = w.create(&path).unwrap();
    for t in src.tensors() {
        let bytes = data(t).unwrap_or_else(|| src.tensor_data(t).to_vec());
        out.write_tensor(&bytes).unwrap();
    }
    out.finish().unwrap();
    path
}
