//! `ferrolm inspect` through the binary, on llama.cpp's files and on bad input.

use std::process::Command;

fn ferrolm(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_ferrolm"))
        .args(args)
        .output()
        .unwrap()
}

fn golden(name: &str) -> String {
    format!(
        "{}/../../../shared/golden/{name}",
        env!("CARGO_MANIFEST_DIR")
    )
}

#[test]
fn json_report_matches_the_file() {
    let out = ferrolm(&["inspect", "--json", &golden("tiny-qwen3moe-q4_k_m.gguf")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["architecture"], "qwen3moe");
    assert_eq!(v["hyperparameters"]["expert_count"], 8);
    assert_eq!(v["hyperparameters"]["expert_used_count"], 3);
    assert_eq!(v["tokenizer"]["ggml.model"], "no_vocab");
    let tensors = v["tensors"].as_array().unwrap();
    assert_eq!(v["totals"]["tensors"], tensors.len());
    let down = tensors
        .iter()
        .find(|t| t["name"] == "blk.0.ffn_down_exps.weight")
        .unwrap();
    assert_eq!(down["shape"], serde_json::json!([256, 256, 8]));
    let by_type = v["totals"]["by_type"].as_object().unwrap();
    let counted: u64 = by_type
        .values()
        .map(|t| t["tensors"].as_u64().unwrap())
        .sum();
    assert_eq!(counted, tensors.len() as u64);
}

#[test]
fn text_report_has_the_tensor_table() {
    let out = ferrolm(&["inspect", &golden("tiny-llama-q8_0.gguf")]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("architecture  llama"));
    assert!(text.contains("blk.1.ffn_down.weight"));
    assert!(text.contains("Q8_0"));
}

#[test]
fn bad_files_exit_2_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.gguf");
    std::fs::write(&bad, b"GGUF\x03\x00\x00\x00garbage").unwrap();
    for path in [bad.to_str().unwrap(), "/definitely/not/here.gguf"] {
        let out = ferrolm(&["inspect", path]);
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(err.starts_with("error: ") && err.contains(path), "{err}");
    }
}

/// Without a file, inspect describes the default model (pulled into the cache on first use).
#[test]
fn default_model_is_smollm2_135m_q4_1() {
    let out = ferrolm(&["inspect", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["architecture"], "llama");
    assert_eq!(v["hyperparameters"]["block_count"], 30);
    assert_eq!(v["totals"]["tensors"], 272);
    let by_type = &v["totals"]["by_type"];
    assert_eq!(by_type["Q4_1"]["tensors"], 210);
    assert_eq!(by_type["F32"]["tensors"], 61);
    assert_eq!(by_type["Q8_0"]["tensors"], 1);
    let embd = v["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "token_embd.weight")
        .unwrap();
    assert_eq!(embd["shape"], serde_json::json!([576, 49152]));
    assert_eq!(embd["type"], "Q8_0");
}
