//! Scale (and min) searches shared by the K-quant quantizers.
//!
//! These follow the algorithms of llama.cpp's reference quantizers (the ones `llama-quantize`
//! runs without an importance matrix), step for step and in the same float operation order,
//! so that on the same input we land on the same codes: the error targets are llama.cpp's, and
//! identical bytes make that comparison trivial. Every accumulation is f32, sequential, with no
//! fused multiply-add, because that is what the C compiles to on a baseline x86-64 build.

/// Round half to even, as an `i32`.
///
/// Adding 1.5·2²³ pushes any |v| ≤ 2²² into the binade where the f32 spacing is exactly 1, so
/// the hardware's round-to-nearest-even does the rounding; subtracting it back is exact. This
/// is the rounding ggml uses everywhere in K-quant code. Outside that range the result is
/// still within 1 of `v` (and `as` saturates), and every caller clamps to a few bits anyway;
/// NaN becomes 0.
#[inline(always)]
pub(super) fn nearest_int(v: f32) -> i32 {
    const MAGIC: f32 = 12_582_912.0; // 1.5 * 2^23
    ((v + MAGIC) - MAGIC) as i32
}

/// Blocks whose largest magnitude is below this are treated as all-zero.
pub(super) const GROUP_MAX_EPS: f32 = 1e-15;

/// Parameters of the affine (scale + min) grid search, [`fit_affine`].
pub(super) struct AffineSearch {
    /// First trial `nmax` offset: trial `is` divides the range into `nmax + rmin + rdelta*is`.
    pub rmin: f32,
    pub rdelta: f32,
    /// Trials run for `is` in `0..=nstep`.
    pub nstep: u32,
    /// Weight absolute errors instead of squared ones (Q2_K's choice).
    pub use_mad: bool,
}

/// Fits `x ≈ scale·L - min` with `L` in `0..=nmax`, minimising the weighted error.
///
/// Start from the plain min/max grid, then try `nstep + 1` slightly stretched or squeezed
/// grids; for each one, rounding fixes `L` and a weighted least-squares solve gives the best
/// (scale, min) for those codes. Keep whichever trial has the smallest error. `min` is never
/// allowed to be positive (the offset only ever shifts values down), so blocks that are all
/// positive use a pure scale. Returns `(scale, min)`, with `min ≥ 0` meaning "subtract min".
/// This is ggml's `make_qkx2_quants`.
pub(super) fn fit_affine<const N: usize>(
    x: &[f32; N],
    weights: &[f32; N],
    nmax: u8,
    search: &AffineSearch,
    codes: &mut [u8; N],
) -> (f32, f32) {
    let mut min = x[0];
    let mut max = x[0];
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..N {
        min = if x[i] < min { x[i] } else { min };
        max = if x[i] > max { x[i] } else { max };
        sum_w += weights[i];
        sum_x += weights[i] * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        codes.fill(0);
        return (0.0, -min);
    }
    let nmax_f = f32::from(nmax);
    let quantize = |iscale: f32, min: f32, xi: f32| -> u8 {
        nearest_int(iscale * (xi - min)).clamp(0, i32::from(nmax)) as u8
    };
    let error = |scale: f32, min: f32, codes: &[u8; N]| -> f32 {
        let mut err = 0.0f32;
        for i in 0..N {
            let diff = scale * f32::from(codes[i]) + min - x[i];
            let diff = if search.use_mad {
                diff.abs()
            } else {
                diff * diff
            };
            err += weights[i] * diff;
        }
        err
    };

    let iscale = nmax_f / (max - min);
    let mut scale = 1.0 / iscale;
    for i in 0..N {
        codes[i] = quantize(iscale, min, x[i]);
    }
    let mut best_error = error(scale, min, codes);

    let mut trial = [0u8; N];
    for is in 0..=search.nstep {
        let iscale = (search.rmin + search.rdelta * is as f32 + nmax_f) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0.0f32, 0.0f32, 0.0f32);
        for i in 0..N {
            // `min` may have moved to a previous trial's least-squares fit.
            let l = quantize(iscale, min, x[i]);
            trial[i] = l;
            let (w, l) = (weights[i], f32::from(l));
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * x[i];
        }
        let det = sum_w * sum_l2 - sum_l * sum_l;
        if det > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
            if this_min > 0.0 {
                // A positive offset is not representable: refit the scale alone.
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let err = error(this_scale, this_min, &trial);
            if err < best_error {
                *codes = trial;
                best_error = err;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// Fits `x ≈ scale·L` with signed `L` in `-nmax..nmax`, weights `x²`, for Q3_K.
///
/// Start from the grid through the largest-magnitude value, then do up to five passes of
/// coordinate descent: move one code at a time to where the current least-squares scale wants
/// it, and keep the move if it raises `(Σw·x·L)² / Σw·L²`, i.e. lowers the weighted error.
/// Returns the scale; `codes` hold `L + nmax`. This is ggml's `make_q3_quants` with rmse on.
pub(super) fn fit_symmetric_descent<const N: usize>(
    x: &[f32; N],
    nmax: i8,
    codes: &mut [i8; N],
) -> f32 {
    let (max, amax) = signed_absmax(x);
    if amax < GROUP_MAX_EPS {
        codes.fill(0);
        return 0.0;
    }
    let (lo, hi) = (-i32::from(nmax), i32::from(nmax) - 1);
    let iscale = -f32::from(nmax) / max;
    let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
    for i in 0..N {
        let l = nearest_int(iscale * x[i]).clamp(lo, hi);
        codes[i] = l as i8;
        let (w, l) = (x[i] * x[i], l as f32);
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    for _ in 0..5 {
        let mut changed = false;
        for i in 0..N {
            let w = x[i] * x[i];
            let old = f32::from(codes[i]);
            let mut slx = sumlx - w * x[i] * old;
            if slx > 0.0 {
                let mut sl2 = suml2 - w * old * old;
                let new = nearest_int(x[i] * sl2 / slx).clamp(lo, hi);
                if new != i32::from(codes[i]) {
                    let new_f = new as f32;
                    slx += w * x[i] * new_f;
                    sl2 += w * new_f * new_f;
                    // Compare slx²/sl2 with sumlx²/suml2 without dividing.
                    if sl2 > 0.0 && slx * slx * suml2 > sumlx * sumlx * sl2 {
                        codes[i] = new as i8;
                        sumlx = slx;
                        suml2 = sl2;
                        changed = true;
                    }
                }
            }
        }
        if !changed {
            break;
        }
    }
    for c in codes.iter_mut() {
        *c += nmax;
    }
    if suml2 > 0.0 {
        sumlx / suml2
    } else {
        0.0
    }
}

/// Fits `x ≈ scale·L` with signed `L` in `-nmax..nmax`, weights `x²`, for Q6_K.
///
/// Tries the grid through the largest-magnitude value and 18 neighbours (`nmax ± 0.1·k`),
/// each with its least-squares scale, keeping the one with the highest `(Σw·x·L)² / Σw·L²`.
/// Returns the scale; `codes` hold `L + nmax`. This is ggml's `make_qx_quants`, rmse type 1.
pub(super) fn fit_symmetric_grid<const N: usize>(
    x: &[f32; N],
    nmax: i8,
    codes: &mut [i8; N],
) -> f32 {
    let (max, amax) = signed_absmax(x);
    if amax < GROUP_MAX_EPS {
        codes.fill(0);
        return 0.0;
    }
    let (lo, hi) = (-i32::from(nmax), i32::from(nmax) - 1);
    let nmax_f = f32::from(nmax);
    let sums = |iscale: f32| -> (f32, f32) {
        let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
        for &xi in x {
            let l = nearest_int(iscale * xi).clamp(lo, hi) as f32;
            let w = xi * xi;
            sumlx += w * xi * l;
            suml2 += w * l * l;
        }
        (sumlx, suml2)
    };
    let fill = |iscale: f32, codes: &mut [i8; N]| {
        for (c, &xi) in codes.iter_mut().zip(x) {
            *c = (nearest_int(iscale * xi).clamp(lo, hi) + i32::from(nmax)) as i8;
        }
    };

    let iscale = -nmax_f / max;
    fill(iscale, codes);
    let (sumlx, suml2) = sums(iscale);
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for is in (-9i32..=9).filter(|&is| is != 0) {
        let iscale = -(nmax_f + 0.1 * is as f32) / max;
        let (sumlx, suml2) = sums(iscale);
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            fill(iscale, codes);
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// The value of largest magnitude (first one on ties) and that magnitude.
fn signed_absmax(x: &[f32]) -> (f32, f32) {
    let (mut max, mut amax) = (0.0f32, 0.0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    (max, amax)
}
