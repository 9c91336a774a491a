//! Parsing the GGUF header, metadata and tensor infos from bytes, validating as it goes.
//!
//! Every read is bounds-checked against the buffer, and every count is checked against the
//! bytes that remain before anything is allocated for it, so a hostile file cannot make us
//! read out of bounds or reserve absurd amounts of memory.

use crate::value::{Value, ValueType};
use crate::GgmlType;
use std::collections::HashSet;

pub(crate) const MAGIC: &[u8; 4] = b"GGUF";
pub(crate) const DEFAULT_ALIGNMENT: u64 = 32;
/// ggml tensors have at most 4 dimensions.
pub(crate) const MAX_DIMS: u32 = 4;
/// Arrays of arrays are legal; nesting deeper than this is only ever an attack on our stack.
const MAX_ARRAY_DEPTH: usize = 8;

/// A tensor's entry in the header. `dims` are in ggml order: `dims[0]` is the row length.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    pub ty: GgmlType,
    pub dims: Vec<u64>,
    /// Offset of the data from the start of the data section.
    pub offset: u64,
    pub n_bytes: u64,
}

impl TensorInfo {
    pub fn n_elements(&self) -> u64 {
        self.dims.iter().product()
    }

    /// Elements per row (`dims[0]`) and number of rows (the product of the rest).
    pub fn rows(&self) -> (usize, usize) {
        let row = self.dims.first().copied().unwrap_or(1) as usize;
        let n_rows = self.dims.iter().skip(1).product::<u64>() as usize;
        (row, n_rows)
    }
}

pub(crate) struct Parsed {
    pub version: u32,
    pub metadata: Vec<(String, Value)>,
    pub tensors: Vec<TensorInfo>,
    pub alignment: u64,
    pub data_offset: u64,
}

struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn take(&mut self, n: usize, what: &dyn Fn() -> String) -> Result<&'a [u8], String> {
        if n > self.remaining() {
            return Err(format!(
                "truncated: {} needs {n} bytes at offset {}, but the file ends at {}",
                what(),
                self.pos,
                self.buf.len()
            ));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &dyn Fn() -> String) -> Result<[u8; N], String> {
        Ok(self
            .take(N, what)?
            .try_into()
            .expect("take returned N bytes"))
    }

    fn u32(&mut self, what: &dyn Fn() -> String) -> Result<u32, String> {
        self.array(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: &dyn Fn() -> String) -> Result<u64, String> {
        self.array(what).map(u64::from_le_bytes)
    }

    /// A length-prefixed string. Lengths are checked against the remaining bytes first.
    fn string(&mut self, what: &dyn Fn() -> String) -> Result<String, String> {
        let len = self.u64(&|| format!("length of {}", what()))?;
        if len > self.remaining() as u64 {
            return Err(format!(
                "{} claims a length of {len} bytes, but only {} remain",
                what(),
                self.remaining()
            ));
        }
        let bytes = self.take(len as usize, what)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| format!("{} is not valid UTF-8", what()))
    }

    fn value(
        &mut self,
        ty: ValueType,
        depth: usize,
        what: &dyn Fn() -> String,
    ) -> Result<Value, String> {
        Ok(match ty {
            ValueType::U8 => Value::U8(self.array::<1>(what)?[0]),
            ValueType::I8 => Value::I8(self.array::<1>(what)?[0] as i8),
            ValueType::U16 => Value::U16(u16::from_le_bytes(self.array(what)?)),
            ValueType::I16 => Value::I16(i16::from_le_bytes(self.array(what)?)),
            ValueType::U32 => Value::U32(self.u32(what)?),
            ValueType::I32 => Value::I32(i32::from_le_bytes(self.array(what)?)),
            ValueType::F32 => Value::F32(f32::from_le_bytes(self.array(what)?)),
            ValueType::U64 => Value::U64(self.u64(what)?),
            ValueType::I64 => Value::I64(i64::from_le_bytes(self.array(what)?)),
            ValueType::F64 => Value::F64(f64::from_le_bytes(self.array(what)?)),
            ValueType::Bool => match self.array::<1>(what)?[0] {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                b => return Err(format!("{} is a bool with byte value {b}", what())),
            },
            ValueType::String => Value::String(self.string(what)?),
            ValueType::Array => {
                if depth >= MAX_ARRAY_DEPTH {
                    return Err(format!(
                        "{} nests arrays deeper than {MAX_ARRAY_DEPTH}",
                        what()
                    ));
                }
                let elem_id = self.u32(&|| format!("element type of {}", what()))?;
                let elem = ValueType::from_id(elem_id)
                    .ok_or_else(|| format!("{} has unknown element type id {elem_id}", what()))?;
                let n = self.u64(&|| format!("length of {}", what()))?;
                // Every element takes at least one byte (strings and arrays at least 8).
                let min_elem = elem.scalar_size().unwrap_or(8) as u64;
                if n.saturating_mul(min_elem) > self.remaining() as u64 {
                    return Err(format!(
                        "{} claims {n} elements of type {}, which cannot fit in the {} bytes left",
                        what(),
                        elem.name(),
                        self.remaining()
                    ));
                }
                let mut items = Vec::with_capacity(n as usize);
                for i in 0..n {
                    items.push(self.value(elem, depth + 1, &|| format!("{}[{i}]", what()))?);
                }
                Value::Array(elem, items)
            }
        })
    }
}

/// Parses and validates everything but the tensor data itself, which is only bounds-checked.
pub(crate) fn parse(buf: &[u8]) -> Result<Parsed, String> {
    let mut c = Cursor { buf, pos: 0 };
    let magic = c.array::<4>(&|| "the magic".into())?;
    if &magic != MAGIC {
        return Err(format!(
            "not a GGUF file: magic is {magic:02x?}, expected \"GGUF\""
        ));
    }
    let version = c.u32(&|| "the version".into())?;
    if !(2..=3).contains(&version) {
        return Err(format!(
            "unsupported GGUF version {version}: ferrolm reads versions 2 and 3"
        ));
    }
    let n_tensors = c.u64(&|| "the tensor count".into())?;
    let n_kv = c.u64(&|| "the metadata count".into())?;
    // A metadata entry is at least a key length, a type and one byte; a tensor info is at
    // least a name length, n_dims, one dim, a type and an offset.
    let min_bytes = n_kv
        .saturating_mul(8 + 4 + 1)
        .saturating_add(n_tensors.saturating_mul(8 + 4 + 8 + 4 + 8));
    if min_bytes > c.remaining() as u64 {
        return Err(format!(
            "header claims {n_tensors} tensors and {n_kv} metadata entries, which cannot fit in a {}-byte file",
            buf.len()
        ));
    }

    let mut metadata: Vec<(String, Value)> = Vec::with_capacity(n_kv as usize);
    let mut seen = HashSet::with_capacity(n_kv as usize);
    for i in 0..n_kv {
        let key = c.string(&|| format!("metadata key #{i}"))?;
        if !seen.insert(key.clone()) {
            return Err(format!("metadata key `{key}` appears twice"));
        }
        let ty_id = c.u32(&|| format!("type of metadata `{key}`"))?;
        let ty = ValueType::from_id(ty_id)
            .ok_or_else(|| format!("metadata `{key}` has unknown value type id {ty_id}"))?;
        let value = c.value(ty, 0, &|| format!("metadata `{key}`"))?;
        metadata.push((key, value));
    }

    let alignment = match metadata.iter().find(|(k, _)| k == "general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some((_, Value::U32(a))) if a.is_power_of_two() => *a as u64,
        Some((_, v)) => {
            return Err(format!(
                "metadata `general.alignment` must be a power-of-two u32, got {} {v}",
                v.value_type().name()
            ))
        }
    };

    let mut tensors: Vec<TensorInfo> = Vec::with_capacity(n_tensors as usize);
    for i in 0..n_tensors {
        tensors.push(tensor_info(&mut c, i, alignment)?);
    }
    let mut names: Vec<&str> = tensors.iter().map(|t| t.name.as_str()).collect();
    names.sort_unstable();
    if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
        return Err(format!("tensor `{}` appears twice", w[0]));
    }

    let data_offset = (c.pos as u64).next_multiple_of(alignment);
    let file_len = buf.len() as u64;
    for t in &tensors {
        let end = data_offset
            .checked_add(t.offset)
            .and_then(|s| s.checked_add(t.n_bytes));
        match end {
            Some(end) if end <= file_len => {}
            _ => {
                return Err(format!(
                    "tensor `{}`: data at offset {} + {} bytes lies outside the file ({} bytes, data section at {data_offset})",
                    t.name, t.offset, t.n_bytes, file_len
                ))
            }
        }
    }
    // Two tensors must not share bytes: a changed type or shape would otherwise make one
    // tensor's data silently alias another's.
    let mut spans: Vec<(u64, u64, &str)> = tensors
        .iter()
        .filter(|t| t.n_bytes > 0)
        .map(|t| (t.offset, t.offset + t.n_bytes, t.name.as_str()))
        .collect();
    spans.sort_unstable();
    if let Some(w) = spans.windows(2).find(|w| w[0].1 > w[1].0) {
        return Err(format!(
            "tensor `{}` (data at offset {}..{}) overlaps tensor `{}` (from offset {}); the file is corrupt",
            w[0].2, w[0].0, w[0].1, w[1].2, w[1].0
        ));
    }
    Ok(Parsed {
        version,
        metadata,
        tensors,
        alignment,
        data_offset,
    })
}

fn tensor_info(c: &mut Cursor, i: u64, alignment: u64) -> Result<TensorInfo, String> {
    let name = c.string(&|| format!("name of tensor #{i}"))?;
    let ctx = |what: &str| format!("tensor `{name}`: {what}");
    let n_dims = c.u32(&|| ctx("dimension count"))?;
    if n_dims == 0 || n_dims > MAX_DIMS {
        return Err(ctx(&format!(
            "has {n_dims} dimensions; ggml allows 1 to {MAX_DIMS}"
        )));
    }
    let mut dims = Vec::with_capacity(n_dims as usize);
    for d in 0..n_dims {
        let v = c.u64(&|| ctx(&format!("dimension {d}")))?;
        // ggml stores dims as int64; anything past i64::MAX is negative there.
        if v > i64::MAX as u64 {
            return Err(ctx(&format!(
                "dimension {d} is {v}, which is negative as int64"
            )));
        }
        dims.push(v);
    }
    let n_elements = dims
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .filter(|&n| n <= i64::MAX as u64)
        .ok_or_else(|| ctx(&format!("dimensions {dims:?} overflow the element count")))?;
    let ty_id = c.u32(&|| ctx("type"))?;
    let ty =
        GgmlType::from_id(ty_id).ok_or_else(|| ctx(&format!("unknown tensor type id {ty_id}")))?;
    let (block, _) = ty.block_geometry();
    if dims[0] % block as u64 != 0 {
        return Err(ctx(&format!(
            "row length {} is not a multiple of the {}-element {} block",
            dims[0],
            block,
            ty.name()
        )));
    }
    let n_bytes = ty
        .row_bytes(n_elements)
        .ok_or_else(|| ctx("byte size overflows"))?;
    let offset = c.u64(&|| ctx("data offset"))?;
    if offset % alignment != 0 {
        return Err(ctx(&format!(
            "data offset {offset} is not a multiple of the alignment {alignment}"
        )));
    }
    Ok(TensorInfo {
        name,
        ty,
        dims,
        offset,
        n_bytes,
    })
}
