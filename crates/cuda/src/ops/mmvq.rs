//! `kernels/mmvq.cu`: quantized weight times up to 8 Q8_1 activation rows (decode).
//!
//! Q4_K has wide kernels too (a warp per row, 16 code bytes a lane per load); the two differ
//! only in f32 summation order. The caller says which to launch (the plan's `matvec_wide`,
//! off with `FERROLM_MMVQ_WIDE=0`).

use super::int;
use super::launch::{Launch, LaunchMode, Launcher};
use super::norm_rope::norm_threads;

mod norm;
use crate::device::CudaDevice;
use crate::error::{CudaError, DriverContext, Result};
use crate::kernels::MMVQ;
use cudarc::driver::{CudaFunction, CudaSlice, CudaView, CudaViewMut, LaunchConfig};
use ferrolm_gguf::GgmlType;
pub use norm::NormIn;
use std::collections::HashMap;

/// Activation rows one launch takes (the kernel's MMVQ_MAX_COLS).
pub const MMVQ_MAX_COLS: usize = 8;
/// Warps per block (the kernel's MMVQ_NWARPS).
const NWARPS: u32 = 4;

/// A weight matrix on the device, in its ggml block format: `rows` rows of `cols` elements.
pub struct QuantMatrix {
    pub ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
    pub data: CudaSlice<u8>,
}

impl QuantMatrix {
    /// Uploads `data` (whole rows of `ty` blocks, as in a GGUF file).
    pub fn upload(
        dev: &CudaDevice,
        ty: GgmlType,
        rows: usize,
        cols: usize,
        data: &[u8],
    ) -> Result<Self> {
        let (be, bb) = ty.block_geometry();
        if !cols.is_multiple_of(be) || data.len() != rows * cols / be * bb {
            return Err(CudaError::Invalid(format!(
                "{ty} matrix {rows}x{cols}: {} bytes is not whole rows of blocks",
                data.len()
            )));
        }
        let data = if ty == GgmlType::Mxfp4 {
            dev.upload_padded(data, MXFP4_PAD)?
        } else {
            dev.upload(data)?
        };
        Ok(Self {
            ty,
            rows,
            cols,
            data,
        })
    }
}

/// Zero bytes after an MXFP4 matrix's last block: the kernels read a block's 17 bytes as the
/// aligned 4-byte words around it (quant.cuh's `mxfp4_load`), up to 3 bytes past its end.
const MXFP4_PAD: usize = 16;

pub struct Mmvq {
    launch: Launcher,
    /// (type, activation rows) -> entry point `mmvq_<type>_n<rows>`.
    fns: HashMap<(GgmlType, usize), CudaFunction>,
    /// (type, glu) -> `mmvq_glu_<type>` or `mmvq_pair_<type>`.
    pairs: HashMap<(GgmlType, bool), CudaFunction>,
    /// The same entry points' wide versions, for the formats with `matvec_wide`
    /// ([`formats`](super::formats)). Not Q6_K: its wide walk is slower than the block-per-row
    /// kernel as a dense mat-vec (2-byte-aligned blocks: twelve 16-bit loads a lane),
    /// docs/perf.md.
    wide_fns: HashMap<(GgmlType, usize), CudaFunction>,
    wide_pairs: HashMap<(GgmlType, bool), CudaFunction>,
    /// (q and k's type, v's type) -> `mmvq_wide_triple_<ab>_<c>` ([`TRIPLES`]).
    triples: HashMap<(GgmlType, GgmlType), CudaFunction>,
    /// The same, with the norm first: `mmvq_norm_triple_<ab>_<c>`.
    norm_triples: HashMap<(GgmlType, GgmlType), CudaFunction>,
    /// type -> `mmvq_norm_glu_<type>`, the wide GLU with the norm first (the wide formats).
    norm_glus: HashMap<GgmlType, CudaFunction>,
}

/// The formats [`Mmvq::triple`] has a kernel for: q and k's (the wide pair), v's, and whether
/// v takes the wide walk (as its own launch would: Q6_K's dense mat-vec is the block-per-row
/// one). `mmvq.cu`'s `MMVQ_TRIPLE` lines, in order.
pub const TRIPLES: [(GgmlType, GgmlType, bool); 3] = [
    (GgmlType::Q4K, GgmlType::Q4K, true),
    (GgmlType::Q4K, GgmlType::Q6K, false),
    (GgmlType::Q8_0, GgmlType::Q8_0, true),
];

/// What [`Mmvq::pair`] writes.
pub enum PairOut<'a> {
    /// `a · y` and `b · y`, each into its own buffer (q and k).
    Both(&'a mut CudaSlice<f32>, &'a mut CudaSlice<f32>),
    /// `silu(a · y) * (b · y)` (gate and up, SwiGLU fused).
    Glu(&'a mut CudaSlice<f32>),
}

impl Mmvq {
    pub fn load(dev: &CudaDevice, launch: &Launcher) -> Result<Self> {
        let mut fns = HashMap::new();
        let mut pairs = HashMap::new();
        for ty in super::formats::with(|f| f.matvec) {
            let name = super::kernel_suffix(ty);
            for n in 1..=MMVQ_MAX_COLS {
                fns.insert((ty, n), dev.function(&MMVQ, &format!("mmvq_{name}_n{n}"))?);
            }
            pairs.insert(
                (ty, false),
                dev.function(&MMVQ, &format!("mmvq_pair_{name}"))?,
            );
            pairs.insert(
                (ty, true),
                dev.function(&MMVQ, &format!("mmvq_glu_{name}"))?,
            );
        }
        let mut wide_fns = HashMap::new();
        let mut wide_pairs = HashMap::new();
        let mut norm_glus = HashMap::new();
        for ty in super::formats::with(|f| f.matvec_wide) {
            let name = super::kernel_suffix(ty);
            norm_glus.insert(ty, dev.function(&MMVQ, &format!("mmvq_norm_glu_{name}"))?);
            for n in 1..=MMVQ_MAX_COLS {
                let f = dev.function(&MMVQ, &format!("mmvq_wide_{name}_n{n}"))?;
                wide_fns.insert((ty, n), f);
            }
            for (glu, kind) in [(false, "pair"), (true, "glu")] {
                let f = dev.function(&MMVQ, &format!("mmvq_wide_{kind}_{name}"))?;
                wide_pairs.insert((ty, glu), f);
            }
        }
        let (mut triples, mut norm_triples) = (HashMap::new(), HashMap::new());
        for (ab, c, _) in TRIPLES {
            let name = format!("{}_{}", super::kernel_suffix(ab), super::kernel_suffix(c));
            let f = dev.function(&MMVQ, &format!("mmvq_wide_triple_{name}"))?;
            triples.insert((ab, c), f);
            let f = dev.function(&MMVQ, &format!("mmvq_norm_triple_{name}"))?;
            norm_triples.insert((ab, c), f);
        }
        Ok(Self {
            launch: launch.clone(),
            fns,
            pairs,
            wide_fns,
            wide_pairs,
            triples,
            norm_triples,
            norm_glus,
        })
    }

    /// Whether `ty` has wide kernels.
    pub fn has_wide(ty: GgmlType) -> bool {
        super::formats::has(ty, |f| f.matvec_wide)
    }

    /// Whether `ty` weights have a mat-vec (the formats the device holds weights in).
    pub fn supports(ty: GgmlType) -> bool {
        super::formats::has(ty, |f| f.matvec)
    }

    /// `out[j][r] = W[r] · x[j]` for the `n` (1..=8) Q8_1 rows of `xq` (`w.cols` elements each,
    /// from [`Quantize::q8_1`](super::Quantize::q8_1)); `out` holds `n * w.rows` floats.
    /// `wide`: the wide kernels (a format [`Self::has_wide`]), else the block-per-row ones.
    /// With `bias`, `bias[r]` is added to every output row `r` in the same launch: the bits of
    /// a separate add_bias after it.
    pub fn matvec(
        &self,
        wide: bool,
        w: &QuantMatrix,
        xq: &CudaSlice<u8>,
        n: usize,
        out: &mut CudaSlice<f32>,
        bias: Option<&CudaSlice<f32>>,
    ) -> Result<()> {
        self.matvec_view(wide, w, &xq.as_view(), n, &mut out.as_view_mut(), bias)
    }

    /// [`Self::matvec`] over views, so a caller can run a larger batch in slices of rows.
    pub fn matvec_view(
        &self,
        wide: bool,
        w: &QuantMatrix,
        xq: &CudaView<u8>,
        n: usize,
        out: &mut CudaViewMut<f32>,
        bias: Option<&CudaSlice<f32>>,
    ) -> Result<()> {
        let fns = if wide { &self.wide_fns } else { &self.fns };
        let f = fns.get(&(w.ty, n)).ok_or_else(|| {
            let walk = if wide { "wide " } else { "" };
            CudaError::Invalid(format!(
                "mmvq: no {walk}kernel for {} weights and {n} activation rows",
                w.ty
            ))
        })?;
        assert!(
            xq.len() >= super::Quantize::q8_1_bytes(n, w.cols),
            "mmvq: activations too small"
        );
        assert!(out.len() >= n * w.rows, "mmvq: out too small");
        assert!(
            bias.is_none_or(|b| b.len() >= w.rows),
            "mmvq: bias too short"
        );
        // Rows a warp (wide) or a block takes: one for a single column, else two.
        let rows_per_block = if n == 1 { 1 } else { 2 } * if wide { NWARPS as usize } else { 1 };
        let (stage, smem) = stage_args(self.launch.mode(), wide, n * w.cols / 32);
        let cfg = LaunchConfig {
            grid_dim: (w.rows.div_ceil(rows_per_block) as u32, 1, 1),
            block_dim: (32, NWARPS, 1),
            shared_mem_bytes: smem,
        };
        let (cols, rows) = (int(w.cols, "mmvq cols"), int(w.rows, "mmvq rows"));
        let prefetch = self.launch.mode().prefetch_arg_for(w.data.len());
        let null = 0u64;
        let mut b = self.launch.builder(f);
        b.arg(&w.data).arg(xq).arg(out);
        match bias {
            Some(v) => b.arg(v),
            None => b.arg(&null),
        };
        b.arg(&cols).arg(&rows).arg(&prefetch);
        if wide {
            b.arg(&stage);
        }
        // SAFETY: mmvq_[wide_]*_nN(vx, vy, dst, bias, ncols, nrows, prefetch[, stage]): rows x
        // cols weights, N Q8_1 rows of cols elements, N x rows floats out, rows floats of bias
        // or null, one block per rows_per_block rows; with stage, the shared bytes of
        // N * cols / 32 staged blocks.
        unsafe { b.launch(cfg) }.during(format!("launching mmvq for {}", w.ty))?;
        Ok(())
    }

    /// Two mat-vecs of one Q8_1 row in one launch, bit-identical to two [`Self::matvec`] calls
    /// (and, for [`PairOut::Glu`], to a following SwiGLU). `a` and `b` share format and width;
    /// `wide` as for [`Self::matvec`]. `biases` (with [`PairOut::Both`] only): each output's
    /// bias vector, as [`Self::matvec`]'s `bias`.
    pub fn pair(
        &self,
        wide: bool,
        a: &QuantMatrix,
        b: &QuantMatrix,
        xq: &CudaSlice<u8>,
        out: PairOut<'_>,
        biases: Option<[&CudaSlice<f32>; 2]>,
    ) -> Result<()> {
        assert!(
            a.ty == b.ty && a.cols == b.cols,
            "mmvq pair: matrices differ"
        );
        assert!(
            xq.len() >= super::Quantize::q8_1_bytes(1, a.cols),
            "mmvq pair: activations too small"
        );
        let glu = matches!(out, PairOut::Glu(_));
        let pairs = if wide { &self.wide_pairs } else { &self.pairs };
        let f = pairs.get(&(a.ty, glu)).ok_or_else(|| {
            CudaError::Invalid(format!("mmvq pair: no kernel for {} weights", a.ty))
        })?;
        let rows_per_block = if wide { NWARPS as usize } else { 1 };
        let (stage, smem) = stage_args(self.launch.mode(), wide, a.cols / 32);
        let cfg = LaunchConfig {
            grid_dim: (a.rows.max(b.rows).div_ceil(rows_per_block) as u32, 1, 1),
            block_dim: (32, NWARPS, 1),
            shared_mem_bytes: smem,
        };
        let (cols, rows_a, rows_b) = (
            int(a.cols, "mmvq cols"),
            int(a.rows, "mmvq rows"),
            int(b.rows, "mmvq rows"),
        );
        let prefetch = self
            .launch
            .mode()
            .prefetch_arg_for(a.data.len() + b.data.len());
        let null = 0u64;
        let mut l = self.launch.builder(f);
        l.arg(&a.data).arg(&b.data).arg(xq);
        match out {
            PairOut::Both(oa, ob) => {
                assert!(
                    oa.len() >= a.rows && ob.len() >= b.rows,
                    "mmvq pair: out too small"
                );
                l.arg(oa).arg(ob);
                match biases {
                    Some([ba, bb]) => {
                        assert!(
                            ba.len() >= a.rows && bb.len() >= b.rows,
                            "mmvq pair: bias too short"
                        );
                        l.arg(ba).arg(bb)
                    }
                    None => l.arg(&null).arg(&null),
                };
                l.arg(&cols).arg(&rows_a).arg(&rows_b).arg(&prefetch);
                if wide {
                    l.arg(&stage);
                }
                // SAFETY: mmvq_[wide_]pair_*(va, vb, vy, dst_a, dst_b, bias_a, bias_b, ncols,
                // nrows_a, nrows_b, prefetch[, stage]): both matrices hold their rows of cols
                // elements, outputs and biases (or nulls) their row counts; with stage, the
                // shared bytes of cols / 32 staged blocks.
                unsafe { l.launch(cfg) }.during(format!("launching mmvq pair for {}", a.ty))?;
            }
            PairOut::Glu(o) => {
                assert_eq!(a.rows, b.rows, "mmvq glu: gate and up differ");
                assert!(o.len() >= a.rows, "mmvq glu: out too small");
                assert!(biases.is_none(), "mmvq glu: no biases");
                let o: &CudaSlice<f32> = o;
                l.arg(o).arg(o).arg(&null).arg(&null);
                l.arg(&cols).arg(&rows_a).arg(&rows_b).arg(&prefetch);
                if wide {
                    l.arg(&stage);
                }
                // SAFETY: as above; with GLU only dst_a is written.
                unsafe { l.launch(cfg) }.during(format!("launching mmvq glu for {}", a.ty))?;
            }
        }
        Ok(())
    }

    /// One token's q, k and v in one launch (`FERROLM_QKV_ONE`): the wide [`Self::pair`] of
    /// `a` and `b`, and `c`'s one-row [`Self::matvec`] (`wide_c`: its walk, as the plan picks
    /// it for that launch), each block running the block of the launch it replaces: the same
    /// bits as the two. `None` (nothing launched) where no kernel takes these formats and
    /// walks ([`TRIPLES`]) or the activations would be staged; the caller then launches both.
    #[allow(clippy::too_many_arguments)]
    pub fn triple(
        &self,
        ws: [&QuantMatrix; 3],
        wide_c: bool,
        xq: &CudaSlice<u8>,
        outs: [&mut CudaSlice<f32>; 3],
        biases: Option<[&CudaSlice<f32>; 3]>,
    ) -> Option<Result<()>> {
        let f = self.triples.get(&(ws[0].ty, ws[2].ty))?;
        let t = TripleShape::new(ws, wide_c, &outs, biases, self.launch.mode())?;
        assert!(
            xq.len() >= super::Quantize::q8_1_bytes(1, ws[0].cols),
            "mmvq triple: activations too small"
        );
        let mut l = self.launch.builder(f);
        l.arg(&ws[0].data).arg(&ws[1].data).arg(&ws[2].data).arg(xq);
        t.args(&mut l, outs, biases);
        // SAFETY: mmvq_wide_triple_<ab>_<c>(va, vb, vc, vy, dst_a, dst_b, dst_c, bias_a|null,
        // bias_b|null, bias_c|null, ncols, nrows_a, nrows_b, nrows_c, pair_blocks, prefetch):
        // the matrices hold their rows of cols elements, one Q8_1 row of cols, outputs and
        // biases their row counts (TripleShape::new); the pair's blocks, then c's launch's.
        let r = unsafe { l.launch(t.cfg(0)) };
        Some(r.during(format!("launching mmvq triple for {}", ws[0].ty)))
    }
}

/// The grid and sizes of a triple launch, checked: the pair's blocks (a and b's rows, a warp
/// each), then c's launch's blocks (a warp a row when wide, else a block a row).
struct TripleShape {
    blocks: u32,
    ints: [i32; 6],
}

impl TripleShape {
    fn new(
        [a, b, c]: [&QuantMatrix; 3],
        wide_c: bool,
        outs: &[&mut CudaSlice<f32>; 3],
        biases: Option<[&CudaSlice<f32>; 3]>,
        mode: LaunchMode,
    ) -> Option<Self> {
        let takes = TRIPLES.contains(&(a.ty, c.ty, wide_c))
            && a.ty == b.ty
            && a.cols == b.cols
            && a.cols == c.cols
            && stage_args(mode, true, a.cols / 32).0 == 0;
        if !takes {
            return None;
        }
        let [oa, ob, oc] = outs;
        assert!(
            oa.len() >= a.rows && ob.len() >= b.rows && oc.len() >= c.rows,
            "mmvq triple: out too small"
        );
        if let Some(bs) = biases {
            assert!(
                bs[0].len() >= a.rows && bs[1].len() >= b.rows && bs[2].len() >= c.rows,
                "mmvq triple: bias too short"
            );
        }
        let nw = NWARPS as usize;
        let pair_blocks = a.rows.max(b.rows).div_ceil(nw);
        let c_blocks = if wide_c { c.rows.div_ceil(nw) } else { c.rows };
        let ints = [
            int(a.cols, "mmvq cols"),
            int(a.rows, "mmvq rows"),
            int(b.rows, "mmvq rows"),
            int(c.rows, "mmvq rows"),
            int(pair_blocks, "mmvq blocks"),
            mode.prefetch_arg_for(a.data.len() + b.data.len() + c.data.len()),
        ];
        let blocks = u32::try_from(pair_blocks + c_blocks).expect("mmvq triple: grid too large");
        Some(Self { blocks, ints })
    }

    fn cfg(&self, shared_mem_bytes: u32) -> LaunchConfig {
        LaunchConfig {
            grid_dim: (self.blocks, 1, 1),
            block_dim: (32, NWARPS, 1),
            shared_mem_bytes,
        }
    }

    /// The arguments after the activations: dst_a, dst_b, dst_c, the biases (or nulls),
    /// ncols, nrows_a, nrows_b, nrows_c, pair_blocks, prefetch.
    fn args<'a>(
        &'a self,
        l: &mut Launch<'a>,
        [oa, ob, oc]: [&'a mut CudaSlice<f32>; 3],
        biases: Option<[&'a CudaSlice<f32>; 3]>,
    ) {
        l.arg(oa).arg(ob).arg(oc);
        match biases {
            Some([ba, bb, bc]) => l.arg(ba).arg(bb).arg(bc),
            None => l.arg(&NULL).arg(&NULL).arg(&NULL),
        };
        for v in &self.ints {
            l.arg(v);
        }
    }
}

/// A null device pointer argument.
static NULL: u64 = 0;

/// The largest activation copy a wide walk stages in shared memory: the default dynamic limit
/// (no opt-in attribute needed).
const STAGE_MAX_BYTES: usize = 48 * 1024;

/// `(stage, shared bytes)` for a wide walk over `blocks` Q8_1 activation blocks: staged
/// (`stage_q8_1`, 36 bytes a block) when the launch mode asks and the copy fits, else `(0, 0)`.
pub(super) fn stage_args(mode: LaunchMode, wide: bool, blocks: usize) -> (i32, u32) {
    let bytes = blocks * 36;
    if mode.stage_activations && wide && bytes <= STAGE_MAX_BYTES {
        (1, bytes as u32)
    } else {
        (0, 0)
    }
}

#[cfg(test)]
mod tests {
    use super::TRIPLES;
    use crate::kernels::MMVQ;
    use crate::ops::kernel_suffix;

    /// `mmvq.cu`'s `MMVQ_TRIPLE` instances are [`TRIPLES`], with the same walk for v.
    #[test]
    fn triples_match_the_kernel_instances() {
        let found: Vec<String> = MMVQ
            .source
            .lines()
            .filter_map(|l| l.strip_prefix("MMVQ_TRIPLE("))
            .map(|args| args.trim_end_matches(')').replace(' ', ""))
            .collect();
        let want: Vec<String> = TRIPLES
            .iter()
            .map(|&(ab, c, wide)| {
                let (sab, sc) = (kernel_suffix(ab), kernel_suffix(c));
                let ty = |s: &str| format!("GGML_TYPE_{}", s.to_ascii_uppercase());
                format!("{sab}_{sc},{},{},{wide}", ty(&sab), ty(&sc))
            })
            .collect();
        assert_eq!(found, want);
    }
}
