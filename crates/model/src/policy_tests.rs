use super::*;
use crate::layout::tensor_specs;
use crate::presets::preset;

fn more_bits_layers(n: usize) -> Vec<usize> {
    (0..n).filter(|&i| use_more_bits(i, n)).collect()
}

#[test]
fn use_more_bits_layer_picks() {
    // Worked out by hand from the rule: first eighth, last eighth, every third in between.
    assert_eq!(more_bits_layers(2), [1]);
    assert_eq!(more_bits_layers(16), [0, 1, 4, 7, 10, 13, 14, 15]);
    assert_eq!(
        more_bits_layers(24),
        [0, 1, 2, 5, 8, 11, 14, 17, 20, 21, 22, 23]
    );
    assert_eq!(
        more_bits_layers(30),
        [0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 26, 27, 28, 29]
    );
    assert_eq!(
        more_bits_layers(36),
        [0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 30, 31, 32, 33, 34, 35]
    );
    assert_eq!(
        more_bits_layers(48),
        [0, 1, 2, 3, 4, 5, 8, 11, 14, 17, 20, 23, 26, 29, 32, 35, 38, 41, 42, 43, 44, 45, 46, 47]
    );
}

fn plan(preset_name: &str, ftype: FileType) -> Vec<(String, GgmlType)> {
    let cfg = preset(preset_name).unwrap().config;
    let specs = tensor_specs(&cfg);
    let refs: Vec<_> = specs
        .iter()
        .map(|s| TensorRef {
            name: &s.name,
            dims: &s.dims,
            src: GgmlType::F32,
        })
        .collect();
    let types = choose_types(ftype, &PolicyModel::from(&cfg), &refs).unwrap();
    specs.into_iter().map(|s| s.name).zip(types).collect()
}

fn type_of(plan: &[(String, GgmlType)], name: &str) -> GgmlType {
    plan.iter().find(|(n, _)| n == name).unwrap().1
}

fn layers_with(plan: &[(String, GgmlType)], suffix: &str, ty: GgmlType) -> Vec<usize> {
    plan.iter()
        .filter(|(n, t)| n.ends_with(suffix) && *t == ty)
        .map(|(n, _)| layer_of(n).unwrap())
        .collect()
}

#[test]
fn q4_k_m_layer_picks_follow_the_counters() {
    let p = plan("qwen3-8b", FileType::Q4KM);
    assert_eq!(
        layers_with(&p, "attn_v.weight", GgmlType::Q6K),
        more_bits_layers(36)
    );
    assert_eq!(
        layers_with(&p, "ffn_down.weight", GgmlType::Q6K),
        more_bits_layers(36)
    );
    assert_eq!(type_of(&p, "output.weight"), GgmlType::Q6K);
    assert_eq!(type_of(&p, "token_embd.weight"), GgmlType::Q4K);
    assert_eq!(type_of(&p, "blk.0.attn_q_norm.weight"), GgmlType::F32);
    // 128 experts is not the 8-expert special case.
    let p = plan("qwen3-30b-a3b", FileType::Q4KM);
    assert_eq!(type_of(&p, "blk.0.attn_k.weight"), GgmlType::Q4K);
    assert_eq!(type_of(&p, "blk.0.attn_output.weight"), GgmlType::Q4K);
    assert_eq!(type_of(&p, "blk.0.ffn_gate_inp.weight"), GgmlType::F32);
    assert_eq!(
        layers_with(&p, "ffn_down_exps.weight", GgmlType::Q6K),
        more_bits_layers(48)
    );
}

#[test]
fn rows_that_are_not_whole_superblocks_fall_back() {
    // SmolLM2-135M: d = 576 is a multiple of 32 but not of 256.
    let p = plan("smollm2-135m", FileType::Q4KM);
    assert_eq!(type_of(&p, "token_embd.weight"), GgmlType::Q8_0);
    assert_eq!(type_of(&p, "blk.3.attn_q.weight"), GgmlType::Q5_0);
    assert_eq!(type_of(&p, "blk.0.attn_v.weight"), GgmlType::Q8_0); // Q6_K -> Q8_0
    assert_eq!(type_of(&p, "blk.3.attn_v.weight"), GgmlType::Q5_0);
    // ffn_down rows are 1536 = 6 x 256: no fallback.
    assert_eq!(type_of(&p, "blk.0.ffn_down.weight"), GgmlType::Q6K);
    assert_eq!(type_of(&p, "blk.3.ffn_down.weight"), GgmlType::Q4K);
    let p = plan("smollm2-135m", FileType::Q5KM);
    assert_eq!(type_of(&p, "blk.3.attn_q.weight"), GgmlType::Q5_1);
}

#[test]
fn tied_embeddings_count_as_the_output() {
    let p = plan("smollm2-1.7b", FileType::Q4_0);
    assert_eq!(type_of(&p, "token_embd.weight"), GgmlType::Q6K);
    assert_eq!(type_of(&p, "blk.0.attn_q.weight"), GgmlType::Q4_0);
    let p = plan("smollm2-1.7b", FileType::Q8_0);
    assert_eq!(type_of(&p, "token_embd.weight"), GgmlType::Q8_0);
    let p = plan("tiny-qwen3", FileType::Q4_0);
    assert_eq!(type_of(&p, "token_embd.weight"), GgmlType::Q4_0);
    assert_eq!(type_of(&p, "output.weight"), GgmlType::Q6K);
}

#[test]
fn float_file_types_keep_one_dimensional_tensors() {
    let p = plan("tiny-qwen2", FileType::F16);
    assert_eq!(type_of(&p, "blk.0.attn_q.weight"), GgmlType::F16);
    assert_eq!(type_of(&p, "blk.0.attn_q.bias"), GgmlType::F32);
    assert_eq!(type_of(&p, "output_norm.weight"), GgmlType::F32);
    assert_eq!(type_of(&p, "output.weight"), GgmlType::F16);
}

#[test]
fn input_order_does_not_change_the_choice() {
    let cfg = preset("smollm2-1.7b").unwrap().config;
    let specs = tensor_specs(&cfg);
    let refs: Vec<_> = specs
        .iter()
        .map(|s| TensorRef {
            name: &s.name,
            dims: &s.dims,
            src: GgmlType::F32,
        })
        .collect();
    let m = PolicyModel::from(&cfg);
    let forward = choose_types(FileType::Q4KM, &m, &refs).unwrap();
    let reversed: Vec<_> = refs.iter().rev().copied().collect();
    let mut backward = choose_types(FileType::Q4KM, &m, &reversed).unwrap();
    backward.reverse();
    assert_eq!(forward, backward);
}

#[test]
fn file_type_names_and_numbers_round_trip() {
    for t in FileType::ALL {
        assert_eq!(FileType::from_name(t.name()), Some(t));
        assert_eq!(FileType::from_name(&t.name().to_uppercase()), Some(t));
        assert_eq!(FileType::from_llama_ftype(t.llama_ftype()), Some(t));
    }
    assert_eq!(FileType::from_name("q4_k"), None);
}

/// gpt-oss-20b as llama.cpp's `MXFP4_MOE` lays it out (ggml-org's released file): expert stacks
/// MXFP4, the embedding, output and attention matrices Q8_0, the router, norms, sinks and
/// biases F32; about 12.1 GB.
#[test]
fn gpt_oss_20b_mxfp4_moe_types() {
    let synth =
        crate::Synth::new("gpt-oss-20b", FileType::Mxfp4Moe, 0, crate::VocabKind::None).unwrap();
    let (plan, _) = synth.plan().unwrap();
    let ty = |name: &str| {
        plan.tensors()
            .iter()
            .find(|t| t.name == name)
            .unwrap_or_else(|| panic!("{name}"))
            .ty
    };
    for name in ["ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"] {
        assert_eq!(ty(&format!("blk.5.{name}.weight")), GgmlType::Mxfp4);
        assert_eq!(ty(&format!("blk.5.{name}.bias")), GgmlType::F32);
    }
    for name in ["attn_q", "attn_k", "attn_v", "attn_output"] {
        assert_eq!(ty(&format!("blk.0.{name}.weight")), GgmlType::Q8_0);
    }
    assert_eq!(ty("token_embd.weight"), GgmlType::Q8_0);
    assert_eq!(ty("output.weight"), GgmlType::Q8_0);
    assert_eq!(ty("blk.0.ffn_gate_inp.weight"), GgmlType::F32);
    assert_eq!(ty("blk.0.attn_sinks.weight"), GgmlType::F32);
    assert_eq!(ty("blk.0.post_attention_norm.weight"), GgmlType::F32);
    let gb = synth.file_size().unwrap() as f64 / 1e9;
    assert!((12.0..12.2).contains(&gb), "{gb} GB");
}
