//! `ferrolm`: a thin command-line layer over the ferrolm crates.

mod cmd;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "ferrolm",
    version,
    about = "Fast GGUF inference on CPU and CUDA"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Download a model into the local cache and print its path.
    Pull(cmd::pull::PullArgs),
    /// Print a model file's architecture, hyperparameters, tokenizer and tensors.
    Inspect(cmd::inspect::InspectArgs),
    /// Generate text from a prompt, streamed to stdout.
    Run(cmd::run::RunArgs),
    /// Chat with a model, turn by turn, reading messages from stdin.
    Chat(cmd::chat::ChatArgs),
    /// Serve the OpenAI-compatible HTTP API (chat, completions, streaming, metrics).
    Serve(cmd::serve::ServeArgs),
    /// Print the token ids of a text as a JSON array.
    Tokenize(cmd::tokenize::TokenizeArgs),
    /// Measure prompt-processing and generation throughput, as llama-bench does.
    Bench(cmd::bench::BenchArgs),
    /// Print the logits of given token ids as JSON (the parity interface).
    Logits(cmd::logits::LogitsArgs),
    /// Measure a model's perplexity on a text, as llama-perplexity does.
    Perplexity(cmd::perplexity::PerplexityArgs),
    /// Write a random-weight model with the exact shapes of a real one.
    Synth(cmd::synth::SynthArgs),
    /// Quantize an F32/F16/BF16 model, choosing each tensor's type as llama.cpp does.
    Quantize(cmd::quantize::QuantizeArgs),
    /// Check every CUDA kernel against its CPU counterpart on random data (needs a GPU).
    CudaParity(cmd::cuda_parity::CudaParityArgs),
}

/// llama.cpp's one-dash multi-letter flags, which clap would read as short flags with a value
/// (`-ngl N` as `-n gl`): rewritten to their long names before parsing.
const ONE_DASH: [(&str, &str); 7] = [
    ("-ngl", "--n-gpu-layers"),
    ("-ctk", "--cache-type-k"),
    ("-ctv", "--cache-type-v"),
    // llama-batched-bench's, for `ferrolm bench`'s batched mode.
    ("-npp", "--npp"),
    ("-ntg", "--ntg"),
    ("-npl", "--npl"),
    ("-pps", "--pps"),
];

fn llama_cpp_spellings(args: impl Iterator<Item = String>) -> impl Iterator<Item = String> {
    args.map(|a| {
        for (short, long) in ONE_DASH {
            match a.strip_prefix(short) {
                Some("") => return long.to_owned(),
                Some(rest) if rest.starts_with('=') => return format!("{long}{rest}"),
                _ => {}
            }
        }
        a
    })
}

fn main() -> ExitCode {
    restore_default_sigpipe();
    keep_freed_memory();
    let cli = Cli::parse_from(llama_cpp_spellings(std::env::args()));
    let result = match cli.command {
        Command::Pull(args) => cmd::pull::run(args),
        Command::Inspect(args) => cmd::inspect::run(args),
        Command::Logits(args) => cmd::logits::run(args),
        Command::Bench(args) => cmd::bench::run(args),
        Command::Run(args) => cmd::run::run(args),
        Command::Chat(args) => cmd::chat::run(args),
        Command::Serve(args) => cmd::serve::run(args),
        Command::Tokenize(args) => cmd::tokenize::run(args),
        Command::Perplexity(args) => cmd::perplexity::run(args),
        Command::Synth(args) => cmd::synth::run(args),
        Command::Quantize(args) => cmd::quantize::run(args),
        Command::CudaParity(args) => cmd::cuda_parity::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // One line a user can act on; bad input is exit code 2, as for usage errors.
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Rust ignores SIGPIPE, which turns `ferrolm inspect m.gguf | head` into a panic on the
/// next print. A command-line tool should just stop quietly, as C tools do.
fn restore_default_sigpipe() {
    #[cfg(unix)]
    // SAFETY: called first thing in main, before any thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// A batched decode step's logits are tens of MB on the host (64 sequences × 151,936 tokens ×
/// 4 bytes = 39 MB) and freed when the step is done. glibc serves blocks that large by mmap and
/// unmaps them on free, so every step faulted in fresh pages: on the H200 machine 128 steps of
/// 32 sequences of qwen3-8b took 1.26 million minor faults (16 sequences: 53 thousand) and
/// about half the step's time in the kernel. From the heap, without trimming it, a freed
/// block's pages serve the next step. The cost is that memory once used is kept.
fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: called first thing in main, before any thread exists or allocates.
    unsafe {
        libc::mallopt(libc::M_MMAP_MAX, 0);
        libc::mallopt(libc::M_TRIM_THRESHOLD, i32::MAX);
    }
}

#[cfg(test)]
mod tests {
    use super::llama_cpp_spellings;

    #[test]
    fn cache_types_with_one_dash() {
        let args = [
            "ferrolm",
            "logits",
            "-ctk",
            "q8_0",
            "-ctv=q4_0",
            "--ctk",
            "f16",
        ];
        let out: Vec<String> = llama_cpp_spellings(args.iter().map(|s| s.to_string())).collect();
        assert_eq!(
            out,
            [
                "ferrolm",
                "logits",
                "--cache-type-k",
                "q8_0",
                "--cache-type-v=q4_0",
                "--ctk",
                "f16"
            ]
        );
    }

    #[test]
    fn ngl_with_one_dash() {
        let args = [
            "ferrolm", "run", "-ngl", "12", "-ngl=3", "-n", "4", "--ngl", "5",
        ];
        let out: Vec<String> = llama_cpp_spellings(args.iter().map(|s| s.to_string())).collect();
        assert_eq!(
            out,
            [
                "ferrolm",
                "run",
                "--n-gpu-layers",
                "12",
                "--n-gpu-layers=3",
                "-n",
                "4",
                "--ngl",
                "5"
            ]
        );
    }
}
