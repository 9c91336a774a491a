//! Dequantization must match gguf-py's `gguf.quants.dequantize` (gguf==0.19.0) bit for bit.
//! Fixtures: `fixtures/gen_kquant_fixtures.py`.

mod kquant_common;

use ferrolm_quant::GgmlType;
use kquant_common::{fixture_dir, read_type, Reader, QK_K};

fn check(ty: GgmlType) {
    let path = fixture_dir().join(format!(
        "kquant_dequant_{}.bin",
        ty.to_string().to_lowercase()
    ));
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut r = Reader::new(&bytes, b"FKQD");
    let (n_blocks, block_bytes) = read_type(&mut r, ty);
    let blocks = r.take(n_blocks * block_bytes);
    let expected = r.f32s(n_blocks * QK_K);
    r.finish();

    // Once from an aligned buffer, once shifted by a byte so the unaligned path runs too.
    let mut shifted = vec![0u8; blocks.len() + 1];
    shifted[1..].copy_from_slice(blocks);
    for src in [blocks.to_vec().as_slice(), &shifted[1..]] {
        let ours = ferrolm_quant::dequantize_to_vec(ty, src, n_blocks * QK_K).unwrap();
        let mut mismatches = 0;
        for (i, (a, b)) in ours.iter().zip(&expected).enumerate() {
            if a.to_bits() != b.to_bits() {
                if mismatches < 5 {
                    eprintln!(
                        "{ty} block {} elem {}: ours {a:e}, oracle {b:e}",
                        i / QK_K,
                        i % QK_K
                    );
                }
                mismatches += 1;
            }
        }
        assert_eq!(
            mismatches, 0,
            "{ty}: {mismatches} values differ from the oracle"
        );
    }
}

#[test]
fn q2_k_matches_gguf_py() {
    check(GgmlType::Q2K);
}

#[test]
fn q3_k_matches_gguf_py() {
    check(GgmlType::Q3K);
}

#[test]
fn q4_k_matches_gguf_py() {
    check(GgmlType::Q4K);
}

#[test]
fn q5_k_matches_gguf_py() {
    check(GgmlType::Q5K);
}

#[test]
fn q6_k_matches_gguf_py() {
    check(GgmlType::Q6K);
}
