//! Full-size presets: tensor lists and file sizes, checked without writing the files.

use ferrolm_model::{preset, tensor_specs, FileType, Synth, VocabKind};

/// (preset, parameters of the real checkpoint, tensors llama.cpp's GGUF has,
///  size of llama.cpp's Q4_K_M file in bytes, where we know it)
const REAL: [(&str, u64, usize, Option<f64>); 7] = [
    ("olmoe-1b-7b", 6_919_000_000, 195, Some(4.21e9)),
    ("qwen3-30b-a3b", 30_532_000_000, 579, Some(18.55e9)),
    // 94 blocks of 12 tensors and 3 global ones; about 142 GB at Q4_K_M.
    ("qwen3-235b-a22b", 235_093_634_560, 1131, None),
    ("smollm2-1.7b", 1_711_000_000, 218, Some(1.05e9)),
    ("qwen3-8b", 8_191_000_000, 399, Some(5.02e9)),
    ("smollm2-135m", 134_515_008, 272, None),
    // 15.7B parameters; 3 global tensors, 10 in the dense block, 14 in each of the 26 MoE ones.
    ("deepseek2-lite", 15_706_484_224, 377, None),
];

#[test]
fn full_size_presets_have_real_tensor_lists_and_sizes() {
    for (name, params, n_tensors, q4_k_m_bytes) in REAL {
        let cfg = preset(name).unwrap().config;
        let specs = tensor_specs(&cfg);
        let n: u64 = specs.iter().map(|s| s.n_elements()).sum();
        let off = (n as f64 / params as f64 - 1.0).abs();
        assert!(
            off < 0.002,
            "{name}: {n} parameters, expected about {params}"
        );
        assert_eq!(specs.len(), n_tensors, "{name}");

        let size = Synth::new(name, FileType::Q4KM, 0, VocabKind::None)
            .unwrap()
            .file_size()
            .unwrap() as f64;
        eprintln!("{name}: {n} parameters, Q4_K_M {size} bytes");
        if let Some(theirs) = q4_k_m_bytes {
            let off = (size / theirs - 1.0).abs();
            assert!(off < 0.01, "{name}: {size} bytes vs llama.cpp's {theirs}");
        }

        // The F32 file is exactly the parameters plus a small header.
        let f32_size = Synth::new(name, FileType::F32, 0, VocabKind::None)
            .unwrap()
            .file_size()
            .unwrap();
        assert!(f32_size >= 4 * n && f32_size < 4 * n + 64 * 1024 * specs.len() as u64);
    }
}
