//! Whole-model logits against a llama.cpp golden (`ferrolm_testkit::golden`: the JSON shape of
//! `../shared/golden`'s tiny goldens, and the bars every such golden meets), in process.

use ferrolm_engine::{KvType, Logits, Session};
use ferrolm_gguf::GgufFile;
use ferrolm_testkit::{Golden, Stats, Tally};
use std::path::Path;

/// Teacher-forced logits of every case of the golden `json` against llama.cpp's; the model is
/// the golden's own (regenerated from its recipe, or the shared tiny model). F32 goldens come
/// from llama.cpp's precise configuration (F32 KV cache, no flash attention); the quantized
/// ones from its defaults (F16 cache, flash attention), and we mirror each.
pub fn compare(json: &Path, f32_model: bool) -> Stats {
    let kv = super::kv_type(if f32_model { KvType::F32 } else { KvType::F16 });
    let golden = Golden::open(json);
    let file = GgufFile::open(golden.model_path(Path::new(env!("CARGO_TARGET_TMPDIR")))).unwrap();
    let model = super::load(&file);
    assert_eq!(model.cfg.n_vocab, golden.n_vocab);
    let mut tally = Tally::default();
    for case in &golden.cases {
        let mut s = Session::with_kv_type(&model, 256, kv);
        let ours = s.eval(&case.tokens, Logits::All).unwrap();
        for (row, want) in ours.chunks_exact(golden.n_vocab).zip(&case.expected) {
            tally.row(row, want);
        }
    }
    tally.stats()
}
