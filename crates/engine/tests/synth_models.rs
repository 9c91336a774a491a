//! Synthetic models (`ferrolm synth`) load and run: every tiny preset, float and quantized,
//! gives finite logits of a sensible scale. Covers qwen2, which has no golden file.

use ferrolm_engine::{Logits, Model, Session};
use ferrolm_gguf::GgufFile;
use ferrolm_model::{presets, FileType, Synth, VocabKind};

#[test]
fn tiny_synthetic_models_give_finite_logits() {
    let dir = std::env::temp_dir().join(format!("ferrolm-synth-fwd-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for name in presets::NAMES.iter().filter(|n| n.starts_with("tiny-")) {
        for ftype in [FileType::F32, FileType::Q4KM] {
            let path = dir.join(format!("{name}-{ftype}.gguf"));
            Synth::new(name, ftype, 1, VocabKind::None)
                .unwrap()
                .write(&path, &|_| {})
                .unwrap();
            let file = GgufFile::open(&path).unwrap();
            let model = Model::load(&file).unwrap();
            let mut session = Session::new(&model, 64);
            let tokens: Vec<u32> = (0..16).map(|i| (i * 37 + 5) % 512).collect();
            let logits = session.eval(&tokens, Logits::All).unwrap();
            assert_eq!(logits.len(), 16 * 512);
            assert!(logits.iter().all(|x| x.is_finite()), "{name} {ftype}");
            let rms = (logits.iter().map(|x| x * x).sum::<f32>() / logits.len() as f32).sqrt();
            assert!(
                (0.1..10.0).contains(&rms),
                "{name} {ftype}: logit RMS {rms}"
            );
            // Different tokens, different predictions.
            assert_ne!(logits[..512], logits[512..1024], "{name} {ftype}");
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
