//! A Hugging Face checkpoint directory: `config.json`, the weight shards
//! (SafeTensors, or PyTorch's `pytorch_model*.bin`) in the converter's
//! order, and the tensors of each shard in the converter's order too:
//! sorted by name for SafeTensors (not the header's order), the state dict's
//! own order for PyTorch.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value as Json;

use super::files::{CheckpointFiles, TEXT_LIMIT};
use crate::formats::{ContainerFormat, FormatError, ModelFile};

#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("{}: {}", path.display(), crate::files::IoText(source))]
    Io { path: PathBuf, source: std::io::Error },
    #[error(
        "{}: not a Hugging Face checkpoint: it has no config.json (expected config.json beside \
         model*.safetensors or pytorch_model*.bin)",
        .0.display()
    )]
    NoConfig(PathBuf),
    #[error("{}: {problem}", path.display())]
    Json { path: PathBuf, problem: String },
    #[error(transparent)]
    Format(#[from] FormatError),
    #[error("{}: no model*.safetensors or pytorch_model*.bin files", .0.display())]
    NoWeights(PathBuf),
}

pub struct Checkpoint {
    pub dir: PathBuf,
    /// Where its files are read from.
    pub files: Arc<dyn CheckpointFiles>,
    /// The repository's name when the directory is a Hub cache snapshot:
    /// it stands for the directory's name (a revision hash) in the naming.
    pub repository: Option<String>,
    /// The name written, whatever the naming finds (the converter's `--model-name`).
    pub model_name: Option<String>,
    /// The converter's `--metadata` file.
    pub metadata_override: Option<super::naming::MetadataOverride>,
    /// The language model's hyperparameters, as the converter's `TextModel`
    /// reads them: `config.json` with a multimodal model's `text_config`
    /// laid over it (its `vision_config` still there for the vision tower).
    pub config: Json,
    /// `config.json` as written, which the naming reads.
    pub file_config: Json,
    /// The shards, in the converter's order.
    pub shards: Vec<Arc<ModelFile>>,
}

impl Checkpoint {
    /// The checkpoint in `dir`, its files read through `files`.
    pub fn open(dir: &Path, files: Arc<dyn CheckpointFiles>) -> Result<Checkpoint, CheckpointError> {
        let file_config = read_optional_json(&*files, &dir.join("config.json"))?
            .ok_or_else(|| CheckpointError::NoConfig(dir.to_owned()))?;
        let weights = checkpoint_weights(&*files, dir)?;
        if weights.is_empty() {
            return Err(CheckpointError::NoWeights(dir.to_owned()));
        }
        let shards = weights.iter().map(|f| files.model(f)).collect::<Result<Vec<_>, _>>()?;
        Ok(Checkpoint {
            dir: dir.to_owned(),
            files,
            repository: None,
            model_name: None,
            metadata_override: None,
            config: text_hparams(&file_config),
            file_config,
            shards,
        })
    }

    /// (shard, tensor index) of every tensor in the converter's order: shard
    /// by shard, a SafeTensors shard's tensors sorted by name, a PyTorch
    /// shard's in its state dict's order; a name seen again keeps its first
    /// place and takes the later shard's data.
    pub fn tensor_order(&self) -> Vec<(usize, usize)> {
        let mut order: Vec<(usize, usize)> = Vec::new();
        let mut place: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
        for (s, shard) in self.shards.iter().enumerate() {
            let mut indices: Vec<usize> = (0..shard.tensors.len()).collect();
            if shard.format != ContainerFormat::PyTorch {
                indices.sort_by(|&a, &b| shard.tensors[a].name.cmp(&shard.tensors[b].name));
            }
            for t in indices {
                match place.get(shard.tensors[t].name.as_str()) {
                    Some(&at) => order[at] = (s, t),
                    None => {
                        place.insert(&shard.tensors[t].name, order.len());
                        order.push((s, t));
                    }
                }
            }
        }
        order
    }

    /// A config value by the first of `keys` present (the converter's `find_hparam`).
    pub fn hparam(&self, keys: &[&str]) -> Option<&Json> {
        keys.iter().find_map(|k| self.config.get(*k))
    }

    /// Whether the checkpoint's directory holds a file `name`.
    pub fn has(&self, name: &str) -> Result<bool, CheckpointError> {
        Ok(self.files.list(&self.dir)?.contains(&self.dir.join(name)))
    }

    /// The checkpoint's JSON file `name`, or `None` if it has none.
    pub fn json(&self, name: impl AsRef<Path>) -> Result<Option<Json>, CheckpointError> {
        read_optional_json(&*self.files, &self.dir.join(name))
    }
}

/// `config` with its `text_config` (a multimodal model's language model)
/// laid over it, as the converter's `TextModel` lays them; the class stays
/// the top level's unless `text_config` names one, as the converter picks it.
pub(super) fn text_hparams(config: &Json) -> Json {
    let (Some(top), Some(text)) = (config.as_object(), config.get("text_config").and_then(Json::as_object)) else {
        return config.clone();
    };
    let mut merged = top.clone();
    merged.extend(
        text.iter()
            .filter(|(key, value)| *key != "architectures" || !value.is_null())
            .map(|(k, v)| (k.clone(), v.clone())),
    );
    Json::Object(merged)
}

/// The weight files of the checkpoint in `dir`, in the converter's order:
/// SafeTensors when it has them, else PyTorch's; of either, the shards its
/// index (`model.safetensors.index.json`, `pytorch_model.bin.index.json`)
/// names, else every `model*.safetensors` (`pytorch_model*.bin`) in it,
/// sorted by name (code points, as Python's `sorted`). Empty when it holds
/// none.
pub fn checkpoint_weights(files: &dyn CheckpointFiles, dir: &Path) -> Result<Vec<PathBuf>, CheckpointError> {
    let listing = files.list(dir)?;
    for (stem, extension) in [("model", ".safetensors"), ("pytorch_model", ".bin")] {
        let index = dir.join(format!("{stem}{extension}.index.json"));
        if let Some(bytes) = files.read(&index, TEXT_LIMIT)? {
            return Ok(crate::formats::parse_index(&index, &bytes)?.shards());
        }
        let named: Vec<PathBuf> = listing
            .iter()
            .filter(|path| {
                let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
                name.starts_with(stem) && name.ends_with(extension)
            })
            .cloned()
            .collect();
        if !named.is_empty() {
            return Ok(named);
        }
    }
    Ok(Vec::new())
}

/// A JSON file of the checkpoint, or `None` if it has none.
pub(super) fn read_optional_json(files: &dyn CheckpointFiles, path: &Path) -> Result<Option<Json>, CheckpointError> {
    let Some(bytes) = files.read(path, TEXT_LIMIT)? else { return Ok(None) };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| CheckpointError::Json { path: path.to_owned(), problem: e.to_string() })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_multimodal_config_is_read_through_its_text_config() {
        let config = json!({
            "architectures": ["Gemma3ForConditionalGeneration"],
            "hidden_size": 8,
            "mm_tokens_per_image": 256,
            "text_config": {"architectures": null, "hidden_size": 64, "model_type": "gemma3_text"},
            "vision_config": {"hidden_size": 32},
        });
        let text = text_hparams(&config);
        assert_eq!(text["hidden_size"], 64, "the language model's width wins");
        assert_eq!(text["architectures"][0], "Gemma3ForConditionalGeneration", "an unset class is not taken");
        assert_eq!(
            (text["model_type"].as_str(), text["mm_tokens_per_image"].as_u64()),
            (Some("gemma3_text"), Some(256))
        );
        assert_eq!(text["vision_config"]["hidden_size"], 32);
        let named = json!({"architectures": ["A"], "text_config": {"architectures": ["B"]}});
        assert_eq!(text_hparams(&named)["architectures"][0], "B", "as the converter picks a text model's class");
        let plain = json!({"architectures": ["LlamaForCausalLM"], "hidden_size": 8});
        assert_eq!(text_hparams(&plain), plain);
    }
}
