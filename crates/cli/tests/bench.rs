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

/// Batched mode (`-npp`/`-ntg`/`-npl`, llama-batched-bench's) on the default model: the
/// table's columns, and JSON lines with llama-batched-bench's fields, one per (PP, TG, B)
/// whose N_KV fits in `-c` (B = 3 needs 4 + 3·2 = 10 > 9 positions and is skipped, as
/// llama-batched-bench skips it); the JSON run with each sequence's tokens its own.
#[test]
fn batched_mode_reports_llama_batched_bench_columns_and_fields() {
    let table = bench(&["-npp", "4", "-ntg", "2", "-npl", "2", "-t", "2"]);
    let header = table
        .lines()
        .find(|l| l.starts_with("|    PP"))
        .unwrap_or_else(|| panic!("no table header in {table}"));
    let cols: Vec<&str> = header
        .split('|')
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    assert_eq!(
        cols,
        ["PP", "TG", "B", "N_KV", "T_PP s", "S_PP t/s", "T_TG s", "S_TG t/s", "T s", "S t/s"]
    );
    let row: Vec<&str> = table
        .lines()
        .last()
        .unwrap()
        .split('|')
        .map(str::trim)
        .collect();
    assert_eq!(&row[1..5], ["4", "2", "2", "12"], "{table}");

    let jsonl = bench(&[
        "-npp",
        "4",
        "-ntg",
        "2",
        "-npl",
        "1,2,3",
        "-pps",
        "--distinct-tokens",
        "-c",
        "9",
        "-t",
        "2",
        "--output-format",
        "jsonl",
    ]);
    let lines: Vec<serde_json::Value> = jsonl
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let fields = [
        "n_kv_max",
        "n_batch",
        "n_ubatch",
        "flash_attn",
        "is_pp_shared",
        "n_gpu_layers",
        "n_threads",
        "n_threads_batch",
        "pp",
        "tg",
        "pl",
        "n_kv",
        "t_pp",
        "speed_pp",
        "t_tg",
        "speed_tg",
        "t",
        "speed",
    ];
    let shapes: Vec<(u64, u64)> = lines
        .iter()
        .map(|l| (l["pl"].as_u64().unwrap(), l["n_kv"].as_u64().unwrap()))
        .collect();
    assert_eq!(shapes, vec![(1, 6), (2, 8)], "{jsonl}");
    for l in &lines {
        let keys: Vec<&str> = l.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys.len(), fields.len(), "{l}");
        for f in fields {
            assert!(l.get(f).is_some(), "no {f} in {l}");
        }
        assert_eq!((l["pp"].as_u64(), l["tg"].as_u64()), (Some(4), Some(2)));
        assert_eq!(
            (l["is_pp_shared"].as_u64(), l["n_kv_max"].as_u64()),
            (Some(1), Some(9))
        );
        let f = |k: &str| l[k].as_f64().unwrap();
        // Shared prompt: S_PP counts the prompt once; S_TG counts every sequence's tokens.
        assert!((f("speed_pp") * f("t_pp") - 4.0).abs() < 1e-3, "{l}");
        assert!(
            (f("speed_tg") * f("t_tg") - 2.0 * f("pl")).abs() < 1e-3,
            "{l}"
        );
        assert!((f("t") - f("t_pp") - f("t_tg")).abs() < 1e-6, "{l}");
    }
}

/// A batched-mode flag with a bad list is an error naming the flag.
#[test]
fn batched_mode_bad_list_names_the_flag() {
    let out = Command::new(env!("CARGO_BIN_EXE_ferrolm"))
        .args(["bench", "-npp", "128", "-npl", "1,0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("-npl: `0`"), "{err}");
}
