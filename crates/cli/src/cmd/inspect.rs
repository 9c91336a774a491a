//! `ferrolm inspect`: what a model file holds, for humans or as JSON.

use anyhow::Result;
use clap::Args;
use ferrolm_gguf::{GgmlType, GgufFile, Value};
use serde_json::{json, Map};
use std::collections::BTreeMap;
use std::path::PathBuf;

#[derive(Args)]
pub struct InspectArgs {
    /// The GGUF file to inspect (default: the default model, pulled on first use).
    pub file: Option<PathBuf>,
    /// Print one JSON object instead of tables.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: InspectArgs) -> Result<()> {
    let f = GgufFile::open(super::pull::model_or_default(args.file)?)?;
    let report = Report::new(&f);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report.to_json())?);
    } else {
        report.print();
    }
    Ok(())
}

struct Report<'a> {
    file: &'a GgufFile,
    arch: String,
    /// `<arch>.*` keys with the prefix stripped: the hyperparameters.
    hparams: Vec<(String, &'a Value)>,
    tokenizer: Vec<(String, String)>,
}

impl<'a> Report<'a> {
    fn new(file: &'a GgufFile) -> Self {
        let arch = file
            .get_str("general.architecture")
            .unwrap_or("(none)")
            .to_owned();
        let prefix = format!("{arch}.");
        let hparams = file
            .metadata()
            .iter()
            .filter_map(|(k, v)| k.strip_prefix(&prefix).map(|k| (k.to_owned(), v)))
            .collect();
        Self {
            file,
            arch,
            hparams,
            tokenizer: tokenizer_summary(file),
        }
    }

    fn type_totals(&self) -> BTreeMap<GgmlType, (usize, u64)> {
        let mut totals = BTreeMap::new();
        for t in self.file.tensors() {
            let e = totals.entry(t.ty).or_insert((0, 0));
            e.0 += 1;
            e.1 += t.n_bytes;
        }
        totals
    }

    fn n_params(&self) -> u64 {
        self.file.tensors().iter().map(|t| t.n_elements()).sum()
    }

    fn print(&self) {
        let f = self.file;
        println!("file          {}", f.path().display());
        println!(
            "format        GGUF v{}, {} bytes, alignment {}",
            f.version(),
            f.file_size(),
            f.alignment()
        );
        println!("architecture  {}", self.arch);
        if let Ok(name) = f.get_str("general.name") {
            println!("name          {name}");
        }
        println!("\nhyperparameters");
        for (k, v) in &self.hparams {
            println!("  {k:<40} {}", v.summary());
        }
        println!("\ntokenizer");
        for (k, v) in &self.tokenizer {
            println!("  {k:<40} {v}");
        }
        println!(
            "\n{:<40} {:<8} {:<24} {:>14}",
            "tensor", "type", "shape", "bytes"
        );
        for t in f.tensors() {
            let shape = format!("{:?}", t.dims);
            println!(
                "{:<40} {:<8} {:<24} {:>14}",
                t.name,
                t.ty.name(),
                shape,
                t.n_bytes
            );
        }
        println!("\ntotals");
        for (ty, (n, bytes)) in self.type_totals() {
            println!("  {:<8} {n:>5} tensors {bytes:>14} bytes", ty.name());
        }
        let bytes: u64 = f.tensors().iter().map(|t| t.n_bytes).sum();
        println!(
            "  all      {:>5} tensors {bytes:>14} bytes, {} parameters",
            f.tensors().len(),
            self.n_params()
        );
    }

    fn to_json(&self) -> serde_json::Value {
        let f = self.file;
        let hparams: Map<String, serde_json::Value> = self
            .hparams
            .iter()
            .map(|(k, v)| (k.clone(), value_json(v)))
            .collect();
        let tokenizer: Map<String, serde_json::Value> = self
            .tokenizer
            .iter()
            .map(|(k, v)| (k.clone(), json!(v)))
            .collect();
        let tensors: Vec<_> = f
            .tensors()
            .iter()
            .map(|t| json!({"name": t.name, "type": t.ty.name(), "shape": t.dims, "bytes": t.n_bytes}))
            .collect();
        let types: Map<String, serde_json::Value> = self
            .type_totals()
            .into_iter()
            .map(|(ty, (n, b))| (ty.name().to_owned(), json!({"tensors": n, "bytes": b})))
            .collect();
        json!({
            "file": f.path(),
            "version": f.version(),
            "file_size": f.file_size(),
            "architecture": self.arch,
            "name": f.get_str("general.name").ok(),
            "hyperparameters": hparams,
            "tokenizer": tokenizer,
            "tensors": tensors,
            "totals": {
                "tensors": f.tensors().len(),
                "bytes": f.tensors().iter().map(|t| t.n_bytes).sum::<u64>(),
                "parameters": self.n_params(),
                "by_type": types,
            },
        })
    }
}

/// The tokenizer in a few lines: its kind, size and special tokens, not the whole vocabulary.
fn tokenizer_summary(f: &GgufFile) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (k, v) in f.metadata() {
        let Some(short) = k.strip_prefix("tokenizer.") else {
            continue;
        };
        let text = match v {
            Value::Array(ty, items) => format!("{} × {}", items.len(), ty.name()),
            Value::String(s) if s.len() > 60 => format!("{} characters", s.chars().count()),
            Value::String(s) => s.clone(),
            other => other.summary(),
        };
        out.push((short.to_owned(), text));
    }
    out
}

fn value_json(v: &Value) -> serde_json::Value {
    match v {
        Value::String(s) => json!(s),
        Value::Bool(b) => json!(b),
        Value::F32(x) => json!(x),
        Value::F64(x) => json!(x),
        Value::Array(_, items) => items.iter().map(value_json).collect(),
        other => match other.as_int() {
            Some(i) => match i64::try_from(i) {
                Ok(i) => json!(i),
                Err(_) => json!(i as u64),
            },
            None => serde_json::Value::Null,
        },
    }
}
