//! Every fixture in `fixtures/` against this crate: dequantization must be bit-exact with the
//! oracle (gguf-py), and quantization must give the oracle's bytes. Types whose codec is not
//! implemented yet are skipped; a type whose codec exists is always checked.

mod common;

use common::{load_all, rmse, Fixture, FLOAT_AND_LEGACY};
use ferrolm_quant::{codec, dequantize_to_vec, quantize_to_vec, GgmlType, QuantError};

fn implemented(ty: GgmlType) -> bool {
    match codec(ty) {
        Ok(_) => true,
        Err(QuantError::Unsupported(_)) => false,
        Err(e) => panic!("codec({ty}): unexpected {e}"),
    }
}

/// Fixtures whose codec exists; logs the rest.
fn implemented_fixtures() -> Vec<Fixture> {
    let (yes, no): (Vec<_>, Vec<_>) = load_all().into_iter().partition(|f| implemented(f.ty));
    for f in no {
        eprintln!("skipping {}: {} is not implemented", f.path.display(), f.ty);
    }
    yes
}

#[test]
fn dequantize_matches_oracle_bit_exact() {
    let fixtures = implemented_fixtures();
    assert!(!fixtures.is_empty(), "no fixture was checked");
    let mut failures = Vec::new();
    for f in &fixtures {
        let got = dequantize_to_vec(f.ty, &f.raw, f.deq.len()).expect("fixture sizes are valid");
        // Bits, not ==: -0.0 must stay -0.0 and a NaN must be the oracle's NaN.
        let bad: Vec<usize> = (0..got.len())
            .filter(|&i| got[i].to_bits() != f.deq[i].to_bits())
            .collect();
        if let Some(&i) = bad.first() {
            let block = i / f.ty.block_elems();
            failures.push(format!(
                "{}: {} of {} values differ; first: element {i} (block {block}) got {:?} \
                 ({:#010x}), oracle {:?} ({:#010x})",
                f.ty,
                bad.len(),
                got.len(),
                got[i],
                got[i].to_bits(),
                f.deq[i],
                f.deq[i].to_bits(),
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn quantize_matches_oracle_bytes() {
    let mut failures = Vec::new();
    for f in implemented_fixtures().iter().filter(|f| !f.qin.is_empty()) {
        let ours = quantize_to_vec(f.ty, &f.qin).expect("fixture sizes are valid");
        if ours == f.qout {
            continue;
        }
        let (be, bb) = f.ty.block_geometry();
        let bad_blocks: Vec<usize> = (0..ours.len() / bb)
            .filter(|&b| {
                let (o, r) = (&ours[b * bb..(b + 1) * bb], &f.qout[b * bb..(b + 1) * bb]);
                o != r && !known_oracle_deviation(f.ty, &f.qin[b * be..(b + 1) * be], o, r)
            })
            .collect();
        if bad_blocks.is_empty() {
            continue;
        }
        // Our own formats must match byte for byte. A format added later whose oracle
        // quantizer is not ggml's reference may instead match its error on Gaussian data.
        let (ours_rmse, oracle_rmse) = gaussian_rmse(f, &ours);
        let close = ours_rmse <= oracle_rmse * 1.02;
        if FLOAT_AND_LEGACY.contains(&f.ty) || !close {
            let b = bad_blocks[0];
            failures.push(format!(
                "{}: {} of {} blocks differ; first, block {b}: ours {:02x?}, oracle {:02x?} \
                 (Gaussian RMSE ours {ours_rmse:.6}, oracle {oracle_rmse:.6})",
                f.ty,
                bad_blocks.len(),
                ours.len() / bb,
                &ours[b * bb..(b + 1) * bb],
                &f.qout[b * bb..(b + 1) * bb],
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Where gguf-py's quantizer departs from ggml's reference, we follow ggml. Q4_0 and Q5_0
/// take `d = max / -k` where `max` is the first element of largest magnitude; ggml starts
/// the search from +0.0 and only replaces it on a strictly larger magnitude, so a block of
/// zeros always gets d = +0 / -k = -0 (f16 0x8000). gguf-py's argmax picks the data's own
/// zero instead, and a block of -0.0 gets d = +0. The codes are the same either way.
fn known_oracle_deviation(ty: GgmlType, x: &[f32], ours: &[u8], oracle: &[u8]) -> bool {
    matches!(ty, GgmlType::Q4_0 | GgmlType::Q5_0)
        && x.iter().all(|&v| v == 0.0)
        && ours[..2] == [0x00, 0x80]
        && oracle[..2] == [0x00, 0x00]
        && ours[2..] == oracle[2..]
}

/// RMSE of (ours, oracle) quantizations of the fixture's Gaussian inputs.
fn gaussian_rmse(f: &Fixture, ours: &[u8]) -> (f64, f64) {
    let n = f.gaussian_elems;
    let bytes = n / f.ty.block_elems() * f.ty.block_bytes();
    let x = &f.qin[..n];
    let y_ours = dequantize_to_vec(f.ty, &ours[..bytes], n).unwrap();
    let y_oracle = dequantize_to_vec(f.ty, &f.qout[..bytes], n).unwrap();
    (rmse(x, &y_ours), rmse(x, &y_oracle))
}

#[test]
fn every_float_and_legacy_type_has_a_full_fixture() {
    let fixtures = load_all();
    for ty in FLOAT_AND_LEGACY {
        let f = fixtures
            .iter()
            .find(|f| f.ty == ty)
            .unwrap_or_else(|| panic!("no fixture for {ty}: run fixtures/gen_fixtures.py"));
        assert!(implemented(ty), "{ty} has no codec");
        assert!(!f.deq.is_empty(), "{ty}: empty dequantize section");
        assert!(f.gaussian_elems > 0, "{ty}: no Gaussian quantize inputs");
        assert!(
            f.qin.len() > f.gaussian_elems,
            "{ty}: no edge-case quantize inputs"
        );
    }
}
