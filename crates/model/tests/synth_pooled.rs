//! `Synth::pooled`: a tensor of more blocks than its pool draws every block from the pool
//! (so at most that many distinct blocks), keeps the plain synth's spread, and the file is the
//! same on any number of threads; tensors no larger than the pool are the plain synth's.

use ferrolm_gguf::GgufFile;
use ferrolm_model::{FileType, Synth, VocabKind};
use std::collections::HashSet;
use std::path::Path;

fn write(path: &Path, pool: Option<usize>, threads: usize) -> Vec<u8> {
    let mut s = Synth::new("tiny-qwen3moe", FileType::Q4KM, 5, VocabKind::None).unwrap();
    s.pooled = pool;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap();
    pool.install(|| s.write(path, &|_| {})).unwrap();
    std::fs::read(path).unwrap()
}

/// The standard deviation of a tensor's values.
fn spread(f: &GgufFile, name: &str) -> f32 {
    let t = f.require_tensor(name).unwrap();
    let n: u64 = t.dims.iter().product();
    let mut x = vec![0f32; n as usize];
    ferrolm_quant::dequantize(t.ty, f.tensor_data(t), &mut x).unwrap();
    let mean = x.iter().sum::<f32>() / x.len() as f32;
    (x.iter().map(|v| (v - mean).powi(2)).sum::<f32>() / x.len() as f32).sqrt()
}

#[test]
fn pooled_tensors_draw_from_their_pool_with_the_plain_spread() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, c) = (
        dir.path().join("a"),
        dir.path().join("b"),
        dir.path().join("c"),
    );
    let pooled = write(&a, Some(16), 1);
    assert!(
        pooled == write(&b, Some(16), 2),
        "the same file on 1 and 2 threads"
    );
    write(&c, None, 2);
    let (f, plain) = (GgufFile::open(&a).unwrap(), GgufFile::open(&c).unwrap());
    let mut seen = 0;
    for t in f.tensors() {
        let (be, bb) = t.ty.block_geometry();
        let data = f.tensor_data(t);
        let blocks = data.len() / bb;
        let same = data == plain.tensor_data(plain.require_tensor(&t.name).unwrap());
        if be == 1 || blocks <= 16 {
            assert!(same, "{}: not pooled, so the plain synth's", t.name);
            continue;
        }
        seen += 1;
        let distinct: HashSet<&[u8]> = data.chunks_exact(bb).collect();
        assert!(
            distinct.len() <= 16 && !same,
            "{}: {} distinct blocks",
            t.name,
            distinct.len()
        );
        let (p, q) = (spread(&f, &t.name), spread(&plain, &t.name));
        assert!(
            (p / q - 1.0).abs() < 0.25,
            "{}: spread {p} against {q}",
            t.name
        );
    }
    assert!(seen > 10, "only {seen} pooled tensors");
}
