//! `load` and `merge-shards`: an input as a tensor set. Any supported
//! container, found by its magic bytes; the tensors stay ranges of the file.
//! A split (`NAME-0000i-of-0000N.gguf`, named by any of its shards) loads as
//! the whole model, as `merge` would write it; so does a sharded SafeTensors
//! checkpoint, named by its `.index.json`.

use crate::artifact::{HeaderEnd, Tensor, TensorSet};
use crate::formats::ModelFile;
use crate::formats::safetensors::CheckpointIndex;
use crate::key::Key;
use crate::ops::split::{SplitError, check_shards, merged_metadata};
use crate::params::{Diagnostic, OpSpec, ParamKind, ParamSpec, Params};
use crate::text::Name;

pub const SPEC: OpSpec = OpSpec::new("load", 1, &[]).reading_an_input();

pub const MERGE_SPEC: OpSpec =
    OpSpec::new("merge-shards", 1, &[ParamSpec::optional("keep_split_keys", ParamKind::Bool)]).reading_an_input();

/// `merge-shards`: a split input merged, like `quantforge merge`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MergeOptions {
    /// Keep the `split.*` keys with `split.count = 0`, as `llama-gguf-split
    /// --merge` does, instead of giving back the unsplit original.
    pub keep_split_keys: bool,
}

impl MergeOptions {
    pub fn from_params(p: &Params) -> Result<MergeOptions, Vec<Diagnostic>> {
        Ok(MergeOptions { keep_split_keys: p.bool("keep_split_keys") })
    }

    pub fn key_params(&self) -> serde_json::Value {
        serde_json::json!({ "keep_split_keys": self.keep_split_keys })
    }
}

/// `model`, whose bytes hash to `content`.
pub fn apply(model: &ModelFile, content: Key) -> TensorSet {
    TensorSet {
        endian: model.endian,
        metadata: model.metadata.clone(),
        tensors: model.tensors.iter().enumerate().map(|(i, t)| Tensor::from_input(content, i, t)).collect(),
        header_end: HeaderEnd::Aligned,
        legacy: model.legacy.clone(),
    }
}

/// The shards of a split, in order, each with its content hash, as one
/// model: checked to belong together, tensors in shard order.
pub fn apply_split(shards: &[(&ModelFile, Key)], options: MergeOptions) -> Result<TensorSet, SplitError> {
    check_shards(&shards.iter().map(|(m, _)| *m).collect::<Vec<_>>())?;
    let Some((first, _)) = shards.first() else {
        return Err(SplitError::BadLimit("a split needs at least one shard".into()));
    };
    let tensors = shards
        .iter()
        .flat_map(|(model, content)| model.tensors.iter().enumerate().map(|(i, t)| Tensor::from_input(*content, i, t)))
        .collect();
    Ok(TensorSet {
        // As `merge` writes it: little-endian, whatever the shards' order.
        endian: crate::model::Endian::Little,
        metadata: merged_metadata(&first.metadata, options.keep_split_keys),
        tensors,
        header_end: HeaderEnd::Aligned,
        legacy: None,
    })
}

/// What a `load` or `merge-shards` node reads: the input's files, opened,
/// in shard order, each with its content hash; the SafeTensors index when
/// the input is a sharded checkpoint.
pub struct LoadInput<'a> {
    pub path: &'a std::path::Path,
    pub shards: Vec<(&'a ModelFile, Key)>,
    pub index: Option<&'a CheckpointIndex>,
}

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Split(#[from] SplitError),
    #[error(transparent)]
    Shards(#[from] ShardError),
    #[error("{}: not a shard name (expected PREFIX-NNNNN-of-NNNNN.gguf, more than one shard)", .0.display())]
    NotASplit(std::path::PathBuf),
}

/// `load` (`merge: None`) or `merge-shards`: one model, a split's shards as
/// one model, or a sharded SafeTensors checkpoint as one model.
pub fn read(input: &LoadInput<'_>, merge: Option<MergeOptions>) -> Result<TensorSet, LoadError> {
    if let Some(index) = input.index {
        return Ok(apply_safetensors_shards(index, &input.shards)?);
    }
    match (merge, input.shards.as_slice()) {
        (None, [(model, content)]) => Ok(apply(model, *content)),
        (Some(_), [_]) => Err(LoadError::NotASplit(input.path.to_owned())),
        (merge, shards) => {
            let options = merge.unwrap_or(MergeOptions { keep_split_keys: false });
            Ok(apply_split(shards, options)?)
        }
    }
}

/// Why the shards of a SafeTensors checkpoint do not match their index.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShardError {
    #[error("{}: tensor `{}` is in {}, but the index says {expected}", index.display(), Name(tensor), found.display())]
    WrongShard { index: std::path::PathBuf, tensor: String, found: std::path::PathBuf, expected: String },
    #[error("{}: tensor `{}` of {} is not in the index", index.display(), Name(tensor), shard.display())]
    NotIndexed { index: std::path::PathBuf, tensor: String, shard: std::path::PathBuf },
    #[error("{}: the index lists `{}`, which no shard holds", index.display(), Name(tensor))]
    Missing { index: std::path::PathBuf, tensor: String },
}

/// The shards of a SafeTensors checkpoint, in the index's shard order, as
/// one model: every tensor where the index says, no tensor unlisted.
/// Metadata is the first shard's (`transformers` writes the same in each).
pub fn apply_safetensors_shards(
    index: &CheckpointIndex,
    shards: &[(&ModelFile, Key)],
) -> Result<TensorSet, ShardError> {
    let expected: std::collections::HashMap<&str, &str> =
        index.weight_map.iter().map(|(t, f)| (t.as_str(), f.as_str())).collect();
    let mut tensors = Vec::new();
    for (model, content) in shards {
        let file_name = model.path().file_name().and_then(|n| n.to_str()).unwrap_or_default();
        for (i, info) in model.tensors.iter().enumerate() {
            match expected.get(info.name.as_str()) {
                Some(&shard) if shard == file_name => tensors.push(Tensor::from_input(*content, i, info)),
                Some(&shard) => {
                    return Err(ShardError::WrongShard {
                        index: index.path.clone(),
                        tensor: info.name.clone(),
                        found: model.path().to_owned(),
                        expected: shard.to_owned(),
                    });
                }
                None => {
                    return Err(ShardError::NotIndexed {
                        index: index.path.clone(),
                        tensor: info.name.clone(),
                        shard: model.path().to_owned(),
                    });
                }
            }
        }
    }
    if tensors.len() != expected.len() {
        let held: std::collections::HashSet<&str> = tensors.iter().map(|t| t.name.as_str()).collect();
        let missing = index.weight_map.iter().find(|(t, _)| !held.contains(t.as_str()));
        let tensor = missing.map(|(t, _)| t.clone()).unwrap_or_default();
        return Err(ShardError::Missing { index: index.path.clone(), tensor });
    }
    let (endian, metadata) = shards.first().map_or_else(
        || (crate::model::Endian::Little, crate::model::Metadata::new()),
        |(m, _)| (m.endian, m.metadata.clone()),
    );
    Ok(TensorSet { endian, metadata, tensors, header_end: HeaderEnd::Aligned, legacy: None })
}
