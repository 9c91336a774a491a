//! The KV cache's storage: element types for keys and values (llama.cpp's `-ctk`/`-ctv`), and
//! one layer's keys and values in them.
//!
//! Quantized types store llama.cpp's blocks (`block_q8_0`: an f16 scale and 32 signed codes,
//! 34 bytes; `block_q4_0`: an f16 scale and 32 nibbles, 18 bytes), quantized per 32 elements of
//! a row by `ferrolm_quant`'s quantizers as ggml's `set_rows` quantizes a row into its cache
//! with the CPU's `from_float`: `BlockQ8_0::quantize_x86` (the x86 `quantize_row_q8_0`: ties
//! to even), `BlockQ4_0::quantize` (`quantize_row_q4_0_ref`).
//! A head's row is `head_dim` elements, so blocks never straddle heads (`head_dim` must be a
//! multiple of 32: [`KvType::check`]). As llama.cpp, a quantized K (V) is stored rotated by a
//! Walsh-Hadamard matrix when the head size is a multiple of 64 (`hadamard`): attention rotates
//! q to match, and its output back.

use crate::hadamard;
use ferrolm_quant::{BlockQ4_0, BlockQ8_0, LegacyBlock};
use half::f16;
use half::slice::HalfFloatSliceExt;
use std::fmt;

/// Elements per quantized block (Q8_0 and Q4_0 alike).
pub const KV_BLOCK: usize = 32;

/// One element type of the KV cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KvElem {
    /// Exact: what llama.cpp's "precise" configuration uses.
    F32,
    /// llama.cpp's default: half the memory of f32 at well under int8 error.
    F16,
    /// 8.5 bits per element: an f16 scale per 32 codes.
    Q8_0,
    /// 4.5 bits per element: an f16 scale per 32 nibbles, stored 8 above their value.
    Q4_0,
}

impl KvElem {
    /// llama.cpp's name (`-ctk q8_0`).
    pub fn name(self) -> &'static str {
        match self {
            KvElem::F32 => "f32",
            KvElem::F16 => "f16",
            KvElem::Q8_0 => "q8_0",
            KvElem::Q4_0 => "q4_0",
        }
    }

    pub fn is_quantized(self) -> bool {
        matches!(self, KvElem::Q8_0 | KvElem::Q4_0)
    }

    /// Bytes of a row of `elems` elements (`elems` a multiple of 32 for quantized types).
    pub fn row_bytes(self, elems: usize) -> usize {
        match self {
            KvElem::F32 => 4 * elems,
            KvElem::F16 => 2 * elems,
            KvElem::Q8_0 => elems / KV_BLOCK * size_of::<BlockQ8_0>(),
            KvElem::Q4_0 => elems / KV_BLOCK * size_of::<BlockQ4_0>(),
        }
    }
}

impl fmt::Display for KvElem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The KV cache's element types: keys and values separately, as llama.cpp's `-ctk`/`-ctv`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KvType {
    pub k: KvElem,
    pub v: KvElem,
}

impl Default for KvType {
    fn default() -> Self {
        Self::F16
    }
}

impl KvType {
    /// llama.cpp's default.
    pub const F16: KvType = KvType::new(KvElem::F16, KvElem::F16);
    /// llama.cpp's "precise" configuration.
    pub const F32: KvType = KvType::new(KvElem::F32, KvElem::F32);
    /// `-ctk q8_0 -ctv q8_0`.
    pub const Q8_0: KvType = KvType::new(KvElem::Q8_0, KvElem::Q8_0);

    pub const fn new(k: KvElem, v: KvElem) -> Self {
        Self { k, v }
    }

    /// Bytes of one position of one KV head: a key row and a value row of `head_dim`.
    pub fn bytes_per_head(&self, head_dim: usize) -> usize {
        self.k.row_bytes(head_dim) + self.v.row_bytes(head_dim)
    }

    /// Whether a model with heads of `head_dim` can keep its cache in these types: quantized
    /// blocks are 32 elements and may not straddle heads. The error names the flag.
    pub fn check(&self, head_dim: usize) -> Result<(), String> {
        for (flag, e) in [
            ("-ctk/--cache-type-k", self.k),
            ("-ctv/--cache-type-v", self.v),
        ] {
            if e.is_quantized() && !head_dim.is_multiple_of(KV_BLOCK) {
                return Err(format!(
                    "{flag} {e}: a quantized KV cache needs a head size that is a multiple of \
                     {KV_BLOCK}; this model's is {head_dim} (use f16)"
                ));
            }
        }
        Ok(())
    }
}

impl fmt::Display for KvType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.k == self.v {
            write!(f, "{}", self.k)
        } else {
            write!(f, "k {} v {}", self.k, self.v)
        }
    }
}

/// One tensor of the cache (keys or values), in its element type; indices are elements.
enum Store {
    F32(Vec<f32>),
    F16(Vec<f16>),
    Q8_0(Vec<BlockQ8_0>),
    Q4_0(Vec<BlockQ4_0>),
}

/// Quantizes `src` (whole blocks) into `dst`'s blocks.
fn quantize_into<B: LegacyBlock>(dst: &mut [B], src: &[f32]) {
    for (b, x) in dst.iter_mut().zip(src.chunks_exact(KV_BLOCK)) {
        *b = B::quantize(x.try_into().expect("whole blocks"));
    }
}

fn dequantize_from<B: LegacyBlock>(src: &[B], dst: &mut [f32]) {
    for (b, out) in src.iter().zip(dst.chunks_exact_mut(KV_BLOCK)) {
        b.dequantize(out.try_into().expect("whole blocks"));
    }
}

impl Store {
    fn new(ty: KvElem, len: usize) -> Self {
        match ty {
            KvElem::F32 => Store::F32(vec![0.0; len]),
            KvElem::F16 => Store::F16(vec![f16::ZERO; len]),
            KvElem::Q8_0 => Store::Q8_0(vec![BlockQ8_0::default(); len / KV_BLOCK]),
            KvElem::Q4_0 => Store::Q4_0(vec![BlockQ4_0::default(); len / KV_BLOCK]),
        }
    }

    fn write(&mut self, at: usize, src: &[f32]) {
        let blocks = at / KV_BLOCK..(at + src.len()) / KV_BLOCK;
        match self {
            Store::F32(v) => v[at..at + src.len()].copy_from_slice(src),
            Store::F16(v) => v[at..at + src.len()].convert_from_f32_slice(src),
            Store::Q8_0(v) => {
                for (b, x) in v[blocks].iter_mut().zip(src.chunks_exact(KV_BLOCK)) {
                    *b = BlockQ8_0::quantize_x86(x.try_into().expect("whole blocks"));
                }
            }
            Store::Q4_0(v) => quantize_into(&mut v[blocks], src),
        }
    }

    /// Copies elements `at..at + len` of `src` (a store of the same type) into the same
    /// place; `at` and `len` are whole blocks for the quantized types.
    fn copy_from(&mut self, src: &Store, at: usize, len: usize) {
        let blocks = at / KV_BLOCK..(at + len) / KV_BLOCK;
        match (self, src) {
            (Store::F32(d), Store::F32(s)) => d[at..at + len].copy_from_slice(&s[at..at + len]),
            (Store::F16(d), Store::F16(s)) => d[at..at + len].copy_from_slice(&s[at..at + len]),
            (Store::Q8_0(d), Store::Q8_0(s)) => d[blocks.clone()].copy_from_slice(&s[blocks]),
            (Store::Q4_0(d), Store::Q4_0(s)) => d[blocks.clone()].copy_from_slice(&s[blocks]),
            _ => panic!("copying between KV stores of different types"),
        }
    }

    /// Elements `at..at + dst.len()` as f32 (dequantized: `d · q`, ggml's `to_float`).
    fn read(&self, at: usize, dst: &mut [f32]) {
        let blocks = at / KV_BLOCK..(at + dst.len()) / KV_BLOCK;
        match self {
            Store::F32(v) => dst.copy_from_slice(&v[at..at + dst.len()]),
            Store::F16(v) => v[at..at + dst.len()].convert_to_f32_slice(dst),
            Store::Q8_0(v) => dequantize_from(&v[blocks], dst),
            Store::Q4_0(v) => dequantize_from(&v[blocks], dst),
        }
    }

    /// Elements `at..at + codes.len()` of a quantized store as signed codes and one scale per
    /// block (`x = d · code`), what the integer dot products read.
    fn read_codes(&self, at: usize, codes: &mut [i8], d: &mut [f32]) {
        let blocks = at / KV_BLOCK..(at + codes.len()) / KV_BLOCK;
        let out = codes.chunks_exact_mut(KV_BLOCK).zip(d);
        match self {
            Store::Q8_0(v) => {
                for (b, (c, d)) in v[blocks].iter().zip(out) {
                    c.copy_from_slice(b.codes());
                    *d = b.d();
                }
            }
            Store::Q4_0(v) => {
                for (b, (c, d)) in v[blocks].iter().zip(out) {
                    // Byte j: element j in the low nibble, element j + 16 in the high one.
                    let (lo, hi) = c.split_at_mut(KV_BLOCK / 2);
                    for ((l, h), &q) in lo.iter_mut().zip(hi).zip(&b.qs) {
                        *l = (q & 0x0f) as i8 - 8;
                        *h = (q >> 4) as i8 - 8;
                    }
                    *d = b.d();
                }
            }
            Store::F32(_) | Store::F16(_) => unreachable!("codes of a float cache"),
        }
    }
}

/// One layer's keys and values. Head-major (`[n_kv_head][n_ctx][head_dim]`) so one head's
/// history is a contiguous run that widens to f32 (or unpacks to codes) in one pass.
pub struct LayerKv {
    k: Store,
    v: Store,
    pub(crate) ty: KvType,
    n_ctx: usize,
    n_kv_head: usize,
    pub(crate) head_dim: usize,
    /// The rotation of stored keys (and of q), of stored values (and back, of the output):
    /// chunk sizes, `None` for none.
    pub(crate) k_rot: Option<usize>,
    pub(crate) v_rot: Option<usize>,
}

impl LayerKv {
    /// Panics on a quantized type with `head_dim` not a multiple of 32 (callers check first
    /// with [`KvType::check`]).
    pub fn new(ty: KvType, n_ctx: usize, n_kv_head: usize, head_dim: usize) -> Self {
        if let Err(e) = ty.check(head_dim) {
            panic!("{e}");
        }
        let len = n_ctx * n_kv_head * head_dim;
        Self {
            k: Store::new(ty.k, len),
            v: Store::new(ty.v, len),
            ty,
            n_ctx,
            n_kv_head,
            head_dim,
            k_rot: ty
                .k
                .is_quantized()
                .then(|| hadamard::k_rotation(head_dim))
                .flatten(),
            v_rot: ty
                .v
                .is_quantized()
                .then(|| hadamard::v_rotation(head_dim))
                .flatten(),
        }
    }

    pub fn n_ctx(&self) -> usize {
        self.n_ctx
    }

    fn at(&self, g: usize, p: usize) -> usize {
        (g * self.n_ctx + p) * self.head_dim
    }

    /// Stores rows of `k` and `v` (`[n][n_kv_head * head_dim]`) at positions `pos0..pos0+n`.
    /// Quantized types may store them rotated (see the module header).
    pub fn store(&mut self, pos0: usize, k: &[f32], v: &[f32]) {
        let hd = self.head_dim;
        let width = self.n_kv_head * hd;
        let rotated = |x: &[f32], rot: Option<usize>, buf: &mut Vec<f32>| {
            buf.clear();
            buf.extend_from_slice(x);
            if let Some(n) = rot {
                hadamard::rotate(buf, n);
            }
        };
        let (mut kb, mut vb) = (Vec::with_capacity(width), Vec::with_capacity(width));
        for (t, (kr, vr)) in k.chunks_exact(width).zip(v.chunks_exact(width)).enumerate() {
            rotated(kr, self.k_rot, &mut kb);
            rotated(vr, self.v_rot, &mut vb);
            for g in 0..self.n_kv_head {
                let at = self.at(g, pos0 + t);
                self.k.write(at, &kb[g * hd..(g + 1) * hd]);
                self.v.write(at, &vb[g * hd..(g + 1) * hd]);
            }
        }
    }

    /// Positions `0..n` of `src` (a cache of the same type and shape) copied into this one:
    /// a shared prompt's keys and values given to another sequence. Panics on a cache of
    /// another type or shape (the caller's mistake).
    pub fn copy_prefix_from(&mut self, src: &LayerKv, n: usize) {
        assert!(
            self.ty == src.ty
                && self.n_kv_head == src.n_kv_head
                && self.head_dim == src.head_dim
                && self.n_ctx == src.n_ctx
                && n <= self.n_ctx,
            "copy_prefix_from: caches of another type or shape"
        );
        for g in 0..self.n_kv_head {
            let at = self.at(g, 0);
            self.k.copy_from(&src.k, at, n * self.head_dim);
            self.v.copy_from(&src.v, at, n * self.head_dim);
        }
    }

    /// Positions `0..n` of head `g`'s keys, as f32.
    pub(crate) fn keys_f32(&self, g: usize, n: usize, k: &mut [f32]) {
        self.k.read(self.at(g, 0), &mut k[..n * self.head_dim]);
    }

    /// Positions `0..n` of head `g`'s values, as f32.
    pub(crate) fn values_f32(&self, g: usize, n: usize, v: &mut [f32]) {
        self.v.read(self.at(g, 0), &mut v[..n * self.head_dim]);
    }

    /// Positions `0..n` of head `g`'s quantized keys as codes and per-block scales.
    pub(crate) fn key_codes(&self, g: usize, n: usize, codes: &mut [i8], d: &mut [f32]) {
        let len = n * self.head_dim;
        self.k
            .read_codes(self.at(g, 0), &mut codes[..len], &mut d[..len / KV_BLOCK]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q8_0_is_34_64ths_of_f16() {
        let hd = 64;
        assert_eq!(KvType::F16.bytes_per_head(hd), 256);
        assert_eq!(KvType::Q8_0.bytes_per_head(hd), 136);
        assert_eq!(
            KvType::new(KvElem::Q4_0, KvElem::Q4_0).bytes_per_head(hd),
            72
        );
        assert!(KvType::Q8_0.check(80).unwrap_err().contains("-ctk"));
        assert!(KvType::new(KvElem::F16, KvElem::Q4_0)
            .check(80)
            .unwrap_err()
            .contains("-ctv"));
        assert!(KvType::F16.check(80).is_ok());
    }

    /// Codes times scales are the dequantized values, for both block types.
    #[test]
    fn codes_and_scales_dequantize_like_the_blocks() {
        for elem in [KvElem::Q8_0, KvElem::Q4_0] {
            let mut kv = LayerKv::new(KvType::new(elem, elem), 4, 2, 64);
            let row: Vec<f32> = (0..128)
                .map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0)
                .collect();
            kv.store(1, &row, &row);
            let (mut f, mut c, mut d) = (vec![0.0; 128], vec![0i8; 128], vec![0.0; 4]);
            kv.keys_f32(1, 2, &mut f);
            kv.key_codes(1, 2, &mut c, &mut d);
            for (i, (&x, &q)) in f.iter().zip(&c).enumerate() {
                assert_eq!(x, f32::from(q) * d[i / 32], "{elem} element {i}");
            }
            // Position 1 of head 1 holds the second head's part of the row, near its values
            // once rotated back (the cache rotates heads of 64).
            assert_eq!(kv.k_rot, Some(64));
            hadamard::rotate(&mut f[64..], 64);
            let step = 7.2 / if elem == KvElem::Q8_0 { 127.0 } else { 7.0 };
            let sq: f32 = f[64..]
                .iter()
                .zip(&row[64..])
                .map(|(a, b)| (a - b) * (a - b))
                .sum();
            assert!(
                (sq / 64.0).sqrt() <= step / 2.0,
                "{elem}: rms error {}",
                (sq / 64.0).sqrt()
            );
        }
    }
}
