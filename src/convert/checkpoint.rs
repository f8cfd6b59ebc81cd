//! A Hugging Face checkpoint directory: `config.json`, the weight shards
//! (SafeTensors, or PyTorch's `pytorch_model*.bin`) in the converter's
//! order, and the tensors of each shard in the converter's order too:
//! sorted by name for SafeTensors (not the header's order), the state dict's
//! own order for PyTorch.

use std::path::{Path, PathBuf};

use serde_json::Value as Json;

use crate::formats::{ContainerFormat, FormatError, ModelFile, OpenOptions};

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
    /// The repository's name when the directory is a Hub cache snapshot:
    /// it stands for the directory's name (a revision hash) in the naming.
    pub repository: Option<String>,
    /// The name written, whatever the naming finds (the converter's `--model-name`).
    pub model_name: Option<String>,
    /// The converter's `--metadata` file.
    pub metadata_override: Option<super::naming::MetadataOverride>,
    pub config: Json,
    /// The shards, in the converter's order.
    pub shards: Vec<ModelFile>,
}

impl Checkpoint {
    pub fn open(dir: &Path) -> Result<Checkpoint, CheckpointError> {
        let config =
            read_optional_json(&dir.join("config.json"))?.ok_or_else(|| CheckpointError::NoConfig(dir.to_owned()))?;
        let files = crate::formats::checkpoint_weights(dir)?;
        if files.is_empty() {
            return Err(CheckpointError::NoWeights(dir.to_owned()));
        }
        let shards = files.iter().map(|f| ModelFile::open(f, OpenOptions::default())).collect::<Result<Vec<_>, _>>()?;
        Ok(Checkpoint {
            dir: dir.to_owned(),
            repository: None,
            model_name: None,
            metadata_override: None,
            config,
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
}

/// A JSON file of the checkpoint, or `None` if it has none.
pub(super) fn read_optional_json(path: &Path) -> Result<Option<Json>, CheckpointError> {
    if !path.is_file() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(path).map_err(|source| CheckpointError::Io { path: path.to_owned(), source })?;
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| CheckpointError::Json { path: path.to_owned(), problem: e.to_string() })
}
