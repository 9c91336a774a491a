//! What a server without an API key accepts from a browser's reach. Any web page the user
//! visits can send requests to a local port, and a DNS-rebinding page can do so under its own
//! host name. So, without `--api-key`:
//! - the `Host` header must name the address the server is bound to (loopback names when bound
//!   to loopback; any IP literal when bound to every interface), or a name given with
//!   `--allow-host`: a rebinding page's requests carry its own name;
//! - a POST body must be declared `application/json`: a cross-site page can send `text/plain`
//!   without the CORS preflight, never `application/json`, and the server answers no preflight
//!   (CORS is off).

use std::net::{IpAddr, SocketAddr};

/// The `Host` values a server accepts.
#[derive(Clone, Debug)]
pub struct HostPolicy {
    bound: IpAddr,
    extra: Vec<String>,
}

impl HostPolicy {
    /// `extra`: names from `--allow-host` (`*` accepts any).
    pub fn new(addr: SocketAddr, extra: &[String]) -> Self {
        Self {
            bound: addr.ip(),
            extra: extra.iter().map(|h| normalize(h)).collect(),
        }
    }

    /// Whether a request with this `Host` header (with or without a port) may be served.
    pub fn allows(&self, host: &str) -> bool {
        let name = normalize(strip_port(host));
        if self.extra.iter().any(|e| e == "*" || *e == name) {
            return true;
        }
        let ip = name
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
            .ok();
        let loopback_name = name == "localhost" || ip.is_some_and(|ip| ip.is_loopback());
        if self.bound.is_loopback() {
            return loopback_name;
        }
        if self.bound.is_unspecified() {
            // Every interface: any address of this machine, which a page cannot rebind.
            return loopback_name || ip.is_some();
        }
        ip == Some(self.bound)
    }
}

fn normalize(host: &str) -> String {
    host.trim().trim_end_matches('.').to_ascii_lowercase()
}

/// `name:port` → `name`; `[v6]:port` → `[v6]`; a bare IPv6 address stays whole.
fn strip_port(host: &str) -> &str {
    if host.starts_with('[') {
        return host.find(']').map_or(host, |end| &host[..=end]);
    }
    match host.rsplit_once(':') {
        Some((name, port)) if !name.contains(':') && port.bytes().all(|b| b.is_ascii_digit()) => {
            name
        }
        _ => host,
    }
}

/// `application/json`, with parameters (`; charset=utf-8`) or not.
pub fn is_json(content_type: &str) -> bool {
    content_type
        .split(';')
        .next()
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_takes_loopback_names_only() {
        let p = HostPolicy::new("127.0.0.1:8080".parse().unwrap(), &[]);
        for ok in [
            "127.0.0.1",
            "127.0.0.1:8080",
            "localhost:1",
            "LOCALHOST.",
            "[::1]:80",
        ] {
            assert!(p.allows(ok), "{ok}");
        }
        for bad in ["attacker.example", "attacker.example:8080", "10.0.0.1", ""] {
            assert!(!p.allows(bad), "{bad}");
        }
        let p = HostPolicy::new("127.0.0.1:8080".parse().unwrap(), &["box.lan".into()]);
        assert!(p.allows("box.lan:8080"));
    }

    #[test]
    fn other_bindings() {
        let any = HostPolicy::new("0.0.0.0:80".parse().unwrap(), &[]);
        assert!(any.allows("192.168.1.5:80") && any.allows("localhost"));
        assert!(!any.allows("evil.example"));
        let one = HostPolicy::new("192.168.1.5:80".parse().unwrap(), &[]);
        assert!(one.allows("192.168.1.5") && !one.allows("192.168.1.6"));
        assert!(is_json("Application/JSON; charset=utf-8") && !is_json("text/plain"));
    }
}
