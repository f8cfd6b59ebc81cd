//! The artifact nodes pass to each other: a tensor set.
//!
//! Ordered metadata plus tensor descriptors whose bytes are a range of an
//! input file, a blob in the store, or a conversion of another tensor not yet
//! computed. Manifest-only operations (filter, rename, metadata edits) move
//! descriptors, never bytes; a chain of conversions (dequantize → quantize)
//! stays a chain of descriptors until something needs the bytes, which then
//! flow a slab of rows at a time.
//!
//! Every tensor carries a key that names its bytes by derivation: an input
//! tensor's key comes from the file's content hash, a conversion's from its
//! source's key, the target type, the importance weights and the codec
//! version. Renaming a tensor keeps its key; changing its type changes it.

use std::io;
use std::path::Path;
use std::sync::Arc;

use crate::codecs::CODEC_VERSION;
use crate::formats::ggml_legacy::LegacyHeader;
use crate::formats::gguf;
use crate::key::{Key, KeyBuilder};
use crate::model::{AxisCut, Endian, Metadata, TensorInfo};
use crate::types::GgmlType;

/// Where an op puts the bytes it makes (generated and merged tensors,
/// importance weights) under their blake3: the store, as the ops, which sit
/// below it, see it.
pub trait BlobSink: Sync {
    fn put_blob(&self, bytes: &[u8]) -> Result<Key, BlobSinkError>;
}

/// Why a [`BlobSink`] could not keep bytes (the store's own error, boxed).
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct BlobSinkError(pub Box<dyn std::error::Error + Send + Sync>);

/// A node's result: what a GGUF written from it would hold.
#[derive(Debug, Clone)]
pub struct TensorSet {
    pub endian: Endian,
    pub metadata: Metadata,
    pub tensors: Vec<Tensor>,
    pub header_end: HeaderEnd,
    /// The facts of the legacy file the set was read from that its metadata
    /// lacks, kept by every op that keeps the model (a GGJT export uses them
    /// where they still hold).
    pub legacy: Option<Arc<LegacyHeader>>,
}

/// Where a GGUF written from a set ends its header. Not carried by the ops
/// that derive one set from another: a file edited, renamed or split is
/// written as ggml and gguf-py write every file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum HeaderEnd {
    /// Padded to the alignment.
    #[default]
    Aligned,
    /// Right after the metadata, with no padding: a file of no tensors as
    /// `convert_hf_to_gguf.py --vocab-only` writes it (ggml reads both).
    AtMetadata,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Tensor {
    pub name: String,
    /// ggml order: `dims[0]` is the row length.
    pub dims: Vec<u64>,
    #[serde(rename = "type")]
    pub ggml_type: GgmlType,
    pub key: Key,
    pub data: TensorData,
}

/// Where a tensor's bytes come from.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TensorData {
    /// Tensor `index` of the input file whose content hash is `file`.
    Input { file: Key, index: usize },
    /// A blob in the store.
    Blob { hash: Key },
    /// `from`'s values encoded as this tensor's type, with the importance
    /// weights in blob `importance` (f32, little-endian) if any. `producer`
    /// is the key of the node that made the conversion, whose backend runs
    /// it (not part of the tensor's key: every backend writes the same bytes).
    Convert {
        from: Box<Tensor>,
        importance: Option<Key>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        producer: Option<Key>,
    },
    /// The f32 values of tensor `index` of checkpoint file `file` (content
    /// hash), with a Hugging Face family's row transforms applied: what
    /// `convert_hf_to_gguf.py` computes before it casts a tensor.
    /// Its FP8 scales, if any, multiply the values first (`convert_hf_to_gguf.py`
    /// dequantizes before it transforms).
    Checkpoint {
        file: Key,
        index: usize,
        transform: RowTransform,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        scale: Option<CheckpointScale>,
    },
    /// The rows of each part in turn, every part of this tensor's row
    /// length and type: per-expert tensors stacked into one 3-D tensor
    /// (`*_exps`), expert after expert, computed a slab at a time.
    Stacked { parts: Vec<Tensor> },
    /// One device's slice of `from` (a per-device export): cut from
    /// `from`'s bytes, which are cached by `from`'s key when derived.
    Slice { from: Box<Tensor>, cut: AxisCut },
    /// An MXFP4 weight repacked from a checkpoint's codes (`blocks`) and
    /// scales (`scales`), each tensor `index` of a checkpoint file (content
    /// hash), the rows of each expert `rows` selects: bits moved, computed a
    /// slab of rows at a time.
    Mxfp4 { blocks: TensorAt, scales: TensorAt, rows: Option<RowRange> },
    /// `base`'s values with each LoRA delta added (`lora-merge`), in this
    /// tensor's type (F32 or F16), computed a slab of rows at a time as it
    /// is written: a row needs its row of `base` and of each `b`, and all
    /// of each (small) `a`.
    Merged { base: Box<Tensor>, deltas: Vec<LoraDelta> },
}

/// Tensor `index` of the input file whose content hash is `file`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TensorAt {
    pub file: Key,
    pub index: usize,
}

/// One adapter's low-rank delta on a tensor: `scale · B·A`, `a` of shape
/// [in, rank] and `b` of shape [rank, out] for a tensor of shape [in, out]
/// (each with the expert count last, for a stack of experts).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LoraDelta {
    pub a: Tensor,
    pub b: Tensor,
    /// The f32 scale (the user's times alpha over the rank), as its bits:
    /// a manifest keeps it exactly.
    pub scale_bits: u32,
    /// A token embedding's delta, whose `a` llama.cpp stores transposed:
    /// `a` [rank, vocabulary], `b` [rank, width].
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub token_embedding: bool,
}

impl LoraDelta {
    pub fn scale(&self) -> f32 {
        f32::from_bits(self.scale_bits)
    }
}

/// An FP8 weight's scales (`weight_scale_inv`): tensor `index` of checkpoint
/// file `file` (content hash), each value covering `block` (rows, columns)
/// of the weight, or broadcast over it as the values are shaped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CheckpointScale {
    pub file: Key,
    pub index: usize,
    pub block: Option<[u64; 2]>,
}

/// A converter's transforms of one checkpoint tensor, in the order applied.
/// Each but the transpose acts on whole rows (or, in a 1-D tensor, on
/// elements), so a slab of rows can be computed without the rest of the
/// tensor; a transposed slab reads a run of columns of its source rows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RowTransform {
    /// Every `step`th element of each source row from `start`, taken before
    /// anything else: gate or up out of a gate-up tensor interleaved element
    /// by element (GPT-OSS's experts and their biases).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elements: Option<ElementStride>,
    /// LLaMA's Q/K row permutation, over this many heads.
    pub permute_heads: Option<usize>,
    /// Gemma's norm +1, in the checkpoint tensor's own dtype.
    pub plus_one: bool,
    /// Gemma's vocabulary cut: the elements of the rows kept.
    pub keep_elements: Option<usize>,
    /// One run of rows out of every group of the source's rows (a
    /// projection out of a fused tensor), taken before the permutation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows: Option<RowRange>,
    /// The rows (after the range and the permutation) transposed a run of
    /// this many at a time: `b` rows of `c` elements become `c` rows of `b`
    /// elements (GPT-2's Conv1D weights whole, DeepSeek's MLA key
    /// projection a head at a time). Rows of the result need every row of
    /// their run, a column each.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transpose: Option<usize>,
}

/// Elements `start, start + step, …` of a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ElementStride {
    pub step: usize,
    pub start: usize,
}

impl ElementStride {
    /// The elements the stride takes from a row of `len`.
    pub fn len_of(&self, len: usize) -> usize {
        len.saturating_sub(self.start).div_ceil(self.step.max(1))
    }
}

/// Rows `start..start + len` of every group of `group` rows, group after
/// group: Q, K or V out of a fused QKV tensor laid out by head or KV group,
/// gate or up out of a fused gate-up tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RowRange {
    pub group: usize,
    pub start: usize,
    pub len: usize,
}

impl RowRange {
    /// The source row of row `row` of the selection.
    pub fn source_row(&self, row: usize) -> usize {
        (row / self.len) * self.group + self.start + row % self.len
    }

    /// The rows the selection takes from a source of `rows` rows.
    pub fn rows_of(&self, rows: usize) -> usize {
        rows / self.group.max(1) * self.len
    }
}

impl Tensor {
    /// Tensor `index` of an input file, described by `info`.
    pub fn from_input(file: Key, index: usize, info: &TensorInfo) -> Tensor {
        let key = KeyBuilder::new("tensor.input").key(&file).u64(index as u64).finish();
        Tensor {
            name: info.name.clone(),
            dims: info.dims.clone(),
            ggml_type: info.ggml_type,
            key,
            data: TensorData::Input { file, index },
        }
    }

    /// Bytes made whole by an op or a tool and stored as blob `hash`:
    /// named by their content, whatever made them.
    pub fn generated(info: &TensorInfo, hash: Key) -> Tensor {
        Tensor {
            name: info.name.clone(),
            dims: info.dims.clone(),
            ggml_type: info.ggml_type,
            key: KeyBuilder::new("tensor.generated").key(&hash).finish(),
            data: TensorData::Blob { hash },
        }
    }

    /// The transformed f32 values of tensor `index` of checkpoint file `file`
    /// (times its FP8 `scale` if any), named `name`, of shape `dims` (after
    /// the transforms).
    pub fn from_checkpoint(
        name: &str,
        dims: Vec<u64>,
        file: Key,
        index: usize,
        transform: RowTransform,
        scale: Option<CheckpointScale>,
    ) -> Tensor {
        let mut key = KeyBuilder::new("tensor.checkpoint");
        key.key(&file).u64(index as u64);
        key.u64(transform.permute_heads.map_or(0, |h| h as u64 + 1)).u64(u64::from(transform.plus_one));
        key.u64(transform.keep_elements.map_or(0, |n| n as u64 + 1));
        // Appended only when set: the keys of tensors without one stay as they were.
        if let Some(RowRange { group, start, len }) = transform.rows {
            key.str("rows").u64(group as u64).u64(start as u64).u64(len as u64);
        }
        if let Some(run) = transform.transpose {
            key.str("transpose").u64(run as u64);
        }
        if let Some(ElementStride { step, start }) = transform.elements {
            key.str("elements").u64(step as u64).u64(start as u64);
        }
        if let Some(CheckpointScale { file, index, block }) = scale {
            key.str("scale").key(&file).u64(index as u64);
            let [rows, cols] = block.unwrap_or([0, 0]);
            key.u64(rows).u64(cols);
        }
        Tensor {
            name: name.to_owned(),
            dims,
            ggml_type: GgmlType::F32,
            key: key.finish(),
            data: TensorData::Checkpoint { file, index, transform, scale },
        }
    }

    /// The MXFP4 weight named `name`, of shape `dims`, repacked from the
    /// checkpoint codes `blocks` and scales `scales`, the rows `rows` selects.
    pub fn mxfp4(name: &str, dims: Vec<u64>, blocks: TensorAt, scales: TensorAt, rows: Option<RowRange>) -> Tensor {
        let mut key = KeyBuilder::new("tensor.mxfp4");
        for TensorAt { file, index } in [blocks, scales] {
            key.key(&file).u64(index as u64);
        }
        if let Some(RowRange { group, start, len }) = rows {
            key.str("rows").u64(group as u64).u64(start as u64).u64(len as u64);
        }
        Tensor {
            name: name.to_owned(),
            dims,
            ggml_type: GgmlType::MXFP4,
            key: key.finish(),
            data: TensorData::Mxfp4 { blocks, scales, rows },
        }
    }

    /// `parts` (each of the row length `dims[0]` and the same type) one after
    /// another, named `name`, of shape `dims`.
    pub fn stacked(name: &str, dims: Vec<u64>, parts: Vec<Tensor>) -> Tensor {
        let mut key = KeyBuilder::new("tensor.stacked");
        key.u64(parts.len() as u64);
        for part in &parts {
            key.key(&part.key);
        }
        let ggml_type = parts.first().map_or(GgmlType::F32, |p| p.ggml_type);
        Tensor { name: name.to_owned(), dims, ggml_type, key: key.finish(), data: TensorData::Stacked { parts } }
    }

    /// `from` converted to `to`, keeping its name and shape.
    pub fn convert(from: Tensor, to: GgmlType, importance: Option<Key>) -> Tensor {
        let mut key = KeyBuilder::new("tensor.convert");
        key.u64(u64::from(CODEC_VERSION)).key(&from.key).str(to.name());
        if let Some(weights) = &importance {
            key.key(weights);
        }
        Tensor {
            name: from.name.clone(),
            dims: from.dims.clone(),
            ggml_type: to,
            key: key.finish(),
            data: TensorData::Convert { from: Box::new(from), importance, producer: None },
        }
    }

    /// The part of `from` that `cut` keeps, when the cut fits it.
    pub fn slice(from: Tensor, cut: AxisCut) -> Option<Tensor> {
        let info = cut.sliced(&from.info())?;
        let mut key = KeyBuilder::new("tensor.slice");
        key.key(&from.key).u64(cut.axis as u64);
        for number in cut.segments.iter().flatten() {
            key.u64(*number);
        }
        Some(Tensor {
            name: from.name.clone(),
            dims: info.dims,
            ggml_type: from.ggml_type,
            key: key.finish(),
            data: TensorData::Slice { from: Box::new(from), cut },
        })
    }

    /// The descriptor a GGUF writer or a mixture rule needs.
    pub fn info(&self) -> TensorInfo {
        TensorInfo::new(self.name.clone(), self.dims.clone(), self.ggml_type)
    }

    pub fn n_bytes(&self) -> u64 {
        self.info().n_bytes()
    }

    /// True when producing the bytes needs codec work (unless cached).
    pub fn is_derived(&self) -> bool {
        matches!(self.data, TensorData::Convert { .. })
    }

    fn collect_refs(&self, blobs: &mut Vec<Key>, files: &mut Vec<Key>) {
        match &self.data {
            TensorData::Input { file, .. } => files.push(*file),
            TensorData::Checkpoint { file, scale, .. } => {
                files.push(*file);
                files.extend(scale.map(|s| s.file));
            }
            TensorData::Mxfp4 { blocks, scales, .. } => files.extend([blocks.file, scales.file]),
            TensorData::Blob { hash } => blobs.push(*hash),
            TensorData::Convert { from, importance, .. } => {
                blobs.extend(importance.iter().copied());
                from.collect_refs(blobs, files);
            }
            TensorData::Slice { from, .. } => from.collect_refs(blobs, files),
            TensorData::Stacked { parts } => parts.iter().for_each(|p| p.collect_refs(blobs, files)),
            TensorData::Merged { base, deltas } => {
                base.collect_refs(blobs, files);
                for delta in deltas {
                    delta.a.collect_refs(blobs, files);
                    delta.b.collect_refs(blobs, files);
                }
            }
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("manifest {path}: {problem}")]
pub struct ManifestError {
    pub path: String,
    pub problem: String,
}

const MANIFEST_MAGIC: &[u8; 8] = b"QFMANIF1";

#[derive(serde::Serialize, serde::Deserialize)]
struct ManifestHead {
    endian: Endian,
    tensors: Vec<Tensor>,
    // Absent when aligned: manifests written before the field read the same.
    #[serde(default, skip_serializing_if = "is_aligned")]
    header_end: HeaderEnd,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    legacy: Option<LegacyHeader>,
}

fn is_aligned(end: &HeaderEnd) -> bool {
    *end == HeaderEnd::Aligned
}

impl TensorSet {
    pub fn infos(&self) -> Vec<TensorInfo> {
        self.tensors.iter().map(Tensor::info).collect()
    }

    /// Blobs and input files the tensors' bytes come from, each once.
    pub fn references(&self) -> (Vec<Key>, Vec<Key>) {
        let (mut blobs, mut files) = (Vec::new(), Vec::new());
        for t in &self.tensors {
            t.collect_refs(&mut blobs, &mut files);
        }
        for list in [&mut blobs, &mut files] {
            list.sort_unstable();
            list.dedup();
        }
        (blobs, files)
    }

    /// The manifest: magic, a JSON head (tensors), then the metadata as a
    /// GGUF file with no tensors, so every value keeps its exact type and bytes.
    pub fn encode(&self) -> io::Result<Vec<u8>> {
        let head = serde_json::to_vec(&ManifestHead {
            endian: self.endian,
            tensors: self.tensors.clone(),
            header_end: self.header_end,
            legacy: self.legacy.as_deref().cloned(),
        })?;
        let layout = gguf::layout(&self.metadata, &[])?;
        let mut out = Vec::with_capacity(MANIFEST_MAGIC.len() + 8 + head.len() + layout.file_len as usize);
        out.extend_from_slice(MANIFEST_MAGIC);
        out.extend_from_slice(&(head.len() as u64).to_le_bytes());
        out.extend_from_slice(&head);
        gguf::write_header(&mut out, Endian::Little, &self.metadata, &[], &layout)?;
        Ok(out)
    }

    /// Reads a manifest written by [`TensorSet::encode`]; `name` labels errors.
    pub fn decode(bytes: &[u8], name: &str) -> Result<TensorSet, ManifestError> {
        let bad = |problem: String| ManifestError { path: name.to_owned(), problem };
        let rest = bytes.strip_prefix(MANIFEST_MAGIC).ok_or_else(|| bad("not a quantforge manifest".into()))?;
        let (len, rest) = rest.split_first_chunk::<8>().ok_or_else(|| bad("truncated".into()))?;
        let len = usize::try_from(u64::from_le_bytes(*len)).unwrap_or(usize::MAX);
        if len > rest.len() {
            return Err(bad("truncated".into()));
        }
        let (head, gguf_bytes) = rest.split_at(len);
        let head: ManifestHead = serde_json::from_slice(head).map_err(|e| bad(e.to_string()))?;
        let header = gguf::read_header_bytes(gguf_bytes, Path::new(name)).map_err(|e| bad(e.to_string()))?;
        Ok(TensorSet {
            endian: head.endian,
            metadata: header.metadata,
            tensors: head.tensors,
            header_end: head.header_end,
            legacy: head.legacy.map(Arc::new),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Array, Value};

    #[test]
    fn manifest_round_trips() {
        let mut metadata = Metadata::new();
        metadata.set("general.name", Value::string("tiny"));
        metadata.set("f", Value::F32(f32::NAN));
        metadata.set("tokens", Value::Array(Array::String([[0xff, 0x00]].into())));
        let file = Key::of_bytes(b"model");
        let input = Tensor::from_input(file, 3, &TensorInfo::new("w", vec![256, 2], GgmlType::F16));
        let q = Tensor::convert(input, GgmlType::Q4_K, Some(Key::of_bytes(b"weights")));
        let legacy = LegacyHeader {
            n_mult: 256,
            n_rot: 64,
            n_embd: 4096,
            n_head: 32,
            n_ff: 11008,
            token_texts: vec![(0, b" \xe2\x81\x87 ".to_vec())],
        };
        let set = TensorSet {
            endian: Endian::Little,
            metadata,
            tensors: vec![q],
            header_end: HeaderEnd::Aligned,
            legacy: Some(Arc::new(legacy)),
        };
        let back = TensorSet::decode(&set.encode().unwrap(), "test").unwrap();
        assert_eq!(back.tensors, set.tensors);
        assert_eq!(back.legacy, set.legacy);
        assert_eq!(back.metadata.len(), 3);
        assert!(matches!(back.metadata.get("f"), Some(Value::F32(v)) if v.is_nan()));
        assert_eq!(back.metadata.get("tokens"), set.metadata.get("tokens"));
        assert_eq!(set.references(), (vec![Key::of_bytes(b"weights")], vec![file]));
    }

    #[test]
    fn converting_changes_the_key_and_renaming_does_not() {
        let input = Tensor::from_input(Key::of_bytes(b"m"), 0, &TensorInfo::new("w", vec![32], GgmlType::F32));
        let a = Tensor::convert(input.clone(), GgmlType::Q8_0, None);
        let b = Tensor::convert(input.clone(), GgmlType::Q4_0, None);
        assert_ne!(a.key, b.key);
        let mut renamed = a.clone();
        renamed.name = "v".into();
        assert_eq!(Tensor::convert(input, GgmlType::Q8_0, None).key, renamed.key);
    }
}
