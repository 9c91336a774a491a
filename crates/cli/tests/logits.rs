//! `ferrolm logits`, the parity interface, through the binary.

use serde_json::Value;
use std::process::Command;

fn golden(name: &str) -> String {
    format!(
        "{}/../../../shared/golden/{name}",
        env!("CARGO_MANIFEST_DIR")
    )
}

fn logits(args: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_ferrolm"))
        .arg("logits")
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn rows(v: &Value) -> Vec<Vec<f64>> {
    v["logits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            r.as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap())
                .collect()
        })
        .collect()
}

#[test]
fn batched_all_positions_match_llama_cpp_and_step_mode() {
    let model = golden("tiny-qwen3-f32.gguf");
    let g: Value =
        serde_json::from_str(&std::fs::read_to_string(golden("tiny-qwen3-f32.json")).unwrap())
            .unwrap();
    let case = &g["cases"][0];
    let ids: Vec<String> = case["prompt"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.to_string())
        .collect();
    let ids = ids.join(" ");
    let batched = logits(&[
        "-m",
        &model,
        "--tokens",
        &ids,
        "--all",
        "--backend",
        "cpu",
        "--cache-type",
        "f32",
    ]);
    assert_eq!(batched["n_vocab"], 512);
    let n = case["prompt"].as_array().unwrap().len();
    assert_eq!(batched["positions"].as_array().unwrap().len(), n);
    let ours = rows(&batched);
    for (row, want) in ours.iter().zip(case["prompt_logits"].as_array().unwrap()) {
        for (a, b) in row.iter().zip(want.as_array().unwrap()) {
            // An f32 cache mirrors the golden's precise configuration.
            assert!((a - b.as_f64().unwrap()).abs() <= 1e-3);
        }
    }
    // llama.cpp's one-dash `-ngl`: 0 keeps every block on the CPU.
    let stepped = rows(&logits(&[
        "-m",
        &model,
        "--tokens",
        &ids,
        "--all",
        "--step",
        "--cache-type",
        "f32",
        "-ngl",
        "0",
    ]));
    for (a, b) in ours.iter().flatten().zip(stepped.iter().flatten()) {
        assert!((a - b).abs() <= 1e-3, "batched {a} vs step {b}");
    }
    let last = logits(&["-m", &model, "--tokens", &ids, "--top", "4"]);
    assert_eq!(last["positions"], serde_json::json!([n - 1]));
    let top = last["top"][0].as_array().unwrap();
    assert_eq!(top.len(), 4);
    let last_row = ours.last().unwrap();
    let best = (0..last_row.len())
        .max_by(|&a, &b| last_row[a].total_cmp(&last_row[b]))
        .unwrap();
    assert_eq!(top[0][0], best);
}

#[test]
fn bad_token_ids_are_clear_errors() {
    let model = golden("tiny-llama-f32.gguf");
    for tokens in ["1 2 512", "1 x 3", ""] {
        let out = Command::new(env!("CARGO_BIN_EXE_ferrolm"))
            .args(["logits", "-m", &model, "--tokens", tokens])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{tokens}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(
            err.starts_with("error: ") && err.lines().count() == 1,
            "{err}"
        );
    }
}

/// A model file missing one tensor is refused with that tensor's name.
#[test]
fn missing_tensor_is_named() {
    use ferrolm_gguf::{GgufFile, GgufWriter};
    let src = GgufFile::open(golden("tiny-llama-f32.gguf")).unwrap();
    let mut w = GgufWriter::new();
    for (k, v) in src.metadata() {
        w.set(k, v.clone());
    }
    let kept: Vec<_> = src
        .tensors()
        .iter()
        .filter(|t| t.name != "blk.1.ffn_up.weight")
        .collect();
    for t in &kept {
        w.add_tensor(&t.name, t.ty, &t.dims).unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("broken.gguf");
    let mut out = w.create(&path).unwrap();
    for t in &kept {
        out.write_tensor(src.tensor_data(t)).unwrap();
    }
    out.finish().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ferrolm"))
        .args(["logits", "-m", path.to_str().unwrap(), "--tokens", "1 2"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("blk.1.ffn_up.weight") && err.contains("missing"),
        "{err}"
    );
}
