//! Which ggml type each tensor gets for a file type: llama.cpp's mixture rules.
//!
//! This follows the logic of `llama_tensor_get_type` in llama.cpp's `src/llama-quant.cpp`
//! for the file types ferrolm writes, including its order-dependent counters, so that
//! `ferrolm quantize` picks the same type as `llama-quantize` for every tensor.

use crate::arch::Arch;
use crate::config::Config;
use crate::error::{ModelError, Result};
use ferrolm_gguf::GgmlType;
use std::fmt;

/// A whole-file quantization type, as `llama-quantize` names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FileType {
    F32,
    F16,
    Bf16,
    Q8_0,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q2K,
    Q3KM,
    Q4KM,
    Q5KM,
    Q6K,
    /// llama.cpp's `MXFP4_MOE`, gpt-oss's released type: expert stacks MXFP4, other matrices
    /// Q8_0.
    Mxfp4Moe,
}

impl FileType {
    pub const ALL: [FileType; 14] = [
        Self::F32,
        Self::F16,
        Self::Bf16,
        Self::Q8_0,
        Self::Q4_0,
        Self::Q4_1,
        Self::Q5_0,
        Self::Q5_1,
        Self::Q2K,
        Self::Q3KM,
        Self::Q4KM,
        Self::Q5KM,
        Self::Q6K,
        Self::Mxfp4Moe,
    ];

    pub const fn name(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::F16 => "f16",
            Self::Bf16 => "bf16",
            Self::Q8_0 => "q8_0",
            Self::Q4_0 => "q4_0",
            Self::Q4_1 => "q4_1",
            Self::Q5_0 => "q5_0",
            Self::Q5_1 => "q5_1",
            Self::Q2K => "q2_k",
            Self::Q3KM => "q3_k_m",
            Self::Q4KM => "q4_k_m",
            Self::Q5KM => "q5_k_m",
            Self::Q6K => "q6_k",
            Self::Mxfp4Moe => "mxfp4_moe",
        }
    }

    /// Parses a name such as `q4_k_m` or `Q4_K_M`.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|t| t.name().eq_ignore_ascii_case(name))
    }

    /// All names, comma-separated, for messages.
    pub fn names() -> String {
        Self::ALL.map(Self::name).join(", ")
    }

    /// llama.cpp's `LLAMA_FTYPE_*` number, stored as `general.file_type`.
    pub const fn llama_ftype(self) -> u32 {
        match self {
            Self::F32 => 0,
            Self::F16 => 1,
            Self::Q4_0 => 2,
            Self::Q4_1 => 3,
            Self::Q8_0 => 7,
            Self::Q5_0 => 8,
            Self::Q5_1 => 9,
            Self::Q2K => 10,
            Self::Q3KM => 12,
            Self::Q4KM => 15,
            Self::Q5KM => 17,
            Self::Q6K => 18,
            Self::Bf16 => 32,
            Self::Mxfp4Moe => 38,
        }
    }

    pub fn from_llama_ftype(id: u32) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.llama_ftype() == id)
    }

    /// The type most tensors get; the rules below adjust some.
    pub const fn base_type(self) -> GgmlType {
        match self {
            Self::F32 => GgmlType::F32,
            Self::F16 => GgmlType::F16,
            Self::Bf16 => GgmlType::Bf16,
            Self::Q8_0 => GgmlType::Q8_0,
            Self::Q4_0 => GgmlType::Q4_0,
            Self::Q4_1 => GgmlType::Q4_1,
            Self::Q5_0 => GgmlType::Q5_0,
            Self::Q5_1 => GgmlType::Q5_1,
            Self::Q2K => GgmlType::Q2K,
            Self::Q3KM => GgmlType::Q3K,
            Self::Q4KM => GgmlType::Q4K,
            Self::Q5KM => GgmlType::Q5K,
            Self::Q6K => GgmlType::Q6K,
            Self::Mxfp4Moe => GgmlType::Mxfp4,
        }
    }

    pub const fn is_quantized(self) -> bool {
        !matches!(self, Self::F32 | Self::F16 | Self::Bf16)
    }
}

impl fmt::Display for FileType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The few model facts the rules look at.
#[derive(Clone, Copy, Debug)]
pub struct PolicyModel {
    pub n_layer: usize,
    /// 0 for dense models.
    pub n_expert: usize,
    /// Query heads per key/value head.
    pub n_gqa: usize,
    /// Llama-2/3-70B: 80 layers with grouped-query attention.
    pub llama_70b: bool,
}

impl From<&Config> for PolicyModel {
    fn from(c: &Config) -> Self {
        Self {
            n_layer: c.n_layer,
            n_expert: c.n_expert(),
            n_gqa: c.n_gqa(),
            llama_70b: c.arch == Arch::Llama && c.n_layer == 80 && c.n_head != c.n_head_kv,
        }
    }
}

/// A tensor as the rules see it: name, ggml dims, and its type in the source file.
#[derive(Clone, Copy, Debug)]
pub struct TensorRef<'a> {
    pub name: &'a str,
    pub dims: &'a [u64],
    pub src: GgmlType,
}

/// llama.cpp's layer pick for "more bits": the first and last eighth of the layers, and
/// every third layer in between.
pub fn use_more_bits(i_layer: usize, n_layer: usize) -> bool {
    i_layer < n_layer / 8 || i_layer >= 7 * n_layer / 8 || (i_layer - n_layer / 8) % 3 == 2
}

/// The type for every tensor of `tensors` (result in the same order).
///
/// llama.cpp numbers `attn_v` and dense `ffn_down` tensors by counters that advance in its
/// own processing order (by layer, then by name), so the rules are applied in that order
/// whatever order `tensors` come in.
pub fn choose_types(
    ftype: FileType,
    model: &PolicyModel,
    tensors: &[TensorRef],
) -> Result<Vec<GgmlType>> {
    let mut order: Vec<usize> = (0..tensors.len()).collect();
    order.sort_by_key(|&i| {
        let name = tensors[i].name;
        (layer_of(name).map_or(-1, |l| l as i64), name)
    });
    let mut state = State {
        ftype,
        model: *model,
        tied: !tensors.iter().any(|t| t.name == "output.weight"),
        n_attn_v: tensors
            .iter()
            .filter(|t| category(t.name).is_attn_v())
            .count(),
        i_attn_v: 0,
        i_ffn_down: 0,
    };
    let mut out = vec![GgmlType::F32; tensors.len()];
    for i in order {
        out[i] = state.pick(&tensors[i])?;
    }
    Ok(out)
}

/// Broad tensor roles, recognised by name as llama.cpp does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Category {
    TokenEmbd,
    Output,
    /// `attn_v`, and the fused `attn_qkv` / `attn_kv_b` that contain it.
    AttnV,
    AttnK,
    AttnOutput,
    FfnDown,
    Other,
}

impl Category {
    fn is_attn_v(self) -> bool {
        self == Category::AttnV
    }
}

fn category(name: &str) -> Category {
    match name {
        "output.weight" => return Category::Output,
        "token_embd.weight" => return Category::TokenEmbd,
        _ => {}
    }
    if ["attn_qkv.weight", "attn_kv_b.weight", "attn_v.weight"]
        .iter()
        .any(|p| name.contains(p))
    {
        Category::AttnV
    } else if name.contains("attn_k.weight") {
        Category::AttnK
    } else if name.contains("attn_output.weight") {
        Category::AttnOutput
    } else if name.contains("ffn_down") {
        Category::FfnDown
    } else {
        Category::Other
    }
}

/// The layer number of a `blk.N.*` tensor.
fn layer_of(name: &str) -> Option<usize> {
    let rest = name.strip_prefix("blk.")?;
    rest[..rest.find('.')?].parse().ok()
}

/// Only weight matrices are quantized: 1-D tensors, norms and the expert router keep
/// their source type.
fn allows_quantization(t: &TensorRef) -> bool {
    // ggml counts dimensions up to the last one that is not 1.
    let n_dims = t.dims.iter().rposition(|&d| d > 1).map_or(1, |i| i + 1);
    n_dims >= 2
        && t.name.ends_with("weight")
        && !t.name.contains("_norm.weight")
        && !t.name.contains("ffn_gate_inp.weight")
}

struct State {
    ftype: FileType,
    model: PolicyModel,
    /// No `output.weight`: `token_embd` doubles as the output and is treated like it.
    tied: bool,
    n_attn_v: usize,
    i_attn_v: usize,
    i_ffn_down: usize,
}

impl State {
    fn pick(&mut self, t: &TensorRef) -> Result<GgmlType> {
        use FileType as F;
        use GgmlType as G;
        if !allows_quantization(t) {
            return Ok(t.src);
        }
        let base = self.ftype.base_type();
        if !self.ftype.is_quantized() {
            return Ok(base);
        }
        let cat = category(t.name);
        if self.ftype == F::Mxfp4Moe {
            // llama.cpp: the output (or a tied embedding) and every 2-D matrix Q8_0, the
            // expert stacks (a third dimension above 1) MXFP4.
            let output = cat == Category::Output || (cat == Category::TokenEmbd && self.tied);
            let stack = t.dims.get(2).is_some_and(|&e| e > 1);
            return fallback(t, if stack && !output { G::Mxfp4 } else { G::Q8_0 });
        }
        let m = self.model;
        let eight_experts = m.n_expert == 8;
        let mut ty = base;
        let is_output = cat == Category::Output || (cat == Category::TokenEmbd && self.tied);
        match cat {
            _ if is_output => {
                ty = if !t.dims[0].is_multiple_of(base.block_elems() as u64) {
                    G::Q8_0
                } else if base != G::Q8_0 {
                    G::Q6K
                } else {
                    base
                };
            }
            Category::Output | Category::TokenEmbd => {}
            Category::AttnV => {
                let more = use_more_bits(self.i_attn_v, self.n_attn_v);
                ty = match self.ftype {
                    F::Q2K if m.n_gqa >= 4 => G::Q4K,
                    F::Q2K => G::Q3K,
                    F::Q3KM if self.i_attn_v < 2 => G::Q5K,
                    F::Q3KM => G::Q4K,
                    F::Q4KM | F::Q5KM if more => G::Q6K,
                    _ => ty,
                };
                // In 70B models eight heads share each v matrix, so it is small: spend bits.
                if m.llama_70b && matches!(ty, G::Q3K | G::Q4K) {
                    ty = G::Q5K;
                }
                if eight_experts {
                    ty = G::Q8_0;
                }
                self.i_attn_v += 1;
            }
            Category::AttnK if eight_experts => ty = G::Q8_0,
            Category::AttnK => {}
            Category::FfnDown => {
                // MoE expert tensors are numbered by their block; dense ones by the counter.
                let i = if m.n_expert > 1 {
                    layer_of(t.name).filter(|&l| l < m.n_layer).ok_or_else(|| {
                        ModelError::Tensor {
                            name: t.name.to_owned(),
                            what: format!("no layer number below {}", m.n_layer),
                        }
                    })?
                } else {
                    self.i_ffn_down
                };
                let n = m.n_layer;
                ty = match self.ftype {
                    F::Q2K => G::Q3K,
                    F::Q3KM if i < n / 16 => G::Q5K,
                    F::Q3KM => G::Q4K,
                    F::Q4KM | F::Q5KM if use_more_bits(i, n) => G::Q6K,
                    _ => ty,
                };
                self.i_ffn_down += 1;
            }
            Category::AttnOutput => {
                ty = match self.ftype {
                    F::Q2K | F::Q3KM | F::Q4KM if eight_experts => G::Q5K,
                    _ if eight_experts => ty,
                    F::Q2K => G::Q3K,
                    F::Q3KM => G::Q4K,
                    _ => ty,
                };
            }
            Category::Other => {}
        }
        fallback(t, ty)
    }
}

/// Rows that are not a whole number of blocks get a type with smaller blocks.
fn fallback(t: &TensorRef, ty: GgmlType) -> Result<GgmlType> {
    use GgmlType as G;
    let row = t.dims[0];
    let fits = |ty: GgmlType| row.is_multiple_of(ty.block_elems() as u64);
    if fits(ty) {
        return Ok(ty);
    }
    let smaller = match ty {
        G::Q2K | G::Q3K => G::Q4_0,
        G::Q4K => G::Q5_0,
        G::Q5K => G::Q5_1,
        G::Q6K => G::Q8_0,
        _ => {
            return Err(ModelError::Tensor {
                name: t.name.to_owned(),
                what: format!("row length {row} is not a multiple of {ty}'s block"),
            })
        }
    };
    // llama.cpp's last resort for rows that are not even a multiple of 32.
    Ok(if fits(smaller) { smaller } else { G::F16 })
}

#[cfg(test)]
#[path = "policy_tests.rs"]
mod tests;
