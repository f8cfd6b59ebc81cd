//! A bounds-checked sequential reader of little- or big-endian numbers.
//!
//! Every length or count a header claims is checked against the bytes left in
//! the file before anything is allocated for it.

use crate::text::Name;
use std::fmt;
use std::io::{self, Read};
use std::path::Path;

use super::error::{ErrorKind, FormatError, Result};
use crate::model::Endian;

/// What is being read, for error messages; built only when an error happens.
#[derive(Clone, Copy)]
pub enum Field<'a> {
    Static(&'static str),
    Value(&'a str),
    Tensor(&'a str),
}

impl fmt::Display for Field<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Field::Static(s) => f.write_str(s),
            Field::Value(key) => write!(f, "the value of `{}`", Name(key)),
            Field::Tensor(name) => write!(f, "the info of tensor `{}`", Name(name)),
        }
    }
}

/// Where the bytes come from: a mapped or in-memory file is read in place.
enum Input<'a> {
    Bytes(&'a [u8]),
    Stream(Box<dyn Read + 'a>),
}

pub struct ByteReader<'a> {
    inner: Input<'a>,
    path: &'a Path,
    pos: u64,
    len: u64,
    pub endian: Endian,
}

macro_rules! read_num {
    ($($name:ident: $ty:ty),* $(,)?) => {$(
        pub fn $name(&mut self, what: Field<'_>) -> Result<$ty> {
            let bytes = self.array::<{ std::mem::size_of::<$ty>() }>(what)?;
            Ok(match self.endian {
                Endian::Little => <$ty>::from_le_bytes(bytes),
                Endian::Big => <$ty>::from_be_bytes(bytes),
            })
        }
    )*};
}

impl<'a> ByteReader<'a> {
    /// A reader of bytes in memory (a mapped file).
    pub fn over_bytes(bytes: &'a [u8], path: &'a Path) -> ByteReader<'a> {
        ByteReader { inner: Input::Bytes(bytes), path, pos: 0, len: bytes.len() as u64, endian: Endian::Little }
    }

    /// A reader of a stream of `len` bytes (a file read without a map).
    pub fn over_stream(inner: Box<dyn Read + 'a>, path: &'a Path, len: u64) -> ByteReader<'a> {
        ByteReader { inner: Input::Stream(inner), path, pos: 0, len, endian: Endian::Little }
    }

    /// The bytes not read yet, when they are in memory: a parser can scan
    /// them in place and then [`ByteReader::skip`] what it took.
    pub fn unread(&self) -> Option<&'a [u8]> {
        match self.inner {
            Input::Bytes(bytes) => bytes.get(self.pos as usize..),
            Input::Stream(_) => None,
        }
    }

    pub fn pos(&self) -> u64 {
        self.pos
    }

    pub fn remaining(&self) -> u64 {
        self.len.saturating_sub(self.pos)
    }

    pub fn path(&self) -> &'a Path {
        self.path
    }

    /// An error at the current position.
    pub fn error(&self, kind: ErrorKind) -> FormatError {
        FormatError::at(self.path, self.pos, kind)
    }

    /// An error at `offset`.
    pub fn error_at(&self, offset: u64, kind: ErrorKind) -> FormatError {
        FormatError::at(self.path, offset, kind)
    }

    /// Fails unless `n` more bytes are left.
    pub fn need(&self, n: u64, what: Field<'_>) -> Result<()> {
        if n > self.remaining() {
            return Err(self.error(ErrorKind::Truncated {
                what: what.to_string(),
                needed: n,
                available: self.remaining(),
            }));
        }
        Ok(())
    }

    /// Fails unless `count` items of at least `min_each` bytes fit in what is left.
    pub fn check_count(&self, count: u64, min_each: u64, what: Field<'_>) -> Result<()> {
        if count.saturating_mul(min_each) > self.remaining() {
            return Err(self.error(ErrorKind::CountTooLarge {
                what: what.to_string(),
                count,
                min_each,
                available: self.remaining(),
            }));
        }
        Ok(())
    }

    pub fn array<const N: usize>(&mut self, what: Field<'_>) -> Result<[u8; N]> {
        self.need(N as u64, what)?;
        let mut buf = [0u8; N];
        self.fill(&mut buf, what)?;
        Ok(buf)
    }

    /// Reads `n` bytes, after checking that the file holds them.
    pub fn bytes(&mut self, n: u64, what: Field<'_>) -> Result<Vec<u8>> {
        self.need(n, what)?;
        let mut buf = vec![0u8; n as usize];
        self.fill(&mut buf, what)?;
        Ok(buf)
    }

    /// Reads exactly `buf.len()` bytes into `buf`, after checking that the
    /// file holds them.
    pub fn read_into(&mut self, buf: &mut [u8], what: Field<'_>) -> Result<()> {
        self.need(buf.len() as u64, what)?;
        self.fill(buf, what)
    }

    pub fn skip(&mut self, n: u64, what: Field<'_>) -> Result<()> {
        self.need(n, what)?;
        let stream = match &mut self.inner {
            Input::Bytes(_) => {
                self.pos += n;
                return Ok(());
            }
            Input::Stream(stream) => stream,
        };
        let copied = io::copy(&mut stream.take(n), &mut io::sink()).map_err(|e| FormatError::io(self.path, e))?;
        self.pos += copied;
        if copied != n {
            return Err(self.error(ErrorKind::Truncated { what: what.to_string(), needed: n - copied, available: 0 }));
        }
        Ok(())
    }

    fn fill(&mut self, buf: &mut [u8], what: Field<'_>) -> Result<()> {
        let stream = match &mut self.inner {
            Input::Bytes(bytes) => {
                let available = bytes.len().saturating_sub(self.pos as usize);
                let Some(src) = bytes.get(self.pos as usize..).and_then(|rest| rest.get(..buf.len())) else {
                    let needed = buf.len() as u64;
                    return Err(self.error(ErrorKind::Truncated {
                        what: what.to_string(),
                        needed,
                        available: available as u64,
                    }));
                };
                buf.copy_from_slice(src);
                self.pos += buf.len() as u64;
                return Ok(());
            }
            Input::Stream(stream) => stream,
        };
        match stream.read_exact(buf) {
            Ok(()) => {
                self.pos += buf.len() as u64;
                Ok(())
            }
            // The file shrank after we took its length.
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                Err(self.error(ErrorKind::Truncated { what: what.to_string(), needed: buf.len() as u64, available: 0 }))
            }
            Err(e) => Err(FormatError::at(self.path, self.pos, ErrorKind::Io(e))),
        }
    }

    read_num! {
        u8: u8, i8: i8, u16: u16, i16: i16, u32: u32, i32: i32,
        u64: u64, i64: i64, f32: f32, f64: f64,
    }
}
