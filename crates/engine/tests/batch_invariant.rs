//! Batch-invariant mode (what `ferrolm serve` runs in): a sequence's logits are bit-identical
//! whether it runs alone or stacked with others, at every step.

use ferrolm_engine::{argmax, Logits, Model, SeqInput, Session};
use ferrolm_gguf::GgufFile;

#[test]
fn batched_logits_equal_each_sequence_alone_bit_for_bit() {
    let path = ferrolm_hub::resolve_default(true).expect("the default model (ferrolm pull)");
    let file = GgufFile::open(path).unwrap();
    let mut model = Model::load(&file).unwrap();
    model.set_batch_invariant(true);
    let prompts: [&[u32]; 3] = [&[1, 504, 3458, 282], &[1, 9690, 314, 253, 1462, 30], &[42]];
    let steps = 6;

    // Alone: each sequence's logits at every step.
    let alone: Vec<Vec<Vec<f32>>> = prompts
        .iter()
        .map(|p| {
            let mut s = Session::new(&model, 64);
            let mut rows = vec![s.eval(p, Logits::Last).unwrap()];
            for _ in 0..steps {
                let t = argmax(rows.last().unwrap());
                rows.push(s.eval(&[t], Logits::Last).unwrap());
            }
            rows
        })
        .collect();

    // Together: one forward pass per step for all three.
    let mut caches: Vec<_> = prompts
        .iter()
        .map(|_| model.new_cache(64, ferrolm_engine::KvType::F16).unwrap())
        .collect();
    let mut next: Vec<Vec<u32>> = prompts.iter().map(|p| p.to_vec()).collect();
    let mut pos = vec![0usize; prompts.len()];
    for step in 0..=steps {
        let mut seqs: Vec<SeqInput> = caches
            .iter_mut()
            .zip(&next)
            .zip(&pos)
            .map(|((cache, tokens), &pos0)| SeqInput {
                cache,
                tokens,
                pos0,
                logits: Some(Logits::Last),
            })
            .collect();
        let got = model.forward_batch(&mut seqs).unwrap();
        for (i, (logits, want)) in got.iter().zip(&alone).enumerate() {
            assert!(
                *logits == want[step],
                "sequence {i}, step {step}: batched logits differ from alone"
            );
            pos[i] += next[i].len();
            next[i] = vec![argmax(logits)];
        }
    }
}

/// A prompt's logits do not depend on how it is cut into chunks (the server's cut depends on
/// its load and on how long a reused prefix is): one 150-row pass, or chunks of 37, 64 or 113
/// rows (the f16 cache's attention arithmetic would otherwise differ under and over 64 rows).
#[test]
fn chunking_a_prompt_does_not_change_its_logits() {
    let path = ferrolm_hub::resolve_default(true).expect("the default model (ferrolm pull)");
    let file = GgufFile::open(path).unwrap();
    let mut model = Model::load(&file).unwrap();
    model.set_batch_invariant(true);
    let prompt: Vec<u32> = (0..150).map(|i| (i * 7919 + 13) % 49152).collect();
    let logits = |cut: usize| {
        let mut s = Session::new(&model, 256);
        s.set_ubatch(cut);
        let mut rows = s.eval(&prompt, Logits::Last).unwrap();
        // And a decode step after it, which reads every cached row.
        rows.extend(s.eval(&[argmax(&rows)], Logits::Last).unwrap());
        rows
    };
    let whole = logits(150);
    for cut in [37, 64, 113] {
        assert!(
            logits(cut) == whole,
            "chunks of {cut} rows change the logits"
        );
    }
}
