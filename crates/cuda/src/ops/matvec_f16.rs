//! `kernels/matvec_f16.cu`: Q4_K and Q6_K weights times up to 64 f16 activation rows on the f16 tensor
//! cores (the larger steps of a batched decode): each weight unpacked to f16 once for every
//! row (the f16 GEMM's arithmetic for Q4_K, `kquant_f16.cuh`), each super-block's activations
//! staged in shared memory once for a block's warps, k split over blocks where the row blocks
//! alone leave SMs idle.
//!
//! Contract: the f16 GEMM's (`ops/gemm_wgmma/`): Q4_K's weights as the GEMM's batched-decode
//! form unpacks them, Q6_K's as `(q - 32) · f16(d · sc)` rounded once in f16, the activations rounded to f16, f32 sums in a fixed order, several shares
//! added in share order; the same bits every run.

use super::launch::Launcher;
use super::{int, QuantMatrix};
use crate::device::CudaDevice;
use crate::error::{CudaError, DriverContext, Result};
use crate::kernels::MATVEC_F16;
use cudarc::driver::sys::CUdevice_attribute;
use cudarc::driver::{CudaFunction, CudaSlice, DevicePtr, DevicePtrMut, LaunchConfig};
use ferrolm_gguf::GgmlType;
use std::collections::HashMap;

/// Activation rows one launch takes (the kernel's MVF_MAX_COLS: eight column tiles of 8).
pub const F16_MATVEC_MAX_ROWS: usize = 64;
/// Weight rows a block takes (the kernel's MVF_ROWS: Q4_K's 4 warps of 32, Q6_K's 8 of 16).
pub const F16_MATVEC_BLOCK_ROWS: usize = 128;
/// The formats the kernel has, with their warps a block (`MvfFormat<TYPE>::WARPS`).
const FORMATS: [(GgmlType, u32); 2] = [(GgmlType::Q4K, 4), (GgmlType::Q6K, 8)];
/// Row blocks a split launch may have: the kernel's per-block counters.
pub const F16_MATVEC_SPLIT_BLOCKS: usize = 1024;
/// The kernel's MVF_SMEM: two stages of 64 activation rows of a super-block as f16.
const SMEM_BYTES: u32 = 2 * 64 * 512;
/// The `_ws` entries' shared memory (the kernel's `MvfFormat<TYPE>::WS_SMEM`): those stages and
/// two of a block's 128 weight rows of a super-block, each row's span the row stride from the
/// next: Q6_K's 224-byte span every 240 bytes (MVF_WS_SMEM), Q4_K's 144-byte block every 144
/// (MVF_WS4_SMEM).
const fn ws_smem_bytes(row_stride: u32) -> u32 {
    SMEM_BYTES + 2 * 128 * row_stride
}
/// The formats with `_ws` entries and their rows' stride in shared memory.
const WS_FORMATS: [(GgmlType, u32); 2] = [(GgmlType::Q4K, 144), (GgmlType::Q6K, 240)];
/// Elements a super-block holds: the width must be whole super-blocks.
const SUPER_BLOCK: usize = 256;
/// The most matrices one launch takes (the kernel's MVF_MATS: a step's q, k and v).
pub const F16_MATVEC_MATS: usize = 3;
/// The most shares a cluster sum takes (the kernel's MVF_CLUSTER_MAX: the portable cluster
/// size).
pub const F16_MATVEC_CLUSTER_MAX: usize = 8;

/// How a launch runs, as the plan says ([`crate::Plan::f16_matvec_how`]); the same bits
/// either way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MatVecF16How {
    /// The weights through shared memory where their layout allows it
    /// ([`MatVecF16::stages_weights`]).
    pub stage_weights: bool,
    /// A split product's row block launched as one cluster that adds its shares on chip
    /// ([`MatVecF16::cluster_sums`]); else the shares go through a scratch.
    pub cluster_sum: bool,
}

pub struct MatVecF16 {
    launch: Launcher,
    /// (type, column tiles) -> `matvec_f16_<type>_t<NT>` and its warps a block.
    fns: HashMap<(GgmlType, usize), (CudaFunction, u32)>,
    /// (type, column tiles) -> `matvec_f16_<type>_ws_t<NT>` (the weights through shared memory)
    /// and its shared memory.
    fns_ws: HashMap<(GgmlType, usize), (CudaFunction, u32)>,
    /// A zeroed counter per row block of a split launch; each block's last share resets it.
    done: CudaSlice<u32>,
}

impl MatVecF16 {
    pub fn load(dev: &CudaDevice, launch: &Launcher) -> Result<Self> {
        let entry = |name: String, smem: u32| -> Result<CudaFunction> {
            dev.function_with_smem(&MATVEC_F16, &name, smem as usize)
        };
        let mut fns = HashMap::new();
        for (ty, warps) in FORMATS {
            let name = super::kernel_suffix(ty);
            for nt in 1..=F16_MATVEC_MAX_ROWS / 8 {
                let f = entry(format!("matvec_f16_{name}_t{nt}"), SMEM_BYTES)?;
                fns.insert((ty, nt), (f, warps));
            }
        }
        // Only where a block may have that much shared memory (Hopper's 227 KB; not the
        // 99 KB of sm_86/89): elsewhere the register path serves every product.
        let optin = dev
            .context()
            .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
            .during("reading the shared memory limit")? as u32;
        let mut fns_ws = HashMap::new();
        for (ty, stride) in WS_FORMATS {
            let smem = ws_smem_bytes(stride);
            let name = super::kernel_suffix(ty);
            for nt in (1..=F16_MATVEC_MAX_ROWS / 8).filter(|_| smem <= optin) {
                let f = entry(format!("matvec_f16_{name}_ws_t{nt}"), smem)?;
                fns_ws.insert((ty, nt), (f, smem));
            }
        }
        Ok(Self {
            launch: launch.clone(),
            fns,
            fns_ws,
            done: dev.zeros(F16_MATVEC_SPLIT_BLOCKS)?,
        })
    }

    /// Whether `ty` weights of `cols` columns have this kernel.
    pub fn supports(ty: GgmlType, cols: usize) -> bool {
        FORMATS.iter().any(|&(t, _)| t == ty) && cols.is_multiple_of(SUPER_BLOCK) && cols > 0
    }

    /// Blocks of a `ty` product an SM holds at once: the kernel's eight warps an SM
    /// (`__launch_bounds__`) over the format's warps a block (Q4_K 2, Q6_K 1); 0 for a
    /// format without the kernel.
    pub fn blocks_per_sm(ty: GgmlType) -> usize {
        FORMATS
            .iter()
            .find(|&&(t, _)| t == ty)
            .map_or(0, |&(_, warps)| 8 / warps as usize)
    }

    /// Row blocks of a product of `rows` weight rows.
    pub fn row_blocks(rows: usize) -> usize {
        rows.div_ceil(F16_MATVEC_BLOCK_ROWS)
    }

    /// Whether a product split `splits` ways adds its shares in a cluster a row block: where
    /// `how` asks for it and the cluster takes the shares (2 to [`F16_MATVEC_CLUSTER_MAX`]).
    pub fn cluster_sums(how: MatVecF16How, splits: usize) -> bool {
        how.cluster_sum && (2..=F16_MATVEC_CLUSTER_MAX).contains(&splits)
    }

    /// Floats of the scratch a product of `n` × `rows` outputs split `splits` ways needs
    /// (none where its shares are added in a cluster).
    pub fn scratch(how: MatVecF16How, splits: usize, n: usize, rows: usize) -> usize {
        if splits > 1 && !Self::cluster_sums(how, splits) {
            splits * n * rows
        } else {
            0
        }
    }

    /// Whether `w`'s weights can come through shared memory (`stage_weights` in
    /// [`Self::matmul`]): the device has the entries' shared memory, the matrix starts 16-byte
    /// aligned, and (Q6_K) rows lie a multiple of 16 bytes apart (8 super-blocks a row), so that
    /// every row's block of a super-block sits at one offset in its 16-byte-aligned span
    /// (Q4_K's 144-byte blocks are all 16-byte aligned then).
    pub fn stages_weights(&self, w: &QuantMatrix) -> bool {
        let rows_aligned = match w.ty {
            GgmlType::Q4K => true,
            GgmlType::Q6K => (w.cols / SUPER_BLOCK).is_multiple_of(8),
            _ => false,
        };
        rows_aligned
            && self.fns_ws.contains_key(&(w.ty, 1))
            && w.data.device_ptr(self.launch.stream()).0 % 16 == 0
    }

    /// `out[j][r] = W[r] · x16[j]` for the `n` (1..=64) f16 rows of `x16`, k shared out
    /// `splits` ways (`part`: [`Self::scratch`] floats where that is more than none); `out`
    /// holds `n * w.rows` floats. `how`: the plan's choices for the type (the same bits).
    #[allow(clippy::too_many_arguments)]
    pub fn matmul(
        &self,
        how: MatVecF16How,
        splits: usize,
        w: &QuantMatrix,
        x16: &CudaSlice<u16>,
        n: usize,
        out: &mut CudaSlice<f32>,
        part: Option<&mut CudaSlice<f32>>,
    ) -> Result<()> {
        self.matmul_many(how, splits, &[w], x16, n, &mut [out], part)
    }

    /// [`Self::matmul`] of up to [`F16_MATVEC_MATS`] matrices of one format and width on the
    /// same `x16` in one launch (a batched step's q, k and v): `outs[m]` takes `ws[m]`'s
    /// products, each matrix's row blocks a share of the grid, all split `splits` ways (`part`:
    /// [`Self::scratch`] of the rows together). Each output's bits are those of its own launch
    /// split the same ways.
    #[allow(clippy::too_many_arguments)]
    pub fn matmul_many(
        &self,
        how: MatVecF16How,
        splits: usize,
        ws: &[&QuantMatrix],
        x16: &CudaSlice<u16>,
        n: usize,
        outs: &mut [&mut CudaSlice<f32>],
        part: Option<&mut CudaSlice<f32>>,
    ) -> Result<()> {
        let Some(&w) = ws.first() else {
            return Ok(());
        };
        let one_kind = ws
            .iter()
            .all(|m| m.ty == w.ty && m.cols == w.cols && m.rows > 0);
        let fits = (1..=F16_MATVEC_MATS).contains(&ws.len()) && outs.len() == ws.len();
        if !Self::supports(w.ty, w.cols)
            || !one_kind
            || !fits
            || !(1..=F16_MATVEC_MAX_ROWS).contains(&n)
        {
            return Err(CudaError::Invalid(format!(
                "matvec_f16: no kernel for {} matrices of {} × {} {} weights and {n} rows",
                ws.len(),
                w.rows,
                w.cols,
                w.ty
            )));
        }
        assert!(x16.len() >= n * w.cols, "matvec_f16: activations too small");
        for (m, out) in ws.iter().zip(outs.iter()) {
            assert!(out.len() >= n * m.rows, "matvec_f16: out too small");
        }
        let nt = n.div_ceil(8);
        // Staged only where every matrix's layout allows it (one entry serves the launch).
        let ws_path = how.stage_weights && ws.iter().all(|m| self.stages_weights(m));
        let (f, warps) = &self.fns[&(w.ty, nt)];
        let (f, warps, smem) = match ws_path {
            true => {
                let (f, smem) = &self.fns_ws[&(w.ty, nt)];
                (f, *warps, *smem)
            }
            false => (f, *warps, SMEM_BYTES),
        };
        let blocks = w.cols / SUPER_BLOCK;
        // Shares of ceil(blocks / splits) super-blocks, then as many as that takes (none
        // empty, never more than asked).
        let share = blocks.div_ceil(splits.clamp(1, blocks));
        let splits = blocks.div_ceil(share);
        let rows: usize = ws.iter().map(|m| m.rows).sum();
        let row_blocks: usize = ws.iter().map(|m| Self::row_blocks(m.rows)).sum();
        if splits > 1 && row_blocks > F16_MATVEC_SPLIT_BLOCKS {
            return Err(CudaError::Invalid(format!(
                "matvec_f16: split-K over {row_blocks} row blocks (at most \
                 {F16_MATVEC_SPLIT_BLOCKS})"
            )));
        }
        let cluster = Self::cluster_sums(how, splits);
        let through_scratch = splits > 1 && !cluster;
        let stream = self.launch.stream();
        let part_base = match part {
            Some(p) if through_scratch => {
                assert!(
                    p.len() >= Self::scratch(how, splits, n, rows),
                    "matvec_f16: split scratch too small"
                );
                p.device_ptr_mut(stream).0
            }
            None if through_scratch => {
                return Err(CudaError::Invalid(
                    "matvec_f16: a split product without its scratch".into(),
                ))
            }
            _ => 0,
        };
        let mut mats = MvfMatsArg::default();
        let (mut end, mut before) = (0, 0);
        for (i, (m, out)) in ws.iter().zip(outs.iter_mut()).enumerate() {
            end += Self::row_blocks(m.rows);
            mats.w[i] = m.data.device_ptr(stream).0;
            mats.dst[i] = out.device_ptr_mut(stream).0;
            // Each matrix's planes after the ones before it: splits × n × rows floats each.
            if through_scratch {
                mats.part[i] = part_base + (4 * splits * n * before) as u64;
            }
            mats.nrows[i] = int(m.rows, "matvec_f16 rows");
            mats.end[i] = int(end, "matvec_f16 row blocks");
            before += m.rows;
        }
        // Past the last matrix, ends that no block reaches.
        for i in ws.len()..F16_MATVEC_MATS {
            mats.end[i] = mats.end[ws.len() - 1];
        }
        let null = 0u64;
        let mut b = self.launch.builder(f);
        let (cols, rows_y, share_arg) = (
            int(w.cols, "matvec_f16 cols"),
            int(n, "matvec_f16 activation rows"),
            int(share, "matvec_f16 share"),
        );
        b.arg(&mats).arg(x16).arg(&cols).arg(&rows_y);
        if through_scratch {
            b.arg(&self.done);
        } else {
            b.arg(&null);
        }
        b.arg(&share_arg);
        if cluster {
            // A row block's shares one cluster (the grid's y is the shares): the kernel adds
            // them there and reads neither part nor done.
            b.cluster_along_y(splits as u32);
        }
        let cfg = LaunchConfig {
            grid_dim: (row_blocks as u32, splits as u32, 1),
            block_dim: (32, warps, 1),
            shared_mem_bytes: smem,
        };
        // SAFETY: matvec_f16_<type>[_ws]_t<NT>(mats, x, ncols, nrows_y, done, share): each of
        // mats' matrices rows x cols weights of the entry's type (whole super-blocks; _ws: from
        // a 16-byte-aligned start, Q6_K rows a multiple of 16 bytes apart, checked above) with n
        // x rows floats out, its row blocks the grid's x from the previous end to its own; n <=
        // 8 NT f16 rows of cols elements; split through the scratch, each part holds splits x n
        // x rows floats and done a zeroed counter per row block of the grid; MVF_SMEM (_ws: the
        // format's WS_SMEM) bytes of dynamic shared memory (allowed at load), which holds the
        // cluster sum's tile.
        unsafe { b.launch(cfg) }.during("launching matvec_f16")?;
        Ok(())
    }
}

/// The kernel's `MvfMats` by value (matvec_f16.cu): up to [`F16_MATVEC_MATS`] matrices'
/// weights, outputs and scratch planes by address, their rows, and the grid's row block where
/// each one's blocks end.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct MvfMatsArg {
    w: [u64; F16_MATVEC_MATS],
    dst: [u64; F16_MATVEC_MATS],
    part: [u64; F16_MATVEC_MATS],
    nrows: [i32; F16_MATVEC_MATS],
    end: [i32; F16_MATVEC_MATS],
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The launcher's copies of the kernel's shape: warps, rows a block, activation rows, the
    /// entries and the shared memory (two stages of 64 rows of a super-block as f16).
    #[test]
    fn launcher_agrees_with_the_kernel() {
        let src = MATVEC_F16.source;
        assert!(src.contains(&format!("#define MVF_ROWS {F16_MATVEC_BLOCK_ROWS}")));
        // Each format's warps a block, times its 16-row tiles a warp, make a block's rows.
        for (ty, warps, tiles, ggml) in [
            (GgmlType::Q4K, 4, 2, "GGML_TYPE_Q4_K"),
            (GgmlType::Q6K, 8, 1, "GGML_TYPE_Q6_K"),
        ] {
            assert!(FORMATS.contains(&(ty, warps)));
            assert_eq!(F16_MATVEC_BLOCK_ROWS, 16 * tiles * warps as usize);
            let decl = format!("template <> struct MvfFormat<{ggml}> {{");
            let at = src.find(&decl).expect("the format's traits");
            let traits = format!("static constexpr int WARPS = {warps}, TILES = {tiles};");
            assert!(src[at..].contains(&traits), "{ty}");
            let name = super::super::kernel_suffix(ty);
            assert!(src.contains(&format!("MVF_FORMAT({name}, {ggml})")));
        }
        assert!(src.contains(&format!("#define MVF_MAX_COLS {F16_MATVEC_MAX_ROWS}")));
        for nt in 1..=F16_MATVEC_MAX_ROWS / 8 {
            assert!(src.contains(&format!("MVF_ENTRY(NAME, TYPE, {nt})")));
        }
        assert!(src.contains("#define MVF_ROW_BYTES 512"));
        assert!(src.contains(&format!("#define MVF_CLUSTER_MAX {F16_MATVEC_CLUSTER_MAX}")));
        assert!(src.contains(&format!("#define MVF_MATS {F16_MATVEC_MATS}")));
        assert!(
            src.contains("8 / MvfFormat<TYPE>::WARPS)"),
            "eight warps an SM"
        );
        assert_eq!(MatVecF16::blocks_per_sm(GgmlType::Q4K), 2);
        assert_eq!(MatVecF16::blocks_per_sm(GgmlType::Q6K), 1);
        // MvfMats' fields in MvfMatsArg's order and sizes.
        assert!(src.contains(
            "struct MvfMats {\n    const void *w[MVF_MATS];\n    float *dst[MVF_MATS];\n    \
             float *part[MVF_MATS];\n    int nrows[MVF_MATS];\n    int end[MVF_MATS];\n};"
        ));
        assert_eq!(std::mem::size_of::<MvfMatsArg>(), 9 * 8 + 6 * 4);
        assert!(src.contains("#define MVF_SMEM (2 * MVF_STAGE_BYTES)"));
        assert_eq!(SMEM_BYTES, 2 * 64 * 512);
        assert!(src.contains("#define MVF_WS_ROW 240"));
        assert!(src.contains("#define MVF_WS_SMEM (2 * MVF_STAGE_BYTES + 2 * MVF_WS_STAGE_BYTES)"));
        assert!(src.contains("#define MVF_WS4_ROW 144"));
        assert!(
            src.contains("#define MVF_WS4_SMEM (2 * MVF_STAGE_BYTES + 2 * MVF_ROWS * MVF_WS4_ROW)")
        );
        assert_eq!(WS_FORMATS, [(GgmlType::Q4K, 144), (GgmlType::Q6K, 240)]);
        for (ty, ggml) in [
            (GgmlType::Q4K, "GGML_TYPE_Q4_K"),
            (GgmlType::Q6K, "GGML_TYPE_Q6_K"),
        ] {
            let name = super::super::kernel_suffix(ty);
            for nt in 1..=F16_MATVEC_MAX_ROWS / 8 {
                assert!(src.contains(&format!("MVF_ENTRY_AS({name}_ws, {ggml}, {nt}, true)")));
            }
        }
    }
}
