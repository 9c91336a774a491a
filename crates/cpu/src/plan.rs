//! The CPU backend's plan: every switch and threshold that decides which kernel runs, in one
//! value built once (from the environment, or from explicit values in tests) and held by the
//! backend. Kernels ask it; none reads the environment or a global of its own.
//!
//! | question | answer |
//! |---|---|
//! | matmul level | `FERROLM_CPU_MATMUL`: unset the best this CPU runs (AVX-512 VNNI, AVX2, scalar); `avx2`/`scalar` cap it; `reference` dequantizes and sums in f32 |
//! | quantized matmul kernel for `n` rows | mat-vec (`gemv`) under [`GEMM_MIN_TOKENS`] rows, tiled `gemm` from there; `gemm` at every row count in batch-invariant mode; always the mat-vec at scalar level |
//! | Q4_K accumulation order | dense matmuls: pairs of units for the first `n - n % 4` rows when `n ≥ 4` (llama.cpp's tiled pass), whole blocks for the rest; experts and batch-invariant mode: blocks for every row |
//! | attention numerics ([`AttnPath`]) | ggml's one-chunk flash attention over an f16 cache under [`GGML_FA_TILE_Q`] rows and over quantized or mixed caches (`-ctk`/`-ctv`) at every size; f32 otherwise; batch-invariant mode: f32 over an f16 cache at every size; `FERROLM_ATTN=f32`: f32 always (quantized caches dequantized) |
//!
//! How work is split over threads (task sizes, cache blocking) stays next to each kernel: it
//! never changes a result.

use crate::kv::{KvElem, KvType};
use crate::matmul::{Isa, Order, Path};
use std::fmt;

/// From this many rows on, a quantized matmul repacks the weights for the tiled kernel (which
/// pays for the repacking from here on); fewer take the mat-vec kernel.
pub const GEMM_MIN_TOKENS: usize = 4;

/// llama.cpp's x86 Q4_K matmul runs whole groups of this many rows through its tiled kernel
/// (summing per pair of units) and the rest through its one-row kernel (per block).
pub const DENSE_PAIR_GROUP: usize = 4;

/// llama.cpp's CPU flash attention switches to f32 tiles at this many query rows.
pub const GGML_FA_TILE_Q: usize = 64;

/// How attention is evaluated (see `attention::attention`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttnPath {
    /// f32 throughout over the cached values, widened or dequantized.
    F32,
    /// ggml's `flash_attn_ext_f16_one_chunk`: q converted to K's `vec_dot_type`, an online
    /// softmax with V accumulated in f16 (f16 V) or f32 (other V types).
    OneChunk,
}

/// How matmuls are evaluated (`FERROLM_CPU_MATMUL`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MatmulMode {
    /// Dequantize and sum in f32 (`matmul_reference`), for bisecting.
    Reference,
    /// The fast kernels at this level.
    Fast(Isa),
}

/// A switch with a value it does not take.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanError {
    pub var: &'static str,
    pub value: String,
    pub expected: &'static str,
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}={:?}: expected {} (or unset)",
            self.var, self.value, self.expected
        )
    }
}

impl std::error::Error for PlanError {}

/// What the CPU backend runs. Built once per model; [`CpuPlan::set_batch_invariant`] is the
/// one setting a caller changes afterwards (the server turns it on).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuPlan {
    matmul: MatmulMode,
    attn_f32: bool,
    batch_invariant: bool,
}

impl CpuPlan {
    /// No switches: the best kernels this CPU runs, llama.cpp's numerics, batch-invariant off.
    pub fn detect() -> Self {
        Self::with_isa(Isa::detect())
    }

    /// No switches, kernels at level `isa` (tests and benchmarks pin a level this way).
    pub fn with_isa(isa: Isa) -> Self {
        Self {
            matmul: MatmulMode::Fast(isa),
            attn_f32: false,
            batch_invariant: false,
        }
    }

    /// From the process environment (`FERROLM_CPU_MATMUL`, `FERROLM_ATTN`).
    pub fn from_env() -> Result<Self, PlanError> {
        Self::from_vars(Isa::detect(), |name| {
            std::env::var_os(name).map(|v| v.to_string_lossy().into_owned())
        })
    }

    /// From the variables `var` returns, on a CPU whose best level is `best`. An empty value
    /// counts as unset.
    pub fn from_vars(best: Isa, var: impl Fn(&str) -> Option<String>) -> Result<Self, PlanError> {
        let get = |name| var(name).filter(|v| !v.is_empty());
        const MATMUL: &str = "FERROLM_CPU_MATMUL";
        let matmul = match get(MATMUL).as_deref() {
            None => MatmulMode::Fast(best),
            Some("reference") => MatmulMode::Reference,
            Some("scalar") => MatmulMode::Fast(Isa::Scalar),
            // Never above what the CPU has.
            Some("avx2") => MatmulMode::Fast(best.min(Isa::Avx2)),
            Some(other) => {
                return Err(PlanError {
                    var: MATMUL,
                    value: other.to_owned(),
                    expected: "reference, scalar or avx2",
                })
            }
        };
        const ATTN: &str = "FERROLM_ATTN";
        let attn_f32 = match get(ATTN).as_deref() {
            // `ggml` names the default, as the CUDA plan accepts it.
            None | Some("ggml") => false,
            Some("f32") => true,
            Some(other) => {
                return Err(PlanError {
                    var: ATTN,
                    value: other.to_owned(),
                    expected: "f32, or ggml (the default)",
                })
            }
        };
        Ok(Self {
            matmul,
            attn_f32,
            batch_invariant: false,
        })
    }

    /// Batch-invariant mode, for a server batching several sequences: quantized matmuls take
    /// the tiled kernel at every row count (SIMD levels), whose rows are computed independently
    /// of each other, so a sequence's logits do not depend on how many rows share its pass.
    /// Off, one to three rows take the faster mat-vec kernel, which sums in another order.
    /// Attention over an f16 cache then takes the f32 arithmetic at every row count, so a
    /// prompt row's result does not depend on how its prompt was cut into chunks (a server's
    /// chunks depend on its load and on a reused prefix's length). Not ggml's one-chunk
    /// rounding under 64 rows, which is also 5-7x slower over a long prompt's chunks.
    pub fn set_batch_invariant(&mut self, on: bool) {
        self.batch_invariant = on;
    }

    pub fn batch_invariant(&self) -> bool {
        self.batch_invariant
    }

    pub fn matmul_mode(&self) -> MatmulMode {
        self.matmul
    }

    /// The quantized kernel for `n` rows at level `isa` ([`Path::Gemv`] or [`Path::Gemm`]).
    pub fn quantized_path(&self, isa: Isa, n: usize) -> Path {
        if isa != Isa::Scalar && (n >= GEMM_MIN_TOKENS || self.batch_invariant) {
            Path::Gemm
        } else {
            Path::Gemv
        }
    }

    /// How many leading rows of an `n`-row call sum integer-scale formats (Q4_K) per pair of
    /// units; the rest sum per block (see [`Order`]).
    pub fn pair_tokens(&self, order: Order, n: usize) -> usize {
        match order {
            Order::Dense if n >= DENSE_PAIR_GROUP && !self.batch_invariant => {
                n - n % DENSE_PAIR_GROUP
            }
            _ => 0,
        }
    }

    /// The arithmetic of attention over a `kv` cache for `n` query rows: what ggml's CPU flash
    /// attention runs for the same cache (its tiled f32 kernel takes only f16/f32 caches with
    /// K and V of one type, from [`GGML_FA_TILE_Q`] rows), and f32 for an f32 cache (llama.cpp's
    /// precise configuration has no flash attention).
    pub fn attention_path(&self, kv: KvType, n: usize) -> AttnPath {
        let f16 = kv == KvType::F16 && n < GGML_FA_TILE_Q && !self.batch_invariant;
        let other = kv.k != kv.v || kv.k.is_quantized() || kv.v.is_quantized();
        if self.attn_f32 || kv == KvType::new(KvElem::F32, KvElem::F32) || !(f16 || other) {
            AttnPath::F32
        } else {
            AttnPath::OneChunk
        }
    }

    /// `FERROLM_ATTN=f32` (tests compare against it).
    pub fn with_attention_f32() -> Self {
        Self {
            attn_f32: true,
            ..Self::detect()
        }
    }
}

impl fmt::Display for CpuPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let on_off = |b| if b { "on" } else { "off" };
        match self.matmul {
            MatmulMode::Reference => write!(f, "matmul reference")?,
            MatmulMode::Fast(isa) => write!(
                f,
                "matmul {isa:?} (gemv under {GEMM_MIN_TOKENS} rows, then gemm)"
            )?,
        }
        write!(
            f,
            ", attention {}, batch-invariant {}",
            if self.attn_f32 {
                "f32".to_owned()
            } else if self.batch_invariant {
                "f32 over an f16 cache, ggml one-chunk over a quantized one".to_owned()
            } else {
                format!(
                    "ggml one-chunk under {GGML_FA_TILE_Q} rows over an f16 cache, always over \
                     a quantized one"
                )
            },
            on_off(self.batch_invariant)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn plan(best: Isa, vars: &[(&str, &str)]) -> Result<CpuPlan, PlanError> {
        let env: HashMap<String, String> = vars
            .iter()
            .map(|&(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        CpuPlan::from_vars(best, |k| env.get(k).cloned())
    }

    #[test]
    fn matmul_switch_picks_the_mode() {
        let mode = |best, v: &str| plan(best, &[("FERROLM_CPU_MATMUL", v)]).unwrap().matmul;
        assert_eq!(mode(Isa::Avx512, "reference"), MatmulMode::Reference);
        assert_eq!(mode(Isa::Avx512, "scalar"), MatmulMode::Fast(Isa::Scalar));
        assert_eq!(mode(Isa::Avx512, "avx2"), MatmulMode::Fast(Isa::Avx2));
        assert_eq!(mode(Isa::Scalar, "avx2"), MatmulMode::Fast(Isa::Scalar));
        assert_eq!(mode(Isa::Avx2, ""), MatmulMode::Fast(Isa::Avx2));
        assert_eq!(plan(Isa::Avx2, &[]).unwrap(), CpuPlan::with_isa(Isa::Avx2));
    }

    #[test]
    fn a_bad_value_is_an_error_naming_the_variable() {
        for (var, value) in [("FERROLM_CPU_MATMUL", "avx512"), ("FERROLM_ATTN", "f16")] {
            let e = plan(Isa::Avx2, &[(var, value)]).unwrap_err();
            assert_eq!((e.var, e.value.as_str()), (var, value));
            let msg = e.to_string();
            assert!(msg.contains(var) && msg.contains(value), "{msg}");
        }
    }

    #[test]
    fn batch_invariant_mode_takes_gemm_and_blocks_at_every_size() {
        let mut p = CpuPlan::with_isa(Isa::Avx2);
        assert_eq!(p.quantized_path(Isa::Avx2, 1), Path::Gemv);
        assert_eq!(p.quantized_path(Isa::Avx2, 3), Path::Gemv);
        assert_eq!(p.quantized_path(Isa::Avx2, 4), Path::Gemm);
        assert_eq!(p.quantized_path(Isa::Scalar, 64), Path::Gemv);
        assert_eq!(p.pair_tokens(Order::Dense, 3), 0);
        assert_eq!(p.pair_tokens(Order::Dense, 11), 8);
        assert_eq!(p.pair_tokens(Order::Rows, 11), 0);
        assert_eq!(p.attention_path(KvType::F16, 1), AttnPath::OneChunk);
        p.set_batch_invariant(true);
        assert_eq!(p.attention_path(KvType::F16, 1), AttnPath::F32);
        assert_eq!(p.attention_path(KvType::F16, 512), AttnPath::F32);
        assert_eq!(p.attention_path(KvType::Q8_0, 1), AttnPath::OneChunk);
        assert_eq!(p.quantized_path(Isa::Avx2, 1), Path::Gemm);
        assert_eq!(p.quantized_path(Isa::Scalar, 1), Path::Gemv);
        assert_eq!(p.pair_tokens(Order::Dense, 11), 0);
    }

    #[test]
    fn attention_switch_turns_off_the_ggml_rounding() {
        let p = plan(Isa::Avx2, &[]).unwrap();
        let q4 = KvType::new(KvElem::Q4_0, KvElem::Q4_0);
        let mixed = KvType::new(KvElem::F16, KvElem::Q8_0);
        assert_eq!(p.attention_path(KvType::F16, 63), AttnPath::OneChunk);
        assert_eq!(p.attention_path(KvType::F16, 64), AttnPath::F32);
        assert_eq!(p.attention_path(KvType::F32, 1), AttnPath::F32);
        for kv in [KvType::Q8_0, q4, mixed] {
            assert_eq!(p.attention_path(kv, 1), AttnPath::OneChunk);
            assert_eq!(p.attention_path(kv, 512), AttnPath::OneChunk);
        }
        assert_eq!(plan(Isa::Avx2, &[("FERROLM_ATTN", "ggml")]).unwrap(), p);
        let f32 = plan(Isa::Avx2, &[("FERROLM_ATTN", "f32")]).unwrap();
        for kv in [KvType::F16, KvType::Q8_0, q4, mixed] {
            assert_eq!(f32.attention_path(kv, 1), AttnPath::F32);
        }
    }

    #[test]
    fn display_names_every_setting() {
        let mut p = plan(Isa::Avx2, &[("FERROLM_ATTN", "f32")]).unwrap();
        p.set_batch_invariant(true);
        assert_eq!(
            p.to_string(),
            "matmul Avx2 (gemv under 4 rows, then gemm), attention f32, batch-invariant on"
        );
        let r = plan(Isa::Avx2, &[("FERROLM_CPU_MATMUL", "reference")]).unwrap();
        assert_eq!(
            r.to_string(),
            "matmul reference, attention ggml one-chunk under 64 rows over an f16 cache, \
             always over a quantized one, batch-invariant off"
        );
    }
}
