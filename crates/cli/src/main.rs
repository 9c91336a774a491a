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
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result: anyhow::Result<()> = match cli.command {
        Command::Pull(args) => cmd::pull::run(args),
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
