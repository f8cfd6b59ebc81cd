//! GGUF version 3 writer: deterministic, metadata and tensors in the order
//! given, every tensor padded to `general.alignment` with zeros (as llama.cpp
//! and gguf-py do, so reading their files and writing them back gives the
//! same bytes).

use std::io::{self, Write};

use crate::formats::output::CountingWriter;

use crate::model::{Array, Endian, Metadata, TensorInfo, Value};

use super::{ALIGNMENT_KEY, DEFAULT_ALIGNMENT, MAGIC, WRITE_VERSION, align_up};

/// Where every byte of the output goes, known before any tensor is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GgufLayout {
    pub alignment: u64,
    /// Header bytes (magic through tensor infos), before padding.
    pub header_len: u64,
    /// Absolute offset of the data section.
    pub data_offset: u64,
    /// Each tensor's offset relative to the data section.
    pub tensor_offsets: Vec<u64>,
    pub file_len: u64,
}

/// Supplies tensor bytes in the tensors' current ggml layout.
pub trait TensorDataSource {
    fn write_tensor(&mut self, tensor_idx: usize, out: &mut dyn Write) -> io::Result<()>;
}

/// Writes a complete GGUF v3 file and returns its layout.
pub fn write_gguf(
    out: &mut dyn Write,
    endian: Endian,
    metadata: &Metadata,
    tensors: &[TensorInfo],
    data: &mut dyn TensorDataSource,
) -> io::Result<GgufLayout> {
    let header = encode_header(endian, metadata, tensors)?;
    out.write_all(&header.bytes)?;
    for (tensor_idx, tensor) in tensors.iter().enumerate() {
        let mut counted = CountingWriter::new(&mut *out);
        data.write_tensor(tensor_idx, &mut counted)?;
        let written = counted.count;
        if written != tensor.n_bytes() {
            return Err(io::Error::other(format!(
                "tensor `{}`: wrote {written} bytes, expected {}",
                tensor.name,
                tensor.n_bytes()
            )));
        }
        write_padding(out, written, header.layout.alignment)?;
    }
    Ok(header.layout)
}

/// A header ready to write: its bytes, up to the data section, and where
/// every tensor goes after it.
pub struct EncodedHeader {
    /// Magic through tensor infos, then zeros up to the data section.
    pub bytes: Vec<u8>,
    pub layout: GgufLayout,
}

/// The header of a file of these tensors, and its layout: for callers that
/// place tensor bytes themselves (each tensor at its offset, followed by
/// [`write_padding`]'s zeros); everyone else uses [`write_gguf`].
pub fn encode_header(endian: Endian, metadata: &Metadata, tensors: &[TensorInfo]) -> io::Result<EncodedHeader> {
    let alignment = alignment_of(metadata)?;
    let mut tensor_offsets = Vec::with_capacity(tensors.len());
    let mut next = 0u64;
    for tensor in tensors {
        tensor_offsets.push(next);
        next = align_up(next + tensor.n_bytes(), alignment);
    }
    let mut bytes = encode(endian, metadata, tensors.iter().zip(&tensor_offsets));
    let header_len = bytes.len() as u64;
    let data_offset = align_up(header_len, alignment);
    bytes.resize(data_offset as usize, 0);
    let layout = GgufLayout { alignment, header_len, data_offset, tensor_offsets, file_len: data_offset + next };
    Ok(EncodedHeader { bytes, layout })
}

/// The length of the file [`write_gguf`] writes for this metadata and these
/// tensors, without writing it.
pub fn file_len(metadata: &Metadata, tensors: &[TensorInfo]) -> io::Result<u64> {
    let alignment = alignment_of(metadata)?;
    let header = align_up(header_len(metadata, tensors.iter()), alignment);
    Ok(tensors.iter().fold(header, |len, t| len + align_up(t.n_bytes(), alignment)))
}

/// The zeros after a tensor of `written` bytes.
pub fn write_padding(out: &mut dyn Write, written: u64, alignment: u64) -> io::Result<()> {
    write_zeros(out, align_up(written, alignment) - written)
}

/// Bytes of the header (magic through tensor infos, before padding) that
/// [`write_gguf`] writes for this metadata and these tensors.
pub fn header_len<'a>(metadata: &Metadata, tensors: impl Iterator<Item = &'a TensorInfo> + Clone) -> u64 {
    encode(Endian::Little, metadata, tensors.map(|t| (t, &0))).len() as u64
}

fn encode<'a>(
    endian: Endian,
    metadata: &Metadata,
    tensors: impl Iterator<Item = (&'a TensorInfo, &'a u64)> + Clone,
) -> Vec<u8> {
    let mut header = Encoder { buf: Vec::new(), endian };
    header.buf.extend_from_slice(&MAGIC);
    header.u32(WRITE_VERSION);
    header.u64(tensors.clone().count() as u64);
    header.u64(metadata.len() as u64);
    for (key, value) in metadata.iter() {
        header.string(key.as_bytes());
        header.u32(value.value_type().id());
        header.value(value);
    }
    for (tensor, &offset) in tensors {
        header.string(tensor.name.as_bytes());
        header.u32(tensor.dims.len() as u32);
        for &d in &tensor.dims {
            header.u64(d);
        }
        header.u32(tensor.ggml_type.id());
        header.u64(offset);
    }
    header.buf
}

fn alignment_of(metadata: &Metadata) -> io::Result<u64> {
    let alignment = match metadata.get(ALIGNMENT_KEY) {
        None => DEFAULT_ALIGNMENT,
        Some(Value::U32(a)) if a.is_power_of_two() => u64::from(*a),
        Some(other) => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{ALIGNMENT_KEY} must be a u32 power of two, found {other:?}"),
            ));
        }
    };
    Ok(alignment)
}

fn write_zeros(out: &mut dyn Write, n: u64) -> io::Result<()> {
    const ZEROS: [u8; 256] = [0; 256];
    let mut left = n;
    while left > 0 {
        let chunk = left.min(ZEROS.len() as u64) as usize;
        out.write_all(&ZEROS[..chunk])?;
        left -= chunk as u64;
    }
    Ok(())
}

/// Serialises header fields in the file's byte order.
struct Encoder {
    buf: Vec<u8>,
    endian: Endian,
}

macro_rules! encode_num {
    ($($name:ident: $ty:ty),* $(,)?) => {$(
        fn $name(&mut self, v: $ty) {
            match self.endian {
                Endian::Little => self.buf.extend_from_slice(&v.to_le_bytes()),
                Endian::Big => self.buf.extend_from_slice(&v.to_be_bytes()),
            }
        }
    )*};
}

impl Encoder {
    encode_num! {
        u8: u8, i8: i8, u16: u16, i16: i16, u32: u32, i32: i32,
        u64: u64, i64: i64, f32: f32, f64: f64,
    }

    /// Numbers in the file's byte order: where that is the host's, their
    /// bytes as they lie, in one copy.
    fn numbers<T: bytemuck::Pod>(&mut self, values: &[T], one: fn(&mut Encoder, T)) {
        let host = if cfg!(target_endian = "little") { Endian::Little } else { Endian::Big };
        match self.endian == host {
            true => self.buf.extend_from_slice(bytemuck::cast_slice(values)),
            false => values.iter().for_each(|&x| one(self, x)),
        }
    }

    fn string(&mut self, bytes: &[u8]) {
        self.u64(bytes.len() as u64);
        self.buf.extend_from_slice(bytes);
    }

    fn value(&mut self, value: &Value) {
        match value {
            Value::U8(v) => self.u8(*v),
            Value::I8(v) => self.i8(*v),
            Value::U16(v) => self.u16(*v),
            Value::I16(v) => self.i16(*v),
            Value::U32(v) => self.u32(*v),
            Value::I32(v) => self.i32(*v),
            Value::F32(v) => self.f32(*v),
            Value::Bool(v) => self.u8(u8::from(*v)),
            Value::String(s) => self.string(s.as_bytes()),
            Value::Array(a) => self.array(a),
            Value::U64(v) => self.u64(*v),
            Value::I64(v) => self.i64(*v),
            Value::F64(v) => self.f64(*v),
        }
    }

    fn array(&mut self, array: &Array) {
        self.u32(array.element_type().id());
        self.u64(array.len() as u64);
        match array {
            Array::U8(v) => self.buf.extend_from_slice(v),
            Array::I8(v) => self.numbers(v, Encoder::i8),
            Array::U16(v) => self.numbers(v, Encoder::u16),
            Array::I16(v) => self.numbers(v, Encoder::i16),
            Array::U32(v) => self.numbers(v, Encoder::u32),
            Array::I32(v) => self.numbers(v, Encoder::i32),
            Array::F32(v) => self.numbers(v, Encoder::f32),
            Array::Bool(v) => v.iter().for_each(|&x| self.u8(u8::from(x))),
            Array::String(v) => match self.endian {
                Endian::Little => self.buf.extend_from_slice(v.encoded()),
                Endian::Big => v.iter().for_each(|s| self.string(s)),
            },
            Array::Array(v) => v.iter().for_each(|a| self.array(a)),
            Array::U64(v) => self.numbers(v, Encoder::u64),
            Array::I64(v) => self.numbers(v, Encoder::i64),
            Array::F64(v) => self.numbers(v, Encoder::f64),
        }
    }
}
