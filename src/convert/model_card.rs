//! A model card's (`README.md`) YAML front matter, read as gguf-py's
//! `Metadata.load_model_card` reads it: the lines between a first line
//! `---` and the next, with its two fixes (a list item `no` kept a string,
//! tabs as two spaces), parsed whole — nested mappings such as
//! `model-index` stay nested, so none of their keys passes for a top-level
//! one. A card that does not parse is an error naming it: the converter
//! stops there too.

use std::path::Path;

use serde_json::{Map, Value as Json};
use yaml_rust2::{Yaml, YamlLoader};

use super::error::ConvertError;
use super::files::{CheckpointFiles, TEXT_LIMIT};

/// The front matter of `dir/README.md` as JSON values; empty when there is
/// no card, no front matter, or front matter that is not a mapping.
pub fn front_matter(files: &dyn CheckpointFiles, dir: &Path) -> Result<Map<String, Json>, ConvertError> {
    let path = dir.join("README.md");
    // A card that is not UTF-8 text gives no keys.
    let Some(bytes) = files.read(&path, TEXT_LIMIT)? else { return Ok(Map::new()) };
    let Ok(text) = String::from_utf8(bytes) else { return Ok(Map::new()) };
    parse(&text, &path)
}

/// The front matter of model card `text` (read from `path`, for errors).
pub fn parse(text: &str, path: &Path) -> Result<Map<String, Json>, ConvertError> {
    let lines: Vec<&str> = text.lines().collect();
    if lines.first() != Some(&"---") {
        return Ok(Map::new());
    }
    let mut yaml: String = lines[1..].iter().take_while(|l| **l != "---").map(|l| format!("{l}\n")).collect();
    // gguf-py's two fixes, in its order: Norway's `no`, and tabs.
    yaml = yaml.replace("- no\n", "- \"no\"\n").replace('\t', "  ");
    let documents = YamlLoader::load_from_str(&yaml)
        .map_err(|e| ConvertError::ModelCard { path: path.to_owned(), problem: e.to_string() })?;
    match documents.first().map(json_of) {
        Some(Json::Object(card)) => Ok(card),
        _ => Ok(Map::new()),
    }
}

/// A YAML value as JSON: mapping keys as their text, `.inf`/`.nan` as null.
fn json_of(yaml: &Yaml) -> Json {
    match yaml {
        Yaml::Real(text) => {
            text.parse::<f64>().ok().and_then(serde_json::Number::from_f64).map_or(Json::Null, Json::Number)
        }
        Yaml::Integer(n) => Json::from(*n),
        Yaml::String(s) => Json::String(s.clone()),
        Yaml::Boolean(b) => Json::Bool(*b),
        Yaml::Array(items) => Json::Array(items.iter().map(json_of).collect()),
        Yaml::Hash(entries) => Json::Object(
            entries
                .iter()
                .map(|(k, v)| {
                    let key = match k {
                        Yaml::String(s) | Yaml::Real(s) => s.clone(),
                        Yaml::Integer(n) => n.to_string(),
                        Yaml::Boolean(b) => if *b { "True" } else { "False" }.to_owned(),
                        _ => "None".to_owned(),
                    };
                    (key, json_of(v))
                })
                .collect(),
        ),
        Yaml::Alias(_) | Yaml::Null | Yaml::BadValue => Json::Null,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn card(text: &str) -> Map<String, Json> {
        parse(text, Path::new("README.md")).unwrap()
    }

    #[test]
    fn nested_keys_stay_nested() {
        let c = card(
            "---\nlicense: apache-2.0\nmodel-index:\n- name: Outer\n  results:\n  - dataset:\n      name: Inner\n\
             language:\n- en\n- no\ntags: [a, b]\n---\n# Title\nname: not front matter\n",
        );
        assert_eq!(c.get("name"), None);
        assert_eq!(c["license"], "apache-2.0");
        assert_eq!(c["language"], serde_json::json!(["en", "no"]));
        assert_eq!(c["tags"], serde_json::json!(["a", "b"]));
        assert_eq!(c["model-index"][0]["results"][0]["dataset"]["name"], "Inner");
    }

    #[test]
    fn no_front_matter_is_an_empty_card() {
        assert!(card("# A model\n---\nname: x\n---\n").is_empty());
        assert!(card("---\n- a list\n---\n").is_empty());
        let dir = tempfile::tempdir().unwrap();
        assert!(front_matter(&crate::convert::OnDisk, dir.path()).unwrap().is_empty());
    }

    #[test]
    fn a_card_that_does_not_parse_is_named() {
        let error = parse("---\nname: [unclosed\n---\n", Path::new("README.md")).unwrap_err().to_string();
        assert!(error.contains("README.md"), "{error}");
    }
}
