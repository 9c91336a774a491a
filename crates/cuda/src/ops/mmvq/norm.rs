//! The norm before one token's products taken in their launch (`mmvq.cu`'s
//! `mmvq_norm_triple_*` and `mmvq_norm_glu_*`, `norm_into_shared`): q/k/v after the
//! attention's norm, the SwiGLU gate/up after the FFN's.

use super::{int, norm_threads, stage_args, Mmvq, QuantMatrix, TripleShape, NULL, NWARPS};
use crate::error::{DriverContext, Result};
use crate::ops::launch::Launch;
use crate::ops::ActQuant;
use cudarc::driver::{CudaSlice, LaunchConfig};

impl Mmvq {
    /// [`Self::triple`] with the norm before it in the same launch (`FERROLM_NORM_IN_QKV`):
    /// `norm.x (+ norm.add)` normed and quantized by every block as `add_rms_norm_q8_1`
    /// would (its block's sums emulated, `norm.mode`'s codes), the residual `x + add` written
    /// back once: the same bits in the outputs and in `x` as that norm launch, then the
    /// triple. `None` where [`Self::triple`] would decline, or the row is not one the
    /// kernel's emulation covers (a multiple of 512 columns up to 4096).
    #[allow(clippy::too_many_arguments)]
    pub fn norm_triple(
        &self,
        ws: [&QuantMatrix; 3],
        wide_c: bool,
        norm: NormIn<'_>,
        outs: [&mut CudaSlice<f32>; 3],
        biases: Option<[&CudaSlice<f32>; 3]>,
    ) -> Option<Result<()>> {
        let f = self.norm_triples.get(&(ws[0].ty, ws[2].ty))?;
        let n = ws[0].cols;
        if !Self::norm_triple_width(n) {
            return None;
        }
        let t = TripleShape::new(ws, wide_c, &outs, biases, self.launch.mode())?;
        let mut norm = NormArgs::new(norm, n, "mmvq norm triple");
        let mut l = self.launch.builder(f);
        norm.push(&mut l);
        l.arg(&ws[0].data).arg(&ws[1].data).arg(&ws[2].data);
        t.args(&mut l, outs, biases);
        // SAFETY: mmvq_norm_triple_<ab>_<c>(x, add|null, norm_w, eps, norm_threads, q8k,
        // ticket, va, vb, vc, dst_a, ...): x, add and norm_w of ncols floats (asserted), a
        // ticket counter that is zero between launches (the kernel's last block resets it);
        // the rest as in `triple`; NORM_TRIPLE_SMEM(ncols) bytes of dynamic shared memory.
        let r = unsafe { l.launch(t.cfg(norm_triple_smem(n))) };
        Some(r.during(format!("launching mmvq norm triple for {}", ws[0].ty)))
    }

    /// One token's SwiGLU gate/up (the wide [`Self::pair`] into [`PairOut::Glu`]) with the
    /// norm before it in the same launch (`FERROLM_NORM_IN_GLU`), as [`Self::norm_triple`]
    /// takes it: the same bits in `out` and in `x` as the norm's launch and then the pair.
    /// `None` where `gate`'s format has no wide kernel, the two differ, the activations would
    /// be staged or the width is not one [`Self::norm_triple_width`] takes.
    pub fn norm_glu(
        &self,
        gate: &QuantMatrix,
        up: &QuantMatrix,
        norm: NormIn<'_>,
        out: &mut CudaSlice<f32>,
    ) -> Option<Result<()>> {
        let f = self.norm_glus.get(&gate.ty)?;
        let n = gate.cols;
        let fits = gate.ty == up.ty
            && up.cols == n
            && gate.rows == up.rows
            && Self::norm_triple_width(n)
            && stage_args(self.launch.mode(), true, n / 32).0 == 0;
        if !fits {
            return None;
        }
        let mut norm = NormArgs::new(norm, n, "mmvq norm glu");
        assert!(out.len() >= gate.rows, "mmvq norm glu: out too small");
        let cfg = LaunchConfig {
            grid_dim: (gate.rows.div_ceil(NWARPS as usize) as u32, 1, 1),
            block_dim: (32, NWARPS, 1),
            shared_mem_bytes: norm_triple_smem(n),
        };
        let (cols, rows) = (int(n, "mmvq cols"), int(gate.rows, "mmvq rows"));
        let prefetch = self
            .launch
            .mode()
            .prefetch_arg_for(gate.data.len() + up.data.len());
        let mut l = self.launch.builder(f);
        norm.push(&mut l);
        l.arg(&gate.data).arg(&up.data).arg(out);
        l.arg(&cols).arg(&rows).arg(&rows).arg(&prefetch);
        // SAFETY: mmvq_norm_glu_<type>(x, add|null, norm_w, eps, norm_threads, q8k, ticket,
        // va, vb, dst, ncols, nrows_a, nrows_b, prefetch): the row and the ticket as in
        // `norm_triple`, both matrices rows x cols of one format, dst their row count
        // (asserted); NORM_TRIPLE_SMEM(ncols) bytes of dynamic shared memory.
        let r = unsafe { l.launch(cfg) };
        Some(r.during(format!("launching mmvq norm glu for {}", gate.ty)))
    }

    /// Whether [`Self::norm_triple`] takes rows of `n` columns: its block of 128 threads
    /// stands for the norm's whole block (`norm_threads(n)` a multiple of 128, at most 8
    /// times it), and its shared copy of the row stays small.
    pub fn norm_triple_width(n: usize) -> bool {
        n.is_multiple_of(512) && n <= 4096
    }
}

/// The norm [`Mmvq::norm_triple`] takes in its launch: `x (+ add)` normed by `w`, quantized
/// as `mode`; `ticket` is one u32, zero, kept for these launches.
pub struct NormIn<'a> {
    pub x: &'a mut CudaSlice<f32>,
    pub add: Option<&'a CudaSlice<f32>>,
    pub w: &'a CudaSlice<f32>,
    pub eps: f32,
    pub mode: ActQuant,
    pub ticket: &'a mut CudaSlice<u32>,
}

/// A [`NormIn`] checked against the products' width, with the kernels' integer arguments
/// made once: the first seven arguments of every `mmvq_norm_*` entry.
struct NormArgs<'a> {
    norm: NormIn<'a>,
    /// `norm_threads(n)` (the norm block the kernel stands for) and `q8k`.
    ints: [i32; 2],
}

impl<'a> NormArgs<'a> {
    fn new(norm: NormIn<'a>, n: usize, what: &str) -> Self {
        assert!(
            norm.x.len() == n && norm.w.len() == n && norm.add.is_none_or(|a| a.len() == n),
            "{what}: the row is not the matrices' width"
        );
        assert!(!norm.ticket.is_empty(), "{what}: no ticket counter");
        let ints = [
            norm_threads(n) as i32,
            i32::from(norm.mode == ActQuant::Q8K),
        ];
        Self { norm, ints }
    }

    /// x, add|null, norm_w, eps, norm_threads, q8k, ticket.
    fn push<'b>(&'b mut self, l: &mut Launch<'b>) {
        let norm = &mut self.norm;
        l.arg(&mut *norm.x);
        match norm.add {
            Some(a) => l.arg(a),
            None => l.arg(&NULL),
        };
        l.arg(norm.w)
            .arg(&norm.eps)
            .arg(&self.ints[0])
            .arg(&self.ints[1]);
        l.arg(&mut *norm.ticket);
    }
}

/// `mmvq.cu`'s NORM_TRIPLE_SMEM: the normed row as floats, then its Q8_1 blocks.
fn norm_triple_smem(n: usize) -> u32 {
    (n * 4 + n / 32 * 36) as u32
}

#[cfg(test)]
mod tests {
    use super::{norm_threads, Mmvq, NWARPS};

    /// Every width the norm-in-launch kernels take has a norm block they can stand for:
    /// `norm_threads(n)` a multiple of their block's threads, at most NORM_TRIPLE_MAXV (8)
    /// times it (`add_norm_scale_as`'s bound), and rows of whole Q8_K groups.
    #[test]
    fn taken_widths_fit_the_emulation() {
        let block = 32 * NWARPS as usize;
        let taken: Vec<usize> = (1..=64)
            .map(|k| 64 * k)
            .filter(|&n| Mmvq::norm_triple_width(n))
            .collect();
        assert_eq!(taken, [512, 1024, 1536, 2048, 2560, 3072, 3584, 4096]);
        for n in taken {
            let nt = norm_threads(n) as usize;
            assert!(
                nt.is_multiple_of(block) && nt / block <= 8,
                "width {n}: {nt} threads"
            );
            assert!(n.is_multiple_of(256), "width {n}");
        }
    }
}
