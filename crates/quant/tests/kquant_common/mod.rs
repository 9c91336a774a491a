//! Fixture readers shared by the K-quant integration tests. The formats are documented in the
//! generator scripts under `crates/quant/fixtures/`.

#![allow(dead_code)]

use ferrolm_quant::GgmlType;
use std::path::PathBuf;

pub const QK_K: usize = 256;

pub fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

/// Little-endian cursor over a fixture file.
pub struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(bytes: &'a [u8], magic: &[u8; 4]) -> Self {
        assert_eq!(&bytes[..4], magic, "bad fixture magic");
        Reader { bytes, pos: 4 }
    }

    pub fn take(&mut self, n: usize) -> &'a [u8] {
        let s = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        s
    }

    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take(4).try_into().unwrap())
    }

    pub fn f32s(&mut self, n: usize) -> Vec<f32> {
        self.take(4 * n)
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }

    pub fn finish(self) {
        assert_eq!(self.pos, self.bytes.len(), "trailing bytes in fixture");
    }
}

/// Reads the ggml type id and checks it against `ty`, with the block size it implies.
pub fn read_type(r: &mut Reader, ty: GgmlType) -> (usize, usize) {
    assert_eq!(r.u32(), ty.id(), "fixture is for another type");
    let n_blocks = r.u32() as usize;
    let block_bytes = r.u32() as usize;
    assert_eq!(block_bytes, ty.block_geometry().1);
    (n_blocks, block_bytes)
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
