//! Model containers: detection by magic bytes, GGUF read/write, legacy GGML
//! read, SafeTensors read/write, and the open file ([`ModelFile`]) that ties a
//! parsed header to the bytes behind it.
//!
//! This module owns every byte layout of a container; it never decodes a
//! quantized block (that is the codecs' job), except for repacking legacy
//! block layouts into current ones and widening SafeTensors elements ggml
//! has no type for.

mod bytes;
mod detect;
mod error;
pub mod ggml_legacy;
pub mod gguf;
mod input;
mod output;
pub mod safetensors;
pub mod sentencepiece;
mod source;

use std::borrow::Cow;
use std::io::{self, Write};
use std::path::Path;
use std::time::Instant;

pub use crate::model::LegacyBlockLayout;
pub use detect::{DetectedFormat, detect, detect_bytes};
pub use error::{ErrorKind, FormatError, HexBytes, Result};
pub use ggml_legacy::LegacyVariant;
pub use gguf::TensorDataSource;
pub use input::{
    InputShape, checkpoint_weights, hub_model_name, hub_snapshot, parse_shard_path, shard_path, shard_set,
};
pub use output::{AtomicOutput, remove_dead_temporaries, same_file};
pub use safetensors::ElementConversion;
pub use source::{AccessMode, LoadReport, OpenOptions, Source, copy_file_at, human_bytes, parse_size};

use crate::model::{Endian, Metadata, StoredLayout, TensorInfo};
use crate::types::{GgmlType, RemovedGgmlType};
use bytes::ByteReader;

/// The container a model was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerFormat {
    Gguf { version: u32 },
    Legacy { variant: LegacyVariant, version: u32 },
    SafeTensors,
}

impl ContainerFormat {
    pub fn name(self) -> &'static str {
        match self {
            ContainerFormat::Gguf { .. } => "GGUF",
            ContainerFormat::Legacy { variant, .. } => variant.name(),
            ContainerFormat::SafeTensors => "SafeTensors",
        }
    }

    /// The container's version; 0 for SafeTensors, which has none.
    pub fn version(self) -> u32 {
        match self {
            ContainerFormat::Gguf { version } | ContainerFormat::Legacy { version, .. } => version,
            ContainerFormat::SafeTensors => 0,
        }
    }
}

impl std::fmt::Display for ContainerFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ContainerFormat::SafeTensors => f.write_str(self.name()),
            _ => write!(f, "{} v{}", self.name(), self.version()),
        }
    }
}

/// An open model file: its parsed header and access to its tensor bytes.
#[derive(Debug)]
pub struct ModelFile {
    pub format: ContainerFormat,
    pub endian: Endian,
    /// `general.alignment` (GGUF), or the alignment a GGUF written from this
    /// model gets.
    pub alignment: u64,
    pub metadata: Metadata,
    pub tensors: Vec<TensorInfo>,
    /// Absolute offset of the data section (the first tensor for legacy files).
    pub data_offset: u64,
    pub load: LoadReport,
    source: Source,
}

impl ModelFile {
    /// Opens and parses any supported container, found by its magic bytes.
    pub fn open(path: &Path, options: OpenOptions) -> Result<ModelFile> {
        let started = Instant::now();
        let source = Source::open(path, options)?;
        let head = source.read_range(0, source.len().min(16))?;
        let detected = detect_bytes(&head).ok_or_else(|| {
            FormatError::at(path, 0, ErrorKind::UnknownFormat { first_bytes: HexBytes(head.to_vec()) })
        })?;
        let mut reader = match source.mapped() {
            Some(bytes) => ByteReader::over_bytes(bytes, path),
            None => ByteReader::over_stream(source.stream()?, path, source.len()),
        };
        let (format, endian, alignment, metadata, tensors, data_offset) = match detected {
            DetectedFormat::Gguf => {
                let h = gguf::read_header(&mut reader)?;
                let format = ContainerFormat::Gguf { version: h.version };
                (format, h.endian, h.alignment, h.metadata, h.tensors, h.data_offset)
            }
            DetectedFormat::GgmlLegacy(_) => {
                let m = ggml_legacy::read(&mut reader)?;
                let format = ContainerFormat::Legacy { variant: m.variant, version: m.version };
                (format, Endian::Little, gguf::DEFAULT_ALIGNMENT, m.metadata, m.tensors, m.header_len)
            }
            DetectedFormat::SafeTensors => {
                let h = safetensors::read_header(&mut reader)?;
                (
                    ContainerFormat::SafeTensors,
                    Endian::Little,
                    gguf::DEFAULT_ALIGNMENT,
                    h.metadata,
                    h.tensors,
                    h.data_offset,
                )
            }
            DetectedFormat::PyTorchZip => {
                return Err(FormatError::new(path, None, ErrorKind::UnsupportedFormat { format: detected.name() }));
            }
        };
        let bytes_parsed = reader.pos().min(data_offset);
        drop(reader);
        let load = LoadReport {
            mode: source.mode(),
            mmap_fallback: source.mmap_fallback().map(str::to_owned),
            bytes_parsed,
            duration: started.elapsed(),
        };
        Ok(ModelFile { format, endian, alignment, metadata, tensors, data_offset, load, source })
    }

    pub fn path(&self) -> &Path {
        self.source.path()
    }

    pub fn file_len(&self) -> u64 {
        self.source.len()
    }

    /// A tensor's bytes in ggml's current layout for its type.
    pub fn tensor_data(&self, tensor: &TensorInfo) -> Result<Cow<'_, [u8]>> {
        let stored = self.source.read_range(tensor.file_offset, tensor.stored_len)?;
        Ok(match tensor.layout {
            StoredLayout::Native => stored,
            StoredLayout::LegacyBlocks(layout) => Cow::Owned(layout.repack(tensor.ggml_type, &stored)),
            StoredLayout::Converted(conversion) => Cow::Owned(conversion.convert(&stored)),
        })
    }

    /// `len` bytes of a tensor (in the current layout) from byte `offset` of it.
    pub fn tensor_data_range(&self, tensor: &TensorInfo, offset: u64, len: u64) -> Result<Cow<'_, [u8]>> {
        let past_end = || {
            FormatError::new(
                self.path(),
                Some(tensor.file_offset),
                ErrorKind::Invalid(format!(
                    "tensor `{}`: bytes {offset}..{} are past its end",
                    tensor.name,
                    offset.saturating_add(len)
                )),
            )
        };
        if offset.checked_add(len).is_none_or(|end| end > tensor.n_bytes()) {
            return Err(past_end());
        }
        match tensor.layout {
            StoredLayout::Native => self.source.read_range(tensor.file_offset + offset, len),
            StoredLayout::LegacyBlocks(_) => {
                let all = self.tensor_data(tensor)?;
                let range = usize::try_from(offset).ok().zip(usize::try_from(offset + len).ok());
                match range.and_then(|(a, b)| all.get(a..b)) {
                    Some(bytes) => Ok(Cow::Owned(bytes.to_vec())),
                    None => Err(past_end()),
                }
            }
            StoredLayout::Converted(conversion) => {
                // Whole elements around the range, converted, then trimmed.
                let (stored_offset, stored_len) = conversion.stored_range(offset, len);
                let stored = self.source.read_range(tensor.file_offset + stored_offset, stored_len)?;
                let converted = conversion.convert(&stored);
                let skip = offset - stored_offset / conversion.stored_size() * conversion.output_size();
                let range = usize::try_from(skip).ok().zip(usize::try_from(skip + len).ok());
                match range.and_then(|(a, b)| converted.get(a..b)) {
                    Some(bytes) => Ok(Cow::Owned(bytes.to_vec())),
                    None => Err(past_end()),
                }
            }
        }
    }

    /// Copies a tensor's bytes (in the current layout) to `out`.
    pub fn copy_tensor_data(&self, tensor: &TensorInfo, out: &mut dyn Write) -> io::Result<()> {
        match tensor.layout {
            StoredLayout::Native => self.source.copy_range(tensor.file_offset, tensor.stored_len, out),
            StoredLayout::LegacyBlocks(_) => out.write_all(&self.tensor_data(tensor).map_err(io::Error::other)?),
            StoredLayout::Converted(conversion) => self.copy_converted(tensor, conversion, out),
        }
    }

    /// Converts a tensor a slab at a time, so a large one never exists
    /// converted in memory all at once.
    fn copy_converted(
        &self,
        tensor: &TensorInfo,
        conversion: ElementConversion,
        out: &mut dyn Write,
    ) -> io::Result<()> {
        const SLAB_ELEMENTS: u64 = 1 << 20;
        let slab = SLAB_ELEMENTS * conversion.stored_size();
        let mut done = 0;
        while done < tensor.stored_len {
            let len = slab.min(tensor.stored_len - done);
            let stored = self.source.read_range(tensor.file_offset + done, len).map_err(io::Error::other)?;
            out.write_all(&conversion.convert(&stored))?;
            done += len;
        }
        Ok(())
    }

    /// Whether the file's bytes `[offset, offset + len)` are all zero: the
    /// padding between two tensors, before one copy takes both.
    pub fn is_zero_range(&self, offset: u64, len: u64) -> Result<bool> {
        Ok(self.source.read_range(offset, len)?.iter().all(|&b| b == 0))
    }

    /// Copies the file's own bytes `[offset, offset + len)` into `out` at
    /// `out_offset` (see [`Source::copy_range_to_file_at`]).
    pub fn copy_range_to_file_at(&self, offset: u64, len: u64, out: &std::fs::File, out_offset: u64) -> io::Result<()> {
        self.source.copy_range_to_file_at(offset, len, out, out_offset)
    }

    /// Copies a tensor's bytes (in the current layout) into `out` at
    /// `out_offset`, file to file in the kernel when its layout is current;
    /// safe to run for many tensors into one file at once.
    pub fn copy_tensor_data_to_file_at(
        &self,
        tensor: &TensorInfo,
        out: &std::fs::File,
        out_offset: u64,
    ) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        match tensor.layout {
            StoredLayout::Native => {
                self.source.copy_range_to_file_at(tensor.file_offset, tensor.stored_len, out, out_offset)
            }
            _ => out.write_all_at(&self.tensor_data(tensor).map_err(io::Error::other)?, out_offset),
        }
    }

    /// Drops the resident pages of `[offset, offset + len)` of a tensor's
    /// bytes (in the current layout) once they are consumed (see
    /// [`Source::release_range`]).
    pub fn release_tensor_range(&self, tensor: &TensorInfo, offset: u64, len: u64) {
        let (offset, len) = match tensor.layout {
            StoredLayout::Native => (offset, len),
            StoredLayout::Converted(conversion) => conversion.stored_range(offset, len),
            StoredLayout::LegacyBlocks(_) => return,
        };
        self.source.release_range(
            tensor.file_offset.saturating_add(offset),
            len.min(tensor.stored_len.saturating_sub(offset)),
        );
    }

    /// True when some tensor's bytes change on read (pre-GGJTv3 blocks).
    pub fn has_legacy_blocks(&self) -> bool {
        self.tensors.iter().any(|t| matches!(t.layout, StoredLayout::LegacyBlocks(_)))
    }
}

/// Resolves an on-disk tensor type id, naming types ggml has removed.
pub(crate) fn resolve_tensor_type(id: u32, tensor: &str) -> Result<GgmlType, ErrorKind> {
    GgmlType::from_id(id).ok_or_else(|| match RemovedGgmlType::from_id(id) {
        Some(removed) => ErrorKind::RemovedTensorType { tensor: tensor.into(), id, name: removed.name },
        None => ErrorKind::UnknownTensorType { tensor: tensor.into(), id },
    })
}
