//! Whole-model parity with llama.cpp on the tiny random models in `../shared/golden`.

mod common;

use common::{golden, logits};
use std::path::PathBuf;

/// The golden's bars (`common::logits`): F32 or quantized, by the file name.
fn check(stem: &str) {
    let f32_model = stem.ends_with("f32");
    let s = logits::compare(&PathBuf::from(golden(&format!("{stem}.json"))), f32_model);
    println!("{stem}: {s}");
    if let Err(e) = s.check(f32_model) {
        panic!("{stem}: {e}");
    }
}

#[test]
fn llama_f32() {
    check("tiny-llama-f32");
}
#[test]
fn qwen3_f32() {
    check("tiny-qwen3-f32");
}
#[test]
fn olmoe_f32() {
    check("tiny-olmoe-f32");
}
#[test]
fn qwen3moe_f32() {
    check("tiny-qwen3moe-f32");
}
#[test]
fn llama_q8_0() {
    check("tiny-llama-q8_0");
}
#[test]
fn qwen3_q8_0() {
    check("tiny-qwen3-q8_0");
}
#[test]
fn olmoe_q8_0() {
    check("tiny-olmoe-q8_0");
}
#[test]
fn qwen3moe_q8_0() {
    check("tiny-qwen3moe-q8_0");
}
#[test]
fn llama_q4_k_m() {
    check("tiny-llama-q4_k_m");
}
#[test]
fn qwen3_q4_k_m() {
    check("tiny-qwen3-q4_k_m");
}
#[test]
fn olmoe_q4_k_m() {
    check("tiny-olmoe-q4_k_m");
}
#[test]
fn qwen3moe_q4_k_m() {
    check("tiny-qwen3moe-q4_k_m");
}
