//! The tensors of a converted checkpoint: names, order, family transforms
//! and output types, as `convert_hf_to_gguf.py` makes them.

use std::collections::HashMap;

use crate::arch::registry::{FAMILIES, gguf_name};
use crate::artifact::{ElementStride, RowRange, RowTransform};
use crate::backend::{Backend, Slab};
use crate::codecs::scalar;
use crate::formats::ModelFile;
use crate::model::{StoredLayout, TensorInfo};
use crate::types::GgmlType;

use super::checkpoint::Checkpoint;
use super::error::ConvertError;
use super::family::{self, Conversion, Experts, Fused, Generated, Piece, Transform};
use super::fp8::{Fp8, ScaleAt, WeightScale};
use super::hparams::BLOCKS;
use super::mxfp4::{self, Mxfp4Part};
use super::rope::{RopeParameters, phi3_long_rope};
use super::{Scope, mmproj};

/// `--outtype`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutType {
    F32,
    F16,
    BF16,
    Q8_0,
}

impl OutType {
    pub fn from_name(name: &str) -> Option<OutType> {
        Some(match name.to_ascii_lowercase().as_str() {
            "f32" => OutType::F32,
            "f16" => OutType::F16,
            "bf16" => OutType::BF16,
            "q8_0" => OutType::Q8_0,
            _ => return None,
        })
    }

    /// The `--outtype` spelling.
    pub fn name(self) -> &'static str {
        match self {
            OutType::F32 => "f32",
            OutType::F16 => "f16",
            OutType::BF16 => "bf16",
            OutType::Q8_0 => "q8_0",
        }
    }

    /// `--outtype auto`: the first 2-D checkpoint tensor stored as bf16 or
    /// f16 (in the converter's tensor order, f32 and float8 ones passed over) decides;
    /// f16 when there is none. Of a multimodal checkpoint, only the tensors
    /// the conversion writes from count: the vision tower's for `--mmproj`,
    /// the others for the language model. A tower another converter
    /// writes takes that converter's default.
    pub fn auto(ckpt: &Checkpoint, scope: Scope) -> OutType {
        let tower = mmproj::tower_of(ckpt);
        if let Some(default) = tower.and_then(|tower| tower.own_default()).filter(|_| scope == Scope::Mmproj) {
            return default;
        }
        let written = |name: &str| tower.is_some_and(|tower| tower.takes(name)) == (scope == Scope::Mmproj);
        let decisive = ckpt.tensor_order().into_iter().map(|(s, t)| &ckpt.shards[s].tensors[t]).find(|tensor| {
            // Stored so, not read so: float8 reads as f16, and the converter passes it over.
            let stored = matches!(tensor.layout, StoredLayout::Native);
            let float = matches!(tensor.ggml_type, GgmlType::BF16 | GgmlType::F16);
            tensor.dims.len() >= 2 && stored && float && written(&tensor.name)
        });
        match decisive.map(|tensor| tensor.ggml_type) {
            Some(GgmlType::BF16) => OutType::BF16,
            _ => OutType::F16,
        }
    }

    fn ggml(self) -> GgmlType {
        match self {
            OutType::F32 => GgmlType::F32,
            OutType::F16 => GgmlType::F16,
            OutType::BF16 => GgmlType::BF16,
            OutType::Q8_0 => GgmlType::Q8_0,
        }
    }
}

/// One tensor of a converted file: its descriptor, and how its bytes are
/// made from the checkpoint when they are asked for ([`ConvertedTensor::data`]),
/// so a conversion holds one tensor's values at a time, not the model.
#[derive(Debug, Clone)]
pub struct ConvertedTensor {
    pub info: TensorInfo,
    pub(super) values: Values,
}

/// Where a converted tensor's values come from.
#[derive(Debug, Clone)]
pub enum Values {
    /// Computed from the configuration (LLaMA 3's `rope_freqs`, Phi-3's
    /// LongRoPE factors).
    Generated(Vec<f32>),
    /// A checkpoint tensor through the family's transforms.
    Checkpoint(CheckpointPart),
    /// These checkpoint tensors one after another: one projection of every
    /// expert of a block, stacked expert-major, or the runs of a fused
    /// tensor's rows in a new order.
    Stacked(Vec<CheckpointPart>),
    /// An MXFP4 weight's codes and scales repacked, bits moved as they are:
    /// stored MXFP4 whatever the outtype.
    Mxfp4(Mxfp4Part),
}

/// Tensor `tensor` of shard `shard` through `transform`, multiplied first
/// by its FP8 scales when it has them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckpointPart {
    pub shard: usize,
    pub tensor: usize,
    pub transform: RowTransform,
    pub scale: Option<ScaleAt>,
}

impl ConvertedTensor {
    pub(super) fn new(info: TensorInfo, values: Values) -> ConvertedTensor {
        ConvertedTensor { info, values }
    }

    /// Where the tensor's values come from.
    pub fn values_source(&self) -> &Values {
        &self.values
    }

    /// The same values stored as `info` says (a preset's type for the tensor).
    pub fn stored_as(&self, info: TensorInfo) -> ConvertedTensor {
        ConvertedTensor { info, values: self.values.clone() }
    }
}

/// A whole checkpoint tensor's values, as stored.
pub(super) fn whole_values(
    shard: &ModelFile,
    source: &TensorInfo,
    backend: &dyn Backend,
) -> Result<Vec<f32>, ConvertError> {
    let mut values = vec![0f32; source.n_elements() as usize];
    decode(backend, source, source.n_elements() as usize, 0, &shard.tensor_data(source)?, None, &mut values)?;
    // Read once: its mapped pages need not stay resident.
    shard.release_tensor_range(source, 0, source.n_bytes());
    Ok(values)
}

/// A whole checkpoint tensor's values, scaled and transformed.
fn whole_tensor_values(
    shard: &ModelFile,
    source: &TensorInfo,
    transform: &RowTransform,
    scale: Option<&WeightScale>,
    backend: &dyn Backend,
) -> Result<Vec<f32>, ConvertError> {
    let mut values = whole_values(shard, source, backend)?;
    if let Some(scale) = scale {
        scale.apply(0, &mut values);
    }
    if let Some(stride) = transform.elements {
        let row = source.dims.first().map_or(1, |&n| n as usize).max(1);
        values = values.chunks_exact(row).flat_map(|row| strided(row, stride)).collect();
    }
    let row_len = strided_len(row_len_of(source), transform);
    if let Some(map) = row_map(source, transform) {
        values = reordered_rows(&values, row_len, selected_rows(source, transform), &map);
    }
    if let Some(run) = transform.transpose {
        values = transposed(&values, row_len, run);
    }
    plus_one(&mut values, source, transform);
    if let Some(n) = transform.keep_elements {
        values.truncate(n);
    }
    Ok(values)
}

/// Decodes whole rows of checkpoint tensor `source` (`n_per_row` values
/// each, the first being tensor row `first_row`) on `backend`, times their
/// FP8 scales if any.
fn decode(
    backend: &dyn Backend,
    source: &TensorInfo,
    n_per_row: usize,
    first_row: usize,
    bytes: &[u8],
    scale: Option<&WeightScale>,
    out: &mut [f32],
) -> Result<(), ConvertError> {
    let slab = Slab {
        from: source.ggml_type,
        to: source.ggml_type,
        n_per_row,
        first_row,
        rows_per_expert: 1,
        source: bytes,
        importance: None,
        row_numbers: None,
    };
    backend.decode(&slab, out).map_err(|e| ConvertError::Codec { tensor: source.name.clone(), source: e })?;
    if let Some(scale) = scale {
        scale.apply(first_row * n_per_row, out);
    }
    Ok(())
}

/// Gemma's norm +1, added in the tensor's own dtype: an f16 checkpoint
/// rounds the sum to f16.
fn plus_one(values: &mut [f32], source: &TensorInfo, transform: &RowTransform) {
    if !transform.plus_one {
        return;
    }
    let f16 = source.ggml_type == GgmlType::F16;
    for v in values {
        let sum = *v + 1.0;
        *v = if f16 { scalar::f16_bits_to_f32(scalar::f32_to_f16_bits(sum)) } else { sum };
    }
}

/// Rows `first..first + out.len() / row length` of checkpoint tensor
/// `source` of `shard`, transformed, into `out`: a slab at a time, so a
/// conversion holds a slab's values, not a tensor's. A 1-D tensor is one
/// row (its permutation moves elements), computed whole.
pub fn checkpoint_rows(
    shard: &ModelFile,
    source: &TensorInfo,
    transform: &RowTransform,
    scale: Option<&WeightScale>,
    first: usize,
    backend: &dyn Backend,
    out: &mut [f32],
) -> Result<(), ConvertError> {
    if source.dims.len() < 2 {
        let values = whole_tensor_values(shard, source, transform, scale, backend)?;
        out.copy_from_slice(&values[..out.len()]);
        return Ok(());
    }
    if let Some(run) = transform.transpose {
        transposed_rows(shard, source, transform, scale, run, first, backend, out)?;
        plus_one(out, source, transform);
        return Ok(());
    }
    let row_len = source.dims[0] as usize;
    let row_bytes = source.ggml_type.row_size(row_len as u64).unwrap_or(0);
    if let Some(stride) = transform.elements {
        let map = row_map(source, transform);
        let mut row = vec![0f32; row_len];
        for (r, out_row) in out.chunks_exact_mut(stride.len_of(row_len).max(1)).enumerate() {
            let from = map.as_ref().map_or(first + r, |map| map(first + r));
            let bytes = shard.tensor_data_range(source, from as u64 * row_bytes, row_bytes)?;
            decode(backend, source, row_len, from, &bytes, scale, &mut row)?;
            out_row.iter_mut().zip(strided(&row, stride)).for_each(|(to, from)| *to = from);
        }
        plus_one(out, source, transform);
        return Ok(());
    }
    let n_rows = out.len() / row_len.max(1);
    match row_map(source, transform) {
        None => {
            let range = shard.tensor_data_range(source, first as u64 * row_bytes, n_rows as u64 * row_bytes)?;
            decode(backend, source, row_len, first, &range, scale, out)?;
        }
        Some(map) => {
            for (r, row) in out.chunks_exact_mut(row_len).enumerate() {
                let from = map(first + r);
                let bytes = shard.tensor_data_range(source, from as u64 * row_bytes, row_bytes)?;
                decode(backend, source, row_len, from, &bytes, scale, row)?;
            }
        }
    }
    plus_one(out, source, transform);
    Ok(())
}

/// Rows `first..first + out.len() / run` of the transpose, a run of `run`
/// selected rows at a time, of checkpoint tensor `source`: each written row
/// is one column of a run, so a slab reads the slab's columns of each of the
/// run's rows (the whole tensor once, for a type whose elements cannot be
/// addressed one by one).
#[allow(clippy::too_many_arguments)]
fn transposed_rows(
    shard: &ModelFile,
    source: &TensorInfo,
    transform: &RowTransform,
    scale: Option<&WeightScale>,
    run: usize,
    first: usize,
    backend: &dyn Backend,
    out: &mut [f32],
) -> Result<(), ConvertError> {
    let (source_cols, run) = (source.dims[0] as usize, run.max(1));
    if source.ggml_type.block_size() != 1 {
        let values = whole_tensor_values(shard, source, transform, scale, backend)?;
        out.copy_from_slice(&values[first * run..][..out.len()]);
        return Ok(());
    }
    // Column `c` of the (strided) rows is the source's column `start + c·step`.
    let ElementStride { step, start } = transform.elements.unwrap_or(ElementStride { step: 1, start: 0 });
    let (step, cols) = (step.max(1), strided_len(source_cols, transform));
    let map = row_map(source, transform);
    let element = source.ggml_type.type_size();
    let row_bytes = source.ggml_type.row_size(source_cols as u64).unwrap_or(0);
    let n_rows = out.len() / run;
    let mut column_run = vec![0f32; (cols.min(n_rows).max(1) - 1) * step + 1];
    let mut done = 0;
    while done < n_rows {
        let (block, col) = ((first + done) / cols, (first + done) % cols);
        let width = (cols - col).min(n_rows - done);
        let (source_col, span) = (start + col * step, (width - 1) * step + 1);
        let piece = &mut column_run[..span];
        for i in 0..run {
            let selected = block * run + i;
            let from = map.as_ref().map_or(selected, |map| map(selected));
            let offset = from as u64 * row_bytes + source_col as u64 * element;
            let bytes = shard.tensor_data_range(source, offset, span as u64 * element)?;
            decode(backend, source, span, from, &bytes, None, piece)?;
            if let Some(scale) = scale {
                scale.apply(from * source_cols + source_col, piece);
            }
            for (k, &value) in piece.iter().step_by(step).enumerate() {
                out[(done + k) * run + i] = value;
            }
        }
        done += width;
    }
    Ok(())
}

/// The elements of `row` that `stride` takes.
fn strided(row: &[f32], stride: ElementStride) -> impl Iterator<Item = f32> + '_ {
    row.iter().skip(stride.start).step_by(stride.step.max(1)).copied()
}

/// A row's length after `transform`'s element stride, from `len`.
fn strided_len(len: usize, transform: &RowTransform) -> usize {
    transform.elements.map_or(len, |stride| stride.len_of(len))
}

/// `values`, rows of `cols`, transposed a run of `run` rows at a time.
fn transposed(values: &[f32], cols: usize, run: usize) -> Vec<f32> {
    let (cols, run) = (cols.max(1), run.max(1));
    let mut out = Vec::with_capacity(values.len());
    for block in values.chunks_exact(cols * run) {
        for col in 0..cols {
            out.extend((0..run).map(|i| block[i * cols + col]));
        }
    }
    out
}

/// Rows `first..first + n` of checkpoint tensor `source` in the order the
/// converter writes them, as stored (mapped where they lie in order), when
/// the transform only reorders rows; `None` when it changes values, and the
/// rows are computed through f32 instead. A conversion from these bytes
/// equals one from their f32 values: decoding a float is exact.
pub fn checkpoint_rows_as_stored<'a>(
    shard: &'a ModelFile,
    source: &TensorInfo,
    transform: &RowTransform,
    first: usize,
    n: usize,
) -> Result<Option<std::borrow::Cow<'a, [u8]>>, ConvertError> {
    let reordered_only = !transform.plus_one
        && transform.keep_elements.is_none()
        && transform.transpose.is_none()
        && transform.elements.is_none();
    if !reordered_only || source.dims.len() < 2 {
        return Ok(None);
    }
    let row_bytes = source.ggml_type.row_size(source.dims[0]).unwrap_or(0);
    Ok(Some(match row_map(source, transform) {
        None => shard.tensor_data_range(source, first as u64 * row_bytes, n as u64 * row_bytes)?,
        Some(map) => {
            let mut bytes = Vec::with_capacity(n * row_bytes as usize);
            for to in first..first + n {
                let from = map(to) as u64;
                bytes.extend_from_slice(&shard.tensor_data_range(source, from * row_bytes, row_bytes)?);
            }
            bytes.into()
        }
    }))
}

/// A row's length: a 1-D tensor's rows are its elements.
fn row_len_of(source: &TensorInfo) -> usize {
    match source.dims.len() {
        0 | 1 => 1,
        _ => source.dims[0] as usize,
    }
}

/// The source row of each row written, when `transform` moves rows: the
/// permutation over the rows the range selects (or all of them), then the
/// range; `None` when rows stay in place.
fn row_map(source: &TensorInfo, transform: &RowTransform) -> Option<Box<dyn Fn(usize) -> usize>> {
    if transform.permute_heads.is_none() && transform.rows.is_none() {
        return None;
    }
    let range = transform.rows;
    let rows = selected_rows(source, transform);
    let head_rows = transform.permute_heads.map(|heads| rows / heads.max(1));
    Some(Box::new(move |to| {
        let selected = head_rows.map_or(to, |hd| permuted_source_row(to, hd));
        range.map_or(selected, |r| r.source_row(selected))
    }))
}

/// The source row of row `to` of LLaMA's Q/K permutation over heads of
/// `hd` rows: row `2i + j` of a head is the head's row `j·hd/2 + i`.
fn permuted_source_row(to: usize, hd: usize) -> usize {
    let (head, k) = (to / hd, to % hd);
    head * hd + (k % 2) * (hd / 2) + k / 2
}

/// The conversion and GGUF architecture of the checkpoint's first
/// `architectures` entry.
pub fn conversion_of(ckpt: &Checkpoint) -> Result<(&'static Conversion, &'static str), ConvertError> {
    let class = ckpt.config["architectures"][0]
        .as_str()
        .ok_or_else(|| ConvertError::Config("no `architectures` list".into()))?;
    family::of_class(class).ok_or_else(|| ConvertError::Architecture {
        architecture: class.to_owned(),
        nearest: family::nearest_classes(class),
    })
}

/// Every tensor of the converted file, in file order.
pub fn convert_tensors(ckpt: &Checkpoint, outtype: OutType) -> Result<Vec<ConvertedTensor>, ConvertError> {
    let (conversion, _) = conversion_of(ckpt)?;
    let tower = mmproj::tower_of(ckpt);
    let names = FAMILIES
        .iter()
        .find(|f| f.id == conversion.family)
        .ok_or_else(|| ConvertError::Config(format!("no registry family `{}`", conversion.family)))?;
    let number = |keys: &[&str]| ckpt.hparam(keys).and_then(serde_json::Value::as_u64);
    // The converter's generated tensors come first (`generate_extra_tensors`).
    let mut out = Vec::new();
    if conversion.generates(Generated::Llama3RopeFreqs)
        && let Some(freqs) = llama3_rope_freqs(ckpt)
    {
        out.push(generated("rope_freqs.weight", freqs));
    }
    if conversion.generates(Generated::LongRopeFactors)
        && let Some(long_rope) = phi3_long_rope(ckpt)?
    {
        out.push(generated("rope_factors_long.weight", long_rope.long));
        out.push(generated("rope_factors_short.weight", long_rope.short));
    }
    let is_mxfp4 = mxfp4::is_mxfp4(&ckpt.config);
    if is_mxfp4 {
        out.extend(mxfp4_tensors(ckpt, conversion)?);
    }
    let fp8 = Fp8::of(&ckpt.config)?;
    let scales = weight_scales(ckpt, fp8)?;
    let mut experts = ExpertBuffer::new("weight");
    for (s, t) in ckpt.tensor_order() {
        let source = &ckpt.shards[s].tensors[t];
        if fp8.is_some() && (Fp8::scaled_weight(&source.name).is_some() || Fp8::is_dropped(&source.name)) {
            continue;
        }
        if is_mxfp4 && mxfp4::weight_of(&source.name).is_some() {
            continue;
        }
        if tower.is_some_and(|tower| tower.takes(&source.name)) {
            continue;
        }
        let scale = scales.get(source.name.as_str()).copied();
        let Some(hf) = conversion.renamed(source.name.strip_prefix("language_model.").unwrap_or(&source.name)) else {
            continue;
        };
        let hf = hf.as_ref();
        if [".attention.masked_bias", ".attention.bias", ".rotary_emb.inv_freq"].iter().any(|s| hf.ends_with(s))
            || conversion.dropped.iter().any(|ending| hf.ends_with(ending))
            || (conversion.has(Transform::DropNextTokenBlocks) && past_the_blocks(hf, number(BLOCKS)))
        {
            continue;
        }
        if let Some(stack) = conversion.experts()
            && let Some(part) = stack.part(hf)
        {
            let count = expert_count(ckpt, stack, hf)?;
            out.extend(experts.add(stack, count, part, (s, t, scale), &source.dims, outtype)?);
            continue;
        }
        if let Some((fused, block, suffix)) = fused_of(conversion, hf) {
            for Piece { name, runs, slices } in (fused.pieces)(&ckpt.config)? {
                let Some(first) = runs.first() else { continue };
                let mut dims = selected_dims(&source.dims, first);
                let rows_dim = usize::from(dims.len() >= 2);
                dims[rows_dim] = runs.iter().map(|t| selected_dims(&source.dims, t)[rows_dim]).sum();
                if let (Some(slices), [_, rows]) = (slices, dims.as_mut_slice()) {
                    *rows /= slices.max(1);
                    dims.push(slices);
                }
                let name = format!("{}.{suffix}", name.replace("{N}", &block));
                let ty = output_type(&name, &dims, outtype);
                let part =
                    |transform: &RowTransform| CheckpointPart { shard: s, tensor: t, transform: *transform, scale };
                let values = match runs.as_slice() {
                    [transform] => Values::Checkpoint(part(transform)),
                    _ => Values::Stacked(runs.iter().map(part).collect()),
                };
                out.push(ConvertedTensor { info: TensorInfo::new(&name, dims, ty), values });
            }
            continue;
        }
        let name = gguf_name(names, hf)
            .ok_or_else(|| ConvertError::Unmapped { tensor: hf.to_owned(), family: conversion.family })?;
        let mut dims = source.dims.clone();
        let mut transform = RowTransform { permute_heads: permuted_heads(conversion, ckpt, hf), ..Default::default() };
        if conversion.squeezes(hf) && dims.len() == 3 && dims[1] == 1 {
            dims.remove(1);
        }
        if conversion.transposes(hf) && dims.len() == 2 {
            transform.transpose = Some(dims[1] as usize);
            dims.swap(0, 1);
        }
        if conversion.has(Transform::PositionsPastPadding)
            && hf == "embeddings.position_embeddings.weight"
            && let Some(offset) = family::bert::position_offset(ckpt)?
            && let [_, rows] = dims.as_mut_slice()
        {
            let kept = rows.checked_sub(offset).ok_or_else(|| {
                ConvertError::Config(format!("`pad_token_id` + 1 ({offset}) is past the {rows} position embeddings"))
            })?;
            transform.rows = Some(RowRange { group: *rows as usize, start: offset as usize, len: kept as usize });
            *rows = kept;
        }
        if conversion.has(Transform::NormPlusOne) {
            transform.plus_one = hf.ends_with("norm.weight");
        }
        if conversion.has(Transform::CutEmbeddingToVocab)
            && hf == "model.embed_tokens.weight"
            && let Some(vocab) = number(&["vocab_size"])
            && dims.len() == 2
            && dims[1] > vocab
        {
            transform.keep_elements = Some((dims[0] * vocab) as usize);
            dims[1] = vocab;
        }
        let ty = output_type(&name, &dims, outtype);
        let values = Values::Checkpoint(CheckpointPart { shard: s, tensor: t, transform, scale });
        out.push(ConvertedTensor { info: TensorInfo::new(&name, dims, ty), values });
    }
    experts.finish()?;
    Ok(out)
}

/// An MXFP4 checkpoint's weights repacked, in the converter's order: a
/// weight's tensors where its scales come, codes and scales checked paired.
fn mxfp4_tensors(ckpt: &Checkpoint, conversion: &Conversion) -> Result<Vec<ConvertedTensor>, ConvertError> {
    let order = ckpt.tensor_order();
    let info = |(s, t): (usize, usize)| &ckpt.shards[s].tensors[t];
    let at: HashMap<&str, (usize, usize)> = order.iter().map(|&st| (info(st).name.as_str(), st)).collect();
    let mut out = Vec::new();
    for &tensor in &order {
        let name = info(tensor).name.as_str();
        let Some((weight, is_codes)) = mxfp4::weight_of(name) else { continue };
        let partner = format!("{weight}_{}", if is_codes { "scales" } else { "blocks" });
        let Some(&other) = at.get(partner.as_str()) else {
            return Err(ConvertError::Config(format!("MXFP4 `{name}` has no `{partner}`")));
        };
        if is_codes {
            continue;
        }
        let (blocks, scales) = (other, tensor);
        let unmapped = || ConvertError::Unmapped { tensor: name.to_owned(), family: conversion.family };
        let (block, hf) = block_and_name(weight).ok_or_else(unmapped)?;
        let splits: Vec<_> = conversion.mxfp4_splits().iter().filter(|split| split.hf == hf).collect();
        if splits.is_empty() {
            return Err(unmapped());
        }
        for split in splits {
            let dims = mxfp4::repacked_dims(info(blocks), info(scales), split.rows)?;
            let name = format!("{}.weight", split.name.replace("{N}", block));
            let values = Values::Mxfp4(Mxfp4Part { blocks, scales, rows: split.rows });
            out.push(ConvertedTensor { info: TensorInfo::new(&name, dims, GgmlType::MXFP4), values });
        }
    }
    Ok(out)
}

/// The heads LLaMA's Q/K row permutation groups `hf`'s rows by: Q rows by
/// head, K rows by KV head; `None` for another tensor or family.
pub(super) fn permuted_heads(conversion: &Conversion, ckpt: &Checkpoint, hf: &str) -> Option<usize> {
    if !conversion.has(Transform::PermuteQk) {
        return None;
    }
    let number = |keys: &[&str]| ckpt.hparam(keys).and_then(serde_json::Value::as_u64);
    let n_head = number(&["n_heads", "num_attention_heads"]);
    let heads = if hf.ends_with("q_proj.weight") || hf.ends_with("q_proj.bias") {
        n_head
    } else if hf.ends_with("k_proj.weight") || hf.ends_with("k_proj.bias") {
        number(&["n_kv_heads", "num_key_value_heads"]).or(n_head)
    } else {
        None
    };
    heads.map(|h| h as usize)
}

/// An FP8 checkpoint's scale tensors by the weight they scale, each checked
/// against its weight; a scale without its weight is refused.
fn weight_scales(ckpt: &Checkpoint, fp8: Option<Fp8>) -> Result<HashMap<&str, ScaleAt>, ConvertError> {
    let Some(Fp8 { block }) = fp8 else { return Ok(HashMap::new()) };
    let weights: HashMap<&str, &TensorInfo> =
        ckpt.shards.iter().flat_map(|shard| shard.tensors.iter().map(|t| (t.name.as_str(), t))).collect();
    let mut scales = HashMap::new();
    for (shard, model) in ckpt.shards.iter().enumerate() {
        for (tensor, info) in model.tensors.iter().enumerate() {
            let Some(weight) = Fp8::scaled_weight(&info.name) else { continue };
            let weight = weights
                .get(weight)
                .ok_or_else(|| ConvertError::Config(format!("FP8 scale `{}` has no weight `{weight}`", info.name)))?;
            WeightScale::check(weight, info, block)?;
            scales.insert(weight.name.as_str(), ScaleAt { shard, tensor, block });
        }
    }
    Ok(scales)
}

/// Whether `hf` belongs to a `model.layers.{N}` block past the model's
/// `blocks` (a multi-token-prediction block).
pub(super) fn past_the_blocks(hf: &str, blocks: Option<u64>) -> bool {
    let block = hf.strip_prefix("model.layers.").and_then(|rest| rest.split('.').next()?.parse::<u64>().ok());
    matches!((block, blocks), (Some(block), Some(blocks)) if block >= blocks)
}

/// The shape of what `transform` makes of a tensor of shape `dims`: its
/// element stride shortens the rows (`dims[0]`); its range shrinks the rows
/// (`dims[1]`; a 1-D tensor's elements), whose every group of rows it cuts
/// to a run; its transpose of runs of `b` rows of `c` makes rows of `b`, `c`
/// a run.
pub fn selected_dims(dims: &[u64], transform: &RowTransform) -> Vec<u64> {
    let mut dims = dims.to_vec();
    if let (Some(stride), Some(cols)) = (transform.elements, dims.first_mut()) {
        *cols = stride.len_of(*cols as usize) as u64;
    }
    if let Some(range) = transform.rows {
        let rows_dim = usize::from(dims.len() >= 2);
        if let Some(rows) = dims.get_mut(rows_dim) {
            *rows = *rows / range.group.max(1) as u64 * range.len as u64;
        }
    }
    // A 3-D tensor's runs lie within its slices (an expert's rows).
    if let (Some(run), [cols, rows, ..]) = (transform.transpose, dims.as_mut_slice()) {
        let run = run.max(1) as u64;
        (*cols, *rows) = (run, *rows / run * *cols);
    }
    dims
}

/// The fused tensor `hf` is, its block and its suffix (`weight`, `bias`).
pub(super) fn fused_of<'n>(conversion: &Conversion, hf: &'n str) -> Option<(&'static Fused, String, &'n str)> {
    let (stem, suffix) = hf.rsplit_once('.')?;
    let (block, name) = block_and_name(stem)?;
    let fused = conversion.fused().iter().find(|f| f.hf == name)?;
    Some((fused, block.to_owned(), suffix))
}

/// `…layers.{N}.NAME` or `…h.{N}.NAME`: the first block number and the
/// name after it.
fn block_and_name(stem: &str) -> Option<(&str, String)> {
    let mut parts = stem.split('.');
    let block = parts.by_ref().find(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))?;
    Some((block, parts.collect::<Vec<_>>().join(".")))
}

/// The config's expert count for `stack`, which `hf` (one expert's tensor) needs.
pub(super) fn expert_count(ckpt: &Checkpoint, stack: &Experts, hf: &str) -> Result<usize, ConvertError> {
    let count = ckpt.hparam(stack.count).and_then(serde_json::Value::as_u64);
    count
        .map(|n| n as usize)
        .ok_or_else(|| ConvertError::Config(format!("no expert count (`{}`) for `{hf}`", stack.count.join("`, `"))))
}

/// One expert's tensor of one projection of a block, as [`Experts::part`] reads its name.
#[derive(Clone, Copy)]
pub(super) struct ExpertPart<'a> {
    pub block: u64,
    pub expert: u64,
    pub projection: &'a str,
}

/// The per-expert tensors read so far, by block: a block's stacks are
/// written when its last expert tensor has been read, as the converter
/// writes them (at that tensor's place, the projections in the family's
/// order).
pub(super) struct ExpertBuffer {
    blocks: std::collections::BTreeMap<u64, Vec<ReadExpert>>,
    /// What the stacks' names end in after the GGUF name: `weight`, or a
    /// LoRA half's `weight.lora_a`.
    suffix: &'static str,
}

/// One expert tensor read: which expert and projection, where (shard,
/// tensor) and its shape.
struct ReadExpert {
    expert: u64,
    projection: String,
    at: (usize, usize, Option<ScaleAt>),
    dims: Vec<u64>,
}

impl ExpertBuffer {
    pub(super) fn new(suffix: &'static str) -> ExpertBuffer {
        ExpertBuffer { blocks: Default::default(), suffix }
    }

    /// Takes one expert tensor; returns the block's stacks once its last
    /// one is in.
    pub(super) fn add(
        &mut self,
        stack: &Experts,
        count: usize,
        part: ExpertPart<'_>,
        at: (usize, usize, Option<ScaleAt>),
        dims: &[u64],
        outtype: OutType,
    ) -> Result<Vec<ConvertedTensor>, ConvertError> {
        let block = self.blocks.entry(part.block).or_default();
        block.push(ReadExpert { expert: part.expert, projection: part.projection.to_owned(), at, dims: dims.to_vec() });
        if block.len() < count * stack.projections.len() {
            return Ok(Vec::new());
        }
        let parts = self.blocks.remove(&part.block).unwrap_or_default();
        let mut stacked = Vec::with_capacity(stack.projections.len());
        for &(projection, gguf) in stack.projections {
            let mut sources = Vec::with_capacity(count);
            let mut shape = None;
            for expert in 0..count as u64 {
                let found = parts.iter().find(|p| p.expert == expert && p.projection == projection);
                let Some(ReadExpert { at, dims, .. }) = found else {
                    return Err(ConvertError::Config(format!(
                        "block {}: expert {expert} has no `{projection}` tensor ({count} experts expected)",
                        part.block
                    )));
                };
                if shape.get_or_insert(dims) != &dims {
                    return Err(ConvertError::Config(format!(
                        "block {}: the experts' `{projection}` tensors differ in shape",
                        part.block
                    )));
                }
                let (shard, tensor, scale) = *at;
                sources.push(CheckpointPart { shard, tensor, transform: RowTransform::default(), scale });
            }
            let mut dims = shape.cloned().unwrap_or_default();
            dims.push(count as u64);
            let name = format!("{}.{}", gguf.replace("{N}", &part.block.to_string()), self.suffix);
            let ty = output_type(&name, &dims, outtype);
            stacked.push(ConvertedTensor { info: TensorInfo::new(&name, dims, ty), values: Values::Stacked(sources) });
        }
        Ok(stacked)
    }

    /// Refuses expert tensors left over: a block whose experts are not all there.
    pub(super) fn finish(self) -> Result<(), ConvertError> {
        match self.blocks.into_iter().next() {
            Some((block, parts)) => Err(ConvertError::Config(format!(
                "block {block} has {} expert tensors, not all of its experts' projections",
                parts.len()
            ))),
            None => Ok(()),
        }
    }
}

/// A 1-D F32 tensor of values computed from the config (F32 for every
/// outtype, as 1-D tensors are).
fn generated(name: &str, values: Vec<f32>) -> ConvertedTensor {
    let info = TensorInfo::new(name, vec![values.len() as u64], GgmlType::F32);
    ConvertedTensor { info, values: Values::Generated(values) }
}

/// Tensors the converter always writes as F32, whatever the outtype
/// (`{N}` the block): routers, position and token-type embeddings,
/// convolutions and RWKV's mixing weights, as llama-quantize keeps them.
const KEPT_F32: &[&str] = &[
    "blk.{N}.ffn_gate_inp",
    "blk.{N}.ffn_gate_inp_shexp",
    "position_embd",
    "token_types",
    "blk.{N}.ssm_conv1d",
    "blk.{N}.shortconv.conv",
    "blk.{N}.time_mix_first",
    "blk.{N}.time_mix_w1",
    "blk.{N}.time_mix_w2",
    "blk.{N}.time_mix_decay_w1",
    "blk.{N}.time_mix_decay_w2",
    "blk.{N}.time_mix_lerp_fused",
    "posnet.{N}.norm1",
    "posnet.{N}.norm2",
    "v.position_embd",
    "a.position_embd",
    "blk.{N}.altup_correct_coef",
    "blk.{N}.altup_predict_coef",
    "blk.{N}.ssm_conv1d_q",
    "blk.{N}.ssm_conv1d_k",
    "blk.{N}.ssm_conv1d_v",
    "blk.{N}.indexer.proj",
];

/// Whether `name` is `pattern` (with `{N}` a block number) plus `.weight`.
fn is_named(name: &str, pattern: &str) -> bool {
    let Some(stem) = name.strip_suffix(".weight") else { return false };
    match pattern.split_once("{N}") {
        None => stem == pattern,
        Some((before, after)) => stem
            .strip_prefix(before)
            .and_then(|rest| rest.strip_suffix(after))
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())),
    }
}

/// The converter's type for a tensor: 1-D tensors, norms, the
/// [`KEPT_F32`] tensors and anything not a `.weight` (or a LoRA adapter's
/// `.lora_a`/`.lora_b`) stay F32; Q8_0 rows that are not whole blocks fall
/// back to F16.
pub(super) fn output_type(name: &str, dims: &[u64], outtype: OutType) -> GgmlType {
    if dims.len() <= 1
        || name.ends_with("_norm.weight")
        || ![".weight", ".lora_a", ".lora_b"].iter().any(|end| name.ends_with(end))
        || KEPT_F32.iter().any(|pattern| is_named(name, pattern))
    {
        return GgmlType::F32;
    }
    let ty = outtype.ggml();
    if !dims[0].is_multiple_of(ty.block_size()) { GgmlType::F16 } else { ty }
}

/// The first `rows` rows `map` gives, in order, of `values` in rows of `row_len`.
fn reordered_rows(values: &[f32], row_len: usize, rows: usize, map: &dyn Fn(usize) -> usize) -> Vec<f32> {
    let row_len = row_len.max(1);
    (0..rows).flat_map(|to| &values[map(to) * row_len..][..row_len]).copied().collect()
}

/// The rows of `source` a transform takes: those its range selects, or all.
fn selected_rows(source: &TensorInfo, transform: &RowTransform) -> usize {
    let source_rows = (source.n_elements() / row_len_of(source).max(1) as u64) as usize;
    transform.rows.map_or(source_rows, |r| r.rows_of(source_rows))
}

/// LLaMA 3's `rope_freqs`: the per-frequency scaling factors of its
/// "llama3" RoPE, computed in f32 as the converter's torch code does.
fn llama3_rope_freqs(ckpt: &Checkpoint) -> Option<Vec<f32>> {
    let scaling = RopeParameters::resolve(ckpt);
    if !scaling.kind()?.eq_ignore_ascii_case("llama3") {
        return None;
    }
    let float = |v: Option<&serde_json::Value>, default: f64| v.and_then(serde_json::Value::as_f64).unwrap_or(default);
    let base = float(scaling.get("rope_theta"), 10000.0) as f32;
    let n_head = ckpt.hparam(&["num_attention_heads"])?.as_u64()?;
    let dim = match ckpt.hparam(&["head_dim"]).and_then(serde_json::Value::as_u64) {
        Some(d) => d,
        None => ckpt.hparam(&["hidden_size"])?.as_u64()? / n_head,
    };
    let factor = float(scaling.get("factor"), 8.0);
    let low = float(scaling.get("low_freq_factor"), 1.0);
    let high = float(scaling.get("high_freq_factor"), 4.0);
    let old = float(scaling.get("original_max_position_embeddings"), 8192.0);
    let (low_wavelen, high_wavelen) = (old / low, old / high);
    let two_pi = (2.0 * std::f64::consts::PI) as f32;
    Some(
        (0..dim)
            .step_by(2)
            .map(|i| {
                let freq = 1.0f32 / base.powf(i as f32 / dim as f32);
                let wavelen = two_pi / freq;
                if f64::from(wavelen) < high_wavelen {
                    1.0
                } else if f64::from(wavelen) > low_wavelen {
                    factor as f32
                } else {
                    let smooth = (old as f32 / wavelen - low as f32) / (high as f32 - low as f32);
                    1.0 / ((1.0 - smooth) / factor as f32 + smooth)
                }
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transposes_each_run_of_rows_on_its_own() {
        // Two runs of two rows of three: each run becomes three rows of two.
        let values = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0];
        let expected = [1.0, 4.0, 2.0, 5.0, 3.0, 6.0, 10.0, 40.0, 20.0, 50.0, 30.0, 60.0];
        assert_eq!(transposed(&values, 3, 2), expected);
        let run = RowTransform { transpose: Some(2), ..RowTransform::default() };
        assert_eq!(selected_dims(&[3, 4], &run), vec![2, 6]);
    }

    #[test]
    fn an_element_stride_splits_interleaved_rows_before_the_transpose() {
        // GPT-OSS's gate_up_proj: rows of [g0 u0 g1 u1 …]; the odd elements are up.
        let row = [0.0, 100.0, 1.0, 101.0, 2.0, 102.0, 3.0];
        let up = ElementStride { step: 2, start: 1 };
        assert_eq!(strided(&row, up).collect::<Vec<_>>(), [100.0, 101.0, 102.0]);
        assert_eq!(up.len_of(row.len()), 3);
        assert_eq!(ElementStride { step: 2, start: 0 }.len_of(row.len()), 4);
        // [2 × ff, hidden, experts] → gate [hidden, ff, experts]: each expert's rows transposed.
        let gate = RowTransform {
            elements: Some(ElementStride { step: 2, start: 0 }),
            transpose: Some(64),
            ..RowTransform::default()
        };
        assert_eq!(selected_dims(&[64, 64, 4], &gate), vec![64, 32, 4]);
        let bias = RowTransform { elements: gate.elements, ..RowTransform::default() };
        assert_eq!(selected_dims(&[64, 4], &bias), vec![32, 4]);
    }

    #[test]
    fn next_token_blocks_are_those_past_the_count() {
        assert!(past_the_blocks("model.layers.61.eh_proj.weight", Some(61)));
        assert!(!past_the_blocks("model.layers.60.mlp.gate.weight", Some(61)));
        assert!(!past_the_blocks("model.embed_tokens.weight", Some(61)));
        assert!(!past_the_blocks("model.layers.61.eh_proj.weight", None));
    }

    #[test]
    fn permutation_interleaves_halves_per_head() {
        // Two heads of four one-element rows: [a0 a1 b0 b1] → [a0 b0 a1 b1].
        let values = [0.0, 1.0, 2.0, 3.0, 10.0, 11.0, 12.0, 13.0];
        let source = TensorInfo::new("q", vec![8], GgmlType::F32);
        let permute = RowTransform { permute_heads: Some(2), ..RowTransform::default() };
        let map = row_map(&source, &permute).unwrap();
        assert_eq!(reordered_rows(&values, 1, 8, &map), vec![0.0, 2.0, 1.0, 3.0, 10.0, 12.0, 11.0, 13.0]);
    }

    #[test]
    fn a_range_selects_then_the_permutation_reorders() {
        // Two groups of [q0 q1 k0 k1]: K is rows 2..4 of each group.
        let values = [0.0, 1.0, 2.0, 3.0, 10.0, 11.0, 12.0, 13.0];
        let source = TensorInfo::new("qk", vec![8], GgmlType::F32);
        let k = crate::artifact::RowRange { group: 4, start: 2, len: 2 };
        let select = RowTransform { rows: Some(k), ..RowTransform::default() };
        assert_eq!(selected_rows(&source, &select), 4);
        assert_eq!(reordered_rows(&values, 1, 4, &row_map(&source, &select).unwrap()), vec![2.0, 3.0, 12.0, 13.0]);
        let both = RowTransform { permute_heads: Some(1), ..select };
        assert_eq!(reordered_rows(&values, 1, 4, &row_map(&source, &both).unwrap()), vec![2.0, 12.0, 3.0, 13.0]);
    }

    #[test]
    fn routers_stay_f32() {
        assert_eq!(output_type("blk.3.ffn_gate_inp.weight", &[64, 4], OutType::Q8_0), GgmlType::F32);
        assert_eq!(output_type("blk.0.ffn_gate_inp_shexp.weight", &[64, 1], OutType::F16), GgmlType::F32);
        assert_eq!(output_type("blk.0.ffn_gate_exps.weight", &[64, 32, 4], OutType::F16), GgmlType::F16);
        assert!(!is_named("blk.x.ffn_gate_inp.weight", "blk.{N}.ffn_gate_inp"));
    }

    #[test]
    fn types_follow_the_converter() {
        assert_eq!(output_type("blk.0.attn_norm.weight", &[64], OutType::F16), GgmlType::F32);
        assert_eq!(output_type("blk.0.attn_q.bias", &[64], OutType::Q8_0), GgmlType::F32);
        assert_eq!(output_type("blk.0.attn_q.weight", &[64, 64], OutType::BF16), GgmlType::BF16);
        assert_eq!(output_type("blk.0.ffn_down.weight", &[80, 64], OutType::Q8_0), GgmlType::F16);
    }
}
