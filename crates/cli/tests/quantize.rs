//! `ferrolm quantize` through the binary, against llama.cpp's quantizer output.

use ferrolm_gguf::{GgmlType, GgufFile, TensorInfo};
use std::path::Path;
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

fn floats(f: &GgufFile, t: &TensorInfo) -> Vec<f32> {
    let n = t.n_elements() as usize;
    if t.ty == GgmlType::F32 {
        return le_f32s(f.tensor_data(t));
    }
    ferrolm_quant::dequantize_to_vec(t.ty, f.tensor_data(t), n).unwrap()
}

fn le_f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect()
}

fn rmse(a: &[f32], b: &[f32]) -> f64 {
    let sum: f64 = a.iter().zip(b).map(|(x, y)| ((x - y) as f64).powi(2)).sum();
    (sum / a.len() as f64).sqrt()
}

/// Quantizes llama.cpp's F32 source as `reference` was made, then checks the file is
/// llama.cpp's byte for byte (its key and tensor order, its codes: the golden models under
/// `goldens/` rely on it), and, to say where if not, every tensor has llama.cpp's type, no more
/// than 2% more error than llama.cpp's, and the metadata matches.
fn check_against_llama_cpp(source: &str, reference: &str, ftype: &str) {
    let dir = tempfile::tempdir().unwrap();
    let out_path = dir.path().join("out.gguf");
    let out = ferrolm(&[
        "quantize",
        &golden(source),
        out_path.to_str().unwrap(),
        ftype,
    ]);
    assert!(
        out.status.success(),
        "{reference}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let src = GgufFile::open(golden(source)).unwrap();
    let theirs = GgufFile::open(golden(reference)).unwrap();
    let ours = GgufFile::open(&out_path).unwrap();
    assert_eq!(ours.tensors().len(), src.tensors().len());
    for key in ["general.file_type", "general.quantization_version"] {
        assert_eq!(ours.get(key), theirs.get(key), "{reference}: {key}");
    }
    for (k, v) in src.metadata() {
        if k != "general.file_type" {
            assert_eq!(ours.get(k), Some(v), "{reference}: {k} copied");
        }
    }
    for t in ours.tensors() {
        let s = src.require_tensor(&t.name).unwrap();
        let r = theirs.require_tensor(&t.name).unwrap();
        assert_eq!((t.ty, &t.dims), (r.ty, &r.dims), "{reference}: {}", t.name);
        let x = floats(&src, s);
        let (e_ours, e_theirs) = (rmse(&x, &floats(&ours, t)), rmse(&x, &floats(&theirs, r)));
        assert!(
            e_ours <= 1.02 * e_theirs,
            "{reference}: {} ({}) RMSE {e_ours:.3e} vs llama.cpp's {e_theirs:.3e}",
            t.name,
            t.ty
        );
    }
    assert!(
        std::fs::read(&out_path).unwrap() == std::fs::read(golden(reference)).unwrap(),
        "{reference}: not byte for byte llama.cpp's file"
    );
}

#[test]
fn q4_k_m_matches_llama_cpp() {
    for arch in ["llama", "olmoe", "qwen3", "qwen3moe"] {
        let src = format!("tiny-{arch}-f32.gguf");
        check_against_llama_cpp(&src, &format!("tiny-{arch}-q4_k_m.gguf"), "q4_k_m");
    }
}

#[test]
fn q8_0_matches_llama_cpp() {
    for arch in ["llama", "olmoe", "qwen3", "qwen3moe"] {
        let src = format!("tiny-{arch}-f32.gguf");
        check_against_llama_cpp(&src, &format!("tiny-{arch}-q8_0.gguf"), "q8_0");
    }
}

#[test]
fn every_other_file_type_matches_llama_cpp() {
    let dir = Path::new(&golden("quant")).to_owned();
    let mut n = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        let Some(stem) = name.strip_suffix(".gguf") else {
            continue;
        };
        let (arch, ftype) = stem.strip_prefix("tiny-").unwrap().split_once('-').unwrap();
        check_against_llama_cpp(
            &format!("tiny-{arch}-f32.gguf"),
            &format!("quant/{name}"),
            ftype,
        );
        n += 1;
    }
    assert!(n >= 10);
}

#[test]
fn f32_to_f32_copies_tensor_data() {
    let dir = tempfile::tempdir().unwrap();
    let out_path = dir.path().join("copy.gguf");
    let src_path = golden("tiny-qwen3-f32.gguf");
    let out = ferrolm(&[
        "quantize",
        &src_path,
        out_path.to_str().unwrap(),
        "f32",
        "--threads",
        "1",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (src, ours) = (
        GgufFile::open(&src_path).unwrap(),
        GgufFile::open(&out_path).unwrap(),
    );
    // In llama.cpp's tensor order (block by block, names sorted), so matched by name.
    assert_eq!(src.tensors().len(), ours.tensors().len());
    for a in src.tensors() {
        let b = ours.require_tensor(&a.name).unwrap();
        assert_eq!((&a.name, a.ty, &a.dims), (&b.name, b.ty, &b.dims));
        assert_eq!(src.tensor_data(a), ours.tensor_data(b), "{}", a.name);
    }
    assert_eq!(ours.get_u64("general.quantization_version").unwrap(), 2);
}

fn assert_fails(args: &[&str], needle: &str) {
    let out = ferrolm(args);
    assert_eq!(out.status.code(), Some(2), "{args:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(needle), "{args:?}: {err}");
}

#[test]
fn bad_input_is_refused_with_exit_code_2() {
    let dir = tempfile::tempdir().unwrap();
    let out_path = dir.path().join("x.gguf");
    let out = out_path.to_str().unwrap();
    assert_fails(
        &["quantize", &golden("tiny-llama-q8_0.gguf"), out, "q4_k_m"],
        "already quantized",
    );
    assert_fails(
        &["quantize", &golden("tiny-llama-f32.gguf"), out, "q4_k"],
        "q4_k_m",
    );
    assert_fails(
        &["quantize", "/no/such/file.gguf", out, "q8_0"],
        "/no/such/file.gguf",
    );
    assert_fails(
        &[
            "quantize",
            &golden("tiny-llama-f32.gguf"),
            out,
            "f16",
            "--threads",
            "0",
        ],
        "--threads",
    );
    assert!(!out_path.exists() && !dir.path().join("x.gguf.partial").exists());
}

#[test]
fn half_precision_files_are_written_and_accepted_as_sources() {
    let dir = tempfile::tempdir().unwrap();
    let src_path = golden("tiny-olmoe-f32.gguf");
    let src = GgufFile::open(&src_path).unwrap();
    let reference = GgufFile::open(golden("tiny-olmoe-q4_k_m.gguf")).unwrap();
    for (ftype, ty, rel_tol) in [("f16", GgmlType::F16, 1e-3), ("bf16", GgmlType::Bf16, 8e-3)] {
        let half = dir.path().join(format!("{ftype}.gguf"));
        let out = ferrolm(&["quantize", &src_path, half.to_str().unwrap(), ftype]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let f = GgufFile::open(&half).unwrap();
        for t in f.tensors() {
            let s = src.require_tensor(&t.name).unwrap();
            // Matrices take the half type; norms and the expert router stay F32.
            let keep = t.dims.len() == 1 || t.name.contains("ffn_gate_inp");
            assert_eq!(t.ty, if keep { GgmlType::F32 } else { ty }, "{}", t.name);
            let (x, y) = (floats(&src, s), floats(&f, t));
            let scale = rmse(&x, &vec![0.0; x.len()]);
            assert!(rmse(&x, &y) <= rel_tol * scale, "{ftype} {}", t.name);
        }
        // A half-precision source quantizes with the same type choices.
        let q = dir.path().join(format!("{ftype}-q4_k_m.gguf"));
        let out = ferrolm(&[
            "quantize",
            half.to_str().unwrap(),
            q.to_str().unwrap(),
            "q4_k_m",
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let q = GgufFile::open(&q).unwrap();
        for t in q.tensors() {
            assert_eq!(
                t.ty,
                reference.require_tensor(&t.name).unwrap().ty,
                "{}",
                t.name
            );
        }
    }
}
