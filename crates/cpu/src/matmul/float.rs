//! F32, F16 and BF16 weights. Activations are rounded through the weight type as the
//! reference (and llama.cpp) does, each weight row is converted to f32 once per call, and the
//! dots are f32 FMAs.

use super::reference::round_activations;
use super::{chunk_len, transpose_into, Isa, WeightRef};
use ferrolm_gguf::GgmlType;
use half::slice::HalfFloatSliceExt;
use rayon::prelude::*;

/// Multiply-adds a task should at least have.
const MIN_TASK_MACS: usize = 1 << 16;

/// Runs the matmul if `w.ty` is a float type; false otherwise.
pub(super) fn matmul(isa: Isa, w: &WeightRef, x: &[f32], out: &mut [f32]) -> bool {
    if !matches!(w.ty, GgmlType::F32 | GgmlType::F16 | GgmlType::Bf16) {
        return false;
    }
    let rounded;
    let x = if w.ty == GgmlType::F32 {
        x
    } else {
        rounded = round_activations(w.ty, x);
        &rounded
    };
    let (n, cols, rb) = (x.len() / w.cols, w.cols, w.row_bytes());
    let rows_per_task = chunk_len(w.rows, (MIN_TASK_MACS / (cols * n)).max(8), 4);
    let mut out_t = (n > 1).then(|| vec![0f32; w.rows * n]);
    out_t
        .as_deref_mut()
        .unwrap_or(&mut *out)
        .par_chunks_mut(rows_per_task * n)
        .zip(w.data.par_chunks(rows_per_task * rb))
        .for_each(|(o, data)| {
            let mut row = vec![0f32; cols];
            for (o, bytes) in o.chunks_exact_mut(n).zip(data.chunks_exact(rb)) {
                to_f32(w.ty, bytes, &mut row);
                for (ov, xt) in o.iter_mut().zip(x.chunks_exact(cols)) {
                    *ov = dot(isa, &row, xt);
                }
            }
        });
    if let Some(t) = out_t {
        transpose_into(&t, n, out);
    }
    true
}

fn to_f32(ty: GgmlType, bytes: &[u8], out: &mut [f32]) {
    match ty {
        GgmlType::F32 => {
            for (o, b) in out.iter_mut().zip(bytes.chunks_exact(4)) {
                *o = f32::from_le_bytes(b.try_into().unwrap());
            }
        }
        GgmlType::F16 => match bytemuck::try_cast_slice::<u8, half::f16>(bytes) {
            // Vectorised (F16C) when the row is 2-byte aligned, as in a mapped file.
            Ok(h) => h.convert_to_f32_slice(out),
            Err(_) => {
                for (o, b) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                    *o = half::f16::from_le_bytes(b.try_into().unwrap()).to_f32();
                }
            }
        },
        _ => {
            for (o, b) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                *o = f32::from_bits(u32::from(u16::from_le_bytes(b.try_into().unwrap())) << 16);
            }
        }
    }
}

fn dot(isa: Isa, a: &[f32], b: &[f32]) -> f32 {
    match isa {
        // SAFETY: `isa` was detected on this CPU (checked by `matmul_with`).
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { x86::dot_avx512(a, b) },
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { x86::dot_avx2(a, b) },
        _ => dot_scalar(a, b),
    }
}

/// The AVX-512 dot's sums in portable code, bit for bit (tested against it where the CPU has
/// AVX-512): 64 fused multiply-add chains (four vectors of 16 lanes) over 64-column steps, the
/// vectors added as (0 + 1) + (2 + 3), the 16 lanes halved three times and the last pair
/// added (`_mm512_reduce_add_ps`'s tree), then the tail as [`dot_scalar`] sums it. The order a
/// GPU kernel must follow to give an F32 product the CPU's bits: the tiny gpt-oss F32 golden
/// misses its bar on CUDA only through its f32 dots' order (docs/parity.md, session 20).
pub fn dot_f32_avx512_order(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len()) / 64 * 64;
    let mut acc = [[0f32; 16]; 4];
    for (x, y) in a[..n].chunks_exact(64).zip(b[..n].chunks_exact(64)) {
        for (i, acc) in acc.iter_mut().enumerate() {
            for (l, v) in acc.iter_mut().enumerate() {
                *v = x[16 * i + l].mul_add(y[16 * i + l], *v);
            }
        }
    }
    let v: [f32; 16] = std::array::from_fn(|l| (acc[0][l] + acc[1][l]) + (acc[2][l] + acc[3][l]));
    let h8: [f32; 8] = std::array::from_fn(|l| v[l] + v[l + 8]);
    let h4: [f32; 4] = std::array::from_fn(|l| h8[l] + h8[l + 4]);
    let h2: [f32; 2] = std::array::from_fn(|l| h4[l] + h4[l + 2]);
    (h2[0] + h2[1]) + dot_scalar(&a[n..], &b[n..])
}

fn dot_scalar(a: &[f32], b: &[f32]) -> f32 {
    // Eight independent accumulators let the compiler vectorise without reassociation flags.
    let mut acc = [0f32; 8];
    for (x, y) in a.chunks_exact(8).zip(b.chunks_exact(8)) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let done = a.len() / 8 * 8;
    let tail: f32 = a[done..].iter().zip(&b[done..]).map(|(x, y)| x * y).sum();
    acc.iter().sum::<f32>() + tail
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// # Safety
    /// AVX2 and FMA must be available.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn dot_avx2(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len()) / 32 * 32;
        let mut acc = [_mm256_setzero_ps(); 4];
        for (x, y) in a[..n].chunks_exact(32).zip(b[..n].chunks_exact(32)) {
            for (i, acc) in acc.iter_mut().enumerate() {
                let (xv, yv) = (
                    _mm256_loadu_ps(x[8 * i..].as_ptr()),
                    _mm256_loadu_ps(y[8 * i..].as_ptr()),
                );
                *acc = _mm256_fmadd_ps(xv, yv, *acc);
            }
        }
        let v = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
        let mut lanes = [0f32; 8];
        _mm256_storeu_ps(lanes.as_mut_ptr(), v);
        lanes.iter().sum::<f32>() + super::dot_scalar(&a[n..], &b[n..])
    }

    /// # Safety
    /// AVX-512 F must be available.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn dot_avx512(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len()) / 64 * 64;
        let mut acc = [_mm512_setzero_ps(); 4];
        for (x, y) in a[..n].chunks_exact(64).zip(b[..n].chunks_exact(64)) {
            for (i, acc) in acc.iter_mut().enumerate() {
                let (xv, yv) = (
                    _mm512_loadu_ps(x[16 * i..].as_ptr()),
                    _mm512_loadu_ps(y[16 * i..].as_ptr()),
                );
                *acc = _mm512_fmadd_ps(xv, yv, *acc);
            }
        }
        let v = _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]));
        _mm512_reduce_add_ps(v) + super::dot_scalar(&a[n..], &b[n..])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The portable order is the AVX-512 dot's to the bit, on lengths with and without a tail
    /// and on values whose sums round differently in other orders.
    #[test]
    fn portable_order_is_the_avx512_dot() {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx512f") {
            let mut seed = 7u64;
            let mut next = || {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 2f32.powi((seed % 13) as i32)
            };
            for len in [64, 256, 2880, 200, 65, 7] {
                for _ in 0..20 {
                    let a: Vec<f32> = (0..len).map(|_| next()).collect();
                    let b: Vec<f32> = (0..len).map(|_| next()).collect();
                    // SAFETY: AVX-512 F detected above.
                    let want = unsafe { x86::dot_avx512(&a, &b) };
                    let got = dot_f32_avx512_order(&a, &b);
                    assert_eq!(got.to_bits(), want.to_bits(), "len {len}: {got} vs {want}");
                }
            }
            return;
        }
        eprintln!("no AVX-512 here: the portable order was not compared");
    }
}
