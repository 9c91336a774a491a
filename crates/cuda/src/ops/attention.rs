//! `kernels/attention.cu`: the f16 KV cache, flash-decoding, the scalar tiled prefill, and the
//! prefills in the CPU's arithmetic for short ubatches (ggml's below [`GGML_SMALL_ROWS`] rows,
//! the CPU's f32 order below [`REF_MAX_ROWS`]); `kernels/flash_attn.cu`: the tensor-core
//! prefill (the default from [`REF_MAX_ROWS`] query rows). `FERROLM_ATTN_MMA=0` or `=1` forces
//! the scalar or the tensor-core kernel at every size; `FERROLM_ATTN=f32` takes the f32 order
//! instead of ggml's arithmetic below [`GGML_SMALL_ROWS`].
//!
//! Positions live in device memory (`CudaSlice<u32>`), so a captured graph replays with new
//! positions without re-capture; the split count of decode is fixed per [`DecodeWork`] for the
//! same reason (each split takes `ceil(n_keys / n_split)` keys, computed on the device).

use super::int;
use crate::device::CudaDevice;
use crate::error::{CudaError, DriverContext, Result};
use crate::kernels::{ATTENTION, FLASH_ATTN};
use cudarc::driver::sys::CUfunction_attribute;
use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg};
use std::sync::Arc;

/// Warps per attention block (the kernel's ATTN_NWARPS).
const NWARPS: usize = 4;
/// Head sizes with a kernel instance.
pub const ATTN_HEAD_DIMS: [usize; 2] = [64, 128];
/// flash_attn.cu's tile: FA_BQ query rows (16 per warp, FA_NWARPS warps) per block, and its
/// shared memory: FA_STAGES stages of a K and a V tile of FA_BK keys, rows padded by FA_PAD.
const FA_NWARPS: usize = 4;
const FA_BQ: usize = 16 * FA_NWARPS;
const FA_BK: usize = 64;
const FA_STAGES: usize = 2;
const FA_PAD: usize = 8;

fn flash_smem_bytes(head_dim: usize) -> usize {
    FA_STAGES * 2 * FA_BK * (head_dim + FA_PAD) * std::mem::size_of::<u16>()
}

/// Which kernel computes prefill attention.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrefillKernel {
    /// flash_attn.cu: f16 tensor cores (Q and P rounded to f16, f32 accumulation).
    Mma,
    /// attention.cu's attn_prefill: one warp per query row, f32 throughout.
    Scalar,
    /// attention.cu's attn_prefill_f16ref: ggml's CPU arithmetic for short ubatches (f16 Q and
    /// output accumulator, keys in order), which the CPU backend reproduces too.
    F16Ref,
    /// attention.cu's attn_prefill_f32ref: the CPU's f32 arithmetic in its order (the CPU's
    /// path from 64 rows), for ubatches under [`REF_MAX_ROWS`] rows.
    F32Ref,
}

/// From this many query rows prefill takes the tensor-core kernel: below, the ubatch is short
/// enough that attention in the CPU's arithmetic costs little beside its GEMMs, and it keeps the
/// backends' results the same (the tiny goldens' 115-token passes differ in every layer on the
/// tensor-core kernel's f16 Q and P).
pub const REF_MAX_ROWS: usize = super::CPU_ORDER_MAX_ROWS;

/// Warps a block of attn_prefill_f32ref (the kernel's F32REF_WARPS), one per (row, head).
const F32REF_WARPS: usize = 4;

/// Below this many query rows a short ubatch runs ggml's CPU arithmetic (as llama.cpp's CPU and
/// ferrolm's do below 64 rows), where the tensor-core kernel's f16 rounding of Q and P had moved
/// the tiny q8_0 goldens from 181-183/185 to 178-179/185 top-1 on the H200.
pub const GGML_SMALL_ROWS: usize = 64;

impl PrefillKernel {
    /// `FERROLM_ATTN_MMA=0` forces the scalar kernel, `=1` the MMA one; unset (or anything
    /// else), `None`: chosen by the number of query rows.
    pub fn from_env() -> Option<Self> {
        match std::env::var("FERROLM_ATTN_MMA").as_deref() {
            Ok("0") => Some(PrefillKernel::Scalar),
            Ok("1") => Some(PrefillKernel::Mma),
            _ => None,
        }
    }

    /// The kernel for `n_q` query rows unless forced: below [`GGML_SMALL_ROWS`], ggml's
    /// arithmetic unless `ggml_small` is off (`FERROLM_ATTN=f32`); then the CPU's f32
    /// arithmetic below [`REF_MAX_ROWS`]; the tensor-core kernel from there.
    pub fn for_rows(forced: Option<Self>, n_q: usize, ggml_small: bool) -> Self {
        forced.unwrap_or(if n_q >= REF_MAX_ROWS {
            PrefillKernel::Mma
        } else if n_q < GGML_SMALL_ROWS && ggml_small {
            PrefillKernel::F16Ref
        } else {
            PrefillKernel::F32Ref
        })
    }

    /// `FERROLM_ATTN=f32` (the CPU's switch too): short ubatches in f32, not ggml's arithmetic.
    pub fn ggml_small_from_env() -> bool {
        std::env::var("FERROLM_ATTN").map_or(true, |v| v != "f32")
    }
}

/// One layer's keys and values on the device, f16 bits, head-major
/// `[n_kv_head][n_ctx][head_dim]` as the CPU's `LayerKv`.
pub struct KvCache {
    pub k: CudaSlice<u16>,
    pub v: CudaSlice<u16>,
    pub n_ctx: usize,
    pub n_kv_head: usize,
    pub head_dim: usize,
}

impl KvCache {
    pub fn new(dev: &CudaDevice, n_ctx: usize, n_kv_head: usize, head_dim: usize) -> Result<Self> {
        let len = n_ctx * n_kv_head * head_dim;
        Ok(Self {
            k: dev.zeros(len)?,
            v: dev.zeros(len)?,
            n_ctx,
            n_kv_head,
            head_dim,
        })
    }
}

/// Per-split partial results of flash-decoding: room for `max_q` query rows of `n_head`
/// heads, `n_split` splits each.
pub struct DecodeWork {
    m: CudaSlice<f32>,
    l: CudaSlice<f32>,
    acc: CudaSlice<f32>,
    /// `[max_q][n_head]` finished-split counters of the fused combine, zero between launches.
    done: CudaSlice<i32>,
    pub max_q: usize,
    pub n_head: usize,
    pub n_split: usize,
    pub head_dim: usize,
}

impl DecodeWork {
    pub fn new(
        dev: &CudaDevice,
        max_q: usize,
        n_head: usize,
        head_dim: usize,
        n_split: usize,
    ) -> Result<Self> {
        assert!(n_split > 0, "decode: no splits");
        let parts = max_q * n_head * n_split;
        Ok(Self {
            m: dev.zeros(parts)?,
            l: dev.zeros(parts)?,
            acc: dev.zeros(parts * head_dim)?,
            done: dev.zeros(max_q * n_head)?,
            max_q,
            n_head,
            n_split,
            head_dim,
        })
    }

    /// Splits for a cache of `n_ctx` positions: about 128 keys each at full context, at most
    /// 64 (with 32 heads that is 2048 blocks, plenty for 132 SMs).
    pub fn default_splits(n_ctx: usize) -> usize {
        n_ctx.div_ceil(128).clamp(1, 64)
    }
}

pub struct Attention {
    stream: Arc<CudaStream>,
    kv_store: CudaFunction,
    combine: CudaFunction,
    /// Per entry of ATTN_HEAD_DIMS.
    decode: Vec<CudaFunction>,
    prefill: Vec<CudaFunction>,
    flash: Vec<CudaFunction>,
    /// What [`prefill`](Attention::prefill) runs, fixed at load from the environment.
    /// Forced by `FERROLM_ATTN_MMA`, else chosen per call by the number of rows.
    pub prefill_kernel: Option<PrefillKernel>,
    /// Short ubatches on ggml's arithmetic ([`PrefillKernel::F16Ref`]), unless `FERROLM_ATTN=f32`.
    ggml_small: bool,
    prefill_f16ref: Vec<CudaFunction>,
    prefill_f32ref: Vec<CudaFunction>,
    /// Decode combines the splits in the split kernel's last block per head (one launch), or
    /// with `FERROLM_CUDA_FUSE=0` in a second kernel; the same arithmetic either way.
    fused_combine: bool,
}

fn dim_index(head_dim: usize) -> Result<usize> {
    ATTN_HEAD_DIMS
        .iter()
        .position(|&d| d == head_dim)
        .ok_or_else(|| CudaError::Invalid(format!("attention: no kernel for head_dim {head_dim}")))
}

/// Checks the shapes shared by decode and prefill; returns the number of query rows.
fn query_rows(q: usize, out: usize, positions: usize, n_head: usize, cache: &KvCache) -> usize {
    let width = n_head * cache.head_dim;
    assert!(
        n_head > 0 && n_head.is_multiple_of(cache.n_kv_head),
        "attention: {n_head} heads over {} KV heads",
        cache.n_kv_head
    );
    assert!(
        positions > 0 && q == positions * width,
        "attention: q is not one row per position"
    );
    assert!(out >= q, "attention: out too small");
    positions
}

impl Attention {
    pub fn load(dev: &CudaDevice) -> Result<Self> {
        let f = |name: String| dev.function(&ATTENTION, &name);
        // `<stem>_d<D>` for each of ATTN_HEAD_DIMS.
        let per_dim = |stem: &str| -> Result<Vec<CudaFunction>> {
            ATTN_HEAD_DIMS
                .iter()
                .map(|d| f(format!("{stem}_d{d}")))
                .collect()
        };
        let flash = ATTN_HEAD_DIMS
            .iter()
            .map(|&d| {
                let func = dev.function(&FLASH_ATTN, &format!("flash_attn_prefill_d{d}"))?;
                // Above 48 KiB a block gets dynamic shared memory only when asked for.
                func.set_attribute(
                    CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    int(flash_smem_bytes(d), "flash shared memory"),
                )
                .during("raising flash_attn_prefill's shared-memory limit")?;
                Ok(func)
            })
            .collect::<Result<_>>()?;
        Ok(Self {
            stream: dev.stream().clone(),
            kv_store: f("kv_store_f16".into())?,
            combine: f("attn_decode_combine".into())?,
            decode: per_dim("attn_decode_split")?,
            prefill: per_dim("attn_prefill")?,
            flash,
            prefill_kernel: PrefillKernel::from_env(),
            ggml_small: PrefillKernel::ggml_small_from_env(),
            prefill_f16ref: per_dim("attn_prefill_f16ref")?,
            prefill_f32ref: per_dim("attn_prefill_f32ref")?,
            fused_combine: std::env::var("FERROLM_CUDA_FUSE").map_or(true, |v| v != "0"),
        })
    }

    /// Stores rows of `k` and `v` (`[n][n_kv_head * head_dim]` f32) as f16 at positions
    /// `pos0[0]..pos0[0] + n`; the caller keeps them inside the cache.
    pub fn store(
        &self,
        cache: &mut KvCache,
        k: &CudaSlice<f32>,
        v: &CudaSlice<f32>,
        pos0: &CudaSlice<u32>,
    ) -> Result<()> {
        let width = cache.n_kv_head * cache.head_dim;
        assert_eq!(k.len(), v.len(), "kv_store: k and v differ");
        assert!(k.len().is_multiple_of(width), "kv_store: not whole rows");
        assert!(!pos0.is_empty(), "kv_store: no position");
        let n = k.len() / width;
        assert!(n <= cache.n_ctx, "kv_store: more rows than the cache holds");
        let (ni, nkv, hd, nctx) = (
            int(n, "kv rows"),
            int(cache.n_kv_head, "n_kv_head"),
            int(cache.head_dim, "head_dim"),
            int(cache.n_ctx, "n_ctx"),
        );
        let mut b = self.stream.launch_builder(&self.kv_store);
        b.arg(k)
            .arg(v)
            .arg(&mut cache.k)
            .arg(&mut cache.v)
            .arg(pos0)
            .arg(&ni)
            .arg(&nkv)
            .arg(&hd)
            .arg(&nctx);
        let cfg = LaunchConfig {
            grid_dim: (super::stride_blocks(k.len(), 256), 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: kv_store_f16(k, v, kc, vc, pos0, n, n_kv_head, head_dim, n_ctx): n rows of
        // width floats in, caches of n_ctx * width halves; pos0 + n <= n_ctx is the caller's.
        unsafe { b.launch(cfg) }.during("launching kv_store_f16")?;
        Ok(())
    }

    /// Decode: `out[t][h] = softmax(q[t][h] · K[0..=pos[t]][g]ᵀ / sqrt(d)) · V[..][g]` for a few
    /// query rows (at most `work.max_q`), split over `work.n_split` blocks per head.
    pub fn decode(
        &self,
        q: &CudaSlice<f32>,
        cache: &KvCache,
        positions: &CudaSlice<u32>,
        n_head: usize,
        work: &mut DecodeWork,
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        let f = &self.decode[dim_index(cache.head_dim)?];
        let n_q = query_rows(q.len(), out.len(), positions.len(), n_head, cache);
        assert!(
            n_q <= work.max_q && n_head == work.n_head && cache.head_dim == work.head_dim,
            "decode: work buffers of another shape"
        );
        let scale = 1.0 / (cache.head_dim as f32).sqrt();
        let (nh, nkv, nctx) = (
            int(n_head, "n_head"),
            int(cache.n_kv_head, "n_kv_head"),
            int(cache.n_ctx, "n_ctx"),
        );
        let fused = self.fused_combine;
        let mut b = self.stream.launch_builder(f);
        b.arg(q)
            .arg(&cache.k)
            .arg(&cache.v)
            .arg(positions)
            .arg(&mut work.m)
            .arg(&mut work.l)
            .arg(&mut work.acc);
        let null = 0u64; // a null pointer: no fused combine
        if fused {
            b.arg(&mut work.done).arg(&mut *out);
        } else {
            b.arg(&null).arg(&null);
        }
        b.arg(&nh).arg(&nkv).arg(&nctx).arg(&scale);
        let cfg = LaunchConfig {
            grid_dim: (work.n_split as u32, n_head as u32, n_q as u32),
            block_dim: ((NWARPS * 32) as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: attn_decode_split_dD(q, kc, vc, pos, m, l, acc, done, out, n_head, n_kv_head,
        // n_ctx, scale): n_q rows of q, positions below n_ctx (the caller's), partials and
        // counters sized by work (max_q >= n_q rows), out n_q * n_head * head_dim floats, or
        // done and out null when the combine kernel follows.
        unsafe { b.launch(cfg) }.during("launching attn_decode_split")?;
        if fused {
            return Ok(());
        }

        let (ns, hd) = (
            int(work.n_split, "n_split"),
            int(cache.head_dim, "head_dim"),
        );
        let mut b = self.stream.launch_builder(&self.combine);
        b.arg(&work.m)
            .arg(&work.l)
            .arg(&work.acc)
            .arg(out)
            .arg(&nh)
            .arg(&ns)
            .arg(&hd);
        let cfg = LaunchConfig {
            grid_dim: (n_head as u32, n_q as u32, 1),
            block_dim: (cache.head_dim as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: attn_decode_combine(m, l, acc, out, n_head, n_split, head_dim) over the
        // partials written just above; out holds n_q * n_head * head_dim floats.
        unsafe { b.launch(cfg) }.during("launching attn_decode_combine")?;
        Ok(())
    }

    /// Prefill: the same as [`decode`](Self::decode) for a ubatch of any number of query rows,
    /// on the kernel forced at load ([`PrefillKernel::from_env`]) or chosen by the row count
    /// ([`PrefillKernel::for_rows`]).
    pub fn prefill(
        &self,
        q: &CudaSlice<f32>,
        cache: &KvCache,
        positions: &CudaSlice<u32>,
        n_head: usize,
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        let n_q = positions.len();
        let kernel = PrefillKernel::for_rows(self.prefill_kernel, n_q, self.ggml_small);
        self.prefill_with(kernel, q, cache, positions, n_head, out)
    }

    /// [`prefill`](Self::prefill) on a named kernel (parity checks run both). Scalar: one warp
    /// per (row, head), K/V tiles staged in shared memory as f32. Mma: FA_BQ (row, head) pairs
    /// of one KV group per block, f16 tensor cores, K/V tiles copied asynchronously.
    pub fn prefill_with(
        &self,
        kernel: PrefillKernel,
        q: &CudaSlice<f32>,
        cache: &KvCache,
        positions: &CudaSlice<u32>,
        n_head: usize,
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        let di = dim_index(cache.head_dim)?;
        let n_q = query_rows(q.len(), out.len(), positions.len(), n_head, cache);
        let scale = 1.0 / (cache.head_dim as f32).sqrt();
        let (nq, nh, nkv, nctx) = (
            int(n_q, "query rows"),
            int(n_head, "n_head"),
            int(cache.n_kv_head, "n_kv_head"),
            int(cache.n_ctx, "n_ctx"),
        );
        let (f, cfg) = match kernel {
            PrefillKernel::Scalar => (
                &self.prefill[di],
                LaunchConfig {
                    grid_dim: (n_q.div_ceil(NWARPS) as u32, n_head as u32, 1),
                    block_dim: ((NWARPS * 32) as u32, 1, 1),
                    shared_mem_bytes: 0,
                },
            ),
            PrefillKernel::F32Ref => (
                &self.prefill_f32ref[di],
                LaunchConfig {
                    grid_dim: (
                        int((n_q * n_head).div_ceil(F32REF_WARPS), "f32ref blocks") as u32,
                        1,
                        1,
                    ),
                    block_dim: ((F32REF_WARPS * 32) as u32, 1, 1),
                    shared_mem_bytes: 0,
                },
            ),
            PrefillKernel::F16Ref => (
                &self.prefill_f16ref[di],
                LaunchConfig {
                    grid_dim: (n_q as u32, n_head as u32, 1),
                    block_dim: (cache.head_dim as u32, 1, 1),
                    shared_mem_bytes: 0,
                },
            ),
            PrefillKernel::Mma => {
                let rows = n_q * (n_head / cache.n_kv_head);
                let blocks = int(rows.div_ceil(FA_BQ), "flash blocks") as u32;
                (
                    &self.flash[di],
                    LaunchConfig {
                        grid_dim: (blocks, cache.n_kv_head as u32, 1),
                        block_dim: ((FA_NWARPS * 32) as u32, 1, 1),
                        shared_mem_bytes: flash_smem_bytes(cache.head_dim) as u32,
                    },
                )
            }
        };
        let mut b = self.stream.launch_builder(f);
        b.arg(q)
            .arg(&cache.k)
            .arg(&cache.v)
            .arg(positions)
            .arg(out)
            .arg(&nq)
            .arg(&nh)
            .arg(&nkv)
            .arg(&nctx)
            .arg(&scale);
        // SAFETY: attn_prefill[_f16ref|_f32ref]_dD and flash_attn_prefill_dD take (q, kc, vc,
        // pos, out, n_q, n_head, n_kv_head, n_ctx, scale): n_q rows in and out, positions below
        // n_ctx (the caller's); the flash kernel's dynamic shared memory is the size it was
        // raised to.
        unsafe { b.launch(cfg) }.during("launching attention prefill")?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefill_kernel_by_rows_unless_forced() {
        use PrefillKernel::{F16Ref, F32Ref, Mma, Scalar};
        assert_eq!(PrefillKernel::for_rows(None, 1, true), F16Ref);
        assert_eq!(
            PrefillKernel::for_rows(None, GGML_SMALL_ROWS - 1, true),
            F16Ref
        );
        assert_eq!(
            PrefillKernel::for_rows(None, GGML_SMALL_ROWS - 1, false),
            F32Ref
        );
        assert_eq!(PrefillKernel::for_rows(None, GGML_SMALL_ROWS, true), F32Ref);
        assert_eq!(
            PrefillKernel::for_rows(None, REF_MAX_ROWS - 1, true),
            F32Ref
        );
        assert_eq!(PrefillKernel::for_rows(None, REF_MAX_ROWS, true), Mma);
        assert_eq!(PrefillKernel::for_rows(None, 2048, false), Mma);
        assert_eq!(PrefillKernel::for_rows(Some(Mma), 9, true), Mma);
        assert_eq!(PrefillKernel::for_rows(Some(Scalar), 2048, true), Scalar);
    }

    #[test]
    fn f32ref_block_matches_the_kernel() {
        let src = crate::kernels::ATTENTION.source;
        assert!(src.contains(&format!("#define F32REF_WARPS {F32REF_WARPS}")));
    }

    #[test]
    fn splits_and_head_dims() {
        assert_eq!(DecodeWork::default_splits(1), 1);
        assert_eq!(DecodeWork::default_splits(1000), 8);
        assert_eq!(DecodeWork::default_splits(1 << 20), 64);
        assert_eq!(dim_index(64).unwrap(), 0);
        assert_eq!(dim_index(128).unwrap(), 1);
        assert!(dim_index(80).is_err());
        // 2 stages of K and V tiles, 64 keys of (D + 8) halves: the kernel's layout.
        assert_eq!(flash_smem_bytes(64), 36_864);
        assert_eq!(flash_smem_bytes(128), 69_632);
    }
}
