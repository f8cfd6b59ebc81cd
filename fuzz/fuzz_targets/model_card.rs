//! A model card's front matter (YAML, as `convert` reads a README.md) and a
//! `--metadata` file's JSON object: any text parses to a value or an error
//! naming the file, never a panic (deep nesting included).

#![no_main]

use libfuzzer_sys::fuzz_target;
use quantforge::convert::MetadataOverride;
use quantforge::convert::model_card;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let card = format!("---\n{text}\n---\n");
    let path = std::path::Path::new("fuzz/README.md");
    if let Err(e) = model_card::parse(&card, path) {
        assert!(e.to_string().contains("README.md"));
    }
    let _ = model_card::parse(&text, path);
    if let Ok(serde_json::Value::Object(values)) = serde_json::from_str(&text) {
        let _ = MetadataOverride::new("fuzz.json".into(), values);
    }
});
