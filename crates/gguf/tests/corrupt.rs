//! Hand-made corrupt files: each must be rejected with an error naming what is wrong, never a
//! panic or an out-of-bounds read.

use ferrolm_gguf::{GgmlType, GgufFile, GgufWriter, Value, ValueType};

/// A small valid file: two metadata entries (one an array), two tensors.
fn valid() -> Vec<u8> {
    let mut w = GgufWriter::new();
    w.set("general.architecture", "llama");
    w.set(
        "tokenizer.ggml.tokens",
        Value::Array(ValueType::String, vec!["<s>".into(), "hi".into()]),
    );
    w.add_tensor("tok", GgmlType::F32, &[4, 2]).unwrap();
    w.add_tensor("q", GgmlType::Q8_0, &[32]).unwrap();
    let mut out = w.start(Vec::new()).unwrap();
    out.write_tensor(&[1; 32]).unwrap();
    out.write_tensor(&[2; 34]).unwrap();
    out.finish().unwrap()
}

fn error_of(bytes: Vec<u8>) -> String {
    match GgufFile::from_vec("bad.gguf", bytes) {
        Ok(_) => panic!("corrupt file was accepted"),
        Err(e) => e.to_string(),
    }
}

/// Byte offset of the first occurrence of `needle`.
fn find(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len()).position(|w| w == needle).unwrap()
}

#[test]
fn truncation_anywhere_is_an_error() {
    let bytes = valid();
    assert!(GgufFile::from_vec("ok", bytes.clone()).is_ok());
    for len in 0..bytes.len() {
        let e = error_of(bytes[..len].to_vec());
        assert!(e.starts_with("bad.gguf: "), "names the file: {e}");
    }
}

#[test]
fn bad_magic_and_versions() {
    let mut b = valid();
    b[0] = b'X';
    assert!(error_of(b).contains("not a GGUF file"));
    for v in [1u32, 4, 0xffff_ffff] {
        let mut b = valid();
        b[4..8].copy_from_slice(&v.to_le_bytes());
        assert!(error_of(b).contains(&format!("unsupported GGUF version {v}")));
    }
}

#[test]
fn huge_counts_cannot_fit() {
    for field in [8usize, 16] {
        let mut b = valid();
        b[field..field + 8].copy_from_slice(&(u64::MAX / 2).to_le_bytes());
        assert!(error_of(b).contains("cannot fit"));
    }
}

#[test]
fn huge_string_and_array_lengths() {
    let mut b = valid();
    let key = find(&b, b"general.architecture");
    b[key - 8..key].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(error_of(b).contains("claims a length"));

    let mut b = valid();
    // The array header sits right after the key and the value type: elem type, then count.
    let key = find(&b, b"tokenizer.ggml.tokens") + "tokenizer.ggml.tokens".len();
    b[key + 8..key + 16].copy_from_slice(&(1u64 << 60).to_le_bytes());
    assert!(error_of(b).contains("cannot fit"));
}

#[test]
fn unknown_types() {
    let mut b = valid();
    let key = find(&b, b"general.architecture") + "general.architecture".len();
    b[key..key + 4].copy_from_slice(&77u32.to_le_bytes());
    assert!(error_of(b).contains("unknown value type id 77"));

    let mut b = valid();
    let ty_at = tensor_field(&b, "q", 1);
    b[ty_at..ty_at + 4].copy_from_slice(&4u32.to_le_bytes());
    let e = error_of(b);
    assert!(
        e.contains("tensor `q`") && e.contains("unknown tensor type id 4"),
        "{e}"
    );
}

/// Byte offset of a field in tensor `name`'s info: 0 = first dim, 1 = type, 2 = offset.
fn tensor_field(b: &[u8], name: &str, field: usize) -> usize {
    // The tensor infos follow the metadata; find the name after its 8-byte length prefix.
    let mut needle = (name.len() as u64).to_le_bytes().to_vec();
    needle.extend_from_slice(name.as_bytes());
    let start = find(b, &needle) + needle.len();
    let n_dims = u32::from_le_bytes(b[start..start + 4].try_into().unwrap()) as usize;
    let dims = start + 4;
    [dims, dims + 8 * n_dims, dims + 8 * n_dims + 4][field]
}

#[test]
fn tensor_data_outside_the_file() {
    let mut b = valid();
    let off = tensor_field(&b, "q", 2);
    b[off..off + 8].copy_from_slice(&(1u64 << 40).to_le_bytes());
    let e = error_of(b);
    assert!(
        e.contains("tensor `q`") && e.contains("outside the file"),
        "{e}"
    );

    let mut b = valid();
    let off = tensor_field(&b, "q", 2);
    b[off..off + 8].copy_from_slice(&(u64::MAX - 31).to_le_bytes());
    assert!(error_of(b).contains("outside the file"));
}

#[test]
fn misaligned_offset() {
    let mut b = valid();
    let off = tensor_field(&b, "q", 2);
    b[off..off + 8].copy_from_slice(&33u64.to_le_bytes());
    assert!(error_of(b).contains("not a multiple of the alignment 32"));
}

#[test]
fn dimension_overflow_and_bad_rank() {
    let mut b = valid();
    let d = tensor_field(&b, "tok", 0);
    b[d..d + 8].copy_from_slice(&(1u64 << 62).to_le_bytes());
    b[d + 8..d + 16].copy_from_slice(&(1u64 << 62).to_le_bytes());
    assert!(error_of(b).contains("overflow"));

    let mut b = valid();
    let d = tensor_field(&b, "tok", 0);
    b[d..d + 8].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(error_of(b).contains("negative"));

    let mut b = valid();
    let d = tensor_field(&b, "tok", 0);
    b[d - 4..d].copy_from_slice(&9u32.to_le_bytes());
    assert!(error_of(b).contains("9 dimensions"));

    let mut b = valid();
    let d = tensor_field(&b, "q", 0);
    b[d..d + 8].copy_from_slice(&31u64.to_le_bytes());
    assert!(error_of(b).contains("not a multiple of the 32-element Q8_0 block"));
}

#[test]
fn bad_alignment_and_duplicates() {
    let mut w = GgufWriter::new();
    w.set("general.alignment", 48u32);
    assert!(w.start(Vec::new()).is_err(), "writer refuses it too");

    // Forge alignment 48 by editing a valid file that declares 32.
    let mut w = GgufWriter::new();
    w.set("general.alignment", 32u32);
    let mut b = w.start(Vec::new()).unwrap().finish().unwrap();
    let at = find(&b, b"general.alignment") + "general.alignment".len() + 4;
    b[at..at + 4].copy_from_slice(&48u32.to_le_bytes());
    assert!(error_of(b).contains("power-of-two"));

    let mut w = GgufWriter::new();
    w.set("aaaa", 1u8);
    w.set("bbbb", 2u8);
    w.add_tensor("t1", GgmlType::F32, &[1]).unwrap();
    w.add_tensor("t2", GgmlType::F32, &[1]).unwrap();
    let mut out = w.start(Vec::new()).unwrap();
    out.write_tensor(&[0; 4]).unwrap();
    out.write_tensor(&[0; 4]).unwrap();
    let good = out.finish().unwrap();
    let mut b = good.clone();
    let at = find(&b, b"bbbb");
    b[at..at + 4].copy_from_slice(b"aaaa");
    assert!(error_of(b).contains("`aaaa` appears twice"));
    let mut b = good;
    let at = find(&b, b"t2");
    b[at..at + 2].copy_from_slice(b"t1");
    assert!(error_of(b).contains("tensor `t1` appears twice"));
}

#[test]
fn invalid_bool_and_utf8() {
    let mut w = GgufWriter::new();
    w.set("flag", true);
    let mut b = w.start(Vec::new()).unwrap().finish().unwrap();
    let at = find(&b, b"flag") + 4 + 4;
    b[at] = 2;
    assert!(error_of(b).contains("bool with byte value 2"));

    let mut b = valid();
    let at = find(&b, b"llama");
    b[at] = 0xff;
    assert!(error_of(b).contains("not valid UTF-8"));
}

#[test]
fn missing_things_are_named() {
    let f = GgufFile::from_vec("m.gguf", valid()).unwrap();
    let e = f.require_tensor("output.weight").unwrap_err().to_string();
    assert!(e.contains("output.weight") && e.contains("missing"), "{e}");
    let e = f.get_u64("llama.block_count").unwrap_err().to_string();
    assert!(e.contains("llama.block_count"), "{e}");
    let e = f.get_u64("general.architecture").unwrap_err().to_string();
    assert!(e.contains("expected a non-negative integer"), "{e}");
}
