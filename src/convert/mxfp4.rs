//! MXFP4 checkpoints (`quantization_config.quant_method = "mxfp4"`, as
//! OpenAI publishes GPT-OSS's experts): a weight stored as `NAME_blocks`,
//! 4-bit codes two a byte (the even element in the low nibble), rows of
//! `[blocks, 16]` bytes, and `NAME_scales`, one E8M0 exponent a block of 32.
//! The converter keeps them MXFP4: each block becomes ggml's `block_mxfp4`,
//! its scale byte then 16 bytes holding elements `j` (low) and `j + 16`
//! (high) — bits moved, never a value computed.

use serde_json::{Map, Value as Json};

use super::error::ConvertError;
use crate::artifact::RowRange;
use crate::formats::ModelFile;
use crate::model::TensorInfo;
use crate::types::GgmlType;

/// The `quantization_config` keys an MXFP4 checkpoint may carry: the
/// modules left unquantized are the tensors without blocks.
const MXFP4_KEYS: [&str; 2] = ["quant_method", "modules_to_not_convert"];

/// Elements of a block, and bytes of its codes.
const BLOCK: u64 = 32;
const CODE_BYTES: u64 = BLOCK / 2;

/// The dtype a `U8` SafeTensors tensor is read as, a byte a value.
const BYTES_READ_AS: GgmlType = GgmlType::I16;

/// Whether `config` says its checkpoint is MXFP4.
pub fn is_mxfp4(config: &Json) -> bool {
    config["quantization_config"]["quant_method"].as_str() == Some("mxfp4")
}

/// Refuses an MXFP4 `quantization_config` key the conversion does not read.
pub(super) fn check_config(fields: &Map<String, Json>) -> Result<(), ConvertError> {
    match fields.iter().find(|(key, _)| !MXFP4_KEYS.contains(&key.as_str())) {
        Some((key, value)) => Err(ConvertError::Unmodelled {
            family: "MXFP4 checkpoint".to_owned(),
            key: format!("quantization_config.{key}"),
            value: value.to_string(),
        }),
        None => Ok(()),
    }
}

/// The weight an MXFP4 tensor belongs to and whether it holds the codes:
/// `X_blocks` → (`X`, true), `X_scales` → (`X`, false).
pub fn weight_of(name: &str) -> Option<(&str, bool)> {
    name.strip_suffix("_blocks").map(|w| (w, true)).or_else(|| name.strip_suffix("_scales").map(|w| (w, false)))
}

/// Where a repacked MXFP4 tensor's codes and scales are (shard, tensor),
/// and which rows of each expert it takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mxfp4Part {
    pub blocks: (usize, usize),
    pub scales: (usize, usize),
    pub rows: Option<RowRange>,
}

/// The ggml shape of the MXFP4 tensor repacked from `blocks` (ggml order
/// `[16, blocks, rows, …]`) and `scales` (`[blocks, rows, …]`), `rows` of
/// each expert's rows; a pair that does not fit is refused by name.
pub fn repacked_dims(
    blocks: &TensorInfo,
    scales: &TensorInfo,
    rows: Option<RowRange>,
) -> Result<Vec<u64>, ConvertError> {
    let misfit = |problem: String| ConvertError::Config(format!("MXFP4 `{}`: {problem}", blocks.name));
    for tensor in [blocks, scales] {
        if tensor.ggml_type != BYTES_READ_AS {
            return Err(misfit(format!("`{}` is not stored as bytes (U8)", tensor.name)));
        }
    }
    match (blocks.dims.as_slice(), scales.dims.as_slice()) {
        ([CODE_BYTES, n_blocks, outer @ ..], [scale_blocks, scale_outer @ ..])
            if n_blocks == scale_blocks && outer == scale_outer && !outer.is_empty() =>
        {
            let mut dims = vec![n_blocks * BLOCK];
            dims.extend_from_slice(outer);
            if let Some(range) = rows {
                if dims[1] % range.group as u64 != 0 {
                    return Err(misfit(format!("its {} rows are not in groups of {}", dims[1], range.group)));
                }
                dims[1] = range.rows_of(dims[1] as usize) as u64;
            }
            Ok(dims)
        }
        _ => Err(misfit(format!(
            "codes of shape {:?} and scales of shape {:?} (ggml order) do not make blocks of {BLOCK}",
            blocks.dims, scales.dims
        ))),
    }
}

/// Rows `first..first + n` (over every expert) of the MXFP4 tensor
/// repacked from `blocks` and `scales`, in ggml's `block_mxfp4` layout, each
/// read row by row (gate or up takes every other one).
pub fn repacked_rows(
    (blocks_file, blocks): (&ModelFile, &TensorInfo),
    (scales_file, scales): (&ModelFile, &TensorInfo),
    rows: Option<RowRange>,
    first: usize,
    n: usize,
) -> Result<Vec<u8>, ConvertError> {
    let n_blocks = repacked_dims(blocks, scales, rows)?[0] / BLOCK;
    let element = BYTES_READ_AS.type_size();
    let (code_row, scale_row) = (n_blocks * CODE_BYTES * element, n_blocks * element);
    let mut out = Vec::with_capacity(n * (n_blocks * (1 + CODE_BYTES)) as usize);
    for row in first..first + n {
        let from = rows.map_or(row, |range| range.source_row(row)) as u64;
        let codes = as_bytes(blocks, &blocks_file.tensor_data_range(blocks, from * code_row, code_row)?)?;
        let exponents = as_bytes(scales, &scales_file.tensor_data_range(scales, from * scale_row, scale_row)?)?;
        for (exponent, codes) in exponents.iter().zip(codes.chunks_exact(CODE_BYTES as usize)) {
            out.push(*exponent);
            out.extend(ggml_codes(codes));
        }
    }
    Ok(out)
}

/// The span of source rows that rows `first..first + n` of a selection
/// `rows` come from, first to last (to release once read); `None` for no
/// rows.
pub fn source_rows(rows: Option<RowRange>, first: usize, n: usize) -> Option<std::ops::Range<usize>> {
    let source_row = |row| rows.map_or(row, |range| range.source_row(row));
    (n > 0).then(|| source_row(first)..source_row(first + n - 1) + 1)
}

/// The bytes of a `U8` tensor read as 16-bit values.
fn as_bytes(tensor: &TensorInfo, values: &[u8]) -> Result<Vec<u8>, ConvertError> {
    values
        .chunks_exact(2)
        .map(|v| {
            let value = u16::from_le_bytes([v[0], v[1]]);
            u8::try_from(value)
                .map_err(|_| ConvertError::Config(format!("MXFP4 `{}` holds {value}, not a byte", tensor.name)))
        })
        .collect()
}

/// A block's 16 code bytes, two consecutive elements a byte (the even one
/// low), as ggml holds them: element `j` low and `j + 16` high.
fn ggml_codes(codes: &[u8]) -> impl Iterator<Item = u8> + '_ {
    let code = |k: usize| (codes[k / 2] >> (4 * (k % 2))) & 0x0F;
    (0..CODE_BYTES as usize).map(move |j| code(j) | (code(j + CODE_BYTES as usize) << 4))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_move_from_pairs_to_halves() {
        // Elements 0..32 hold codes 0, 1, …, 15, 0, 1, …: byte j of the
        // source holds elements 2j and 2j + 1.
        let source: Vec<u8> = (0..16u8).map(|j| ((2 * j) % 16) | (((2 * j + 1) % 16) << 4)).collect();
        let ggml: Vec<u8> = ggml_codes(&source).collect();
        let expected: Vec<u8> = (0..16u8).map(|j| j | (j << 4)).collect();
        assert_eq!(ggml, expected);
        // What the converter's `transform_nibble_layout` makes of bytes 7j + 3.
        let source: Vec<u8> = (0..16u8).map(|j| 7 * j + 3).collect();
        let theirs = [0xb3, 0x30, 0x2a, 0x40, 0x91, 0x41, 0x08, 0x51, 0x7f, 0x51, 0xe6, 0x52, 0x5d, 0x62, 0xc4, 0x63];
        assert_eq!(ggml_codes(&source).collect::<Vec<_>>(), theirs);
    }

    #[test]
    fn shapes_that_do_not_make_blocks_are_refused() {
        let blocks = TensorInfo::new("experts.down_proj_blocks", vec![16, 2, 64, 4], GgmlType::I16);
        let scales = TensorInfo::new("experts.down_proj_scales", vec![2, 64, 4], GgmlType::I16);
        assert_eq!(repacked_dims(&blocks, &scales, None).unwrap(), vec![64, 64, 4]);
        let even = RowRange { group: 2, start: 0, len: 1 };
        assert_eq!(repacked_dims(&blocks, &scales, Some(even)).unwrap(), vec![64, 32, 4]);
        let short = TensorInfo::new("experts.down_proj_scales", vec![1, 64, 4], GgmlType::I16);
        assert!(repacked_dims(&blocks, &short, None).is_err());
        let floats = TensorInfo::new("experts.down_proj_scales", vec![2, 64, 4], GgmlType::BF16);
        assert!(repacked_dims(&blocks, &floats, None).is_err());
    }
}
