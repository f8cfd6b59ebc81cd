//! Typed key/value metadata, as GGUF defines it.
//!
//! Values keep the exact type and bytes they were read with, so writing a model
//! back gives the bytes it came from. Strings are byte strings: GGUF does not
//! promise UTF-8 in values, and a tokenizer vocabulary may hold partial bytes.

use std::fmt;
use std::sync::Arc;

/// The GGUF value type ids. The numbers are the on-disk ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ValueType {
    U8 = 0,
    I8 = 1,
    U16 = 2,
    I16 = 3,
    U32 = 4,
    I32 = 5,
    F32 = 6,
    Bool = 7,
    String = 8,
    Array = 9,
    U64 = 10,
    I64 = 11,
    F64 = 12,
}

impl ValueType {
    pub const ALL: [ValueType; 13] = [
        ValueType::U8,
        ValueType::I8,
        ValueType::U16,
        ValueType::I16,
        ValueType::U32,
        ValueType::I32,
        ValueType::F32,
        ValueType::Bool,
        ValueType::String,
        ValueType::Array,
        ValueType::U64,
        ValueType::I64,
        ValueType::F64,
    ];

    pub fn from_id(id: u32) -> Option<ValueType> {
        ValueType::ALL.iter().copied().find(|t| *t as u32 == id)
    }

    pub fn id(self) -> u32 {
        self as u32
    }

    /// The name used on the command line (`--set KEY=TYPE:VALUE`) and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            ValueType::U8 => "u8",
            ValueType::I8 => "i8",
            ValueType::U16 => "u16",
            ValueType::I16 => "i16",
            ValueType::U32 => "u32",
            ValueType::I32 => "i32",
            ValueType::F32 => "f32",
            ValueType::Bool => "bool",
            ValueType::String => "str",
            ValueType::Array => "arr",
            ValueType::U64 => "u64",
            ValueType::I64 => "i64",
            ValueType::F64 => "f64",
        }
    }

    pub fn from_name(name: &str) -> Option<ValueType> {
        ValueType::ALL.iter().copied().find(|t| t.name() == name)
    }

    /// Bytes one value of a fixed-size type takes; `None` for strings and arrays.
    pub fn fixed_size(self) -> Option<u64> {
        match self {
            ValueType::U8 | ValueType::I8 | ValueType::Bool => Some(1),
            ValueType::U16 | ValueType::I16 => Some(2),
            ValueType::U32 | ValueType::I32 | ValueType::F32 => Some(4),
            ValueType::U64 | ValueType::I64 | ValueType::F64 => Some(8),
            ValueType::String | ValueType::Array => None,
        }
    }
}

impl fmt::Display for ValueType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A GGUF string: bytes, usually but not necessarily UTF-8.
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct GgufString(Vec<u8>);

impl GgufString {
    pub fn from_bytes(bytes: Vec<u8>) -> GgufString {
        GgufString(bytes)
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    pub fn as_str(&self) -> Option<&str> {
        std::str::from_utf8(&self.0).ok()
    }

    pub fn to_string_lossy(&self) -> String {
        String::from_utf8_lossy(&self.0).into_owned()
    }
}

impl From<&str> for GgufString {
    fn from(s: &str) -> GgufString {
        GgufString(s.as_bytes().to_vec())
    }
}

impl From<String> for GgufString {
    fn from(s: String) -> GgufString {
        GgufString(s.into_bytes())
    }
}

impl fmt::Debug for GgufString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&String::from_utf8_lossy(&self.0), f)
    }
}

impl fmt::Display for GgufString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&String::from_utf8_lossy(&self.0))
    }
}

impl AsRef<[u8]> for GgufString {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

/// An array of GGUF strings packed into one buffer, laid out as a
/// little-endian GGUF file lays them out (each string's `u64` length, then its
/// bytes): a 262k-token vocabulary is two allocations, read from a mapped
/// file with one copy and written with another.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct StringArray {
    encoded: Vec<u8>,
    /// Where each string ends in `encoded`.
    ends: Vec<usize>,
}

/// Bytes of the length before each string.
const LEN_BYTES: usize = 8;

impl StringArray {
    /// Room for `n` strings (their bytes come as they are pushed).
    pub fn with_capacity(n: usize) -> StringArray {
        StringArray { encoded: Vec::with_capacity(n * LEN_BYTES), ends: Vec::with_capacity(n) }
    }

    /// The `n` strings GGUF little-endian encoded at the start of `bytes`,
    /// and the bytes they take; `None` when `bytes` ends first.
    pub fn decode_prefix(bytes: &[u8], n: usize) -> Option<(StringArray, usize)> {
        let mut ends = Vec::with_capacity(n);
        let mut at = 0usize;
        for _ in 0..n {
            let len = u64::from_le_bytes(bytes.get(at..at + LEN_BYTES)?.try_into().ok()?);
            at = (at + LEN_BYTES).checked_add(usize::try_from(len).ok()?).filter(|&end| end <= bytes.len())?;
            ends.push(at);
        }
        Some((StringArray { encoded: bytes[..at].to_vec(), ends }, at))
    }

    /// The strings as a little-endian GGUF file holds them.
    pub fn encoded(&self) -> &[u8] {
        &self.encoded
    }

    pub fn push(&mut self, s: &[u8]) {
        self.encoded.extend_from_slice(&(s.len() as u64).to_le_bytes());
        self.encoded.extend_from_slice(s);
        self.ends.push(self.encoded.len());
    }

    /// Appends a string written by `fill` into `len` zeroed bytes; the
    /// string is kept only when `fill` succeeds.
    pub fn push_with<E>(&mut self, len: usize, fill: impl FnOnce(&mut [u8]) -> Result<(), E>) -> Result<(), E> {
        let start = self.encoded.len();
        self.encoded.extend_from_slice(&(len as u64).to_le_bytes());
        self.encoded.resize(start + LEN_BYTES + len, 0);
        match fill(&mut self.encoded[start + LEN_BYTES..]) {
            Ok(()) => {
                self.ends.push(self.encoded.len());
                Ok(())
            }
            Err(e) => {
                self.encoded.truncate(start);
                Err(e)
            }
        }
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    pub fn get(&self, idx: usize) -> Option<&[u8]> {
        let end = *self.ends.get(idx)?;
        // The string starts after its length, which follows the previous string.
        let start = idx.checked_sub(1).map_or(0, |prev| self.ends[prev]) + LEN_BYTES;
        Some(&self.encoded[start..end])
    }

    pub fn iter(&self) -> impl ExactSizeIterator<Item = &[u8]> + '_ {
        (0..self.len()).map(|i| self.get(i).expect("every index below len has a string"))
    }
}

impl<S: AsRef<[u8]>> FromIterator<S> for StringArray {
    fn from_iter<I: IntoIterator<Item = S>>(iter: I) -> StringArray {
        let mut array = StringArray::default();
        iter.into_iter().for_each(|s| array.push(s.as_ref()));
        array
    }
}

impl<S: AsRef<[u8]>, const N: usize> From<[S; N]> for StringArray {
    fn from(strings: [S; N]) -> StringArray {
        strings.into_iter().collect()
    }
}

impl fmt::Debug for StringArray {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter().map(String::from_utf8_lossy)).finish()
    }
}

/// One metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(GgufString),
    Array(Array),
    U64(u64),
    I64(i64),
    F64(f64),
}

/// Arrays nested deeper than this are refused: real files nest at most one
/// level, and unbounded recursion on hostile input would blow the stack.
pub const MAX_ARRAY_NESTING: u32 = 32;

/// A homogeneous array; arrays of arrays hold inner arrays of any element type.
#[derive(Debug, Clone, PartialEq)]
pub enum Array {
    U8(Vec<u8>),
    I8(Vec<i8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    F32(Vec<f32>),
    Bool(Vec<bool>),
    String(StringArray),
    Array(Vec<Array>),
    U64(Vec<u64>),
    I64(Vec<i64>),
    F64(Vec<f64>),
}

impl Value {
    pub fn value_type(&self) -> ValueType {
        match self {
            Value::U8(_) => ValueType::U8,
            Value::I8(_) => ValueType::I8,
            Value::U16(_) => ValueType::U16,
            Value::I16(_) => ValueType::I16,
            Value::U32(_) => ValueType::U32,
            Value::I32(_) => ValueType::I32,
            Value::F32(_) => ValueType::F32,
            Value::Bool(_) => ValueType::Bool,
            Value::String(_) => ValueType::String,
            Value::Array(_) => ValueType::Array,
            Value::U64(_) => ValueType::U64,
            Value::I64(_) => ValueType::I64,
            Value::F64(_) => ValueType::F64,
        }
    }

    pub fn string(s: &str) -> Value {
        Value::String(GgufString::from(s))
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => s.as_str(),
            _ => None,
        }
    }

    /// The value as an unsigned integer, for any integer type holding a
    /// non-negative number.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(u64::from(v)),
            Value::U16(v) => Some(u64::from(v)),
            Value::U32(v) => Some(u64::from(v)),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }
}

impl Value {
    /// Whether the two are the same bytes in a file: floats compared by
    /// their bits, so a NaN is itself and `-0.0` is not `0.0`.
    pub fn is_identical(&self, other: &Value) -> bool {
        match (self, other) {
            (Value::F32(a), Value::F32(b)) => a.to_bits() == b.to_bits(),
            (Value::F64(a), Value::F64(b)) => a.to_bits() == b.to_bits(),
            (Value::Array(a), Value::Array(b)) => a.is_identical(b),
            (a, b) => a == b,
        }
    }
}

/// A value as a message says it: `15`, `1e-5`, `"text"` (quoted, escaped),
/// `[1, 2, 3, … 512 elements]` — never the Rust shape `U32(15)`.
impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::U8(v) => write!(f, "{v}"),
            Value::I8(v) => write!(f, "{v}"),
            Value::U16(v) => write!(f, "{v}"),
            Value::I16(v) => write!(f, "{v}"),
            Value::U32(v) => write!(f, "{v}"),
            Value::I32(v) => write!(f, "{v}"),
            Value::U64(v) => write!(f, "{v}"),
            Value::I64(v) => write!(f, "{v}"),
            Value::F32(v) => write!(f, "{v}"),
            Value::F64(v) => write!(f, "{v}"),
            Value::Bool(v) => write!(f, "{v}"),
            Value::String(s) => write!(f, "{:?}", String::from_utf8_lossy(s.as_bytes())),
            Value::Array(a) => write!(f, "{a}"),
        }
    }
}

impl fmt::Display for Array {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const SHOWN: usize = 8;
        f.write_str("[")?;
        for i in 0..self.len().min(SHOWN) {
            let element = self.get(i).expect("every index below len has an element");
            write!(f, "{}{element}", if i > 0 { ", " } else { "" })?;
        }
        match self.len() {
            n if n > SHOWN => write!(f, ", … {n} elements]"),
            _ => f.write_str("]"),
        }
    }
}

impl Array {
    fn is_identical(&self, other: &Array) -> bool {
        match (self, other) {
            (Array::F32(a), Array::F32(b)) => a.iter().map(|v| v.to_bits()).eq(b.iter().map(|v| v.to_bits())),
            (Array::F64(a), Array::F64(b)) => a.iter().map(|v| v.to_bits()).eq(b.iter().map(|v| v.to_bits())),
            (Array::Array(a), Array::Array(b)) => a.len() == b.len() && a.iter().zip(b).all(|(a, b)| a.is_identical(b)),
            (a, b) => a == b,
        }
    }

    pub fn element_type(&self) -> ValueType {
        match self {
            Array::U8(_) => ValueType::U8,
            Array::I8(_) => ValueType::I8,
            Array::U16(_) => ValueType::U16,
            Array::I16(_) => ValueType::I16,
            Array::U32(_) => ValueType::U32,
            Array::I32(_) => ValueType::I32,
            Array::F32(_) => ValueType::F32,
            Array::Bool(_) => ValueType::Bool,
            Array::String(_) => ValueType::String,
            Array::Array(_) => ValueType::Array,
            Array::U64(_) => ValueType::U64,
            Array::I64(_) => ValueType::I64,
            Array::F64(_) => ValueType::F64,
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Array::U8(v) => v.len(),
            Array::I8(v) => v.len(),
            Array::U16(v) => v.len(),
            Array::I16(v) => v.len(),
            Array::U32(v) => v.len(),
            Array::I32(v) => v.len(),
            Array::F32(v) => v.len(),
            Array::Bool(v) => v.len(),
            Array::String(v) => v.len(),
            Array::Array(v) => v.len(),
            Array::U64(v) => v.len(),
            Array::I64(v) => v.len(),
            Array::F64(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Element `idx` as a scalar value (arrays of arrays give `Value::Array`).
    pub fn get(&self, idx: usize) -> Option<Value> {
        Some(match self {
            Array::U8(v) => Value::U8(*v.get(idx)?),
            Array::I8(v) => Value::I8(*v.get(idx)?),
            Array::U16(v) => Value::U16(*v.get(idx)?),
            Array::I16(v) => Value::I16(*v.get(idx)?),
            Array::U32(v) => Value::U32(*v.get(idx)?),
            Array::I32(v) => Value::I32(*v.get(idx)?),
            Array::F32(v) => Value::F32(*v.get(idx)?),
            Array::Bool(v) => Value::Bool(*v.get(idx)?),
            Array::String(v) => Value::String(GgufString::from_bytes(v.get(idx)?.to_vec())),
            Array::Array(v) => Value::Array(v.get(idx)?.clone()),
            Array::U64(v) => Value::U64(*v.get(idx)?),
            Array::I64(v) => Value::I64(*v.get(idx)?),
            Array::F64(v) => Value::F64(*v.get(idx)?),
        })
    }
}

/// Ordered metadata with unique keys. Order is kept because it is part of the
/// bytes of a GGUF file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Metadata {
    /// Values are shared: metadata passes through many nodes mostly
    /// unchanged, and a tokenizer's vocabulary is hundreds of thousands of
    /// strings, so a copy shares them and an edit replaces one value.
    entries: Vec<(String, Arc<Value>)>,
}

impl Metadata {
    pub fn new() -> Metadata {
        Metadata::default()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), &**v))
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.entries.iter().find(|(k, _)| k == key).map(|(_, v)| &**v)
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// Replaces the value of an existing key in place, or appends a new key.
    pub fn set(&mut self, key: &str, value: Value) {
        match self.entries.iter_mut().find(|(k, _)| k == key) {
            Some(entry) => entry.1 = Arc::new(value),
            None => self.entries.push((key.to_owned(), Arc::new(value))),
        }
    }

    /// Removes `key` if present and appends it with `value`: gguf's
    /// `gguf_set_val_*`, which is how llama.cpp's tools order their output keys.
    pub fn set_last(&mut self, key: &str, value: Value) {
        self.remove(key);
        self.entries.push((key.to_owned(), Arc::new(value)));
    }

    /// Builds metadata from entries whose keys the caller has checked to be
    /// unique (the readers do, with a hash set, so a file with many keys is
    /// not quadratic to load).
    pub fn from_unique_entries(entries: Vec<(String, Value)>) -> Metadata {
        Metadata { entries: entries.into_iter().map(|(k, v)| (k, Arc::new(v))).collect() }
    }

    /// Removes `key`; false when there was no such key.
    pub fn remove(&mut self, key: &str) -> bool {
        let idx = self.entries.iter().position(|(k, _)| k == key);
        idx.map(|idx| self.entries.remove(idx)).is_some()
    }

    /// Keeps the keys `keep` accepts, in order.
    pub fn retain(&mut self, mut keep: impl FnMut(&str) -> bool) {
        self.entries.retain(|(k, _)| keep(k));
    }

    pub fn get_str(&self, key: &str) -> Option<&str> {
        self.get(key).and_then(Value::as_str)
    }

    /// Appends `other`'s entries in order with `prefix` put before each key,
    /// sharing their values (how a bundle namespaces its parts). A prefixed
    /// key already present keeps its place and takes the new value, as `set`.
    pub fn append_prefixed(&mut self, prefix: &str, other: &Metadata) {
        // Only a key that already starts with `prefix` can collide; looking
        // once keeps the usual case linear.
        let may_collide = self.entries.iter().any(|(k, _)| k.starts_with(prefix));
        for (key, value) in &other.entries {
            let key = format!("{prefix}{key}");
            let existing = if may_collide { self.entries.iter_mut().find(|(k, _)| *k == key) } else { None };
            match existing {
                Some(entry) => entry.1 = Arc::clone(value),
                None => self.entries.push((key, Arc::clone(value))),
            }
        }
    }

    /// The entries whose key starts with `prefix`, in order, with the prefix
    /// taken off and their values shared; the others are left out.
    pub fn strip_key_prefix(&self, prefix: &str) -> Metadata {
        let entries =
            self.entries.iter().filter_map(|(k, v)| Some((k.strip_prefix(prefix)?.to_owned(), Arc::clone(v))));
        Metadata { entries: entries.collect() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(metadata: &Metadata) -> Vec<&str> {
        metadata.iter().map(|(k, _)| k).collect()
    }

    #[test]
    fn values_display_as_messages_say_them() {
        assert_eq!(Value::U32(15).to_string(), "15");
        assert_eq!(Value::F32(1e-5).to_string(), "0.00001");
        assert_eq!(Value::string("a \"b\"\n").to_string(), r#""a \"b\"\n""#);
        assert_eq!(Value::Array(Array::I32(vec![1, -2])).to_string(), "[1, -2]");
        let long = Value::Array(Array::U8((0..10).collect()));
        assert_eq!(long.to_string(), "[0, 1, 2, 3, 4, 5, 6, 7, … 10 elements]");
    }

    #[test]
    fn string_arrays_keep_every_string_and_drop_a_failed_one() {
        let mut array: StringArray = ["", "ab", "\u{2581}c"].into();
        array.push(&[0xff]);
        assert_eq!(array.push_with(3, |_| Err("short read")), Err("short read"));
        let fill = |buf: &mut [u8]| {
            buf.copy_from_slice(b"xy");
            Ok::<_, ()>(())
        };
        array.push_with(2, fill).unwrap();
        let expected: [&[u8]; 5] = [b"", b"ab", "\u{2581}c".as_bytes(), &[0xff], b"xy"];
        assert_eq!(array.iter().collect::<Vec<_>>(), expected);
        assert_eq!((array.len(), array.get(4), array.get(5)), (5, Some(&b"xy"[..]), None));
        assert_eq!(array, expected.into_iter().collect());
        let encoded = [array.encoded(), b"rest"].concat();
        assert_eq!(StringArray::decode_prefix(&encoded, 5), Some((array.clone(), encoded.len() - 4)));
        assert_eq!(StringArray::decode_prefix(&encoded, 2), Some((array.iter().take(2).collect(), 18)));
        assert_eq!(StringArray::decode_prefix(&encoded[..20], 5), None);
        assert_eq!(StringArray::decode_prefix(&[1, 0, 0, 0, 0, 0, 0, 0x80], 1), None);
        assert_eq!(StringArray::decode_prefix(&[], 0), Some((StringArray::default(), 0)));
        assert_eq!(format!("{array:?}"), "[\"\", \"ab\", \"\u{2581}c\", \"\u{fffd}\", \"xy\"]");
    }

    #[test]
    fn prefixing_and_stripping_share_values_and_keep_order() {
        let mut part = Metadata::new();
        part.set("b", Value::U32(1));
        part.set("a", Value::string("x"));
        let mut bundle = Metadata::new();
        bundle.set("head", Value::Bool(true));
        bundle.append_prefixed("p.", &part);
        assert_eq!(keys(&bundle), ["head", "p.b", "p.a"]);
        assert!(Arc::ptr_eq(&bundle.entries[1].1, &part.entries[0].1));
        assert_eq!(bundle.strip_key_prefix("p."), part);
        assert_eq!(keys(&bundle.strip_key_prefix("q.")), Vec::<&str>::new());
    }

    #[test]
    fn appending_onto_a_taken_prefix_replaces_in_place() {
        let mut part = Metadata::new();
        part.set("a", Value::U8(2));
        part.set("c", Value::U8(3));
        let mut bundle = Metadata::new();
        bundle.set("p.a", Value::U8(1));
        bundle.set("z", Value::U8(0));
        bundle.append_prefixed("p.", &part);
        assert_eq!(keys(&bundle), ["p.a", "z", "p.c"]);
        assert_eq!(bundle.get("p.a"), Some(&Value::U8(2)));
    }
}
