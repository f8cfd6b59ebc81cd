//! `load` and `merge-shards`: an input as a tensor set. Any supported
//! container, found by its magic bytes; the tensors stay ranges of the file.
//! A split (`NAME-0000i-of-0000N.gguf`, named by any of its shards) loads as
//! the whole model, as `merge` would write it.

use crate::artifact::{Tensor, TensorSet};
use crate::formats::ModelFile;
use crate::ops::split::{SplitError, check_shards, merged_metadata};
use crate::recipe::{Diagnostic, OpSpec, ParamKind, ParamSpec, Params};
use crate::store::Key;

pub const SPEC: OpSpec = OpSpec { name: "load", version: 1, params: &[], from_input_only: true, is_sink: false };

pub const MERGE_SPEC: OpSpec = OpSpec {
    name: "merge-shards",
    version: 1,
    params: &[ParamSpec::optional("keep_split_keys", ParamKind::Bool)],
    from_input_only: true,
    is_sink: false,
};

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
    Ok(TensorSet { endian: first.endian, metadata: merged_metadata(&first.metadata, options.keep_split_keys), tensors })
}
