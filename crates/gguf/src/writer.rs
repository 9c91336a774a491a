//! Writing GGUF v3: header and tensor index first, then tensor data streamed in order.
//!
//! Tensors are declared up front so the header can carry their offsets; their data then
//! arrives one tensor at a time, so a multi-gigabyte model never has to sit in memory.

use crate::error::{GgufError, Result};
use crate::reader::{TensorInfo, DEFAULT_ALIGNMENT, MAGIC, MAX_DIMS};
use crate::value::Value;
use crate::GgmlType;
use std::fs;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

const VERSION: u32 = 3;

#[derive(Default)]
pub struct GgufWriter {
    metadata: Vec<(String, Value)>,
    tensors: Vec<TensorInfo>,
    data_size: u64,
}

impl GgufWriter {
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets a metadata value, replacing any earlier value for `key` in place.
    pub fn set(&mut self, key: &str, value: impl Into<Value>) {
        let value = value.into();
        match self.metadata.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = value,
            None => self.metadata.push((key.to_owned(), value)),
        }
    }

    fn alignment(&self) -> Result<u64> {
        match self.metadata.iter().find(|(k, _)| k == "general.alignment") {
            None => Ok(DEFAULT_ALIGNMENT),
            Some((_, Value::U32(a))) if a.is_power_of_two() => Ok(*a as u64),
            Some(_) => Err(GgufError::Write(
                "general.alignment must be a power-of-two u32".into(),
            )),
        }
    }

    /// Declares the next tensor. `dims` are in ggml order (`dims[0]` is the row length).
    pub fn add_tensor(&mut self, name: &str, ty: GgmlType, dims: &[u64]) -> Result<()> {
        let err = |what: String| GgufError::Tensor {
            name: name.to_owned(),
            what,
        };
        if dims.is_empty() || dims.len() > MAX_DIMS as usize {
            return Err(err(format!(
                "{} dimensions; ggml allows 1 to 4",
                dims.len()
            )));
        }
        if self.tensors.iter().any(|t| t.name == name) {
            return Err(err("declared twice".into()));
        }
        if !dims[0].is_multiple_of(ty.block_elems() as u64) {
            return Err(err(format!(
                "row length {} is not a multiple of the {} block ({})",
                dims[0],
                ty,
                ty.block_elems()
            )));
        }
        let n_bytes = dims
            .iter()
            .try_fold(1u64, |a, &d| a.checked_mul(d))
            .and_then(|n| ty.row_bytes(n))
            .ok_or_else(|| err("size overflows".into()))?;
        let offset = self.data_size.next_multiple_of(self.alignment()?);
        self.data_size = offset + n_bytes;
        self.tensors.push(TensorInfo {
            name: name.to_owned(),
            ty,
            dims: dims.to_vec(),
            offset,
            n_bytes,
        });
        Ok(())
    }

    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// Starts writing to `path`. The file appears under its name only when
    /// [`TensorDataWriter::finish`] succeeds; until then it is `path` + `.partial`.
    pub fn create(self, path: impl AsRef<Path>) -> Result<TensorDataWriter<BufWriter<fs::File>>> {
        let path = path.as_ref().to_path_buf();
        let mut partial = path.clone().into_os_string();
        partial.push(".partial");
        let partial = PathBuf::from(partial);
        let file = fs::File::create(&partial).map_err(|err| GgufError::Io {
            path: partial.clone(),
            err,
        })?;
        let mut w = self.start(BufWriter::with_capacity(1 << 20, file))?;
        w.paths = Some((partial, path));
        Ok(w)
    }

    /// Starts writing into any sink; used for in-memory files in tests.
    pub fn start<W: Write>(self, mut sink: W) -> Result<TensorDataWriter<W>> {
        let alignment = self.alignment()?;
        for (key, value) in &self.metadata {
            check_homogeneous(value).map_err(|what| GgufError::Metadata {
                key: key.clone(),
                what,
            })?;
        }
        let mut header = Vec::new();
        header.extend_from_slice(MAGIC);
        header.extend_from_slice(&VERSION.to_le_bytes());
        header.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        header.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (key, value) in &self.metadata {
            put_str(&mut header, key);
            header.extend_from_slice(&(value.value_type() as u32).to_le_bytes());
            put_value(&mut header, value);
        }
        for t in &self.tensors {
            put_str(&mut header, &t.name);
            header.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                header.extend_from_slice(&d.to_le_bytes());
            }
            header.extend_from_slice(&t.ty.id().to_le_bytes());
            header.extend_from_slice(&t.offset.to_le_bytes());
        }
        let padded = header.len().next_multiple_of(alignment as usize);
        header.resize(padded, 0);
        sink.write_all(&header).map_err(write_err)?;
        Ok(TensorDataWriter {
            sink: Some(sink),
            tensors: self.tensors,
            next: 0,
            written: 0,
            paths: None,
        })
    }
}

/// Receives tensor data in declaration order.
pub struct TensorDataWriter<W: Write> {
    sink: Option<W>,
    tensors: Vec<TensorInfo>,
    next: usize,
    /// Bytes written since the start of the data section.
    written: u64,
    /// (partial, final) when writing a file.
    paths: Option<(PathBuf, PathBuf)>,
}

impl<W: Write> TensorDataWriter<W> {
    /// The tensor whose data is expected next.
    pub fn next_tensor(&self) -> Option<&TensorInfo> {
        self.tensors.get(self.next)
    }

    /// Writes the data of the next declared tensor; its length must match the declaration.
    pub fn write_tensor(&mut self, data: &[u8]) -> Result<()> {
        let t = self
            .tensors
            .get(self.next)
            .ok_or_else(|| GgufError::Write("more tensors written than declared".into()))?;
        if data.len() as u64 != t.n_bytes {
            return Err(GgufError::Tensor {
                name: t.name.clone(),
                what: format!("declared {} bytes, got {}", t.n_bytes, data.len()),
            });
        }
        let sink = self.sink.as_mut().expect("sink present until finish");
        let pad = (t.offset - self.written) as usize;
        sink.write_all(&vec![0u8; pad]).map_err(write_err)?;
        sink.write_all(data).map_err(write_err)?;
        self.written = t.offset + t.n_bytes;
        self.next += 1;
        Ok(())
    }

    /// Checks every tensor was written, flushes, and (for files) moves the file into place.
    pub fn finish(mut self) -> Result<W> {
        if let Some(t) = self.tensors.get(self.next) {
            return Err(GgufError::Tensor {
                name: t.name.clone(),
                what: "declared but never written".into(),
            });
        }
        let mut sink = self.sink.take().expect("sink present until finish");
        sink.flush().map_err(write_err)?;
        if let Some((partial, path)) = self.paths.take() {
            fs::rename(&partial, &path).map_err(|err| GgufError::Io { path, err })?;
        }
        Ok(sink)
    }
}

impl<W: Write> Drop for TensorDataWriter<W> {
    fn drop(&mut self) {
        // An unfinished file is never left behind under a name that looks complete.
        if let Some((partial, _)) = self.paths.take() {
            let _ = fs::remove_file(partial);
        }
    }
}

/// Array elements carry no type tag on disk, so every element must be of the declared type.
fn check_homogeneous(v: &Value) -> std::result::Result<(), String> {
    if let Value::Array(elem, items) = v {
        for item in items {
            if item.value_type() != *elem {
                return Err(format!(
                    "array of {} holds a {}",
                    elem.name(),
                    item.value_type().name()
                ));
            }
            check_homogeneous(item)?;
        }
    }
    Ok(())
}

fn write_err(e: std::io::Error) -> GgufError {
    GgufError::Write(e.to_string())
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn put_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::U8(x) => out.push(*x),
        Value::I8(x) => out.push(*x as u8),
        Value::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Value::Bool(x) => out.push(*x as u8),
        Value::String(s) => put_str(out, s),
        Value::Array(elem, items) => {
            out.extend_from_slice(&(*elem as u32).to_le_bytes());
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for item in items {
                put_value(out, item);
            }
        }
    }
}
