//! Reader for the oracle fixtures written by `fixtures/gen_fixtures.py` (format documented
//! there).

#![allow(dead_code)] // each test binary uses a different part

use ferrolm_quant::GgmlType;
use std::path::{Path, PathBuf};

pub struct Fixture {
    pub path: PathBuf,
    pub ty: GgmlType,
    /// Raw blocks, `n_deq * block_bytes`.
    pub raw: Vec<u8>,
    /// The oracle's dequantization of `raw`.
    pub deq: Vec<f32>,
    /// Quantizer inputs, whole blocks; empty when the oracle cannot quantize the type.
    pub qin: Vec<f32>,
    /// The oracle's quantization of `qin`.
    pub qout: Vec<u8>,
    /// Elements at the head of `qin` that are plain N(0, 1) samples.
    pub gaussian_elems: usize,
}

const MAGIC: &[u8; 4] = b"FQFX";
const VERSION: u32 = 1;

pub fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/oracle")
}

/// Every `*.bin` fixture, sorted by name. Panics on a malformed file: a fixture that cannot
/// be read is a test failure, not a skip.
pub fn load_all() -> Vec<Fixture> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(fixture_dir())
        .expect("fixture directory")
        .map(|e| e.expect("fixture directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "bin"))
        .collect();
    paths.sort();
    paths.into_iter().map(|p| load(&p)).collect()
}

fn load(path: &Path) -> Fixture {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let name = path.display();
    assert!(bytes.len() >= 32, "{name}: truncated header");
    assert_eq!(&bytes[..4], MAGIC, "{name}: bad magic");
    let field = |i: usize| {
        let at = 4 + 4 * i;
        u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize
    };
    assert_eq!(field(0), VERSION as usize, "{name}: unknown version");
    let ty = GgmlType::from_id(field(1) as u32)
        .unwrap_or_else(|| panic!("{name}: unknown ggml type id {}", field(1)));
    let stem = path.file_stem().unwrap().to_string_lossy();
    assert_eq!(stem, ty.name(), "{name}: file name does not match its type");
    let (elems, block_bytes) = (field(2), field(3));
    assert_eq!(
        (elems, block_bytes),
        ty.block_geometry(),
        "{name}: geometry differs from GgmlType's"
    );
    let (n_deq, n_q, n_gauss) = (field(4), field(5), field(6));
    assert!(n_gauss <= n_q, "{name}: more Gaussian blocks than blocks");

    let mut rest = &bytes[32..];
    let mut take = |n: usize| {
        assert!(rest.len() >= n, "{name}: truncated body");
        let (head, tail) = rest.split_at(n);
        rest = tail;
        head
    };
    let raw = take(n_deq * block_bytes).to_vec();
    let deq = floats(take(n_deq * elems * 4));
    let qin = floats(take(n_q * elems * 4));
    let qout = take(n_q * block_bytes).to_vec();
    assert!(rest.is_empty(), "{name}: trailing bytes");
    Fixture {
        path: path.to_owned(),
        ty,
        raw,
        deq,
        qin,
        qout,
        gaussian_elems: n_gauss * elems,
    }
}

fn floats(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

pub fn rmse(a: &[f32], b: &[f32]) -> f64 {
    assert_eq!(a.len(), b.len());
    let sum: f64 = a
        .iter()
        .zip(b)
        .map(|(&x, &y)| (f64::from(x) - f64::from(y)).powi(2))
        .sum();
    (sum / a.len() as f64).sqrt()
}

/// The float types and 32-element formats this crate must always implement.
pub const FLOAT_AND_LEGACY: [GgmlType; 9] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::Bf16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q8_1,
];
