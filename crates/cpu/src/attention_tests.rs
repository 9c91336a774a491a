//! Attention against plain f64 references: the f32 and one-chunk paths, every cache type,
//! sliding windows and sinks.

use super::*;
use crate::kv::KvType;

/// The cached key (value) element, rotated back where the cache rotates.
fn kv_k(kv: &LayerKv, g: usize, p: usize, i: usize) -> f64 {
    let mut rows = vec![0f32; (p + 1) * kv.head_dim];
    kv.keys_f32(g, p + 1, &mut rows);
    let row = &mut rows[p * kv.head_dim..];
    if let Some(n) = kv.k_rot {
        hadamard::rotate(row, n);
    }
    row[i] as f64
}

fn kv_v(kv: &LayerKv, g: usize, p: usize, i: usize) -> f64 {
    let mut rows = vec![0f32; (p + 1) * kv.head_dim];
    kv.values_f32(g, p + 1, &mut rows);
    let row = &mut rows[p * kv.head_dim..];
    if let Some(n) = kv.v_rot {
        hadamard::rotate(row, n);
    }
    row[i] as f64
}

/// Plain f64 attention over the cached values.
fn reference(q: &[f32], kv: &LayerKv, positions: &[u32], s: AttnShape) -> Vec<f64> {
    reference_ext(q, kv, positions, s, None, None)
}

/// [`reference`] over the last `window` positions, with a sink logit per head in the softmax.
fn reference_ext(
    q: &[f32],
    kv: &LayerKv,
    positions: &[u32],
    s: AttnShape,
    window: Option<usize>,
    sinks: Option<&[f32]>,
) -> Vec<f64> {
    let qw = s.n_head * s.head_dim;
    let mut out = vec![0.0; q.len()];
    for (t, &pos) in positions.iter().enumerate() {
        let first = window.map_or(0, |w| (pos as usize + 1).saturating_sub(w));
        for h in 0..s.n_head {
            let g = h / (s.n_head / s.n_kv_head);
            let qh = &q[t * qw + h * s.head_dim..][..s.head_dim];
            let scores: Vec<f64> = (first..=pos as usize)
                .map(|p| {
                    (0..s.head_dim)
                        .map(|i| qh[i] as f64 * kv_k(kv, g, p, i))
                        .sum::<f64>()
                        / (s.head_dim as f64).sqrt()
                })
                .collect();
            let sink = sinks.map(|x| x[h] as f64);
            let m = scores.iter().cloned().chain(sink).fold(f64::MIN, f64::max);
            let z: f64 = scores.iter().chain(&sink).map(|x| (x - m).exp()).sum();
            for (j, sc) in scores.iter().enumerate() {
                let w = (sc - m).exp() / z;
                for i in 0..s.head_dim {
                    out[t * qw + h * s.head_dim + i] += w * kv_v(kv, g, first + j, i);
                }
            }
        }
    }
    out
}

/// Sliding windows and sinks on both paths (f32 cache and 70 rows: the f32 path; an f16 cache
/// and 6 rows: ggml's one-chunk path with its f16 rounding), against the f64 reference. The
/// sinks are large enough to take the maximum in some rows and small in others.
#[test]
fn windows_and_sinks_match_f64_reference() {
    let s = AttnShape {
        n_head: 4,
        n_kv_head: 2,
        head_dim: 64,
        kq_scale: None,
    };
    let val = |i: usize| ((i * 7919 % 997) as f32 / 997.0 - 0.5) * 3.0;
    let sinks = [3.0f32, -2.0, 0.5, 8.0];
    for (ty, n, bound) in [(KvType::F32, 70, 1e-5), (KvType::F16, 6, 1e-2)] {
        let k: Vec<f32> = (0..n * 128).map(val).collect();
        let v: Vec<f32> = (0..n * 128).map(|i| val(i + 13)).collect();
        let q: Vec<f32> = (0..n * 256).map(|i| val(i + 29)).collect();
        let positions: Vec<u32> = (0..n as u32).collect();
        let mut kv = LayerKv::new(ty, n, 2, 64);
        kv.store(0, &k, &v);
        for (window, sink) in [
            (Some(4), None),
            (None, Some(&sinks[..])),
            (Some(5), Some(&sinks[..])),
        ] {
            let mut out = vec![0.0; q.len()];
            attention(
                &CpuPlan::detect(),
                &q,
                &kv,
                &positions,
                s,
                window,
                sink,
                &mut out,
            );
            let want = reference_ext(&q, &kv, &positions, s, window, sink);
            let worst = out
                .iter()
                .zip(&want)
                .map(|(a, b)| (*a as f64 - b).abs())
                .fold(0f64, f64::max);
            assert!(worst < bound, "{ty} {window:?} {sink:?}: {worst}");
            // Each feature changes the result: against plain attention it is far off.
            let plain = reference(&q, &kv, &positions, s);
            let moved = out
                .iter()
                .zip(&plain)
                .map(|(a, b)| (*a as f64 - b).abs())
                .fold(0f64, f64::max);
            assert!(
                moved > 1e-2,
                "{ty} {window:?} {sink:?}: no effect ({moved})"
            );
        }
    }
}

#[test]
fn causal_gqa_matches_f64_reference() {
    let s = AttnShape {
        n_head: 4,
        n_kv_head: 2,
        head_dim: 8,
        kq_scale: None,
    };
    let n = 5;
    let val = |i: usize| ((i * 7919 % 97) as f32 / 97.0 - 0.5) * 2.0;
    let k: Vec<f32> = (0..n * 16).map(val).collect();
    let v: Vec<f32> = (0..n * 16).map(|i| val(i + 11)).collect();
    let q: Vec<f32> = (0..n * 32).map(|i| val(i + 5)).collect();
    let mut kv = LayerKv::new(KvType::F32, 8, 2, 8);
    kv.store(0, &k, &v);
    let positions: Vec<u32> = (0..n as u32).collect();
    let mut out = vec![0.0; q.len()];
    attention(
        &CpuPlan::detect(),
        &q,
        &kv,
        &positions,
        s,
        None,
        None,
        &mut out,
    );
    let want = reference(&q, &kv, &positions, s);
    for (a, b) in out.iter().zip(&want) {
        assert!((*a as f64 - b).abs() < 1e-5, "{a} vs {b}");
    }
    // The first token sees only itself: its output is its own value row.
    assert!((out[0] - v[0]).abs() < 1e-2);
}

/// With an f16 cache and a small batch, the ggml-style f16 accumulator is in use: the
/// result stays within f16 rounding of the exact answer, but is not the f32 result.
#[test]
fn small_f16_batches_round_like_ggml() {
    let s = AttnShape {
        n_head: 2,
        n_kv_head: 1,
        head_dim: 64,
        kq_scale: None,
    };
    let n = 6;
    let val = |i: usize| ((i * 7919 % 997) as f32 / 997.0 - 0.5) * 3.0;
    let k: Vec<f32> = (0..n * 64).map(val).collect();
    let v: Vec<f32> = (0..n * 64).map(|i| val(i + 13)).collect();
    let q: Vec<f32> = (0..n * 128).map(|i| val(i + 29)).collect();
    let positions: Vec<u32> = (0..n as u32).collect();
    let mut kv16 = LayerKv::new(KvType::F16, 8, 1, 64);
    kv16.store(0, &k, &v);
    let mut out16 = vec![0.0; q.len()];
    attention(
        &CpuPlan::detect(),
        &q,
        &kv16,
        &positions,
        s,
        None,
        None,
        &mut out16,
    );
    let want = reference(&q, &kv16, &positions, s);
    let mut worst = 0f64;
    for (a, b) in out16.iter().zip(&want) {
        worst = worst.max((*a as f64 - b).abs());
    }
    assert!(worst < 1e-2, "f16 accumulation error {worst}");
    assert!(worst > 1e-6, "the f16 path was not taken ({worst})");
}

/// Quantized caches run ggml's one-chunk path at every size: q quantized to Q8_0, integer
/// dots, f32 accumulation. The result stays near the exact attention over the cached
/// (dequantized) values, yet is not the f32 path's (q's quantization shows), and the
/// `FERROLM_ATTN=f32` reference reads the same dequantized values.
#[test]
fn quantized_caches_take_the_one_chunk_path() {
    let s = AttnShape {
        n_head: 4,
        n_kv_head: 2,
        head_dim: 64,
        kq_scale: None,
    };
    let n = 70;
    let val = |i: usize| ((i * 7919 % 997) as f32 / 997.0 - 0.5) * 3.0;
    let k: Vec<f32> = (0..n * 128).map(val).collect();
    let v: Vec<f32> = (0..n * 128).map(|i| val(i + 13)).collect();
    let q: Vec<f32> = (0..n * 256).map(|i| val(i + 29)).collect();
    let positions: Vec<u32> = (0..n as u32).collect();
    let exact = CpuPlan::detect();
    let f32_plan = CpuPlan::with_attention_f32();
    for ty in [
        KvType::Q8_0,
        KvType::new(KvElem::Q4_0, KvElem::Q4_0),
        KvType::new(KvElem::Q8_0, KvElem::F16),
        KvType::new(KvElem::F16, KvElem::Q8_0),
    ] {
        let mut kv = LayerKv::new(ty, n, 2, 64);
        kv.store(0, &k, &v);
        let want = reference(&q, &kv, &positions, s);
        let (mut out, mut out32) = (vec![0.0; q.len()], vec![0.0; q.len()]);
        attention(&exact, &q, &kv, &positions, s, None, None, &mut out);
        attention(&f32_plan, &q, &kv, &positions, s, None, None, &mut out32);
        let worst = |o: &[f32]| {
            o.iter()
                .zip(&want)
                .map(|(a, b)| (*a as f64 - b).abs())
                .fold(0f64, f64::max)
        };
        assert!(worst(&out) < 3e-2, "{ty}: one-chunk error {}", worst(&out));
        assert!(worst(&out) > 1e-5, "{ty}: the one-chunk path was not taken");
        assert!(
            worst(&out32) < 1e-5,
            "{ty}: f32 reference error {}",
            worst(&out32)
        );
    }
}

/// The eight-lane integer dot is the exact dot of the dequantized values up to f32 rounding.
#[test]
fn q8_lanes_dot_is_the_block_dot() {
    let kc: Vec<i8> = (0..96).map(|i| ((i * 37) % 255) as i8).collect();
    let qc: Vec<i8> = (0..96).map(|i| ((i * 91 + 7) % 255) as i8).collect();
    let (kd, qd) = ([0.013f32, 0.5, 0.0071], [0.25f32, 0.031, 1.5]);
    let exact: f64 = (0..96)
        .map(|i| {
            f64::from(kc[i]) * f64::from(kd[i / 32]) * f64::from(qc[i]) * f64::from(qd[i / 32])
        })
        .sum();
    let got = dot_q8_lanes(&kc, &kd, &qc, &qd) as f64;
    assert!(
        (got - exact).abs() <= 1e-5 * exact.abs().max(1.0),
        "{got} vs {exact}"
    );
}

/// The F16C accumulator gives the scalar one's bits: head sizes with and without a tail of
/// fewer than eight, a rising maximum (rescales), with and without a sink.
#[cfg(target_arch = "x86_64")]
#[test]
fn f16c_accumulator_is_the_scalar_one() {
    if !(std::arch::is_x86_feature_detected!("fma") && std::arch::is_x86_feature_detected!("f16c"))
    {
        return; // nothing to compare on this CPU
    }
    for head_dim in [64, 68, 5] {
        let n_keys = 37;
        // Scores that rise and fall, so the maximum moves several times; values of both signs.
        let scores: Vec<f32> = (0..n_keys)
            .map(|i| ((i * 7 % 11) as f32 - 5.0) * 0.37 + i as f32 * 0.05)
            .collect();
        let v: Vec<f32> = (0..n_keys * head_dim)
            .map(|i| ((i * 13 % 29) as f32 - 14.0) * 0.113)
            .collect();
        for sink in [None, Some(0.3f32), Some(9.0)] {
            let (mut want, mut got) = (vec![0f32; head_dim], vec![0f32; head_dim]);
            online_softmax_body::<true>(&scores, &v, sink, &mut want);
            // SAFETY: FMA and F16C were detected above.
            unsafe { online_softmax_f16c(&scores, &v, sink, &mut got) };
            let bits = |x: &[f32]| x.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "head {head_dim}, sink {sink:?}");
        }
    }
}
