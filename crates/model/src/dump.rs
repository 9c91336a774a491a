//! Debug dumps (`FERROLM_DUMP_DIR`) as a backend adapter: [`Dump`] wraps any backend, runs
//! every op on it, and writes each intermediate the forward pass taps as a raw f32 file named
//! like llama.cpp's graph tensors (`attn_norm-0.f32`), for bisecting against its eval callback.
//!
//! The fused ops (`add_rms_norm`, `ffn_glu`, `qk_norm_rope`) run as their parts here, so the
//! values between the parts can be written too (`Qpre`, `ffn_gate`, `ffn_up`, `ffn_swiglu`);
//! those take the layer of the most recent tap.

use crate::backend::{AttnShape, Backend, ColCopy, PassInputs, Rope, SeqRows};
use crate::weights::MoeWeights;
use std::cell::Cell;
use std::path::{Path, PathBuf};

/// The directory `FERROLM_DUMP_DIR` names, if set: read once, where a model is loaded.
pub fn dump_dir_from_env() -> Option<PathBuf> {
    std::env::var_os("FERROLM_DUMP_DIR").map(PathBuf::from)
}

/// `B`'s ops, with every tapped intermediate written to `dir`.
pub struct Dump<'b, B> {
    inner: &'b B,
    dir: &'b Path,
    /// The layer of the most recent tap: the block the inner dumps of a fused op belong to.
    layer: Cell<usize>,
}

impl<'b, B: Backend> Dump<'b, B> {
    pub fn new(inner: &'b B, dir: &'b Path) -> Self {
        Self {
            inner,
            dir,
            layer: Cell::new(0),
        }
    }

    /// Writes `x` as `{name}-{layer}.f32`. A file that cannot be written is skipped: dumps
    /// are a debugging aid and never stop a pass.
    fn write(&self, name: &str, layer: usize, x: &B::Act) -> Result<(), B::Error> {
        let data = self.inner.to_host(x)?;
        let bytes: Vec<u8> = data.iter().flat_map(|v| v.to_le_bytes()).collect();
        let _ = std::fs::write(self.dir.join(format!("{name}-{layer}.f32")), bytes);
        Ok(())
    }
}

impl<B: Backend> Backend for Dump<'_, B> {
    type Weight = B::Weight;
    type Act = B::Act;
    type Cache = B::Cache;
    type Inputs = B::Inputs;
    type Error = B::Error;

    fn inputs(&self, pass: &PassInputs<'_>) -> Result<B::Inputs, B::Error> {
        self.inner.inputs(pass)
    }

    fn alloc(&self, n: usize, width: usize) -> Result<B::Act, B::Error> {
        self.inner.alloc(n, width)
    }

    fn embed(&self, table: &B::Weight, inp: &B::Inputs, out: &mut B::Act) -> Result<(), B::Error> {
        self.inner.embed(table, inp, out)
    }

    fn rms_norm(
        &self,
        x: &B::Act,
        w: &B::Weight,
        eps: f32,
        out: &mut B::Act,
    ) -> Result<(), B::Error> {
        self.inner.rms_norm(x, w, eps, out)
    }

    fn rms_norm_groups(&self, x: &mut B::Act, w: &B::Weight, eps: f32) -> Result<(), B::Error> {
        self.inner.rms_norm_groups(x, w, eps)
    }

    fn matmul(&self, w: &B::Weight, x: &B::Act, out: &mut B::Act) -> Result<(), B::Error> {
        self.inner.matmul(w, x, out)
    }

    fn matmul_many(
        &self,
        ws: &[&B::Weight],
        x: &B::Act,
        outs: &mut [&mut B::Act],
    ) -> Result<(), B::Error> {
        self.inner.matmul_many(ws, x, outs)
    }

    fn add_bias(&self, x: &mut B::Act, b: &B::Weight) -> Result<(), B::Error> {
        self.inner.add_bias(x, b)
    }

    fn matmul_many_bias(
        &self,
        ws: &[&B::Weight],
        biases: &[&B::Weight],
        x: &B::Act,
        outs: &mut [&mut B::Act],
    ) -> Result<(), B::Error> {
        self.inner.matmul_many_bias(ws, biases, x, outs)
    }

    fn rope(
        &self,
        x: &mut B::Act,
        head_dim: usize,
        inp: &B::Inputs,
        rope: &Rope,
        factors: Option<&B::Weight>,
    ) -> Result<(), B::Error> {
        self.inner.rope(x, head_dim, inp, rope, factors)
    }

    /// The queries as they enter RoPE (after their norm, if any) are `Qpre`.
    fn rope_qk(
        &self,
        q: &mut B::Act,
        k: &mut B::Act,
        head_dim: usize,
        inp: &B::Inputs,
        rope: &Rope,
        factors: Option<&B::Weight>,
    ) -> Result<(), B::Error> {
        self.write("Qpre", self.layer.get(), q)?;
        self.inner.rope_qk(q, k, head_dim, inp, rope, factors)
    }

    fn qk_norm_rope(
        &self,
        q: &mut B::Act,
        k: &mut B::Act,
        q_norm: &B::Weight,
        k_norm: &B::Weight,
        eps: f32,
        head_dim: usize,
        inp: &B::Inputs,
        rope: &Rope,
        factors: Option<&B::Weight>,
    ) -> Result<(), B::Error> {
        self.inner.rms_norm_groups(q, q_norm, eps)?;
        self.inner.rms_norm_groups(k, k_norm, eps)?;
        self.rope_qk(q, k, head_dim, inp, rope, factors)
    }

    fn attention(
        &self,
        seqs: &mut [SeqRows<'_, B::Cache>],
        layer: usize,
        q: &B::Act,
        k: &B::Act,
        v: &B::Act,
        inp: &B::Inputs,
        shape: AttnShape,
        window: Option<usize>,
        sinks: Option<&B::Weight>,
        out: &mut B::Act,
    ) -> Result<(), B::Error> {
        self.inner
            .attention(seqs, layer, q, k, v, inp, shape, window, sinks, out)
    }

    fn swiglu(&self, gate: &mut B::Act, up: &B::Act) -> Result<(), B::Error> {
        self.inner.swiglu(gate, up)
    }

    fn geglu(&self, gate: &mut B::Act, up: &B::Act) -> Result<(), B::Error> {
        self.inner.geglu(gate, up)
    }

    fn scale(&self, x: &mut B::Act, s: f32) -> Result<(), B::Error> {
        self.inner.scale(x, s)
    }

    fn copy_cols(&self, src: &B::Act, dst: &mut B::Act, c: ColCopy) -> Result<(), B::Error> {
        self.inner.copy_cols(src, dst, c)
    }

    fn moe(&self, x: &B::Act, w: &MoeWeights<B::Weight>, out: &mut B::Act) -> Result<(), B::Error> {
        self.inner.moe(x, w, out)
    }

    fn add(&self, acc: &mut B::Act, x: &B::Act) -> Result<(), B::Error> {
        self.inner.add(acc, x)
    }

    fn all_reduce(&self, x: &mut B::Act) -> Result<(), B::Error> {
        self.inner.all_reduce(x)
    }

    /// The add and the norm apart; the forward pass taps both results.
    fn add_rms_norm(
        &self,
        acc: &mut B::Act,
        x: &B::Act,
        w: &B::Weight,
        eps: f32,
        out: &mut B::Act,
    ) -> Result<(), B::Error> {
        self.inner.add(acc, x)?;
        self.inner.rms_norm(acc, w, eps, out)
    }

    fn ffn_glu(
        &self,
        wg: &B::Weight,
        wu: &B::Weight,
        x: &B::Act,
        gate: &mut B::Act,
        up: &mut B::Act,
    ) -> Result<(), B::Error> {
        let layer = self.layer.get();
        self.inner
            .matmul_many(&[wg, wu], x, &mut [&mut *gate, &mut *up])?;
        self.write("ffn_gate", layer, gate)?;
        self.write("ffn_up", layer, up)?;
        self.inner.swiglu(gate, up)?;
        self.write("ffn_swiglu", layer, gate)
    }

    fn select_rows(&self, x: &B::Act, rows: &[usize]) -> Result<B::Act, B::Error> {
        self.inner.select_rows(x, rows)
    }

    fn to_host(&self, x: &B::Act) -> Result<Vec<f32>, B::Error> {
        self.inner.to_host(x)
    }

    fn tap(&self, name: &str, layer: usize, x: &B::Act) -> Result<(), B::Error> {
        self.layer.set(layer);
        self.inner.tap(name, layer, x)?;
        self.write(name, layer, x)
    }
}
