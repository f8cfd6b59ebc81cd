//! GGUF header parsing and validation.

use std::collections::HashSet;

use crate::formats::bytes::{ByteReader, Field};
use crate::formats::error::{ErrorKind, Result};
use crate::formats::resolve_tensor_type;
use crate::model::{
    Array, ElementConversion, Endian, GgufString, MAX_ARRAY_NESTING, Metadata, StoredLayout, StringArray, TensorInfo,
    Value, ValueType, element_count, tensor_bytes,
};
use crate::types::GgmlType;

use super::{ALIGNMENT_KEY, DEFAULT_ALIGNMENT, MAGIC, MAX_DIMS, align_up};

/// Everything before the tensor data.
#[derive(Debug, Clone)]
pub struct GgufHeader {
    pub version: u32,
    pub endian: Endian,
    pub metadata: Metadata,
    pub tensors: Vec<TensorInfo>,
    pub alignment: u64,
    /// Absolute offset of the data section.
    pub data_offset: u64,
    /// Bytes of header before the padding that precedes the data section.
    pub header_len: u64,
}

/// Widths that changed between versions.
#[derive(Clone, Copy)]
struct Dialect {
    /// Version 1 stored counts, lengths and dimensions as `u32`.
    wide: bool,
}

/// Parses a GGUF held in memory; `path` names it in errors.
pub fn read_header_bytes(bytes: &[u8], path: &std::path::Path) -> Result<GgufHeader> {
    read_header(&mut ByteReader::over_bytes(bytes, path))
}

pub fn read_header(r: &mut ByteReader<'_>) -> Result<GgufHeader> {
    let magic = r.array::<4>(Field::Static("magic"))?;
    if magic != MAGIC {
        return Err(r.error_at(0, ErrorKind::Invalid(format!("bad GGUF magic {magic:02x?}"))));
    }
    let version_offset = r.pos();
    let raw_version = r.u32(Field::Static("version"))?;
    // A big-endian file's small version number reads as a huge one with its
    // low half zero.
    let (version, endian) = if raw_version != 0 && raw_version & 0xffff == 0 {
        (raw_version.swap_bytes(), Endian::Big)
    } else {
        (raw_version, Endian::Little)
    };
    r.endian = endian;
    if !(1..=3).contains(&version) {
        return Err(r.error_at(
            version_offset,
            ErrorKind::UnsupportedVersion { format: "GGUF", version, supported: "1, 2, 3" },
        ));
    }
    let dialect = Dialect { wide: version >= 2 };

    let n_tensors = read_count(r, dialect, Field::Static("the tensor count"))?;
    let n_kv = read_count(r, dialect, Field::Static("the metadata count"))?;
    // Smallest metadata entry: empty key length, type id, one byte of value.
    let len_width = if dialect.wide { 8 } else { 4 };
    r.check_count(n_kv, len_width + 4 + 1, Field::Static("the metadata section"))?;
    // Smallest tensor info: name length, n_dims, one dimension, type, offset.
    r.check_count(n_tensors, len_width + 4 + len_width + 4 + 8, Field::Static("the tensor info section"))?;

    let metadata = read_metadata(r, dialect, n_kv)?;
    let alignment = alignment_of(r, &metadata)?;
    let infos = read_tensor_infos(r, dialect, n_tensors)?;
    let header_len = r.pos();
    let data_offset = align_up(header_len, alignment);
    let mut tensors = place_tensors(r, infos, data_offset, alignment)?;
    if endian == Endian::Big {
        for tensor in &mut tensors {
            tensor.layout = StoredLayout::Converted(ElementConversion::FromBigEndian(tensor.ggml_type));
        }
    }
    Ok(GgufHeader { version, endian, metadata, tensors, alignment, data_offset, header_len })
}

fn read_count(r: &mut ByteReader<'_>, dialect: Dialect, what: Field<'_>) -> Result<u64> {
    if dialect.wide { r.u64(what) } else { r.u32(what).map(u64::from) }
}

fn read_string(r: &mut ByteReader<'_>, dialect: Dialect, what: Field<'_>) -> Result<Vec<u8>> {
    let len = read_count(r, dialect, what)?;
    r.bytes(len, what)
}

/// A name (a metadata key, a tensor name): UTF-8 and not seen before;
/// `duplicate` makes the error for a repeated one.
fn read_unique_name(
    r: &mut ByteReader<'_>,
    dialect: Dialect,
    (field, what): (&'static str, &str),
    seen: &mut HashSet<String>,
    duplicate: impl FnOnce(String) -> ErrorKind,
) -> Result<String> {
    let offset = r.pos();
    let name = read_string(r, dialect, Field::Static(field))?;
    let name = String::from_utf8(name).map_err(|e| {
        let shown = String::from_utf8_lossy(e.as_bytes());
        r.error_at(offset, ErrorKind::InvalidUtf8 { what: format!("{what} {shown:?}") })
    })?;
    if !seen.insert(name.clone()) {
        return Err(r.error_at(offset, duplicate(name)));
    }
    Ok(name)
}

fn read_metadata(r: &mut ByteReader<'_>, dialect: Dialect, n_kv: u64) -> Result<Metadata> {
    let mut entries = Vec::with_capacity(n_kv as usize);
    let mut seen = HashSet::with_capacity(n_kv as usize);
    for _ in 0..n_kv {
        let field = ("a metadata key", "metadata key");
        let key = read_unique_name(r, dialect, field, &mut seen, |key| ErrorKind::DuplicateKey { key })?;
        let value = read_value(r, dialect, &key)?;
        entries.push((key, value));
    }
    Ok(Metadata::from_unique_entries(entries))
}

fn read_value_type(r: &mut ByteReader<'_>, key: &str) -> Result<ValueType> {
    let offset = r.pos();
    let id = r.u32(Field::Value(key))?;
    ValueType::from_id(id)
        .ok_or_else(|| r.error_at(offset, ErrorKind::UnknownValueType { id, what: format!("`{key}`") }))
}

fn read_value(r: &mut ByteReader<'_>, dialect: Dialect, key: &str) -> Result<Value> {
    let what = Field::Value(key);
    Ok(match read_value_type(r, key)? {
        ValueType::U8 => Value::U8(r.u8(what)?),
        ValueType::I8 => Value::I8(r.i8(what)?),
        ValueType::U16 => Value::U16(r.u16(what)?),
        ValueType::I16 => Value::I16(r.i16(what)?),
        ValueType::U32 => Value::U32(r.u32(what)?),
        ValueType::I32 => Value::I32(r.i32(what)?),
        ValueType::F32 => Value::F32(r.f32(what)?),
        ValueType::U64 => Value::U64(r.u64(what)?),
        ValueType::I64 => Value::I64(r.i64(what)?),
        ValueType::F64 => Value::F64(r.f64(what)?),
        ValueType::Bool => Value::Bool(read_bool(r, key)?),
        ValueType::String => Value::String(GgufString::from_bytes(read_string(r, dialect, what)?)),
        ValueType::Array => Value::Array(read_array(r, dialect, key, 1)?),
    })
}

fn read_bool(r: &mut ByteReader<'_>, key: &str) -> Result<bool> {
    let offset = r.pos();
    match r.u8(Field::Value(key))? {
        0 => Ok(false),
        1 => Ok(true),
        value => Err(r.error_at(offset, ErrorKind::InvalidBool { value, what: format!("`{key}`") })),
    }
}

/// `n` strings: from a mapped little-endian file, found in place and copied
/// at once (they are laid out as [`StringArray`] keeps them); otherwise, or
/// when they do not fit, one by one, which also names what is wrong.
fn read_strings(r: &mut ByteReader<'_>, dialect: Dialect, n: usize, what: Field<'_>) -> Result<StringArray> {
    let in_place = dialect.wide && r.endian == Endian::Little;
    if let Some((strings, len)) = r.unread().filter(|_| in_place).and_then(|bytes| StringArray::decode_prefix(bytes, n))
    {
        r.skip(len as u64, what)?;
        return Ok(strings);
    }
    let mut strings = StringArray::with_capacity(n);
    for _ in 0..n {
        let len = read_count(r, dialect, what)?;
        r.need(len, what)?;
        strings.push_with(len as usize, |buf| r.read_into(buf, what))?;
    }
    Ok(strings)
}

fn read_array(r: &mut ByteReader<'_>, dialect: Dialect, key: &str, depth: u32) -> Result<Array> {
    let what = Field::Value(key);
    if depth > MAX_ARRAY_NESTING {
        return Err(r.error(ErrorKind::Invalid(format!("`{key}` nests arrays more than {MAX_ARRAY_NESTING} deep"))));
    }
    let element_type = read_value_type(r, key)?;
    let n = read_count(r, dialect, what)?;
    // Strings and arrays need at least their length field.
    let min_each = element_type.fixed_size().unwrap_or(if dialect.wide { 8 } else { 4 });
    r.check_count(n, min_each, what)?;
    let n_usize = n as usize;

    macro_rules! numbers {
        ($variant:ident, $ty:ty) => {{
            const SIZE: usize = std::mem::size_of::<$ty>();
            let raw = r.bytes(n * SIZE as u64, what)?;
            let values = raw.chunks_exact(SIZE).map(|c| {
                let bytes: [u8; SIZE] = c.try_into().expect("chunks_exact gives SIZE bytes");
                match r.endian {
                    Endian::Little => <$ty>::from_le_bytes(bytes),
                    Endian::Big => <$ty>::from_be_bytes(bytes),
                }
            });
            Array::$variant(values.collect())
        }};
    }

    Ok(match element_type {
        ValueType::U8 => Array::U8(r.bytes(n, what)?),
        ValueType::I8 => numbers!(I8, i8),
        ValueType::U16 => numbers!(U16, u16),
        ValueType::I16 => numbers!(I16, i16),
        ValueType::U32 => numbers!(U32, u32),
        ValueType::I32 => numbers!(I32, i32),
        ValueType::F32 => numbers!(F32, f32),
        ValueType::U64 => numbers!(U64, u64),
        ValueType::I64 => numbers!(I64, i64),
        ValueType::F64 => numbers!(F64, f64),
        ValueType::Bool => {
            let mut values = Vec::with_capacity(n_usize);
            for _ in 0..n {
                values.push(read_bool(r, key)?);
            }
            Array::Bool(values)
        }
        ValueType::String => Array::String(read_strings(r, dialect, n_usize, what)?),
        ValueType::Array => {
            let mut values = Vec::with_capacity(n_usize);
            for _ in 0..n {
                values.push(read_array(r, dialect, key, depth + 1)?);
            }
            Array::Array(values)
        }
    })
}

fn alignment_of(r: &ByteReader<'_>, metadata: &Metadata) -> Result<u64> {
    let alignment = match metadata.get(ALIGNMENT_KEY) {
        None => DEFAULT_ALIGNMENT,
        Some(Value::U32(a)) => u64::from(*a),
        Some(other) => {
            return Err(r.error(ErrorKind::WrongValueType {
                key: ALIGNMENT_KEY.into(),
                expected: "u32",
                found: other.value_type().to_string(),
            }));
        }
    };
    if !alignment.is_power_of_two() {
        return Err(r.error(ErrorKind::BadAlignment { alignment }));
    }
    Ok(alignment)
}

/// A tensor info as read, before its data is placed.
struct RawTensorInfo {
    info_offset: u64,
    name: String,
    dims: Vec<u64>,
    ggml_type: GgmlType,
    offset: u64,
}

fn read_tensor_infos(r: &mut ByteReader<'_>, dialect: Dialect, n_tensors: u64) -> Result<Vec<RawTensorInfo>> {
    let mut infos = Vec::with_capacity(n_tensors as usize);
    let mut seen = HashSet::with_capacity(n_tensors as usize);
    for _ in 0..n_tensors {
        let info_offset = r.pos();
        let field = ("a tensor name", "tensor name");
        let name = read_unique_name(r, dialect, field, &mut seen, |tensor| ErrorKind::DuplicateTensor { tensor })?;
        let what = Field::Tensor(&name);
        let n_dims = u64::from(r.u32(what)?);
        if n_dims == 0 || n_dims > MAX_DIMS {
            return Err(r.error_at(info_offset, ErrorKind::BadDimensionCount { tensor: name, n_dims, max: MAX_DIMS }));
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        for _ in 0..n_dims {
            dims.push(read_count(r, dialect, what)?);
        }
        if element_count(&dims).is_none() {
            return Err(r.error_at(info_offset, ErrorKind::ElementCountOverflow { tensor: name, shape: dims }));
        }
        let type_id = r.u32(what)?;
        let ggml_type = resolve_tensor_type(type_id, &name).map_err(|kind| r.error_at(info_offset, kind))?;
        let offset = r.u64(what)?;
        infos.push(RawTensorInfo { info_offset, name, dims, ggml_type, offset });
    }
    Ok(infos)
}

/// Checks every tensor's data lies aligned, inside the file and apart from
/// the others, and turns relative offsets into absolute ones.
fn place_tensors(
    r: &ByteReader<'_>,
    infos: Vec<RawTensorInfo>,
    data_offset: u64,
    alignment: u64,
) -> Result<Vec<TensorInfo>> {
    let file_len = r.pos() + r.remaining();
    let mut tensors = Vec::with_capacity(infos.len());
    for raw in infos {
        let at = |kind| r.error_at(raw.info_offset, kind);
        let row = raw.dims[0];
        let Some(n_bytes) = tensor_bytes(raw.ggml_type, &raw.dims) else {
            let block = raw.ggml_type.block_size();
            if row % block != 0 {
                return Err(at(ErrorKind::RowNotBlockMultiple { tensor: raw.name, row, ty: raw.ggml_type, block }));
            }
            return Err(at(ErrorKind::ElementCountOverflow { tensor: raw.name, shape: raw.dims }));
        };
        if raw.offset % alignment != 0 {
            return Err(at(ErrorKind::MisalignedTensor { tensor: raw.name, offset: raw.offset, alignment }));
        }
        let Some((start, end)) =
            data_offset.checked_add(raw.offset).and_then(|start| Some((start, start.checked_add(n_bytes)?)))
        else {
            return Err(at(ErrorKind::TensorOutOfBounds {
                tensor: raw.name,
                start: raw.offset,
                end: u64::MAX,
                file_len,
            }));
        };
        if end > file_len {
            return Err(at(ErrorKind::TensorOutOfBounds { tensor: raw.name, start, end, file_len }));
        }
        tensors.push(TensorInfo {
            name: raw.name,
            dims: raw.dims,
            ggml_type: raw.ggml_type,
            file_offset: start,
            stored_len: n_bytes,
            layout: StoredLayout::Native,
        });
    }
    check_no_overlap(r, &tensors)?;
    Ok(tensors)
}

fn check_no_overlap(r: &ByteReader<'_>, tensors: &[TensorInfo]) -> Result<()> {
    let mut order: Vec<usize> = (0..tensors.len()).collect();
    order.sort_by_key(|&i| tensors[i].file_offset);
    for pair in order.windows(2) {
        let (a, b) = (&tensors[pair[0]], &tensors[pair[1]]);
        if a.stored_len > 0 && b.stored_len > 0 && a.file_offset + a.stored_len > b.file_offset {
            return Err(
                r.error_at(b.file_offset, ErrorKind::TensorOverlap { tensor: b.name.clone(), other: a.name.clone() })
            );
        }
    }
    Ok(())
}
