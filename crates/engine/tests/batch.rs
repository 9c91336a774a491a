//! Continuous batching's engine half on the default model: several sequences in one forward
//! pass against each run alone.

use ferrolm_engine::{argmax, greedy_pick, KvType, Logits, Model, SeqInput, Session};
use ferrolm_gguf::GgufFile;

fn model_file() -> GgufFile {
    let path = ferrolm_hub::resolve_default(true).expect("the default model (ferrolm pull)");
    GgufFile::open(path).unwrap()
}

/// Greedy tokens of one sequence run alone through a session.
fn alone(model: &Model, prompt: &[u32], n: usize) -> (Vec<u32>, Vec<f32>) {
    let mut s = Session::new(model, 128);
    let mut logits = s.eval(prompt, Logits::Last).unwrap();
    let first = logits.clone();
    let mut out = Vec::new();
    for _ in 0..n {
        let t = argmax(&logits);
        out.push(t);
        logits = s.eval(&[t], Logits::Last).unwrap();
    }
    (out, first)
}

#[test]
fn batched_sequences_match_each_alone() {
    let file = model_file();
    let model = Model::load(&file).unwrap();
    let prompts: [&[u32]; 3] = [&[1, 504, 3458, 282], &[1, 9690, 314, 253, 1462, 30], &[42]];
    let n = 8;
    let want: Vec<_> = prompts.iter().map(|p| alone(&model, p, n)).collect();

    let mut caches: Vec<_> = prompts
        .iter()
        .map(|_| model.new_cache(128, ferrolm_engine::KvType::F16).unwrap())
        .collect();
    let mut pos: Vec<usize> = vec![0; prompts.len()];
    let mut next: Vec<Vec<u32>> = prompts.iter().map(|p| p.to_vec()).collect();
    let mut got: Vec<Vec<u32>> = vec![Vec::new(); prompts.len()];
    for step in 0..=n {
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
        let logits = model.forward_batch(&mut seqs).unwrap();
        for i in 0..prompts.len() {
            if step == 0 {
                // Prefill rows are batched with other prompts' rows: same kernels, so the
                // logits agree to f32 summation order.
                let worst = logits[i]
                    .iter()
                    .zip(&want[i].1)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0f32, f32::max);
                // Alone, a one-token prompt runs the decode matmul (gemv); stacked with other
                // rows it runs the prefill kernel (gemm): same products, another summation
                // order, a difference that grows through 30 layers on the first position.
                assert!(worst < 1.0, "seq {i}: prefill logits differ by {worst}");
            }
            pos[i] += next[i].len();
            if step < n {
                let t = argmax(&logits[i]);
                got[i].push(t);
                next[i] = vec![t];
            }
        }
    }
    for (i, (w, _)) in want.iter().enumerate() {
        assert_eq!(&got[i], w, "sequence {i}");
    }
}

/// The borrowed last logits (`eval_last`, bench's decode loop) are `eval`'s, pass after pass
/// (the runner's buffer kept between them), through a prompt of two ubatches and steps.
#[test]
fn eval_last_is_evals_last_row() {
    let file = model_file();
    let model = Model::load(&file).unwrap();
    let prompt = [1u32, 504, 3458, 282, 13, 9690, 314];
    let (mut a, mut b) = (Session::new(&model, 64), Session::new(&model, 64));
    a.set_ubatch(4);
    b.set_ubatch(4);
    let mut want = a.eval(&prompt, Logits::Last).unwrap();
    let mut got = b.eval_last(&prompt).unwrap().to_vec();
    for step in 0..4 {
        assert_eq!(got, want, "step {step}");
        let t = argmax(&want);
        want = a.eval(&[t], Logits::Last).unwrap();
        got = b.eval_last(&[t]).unwrap().to_vec();
    }
    assert_eq!(b.n_past(), prompt.len() + 4);
    assert!(b.eval_last(&[]).unwrap().is_empty());
}

#[test]
fn a_batch_of_one_is_the_session_pass_exactly() {
    let file = model_file();
    let model = Model::load(&file).unwrap();
    let prompt = [1u32, 504, 3458, 282, 13];
    let mut s = Session::new(&model, 64);
    let want = s.eval(&prompt, Logits::All).unwrap();
    let mut cache = model.new_cache(64, ferrolm_engine::KvType::F16).unwrap();
    let got = model
        .forward_batch(&mut [SeqInput {
            cache: &mut cache,
            tokens: &prompt,
            pos0: 0,
            logits: Some(Logits::All),
        }])
        .unwrap();
    assert_eq!(got[0], want);
}

#[test]
fn bad_input_is_an_error_not_a_panic() {
    let file = model_file();
    let model = Model::load(&file).unwrap();
    let mut cache = model.new_cache(4, ferrolm_engine::KvType::F16).unwrap();
    let too_long = [1u32; 5];
    let err = model.forward_batch(&mut [SeqInput {
        cache: &mut cache,
        tokens: &too_long,
        pos0: 0,
        logits: None,
    }]);
    assert!(err.is_err());
    let mut cache = model.new_cache(4, ferrolm_engine::KvType::F16).unwrap();
    let err = model.forward_batch(&mut [SeqInput {
        cache: &mut cache,
        tokens: &[u32::MAX],
        pos0: 0,
        logits: None,
    }]);
    assert!(err.is_err());
}

/// A prompt prefilled once and copied into other caches (`Model::copy_cache_prefix`, what
/// `ferrolm bench -pps` does) continues exactly as if each sequence had prefilled it: the
/// next step's logits equal a session's that evaluated the prompt itself, for an f16 and a
/// quantized cache.
#[test]
fn a_copied_prompt_prefix_continues_as_its_own_prefill() {
    let file = model_file();
    let mut model = Model::load(&file).unwrap();
    model.set_batch_invariant(true); // the batch's shape then leaves every row's bits alone
    let prompt: &[u32] = &[1, 504, 3458, 282, 9690];
    for kv in [KvType::F16, KvType::Q8_0] {
        let mut alone = Session::with_kv_type(&model, 16, kv);
        alone.eval(prompt, Logits::Last).unwrap();
        let want = alone.eval(&[42], Logits::Last).unwrap();

        let mut src = model.new_cache(16, kv).unwrap();
        model
            .forward_batch(&mut [SeqInput {
                cache: &mut src,
                tokens: prompt,
                pos0: 0,
                logits: None,
            }])
            .unwrap();
        let mut dst = model.new_cache(16, kv).unwrap();
        model
            .copy_cache_prefix(&src, &mut dst, prompt.len())
            .unwrap();
        let got = model
            .forward_batch(&mut [SeqInput {
                cache: &mut dst,
                tokens: &[42],
                pos0: prompt.len(),
                logits: Some(Logits::Last),
            }])
            .unwrap();
        assert!(
            got[0] == want,
            "{kv:?}: the copied prefix gives other logits"
        );
        let small = model.new_cache(8, kv).unwrap();
        assert!(model.copy_cache_prefix(&small, &mut dst, 4).is_err());
    }
}

/// A batched pass's greedy choices (`forward_batch_greedy`) are the host's picks from the same
/// pass's logits: the argmax of each asked row, and with banned ids (the best among them) the
/// argmax of the rest; a sequence that asked for no logits gets no pick.
#[test]
fn greedy_picks_are_the_picks_of_the_logits() {
    let file = model_file();
    let model = Model::load(&file).unwrap();
    let prompts: [&[u32]; 3] = [&[1, 504, 3458, 282], &[1, 9690, 314, 253, 1462, 30], &[42]];
    let asks = [Some(Logits::Last), None, Some(Logits::All)];
    let run = |greedy: Option<&[u32]>| {
        let mut caches: Vec<_> = prompts
            .iter()
            .map(|_| model.new_cache(64, KvType::F16).unwrap())
            .collect();
        let mut seqs: Vec<SeqInput> = caches
            .iter_mut()
            .zip(prompts)
            .zip(asks)
            .map(|((cache, tokens), logits)| SeqInput {
                cache,
                tokens,
                pos0: 0,
                logits,
            })
            .collect();
        match greedy {
            None => (model.forward_batch(&mut seqs).unwrap(), Vec::new()),
            Some(banned) => {
                let p = model.forward_batch_greedy(&mut seqs, banned).unwrap();
                (Vec::new(), (0..3).map(|i| p.seq(i).to_vec()).collect())
            }
        }
    };
    let (logits, _) = run(None);
    let n_vocab = model.cfg.n_vocab;
    let rows = |i: usize| logits[i].chunks(n_vocab).collect::<Vec<_>>();
    // The first sequence's best token banned, with an id past the vocabulary beside it.
    let banned = [argmax(rows(0)[0]), n_vocab as u32 + 5];
    let (_, picks) = run(Some(&banned));
    assert_eq!(picks[1], []);
    assert_eq!(picks[2].len(), prompts[2].len());
    for i in [0, 2] {
        for (row, pick) in rows(i).iter().zip(&picks[i]) {
            assert_eq!(*pick, greedy_pick(row, &banned), "sequence {i}");
            assert_eq!(pick.best, argmax(row));
        }
    }
    let first = picks[0][0];
    assert_eq!(first.best, banned[0]);
    assert_ne!(first.allowed, first.best, "the ban moved the choice");
    let mut lowered = rows(0)[0].to_vec();
    lowered[first.best as usize] = f32::NEG_INFINITY;
    assert_eq!(first.allowed, argmax(&lowered));
}
