//! Quantized KV cache checks of `cuda-parity` (`-ctk/-ctv q8_0`, `q4_0`): the store's blocks
//! against `ferrolm_quant`'s quantizers byte for byte, then flash-decoding and the scalar
//! prefill (the kernels the plan picks over a quantized cache) against the CPU's attention over
//! a cache of the same type: its f32 path (`FERROLM_ATTN=f32`: the same dequantized keys and
//! values, so only the f32 order differs) and its default path, ggml's one-chunk arithmetic,
//! which quantizes q to Q8_0 for the integer dot products where the GPU keeps q in f32.

use super::attn_checks::{magnitudes, ATTN};
use super::checks::{normal, poisoned, row};
use super::{compare, Contract, Row};
use anyhow::Result;
use ferrolm_cpu::attention::{attention, LayerKv};
use ferrolm_cpu::{CpuPlan, KvElem, KvType};
use ferrolm_cuda::ops::{DecodeWork, KvCache, KvFormat, PrefillKernel};
use ferrolm_cuda::plan::Attn;
use ferrolm_cuda::{CudaDevice, Kernels, Plan};
use ferrolm_gguf::GgmlType;
use ferrolm_model::backend::AttnShape;
use rand::rngs::StdRng;

/// The CPU quantizes q to Q8_0 (a code step of max|q|/127 per 32) for its integer dots; the GPU
/// keeps q in f32. On N(0, 1) data the scores then differ by ~0.006 (D 128), the outputs by
/// about as much of `Σ p·|v|`; a wrong block, scale or nibble is off by O(0.1) or more.
const ATTN_Q8_Q: Contract = Contract::Rel(3e-2, "q as Q8_0 on the CPU, f32 here");

/// Each quantized format: decode (3 rows after 997 positions, GQA 32/8, D 128), and the scalar
/// prefill on a 77-token prompt (9/3 heads of 64) and 300 rows after a 212-token prefix.
pub fn all(dev: &CudaDevice, k: &Kernels, plan: &Plan, rng: &mut StdRng) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    for (format, elem, ty) in [
        (KvFormat::Q8_0, KvElem::Q8_0, GgmlType::Q8_0),
        (KvFormat::Q4_0, KvElem::Q4_0, GgmlType::Q4_0),
    ] {
        let q = Quant { format, elem, ty };
        rows.extend(q.check(dev, k, plan, rng, (32, 8, 128), 1024, 1000, 3)?);
        rows.extend(q.check(dev, k, plan, rng, (9, 3, 64), 128, 77, 77)?);
        rows.extend(q.check(dev, k, plan, rng, (32, 8, 128), 512, 512, 300)?);
    }
    Ok(rows)
}

/// One cache format, by its three names.
struct Quant {
    format: KvFormat,
    elem: KvElem,
    ty: GgmlType,
}

impl Quant {
    /// Stores `n_pos - n_q` positions, then `n_q` more, and attends with the last `n_q` as
    /// queries on the kernel the plan picks for `n_q` rows over this format.
    #[allow(clippy::too_many_arguments)]
    fn check(
        &self,
        dev: &CudaDevice,
        k: &Kernels,
        plan: &Plan,
        rng: &mut StdRng,
        (n_head, n_kv_head, head_dim): (usize, usize, usize),
        n_ctx: usize,
        n_pos: usize,
        n_q: usize,
    ) -> Result<Vec<Row>> {
        let name = self.format.name();
        let width = n_kv_head * head_dim;
        let (keys, values) = (
            normal(rng, n_pos * width, 1.0),
            normal(rng, n_pos * width, 1.0),
        );
        let mut cache = KvCache::new(dev, self.format, n_ctx, n_kv_head, head_dim)?;
        let prefix = n_pos - n_q;
        for (from, to) in [(0, prefix), (prefix, n_pos)] {
            if from == to {
                continue;
            }
            let r = from * width..to * width;
            let (kd, vd, pos0) = (
                dev.upload(&keys[r.clone()])?,
                dev.upload(&values[r])?,
                dev.upload(&[from as u32])?,
            );
            k.attention.store(&mut cache, &kd, &vd, &pos0)?;
        }
        let shape_s = format!("{n_head}/{n_kv_head} heads, d {head_dim}, {n_q} q at {prefix}..");

        // The store: each head's row as ferrolm_quant quantizes it, head-major.
        let row_bytes = self.format.row_bytes(head_dim);
        let mut store_ok = true;
        for (got, want) in [
            (dev.download(&cache.k)?, &keys),
            (dev.download(&cache.v)?, &values),
        ] {
            for p in 0..n_pos {
                for g in 0..n_kv_head {
                    let x = &want[p * width + g * head_dim..][..head_dim];
                    let blocks = ferrolm_quant::quantize_to_vec(self.ty, x)?;
                    let at = (g * n_ctx + p) * row_bytes;
                    store_ok &= got[at..at + row_bytes] == blocks[..];
                }
            }
        }
        let mut rows = vec![row(
            &format!("kv_store f32→{name}"),
            shape_s.clone(),
            "ferrolm_quant blocks",
            (if store_ok { 0.0 } else { f64::NAN }, 0.0, store_ok),
            Contract::Exact,
        )];

        // The CPU over a cache of the same type, both ways.
        let kv_type = KvType::new(self.elem, self.elem);
        let mut kv = LayerKv::new(kv_type, n_ctx, n_kv_head, head_dim);
        kv.store(0, &keys, &values);
        let positions: Vec<u32> = (prefix..n_pos).map(|p| p as u32).collect();
        let q = normal(rng, n_q * n_head * head_dim, 1.0);
        let shape = AttnShape {
            n_head,
            n_kv_head,
            head_dim,
        };
        let mut want_f32 = vec![0f32; q.len()];
        attention(
            &CpuPlan::with_attention_f32(),
            &q,
            &kv,
            &positions,
            shape,
            &mut want_f32,
        );
        let mut want_ggml = vec![0f32; q.len()];
        attention(
            &CpuPlan::detect(),
            &q,
            &kv,
            &positions,
            shape,
            &mut want_ggml,
        );
        let dequant = |x: &[f32]| -> Result<Vec<f32>> {
            let b = ferrolm_quant::quantize_to_vec(self.ty, x)?;
            Ok(ferrolm_quant::dequantize_to_vec(self.ty, &b, x.len())?)
        };
        let scale = magnitudes(&q, &dequant(&keys)?, &dequant(&values)?, &positions, shape);

        let (qd, pd) = (dev.upload(&q)?, dev.upload(&positions)?);
        let mut out = poisoned(dev, q.len())?;
        let op = match plan.attention(n_q, self.format) {
            Attn::Decode { fused_combine } => {
                let mut work =
                    DecodeWork::new(dev, n_q, n_head, head_dim, plan.decode_splits(n_ctx))?;
                k.attention
                    .decode(fused_combine, &qd, &cache, &pd, n_head, &mut work, &mut out)?;
                format!("attn_decode {name}")
            }
            Attn::Prefill(kernel) => {
                assert_eq!(
                    kernel,
                    PrefillKernel::Scalar,
                    "the plan's kernel for {name}"
                );
                k.attention
                    .prefill(kernel, &qd, &cache, &pd, n_head, &mut out)?;
                format!("attn_prefill {name} (scalar)")
            }
        };
        dev.sync()?;
        let got = dev.download(&out)?;
        rows.push(row(
            &op,
            shape_s.clone(),
            "cpu attention f32, same cache",
            compare(&got, &want_f32, |i| scale[i]),
            ATTN,
        ));
        rows.push(row(
            &op,
            shape_s,
            "cpu attention (ggml one-chunk), same cache",
            compare(&got, &want_ggml, |i| scale[i]),
            ATTN_Q8_Q,
        ));
        Ok(rows)
    }
}
