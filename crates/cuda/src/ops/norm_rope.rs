//! `kernels/norm_rope.cu`: RMS norm (whole rows, or per-head groups in place) and RoPE.

use super::launch::{Arg, KernelArg, Launch, Launcher};
use super::{int, ActQuant, KvCache, KvFormat};
use crate::device::CudaDevice;
use crate::error::{DriverContext, Result};
use crate::kernels::NORM_ROPE;
use cudarc::driver::{CudaFunction, CudaSlice, LaunchConfig};

/// How a head's dimensions are paired (ferrolm_model's `RopeMode`, without the dependency).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rope {
    /// Adjacent pairs (2i, 2i+1).
    Normal,
    /// Halves (i, i + d/2).
    Neox,
}

/// The scaling part of `ggml_rope_ext`'s parameters as the kernels take them (`RopeScale` in
/// `kernels/norm_rope.cu`, passed by value): `mscale` is the magnitude, YaRN's gain included,
/// computed on the host as the CPU computes it.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RopeScale {
    pub freq_scale: f32,
    pub ext_factor: f32,
    pub mscale: f32,
    pub corr_low: f32,
    pub corr_high: f32,
}

impl RopeScale {
    /// Plain RoPE.
    pub const NONE: Self = Self {
        freq_scale: 1.0,
        ext_factor: 0.0,
        mscale: 1.0,
        corr_low: 0.0,
        corr_high: 0.0,
    };
}

impl<'a> KernelArg<'a> for &'a RopeScale {
    fn to_arg(self, _: &cudarc::driver::CudaStream) -> Arg<'a> {
        Arg::Value(
            self as *const RopeScale as *const std::ffi::c_void,
            std::marker::PhantomData,
        )
    }
}

/// What a rotation takes besides the activations: the base, the pairing, the scaling and the
/// per-pair frequency divisors (`head_dim / 2` floats) if the model has them; and, when the
/// pass has made one for these arguments ([`NormRope::rope_table`]), the table of its cos/sin.
#[derive(Clone, Copy)]
pub struct RopeArgs<'a> {
    pub base: f32,
    pub mode: Rope,
    pub scale: RopeScale,
    pub factors: Option<&'a CudaSlice<f32>>,
    /// `[rows][head_dim / 2]` (cos, sin) pairs as f32 bits, from `rope_table_f32`.
    pub table: Option<&'a CudaSlice<u32>>,
}

impl RopeArgs<'_> {
    /// Appends `theta_scale, ff|null, rs, table|null` for heads of `head_dim`.
    pub(crate) fn push<'a>(&'a self, b: &mut Launch<'a>, theta_scale: &'a f32, null: &'a u64) {
        b.arg(theta_scale);
        match self.factors {
            Some(f) => b.arg(f),
            None => b.arg(null),
        };
        b.arg(&self.scale);
        match self.table {
            Some(t) => b.arg(t),
            None => b.arg(null),
        };
    }
}

/// The `u32`s a RoPE table of `rows` positions takes for heads of `head_dim`: a (cos, sin) pair
/// of f32 a rotated pair.
pub fn rope_table_len(rows: usize, head_dim: usize) -> usize {
    rows * head_dim
}

pub struct NormRope {
    launch: Launcher,
    rms_norm: CudaFunction,
    add_rms_norm_q8_1: CudaFunction,
    /// `add_rms_norm_q8_1` on rows of exactly 2, 4 or 8 elements a thread
    /// (`LaunchMode::norm_exact`).
    add_rms_norm_exact_q8_1: CudaFunction,
    rope_table: CudaFunction,
    rope_norm: CudaFunction,
    rope_neox: CudaFunction,
    rope_qk_norm: CudaFunction,
    rope_qk_neox: CudaFunction,
    qk_norm_rope_norm: CudaFunction,
    qk_norm_rope_neox: CudaFunction,
    /// `qk_norm_rope_neox` with a head's values in registers (`LaunchMode::head_norm_regs`).
    qk_norm_head_rope_neox: CudaFunction,
    /// `[mode][cache]`: normal, neox × an f16, f32 cache.
    rope_qk_store: [[CudaFunction; 2]; 2],
    qk_norm_rope_store: [[CudaFunction; 2]; 2],
}

/// One block per group, about four elements per thread: a decode step normalizes one row, so
/// the row's block alone sets the kernel's latency. (The f64 sum's order follows the block size;
/// the fused and plain norms share this function, so they stay bit-identical.)
fn norm_cfg(groups: usize, n: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (groups as u32, 1, 1),
        block_dim: (norm_threads(n), 1, 1),
        shared_mem_bytes: 0,
    }
}

/// The threads of a norm's block over rows of `n` (32 to 1024, a multiple of 32); a kernel
/// that takes a norm in its own launch must take this block to give the norm's bits.
/// Whether `add_rms_norm_exact_q8_1_f32` takes rows of `n`: 2, 4 or 8 elements a thread of
/// norm_threads(n).
fn exact_row(n: usize) -> bool {
    let t = norm_threads(n) as usize;
    n.is_multiple_of(t) && matches!(n / t, 2 | 4 | 8)
}

/// Whether `qk_norm_head_rope_neox_f32` takes groups of `n` (norm_threads(n) threads): one
/// head a group, 2, 4 or 8 elements a thread.
fn head_in_registers(n: usize, head_dim: usize) -> bool {
    n == head_dim && exact_row(n)
}

pub(crate) fn norm_threads(n: usize) -> u32 {
    (n / 4 / 32 * 32).clamp(32, 1024) as u32
}

impl NormRope {
    pub fn load(dev: &CudaDevice, launch: &Launcher) -> Result<Self> {
        Ok(Self {
            launch: launch.clone(),
            rms_norm: dev.function(&NORM_ROPE, "rms_norm_f32")?,
            add_rms_norm_q8_1: dev.function(&NORM_ROPE, "add_rms_norm_q8_1_f32")?,
            add_rms_norm_exact_q8_1: dev.function(&NORM_ROPE, "add_rms_norm_exact_q8_1_f32")?,
            rope_table: dev.function(&NORM_ROPE, "rope_table_f32")?,
            rope_norm: dev.function(&NORM_ROPE, "rope_norm_f32")?,
            rope_neox: dev.function(&NORM_ROPE, "rope_neox_f32")?,
            rope_qk_norm: dev.function(&NORM_ROPE, "rope_qk_norm_f32")?,
            rope_qk_neox: dev.function(&NORM_ROPE, "rope_qk_neox_f32")?,
            qk_norm_rope_norm: dev.function(&NORM_ROPE, "qk_norm_rope_norm_f32")?,
            qk_norm_rope_neox: dev.function(&NORM_ROPE, "qk_norm_rope_neox_f32")?,
            qk_norm_head_rope_neox: dev.function(&NORM_ROPE, "qk_norm_head_rope_neox_f32")?,
            rope_qk_store: store_kernels(dev, "rope_qk_store")?,
            qk_norm_rope_store: store_kernels(dev, "qk_norm_rope_store")?,
        })
    }

    /// `out[t] = x[t] / sqrt(mean(x[t]²) + eps) * w` for every row of `w.len()` elements.
    pub fn rms_norm(
        &self,
        x: &CudaSlice<f32>,
        w: &CudaSlice<f32>,
        eps: f32,
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        assert_eq!(x.len(), out.len(), "rms_norm: x and out differ");
        assert!(x.len().is_multiple_of(w.len()), "rms_norm: not whole rows");
        let n = int(w.len(), "rms_norm width");
        let mut b = self.launch.builder(&self.rms_norm);
        b.arg(x).arg(w).arg(out).arg(&n).arg(&eps);
        // SAFETY: rms_norm_f32(x, w, out, n, eps), one block per n-element row of x and out.
        unsafe { b.launch(norm_cfg(x.len() / w.len(), w.len())) }
            .during("launching rms_norm_f32")?;
        Ok(())
    }

    /// `out = rms_norm(x) * w` and `outq` its activation blocks (quantized as `mode`) in one
    /// launch; bit-identical to [`Self::rms_norm`] then `Quantize::rows`. With `out16`, `out`
    /// rounded to f16 there too, bit-identical to `GemmWgmma::round_f16` of it.
    #[allow(clippy::too_many_arguments)]
    pub fn rms_norm_q8_1(
        &self,
        x: &CudaSlice<f32>,
        w: &CudaSlice<f32>,
        eps: f32,
        out: &mut CudaSlice<f32>,
        outq: &mut CudaSlice<u8>,
        mode: ActQuant,
        out16: Option<&mut CudaSlice<u16>>,
    ) -> Result<()> {
        self.norm_q8_1(x, None, w, eps, out, outq, mode, out16)
    }

    /// `x += add`, then as [`Self::rms_norm_q8_1`]; bit-identical to `add_f32` first.
    #[allow(clippy::too_many_arguments)]
    pub fn add_rms_norm_q8_1(
        &self,
        x: &mut CudaSlice<f32>,
        add: &CudaSlice<f32>,
        w: &CudaSlice<f32>,
        eps: f32,
        out: &mut CudaSlice<f32>,
        outq: &mut CudaSlice<u8>,
        mode: ActQuant,
        out16: Option<&mut CudaSlice<u16>>,
    ) -> Result<()> {
        assert_eq!(add.len(), x.len(), "add_rms_norm: lengths differ");
        self.norm_q8_1(x, Some(add), w, eps, out, outq, mode, out16)
    }

    /// The kernel writes `x` only when `add` is given, which only the `&mut` caller passes.
    #[allow(clippy::too_many_arguments)]
    fn norm_q8_1(
        &self,
        x: &CudaSlice<f32>,
        add: Option<&CudaSlice<f32>>,
        w: &CudaSlice<f32>,
        eps: f32,
        out: &mut CudaSlice<f32>,
        outq: &mut CudaSlice<u8>,
        mode: ActQuant,
        out16: Option<&mut CudaSlice<u16>>,
    ) -> Result<()> {
        assert_eq!(x.len(), out.len(), "rms_norm: x and out differ");
        assert!(
            out16.as_ref().is_none_or(|h| h.len() >= x.len()),
            "rms_norm q8_1: out16 too small"
        );
        assert!(x.len().is_multiple_of(w.len()), "rms_norm: not whole rows");
        let group = if mode == ActQuant::Q8K { 256 } else { 32 };
        assert!(
            w.len().is_multiple_of(group),
            "rms_norm q8_1: width not whole blocks"
        );
        assert!(
            outq.len() >= x.len() / 32 * super::Q8_1_BLOCK_BYTES,
            "rms_norm q8_1: outq too small"
        );
        let n = int(w.len(), "rms_norm width");
        let cfg = norm_cfg(x.len() / w.len(), w.len());
        let null = 0u64;
        let exact = self.launch.mode().norm_exact && exact_row(w.len());
        let f = if exact {
            &self.add_rms_norm_exact_q8_1
        } else {
            &self.add_rms_norm_q8_1
        };
        let mut b = self.launch.builder(f);
        b.arg(x);
        match add {
            Some(a) => b.arg(a),
            None => b.arg(&null),
        };
        let q8k = i32::from(mode == ActQuant::Q8K);
        b.arg(w).arg(out).arg(outq).arg(&n).arg(&eps).arg(&q8k);
        match out16 {
            Some(h) => b.arg(h),
            None => b.arg(&null),
        };
        // SAFETY: add_rms_norm_[exact_]q8_1_f32(x, add|null, w, out, outq, n, eps, q8k,
        // out16|null): rows of n floats in x/add/out, n/32 activation blocks per row in outq,
        // as many halves as x's floats in out16 (asserted above); the exact entry only where n
        // is 2, 4 or 8 elements a thread of norm_threads(n).
        unsafe { b.launch(cfg) }.during("launching add_rms_norm_q8_1_f32")?;
        Ok(())
    }

    pub fn rms_norm_groups(
        &self,
        x: &mut CudaSlice<f32>,
        w: &CudaSlice<f32>,
        eps: f32,
    ) -> Result<()> {
        assert!(
            x.len().is_multiple_of(w.len()),
            "rms_norm_groups: not whole groups"
        );
        let n = int(w.len(), "rms_norm group");
        let cfg = norm_cfg(x.len() / w.len(), w.len());
        let x: &CudaSlice<f32> = x; // read and written through one pointer, by one thread each
        let mut b = self.launch.builder(&self.rms_norm);
        b.arg(x).arg(w).arg(x).arg(&n).arg(&eps);
        // SAFETY: as rms_norm with out == x, which the kernel allows.
        unsafe { b.launch(cfg) }.during("launching rms_norm_f32 in place")?;
        Ok(())
    }

    /// Fills `table` with the cos and sin of every (position, pair) angle for heads of
    /// `head_dim` ([`rope_table_len`] `u32`s), as the rotations would compute them; `rope`'s own
    /// table is ignored. The rotations given it in [`RopeArgs::table`] read it instead: the
    /// same bits, without the angle chain and double cos/sin for every head of every layer.
    pub fn rope_table(
        &self,
        table: &mut CudaSlice<u32>,
        head_dim: usize,
        positions: &CudaSlice<u32>,
        rope: &RopeArgs<'_>,
    ) -> Result<()> {
        let n_tokens = positions.len();
        assert!(head_dim.is_multiple_of(2), "rope table: head_dim");
        assert!(
            table.len() >= rope_table_len(n_tokens, head_dim),
            "rope table: too small"
        );
        check_factors(rope, head_dim);
        let theta_scale = theta_scale(rope.base, head_dim);
        let (nt, half) = (int(n_tokens, "rope tokens"), int(head_dim / 2, "head_dim"));
        let null = 0u64;
        let table: &CudaSlice<u32> = table;
        let mut b = self.launch.builder(&self.rope_table);
        b.arg(table)
            .arg(positions)
            .arg(&nt)
            .arg(&half)
            .arg(&theta_scale);
        match rope.factors {
            Some(f) => b.arg(f),
            None => b.arg(&null),
        };
        b.arg(&rope.scale);
        // SAFETY: rope_table_f32(table, pos, n_tokens, half, theta_scale, ff|null, rs): one
        // thread per entry, n_tokens * half float2 entries in table (asserted), half factors.
        unsafe { b.launch(pairs_cfg(n_tokens * head_dim / 2)) }.during("launching rope_table")?;
        Ok(())
    }

    /// Rotates every `head_dim` head of every row of `x` in place; row `t` is at position
    /// `positions[t]` (one row per position).
    pub fn rope(
        &self,
        x: &mut CudaSlice<f32>,
        head_dim: usize,
        positions: &CudaSlice<u32>,
        rope: &RopeArgs<'_>,
    ) -> Result<()> {
        let n_tokens = positions.len();
        let width = rope_width(x.len(), n_tokens, head_dim);
        let theta_scale = theta_scale(rope.base, head_dim);
        let null = 0u64;
        let (nt, w, hd) = (
            int(n_tokens, "rope tokens"),
            int(width, "rope width"),
            int(head_dim, "head_dim"),
        );
        let f = match rope.mode {
            Rope::Normal => &self.rope_norm,
            Rope::Neox => &self.rope_neox,
        };
        let cfg = pairs_cfg(x.len() / 2);
        check_rope(rope, positions.len(), head_dim);
        let mut b = self.launch.builder(f);
        b.arg(x).arg(positions).arg(&nt).arg(&w).arg(&hd);
        rope.push(&mut b, &theta_scale, &null);
        // SAFETY: rope_*_f32(x, pos, n_tokens, width, head_dim, theta_scale, ff|null, rs,
        // table|null), one thread per pair of x, n_tokens positions, head_dim / 2 factors and a
        // table of n_tokens rows (checked).
        unsafe { b.launch(cfg) }.during("launching rope")?;
        Ok(())
    }

    /// [`Self::rope`] of `q` and of `k` (same tokens and head size) in one launch, bit-identical.
    pub fn rope_qk(
        &self,
        q: &mut CudaSlice<f32>,
        k: &mut CudaSlice<f32>,
        head_dim: usize,
        positions: &CudaSlice<u32>,
        rope: &RopeArgs<'_>,
    ) -> Result<()> {
        let sh = QkRope::new(q.len(), k.len(), positions.len(), head_dim, rope.base);
        let f = match rope.mode {
            Rope::Normal => &self.rope_qk_norm,
            Rope::Neox => &self.rope_qk_neox,
        };
        let cfg = pairs_cfg((q.len() + k.len()) / 2);
        check_rope(rope, positions.len(), head_dim);
        let null = 0u64;
        let mut b = self.launch.builder(f);
        b.arg(q).arg(k).arg(positions);
        b.arg(&sh.n_tokens).arg(&sh.width_q).arg(&sh.width_k);
        b.arg(&sh.head_dim);
        rope.push(&mut b, &sh.theta_scale, &null);
        // SAFETY: rope_qk_*_f32(q, k, pos, n, wq, wk, hd, theta_scale, ff|null, rs, table|null):
        // n rows of wq and wk floats, n positions, hd / 2 factors and a table of n rows
        // (checked); one thread per pair of either.
        unsafe { b.launch(cfg) }.during("launching rope_qk")?;
        Ok(())
    }

    /// [`Self::rms_norm_groups`] of `q` (weights `wq`) and of `k` (`wk`, as long), then
    /// [`Self::rope_qk`], in one launch and bit-identical. `None` (nothing launched) when the
    /// norm groups are not whole heads of both rows; the caller then runs the three steps.
    #[allow(clippy::too_many_arguments)]
    pub fn qk_norm_rope(
        &self,
        q: &mut CudaSlice<f32>,
        wq: &CudaSlice<f32>,
        k: &mut CudaSlice<f32>,
        wk: &CudaSlice<f32>,
        eps: f32,
        head_dim: usize,
        positions: &CudaSlice<u32>,
        rope: &RopeArgs<'_>,
    ) -> Option<Result<()>> {
        let sh = QkRope::new(q.len(), k.len(), positions.len(), head_dim, rope.base);
        let n = wq.len();
        if !sh.whole_head_groups(n, wk.len()) {
            return None;
        }
        let f = match rope.mode {
            Rope::Normal => &self.qk_norm_rope_norm,
            Rope::Neox if self.launch.mode().head_norm_regs && head_in_registers(n, head_dim) => {
                &self.qk_norm_head_rope_neox
            }
            Rope::Neox => &self.qk_norm_rope_neox,
        };
        check_rope(rope, positions.len(), head_dim);
        let null = 0u64;
        let cfg = norm_cfg((q.len() + k.len()) / n, n);
        let ni = int(n, "norm group");
        let mut b = self.launch.builder(f);
        b.arg(q).arg(wq).arg(k).arg(wk).arg(positions);
        b.arg(&sh.n_tokens)
            .arg(&sh.width_q)
            .arg(&sh.width_k)
            .arg(&ni);
        b.arg(&sh.head_dim);
        rope.push(&mut b, &sh.theta_scale, &null);
        b.arg(&eps);
        // SAFETY: qk_norm_rope_*_f32(q, wq, k, wk, pos, n_tokens, width_q, width_k, n,
        // head_dim, theta_scale, ff|null, rs, table|null, eps): n_tokens rows of width_q and
        // width_k floats, n-float weights, n_tokens positions, head_dim / 2 factors and a table
        // of n_tokens rows (checked); a block per n-element group of q then of k.
        Some(
            unsafe { b.launch(cfg) }
                .during("launching qk_norm_rope")
                .map(drop),
        )
    }

    /// Whether [`Self::rope_qk_store`] stores into `cache`: an f16 or f32 cache, not rotated.
    pub fn stores_into(cache: &KvCache) -> bool {
        matches!(cache.format, KvFormat::F16 | KvFormat::F32)
            && cache.k_rot.is_none()
            && cache.v_rot.is_none()
    }

    /// [`Self::rope_qk`] (with `norms`: [`Self::qk_norm_rope`]), each rotated key pair and its
    /// value pair stored in `cache` at its row's position in the same launch, bit for bit as
    /// the rotation then `Attention::store`. `None` (nothing launched) where the fusion does
    /// not apply: a block-format cache, one rotated (k_rot, v_rot), v not as wide as k, or
    /// norm groups that are not whole heads; the caller then runs the parts.
    #[allow(clippy::too_many_arguments)]
    pub fn rope_qk_store(
        &self,
        q: &mut CudaSlice<f32>,
        k: &mut CudaSlice<f32>,
        v: &CudaSlice<f32>,
        norms: Option<(&CudaSlice<f32>, &CudaSlice<f32>, f32)>,
        head_dim: usize,
        positions: &CudaSlice<u32>,
        rope: &RopeArgs<'_>,
        cache: &mut KvCache,
    ) -> Option<Result<()>> {
        if !Self::stores_into(cache) {
            return None;
        }
        let cache_ix = usize::from(cache.format == KvFormat::F32);
        let width = cache.n_kv_head * cache.head_dim;
        let rows = positions.len();
        let fits = cache.head_dim == head_dim
            && v.len() == k.len()
            && k.len() == rows * width
            && rows <= cache.n_ctx;
        if !fits {
            return None;
        }
        let sh = QkRope::new(q.len(), k.len(), rows, head_dim, rope.base);
        let mode_ix = match rope.mode {
            Rope::Normal => 0,
            Rope::Neox => 1,
        };
        check_rope(rope, rows, head_dim);
        let null = 0u64;
        let (kc, vc, pages) = (cache.k_addr(), cache.v_addr(), cache.pages());
        let qk_len = q.len() + k.len();
        let launched = match norms {
            None => {
                let mut b = self.launch.builder(&self.rope_qk_store[mode_ix][cache_ix]);
                b.arg(q)
                    .arg(k)
                    .arg(v)
                    .arg(&kc)
                    .arg(&vc)
                    .arg(&pages)
                    .arg(positions);
                b.arg(&sh.n_tokens).arg(&sh.width_q).arg(&sh.width_k);
                b.arg(&sh.head_dim);
                rope.push(&mut b, &sh.theta_scale, &null);
                // SAFETY: rope_qk_store_*(q, k, v, kc, vc, pages, pos, n, wq, wk, hd,
                // theta_scale, ff|null, rs, table|null): as rope_qk_*_f32, and v as long as k
                // (checked); the cache's pools and table hold this head shape, and blocks for
                // the rows' positions are in the table (BlockTable::prepare_write, the
                // caller's, as for Attention::store).
                unsafe { b.launch(pairs_cfg(qk_len / 2)) }.during("launching rope_qk_store")
            }
            Some((wq, wk, eps)) => {
                let n = wq.len();
                if !sh.whole_head_groups(n, wk.len()) {
                    return None;
                }
                let ni = int(n, "norm group");
                let mut b = self
                    .launch
                    .builder(&self.qk_norm_rope_store[mode_ix][cache_ix]);
                b.arg(q).arg(wq).arg(k).arg(wk).arg(v);
                b.arg(&kc).arg(&vc).arg(&pages).arg(positions);
                b.arg(&sh.n_tokens)
                    .arg(&sh.width_q)
                    .arg(&sh.width_k)
                    .arg(&ni);
                b.arg(&sh.head_dim);
                rope.push(&mut b, &sh.theta_scale, &null);
                b.arg(&eps);
                // SAFETY: qk_norm_rope_store_*(q, wq, k, wk, v, kc, vc, pages, pos, n_tokens,
                // width_q, width_k, n, head_dim, theta_scale, ff|null, rs, table|null, eps): as
                // qk_norm_rope_*_f32, and the store as rope_qk_store's above.
                unsafe { b.launch(norm_cfg(qk_len / n, n)) }.during("launching qk_norm_rope_store")
            }
        };
        Some(launched.map(drop))
    }
}

/// `{stem}_{norm,neox}_{f16,f32}`, as [`NormRope::rope_qk_store`] indexes them.
fn store_kernels(dev: &CudaDevice, stem: &str) -> Result<[[CudaFunction; 2]; 2]> {
    let f = |mode: &str, cache: &str| dev.function(&NORM_ROPE, &format!("{stem}_{mode}_{cache}"));
    Ok([
        [f("norm", "f16")?, f("norm", "f32")?],
        [f("neox", "f16")?, f("neox", "f32")?],
    ])
}

/// The kernel arguments that rotating q and k together takes (checked as [`rope_width`]).
struct QkRope {
    n_tokens: i32,
    width_q: i32,
    width_k: i32,
    head_dim: i32,
    theta_scale: f32,
}

impl QkRope {
    fn new(q_len: usize, k_len: usize, n_tokens: usize, head_dim: usize, base: f32) -> Self {
        Self {
            n_tokens: int(n_tokens, "rope tokens"),
            width_q: int(rope_width(q_len, n_tokens, head_dim), "rope width"),
            width_k: int(rope_width(k_len, n_tokens, head_dim), "rope width"),
            head_dim: int(head_dim, "head_dim"),
            theta_scale: theta_scale(base, head_dim),
        }
    }

    /// Whether norm weights of `n_q` and `n_k` floats group both rows into whole heads, as
    /// the fused norm + rotation kernels take them: one length, a multiple of `head_dim`,
    /// dividing both widths.
    fn whole_head_groups(&self, n_q: usize, n_k: usize) -> bool {
        let (wq, wk) = (self.width_q as usize, self.width_k as usize);
        let hd = self.head_dim as usize;
        n_q == n_k && n_q.is_multiple_of(hd) && wq.is_multiple_of(n_q) && wk.is_multiple_of(n_q)
    }
}

/// The row width of `len` floats over `n_tokens` rows, checked to be whole heads of an even
/// `head_dim`.
fn rope_width(len: usize, n_tokens: usize, head_dim: usize) -> usize {
    assert!(n_tokens > 0 && len.is_multiple_of(n_tokens), "rope: rows");
    let width = len / n_tokens;
    assert!(
        head_dim.is_multiple_of(2) && width.is_multiple_of(head_dim),
        "rope: head_dim"
    );
    width
}

/// The kernels read `head_dim / 2` factors when given any.
fn check_factors(rope: &RopeArgs<'_>, head_dim: usize) {
    if let Some(f) = rope.factors {
        assert_eq!(f.len(), head_dim / 2, "rope: frequency factors");
    }
}

/// [`check_factors`], and a table of all `n_tokens` rows when given one.
pub(crate) fn check_rope(rope: &RopeArgs<'_>, n_tokens: usize, head_dim: usize) {
    check_factors(rope, head_dim);
    if let Some(t) = rope.table {
        assert!(
            t.len() >= rope_table_len(n_tokens, head_dim),
            "rope: table rows"
        );
    }
}

/// `base^(-2 / head_dim)` as the CPU computes it, so both build the same angles.
pub(crate) fn theta_scale(base: f32, head_dim: usize) -> f32 {
    base.powf(-2.0 / head_dim as f32)
}

/// One thread per rotated pair.
fn pairs_cfg(pairs: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (pairs.div_ceil(256) as u32, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    }
}
