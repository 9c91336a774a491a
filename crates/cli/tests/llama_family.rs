//! The llama family, complete (issue 19): llama3 RoPE factors (`rope_freqs.weight`), linear and
//! YaRN RoPE scaling, Mixtral-style MoE under llama, llama's optional biases, Qwen2/Qwen3 with
//! YaRN, each against llama.cpp goldens (`goldens/llama-family`, made by
//! `tools/goldens/make_llama_family.py`; the models regenerated from their recipes, byte for
//! byte the files llama.cpp ran) with the bars every golden meets; and nothing silent:
//! an unknown tensor or key is refused by name.

mod golden;

use ferrolm_gguf::{GgufFile, GgufWriter, Value};
use std::path::{Path, PathBuf};
use std::process::Command;

fn goldens() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../goldens/llama-family")
}

fn json(stem: &str) -> PathBuf {
    goldens().join(format!("{stem}.json.gz"))
}

/// The golden `{stem}.json.gz` on the CPU with an f32 cache, on `model` (the golden's own
/// when `None`): every golden here is made in llama.cpp's precise configuration (F32 KV
/// cache, no flash attention), the Q8_0 ones too.
fn stats(stem: &str, model: Option<&Path>) -> ferrolm_testkit::Stats {
    let flags = ["--cache-type", "f32"];
    match model {
        None => golden::compare(&json(stem), &flags),
        Some(m) => golden::compare_on(&json(stem), m, &flags),
    }
}

fn check(stem: &str) {
    let s = stats(stem, None);
    if stem.ends_with("f32") {
        golden::check_f32(&s, stem);
    } else {
        golden::check_quantized(&s, stem);
    }
}

macro_rules! goldens {
    ($($name:ident: $stem:literal),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                check($stem);
            }
        )*
    };
}

goldens!(
    rope_freqs_f32: "llama-rope-freqs-f32",
    rope_freqs_q8_0: "llama-rope-freqs-q8_0",
    linear_scaling_f32: "llama-linear-f32",
    yarn_f32: "llama-yarn-f32",
    yarn_q8_0: "llama-yarn-q8_0",
    mixtral_moe_f32: "llama-moe-f32",
    mixtral_moe_q8_0: "llama-moe-q8_0",
    llama_biases_f32: "llama-bias-f32",
    qwen2_yarn_f32: "qwen2-yarn-f32",
    qwen3_yarn_f32: "qwen3-yarn-f32",
);

/// A copy of the golden model of `stem` (as `dir/stem.gguf`) without the tensors and keys
/// `drop` names, plus the tensors of `add` (name, F32 values) and the keys of `set`.
fn rewrite(
    stem: &str,
    dir: &Path,
    drop: &[&str],
    add: &[(&str, Vec<f32>)],
    set: &[(&str, Value)],
) -> PathBuf {
    let src = GgufFile::open(golden::model(&json(stem))).unwrap();
    let mut w = GgufWriter::new();
    for (k, v) in src.metadata() {
        if !drop.contains(&k.as_str()) {
            w.set(k, v.clone());
        }
    }
    for (k, v) in set {
        w.set(k, v.clone());
    }
    let kept: Vec<_> = src
        .tensors()
        .iter()
        .filter(|t| !drop.contains(&t.name.as_str()))
        .collect();
    for t in &kept {
        w.add_tensor(&t.name, t.ty, &t.dims).unwrap();
    }
    for (name, v) in add {
        w.add_tensor(name, ferrolm_gguf::GgmlType::F32, &[v.len() as u64])
            .unwrap();
    }
    let path = dir.join(format!("{stem}.gguf"));
    let mut out = w.create(&path).unwrap();
    for t in &kept {
        out.write_tensor(src.tensor_data(t)).unwrap();
    }
    for (_, v) in add {
        let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        out.write_tensor(&bytes).unwrap();
    }
    out.finish().unwrap();
    path
}

/// The goldens can fail: the same model with the feature taken out of the file misses the F32
/// bar by far, so a loader that ignored `rope_freqs.weight` or the scaling keys would too.
#[test]
fn each_feature_moves_the_logits_past_the_bar() {
    let cases: [(&str, &[&str]); 3] = [
        ("llama-rope-freqs-f32", &["rope_freqs.weight"]),
        (
            "llama-yarn-f32",
            &[
                "llama.rope.scaling.type",
                "llama.rope.scaling.factor",
                "llama.rope.scaling.original_context_length",
            ],
        ),
        (
            "qwen3-yarn-f32",
            &[
                "qwen3.rope.scaling.type",
                "qwen3.rope.scaling.factor",
                "qwen3.rope.scaling.original_context_length",
            ],
        ),
    ];
    for (stem, drop) in cases {
        let dir = tempfile::tempdir().unwrap();
        let path = rewrite(stem, dir.path(), drop, &[], &[]);
        let s = stats(stem, Some(&path));
        assert!(
            s.max_abs > 0.1,
            "{stem} without {drop:?}: max |Δlogit| {} is within reach of the bar",
            s.max_abs
        );
    }
}

/// `ferrolm logits` on `path`: exit code 2 and stderr, which must mention every `want`.
fn refused(path: &Path, want: &[&str]) {
    let out = Command::new(env!("CARGO_BIN_EXE_ferrolm"))
        .args(["logits", "-m", path.to_str().unwrap(), "--tokens", "1 2 3"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    for w in want {
        assert!(err.contains(w), "{err:?} does not mention {w:?}");
    }
}

#[test]
fn an_unknown_tensor_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = rewrite(
        "llama-linear-f32",
        dir.path(),
        &[],
        &[("blk.0.foo.weight", vec![1.0; 128])],
        &[],
    );
    refused(
        &path,
        &["unknown tensor 'blk.0.foo.weight' for architecture llama"],
    );
    // Tensors of a block past block_count are unknown too, not silently skipped.
    let path = rewrite(
        "llama-linear-f32",
        dir.path(),
        &[],
        &[("blk.2.attn_norm.weight", vec![1.0; 128])],
        &[],
    );
    refused(&path, &["unknown tensor 'blk.2.attn_norm.weight'"]);
    // llama.cpp binds llama3's factors for llama only.
    let path = rewrite(
        "qwen2-yarn-f32",
        dir.path(),
        &[],
        &[("rope_freqs.weight", vec![1.0; 16])],
        &[],
    );
    refused(
        &path,
        &["unknown tensor 'rope_freqs.weight' for architecture qwen2"],
    );
}

#[test]
fn unknown_or_unsupported_keys_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&str, Value, &str); 3] = [
        (
            "llama.attention.scale",
            Value::F32(0.5),
            "llama.attention.scale",
        ),
        (
            "llama.rope.scaling.type",
            Value::String("longrope".into()),
            "`longrope` is not supported",
        ),
        (
            "llama.rope.dimension_count",
            Value::U32(16),
            "llama.rope.dimension_count",
        ),
    ];
    for (key, value, want) in cases {
        let path = rewrite("llama-linear-f32", dir.path(), &[], &[], &[(key, value)]);
        refused(&path, &[want]);
    }
}
