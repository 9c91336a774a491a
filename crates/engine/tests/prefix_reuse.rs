//! Reusing a session's KV cache across prompts that share a prefix (what `ferrolm chat` does
//! each turn), and cancelling generation. Runs on a tiny synthetic model.

use ferrolm_engine::{
    generate, GenerateParams, Logits, Model, Sampler, SamplerConfig, Session, StopReason,
};
use ferrolm_gguf::GgufFile;
use ferrolm_model::{FileType, Synth, VocabKind};
use ferrolm_tokenizer::Tokenizer;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

fn with_model(test: &str, f: impl FnOnce(&Model, &Tokenizer)) {
    // One folder per test: the tests run in parallel and each removes its own.
    let dir = std::env::temp_dir().join(format!("ferrolm-{test}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("tiny-llama.gguf");
    Synth::new("tiny-llama", FileType::F32, 7, VocabKind::None)
        .unwrap()
        .write(&path, &|_| {})
        .unwrap();
    let file = GgufFile::open(&path).unwrap();
    let model = Model::load(&file).unwrap();
    let tok = Tokenizer::from_gguf(&file).unwrap();
    f(&model, &tok);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn reused_prefix_gives_the_same_logits_as_a_fresh_session() {
    with_model("reuse-logits", |model, _| {
        let first: Vec<u32> = (0..20).map(|i| (i * 37 + 5) % 512).collect();
        let mut second = first[..12].to_vec();
        second.extend([7, 8, 9, 10, 11]);

        let mut reused = Session::new(model, 64);
        reused.eval(&first, Logits::Last).unwrap();
        assert_eq!(reused.tokens(), &first[..]);
        let kept = reused.reuse_prefix(&second);
        assert_eq!(kept, 12);
        assert_eq!(reused.n_past(), 12);
        let got = reused.eval(&second[kept..], Logits::Last).unwrap();

        let mut fresh = Session::new(model, 64);
        let want = fresh.eval(&second, Logits::Last).unwrap();
        assert_eq!(
            got, want,
            "stale cache entries leaked into the reused session"
        );
        assert_eq!(reused.tokens(), fresh.tokens());
    });
}

#[test]
fn reuse_prefix_always_leaves_a_token_to_evaluate() {
    with_model("reuse-min", |model, _| {
        let mut s = Session::new(model, 64);
        s.eval(&[1, 2, 3, 4], Logits::Last).unwrap();
        // The same prompt again: everything is cached, but logits need one evaluated token.
        assert_eq!(s.reuse_prefix(&[1, 2, 3, 4]), 3);
        assert_eq!(s.tokens(), &[1, 2, 3]);
        // A prompt that only extends the cache keeps all of it.
        s.eval(&[4], Logits::Last).unwrap();
        assert_eq!(s.reuse_prefix(&[1, 2, 3, 4, 5, 6]), 4);
        // Nothing shared: everything goes.
        assert_eq!(s.reuse_prefix(&[9, 9]), 0);
        assert_eq!(s.n_past(), 0);
    });
}

#[test]
fn generation_stops_when_cancelled() {
    with_model("cancel", |model, tok| {
        let cancel = Arc::new(AtomicBool::new(false));
        let params = GenerateParams {
            n_predict: 20,
            cancel: Some(cancel.clone()),
            ..Default::default()
        };
        let mut session = Session::new(model, 64);
        let mut n_emitted = 0;
        let stats = generate(
            &mut session,
            &mut Sampler::new(SamplerConfig::greedy()),
            tok,
            &[1, 2, 3],
            &params,
            |_| {
                n_emitted += 1;
                if n_emitted == 3 {
                    cancel.store(true, Ordering::Relaxed);
                }
            },
        )
        .unwrap();
        assert_eq!(stats.stop, StopReason::Cancelled);
        assert_eq!(stats.n_gen, 3);

        // Already set before the call: the prompt is evaluated, nothing is generated.
        let stats = generate(
            &mut Session::new(model, 64),
            &mut Sampler::new(SamplerConfig::greedy()),
            tok,
            &[1, 2, 3],
            &params,
            |_| {},
        )
        .unwrap();
        assert_eq!((stats.stop, stats.n_gen), (StopReason::Cancelled, 0));
    });
}
