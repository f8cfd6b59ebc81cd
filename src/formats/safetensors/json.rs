//! A strict pull parser for the JSON of SafeTensors headers and index files.
//!
//! Pull, not a tree: the caller asks for the value it expects next, so an
//! error names the field and the byte where its value starts, and values
//! nobody asked for (unknown fields) are checked and skipped without being
//! stored. Strict the way serde_json, the reference implementation's parser,
//! is: RFC 8259 only (no trailing commas, comments, leading zeros or lone
//! surrogates), and the same nesting limit.

use std::borrow::Cow;
use std::fmt::Display;

use super::super::error::ErrorKind;

/// serde_json's default recursion limit, which the reference reader inherits.
const MAX_DEPTH: usize = 128;

/// A problem at a byte offset of the parsed text.
#[derive(Debug)]
pub struct ParseError {
    pub offset: usize,
    pub kind: ErrorKind,
}

impl ParseError {
    pub fn new(offset: usize, kind: ErrorKind) -> ParseError {
        ParseError { offset, kind }
    }

    fn invalid(offset: usize, message: String) -> ParseError {
        ParseError::new(offset, ErrorKind::Invalid(message))
    }
}

pub type Parsed<T> = Result<T, ParseError>;

pub struct Parser<'a> {
    text: &'a str,
    pos: usize,
    depth: usize,
}

impl<'a> Parser<'a> {
    pub fn new(text: &'a str) -> Parser<'a> {
        Parser { text, pos: 0, depth: 0 }
    }

    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.pos).copied()
    }

    fn skip_whitespace(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    /// The offset where the next value starts.
    pub fn offset(&mut self) -> usize {
        self.skip_whitespace();
        self.pos
    }

    /// The text from the current position on.
    fn rest(&self) -> &'a str {
        self.text.get(self.pos..).unwrap_or_default()
    }

    /// `text[start..end]`. The parser only stops on ASCII bytes, so both
    /// ends are character boundaries; `get` keeps that a non-panicking fact.
    fn slice(&self, start: usize, end: usize) -> &'a str {
        self.text.get(start..end).unwrap_or_default()
    }

    /// What the next value is, for "expected X, found Y" messages.
    fn found(&self) -> String {
        let rest = self.rest();
        let described = match rest.as_bytes().first() {
            None => "the end of the text",
            Some(b'{') => "an object",
            Some(b'[') => "an array",
            Some(b'"') => "a string",
            Some(b'-' | b'0'..=b'9') => "a number",
            _ if rest.starts_with("true") || rest.starts_with("false") => "a boolean",
            _ if rest.starts_with("null") => "null",
            _ => return format!("`{}`", rest.chars().next().unwrap_or_default()),
        };
        described.to_owned()
    }

    fn wrong_type(&self, what: &dyn Display, expected: &str) -> ParseError {
        ParseError::invalid(self.pos, format!("{what} must be {expected}, found {}", self.found()))
    }

    fn syntax(&self, expected: &str) -> ParseError {
        ParseError::invalid(self.pos, format!("invalid JSON: expected {expected}, found {}", self.found()))
    }

    fn expect_byte(&mut self, byte: u8, expected: &str) -> Parsed<()> {
        self.skip_whitespace();
        if self.peek() != Some(byte) {
            return Err(self.syntax(expected));
        }
        self.pos += 1;
        Ok(())
    }

    fn enter(&mut self) -> Parsed<()> {
        if self.depth == MAX_DEPTH {
            return Err(ParseError::invalid(self.pos, format!("JSON nests deeper than {MAX_DEPTH} levels")));
        }
        self.depth += 1;
        Ok(())
    }

    /// Parses an object, calling `member` with each key and its offset; the
    /// callback must consume the member's value.
    pub fn object(
        &mut self,
        what: &dyn Display,
        mut member: impl FnMut(&mut Parser<'a>, Cow<'a, str>, usize) -> Parsed<()>,
    ) -> Parsed<()> {
        self.skip_whitespace();
        if self.peek() != Some(b'{') {
            return Err(self.wrong_type(what, "an object"));
        }
        self.enter()?;
        self.pos += 1;
        self.skip_whitespace();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            self.depth -= 1;
            return Ok(());
        }
        loop {
            self.skip_whitespace();
            if self.peek() != Some(b'"') {
                return Err(self.syntax("a string key"));
            }
            let key_offset = self.pos;
            let key = self.string_literal()?;
            self.expect_byte(b':', "`:` after an object key")?;
            member(self, key, key_offset)?;
            self.skip_whitespace();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    self.depth -= 1;
                    return Ok(());
                }
                _ => return Err(self.syntax("`,` or `}` after an object member")),
            }
        }
    }

    /// Parses an array, calling `element` with each index; the callback must
    /// consume the element.
    pub fn array(
        &mut self,
        what: &dyn Display,
        mut element: impl FnMut(&mut Parser<'a>, usize) -> Parsed<()>,
    ) -> Parsed<()> {
        self.skip_whitespace();
        if self.peek() != Some(b'[') {
            return Err(self.wrong_type(what, "an array"));
        }
        self.enter()?;
        self.pos += 1;
        self.skip_whitespace();
        if self.peek() == Some(b']') {
            self.pos += 1;
            self.depth -= 1;
            return Ok(());
        }
        let mut index = 0;
        loop {
            element(self, index)?;
            index += 1;
            self.skip_whitespace();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    self.depth -= 1;
                    return Ok(());
                }
                _ => return Err(self.syntax("`,` or `]` after an array element")),
            }
        }
    }

    pub fn string(&mut self, what: &dyn Display) -> Parsed<Cow<'a, str>> {
        self.skip_whitespace();
        if self.peek() != Some(b'"') {
            return Err(self.wrong_type(what, "a string"));
        }
        self.string_literal()
    }

    /// A non-negative integer that fits in a `u64`: what serde_json accepts
    /// for the reference's `usize` fields (no sign, fraction or exponent).
    pub fn u64(&mut self, what: &dyn Display) -> Parsed<u64> {
        self.skip_whitespace();
        if !matches!(self.peek(), Some(b'-' | b'0'..=b'9')) {
            return Err(self.wrong_type(what, "a non-negative integer"));
        }
        let start = self.pos;
        self.number_literal()?;
        let literal = self.slice(start, self.pos);
        let digits_only = literal.bytes().all(|b| b.is_ascii_digit());
        match literal.parse::<u64>() {
            Ok(n) if digits_only => Ok(n),
            _ => Err(ParseError::invalid(
                start,
                format!("{what} must be a non-negative integer below 2^64, found {literal}"),
            )),
        }
    }

    /// Consumes `null` if it is the next value.
    /// `null` (no entries) or an object whose keys are unique, each value
    /// read by `value`; a repeated key is an error at its place.
    pub fn unique_entries<T>(
        &mut self,
        what: &dyn Display,
        mut value: impl FnMut(&mut Parser<'a>, &str) -> Parsed<T>,
    ) -> Parsed<Vec<(String, T)>> {
        let mut entries = Vec::new();
        if self.null() {
            return Ok(entries);
        }
        let mut keys = std::collections::HashSet::new();
        self.object(what, |p, key, at| {
            if !keys.insert(key.to_string()) {
                return Err(ParseError::new(at, ErrorKind::DuplicateKey { key: key.into_owned() }));
            }
            let read = value(p, &key)?;
            entries.push((key.into_owned(), read));
            Ok(())
        })?;
        Ok(entries)
    }

    pub fn null(&mut self) -> bool {
        self.skip_whitespace();
        let is_null = self.rest().starts_with("null");
        if is_null {
            self.pos += 4;
        }
        is_null
    }

    /// Checks and skips any one value.
    pub fn skip(&mut self) -> Parsed<()> {
        self.skip_whitespace();
        match self.peek() {
            Some(b'{') => self.object(&"a value", |p, _, _| p.skip()),
            Some(b'[') => self.array(&"a value", |p, _| p.skip()),
            Some(b'"') => self.string_literal().map(drop),
            Some(b'-' | b'0'..=b'9') => self.number_literal(),
            _ => {
                for literal in ["true", "false", "null"] {
                    if self.rest().starts_with(literal) {
                        self.pos += literal.len();
                        return Ok(());
                    }
                }
                Err(self.syntax("a value"))
            }
        }
    }

    /// Skips one value and returns its text as written.
    pub fn raw_value(&mut self) -> Parsed<&'a str> {
        let start = self.offset();
        self.skip()?;
        Ok(self.slice(start, self.pos))
    }

    /// Fails unless only whitespace is left.
    pub fn finish(&mut self) -> Parsed<()> {
        self.skip_whitespace();
        if self.pos != self.text.len() {
            return Err(self.syntax("the end after the top-level value"));
        }
        Ok(())
    }

    fn digits(&mut self) -> usize {
        let start = self.pos;
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.pos += 1;
        }
        self.pos - start
    }

    /// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`
    fn number_literal(&mut self) -> Parsed<()> {
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        match self.peek() {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => {
                self.digits();
            }
            _ => return Err(self.syntax("a digit")),
        }
        if self.peek() == Some(b'.') {
            self.pos += 1;
            if self.digits() == 0 {
                return Err(self.syntax("a digit after the decimal point"));
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.pos += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.pos += 1;
            }
            if self.digits() == 0 {
                return Err(self.syntax("a digit in the exponent"));
            }
        }
        Ok(())
    }

    /// A string starting at the current `"`; borrowed unless it has escapes.
    fn string_literal(&mut self) -> Parsed<Cow<'a, str>> {
        let open = self.pos;
        self.pos += 1;
        let start = self.pos;
        let mut decoded: Option<String> = None;
        loop {
            let run_start = self.pos;
            while let Some(b) = self.peek() {
                if b == b'"' || b == b'\\' || b < 0x20 {
                    break;
                }
                self.pos += 1;
            }
            let run = self.slice(run_start, self.pos);
            if let Some(out) = decoded.as_mut() {
                out.push_str(run);
            }
            match self.peek() {
                Some(b'"') => {
                    self.pos += 1;
                    return Ok(match decoded {
                        Some(out) => Cow::Owned(out),
                        None => Cow::Borrowed(self.slice(start, self.pos - 1)),
                    });
                }
                Some(b'\\') => {
                    let escape_offset = self.pos;
                    self.pos += 1;
                    let ch = self.escape(escape_offset)?;
                    decoded.get_or_insert_with(|| self.slice(start, escape_offset).to_owned()).push(ch);
                }
                Some(_) => {
                    return Err(ParseError::invalid(
                        self.pos,
                        "invalid JSON: a control character (U+0000 to U+001F) inside a string".into(),
                    ));
                }
                None => return Err(ParseError::invalid(open, "invalid JSON: a string is not closed".into())),
            }
        }
    }

    /// The character of the escape after a backslash at `offset`.
    fn escape(&mut self, offset: usize) -> Parsed<char> {
        let Some(b) = self.peek() else {
            return Err(self.syntax("an escape character"));
        };
        self.pos += 1;
        Ok(match b {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => {
                let unit = self.hex4()?;
                let code = match unit {
                    0xd800..=0xdbff => {
                        if !self.rest().starts_with("\\u") {
                            return Err(lone_surrogate(offset));
                        }
                        self.pos += 2;
                        let low = self.hex4()?;
                        if !(0xdc00..=0xdfff).contains(&low) {
                            return Err(lone_surrogate(offset));
                        }
                        0x10000 + ((u32::from(unit) - 0xd800) << 10) + (u32::from(low) - 0xdc00)
                    }
                    0xdc00..=0xdfff => return Err(lone_surrogate(offset)),
                    _ => u32::from(unit),
                };
                char::from_u32(code).ok_or_else(|| lone_surrogate(offset))?
            }
            _ => {
                self.pos -= 1;
                return Err(self.syntax("one of `\"\\/bfnrtu` after a backslash"));
            }
        })
    }

    fn hex4(&mut self) -> Parsed<u16> {
        let digits = self.text.get(self.pos..self.pos + 4).filter(|d| d.bytes().all(|b| b.is_ascii_hexdigit()));
        let Some(value) = digits.and_then(|d| u16::from_str_radix(d, 16).ok()) else {
            return Err(self.syntax("four hex digits after `\\u`"));
        };
        self.pos += 4;
        Ok(value)
    }
}

fn lone_surrogate(offset: usize) -> ParseError {
    ParseError::invalid(offset, "invalid JSON: a `\\u` escape is half of a UTF-16 surrogate pair".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn string(text: &str) -> Result<String, String> {
        let mut p = Parser::new(text);
        let s = p.string(&"s").map_err(|e| format!("{} at {}", e.kind, e.offset))?;
        p.finish().map_err(|e| format!("{} at {}", e.kind, e.offset))?;
        Ok(s.into_owned())
    }

    fn skip(text: &str) -> Result<(), String> {
        let mut p = Parser::new(text);
        p.skip().and_then(|()| p.finish()).map_err(|e| format!("{} at {}", e.kind, e.offset))
    }

    #[test]
    fn strings_decode_every_escape() {
        assert_eq!(string(r#""plain""#).unwrap(), "plain");
        assert_eq!(string(r#""a\"b\\c\/d\be\ff\ng\rh\ti""#).unwrap(), "a\"b\\c/d\u{8}e\u{c}f\ng\rh\ti");
        assert_eq!(string(r#""\u00e9\u20AC\ud83d\ude00""#).unwrap(), "é€😀");
        assert_eq!(string("\"é€😀\"").unwrap(), "é€😀");
        assert_eq!(
            string(r#""\ud83d""#).unwrap_err(),
            "invalid JSON: a `\\u` escape is half of a UTF-16 surrogate pair at 1"
        );
        assert_eq!(
            string(r#""\ude00x""#).unwrap_err(),
            "invalid JSON: a `\\u` escape is half of a UTF-16 surrogate pair at 1"
        );
        assert_eq!(
            string(r#""\ud83d\u0041""#).unwrap_err(),
            "invalid JSON: a `\\u` escape is half of a UTF-16 surrogate pair at 1"
        );
        assert_eq!(
            string(r#""\x""#).unwrap_err(),
            "invalid JSON: expected one of `\"\\/bfnrtu` after a backslash, found `x` at 2"
        );
        assert_eq!(
            string(r#""\u12g4""#).unwrap_err(),
            "invalid JSON: expected four hex digits after `\\u`, found a number at 3"
        );
        assert_eq!(
            string("\"a\nb\"").unwrap_err(),
            "invalid JSON: a control character (U+0000 to U+001F) inside a string at 2"
        );
        assert_eq!(string("\"abc").unwrap_err(), "invalid JSON: a string is not closed at 0");
        assert_eq!(string("7").unwrap_err(), "s must be a string, found a number at 0");
    }

    #[test]
    fn integers_are_plain_non_negative_u64s() {
        let parse = |text: &str| Parser::new(text).u64(&"n").map_err(|e| e.kind.to_string());
        assert_eq!(parse(" 0"), Ok(0));
        assert_eq!(parse("18446744073709551615"), Ok(u64::MAX));
        for bad in ["-1", "-0", "1.0", "1e3", "18446744073709551616"] {
            assert_eq!(parse(bad), Err(format!("n must be a non-negative integer below 2^64, found {bad}")), "{bad}");
        }
        assert_eq!(parse("\"1\""), Err("n must be a non-negative integer, found a string".into()));
    }

    #[test]
    fn skipping_checks_the_grammar() {
        for ok in ["{}", "[]", r#"{"a":[1,-2.5e+3,true,false,null,{"b":"c"}]}"#, " 0 ", "-0.0E-0"] {
            assert_eq!(skip(ok), Ok(()), "{ok}");
        }
        let cases = [
            ("[1,]", "invalid JSON: expected a value, found `]` at 3"),
            (r#"{"a":1,}"#, "invalid JSON: expected a string key, found `}` at 7"),
            ("01", "invalid JSON: expected the end after the top-level value, found a number at 1"),
            ("1.", "invalid JSON: expected a digit after the decimal point, found the end of the text at 2"),
            ("1e", "invalid JSON: expected a digit in the exponent, found the end of the text at 2"),
            ("-", "invalid JSON: expected a digit, found the end of the text at 1"),
            ("tru", "invalid JSON: expected a value, found `t` at 0"),
            (r#"{"a" 1}"#, "invalid JSON: expected `:` after an object key, found a number at 5"),
            ("[1 2]", "invalid JSON: expected `,` or `]` after an array element, found a number at 3"),
            (r#"{"a":1 "b":2}"#, "invalid JSON: expected `,` or `}` after an object member, found a string at 7"),
            ("{} x", "invalid JSON: expected the end after the top-level value, found `x` at 3"),
            ("", "invalid JSON: expected a value, found the end of the text at 0"),
        ];
        for (text, message) in cases {
            assert_eq!(skip(text), Err(message.to_string()), "{text}");
        }
    }

    #[test]
    fn nesting_is_limited_like_serde_json() {
        let ok = format!("{}{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        assert_eq!(skip(&ok), Ok(()));
        let deep = format!("{}{}", "[".repeat(MAX_DEPTH + 1), "]".repeat(MAX_DEPTH + 1));
        assert_eq!(skip(&deep), Err(format!("JSON nests deeper than 128 levels at {MAX_DEPTH}")));
    }

    #[test]
    fn raw_values_keep_their_text() {
        let mut p = Parser::new(r#" {"a": [1, 2] , "b":"x\n"} "#);
        let mut seen = Vec::new();
        p.object(&"top", |p, key, offset| {
            seen.push((key.into_owned(), offset, p.raw_value()?.to_owned()));
            Ok(())
        })
        .unwrap();
        p.finish().unwrap();
        assert_eq!(seen, [("a".into(), 2, "[1, 2]".into()), ("b".into(), 16, r#""x\n""#.into())]);
    }
}
