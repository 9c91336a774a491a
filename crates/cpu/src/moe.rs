//! Mixture-of-experts FFN: route every token, then run each expert once over the tokens
//! routed to it (grouped, so an expert's weights are read once per batch, not per token).

use crate::backend::{CpuWeight, Mat};
use crate::matmul::{matmul, matmul_ordered, Order};
use crate::norm::{softmax, swiglu};
use crate::plan::CpuPlan;
use ferrolm_model::backend::{MoeAct, MoeGating};
use ferrolm_model::weights::MoeWeights;

/// The experts chosen for one token and their weights.
pub fn route(logits: &mut [f32], k: usize, gating: MoeGating) -> Vec<(usize, f32)> {
    if gating != MoeGating::TopKSoftmax {
        softmax(logits);
    }
    let mut order: Vec<usize> = (0..logits.len()).collect();
    // Stable sort: among equal probabilities the lower expert id wins, deterministically.
    order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
    let mut picked: Vec<(usize, f32)> = order[..k].iter().map(|&e| (e, logits[e])).collect();
    match gating {
        MoeGating::SoftmaxTopKRenorm => {
            let sum: f32 = picked.iter().map(|p| p.1).sum();
            for p in &mut picked {
                p.1 /= sum;
            }
        }
        // The chosen logits, in the order chosen, through one softmax.
        MoeGating::TopKSoftmax => {
            let mut w: Vec<f32> = picked.iter().map(|p| p.1).collect();
            softmax(&mut w);
            for (p, w) in picked.iter_mut().zip(w) {
                p.1 = w;
            }
        }
        MoeGating::SoftmaxTopK => {}
    }
    picked
}

/// Adds row `e` of a stacked `[width][experts]` bias to every row of `x`.
fn add_expert_bias(b: &CpuWeight<'_>, e: usize, x: &mut [f32]) {
    let mut row = vec![0f32; b.mat.cols];
    b.mat.dequantize_row(e, &mut row);
    crate::norm::add_bias(x, &row);
}

/// The experts' gated activation, `gate = act(gate, up)`.
fn activate(act: MoeAct, gate: &mut [f32], up: &[f32]) {
    match act {
        MoeAct::Swiglu => swiglu(gate, up),
        MoeAct::SwigluOai { alpha, limit } => crate::norm::swiglu_oai(gate, up, alpha, limit),
    }
}

/// The MoE FFN of `x` into `out`, routed as `w.gating` says.
pub fn moe(plan: &CpuPlan, x: &Mat, w: &MoeWeights<CpuWeight<'_>>, out: &mut Mat) {
    let gating = w.gating;
    let (n, d) = (x.rows(), x.width);
    let mut logits = vec![0f32; n * w.n_expert];
    matmul(plan, &w.router.mat, &x.data, &mut logits);
    if let Some(b) = &w.router_bias {
        crate::norm::add_bias(&mut logits, b.f32s());
    }

    // Tokens per expert, with their slot and routing weight.
    let k = w.n_expert_used;
    let mut groups: Vec<Vec<(usize, usize, f32)>> = vec![Vec::new(); w.n_expert];
    for (t, row) in logits.chunks_exact_mut(w.n_expert).enumerate() {
        for (slot, (e, weight)) in route(row, k, gating).into_iter().enumerate() {
            // deepseek2's expert_weights_scale (1 elsewhere), on the weights as llama.cpp.
            groups[e].push((t, slot, weight * w.weights_scale));
        }
    }

    // Each (token, slot)'s weighted expert output (route fills all k slots of every token);
    // summed per token in slot order below, as llama.cpp adds its per-slot views.
    let mut slots = vec![0f32; n * k * d];
    for (e, tokens) in groups.iter().enumerate() {
        // An expert another rank of a tensor split holds: its slots stay zero here.
        if tokens.is_empty() || !w.experts.contains(&e) {
            continue;
        }
        let i = e - w.experts.start;
        let m = tokens.len();
        let mut xe = Vec::with_capacity(m * d);
        for &(t, _, _) in tokens {
            xe.extend_from_slice(&x.data[t * d..(t + 1) * d]);
        }
        let mut gate = vec![0f32; m * w.n_ff];
        let mut up = vec![0f32; m * w.n_ff];
        // llama.cpp's expert matmuls go one token at a time.
        let rows = Order::Rows;
        matmul_ordered(
            plan,
            rows,
            &w.gate.mat.slice_rows(i * w.n_ff, w.n_ff),
            &xe,
            &mut gate,
        );
        matmul_ordered(
            plan,
            rows,
            &w.up.mat.slice_rows(i * w.n_ff, w.n_ff),
            &xe,
            &mut up,
        );
        if let Some([bg, bu, _]) = &w.biases {
            add_expert_bias(bg, i, &mut gate);
            add_expert_bias(bu, i, &mut up);
        }
        activate(w.act, &mut gate, &up);
        let mut down = vec![0f32; m * d];
        matmul_ordered(
            plan,
            rows,
            &w.down.mat.slice_rows(i * d, d),
            &gate,
            &mut down,
        );
        if let Some([_, _, bd]) = &w.biases {
            add_expert_bias(bd, i, &mut down);
        }
        for (&(t, slot, weight), row) in tokens.iter().zip(down.chunks_exact(d)) {
            let p = t * k + slot;
            for (o, &v) in slots[p * d..(p + 1) * d].iter_mut().zip(row) {
                *o = weight * v;
            }
        }
    }
    out.data.fill(0.0);
    for (o, token_slots) in out.data.chunks_exact_mut(d).zip(slots.chunks_exact(k * d)) {
        for slot in token_slots.chunks_exact(d) {
            for (o, &v) in o.iter_mut().zip(slot) {
                *o += v;
            }
        }
    }
}
