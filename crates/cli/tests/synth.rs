//! `ferrolm synth` through the binary.

use ferrolm_gguf::GgufFile;
use ferrolm_model::{preset, tensor_specs, Config};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn ferrolm(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ferrolm"))
        .args(args)
        .output()
        .unwrap()
}

fn golden(name: &str) -> String {
    format!(
        "{}/../../../shared/golden/{name}",
        env!("CARGO_MANIFEST_DIR")
    )
}

fn synth(dir: &Path, name: &str, args: &[&str]) -> PathBuf {
    let path = dir.join(name);
    let mut all = vec!["synth", "-o", path.to_str().unwrap()];
    all.extend_from_slice(args);
    let out = ferrolm(&all);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    path
}

/// The file has the preset's exact layout and hyperparameters.
fn check_layout(path: &Path, preset_name: &str) -> GgufFile {
    let f = GgufFile::open(path).unwrap();
    let cfg = Config::from_gguf(&f).unwrap();
    assert_eq!(cfg, preset(preset_name).unwrap().config);
    let expected: Vec<_> = tensor_specs(&cfg)
        .into_iter()
        .map(|s| (s.name, s.dims))
        .collect();
    let actual: Vec<_> = f
        .tensors()
        .iter()
        .map(|t| (t.name.clone(), t.dims.clone()))
        .collect();
    assert_eq!(expected, actual);
    f
}

#[test]
fn tiny_olmoe_q4_k_m_has_llama_cpp_types_and_is_deterministic() {
    let dir = tempfile::tempdir().unwrap();
    let args = ["--preset", "tiny-olmoe", "--type", "q4_k_m", "--seed", "7"];
    let a = synth(dir.path(), "a.gguf", &args);
    let f = check_layout(&a, "tiny-olmoe");
    let reference = GgufFile::open(golden("tiny-olmoe-q4_k_m.gguf")).unwrap();
    for t in f.tensors() {
        assert_eq!(
            t.ty,
            reference.require_tensor(&t.name).unwrap().ty,
            "{}",
            t.name
        );
    }
    assert_eq!(f.get_u64("general.file_type").unwrap(), 15);
    let b = synth(dir.path(), "b.gguf", &args);
    let c = synth(
        dir.path(),
        "c.gguf",
        &["--preset", "tiny-olmoe", "--type", "q4_k_m", "--seed", "8"],
    );
    let (a, b, c) = (
        std::fs::read(a).unwrap(),
        std::fs::read(b).unwrap(),
        std::fs::read(c).unwrap(),
    );
    assert!(a == b, "same seed, same file");
    assert!(a != c, "another seed, other weights");
}

#[test]
fn output_does_not_depend_on_the_thread_count() {
    let dir = tempfile::tempdir().unwrap();
    let args = |t| {
        [
            "--preset",
            "tiny-qwen2",
            "--type",
            "f32",
            "--seed",
            "3",
            "--threads",
            t,
        ]
    };
    let one = synth(dir.path(), "one.gguf", &args("1"));
    let two = synth(dir.path(), "two.gguf", &args("2"));
    check_layout(&one, "tiny-qwen2");
    assert!(std::fs::read(one).unwrap() == std::fs::read(two).unwrap());
}

#[test]
fn weights_have_the_intended_spread() {
    let dir = tempfile::tempdir().unwrap();
    let path = synth(
        dir.path(),
        "m.gguf",
        &["--preset", "tiny-qwen3", "--type", "f32"],
    );
    let f = check_layout(&path, "tiny-qwen3");
    let stats = |name: &str| {
        let t = f.require_tensor(name).unwrap();
        let x: Vec<f32> = f
            .tensor_data(t)
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        let mean = x.iter().sum::<f32>() / x.len() as f32;
        let var = x.iter().map(|v| (v - mean).powi(2)).sum::<f32>() / x.len() as f32;
        (mean, var.sqrt())
    };
    let (m, s) = stats("blk.0.ffn_down.weight"); // fan-in 512
    assert!(
        m.abs() < 0.002 && (s - 512f32.sqrt().recip()).abs() < 0.002,
        "{m} {s}"
    );
    let (m, s) = stats("blk.1.attn_k_norm.weight");
    assert!((m - 1.0).abs() < 0.01 && s > 0.005 && s < 0.05, "{m} {s}");
}

#[test]
fn bpe_vocab_is_written_and_python_gguf_reads_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = synth(
        dir.path(),
        "v.gguf",
        &["--preset", "tiny-llama", "--type", "f16", "--vocab", "bpe"],
    );
    let f = check_layout(&path, "tiny-llama");
    assert_eq!(f.get_str("tokenizer.ggml.model").unwrap(), "gpt2");
    assert_eq!(f.get_str_array("tokenizer.ggml.tokens").unwrap().len(), 512);
    assert_eq!(f.get_array("tokenizer.ggml.token_type").unwrap().len(), 512);

    let script = "import sys, gguf\n\
        r = gguf.GGUFReader(sys.argv[1])\n\
        print(len(r.tensors), r.fields['general.architecture'].contents())";
    let py = Command::new("python3")
        .args(["-c", script])
        .arg(&path)
        .output();
    let have_gguf = Command::new("python3")
        .args(["-c", "import gguf"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !have_gguf && std::env::var_os("CI").is_none() {
        eprintln!("skipping the gguf-py check: python3 with the gguf package is not installed");
        return;
    }
    let py = py.unwrap();
    assert!(
        py.status.success(),
        "{}",
        String::from_utf8_lossy(&py.stderr)
    );
    let n = f.tensors().len();
    assert_eq!(
        String::from_utf8(py.stdout).unwrap().trim(),
        format!("{n} llama")
    );
}

#[test]
fn bad_arguments_exit_2() {
    for args in [
        vec![
            "synth",
            "--preset",
            "gpt-5",
            "--type",
            "q8_0",
            "-o",
            "/tmp/never.gguf",
        ],
        vec![
            "synth",
            "--preset",
            "tiny-llama",
            "--type",
            "q9_0",
            "-o",
            "/tmp/never.gguf",
        ],
        vec![
            "synth",
            "--preset",
            "tiny-llama",
            "--type",
            "f32",
            "-o",
            "/no/such/dir/x.gguf",
        ],
    ] {
        let out = ferrolm(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("error"),
            "{args:?}"
        );
    }
}

/// gpt-oss as llama.cpp's `MXFP4_MOE` lays it out: the same type for every tensor as
/// llama.cpp's quantizer gave the golden model of this shape (`goldens/gpt-oss`), and ferrolm
/// runs the file.
#[test]
fn tiny_gpt_oss_mxfp4_moe_has_llama_cpp_types_and_runs() {
    let dir = tempfile::tempdir().unwrap();
    let path = synth(
        dir.path(),
        "g.gguf",
        &["--preset", "tiny-gpt-oss", "--type", "mxfp4_moe"],
    );
    let f = check_layout(&path, "tiny-gpt-oss");
    let json = format!(
        "{}/../../goldens/gpt-oss/tiny-gpt-oss-mxfp4-q8_0.json.gz",
        env!("CARGO_MANIFEST_DIR")
    );
    let reference = ferrolm_testkit::Golden::open(Path::new(&json))
        .model_path(Path::new(env!("CARGO_TARGET_TMPDIR")));
    let reference = GgufFile::open(reference).unwrap();
    assert_eq!(f.tensors().len(), reference.tensors().len());
    for t in f.tensors() {
        let r = reference.require_tensor(&t.name).unwrap();
        assert_eq!((t.ty, &t.dims), (r.ty, &r.dims), "{}", t.name);
    }
    let out = ferrolm(&[
        "logits",
        "-m",
        path.to_str().unwrap(),
        "--tokens",
        "1 2 3",
        "--backend",
        "cpu",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `synth --recipe` through the binary makes, for a quantized type, the very file llama.cpp's
/// quantizer made of the recipe's F32 file (the golden holds its sha256).
#[test]
fn recipe_gives_llama_cpp_s_quantized_file() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../goldens/shape-space");
    let recipe = root.join("qwen3-d320-h80-gqa2-tied.recipe.json");
    let golden =
        ferrolm_testkit::Golden::open(&root.join("qwen3-d320-h80-gqa2-tied-q4_k_m.json.gz"));
    let dir = tempfile::tempdir().unwrap();
    let path = synth(
        dir.path(),
        "r.gguf",
        &["--recipe", recipe.to_str().unwrap(), "--type", "q4_k_m"],
    );
    assert_eq!(
        ferrolm_testkit::sha256(&path),
        golden.json["model_sha256"].as_str().unwrap()
    );
}

#[test]
fn bad_recipes_exit_2_naming_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            r#"{"seed": 1, "metadata": [], "tensors": [], "extra": 1}"#,
            "extra",
        ),
        (
            r#"{"seed": 1, "metadata": [["a.b", "u8", 300]], "tensors": []}"#,
            "a.b",
        ),
        (
            r#"{"seed": 1, "metadata": [], "tensors": [{"name": "x", "shape": [4], "init": {"values": [1]}}]}"#,
            "`x`",
        ),
    ];
    for (i, (text, want)) in cases.iter().enumerate() {
        let recipe = dir.path().join(format!("{i}.json"));
        std::fs::write(&recipe, text).unwrap();
        let out = dir.path().join(format!("{i}.gguf"));
        let r = ferrolm(&[
            "synth",
            "--recipe",
            recipe.to_str().unwrap(),
            "--type",
            "f32",
            "-o",
            out.to_str().unwrap(),
        ]);
        let err = String::from_utf8_lossy(&r.stderr);
        assert_eq!(r.status.code(), Some(2), "{err}");
        assert!(err.contains(want), "{err:?} does not name {want:?}");
    }
    // --recipe and --preset together are refused by clap.
    let r = ferrolm(&[
        "synth",
        "--recipe",
        "r.json",
        "--preset",
        "tiny-llama",
        "--type",
        "f32",
        "-o",
        "x.gguf",
    ]);
    assert_eq!(r.status.code(), Some(2));
}

/// `synth --pooled` writes a model of the preset's layout that runs (the pooling itself is
/// checked in `ferrolm-model`'s `synth_pooled`, with a pool small enough to matter in a tiny
/// model).
#[test]
fn pooled_synth_writes_a_model_that_runs() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "--preset",
        "tiny-qwen3moe",
        "--type",
        "q4_k_m",
        "--pooled",
        "--vocab",
        "bpe",
    ];
    let path = synth(dir.path(), "m.gguf", &args);
    check_layout(&path, "tiny-qwen3moe");
    let model = path.to_str().unwrap();
    let run = [
        "run",
        "-m",
        model,
        "--backend",
        "cpu",
        "-p",
        "x",
        "-n",
        "4",
        "-t",
        "2",
    ];
    let out = ferrolm(&run);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
