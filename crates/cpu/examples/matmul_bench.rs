//! Matmul throughput on SmolLM2-135M's shapes (Q4_1 layers, Q8_0 output), decode (n = 1) and
//! prefill (n = 512), in GFLOP/s (2·rows·cols·n per call).
//!
//! `cargo run --release -p ferrolm-cpu --example matmul_bench -- [--type Q4_K] [--isa avx2]
//! [--path gemv|gemm] [--reference] [--n 1,512] [--only NAME] [--cached] [--worker]`.
//! `--worker` times from a rayon worker thread, which leaves out the pool's wake-up per call.
//! Weights stream from memory unless `--cached`, as they do in a forward pass.. Threads: `RAYON_NUM_THREADS` (default all).

use ferrolm_cpu::matmul::{matmul_reference, matmul_with, Isa, Path, WeightRef};
use ferrolm_gguf::GgmlType;
use rand::{Rng, SeedableRng};
use std::time::Instant;

fn main() {
    let worker = std::env::args().any(|a| a == "--worker");
    if worker {
        rayon::scope(|_| bench());
    } else {
        bench();
    }
}

fn bench() {
    let mut args = std::env::args().skip(1);
    let (mut ty, mut isa, mut path, mut reference) = (None, Isa::detect(), Path::Auto, false);
    let mut ns = vec![1usize, 512];
    let mut only = String::new();
    // Distinct copies of each weight, cycled, so that the weights stream from memory as in a
    // model (128 MiB of them by default) instead of staying in cache.
    let mut stream_bytes = 128usize << 20;
    while let Some(a) = args.next() {
        let mut value = || args.next().expect("missing value");
        match a.as_str() {
            "--type" => ty = Some(GgmlType::from_name(&value()).expect("type name")),
            "--isa" => {
                isa = match value().as_str() {
                    "scalar" => Isa::Scalar,
                    "avx2" => Isa::Avx2,
                    _ => Isa::Avx512,
                }
            }
            "--path" => {
                path = if value() == "gemm" {
                    Path::Gemm
                } else {
                    Path::Gemv
                }
            }
            "--reference" => reference = true,
            "--only" => only = value(),
            "--cached" => stream_bytes = 0,
            "--worker" => {}
            "--n" => ns = value().split(',').map(|v| v.parse().unwrap()).collect(),
            other => panic!("unknown argument {other}"),
        }
    }
    println!(
        "threads {}, level {isa:?}, path {path:?}, reference {reference}",
        rayon::current_num_threads()
    );
    // (name, cols, rows, type): ggml's [cols, rows] as in the model file.
    let layer = ty.unwrap_or(GgmlType::Q4_1);
    let shapes = [
        ("attn_q/attn_output 576x576", 576, 576, layer),
        ("attn_k/attn_v 576x192", 576, 192, layer),
        ("ffn_gate/ffn_up 576x1536", 576, 1536, layer),
        ("ffn_down 1536x576", 1536, 576, layer),
        ("output 576x49152", 576, 49152, ty.unwrap_or(GgmlType::Q8_0)),
    ];
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    for (name, cols, rows, ty) in shapes {
        if !name.contains(&only) {
            continue;
        }
        let w: Vec<f32> = (0..rows * cols).map(|_| rng.gen_range(-0.1..0.1)).collect();
        let data = ferrolm_quant::quantize_to_vec(ty, &w).unwrap();
        let copies: Vec<Vec<u8>> = (0..stream_bytes.div_ceil(data.len()).max(1))
            .map(|_| data.clone())
            .collect();
        let mut next = 0;
        for &n in &ns {
            // The output matrix only ever sees one row per prefill (the last token's logits).
            if rows > 4096 && n > 64 && !reference {
                continue;
            }
            let x: Vec<f32> = (0..n * cols).map(|_| rng.gen_range(-1.0..1.0)).collect();
            let mut out = vec![0f32; n * rows];
            let mut run = || {
                next = (next + 1) % copies.len();
                let w = WeightRef {
                    ty,
                    data: &copies[next],
                    rows,
                    cols,
                };
                if reference {
                    matmul_reference(&w, &x, &mut out)
                } else {
                    matmul_with(isa, path, &w, &x, &mut out)
                }
            };
            run();
            let (mut times, t0) = (Vec::new(), Instant::now());
            while times.len() < 5 || (t0.elapsed().as_secs_f64() < 1.0 && times.len() < 2000) {
                let t = Instant::now();
                run();
                times.push(t.elapsed().as_secs_f64());
            }
            times.sort_by(f64::total_cmp);
            let flop = 2.0 * (rows * cols * n) as f64;
            println!(
                "{name:28} {ty:5} n={n:<4} best {:8.1} µs {:7.1} GFLOP/s   median {:8.1} µs {:7.1} GFLOP/s",
                times[0] * 1e6,
                flop / times[0] / 1e9,
                times[times.len() / 2] * 1e6,
                flop / times[times.len() / 2] / 1e9
            );
        }
    }
}
