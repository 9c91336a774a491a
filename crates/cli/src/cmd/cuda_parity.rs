//! `ferrolm cuda-parity`: every CUDA op against its CPU counterpart on fresh random data, as a
//! table of errors and contracts; the checks themselves live in `ferrolm-cuda-checks`.

use anyhow::Result;
use clap::Args;

#[derive(Args, Debug)]
pub struct CudaParityArgs {
    /// CUDA device ordinal.
    #[arg(long, default_value_t = 0)]
    pub device: usize,
    /// Seed of the random data (default: fresh each run; the seed used is printed).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Also time the quantized mat-vec, the GEMM, the MoE GEMM, the fused MoE decode and prefill
    /// attention (preliminary figures, not a benchmark).
    #[arg(long)]
    pub time: bool,
}

pub fn run(args: CudaParityArgs) -> Result<()> {
    ferrolm_cuda_checks::run(&ferrolm_cuda_checks::Options {
        device: args.device,
        seed: args.seed,
        time: args.time,
    })
}
