//! Random-weight models with the exact shapes of real ones, for benchmarks and tests.
//!
//! Every chunk of every tensor draws from its own generator, seeded from the model seed,
//! the tensor's name and the chunk number, so output is identical for a given seed
//! however many threads produce it.

use crate::config::Config;
use crate::error::{ModelError, Result};
use crate::layout::{tensor_specs, TensorKind, TensorSpec};
use crate::policy::{choose_types, FileType, PolicyModel, TensorRef};
use crate::presets::{self, preset};
use crate::stream::{encode_chunks, write_streaming, Progress, CHUNK_ELEMS};
use crate::{vocab, QUANTIZATION_VERSION};
use ferrolm_gguf::{GgmlType, GgufWriter};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rand_distr::StandardNormal;
use std::io::{self, Write};
use std::path::Path;

/// Which tokenizer metadata a synthetic model carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VocabKind {
    /// `tokenizer.ggml.model = "no_vocab"`: token ids only, as in the golden tiny models.
    None,
    /// A small byte-level BPE vocabulary, padded with filler tokens to the vocab size.
    Bpe,
}

/// A synthetic model to write: a preset's shapes, a file type and a seed.
pub struct Synth {
    pub name: String,
    pub config: Config,
    pub ftype: FileType,
    pub seed: u64,
    pub vocab: VocabKind,
    /// `Some(n)`: each quantized tensor of more than `n` blocks draws them from a pool of `n`
    /// quantized once from the same distribution, instead of quantizing each from its own
    /// values: the same shapes, types and spread at the speed of copying, for models too
    /// large to quantize block by block in a benchmark's time (qwen3-235b-a22b: 142 GB).
    pub pooled: Option<usize>,
}

/// The pool `synth --pooled` gives each tensor, in blocks.
pub const POOL_BLOCKS: usize = 1024;

impl Synth {
    pub fn new(preset_name: &str, ftype: FileType, seed: u64, vocab: VocabKind) -> Result<Self> {
        let p = preset(preset_name).ok_or_else(|| {
            ModelError::Invalid(format!(
                "unknown preset `{preset_name}`; available: {}",
                presets::NAMES.join(", ")
            ))
        })?;
        Ok(Self {
            name: p.name.to_owned(),
            config: p.config,
            ftype,
            seed,
            vocab,
            pooled: None,
        })
    }

    /// The file's metadata and tensor declarations, without any tensor data.
    pub fn plan(&self) -> Result<(GgufWriter, Vec<TensorSpec>)> {
        let cfg = &self.config;
        cfg.validate()?;
        let mut w = GgufWriter::new();
        w.set("general.architecture", cfg.arch.name());
        w.set("general.name", self.name.as_str());
        cfg.write_to(&mut w);
        match self.vocab {
            VocabKind::None => w.set("tokenizer.ggml.model", "no_vocab"),
            VocabKind::Bpe => vocab::write_bpe(&mut w, cfg.n_vocab)?,
        }
        w.set("general.file_type", self.ftype.llama_ftype());
        w.set("general.quantization_version", QUANTIZATION_VERSION);

        let specs = tensor_specs(cfg);
        let refs: Vec<_> = specs
            .iter()
            .map(|s| TensorRef {
                name: &s.name,
                dims: &s.dims,
                src: GgmlType::F32,
            })
            .collect();
        let types = choose_types(self.ftype, &PolicyModel::from(cfg), &refs)?;
        for (s, ty) in specs.iter().zip(types) {
            w.add_tensor(&s.name, ty, &s.dims)?;
        }
        Ok((w, specs))
    }

    /// The size of the file [`Synth::write`] would produce, in bytes.
    pub fn file_size(&self) -> Result<u64> {
        let (w, _) = self.plan()?;
        let data: u64 = w.tensors().last().map_or(0, |t| t.offset + t.n_bytes);
        let mut header = CountingSink(0);
        drop(w.start(&mut header)?);
        Ok(header.0 + data)
    }

    /// Generates and writes the model; `progress` hears of each tensor's bytes.
    pub fn write(&self, path: &Path, progress: Progress) -> Result<()> {
        let (w, specs) = self.plan()?;
        let seed = self.seed;
        write_streaming(
            w,
            path,
            &|i, info, out| {
                let spec = &specs[i];
                let (mean, std) = distribution(spec);
                let stream = name_hash(&spec.name) ^ seed.wrapping_mul(0x9E37_79B9_7F4A_7C15);
                let normal = |chunk: usize, xs: &mut [f32]| {
                    let mut rng = SmallRng::seed_from_u64(mix(stream, chunk as u64));
                    for x in xs {
                        *x = mean + std * rng.sample::<f32, _>(StandardNormal);
                    }
                    Ok(())
                };
                let (be, bb) = info.ty.block_geometry();
                let pool_blocks = match self.pooled {
                    Some(n) if be > 1 && n > 0 && out.len() > n * bb => n,
                    _ => return encode_chunks(info.ty, out, &normal),
                };
                // The pool: its own chunks of the same stream, past any chunk of the tensor's.
                let mut pool = vec![0u8; pool_blocks * bb];
                let past = out.len() / bb * be / CHUNK_ELEMS + 1;
                encode_chunks(info.ty, &mut pool, &|chunk, xs| normal(past + chunk, xs))?;
                draw_blocks(&pool, bb, stream, out);
                Ok(())
            },
            progress,
        )
    }
}

/// Fills `out` with blocks (`bb` bytes each) of `pool`, drawn per chunk from `stream`, in
/// parallel: the same bytes on any number of threads.
fn draw_blocks(pool: &[u8], bb: usize, stream: u64, out: &mut [u8]) {
    use rayon::prelude::*;
    let n = pool.len() / bb;
    out.par_chunks_mut(CHUNK_ELEMS * bb)
        .enumerate()
        .for_each(|(chunk, o)| {
            let mut rng = SmallRng::seed_from_u64(mix(!stream, chunk as u64));
            for b in o.chunks_exact_mut(bb) {
                let i = rng.gen_range(0..n);
                b.copy_from_slice(&pool[i * bb..(i + 1) * bb]);
            }
        });
}

/// (mean, standard deviation) of a tensor's values. Matrices get 1/sqrt(fan_in), which
/// keeps activations near unit scale layer after layer (and logits near unit scale), so a
/// forward pass stays finite; norm gains sit near 1.
fn distribution(spec: &TensorSpec) -> (f32, f32) {
    match spec.kind {
        TensorKind::Weight => (0.0, 1.0 / (spec.dims[0] as f32).sqrt()),
        TensorKind::Norm => (1.0, 0.02),
        TensorKind::Bias => (0.0, 0.02),
    }
}

/// FNV-1a: a stable hash of the tensor name (std's hasher may change between releases).
fn name_hash(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

/// SplitMix64's finalizer over two words: nearby inputs give unrelated seeds.
fn mix(a: u64, b: u64) -> u64 {
    let mut z = a ^ b.wrapping_add(0x9E37_79B9_7F4A_7C15).rotate_left(29);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Counts the bytes written to it.
struct CountingSink(u64);

impl Write for CountingSink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
