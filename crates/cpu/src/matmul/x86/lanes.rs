//! Prefill for lane-order formats (Q8_0, see `matmul::lanes`): tiles of `R` rows × `T` tokens,
//! one 256-bit accumulator per row and token whose eight lanes are the order's eight lanes.
//! Blocks are read in place (no repacking): per block and row the codes are loaded once and
//! their magnitudes taken, then per token the activation codes take the weight's signs and one
//! byte dot (`vpdpbusd`, or `vpmaddubsw` + `vpmaddwd` on AVX2) gives the eight lane sums.
//!
//! Tasks own runs of tokens and write whole output rows; within a task rows are visited a range
//! at a time so the range's blocks stay in L2 across the task's token tiles.

use super::super::act::Acts;
use super::super::{chunk_len, Isa};
use super::gemv::hsum;
use super::SimdFormat;
use rayon::prelude::*;
use std::arch::x86_64::*;
use std::ops::Range;

/// Weight bytes a task keeps hot while it sweeps its tokens.
const BLOCK_BYTES: usize = 256 << 10;

/// Tile shape: rows × tokens (AVX-512 has 32 vector registers, AVX2 16).
const AVX512_TILE: (usize, usize) = (4, 4);
const AVX2_TILE: (usize, usize) = (2, 4);

/// `out` (`[n][rows]`) for `w`'s `rows` rows of `bpr` blocks.
pub(super) fn gemm<F: SimdFormat>(
    isa: Isa,
    w: &[F::Block],
    rows: usize,
    bpr: usize,
    acts: &Acts,
    out: &mut [f32],
) {
    // Signed codes are the stored ones with the sign bit flipped (`tile`).
    debug_assert!(F::LANES && F::ELEMS == 32 && F::UNIT == 32 && F::BIAS == 128);
    // SAFETY: only reached from levels with AVX2 and F16C (`gemm`'s caller checked).
    let scales = unsafe { weight_scales::<F>(w) };
    let tile_t = if isa == Isa::Avx512 {
        AVX512_TILE.1
    } else {
        AVX2_TILE.1
    };
    let per_task = chunk_len(acts.n, tile_t, 2).next_multiple_of(tile_t);
    let rows_per_range = (BLOCK_BYTES / (bpr * size_of::<F::Block>())).max(4);
    out.par_chunks_mut(per_task * rows)
        .enumerate()
        .for_each(|(i, o)| {
            let job = Job::<F> {
                w,
                scales: &scales,
                bpr,
                rows,
                acts,
                t0: i * per_task,
            };
            for r0 in (0..rows).step_by(rows_per_range) {
                let r1 = (r0 + rows_per_range).min(rows);
                // SAFETY: `isa` was detected on this CPU by `matmul_with`'s caller.
                unsafe {
                    match isa {
                        Isa::Avx512 => task_avx512(&job, r0..r1, o),
                        _ => task_avx2(&job, r0..r1, o),
                    }
                }
            }
        });
}

/// Every block's scale as f32, `[row][block]`.
#[target_feature(enable = "avx2,f16c")]
unsafe fn weight_scales<F: SimdFormat>(w: &[F::Block]) -> Vec<f32> {
    let mut scale = vec![0f32; w.len()];
    let mut off = vec![0f32; w.len()];
    F::params_run(w, &mut scale, &mut off);
    scale
}

struct Job<'a, F: SimdFormat> {
    w: &'a [F::Block],
    scales: &'a [f32],
    bpr: usize,
    rows: usize,
    acts: &'a Acts,
    /// The task's first token.
    t0: usize,
}

/// The byte dot of a level: eight i32 lanes, each the sum of 4 products of an unsigned byte
/// (the weight's magnitude) and a signed one (the activation with the weight's sign).
trait LaneDot {
    const TILE: (usize, usize);
    /// # Safety
    /// The implementation's target features must be available.
    unsafe fn dot(mag: __m256i, x: __m256i) -> __m256i;
}

struct Vnni;
struct Maddubs;

impl LaneDot for Vnni {
    const TILE: (usize, usize) = AVX512_TILE;
    #[inline]
    #[target_feature(enable = "avx2,avx512vl,avx512vnni")]
    unsafe fn dot(mag: __m256i, x: __m256i) -> __m256i {
        _mm256_dpbusd_epi32(_mm256_setzero_si256(), mag, x)
    }
}

impl LaneDot for Maddubs {
    const TILE: (usize, usize) = AVX2_TILE;
    /// Exact: magnitudes are at most 128 and activation codes at most 127, so a pair of
    /// products stays under 2^15.
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn dot(mag: __m256i, x: __m256i) -> __m256i {
        _mm256_madd_epi16(_mm256_maddubs_epi16(mag, x), _mm256_set1_epi16(1))
    }
}

#[target_feature(enable = "avx2,fma,avx512f,avx512vl,avx512vnni")]
unsafe fn task_avx512<F: SimdFormat>(job: &Job<'_, F>, rows: Range<usize>, out: &mut [f32]) {
    task::<F, Vnni>(job, rows, out)
}

#[target_feature(enable = "avx2,fma")]
unsafe fn task_avx2<F: SimdFormat>(job: &Job<'_, F>, rows: Range<usize>, out: &mut [f32]) {
    task::<F, Maddubs>(job, rows, out)
}

/// Tokens of the task × `rows` of the weight, into `out` (`[tokens][rows]`, the task's part).
///
/// # Safety
/// AVX2, FMA and `D`'s features available (only inlined into `task_avx512`/`task_avx2`).
#[inline(always)]
unsafe fn task<F: SimdFormat, D: LaneDot>(job: &Job<'_, F>, rows: Range<usize>, out: &mut [f32]) {
    let nt = out.len() / job.rows;
    let (tr, tt) = D::TILE;
    let (whole_t, whole_r) = (nt / tt * tt, rows.start + rows.len() / tr * tr);
    for t in (0..nt).step_by(tt) {
        for r in (rows.start..rows.end).step_by(tr) {
            match (t < whole_t, r < whole_r, tr) {
                (true, true, 4) => tile::<F, D, 4, 4>(job, r, t, out),
                (true, true, _) => tile::<F, D, 2, 4>(job, r, t, out),
                (true, false, _) => {
                    for r in r..rows.end {
                        tile::<F, D, 1, 4>(job, r, t, out);
                    }
                }
                (false, true, 4) => {
                    for t in t..nt {
                        tile::<F, D, 4, 1>(job, r, t, out);
                    }
                }
                (false, true, _) => {
                    for t in t..nt {
                        tile::<F, D, 2, 1>(job, r, t, out);
                    }
                }
                (false, false, _) => {
                    for t in t..nt {
                        for r in r..rows.end {
                            tile::<F, D, 1, 1>(job, r, t, out);
                        }
                    }
                }
            }
        }
    }
}

/// Rows `r0..r0 + R` × the task's tokens `t..t + T`.
///
/// # Safety
/// As `task`.
#[inline(always)]
unsafe fn tile<F: SimdFormat, D: LaneDot, const R: usize, const T: usize>(
    job: &Job<'_, F>,
    r0: usize,
    t: usize,
    out: &mut [f32],
) {
    let bpr = job.bpr;
    let w = &job.w[r0 * bpr..(r0 + R) * bpr];
    let scales = &job.scales[r0 * bpr..(r0 + R) * bpr];
    // Bounds are settled here; the loop reads through raw pointers.
    let x: [*const i8; T] =
        std::array::from_fn(|j| job.acts.codes(job.t0 + t + j)[..bpr * 32].as_ptr());
    let dx: [*const f32; T] = std::array::from_fn(|j| job.acts.d(job.t0 + t + j)[..bpr].as_ptr());
    let mut acc = [[_mm256_setzero_ps(); T]; R];
    for b in 0..bpr {
        let xv: [__m256i; T] = std::array::from_fn(|j| _mm256_loadu_si256(x[j].add(32 * b).cast()));
        for (i, acc) in acc.iter_mut().enumerate() {
            // The stored codes are `q + BIAS`: back to signed `q`.
            let q = F::codes32(w.get_unchecked(i * bpr + b), 0);
            let q = _mm256_xor_si256(q, _mm256_set1_epi8(i8::MIN));
            let mag = _mm256_abs_epi8(q);
            let d = *scales.get_unchecked(i * bpr + b);
            for (j, acc) in acc.iter_mut().enumerate() {
                let dot = D::dot(mag, _mm256_sign_epi8(xv[j], q));
                let s = _mm256_set1_ps(d * *dx[j].add(b));
                *acc = _mm256_fmadd_ps(s, _mm256_cvtepi32_ps(dot), *acc);
            }
        }
    }
    for (i, acc) in acc.iter().enumerate() {
        for (j, v) in acc.iter().enumerate() {
            out[(t + j) * job.rows + r0 + i] = hsum(*v);
        }
    }
}
