//! The tensor split over GPUs (`ferrolm_cuda::CudaSplitModel`): refusals, checked anywhere;
//! on the GPU machine (`--ignored`), a split of one rank against the whole model bit for bit,
//! and where there are two GPUs, a split of two within the split's contract of the whole
//! model (the CPU split's test, `ferrolm-cpu`'s `tensor_split`, holds the same bar).

mod common;

use ferrolm_cuda::{CudaDevice, CudaModel, CudaSplit, CudaSplitModel, KvFormat};
use ferrolm_gguf::GgufFile;
use ferrolm_model::backend::{PassInputs, SeqRows};
use ferrolm_model::ModelRunner;
use std::sync::Arc;

fn golden_file(stem: &str) -> GgufFile {
    GgufFile::open(common::golden(&format!("{stem}.gguf"))).unwrap()
}

/// A 33-token prompt in one pass, then six one-token steps fed the whole model's choices;
/// every row's logits, in order. `caches` holds one sequence's cache.
fn prompt_then_steps<R: ModelRunner>(m: &R, cache: &mut R::Cache, feed: &[u32]) -> Vec<f32> {
    let n_vocab = m.config().n_vocab;
    let mut out = Vec::new();
    let mut at = 0usize;
    for run in [&feed[..33]].into_iter().chain(feed[33..].chunks(1)) {
        let positions: Vec<u32> = (at..at + run.len()).map(|p| p as u32).collect();
        let pass = PassInputs {
            tokens: run,
            positions: &positions,
        };
        let rows: Vec<usize> = (0..run.len()).collect();
        let mut seqs = [SeqRows {
            cache: &mut *cache,
            rows: 0..run.len(),
        }];
        let l = m.forward_rows(&mut seqs, &pass, &rows);
        let l = l.unwrap_or_else(|e| panic!("pass at {at}: {e}"));
        assert_eq!(l.len(), run.len() * n_vocab);
        out.extend_from_slice(&l);
        at += run.len();
    }
    out
}

fn feed(n_vocab: usize) -> Vec<u32> {
    (0..39).map(|i| (i * 37 + 11) % n_vocab as u32).collect()
}

#[test]
fn moe_models_and_bad_rank_counts_are_refused_by_name() {
    let e = CudaSplit::prepare(&golden_file("tiny-qwen3moe-q8_0"), 2)
        .err()
        .unwrap();
    assert!(e.to_string().contains("experts"), "{e}");
    let e = CudaSplit::prepare(&golden_file("tiny-llama-q8_0"), 3)
        .err()
        .unwrap();
    assert!(e.to_string().contains("do not split over 3 ranks"), "{e}");
    assert!(CudaSplit::prepare(&golden_file("tiny-llama-q8_0"), 2).is_ok());
}

#[test]
fn nccl_loads_or_says_how_to_install_it() {
    match ferrolm_cuda::ensure_nccl() {
        Ok(()) => {}
        Err(e) => {
            let e = e.to_string();
            assert!(e.contains("NCCL") && e.contains("LD_LIBRARY_PATH"), "{e}");
        }
    }
}

#[test]
#[ignore = "needs a GPU and NCCL"]
fn a_split_of_one_rank_on_one_gpu_is_the_whole_model_bit_for_bit() {
    let dev = Arc::new(CudaDevice::new(0).expect("a GPU"));
    for stem in ["tiny-llama-q8_0", "tiny-qwen3-q8_0"] {
        let file = golden_file(stem);
        let whole = CudaModel::load(&file, dev.clone()).unwrap();
        let parts = CudaSplit::prepare(&file, 1).unwrap();
        let split = CudaSplitModel::load(&file, &parts, std::slice::from_ref(&dev)).unwrap();
        let feed = feed(whole.cfg.n_vocab);
        let mut wc = whole.new_cache(64, KvFormat::F16).unwrap();
        let mut sc = split.new_cache(64, KvFormat::F16).unwrap();
        let w = prompt_then_steps(&whole, &mut wc, &feed);
        let s = prompt_then_steps(&split, &mut sc, &feed);
        assert_eq!(w, s, "{stem}");
    }
}

#[test]
#[ignore = "needs two GPUs and NCCL"]
fn a_split_over_two_gpus_gives_the_whole_models_logits() {
    let devs: Vec<_> = (0..2)
        .map(|i| Arc::new(CudaDevice::new(i).expect("two GPUs")))
        .collect();
    for stem in ["tiny-llama-q8_0", "tiny-qwen3-q8_0", "tiny-llama-f32"] {
        let file = golden_file(stem);
        let whole = CudaModel::load(&file, devs[0].clone()).unwrap();
        let parts = CudaSplit::prepare(&file, 2).unwrap();
        let split = CudaSplitModel::load(&file, &parts, &devs).unwrap();
        let n_vocab = whole.cfg.n_vocab;
        let feed = feed(n_vocab);
        let mut wc = whole.new_cache(64, KvFormat::F16).unwrap();
        let mut sc = split.new_cache(64, KvFormat::F16).unwrap();
        let w = prompt_then_steps(&whole, &mut wc, &feed);
        let s = prompt_then_steps(&split, &mut sc, &feed);
        // The CPU split's bar for quantized models: within 1e-3 of the row's largest logit.
        for (r, (w, s)) in w.chunks(n_vocab).zip(s.chunks(n_vocab)).enumerate() {
            let scale = w.iter().fold(0f32, |m, v| m.max(v.abs()));
            let worst = w.iter().zip(s).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
            assert!(worst <= 1e-3 * scale, "{stem} row {r}: {worst} of {scale}");
        }
    }
}
