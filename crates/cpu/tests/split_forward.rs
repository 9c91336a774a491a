//! The forward pass cut into embed / layers / head, as `-ngl` runs it across two backends,
//! computes exactly what the whole pass does, at every cut point.

use ferrolm_cpu::{CpuBackend, CpuCache, CpuPlan, CpuWeight, KvType};
use ferrolm_gguf::GgufFile;
use ferrolm_model::backend::{Backend, SeqRows};
use ferrolm_model::forward::{embed, forward, head, layers};
use ferrolm_model::weights::ModelWeights;
use ferrolm_model::Config;

#[test]
fn every_cut_point_gives_the_whole_pass_bit_for_bit() {
    for stem in ["tiny-qwen3-q8_0", "tiny-olmoe-q8_0"] {
        let path = format!(
            "{}/../../../shared/golden/{stem}.gguf",
            env!("CARGO_MANIFEST_DIR")
        );
        let file = GgufFile::open(path).unwrap();
        let cfg = Config::from_gguf(&file).unwrap();
        let w = ModelWeights::load(&cfg, &file, CpuWeight::new).unwrap();
        let b = CpuBackend::new(CpuPlan::detect());
        let tokens: Vec<u32> = (0..12).map(|i| (i * 7 + 3) % cfg.n_vocab as u32).collect();
        let positions: Vec<u32> = (0..tokens.len() as u32).collect();
        let rows = [tokens.len() - 1];

        let mut cache = CpuCache::new(&cfg, 32, KvType::F16);
        let mut seqs = [SeqRows {
            cache: &mut cache,
            rows: 0..tokens.len(),
        }];
        let whole = b.to_host(&forward(
            &b, &cfg, &w, &mut seqs, &tokens, &positions, &rows,
        ));

        for cut in 0..=cfg.n_layer {
            let mut cache = CpuCache::new(&cfg, 32, KvType::F16);
            let mut seqs = [SeqRows {
                cache: &mut cache,
                rows: 0..tokens.len(),
            }];
            let mut x = embed(&b, &cfg, &w, &tokens);
            layers(&b, &cfg, &w, &mut seqs, &mut x, &positions, 0..cut);
            // What crosses between backends: the residual stream as host floats.
            let mut moved = b.alloc(tokens.len(), cfg.n_embd);
            moved.data.copy_from_slice(&b.to_host(&x));
            layers(
                &b,
                &cfg,
                &w,
                &mut seqs,
                &mut moved,
                &positions,
                cut..cfg.n_layer,
            );
            let split = b.to_host(&head(&b, &cfg, &w, &moved, &rows));
            assert!(
                split == whole,
                "{stem}: cut after {cut} layers changes the logits"
            );
        }
    }
}
