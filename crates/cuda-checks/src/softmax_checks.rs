//! `cuda-parity` checks of what the attention kernels take besides keys and values: a factor on
//! `q·k` other than `1 / sqrt(head size)` (deepseek2's `kq_scale`, also at its key head of 192) and gpt-oss's attention sinks
//! (with and without its sliding window; decode with one split and with several, where the sink
//! joins once, in the combine). Every kernel the plan can
//! pick runs it against the CPU's attention with the same factor, under the contract of the
//! kernel it extends ([`super::attn_checks`]'s rows: the same reference, the same bounds).

use super::attn_checks::{attn_with, Path, Softmax, DECODES, PREFILLS};
use super::attn_rows::{batch, Seq};
use super::Row;
use anyhow::Result;
use ferrolm_cuda::ops::PrefillKernel;
use ferrolm_cuda::{CudaDevice, Kernels, Plan};
use rand::rngs::StdRng;

/// The four prefills: ggml's arithmetic is the CPU's for ubatches under 64 rows only (the
/// reference of its rows), so the cases with it are shorter.
const ALL_PREFILLS: [Path; 4] = [
    PREFILLS[0],
    PREFILLS[1],
    PREFILLS[2],
    Path::Prefill(PrefillKernel::F16Ref),
];

/// The batched rows' sequences: 1 to 3001 keys, several splits.
fn seqs() -> [Seq; 3] {
    [(64, 0, 1), (4096, 3000, 1), (256, 37, 2)].map(|(n_ctx, cached, rows)| Seq {
        n_ctx,
        cached,
        rows,
    })
}

/// (query heads, KV heads, head size), cache size, cached + new positions, query rows.
type Case = ((usize, usize, usize), usize, usize, usize);

/// Runs `paths` on each case over `sm`.
#[allow(clippy::too_many_arguments)]
fn each(
    dev: &CudaDevice,
    k: &Kernels,
    plan: &Plan,
    rng: &mut StdRng,
    cases: &[Case],
    paths: &[Path],
    sm: Softmax,
    rows: &mut Vec<Row>,
) -> Result<()> {
    for &(shape, n_ctx, n_pos, n_q) in cases {
        rows.extend(attn_with(
            dev, k, plan, rng, shape, n_ctx, n_pos, n_q, paths, sm,
        )?);
    }
    Ok(())
}

pub fn all(dev: &CudaDevice, k: &Kernels, plan: &Plan, rng: &mut StdRng) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    // deepseek2-lite's factor (YaRN's mscale² / sqrt(192)) at other head sizes: decode at depth,
    // a prompt from 0 and a ubatch after a prefix.
    let scaled = Softmax {
        kq_scale: Some(0.1147),
        ..Softmax::default()
    };
    let decode = [((16, 4, 128), 1024, 1000, 3), ((8, 8, 64), 4096, 4000, 1)];
    each(dev, k, plan, rng, &decode, &DECODES, scaled, &mut rows)?;
    // ggml's arithmetic (F16Ref) is the CPU's for ubatches under 64 rows only: the 77-row
    // prompt on the other three, 37 rows from 0 and 40 after a prefix on all four.
    let prefill = [((9, 3, 64), 128, 77, 77)];
    each(dev, k, plan, rng, &prefill, &PREFILLS, scaled, &mut rows)?;
    let prefill = [((9, 3, 64), 128, 37, 37), ((8, 2, 128), 640, 600, 40)];
    each(
        dev,
        k,
        plan,
        rng,
        &prefill,
        &ALL_PREFILLS,
        scaled,
        &mut rows,
    )?;
    rows.extend(batch(dev, k, plan, rng, (8, 2, 128), &seqs(), scaled)?);
    // deepseek2-lite's attention: 16 heads, each its own KV head, keys of 192 (values padded to
    // it), its factor; every kernel the plan picks at 192 (the scalar prefill for long ubatches).
    let lite = [((16, 16, 192), 4096, 4000, 1), ((16, 16, 192), 256, 30, 2)];
    each(dev, k, plan, rng, &lite, &DECODES, scaled, &mut rows)?;
    let prefill: Vec<Path> = PREFILLS
        .into_iter()
        .filter(|p| *p != Path::Prefill(PrefillKernel::Mma))
        .collect();
    let lite = [((16, 16, 192), 512, 300, 300)];
    each(dev, k, plan, rng, &lite, &prefill, scaled, &mut rows)?;
    let lite = [((16, 16, 192), 512, 237, 37)];
    each(
        dev,
        k,
        plan,
        rng,
        &lite,
        &ALL_PREFILLS[2..],
        scaled,
        &mut rows,
    )?;
    rows.extend(batch(dev, k, plan, rng, (16, 16, 192), &seqs(), scaled)?);

    // Sinks at gpt-oss's heads (64 over 8 KV heads of 64; its window of 128) and at others:
    // decode from a few keys (one split) to 8000 (several), prefill from 0 and after a prefix,
    // the batched rows.
    for window in [None, Some(128)] {
        let sinks = Softmax {
            window,
            sinks: true,
            kq_scale: None,
        };
        let decode = [
            ((64, 8, 64), 64, 20, 1),
            ((64, 8, 64), 8192, 8000, 1),
            ((16, 4, 128), 1024, 1000, 3),
            ((8, 8, 80), 640, 555, 2),
        ];
        each(dev, k, plan, rng, &decode, &DECODES, sinks, &mut rows)?;
        let prefill = [((64, 8, 64), 256, 77, 77), ((16, 2, 64), 640, 600, 300)];
        each(dev, k, plan, rng, &prefill, &PREFILLS, sinks, &mut rows)?;
        let short = [((64, 8, 64), 256, 37, 37), ((8, 2, 128), 512, 240, 40)];
        each(dev, k, plan, rng, &short, &ALL_PREFILLS, sinks, &mut rows)?;
        for shape in [(64, 8, 64), (9, 3, 64)] {
            rows.extend(batch(dev, k, plan, rng, shape, &seqs(), sinks)?);
        }
    }
    Ok(rows)
}
