//! The tensor split over GPUs (`ferrolm_cuda::CudaSplitModel`): refusals, checked anywhere;
//! on the GPU machine (`--ignored`), a rank alone against the same rank on the CPU, a split of
//! one rank against the whole model bit for bit, and where there are two GPUs, a split of two
//! within the split's contract of the whole model (the CPU split's test, `ferrolm-cpu`'s
//! `tensor_split`, holds the same bar).

mod common;

use ferrolm_cpu::{CpuModel, HostCollective, KvType};
use ferrolm_cuda::{CudaDevice, CudaModel, CudaSplit, CudaSplitModel, KvFormat};
use ferrolm_engine::argmax;
use ferrolm_gguf::GgufFile;
use ferrolm_model::backend::{PassInputs, SeqRows};
use ferrolm_model::split::{ColumnCuts, Shard};
use ferrolm_model::{Config, ModelRunner};
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
fn models_and_rank_counts_that_do_not_split_are_refused_by_name() {
    let refused = |stem: &str, ranks| match CudaSplit::prepare(&golden_file(stem), ranks) {
        Ok(_) => panic!("{stem} split over {ranks} ranks"),
        Err(e) => e.to_string(),
    };
    assert!(refused("tiny-olmoe-q8_0", 2).contains("olmoe"));
    assert!(refused("tiny-llama-q8_0", 3).contains("do not split over 3 ranks"));
    for stem in ["tiny-llama-q8_0", "tiny-qwen3moe-q8_0"] {
        assert!(CudaSplit::prepare(&golden_file(stem), 2).is_ok(), "{stem}");
    }
}

/// A rank of a split run alone (no sums: its own heads, FFN width and experts) computes on the
/// GPU what it computes on the CPU, as closely as the whole model does on the two: the
/// shard's parts, the local heads' attention and the experts' localization (rank 1 holds
/// experts 4-7 of 8) checked on one GPU.
#[test]
#[ignore = "needs a GPU"]
fn a_rank_alone_computes_on_the_gpu_what_it_does_on_the_cpu() {
    let dev = Arc::new(CudaDevice::new(0).expect("a GPU"));
    for stem in ["tiny-llama-q8_0", "tiny-qwen3-q8_0", "tiny-qwen3moe-q8_0"] {
        let file = golden_file(stem);
        let cfg = Config::from_gguf(&file).unwrap();
        let shard = Shard::new(&cfg, 1, 2).unwrap();
        let cuts = ColumnCuts::cut(&cfg, &file, &shard).unwrap();
        let alone = HostCollective::new(1);
        let cpu = CpuModel::load_rank(&file, &cfg, &shard, &cuts, alone, 2).unwrap();
        let gpu = CudaModel::load_rank(&file, dev.clone(), &shard, &cuts).unwrap();
        let feed = feed(cfg.n_vocab);
        let mut cc = cpu.new_cache(64, KvType::F16);
        let mut gc = gpu.new_cache(64, KvFormat::F16).unwrap();
        let c = prompt_then_steps(&cpu, &mut cc, &feed);
        let g = prompt_then_steps(&gpu, &mut gc, &feed);
        // The same model whole, GPU against CPU: how far apart the two backends are anyway.
        let whole_cpu = CpuModel::load(&file).unwrap();
        let whole_gpu = CudaModel::load(&file, dev.clone()).unwrap();
        let mut cc = whole_cpu.new_cache(64, KvType::F16);
        let mut gc = whole_gpu.new_cache(64, KvFormat::F16).unwrap();
        let wc = prompt_then_steps(&whole_cpu, &mut cc, &feed);
        let wg = prompt_then_steps(&whole_gpu, &mut gc, &feed);
        let rank = gap(stem, &c, &g, cfg.n_vocab);
        let whole = gap(stem, &wc, &wg, cfg.n_vocab);
        eprintln!("{stem}: max |GPU - CPU| a rank alone {rank}, the whole model {whole}");
        assert!(
            rank <= 1.5 * whole + 0.02,
            "{stem}: a rank {rank}, whole {whole}"
        );
    }
}

/// The largest |GPU - CPU| logit difference, after checking that the GPU makes the CPU's
/// greedy choice wherever the CPU's top two are 0.05 apart or more (the GPU's attention
/// rounds through f16 as llama.cpp's CUDA backend does; the CPU's does not).
fn gap(what: &str, cpu: &[f32], gpu: &[f32], n_vocab: usize) -> f32 {
    assert_eq!(cpu.len(), gpu.len(), "{what}");
    let mut worst = 0f32;
    for (r, (c, g)) in cpu.chunks(n_vocab).zip(gpu.chunks(n_vocab)).enumerate() {
        worst = (c.iter().zip(g)).fold(worst, |m, (x, y)| m.max((x - y).abs()));
        let best = argmax(c) as usize;
        let others = (0..n_vocab).filter(|&i| i != best);
        let second = others.fold(f32::MIN, |m, i| m.max(c[i]));
        let clear = c[best] - second >= 0.05;
        assert!(
            !clear || argmax(g) as usize == best,
            "{what} row {r}: greedy choice"
        );
    }
    worst
}

/// Every row of `b` within `tol` of `a`'s largest magnitude.
fn assert_within(what: &str, a: &[f32], b: &[f32], n_vocab: usize, tol: f32) {
    assert_eq!(a.len(), b.len(), "{what}");
    for (r, (a, b)) in a.chunks(n_vocab).zip(b.chunks(n_vocab)).enumerate() {
        let scale = a.iter().fold(0f32, |m, v| m.max(v.abs()));
        let worst = a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
        assert!(worst <= tol * scale, "{what} row {r}: {worst} of {scale}");
    }
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
    for stem in [
        "tiny-llama-q8_0",
        "tiny-qwen3-q8_0",
        "tiny-qwen3moe-q8_0",
        "tiny-llama-f32",
    ] {
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
        assert_within(stem, &w, &s, n_vocab, 1e-3);
    }
}

/// Prompt logits (one pass) and then one-token steps of `file` on `device`, every row.
fn session_logits(file: &GgufFile, device: &ferrolm_engine::Device) -> Vec<f32> {
    use ferrolm_engine::{Logits, Model, Session};
    let model = Model::load_on(file, device).unwrap();
    let feed = feed(model.cfg.n_vocab);
    let mut s = Session::new(&model, 64);
    let mut out = s.eval(&feed[..33], Logits::All).unwrap();
    for &t in &feed[33..] {
        out.extend(s.eval(&[t], Logits::Last).unwrap());
    }
    out
}

/// A split by layer needs no NCCL, so two stages can share one GPU: blocks 0..1 on the first,
/// 1..2 and the head on the second, the residual stream crossing through the host (exact
/// f32), within f32 noise of the whole model on that GPU.
#[test]
#[ignore = "needs a GPU"]
fn a_split_by_layer_gives_the_whole_models_logits() {
    use ferrolm_engine::Device;
    let dev = Arc::new(CudaDevice::new(0).expect("a GPU"));
    let n = CudaDevice::count().min(2);
    let devs: Vec<_> = (0..2)
        .map(|i| match i < n && i > 0 {
            true => Arc::new(CudaDevice::new(i).unwrap()),
            false => dev.clone(),
        })
        .collect();
    for stem in ["tiny-llama-q8_0", "tiny-qwen3moe-q8_0"] {
        let file = golden_file(stem);
        let whole = session_logits(&file, &Device::Cuda(dev.clone()));
        let layers = Device::CudaLayers {
            devs: devs.clone(),
            shares: vec![1.0, 1.0],
        };
        let split = session_logits(&file, &layers);
        let n_vocab = whole.len() / 39;
        assert_within(stem, &whole, &split, n_vocab, 1e-5);
        eprintln!("{stem}: bit-identical: {}", whole == split);
    }
}

/// The engine's plumbing of a row split (`Device::CudaRanks`: `Exec::Ranks`, `Cache::Ranks`,
/// sessions) with one rank on GPU 0: the whole model's logits bit for bit.
#[test]
#[ignore = "needs a GPU and NCCL"]
fn a_row_split_of_one_rank_through_the_engine_is_the_whole_model() {
    use ferrolm_engine::Device;
    let dev = Arc::new(CudaDevice::new(0).expect("a GPU"));
    for stem in ["tiny-qwen3-q8_0", "tiny-qwen3moe-q8_0"] {
        let file = golden_file(stem);
        let whole = session_logits(&file, &Device::Cuda(dev.clone()));
        let split = session_logits(&file, &Device::CudaRanks(vec![dev.clone()]));
        assert_eq!(whole, split, "{stem}");
    }
}
