//! The decode kernel: one weight row at a time, decoded in registers 32 codes at a time and
//! dotted with each token. Per 32 codes: the decoder's 2-4 ops, one byte dot, one convert and
//! one FMA against a precomputed `scale · dx`; the offsets are one f32 dot per row and token.

use super::super::act::Acts;
use super::{f16_to_f32, SimdFormat};
use std::arch::x86_64::*;

/// How far ahead of the row being computed its successors are prefetched.
const PREFETCH_BYTES: usize = 4096;

/// The byte dot product of a level: each i32 lane of `init` plus 4 products of an unsigned
/// weight byte and a signed activation byte.
trait Dot {
    const VNNI: bool;
    /// # Safety
    /// The implementation's target features must be available.
    unsafe fn dot(init: __m256i, codes: __m256i, x: __m256i) -> __m256i;
}

struct Maddubs;
struct Vnni;

impl Dot for Maddubs {
    const VNNI: bool = false;
    /// Pairs sum to i16 without saturating for codes below 128 (all formats but Q8_0, which
    /// takes `dot_signed`).
    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn dot(init: __m256i, codes: __m256i, x: __m256i) -> __m256i {
        let pairs = _mm256_maddubs_epi16(codes, x);
        _mm256_add_epi32(init, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)))
    }
}

impl Dot for Vnni {
    const VNNI: bool = true;
    #[inline]
    #[target_feature(enable = "avx2,avx512vl,avx512vnni")]
    unsafe fn dot(init: __m256i, codes: __m256i, x: __m256i) -> __m256i {
        _mm256_dpbusd_epi32(init, codes, x)
    }
}

/// `Σ w·x` for signed `w`, on AVX2: `|w|` is unsigned and `x` takes `w`'s sign, so
/// `vpmaddubsw` cannot saturate (|w| ≤ 128, |x| ≤ 127).
#[inline]
#[target_feature(enable = "avx2")]
pub(super) unsafe fn dot_signed(w: __m256i, x: __m256i) -> __m256i {
    let p = _mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(x, w));
    _mm256_madd_epi16(p, _mm256_set1_epi16(1))
}

#[inline]
#[target_feature(enable = "avx2")]
pub(super) unsafe fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
}

/// `Σ a·b` in f32.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let mut acc = _mm256_setzero_ps();
    let mut i = 0;
    while i + 8 <= n {
        let (x, y) = (&a[i..i + 8], &b[i..i + 8]);
        acc = _mm256_fmadd_ps(
            _mm256_loadu_ps(x.as_ptr()),
            _mm256_loadu_ps(y.as_ptr()),
            acc,
        );
        i += 8;
    }
    hsum(acc) + (i..n).map(|j| a[j] * b[j]).sum::<f32>()
}

/// The per-lane scale of a chunk of 32 codes: one unit, or two units of 16 (lanes 0-3, 4-7).
///
/// # Safety
/// `eff` readable for one (UNIT 32) or two floats. Like every `#[inline(always)]` helper here,
/// only inlined into `rows_avx2`/`rows_avx512`, which supply the target features it needs.
#[inline(always)]
unsafe fn chunk_scale<const UNIT: usize>(eff: *const f32) -> __m256 {
    if UNIT == 32 {
        _mm256_set1_ps(*eff)
    } else {
        _mm256_setr_m128(_mm_set1_ps(*eff), _mm_set1_ps(*eff.add(1)))
    }
}

/// `(cvt(dot(codes, x)), scale)` of chunk `c` of `blk`: the f32 contribution of 32 codes.
/// `x` points at the chunk's 32 activation codes, `xl` at their 8 `-BIAS·Σx` lane sums (read
/// only for biased codes), `eff` at the chunk's unit's `scale · dx`.
///
/// # Safety
/// The pointers readable as said; `D`'s features available (see `chunk_scale`).
#[inline(always)]
unsafe fn chunk<F: SimdFormat, D: Dot>(
    blk: &F::Block,
    c: usize,
    (x, xl, eff): (*const i8, *const i32, *const f32),
    signed: bool,
) -> (__m256, __m256) {
    let xv = _mm256_loadu_si256(x.cast());
    let codes = F::codes32(blk, c);
    let p = if signed {
        dot_signed(_mm256_xor_si256(codes, _mm256_set1_epi8(i8::MIN)), xv)
    } else if F::BIAS != 0 {
        D::dot(_mm256_loadu_si256(xl.cast()), codes, xv)
    } else {
        D::dot(_mm256_setzero_si256(), codes, xv)
    };
    let e = if F::UNIT == 32 {
        chunk_scale::<32>(eff)
    } else {
        chunk_scale::<16>(eff)
    };
    (_mm256_cvtepi32_ps(p), e)
}

/// `out[r][t]` for the rows of `w` (`bpr` blocks each) and every token.
///
/// # Safety
/// AVX2, FMA, F16C and `D`'s features available (see `chunk_scale`).
#[inline(always)]
unsafe fn rows<F: SimdFormat, D: Dot>(
    w: &[F::Block],
    bpr: usize,
    acts: &Acts,
    pairs: usize,
    out: &mut [f32],
) {
    if F::INT_SCALES {
        return rows_int_scales::<F, D>(w, bpr, acts, pairs, out);
    }
    let units = bpr * F::ELEMS / F::UNIT;
    let (mut scale, mut off, mut eff) = (vec![0f32; units], vec![0f32; units], vec![0f32; units]);
    // Q8_0 on AVX2: signed codes through `dot_signed`, which already is `Σ q·x`, no offset.
    let signed = F::WIDE && !D::VNNI;
    // Four accumulators hide the FMA latency; blocks go `step` at a time so that chunk `k` of
    // a step always lands in accumulator `k % 4` (constant indices once unrolled).
    let cpb = F::ELEMS / 32;
    let step = 4usize.div_ceil(cpb);
    let whole = bpr / step * step;
    // Weights stream from memory once per call: ask for the row `PREFETCH_BYTES` ahead while
    // this one is computed, so its lines are in flight rather than missed one by one.
    let bytes: &[u8] = bytemuck::cast_slice(w);
    let row_bytes = bpr * size_of::<F::Block>();
    let ahead = PREFETCH_BYTES.div_ceil(row_bytes) * row_bytes;
    for (i, (row, o)) in w
        .chunks_exact(bpr)
        .zip(out.chunks_exact_mut(acts.n))
        .enumerate()
    {
        if let Some(next) = bytes.get(i * row_bytes + ahead..(i + 1) * row_bytes + ahead) {
            for line in next.chunks(64) {
                _mm_prefetch::<_MM_HINT_T0>(line.as_ptr().cast());
            }
        }
        if F::ELEMS == 32 {
            legacy_row::<F, D>(row, acts, o, signed);
            continue;
        }
        F::params_run(row, &mut scale, &mut off);
        for (t, ov) in o.iter_mut().enumerate() {
            let (dx, sx, x) = (acts.d(t), acts.s(t), acts.codes(t));
            for ((e, s), d) in eff.iter_mut().zip(&scale).zip(dx) {
                *e = s * d;
            }
            // Symmetric formats have no offsets: their bias cancels inside the integer dots.
            let offsets = if F::BIAS != 0 { 0.0 } else { dot_f32(&off, sx) };
            // Lengths settled here; the loops below index through raw pointers.
            let (x, xl) = (
                x[..bpr * F::ELEMS].as_ptr(),
                acts.xl(t)[..bpr * F::ELEMS / 4].as_ptr(),
            );
            let (eff, row) = (eff[..units].as_ptr(), &row[..bpr]);
            let at = |b: usize, c: usize| {
                let i = b * F::ELEMS + 32 * c;
                (x.add(i), xl.add(i / 4), eff.add(i / F::UNIT))
            };
            let mut acc = [_mm256_setzero_ps(); 4];
            for b0 in (0..whole).step_by(step) {
                for j in 0..step {
                    let b = b0 + j;
                    for c in 0..cpb {
                        let (v, e) = chunk::<F, D>(row.get_unchecked(b), c, at(b, c), signed);
                        let k = (j * cpb + c) % 4;
                        acc[k] = _mm256_fmadd_ps(v, e, acc[k]);
                    }
                }
            }
            for b in whole..bpr {
                for c in 0..cpb {
                    let (v, e) = chunk::<F, D>(row.get_unchecked(b), c, at(b, c), signed);
                    acc[c % 4] = _mm256_fmadd_ps(v, e, acc[c % 4]);
                }
            }
            let sum = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
            *ov = hsum(sum) + offsets;
        }
    }
}

/// The sum of the eight lanes, exact.
#[inline(always)]
unsafe fn hsum_i32(v: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
    let s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32::<1>(s)))
}

/// [`rows`] for integer-scale formats with 32-element units (Q4_K), in the order of the
/// scalar kernel's `gemv_int_scales`: per token, a unit's lane dots times its scale are summed
/// in integer lanes over a pair of units (tokens `..pairs`) or the block, then summed across
/// lanes (exact) and taken into the accumulator by one fused multiply-add with `d·dx`.
///
/// # Safety
/// As `rows`.
#[inline(always)]
unsafe fn rows_int_scales<F: SimdFormat, D: Dot>(
    w: &[F::Block],
    bpr: usize,
    acts: &Acts,
    pairs: usize,
    out: &mut [f32],
) {
    let upb = F::ELEMS / F::UNIT;
    debug_assert_eq!(F::UNIT, 32);
    let (mut sc, mut m) = (vec![0i32; bpr * upb], vec![0i32; bpr * upb]);
    let mut dd = vec![(0f32, 0f32); bpr];
    for (row, o) in w.chunks_exact(bpr).zip(out.chunks_exact_mut(acts.n)) {
        for (b, blk) in row.iter().enumerate() {
            let (s, mm) = (&mut sc[b * upb..][..upb], &mut m[b * upb..][..upb]);
            dd[b] = F::int_params(blk, |h| f16_to_f32(h), s, mm);
        }
        for (t, ov) in o.iter_mut().enumerate() {
            let (dx, sum, x) = (acts.d(t), acts.sum(t), acts.codes(t));
            let step = if t < pairs { 2 } else { upb };
            let (mut acc, mut acc_min) = (0f32, 0f32);
            for (b, blk) in row.iter().enumerate() {
                let xd = dx[b * upb];
                let (ds, dm) = (dd[b].0 * xd, dd[b].1 * xd);
                let mut isum = _mm256_setzero_si256();
                let mut imin = 0i32;
                for c in 0..upb {
                    let u = b * upb + c;
                    let xv = _mm256_loadu_si256(x[32 * u..][..32].as_ptr().cast());
                    let dot = D::dot(_mm256_setzero_si256(), F::codes32(blk, c), xv);
                    isum =
                        _mm256_add_epi32(isum, _mm256_mullo_epi32(dot, _mm256_set1_epi32(sc[u])));
                    imin += m[u] * sum[u];
                    if (c + 1) % step == 0 {
                        acc = (hsum_i32(isum) as f32).mul_add(ds, acc);
                        acc_min = (imin as f32).mul_add(dm, acc_min);
                        (isum, imin) = (_mm256_setzero_si256(), 0);
                    }
                }
            }
            *ov = acc - acc_min;
        }
    }
}

/// The f16 scale `d` and the f16 word after it (Q4_1/Q5_1's minimum `m`) of the legacy blocks
/// at byte offsets `idx` from `first`, for the lanes of `mask`; other lanes give 0.
#[inline]
#[target_feature(enable = "avx2,f16c")]
unsafe fn gather_dm(first: *const u8, idx: __m256i, mask: __m256i) -> (__m256, __m256) {
    let g = _mm256_mask_i32gather_epi32::<1>(_mm256_setzero_si256(), first.cast(), idx, mask);
    let (lo, hi) = (
        _mm256_and_si256(g, _mm256_set1_epi32(0xFFFF)),
        _mm256_srli_epi32::<16>(g),
    );
    // packus gives [d0-3, m0-3 | d4-7, m4-7]; the permute puts the d's, then the m's, together.
    let words = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packus_epi32(lo, hi));
    (
        _mm256_cvtph_ps(_mm256_castsi256_si128(words)),
        _mm256_cvtph_ps(_mm256_extracti128_si256::<1>(words)),
    )
}

/// One row of a legacy format (one unit per block) for every token: the scales of 8 blocks come
/// from one gather, fused with their dots, so the row is walked once per token. Lane-order
/// formats (Q8_0) keep a single accumulator, whose lanes are `matmul::lanes`' eight.
///
/// # Safety
/// As `rows`.
#[inline(always)]
unsafe fn legacy_row<F: SimdFormat, D: Dot>(
    row: &[F::Block],
    acts: &Acts,
    o: &mut [f32],
    signed: bool,
) {
    let bpr = row.len();
    let lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    let idx = _mm256_mullo_epi32(lanes, _mm256_set1_epi32(size_of::<F::Block>() as i32));
    for (t, ov) in o.iter_mut().enumerate() {
        let (dx, sx) = (&acts.d(t)[..bpr], &acts.s(t)[..bpr]);
        // Lengths settled here; the loops below index through raw pointers.
        let (x, xl) = (
            acts.codes(t)[..bpr * 32].as_ptr(),
            acts.xl(t)[..bpr * 8].as_ptr(),
        );
        let mut acc = [_mm256_setzero_ps(); 4];
        let mut offsets = _mm256_setzero_ps();
        let mut eff = [0f32; 8];
        for g in (0..bpr).step_by(8) {
            let nb = (bpr - g).min(8);
            // The last group may be short: masked lanes read nothing and give 0.
            let mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(nb as i32), lanes);
            let (d, m) = gather_dm(row[g..].as_ptr().cast(), idx, mask);
            let dxg = _mm256_maskload_ps(dx[g..].as_ptr(), mask);
            _mm256_storeu_ps(eff.as_mut_ptr(), _mm256_mul_ps(d, dxg));
            if F::BIAS == 0 {
                let sxg = _mm256_maskload_ps(sx[g..].as_ptr(), mask);
                offsets = _mm256_fmadd_ps(m, sxg, offsets);
            }
            let at = |j: usize| {
                (
                    x.add(32 * (g + j)),
                    xl.add(8 * (g + j)),
                    eff.as_ptr().add(j),
                )
            };
            if nb == 8 && !F::LANES {
                for j in 0..8 {
                    let (v, e) = chunk::<F, D>(row.get_unchecked(g + j), 0, at(j), signed);
                    acc[j % 4] = _mm256_fmadd_ps(v, e, acc[j % 4]);
                }
            } else {
                for j in 0..nb {
                    let (v, e) = chunk::<F, D>(row.get_unchecked(g + j), 0, at(j), signed);
                    acc[0] = _mm256_fmadd_ps(v, e, acc[0]);
                }
            }
        }
        if F::LANES {
            // One accumulator, its lanes folded once: `matmul::lanes`' order.
            *ov = hsum(acc[0]);
            continue;
        }
        let sum = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
        *ov = hsum(_mm256_add_ps(sum, offsets));
    }
}

/// # Safety
/// AVX2, FMA and F16C must be available.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn rows_avx2<F: SimdFormat>(
    w: &[F::Block],
    bpr: usize,
    acts: &Acts,
    pairs: usize,
    out: &mut [f32],
) {
    rows::<F, Maddubs>(w, bpr, acts, pairs, out)
}

/// # Safety
/// AVX2, FMA, F16C, AVX-512 F/BW/VL/VNNI must be available.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn rows_avx512<F: SimdFormat>(
    w: &[F::Block],
    bpr: usize,
    acts: &Acts,
    pairs: usize,
    out: &mut [f32],
) {
    rows::<F, Vnni>(w, bpr, acts, pairs, out)
}
