//! The dump adapter (`FERROLM_DUMP_DIR`) changes nothing about a pass's results, and writes
//! every intermediate the unfused forward pass used to: fused ops run as their parts.

use ferrolm_cpu::{CpuBackend, CpuCache, CpuPlan, CpuWeight, KvType};
use ferrolm_gguf::GgufFile;
use ferrolm_model::backend::{Backend, PassInputs, SeqRows};
use ferrolm_model::dump::Dump;
use ferrolm_model::forward::forward;
use ferrolm_model::weights::ModelWeights;
use ferrolm_model::Config;

const NAMES: [&str; 14] = [
    "attn_norm",
    "Qpre",
    "Qcur",
    "Kcur",
    "Vcur",
    "kqv_out",
    "attn_out",
    "ffn_inp",
    "ffn_norm",
    "ffn_gate",
    "ffn_up",
    "ffn_swiglu",
    "ffn_out",
    "l_out",
];

#[test]
fn dumping_keeps_the_logits_and_writes_every_name() {
    let path = format!(
        "{}/../../../shared/golden/tiny-qwen3-q8_0.gguf",
        env!("CARGO_MANIFEST_DIR")
    );
    let file = GgufFile::open(path).unwrap();
    let cfg = Config::from_gguf(&file).unwrap();
    let w = ModelWeights::load(&cfg, &file, CpuWeight::new).unwrap();
    let b = CpuBackend::new(CpuPlan::detect());
    let tokens: Vec<u32> = (0..5).map(|i| (i * 7 + 3) % cfg.n_vocab as u32).collect();
    let positions: Vec<u32> = (0..tokens.len() as u32).collect();
    let pass = PassInputs {
        tokens: &tokens,
        positions: &positions,
    };
    let dir = std::env::temp_dir().join(format!("ferrolm-dump-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();

    let run = |b: &dyn Fn(&mut CpuCache) -> Vec<f32>| {
        let mut cache = CpuCache::new(&cfg, 16, KvType::F16);
        b(&mut cache)
    };
    let plain = run(&|cache| {
        let Ok(inp) = b.inputs(&pass);
        let mut seqs = [SeqRows { cache, rows: 0..5 }];
        let Ok(l) = forward(&b, &cfg, &w, &mut seqs, &inp, &[4]);
        l.data
    });
    let dumped = run(&|cache| {
        let d = Dump::new(&b, &dir);
        let Ok(inp) = d.inputs(&pass);
        let mut seqs = [SeqRows { cache, rows: 0..5 }];
        let Ok(l) = forward(&d, &cfg, &w, &mut seqs, &inp, &[4]);
        l.data
    });
    assert!(plain == dumped, "dumping changed the logits");
    for layer in 0..cfg.n_layer {
        for name in NAMES {
            let f = dir.join(format!("{name}-{layer}.f32"));
            let len = std::fs::metadata(&f).map(|m| m.len()).unwrap_or(0);
            assert!(len > 0, "{} missing or empty", f.display());
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
