//! SmolLM2-135M-Instruct (the default model) against llama.cpp: teacher-forced greedy steps.

use ferrolm_engine::{argmax, Logits, Model, Session};
use ferrolm_gguf::GgufFile;
use serde_json::Value;

fn golden() -> Value {
    let path = format!(
        "{}/../../../shared/golden/smollm2-135m-instruct-q4_1.json",
        env!("CARGO_MANIFEST_DIR")
    );
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
    let model = Model::load(&file).unwrap();
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
