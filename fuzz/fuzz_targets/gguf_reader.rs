//! Any byte string either parses or is rejected with an error: never a panic, an
//! out-of-bounds read, or an allocation sized by an unchecked count.
#![no_main]

use ferrolm_gguf::GgufFile;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(f) = GgufFile::from_vec("fuzz", data.to_vec()) {
        // Touch everything a valid file exposes, so the bounds checks at open are exercised.
        for (k, v) in f.metadata() {
            let _ = (k.len(), v.summary());
        }
        for t in f.tensors() {
            let d = f.tensor_data(t);
            assert_eq!(d.len() as u64, t.n_bytes);
        }
    }
});
