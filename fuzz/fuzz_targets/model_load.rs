//! A model file's config and weights index: any byte string that opens as a GGUF file must
//! either give a `Config` and bind every tensor the architecture needs, or be rejected with an
//! error. Never a panic, and never an allocation sized by an unchecked count (block_count,
//! expert_count, vocab_size and the rest are only trusted after they are checked against the
//! tensors present).
#![no_main]

use ferrolm_gguf::GgufFile;
use ferrolm_model::weights::ModelWeights;
use ferrolm_model::{tensor_specs, Config};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(f) = GgufFile::from_vec("fuzz", data.to_vec()) else {
        return;
    };
    let Ok(cfg) = Config::from_gguf(&f) else {
        return;
    };
    // What a loader checks before sizing anything by block_count.
    if cfg.check_blocks(&f).is_err() {
        return;
    }
    // The layout's names and shapes for this config, then the weights index over the file.
    let n_specs = tensor_specs(&cfg).len();
    assert!(n_specs > 0);
    let loaded = ModelWeights::<usize>::load(&cfg, &f, |_, _, dims, bytes| {
        let elems: u64 = dims.iter().product();
        assert!(bytes.len() as u64 >= elems.min(1));
        Ok(bytes.len())
    });
    let _ = loaded.is_ok();
});
