//! Prefill for lane-order formats (Q8_0, Q5_0, see `matmul::lanes`): tiles of rows × tokens, one
//! accumulator per row and token whose eight lanes are the order's eight lanes. Blocks are read
//! in place (no repacking).
//!
//! AVX-512 (`pairs`): tokens go in pairs, one per 256-bit half of a 512-bit accumulator; the
//! weight's codes (biased to unsigned) meet both tokens' codes in one `vpdpbusd` whose lanes
//! start at `-128·Σx`, so one conversion, one `d·dx` product and one fused multiply-add per
//! block take two tokens' eight lanes in.
//!
//! AVX2: per block and row the codes are loaded once and their magnitudes taken, then per token
//! the activation codes take the weight's signs and `vpmaddubsw` + `vpmaddwd` give the eight
//! lane sums.
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

/// Tile shape: rows × tokens (AVX-512 has 32 vector registers, AVX2 16). On AVX-512 the
/// tokens go in pairs, one per half of a 512-bit accumulator ([`pairs`]).
const AVX512_TILE: (usize, usize) = (4, 8);
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
    // Signed codes are the stored ones less the bias, which fits a byte (`tile`).
    debug_assert!(F::LANES && F::ELEMS == 32 && F::UNIT == 32 && (1..=128).contains(&F::BIAS));
    // SAFETY: only reached from levels with AVX2 and F16C (`gemm`'s caller checked).
    let scales = unsafe { weight_scales::<F>(w) };
    let tile_t = if isa == Isa::Avx512 {
        AVX512_TILE.1
    } else {
        AVX2_TILE.1
    };
    let per_task = chunk_len(acts.n, tile_t, 2).next_multiple_of(tile_t);
    let rows_per_range = (BLOCK_BYTES / (bpr * size_of::<F::Block>())).max(4) / 4 * 4;
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
            if isa == Isa::Avx512 {
                PAIRS.with_borrow_mut(|buf| {
                    // SAFETY: `isa` was detected on this CPU by `matmul_with`'s caller.
                    unsafe { pairs::prepare(&job, o.len() / rows, buf) };
                    for r0 in (0..rows).step_by(rows_per_range) {
                        let r1 = (r0 + rows_per_range).min(rows);
                        // SAFETY: as above.
                        unsafe { pairs::task(&job, buf, r0..r1, o) };
                    }
                });
                return;
            }
            for r0 in (0..rows).step_by(rows_per_range) {
                let r1 = (r0 + rows_per_range).min(rows);
                // SAFETY: `isa` was detected on this CPU by `matmul_with`'s caller.
                unsafe { task_avx2(&job, r0..r1, o) }
            }
        });
}

thread_local! {
    /// A task's token pairs (`pairs::prepare`), kept between calls.
    static PAIRS: std::cell::RefCell<Vec<pairs::PairBlock>> = const {
        std::cell::RefCell::new(Vec::new())
    };
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

struct Maddubs;

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
            match (t < whole_t, r < whole_r) {
                (true, true) => tile::<F, D, 2, 4>(job, r, t, out),
                (true, false) => {
                    for r in r..rows.end {
                        tile::<F, D, 1, 4>(job, r, t, out);
                    }
                }
                (false, true) => {
                    for t in t..nt {
                        tile::<F, D, 2, 1>(job, r, t, out);
                    }
                }
                (false, false) => {
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
            let q = _mm256_sub_epi8(q, _mm256_set1_epi8(F::BIAS as u8 as i8));
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

/// AVX-512 with VNNI: tokens in pairs, one per 256-bit half, so that one `vpdpbusd` gives
/// the eight lane sums of a block for both tokens, one conversion and one fused multiply-add
/// (by `d·dx` of each token in its half) take them into the lanes, and each half keeps its
/// token's eight lanes in block order, folded once at the end.
///
/// The weight's codes go in as stored, `q + BIAS` (unsigned), the activation's as they are
/// (signed); each lane's sum starts at `-BIAS·Σx` of its four activation codes, so it ends at
/// `Σ q·x` exactly.
mod pairs {
    use super::{hsum, Job, SimdFormat, AVX512_TILE};
    use std::arch::x86_64::*;
    use std::ops::Range;

    /// Two tokens' share of one block: their codes, their lanes' starting sums and their
    /// scales, the first token in the low half of each.
    #[derive(Clone, Copy)]
    pub(super) struct PairBlock {
        x: __m512i,
        start: __m512i,
        dx: __m512,
    }

    /// `buf` (`[pair][block]`) for the task's `nt` tokens; an odd last token is paired with
    /// itself.
    ///
    /// # Safety
    /// AVX-512F/BW/VL and VNNI must be available.
    #[target_feature(enable = "avx2,avx512f,avx512bw,avx512vl,avx512vnni")]
    pub(super) unsafe fn prepare<F: SimdFormat>(
        job: &Job<'_, F>,
        nt: usize,
        buf: &mut Vec<PairBlock>,
    ) {
        let bpr = job.bpr;
        buf.clear();
        buf.reserve(nt.div_ceil(2) * bpr);
        for t in (0..nt).step_by(2) {
            let (a, b) = (job.t0 + t, job.t0 + (t + 1).min(nt - 1));
            let (xa, xb) = (
                &job.acts.codes(a)[..bpr * 32],
                &job.acts.codes(b)[..bpr * 32],
            );
            let (da, db) = (&job.acts.d(a)[..bpr], &job.acts.d(b)[..bpr]);
            for k in 0..bpr {
                let lo = _mm256_loadu_si256(xa[32 * k..].as_ptr().cast());
                let hi = _mm256_loadu_si256(xb[32 * k..].as_ptr().cast());
                let x = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi);
                let bias = _mm512_set1_epi8(F::BIAS as u8 as i8);
                let sum = _mm512_dpbusd_epi32(_mm512_setzero_si512(), bias, x);
                let dx = _mm512_insertf64x4::<1>(
                    _mm512_castpd256_pd512(_mm256_castps_pd(_mm256_set1_ps(da[k]))),
                    _mm256_castps_pd(_mm256_set1_ps(db[k])),
                );
                buf.push(PairBlock {
                    x,
                    start: _mm512_sub_epi32(_mm512_setzero_si512(), sum),
                    dx: _mm512_castpd_ps(dx),
                });
            }
        }
    }

    /// The task's tokens × `rows`, into `out` (`[tokens][rows]`, the task's part), from
    /// `prepare`'s `buf`.
    ///
    /// # Safety
    /// As `prepare`.
    #[target_feature(enable = "avx2,fma,avx512f,avx512bw,avx512vl,avx512vnni")]
    pub(super) unsafe fn task<F: SimdFormat>(
        job: &Job<'_, F>,
        buf: &[PairBlock],
        rows: Range<usize>,
        out: &mut [f32],
    ) {
        const TR: usize = AVX512_TILE.0;
        const TP: usize = AVX512_TILE.1 / 2;
        let nt = out.len() / job.rows;
        let np = nt.div_ceil(2);
        assert!(buf.len() >= np * job.bpr);
        let (whole_p, whole_r) = (np / TP * TP, rows.start + rows.len() / TR * TR);
        for p in (0..np).step_by(TP) {
            for r in (rows.start..rows.end).step_by(TR) {
                match (p < whole_p, r < whole_r) {
                    (true, true) => tile::<F, TR, TP>(job, buf, r, p, out),
                    (true, false) => {
                        for r in r..rows.end {
                            tile::<F, 1, TP>(job, buf, r, p, out);
                        }
                    }
                    (false, true) => {
                        for p in p..np {
                            tile::<F, TR, 1>(job, buf, r, p, out);
                        }
                    }
                    (false, false) => {
                        for p in p..np {
                            for r in r..rows.end {
                                tile::<F, 1, 1>(job, buf, r, p, out);
                            }
                        }
                    }
                }
            }
        }
    }

    /// Rows `r0..r0 + R` × the task's token pairs `p0..p0 + P`.
    ///
    /// # Safety
    /// As `task`, into which it is inlined; `buf` holds pairs `p0..p0 + P`.
    #[inline(always)]
    unsafe fn tile<F: SimdFormat, const R: usize, const P: usize>(
        job: &Job<'_, F>,
        buf: &[PairBlock],
        r0: usize,
        p0: usize,
        out: &mut [f32],
    ) {
        let bpr = job.bpr;
        let w = &job.w[r0 * bpr..(r0 + R) * bpr];
        let scales = &job.scales[r0 * bpr..(r0 + R) * bpr];
        // Bounds are settled here; the loop reads through raw pointers.
        let x: [*const PairBlock; P] =
            std::array::from_fn(|j| buf[(p0 + j) * bpr..][..bpr].as_ptr());
        let mut acc = [[_mm512_setzero_ps(); P]; R];
        for b in 0..bpr {
            for (i, acc) in acc.iter_mut().enumerate() {
                let q = F::codes32x2(w.get_unchecked(i * bpr + b));
                let d = _mm512_set1_ps(*scales.get_unchecked(i * bpr + b));
                for (j, acc) in acc.iter_mut().enumerate() {
                    let e = &*x[j].add(b);
                    let dot = _mm512_dpbusd_epi32(e.start, q, e.x);
                    // `d·dx` per half: the same f32 product as a scalar `d * dx`.
                    let s = _mm512_mul_ps(d, e.dx);
                    *acc = _mm512_fmadd_ps(s, _mm512_cvtepi32_ps(dot), *acc);
                }
            }
        }
        let nt = out.len() / job.rows;
        for (i, acc) in acc.iter().enumerate() {
            for (j, v) in acc.iter().enumerate() {
                let t = 2 * (p0 + j);
                out[t * job.rows + r0 + i] = hsum(_mm512_castps512_ps256(*v));
                if t + 1 < nt {
                    let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(*v)));
                    out[(t + 1) * job.rows + r0 + i] = hsum(hi);
                }
            }
        }
    }
}
