//! Recipes: a small JSON file that fully determines a random test model, so that the golden
//! models under `goldens/` are regenerated rather than committed.
//!
//! A recipe lists the GGUF metadata (typed key/values, in file order), the tensors in file
//! order (name, ggml dims with the row length first, how to draw the values, and optionally
//! the type they are stored in, e.g. MXFP4 experts as a converted checkpoint keeps them) and a
//! seed. [`write_recipe`] writes it as given ("the F32 file"); [`synth_recipe`] then applies
//! ferrolm's quantizer for other file types, which writes what llama.cpp's quantizer does.
//!
//! The values come from a counter-based generator whose every step is exact IEEE arithmetic,
//! so the bytes depend on nothing but the recipe (no crate version, platform or libm):
//!
//! - `mix(z)` is SplitMix64's finalizer; `fnv(s)` is 64-bit FNV-1a of the UTF-8 bytes.
//! - A tensor's key is `mix(seed ^ fnv(name))`; its draw number `c` (from 0) is
//!   `u(c) = (mix(key + (c + 1) * 0x9E3779B97F4A7C15) >> 11) * 2^-53`, uniform in [0, 1).
//! - Element `i` of a `normal` tensor is `mean + std * z`, with
//!   `z = -6 + u(12i) + u(12i + 1) + ... + u(12i + 11)` summed left to right (Irwin–Hall:
//!   mean 0, variance exactly 1), all in f64, rounded to f32 at the end.

use crate::error::{ModelError, Result};
use crate::policy::FileType;
use crate::quantize::quantize_gguf;
use crate::stream::{encode_chunks, write_streaming, Progress, CHUNK_ELEMS};
use ferrolm_gguf::{GgmlType, GgufFile, GgufWriter, Value};
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// A parsed recipe (see the module docs for the JSON shape).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Recipe {
    /// Free text: what the model is for.
    #[serde(default)]
    pub about: String,
    pub seed: u64,
    /// `[key, type, value]` in file order; type is a GGUF scalar type (`u32`, `f32`,
    /// `string`, ...) or `array:TYPE` with a JSON array.
    pub metadata: Vec<(String, String, serde_json::Value)>,
    pub tensors: Vec<RecipeTensor>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecipeTensor {
    pub name: String,
    /// ggml dims: `shape[0]` is the row length.
    pub shape: Vec<u64>,
    pub init: Init,
    /// The stored type (`f32` when absent), e.g. `mxfp4` for experts kept as the checkpoint
    /// has them.
    #[serde(default, rename = "type")]
    pub ty: Option<String>,
}

/// How a tensor's values are drawn.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Init {
    /// The module docs' normal draw.
    Normal { mean: f64, std: f64 },
    /// The values themselves, in ggml order (e.g. llama3's RoPE factors).
    Values(Vec<f32>),
}

impl Recipe {
    pub fn from_json(text: &str) -> Result<Self> {
        serde_json::from_str(text).map_err(|e| ModelError::Invalid(format!("recipe: {e}")))
    }

    pub fn open(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ModelError::Invalid(format!("recipe {}: {e}", path.display())))?;
        Self::from_json(&text).map_err(|e| ModelError::Invalid(format!("{}: {e}", path.display())))
    }

    /// The file's metadata and tensor declarations, checked.
    pub fn plan(&self) -> Result<GgufWriter> {
        let mut w = GgufWriter::new();
        for (key, ty, v) in &self.metadata {
            let value = metadata_value(ty, v)
                .ok_or_else(|| bad(format!("metadata `{key}`: {v} is not a valid `{ty}`")))?;
            w.set(key, value);
        }
        for t in &self.tensors {
            let ty = match &t.ty {
                None => GgmlType::F32,
                Some(name) => GgmlType::from_name(name)
                    .ok_or_else(|| bad(format!("tensor `{}`: unknown type `{name}`", t.name)))?,
            };
            let n: u64 = t.shape.iter().product();
            if let Init::Values(v) = &t.init {
                if v.len() as u64 != n {
                    return Err(bad(format!(
                        "tensor `{}`: {} values for {n} elements",
                        t.name,
                        v.len()
                    )));
                }
            }
            w.add_tensor(&t.name, ty, &t.shape)
                .map_err(|e| bad(format!("tensor `{}`: {e}", t.name)))?;
        }
        Ok(w)
    }
}

fn bad(what: String) -> ModelError {
    ModelError::Invalid(format!("recipe: {what}"))
}

/// A JSON value as the GGUF type `ty` names, if it fits.
fn metadata_value(ty: &str, v: &serde_json::Value) -> Option<Value> {
    if let Some(elem) = ty.strip_prefix("array:") {
        let items = v
            .as_array()?
            .iter()
            .map(|x| metadata_value(elem, x))
            .collect::<Option<Vec<_>>>()?;
        let elem_ty = metadata_value(elem, &default_of(elem)?)?.value_type();
        return Some(Value::Array(elem_ty, items));
    }
    let int = || v.as_i64().map(i128::from).or(v.as_u64().map(i128::from));
    Some(match ty {
        "u8" => Value::U8(int()?.try_into().ok()?),
        "i8" => Value::I8(int()?.try_into().ok()?),
        "u16" => Value::U16(int()?.try_into().ok()?),
        "i16" => Value::I16(int()?.try_into().ok()?),
        "u32" => Value::U32(int()?.try_into().ok()?),
        "i32" => Value::I32(int()?.try_into().ok()?),
        "u64" => Value::U64(int()?.try_into().ok()?),
        "i64" => Value::I64(int()?.try_into().ok()?),
        "f32" => Value::F32(v.as_f64()? as f32),
        "f64" => Value::F64(v.as_f64()?),
        "bool" => Value::Bool(v.as_bool()?),
        "string" => Value::String(v.as_str()?.to_owned()),
        _ => return None,
    })
}

/// A value of type `ty`, to learn its [`ValueType`] for an empty array.
fn default_of(ty: &str) -> Option<serde_json::Value> {
    Some(match ty {
        "bool" => serde_json::Value::Bool(false),
        "string" => serde_json::Value::String(String::new()),
        _ if metadata_value(ty, &0.into()).is_some() => 0.into(),
        _ => return None,
    })
}

/// SplitMix64's increment and finalizer.
const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn fnv(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Elements `first..first + out.len()` of tensor `name`'s normal draw.
fn normal(seed: u64, name: &str, mean: f64, std: f64, first: u64, out: &mut [f32]) {
    let key = mix(seed ^ fnv(name));
    for (i, o) in (first..).zip(out.iter_mut()) {
        let mut z = -6.0f64;
        for c in 12 * i..12 * i + 12 {
            z += (mix(key.wrapping_add((c + 1).wrapping_mul(GAMMA))) >> 11) as f64
                * (1.0 / (1u64 << 53) as f64);
        }
        *o = (mean + std * z) as f32;
    }
}

/// Writes the recipe's model as declared (F32 unless a tensor names another type).
pub fn write_recipe(recipe: &Recipe, path: &Path, progress: Progress) -> Result<()> {
    let w = recipe.plan()?;
    write_streaming(
        w,
        path,
        &|i, info, out| {
            let t = &recipe.tensors[i];
            encode_chunks(info.ty, out, &|chunk, xs| {
                let first = (chunk * CHUNK_ELEMS) as u64;
                match &t.init {
                    Init::Normal { mean, std } => {
                        normal(recipe.seed, &t.name, *mean, *std, first, xs)
                    }
                    Init::Values(v) => xs.copy_from_slice(&v[first as usize..][..xs.len()]),
                }
                Ok(())
            })
        },
        progress,
    )
}

/// The recipe's model as `ftype`: [`write_recipe`]'s file for `f32`, otherwise that file
/// quantized by [`quantize_gguf`] (byte for byte what llama.cpp's quantizer makes of it).
pub fn synth_recipe(
    recipe: &Recipe,
    ftype: FileType,
    out: &Path,
    progress: Progress,
) -> Result<()> {
    if ftype == FileType::F32 {
        return write_recipe(recipe, out, progress);
    }
    let tmp = TempFile(sibling(out, ".f32.tmp"));
    write_recipe(recipe, &tmp.0, &|_| {})?;
    let src = GgufFile::open(&tmp.0)?;
    quantize_gguf(&src, ftype, out, progress)
}

fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// Removed when dropped, on success and on error alike.
struct TempFile(PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The generator's first values are pinned: a change to it (or to what it builds on)
    /// must be deliberate, since every golden's model hash depends on it.
    #[test]
    fn normal_draw_is_pinned() {
        let mut x = [0f32; 4];
        normal(7, "blk.0.attn_q.weight", 0.0, 1.0, 0, &mut x);
        let mut y = [0f32; 2];
        normal(7, "blk.0.attn_q.weight", 0.0, 1.0, 2, &mut y);
        assert_eq!(&x[2..], &y, "random access by element index");
        assert_eq!(x.map(f32::to_bits), PINNED, "{x:?}");
    }

    // Computed independently from the module docs (a few lines of Python).
    const PINNED: [u32; 4] = [0xbfae_d6b5, 0x3f20_d069, 0xbf3d_6e75, 0x3f8a_bb15];

    #[test]
    fn bad_metadata_and_shapes_are_named() {
        let r =
            Recipe::from_json(r#"{"seed":1,"metadata":[["a.b","u32",-1]],"tensors":[]}"#).unwrap();
        let e = r.plan().err().unwrap().to_string();
        assert!(e.contains("a.b") && e.contains("u32"), "{e}");
        let r = Recipe::from_json(
            r#"{"seed":1,"metadata":[],"tensors":[{"name":"t","shape":[3],"init":{"values":[1]}}]}"#,
        )
        .unwrap();
        let e = r.plan().err().unwrap().to_string();
        assert!(e.contains("`t`"), "{e}");
    }
}
