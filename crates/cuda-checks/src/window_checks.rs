//! Sliding-window attention checks of `cuda-parity` (gemma3's and gpt-oss's windowed blocks):
//! every kernel the plan can pick, given a window, against the CPU's attention over the same
//! window (`ferrolm_cpu::attention`, a query at p sees keys p - window < k <= p). The shapes put
//! queries both inside the window's reach (prompt rows from 0 whose window still starts at key
//! 0) and past it (decode at depths several windows deep, prefill rows after a long prefix), at
//! windows of 1 (each row sees only itself), shorter than a kernel's tile, and longer than the
//! context (no effect). The same contracts and reference as the unwindowed rows
//! ([`super::attn_checks`], [`super::attn_rows`], [`super::kv_checks`]).

use super::attn_checks::{attn, Path, DECODES, PREFILLS};
use super::attn_rows::{batch, Seq};
use super::kv_checks::Quant;
use super::Row;
use anyhow::Result;
use ferrolm_cpu::KvElem;
use ferrolm_cuda::ops::{KvFormat, PrefillKernel, MMA_HEAD_DIMS};
use ferrolm_cuda::{CudaDevice, Kernels, Plan};
use rand::rngs::StdRng;

pub fn all(dev: &CudaDevice, k: &Kernels, plan: &Plan, rng: &mut StdRng) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    // Decode, split and by KV group: (heads, n_ctx, cached + new positions, query rows, window).
    for (shape, n_ctx, n_pos, n_q, window) in [
        ((32, 8, 128), 4096, 3000, 3, 1024), // gemma3-4b's window, three windows deep
        ((8, 1, 256), 2048, 1500, 1, 512),   // gemma3-1b's heads and window
        ((16, 8, 64), 8192, 8000, 1, 128),   // gpt-oss's window at depth: one split's worth
        ((8, 4, 80), 1024, 1000, 2, 16),     // a window shorter than a group tile
        ((4, 2, 64), 128, 100, 1, 1),        // only the query's own key
        ((16, 8, 64), 300, 77, 2, 1024),     // a window past the context: all keys
    ] {
        rows.extend(attn(
            dev,
            k,
            plan,
            rng,
            shape,
            n_ctx,
            n_pos,
            n_q,
            &DECODES,
            Some(window),
        )?);
    }
    // Prefill on each kernel: prompts from 0 (early rows inside the window, later ones past it),
    // ubatches after a prefix, windows from 1 to longer than a tensor-core block's keys.
    for (shape, n_ctx, n_pos, n_q, window) in [
        ((9, 3, 64), 128, 77, 77, 16),
        ((4, 2, 64), 128, 77, 77, 1),
        ((32, 8, 128), 1024, 812, 512, 200),
        ((8, 2, 64), 640, 600, 300, 100),
        ((16, 8, 128), 2048, 2048, 2048, 1024),
        ((8, 2, 80), 640, 600, 300, 70),
        ((8, 2, 256), 640, 600, 300, 100),
        ((8, 1, 256), 1024, 1024, 1024, 512),
    ] {
        let d = shape.2;
        let paths: Vec<Path> = PREFILLS
            .into_iter()
            .filter(|p| *p != Path::Prefill(PrefillKernel::Mma) || MMA_HEAD_DIMS.contains(&d))
            .collect();
        rows.extend(attn(
            dev,
            k,
            plan,
            rng,
            shape,
            n_ctx,
            n_pos,
            n_q,
            &paths,
            Some(window),
        )?);
    }
    // ggml's arithmetic for short ubatches.
    let f16ref = [Path::Prefill(PrefillKernel::F16Ref)];
    for (shape, n_ctx, n_pos, n_q, window) in [
        ((4, 2, 64), 128, 37, 37, 8),
        ((8, 2, 256), 512, 240, 40, 100),
    ] {
        rows.extend(attn(
            dev,
            k,
            plan,
            rng,
            shape,
            n_ctx,
            n_pos,
            n_q,
            &f16ref,
            Some(window),
        )?);
    }
    // The batched decode rows: sequences of 1 to 3001 keys (some inside the window, some
    // several windows deep) in one launch.
    let seqs = [
        (64, 0, 1),
        (4096, 3000, 1),
        (256, 37, 2),
        (1024, 1022, 1),
        (512, 130, 1),
    ]
    .map(|(n_ctx, cached, rows)| Seq {
        n_ctx,
        cached,
        rows,
    });
    for (shape, window) in [((8, 1, 256), 512), ((9, 3, 64), 100), ((16, 8, 128), 1024)] {
        rows.extend(batch(dev, k, plan, rng, shape, &seqs, Some(window).into())?);
    }
    // Quantized caches: decode past the window, the scalar prefill from 0.
    for (format, elem) in [
        (KvFormat::Q8_0, KvElem::Q8_0),
        (KvFormat::Q4_0, KvElem::Q4_0),
    ] {
        let q = Quant {
            format,
            elem,
            window: Some(100),
        };
        rows.extend(q.check(dev, k, plan, rng, (32, 8, 128), 1024, 1000, 3)?);
        rows.extend(q.check(dev, k, plan, rng, (9, 3, 64), 128, 77, 77)?);
    }
    Ok(rows)
}
