//! Our 32-element quantizers against llama.cpp's own output: the golden models in
//! `../shared/golden` (see its README) were quantized by llama.cpp from `tiny-llama-f32.gguf`
//! without an imatrix, which runs its reference quantizers. We quantize the same F32 tensors
//! and must write the same bytes, block for block.

use ferrolm_gguf::GgufFile;
use ferrolm_quant::{quantize_to_vec, GgmlType};
use std::path::PathBuf;

fn golden_dir() -> PathBuf {
    // The repository root's sibling `shared/`, which every checkout and CI run has.
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/golden");
    assert!(dir.is_dir(), "{} is missing", dir.display());
    dir
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn check(ty: GgmlType, file: &str) {
    let dir = golden_dir();
    let source = GgufFile::open(dir.join("tiny-llama-f32.gguf")).unwrap();
    let quantized = GgufFile::open(dir.join(file)).unwrap();
    let mut tensors = 0;
    for info in quantized.tensors().iter().filter(|t| t.ty == ty) {
        let src = source.require_tensor(&info.name).unwrap();
        assert_eq!(src.ty, GgmlType::F32, "{}: source is not F32", info.name);
        let x = f32s(source.tensor_data(src));
        let theirs = quantized.tensor_data(info);
        let ours = quantize_to_vec(ty, &x).unwrap();
        assert_eq!(ours.len(), theirs.len(), "{}", info.name);
        let bb = ty.block_bytes();
        let bad = ours
            .chunks_exact(bb)
            .zip(theirs.chunks_exact(bb))
            .position(|(a, b)| a != b);
        if let Some(b) = bad {
            panic!(
                "{ty} {}: block {b} differs: ours {:02x?}, llama.cpp {:02x?}",
                info.name,
                &ours[b * bb..(b + 1) * bb],
                &theirs[b * bb..(b + 1) * bb]
            );
        }
        tensors += 1;
    }
    assert!(tensors > 0, "{file} has no {ty} tensor");
    eprintln!("{ty}: {tensors} tensors identical to llama.cpp's");
}

#[test]
fn q4_0_matches_llama_cpp() {
    check(GgmlType::Q4_0, "quant/tiny-llama-q4_0.gguf");
}

#[test]
fn q4_1_matches_llama_cpp() {
    check(GgmlType::Q4_1, "quant/tiny-llama-q4_1.gguf");
}

#[test]
fn q5_0_matches_llama_cpp() {
    check(GgmlType::Q5_0, "quant/tiny-llama-q5_0.gguf");
}

#[test]
fn q5_1_matches_llama_cpp() {
    check(GgmlType::Q5_1, "quant/tiny-llama-q5_1.gguf");
}

#[test]
fn q8_0_matches_llama_cpp() {
    check(GgmlType::Q8_0, "tiny-llama-q8_0.gguf");
}
