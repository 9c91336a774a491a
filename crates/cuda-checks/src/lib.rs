//! Kernel checks: every CUDA op against its CPU counterpart on fresh random data, as a table of
//! errors and contracts. `ferrolm cuda-parity` is a thin command over [`run`]; run it on the GPU
//! machine before any speed claim: it fails when an op breaks its contract.
//!
//! This crate calls the launchers of `ferrolm_cuda::ops` directly (the cuda crate's kernel-check
//! surface) and the CPU crate's functions as the reference; nothing in the engine depends on it.
//!
//! Errors are measured elementwise as `|cuda - ref|`, and relative to a scale that fits the
//! op: `|ref|` for elementwise ops, the pair's norm for RoPE, and `Σ|x·w|` (the sum of the
//! magnitudes of the products) for dot products, whose rounding error grows with that sum and
//! not with the result, which may cancel to near zero.

mod aot;
mod attn_checks;
mod attn_rope;
mod attn_rows;
mod checks;
mod elementwise;
mod f16_copies;
mod f32kv_checks;
mod gemm_f16;
mod greedy;
mod kv_checks;
mod l2_ahead;
mod mmq;
mod mmq_time;
mod mmvq_bias;
mod mmvq_mma;
mod mmvq_triple;
mod moe;
mod moe_decode;
mod norm_exact;
mod norm_matvec;
mod norm_route;
mod rope_store;
mod softmax_checks;
mod window_checks;

use anyhow::{bail, Context, Result};
use ferrolm_cuda::{CudaDevice, Plan};
use rand::SeedableRng;
use std::time::Instant;

/// What [`run`] checks, and where.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// CUDA device ordinal.
    pub device: usize,
    /// Seed of the random data (`None`: fresh each run; the seed used is printed).
    pub seed: Option<u64>,
    /// Also time the quantized mat-vec, the GEMM, the MoE GEMM, the fused MoE decode and
    /// prefill attention (preliminary figures, not a benchmark).
    pub time: bool,
}

/// What an op promises about its distance from the reference.
#[derive(Clone, Copy, Debug)]
pub enum Contract {
    /// Same bits.
    Exact,
    /// `max rel ≤ bound`, with the reason the bound is not zero.
    Rel(f64, &'static str),
}

impl Contract {
    fn describe(&self) -> String {
        match self {
            Contract::Exact => "bit-identical".into(),
            // 2.4e-7 stays 2.4e-7, 1e-5 does not become 1.0e-5.
            Contract::Rel(b, why) => {
                format!("≤ {} rel, {why}", format!("{b:.1e}").replace(".0e", "e"))
            }
        }
    }
}

/// One line of the table.
pub struct Row {
    pub op: String,
    pub shape: String,
    pub reference: &'static str,
    pub max_abs: f64,
    pub max_rel: f64,
    pub contract: Contract,
    /// Every element finite and written; for `Exact`, also the same bits.
    pub clean: bool,
}

impl Row {
    fn pass(&self) -> bool {
        self.clean
            && match self.contract {
                Contract::Exact => self.max_abs == 0.0,
                Contract::Rel(bound, _) => self.max_rel <= bound,
            }
    }
}

/// Max abs and max rel of `got` against `want`, `scale(i)` the magnitude element `i` is
/// measured against; `clean` is false when any output is not finite (outputs start as NaN, so
/// an element the kernel never wrote shows here).
pub fn compare(got: &[f32], want: &[f32], scale: impl Fn(usize) -> f64) -> (f64, f64, bool) {
    assert_eq!(got.len(), want.len());
    let (mut max_abs, mut max_rel, mut clean) = (0f64, 0f64, true);
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        if !g.is_finite() {
            clean = false;
            continue;
        }
        let d = (g as f64 - w as f64).abs();
        max_abs = max_abs.max(d);
        max_rel = max_rel.max(d / scale(i).max(f32::MIN_POSITIVE as f64));
    }
    (max_abs, max_rel, clean)
}

/// Runs every check on `opts.device`, prints the table to stdout (and progress, the seed and the
/// kernel images used to stderr); an error when the device cannot run them or an op breaks its
/// contract.
pub fn run(opts: &Options) -> Result<()> {
    let dev = CudaDevice::new(opts.device).context("cuda-parity")?;
    eprintln!("device: {}", dev.describe());
    let t = Instant::now();
    // The kernels and choices the backend would make under this environment's switches.
    let (k, plan) = Plan::load(&dev)?;
    ferrolm_cuda::profile::set_enabled(plan.profile());
    eprintln!(
        "kernels ready in {:.1} s (embedded, NVRTC, or the cubin cache in {})",
        t.elapsed().as_secs_f64(),
        ferrolm_cuda::kernel_cache_dir().map_or("(none)".into(), |d| d.display().to_string())
    );
    aot::check_origins(&dev)?;
    let seed = opts.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    });
    eprintln!("seed: {seed}");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);

    let rows = checks::all(&dev, &k, &plan, &mut rng)?;
    println!("| op | shape | reference | max abs | max rel | contract | result |");
    println!("|---|---|---|---|---|---|---|");
    for r in &rows {
        println!(
            "| {} | {} | {} | {:.2e} | {:.2e} | {} | {} |",
            r.op,
            r.shape,
            r.reference,
            r.max_abs,
            r.max_rel,
            r.contract.describe(),
            if r.pass() { "PASS" } else { "FAIL" }
        );
    }
    if opts.time {
        checks::time_mmvq(&dev, &k, &mut rng)?;
        gemm_f16::time_gemm_f16(&dev, &k, &plan, &mut rng)?;
        mmq_time::time_mmq(&dev, &k, &plan, &mut rng)?;
        moe::time_moe(&dev, &k, &plan, &mut rng)?;
        moe_decode::time_decode(&dev, &k, &plan, &mut rng)?;
        attn_checks::time_prefill(&dev, &k, &mut rng)?;
    }
    let failed = rows.iter().filter(|r| !r.pass()).count();
    if failed > 0 {
        bail!("{failed} of {} CUDA ops broke their contract", rows.len());
    }
    eprintln!("all {} CUDA ops within contract", rows.len());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unwritten_outputs_and_contracts_decide_pass() {
        let want = [1.0f32, -2.0, 4.0];
        let (abs, rel, clean) = compare(&[1.0, -2.0, 4.0], &want, |i| want[i].abs() as f64);
        assert_eq!((abs, rel, clean), (0.0, 0.0, true));
        let (_, _, clean) = compare(&[1.0, f32::NAN, 4.0], &want, |_| 1.0);
        assert!(!clean, "a NaN (an element never written) is never clean");
        let (abs, rel, _) = compare(&[1.0, -2.0, 4.5], &want, |i| want[i].abs() as f64);
        assert_eq!((abs, rel), (0.5, 0.125));
        let r = |max_abs, max_rel, contract| Row {
            op: String::new(),
            shape: String::new(),
            reference: "",
            max_abs,
            max_rel,
            contract,
            clean: true,
        };
        assert!(r(0.0, 0.0, Contract::Exact).pass());
        assert!(!r(1e-30, 1e-30, Contract::Exact).pass());
        assert!(r(1.0, 1e-6, Contract::Rel(1e-5, "")).pass());
        assert!(!r(1.0, 2e-5, Contract::Rel(1e-5, "")).pass());
    }
}
