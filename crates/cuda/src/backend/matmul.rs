//! Matrix products on the device: activations quantized once per input as the plan pairs them
//! with the weight (or taken from the norm that produced them), then the kernel the plan picks
//! for the shape (mat-vec for up to eight rows, the int8 GEMM above that; a batched decode
//! step's 2-64 rows on the tensor-core mat-vec), and the decode fusions (paired mat-vecs,
//! SwiGLU in the mat-vec).

use super::{CudaAct, CudaBackend, CudaWeight};
use crate::error::CudaError;
use crate::error::Result;
use crate::ops::{
    ActQuant, MmvqStaged, NormIn, PairOut, QuantMatrix, Quantize, F16_MATVEC_MATS, MMVQ_MAX_COLS,
};
use crate::plan::Matmul;
use cudarc::driver::CudaSlice;
use ferrolm_gguf::GgmlType;

/// Two matrices one paired mat-vec launch can serve.
fn same_format(a: &QuantMatrix, b: &QuantMatrix) -> bool {
    a.ty == b.ty && a.cols == b.cols && a.ty != GgmlType::F32
}

impl CudaBackend {
    /// `x` as activation blocks, for the int8 kernels. The caller gives the buffer back.
    pub(super) fn quantize(&self, x: &CudaAct, mode: ActQuant) -> Result<CudaSlice<u8>> {
        let mut xq = self.bytes.take(Quantize::q8_1_bytes(x.rows, x.width))?;
        self.k
            .quantize
            .rows(x.buf(), x.rows, x.width, mode, &mut xq)?;
        Ok(xq)
    }

    /// `out = x · Wᵀ (+ bias)` for a quantized `w`, `x` already quantized for it (`xq`, as
    /// `mode`), on the kernel the plan picks for the shape; the bias in the mat-vec's launch
    /// where the plan says so, else added after.
    pub(super) fn qmatmul(
        &self,
        w: &QuantMatrix,
        xq: &CudaSlice<u8>,
        mode: ActQuant,
        out: &mut CudaAct,
        bias: Option<&CudaSlice<f32>>,
    ) -> Result<()> {
        let n = out.rows;
        let plan = self.gemm_plan().matmul(w.ty, w.rows, w.cols, n);
        if let (Matmul::MatVec { wide }, Some(b)) = (&plan, bias) {
            if self.plan.bias_in_matvec() {
                return self.k.mmvq.matvec(*wide, w, xq, n, out.buf_mut(), Some(b));
            }
        }
        self.qmatmul_plain(plan, w, xq, mode, out)?;
        match bias {
            Some(b) => self.k.elementwise.add_bias(out.buf_mut(), b),
            None => Ok(()),
        }
    }

    fn qmatmul_plain(
        &self,
        plan: Matmul,
        w: &QuantMatrix,
        xq: &CudaSlice<u8>,
        mode: ActQuant,
        out: &mut CudaAct,
    ) -> Result<()> {
        let n = out.rows;
        match plan {
            Matmul::MatVec { wide } => self.k.mmvq.matvec(wide, w, xq, n, out.buf_mut(), None),
            Matmul::MatVecMma { two_tiles } => {
                let q8k = mode == ActQuant::Q8K;
                self.k
                    .mmvq_mma
                    .matmul(two_tiles, q8k, w, xq, n, out.buf_mut())
            }
            Matmul::MatVecStaged { order, splits } => {
                let floats = MmvqStaged::scratch(splits, n, w.rows);
                let staged = &self.k.mmvq_staged;
                self.acts.with_scratch(floats, |part| {
                    staged.matmul(order, splits, w, xq, n, out.buf_mut(), part)
                })
            }
            Matmul::Gemm(how) => {
                let floats = how.scratch(n, w.rows);
                self.acts.with_scratch(floats, |part| {
                    self.k.mmq.matmul(&how, w, xq, n, out.buf_mut(), part)
                })
            }
            Matmul::MatVecSlices { wide } => {
                let row_q8 = Quantize::q8_1_bytes(1, w.cols);
                for r0 in (0..n).step_by(MMVQ_MAX_COLS) {
                    let m = MMVQ_MAX_COLS.min(n - r0);
                    let xs = xq.slice(r0 * row_q8..(r0 + m) * row_q8);
                    let mut os = out.buf_mut().slice_mut(r0 * w.rows..(r0 + m) * w.rows);
                    self.k.mmvq.matvec_view(wide, w, &xs, m, &mut os, None)?;
                }
                Ok(())
            }
            Matmul::Float => Err(CudaError::Invalid(
                "an f32 weight given quantized activations".into(),
            )),
        }
    }

    /// `outs[i] = x · ws[i]ᵀ`, plus `biases[i]` when `biases` is not empty (one a weight).
    pub(super) fn matmul_all(
        &self,
        ws: &[&CudaWeight],
        biases: &[&CudaWeight],
        x: &CudaAct,
        outs: &mut [&mut CudaAct],
    ) -> Result<()> {
        assert!(
            biases.is_empty() || biases.len() == ws.len(),
            "a bias for every weight or none"
        );
        if x.rows == 0 {
            return Ok(());
        }
        let bias = |j: usize| biases.get(j).map(|b| b.vector());
        let float = |j: usize, m: &QuantMatrix, out: &mut CudaAct| -> Result<()> {
            let token_warps = self.plan.gemm_f32_token_warps(x.rows);
            self.k
                .gemm_f32
                .matmul(m, x.buf(), x.rows, out.buf_mut(), token_warps)?;
            match bias(j) {
                Some(b) => self.k.elementwise.add_bias(out.buf_mut(), b),
                None => Ok(()),
            }
        };
        if ws.iter().all(|w| w.matrix().ty == GgmlType::F32) {
            for (j, (w, out)) in ws.iter().zip(outs.iter_mut()).enumerate() {
                float(j, w.matrix(), out)?;
            }
            return Ok(());
        }
        // Each weight takes x quantized as its partner format; consecutive weights of one
        // format (q/k/v, gate/up) share it. Long ubatches take the f16 GEMM where the plan
        // says so, all of them on x rounded to f16 once: the copy the op that made x kept
        // (`CudaAct::f16`), or one rounded here.
        let mut x16: Option<CudaSlice<u16>> = None;
        let mut i = 0;
        while i < ws.len() {
            let m = ws[i].matrix();
            if m.ty == GgmlType::F32 {
                float(i, m, outs[i])?;
                i += 1;
                continue;
            }
            if self.takes_f16(m, x.rows) {
                if x.f16.is_none() && x16.is_none() {
                    let mut h = self.halves.take(x.rows * x.width)?;
                    self.k
                        .gemm_wgmma
                        .round_f16(x.buf(), x.rows * x.width, &mut h)?;
                    x16 = Some(h);
                }
                let h = x
                    .f16
                    .as_ref()
                    .or(x16.as_ref())
                    .expect("kept or rounded above");
                if let Some(ways) = self.f16_decode_pair(&ws[i..], x.rows) {
                    let ms = [ws[i].matrix(), ws[i + 1].matrix()];
                    let [a, b] = &mut outs[i..i + 2] else {
                        unreachable!("two outputs")
                    };
                    self.f16_decode_many(&ms, h, x.rows, ways, &mut [a.buf_mut(), b.buf_mut()])?;
                    for (j, out) in outs.iter_mut().enumerate().skip(i).take(2) {
                        if let Some(b) = bias(j) {
                            self.k.elementwise.add_bias(out.buf_mut(), b)?;
                        }
                    }
                    i += 2;
                    continue;
                }
                let together = self.f16_matvec_run(&ws[i..], x.rows);
                if together > 1 {
                    self.f16_matvec_together(&ws[i..i + together], h, &mut outs[i..i + together])?;
                    for (j, out) in outs.iter_mut().enumerate().skip(i).take(together) {
                        if let Some(b) = bias(j) {
                            self.k.elementwise.add_bias(out.buf_mut(), b)?;
                        }
                    }
                    i += together;
                    continue;
                }
                self.f16_matmul(m, h, outs[i], bias(i))?;
                i += 1;
                continue;
            }
            let mode = self.plan.act_quant(m.ty, m.cols);
            // A run stops at a weight the f16 GEMM takes, so that each weight's path is its
            // own and not its neighbours'.
            let run = ws[i..]
                .iter()
                .take_while(|w| {
                    let w = w.matrix();
                    w.ty != GgmlType::F32
                        && self.plan.act_quant(w.ty, w.cols) == mode
                        && !self.takes_f16(w, x.rows)
                })
                .count();
            self.with_q8(x, mode, |xq| {
                let mut j = i;
                while j < i + run {
                    let m = ws[j].matrix();
                    // One token: two matrices of one format share a launch (q and k, say),
                    // and the next (v) joins it where the plan says so.
                    let pair = j + 1 < i + run && same_format(m, ws[j + 1].matrix());
                    if self.plan.qkv_one(x.rows) && pair && j + 2 < i + run {
                        let c = ws[j + 2].matrix();
                        let b3 = [bias(j), bias(j + 1), bias(j + 2)];
                        if self.triple(m, ws[j + 1].matrix(), c, xq, &mut outs[j..], b3)? {
                            j += 3;
                            continue;
                        }
                    }
                    if self.plan.pair_matvec(x.rows) && pair {
                        let (a, b) = outs[j..].split_at_mut(1);
                        let out = PairOut::Both(a[0].buf_mut(), b[0].buf_mut());
                        let wide = self.plan.matvec_wide(m.ty);
                        let fused = match (bias(j), bias(j + 1)) {
                            (Some(ba), Some(bb)) if self.plan.bias_in_matvec() => Some([ba, bb]),
                            _ => None,
                        };
                        self.k
                            .mmvq
                            .pair(wide, m, ws[j + 1].matrix(), xq, out, fused)?;
                        if fused.is_none() {
                            for jj in [j, j + 1] {
                                if let Some(b) = bias(jj) {
                                    self.k.elementwise.add_bias(outs[jj].buf_mut(), b)?;
                                }
                            }
                        }
                        j += 2;
                        continue;
                    }
                    self.qmatmul(m, xq, mode, outs[j], bias(j))?;
                    j += 1;
                }
                Ok(())
            })?;
            i += run;
        }
        if let Some(h) = x16 {
            self.halves.give(h);
        }
        Ok(())
    }

    /// One token's `a`, `b` (one format, the wide pair) and `c` into `outs[..3]` in one launch
    /// (`Mmvq::triple`), where `c`'s own launch would be the one-row mat-vec whose walk the
    /// kernel runs and the biases are all fused or none; `false` (nothing launched) otherwise.
    fn triple(
        &self,
        a: &QuantMatrix,
        b: &QuantMatrix,
        c: &QuantMatrix,
        xq: &CudaSlice<u8>,
        outs: &mut [&mut CudaAct],
        bias: [Option<&CudaSlice<f32>>; 3],
    ) -> Result<bool> {
        let Some((wide_c, biases)) = self.triple_walks(a, c, bias) else {
            return Ok(false);
        };
        let [oa, ob, oc, ..] = outs else {
            return Ok(false);
        };
        let out = [oa.buf_mut(), ob.buf_mut(), oc.buf_mut()];
        match self.k.mmvq.triple([a, b, c], wide_c, xq, out, biases) {
            Some(r) => r.map(|()| true),
            None => Ok(false),
        }
    }

    /// How a triple of `a`'s pair and `c` runs, where the plan lets one launch take them: v's
    /// walk (wide or block-per-row, as its own launch would take it) and the biases the
    /// launch adds (all three or none, where the mat-vec adds biases). `None` where q and k
    /// have no wide walk, v is not a mat-vec, or the biases cannot go in the launch.
    fn triple_walks<'b>(
        &self,
        a: &QuantMatrix,
        c: &QuantMatrix,
        bias: [Option<&'b CudaSlice<f32>>; 3],
    ) -> Option<(bool, Option<[&'b CudaSlice<f32>; 3]>)> {
        let Matmul::MatVec { wide: wide_c } = self.gemm_plan().matmul(c.ty, c.rows, c.cols, 1)
        else {
            return None;
        };
        let biases = match bias {
            [None, None, None] => None,
            [Some(ba), Some(bb), Some(bc)] if self.plan.bias_in_matvec() => Some([ba, bb, bc]),
            _ => return None,
        };
        self.plan.matvec_wide(a.ty).then_some((wide_c, biases))
    }

    /// The attention's norm and one token's q, k and v in one launch (`Mmvq::norm_triple`),
    /// where the plan asks for it and [`Self::triple`] would take the three: false (nothing
    /// launched) otherwise. `acc` becomes `acc + add` as the norm launch leaves it.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn norm_triple(
        &self,
        acc: &mut CudaAct,
        add: Option<&CudaAct>,
        w: &CudaWeight,
        eps: f32,
        ws: &[&CudaWeight],
        biases: &[&CudaWeight],
        outs: &mut [&mut CudaAct],
    ) -> Result<bool> {
        let (n, width) = (acc.rows, acc.width);
        if !self.plan.norm_in_qkv(n) || !self.plan.fused_norm(width) {
            return Ok(false);
        }
        let ([a, b, c], [oa, ob, oc]) = (ws, outs) else {
            return Ok(false);
        };
        let (a, b, c) = (a.matrix(), b.matrix(), c.matrix());
        let mode = self.plan.act_quant(a.ty, a.cols);
        let one_path = [a, b, c].iter().all(|m| {
            m.ty != GgmlType::F32
                && m.cols == width
                && self.plan.act_quant(m.ty, m.cols) == mode
                && !self.takes_f16(m, 1)
        });
        let bias = match biases {
            [] => [None; 3],
            [ba, bb, bc] => [Some(ba.vector()), Some(bb.vector()), Some(bc.vector())],
            _ => return Ok(false),
        };
        if !one_path || !same_format(a, b) {
            return Ok(false);
        }
        let Some((wide_c, biases)) = self.triple_walks(a, c, bias) else {
            return Ok(false);
        };
        let mut ticket = self.norm_ticket.lock().expect("norm ticket poisoned");
        let norm = NormIn {
            x: acc.buf_mut(),
            add: add.map(|a| a.buf()),
            w: w.vector(),
            eps,
            mode,
            ticket: &mut ticket,
        };
        let out = [oa.buf_mut(), ob.buf_mut(), oc.buf_mut()];
        match self
            .k
            .mmvq
            .norm_triple([a, b, c], wide_c, norm, out, biases)
        {
            Some(r) => r.map(|()| true),
            None => Ok(false),
        }
    }

    /// The FFN's norm and one token's SwiGLU gate/up in one launch (`Mmvq::norm_glu`), where
    /// the plan asks for it and [`Self::glu`] would take the wide pair: false (nothing
    /// launched) otherwise. `acc` becomes `acc + add` as the norm launch leaves it.
    pub(super) fn norm_glu(
        &self,
        acc: &mut CudaAct,
        add: &CudaAct,
        w: &CudaWeight,
        eps: f32,
        [wg, wu]: [&CudaWeight; 2],
        gate: &mut CudaAct,
    ) -> Result<bool> {
        let (g, u) = (wg.matrix(), wu.matrix());
        let takes = self.plan.norm_in_glu(acc.rows)
            && self.plan.fused_norm(acc.width)
            && g.cols == acc.width
            && same_format(g, u)
            && self.plan.matvec_wide(g.ty)
            && !self.takes_f16(g, 1)
            && !self.gemm_plan().f16_copy(gate.width, gate.rows);
        if !takes {
            return Ok(false);
        }
        let mut ticket = self.norm_ticket.lock().expect("norm ticket poisoned");
        let norm = NormIn {
            x: acc.buf_mut(),
            add: Some(add.buf()),
            w: w.vector(),
            eps,
            mode: self.plan.act_quant(g.ty, g.cols),
            ticket: &mut ticket,
        };
        match self.k.mmvq.norm_glu(g, u, norm, gate.buf_mut()) {
            Some(r) => r.map(|()| true),
            None => Ok(false),
        }
    }

    /// Whether `n` rows of `w` take the f16 path: a long ubatch's GEMM, expanded, or a
    /// batched decode step's, on the f16 mat-vec or the GEMM unpacking the weight.
    fn takes_f16(&self, w: &QuantMatrix, n: usize) -> bool {
        self.plan.f16_gemm(w.ty, w.rows, w.cols, n)
            || self.f16_matvec(w, n).is_some()
            || self.f16_decode(w, n).is_some()
    }

    /// How many of `ws`' first products (up to [`F16_MATVEC_MATS`]) share one f16 mat-vec
    /// launch (`FERROLM_F16_MATVEC_ONE`): consecutive ones of one format and width that each
    /// take the f16 mat-vec at `n` rows; 1 (or 0) where the plan keeps them apart.
    fn f16_matvec_run(&self, ws: &[&CudaWeight], n: usize) -> usize {
        let Some(first) = ws.first().map(|w| w.matrix()) else {
            return 0;
        };
        if !self.gemm_plan().f16_matvec_together() {
            return 1;
        }
        ws.iter()
            .take(F16_MATVEC_MATS)
            .take_while(|w| {
                let m = w.matrix();
                m.ty == first.ty && m.cols == first.cols && self.f16_matvec(m, n).is_some()
            })
            .count()
    }

    /// `ws`' products of `x16` (each taking the f16 mat-vec) in one launch, split as the plan
    /// splits their rows together; biases are the caller's.
    fn f16_matvec_together(
        &self,
        ws: &[&CudaWeight],
        x16: &CudaSlice<u16>,
        outs: &mut [&mut CudaAct],
    ) -> Result<()> {
        let ms: Vec<&QuantMatrix> = ws.iter().map(|w| w.matrix()).collect();
        let (first, n) = (ms[0], outs[0].rows);
        let rows = ms.iter().map(|m| m.rows).sum();
        let splits = self
            .gemm_plan()
            .f16_matvec(first.ty, rows, first.cols, n)
            .unwrap_or(1);
        let mut bufs: Vec<&mut CudaSlice<f32>> = outs.iter_mut().map(|o| o.buf_mut()).collect();
        self.f16_matvec_many(&ms, x16, n, splits, &mut bufs)
    }

    /// `ms`' products of the `n` rows of `x16` on the f16 mat-vec in one launch, split
    /// `splits` ways (a scratch from the pool where the shares go through one), as the plan
    /// says for the type; biases are the caller's.
    fn f16_matvec_many(
        &self,
        ms: &[&QuantMatrix],
        x16: &CudaSlice<u16>,
        n: usize,
        splits: usize,
        outs: &mut [&mut CudaSlice<f32>],
    ) -> Result<()> {
        let how = self.plan.f16_matvec_how(ms[0].ty);
        let rows = ms.iter().map(|m| m.rows).sum();
        let floats = crate::ops::MatVecF16::scratch(how, splits, n, rows);
        self.acts.with_scratch(floats, |part| {
            self.k
                .matvec_f16
                .matmul_many(how, splits, ms, x16, n, outs, part)
        })
    }

    /// The k shares of a batched step's `n` rows of `w` on the f16 mat-vec, if it takes it.
    fn f16_matvec(&self, w: &QuantMatrix, n: usize) -> Option<usize> {
        self.gemm_plan().f16_matvec(w.ty, w.rows, w.cols, n)
    }

    /// The k shares of a batched step's `n` rows of `w` on the unpacking f16 GEMM, if it
    /// takes it (the pass's plan: only passes of several sequences do).
    fn f16_decode(&self, w: &QuantMatrix, n: usize) -> Option<usize> {
        self.gemm_plan().f16_decode(w.ty, w.rows, w.cols, n)
    }

    /// `ms`' products of the `n` rows of `x16` (one matrix, or gate and up) on the unpacking
    /// f16 decode GEMM in one launch, split `ways` ways (a scratch from the pool where split),
    /// its variant as the plan says; biases are the caller's.
    fn f16_decode_many(
        &self,
        ms: &[&QuantMatrix],
        x16: &CudaSlice<u16>,
        n: usize,
        ways: usize,
        outs: &mut [&mut CudaSlice<f32>],
    ) -> Result<()> {
        let g = &self.k.gemm_wgmma;
        let rows = ms.iter().map(|m| m.rows).sum();
        let floats = crate::ops::GemmWgmma::split_floats(ways, n, rows);
        let deep = self.plan.f16_decode_deep();
        self.acts.with_scratch(floats, |part| {
            g.matmul_decode(x16, n, ms, outs, part.map(|p| (ways, p)), deep)
        })
    }

    /// The k shares of `ws`' first two products on the f16 decode GEMM in one launch, if the
    /// plan takes them so (`FERROLM_F16_DECODE_PAIR`: gate and up, one Q4_K shape, each of
    /// which takes that GEMM at `n` rows).
    fn f16_decode_pair(&self, ws: &[&CudaWeight], n: usize) -> Option<usize> {
        let [a, b] = [ws.first()?.matrix(), ws.get(1)?.matrix()];
        let one_shape = a.ty == b.ty && a.rows == b.rows && a.cols == b.cols;
        if !one_shape || self.f16_decode(a, n).is_none() {
            return None;
        }
        self.gemm_plan().f16_decode_pair(a.ty, a.rows, a.cols, n)
    }

    /// `out = x16 · Wᵀ (+ bias)` on the f16 path; `x16` holds `out.rows` rows of `w.cols`.
    /// A batched decode step's few rows take the f16 mat-vec or unpack `w` in the GEMM
    /// (`matmul_decode`), split over k as the plan says; a long ubatch's `w` is expanded to f16 in a scratch buffer first
    /// (each of its token tiles would unpack the weight again, Plan::f16_unpack).
    fn f16_matmul(
        &self,
        w: &QuantMatrix,
        x16: &CudaSlice<u16>,
        out: &mut CudaAct,
        bias: Option<&CudaSlice<f32>>,
    ) -> Result<()> {
        let g = &self.k.gemm_wgmma;
        let n = out.rows;
        if let Some(splits) = self.f16_matvec(w, n) {
            self.f16_matvec_many(&[w], x16, n, splits, &mut [out.buf_mut()])?;
        } else if let Some(ways) = self.f16_decode(w, n) {
            self.f16_decode_many(&[w], x16, n, ways, &mut [out.buf_mut()])?;
        } else {
            let mut w16 = self.halves.take(w.rows * w.cols)?;
            let done = g
                .expand(w, &mut w16)
                .and_then(|()| g.matmul(x16, n, &w16, w.rows, w.cols, out.buf_mut()));
            self.halves.give(w16);
            done?;
        }
        match bias {
            Some(b) => self.k.elementwise.add_bias(out.buf_mut(), b),
            None => Ok(()),
        }
    }

    /// Runs `f` on `x` quantized as `mode`: the copy the norm that produced `x` kept when it
    /// is that, or one quantized now and given back to the pool afterwards, whatever `f`
    /// returns.
    pub(super) fn with_q8<R>(
        &self,
        x: &CudaAct,
        mode: ActQuant,
        f: impl FnOnce(&CudaSlice<u8>) -> Result<R>,
    ) -> Result<R> {
        if let Some((q, m)) = &x.q8 {
            if *m == mode {
                return f(q);
            }
        }
        let q = self.quantize(x, mode)?;
        let r = f(&q);
        self.bytes.give(q);
        r
    }

    /// `out = rms_norm(x) * w`, with `out` quantized as `mode` kept for the matmuls that
    /// follow.
    pub(super) fn norm_q8(
        &self,
        x: &CudaAct,
        w: &CudaWeight,
        eps: f32,
        out: &mut CudaAct,
        mode: ActQuant,
    ) -> Result<()> {
        let mut q8 = self.bytes.take(Quantize::q8_1_bytes(out.rows, out.width))?;
        let r = self.out_and_f16(out).and_then(|(o, h)| {
            let nr = &self.k.norm_rope;
            nr.rms_norm_q8_1(x.buf(), w.vector(), eps, o, &mut q8, mode, h)
        });
        out.q8 = Some((q8, mode));
        r
    }

    /// `out`'s buffer for writing, and where the plan keeps one for the f16 products after it
    /// ([`Plan::f16_copy`](crate::plan::Plan::f16_copy)), a buffer for its f16 copy, which
    /// becomes `out`'s.
    fn out_and_f16<'a>(
        &self,
        out: &'a mut CudaAct,
    ) -> Result<(&'a mut CudaSlice<f32>, Option<&'a mut CudaSlice<u16>>)> {
        if self.gemm_plan().f16_copy(out.width, out.rows) {
            let (o, h) = out.buf_and_f16()?;
            Ok((o, Some(h)))
        } else {
            Ok((out.buf_mut(), None))
        }
    }

    /// `acc += add`, then as [`Self::norm_q8`].
    pub(super) fn norm_q8_add(
        &self,
        acc: &mut CudaAct,
        add: &CudaAct,
        w: &CudaWeight,
        eps: f32,
        out: &mut CudaAct,
        mode: ActQuant,
    ) -> Result<()> {
        let mut q8 = self.bytes.take(Quantize::q8_1_bytes(out.rows, out.width))?;
        let r = self.out_and_f16(out).and_then(|(o, h)| {
            let (nr, a, wv) = (&self.k.norm_rope, add.buf(), w.vector());
            nr.add_rms_norm_q8_1(acc.buf_mut(), a, wv, eps, o, &mut q8, mode, h)
        });
        out.q8 = Some((q8, mode));
        r
    }

    pub(super) fn glu(
        &self,
        wg: &CudaWeight,
        wu: &CudaWeight,
        x: &CudaAct,
        gate: &mut CudaAct,
        up: &mut CudaAct,
    ) -> Result<()> {
        let (g, u) = (wg.matrix(), wu.matrix());
        let mode = self.plan.act_quant(g.ty, g.cols);
        match &x.q8 {
            Some((xq, m)) if *m == mode && self.plan.pair_matvec(x.rows) && same_format(g, u) => {
                let wide = self.plan.matvec_wide(g.ty);
                self.k
                    .mmvq
                    .pair(wide, g, u, xq, PairOut::Glu(gate.buf_mut()), None)
            }
            _ => {
                self.matmul_all(&[wg, wu], &[], x, &mut [gate, up])?;
                let (g, h) = self.out_and_f16(gate)?;
                self.k.elementwise.swiglu_into(g, up.buf(), h)
            }
        }
    }
}
