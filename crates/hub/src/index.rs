//! PEP 691 (JSON simple API) pages: parsing, wheel selection, URL handling.

use crate::HubError;
use serde::Deserialize;
use std::collections::BTreeMap;

/// Media type asked for in `Accept`; PEP 691 content negotiation.
pub const PEP691_JSON: &str = "application/vnd.pypi.simple.v1+json";

/// One entry of a project page's `files` list.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct IndexFile {
    pub filename: String,
    /// Absolute, or relative to the page's own URL.
    pub url: String,
    #[serde(default)]
    pub hashes: BTreeMap<String, String>,
    /// Optional in PEP 691 v1.0, used only as a progress total.
    #[serde(default)]
    pub size: Option<u64>,
}

#[derive(Deserialize)]
struct ProjectPage {
    files: Vec<IndexFile>,
}

/// Parses a PEP 691 project page; `url` only names it in errors.
pub fn parse_project_page(json: &str, url: &str) -> Result<Vec<IndexFile>, HubError> {
    serde_json::from_str::<ProjectPage>(json)
        .map(|p| p.files)
        .map_err(|source| HubError::BadIndex {
            url: redact(url),
            source,
        })
}

/// PEP 503 name normalisation: lower case, runs of `-_.` become one `-`.
pub fn normalize_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        if matches!(c, '-' | '_' | '.') {
            if !out.ends_with('-') {
                out.push('-');
            }
        } else {
            out.push(c.to_ascii_lowercase());
        }
    }
    out
}

/// The project page URL under an index base (`.../simple`).
pub fn project_url(index: &str, package: &str) -> String {
    format!(
        "{}/{}/",
        index.trim_end_matches('/'),
        normalize_name(package)
    )
}

/// Picks the wheel of `package==version`, preferring a pure-Python one.
pub fn select_wheel<'a>(
    files: &'a [IndexFile],
    package: &str,
    version: &str,
) -> Option<&'a IndexFile> {
    // Wheel names spell the project with `_` (PEP 427), then `-VERSION-`.
    let prefix = format!("{}-{}-", normalize_name(package).replace('-', "_"), version);
    let matching: Vec<&IndexFile> = files
        .iter()
        .filter(|f| {
            let lower = f.filename.to_ascii_lowercase();
            lower.starts_with(&prefix) && lower.ends_with(".whl")
        })
        .collect();
    matching
        .iter()
        .find(|f| f.filename.ends_with("-none-any.whl"))
        .or(matching.first())
        .copied()
}

/// Resolves `href` against the page URL `base` (RFC 3986, section 5.2),
/// dropping any fragment; only the forms index pages use are handled.
pub fn resolve_url(base: &str, href: &str) -> Result<String, HubError> {
    let href = href.split('#').next().unwrap_or_default();
    if has_scheme(href) {
        return Ok(href.to_string());
    }
    let bad = |reason| HubError::BadUrl {
        url: redact(base),
        reason,
    };
    let base = base.split('#').next().unwrap_or_default();
    let (scheme, rest) = base.split_once("://").ok_or(bad("no scheme"))?;
    let (authority, base_path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, "/"),
    };
    if authority.is_empty() {
        return Err(bad("no host"));
    }
    if let Some(net_path) = href.strip_prefix("//") {
        return Ok(format!("{scheme}://{net_path}"));
    }
    let base_path = base_path.split('?').next().unwrap_or("/");
    let (path, query) = match href.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (href, None),
    };
    let merged = if path.starts_with('/') {
        path.to_string()
    } else if path.is_empty() {
        base_path.to_string()
    } else {
        // Everything up to the base's last `/`, then the reference.
        let dir = &base_path[..=base_path.rfind('/').unwrap_or(0)];
        format!("{dir}{path}")
    };
    let mut out = format!("{scheme}://{authority}{}", remove_dot_segments(&merged));
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    Ok(out)
}

fn has_scheme(s: &str) -> bool {
    match s.split_once(':') {
        Some((scheme, _)) => {
            !scheme.is_empty()
                && scheme.starts_with(|c: char| c.is_ascii_alphabetic())
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        }
        None => false,
    }
}

fn remove_dot_segments(path: &str) -> String {
    let segs: Vec<&str> = path.split('/').collect();
    let mut out: Vec<&str> = Vec::new();
    // segs[0] is the empty segment before the leading `/`.
    for (i, seg) in segs.iter().enumerate().skip(1) {
        let last = i + 1 == segs.len();
        match *seg {
            "." => {}
            ".." => {
                out.pop();
            }
            s => out.push(s),
        }
        // `a/.` and `a/..` name a folder: keep the trailing slash.
        if last && matches!(*seg, "." | "..") {
            out.push("");
        }
    }
    format!("/{}", out.join("/"))
}

/// Host part of an absolute URL, without userinfo or port.
fn host(url: &str) -> Option<&str> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split(['/', '?', '#']).next()?;
    let hostport = authority.rsplit('@').next()?;
    if let Some(v6) = hostport.strip_prefix('[') {
        return v6.split(']').next();
    }
    hostport.split(':').next()
}

fn is_loopback_host(h: &str) -> bool {
    h.eq_ignore_ascii_case("localhost")
        || h == "::1"
        || h.parse::<std::net::Ipv4Addr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Plain http is only for a test server on this machine; everything else
/// must be https, whose certificates are checked against the OS store.
pub fn is_loopback_http(url: &str) -> bool {
    url.get(..7)
        .is_some_and(|s| s.eq_ignore_ascii_case("http://"))
        && host(url).is_some_and(is_loopback_host)
}

/// Refuses URLs other than https (or loopback http).
pub fn check_url(url: &str) -> Result<(), HubError> {
    if url
        .get(..8)
        .is_some_and(|s| s.eq_ignore_ascii_case("https://"))
        || is_loopback_http(url)
    {
        Ok(())
    } else {
        Err(HubError::InsecureUrl { url: redact(url) })
    }
}

/// Hides `user:password@` in URLs (mirrors put credentials there) for messages.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..end].rfind('@') {
        Some(at) => format!("{scheme}://***@{}", &rest[at + 1..]),
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests;
