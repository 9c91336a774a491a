//! `ferrolm bench` reports llama-bench's fields (no timing is asserted: a benchmark is not a
//! timed test).

use std::process::Command;

/// A tiny golden model's path.
fn golden(stem: &str) -> String {
    format!(
        "{}/../../../shared/golden/{stem}.gguf",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// `ferrolm bench ARGS`'s stdout; a failed run fails the test with its stderr.
fn bench(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_ferrolm"))
        .arg("bench")
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn json_report_has_llama_bench_fields() {
    let model = golden("tiny-olmoe-q8_0");
    let json = bench(&[
        "-m", &model, "-p", "16,8", "-n", "4", "-r", "2", "-o", "json", "-t", "1",
    ]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
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

/// `-d` (llama-bench's `--n-depth`): every test at every depth, `n_depth` in the JSON and
/// `@ dN` in the table, as llama-bench reports them.
#[test]
fn depth_runs_each_test_after_a_cached_prefix() {
    let model = golden("tiny-qwen3-q8_0");
    let run = |format: &str| {
        bench(&[
            "-m", &model, "-p", "8", "-n", "2", "-d", "0,40", "-r", "1", "-t", "1", "-o", format,
        ])
    };
    let v: serde_json::Value = serde_json::from_str(&run("json")).unwrap();
    let tests: Vec<(u64, u64, u64)> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let n = |k: &str| r[k].as_u64().unwrap();
            (n("n_prompt"), n("n_gen"), n("n_depth"))
        })
        .collect();
    assert_eq!(tests, vec![(8, 0, 0), (0, 2, 0), (8, 0, 40), (0, 2, 40)]);
    let table = run("md");
    assert!(table.contains("| pp8 |"), "{table}");
    assert!(table.contains("| tg2 @ d40 |"), "{table}");
}
