//! The CPU implementation of the model's coarse ops. Nothing here can fail (the error type is
//! [`Infallible`]); the pass inputs are host copies.

use crate::attention::attention;
use crate::kv::{KvType, LayerKv};
use crate::matmul::{matmul, WeightRef};
use crate::plan::CpuPlan;
use crate::split::HostCollective;
use crate::{norm, rope};
use ferrolm_gguf::GgmlType;
use ferrolm_model::backend::{AttnShape, Backend, ColCopy, InputRows, PassInputs, Rope, SeqRows};
use ferrolm_model::weights::MoeWeights;
use ferrolm_model::{Config, ModelError, Result, TensorId};
use std::convert::Infallible;
use std::sync::Arc;

/// A weight as the CPU holds it: the mapped blocks, plus an f32 copy for the small 1-D
/// tensors (norms, biases) that are used elementwise.
pub struct CpuWeight<'a> {
    pub mat: WeightRef<'a>,
    pub vec: Option<Vec<f32>>,
}

impl<'a> CpuWeight<'a> {
    /// The tensor `id` of the file (its name only for errors).
    pub fn new(id: TensorId, ty: GgmlType, dims: &[u64], data: &'a [u8]) -> Result<Self> {
        ferrolm_quant::codec(ty).map_err(|e| ModelError::Tensor {
            name: id.name(),
            what: e.to_string(),
        })?;
        let cols = dims[0] as usize;
        let rows = dims[1..].iter().product::<u64>() as usize;
        let mat = WeightRef {
            ty,
            data,
            rows,
            cols,
        };
        let vec = (dims.len() == 1).then(|| {
            let mut v = vec![0f32; cols];
            mat.dequantize_row(0, &mut v);
            v
        });
        Ok(Self { mat, vec })
    }

    pub(crate) fn f32s(&self) -> &[f32] {
        self.vec.as_deref().expect("a 1-D weight")
    }
}

/// Row-major activations.
pub struct Mat {
    pub data: Vec<f32>,
    pub width: usize,
}

impl Mat {
    pub fn rows(&self) -> usize {
        self.data.len() / self.width
    }
}

/// A pass's token ids and positions, copied from the host.
pub struct CpuInputs {
    pub tokens: Vec<u32>,
    pub positions: Vec<u32>,
}

impl InputRows for CpuInputs {
    fn rows(&self) -> usize {
        self.tokens.len()
    }
}

/// Every layer's KV cache for one sequence.
pub struct CpuCache {
    pub layers: Vec<LayerKv>,
}

impl CpuCache {
    pub fn new(cfg: &Config, n_ctx: usize, ty: KvType) -> Self {
        Self {
            layers: (0..cfg.n_layer)
                .map(|_| LayerKv::new(ty, n_ctx, cfg.n_head_kv, cfg.head_dim))
                .collect(),
        }
    }

    pub fn n_ctx(&self) -> usize {
        self.layers.first().map_or(0, LayerKv::n_ctx)
    }

    /// Positions `0..n` of every layer of `src` (same model, type) copied into this cache.
    pub fn copy_prefix_from(&mut self, src: &CpuCache, n: usize) {
        for (d, s) in self.layers.iter_mut().zip(&src.layers) {
            d.copy_prefix_from(s, n);
        }
    }

    /// Bytes one position of a [`Self::new`] cache takes: keys and values of every block, in
    /// their element types (quantized: whole blocks).
    pub fn bytes_per_position(cfg: &Config, ty: KvType) -> u64 {
        (cfg.n_layer * cfg.n_head_kv * ty.bytes_per_head(cfg.head_dim)) as u64
    }
}

/// The CPU backend for weights that borrow from a map living for `'a`, running what its plan
/// says.
pub struct CpuBackend<'a> {
    plan: CpuPlan,
    /// Where this backend is one rank of a tensor split: the ranks' sums, and its rank.
    rank: Option<(Arc<HostCollective>, usize)>,
    weights: std::marker::PhantomData<&'a ()>,
}

impl CpuBackend<'_> {
    pub fn new(plan: CpuPlan) -> Self {
        Self {
            plan,
            rank: None,
            weights: std::marker::PhantomData,
        }
    }

    /// Makes this backend rank `rank` of the split that `coll` joins.
    pub fn join(&mut self, coll: Arc<HostCollective>, rank: usize) {
        self.rank = Some((coll, rank));
    }

    pub fn plan(&self) -> &CpuPlan {
        &self.plan
    }

    /// For the settings a caller changes after loading (batch-invariant mode).
    pub fn plan_mut(&mut self) -> &mut CpuPlan {
        &mut self.plan
    }
}

impl<'a> Backend for CpuBackend<'a> {
    type Weight = CpuWeight<'a>;
    type Act = Mat;
    type Cache = CpuCache;
    type Inputs = CpuInputs;
    type Error = Infallible;

    fn inputs(&self, pass: &PassInputs<'_>) -> Result<CpuInputs, Infallible> {
        Ok(CpuInputs {
            tokens: pass.tokens.to_vec(),
            positions: pass.positions.to_vec(),
        })
    }

    fn alloc(&self, n: usize, width: usize) -> Result<Mat, Infallible> {
        Ok(Mat {
            data: vec![0.0; n * width],
            width,
        })
    }

    fn embed(
        &self,
        table: &CpuWeight<'a>,
        inp: &CpuInputs,
        out: &mut Mat,
    ) -> Result<(), Infallible> {
        for (&id, row) in inp.tokens.iter().zip(out.data.chunks_exact_mut(out.width)) {
            table.mat.dequantize_row(id as usize, row);
        }
        Ok(())
    }

    fn rms_norm(
        &self,
        x: &Mat,
        w: &CpuWeight<'a>,
        eps: f32,
        out: &mut Mat,
    ) -> Result<(), Infallible> {
        norm::rms_norm(&x.data, w.f32s(), eps, &mut out.data);
        Ok(())
    }

    fn rms_norm_groups(&self, x: &mut Mat, w: &CpuWeight<'a>, eps: f32) -> Result<(), Infallible> {
        norm::rms_norm_inplace(&mut x.data, w.f32s(), eps);
        Ok(())
    }

    fn matmul(&self, w: &CpuWeight<'a>, x: &Mat, out: &mut Mat) -> Result<(), Infallible> {
        matmul(&self.plan, &w.mat, &x.data, &mut out.data);
        Ok(())
    }

    fn add_bias(&self, x: &mut Mat, b: &CpuWeight<'a>) -> Result<(), Infallible> {
        norm::add_bias(&mut x.data, b.f32s());
        Ok(())
    }

    fn rope(
        &self,
        x: &mut Mat,
        head_dim: usize,
        inp: &CpuInputs,
        r: &Rope,
        factors: Option<&CpuWeight<'a>>,
    ) -> Result<(), Infallible> {
        let factors = factors.map(CpuWeight::f32s);
        rope::rope(&mut x.data, head_dim, &inp.positions, r, factors);
        Ok(())
    }

    fn attention(
        &self,
        seqs: &mut [SeqRows<'_, CpuCache>],
        layer: usize,
        q: &Mat,
        k: &Mat,
        v: &Mat,
        inp: &CpuInputs,
        shape: AttnShape,
        window: Option<usize>,
        sinks: Option<&CpuWeight<'a>>,
        out: &mut Mat,
    ) -> Result<(), Infallible> {
        let sinks = sinks.map(CpuWeight::f32s);
        let positions = &inp.positions;
        // Each sequence is its own call on its own rows, so a sequence's numerics (including
        // the small-batch f16 rounding, chosen by its row count) do not depend on its
        // neighbours in the batch.
        let rows_of = |m: &Mat, r: &std::ops::Range<usize>| r.start * m.width..r.end * m.width;
        for seq in seqs.iter_mut() {
            let r = seq.rows.clone();
            if r.is_empty() {
                continue;
            }
            let kv = &mut seq.cache.layers[layer];
            // A sequence's rows are contiguous in position, so they land as one block.
            kv.store(
                positions[r.start] as usize,
                &k.data[rows_of(k, &r)],
                &v.data[rows_of(v, &r)],
            );
            let out_rows = rows_of(out, &r);
            attention(
                &self.plan,
                &q.data[rows_of(q, &r)],
                kv,
                &positions[r.clone()],
                shape,
                window,
                sinks,
                &mut out.data[out_rows],
            );
        }
        Ok(())
    }

    fn swiglu(&self, gate: &mut Mat, up: &Mat) -> Result<(), Infallible> {
        norm::swiglu(&mut gate.data, &up.data);
        Ok(())
    }

    fn geglu(&self, gate: &mut Mat, up: &Mat) -> Result<(), Infallible> {
        norm::geglu(&mut gate.data, &up.data);
        Ok(())
    }

    fn scale(&self, x: &mut Mat, s: f32) -> Result<(), Infallible> {
        norm::scale(&mut x.data, s);
        Ok(())
    }

    fn copy_cols(&self, src: &Mat, dst: &mut Mat, c: ColCopy) -> Result<(), Infallible> {
        for (s, d) in src
            .data
            .chunks_exact(src.width)
            .zip(dst.data.chunks_exact_mut(dst.width))
        {
            for i in 0..c.count {
                let from = &s[c.src_off + i * c.src_step..][..c.width];
                d[c.dst_off + i * c.dst_step..][..c.width].copy_from_slice(from);
            }
        }
        Ok(())
    }

    fn moe(&self, x: &Mat, w: &MoeWeights<CpuWeight<'a>>, out: &mut Mat) -> Result<(), Infallible> {
        crate::moe::moe(&self.plan, x, w, out);
        Ok(())
    }

    fn add(&self, acc: &mut Mat, x: &Mat) -> Result<(), Infallible> {
        norm::add_assign(&mut acc.data, &x.data);
        Ok(())
    }

    fn all_reduce(&self, x: &mut Mat) -> Result<(), Infallible> {
        if let Some((coll, rank)) = &self.rank {
            coll.all_reduce(*rank, &mut x.data);
        }
        Ok(())
    }

    fn select_rows(&self, x: &Mat, rows: &[usize]) -> Result<Mat, Infallible> {
        let mut data = Vec::with_capacity(rows.len() * x.width);
        for &r in rows {
            data.extend_from_slice(&x.data[r * x.width..(r + 1) * x.width]);
        }
        Ok(Mat {
            data,
            width: x.width,
        })
    }

    fn to_host(&self, x: &Mat) -> Result<Vec<f32>, Infallible> {
        Ok(x.data.clone())
    }
}
