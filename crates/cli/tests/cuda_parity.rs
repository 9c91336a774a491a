//! `ferrolm cuda-parity` without a GPU (CI's case) is a one-line error naming what is missing;
//! with one, it must pass.

use std::process::Command;

#[test]
fn cuda_parity_passes_or_names_what_is_missing() {
    let out = Command::new(env!("CARGO_BIN_EXE_ferrolm"))
        .args(["cuda-parity", "--seed", "1"])
        .output()
        .unwrap();
    let err = String::from_utf8(out.stderr).unwrap();
    if out.status.success() {
        assert!(err.contains("within contract"), "{err}");
        return;
    }
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.starts_with("error: cuda-parity: "), "{err}");
    assert!(
        [
            "no NVIDIA driver",
            "no usable CUDA device",
            "NVRTC",
            "CUDA headers"
        ]
        .iter()
        .any(|w| err.contains(w)),
        "{err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
}
