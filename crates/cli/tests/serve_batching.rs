//! `ferrolm serve`'s scheduler on the default model, through the official `openai` Python
//! client (`tests/serve/batching_client.py`): prefix reuse with `cached_tokens` and answers
//! equal to those without it, long prompts prefilled between decode steps, and
//! `--deterministic` answers that do not depend on what shares the batch.

#[path = "serve/harness.rs"]
mod harness;

use harness::{python_script, Server};

fn client(server: &Server, args: &[&str]) -> serde_json::Value {
    let out = python_script(server, "batching_client.py", args);
    println!("{out}");
    serde_json::from_str(out.lines().last().expect("a line of figures")).unwrap()
}

/// Requests sharing a system prompt: every one after the first reports cached tokens, every
/// answer (text and log-probabilities) equals the one computed without reuse, and the
/// metrics show the prefill work that was skipped.
#[test]
fn shared_system_prompt_is_reused_and_answers_are_unchanged() {
    let args = ["--parallel", "4", "-c", "1024"];
    let reuse = Server::start(&args);
    let off = Server::start(&[&args[..], &["--no-prefix-cache"]].concat());
    let figures = client(&reuse, &["prefix", &off.url(), "10", "24"]);
    let n = |m: &str, k: &str| {
        figures[m][format!("ferrolm_prompt_tokens{k}_total")]
            .as_u64()
            .unwrap_or_else(|| panic!("no {k} in {figures}"))
    };
    // Without reuse every prompt token is computed; with it, each is computed or reused.
    assert_eq!(n("metrics_off", "_cached"), 0, "{figures}");
    assert_eq!(n("metrics_off", "_computed"), n("metrics_off", ""));
    assert_eq!(
        n("metrics_reuse", "_computed") + n("metrics_reuse", "_cached"),
        n("metrics_reuse", ""),
        "{figures}"
    );
    // Nine of the ten chat requests reuse the system prompt (200+ tokens each).
    assert!(n("metrics_reuse", "_cached") > 9 * 200, "{figures}");
}

/// A long prompt arriving while another request streams is prefilled in chunks between that
/// request's decode steps: the streaming request keeps receiving tokens meanwhile.
#[test]
fn a_long_prompt_does_not_stall_a_streaming_request() {
    // No prefix reuse: the solo runs would leave the long prompt cached.
    let server = Server::start(&[
        "--parallel",
        "2",
        "-c",
        "2048",
        "-b",
        "64",
        "--no-prefix-cache",
    ]);
    let figures = client(&server, &["interleave", "300"]);
    assert!(figures["tokens_during_long_prefill"].as_u64().unwrap() >= 2);
}

/// `--deterministic` on the CPU: eight prompts alone and then all at once, the same text and
/// log-probabilities bit for bit, although the shared step budget cuts their prompts into
/// other chunks under load (prefix reuse off, so every prompt is computed in both runs).
#[test]
fn deterministic_answers_do_not_depend_on_the_batch() {
    let server = Server::start(&["--parallel", "8", "--deterministic", "--no-prefix-cache"]);
    client(&server, &["determinism", "8"]);
}
