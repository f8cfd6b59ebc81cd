//! Reading a SafeTensors header into the crate's model, with every check the
//! reference implementation makes (and a few it does not: duplicate names,
//! which its hash map would silently collapse).

use std::collections::HashSet;

use super::super::MAX_CHECKPOINT_DIMS;
use super::super::bytes::{ByteReader, Field};
use super::super::error::{ErrorKind, FormatError, Result};
use super::dtype::Dtype;
use super::json::{ParseError, Parsed, Parser};
use super::{LENGTH_BYTES, MAX_HEADER_LEN, METADATA_KEY, METADATA_PREFIX};
use crate::model::{GgufString, Metadata, StoredLayout, TensorInfo, Value, element_count};
use crate::text::Name;
use crate::types::GgmlType;

/// A parsed SafeTensors file, in the crate's terms.
pub struct SafeTensorsHeader {
    /// `__metadata__`, each entry a string under [`METADATA_PREFIX`], in file order.
    pub metadata: Metadata,
    /// In the order of their data, as the reference iterates them.
    pub tensors: Vec<TensorInfo>,
    /// Absolute offset of the data section: 8 plus the header length.
    pub data_offset: u64,
}

/// One tensor as its header entry describes it.
struct Entry {
    name: String,
    /// Offset of the entry's key in the JSON, for errors.
    at: usize,
    ggml_type: GgmlType,
    layout: StoredLayout,
    /// Outermost dimension first, as SafeTensors (and numpy) write shapes.
    shape: Vec<u64>,
    begin: u64,
    end: u64,
}

/// Parses a whole SafeTensors file held in memory, as [`crate::formats::ModelFile`]
/// parses one it maps (errors name `path`).
pub fn read_header_bytes(bytes: &[u8], path: &std::path::Path) -> Result<SafeTensorsHeader> {
    read_header(&mut ByteReader::over_bytes(bytes, path))
}

pub(crate) fn read_header(r: &mut ByteReader<'_>) -> Result<SafeTensorsHeader> {
    let file_len = r.remaining();
    let header_len = r.u64(Field::Static("the header length"))?;
    if header_len > MAX_HEADER_LEN {
        return Err(r.error_at(
            0,
            ErrorKind::Invalid(format!(
                "the header length is {header_len} bytes; SafeTensors readers refuse headers over {MAX_HEADER_LEN}"
            )),
        ));
    }
    let bytes = r.bytes(header_len, Field::Static("the JSON header"))?;
    let text = std::str::from_utf8(&bytes).map_err(|e| {
        r.error_at(LENGTH_BYTES + e.valid_up_to() as u64, ErrorKind::InvalidUtf8 { what: "the JSON header".into() })
    })?;
    let (metadata, mut entries) = parse(text).map_err(|e| r.error_at(LENGTH_BYTES + e.offset as u64, e.kind))?;
    let data_offset = LENGTH_BYTES + header_len;
    check_coverage(r, &mut entries, data_offset, file_len - data_offset)?;
    let tensors = entries
        .into_iter()
        .map(|e| TensorInfo {
            // ggml lists the innermost dimension first; a scalar is one element.
            dims: if e.shape.is_empty() { vec![1] } else { e.shape.into_iter().rev().collect() },
            name: e.name,
            ggml_type: e.ggml_type,
            file_offset: data_offset + e.begin,
            stored_len: e.end - e.begin,
            layout: e.layout,
        })
        .collect();
    Ok(SafeTensorsHeader { metadata: Metadata::from_unique_entries(metadata), tensors, data_offset })
}

/// Metadata entries as they go into [`Metadata`].
type MetadataEntries = Vec<(String, Value)>;

fn parse(text: &str) -> Parsed<(MetadataEntries, Vec<Entry>)> {
    let mut p = Parser::new(text);
    let mut metadata = None;
    let mut entries = Vec::new();
    let mut names = HashSet::new();
    p.object(&"the header", |p, key, at| {
        if key == METADATA_KEY {
            if metadata.is_some() {
                return Err(ParseError::new(at, ErrorKind::DuplicateKey { key: METADATA_KEY.into() }));
            }
            metadata = Some(parse_metadata(p)?);
        } else {
            if !names.insert(key.to_string()) {
                return Err(ParseError::new(at, ErrorKind::DuplicateTensor { tensor: key.into_owned() }));
            }
            entries.push(parse_entry(p, key.into_owned(), at)?);
        }
        Ok(())
    })?;
    p.finish()?;
    Ok((metadata.unwrap_or_default(), entries))
}

/// `__metadata__`: string keys to string values, or `null`.
fn parse_metadata(p: &mut Parser<'_>) -> Parsed<MetadataEntries> {
    let entries = p.unique_entries(&format_args!("`{METADATA_KEY}`"), |p, key| {
        Ok(p.string(&format_args!("`{METADATA_KEY}` entry `{key}`"))?.into_owned())
    })?;
    Ok(entries
        .into_iter()
        .map(|(key, value)| (format!("{METADATA_PREFIX}{key}"), Value::String(GgufString::from(value))))
        .collect())
}

/// One tensor's `{"dtype", "shape", "data_offsets"}`; other fields are
/// skipped, as the reference's serde derive skips them.
fn parse_entry(p: &mut Parser<'_>, name: String, at: usize) -> Parsed<Entry> {
    let invalid = |offset: usize, message: String| ParseError::new(offset, ErrorKind::Invalid(message));
    let mut dtype = None;
    let mut shape = None;
    let mut offsets = None;
    p.object(&format_args!("tensor `{}`", Name(&name)), |p, field, field_at| {
        let seen = match &*field {
            "dtype" => dtype.is_some(),
            "shape" => shape.is_some(),
            "data_offsets" => offsets.is_some(),
            _ => return p.skip(),
        };
        if seen {
            return Err(invalid(field_at, format!("tensor `{}` has `{field}` twice", Name(&name))));
        }
        let value_at = p.offset();
        match &*field {
            "dtype" => {
                let text = p.string(&format_args!("the dtype of tensor `{}`", Name(&name)))?;
                let found = Dtype::from_name(&text)
                    .ok_or_else(|| invalid(value_at, format!("tensor `{}` has unknown dtype `{text}`", Name(&name))))?;
                dtype = Some((found, value_at));
            }
            "shape" => {
                let mut dims = Vec::new();
                p.array(&format_args!("the shape of tensor `{}`", Name(&name)), |p, i| {
                    if i as u64 == MAX_CHECKPOINT_DIMS {
                        return Err(invalid(
                            p.offset(),
                            format!("tensor `{}` has more than {MAX_CHECKPOINT_DIMS} dimensions", Name(&name)),
                        ));
                    }
                    dims.push(p.u64(&format_args!("dimension {i} of tensor `{}`", Name(&name)))?);
                    Ok(())
                })?;
                shape = Some((dims, value_at));
            }
            _ => {
                let mut pair = Vec::with_capacity(2);
                p.array(&format_args!("the data_offsets of tensor `{}`", Name(&name)), |p, i| {
                    if i == 2 {
                        return Err(invalid(
                            p.offset(),
                            format!(
                                "the data_offsets of tensor `{}` must be [begin, end], found more than 2 numbers",
                                Name(&name)
                            ),
                        ));
                    }
                    pair.push(p.u64(&format_args!("data_offsets[{i}] of tensor `{}`", Name(&name)))?);
                    Ok(())
                })?;
                let [begin, end] = pair[..] else {
                    return Err(invalid(
                        value_at,
                        format!(
                            "the data_offsets of tensor `{}` must be [begin, end], found {} number{}",
                            Name(&name),
                            pair.len(),
                            if pair.len() == 1 { "" } else { "s" }
                        ),
                    ));
                };
                offsets = Some((begin, end, value_at));
            }
        }
        Ok(())
    })?;
    let missing = |field: &str| invalid(at, format!("tensor `{}` has no `{field}`", Name(&name)));
    let (dtype, dtype_at) = dtype.ok_or_else(|| missing("dtype"))?;
    let (shape, shape_at) = shape.ok_or_else(|| missing("shape"))?;
    let (begin, end, offsets_at) = offsets.ok_or_else(|| missing("data_offsets"))?;

    let Some((ggml_type, layout)) = dtype.read_as() else {
        return Err(invalid(
            dtype_at,
            format!(
                "tensor `{}` has dtype {dtype}, which no ggml type holds (readable: {})",
                Name(&name),
                readable_dtypes()
            ),
        ));
    };
    let Some(count) = element_count(&shape) else {
        return Err(ParseError::new(shape_at, ErrorKind::ElementCountOverflow { tensor: name, shape }));
    };
    // Every readable dtype is a whole number of bytes.
    let Some(n_bytes) = count.checked_mul(dtype.bits() / 8) else {
        return Err(invalid(
            shape_at,
            format!("tensor `{}` of dtype {dtype} and shape {shape:?} needs 2^64 bytes or more", Name(&name)),
        ));
    };
    if end < begin {
        return Err(invalid(
            offsets_at,
            format!("tensor `{}` has data_offsets [{begin}, {end}], which end before they begin", Name(&name)),
        ));
    }
    if end - begin != n_bytes {
        return Err(invalid(
            offsets_at,
            format!(
                "tensor `{}` has data_offsets [{begin}, {end}] ({} bytes), but dtype {dtype} and shape {shape:?} need {n_bytes}",
                Name(&name),
                end - begin
            ),
        ));
    }
    Ok(Entry { name, at, ggml_type, layout, shape, begin, end })
}

fn readable_dtypes() -> String {
    Dtype::readable().map(Dtype::name).collect::<Vec<_>>().join(", ")
}

/// The tensors, sorted by data offset, must tile the data section exactly:
/// the reference refuses gaps, overlaps and trailing bytes alike.
fn check_coverage(r: &ByteReader<'_>, entries: &mut [Entry], data_offset: u64, data_len: u64) -> Result<()> {
    entries.sort_by_key(|e| (e.begin, e.end));
    let file_len = data_offset + data_len;
    let unowned = |from: u64, to: u64| -> FormatError {
        r.error_at(
            data_offset + from,
            ErrorKind::Invalid(format!(
                "bytes {}..{} belong to no tensor; SafeTensors tensors must cover the data section exactly",
                data_offset + from,
                data_offset + to
            )),
        )
    };
    let mut covered = 0;
    let mut previous: Option<&Entry> = None;
    for entry in entries.iter() {
        let at = LENGTH_BYTES + entry.at as u64;
        if entry.end > data_len {
            return Err(r.error_at(
                at,
                ErrorKind::TensorOutOfBounds {
                    tensor: entry.name.clone(),
                    start: data_offset.saturating_add(entry.begin),
                    end: data_offset.saturating_add(entry.end),
                    file_len,
                },
            ));
        }
        if let Some(other) = previous.filter(|_| entry.begin < covered) {
            return Err(
                r.error_at(at, ErrorKind::TensorOverlap { tensor: entry.name.clone(), other: other.name.clone() })
            );
        }
        if entry.begin > covered {
            return Err(unowned(covered, entry.begin));
        }
        covered = entry.end;
        previous = Some(entry);
    }
    if covered != data_len {
        return Err(unowned(covered, data_len));
    }
    Ok(())
}
