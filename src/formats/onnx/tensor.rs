//! A `TensorProto` and where its elements are: `raw_data` in the model file
//! (read in place), the typed fields (`float_data`, `int32_data`, …,
//! decoded when read), or external data (`data_location = EXTERNAL`: a
//! file beside the model, with `location`, `offset` and `length`).
//!
//! External data is where a model file points at other files, so it is
//! checked before it is trusted: the location must stay inside the model's
//! directory (no absolute path, no `..`, no symlink out of it), the file must
//! exist, the range must lie within it, and its length must be what the
//! shape and type need. Each failure names the tensor and the numbers.

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use super::super::error::{ErrorKind, Result};
use super::super::gguf::MAX_DIMS;
use super::super::safetensors::Dtype;
use super::super::source::{OpenOptions, Source};
use super::wire::{Wire, WireType};
use crate::model::{PlacedElements, Placement, StoredLayout, TensorInfo, element_count};
use crate::text::Name;

/// `TensorProto.DataType`: the name of each, and the dtype it reads as
/// (`None`: no ggml type holds it).
const DATA_TYPES: &[(i64, &str, Option<Dtype>)] = &[
    (1, "FLOAT", Some(Dtype::F32)),
    (2, "UINT8", Some(Dtype::U8)),
    (3, "INT8", Some(Dtype::I8)),
    (4, "UINT16", Some(Dtype::U16)),
    (5, "INT16", Some(Dtype::I16)),
    (6, "INT32", Some(Dtype::I32)),
    (7, "INT64", Some(Dtype::I64)),
    (8, "STRING", None),
    (9, "BOOL", Some(Dtype::Bool)),
    (10, "FLOAT16", Some(Dtype::F16)),
    (11, "DOUBLE", Some(Dtype::F64)),
    (12, "UINT32", Some(Dtype::U32)),
    (13, "UINT64", Some(Dtype::U64)),
    (14, "COMPLEX64", Some(Dtype::C64)),
    (15, "COMPLEX128", None),
    (16, "BFLOAT16", Some(Dtype::BF16)),
    (17, "FLOAT8E4M3FN", Some(Dtype::F8E4M3)),
    (18, "FLOAT8E4M3FNUZ", Some(Dtype::F8E4M3Fnuz)),
    (19, "FLOAT8E5M2", Some(Dtype::F8E5M2)),
    (20, "FLOAT8E5M2FNUZ", Some(Dtype::F8E5M2Fnuz)),
    (21, "UINT4", None),
    (22, "INT4", None),
    (23, "FLOAT4E2M1", Some(Dtype::F4)),
    (24, "FLOAT8E8M0", Some(Dtype::F8E8M0)),
    (25, "UINT2", None),
    (26, "INT2", None),
    (27, "FLOAT6E2M3", Some(Dtype::F6E2M3)),
    (28, "FLOAT6E3M2", Some(Dtype::F6E3M2)),
];

fn data_type_name(id: i64) -> String {
    DATA_TYPES.iter().find(|&&(n, ..)| n == id).map_or_else(|| format!("data type {id}"), |&(_, name, _)| name.into())
}

/// A `TensorProto` as read, before its elements are placed.
#[derive(Debug, Default)]
pub(super) struct TensorProto {
    pub name: String,
    /// Where the message starts, for errors.
    pub at: u64,
    pub dims: Vec<u64>,
    pub data_type: i64,
    /// `raw_data`: its offset in the model file and its length.
    pub raw: Option<(u64, u64)>,
    /// The typed fields: varints (`int32_data`, `int64_data`, `uint64_data`)
    /// and fixed-width little-endian bytes (`float_data`, `double_data`).
    pub varints: Vec<u64>,
    pub fixed: Vec<u8>,
    /// How many typed fields held values (more than one is malformed).
    pub typed_fields: Vec<u32>,
    pub strings: usize,
    pub external: Vec<(String, String)>,
    pub external_location: bool,
    pub segmented: bool,
}

impl TensorProto {
    pub fn read(w: &mut Wire<'_, '_>, end: u64) -> Result<TensorProto> {
        let mut t = TensorProto { at: w.pos(), ..TensorProto::default() };
        let mut dims = Vec::new();
        w.message(end, "a TensorProto", |w, field, wire| {
            match field {
                1 => w.varints(wire, end, "dims", &mut dims)?,
                2 => t.data_type = w.int(wire, "data_type")?,
                3 => {
                    t.segmented = true;
                    w.skip(wire, end)?;
                }
                4 => w.fixed::<4>(wire, end, "float_data", &mut t.fixed)?,
                5 | 7 | 11 => w.varints(wire, end, "typed data", &mut t.varints)?,
                6 => {
                    t.strings += 1;
                    w.skip(wire, end)?;
                }
                8 => t.name = w.string(wire, end, "a tensor's name")?,
                9 => {
                    w.expect(wire, WireType::Delimited, "raw_data")?;
                    let stop = w.delimited_end(end, "raw_data")?;
                    let start = w.pos();
                    w.skip_to(stop)?;
                    t.raw = Some((start, stop - start));
                }
                10 => w.fixed::<8>(wire, end, "double_data", &mut t.fixed)?,
                13 => {
                    w.expect(wire, WireType::Delimited, "external_data")?;
                    let stop = w.delimited_end(end, "external_data")?;
                    let (mut key, mut value) = (String::new(), String::new());
                    w.message(stop, "an external_data entry", |w, field, wire| {
                        match field {
                            1 => key = w.string(wire, stop, "an external_data key")?,
                            2 => value = w.string(wire, stop, "an external_data value")?,
                            _ => w.skip(wire, stop)?,
                        }
                        Ok(())
                    })?;
                    t.external.push((key, value));
                }
                14 => t.external_location = w.int(wire, "data_location")? == 1,
                _ => w.skip(wire, end)?,
            }
            if matches!(field, 4 | 5 | 7 | 10 | 11) && !t.typed_fields.contains(&field) {
                t.typed_fields.push(field);
            }
            Ok(())
        })?;
        t.dims = dims
            .into_iter()
            .map(|d| {
                i64::try_from(d)
                    .map(|d| d as u64)
                    .map_err(|_| w.error(t.at, format!("tensor `{}` has a negative dimension", Name(&t.name))))
            })
            .collect::<Result<_>>()?;
        Ok(t)
    }
}

/// Where external data lives: the model's directory, and the files opened
/// so far, each once.
pub(super) struct ExternalFiles<'a> {
    pub model: &'a Path,
    pub options: OpenOptions,
    pub sources: Vec<Source>,
    pub index: HashMap<PathBuf, usize>,
}

impl TensorProto {
    /// The tensor in the crate's terms, its elements placed.
    pub fn place(self, w: &Wire<'_, '_>, externals: &mut ExternalFiles<'_>) -> Result<TensorInfo> {
        let name = &self.name;
        let invalid = |message: String| w.error(self.at, format!("tensor `{name}`: {message}"));
        if self.segmented {
            return Err(invalid("a segment of a tensor (TensorProto.segment) is not read".into()));
        }
        if self.dims.len() as u64 > MAX_DIMS {
            return Err(invalid(format!("{} dimensions; ggml holds at most {MAX_DIMS}", self.dims.len())));
        }
        let dtype = match DATA_TYPES.iter().find(|&&(n, ..)| n == self.data_type) {
            Some(&(_, _, Some(dtype))) => dtype,
            _ => return Err(invalid(format!("{}, which no ggml type holds", data_type_name(self.data_type)))),
        };
        let Some((ggml_type, layout)) = dtype.read_as() else {
            return Err(invalid(format!("{}, which no ggml type holds", data_type_name(self.data_type))));
        };
        let Some(count) = element_count(&self.dims) else {
            return Err(w.r.error_at(
                self.at,
                ErrorKind::ElementCountOverflow { tensor: name.clone(), shape: self.dims.clone() },
            ));
        };
        let element_size = dtype.bits() / 8;
        let Some(needed) = count.checked_mul(element_size) else {
            return Err(invalid(format!(
                "shape {:?} of {} needs 2^64 bytes or more",
                self.dims,
                data_type_name(self.data_type)
            )));
        };
        let conversion = match layout {
            StoredLayout::Converted(conversion) => Some(conversion),
            _ => None,
        };
        let dims = if self.dims.is_empty() { vec![1] } else { self.dims.iter().rev().copied().collect() };
        let sources = usize::from(self.raw.is_some())
            + usize::from(!self.typed_fields.is_empty())
            + usize::from(self.external_location)
            + usize::from(self.strings > 0);
        if sources > 1 || self.typed_fields.len() > 1 {
            return Err(invalid("its elements are in more than one place".into()));
        }
        let tensor = |file_offset, stored_len, layout| TensorInfo {
            name: name.clone(),
            dims: dims.clone(),
            ggml_type,
            file_offset,
            stored_len,
            layout,
        };
        if self.external_location {
            let (file, offset, len) = self.external_range(externals, needed).map_err(invalid)?;
            let placement = Placement { elements: PlacedElements::External { file }, conversion };
            return Ok(tensor(offset, len, StoredLayout::Placed(Arc::new(placement))));
        }
        if let Some((offset, len)) = self.raw {
            if len != needed {
                return Err(invalid(format!(
                    "raw_data of {len} bytes; {} of shape {:?} needs {needed}",
                    data_type_name(self.data_type),
                    self.dims
                )));
            }
            return Ok(tensor(offset, len, layout));
        }
        let bytes = self.typed_bytes(dtype, count).map_err(invalid)?;
        let placement = Placement { elements: PlacedElements::Decoded(bytes.into()), conversion };
        Ok(tensor(self.at, needed, StoredLayout::Placed(Arc::new(placement))))
    }

    /// The typed field's values as `dtype`'s little-endian elements.
    fn typed_bytes(&self, dtype: Dtype, count: u64) -> std::result::Result<Vec<u8>, String> {
        let field = self.typed_fields.first().copied();
        let expected = match dtype {
            Dtype::F32 => 4,
            Dtype::F64 => 10,
            Dtype::I64 => 7,
            Dtype::U32 | Dtype::U64 => 11,
            _ => 5,
        };
        if field.is_some_and(|f| f != expected) {
            return Err(format!(
                "{} values in field {}, not field {expected}",
                data_type_name(self.data_type),
                field.unwrap_or(0)
            ));
        }
        let found = if matches!(expected, 4 | 10) {
            self.fixed.len() as u64 / (dtype.bits() / 8)
        } else {
            self.varints.len() as u64
        };
        if found != count {
            let s = if found == 1 { "" } else { "s" };
            return Err(format!("{found} value{s} in its typed field; shape {:?} holds {count}", self.dims));
        }
        if matches!(expected, 4 | 10) {
            return Ok(self.fixed.clone());
        }
        let size = (dtype.bits() / 8) as usize;
        let mut out = Vec::with_capacity(self.varints.len() * size);
        for &v in &self.varints {
            // int32_data holds int32s (sign-extended to 64 bits on the wire),
            // or the bits of a narrower type; the others hold their type.
            let value = if expected == 5 { v as i64 as i32 as i64 } else { v as i64 };
            let fits = match dtype {
                Dtype::I8 => i8::try_from(value).is_ok(),
                Dtype::I16 => i16::try_from(value).is_ok(),
                Dtype::U8
                | Dtype::Bool
                | Dtype::F8E4M3
                | Dtype::F8E4M3Fnuz
                | Dtype::F8E5M2
                | Dtype::F8E5M2Fnuz
                | Dtype::F8E8M0 => u8::try_from(value).is_ok(),
                Dtype::U16 | Dtype::F16 | Dtype::BF16 => u16::try_from(value).is_ok(),
                Dtype::U32 => u32::try_from(v).is_ok(),
                _ => true,
            };
            if !fits || (expected == 5 && i32::try_from(v as i64).is_err()) {
                return Err(format!("value {} does not fit {}", v as i64, data_type_name(self.data_type)));
            }
            out.extend_from_slice(&value.to_le_bytes()[..size]);
        }
        Ok(out)
    }

    /// The external file's number, and the offset and length of the
    /// tensor's bytes in it.
    fn external_range(
        &self,
        externals: &mut ExternalFiles<'_>,
        needed: u64,
    ) -> std::result::Result<(usize, u64, u64), String> {
        let field = |key: &str| self.external.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str());
        if let Some((key, _)) =
            self.external.iter().find(|(k, _)| !matches!(k.as_str(), "location" | "offset" | "length" | "checksum"))
        {
            return Err(format!("external data key `{key}` is not read"));
        }
        let number = |key: &str| -> std::result::Result<Option<u64>, String> {
            field(key)
                .map(|v| v.parse::<u64>().map_err(|_| format!("external data {key} `{v}` is not a byte count")))
                .transpose()
        };
        let location = field("location").ok_or("external data without a location")?;
        let (offset, length) = (number("offset")?.unwrap_or(0), number("length")?);
        let relative = Path::new(location);
        if relative.components().any(|c| !matches!(c, Component::Normal(_) | Component::CurDir)) {
            return Err(format!("external data location `{location}` leaves the model's directory; refused"));
        }
        let dir = externals.model.parent().unwrap_or(Path::new("."));
        let path = dir.join(relative);
        let resolved = path
            .canonicalize()
            .map_err(|e| format!("external data file `{location}`: {}", crate::files::IoText(&e)))?;
        let inside = dir.canonicalize().is_ok_and(|dir| resolved.starts_with(dir));
        if !inside {
            return Err(format!("external data location `{location}` resolves outside the model's directory; refused"));
        }
        let file = match externals.index.get(&resolved) {
            Some(&file) => file,
            None => {
                let source = Source::open(&resolved, externals.options).map_err(|e| e.to_string())?;
                externals.sources.push(source);
                externals.index.insert(resolved, externals.sources.len() - 1);
                externals.sources.len() - 1
            }
        };
        let file_len = externals.sources[file].len();
        let length = length.unwrap_or(file_len.saturating_sub(offset));
        if offset.checked_add(length).is_none_or(|end| end > file_len) {
            return Err(format!(
                "external data bytes {offset}..{} are past the end of `{location}` ({file_len} bytes)",
                offset.saturating_add(length)
            ));
        }
        if length != needed {
            return Err(format!(
                "external data of {length} bytes; {} of shape {:?} needs {needed}",
                data_type_name(self.data_type),
                self.dims
            ));
        }
        Ok((file, offset, length))
    }
}
