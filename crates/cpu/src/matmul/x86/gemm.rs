//! The prefill kernel. Weights are repacked once per call into groups of `G` rows (16 for
//! AVX-512, 8 for AVX2) in which one vector holds codes `4k..4k+4` of a chunk for every row of
//! the group. A byte dot against a broadcast of 4 activation bytes then advances `G` rows at
//! once, with no horizontal sums, and each weight vector loaded serves a tile of up to 8
//! (AVX-512) or 4 (AVX2) tokens. Per unit and token a tile spends one convert and two FMAs.
//!
//! Tasks own runs of tokens, so each writes whole output rows; within a task, groups are
//! visited a block at a time so the block stays in L2 across the task's token tiles.

use super::super::act::Acts;
use super::super::{chunk_len, Isa};
use super::SimdFormat;
use rayon::prelude::*;
use std::arch::x86_64::*;

/// Packed weight bytes a task keeps hot while it sweeps its tokens.
const BLOCK_BYTES: usize = 256 << 10;

struct Packed {
    /// Rows per group, one vector lane each.
    g: usize,
    groups: usize,
    /// 32-element chunks and `UNIT`-element units per row.
    chunks: usize,
    units: usize,
    /// `[group][chunk][k: 8][row: g]`, 4 codes each.
    codes: Vec<u32>,
    /// `[group][unit][row: g]`.
    scale: Vec<f32>,
    off: Vec<f32>,
    /// Integer-scale formats only (else empty): `[group][unit][row: g]` scales and mins
    /// (the mins as f32, exact), and `[group][block][row: g]` the blocks' `d` and `dmin`.
    isc: Vec<i32>,
    imin: Vec<f32>,
    d: Vec<f32>,
    dmin: Vec<f32>,
}

fn pack<F: SimdFormat>(w: &[F::Block], rows: usize, bpr: usize, g: usize, signed: bool) -> Packed {
    let groups = rows.div_ceil(g);
    let (chunks, units) = (bpr * F::ELEMS / 32, bpr * F::ELEMS / F::UNIT);
    let mut p = Packed {
        g,
        groups,
        chunks,
        units,
        codes: vec![0; groups * chunks * 8 * g],
        scale: vec![0.0; groups * units * g],
        off: vec![0.0; groups * units * g],
        isc: Vec::new(),
        imin: Vec::new(),
        d: Vec::new(),
        dmin: Vec::new(),
    };
    if F::INT_SCALES {
        pack_int_scales::<F>(w, bpr, g, &mut p);
    }
    p.codes
        .par_chunks_mut(chunks * 8 * g)
        .zip(p.scale.par_chunks_mut(units * g))
        .zip(p.off.par_chunks_mut(units * g))
        .zip(w.par_chunks(g * bpr))
        // SAFETY: only reached from levels with AVX2 and F16C (`gemm`'s caller checked).
        .for_each(|(((c, s), o), wg)| unsafe { pack_group::<F>(wg, bpr, g, signed, c, s, o) });
    p
}

/// The integer scales, mins, `d` and `dmin` of an integer-scale format, in `p`'s layout.
fn pack_int_scales<F: SimdFormat>(w: &[F::Block], bpr: usize, g: usize, p: &mut Packed) {
    let (upb, units) = (F::ELEMS / F::UNIT, p.units);
    p.isc = vec![0; p.groups * units * g];
    p.imin = vec![0.0; p.groups * units * g];
    p.d = vec![0.0; p.groups * bpr * g];
    p.dmin = vec![0.0; p.groups * bpr * g];
    let (mut sc, mut m) = (vec![0i32; upb], vec![0i32; upb]);
    let h = |bits: u16| half::f16::from_bits(bits).to_f32();
    for (r, row) in w.chunks_exact(bpr).enumerate() {
        let (grp, i) = (r / g, r % g);
        for (b, blk) in row.iter().enumerate() {
            let (d, dmin) = F::int_params(blk, h, &mut sc, &mut m);
            p.d[(grp * bpr + b) * g + i] = d;
            p.dmin[(grp * bpr + b) * g + i] = dmin;
            for j in 0..upb {
                let u = grp * units + b * upb + j;
                p.isc[u * g + i] = sc[j];
                p.imin[u * g + i] = m[j] as f32;
            }
        }
    }
}

/// Packs up to `g` rows; missing rows keep zero codes and scales.
#[target_feature(enable = "avx2,f16c")]
unsafe fn pack_group<F: SimdFormat>(
    w: &[F::Block],
    bpr: usize,
    g: usize,
    signed: bool,
    codes: &mut [u32],
    scale: &mut [f32],
    off: &mut [f32],
) {
    let units = bpr * F::ELEMS / F::UNIT;
    let (mut s, mut o) = (vec![0f32; units], vec![0f32; units]);
    let mut dwords = [0u32; 8];
    for (i, row) in w.chunks_exact(bpr).enumerate() {
        F::params_run(row, &mut s, &mut o);
        for u in 0..units {
            scale[u * g + i] = s[u];
            off[u * g + i] = o[u];
        }
        for (b, blk) in row.iter().enumerate() {
            for c in 0..F::ELEMS / 32 {
                let mut v = F::codes32(blk, c);
                if signed {
                    v = _mm256_xor_si256(v, _mm256_set1_epi8(i8::MIN));
                }
                _mm256_storeu_si256(dwords.as_mut_ptr().cast(), v);
                let chunk = b * (F::ELEMS / 32) + c;
                for (k, &d) in dwords.iter().enumerate() {
                    codes[(chunk * 8 + k) * g + i] = d;
                }
            }
        }
    }
}

pub(super) fn gemm<F: SimdFormat>(
    isa: Isa,
    w: &[F::Block],
    rows: usize,
    bpr: usize,
    acts: &Acts,
    pairs: usize,
    out: &mut [f32],
) {
    let (g, tile) = if isa == Isa::Avx512 { (16, 8) } else { (8, 4) };
    let signed = F::WIDE && isa != Isa::Avx512;
    let p = pack::<F>(w, rows, bpr, g, signed);
    let per_task = chunk_len(acts.n, tile, 2).next_multiple_of(tile);
    if F::INT_SCALES {
        out.par_chunks_mut(per_task * rows)
            .enumerate()
            // SAFETY: `isa` was detected on this CPU by `matmul_with`'s caller.
            .for_each(|(i, o)| unsafe {
                let t0 = i * per_task;
                let nt = o.len() / rows;
                // Tokens before `pairs` sum per pair of units, the rest per block.
                let split = pairs.clamp(t0, t0 + nt) - t0;
                let (op, ob) = o.split_at_mut(split * rows);
                if isa == Isa::Avx512 {
                    int_task_avx512::<true>(&p, acts, t0, rows, op);
                    int_task_avx512::<false>(&p, acts, t0 + split, rows, ob);
                } else {
                    int_task_avx2::<true>(&p, acts, t0, rows, op);
                    int_task_avx2::<false>(&p, acts, t0 + split, rows, ob);
                }
            });
        return;
    }
    out.par_chunks_mut(per_task * rows)
        .enumerate()
        .for_each(|(i, o)| {
            let t0 = i * per_task;
            // Biased codes start their dots from `-BIAS·Σx`; signed ones need no correction.
            let biased = F::BIAS != 0 && !signed;
            // SAFETY (all arms): `isa` was detected on this CPU by `matmul_with`'s caller.
            unsafe {
                match (isa, F::UNIT, biased, signed) {
                    (Isa::Avx512, 32, false, _) => task_avx512::<32, false>(&p, acts, t0, rows, o),
                    (Isa::Avx512, 32, true, _) => task_avx512::<32, true>(&p, acts, t0, rows, o),
                    (Isa::Avx512, _, false, _) => task_avx512::<16, false>(&p, acts, t0, rows, o),
                    (Isa::Avx512, _, true, _) => task_avx512::<16, true>(&p, acts, t0, rows, o),
                    (_, _, _, true) => task_avx2::<32, false, true>(&p, acts, t0, rows, o),
                    (_, 32, false, _) => task_avx2::<32, false, false>(&p, acts, t0, rows, o),
                    (_, 32, true, _) => task_avx2::<32, true, false>(&p, acts, t0, rows, o),
                    (_, _, false, _) => task_avx2::<16, false, false>(&p, acts, t0, rows, o),
                    (_, _, true, _) => task_avx2::<16, true, false>(&p, acts, t0, rows, o),
                }
            }
        });
}

/// Group blocks of about `BLOCK_BYTES`, swept once per token tile.
fn group_blocks(p: &Packed) -> impl Iterator<Item = std::ops::Range<usize>> {
    let per = (BLOCK_BYTES / (p.chunks * 32 * p.g)).max(1);
    let groups = p.groups;
    (0..groups)
        .step_by(per)
        .map(move |g0| g0..(g0 + per).min(groups))
}

/// Tokens `t0..` of `out` (`[tokens][rows]`), all rows.
#[target_feature(enable = "avx2,fma,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn task_avx512<const UNIT: usize, const BIASED: bool>(
    p: &Packed,
    a: &Acts,
    t0: usize,
    rows: usize,
    out: &mut [f32],
) {
    let nt = out.len() / rows;
    for block in group_blocks(p) {
        for t in (0..nt).step_by(8) {
            let o = &mut out[t * rows..];
            for g in block.clone() {
                match nt - t {
                    1 => tile16::<1, UNIT, BIASED>(p, g, a, t0 + t, rows, o),
                    2 => tile16::<2, UNIT, BIASED>(p, g, a, t0 + t, rows, o),
                    3 => tile16::<3, UNIT, BIASED>(p, g, a, t0 + t, rows, o),
                    4 => tile16::<4, UNIT, BIASED>(p, g, a, t0 + t, rows, o),
                    5 => tile16::<5, UNIT, BIASED>(p, g, a, t0 + t, rows, o),
                    6 => tile16::<6, UNIT, BIASED>(p, g, a, t0 + t, rows, o),
                    7 => tile16::<7, UNIT, BIASED>(p, g, a, t0 + t, rows, o),
                    _ => tile16::<8, UNIT, BIASED>(p, g, a, t0 + t, rows, o),
                }
            }
        }
    }
}

/// 16 rows (group `g`) × `T` tokens from `t0`, into `out` (`[T..][rows]`). `BIASED`: dots
/// start from `-BIAS·Σx` and there are no offsets; otherwise they start from 0 and offsets
/// multiply `d·Σx`.
#[inline]
#[target_feature(enable = "avx2,fma,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn tile16<const T: usize, const UNIT: usize, const BIASED: bool>(
    p: &Packed,
    g: usize,
    a: &Acts,
    t0: usize,
    rows: usize,
    out: &mut [f32],
) {
    let (cw, uw) = (p.chunks * 8 * 16, p.units * 16);
    let (codes, scale, off) = (
        &p.codes[g * cw..][..cw],
        &p.scale[g * uw..][..uw],
        &p.off[g * uw..][..uw],
    );
    // Bounds are settled here (each slice has the length the loops index up to), so the hot
    // loops read through raw pointers.
    let x: [*const i8; T] = std::array::from_fn(|t| a.codes(t0 + t)[..p.chunks * 32].as_ptr());
    let dx: [*const f32; T] = std::array::from_fn(|t| a.d(t0 + t)[..p.units].as_ptr());
    let sx: [*const f32; T] = std::array::from_fn(|t| a.s(t0 + t)[..p.units].as_ptr());
    let xb: [*const i32; T] = std::array::from_fn(|t| a.xb(t0 + t)[..p.units].as_ptr());
    let mut acc = [_mm512_setzero_ps(); T];
    for c in 0..p.chunks {
        for h in 0..32 / UNIT {
            let u = c * (32 / UNIT) + h;
            let mut dots: [__m512i; T] = std::array::from_fn(|t| {
                if BIASED {
                    _mm512_set1_epi32(*xb[t].add(u))
                } else {
                    _mm512_setzero_si512()
                }
            });
            for k in h * UNIT / 4..(h + 1) * UNIT / 4 {
                let wv = _mm512_loadu_si512(codes.as_ptr().add((c * 8 + k) * 16).cast());
                for t in 0..T {
                    let xv =
                        _mm512_set1_epi32(x[t].add(32 * c + 4 * k).cast::<i32>().read_unaligned());
                    dots[t] = _mm512_dpbusd_epi32(dots[t], wv, xv);
                }
            }
            let sc = _mm512_loadu_ps(scale.as_ptr().add(u * 16));
            let of = _mm512_loadu_ps(off.as_ptr().add(u * 16));
            for t in 0..T {
                let s = _mm512_mul_ps(sc, _mm512_set1_ps(*dx[t].add(u)));
                acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dots[t]), s, acc[t]);
                if !BIASED {
                    acc[t] = _mm512_fmadd_ps(of, _mm512_set1_ps(*sx[t].add(u)), acc[t]);
                }
            }
        }
    }
    let r0 = g * 16;
    let valid = (rows - r0).min(16);
    for (t, v) in acc.iter().enumerate() {
        let mut lanes = [0f32; 16];
        _mm512_storeu_ps(lanes.as_mut_ptr(), *v);
        out[t * rows + r0..][..valid].copy_from_slice(&lanes[..valid]);
    }
}

/// Tokens `t0..` of `out` (`[tokens][rows]`), all rows; `SIGNED` for Q8_0's raw codes.
#[target_feature(enable = "avx2,fma")]
unsafe fn task_avx2<const UNIT: usize, const BIASED: bool, const SIGNED: bool>(
    p: &Packed,
    a: &Acts,
    t0: usize,
    rows: usize,
    out: &mut [f32],
) {
    let nt = out.len() / rows;
    for block in group_blocks(p) {
        for t in (0..nt).step_by(4) {
            let o = &mut out[t * rows..];
            for g in block.clone() {
                match nt - t {
                    1 => tile8::<1, UNIT, BIASED, SIGNED>(p, g, a, t0 + t, rows, o),
                    2 => tile8::<2, UNIT, BIASED, SIGNED>(p, g, a, t0 + t, rows, o),
                    3 => tile8::<3, UNIT, BIASED, SIGNED>(p, g, a, t0 + t, rows, o),
                    _ => tile8::<4, UNIT, BIASED, SIGNED>(p, g, a, t0 + t, rows, o),
                }
            }
        }
    }
}

/// 8 rows (group `g`) × `T` tokens from `t0`, into `out` (`[T..][rows]`). `BIASED` as in
/// `tile16`; `SIGNED` codes (Q8_0's, as stored) are dotted exactly, with no correction.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn tile8<const T: usize, const UNIT: usize, const BIASED: bool, const SIGNED: bool>(
    p: &Packed,
    g: usize,
    a: &Acts,
    t0: usize,
    rows: usize,
    out: &mut [f32],
) {
    let (cw, uw) = (p.chunks * 8 * 8, p.units * 8);
    let (codes, scale, off) = (
        &p.codes[g * cw..][..cw],
        &p.scale[g * uw..][..uw],
        &p.off[g * uw..][..uw],
    );
    // As in `tile16`: slice lengths checked here, raw reads below.
    let x: [*const i8; T] = std::array::from_fn(|t| a.codes(t0 + t)[..p.chunks * 32].as_ptr());
    let dx: [*const f32; T] = std::array::from_fn(|t| a.d(t0 + t)[..p.units].as_ptr());
    let sx: [*const f32; T] = std::array::from_fn(|t| a.s(t0 + t)[..p.units].as_ptr());
    let xb: [*const i32; T] = std::array::from_fn(|t| a.xb(t0 + t)[..p.units].as_ptr());
    let ones = _mm256_set1_epi16(1);
    let mut acc = [_mm256_setzero_ps(); T];
    for c in 0..p.chunks {
        for h in 0..32 / UNIT {
            let u = c * (32 / UNIT) + h;
            let mut dots: [__m256i; T] = std::array::from_fn(|t| {
                if BIASED {
                    _mm256_set1_epi32(*xb[t].add(u))
                } else {
                    _mm256_setzero_si256()
                }
            });
            for k in h * UNIT / 4..(h + 1) * UNIT / 4 {
                let wv = _mm256_loadu_si256(codes.as_ptr().add((c * 8 + k) * 8).cast());
                let wa = if SIGNED { _mm256_abs_epi8(wv) } else { wv };
                for t in 0..T {
                    let xv =
                        _mm256_set1_epi32(x[t].add(32 * c + 4 * k).cast::<i32>().read_unaligned());
                    let xv = if SIGNED { _mm256_sign_epi8(xv, wv) } else { xv };
                    let pairs = _mm256_maddubs_epi16(wa, xv);
                    dots[t] = _mm256_add_epi32(dots[t], _mm256_madd_epi16(pairs, ones));
                }
            }
            let sc = _mm256_loadu_ps(scale.as_ptr().add(u * 8));
            let of = _mm256_loadu_ps(off.as_ptr().add(u * 8));
            for t in 0..T {
                let s = _mm256_mul_ps(sc, _mm256_set1_ps(*dx[t].add(u)));
                acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dots[t]), s, acc[t]);
                if !SIGNED && !BIASED {
                    acc[t] = _mm256_fmadd_ps(of, _mm256_set1_ps(*sx[t].add(u)), acc[t]);
                }
            }
        }
    }
    let r0 = g * 8;
    let valid = (rows - r0).min(8);
    for (t, v) in acc.iter().enumerate() {
        let mut lanes = [0f32; 8];
        _mm256_storeu_ps(lanes.as_mut_ptr(), *v);
        out[t * rows + r0..][..valid].copy_from_slice(&lanes[..valid]);
    }
}

/// Tokens `t0..` of `out` (`[tokens][rows]`), all rows, of an integer-scale format; `PAIRS`
/// sums per pair of units, else per block.
#[target_feature(enable = "avx2,fma,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn int_task_avx512<const PAIRS: bool>(
    p: &Packed,
    a: &Acts,
    t0: usize,
    rows: usize,
    out: &mut [f32],
) {
    let nt = out.len() / rows;
    for block in group_blocks(p) {
        for t in (0..nt).step_by(8) {
            let o = &mut out[t * rows..];
            for g in block.clone() {
                match nt - t {
                    1 => int_tile16::<1, PAIRS>(p, g, a, t0 + t, rows, o),
                    2 => int_tile16::<2, PAIRS>(p, g, a, t0 + t, rows, o),
                    3 => int_tile16::<3, PAIRS>(p, g, a, t0 + t, rows, o),
                    4 => int_tile16::<4, PAIRS>(p, g, a, t0 + t, rows, o),
                    5 => int_tile16::<5, PAIRS>(p, g, a, t0 + t, rows, o),
                    6 => int_tile16::<6, PAIRS>(p, g, a, t0 + t, rows, o),
                    7 => int_tile16::<7, PAIRS>(p, g, a, t0 + t, rows, o),
                    _ => int_tile16::<8, PAIRS>(p, g, a, t0 + t, rows, o),
                }
            }
        }
    }
}

/// 16 rows × `T` tokens of an integer-scale format with 32-element units (Q4_K): per unit a
/// `vpdpbusd` dot times the unit's integer scale (`vpmulld`), summed in integers over a pair of
/// units (`PAIRS`) or the block, converted and multiplied into the accumulator by `d·dx`; the
/// mins' `Σ m·Σx` (exact in f32) go into a second accumulator by `dmin·dx`.
#[inline]
#[target_feature(enable = "avx2,fma,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn int_tile16<const T: usize, const PAIRS: bool>(
    p: &Packed,
    g: usize,
    a: &Acts,
    t0: usize,
    rows: usize,
    out: &mut [f32],
) {
    let bpr = p.chunks / 8;
    let (cw, uw, bw) = (p.chunks * 8 * 16, p.units * 16, bpr * 16);
    let codes = &p.codes[g * cw..][..cw];
    let (isc, imin) = (&p.isc[g * uw..][..uw], &p.imin[g * uw..][..uw]);
    let (dw, dmw) = (&p.d[g * bw..][..bw], &p.dmin[g * bw..][..bw]);
    // As in `tile16`: slice lengths checked here, raw reads below.
    let x: [*const i8; T] = std::array::from_fn(|t| a.codes(t0 + t)[..p.chunks * 32].as_ptr());
    let dx: [*const f32; T] = std::array::from_fn(|t| a.d(t0 + t)[..p.units].as_ptr());
    let sx: [*const i32; T] = std::array::from_fn(|t| a.sum(t0 + t)[..p.units].as_ptr());
    let mut acc = [_mm512_setzero_ps(); T];
    let mut acc_min = [_mm512_setzero_ps(); T];
    for b in 0..bpr {
        let (d, dmin) = (
            _mm512_loadu_ps(dw.as_ptr().add(b * 16)),
            _mm512_loadu_ps(dmw.as_ptr().add(b * 16)),
        );
        let mut isum = [_mm512_setzero_si512(); T];
        let mut msum = [_mm512_setzero_ps(); T];
        for pair in 0..4 {
            for h in 0..2 {
                let u = b * 8 + pair * 2 + h;
                let mut dots = [_mm512_setzero_si512(); T];
                for k in 0..8 {
                    let wv = _mm512_loadu_si512(codes.as_ptr().add((u * 8 + k) * 16).cast());
                    for t in 0..T {
                        let xv = _mm512_set1_epi32(
                            x[t].add(32 * u + 4 * k).cast::<i32>().read_unaligned(),
                        );
                        dots[t] = _mm512_dpbusd_epi32(dots[t], wv, xv);
                    }
                }
                let sc = _mm512_loadu_si512(isc.as_ptr().add(u * 16).cast());
                let m = _mm512_loadu_ps(imin.as_ptr().add(u * 16));
                for t in 0..T {
                    isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(dots[t], sc));
                    let s = _mm512_set1_ps(*sx[t].add(u) as f32);
                    msum[t] = _mm512_fmadd_ps(m, s, msum[t]);
                }
            }
            if PAIRS {
                for t in 0..T {
                    let xd = _mm512_set1_ps(*dx[t].add(b * 8));
                    let (ds, dm) = (_mm512_mul_ps(d, xd), _mm512_mul_ps(dmin, xd));
                    acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), ds, acc[t]);
                    acc_min[t] = _mm512_fmadd_ps(msum[t], dm, acc_min[t]);
                    isum[t] = _mm512_setzero_si512();
                    msum[t] = _mm512_setzero_ps();
                }
            }
        }
        if !PAIRS {
            for t in 0..T {
                let xd = _mm512_set1_ps(*dx[t].add(b * 8));
                let (ds, dm) = (_mm512_mul_ps(d, xd), _mm512_mul_ps(dmin, xd));
                acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[t]), ds, acc[t]);
                acc_min[t] = _mm512_fmadd_ps(msum[t], dm, acc_min[t]);
            }
        }
    }
    let r0 = g * 16;
    let valid = (rows - r0).min(16);
    for t in 0..T {
        let mut lanes = [0f32; 16];
        _mm512_storeu_ps(lanes.as_mut_ptr(), _mm512_sub_ps(acc[t], acc_min[t]));
        out[t * rows + r0..][..valid].copy_from_slice(&lanes[..valid]);
    }
}

/// [`int_task_avx512`] on AVX2: groups of 8 rows, tiles of up to 4 tokens.
#[target_feature(enable = "avx2,fma")]
unsafe fn int_task_avx2<const PAIRS: bool>(
    p: &Packed,
    a: &Acts,
    t0: usize,
    rows: usize,
    out: &mut [f32],
) {
    let nt = out.len() / rows;
    for block in group_blocks(p) {
        for t in (0..nt).step_by(4) {
            let o = &mut out[t * rows..];
            for g in block.clone() {
                match nt - t {
                    1 => int_tile8::<1, PAIRS>(p, g, a, t0 + t, rows, o),
                    2 => int_tile8::<2, PAIRS>(p, g, a, t0 + t, rows, o),
                    3 => int_tile8::<3, PAIRS>(p, g, a, t0 + t, rows, o),
                    _ => int_tile8::<4, PAIRS>(p, g, a, t0 + t, rows, o),
                }
            }
        }
    }
}

/// [`int_tile16`] on AVX2 (8 rows; `vpmaddubsw` + `vpmaddwd` dots, exact for codes < 128).
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn int_tile8<const T: usize, const PAIRS: bool>(
    p: &Packed,
    g: usize,
    a: &Acts,
    t0: usize,
    rows: usize,
    out: &mut [f32],
) {
    let bpr = p.chunks / 8;
    let (cw, uw, bw) = (p.chunks * 8 * 8, p.units * 8, bpr * 8);
    let codes = &p.codes[g * cw..][..cw];
    let (isc, imin) = (&p.isc[g * uw..][..uw], &p.imin[g * uw..][..uw]);
    let (dw, dmw) = (&p.d[g * bw..][..bw], &p.dmin[g * bw..][..bw]);
    let x: [*const i8; T] = std::array::from_fn(|t| a.codes(t0 + t)[..p.chunks * 32].as_ptr());
    let dx: [*const f32; T] = std::array::from_fn(|t| a.d(t0 + t)[..p.units].as_ptr());
    let sx: [*const i32; T] = std::array::from_fn(|t| a.sum(t0 + t)[..p.units].as_ptr());
    let ones = _mm256_set1_epi16(1);
    let mut acc = [_mm256_setzero_ps(); T];
    let mut acc_min = [_mm256_setzero_ps(); T];
    for b in 0..bpr {
        let (d, dmin) = (
            _mm256_loadu_ps(dw.as_ptr().add(b * 8)),
            _mm256_loadu_ps(dmw.as_ptr().add(b * 8)),
        );
        let mut isum = [_mm256_setzero_si256(); T];
        let mut msum = [_mm256_setzero_ps(); T];
        for pair in 0..4 {
            for h in 0..2 {
                let u = b * 8 + pair * 2 + h;
                let mut dots = [_mm256_setzero_si256(); T];
                for k in 0..8 {
                    let wv = _mm256_loadu_si256(codes.as_ptr().add((u * 8 + k) * 8).cast());
                    for t in 0..T {
                        let xv = _mm256_set1_epi32(
                            x[t].add(32 * u + 4 * k).cast::<i32>().read_unaligned(),
                        );
                        let pairs16 = _mm256_maddubs_epi16(wv, xv);
                        dots[t] = _mm256_add_epi32(dots[t], _mm256_madd_epi16(pairs16, ones));
                    }
                }
                let sc = _mm256_loadu_si256(isc.as_ptr().add(u * 8).cast());
                let m = _mm256_loadu_ps(imin.as_ptr().add(u * 8));
                for t in 0..T {
                    isum[t] = _mm256_add_epi32(isum[t], _mm256_mullo_epi32(dots[t], sc));
                    let s = _mm256_set1_ps(*sx[t].add(u) as f32);
                    msum[t] = _mm256_fmadd_ps(m, s, msum[t]);
                }
            }
            if PAIRS {
                for t in 0..T {
                    let xd = _mm256_set1_ps(*dx[t].add(b * 8));
                    let (ds, dm) = (_mm256_mul_ps(d, xd), _mm256_mul_ps(dmin, xd));
                    acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), ds, acc[t]);
                    acc_min[t] = _mm256_fmadd_ps(msum[t], dm, acc_min[t]);
                    isum[t] = _mm256_setzero_si256();
                    msum[t] = _mm256_setzero_ps();
                }
            }
        }
        if !PAIRS {
            for t in 0..T {
                let xd = _mm256_set1_ps(*dx[t].add(b * 8));
                let (ds, dm) = (_mm256_mul_ps(d, xd), _mm256_mul_ps(dmin, xd));
                acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), ds, acc[t]);
                acc_min[t] = _mm256_fmadd_ps(msum[t], dm, acc_min[t]);
            }
        }
    }
    let r0 = g * 8;
    let valid = (rows - r0).min(8);
    for t in 0..T {
        let mut lanes = [0f32; 8];
        _mm256_storeu_ps(lanes.as_mut_ptr(), _mm256_sub_ps(acc[t], acc_min[t]));
        out[t * rows + r0..][..valid].copy_from_slice(&lanes[..valid]);
    }
}
