//! Whole-model throughput in the style of llama-bench: prefill of `pp` tokens in one batch
//! (logits of the last row only) and `tg` single-token decode steps from an empty context.
//!
//! `cargo run --release -p ferrolm-engine --example bench_forward -- [MODEL] [--pp N]
//! [--tg N] [--reps N] [--worker]`. Threads come from `RAYON_NUM_THREADS` (default: all cores).
//! `--worker` runs each eval on a rayon worker thread (`rayon::scope`), so the parallel loops
//! inside it do not each pay a wake-up of the pool from outside.
//!
//! On a shared machine wall time says little, so each figure also comes as "cpu-normalised":
//! tokens per (process CPU seconds / threads), what the run would give if it had its threads'
//! cores to itself. Spinning rayon workers count as busy, so this errs on the low side.

use ferrolm_engine::{Logits, Model, Session};
use ferrolm_gguf::GgufFile;
use std::time::Instant;

/// User + system CPU seconds of this process so far (Linux; 0 elsewhere).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the parenthesised command name; utime and stime are the 12th and 13th.
    let rest = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<f64> = rest
        .split_whitespace()
        .map(|v| v.parse().unwrap_or(0.0))
        .collect();
    if f.len() < 13 {
        return 0.0;
    }
    (f[11] + f[12]) / 100.0
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (mut path, mut pp, mut tg, mut reps, mut worker) = (None, 512usize, 128usize, 3, false);
    while let Some(a) = args.next() {
        let mut num = |name: &str| -> usize {
            let v = args
                .next()
                .unwrap_or_else(|| panic!("{name} needs a value"));
            v.parse()
                .unwrap_or_else(|_| panic!("{name}: not a number: {v}"))
        };
        match a.as_str() {
            "--pp" => pp = num("--pp"),
            "--tg" => tg = num("--tg"),
            "--reps" => reps = num("--reps"),
            "--worker" => worker = true,
            _ => path = Some(a),
        }
    }
    let path = path.unwrap_or_else(|| {
        let home = std::env::var("HOME").expect("HOME");
        format!("{home}/.cache/ferrolm/models/SmolLM2-135M-Instruct.Q4_1.gguf")
    });
    let file = GgufFile::open(&path).expect("open model");
    let model = Model::load(&file).expect("load model");
    let n_vocab = model.cfg.n_vocab as u32;
    // Arbitrary but fixed ids, spread over the vocabulary.
    let tokens: Vec<u32> = (0..pp.max(1) as u32)
        .map(|i| (i * 7919 + 13) % n_vocab)
        .collect();
    fn run<F: FnOnce() + Send>(worker: bool, f: F) {
        if worker {
            rayon::scope(|_| f());
        } else {
            f();
        }
    }
    let threads = rayon::current_num_threads();
    println!("{path}\nthreads {threads}, worker {worker}");

    let mut pp_rates = Vec::new();
    let mut tg_rates = Vec::new();
    for _ in 0..reps {
        if pp > 0 {
            let mut s = Session::new(&model, pp + 1);
            let (t0, c0) = (Instant::now(), cpu_seconds());
            run(worker, || {
                s.eval(&tokens[..pp], Logits::Last).unwrap();
            });
            let cpu = (cpu_seconds() - c0) / threads as f64;
            pp_rates.push((pp as f64 / t0.elapsed().as_secs_f64(), pp as f64 / cpu));
        }
        if tg > 0 {
            let mut s = Session::new(&model, tg + 1);
            let (t0, c0) = (Instant::now(), cpu_seconds());
            run(worker, || {
                for i in 0..tg {
                    s.eval(&tokens[i % tokens.len()..][..1], Logits::Last)
                        .unwrap();
                }
            });
            let cpu = (cpu_seconds() - c0) / threads as f64;
            tg_rates.push((tg as f64 / t0.elapsed().as_secs_f64(), tg as f64 / cpu));
        }
    }
    let report = |name: &str, r: Vec<(f64, f64)>| {
        if r.is_empty() {
            return;
        }
        let (mut wall, mut cpu): (Vec<f64>, Vec<f64>) = r.into_iter().unzip();
        wall.sort_by(f64::total_cmp);
        cpu.sort_by(f64::total_cmp);
        println!(
            "{name}: wall best {:.1} tok/s, median {:.1} | cpu-normalised best {:.1}, median {:.1} ({} runs)",
            wall[wall.len() - 1],
            wall[wall.len() / 2],
            cpu[cpu.len() - 1],
            cpu[cpu.len() / 2],
            wall.len()
        );
    };
    report(&format!("pp{pp}"), pp_rates);
    report(&format!("tg{tg}"), tg_rates);
}
