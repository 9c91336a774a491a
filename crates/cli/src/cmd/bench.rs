//! `ferrolm bench`: prompt-processing and generation throughput, measured as llama-bench does:
//! random prompt ids, one warm-up run, then `-r` timed repetitions, mean ± stddev.

use super::common::ModelOpts;
use super::logits::parse_ids;
use anyhow::{ensure, Result};
use clap::{Args, ValueEnum};
use ferrolm_engine::{Logits, Session};
use ferrolm_gguf::GgufFile;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use std::time::Instant;

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum OutputFormat {
    Md,
    Json,
}

#[derive(Args, Debug)]
pub struct BenchArgs {
    #[command(flatten)]
    pub model: ModelOpts,
    /// Prompt lengths to test (pp), comma-separated; 0 skips.
    #[arg(short = 'p', long = "n-prompt", default_value = "512")]
    pub n_prompt: String,
    /// Tokens to generate (tg), comma-separated; 0 skips.
    #[arg(short = 'n', long = "n-gen", default_value = "128")]
    pub n_gen: String,
    /// Tokens already in the cache before each test (llama-bench's `-d`), comma-separated; each
    /// test runs at every depth. The prefix is evaluated untimed, before every repetition.
    #[arg(short = 'd', long = "n-depth", default_value = "0")]
    pub n_depth: String,
    /// Timed repetitions of each test.
    #[arg(short = 'r', long = "repetitions", default_value_t = 5)]
    pub reps: usize,
    /// Tokens per forward pass during prompt processing.
    #[arg(long = "ubatch-size", visible_alias = "ub", default_value_t = 512)]
    pub ubatch: usize,
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Md)]
    pub output: OutputFormat,
    /// llama-batched-bench's mode: `-npp`, `-ntg`, `-npl`, `-pps`, `--output-format`.
    #[command(flatten)]
    pub batched: super::bench_batched::BatchedArgs,
}

#[derive(Serialize)]
struct Record {
    model_filename: String,
    model_size: u64,
    model_n_params: u64,
    backend: String,
    n_threads: usize,
    n_ubatch: usize,
    n_prompt: usize,
    n_gen: usize,
    n_depth: usize,
    avg_ts: f64,
    stddev_ts: f64,
    samples_ts: Vec<f64>,
}

pub fn run(args: BenchArgs) -> Result<()> {
    if args.batched.requested() {
        return super::bench_batched::run(&args);
    }
    ensure!(args.reps >= 1, "-r must be at least 1");
    let path = args.model.prepare()?;
    let file = GgufFile::open(&path)?;
    let model = args.model.load(&file)?;
    let mut tests: Vec<(usize, usize)> = Vec::new();
    tests.extend(
        parse_ids(&args.n_prompt)?
            .into_iter()
            .filter(|&n| n > 0)
            .map(|n| (n as usize, 0)),
    );
    tests.extend(
        parse_ids(&args.n_gen)?
            .into_iter()
            .filter(|&n| n > 0)
            .map(|n| (0, n as usize)),
    );
    ensure!(
        !tests.is_empty(),
        "nothing to run: give -p or -n greater than 0"
    );

    let depths: Vec<usize> = parse_ids(&args.n_depth)?
        .into_iter()
        .map(|d| d as usize)
        .collect();
    let tests: Vec<(usize, usize, usize)> = depths
        .iter()
        .flat_map(|&d| tests.iter().map(move |&(p, g)| (p, g, d)))
        .collect();

    let mut rng = rand::rngs::StdRng::seed_from_u64(1234);
    let n_vocab = model.cfg.n_vocab as u32;
    let mut records = Vec::new();
    let backend = if model.device_name() == "cpu" {
        "CPU".to_owned()
    } else {
        "CUDA".to_owned()
    };
    for (n_prompt, n_gen, n_depth) in tests {
        let n_ctx = n_depth + n_prompt + n_gen;
        args.model.check_fits(&model, n_ctx, 1)?;
        let mut once = || -> Result<f64> {
            let mut s = Session::with_kv_type(&model, n_ctx, args.model.kv_type());
            s.set_ubatch(args.ubatch);
            s.reserve()?; // the KV cache is not part of the timing
            let tokens: Vec<u32> = (0..n_prompt.max(n_gen))
                .map(|_| rng.gen_range(0..n_vocab))
                .collect();
            if n_depth > 0 {
                let prefix: Vec<u32> = (0..n_depth).map(|_| rng.gen_range(0..n_vocab)).collect();
                s.eval(&prefix, Logits::Last)?;
            }
            // Each pass's logits reach the host and are left there, as llama-bench leaves
            // them (no copy out of the runner's buffer, no sampling).
            let start = Instant::now();
            if n_prompt > 0 {
                s.eval_last(&tokens[..n_prompt])?;
            }
            for &t in &tokens[..n_gen] {
                s.eval_last(&[t])?;
            }
            Ok((n_prompt + n_gen) as f64 / start.elapsed().as_secs_f64())
        };
        once()?; // warm-up: page in the weights, size the allocator
        ferrolm_engine::cuda_profile::reset();
        let samples = (0..args.reps)
            .map(|_| once())
            .collect::<Result<Vec<f64>>>()?;
        if ferrolm_engine::cuda_profile::enabled() {
            // FERROLM_CUDA_PROFILE: device time per stage of one repetition (pp or tg test).
            eprintln!(
                "\nstages of one repetition (pp {n_prompt}, tg {n_gen}, depth {n_depth}; graphs off; the untimed prefix included):\n{}",
                ferrolm_engine::cuda_profile::report(args.reps)
            );
        }
        let avg = samples.iter().sum::<f64>() / samples.len() as f64;
        let var = samples.iter().map(|s| (s - avg).powi(2)).sum::<f64>()
            / (samples.len().max(2) - 1) as f64;
        let r = Record {
            model_filename: path.display().to_string(),
            model_size: file.tensors().iter().map(|t| t.n_bytes).sum(),
            model_n_params: file.tensors().iter().map(|t| t.n_elements()).sum(),
            backend: backend.clone(),
            n_threads: rayon::current_num_threads(),
            n_ubatch: args.ubatch,
            n_prompt,
            n_gen,
            n_depth,
            avg_ts: avg,
            stddev_ts: var.sqrt(),
            samples_ts: samples,
        };
        if let OutputFormat::Md = args.output {
            if records.is_empty() {
                println!("| model | size | params | backend | threads | test | t/s |");
                println!("|---|---:|---:|---|---:|---:|---:|");
            }
            let mut test = if n_prompt > 0 {
                format!("pp{n_prompt}")
            } else {
                format!("tg{n_gen}")
            };
            if n_depth > 0 {
                test += &format!(" @ d{n_depth}"); // as llama-bench names it
            }
            println!(
                "| {} | {:.2} MiB | {:.2} M | {} | {} | {test} | {:.2} ± {:.2} |",
                path.file_name()
                    .map(|f| f.to_string_lossy())
                    .unwrap_or_default(),
                r.model_size as f64 / (1 << 20) as f64,
                r.model_n_params as f64 / 1e6,
                r.backend,
                r.n_threads,
                r.avg_ts,
                r.stddev_ts
            );
        }
        records.push(r);
    }
    if let OutputFormat::Json = args.output {
        println!("{}", serde_json::to_string_pretty(&records)?);
    }
    Ok(())
}
