//! A model split over ranks (`ferrolm_model::split`, run by `CpuSplitModel`) computes what the
//! whole model does, up to f32 summation order (the split's contract): the same logits within
//! a small tolerance and the same greedy choices, for single sequences and batches; models
//! that do not split are refused by name.

use ferrolm_cpu::{CpuModel, CpuSplit, CpuSplitModel, KvType};
use ferrolm_gguf::GgufFile;
use ferrolm_model::backend::{PassInputs, SeqRows};
use ferrolm_model::ModelRunner;

fn open(stem: &str) -> GgufFile {
    let path = format!(
        "{}/../../../shared/golden/{stem}.gguf",
        env!("CARGO_MANIFEST_DIR")
    );
    GgufFile::open(path).unwrap()
}

/// A pass over `runs` (each a sequence's tokens from position `starts[i]`, with its cache),
/// the logits of every row.
fn pass<R: ModelRunner>(
    m: &R,
    caches: &mut [R::Cache],
    runs: &[&[u32]],
    starts: &[usize],
) -> Vec<f32> {
    let (mut tokens, mut positions, mut ranges) = (Vec::new(), Vec::new(), Vec::new());
    for (run, &start) in runs.iter().zip(starts) {
        let at = tokens.len();
        tokens.extend_from_slice(run);
        positions.extend((start..start + run.len()).map(|p| p as u32));
        ranges.push(at..tokens.len());
    }
    let mut seqs: Vec<_> = (caches.iter_mut().zip(ranges))
        .map(|(cache, rows)| SeqRows { cache, rows })
        .collect();
    let pass = PassInputs {
        tokens: &tokens,
        positions: &positions,
    };
    let rows: Vec<usize> = (0..tokens.len()).collect();
    let Ok(l) = m.forward_rows(&mut seqs, &pass, &rows) else {
        panic!("the pass failed")
    };
    l.to_vec()
}

fn argmax(row: &[f32]) -> usize {
    (0..row.len()).fold(0, |b, i| if row[i] > row[b] { i } else { b })
}

/// Every row of `split` within `tol` of `whole`'s largest magnitude, and the same greedy
/// choice wherever the whole model's top two are further apart than the tolerance.
fn assert_close(what: &str, whole: &[f32], split: &[f32], n_vocab: usize, tol: f32) {
    assert_eq!(whole.len(), split.len(), "{what}: rows");
    for (r, (w, s)) in whole.chunks(n_vocab).zip(split.chunks(n_vocab)).enumerate() {
        let scale = w.iter().fold(0f32, |m, v| m.max(v.abs()));
        let worst = w.iter().zip(s).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(
            worst <= tol * scale,
            "{what}: row {r} differs by {worst} (largest logit {scale})"
        );
        let best = argmax(w);
        let second = (0..n_vocab)
            .filter(|&i| i != best)
            .fold(f32::MIN, |m, i| m.max(w[i]));
        if w[best] - second > 2.0 * tol * scale {
            assert_eq!(argmax(s), best, "{what}: row {r}'s greedy choice");
        }
    }
}

#[test]
fn a_model_split_over_two_ranks_gives_the_whole_models_logits() {
    for (stem, tol) in [
        ("tiny-llama-f32", 1e-5),
        ("tiny-qwen3-f32", 1e-5),
        ("tiny-qwen3moe-f32", 1e-5),
        ("tiny-llama-q8_0", 1e-3),
        ("tiny-qwen3-q8_0", 1e-3),
        ("tiny-qwen3moe-q8_0", 1e-3),
    ] {
        let file = open(stem);
        let whole = CpuModel::load(&file).unwrap();
        let parts = CpuSplit::prepare(&file, 2).unwrap();
        let split = CpuSplitModel::load(&file, &parts).unwrap();
        let n_vocab = whole.config().n_vocab;
        assert_eq!(split.config().n_vocab, n_vocab);
        let prompt: Vec<u32> = (0..33).map(|i| (i * 37 + 11) % n_vocab as u32).collect();

        // One sequence: the prompt in one pass, then a few greedy steps (the whole model's
        // choices fed to both).
        let mut wc = [whole.new_cache(64, KvType::F32)];
        let mut sc = [split.new_cache(64, KvType::F32)];
        let w = pass(&whole, &mut wc, &[&prompt], &[0]);
        let s = pass(&split, &mut sc, &[&prompt], &[0]);
        assert_close(&format!("{stem} prompt"), &w, &s, n_vocab, tol);
        let mut next = argmax(&w[w.len() - n_vocab..]) as u32;
        for step in 0..6 {
            let at = prompt.len() + step;
            let w = pass(&whole, &mut wc, &[&[next]], &[at]);
            let s = pass(&split, &mut sc, &[&[next]], &[at]);
            assert_close(&format!("{stem} step {step}"), &w, &s, n_vocab, tol);
            next = argmax(&w) as u32;
        }

        // Two sequences in one pass, each over its own caches, at different depths.
        let mut wc = [
            whole.new_cache(64, KvType::F32),
            whole.new_cache(64, KvType::F32),
        ];
        let mut sc = [
            split.new_cache(64, KvType::F32),
            split.new_cache(64, KvType::F32),
        ];
        pass(&whole, &mut wc[..1], &[&prompt[..20]], &[0]);
        pass(&split, &mut sc[..1], &[&prompt[..20]], &[0]);
        let runs: [&[u32]; 2] = [&prompt[20..23], &prompt[5..12]];
        let w = pass(&whole, &mut wc, &runs, &[20, 0]);
        let s = pass(&split, &mut sc, &runs, &[20, 0]);
        assert_close(&format!("{stem} batch"), &w, &s, n_vocab, tol);
    }
}

#[test]
fn models_that_do_not_split_are_refused_by_name() {
    let refused = |stem: &str, ranks: usize| match CpuSplit::prepare(&open(stem), ranks) {
        Ok(_) => panic!("{stem} split over {ranks} ranks"),
        Err(e) => e.to_string(),
    };
    // olmoe's q/k norms are taken over every head at once.
    assert!(refused("tiny-olmoe-f32", 2).contains("olmoe"));
    // 4 query heads in 2 KV groups.
    let e = refused("tiny-llama-f32", 4);
    assert!(e.contains("2 KV groups") && e.contains("4 ranks"), "{e}");
    assert!(refused("tiny-llama-f32", 0).contains("rank 0 of 0"));
    // The output projection's 256-element rows are one K-quant block: half a row would cut it.
    let e = refused("tiny-qwen3-q4_k_m", 2);
    assert!(
        e.contains("attn_output") && e.contains("blocks of 256"),
        "{e}"
    );
}

#[test]
fn a_split_of_one_rank_is_the_whole_model_bit_for_bit() {
    let file = open("tiny-qwen3moe-q8_0");
    let whole = CpuModel::load(&file).unwrap();
    let parts = CpuSplit::prepare(&file, 1).unwrap();
    let split = CpuSplitModel::load(&file, &parts).unwrap();
    let prompt: Vec<u32> = (0..12).map(|i| i * 29 % 512).collect();
    let w = pass(
        &whole,
        &mut [whole.new_cache(16, KvType::F16)],
        &[&prompt],
        &[0],
    );
    let s = pass(
        &split,
        &mut [split.new_cache(16, KvType::F16)],
        &[&prompt],
        &[0],
    );
    assert_eq!(w, s);
}
