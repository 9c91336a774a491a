//! `ferrolm perplexity` against llama.cpp's perplexity on the same windows of the same text:
//! `tests/perplexity/llama_cpp.json`, made by `tools/perplexity_reference.py` (which says
//! what each case is). The bar is 0.5% on the final estimate, and on every running value
//! where the arithmetic allows it (see `SMOLLM2_WINDOW_BAR`).

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/perplexity");

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/golden")
}

fn reference(case: &str) -> Value {
    let text = std::fs::read_to_string(format!("{DIR}/llama_cpp.json")).unwrap();
    let all: Value = serde_json::from_str(&text).unwrap();
    all["cases"][case].clone()
}

fn ferrolm(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_ferrolm"))
        .args(args)
        .output()
        .unwrap()
}

/// The default model's path (pulled on first use, as every command does).
fn default_model() -> PathBuf {
    let out = ferrolm(&["pull"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

/// What `ferrolm perplexity` printed: the running values and the final estimate and error.
struct Printed {
    running: Vec<f64>,
    ppl: f64,
    error: f64,
}

fn perplexity(args: &[&str]) -> Printed {
    let mut all = vec!["perplexity", "--backend", "cpu", "-t", "2"];
    all.extend_from_slice(args);
    let out = ferrolm(&all);
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "ferrolm {all:?}:\n{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut lines = stdout.lines();
    // llama-perplexity's line: [1]x,[2]y,...
    let running: Vec<f64> = lines
        .next()
        .unwrap()
        .split(',')
        .filter(|s| !s.is_empty())
        .enumerate()
        .map(|(i, item)| {
            let (n, v) = item[1..].split_once(']').unwrap();
            assert_eq!(n.parse::<usize>().unwrap(), i + 1, "{item}");
            v.parse().unwrap()
        })
        .collect();
    let last = lines.next().unwrap();
    let rest = last.strip_prefix("Final estimate: PPL = ").unwrap();
    let (ppl, error) = rest.split_once(" +/- ").unwrap();
    Printed {
        running,
        ppl: ppl.parse().unwrap(),
        error: error.parse().unwrap(),
    }
}

fn close(ours: f64, want: f64, rel: f64, what: &str) {
    let off = (ours - want).abs() / want;
    println!(
        "{what}: ours {ours:.4}, llama.cpp {want:.4} ({:.3}%)",
        100.0 * off
    );
    assert!(off <= rel, "{what}: ours {ours}, llama.cpp {want}");
}

/// SmolLM2's running values after the first windows average a few hundred tokens, and at that
/// size llama.cpp disagrees with itself by more than 0.5%: on this text (-c 128, 8 windows) a
/// ubatch of 16 instead of 128 moves its running values by up to 0.9%, flash attention off by
/// up to 2.3% (its final value by 0.4%). Per token, ferrolm's one-pass and step-by-step logits
/// differ as much as either does from llama.cpp (0.065 nats mean absolute NLL). So the running
/// values are held to the noise of the model's arithmetic, the final value to 0.5%; the tiny
/// models (llama.cpp's arithmetic, nearly bit for bit) are held to 0.5% throughout. Q8_1
/// activations in llama.cpp's x86 rounding (issue 19: its first Q4_1 projections come 30%
/// closer to llama.cpp's, mean |Δ| 2.4e-4 → 1.7e-4) moved window 2 from within 1.5% to 1.56%;
/// what remains there is Q4_1's min term, which llama.cpp takes with Q8_1's f16 `s`.
const SMOLLM2_WINDOW_BAR: f64 = 0.02;

fn agrees(case: &str, printed: &Printed, window_bar: f64) {
    let want = reference(case);
    let running: Vec<f64> = want["running"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    assert_eq!(printed.running.len(), running.len(), "{case}: windows");
    for (i, (&ours, &theirs)) in printed.running.iter().zip(&running).enumerate() {
        close(ours, theirs, window_bar, &format!("{case} [{}]", i + 1));
    }
    close(printed.ppl, want["ppl"].as_f64().unwrap(), 0.005, case);
    // The error is a spread: looser, but it must be llama.cpp's formula.
    close(
        printed.error,
        want["error"].as_f64().unwrap(),
        0.05,
        &format!("{case} error"),
    );
}

#[test]
fn default_model_matches_llama_cpp() {
    let model = default_model();
    let text = format!("{DIR}/text.txt");
    let m = model.to_str().unwrap();
    let printed = perplexity(&["-m", m, "-f", &text, "-c", "256"]);
    agrees("smollm2", &printed, SMOLLM2_WINDOW_BAR);
    // Passes of -b tokens bound the logits held, and change nothing else.
    let small = perplexity(&[
        "-m", m, "-f", &text, "-c", "256", "--chunks", "2", "-b", "48",
    ]);
    let want = reference("smollm2");
    assert_eq!(small.running.len(), 2);
    for (i, &ours) in small.running.iter().enumerate() {
        let theirs = want["running"][i].as_f64().unwrap();
        close(
            ours,
            theirs,
            SMOLLM2_WINDOW_BAR,
            &format!("-b 48 [{}]", i + 1),
        );
    }
    assert_eq!(small.ppl, small.running[1]);
}

/// A copy of the default model that adds BOS: the text starts with BOS, and BOS replaces
/// the first token of every window (the reference patches the same byte).
#[test]
fn bos_leads_every_window_when_the_model_adds_it() {
    let dir = tempfile::tempdir().unwrap();
    let patched = dir.path().join("smollm2-bos.gguf");
    let mut bytes = std::fs::read(default_model()).unwrap();
    let key = b"tokenizer.ggml.add_bos_token";
    let at = bytes.windows(key.len()).position(|w| w == key).unwrap() + key.len();
    assert_eq!(bytes[at..at + 4], 7u32.to_le_bytes(), "a bool");
    bytes[at + 4] = 1;
    std::fs::write(&patched, bytes).unwrap();
    let text = format!("{DIR}/text.txt");
    let printed = perplexity(&[
        "-m",
        patched.to_str().unwrap(),
        "-f",
        &text,
        "-c",
        "256",
        "--chunks",
        "8",
    ]);
    agrees("smollm2-bos", &printed, SMOLLM2_WINDOW_BAR);
}

/// The golden tiny models have no vocabulary: the text's UTF-8 bytes are their token ids.
#[test]
fn tiny_models_match_llama_cpp() {
    let dir = tempfile::tempdir().unwrap();
    let ids = dir.path().join("ids.json");
    let bytes = std::fs::read(format!("{DIR}/text.txt")).unwrap();
    std::fs::write(&ids, serde_json::to_string(&bytes).unwrap()).unwrap();
    for stem in [
        "tiny-llama-f32",
        "tiny-qwen3-q8_0",
        "tiny-olmoe-q4_k_m",
        "tiny-qwen3moe-q8_0",
    ] {
        let model = golden_dir().join(format!("{stem}.gguf"));
        let printed = perplexity(&[
            "-m",
            model.to_str().unwrap(),
            "--ids",
            ids.to_str().unwrap(),
            "-c",
            "256",
        ]);
        agrees(stem, &printed, 0.005);
    }
}

/// Exit code 2 and an error line that names what is wrong.
fn refused(args: &[&str], want: &str) {
    let mut all = vec!["perplexity", "--backend", "cpu"];
    all.extend_from_slice(args);
    let out = ferrolm(&all);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "ferrolm {all:?}:\n{err}");
    assert!(
        err.contains(want),
        "ferrolm {all:?}: {err:?} does not mention {want:?}"
    );
}

#[test]
fn bad_input_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.txt");
    std::fs::write(&empty, "").unwrap();
    let short = dir.path().join("short.txt");
    std::fs::write(&short, "Too short for two windows of 512 tokens.").unwrap();
    let binary = dir.path().join("binary.txt");
    std::fs::write(&binary, [0xffu8, 0xfe, 0x41]).unwrap();
    let text = format!("{DIR}/text.txt");
    let tiny = golden_dir().join("tiny-llama-q8_0.gguf");
    let tiny = tiny.to_str().unwrap();
    let model = default_model();
    let m = model.to_str().unwrap();

    refused(&["-m", m, "-f", empty.to_str().unwrap()], "-f/--file");
    refused(&["-m", m, "-f", empty.to_str().unwrap()], "is empty");
    refused(
        &["-m", m, "-f", short.to_str().unwrap()],
        "needs at least 1024",
    );
    refused(&["-m", m, "-f", binary.to_str().unwrap()], "not UTF-8");
    refused(&["-m", m, "-f", "/nonexistent/text.txt"], "-f/--file");
    refused(
        &["-m", m, "-f", &text, "-c", "100000"],
        "past the model's context of 8192",
    );
    refused(&["-m", m, "-f", &text, "-c", "2"], "-c/--ctx-size");
    refused(&["-m", m, "-f", &text, "--chunks", "0"], "--chunks");
    refused(&["-m", m, "-f", &text, "-b", "0"], "-b/--batch-size");
    refused(&["-m", tiny, "-f", &text], "--ids");
    let ids = dir.path().join("ids.txt");
    std::fs::write(&ids, "1 2 x3").unwrap();
    refused(&["-m", tiny, "--ids", ids.to_str().unwrap()], "`x3`");
    std::fs::write(&ids, "[1, 2, 3]").unwrap();
    refused(
        &["-m", tiny, "--ids", ids.to_str().unwrap()],
        "needs at least 1024",
    );
}
