//! Our K-quant quantizers against llama.cpp's, on the same F32 weights.
//!
//! The fixtures (`fixtures/gen_kquant_reference.py`) hold blocks of the tiny golden models'
//! F32 weights next to the bytes llama.cpp's quantizer (no imatrix) wrote for them. Both
//! sides are dequantized with our decoder, which is bit-exact with gguf-py, so the two errors
//! are measured the same way. Ours must be within 2% of llama.cpp's RMSE.
//!
//! Set `FERROLM_KQUANT_REF_DIR` to run on a larger fixture set made with
//! `gen_kquant_reference.py --blocks-per-tensor 0 --out DIR`.

mod kquant_common;

use ferrolm_quant::GgmlType;
use kquant_common::{fixture_dir, read_type, rmse, Reader, QK_K};

fn check(ty: GgmlType) {
    let dir = std::env::var_os("FERROLM_KQUANT_REF_DIR").map_or_else(fixture_dir, Into::into);
    let path = dir.join(format!("kquant_ref_{}.bin", ty.to_string().to_lowercase()));
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut r = Reader::new(&bytes, b"FKQR");
    let (n_blocks, block_bytes) = read_type(&mut r, ty);
    let text_len = r.u32() as usize;
    let sources = String::from_utf8(r.take(text_len).to_vec()).unwrap();
    let x = r.f32s(n_blocks * QK_K);
    let theirs = r.take(n_blocks * block_bytes);
    r.finish();

    let ours = ferrolm_quant::quantize_to_vec(ty, &x).unwrap();
    let ours_deq = ferrolm_quant::dequantize_to_vec(ty, &ours, x.len()).unwrap();
    let theirs_deq = ferrolm_quant::dequantize_to_vec(ty, theirs, x.len()).unwrap();
    let (rmse_ours, rmse_theirs) = (rmse(&x, &ours_deq), rmse(&x, &theirs_deq));
    let identical = ours
        .chunks_exact(block_bytes)
        .zip(theirs.chunks_exact(block_bytes))
        .filter(|(a, b)| a == b)
        .count();
    println!(
        "{ty}: {n_blocks} blocks from\n{sources}  RMSE ours {rmse_ours:.6e}, llama.cpp {rmse_theirs:.6e} \
         (ratio {:.4}); identical blocks {identical}/{n_blocks} ({:.1}%)",
        rmse_ours / rmse_theirs,
        100.0 * identical as f64 / n_blocks as f64,
    );
    assert!(
        rmse_ours <= 1.02 * rmse_theirs,
        "{ty}: our RMSE {rmse_ours:e} is more than 2% above llama.cpp's {rmse_theirs:e}"
    );
    // The quantizers follow llama.cpp's reference algorithms operation for operation, so the
    // bytes should match too. This catches a subtly wrong port long before the RMSE bound
    // does; a deliberate algorithm change can drop it and keep the bound.
    assert_eq!(
        identical, n_blocks,
        "{ty}: blocks differ from llama.cpp's bytes"
    );
}

#[test]
fn q2_k_within_2pct_of_llama_cpp() {
    check(GgmlType::Q2K);
}

#[test]
fn q3_k_within_2pct_of_llama_cpp() {
    check(GgmlType::Q3K);
}

#[test]
fn q4_k_within_2pct_of_llama_cpp() {
    check(GgmlType::Q4K);
}

#[test]
fn q5_k_within_2pct_of_llama_cpp() {
    check(GgmlType::Q5K);
}

#[test]
fn q6_k_within_2pct_of_llama_cpp() {
    check(GgmlType::Q6K);
}
