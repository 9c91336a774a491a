//! The forward pass cut into embed / layers / head, as `-ngl` runs it across two backends,
//! computes exactly what the whole pass does, at every cut point.

use ferrolm_cpu::{CpuBackend, CpuCache, CpuPlan, CpuWeight, KvType};
use ferrolm_gguf::GgufFile;
use ferrolm_model::backend::{Backend, PassInputs, SeqRows};
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
        let Ok(inp) = b.inputs(&PassInputs {
            tokens: &tokens,
            positions: &positions,
        });

        let mut cache = CpuCache::new(&cfg, 32, KvType::F16);
        let mut seqs = [SeqRows {
            cache: &mut cache,
            rows: 0..tokens.len(),
        }];
        let Ok(logits) = forward(&b, &cfg, &w, &mut seqs, &inp, &rows);
        let Ok(whole) = b.to_host(&logits);

        for cut in 0..=cfg.n_layer {
            let mut cache = CpuCache::new(&cfg, 32, KvType::F16);
            let mut seqs = [SeqRows {
                cache: &mut cache,
                rows: 0..tokens.len(),
            }];
            let Ok(mut x) = embed(&b, &cfg, &w, &inp);
            let Ok(()) = layers(&b, &cfg, &w, &mut seqs, &mut x, &inp, 0..cut);
            // What crosses between backends: the residual stream as host floats.
            let Ok(mut moved) = b.alloc(tokens.len(), cfg.n_embd);
            let Ok(host) = b.to_host(&x);
            moved.data.copy_from_slice(&host);
            let Ok(()) = layers(&b, &cfg, &w, &mut seqs, &mut moved, &inp, cut..cfg.n_layer);
            let Ok(logits) = head(&b, &cfg, &w, &moved, &rows);
            let Ok(split) = b.to_host(&logits);
            assert!(
                split == whole,
                "{stem}: cut after {cut} layers changes the logits"
            );
        }
    }
}
