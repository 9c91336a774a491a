//! Quantized weights: activations quantized once, then the decode (`gemv`) or prefill (`gemm`)
//! kernel of the chosen level, spread over rayon.

use super::act::Acts;
use super::formats::{self, Format};
use super::{activation_type, chunk_len, transpose_into, Isa, Path, WeightRef};
use ferrolm_gguf::GgmlType;
use rayon::prelude::*;
use std::borrow::Cow;

/// Multiply-adds a decode task should at least have, so rayon's dispatch stays small beside it.
const GEMV_MIN_TASK_MACS: usize = 1 << 16;

// The kernels of a level need their SIMD decoders on x86; elsewhere only the scalar one runs.
#[cfg(target_arch = "x86_64")]
use super::x86::SimdFormat as Native;
#[cfg(not(target_arch = "x86_64"))]
trait Native: Format {}
#[cfg(not(target_arch = "x86_64"))]
impl<F: Format> Native for F {}

/// Runs the matmul if `w.ty` is a quantized format with kernels; false otherwise.
///
/// `path`: the kernel the plan chose (`Gemv` or `Gemm`; the scalar level has only the first).
/// `pairs`: integer-scale formats sum the first `pairs` tokens per pair of units (see
/// [`super::Order`]).
pub(super) fn matmul(
    isa: Isa,
    path: Path,
    pairs: usize,
    w: &WeightRef,
    x: &[f32],
    out: &mut [f32],
) -> bool {
    let k = Kernel { isa, path, pairs };
    match w.ty {
        GgmlType::Q4_0 => run::<formats::Q4_0>(k, w, x, out),
        GgmlType::Q4_1 => run::<formats::Q4_1>(k, w, x, out),
        GgmlType::Q5_0 => run::<formats::Q5_0>(k, w, x, out),
        GgmlType::Q5_1 => run::<formats::Q5_1>(k, w, x, out),
        GgmlType::Q8_0 => run::<formats::Q8_0>(k, w, x, out),
        GgmlType::Q2K => run::<formats::Q2K>(k, w, x, out),
        GgmlType::Q3K => run::<formats::Q3K>(k, w, x, out),
        GgmlType::Q4K => run::<formats::Q4K>(k, w, x, out),
        GgmlType::Q5K => run::<formats::Q5K>(k, w, x, out),
        GgmlType::Q6K => run::<formats::Q6K>(k, w, x, out),
        // One kernel for every level: llama.cpp's order is sequential per output.
        GgmlType::Mxfp4 => super::mxfp4::matmul(w, x, out),
        _ => return false,
    }
    true
}

/// The weight's bytes as typed blocks: in place when aligned (always, for a mapped GGUF),
/// else copied.
fn blocks<F: Format>(data: &[u8]) -> Cow<'_, [F::Block]> {
    match bytemuck::try_cast_slice(data) {
        Ok(b) => Cow::Borrowed(b),
        Err(_) => {
            let mut v = vec![
                <F::Block as bytemuck::Zeroable>::zeroed();
                data.len() / size_of::<F::Block>()
            ];
            bytemuck::cast_slice_mut::<F::Block, u8>(&mut v).copy_from_slice(data);
            Cow::Owned(v)
        }
    }
}

#[derive(Clone, Copy)]
struct Kernel {
    isa: Isa,
    path: Path,
    pairs: usize,
}

fn run<F: Native>(k: Kernel, w: &WeightRef, x: &[f32], out: &mut [f32]) {
    let Kernel { isa, path, pairs } = k;
    assert!(w.cols.is_multiple_of(F::ELEMS), "{}: partial block", F::TY);
    let n = x.len() / w.cols;
    let bpr = w.cols / F::ELEMS;
    let blocks = blocks::<F>(w.data);
    // AVX2 dots Q8_0's codes signed (their bias taken off in the bytes): nothing to cancel.
    let bias = if F::WIDE && isa == Isa::Avx2 {
        0
    } else {
        F::BIAS
    };
    debug_assert_ne!(path, Path::Auto, "the plan resolves the path");
    let gemm = isa != Isa::Scalar && path == Path::Gemm;
    let lanes = !gemm && isa != Isa::Scalar;
    let acts = Acts::quantize(activation_type(F::TY), F::UNIT, bias, lanes, x, w.cols);
    if gemm {
        #[cfg(target_arch = "x86_64")]
        super::x86::gemm::<F>(isa, &blocks, w.rows, bpr, &acts, pairs, out);
        return;
    }
    // Rows split over tasks, each writing `[rows][n]`; transposed at the end when n > 1.
    let min_rows = (GEMV_MIN_TASK_MACS / (w.cols * n)).max(8);
    let rows_per_task = chunk_len(w.rows, min_rows, 4);
    let mut out_t = (n > 1).then(|| vec![0f32; w.rows * n]);
    out_t
        .as_deref_mut()
        .unwrap_or(&mut *out)
        .par_chunks_mut(rows_per_task * n)
        .zip(blocks.par_chunks(rows_per_task * bpr))
        .for_each(|(o, wb)| match isa {
            Isa::Scalar => super::scalar::gemv::<F>(wb, bpr, &acts, pairs, o),
            #[cfg(target_arch = "x86_64")]
            _ => super::x86::gemv::<F>(isa, wb, bpr, &acts, pairs, o),
            #[cfg(not(target_arch = "x86_64"))]
            _ => unreachable!("only the scalar level exists here"),
        });
    if let Some(t) = out_t {
        transpose_into(&t, n, out);
    }
}
