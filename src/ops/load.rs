//! `load`: an input file as a tensor set. Any supported container, found by
//! its magic bytes; the tensors stay ranges of the file.

use crate::artifact::{Tensor, TensorSet};
use crate::formats::ModelFile;
use crate::recipe::OpSpec;
use crate::store::Key;

pub const SPEC: OpSpec = OpSpec { name: "load", version: 1, params: &[], from_input_only: true, is_sink: false };

/// `model`, whose bytes hash to `content`.
pub fn apply(model: &ModelFile, content: Key) -> TensorSet {
    TensorSet {
        endian: model.endian,
        metadata: model.metadata.clone(),
        tensors: model.tensors.iter().enumerate().map(|(i, t)| Tensor::from_input(content, i, t)).collect(),
    }
}
