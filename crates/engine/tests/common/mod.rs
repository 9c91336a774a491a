//! What the whole-model tests share: where the goldens are and which device runs the model.
//!
//! `FERROLM_TEST_BACKEND=cuda` runs the same tests, with the same bars, on GPU 0 (on the GPU
//! machine, where `FERROLM_GOLDEN_DIR` points at a copy of `../shared/golden`).

#![allow(dead_code)]

pub mod logits;

use ferrolm_engine::{Device, KvType, Model};
use ferrolm_gguf::GgufFile;

pub fn golden(name: &str) -> String {
    ferrolm_testkit::shared_golden(name)
        .to_string_lossy()
        .into_owned()
}

pub fn on_cuda() -> bool {
    std::env::var("FERROLM_TEST_BACKEND").is_ok_and(|v| v == "cuda")
}

pub fn load(file: &GgufFile) -> Model<'_> {
    let device = if on_cuda() {
        Device::cuda(0).expect("FERROLM_TEST_BACKEND=cuda needs a GPU")
    } else {
        Device::Cpu
    };
    Model::load_on(file, &device).unwrap()
}

/// The GPU keeps its KV cache in f16 only.
pub fn kv_type(wanted: KvType) -> KvType {
    if on_cuda() {
        KvType::F16
    } else {
        wanted
    }
}
