//! SmolLM2-135M-Instruct (the default model) against llama.cpp: teacher-forced greedy steps.

mod common;

use ferrolm_engine::{argmax, Logits, Session};
use ferrolm_gguf::GgufFile;
use serde_json::Value;

fn golden() -> Value {
    let path = common::golden("smollm2-135m-instruct-q4_1.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

#[test]
fn teacher_forced_top1_matches_where_the_margin_is_clear() {
    let path = ferrolm_hub::resolve_default(true).expect("the default model (ferrolm pull)");
    let file = GgufFile::open(path).unwrap();
    let model = common::load(&file);
    let g = golden();
    for case in g["generate"].as_array().unwrap() {
        let prompt = ids(&case["prompt_ids"]);
        let greedy = ids(&case["greedy"]);
        let mut tokens = prompt.clone();
        tokens.extend_from_slice(&greedy[..greedy.len() - 1]);
        let mut s = Session::new(&model, 512);
        let logits = s.eval(&tokens, Logits::All).unwrap();
        let rows: Vec<&[f32]> = logits.chunks_exact(model.cfg.n_vocab).collect();
        let (mut clear, mut misses, mut first_miss) = (0, 0, None);
        for (step, top8) in case["top8_per_step"].as_array().unwrap().iter().enumerate() {
            let top8 = top8.as_array().unwrap();
            let margin = top8[0][1].as_f64().unwrap() - top8[1][1].as_f64().unwrap();
            if margin < 0.1 {
                continue;
            }
            clear += 1;
            let ours = argmax(rows[prompt.len() - 1 + step]);
            if ours != greedy[step] {
                misses += 1;
                first_miss.get_or_insert(step);
            }
        }
        println!(
            "{:?}: {misses} misses of {clear} clear steps (first at {first_miss:?})",
            case["text"]
                .as_str()
                .unwrap()
                .chars()
                .take(20)
                .collect::<String>()
        );
        assert!(misses <= 1, "too many top-1 misses: {misses}");
    }
}

/// Top-1 of every row of `a` and `b` (`[rows][n_vocab]`): how many agree, of how many.
fn top1_agreement(a: &[f32], b: &[f32], n_vocab: usize) -> (usize, usize) {
    let rows = a.chunks_exact(n_vocab).zip(b.chunks_exact(n_vocab));
    let agree = rows.filter(|(x, y)| argmax(x) == argmax(y)).count();
    (agree, a.len() / n_vocab)
}

/// The GPU against the CPU on the real model: teacher-forced top-1 agreement over every
/// golden prompt and its continuation, batched (prefill kernels) and one token at a time
/// (decode kernels, replayed as a CUDA graph after the first steps).
#[test]
#[ignore = "needs a GPU: run with FERROLM_TEST_BACKEND=cuda and --ignored"]
fn cuda_agrees_with_cpu_teacher_forced() {
    assert!(common::on_cuda(), "set FERROLM_TEST_BACKEND=cuda");
    let path = ferrolm_hub::resolve_default(true).expect("the default model (ferrolm pull)");
    let file = GgufFile::open(path).unwrap();
    let cpu = ferrolm_engine::Model::load(&file).unwrap();
    let gpu = common::load(&file);
    let n_vocab = cpu.cfg.n_vocab;
    let (mut agree, mut total, mut step_agree, mut step_total) = (0, 0, 0, 0);
    for case in golden()["generate"].as_array().unwrap() {
        let mut tokens = ids(&case["prompt_ids"]);
        let greedy = ids(&case["greedy"]);
        tokens.extend_from_slice(&greedy[..greedy.len() - 1]);
        let want = Session::new(&cpu, 512).eval(&tokens, Logits::All).unwrap();
        let got = Session::new(&gpu, 512).eval(&tokens, Logits::All).unwrap();
        let (a, t) = top1_agreement(&got, &want, n_vocab);
        (agree, total) = (agree + a, total + t);

        let mut s = Session::new(&gpu, 512);
        let mut stepped = Vec::new();
        for &t in &tokens {
            stepped.extend(s.eval(&[t], Logits::Last).unwrap());
        }
        let (a, t) = top1_agreement(&stepped, &want, n_vocab);
        (step_agree, step_total) = (step_agree + a, step_total + t);
    }
    println!(
        "batched: {agree}/{total} top-1 agree; one token at a time: {step_agree}/{step_total}"
    );
    assert!(agree * 100 >= total * 98, "batched: {agree}/{total}");
    assert!(
        step_agree * 100 >= step_total * 98,
        "stepped: {step_agree}/{step_total}"
    );
}
