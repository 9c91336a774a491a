//! An open GGUF file: metadata and tensor index, with tensor data as zero-copy views.

use crate::error::{GgufError, Result};
use crate::reader::{self, TensorInfo};
use crate::value::Value;
use memmap2::Mmap;
use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

/// The file's bytes: mapped from disk, or owned (for in-memory validation and fuzzing).
enum Bytes {
    Mapped(Mmap),
    Owned(Vec<u8>),
}

impl std::ops::Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Mapped(m) => m,
            Bytes::Owned(v) => v,
        }
    }
}

pub struct GgufFile {
    path: PathBuf,
    mmap: Bytes,
    version: u32,
    metadata: Vec<(String, Value)>,
    key_index: HashMap<String, usize>,
    tensors: Vec<TensorInfo>,
    tensor_index: HashMap<String, usize>,
    alignment: u64,
    data_offset: u64,
}

impl GgufFile {
    /// Maps `path` and validates its header, metadata and tensor index.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let io = |err| GgufError::Io {
            path: path.clone(),
            err,
        };
        // Only a regular file is a model: opening a pipe would block, and a directory or a
        // device fails later with a confusing OS error.
        let kind = fs::metadata(&path).map_err(io)?.file_type();
        if !kind.is_file() {
            let what = if kind.is_dir() {
                "is a directory"
            } else {
                "is not a regular file (a pipe, socket or device)"
            };
            return Err(GgufError::Invalid {
                path,
                what: format!("{what}; give the path of a .gguf model file"),
            });
        }
        let file = fs::File::open(&path).map_err(io)?;
        // SAFETY: the map is read-only. Like every mmap reader we rely on nobody truncating
        // the file while it is open; all offsets are validated against its length at open.
        let mmap = unsafe { Mmap::map(&file) }.map_err(io)?;
        Self::from_bytes(path, Bytes::Mapped(mmap))
    }

    /// Validates a file held in memory; `label` stands in for the path in messages.
    pub fn from_vec(label: impl Into<PathBuf>, bytes: Vec<u8>) -> Result<Self> {
        Self::from_bytes(label.into(), Bytes::Owned(bytes))
    }

    fn from_bytes(path: PathBuf, mmap: Bytes) -> Result<Self> {
        let parsed = reader::parse(&mmap).map_err(|what| GgufError::Invalid {
            path: path.clone(),
            what,
        })?;
        let key_index = index(parsed.metadata.iter().map(|(k, _)| k));
        let tensor_index = index(parsed.tensors.iter().map(|t| &t.name));
        Ok(Self {
            path,
            mmap,
            version: parsed.version,
            metadata: parsed.metadata,
            key_index,
            tensors: parsed.tensors,
            tensor_index,
            alignment: parsed.alignment,
            data_offset: parsed.data_offset,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn version(&self) -> u32 {
        self.version
    }

    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }

    pub fn file_size(&self) -> u64 {
        self.mmap.len() as u64
    }

    /// Metadata in file order.
    pub fn metadata(&self) -> &[(String, Value)] {
        &self.metadata
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.key_index.get(key).map(|&i| &self.metadata[i].1)
    }

    /// Tensor infos in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensor_index.get(name).map(|&i| &self.tensors[i])
    }

    /// The tensor's raw blocks, borrowed from the map. Bounds were checked at open.
    pub fn tensor_data(&self, info: &TensorInfo) -> &[u8] {
        let start = (self.data_offset + info.offset) as usize;
        &self.mmap[start..start + info.n_bytes as usize]
    }

    /// Looks a tensor up by name, with an error that names it when absent.
    pub fn require_tensor(&self, name: &str) -> Result<&TensorInfo> {
        self.tensor(name).ok_or_else(|| GgufError::Tensor {
            name: name.to_owned(),
            what: format!("missing from {}", self.path.display()),
        })
    }

    fn require(&self, key: &str) -> Result<&Value> {
        self.get(key).ok_or_else(|| GgufError::Metadata {
            key: key.to_owned(),
            what: format!("missing from {}", self.path.display()),
        })
    }

    fn wrong_type(key: &str, want: &str, v: &Value) -> GgufError {
        GgufError::Metadata {
            key: key.to_owned(),
            what: format!(
                "expected {want}, found {} {}",
                v.value_type().name(),
                v.summary()
            ),
        }
    }

    /// A non-negative integer of any GGUF integer type that fits in `u64`.
    pub fn get_u64(&self, key: &str) -> Result<u64> {
        let v = self.require(key)?;
        v.as_int()
            .and_then(|i| u64::try_from(i).ok())
            .ok_or_else(|| Self::wrong_type(key, "a non-negative integer", v))
    }

    pub fn get_usize(&self, key: &str) -> Result<usize> {
        let n = self.get_u64(key)?;
        usize::try_from(n).map_err(|_| GgufError::Metadata {
            key: key.to_owned(),
            what: format!("{n} does not fit in usize"),
        })
    }

    pub fn get_f32(&self, key: &str) -> Result<f32> {
        let v = self.require(key)?;
        v.as_f64()
            .map(|f| f as f32)
            .ok_or_else(|| Self::wrong_type(key, "a number", v))
    }

    pub fn get_bool(&self, key: &str) -> Result<bool> {
        let v = self.require(key)?;
        v.as_bool()
            .ok_or_else(|| Self::wrong_type(key, "a bool", v))
    }

    pub fn get_str(&self, key: &str) -> Result<&str> {
        let v = self.require(key)?;
        v.as_str()
            .ok_or_else(|| Self::wrong_type(key, "a string", v))
    }

    pub fn get_array(&self, key: &str) -> Result<&[Value]> {
        let v = self.require(key)?;
        v.as_array()
            .ok_or_else(|| Self::wrong_type(key, "an array", v))
    }

    /// An array of strings, such as `tokenizer.ggml.tokens`.
    pub fn get_str_array(&self, key: &str) -> Result<Vec<&str>> {
        self.get_array(key)?
            .iter()
            .map(|v| {
                v.as_str()
                    .ok_or_else(|| Self::wrong_type(key, "strings", v))
            })
            .collect()
    }

    /// The model architecture, `general.architecture`.
    pub fn architecture(&self) -> Result<&str> {
        self.get_str("general.architecture")
    }
}

fn index<'a>(names: impl Iterator<Item = &'a String>) -> HashMap<String, usize> {
    names.enumerate().map(|(i, n)| (n.clone(), i)).collect()
}
