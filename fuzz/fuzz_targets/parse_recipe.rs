//! Feeds arbitrary text to the recipe parser and validator. Every input must
//! give a recipe or diagnostics, never a panic; the diagnostics must render
//! (line and column lookups on arbitrary text), and manifests of a valid
//! recipe's ops must serialize their keys.

#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use quantforge::recipe::Recipe;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    match Recipe::parse(text, Path::new("fuzz/recipe.toml")) {
        Ok(recipe) => {
            for node in &recipe.nodes {
                let _ = node.op.key_params().to_string();
            }
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
});
