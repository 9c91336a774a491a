//! RoPE scaling: the `{arch}.rope.scaling.*` keys, read as llama.cpp's loader reads them
//! (`llama-model.cpp`), and the [`Rope`] parameters derived from them as llama.cpp's context
//! derives what it hands `ggml_rope_ext` (`llama-context.cpp`, `ggml_rope_yarn_corr_dims`).

use crate::arch::Arch;
use crate::backend::{Rope, RopeMode};
use crate::config::key;
use crate::error::{ModelError, Result};
use ferrolm_gguf::{GgufFile, GgufWriter};

/// `{arch}.rope.scaling.type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeScalingKind {
    None,
    /// Position interpolation: every angle times `1 / factor`.
    Linear,
    /// YaRN: interpolation for low frequencies, extrapolation for high ones, a ramp between,
    /// and a magnitude gain.
    Yarn,
}

impl RopeScalingKind {
    pub fn name(self) -> &'static str {
        match self {
            RopeScalingKind::None => "none",
            RopeScalingKind::Linear => "linear",
            RopeScalingKind::Yarn => "yarn",
        }
    }
}

/// The RoPE scaling a model file asks for. The default is no scaling.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RopeScaling {
    /// `rope.scaling.type`; absent means `linear`, as in llama.cpp (`None` here at factor 1,
    /// which is the same computation).
    pub kind: RopeScalingKind,
    /// `rope.scaling.factor` (or the older `rope.scale_linear`); absent or 0 means 1.
    pub factor: f32,
    /// `rope.scaling.original_context_length`: YaRN's training context (absent: the model's
    /// `context_length`).
    pub n_ctx_orig: Option<usize>,
    /// `rope.scaling.attn_factor`: a magnitude on cos and sin (default 1).
    pub attn_factor: f32,
    /// `rope.scaling.yarn_ext_factor` (absent: 1 for YaRN, 0 otherwise).
    pub yarn_ext_factor: Option<f32>,
    /// `rope.scaling.yarn_attn_factor` (default 1; YaRN replaces it with its own gain).
    pub yarn_attn_factor: f32,
    /// `rope.scaling.yarn_beta_fast` / `yarn_beta_slow` (defaults 32 and 1).
    pub yarn_beta_fast: f32,
    pub yarn_beta_slow: f32,
    /// deepseek2's `rope.scaling.yarn_log_multiplier` as the file has it: 0.1 times the
    /// checkpoint's `mscale_all_dim` (0 when absent). llama.cpp divides it back by 0.1 and,
    /// with it, keeps cos and sin at magnitude `attn_factor` and moves YaRN's gain into the
    /// attention scale instead ([`Self::deepseek2_mscale`]).
    pub yarn_log_mul: f32,
}

impl Default for RopeScaling {
    fn default() -> Self {
        Self {
            kind: RopeScalingKind::None,
            factor: 1.0,
            n_ctx_orig: None,
            attn_factor: 1.0,
            yarn_ext_factor: None,
            yarn_attn_factor: 1.0,
            yarn_beta_fast: 32.0,
            yarn_beta_slow: 1.0,
            yarn_log_mul: 0.0,
        }
    }
}

/// The keys [`RopeScaling::from_gguf`] reads, after `{arch}.`.
pub const KEYS: [&str; 10] = [
    "rope.scaling.type",
    "rope.scaling.factor",
    "rope.scale_linear",
    "rope.scaling.original_context_length",
    "rope.scaling.attn_factor",
    "rope.scaling.yarn_ext_factor",
    "rope.scaling.yarn_attn_factor",
    "rope.scaling.yarn_beta_fast",
    "rope.scaling.yarn_beta_slow",
    // A note on training that changes nothing, in llama.cpp too.
    "rope.scaling.finetuned",
];

impl RopeScaling {
    pub fn from_gguf(f: &GgufFile, arch: Arch) -> Result<Self> {
        let k = |s: &str| key(arch, s);
        let f32_or = |s: &str, default: f32| -> Result<f32> {
            let full = k(s);
            Ok(match f.get(&full) {
                Some(_) => f.get_f32(&full)?,
                None => default,
            })
        };
        let factor = match f.get(&k("rope.scaling.factor")) {
            Some(_) => f.get_f32(&k("rope.scaling.factor"))?,
            None => f32_or("rope.scale_linear", 0.0)?,
        };
        let factor = if factor == 0.0 { 1.0 } else { factor };
        let kind = match f.get(&k("rope.scaling.type")) {
            // llama.cpp reads an absent type as linear, which at factor 1 is no scaling.
            None if factor == 1.0 => RopeScalingKind::None,
            None => RopeScalingKind::Linear,
            Some(_) => match f.get_str(&k("rope.scaling.type"))? {
                "none" => RopeScalingKind::None,
                "linear" => RopeScalingKind::Linear,
                "yarn" => RopeScalingKind::Yarn,
                other => {
                    return Err(ModelError::Hparam {
                        key: k("rope.scaling.type"),
                        what: format!("`{other}` is not supported (none, linear, yarn)"),
                    })
                }
            },
        };
        let n_ctx_orig_key = k("rope.scaling.original_context_length");
        let s = Self {
            kind,
            factor,
            n_ctx_orig: match f.get(&n_ctx_orig_key) {
                Some(_) => Some(f.get_usize(&n_ctx_orig_key)?),
                None => None,
            },
            attn_factor: f32_or("rope.scaling.attn_factor", 1.0)?,
            yarn_ext_factor: match f.get(&k("rope.scaling.yarn_ext_factor")) {
                Some(_) => Some(f.get_f32(&k("rope.scaling.yarn_ext_factor"))?),
                None => None,
            },
            yarn_attn_factor: f32_or("rope.scaling.yarn_attn_factor", 1.0)?,
            yarn_beta_fast: f32_or("rope.scaling.yarn_beta_fast", 32.0)?,
            yarn_beta_slow: f32_or("rope.scaling.yarn_beta_slow", 1.0)?,
            // Read for deepseek2 alone (elsewhere the key is refused as unknown).
            yarn_log_mul: if arch == Arch::Deepseek2 {
                f32_or("rope.scaling.yarn_log_multiplier", 0.0)?
            } else {
                0.0
            },
        };
        s.validate(arch)?;
        Ok(s)
    }

    fn validate(&self, arch: Arch) -> Result<()> {
        let positive = [
            ("rope.scaling.factor", self.factor),
            ("rope.scaling.attn_factor", self.attn_factor),
            ("rope.scaling.yarn_attn_factor", self.yarn_attn_factor),
            ("rope.scaling.yarn_beta_fast", self.yarn_beta_fast),
            ("rope.scaling.yarn_beta_slow", self.yarn_beta_slow),
        ];
        for (suffix, v) in positive {
            if !(v.is_finite() && v > 0.0) {
                return Err(ModelError::Hparam {
                    key: key(arch, suffix),
                    what: format!("{v} is not a positive number"),
                });
            }
        }
        if let Some(e) = self.yarn_ext_factor {
            if !(e.is_finite() && (0.0..=1.0).contains(&e)) {
                return Err(ModelError::Hparam {
                    key: key(arch, "rope.scaling.yarn_ext_factor"),
                    what: format!("{e} is not in 0..=1"),
                });
            }
        }
        if self.n_ctx_orig == Some(0) {
            return Err(ModelError::Hparam {
                key: key(arch, "rope.scaling.original_context_length"),
                what: "must be positive".into(),
            });
        }
        Ok(())
    }

    /// Writes the keys a converter writes for this scaling (nothing when there is none).
    pub fn write_to(&self, w: &mut GgufWriter, arch: Arch) {
        if *self == Self::default() {
            return;
        }
        let k = |s: &str| key(arch, s);
        w.set(&k("rope.scaling.type"), self.kind.name().to_owned());
        w.set(&k("rope.scaling.factor"), self.factor);
        if let Some(n) = self.n_ctx_orig {
            w.set(&k("rope.scaling.original_context_length"), n as u32);
        }
        if self.attn_factor != 1.0 {
            w.set(&k("rope.scaling.attn_factor"), self.attn_factor);
        }
        if self.yarn_log_mul != 0.0 {
            w.set(&k("rope.scaling.yarn_log_multiplier"), self.yarn_log_mul);
        }
    }

    /// `mscale_all_dim`, as llama.cpp holds it (the file's value over 0.1, in f32).
    fn mscale_all_dim(&self) -> f32 {
        self.yarn_log_mul / 0.1
    }

    /// deepseek2's attention `mscale` (llama.cpp's `deepseek2` graph): the attention scale is
    /// `mscale² / sqrt(key_length)` with `mscale = attn_factor_org · (1 + 0.1 · mscale_all_dim ·
    /// ln(1 / freq_scale))`, where `attn_factor_org` is the factor RoPE's cos and sin end up
    /// with (`rope.scaling.attn_factor`, times `yarn_attn_factor` without YaRN).
    pub fn deepseek2_mscale(&self) -> f32 {
        let r = self.params(RopeMode::Normal, 10000.0, 2, 1);
        // `1 / freq_scale` in f32, as llama.cpp derives it.
        let f = 1.0 / r.freq_scale;
        let org = r.attn_factor * (1.0 + 0.1 * f.ln());
        org * (1.0 + 0.1 * self.mscale_all_dim() * f.ln())
    }

    /// The parameters of `ggml_rope_ext` for heads of `n_dims` rotated dimensions: llama.cpp's
    /// context derivation (`freq_scale`, `ext_factor`, `attn_factor` with YaRN's gain, whose
    /// factor ggml multiplies back in, cancelled) and `ggml_rope_yarn_corr_dims`.
    pub fn params(&self, mode: RopeMode, base: f32, n_dims: usize, n_ctx: usize) -> Rope {
        let freq_scale = match self.kind {
            RopeScalingKind::None => 1.0,
            _ => 1.0 / self.factor,
        };
        let ext_factor = self
            .yarn_ext_factor
            .unwrap_or(if self.kind == RopeScalingKind::Yarn {
                1.0
            } else {
                0.0
            });
        let mut attn_factor = self.yarn_attn_factor;
        if ext_factor != 0.0 {
            let factor = 1.0 / freq_scale;
            let gain = |scale: f32| {
                if scale <= 1.0 {
                    1.0
                } else {
                    0.1 * scale.ln() + 1.0
                }
            };
            // With a log multiplier llama.cpp's context takes deepseek2's mscale equal to
            // mscale_all_dim, so its ratio of gains is 1: only ggml's own gain is cancelled.
            let gain = if self.yarn_log_mul != 0.0 {
                1.0
            } else {
                gain(factor)
            };
            attn_factor = gain / (1.0 + 0.1 * factor.ln());
        }
        attn_factor *= self.attn_factor;
        let n_ctx_orig = self.n_ctx_orig.unwrap_or(n_ctx) as f32;
        let corr_dim = |n_rot: f32| {
            n_dims as f32 * (n_ctx_orig / (n_rot * 2.0 * std::f32::consts::PI)).ln()
                / (2.0 * base.ln())
        };
        let corr_dims = [
            corr_dim(self.yarn_beta_fast).floor().max(0.0),
            corr_dim(self.yarn_beta_slow)
                .ceil()
                .min(n_dims as f32 - 1.0),
        ];
        Rope {
            mode,
            base,
            freq_scale,
            ext_factor,
            attn_factor,
            corr_dims,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_scaling_is_plain_rope() {
        let r = RopeScaling::default().params(RopeMode::Normal, 1e4, 64, 4096);
        assert_eq!((r.freq_scale, r.ext_factor, r.attn_factor), (1.0, 0.0, 1.0));
    }

    #[test]
    fn yarn_derives_as_llama_cpp() {
        let s = RopeScaling {
            kind: RopeScalingKind::Yarn,
            factor: 4.0,
            n_ctx_orig: Some(32768),
            ..RopeScaling::default()
        };
        let r = s.params(RopeMode::Neox, 1e6, 128, 131072);
        assert_eq!((r.freq_scale, r.ext_factor), (0.25, 1.0));
        // llama.cpp cancels the gain ggml applies: what it hands ggml is 1 here.
        assert!((r.attn_factor - 1.0).abs() < 1e-6);
        // 128 * ln(32768 / (32 * 2π)) / (2 ln 1e6) = 23.6 → 23; β_slow 1: 39.65 → 40.
        assert_eq!(r.corr_dims, [23.0, 40.0]);
    }
}
