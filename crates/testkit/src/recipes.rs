//! The golden models, regenerated from their recipes (`goldens/*/NAME.recipe.json`) with
//! ferrolm's generator and quantizer, and held to the sha256 of the file llama.cpp ran when
//! the golden was made: ferrolm's quantizer writes llama.cpp's bytes, so any difference (a
//! changed generator, quantizer or type choice) fails here, by name, before any logits.

use crate::golden::Golden;
use ferrolm_model::{synth_recipe, FileType, Recipe};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

pub fn sha256(path: &Path) -> String {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The model of `golden` (which names its `recipe`, `type` and `model_sha256`), made in
/// `cache/recipe-models` (a folder under the target dir, such as `CARGO_TARGET_TMPDIR`) and
/// reused while its sha256 matches. Panics, naming both hashes, if ferrolm's file is not
/// llama.cpp's.
pub fn model_for(golden: &Golden, cache: &Path) -> PathBuf {
    let field = |k: &str| -> &str {
        golden.json[k]
            .as_str()
            .unwrap_or_else(|| panic!("{}: no `{k}`", golden.path.display()))
    };
    let (recipe_name, ty, want) = (field("recipe"), field("type"), field("model_sha256"));
    let dir = cache.join("recipe-models");
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join(&golden.model);
    if out.exists() && sha256(&out) == want {
        return out;
    }
    let recipe_path = golden.path.with_file_name(recipe_name);
    let recipe = Recipe::open(&recipe_path).unwrap();
    let ftype = FileType::from_name(ty).unwrap_or_else(|| panic!("unknown type `{ty}`"));
    // A fresh name, renamed into place: tests running at once may make the same model.
    let tmp = tempfile::Builder::new()
        .suffix(".gguf")
        .tempfile_in(&dir)
        .unwrap()
        .into_temp_path();
    synth_recipe(&recipe, ftype, &tmp, &|_| {}).unwrap();
    let got = sha256(&tmp);
    if got != want {
        let kept = dir.join(format!("{}.mismatch", golden.model));
        tmp.persist(&kept).unwrap();
        panic!(
            "{}: ferrolm synth --recipe {} --type {ty} made sha256 {got}, but llama.cpp ran \
             {want} when the golden was made: ferrolm's generator or quantizer no longer \
             writes llama.cpp's bytes (ferrolm's file: {})",
            golden.path.display(),
            recipe_path.display(),
            kept.display()
        );
    }
    tmp.persist(&out).unwrap();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A golden whose hash is not what ferrolm makes of its recipe fails, naming both.
    #[test]
    fn a_different_file_is_refused_loudly() {
        let dir = tempfile::tempdir().unwrap();
        let recipe = r#"{"seed": 3, "metadata": [["general.architecture", "string", "x"]],
            "tensors": [{"name": "t", "shape": [8], "init": {"normal": {"mean": 0, "std": 1}}}]}"#;
        std::fs::write(dir.path().join("m.recipe.json"), recipe).unwrap();
        let golden = |sha: &str| {
            let json = dir.path().join("m.json");
            let doc = serde_json::json!({"model": "m.gguf", "recipe": "m.recipe.json",
                "type": "f32", "model_sha256": sha, "n_vocab": 1, "cases": []});
            std::fs::write(&json, doc.to_string()).unwrap();
            Golden::open(&json)
        };
        let cache = dir.path().join("cache");
        let err = std::panic::catch_unwind(|| model_for(&golden("00"), &cache)).unwrap_err();
        let msg = err.downcast_ref::<String>().unwrap();
        assert!(msg.contains("made sha256") && msg.contains(" 00 "), "{msg}");
        let kept = cache.join("recipe-models/m.gguf.mismatch");
        let right = sha256(&kept);
        let path = model_for(&golden(&right), &cache);
        assert_eq!(sha256(&path), right);
        // Reused while its hash matches.
        let before = std::fs::metadata(&path).unwrap().modified().unwrap();
        model_for(&golden(&right), &cache);
        assert_eq!(
            std::fs::metadata(&path).unwrap().modified().unwrap(),
            before
        );
    }
}
