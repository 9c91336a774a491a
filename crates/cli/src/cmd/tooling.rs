//! Pieces shared by the model-writing subcommands: file-type parsing, thread pools and
//! progress bars.

use anyhow::{Context, Result};
use clap::builder::{PossibleValuesParser, TypedValueParser};
use ferrolm_model::FileType;
use indicatif::{ProgressBar, ProgressStyle};
use std::time::Instant;

/// Accepts the file-type names `llama-quantize` uses, and lists them in `--help`.
pub fn file_type_parser() -> impl TypedValueParser<Value = FileType> {
    PossibleValuesParser::new(FileType::ALL.map(FileType::name))
        .map(|s| FileType::from_name(&s).expect("listed names parse"))
}

/// Runs `f` on a pool of `threads` threads, or on rayon's default pool (one per core).
pub fn with_threads<T: Send>(threads: Option<usize>, f: impl FnOnce() -> T + Send) -> Result<T> {
    match threads {
        None => Ok(f()),
        Some(0) => anyhow::bail!("--threads must be at least 1"),
        Some(n) => Ok(rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build()
            .context("starting the thread pool")?
            .install(f)),
    }
}

/// A byte-counting progress bar on stderr; invisible when stderr is not a terminal.
pub struct Bar {
    bar: ProgressBar,
    start: Instant,
}

impl Bar {
    pub fn new(total: u64, what: &str) -> Self {
        let bar = ProgressBar::new(total);
        bar.set_style(
            ProgressStyle::with_template(
                "{msg} [{bar:40}] {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta}",
            )
            .expect("valid template")
            .progress_chars("=> "),
        );
        bar.set_message(what.to_owned());
        Self {
            bar,
            start: Instant::now(),
        }
    }

    pub fn inc(&self, bytes: u64) {
        self.bar.inc(bytes);
    }

    /// Clears the bar and reports what was written.
    pub fn done(self, path: &std::path::Path, tensors: usize) {
        self.bar.finish_and_clear();
        let bytes = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        eprintln!(
            "wrote {} ({tensors} tensors, {:.2} GB) in {:.1} s",
            path.display(),
            bytes as f64 / 1e9,
            self.start.elapsed().as_secs_f64()
        );
    }
}
