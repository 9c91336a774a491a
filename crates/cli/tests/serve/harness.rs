//! What the HTTP tests share: a `ferrolm serve` child on a free port, one-shot HTTP
//! requests, and the Python clients under `tests/serve/`.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Server {
    child: Child,
    pub port: u16,
    pub model: String,
    pub key: Option<String>,
}

impl Server {
    /// Starts the binary on a free loopback port (`--port 0`), waits for it to listen.
    pub fn start(extra: &[&str]) -> Server {
        let key = extra
            .windows(2)
            .find(|w| w[0] == "--api-key")
            .map(|w| w[1].to_owned());
        Self::start_with(extra, &[], key)
    }

    /// As [`Server::start`], with environment variables and the key requests must carry.
    pub fn start_with(extra: &[&str], env: &[(&str, &str)], key: Option<String>) -> Server {
        // 512 tokens of context unless the test gives its own.
        let ctx: &[&str] = if extra.contains(&"-c") {
            &[]
        } else {
            &["-c", "512"]
        };
        let mut child = Command::new(env!("CARGO_BIN_EXE_ferrolm"))
            .args(["serve", "--port", "0"])
            .args(ctx)
            .args(extra)
            .envs(env.iter().copied())
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let port = loop {
            let line = lines
                .next()
                .expect("the server printed its address")
                .unwrap();
            if let Some(rest) = line.split("http://127.0.0.1:").nth(1) {
                break rest.split_whitespace().next().unwrap().parse().unwrap();
            }
        };
        // Keep draining stderr so the server never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        let mut s = Server {
            child,
            port,
            model: String::new(),
            key,
        };
        let (code, body) = s.get("/v1/models");
        assert_eq!(code, 200, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        s.model = v["data"][0]["id"].as_str().unwrap().to_owned();
        s
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }

    pub fn auth(&self) -> Vec<(String, String)> {
        self.key
            .iter()
            .map(|k| ("Authorization".to_owned(), format!("Bearer {k}")))
            .collect()
    }

    pub fn get(&self, path: &str) -> (u16, String) {
        http(self.port, "GET", path, &self.auth(), b"")
    }

    pub fn post(&self, path: &str, body: &str) -> (u16, String) {
        http(self.port, "POST", path, &self.auth(), body.as_bytes())
    }

    pub fn metric(&self, name: &str) -> f64 {
        let (_, text) = self.get("/metrics");
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in /metrics:\n{text}"))
    }

    /// Waits (up to 20 s) until a request holds a slot.
    pub fn wait_busy(&self) {
        let t0 = Instant::now();
        while self.metric("ferrolm_slots_active") < 1.0 {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "the first request never started"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits until no slot holds a sequence and nothing is queued.
    pub fn wait_idle(&self, within: Duration) {
        let t0 = Instant::now();
        while self.metric("ferrolm_slots_active") != 0.0
            || self.metric("ferrolm_queue_depth") != 0.0
        {
            assert!(t0.elapsed() < within, "slots still busy after {within:?}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One HTTP/1.1 request on a fresh connection; the status and the body.
pub fn http(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> (u16, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).unwrap();
    // The server may answer (413) before reading a large body and close: that is fine.
    let _ = s.write_all(body);
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw).into_owned();
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {text:?}"));
    let body = text.split_once("\r\n\r\n").map_or("", |x| x.1).to_owned();
    (code, body)
}

/// Runs `tests/serve/openai_client.py` against `server`; its stdout (the test fails if it does).
pub fn python_client(server: &Server, args: &[&str]) -> String {
    python_script(server, "openai_client.py", args)
}

/// Runs the Python client `tests/serve/SCRIPT` with the server's URL and model first.
pub fn python_script(server: &Server, script: &str, args: &[&str]) -> String {
    let script = format!("{}/tests/serve/{script}", env!("CARGO_MANIFEST_DIR"));
    let probe = Command::new("python3")
        .args(["-c", "import openai"])
        .output();
    assert!(
        probe.is_ok_and(|o| o.status.success()),
        "the `openai` Python package is missing: python3 -m pip install -r .ci/requirements.txt"
    );
    let out = Command::new("python3")
        .arg(&script)
        .args([server.url().as_str(), server.model.as_str()])
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}
