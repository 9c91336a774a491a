//! `ferrolm bench` reports llama-bench's fields (no timing is asserted: a benchmark is not a
//! timed test).

use std::process::Command;

#[test]
fn json_report_has_llama_bench_fields() {
    let model = format!(
        "{}/../../../shared/golden/tiny-olmoe-q8_0.gguf",
        env!("CARGO_MANIFEST_DIR")
    );
    let out = Command::new(env!("CARGO_BIN_EXE_ferrolm"))
        .args([
            "bench", "-m", &model, "-p", "16,8", "-n", "4", "-r", "2", "-o", "json", "-t", "1",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let records = v.as_array().unwrap();
    let tests: Vec<(u64, u64)> = records
        .iter()
        .map(|r| {
            (
                r["n_prompt"].as_u64().unwrap(),
                r["n_gen"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(tests, vec![(16, 0), (8, 0), (0, 4)]);
    for r in records {
        assert_eq!(r["samples_ts"].as_array().unwrap().len(), 2);
        assert!(r["avg_ts"].as_f64().unwrap() > 0.0);
        assert!(r["stddev_ts"].as_f64().unwrap() >= 0.0);
        assert_eq!(r["n_threads"], 1);
        assert_eq!(r["backend"], "CPU");
        assert!(r["model_size"].as_u64().unwrap() > 0);
        assert!(r["model_n_params"].as_u64().unwrap() > 0);
        assert!(r["model_filename"]
            .as_str()
            .unwrap()
            .ends_with("tiny-olmoe-q8_0.gguf"));
    }
}

#[test]
fn cuda_backend_is_a_clear_error_until_it_exists() {
    let out = Command::new(env!("CARGO_BIN_EXE_ferrolm"))
        .args(["bench", "--backend", "cuda", "-p", "8", "-n", "0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("--backend cuda"), "{err}");
}
