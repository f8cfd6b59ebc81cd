//! PyTorch checkpoints (`torch.save`'s zip format, and the legacy format
//! before it: `.pt`, `.pth`, `.bin`) read without Python and without running
//! anything they contain.
//!
//! `data.pkl` is parsed by a restricted unpickler ([`pickle`]) that refuses
//! every global a state dict does not use, naming it and its byte offset;
//! what it returns is then read as a state dict (`state`): a mapping of names
//! to tensors (nested mappings flatten with `.`, scalar values become
//! metadata under [`METADATA_PREFIX`]). Each tensor maps onto its storage's
//! bytes in the file: contiguous tensors zero-copy, strided views gathered
//! on read, storages shared by several tensors (tied weights) shared.
//! Dtypes become ggml types as SafeTensors' do ([`super::safetensors::Dtype`]).

mod archive;
mod legacy;
pub mod pickle;
mod state;

use super::error::Result;
use super::source::Source;
use crate::model::{Metadata, TensorInfo};

/// Where a checkpoint's scalar values go in [`Metadata`]:
/// `{"epoch": 3}` reads as `pytorch.epoch = 3`.
pub const METADATA_PREFIX: &str = "pytorch.";

/// A checkpoint, in the crate's terms.
pub(crate) struct TorchHeader {
    pub metadata: Metadata,
    /// In the state dict's order.
    pub tensors: Vec<TensorInfo>,
    /// Bytes parsed: the pickle's.
    pub bytes_parsed: u64,
}

pub(crate) fn read_header(source: &Source) -> Result<TorchHeader> {
    let head = source.read_range(0, source.len().min(LEGACY_MAGIC.len() as u64))?;
    let archive = if *head == LEGACY_MAGIC { legacy::read(source)? } else { archive::read(source)? };
    let (metadata, tensors) = state::read(source.path(), &archive)?;
    Ok(TorchHeader { metadata, tensors, bytes_parsed: archive.pickle.len() as u64 })
}

pub use archive::{Archive, StorageRecord};
pub use legacy::MAGIC as LEGACY_MAGIC;
pub use state::{is_allowed_global, read as read_state};
