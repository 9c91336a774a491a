//! `cuda-parity --time`: the prefill GEMM's throughput for every tile shape on the layer
//! shapes of SmolLM2-1.7B and Qwen3-8B, the figures `FERROLM_MMQ_TILE`'s default is picked
//! from.

use super::checks::{normal, poisoned};
use anyhow::Result;
use ferrolm_cuda::ops::{QuantMatrix, MMQ_TILES, Q8_1_BLOCK_BYTES};
use ferrolm_cuda::{CudaDevice, Kernels, Plan};
use ferrolm_gguf::GgmlType;
use rand::rngs::StdRng;

/// One weight matrix of a layer: `rows × cols`, `count` of them per layer.
pub(crate) struct Shape {
    pub model: &'static str,
    pub what: &'static str,
    pub rows: usize,
    pub cols: usize,
    pub count: usize,
}

pub(crate) const SHAPES: [Shape; 7] = [
    shape("smollm2-1.7b", "q k v o", 2048, 2048, 4),
    shape("smollm2-1.7b", "gate up", 8192, 2048, 2),
    shape("smollm2-1.7b", "down", 2048, 8192, 1),
    shape("qwen3-8b", "q o", 4096, 4096, 2),
    shape("qwen3-8b", "k v", 1024, 4096, 2),
    shape("qwen3-8b", "gate up", 12288, 4096, 2),
    shape("qwen3-8b", "down", 4096, 12288, 1),
];

const fn shape(
    model: &'static str,
    what: &'static str,
    rows: usize,
    cols: usize,
    count: usize,
) -> Shape {
    Shape {
        model,
        what,
        rows,
        cols,
        count,
    }
}

pub(crate) const TYPES: [GgmlType; 3] = [GgmlType::Q4K, GgmlType::Q6K, GgmlType::Q8_0];
/// Tokens per ubatch: the engine's default, and the largest llama.cpp's anchors use.
pub(crate) const TOKENS: [usize; 2] = [512, 2048];
const WARMUP: usize = 2;
const RUNS: usize = 7;

/// Median milliseconds of one launch (CUDA events around each of RUNS launches, after WARMUP).
pub(crate) fn median_ms(
    dev: &CudaDevice,
    mut launch: impl FnMut() -> ferrolm_cuda::Result<()>,
) -> Result<f64> {
    for _ in 0..WARMUP {
        launch()?;
    }
    let mut ms = Vec::with_capacity(RUNS);
    for _ in 0..RUNS {
        ms.push(dev.time_ms(&mut launch)?);
    }
    ms.sort_by(f64::total_cmp);
    Ok(ms[RUNS / 2])
}

pub(crate) fn tops(rows: usize, cols: usize, n: usize, ms: f64) -> f64 {
    2.0 * (rows * cols * n) as f64 / (ms * 1e-3) / 1e12
}

/// Prints one table of TOPS (2·rows·cols·n / median time) per format, shape, token count and
/// tile (and the default choice), then each model's GEMM time per layer by tile.
pub fn time_mmq(dev: &CudaDevice, k: &Kernels, plan: &Plan, rng: &mut StdRng) -> Result<()> {
    let ncols = MMQ_TILES.len() + 1;
    // ms[type][shape][tokens][tile, or the last: default]
    let mut ms = vec![vec![vec![vec![0f64; ncols]; TOKENS.len()]; SHAPES.len()]; TYPES.len()];
    let mut picked = vec![vec![vec![""; TOKENS.len()]; SHAPES.len()]; TYPES.len()];
    for (ti, &ty) in TYPES.iter().enumerate() {
        for (si, s) in SHAPES.iter().enumerate() {
            // 256 distinct quantized rows, repeated: speed does not depend on the values.
            let bytes = s.rows * s.cols / ty.block_elems() * ty.block_bytes();
            let wq = ferrolm_quant::quantize_to_vec(ty, &normal(rng, 256 * s.cols, 1.0))?;
            let host: Vec<u8> = wq.iter().copied().cycle().take(bytes).collect();
            let w = QuantMatrix::upload(dev, ty, s.rows, s.cols, &host)?;
            for (ni, &n) in TOKENS.iter().enumerate() {
                let xd = dev.upload(&normal(rng, n * s.cols, 1.0))?;
                let mut xq = dev.upload(&vec![0u8; n * s.cols / 32 * Q8_1_BLOCK_BYTES])?;
                k.quantize.q8_1(&xd, s.cols, &mut xq)?;
                let mut out = poisoned(dev, n * s.rows)?;
                let row = &mut ms[ti][si][ni];
                let how = plan.gemm(ty, s.rows, s.cols, n);
                let mut scratch = dev.zeros::<f32>(how.scratch(n, s.rows).max(1))?;
                for (tile, slot) in row.iter_mut().enumerate().take(MMQ_TILES.len()) {
                    let how = how.clone().with_tile(tile);
                    *slot = median_ms(dev, || {
                        k.mmq.matmul(&how, &w, &xq, n, &mut out, Some(&mut scratch))
                    })?;
                }
                ms[ti][si][ni][ncols - 1] = median_ms(dev, || {
                    k.mmq.matmul(&how, &w, &xq, n, &mut out, Some(&mut scratch))
                })?;
                picked[ti][si][ni] = MMQ_TILES[plan.tile(ty, s.rows, s.cols, n)].name;
            }
        }
    }

    let names: Vec<&str> = MMQ_TILES.iter().map(|t| t.name).collect();
    println!(
        "\nmmq TOPS (2·rows·cols·n / median of {RUNS} launches after {WARMUP}; Q8_1 activations; \
         default = FERROLM_MMQ_TILE or auto):\n"
    );
    println!(
        "| format | model | matrix | rows×cols | n | {} | default |",
        names.join(" | ")
    );
    println!("|---|---|---|---|---|{}---|", "---|".repeat(names.len()));
    for (ti, ty) in TYPES.iter().enumerate() {
        for (si, s) in SHAPES.iter().enumerate() {
            for (ni, &n) in TOKENS.iter().enumerate() {
                let cells: Vec<String> = (0..MMQ_TILES.len())
                    .map(|t| format!("{:.0}", tops(s.rows, s.cols, n, ms[ti][si][ni][t])))
                    .collect();
                let def = tops(s.rows, s.cols, n, ms[ti][si][ni][ncols - 1]);
                println!(
                    "| {ty} | {} | {} | {}×{} | {n} | {} | {def:.0} ({}) |",
                    s.model,
                    s.what,
                    s.rows,
                    s.cols,
                    cells.join(" | "),
                    picked[ti][si][ni]
                );
            }
        }
    }

    println!("\nmmq time per layer (Σ count × median ms over the layer's matrices), ms (TOPS):\n");
    println!("| format | model | n | {} | default |", names.join(" | "));
    println!("|---|---|---|{}---|", "---|".repeat(names.len()));
    for (ti, ty) in TYPES.iter().enumerate() {
        for model in ["smollm2-1.7b", "qwen3-8b"] {
            for (ni, &n) in TOKENS.iter().enumerate() {
                let of_model = || SHAPES.iter().enumerate().filter(|(_, s)| s.model == model);
                let ops: f64 = of_model()
                    .map(|(_, s)| 2.0 * (s.count * s.rows * s.cols * n) as f64)
                    .sum();
                let cells: Vec<String> = (0..ncols)
                    .map(|t| {
                        let total: f64 = of_model()
                            .map(|(si, s)| s.count as f64 * ms[ti][si][ni][t])
                            .sum();
                        format!("{total:.3} ({:.0})", ops / (total * 1e-3) / 1e12)
                    })
                    .collect();
                println!("| {ty} | {model} | {n} | {} |", cells.join(" | "));
            }
        }
    }
    Ok(())
}
