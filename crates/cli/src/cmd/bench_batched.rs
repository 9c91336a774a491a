//! `ferrolm bench -npp … -ntg … -npl …`: batched throughput, measured as llama.cpp's
//! `llama-batched-bench` measures it, with its table and its JSON lines.
//!
//! For each (PP, TG, B): B sequences (each its own KV cache of PP + TG positions, made before
//! the clock starts) prefill PP tokens each (`-pps`: one sequence prefills the shared prompt
//! and the others copy its cache), packed into passes of at most `--ub` rows, with logits for
//! the batch's last token only; then TG steps of B tokens, one per sequence, logits for all.
//! Every token is id 0, as llama-batched-bench feeds, unless `--distinct-tokens` gives each
//! sequence tokens of its own (a seeded hash of sequence and position): identical sequences
//! route every token of an MoE to the same experts, which a server's requests never do, so
//! that is the figure to hold a server's throughput against. `N_KV` is the cache positions the test
//! fills (B·(PP + TG), or PP + B·TG shared); a test whose `N_KV` exceeds `-c` is skipped, as
//! llama-batched-bench skips what exceeds its context.

use super::bench::BenchArgs;
use anyhow::{bail, ensure, Context, Result};
use clap::{Args, ValueEnum};
use ferrolm_engine::{Cache, Logits, Model, SeqInput};
use ferrolm_gguf::GgufFile;
use serde::Serialize;
use std::time::Instant;

/// llama-batched-bench's `--output-format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BatchedFormat {
    Md,
    Jsonl,
}

/// The batched mode's flags (llama-batched-bench's names; `-npp` is read as `--npp`).
#[derive(Args, Debug)]
pub struct BatchedArgs {
    /// Batched mode: prompt tokens per sequence (PP), comma-separated.
    #[arg(long = "npp", value_name = "LIST")]
    pub npp: Option<String>,
    /// Batched mode: tokens generated per sequence (TG), comma-separated.
    #[arg(long = "ntg", value_name = "LIST")]
    pub ntg: Option<String>,
    /// Batched mode: sequences decoded together (B), comma-separated.
    #[arg(long = "npl", value_name = "LIST")]
    pub npl: Option<String>,
    /// Batched mode: one shared prompt of PP tokens, prefilled once and copied to every
    /// sequence (llama-batched-bench's `-pps`).
    #[arg(long = "pps")]
    pub pps: bool,
    /// Batched mode: each sequence's prompt and generated tokens its own (seeded), instead of
    /// token 0 everywhere as llama-batched-bench feeds; an MoE's sequences then use different
    /// experts, as a server's requests do.
    #[arg(long = "distinct-tokens")]
    pub distinct_tokens: bool,
    /// Batched mode's report: llama-batched-bench's table (`md`) or JSON lines (`jsonl`).
    #[arg(long = "output-format", value_enum, default_value_t = BatchedFormat::Md)]
    pub output_format: BatchedFormat,
}

impl BatchedArgs {
    /// Whether any batched-mode list was given.
    pub fn requested(&self) -> bool {
        self.npp.is_some() || self.ntg.is_some() || self.npl.is_some()
    }
}

/// One line of llama-batched-bench's JSON output, field for field.
#[derive(Clone, Copy, Serialize)]
struct Line {
    n_kv_max: usize,
    n_batch: usize,
    n_ubatch: usize,
    flash_attn: u32,
    is_pp_shared: u32,
    n_gpu_layers: i32,
    n_threads: usize,
    n_threads_batch: usize,
    pp: usize,
    tg: usize,
    pl: usize,
    n_kv: usize,
    t_pp: f64,
    speed_pp: f64,
    t_tg: f64,
    speed_tg: f64,
    t: f64,
    speed: f64,
}

/// A positive count list such as `1,8,32`; an error names the flag.
fn parse_list(text: &str, flag: &str) -> Result<Vec<usize>> {
    let v = text
        .split(',')
        .map(|s| {
            s.trim()
                .parse::<usize>()
                .ok()
                .filter(|&n| n > 0)
                .with_context(|| format!("{flag}: `{s}` is not a positive count"))
        })
        .collect::<Result<Vec<_>>>()?;
    ensure!(!v.is_empty(), "{flag}: no values given");
    Ok(v)
}

pub fn run(args: &BenchArgs) -> Result<()> {
    let b = &args.batched;
    if let super::bench::OutputFormat::Json = args.output {
        bail!("-o json is llama-bench's report; batched mode writes JSON lines with --output-format jsonl");
    }
    let npp = parse_list(b.npp.as_deref().unwrap_or("128"), "-npp")?;
    let ntg = parse_list(b.ntg.as_deref().unwrap_or("128"), "-ntg")?;
    let npl = parse_list(b.npl.as_deref().unwrap_or("1"), "-npl")?;
    ensure!(args.ubatch >= 1, "--ubatch-size must be at least 1");
    let path = args.model.prepare()?;
    let file = GgufFile::open(&path)?;
    let model = args.model.load(&file)?;
    let n_kv_max = args.model.n_ctx(model.cfg.n_ctx);
    let base = Line {
        n_kv_max,
        n_batch: args.ubatch,
        n_ubatch: args.ubatch,
        flash_attn: 1, // ferrolm's attention is always the fused (flash) kind
        is_pp_shared: b.pps as u32,
        n_gpu_layers: args.model.n_gpu_layers,
        n_threads: rayon::current_num_threads(),
        n_threads_batch: rayon::current_num_threads(),
        pp: 0,
        tg: 0,
        pl: 0,
        n_kv: 0,
        t_pp: 0.0,
        speed_pp: 0.0,
        t_tg: 0.0,
        speed_tg: 0.0,
        t: 0.0,
        speed: 0.0,
    };
    let bench = Bench {
        model: &model,
        args,
        shared: b.pps,
        distinct: b.distinct_tokens,
    };
    bench.warm_up()?;
    if b.output_format == BatchedFormat::Md {
        println!();
        println!(
            "n_kv_max = {n_kv_max}, n_ubatch = {}, flash_attn = 1, is_pp_shared = {}, n_gpu_layers = {}, n_threads = {}, device = {}",
            args.ubatch, base.is_pp_shared, base.n_gpu_layers, base.n_threads, model.device_name()
        );
        println!();
        println!(
            "|{:>6} | {:>6} | {:>4} | {:>6} | {:>8} | {:>8} | {:>8} | {:>8} | {:>8} | {:>8} |",
            "PP", "TG", "B", "N_KV", "T_PP s", "S_PP t/s", "T_TG s", "S_TG t/s", "T s", "S t/s"
        );
        println!(
            "|{:>6}-|-{:>6}-|-{:>4}-|-{:>6}-|-{:>8}-|-{:>8}-|-{:>8}-|-{:>8}-|-{:>8}-|-{:>8}-|",
            "------",
            "------",
            "----",
            "------",
            "--------",
            "--------",
            "--------",
            "--------",
            "--------",
            "--------"
        );
    }
    for &pp in &npp {
        for &tg in &ntg {
            for &pl in &npl {
                let n_kv = if b.pps { pp + pl * tg } else { pl * (pp + tg) };
                if n_kv > n_kv_max {
                    eprintln!(
                        "ferrolm: skipping PP {pp}, TG {tg}, B {pl}: N_KV {n_kv} exceeds -c {n_kv_max}"
                    );
                    continue;
                }
                let (t_pp, t_tg) = bench.one(pp, tg, pl)?;
                let t = t_pp + t_tg;
                let l = Line {
                    pp,
                    tg,
                    pl,
                    n_kv,
                    t_pp,
                    speed_pp: if b.pps { pp } else { pl * pp } as f64 / t_pp,
                    t_tg,
                    speed_tg: (pl * tg) as f64 / t_tg,
                    t,
                    speed: n_kv as f64 / t,
                    ..base
                };
                match b.output_format {
                    BatchedFormat::Jsonl => println!("{}", serde_json::to_string(&l)?),
                    BatchedFormat::Md => println!(
                        "|{:>6} | {:>6} | {:>4} | {:>6} | {:>8.3} | {:>8.2} | {:>8.3} | {:>8.2} | {:>8.3} | {:>8.2} |",
                        pp, tg, pl, n_kv, t_pp, l.speed_pp, t_tg, l.speed_tg, t, l.speed
                    ),
                }
            }
        }
    }
    Ok(())
}

struct Bench<'m, 'a> {
    model: &'m Model<'a>,
    args: &'m BenchArgs,
    shared: bool,
    /// `--distinct-tokens`.
    distinct: bool,
}

/// A token id of sequence `seq` at position `pos` below `n_vocab`: SplitMix64 of the pair, so
/// every sequence's tokens differ and every run's are the same.
fn distinct_token(seq: usize, pos: usize, n_vocab: usize) -> u32 {
    let mut z = ((seq as u64) << 32 | pos as u64).wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    ((z ^ (z >> 31)) % n_vocab as u64) as u32
}

impl Bench<'_, '_> {
    /// llama-batched-bench's warm-up: 16 tokens of one sequence.
    fn warm_up(&self) -> Result<()> {
        let mut cache = self.model.new_cache(16, self.args.model.kv_type())?;
        self.model.forward_batch(&mut [SeqInput {
            cache: &mut cache,
            tokens: &[0; 16],
            pos0: 0,
            logits: None,
        }])?;
        Ok(())
    }

    /// One test: the seconds of its prefill and of its generation.
    fn one(&self, pp: usize, tg: usize, pl: usize) -> Result<(f64, f64)> {
        let n_ctx = pp + tg;
        self.args.model.check_fits(self.model, n_ctx, pl)?;
        // On a GPU the sequences share one paged pool, as llama-batched-bench's sequences
        // share its context (a shared prompt's blocks are then shared, not copied).
        if let Some(blocks) = self.model.kv_blocks_for(pl, n_ctx) {
            (self.model).reserve_kv(blocks, n_ctx, self.args.model.kv_type())?;
        }
        // The caches are made before the clock starts, as llama-batched-bench's context is.
        let mut caches = (0..pl)
            .map(|_| self.model.new_cache(n_ctx, self.args.model.kv_type()))
            .collect::<Result<Vec<Cache>, _>>()?;
        let token = |seq: usize, pos: usize| match self.distinct {
            true => distinct_token(seq, pos, self.model.cfg.n_vocab),
            false => 0,
        };
        // A shared prompt is sequence 0's.
        let prompts: Vec<Vec<u32>> = (0..if self.shared { 1 } else { pl })
            .map(|s| (0..pp).map(|p| token(s, p)).collect())
            .collect();
        let t0 = Instant::now();
        if self.shared {
            let (first, rest) = caches.split_first_mut().expect("pl >= 1");
            self.prefill(std::slice::from_mut(first), &prompts)?;
            for c in rest {
                self.model.copy_cache_prefix(first, c, pp)?;
            }
        } else {
            self.prefill(&mut caches, &prompts)?;
        }
        let t_pp = t0.elapsed().as_secs_f64();
        ferrolm_engine::cuda_profile::reset();
        // Every step's tokens before the clock starts.
        let steps: Vec<Vec<u32>> = (0..tg)
            .map(|i| (0..pl).map(|s| token(s, pp + i)).collect())
            .collect();
        let t1 = Instant::now();
        for (i, step) in steps.iter().enumerate() {
            let mut seqs: Vec<SeqInput<'_>> = caches
                .iter_mut()
                .zip(step)
                .map(|(cache, t)| SeqInput {
                    cache,
                    tokens: std::slice::from_ref(t),
                    pos0: pp + i,
                    logits: Some(Logits::Last),
                })
                .collect();
            self.model.forward_batch_logits(&mut seqs)?;
        }
        let t_tg = t1.elapsed().as_secs_f64();
        if ferrolm_engine::cuda_profile::enabled() && tg > 0 {
            // FERROLM_CUDA_PROFILE: device time per stage of one TG step, beside its wall time.
            eprintln!(
                "\nstages of one TG step (B {pl}, graphs off; wall {:.3} ms a step):\n{}",
                1e3 * t_tg / tg as f64,
                ferrolm_engine::cuda_profile::report(tg)
            );
        }
        Ok((t_pp, t_tg))
    }

    /// Cache `s`'s `prompts[s]` (all of one length), the sequences' tokens one after another
    /// in passes of at most `--ub` rows (a sequence may span two passes); logits for the last
    /// row only.
    fn prefill(&self, caches: &mut [Cache], prompts: &[Vec<u32>]) -> Result<()> {
        let (pp, ub) = (prompts[0].len(), self.args.ubatch);
        let total = caches.len() * pp;
        let mut next = 0; // the first row of the next pass, over all sequences' tokens
        while next < total {
            let end = (next + ub).min(total);
            let mut seqs = Vec::new();
            for (s, cache) in caches.iter_mut().enumerate() {
                let (lo, hi) = ((s * pp).max(next), ((s + 1) * pp).min(end));
                if lo >= hi {
                    continue;
                }
                let (from, to) = (lo - s * pp, hi - s * pp);
                seqs.push(SeqInput {
                    cache,
                    tokens: &prompts[s][from..to],
                    pos0: from,
                    logits: (hi == total).then_some(Logits::Last),
                });
            }
            self.model.forward_batch_logits(&mut seqs)?;
            next = end;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{distinct_token, parse_list};

    #[test]
    fn distinct_tokens_differ_between_sequences_and_stay_in_the_vocabulary() {
        let first: Vec<u32> = (0..64).map(|s| distinct_token(s, 128, 50_280)).collect();
        let mut unique = first.clone();
        unique.sort_unstable();
        unique.dedup();
        assert!(unique.len() > 60, "{first:?}");
        assert!((0..1000).all(|p| distinct_token(3, p, 7) < 7));
        assert_eq!(distinct_token(5, 9, 1000), distinct_token(5, 9, 1000));
    }

    #[test]
    fn lists_name_their_flag() {
        assert_eq!(parse_list("1,8, 32", "-npl").unwrap(), vec![1, 8, 32]);
        for bad in ["", "1,,2", "0", "x", "-1"] {
            let e = parse_list(bad, "-npl").unwrap_err().to_string();
            assert!(e.starts_with("-npl:"), "{bad}: {e}");
        }
    }
}
