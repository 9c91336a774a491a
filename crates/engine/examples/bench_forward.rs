//! Whole-model throughput in the style of llama-bench: prefill of `pp` tokens in one batch
//! (logits of the last row only) and `tg` single-token decode steps from an empty context.
//!
//! `cargo run --release -p ferrolm-engine --example bench_forward -- [MODEL] [--pp N]
//! [--tg N] [--reps N] [--worker]`. Threads come from `RAYON_NUM_THREADS` (default: all cores).
//! `--worker` runs each eval on a rayon worker thread (`rayon::scope`), so the parallel loops
//! inside it do not each pay a wake-up of the pool from outside.

use ferrolm_engine::{Logits, Model, Session};
use ferrolm_gguf::GgufFile;
use std::time::Instant;

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
    println!(
        "{path}\nthreads {}, worker {worker}",
        rayon::current_num_threads()
    );

    let mut pp_rates = Vec::new();
    let mut tg_rates = Vec::new();
    for _ in 0..reps {
        if pp > 0 {
            let mut s = Session::new(&model, pp + 1);
            let t0 = Instant::now();
            run(worker, || {
                s.eval(&tokens[..pp], Logits::Last).unwrap();
            });
            pp_rates.push(pp as f64 / t0.elapsed().as_secs_f64());
        }
        if tg > 0 {
            let mut s = Session::new(&model, tg + 1);
            let t0 = Instant::now();
            run(worker, || {
                for i in 0..tg {
                    s.eval(&tokens[i % tokens.len()..][..1], Logits::Last)
                        .unwrap();
                }
            });
            tg_rates.push(tg as f64 / t0.elapsed().as_secs_f64());
        }
    }
    let report = |name: &str, mut r: Vec<f64>| {
        if r.is_empty() {
            return;
        }
        r.sort_by(f64::total_cmp);
        println!(
            "{name}: best {:.1} tok/s, median {:.1} tok/s ({} runs)",
            r[r.len() - 1],
            r[r.len() / 2],
            r.len()
        );
    };
    report(&format!("pp{pp}"), pp_rates);
    report(&format!("tg{tg}"), tg_rates);
}
