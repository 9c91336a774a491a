//! The constraint layer on the default model's real vocabulary, driven by random logits: the
//! masks alone must make any draw a valid output.

use ferrolm_engine::constraint::{ConstraintError, ConstraintVocab, GrammarSpec};
use ferrolm_engine::{Sampler, SamplerConfig};
use ferrolm_gguf::GgufFile;
use ferrolm_tokenizer::Tokenizer;
use rand::{Rng, SeedableRng};

fn vocab() -> (Tokenizer, ConstraintVocab) {
    let path = ferrolm_hub::resolve_default(true).expect("the default model (ferrolm pull)");
    let file = GgufFile::open(path).unwrap();
    let tok = Tokenizer::from_gguf(&file).unwrap();
    let n_vocab = tok.n_vocab();
    let vocab = ConstraintVocab::new(&tok, n_vocab).unwrap();
    (tok, vocab)
}

/// Draws tokens from random logits within `spec` until it ends; the decoded text.
fn draw(tok: &Tokenizer, vocab: &ConstraintVocab, spec: &GrammarSpec, seed: u64) -> String {
    let grammar = vocab.compile(spec).unwrap();
    let mut m = grammar.matcher();
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut sampler = Sampler::new(SamplerConfig {
        temperature: 1.0,
        top_k: 0,
        top_p: 1.0,
        min_p: 0.0,
        seed,
        ..SamplerConfig::default()
    });
    let mut out = Vec::new();
    for _ in 0..400 {
        let mask = m.compute_mask().unwrap();
        let logits: Vec<f32> = (0..vocab.n_vocab())
            .map(|_| rng.gen::<f32>() * 4.0)
            .collect();
        let t = sampler.sample_masked(&logits, Some(&mask));
        assert!(mask.allows(t));
        m.accept(t).unwrap();
        if tok.is_eog(t) {
            break;
        }
        out.push(t);
        if m.is_finished() {
            break;
        }
    }
    tok.decode(&out).unwrap()
}

#[test]
fn random_draws_within_a_schema_are_valid_json_of_that_shape() {
    let (tok, vocab) = vocab();
    let schema = serde_json::json!({
        "type": "object",
        "properties": {
            "n": {"type": "integer", "minimum": 0, "maximum": 9},
            "color": {"enum": ["red", "green"]},
            "ok": {"type": "boolean"}
        },
        "required": ["n", "color", "ok"],
        "additionalProperties": false
    });
    let spec = GrammarSpec::JsonSchema {
        schema,
        strict: true,
    };
    for seed in 0..5 {
        let text = draw(&tok, &vocab, &spec, seed);
        let v: serde_json::Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
        assert!((0..=9).contains(&v["n"].as_i64().unwrap()), "{text}");
        assert!(
            ["red", "green"].contains(&v["color"].as_str().unwrap()),
            "{text}"
        );
        assert!(v["ok"].is_boolean(), "{text}");
    }
}

#[test]
fn gbnf_and_lark_grammars_hold() {
    let (tok, vocab) = vocab();
    let gbnf = GrammarSpec::from_grammar_text(r#"root ::= ("yes" | "no") " " [0-9]{2}"#);
    assert!(matches!(gbnf, GrammarSpec::Gbnf(_)));
    let lark = GrammarSpec::from_grammar_text(
        "%llguidance {}\nstart: (\"yes\" | \"no\") \" \" /[0-9]{2}/",
    );
    assert!(matches!(lark, GrammarSpec::Lark(_)));
    for spec in [gbnf, lark] {
        for seed in 0..3 {
            let text = draw(&tok, &vocab, &spec, seed);
            let (word, num) = text.split_once(' ').unwrap_or_else(|| panic!("{text:?}"));
            assert!(["yes", "no"].contains(&word), "{text:?}");
            assert!(
                num.len() == 2 && num.bytes().all(|b| b.is_ascii_digit()),
                "{text:?}"
            );
        }
    }
}

#[test]
fn bad_schemas_and_grammars_are_typed_errors_with_a_reason() {
    let (_, vocab) = vocab();
    let cases = [
        GrammarSpec::JsonSchema {
            schema: serde_json::json!({"type": "integr"}),
            strict: true,
        },
        GrammarSpec::JsonSchema {
            schema: serde_json::json!("nope"),
            strict: true,
        },
        GrammarSpec::Lark("start: undefined_rule".into()),
        GrammarSpec::Gbnf("root ::= \"a".into()),
    ];
    for spec in cases {
        match vocab.compile(&spec) {
            Err(ConstraintError::Invalid { kind, reason }) => {
                assert_eq!(kind, spec.kind());
                assert!(!reason.is_empty());
            }
            other => panic!("{spec:?}: {:?}", other.map(|_| ())),
        }
    }
}
