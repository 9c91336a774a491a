//! The CUDA backend's fast paths against their switches, on the GPU: each switch turns one off,
//! and the logits must be bit-identical (fusions, graphs) or within int8 tolerance (mmq against
//! chunked mat-vec). Run on the GPU machine with `--ignored`; `FERROLM_GOLDEN_DIR` points at
//! the goldens there.

mod common;

use ferrolm_engine::{Device, Logits, Model, Session};
use ferrolm_gguf::GgufFile;

/// Prompt logits (batched) and then one-token steps, every row.
fn run(file: &GgufFile, env: &[(&str, &str)]) -> (Vec<f32>, Vec<f32>) {
    for (k, v) in env {
        // SAFETY (edition 2021: safe fn): these tests run one at a time (--test-threads 1),
        // and the backend reads its switches when it is created, below.
        std::env::set_var(k, v);
    }
    let model = Model::load_on(file, &Device::cuda(0).expect("a GPU")).unwrap();
    for (k, _) in env {
        std::env::remove_var(k);
    }
    let prompt: Vec<u32> = (0..40)
        .map(|i| (i * 37 + 11) % model.cfg.n_vocab as u32)
        .collect();
    let mut s = Session::new(&model, 128);
    let batched = s.eval(&prompt, Logits::All).unwrap();
    let mut s = Session::new(&model, 128);
    let mut stepped = Vec::new();
    for &t in &prompt {
        stepped.extend(s.eval(&[t], Logits::Last).unwrap());
    }
    (batched, stepped)
}

fn golden_file(stem: &str) -> GgufFile {
    GgufFile::open(common::golden(&format!("{stem}.gguf"))).unwrap()
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

#[test]
#[ignore = "needs a GPU"]
fn decode_fusions_and_graphs_are_bit_identical() {
    // llama: RoPE alone; qwen3: per-head q/k norms; olmoe: norms over whole rows.
    for stem in ["tiny-llama-q4_k_m", "tiny-qwen3-q8_0", "tiny-olmoe-q4_k_m"] {
        let file = golden_file(stem);
        let (base_b, base_s) = run(&file, &[]);
        let (nofuse_b, nofuse_s) = run(&file, &[("FERROLM_CUDA_FUSE", "0")]);
        let (_, nograph_s) = run(&file, &[("FERROLM_CUDA_GRAPH", "0")]);
        // The KV store's fusion is off by default (slower), q, k and v's on: each against the
        // default.
        let (store_b, store_s) = run(&file, &[("FERROLM_ROPE_STORE", "1")]);
        let (_, qkv_s) = run(&file, &[("FERROLM_QKV_ONE", "0")]);
        // The splits' combine in the walk's last block (its own launch by default): a KV
        // group's heads side by side there, in the own launch's order.
        let (_, walk_s) = run(&file, &[("FERROLM_ATTN_COMBINE_WALK", "1")]);
        // The own combine's Q8_K copy for the product after it, against that product's own
        // quantize launch.
        let (_, q8k_s) = run(&file, &[("FERROLM_ATTN_COMBINE_Q8K", "0")]);
        assert_eq!(base_b, nofuse_b, "{stem}: batched, fused vs unfused");
        assert_eq!(base_s, nofuse_s, "{stem}: stepped, fused vs unfused");
        assert_eq!(base_s, nograph_s, "{stem}: stepped, graph vs op by op");
        assert_eq!(
            base_b, store_b,
            "{stem}: batched, KV store in the RoPE launch or not"
        );
        assert_eq!(
            base_s, store_s,
            "{stem}: stepped, KV store in the RoPE launch or not"
        );
        assert_eq!(
            base_s, qkv_s,
            "{stem}: stepped, q, k and v in one launch or not"
        );
        assert_eq!(
            base_s, walk_s,
            "{stem}: stepped, attention's combine in the walk or its own launch"
        );
        assert_eq!(
            base_s, q8k_s,
            "{stem}: stepped, attention's output quantized by its combine or on its own"
        );
    }
}

#[test]
#[ignore = "needs a GPU"]
fn mmq_agrees_with_matvec() {
    let file = golden_file("tiny-llama-q4_k_m");
    let (mmq, _) = run(&file, &[]);
    let (mmvq, _) = run(&file, &[("FERROLM_CUDA_MMQ", "0")]);
    let d = max_abs_diff(&mmq, &mmvq);
    println!("mmq vs mmvq: max |Δlogit| {d:.3e}");
    // The same integer dots, scaled in another f32 order (mmvq scales a weight block's summed
    // sub-blocks, mmq each sub-block): ~1e-7 apart per layer, until a value near a rounding
    // boundary of the next layer's int8 activations flips a code; ~4e-2 measured when written
    // (H200), 0.085-0.133 in session 31 (H100; Q8_1 activations, the default, integer scales
    // off). A wrong product moves these two-layer models by whole logits.
    assert!(d < 0.25, "max |Δlogit| {d}");
}

#[test]
#[ignore = "needs a GPU"]
fn stepped_decode_matches_batched_prefill() {
    let file = golden_file("tiny-qwen3-q4_k_m");
    // f32 attention on both sides: a 40-token batch otherwise takes ggml's f16 arithmetic,
    // which decode steps do not.
    let (batched, stepped) = run(&file, &[("FERROLM_ATTN", "f32")]);
    let d = max_abs_diff(&batched, &stepped);
    println!("batched vs stepped: max |Δlogit| {d:.3e}");
    // Different kernels (mmq and tiled prefill attention against mmvq and split decode): f32
    // order and the int8 flips it sets off, as above; 8e-2 measured on the H200.
    assert!(d < 0.2, "max |Δlogit| {d}");
}

/// Every step's logits of five sequences run together (prompts of 3, 17, 40, 1 and 9 tokens
/// prefilled in one pass, then 10 one-token steps with fixed tokens, the second sequence
/// leaving after step 5 so the padded batch size changes from 8 to 4), under `env`.
fn batch_schedule(file: &GgufFile, env: &[(&str, &str)]) -> Vec<Vec<f32>> {
    batch_schedule_of(file, env, &[3, 17, 40, 1, 9])
}

/// [`batch_schedule`] with sequences whose prompts are `lens` tokens long.
fn batch_schedule_of(file: &GgufFile, env: &[(&str, &str)], lens: &[usize]) -> Vec<Vec<f32>> {
    schedule_with(file, env, lens, |m, seqs| {
        m.forward_batch(seqs).unwrap().concat()
    })
}

/// [`batch_schedule_of`]'s passes, each run by `pass`; what it returns, a pass each.
fn schedule_with<T>(
    file: &GgufFile,
    env: &[(&str, &str)],
    lens: &[usize],
    pass: impl Fn(&Model, &mut [ferrolm_engine::SeqInput]) -> T,
) -> Vec<T> {
    for (k, v) in env {
        // SAFETY (edition 2021: safe fn): as in `run`.
        std::env::set_var(k, v);
    }
    let model = Model::load_on(file, &Device::cuda(0).expect("a GPU")).unwrap();
    for (k, _) in env {
        std::env::remove_var(k);
    }
    let n_vocab = model.cfg.n_vocab as u32;
    let mut caches: Vec<_> = lens
        .iter()
        .map(|_| model.new_cache(128, ferrolm_engine::KvType::F16).unwrap())
        .collect();
    let prompts: Vec<Vec<u32>> = lens
        .iter()
        .enumerate()
        .map(|(s, &n)| {
            (0..n as u32)
                .map(|i| (i * 37 + 11 * s as u32 + 5) % n_vocab)
                .collect()
        })
        .collect();
    let mut steps = Vec::new();
    let mut seqs: Vec<ferrolm_engine::SeqInput> = caches
        .iter_mut()
        .zip(&prompts)
        .map(|(cache, p)| ferrolm_engine::SeqInput {
            cache,
            tokens: p,
            pos0: 0,
            logits: Some(Logits::Last),
        })
        .collect();
    steps.push(pass(&model, &mut seqs));
    drop(seqs);
    for step in 0..10u32 {
        let tokens: Vec<[u32; 1]> = (0..lens.len() as u32)
            .map(|s| [(step * 31 + s * 7 + 3) % n_vocab])
            .collect();
        let mut seqs: Vec<ferrolm_engine::SeqInput> = caches
            .iter_mut()
            .zip(&tokens)
            .zip(lens)
            .enumerate()
            .filter(|(s, _)| step < 5 || *s != 1)
            .map(|(_, ((cache, t), &n))| ferrolm_engine::SeqInput {
                cache,
                tokens: t,
                pos0: n + step as usize,
                logits: Some(Logits::Last),
            })
            .collect();
        steps.push(pass(&model, &mut seqs));
    }
    steps
}

/// A batched step's MoE fusions (`FERROLM_MOE_STEP_FUSE`): the experts' index in one block, x
/// from the norm's blocks; bit for bit against
/// them off, and against every decode fusion off (`FERROLM_CUDA_FUSE`), over the schedule's prompt pass (70 tokens: the grouped GEMM) and
/// steps of 4-5 sequences (tiny olmoe's Q4_K experts on the tensor-core mat-vec).
#[test]
#[ignore = "needs a GPU"]
fn batched_moe_fusions_are_bit_identical() {
    let file = golden_file("tiny-olmoe-q4_k_m");
    let fused = batch_schedule(&file, &[]);
    for off in ["FERROLM_MOE_STEP_FUSE", "FERROLM_CUDA_FUSE"] {
        let unfused = batch_schedule(&file, &[(off, "0")]);
        assert_eq!(fused.len(), unfused.len());
        for (i, (a, b)) in fused.iter().zip(&unfused).enumerate() {
            assert_eq!(a, b, "pass {i}: fused vs {off}=0");
        }
    }
}

/// The one-launch batched decode attention (with multi-sequence steps as padded graphs)
/// (`FERROLM_ATTN_BATCHED=1`, the default) against a launch per sequence
/// (`FERROLM_ATTN_BATCHED=0`) and against itself op by op
/// (`FERROLM_CUDA_GRAPH=0`, no padding): attention in another f32 order than the per-sequence
/// kernels, the matmuls' kernels at other row counts (mat-vec widths, mmq against mat-vec once
/// a padded step passes 8 rows), and the int8 flips both set off, as `mmq_agrees_with_matvec`.
#[test]
#[ignore = "needs a GPU"]
fn batched_decode_attention_matches_a_launch_per_sequence() {
    for stem in ["tiny-llama-q4_k_m", "tiny-olmoe-q4_k_m", "tiny-qwen3-q8_0"] {
        let file = golden_file(stem);
        let on = batch_schedule(&file, &[("FERROLM_ATTN_BATCHED", "1")]);
        let off = batch_schedule(&file, &[("FERROLM_ATTN_BATCHED", "0")]);
        let eager = batch_schedule(
            &file,
            &[("FERROLM_ATTN_BATCHED", "1"), ("FERROLM_CUDA_GRAPH", "0")],
        );
        for (name, other) in [("per-sequence launches", &off), ("op by op", &eager)] {
            let d = on
                .iter()
                .zip(other)
                .map(|(a, b)| max_abs_diff(a, b))
                .fold(0.0, f32::max);
            println!("{stem}: batched vs {name}: max |Δlogit| {d:.3e}");
            assert!(d < 0.1, "{stem}: batched vs {name}: max |Δlogit| {d}");
        }
    }
}

/// A batched step's Q4_K products on the f16 GEMM that unpacks the weight (f16 weights and
/// activations, k split over blocks; forced onto every Q4_K product of the 32-row steps by
/// `FERROLM_F16_DECODE_SPLITS` and `_ROWS`, since the tiny models' shares are too short and
/// the steps too few rows for the plan to choose it) against the tensor-core mat-vec
/// (`FERROLM_F16_DECODE=0`: Q8_K activations, the CPU's and llama.cpp's rounding): twenty
/// sequences, so the padded steps take 32 rows. These two-layer models move by tenths of a
/// logit under any change of arithmetic (on the CPU, f32 attention against ggml's moves
/// tiny-llama's by 0.20; on the H200 these read 0.28 and 0.20, session 23), where a wrong
/// product (a lost share, another row's weights) moves them by whole logits. The deep variant
/// (`FERROLM_F16_DECODE_DEEP=1`) and gate and up in launches of their own
/// (`FERROLM_F16_DECODE_PAIR=0`) give the f16 GEMM's logits bit for bit.
#[test]
#[ignore = "needs a GPU"]
fn f16_decode_agrees_with_the_mma_matvec() {
    let lens: Vec<usize> = (0..20).map(|s| 1 + (s * 7) % 23).collect();
    // The f16 mat-vec, ahead of both where it takes a product, off.
    let forced = [
        ("FERROLM_F16_DECODE_SPLITS", "2"),
        ("FERROLM_F16_DECODE_ROWS", "16"),
        ("FERROLM_F16_MATVEC", "0"),
    ];
    for stem in ["tiny-llama-q4_k_m", "tiny-qwen3-q4_k_m"] {
        let file = golden_file(stem);
        let f16 = batch_schedule_of(&file, &forced, &lens);
        let int8 = batch_schedule_of(
            &file,
            &[("FERROLM_F16_DECODE", "0"), ("FERROLM_F16_MATVEC", "0")],
            &lens,
        );
        let d = f16
            .iter()
            .zip(&int8)
            .map(|(a, b)| max_abs_diff(a, b))
            .fold(0.0, f32::max);
        println!("{stem}: f16 decode GEMM vs tensor-core mat-vec: max |Δlogit| {d:.3e}");
        assert!(d > 0.0, "{stem}: the switch changed no kernel");
        assert!(d < 0.5, "{stem}: max |Δlogit| {d}");
        // Its deep variant (three super-blocks in flight) and gate and up in launches of their
        // own (the pair's forced splits are each alone's): the same logits, bit for bit.
        let bits = |v: &[Vec<f32>]| v.concat().iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        let variants: [&[(&str, &str)]; 3] = [
            &[("FERROLM_F16_DECODE_DEEP", "1")],
            &[("FERROLM_F16_DECODE_PAIR", "0")],
            &[
                ("FERROLM_F16_DECODE_DEEP", "1"),
                ("FERROLM_F16_DECODE_PAIR", "0"),
            ],
        ];
        for v in variants {
            let got = batch_schedule_of(&file, &[forced.as_slice(), v].concat(), &lens);
            assert!(bits(&got) == bits(&f16), "{stem}: {v:?}: the logits differ");
        }
    }
}

/// A batched step's Q4_K and Q6_K products on the staged tensor-core mat-vec
/// (`FERROLM_MMVQ_MMA_STAGED=1`, from 17 rows, k in two shares; each super-block's activations
/// in shared memory, mmq's per-sub-block order) against `mmvq_mma` (`=0`): forty sequences,
/// so the padded steps take 64 rows. The same tolerance as the f16 decode GEMM's test above:
/// another f32 order moves these two-layer models by tenths of a logit, a wrong product by
/// whole logits.
#[test]
#[ignore = "needs a GPU"]
fn staged_matvec_agrees_with_the_mma_matvec() {
    let lens: Vec<usize> = (0..40).map(|s| 1 + (s * 7) % 23).collect();
    // The f16 mat-vec, ahead of both where it takes a product (64 rows), off; the f16 decode
    // GEMM behind the staged kernel (by default it comes ahead); both kernels in their
    // per-sub-block order. On these models' one- and two-super-block rows (split in two) the
    // two kernels sum in the same order and give the same bits: ncu saw both run here, 120
    // launches each (session 32), so the test bounds the difference and does not ask for one.
    let staged = [
        ("FERROLM_MMVQ_MMA_STAGED", "1"),
        ("FERROLM_MMVQ_MMA_STAGED_ROWS", "17"),
        ("FERROLM_MMVQ_MMA_STAGED_SPLITS", "2"),
        ("FERROLM_F16_MATVEC", "0"),
        ("FERROLM_F16_DECODE_FIRST", "0"),
        ("FERROLM_CUDA_INT_SCALES", "0"),
    ];
    for stem in ["tiny-llama-q4_k_m", "tiny-qwen3-q4_k_m"] {
        let file = golden_file(stem);
        let on = batch_schedule_of(&file, &staged, &lens);
        let off = batch_schedule_of(
            &file,
            &[
                ("FERROLM_MMVQ_MMA_STAGED", "0"),
                ("FERROLM_F16_MATVEC", "0"),
                ("FERROLM_CUDA_INT_SCALES", "0"),
            ],
            &lens,
        );
        let d = on
            .iter()
            .zip(&off)
            .map(|(a, b)| max_abs_diff(a, b))
            .fold(0.0, f32::max);
        println!("{stem}: staged vs tensor-core mat-vec: max |Δlogit| {d:.3e}");
        assert!(d < 0.5, "{stem}: max |Δlogit| {d}");
    }
}

/// Forty sequences of 1 to 23 prompt tokens: their padded steps take 64 rows.
fn forty_sequences() -> Vec<usize> {
    (0..40).map(|s| 1 + (s * 7) % 23).collect()
}

/// The f16 mat-vec from 9 rows, k in two shares: the tiny models' products reach it.
const F16_MATVEC_FROM_9: [(&str, &str); 3] = [
    ("FERROLM_F16_MATVEC", "1"),
    ("FERROLM_F16_MATVEC_ROWS", "9"),
    ("FERROLM_F16_MATVEC_SPLITS", "2"),
];

/// A batched step's Q4_K and Q6_K products on the f16 mat-vec (`FERROLM_F16_MATVEC=1`, from 9
/// rows, k in two shares; weights unpacked to f16 once for all rows) against the int8 kernels
/// it comes ahead of (`=0`): forty sequences, so the padded steps take 64 rows. The tolerance
/// of the tests above: the f16 contract moves these two-layer models by tenths of a logit, a
/// wrong product by whole logits.
#[test]
#[ignore = "needs a GPU"]
fn f16_matvec_agrees_with_the_default_products() {
    let lens = forty_sequences();
    for stem in ["tiny-llama-q4_k_m", "tiny-qwen3-q4_k_m"] {
        let file = golden_file(stem);
        let on = batch_schedule_of(&file, &F16_MATVEC_FROM_9, &lens);
        let off = batch_schedule_of(&file, &[("FERROLM_F16_MATVEC", "0")], &lens);
        let d = on
            .iter()
            .zip(&off)
            .map(|(a, b)| max_abs_diff(a, b))
            .fold(0.0, f32::max);
        println!("{stem}: f16 mat-vec vs default products: max |Δlogit| {d:.3e}");
        assert!(d > 0.0, "{stem}: the switch changed no kernel");
        assert!(d < 0.5, "{stem}: max |Δlogit| {d}");
    }
}

/// The f16 copies a batched step's norms and SwiGLU write for the f16 products after them
/// (`FERROLM_F16_COPY`, on by default) against `round_f16`'s own launches: the same bits, on
/// the schedule of the test above with its f16 mat-vec settings.
#[test]
#[ignore = "needs a GPU"]
fn f16_copies_change_no_bits() {
    let lens = forty_sequences();
    let with = |copy| [&F16_MATVEC_FROM_9[..], &[("FERROLM_F16_COPY", copy)]].concat();
    for stem in ["tiny-llama-q4_k_m", "tiny-qwen3-q4_k_m"] {
        let file = golden_file(stem);
        let on = batch_schedule_of(&file, &with("1"), &lens);
        let off = batch_schedule_of(&file, &with("0"), &lens);
        assert_eq!(
            on, off,
            "{stem}: f16 copies in the norm and SwiGLU launches or not"
        );
    }
}

/// The paged KV cache moves addresses, never values: blocks of 16 positions, the default, and
/// one block as large as the whole context (the cache as one array) give bit-identical
/// logits, for one sequence's prompt and steps (graphs) and for a batch of sequences (the
/// one-launch attention's per-row tables).
#[test]
#[ignore = "needs a GPU"]
fn kv_block_size_changes_no_bits() {
    for stem in ["tiny-llama-q4_k_m", "tiny-olmoe-q4_k_m", "tiny-qwen3-q8_0"] {
        let file = golden_file(stem);
        let (base_b, base_s) = run(&file, &[]);
        let base_batch = batch_schedule(&file, &[]);
        for block in ["16", "65536"] {
            let env = [("FERROLM_KV_BLOCK", block)];
            let (b, s) = run(&file, &env);
            assert_eq!(base_b, b, "{stem}: prompt, blocks of {block}");
            assert_eq!(base_s, s, "{stem}: steps, blocks of {block}");
            assert_eq!(
                base_batch,
                batch_schedule(&file, &env),
                "{stem}: batch, {block}"
            );
        }
    }
}

/// Logits come to the host through page-locked memory or pageable: the same bytes, for a
/// prompt, one-token steps (graphs) and batches of changing sizes (the buffer kept, grown and
/// reused from pass to pass).
#[test]
#[ignore = "needs a GPU"]
fn pinned_logits_change_no_bits() {
    for stem in ["tiny-llama-q4_k_m", "tiny-olmoe-q4_k_m"] {
        let file = golden_file(stem);
        let pageable = [("FERROLM_PINNED_LOGITS", "0")];
        assert_eq!(
            run(&file, &[]),
            run(&file, &pageable),
            "{stem}: one sequence"
        );
        assert_eq!(
            batch_schedule(&file, &[]),
            batch_schedule(&file, &pageable),
            "{stem}: batches"
        );
    }
}

/// Greedy choices picked on the GPU (`FERROLM_GREEDY_ON_DEVICE=1`) are the host's picks from
/// the same passes' logits: batched steps (graphs of 8 and 4 rows), a prompt's last row, and
/// one sequence's graph-replayed steps; with the first pass's best id banned too.
#[test]
#[ignore = "needs a GPU"]
fn greedy_picks_on_the_gpu_are_the_hosts() {
    for stem in ["tiny-llama-q4_k_m", "tiny-olmoe-q4_k_m"] {
        let file = golden_file(stem);
        for lens in [&[3, 17, 40, 1, 9][..], &[7]] {
            let logits = batch_schedule_of(&file, &[], lens);
            let n_vocab = logits[0].len() / lens.len();
            let banned = [ferrolm_engine::argmax(&logits[0][..n_vocab])];
            let host: Vec<Vec<_>> = logits
                .iter()
                .map(|step| {
                    let rows = step.chunks(n_vocab);
                    rows.map(|r| ferrolm_engine::greedy_pick(r, &banned))
                        .collect()
                })
                .collect();
            let on = [("FERROLM_GREEDY_ON_DEVICE", "1")];
            let gpu = schedule_with(&file, &on, lens, |m, seqs| {
                let p = m.forward_batch_greedy(seqs, &banned).unwrap();
                (0..p.len())
                    .flat_map(|i| p.seq(i).to_vec())
                    .collect::<Vec<_>>()
            });
            assert_eq!(gpu, host, "{stem}, prompts {lens:?}");
            assert_ne!(
                host[0][0].best, host[0][0].allowed,
                "the ban moved a choice"
            );
        }
    }
}

/// Sequences of one shared pool (`Model::reserve_kv`): a prompt's blocks given to three
/// others (`copy_cache_prefix` shares them; 70 positions, so the last block is partial and
/// copied when each sequence writes its next position into it) continue bit for bit as
/// caches of their own that each computed the prompt (the same kernels run on the same
/// values); every block comes back when the caches go; a pass past the pool's blocks is an
/// error, not a fault.
#[test]
#[ignore = "needs a GPU"]
fn shared_pool_prefixes_continue_as_their_own() {
    use ferrolm_engine::{Cache, KvType, SeqInput};
    let file = golden_file("tiny-llama-q4_k_m");
    let model = Model::load_on(&file, &Device::cuda(0).expect("a GPU")).unwrap();
    let n_vocab = model.cfg.n_vocab as u32;
    let prompt: Vec<u32> = (0..70).map(|i| (i * 37 + 11) % n_vocab).collect();
    let nexts: [[u32; 3]; 4] = [[5, 6, 7], [8, 9, 10], [11, 12, 13], [14, 15, 16]];
    let prefill = |cache: &mut Cache| {
        model
            .forward_batch(&mut [SeqInput {
                cache,
                tokens: &prompt,
                pos0: 0,
                logits: None,
            }])
            .unwrap();
    };
    // Three steps of all four sequences in one batch each.
    let steps = |caches: &mut [Cache]| -> Vec<Vec<f32>> {
        let mut got = vec![Vec::new(); caches.len()];
        for step in 0..3 {
            let tokens: Vec<[u32; 1]> = nexts.iter().map(|n| [n[step]]).collect();
            let mut seqs: Vec<SeqInput> = caches
                .iter_mut()
                .zip(&tokens)
                .map(|(cache, t)| SeqInput {
                    cache,
                    tokens: t,
                    pos0: prompt.len() + step,
                    logits: Some(Logits::Last),
                })
                .collect();
            for (g, l) in got.iter_mut().zip(model.forward_batch(&mut seqs).unwrap()) {
                g.extend(l);
            }
        }
        got
    };
    // Their own: a pool each (made before the shared one), a prefill each.
    let mut own: Vec<Cache> = (0..4)
        .map(|_| model.new_cache(128, KvType::F16).unwrap())
        .collect();
    own.iter_mut().for_each(&prefill);
    let want = steps(&mut own);

    let n_blocks = model.kv_blocks_for(4, 128).unwrap();
    let block = model.kv_block(128).unwrap();
    model.reserve_kv(n_blocks, 128, KvType::F16).unwrap();
    assert_eq!(model.kv_free_blocks(), Some((n_blocks, block)));
    let mut caches: Vec<Cache> = (0..4)
        .map(|_| model.new_cache(128, KvType::F16).unwrap())
        .collect();
    let (first, rest) = caches.split_first_mut().unwrap();
    prefill(first);
    for c in rest {
        model.copy_cache_prefix(first, c, prompt.len()).unwrap();
    }
    // Two blocks for the prompt, held by all four.
    let blocks_for_prompt = prompt.len().div_ceil(block);
    assert_eq!(
        model.kv_free_blocks(),
        Some((n_blocks - blocks_for_prompt, block))
    );
    let got = steps(&mut caches);
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!(g == w, "sequence {i}: a shared prefix gives other logits");
    }
    // The whole blocks stay shared; the partial one is each sequence's own (three copies and
    // the original).
    assert_eq!(
        model.kv_free_blocks(),
        Some((n_blocks - (blocks_for_prompt - 1) - 4, block))
    );
    drop(caches);
    assert_eq!(model.kv_free_blocks(), Some((n_blocks, block)));

    // A pool of one block: a prompt past it fails with the pool's error.
    model.reserve_kv(1, 128, KvType::F16).unwrap();
    let mut small = model.new_cache(128, KvType::F16).unwrap();
    let err = model
        .forward_batch(&mut [SeqInput {
            cache: &mut small,
            tokens: &prompt,
            pos0: 0,
            logits: None,
        }])
        .unwrap_err();
    assert!(err.to_string().contains("KV cache is full"), "{err}");
}
