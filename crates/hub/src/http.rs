//! The HTTP side: one ureq agent, TLS checked against the OS trust store.

use crate::index::{check_url, redact};
use crate::HubError;
use sha2::{Digest, Sha256};
use std::fs::File;
use std::io::{Read, Write};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use ureq::tls::{RootCerts, TlsConfig, TlsProvider};
use ureq::{Agent, ResponseExt};

/// Index pages are small; anything bigger is not one.
const MAX_PAGE_BYTES: u64 = 16 << 20;

pub(crate) struct Http {
    agent: Agent,
}

/// An index page's body with the URL it was finally served from.
pub(crate) struct Page {
    pub body: String,
    pub url: String,
}

impl Http {
    /// `allow_plain_http` is for loopback test servers; otherwise every
    /// request and redirect must be https.
    pub fn new(allow_plain_http: bool) -> Self {
        // The platform verifier reads the OS store (on Linux the system bundle,
        // or SSL_CERT_FILE / SSL_CERT_DIR), where intercepting proxies put their
        // CA; no root set is compiled in. ring needs no cmake, unlike aws-lc-rs.
        let tls = TlsConfig::builder()
            .provider(TlsProvider::Rustls)
            .root_certs(RootCerts::PlatformVerifier)
            .unversioned_rustls_crypto_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .build();
        // ureq's default config already takes HTTPS_PROXY / ALL_PROXY / NO_PROXY
        // (and lower-case forms) from the environment.
        let agent = Agent::config_builder()
            .tls_config(tls)
            .https_only(!allow_plain_http)
            .user_agent(format!("ferrolm/{}", env!("CARGO_PKG_VERSION")))
            .timeout_connect(Some(Duration::from_secs(30)))
            .timeout_recv_response(Some(Duration::from_secs(60)))
            // A stalled transfer fails instead of hanging; the total is unbounded.
            .timeout_per_read(Some(Duration::from_secs(60)))
            .build()
            .new_agent();
        Http { agent }
    }

    /// GETs a PEP 691 page.
    pub fn get_page(&self, url: &str, accept: &str) -> Result<Page, HubError> {
        check_url(url)?;
        let mut resp = self
            .agent
            .get(url)
            .header("Accept", accept)
            .call()
            .map_err(|e| net_error(url, e))?;
        let final_url = resp.get_uri().to_string();
        let body = resp
            .body_mut()
            .with_config()
            .limit(MAX_PAGE_BYTES)
            .read_to_string()
            .map_err(|e| net_error(url, e))?;
        Ok(Page {
            body,
            url: final_url,
        })
    }

    /// Streams `url` into `out`, reporting progress; returns the body's sha256
    /// (lower-case hex). `size_hint` is the total when no Content-Length comes.
    pub fn download(
        &self,
        url: &str,
        out: &mut File,
        out_path: &Path,
        size_hint: Option<u64>,
        progress: &dyn Fn(u64, Option<u64>),
    ) -> Result<String, HubError> {
        check_url(url)?;
        let resp = self.agent.get(url).call().map_err(|e| net_error(url, e))?;
        let total = resp.body().content_length().or(size_hint);
        // No limit: the wheel is large, and the hash check bounds what is kept.
        let mut body = resp.into_body().into_reader();
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; 256 << 10];
        let mut done = 0u64;
        progress(0, total);
        loop {
            // ureq fails the read if the peer closes before Content-Length bytes.
            let n = match body.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(net_error(url, e)),
            };
            hasher.update(&buf[..n]);
            out.write_all(&buf[..n])
                .map_err(|e| HubError::io("writing", out_path, e))?;
            done += n as u64;
            progress(done, total);
        }
        Ok(hex(&hasher.finalize()))
    }
}

fn net_error(url: &str, e: impl Into<ureq::Error>) -> HubError {
    match e.into() {
        ureq::Error::StatusCode(status) => HubError::HttpStatus {
            url: redact(url),
            status,
        },
        other => HubError::Network {
            url: redact(url),
            source: Box::new(other),
        },
    }
}

/// Lower-case hex, as PEP 691 `hashes` values are written.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
