//! The quantized KV cache (`-ctk`/`-ctv`) through the binary: the tiny models against
//! llama.cpp goldens made with the same cache type (`goldens/kv-cache`, made by
//! `tools/goldens/make_kv_goldens.py`), with the bars of the f16 goldens
//! (`crates/engine/tests/golden_tiny.rs`), the cache's size per position, and bad flags.

mod golden;

use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};

fn shared(name: &str) -> String {
    format!(
        "{}/../../../shared/golden/{name}",
        env!("CARGO_MANIFEST_DIR")
    )
}

fn ferrolm(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ferrolm"))
        .args(args)
        .output()
        .unwrap()
}

/// Teacher-forced logits of every golden case on the CPU with `cache` (`-ctk X -ctv Y`),
/// against the golden `goldens/kv-cache/{stem}-kv{kv}.json.gz` (its model is the shared tiny
/// one), with the bars of the quantized goldens (`golden::check_quantized`).
fn check(stem: &str, kv: &str, cache: &[&str]) {
    let path = format!(
        "{}/../../goldens/kv-cache/{stem}-kv{kv}.json.gz",
        env!("CARGO_MANIFEST_DIR")
    );
    let stats = golden::compare(Path::new(&path), cache);
    golden::check_quantized(&stats, stem);
}

macro_rules! goldens {
    ($kv:literal, $flags:expr, $($name:ident: $stem:literal),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                check($stem, $kv, &$flags);
            }
        )*
    };
}

goldens!("q8_0", ["-ctk", "q8_0", "-ctv", "q8_0"],
    q8_0_cache_llama_q8_0: "tiny-llama-q8_0",
    q8_0_cache_qwen3_q8_0: "tiny-qwen3-q8_0",
    q8_0_cache_olmoe_q8_0: "tiny-olmoe-q8_0",
    q8_0_cache_qwen3moe_q8_0: "tiny-qwen3moe-q8_0",
    q8_0_cache_llama_q4_k_m: "tiny-llama-q4_k_m",
    q8_0_cache_qwen3_q4_k_m: "tiny-qwen3-q4_k_m",
    q8_0_cache_olmoe_q4_k_m: "tiny-olmoe-q4_k_m",
    q8_0_cache_qwen3moe_q4_k_m: "tiny-qwen3moe-q4_k_m",
);

// q4_0 holds the same bars against llama.cpp with a q4_0 cache.
goldens!("q4_0", ["--cache-type", "q4_0"],
    q4_0_cache_llama_q8_0: "tiny-llama-q8_0",
    q4_0_cache_qwen3_q8_0: "tiny-qwen3-q8_0",
    q4_0_cache_olmoe_q8_0: "tiny-olmoe-q8_0",
    q4_0_cache_qwen3moe_q8_0: "tiny-qwen3moe-q8_0",
    q4_0_cache_llama_q4_k_m: "tiny-llama-q4_k_m",
    q4_0_cache_qwen3_q4_k_m: "tiny-qwen3-q4_k_m",
    q4_0_cache_olmoe_q4_k_m: "tiny-olmoe-q4_k_m",
    q4_0_cache_qwen3moe_q4_k_m: "tiny-qwen3moe-q4_k_m",
);

/// The default model (SmolLM2-135M) with a q8_0 cache keeps the bar its f16 cache has against
/// llama.cpp's greedy continuations (`run.rs`): the first 30 characters on 3 of the 5 prompts.
#[test]
fn default_model_generates_with_a_q8_0_cache() {
    let path = format!(
        "{}/../../../shared/golden/smollm2-135m-instruct-q4_1.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let g: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut matched = 0;
    for case in g["generate"].as_array().unwrap() {
        let prompt = case["text"].as_str().unwrap();
        let want = case["greedy_text_until_eos"].as_str().unwrap();
        let out = ferrolm(&[
            "run", "-p", prompt, "--temp", "0", "-n", "16", "-t", "2", "-ctk", "q8_0", "-ctv",
            "q8_0",
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        let n = want.chars().take(30).map(char::len_utf8).sum::<usize>();
        println!("{prompt:?}: {text:?}");
        matched += usize::from(text.get(..n) == want.get(..n));
    }
    assert!(matched >= 3, "only {matched} of 5 continuations match");
}

/// `-c` far beyond memory: the error states what the cache needs, as its types size it.
fn needed_gib(cache: &[&str]) -> f64 {
    let model = shared("tiny-llama-q8_0.gguf");
    let mut args = vec![
        "logits",
        "-m",
        &model,
        "--tokens",
        "1 2",
        "-c",
        "10000000000",
    ];
    args.extend_from_slice(cache);
    let out = ferrolm(&args);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    let gib = err
        .split(" needs ")
        .nth(1)
        .and_then(|s| s.split(" GiB").next())
        .unwrap_or_else(|| panic!("no size in {err:?}"));
    gib.parse().unwrap()
}

/// Bytes per position come from the cache's own types: q8_0 keeps 34 bytes per 32 elements,
/// 34/64 of f16's; q4_0 18/64; each of K and V on its own flag, `--cache-type` both.
#[test]
fn cache_size_follows_the_cache_types() {
    let f16 = needed_gib(&[]);
    let ratio = |cache: &[&str]| needed_gib(cache) / f16;
    let close = |a: f64, b: f64| (a - b).abs() < 1e-4;
    assert!(close(ratio(&["-ctk", "q8_0", "-ctv", "q8_0"]), 34.0 / 64.0));
    assert!(close(ratio(&["--cache-type", "q8_0"]), 34.0 / 64.0));
    assert!(close(
        ratio(&["--cache-type-k=q4_0", "-ctv=q4_0"]),
        18.0 / 64.0
    ));
    assert!(close(ratio(&["-ctk", "q8_0"]), (34.0 / 32.0 + 2.0) / 4.0));
    assert!(close(
        ratio(&["--cache-type", "f32", "-ctv", "f16"]),
        6.0 / 4.0
    ));
}

#[test]
fn a_bad_cache_type_names_the_flag() {
    let model = shared("tiny-llama-q8_0.gguf");
    let out = ferrolm(&["logits", "-m", &model, "--tokens", "1", "-ctv", "q5_1"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("--cache-type-v") && err.contains("q8_0"),
        "{err}"
    );
}

/// `--kv-blocks` sizes a GPU's paged cache; on the CPU, whose caches are whole, it is refused
/// by name rather than ignored.
#[test]
fn kv_blocks_is_refused_where_the_cache_is_not_paged() {
    let model = shared("tiny-llama-q8_0.gguf");
    let out = ferrolm(&["serve", "-m", &model, "--port", "0", "--kv-blocks", "8"]);
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("--kv-blocks") && err.contains("not paged"),
        "{err}"
    );
}
