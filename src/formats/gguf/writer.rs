//! GGUF version 3 writer: deterministic, metadata and tensors in the order
//! given, every tensor padded to `general.alignment` with zeros (as llama.cpp
//! and gguf-py do, so reading their files and writing them back gives the
//! same bytes).

use std::io::{self, Write};

use crate::formats::output::CountingWriter;

use crate::model::{Array, Endian, Metadata, TensorInfo, Value};

use super::{ALIGNMENT_KEY, DEFAULT_ALIGNMENT, MAGIC, MAX_DIMS, MAX_TENSOR_NAME_BYTES, WRITE_VERSION, align_up};
use crate::text::Name;

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

impl GgufLayout {
    /// The same file of no tensors without the padding after its header:
    /// it ends where its metadata does.
    pub fn ending_at_metadata(self) -> GgufLayout {
        debug_assert!(self.tensor_offsets.is_empty());
        GgufLayout { data_offset: self.header_len, file_len: self.header_len, ..self }
    }
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
    let layout = layout(metadata, tensors)?;
    write_header(out, endian, metadata, tensors, &layout)?;
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
        write_padding(out, written, layout.alignment)?;
    }
    Ok(layout)
}

/// Where every byte of a file of these tensors goes, without encoding it:
/// for callers that place tensor bytes themselves (the header by
/// [`write_header`], each tensor at its offset followed by
/// [`write_padding`]'s zeros); everyone else uses [`write_gguf`].
pub fn layout(metadata: &Metadata, tensors: &[TensorInfo]) -> io::Result<GgufLayout> {
    if let Some(tensor) = tensors.iter().find(|t| t.name.len() > MAX_TENSOR_NAME_BYTES) {
        let start: String = tensor.name.chars().take(40).collect();
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "tensor `{}…` has a name of {} bytes; a GGUF tensor name is at most {MAX_TENSOR_NAME_BYTES} \
                 bytes (llama.cpp's GGML_MAX_NAME less its NUL)",
                Name(&start),
                tensor.name.len(),
            ),
        ));
    }
    if let Some(tensor) = tensors.iter().find(|t| t.dims.is_empty() || t.dims.len() as u64 > MAX_DIMS) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "tensor `{}` has {} dimensions; a GGUF tensor has 1 to {MAX_DIMS}",
                Name(&tensor.name),
                tensor.dims.len()
            ),
        ));
    }
    let alignment = alignment_of(metadata)?;
    let mut tensor_offsets = Vec::with_capacity(tensors.len());
    let mut next = 0u64;
    for tensor in tensors {
        tensor_offsets.push(next);
        next = align_up(next + tensor.n_bytes(), alignment);
    }
    let header_len = header_len(metadata, tensors.iter());
    let data_offset = align_up(header_len, alignment);
    Ok(GgufLayout { alignment, header_len, data_offset, tensor_offsets, file_len: data_offset + next })
}

/// Writes the header of `layout`'s file, up to its data section, straight to
/// `out`: a vocabulary of hundreds of thousands of tokens is never held
/// encoded in memory a second time.
pub fn write_header(
    out: &mut dyn Write,
    endian: Endian,
    metadata: &Metadata,
    tensors: &[TensorInfo],
    layout: &GgufLayout,
) -> io::Result<()> {
    let mut counted = CountingWriter::new(out);
    encode(&mut Encoder { out: &mut counted, endian }, metadata, tensors.iter().zip(&layout.tensor_offsets))?;
    let written = counted.count;
    if written != layout.header_len {
        return Err(io::Error::other(format!(
            "the header took {written} bytes where its layout has {}",
            layout.header_len
        )));
    }
    write_zeros(out, layout.data_offset - written)
}

/// The length of the file [`write_gguf`] writes for this metadata and these
/// tensors, without writing it.
pub fn file_len(metadata: &Metadata, tensors: &[TensorInfo]) -> io::Result<u64> {
    Ok(layout(metadata, tensors)?.file_len)
}

/// The zeros after a tensor of `written` bytes.
pub fn write_padding(out: &mut dyn Write, written: u64, alignment: u64) -> io::Result<()> {
    write_zeros(out, align_up(written, alignment) - written)
}

/// Bytes of the header (magic through tensor infos, before padding) that
/// [`write_gguf`] writes for this metadata and these tensors.
pub fn header_len<'a>(metadata: &Metadata, tensors: impl Iterator<Item = &'a TensorInfo> + Clone) -> u64 {
    let mut sink = io::sink();
    let mut counted = CountingWriter::new(&mut sink);
    let offsets = std::iter::repeat(&0);
    encode(&mut Encoder { out: &mut counted, endian: Endian::Little }, metadata, tensors.zip(offsets))
        .expect("writing to io::sink cannot fail");
    counted.count
}

fn encode<'a, W: Write>(
    header: &mut Encoder<W>,
    metadata: &Metadata,
    tensors: impl Iterator<Item = (&'a TensorInfo, &'a u64)> + Clone,
) -> io::Result<()> {
    header.bytes(&MAGIC)?;
    header.u32(WRITE_VERSION)?;
    header.u64(tensors.clone().count() as u64)?;
    header.u64(metadata.len() as u64)?;
    for (key, value) in metadata.iter() {
        header.string(key.as_bytes())?;
        header.u32(value.value_type().id())?;
        header.value(value)?;
    }
    for (tensor, &offset) in tensors {
        header.string(tensor.name.as_bytes())?;
        header.u32(tensor.dims.len() as u32)?;
        for &d in &tensor.dims {
            header.u64(d)?;
        }
        header.u32(tensor.ggml_type.id())?;
        header.u64(offset)?;
    }
    Ok(())
}

fn alignment_of(metadata: &Metadata) -> io::Result<u64> {
    let alignment = match metadata.get(ALIGNMENT_KEY) {
        None => DEFAULT_ALIGNMENT,
        Some(Value::U32(a)) if a.is_power_of_two() => u64::from(*a),
        Some(other) => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{ALIGNMENT_KEY} must be a u32 power of two, found {other} ({})", other.value_type().name()),
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
struct Encoder<W> {
    out: W,
    endian: Endian,
}

macro_rules! encode_num {
    ($($name:ident: $ty:ty),* $(,)?) => {$(
        fn $name(&mut self, v: $ty) -> io::Result<()> {
            match self.endian {
                Endian::Little => self.out.write_all(&v.to_le_bytes()),
                Endian::Big => self.out.write_all(&v.to_be_bytes()),
            }
        }
    )*};
}

impl<W: Write> Encoder<W> {
    encode_num! {
        u8: u8, i8: i8, u16: u16, i16: i16, u32: u32, i32: i32,
        u64: u64, i64: i64, f32: f32, f64: f64,
    }

    fn bytes(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.out.write_all(bytes)
    }

    /// Numbers in the file's byte order: where that is the host's, their
    /// bytes as they lie, in one copy.
    fn numbers<T: bytemuck::Pod>(&mut self, values: &[T], one: fn(&mut Self, T) -> io::Result<()>) -> io::Result<()> {
        let host = if cfg!(target_endian = "little") { Endian::Little } else { Endian::Big };
        match self.endian == host {
            true => self.bytes(bytemuck::cast_slice(values)),
            false => values.iter().try_for_each(|&x| one(self, x)),
        }
    }

    fn string(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.u64(bytes.len() as u64)?;
        self.bytes(bytes)
    }

    fn value(&mut self, value: &Value) -> io::Result<()> {
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

    fn array(&mut self, array: &Array) -> io::Result<()> {
        self.u32(array.element_type().id())?;
        self.u64(array.len() as u64)?;
        match array {
            Array::U8(v) => self.bytes(v),
            Array::I8(v) => self.numbers(v, Self::i8),
            Array::U16(v) => self.numbers(v, Self::u16),
            Array::I16(v) => self.numbers(v, Self::i16),
            Array::U32(v) => self.numbers(v, Self::u32),
            Array::I32(v) => self.numbers(v, Self::i32),
            Array::F32(v) => self.numbers(v, Self::f32),
            Array::Bool(v) => v.iter().try_for_each(|&x| self.u8(u8::from(x))),
            Array::String(v) => match self.endian {
                Endian::Little => self.bytes(v.encoded()),
                Endian::Big => v.iter().try_for_each(|s| self.string(s)),
            },
            Array::Array(v) => v.iter().try_for_each(|a| self.array(a)),
            Array::U64(v) => self.numbers(v, Self::u64),
            Array::I64(v) => self.numbers(v, Self::i64),
            Array::F64(v) => self.numbers(v, Self::f64),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::StringArray;
    use crate::types::GgmlType;

    fn metadata() -> Metadata {
        let mut m = Metadata::new();
        m.set("general.alignment", Value::U32(64));
        m.set("tokenizer.ggml.tokens", Value::Array(Array::String(StringArray::from(["<s>", "a", "bc"]))));
        m.set("tokenizer.ggml.scores", Value::Array(Array::F32(vec![0.0, -1.5, 2.25])));
        m.set("nested", Value::Array(Array::Array(vec![Array::Bool(vec![true, false]), Array::U16(vec![7])])));
        m
    }

    #[test]
    fn a_tensor_of_more_dimensions_than_ggml_holds_is_refused_by_name() {
        let five = [TensorInfo::new("v.patch_embd.weight", vec![14, 14, 2, 3, 32], GgmlType::F16)];
        let err = layout(&metadata(), &five).unwrap_err();
        assert_eq!(err.to_string(), "tensor `v.patch_embd.weight` has 5 dimensions; a GGUF tensor has 1 to 4");
    }

    #[test]
    fn a_streamed_header_fills_its_layout_and_reads_back_in_either_byte_order() {
        let metadata = metadata();
        let tensors = [TensorInfo::new("w", vec![32, 3], GgmlType::F16), TensorInfo::new("b", vec![5], GgmlType::F32)];
        let layout = layout(&metadata, &tensors).unwrap();
        assert_eq!(layout.tensor_offsets, [0, 192]);
        for endian in [Endian::Little, Endian::Big] {
            let mut bytes = Vec::new();
            write_header(&mut bytes, endian, &metadata, &tensors, &layout).unwrap();
            assert_eq!(bytes.len() as u64, layout.data_offset);
            bytes.resize(layout.file_len as usize, 0);
            let read = crate::formats::gguf::read_header_bytes(&bytes, std::path::Path::new("t.gguf")).unwrap();
            assert_eq!(read.endian, endian);
            assert_eq!(read.header_len, layout.header_len);
            assert_eq!(read.data_offset, layout.data_offset);
            assert_eq!(read.metadata, metadata);
            let names: Vec<_> = read.tensors.iter().map(|t| (t.name.as_str(), t.file_offset)).collect();
            assert_eq!(names, [("w", layout.data_offset), ("b", layout.data_offset + 192)]);
        }
    }

    #[test]
    fn a_write_error_while_streaming_the_header_is_returned() {
        let metadata = metadata();
        let layout = layout(&metadata, &[]).unwrap();
        let mut short = [0u8; 40];
        let err = write_header(&mut &mut short[..], Endian::Little, &metadata, &[], &layout).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::WriteZero);
    }
}
