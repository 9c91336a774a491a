//! Writer → reader round trips, and reading llama.cpp's own files.

use ferrolm_gguf::{GgmlType, GgufFile, GgufWriter, Value, ValueType};
use std::path::Path;

fn sample_writer() -> GgufWriter {
    let mut w = GgufWriter::new();
    w.set("general.architecture", "llama");
    w.set("u8", 7u8);
    w.set("i8", -7i8);
    w.set("u16", 65535u16);
    w.set("i16", -300i16);
    w.set("u32", 4_000_000_000u32);
    w.set("i32", -5i32);
    w.set("f32", 1.5f32);
    w.set("bool", true);
    w.set("u64", u64::MAX);
    w.set("i64", i64::MIN);
    w.set("f64", -2.25f64);
    w.set(
        "strings",
        Value::Array(ValueType::String, vec!["a".into(), "ü€".into()]),
    );
    w.set("empty", Value::Array(ValueType::F32, vec![]));
    w.set(
        "nested",
        Value::Array(
            ValueType::Array,
            vec![
                Value::Array(ValueType::I32, vec![1i32.into(), 2i32.into()]),
                Value::Array(ValueType::String, vec!["x".into()]),
            ],
        ),
    );
    w.add_tensor("a", GgmlType::F32, &[3, 2]).unwrap();
    w.add_tensor("b", GgmlType::Q8_0, &[64]).unwrap();
    w.add_tensor("c", GgmlType::F16, &[5]).unwrap();
    w
}

fn sample_data() -> Vec<Vec<u8>> {
    vec![
        (0..24).collect(),
        (0..68).map(|i| i as u8 ^ 0x5a).collect(),
        vec![9; 10],
    ]
}

fn write_sample() -> Vec<u8> {
    let mut out = sample_writer().start(Vec::new()).unwrap();
    for d in sample_data() {
        out.write_tensor(&d).unwrap();
    }
    out.finish().unwrap()
}

#[test]
fn every_value_type_and_tensor_round_trips() {
    let bytes = write_sample();
    let f = GgufFile::from_vec("sample", bytes).unwrap();
    assert_eq!(f.version(), 3);
    for (key, value) in sample_metadata() {
        assert_eq!(f.get(&key), Some(&value), "{key}");
    }
    assert_eq!(f.get_u64("u32").unwrap(), 4_000_000_000);
    assert!(f.get_u64("i64").is_err(), "negative is not a u64");
    assert_eq!(f.get_str_array("strings").unwrap(), vec!["a", "ü€"]);
    assert_eq!(f.architecture().unwrap(), "llama");
    for (t, data) in f.tensors().iter().zip(sample_data()) {
        assert_eq!(t.offset % 32, 0, "{} is aligned", t.name);
        assert_eq!(f.tensor_data(t), &data[..]);
    }
    assert_eq!(f.tensor("a").unwrap().dims, vec![3, 2]);
    assert_eq!(f.tensor("b").unwrap().ty, GgmlType::Q8_0);
    assert_eq!(f.data_offset() % 32, 0);
}

fn sample_metadata() -> Vec<(String, Value)> {
    let f = GgufFile::from_vec("sample", write_sample()).unwrap();
    let keys = [
        "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "u64", "i64", "f64",
    ];
    let expected: [Value; 11] = [
        7u8.into(),
        (-7i8).into(),
        65535u16.into(),
        (-300i16).into(),
        4_000_000_000u32.into(),
        (-5i32).into(),
        1.5f32.into(),
        true.into(),
        u64::MAX.into(),
        i64::MIN.into(),
        (-2.25f64).into(),
    ];
    let mut all: Vec<(String, Value)> = keys.iter().map(|k| k.to_string()).zip(expected).collect();
    all.push(("nested".into(), f.get("nested").unwrap().clone()));
    assert_eq!(
        f.get("nested").unwrap().as_array().unwrap()[1],
        Value::Array(ValueType::String, vec!["x".into()])
    );
    all
}

#[test]
fn custom_alignment_is_honoured() {
    let mut w = GgufWriter::new();
    w.set("general.alignment", 64u32);
    w.add_tensor("x", GgmlType::F32, &[3]).unwrap();
    w.add_tensor("y", GgmlType::F32, &[1]).unwrap();
    let mut out = w.start(Vec::new()).unwrap();
    out.write_tensor(&[1; 12]).unwrap();
    out.write_tensor(&[2; 4]).unwrap();
    let f = GgufFile::from_vec("aligned", out.finish().unwrap()).unwrap();
    assert_eq!(f.alignment(), 64);
    assert_eq!(f.data_offset() % 64, 0);
    assert_eq!(f.tensor("y").unwrap().offset, 64);
    assert_eq!(f.tensor_data(f.tensor("y").unwrap()), &[2; 4]);
}

#[test]
fn writer_rejects_mistakes_without_panicking() {
    let mut w = GgufWriter::new();
    assert!(w.add_tensor("q", GgmlType::Q4K, &[100]).is_err());
    assert!(w
        .add_tensor("five", GgmlType::F32, &[1, 1, 1, 1, 1])
        .is_err());
    w.add_tensor("t", GgmlType::F32, &[2]).unwrap();
    assert!(w.add_tensor("t", GgmlType::F32, &[2]).is_err());
    w.set("mixed", Value::Array(ValueType::U8, vec![Value::U32(1)]));
    assert!(w.start(Vec::new()).is_err());

    let mut w = GgufWriter::new();
    w.add_tensor("t", GgmlType::F32, &[2]).unwrap();
    let mut out = w.start(Vec::new()).unwrap();
    assert!(out.write_tensor(&[0; 7]).is_err());
    let out = GgufWriter::new().start(Vec::new()).unwrap();
    assert!(out.finish().is_ok());
}

#[test]
fn unfinished_file_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.gguf");
    let mut w = GgufWriter::new();
    w.add_tensor("t", GgmlType::F32, &[2]).unwrap();
    let out = w.create(&path).unwrap();
    assert!(out.finish().is_err(), "tensor t was never written");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);

    let mut w = GgufWriter::new();
    w.add_tensor("t", GgmlType::F32, &[2]).unwrap();
    let mut out = w.create(&path).unwrap();
    out.write_tensor(&[0; 8]).unwrap();
    out.finish().unwrap();
    assert!(GgufFile::open(&path).is_ok());
}

/// Files written by llama.cpp's tools (the goldens) open, and re-writing them is byte-exact.
#[test]
fn llama_cpp_files_open_and_rewrite_identically() {
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/golden");
    let mut seen = 0;
    for entry in std::fs::read_dir(&golden).expect("../shared/golden is present") {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "gguf") {
            continue;
        }
        let f = GgufFile::open(&path).unwrap();
        assert!(!f.tensors().is_empty(), "{}", path.display());
        let mut w = GgufWriter::new();
        for (k, v) in f.metadata() {
            w.set(k, v.clone());
        }
        for t in f.tensors() {
            w.add_tensor(&t.name, t.ty, &t.dims).unwrap();
        }
        let mut out = w.start(Vec::new()).unwrap();
        for t in f.tensors() {
            out.write_tensor(f.tensor_data(t)).unwrap();
        }
        let bytes = out.finish().unwrap();
        let original = std::fs::read(&path).unwrap();
        assert!(
            bytes == original,
            "{} differs after rewrite",
            path.display()
        );
        seen += 1;
    }
    assert!(seen >= 12, "expected the golden models, found {seen}");
}
