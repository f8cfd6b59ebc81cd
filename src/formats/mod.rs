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
pub mod onnx;
mod output;
pub mod pack;
pub mod safetensors;
pub mod sentencepiece;
mod source;
pub mod torch;

use std::borrow::Cow;
use std::io::{self, Write};
use std::path::Path;
use std::time::Instant;

pub use crate::model::LegacyBlockLayout;

/// The most dimensions a checkpoint's tensor (SafeTensors, PyTorch) may
/// have: more than ggml's four (a 3-D convolution's kernel has five, which
/// a conversion writes as 4-D ones); what reaches a GGUF file is held to
/// four by its writer.
pub const MAX_CHECKPOINT_DIMS: u64 = 8;
pub use detect::{DetectedFormat, detect, detect_bytes};
pub use error::{ErrorKind, FormatError, HexBytes, LoadStage, Result};
pub use ggml_legacy::LegacyVariant;
pub use gguf::TensorDataSource;
pub use input::{
    InputShape, hub_cache_dir, hub_model_name, hub_repo_snapshot, hub_snapshot, is_checkpoint_index, model_path,
    parse_shard_path, shard_path, shard_set,
};
pub use output::{AtomicOutput, link_into_place, remove_dead_temporaries, scratch_dir};
pub use safetensors::{ElementConversion, parse_index};
pub use source::{AccessMode, LoadReport, OpenOptions, Source, copy_file_at, human_bytes, parse_size};

use crate::model::{Endian, Metadata, PlacedElements, StoredLayout, TensorInfo, element_count};
use crate::types::{GgmlType, RemovedGgmlType};
use bytes::ByteReader;

/// The container a model was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerFormat {
    Gguf {
        version: u32,
    },
    Legacy {
        variant: LegacyVariant,
        version: u32,
    },
    SafeTensors,
    /// `torch.save`'s zip archive.
    PyTorch,
    Onnx,
}

impl ContainerFormat {
    pub fn name(self) -> &'static str {
        match self {
            ContainerFormat::Gguf { .. } => "GGUF",
            ContainerFormat::Legacy { variant, .. } => variant.name(),
            ContainerFormat::SafeTensors => "SafeTensors",
            ContainerFormat::PyTorch => "PyTorch",
            ContainerFormat::Onnx => "ONNX",
        }
    }

    /// The container's version; 0 for SafeTensors, PyTorch and ONNX, which
    /// have none (an ONNX model's IR version is in its metadata).
    pub fn version(self) -> u32 {
        match self {
            ContainerFormat::Gguf { version } | ContainerFormat::Legacy { version, .. } => version,
            ContainerFormat::SafeTensors | ContainerFormat::PyTorch | ContainerFormat::Onnx => 0,
        }
    }
}

impl std::fmt::Display for ContainerFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ContainerFormat::SafeTensors | ContainerFormat::PyTorch | ContainerFormat::Onnx => f.write_str(self.name()),
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
    /// Files beside the model that hold some of its tensors (ONNX external
    /// data), as [`PlacedElements::External`] numbers them.
    externals: Vec<Source>,
    /// What a legacy file says that its GGUF metadata does not.
    pub legacy: Option<std::sync::Arc<ggml_legacy::LegacyHeader>>,
}

impl ModelFile {
    /// Opens and parses any supported container, found by its magic bytes.
    pub fn open(path: &Path, options: OpenOptions) -> Result<ModelFile> {
        let started = Instant::now();
        let source = Source::open(path, options).map_err(|e| e.in_stage(LoadStage::Mapping))?;
        ModelFile::parse(source, options, started).map_err(FormatError::in_header)
    }

    fn parse(source: Source, options: OpenOptions, started: Instant) -> Result<ModelFile> {
        let path = source.path().to_owned();
        let path = path.as_path();
        let head = source.read_range(0, source.len().min(16))?;
        let detected = detect_bytes(&head).ok_or_else(|| {
            FormatError::at(path, 0, ErrorKind::UnknownFormat { first_bytes: HexBytes(head.to_vec()) })
        })?;
        let mut externals = Vec::new();
        let mut legacy = None;
        let ((format, endian, alignment, metadata, tensors, data_offset), bytes_parsed) = match detected {
            DetectedFormat::Gguf => front_to_back(&source, |r| {
                let h = gguf::read_header(r)?;
                let format = ContainerFormat::Gguf { version: h.version };
                Ok((format, h.endian, h.alignment, h.metadata, h.tensors, h.data_offset))
            })?,
            DetectedFormat::GgmlLegacy(_) => front_to_back(&source, |r| {
                let m = ggml_legacy::read(r)?;
                legacy = Some(std::sync::Arc::new(m.legacy));
                let format = ContainerFormat::Legacy { variant: m.variant, version: m.version };
                Ok((format, Endian::Little, gguf::DEFAULT_ALIGNMENT, m.metadata, m.tensors, m.header_len))
            })?,
            DetectedFormat::SafeTensors => front_to_back(&source, |r| {
                let h = safetensors::read_header(r)?;
                let format = ContainerFormat::SafeTensors;
                Ok((format, Endian::Little, gguf::DEFAULT_ALIGNMENT, h.metadata, h.tensors, h.data_offset))
            })?,
            DetectedFormat::Onnx => front_to_back(&source, |r| {
                let h = onnx::read_header(r, options)?;
                externals = h.externals;
                let in_place = h.tensors.iter().filter(|t| !matches!(t.layout, StoredLayout::Placed(_)));
                let data_offset = in_place.map(|t| t.file_offset).min().unwrap_or(0);
                Ok((ContainerFormat::Onnx, Endian::Little, gguf::DEFAULT_ALIGNMENT, h.metadata, h.tensors, data_offset))
            })?,
            DetectedFormat::PyTorchZip | DetectedFormat::PyTorchLegacy => {
                let h = torch::read_header(&source)?;
                let data_offset = h.tensors.iter().map(|t| t.file_offset).min().unwrap_or(0);
                let format = ContainerFormat::PyTorch;
                ((format, Endian::Little, gguf::DEFAULT_ALIGNMENT, h.metadata, h.tensors, data_offset), h.bytes_parsed)
            }
        };
        let load = LoadReport {
            mode: source.mode(),
            mmap_fallback: source.mmap_fallback().map(str::to_owned),
            bytes_parsed,
            duration: started.elapsed(),
        };
        tracing::debug!("loaded {}: {} tensors, {load}", path.display(), tensors.len());
        Ok(ModelFile { format, endian, alignment, metadata, tensors, data_offset, load, source, externals, legacy })
    }

    pub fn path(&self) -> &Path {
        self.source.path()
    }

    pub fn file_len(&self) -> u64 {
        self.source.len()
    }

    /// A tensor's bytes in ggml's current layout for its type.
    pub fn tensor_data(&self, tensor: &TensorInfo) -> Result<Cow<'_, [u8]>> {
        self.tensor_bytes(tensor).map_err(|e| e.in_stage(LoadStage::Read))
    }

    fn tensor_bytes(&self, tensor: &TensorInfo) -> Result<Cow<'_, [u8]>> {
        match self.run(tensor)? {
            Some((source, None)) => source.read_range(tensor.file_offset, tensor.stored_len),
            Some((source, Some(conversion))) => {
                Ok(Cow::Owned(conversion.convert(&source.read_range(tensor.file_offset, tensor.stored_len)?)))
            }
            None => self.gathered(tensor).map(Cow::Owned),
        }
    }

    /// The file whose bytes `[file_offset, file_offset + stored_len)` are the
    /// tensor's stored elements, and the conversion they need; `None` when
    /// they must be gathered instead (see [`ModelFile::gathered`]).
    fn run(&self, tensor: &TensorInfo) -> Result<Option<(&Source, Option<ElementConversion>)>> {
        Ok(match &tensor.layout {
            StoredLayout::Converted(ElementConversion::FromBigEndian(ggml_type))
                if gguf::ByteSwap::of(*ggml_type).is_none() =>
            {
                let refusal = gguf::NoBigEndianLayout { tensor: tensor.name.clone(), ggml_type: *ggml_type };
                return Err(FormatError::new(self.path(), Some(tensor.file_offset), refusal.into()));
            }
            StoredLayout::Native => Some((&self.source, None)),
            StoredLayout::Converted(conversion) => Some((&self.source, Some(*conversion))),
            StoredLayout::Placed(placement) => match placement.elements {
                PlacedElements::External { file } => Some((self.external(tensor, file)?, placement.conversion)),
                _ => None,
            },
            StoredLayout::LegacyBlocks(_) => None,
        })
    }

    fn external(&self, tensor: &TensorInfo, file: usize) -> Result<&Source> {
        self.externals.get(file).ok_or_else(|| {
            FormatError::new(
                self.path(),
                None,
                ErrorKind::Invalid(format!(
                    "tensor `{}` names external file {file}, which this model lacks",
                    tensor.name
                )),
            )
        })
    }

    /// A tensor whose bytes are not one run of a file, assembled in memory:
    /// repacked legacy blocks, a strided view's elements, decoded elements.
    fn gathered(&self, tensor: &TensorInfo) -> Result<Vec<u8>> {
        let stored = || self.source.read_range(tensor.file_offset, tensor.stored_len);
        match &tensor.layout {
            StoredLayout::LegacyBlocks(layout) => Ok(layout.repack(tensor.ggml_type, &stored()?)),
            StoredLayout::Placed(placement) => {
                let elements = match &placement.elements {
                    PlacedElements::Strided { strides, element_size } => {
                        gather_strided(&stored()?, &tensor.dims, strides, *element_size)
                    }
                    PlacedElements::Decoded(bytes) => bytes.to_vec(),
                    PlacedElements::External { file } => {
                        self.external(tensor, *file)?.read_range(tensor.file_offset, tensor.stored_len)?.into_owned()
                    }
                };
                Ok(match placement.conversion {
                    Some(conversion) => conversion.convert(&elements),
                    None => elements,
                })
            }
            StoredLayout::Native | StoredLayout::Converted(_) => Ok(self.tensor_data(tensor)?.into_owned()),
        }
    }

    /// `len` bytes of a tensor (in the current layout) from byte `offset` of it.
    pub fn tensor_data_range(&self, tensor: &TensorInfo, offset: u64, len: u64) -> Result<Cow<'_, [u8]>> {
        self.tensor_bytes_range(tensor, offset, len).map_err(|e| e.in_stage(LoadStage::Read))
    }

    fn tensor_bytes_range(&self, tensor: &TensorInfo, offset: u64, len: u64) -> Result<Cow<'_, [u8]>> {
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
        let slice_of = |bytes: &[u8], skip: u64| -> Result<Cow<'_, [u8]>> {
            let range = usize::try_from(skip).ok().zip(usize::try_from(skip + len).ok());
            match range.and_then(|(a, b)| bytes.get(a..b)) {
                Some(bytes) => Ok(Cow::Owned(bytes.to_vec())),
                None => Err(past_end()),
            }
        };
        match self.run(tensor)? {
            Some((source, None)) => source.read_range(tensor.file_offset + offset, len),
            Some((source, Some(conversion))) => {
                // Whole elements around the range, converted, then trimmed.
                let (stored_offset, stored_len) = conversion.stored_range(offset, len);
                let stored = source.read_range(tensor.file_offset + stored_offset, stored_len)?;
                let skip = offset - stored_offset / conversion.stored_size() * conversion.output_size();
                slice_of(&conversion.convert(&stored), skip)
            }
            None => slice_of(&self.gathered(tensor)?, offset),
        }
    }

    /// Copies a tensor's bytes (in the current layout) to `out`.
    pub fn copy_tensor_data(&self, tensor: &TensorInfo, out: &mut dyn Write) -> io::Result<()> {
        match self.run(tensor).map_err(io::Error::other)? {
            Some((source, None)) => source.copy_range(tensor.file_offset, tensor.stored_len, out),
            Some((source, Some(conversion))) => copy_converted(source, tensor, conversion, out),
            None => out.write_all(&self.gathered(tensor).map_err(io::Error::other)?),
        }
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
        match self.run(tensor).map_err(io::Error::other)? {
            Some((source, None)) => {
                source.copy_range_to_file_at(tensor.file_offset, tensor.stored_len, out, out_offset)
            }
            _ => out.write_all_at(&self.tensor_data(tensor).map_err(io::Error::other)?, out_offset),
        }
    }

    /// Drops the resident pages of `[offset, offset + len)` of a tensor's
    /// bytes (in the current layout) once they are consumed (see
    /// [`Source::release_range`]).
    pub fn release_tensor_range(&self, tensor: &TensorInfo, offset: u64, len: u64) {
        if let Some((source, offset, len)) = self.stored_span(tensor, offset, len) {
            source.release_range(offset, len);
        }
    }

    /// Reads `[offset, offset + len)` of a tensor's bytes (in the current
    /// layout) ahead of their use (see [`Source::read_ahead_range`]).
    pub fn read_ahead_tensor_range(&self, tensor: &TensorInfo, offset: u64, len: u64) {
        if let Some((source, offset, len)) = self.stored_span(tensor, offset, len) {
            source.read_ahead_range(offset, len);
        }
    }

    /// The file and its byte range that hold `[offset, offset + len)` of a
    /// tensor's bytes in the current layout, when one range does.
    fn stored_span(&self, tensor: &TensorInfo, offset: u64, len: u64) -> Option<(&Source, u64, u64)> {
        let (source, conversion) = self.run(tensor).ok()??;
        let (offset, len) = match conversion {
            None => (offset, len),
            Some(conversion) => conversion.stored_range(offset, len),
        };
        Some((source, tensor.file_offset.saturating_add(offset), len.min(tensor.stored_len.saturating_sub(offset))))
    }

    /// True when some tensor's bytes change on read (pre-GGJTv3 blocks).
    pub fn has_legacy_blocks(&self) -> bool {
        self.tensors.iter().any(|t| matches!(t.layout, StoredLayout::LegacyBlocks(_)))
    }
}

/// A container's header: its format, byte order, alignment, metadata,
/// tensors and data offset.
type Header = (ContainerFormat, Endian, u64, Metadata, Vec<TensorInfo>, u64);

/// Parses a header read front to back, from the map or a stream, and says
/// how many bytes it took.
fn front_to_back(source: &Source, parse: impl FnOnce(&mut ByteReader<'_>) -> Result<Header>) -> Result<(Header, u64)> {
    let mut reader = match source.mapped() {
        Some(bytes) => ByteReader::over_bytes(bytes, source.path()),
        None => ByteReader::over_stream(source.stream()?, source.path(), source.len()),
    };
    let header = parse(&mut reader)?;
    let bytes_parsed = reader.pos().min(header.5);
    Ok((header, bytes_parsed))
}

/// Converts a tensor a slab at a time, so a large one never exists
/// converted in memory all at once.
fn copy_converted(
    source: &Source,
    tensor: &TensorInfo,
    conversion: ElementConversion,
    out: &mut dyn Write,
) -> io::Result<()> {
    const SLAB_BYTES: u64 = 1 << 20;
    let slab = (SLAB_BYTES / conversion.stored_size()).max(1) * conversion.stored_size();
    let mut done = 0;
    while done < tensor.stored_len {
        let len = slab.min(tensor.stored_len - done);
        let stored = source.read_range(tensor.file_offset + done, len).map_err(io::Error::other)?;
        out.write_all(&conversion.convert(&stored))?;
        done += len;
    }
    Ok(())
}

/// The elements of a strided view in row-major order. `span` starts at the
/// view's first element; readers check that every element lies inside it.
fn gather_strided(span: &[u8], dims: &[u64], strides: &[u64], element_size: u64) -> Vec<u8> {
    let size = element_size as usize;
    let count = element_count(dims).unwrap_or(0) as usize;
    let mut out = Vec::with_capacity(count * size);
    if count == 0 {
        return out;
    }
    let mut index = vec![0u64; dims.len()];
    loop {
        let at = (index.iter().zip(strides).map(|(i, s)| i * s).sum::<u64>() * element_size) as usize;
        out.extend_from_slice(&span[at..at + size]);
        // The odometer: dims[0] turns fastest.
        let mut axis = 0;
        loop {
            if axis == dims.len() {
                return out;
            }
            index[axis] += 1;
            if index[axis] < dims[axis] {
                break;
            }
            index[axis] = 0;
            axis += 1;
        }
    }
}

/// Resolves an on-disk tensor type id, naming types ggml has removed.
pub(crate) fn resolve_tensor_type(id: u32, tensor: &str) -> Result<GgmlType, ErrorKind> {
    GgmlType::from_id(id).ok_or_else(|| match RemovedGgmlType::from_id(id) {
        Some(removed) => ErrorKind::RemovedTensorType { tensor: tensor.into(), id, name: removed.name },
        None => ErrorKind::UnknownTensorType { tensor: tensor.into(), id },
    })
}
