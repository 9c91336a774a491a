//! Nothing silent at load: every `<arch>.*` key of a file is one the loader reads, and every
//! tensor is one the architecture binds ([`crate::tensor_specs`]) or one it declares unused
//! ([`Arch::unused_tensors`]). Anything else may change the math, so the file is refused with
//! the key's or the tensor's name rather than run as if it were absent.
//!
//! A new architecture declares its own keys ([`Arch::extra_keys`]) and unused tensors there;
//! its tensors come from its layout as everyone's do.

use crate::arch::Arch;
use crate::config::Config;
use crate::error::{ModelError, Result};
use crate::layout::tensor_specs;
use ferrolm_gguf::GgufFile;
use std::collections::HashSet;

/// The `<arch>.*` keys [`Config::from_gguf`] reads for every architecture (the RoPE scaling
/// keys are [`crate::rope::KEYS`]).
const READ: [&str; 15] = [
    "context_length",
    "embedding_length",
    "block_count",
    "feed_forward_length",
    "attention.head_count",
    "attention.head_count_kv",
    "attention.key_length",
    "attention.value_length",
    "attention.layer_norm_rms_epsilon",
    "vocab_size",
    "rope.freq_base",
    // Checked to be the whole head (partial rotary is refused).
    "rope.dimension_count",
    "expert_count",
    "expert_used_count",
    "expert_feed_forward_length",
];

/// `<arch>.*` keys known to change nothing, with the reason (llama.cpp does not read them
/// either).
const NO_EFFECT: [(&str, &str); 1] = [(
    "tensor_data_layout",
    "old converters' note on how they permuted q and k; the tensors are in llama.cpp's order",
)];

/// Refuses a file with an `<arch>.*` key the loader does not read, naming it.
pub fn check_keys(f: &GgufFile, arch: Arch) -> Result<()> {
    let prefix = format!("{}.", arch.name());
    for (key, _) in f.metadata() {
        let Some(suffix) = key.strip_prefix(&prefix) else {
            continue;
        };
        let known = READ.contains(&suffix)
            || NO_EFFECT.iter().any(|(k, _)| *k == suffix)
            || crate::rope::KEYS.contains(&suffix)
            || arch.extra_keys().contains(&suffix);
        if !known {
            return Err(ModelError::Hparam {
                key: key.clone(),
                what: format!(
                    "is not supported for architecture {arch}: it may change the computation, \
                     and running without it could give wrong results"
                ),
            });
        }
    }
    Ok(())
}

/// Refuses a file with a tensor that `cfg`'s layout does not bind and its architecture does
/// not declare unused: `unknown tensor 'blk.0.foo.weight' for architecture llama`.
pub fn check_tensors(cfg: &Config, f: &GgufFile) -> Result<()> {
    let bound: HashSet<String> = tensor_specs(cfg).into_iter().map(|s| s.name).collect();
    let unused = cfg.arch.unused_tensors();
    for t in f.tensors() {
        if bound.contains(&t.name) {
            continue;
        }
        let stem = t
            .name
            .strip_prefix("blk.")
            .and_then(|rest| rest.split_once('.'))
            .map_or(t.name.as_str(), |(_, stem)| stem);
        if !unused.iter().any(|(name, _)| *name == stem) {
            return Err(ModelError::Invalid(format!(
                "unknown tensor '{}' for architecture {}: it may change the computation, and \
                 running without it could give wrong results",
                t.name, cfg.arch
            )));
        }
    }
    Ok(())
}
