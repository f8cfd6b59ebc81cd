//! Protobuf's wire format over a [`ByteReader`]: tags, varints, fixed-width
//! numbers and length-delimited fields, each message read up to the end its
//! length declares. Our own reader, not a generated one: a tensor's
//! `raw_data` must be known by its offset in the file (mapped in place, or
//! skipped when the file is streamed), not copied into memory, and every
//! error names the byte it is about.

use super::super::bytes::{ByteReader, Field};
use super::super::error::{ErrorKind, FormatError, Result};

/// How a field's value is encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum WireType {
    Varint,
    Fixed64,
    /// Strings, bytes, sub-messages and packed repeated numbers.
    Delimited,
    Fixed32,
}

pub(super) struct Wire<'r, 'a> {
    pub r: &'r mut ByteReader<'a>,
}

impl<'a> Wire<'_, 'a> {
    pub fn pos(&self) -> u64 {
        self.r.pos()
    }

    pub fn error(&self, at: u64, message: String) -> FormatError {
        self.r.error_at(at, ErrorKind::Invalid(message))
    }

    pub fn varint(&mut self) -> Result<u64> {
        let at = self.pos();
        let mut value = 0u64;
        for shift in (0..70).step_by(7) {
            let byte = self.r.u8(Field::Static("a varint"))?;
            value |= u64::from(byte & 0x7f).checked_shl(shift).unwrap_or(0);
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(self.error(at, "a varint longer than 10 bytes".into()))
    }

    /// Reads the fields of a message that ends at `end`, calling `field` for
    /// each with its number and wire type; `field` reads or skips the value.
    pub fn message(
        &mut self,
        end: u64,
        what: &str,
        mut field: impl FnMut(&mut Self, u32, WireType) -> Result<()>,
    ) -> Result<()> {
        while self.pos() < end {
            let at = self.pos();
            let key = self.varint()?;
            let number = u32::try_from(key >> 3).ok().filter(|&n| n > 0);
            let wire = match key & 7 {
                0 => WireType::Varint,
                1 => WireType::Fixed64,
                2 => WireType::Delimited,
                5 => WireType::Fixed32,
                other => return Err(self.error(at, format!("{what}: wire type {other} (groups are not read)"))),
            };
            let Some(number) = number else {
                return Err(self.error(at, format!("{what}: field number {}", key >> 3)));
            };
            field(self, number, wire)?;
            if self.pos() > end {
                return Err(self.error(at, format!("{what}: field {number} runs past the message's end at byte {end}")));
            }
        }
        Ok(())
    }

    /// The end of a length-delimited value starting here, checked to lie
    /// within `end`.
    pub fn delimited_end(&mut self, end: u64, what: &str) -> Result<u64> {
        let at = self.pos();
        let len = self.varint()?;
        let start = self.pos();
        match start.checked_add(len).filter(|&stop| stop <= end) {
            Some(stop) => Ok(stop),
            None => {
                Err(self
                    .error(at, format!("{what} declares {len} bytes; its message has {}", end.saturating_sub(start))))
            }
        }
    }

    pub fn expect(&self, wire: WireType, expected: WireType, what: &str) -> Result<()> {
        if wire == expected {
            return Ok(());
        }
        Err(self.error(self.pos(), format!("{what} has wire type {wire:?}, not {expected:?}")))
    }

    pub fn string(&mut self, wire: WireType, end: u64, what: &str) -> Result<String> {
        self.expect(wire, WireType::Delimited, what)?;
        let at = self.pos();
        let stop = self.delimited_end(end, what)?;
        let bytes = self.r.bytes(stop - self.pos(), Field::Value(what))?;
        String::from_utf8(bytes).map_err(|_| self.error(at, format!("{what} is not UTF-8")))
    }

    pub fn int(&mut self, wire: WireType, what: &str) -> Result<i64> {
        self.expect(wire, WireType::Varint, what)?;
        Ok(self.varint()? as i64)
    }

    /// Skips to `stop`, a checked end of the value being read.
    pub fn skip_to(&mut self, stop: u64) -> Result<()> {
        self.r.skip(stop - self.pos(), Field::Static("a field"))
    }

    pub fn skip(&mut self, wire: WireType, end: u64) -> Result<()> {
        match wire {
            WireType::Varint => self.varint().map(drop),
            WireType::Fixed64 => self.r.skip(8, Field::Static("a fixed64")),
            WireType::Fixed32 => self.r.skip(4, Field::Static("a fixed32")),
            WireType::Delimited => {
                let stop = self.delimited_end(end, "a field")?;
                self.skip_to(stop)
            }
        }
    }

    /// A repeated varint field, packed or not, appended to `into`.
    pub fn varints(&mut self, wire: WireType, end: u64, what: &str, into: &mut Vec<u64>) -> Result<()> {
        if wire == WireType::Varint {
            into.push(self.varint()?);
            return Ok(());
        }
        self.expect(wire, WireType::Delimited, what)?;
        let stop = self.delimited_end(end, what)?;
        while self.pos() < stop {
            into.push(self.varint()?);
        }
        if self.pos() != stop {
            return Err(self.error(stop, format!("{what}: a varint runs past its packed field")));
        }
        Ok(())
    }

    /// A repeated fixed-width field (`WIDTH` bytes each), packed or not, its
    /// little-endian bytes appended to `into`.
    pub fn fixed<const WIDTH: u64>(&mut self, wire: WireType, end: u64, what: &str, into: &mut Vec<u8>) -> Result<()> {
        let single = if WIDTH == 4 { WireType::Fixed32 } else { WireType::Fixed64 };
        let len = if wire == single {
            WIDTH
        } else {
            self.expect(wire, WireType::Delimited, what)?;
            let at = self.pos();
            let stop = self.delimited_end(end, what)?;
            let len = stop - self.pos();
            if !len.is_multiple_of(WIDTH) {
                return Err(self.error(at, format!("{what}: {len} bytes, not a whole number of {WIDTH}-byte values")));
            }
            len
        };
        into.extend(self.r.bytes(len, Field::Value(what))?);
        Ok(())
    }
}
