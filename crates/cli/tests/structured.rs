//! Structured output on the default model: `ferrolm serve` with `response_format` and
//! `grammar` through the official `openai` client (20 schemas validated with `jsonschema`),
//! and `ferrolm run --json-schema` / `--grammar`.

#[path = "serve/harness.rs"]
mod harness;

use harness::{python_script, Server};
use std::process::Command;

#[test]
fn openai_client_json_schemas_json_object_grammar_and_bad_input() {
    let probe = Command::new("python3")
        .args(["-c", "import jsonschema"])
        .output();
    assert!(
        probe.is_ok_and(|o| o.status.success()),
        "the `jsonschema` Python package is missing: python3 -m pip install -r .ci/requirements.txt"
    );
    let server = Server::start(&["--parallel", "4"]);
    let out = python_script(&server, "structured_client.py", &[]);
    for part in [
        "bad input ok",
        "length ok",
        "grammar ok",
        "json_object ok",
        "schemas ok",
    ] {
        assert!(out.contains(part), "{out}");
    }
}

fn run(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ferrolm"))
        .arg("run")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn run_with_json_schema_and_grammar_files() {
    let dir = tempfile::tempdir().unwrap();
    let schema = dir.path().join("schema.json");
    std::fs::write(
        &schema,
        r#"{"type":"object","properties":{"city":{"type":"string","maxLength":12},
            "population":{"type":"integer","minimum":0,"maximum":99999999}},
            "required":["city","population"],"additionalProperties":false}"#,
    )
    .unwrap();
    let schema = schema.to_str().unwrap();
    let (ok, out, err) = run(&[
        "-p",
        "The largest city in France, as JSON:",
        "--temp",
        "0",
        "-n",
        "64",
        "-t",
        "2",
        "--json-schema",
        schema,
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim_end()).unwrap_or_else(|e| {
        panic!("not JSON ({e}): {out:?}");
    });
    assert!(v["city"].as_str().is_some_and(|c| c.len() <= 12), "{out}");
    assert!(v["population"].as_u64().is_some(), "{out}");
    assert_eq!(v.as_object().unwrap().len(), 2, "{out}");

    let gbnf = dir.path().join("answer.gbnf");
    std::fs::write(&gbnf, "root ::= (\"yes\" | \"no\") \".\"\n").unwrap();
    let (ok, out, err) = run(&[
        "-p",
        "Is Paris in France? Answer:",
        "--temp",
        "0.7",
        "-n",
        "8",
        "--grammar",
        gbnf.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert!(["yes.", "no."].contains(&out.trim_end()), "{out:?}");

    // Bad files: one line naming the flag.
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, r#"{"type":"integr"}"#).unwrap();
    for (flag, file) in [
        ("--json-schema", bad.to_str().unwrap()),
        ("--json-schema", "/no/such/file.json"),
        ("--grammar", schema),
    ] {
        let (ok, _, err) = run(&["-p", "x", "-n", "4", flag, file]);
        assert!(!ok && err.contains(flag), "{flag} {file}: {err}");
    }
}
