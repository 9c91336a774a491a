//! The CUDA implementation of the model's coarse ops ([`Backend`]), and [`CudaModel`], which
//! runs the shared forward pass on it and replays decode steps as CUDA graphs.
//!
//! Ops only queue work on the device's one stream. The trait's ops cannot return errors, so
//! the first failure is kept ([`CudaBackend::take_error`]) and the pass reports it at the end.
//!
//! Token ids and positions are copied to the device once per pass ([`CudaBackend::set_inputs`])
//! into buffers kept per batch size; the ops read them there and ignore the host copies the
//! trait hands them. A captured decode graph therefore needs only those two values rewritten
//! before each replay.

mod pool;
mod runner;
mod weights;

pub use runner::{CudaCache, CudaModel};
pub use weights::{device_bytes, CudaWeight};

use crate::device::CudaDevice;
use crate::error::{CudaError, DriverContext, Result};
use crate::ops::{
    DecodeWork, Kernels, PairOut, QuantMatrix, Quantize, Rope, MMQ_BK, MMVQ_MAX_COLS,
};
use cudarc::driver::CudaSlice;
use ferrolm_gguf::GgmlType;
use ferrolm_model::backend::{AttnShape, Backend, MoeGating, RopeMode};
use ferrolm_model::weights::MoeWeights;
use pool::Pool;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Row-major activations on the device: `rows` of `width` floats, returned to the pools on
/// drop.
pub struct CudaAct {
    buf: Option<CudaSlice<f32>>,
    /// The same values as Q8_1, when an op produced them alongside (a norm feeding matmuls);
    /// dropped by anything that writes `buf`.
    q8: Option<CudaSlice<u8>>,
    pub rows: usize,
    pub width: usize,
    pool: Arc<Pool<f32>>,
    bytes: Arc<Pool<u8>>,
}

impl CudaAct {
    fn buf(&self) -> &CudaSlice<f32> {
        self.buf.as_ref().expect("live activation")
    }

    /// For writing: the Q8_1 copy no longer matches and goes back to its pool.
    fn buf_mut(&mut self) -> &mut CudaSlice<f32> {
        if let Some(q) = self.q8.take() {
            self.bytes.give(q);
        }
        self.buf.as_mut().expect("live activation")
    }
}

impl Drop for CudaAct {
    fn drop(&mut self) {
        if let Some(b) = self.buf.take() {
            self.pool.give(b);
        }
        if let Some(q) = self.q8.take() {
            self.bytes.give(q);
        }
    }
}

/// The ids and positions of one batch size's passes.
struct Inputs {
    tokens: CudaSlice<u32>,
    positions: CudaSlice<u32>,
}

/// Which quantized-GEMM path a batch of more than [`MMVQ_MAX_COLS`] rows takes.
fn mmq_enabled() -> bool {
    std::env::var("FERROLM_CUDA_MMQ").map_or(true, |v| v != "0")
}

pub struct CudaBackend {
    dev: Arc<CudaDevice>,
    k: Kernels,
    acts: Arc<Pool<f32>>,
    bytes: Arc<Pool<u8>>,
    inputs: Mutex<HashMap<usize, Inputs>>,
    error: Mutex<Option<CudaError>>,
    use_mmq: bool,
    /// Decode fusions (shared norm/quantize, paired mat-vecs, SwiGLU in the mat-vec), all
    /// bit-identical to the separate kernels; `FERROLM_CUDA_FUSE=0` turns them off.
    fuse: bool,
}

/// Two matrices one paired mat-vec launch can serve.
fn same_format(a: &QuantMatrix, b: &QuantMatrix) -> bool {
    a.ty == b.ty && a.cols == b.cols && a.ty != GgmlType::F32
}

impl CudaBackend {
    pub fn new(dev: Arc<CudaDevice>) -> Result<Self> {
        let k = Kernels::load(&dev)?;
        let stream = dev.stream().clone();
        Ok(Self {
            k,
            acts: Arc::new(Pool::new(stream.clone())),
            bytes: Arc::new(Pool::new(stream)),
            inputs: Mutex::new(HashMap::new()),
            error: Mutex::new(None),
            use_mmq: mmq_enabled(),
            fuse: std::env::var("FERROLM_CUDA_FUSE").map_or(true, |v| v != "0"),
            dev,
        })
    }

    pub fn device(&self) -> &CudaDevice {
        &self.dev
    }

    /// Copies the pass's token ids and positions (`pos0..`) to the device.
    pub fn set_inputs(&self, tokens: &[u32], pos0: usize) -> Result<()> {
        let n = tokens.len();
        let positions: Vec<u32> = (pos0..pos0 + n).map(|p| p as u32).collect();
        let mut map = self.inputs.lock().expect("inputs poisoned");
        let inp = match map.entry(n) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => e.insert(Inputs {
                tokens: self.dev.zeros(n.max(1))?,
                positions: self.dev.zeros(n.max(1))?,
            }),
        };
        let stream = self.dev.stream();
        stream
            .memcpy_htod(tokens, &mut inp.tokens)
            .during("copying token ids")?;
        stream
            .memcpy_htod(&positions, &mut inp.positions)
            .during("copying positions")?;
        Ok(())
    }

    /// The first error since the last call, if any.
    pub fn take_error(&self) -> Option<CudaError> {
        self.error.lock().expect("error slot poisoned").take()
    }

    fn check(&self, r: Result<()>) {
        if let Err(e) = r {
            self.error
                .lock()
                .expect("error slot poisoned")
                .get_or_insert(e);
        }
    }

    fn set_capturing(&self, on: bool) {
        self.acts.set_capturing(on);
        self.bytes.set_capturing(on);
    }

    fn with_inputs<R>(&self, n: usize, f: impl FnOnce(&Inputs) -> Result<R>) -> Result<R> {
        let map = self.inputs.lock().expect("inputs poisoned");
        let inp = map.get(&n).ok_or_else(|| {
            CudaError::Invalid(format!("no inputs set for a batch of {n} tokens"))
        })?;
        f(inp)
    }

    fn try_alloc(&self, n: usize, width: usize) -> Result<CudaAct> {
        Ok(CudaAct {
            buf: Some(self.acts.take(n * width)?),
            q8: None,
            rows: n,
            width,
            pool: self.acts.clone(),
            bytes: self.bytes.clone(),
        })
    }

    /// `x` as Q8_1, for the int8 kernels. The caller gives the buffer back.
    fn quantize(&self, x: &CudaAct) -> Result<CudaSlice<u8>> {
        let mut xq = self.bytes.take(Quantize::q8_1_bytes(x.rows, x.width))?;
        self.k.quantize.q8_1(x.buf(), x.width, &mut xq)?;
        Ok(xq)
    }

    /// `out = x · Wᵀ` for a quantized `w`, `x` already in Q8_1.
    fn qmatmul(&self, w: &QuantMatrix, xq: &CudaSlice<u8>, out: &mut CudaAct) -> Result<()> {
        let n = out.rows;
        if n <= MMVQ_MAX_COLS {
            return self.k.mmvq.matvec(w, xq, n, out.buf_mut());
        }
        if self.use_mmq && crate::ops::Mmq::supports(w.ty) && w.cols.is_multiple_of(MMQ_BK) {
            return self.k.mmq.matmul(w, xq, n, out.buf_mut());
        }
        // No GEMM for this format or shape: mat-vec over slices of rows.
        let row_q8 = Quantize::q8_1_bytes(1, w.cols);
        for r0 in (0..n).step_by(MMVQ_MAX_COLS) {
            let m = MMVQ_MAX_COLS.min(n - r0);
            let xs = xq.slice(r0 * row_q8..(r0 + m) * row_q8);
            let mut os = out.buf_mut().slice_mut(r0 * w.rows..(r0 + m) * w.rows);
            self.k.mmvq.matvec_view(w, &xs, m, &mut os)?;
        }
        Ok(())
    }

    fn matmul_all(&self, ws: &[&CudaWeight], x: &CudaAct, outs: &mut [&mut CudaAct]) -> Result<()> {
        if x.rows == 0 {
            return Ok(());
        }
        let mut own_q8 = None;
        let mut i = 0;
        while i < ws.len() {
            let m = ws[i].matrix();
            if m.ty == GgmlType::F32 {
                self.k
                    .gemm_f32
                    .matmul(m, x.buf(), x.rows, outs[i].buf_mut())?;
                i += 1;
                continue;
            }
            if x.q8.is_none() && own_q8.is_none() {
                own_q8 = Some(self.quantize(x)?);
            }
            let xq = x.q8.as_ref().or(own_q8.as_ref()).expect("quantized");
            // One token: two matrices of one format share a launch (q and k, say).
            if x.rows == 1 && self.fuse && i + 1 < ws.len() && same_format(m, ws[i + 1].matrix()) {
                let (a, b) = outs[i..].split_at_mut(1);
                let out = PairOut::Both(a[0].buf_mut(), b[0].buf_mut());
                self.k.mmvq.pair(m, ws[i + 1].matrix(), xq, out)?;
                i += 2;
                continue;
            }
            self.qmatmul(m, xq, outs[i])?;
            i += 1;
        }
        if let Some(b) = own_q8 {
            self.bytes.give(b);
        }
        Ok(())
    }

    /// `out = rms_norm(x) * w`, with the Q8_1 copy of `out` kept for the matmuls that follow.
    fn norm_q8(&self, x: &CudaAct, w: &CudaWeight, eps: f32, out: &mut CudaAct) -> Result<()> {
        let mut q8 = self.bytes.take(Quantize::q8_1_bytes(out.rows, out.width))?;
        let r = self
            .k
            .norm_rope
            .rms_norm_q8_1(x.buf(), w.vector(), eps, out.buf_mut(), &mut q8);
        out.q8 = Some(q8);
        r
    }

    /// `acc += add`, then as [`Self::norm_q8`].
    fn norm_q8_add(
        &self,
        acc: &mut CudaAct,
        add: &CudaAct,
        w: &CudaWeight,
        eps: f32,
        out: &mut CudaAct,
    ) -> Result<()> {
        let mut q8 = self.bytes.take(Quantize::q8_1_bytes(out.rows, out.width))?;
        let r = self.k.norm_rope.add_rms_norm_q8_1(
            acc.buf_mut(),
            add.buf(),
            w.vector(),
            eps,
            out.buf_mut(),
            &mut q8,
        );
        out.q8 = Some(q8);
        r
    }

    fn glu(
        &self,
        wg: &CudaWeight,
        wu: &CudaWeight,
        x: &CudaAct,
        gate: &mut CudaAct,
        up: &mut CudaAct,
    ) -> Result<()> {
        let (g, u) = (wg.matrix(), wu.matrix());
        match &x.q8 {
            Some(xq) if x.rows == 1 && self.fuse && same_format(g, u) => {
                self.k.mmvq.pair(g, u, xq, PairOut::Glu(gate.buf_mut()))
            }
            _ => {
                self.matmul_all(&[wg, wu], x, &mut [gate, up])?;
                self.k.elementwise.swiglu(gate.buf_mut(), up.buf())
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn try_attention(
        &self,
        cache: &mut CudaCache,
        layer: usize,
        q: &CudaAct,
        k: &CudaAct,
        v: &CudaAct,
        shape: AttnShape,
        out: &mut CudaAct,
    ) -> Result<()> {
        let n = q.rows;
        self.with_inputs(n, |inp| {
            let kv = &mut cache.layers[layer];
            self.k
                .attention
                .store(kv, k.buf(), v.buf(), &inp.positions)?;
            let positions = &inp.positions;
            if n <= cache.work.max_q {
                self.k.attention.decode(
                    q.buf(),
                    kv,
                    positions,
                    shape.n_head,
                    &mut cache.work,
                    out.buf_mut(),
                )
            } else {
                self.k
                    .attention
                    .prefill(q.buf(), kv, positions, shape.n_head, out.buf_mut())
            }
        })
    }

    fn try_select_rows(&self, x: &CudaAct, rows: &[usize]) -> Result<CudaAct> {
        let mut out = self.try_alloc(rows.len(), x.width)?;
        let w = x.width;
        let stream = self.dev.stream();
        // Runs of consecutive rows as one copy each.
        let mut i = 0;
        while i < rows.len() {
            let mut j = i + 1;
            while j < rows.len() && rows[j] == rows[j - 1] + 1 {
                j += 1;
            }
            let src = x.buf().slice(rows[i] * w..(rows[j - 1] + 1) * w);
            let mut dst = out.buf_mut().slice_mut(i * w..j * w);
            stream
                .memcpy_dtod(&src, &mut dst)
                .during("copying selected rows")?;
            i = j;
        }
        Ok(out)
    }
}

/// Records what was asked of a pass that had already failed, as zero-size placeholder rows,
/// so the pass can run to its end and report the first error.
fn placeholder(b: &CudaBackend, n: usize, width: usize) -> CudaAct {
    CudaAct {
        buf: None,
        q8: None,
        rows: n,
        width,
        pool: b.acts.clone(),
        bytes: b.bytes.clone(),
    }
}

impl Backend for CudaBackend {
    type Weight = CudaWeight;
    type Act = CudaAct;
    type Cache = CudaCache;

    fn alloc(&self, n: usize, width: usize) -> CudaAct {
        match self.try_alloc(n, width) {
            Ok(a) => a,
            Err(e) => {
                self.check(Err(e));
                placeholder(self, n, width)
            }
        }
    }

    fn embed(&self, table: &CudaWeight, ids: &[u32], out: &mut CudaAct) {
        if out.buf.is_none() {
            return;
        }
        let r = self.with_inputs(ids.len(), |inp| {
            self.k
                .embed
                .gather(table.gather_table(), &inp.tokens, out.buf_mut())
        });
        self.check(r);
    }

    fn rms_norm(&self, x: &CudaAct, w: &CudaWeight, eps: f32, out: &mut CudaAct) {
        if x.rows == 0 || x.buf.is_none() || out.buf.is_none() {
            return;
        }
        let r = if self.fuse && x.width.is_multiple_of(32) {
            self.norm_q8(x, w, eps, out)
        } else {
            self.k
                .norm_rope
                .rms_norm(x.buf(), w.vector(), eps, out.buf_mut())
        };
        self.check(r);
    }

    fn add_rms_norm(
        &self,
        acc: &mut CudaAct,
        x: &CudaAct,
        w: &CudaWeight,
        eps: f32,
        out: &mut CudaAct,
    ) {
        if acc.rows == 0 || [&*acc, x, &*out].iter().any(|a| a.buf.is_none()) {
            return;
        }
        if !self.fuse || !acc.width.is_multiple_of(32) {
            self.add(acc, x);
            return self.rms_norm(acc, w, eps, out);
        }
        let r = self.norm_q8_add(acc, x, w, eps, out);
        self.check(r);
    }

    fn ffn_glu(
        &self,
        wg: &CudaWeight,
        wu: &CudaWeight,
        x: &CudaAct,
        gate: &mut CudaAct,
        up: &mut CudaAct,
    ) {
        if x.rows == 0 || [x, &*gate, &*up].iter().any(|a| a.buf.is_none()) {
            return;
        }
        let r = self.glu(wg, wu, x, gate, up);
        self.check(r);
    }

    fn rms_norm_groups(&self, x: &mut CudaAct, w: &CudaWeight, eps: f32) {
        if x.rows == 0 || x.buf.is_none() {
            return;
        }
        let r = self
            .k
            .norm_rope
            .rms_norm_groups(x.buf_mut(), w.vector(), eps);
        self.check(r);
    }

    fn matmul(&self, w: &CudaWeight, x: &CudaAct, out: &mut CudaAct) {
        self.matmul_many(&[w], x, &mut [out]);
    }

    fn matmul_many(&self, ws: &[&CudaWeight], x: &CudaAct, outs: &mut [&mut CudaAct]) {
        if x.buf.is_none() || outs.iter().any(|o| o.buf.is_none()) {
            return;
        }
        let r = self.matmul_all(ws, x, outs);
        self.check(r);
    }

    fn add_bias(&self, x: &mut CudaAct, b: &CudaWeight) {
        if x.rows == 0 || x.buf.is_none() {
            return;
        }
        let r = self.k.elementwise.add_bias(x.buf_mut(), b.vector());
        self.check(r);
    }

    fn rope(&self, x: &mut CudaAct, head_dim: usize, positions: &[u32], base: f32, mode: RopeMode) {
        if x.rows == 0 || x.buf.is_none() {
            return;
        }
        let mode = match mode {
            RopeMode::Normal => Rope::Normal,
            RopeMode::Neox => Rope::Neox,
        };
        let r = self.with_inputs(positions.len(), |inp| {
            self.k
                .norm_rope
                .rope(x.buf_mut(), head_dim, &inp.positions, base, mode)
        });
        self.check(r);
    }

    fn rope_qk(
        &self,
        q: &mut CudaAct,
        k: &mut CudaAct,
        head_dim: usize,
        positions: &[u32],
        base: f32,
        mode: RopeMode,
    ) {
        if !self.fuse {
            self.rope(q, head_dim, positions, base, mode);
            return self.rope(k, head_dim, positions, base, mode);
        }
        if q.rows == 0 || q.buf.is_none() || k.buf.is_none() {
            return;
        }
        let mode = match mode {
            RopeMode::Normal => Rope::Normal,
            RopeMode::Neox => Rope::Neox,
        };
        let r = self.with_inputs(positions.len(), |inp| {
            self.k.norm_rope.rope_qk(
                q.buf_mut(),
                k.buf_mut(),
                head_dim,
                &inp.positions,
                base,
                mode,
            )
        });
        self.check(r);
    }

    fn attention(
        &self,
        cache: &mut CudaCache,
        layer: usize,
        q: &CudaAct,
        k: &CudaAct,
        v: &CudaAct,
        _positions: &[u32],
        shape: AttnShape,
        out: &mut CudaAct,
    ) {
        if q.rows == 0 || [q, k, v].iter().any(|a| a.buf.is_none()) || out.buf.is_none() {
            return;
        }
        let r = self.try_attention(cache, layer, q, k, v, shape, out);
        self.check(r);
    }

    fn swiglu(&self, gate: &mut CudaAct, up: &CudaAct) {
        if gate.rows == 0 || gate.buf.is_none() || up.buf.is_none() {
            return;
        }
        let r = self.k.elementwise.swiglu(gate.buf_mut(), up.buf());
        self.check(r);
    }

    fn moe(&self, _x: &CudaAct, _w: &MoeWeights<CudaWeight>, _g: MoeGating, _out: &mut CudaAct) {
        self.check(Err(CudaError::Invalid(
            "mixture-of-experts layers are not implemented on CUDA yet".into(),
        )));
    }

    fn add(&self, acc: &mut CudaAct, x: &CudaAct) {
        if acc.rows == 0 || acc.buf.is_none() || x.buf.is_none() {
            return;
        }
        let r = self.k.elementwise.add(acc.buf_mut(), x.buf());
        self.check(r);
    }

    fn select_rows(&self, x: &CudaAct, rows: &[usize]) -> CudaAct {
        if x.buf.is_none() {
            return placeholder(self, rows.len(), x.width);
        }
        match self.try_select_rows(x, rows) {
            Ok(a) => a,
            Err(e) => {
                self.check(Err(e));
                placeholder(self, rows.len(), x.width)
            }
        }
    }

    fn to_host(&self, x: &CudaAct) -> Vec<f32> {
        let Some(buf) = &x.buf else {
            return vec![0.0; x.rows * x.width];
        };
        let r = self.dev.download(buf);
        match r {
            Ok(mut v) => {
                v.truncate(x.rows * x.width);
                v
            }
            Err(e) => {
                self.check(Err(e));
                vec![0.0; x.rows * x.width]
            }
        }
    }
}

/// Split-K work buffers sized for decode batches of up to this many rows.
const DECODE_MAX_Q: usize = MMVQ_MAX_COLS;

fn decode_work(
    dev: &CudaDevice,
    n_head: usize,
    head_dim: usize,
    n_ctx: usize,
) -> Result<DecodeWork> {
    DecodeWork::new(
        dev,
        DECODE_MAX_Q,
        n_head,
        head_dim,
        DecodeWork::default_splits(n_ctx),
    )
}
