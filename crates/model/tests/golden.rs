//! Layouts, presets and the quantization policy against llama.cpp's own files.

use ferrolm_gguf::{GgmlType, GgufFile, GgufWriter};
use ferrolm_model::{
    choose_types, preset, tensor_specs, Config, FileType, ModelError, PolicyModel, TensorRef,
};

fn golden(name: &str) -> GgufFile {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/golden/");
    GgufFile::open(format!("{path}{name}")).unwrap()
}

const ARCHES: [&str; 4] = ["llama", "qwen3", "olmoe", "qwen3moe"];

#[test]
fn layouts_match_the_golden_f32_files() {
    for arch in ARCHES {
        let f = golden(&format!("tiny-{arch}-f32.gguf"));
        let cfg = Config::from_gguf(&f).unwrap();
        let expected: Vec<_> = tensor_specs(&cfg)
            .into_iter()
            .map(|s| (s.name, s.dims))
            .collect();
        let actual: Vec<_> = f
            .tensors()
            .iter()
            .map(|t| (t.name.clone(), t.dims.clone()))
            .collect();
        assert_eq!(expected, actual, "tiny-{arch}");
        // The tiny presets are these very shapes.
        let p = preset(&format!("tiny-{arch}")).unwrap();
        assert_eq!(p.config, cfg, "preset tiny-{arch}");
    }
}

/// (quantized golden, the F32 file llama.cpp made it from)
fn quantized_goldens() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for arch in ARCHES {
        for q in ["q8_0", "q4_k_m"] {
            out.push((
                format!("tiny-{arch}-{q}.gguf"),
                format!("tiny-{arch}-f32.gguf"),
            ));
        }
    }
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/golden/quant");
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".gguf"))
        .collect();
    names.sort();
    assert!(names.len() >= 10, "{names:?}");
    for n in names {
        let arch = n.strip_prefix("tiny-").unwrap().split('-').next().unwrap();
        out.push((format!("quant/{n}"), format!("tiny-{arch}-f32.gguf")));
    }
    out
}

#[test]
fn policy_matches_llama_cpp_for_every_golden_file() {
    let mut checked = 0;
    for (quantized, source) in quantized_goldens() {
        let q = golden(&quantized);
        let f = golden(&source);
        let ftype = FileType::from_llama_ftype(q.get_u64("general.file_type").unwrap() as u32)
            .unwrap_or_else(|| panic!("{quantized}: file type not supported"));
        let cfg = Config::from_gguf(&f).unwrap();
        let refs: Vec<_> = f
            .tensors()
            .iter()
            .map(|t| TensorRef {
                name: &t.name,
                dims: &t.dims,
                src: t.ty,
            })
            .collect();
        let ours = choose_types(ftype, &PolicyModel::from(&cfg), &refs).unwrap();
        assert_eq!(q.tensors().len(), refs.len(), "{quantized}");
        for (t, ty) in f.tensors().iter().zip(ours) {
            let theirs = q.require_tensor(&t.name).unwrap().ty;
            assert_eq!(ty, theirs, "{quantized} ({ftype}): {}", t.name);
            checked += 1;
        }
    }
    assert!(checked > 400, "{checked} tensors checked");
}

#[test]
fn eight_expert_special_cases_are_exercised() {
    // Guards the test above against goldens that would not exercise the special cases.
    let q = golden("tiny-olmoe-q4_k_m.gguf");
    let ty = |n: &str| q.require_tensor(n).unwrap().ty;
    assert_eq!(ty("blk.0.attn_k.weight"), GgmlType::Q8_0);
    assert_eq!(ty("blk.0.attn_output.weight"), GgmlType::Q5K);
    assert_eq!(ty("blk.1.ffn_down_exps.weight"), GgmlType::Q6K);
    let q = golden("tiny-llama-q4_k_m.gguf");
    assert_eq!(
        q.require_tensor("token_embd.weight").unwrap().ty,
        GgmlType::Q6K
    );
}

fn in_memory(w: GgufWriter) -> GgufFile {
    let sizes: Vec<u64> = w.tensors().iter().map(|t| t.n_bytes).collect();
    let mut data = w.start(Vec::new()).unwrap();
    for n in sizes {
        data.write_tensor(&vec![0; n as usize]).unwrap();
    }
    let bytes = data.finish().unwrap();
    GgufFile::from_vec("mem.gguf", bytes).unwrap()
}

fn config_file(cfg: &Config, edit: impl FnOnce(&mut GgufWriter)) -> GgufFile {
    let mut w = GgufWriter::new();
    w.set("general.architecture", cfg.arch.name());
    cfg.write_to(&mut w);
    edit(&mut w);
    in_memory(w)
}

#[test]
fn configs_round_trip_through_gguf_metadata() {
    for name in ferrolm_model::presets::NAMES {
        let cfg = preset(name).unwrap().config;
        // Tied-ness comes from the tensors: give untied models an output tensor.
        let f = config_file(&cfg, |w| {
            if !cfg.tied_embeddings {
                w.add_tensor("output.weight", GgmlType::F32, &[1]).unwrap();
            }
        });
        let mut read = Config::from_gguf(&f).unwrap_or_else(|e| panic!("{name}: {e}"));
        if !cfg.tied_embeddings {
            assert!(!read.tied_embeddings);
        }
        read.tied_embeddings = cfg.tied_embeddings;
        assert_eq!(read, cfg, "{name}");
    }
}

#[test]
fn bad_metadata_is_reported_by_key() {
    let cfg = preset("tiny-qwen3moe").unwrap().config;
    let err = |f: &GgufFile| Config::from_gguf(f).unwrap_err().to_string();

    let mut w = GgufWriter::new();
    w.set("general.architecture", "mamba");
    let e = err(&in_memory(w));
    assert!(
        e.contains("mamba") && e.contains("llama, qwen2, qwen3, olmoe, qwen3moe"),
        "{e}"
    );

    let f = config_file(&cfg, |w| w.set("qwen3moe.block_count", "two"));
    let e = err(&f);
    assert!(e.contains("qwen3moe.block_count"), "{e}");

    let f = config_file(&cfg, |w| w.set("qwen3moe.attention.head_count_kv", 3u32));
    let e = err(&f);
    assert!(e.contains("qwen3moe.attention.head_count_kv"), "{e}");

    let f = config_file(&cfg, |w| w.set("qwen3moe.expert_used_count", 9u32));
    let e = err(&f);
    assert!(
        e.contains("qwen3moe.expert_used_count") && e.contains("1..=8"),
        "{e}"
    );

    let mut w = GgufWriter::new();
    w.set("general.architecture", "llama");
    w.set("llama.embedding_length", 64u32);
    let e = err(&in_memory(w));
    assert!(e.contains("llama.attention.head_count"), "{e}");

    // OLMoE has no tied variant.
    let olmoe = preset("tiny-olmoe").unwrap().config;
    let e = err(&config_file(&olmoe, |_| {}));
    assert!(e.contains("output.weight"), "{e}");
    assert!(matches!(
        Config::from_gguf(&config_file(&olmoe, |_| {})),
        Err(ModelError::Tensor { .. })
    ));
}

/// RoPE scaling survives a write and a read, and a file with llama3's `rope_freqs.weight` is
/// read as having it.
#[test]
fn rope_scaling_round_trips() {
    use ferrolm_model::rope::{RopeScaling, RopeScalingKind};
    let mut cfg = preset("tiny-llama").unwrap().config;
    cfg.rope_scaling = RopeScaling {
        kind: RopeScalingKind::Yarn,
        factor: 4.0,
        n_ctx_orig: Some(32768),
        attn_factor: 0.5,
        ..RopeScaling::default()
    };
    let read = Config::from_gguf(&config_file(&cfg, |w| {
        if !cfg.tied_embeddings {
            w.add_tensor("output.weight", GgmlType::F32, &[1]).unwrap();
        }
        w.add_tensor("rope_freqs.weight", GgmlType::F32, &[32])
            .unwrap();
    }))
    .unwrap();
    assert_eq!(read.rope_scaling, cfg.rope_scaling);
    assert!(read.rope_freqs);
    let rope = read.rope();
    assert_eq!((rope.freq_scale, rope.ext_factor), (0.25, 1.0));
    // llama.cpp's YaRN gain, cancelled before ggml applies it again, times the file's factor.
    assert!((rope.attn_factor - 0.5).abs() < 1e-6);
    assert!((rope.magnitude() - 0.5 * (1.0 + 0.1 * 4f32.ln())).abs() < 1e-6);
}

/// gemma3 as llama.cpp's loader reads it: every 6th block global, the sliding ones rotating
/// with base 10000 unscaled and the global ones with the file's base and linear scaling,
/// embeddings times sqrt(n_embd), and the queries rescaled only for the 62-block (27B) shape,
/// whose `1 / sqrt(n_embd / n_head)` is not the attention's own `1 / sqrt(head_dim)`.
#[test]
fn gemma3_blocks_slide_rotate_and_scale_as_llama_cpp() {
    let cfg = preset("gemma3-4b").unwrap().config;
    let swa = cfg.swa.as_ref().unwrap();
    let sliding: Vec<bool> = (0..12).map(|l| swa.slides(l)).collect();
    let want = [true, true, true, true, true, false];
    assert_eq!(sliding, [want, want].concat());
    let (local, global) = (cfg.rope_for(0), cfg.rope_for(5));
    assert_eq!((local.base, local.freq_scale), (10000.0, 1.0));
    assert_eq!((global.base, global.freq_scale), (1e6, 0.125));
    assert_eq!(cfg.embd_scale(), Some(2560f32.sqrt()));
    assert_eq!(cfg.q_scale(), None);
    let big = preset("gemma3-27b").unwrap().config;
    let q = big.q_scale().unwrap() / (big.head_dim as f32).sqrt();
    assert!((q - 1.0 / 168f32.sqrt()).abs() < 1e-7, "{q}");
    // Every other architecture rotates each block alike.
    let qwen = preset("qwen3-8b").unwrap().config;
    assert_eq!(qwen.rope_for(0), qwen.rope());
    assert_eq!((qwen.embd_scale(), qwen.q_scale()), (None, None));
}

/// deepseek2's YaRN as llama.cpp's context and graph derive it for DeepSeek-V2-Lite (factor
/// 40, `mscale_all_dim` 0.707): cos and sin keep magnitude 1 (what ggml is handed cancels its
/// own gain), RoPE covers the 64-dim tail of the 192-dim key head, and the attention scale is
/// `mscale² / sqrt(192)` with `mscale = 1 + 0.1 · 0.707 · ln 40`. Without the multiplier
/// llama.cpp's `attn_factor_org` is YaRN's own gain `1 + 0.1 ln 40`, so that is the mscale.
#[test]
fn deepseek2_yarn_scales_as_llama_cpp() {
    let cfg = preset("deepseek2-lite").unwrap().config;
    let r = cfg.rope();
    assert_eq!((r.freq_scale, r.ext_factor), (1.0 / 40.0, 1.0));
    assert!((r.magnitude() - 1.0).abs() < 1e-6, "{}", r.magnitude());
    assert_eq!(cfg.rope_dims(), 64);
    // ggml_rope_yarn_corr_dims for 64 dims, base 10000, 4096 positions: 10.7 → 10, 22.9 → 23.
    assert_eq!(r.corr_dims, [10.0, 23.0]);
    let mscale = 1.0 + 0.1 * 0.707 * 40f32.ln();
    let want = mscale * mscale / 192f32.sqrt();
    let got = cfg.kq_scale().unwrap();
    assert!((got - want).abs() < 1e-6, "{got} vs {want}");
    let mut plain = cfg.clone();
    plain.rope_scaling.yarn_log_mul = 0.0;
    let gain = 1.0 + 0.1 * 40f32.ln();
    let got = plain.kq_scale().unwrap();
    assert!((got - gain * gain / 192f32.sqrt()).abs() < 1e-6, "{got}");
    assert_eq!(preset("qwen3-8b").unwrap().config.kq_scale(), None);
}

/// The tiny-deepseek2 preset is the golden recipe's model (`goldens/deepseek2`).
#[test]
fn tiny_deepseek2_preset_is_the_golden_recipe() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../goldens/deepseek2/tiny-deepseek2.recipe.json"
    );
    let recipe = ferrolm_model::Recipe::open(std::path::Path::new(path)).unwrap();
    let f = in_memory(recipe.plan().unwrap());
    let cfg = Config::from_gguf(&f).unwrap();
    assert_eq!(preset("tiny-deepseek2").unwrap().config, cfg);
    let mut names: Vec<_> = tensor_specs(&cfg)
        .into_iter()
        .map(|s| (s.name, s.dims))
        .collect();
    let mut file: Vec<_> = f
        .tensors()
        .iter()
        .map(|t| (t.name.clone(), t.dims.clone()))
        .collect();
    names.sort();
    file.sort();
    assert_eq!(names, file);
}
