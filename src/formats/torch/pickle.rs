//! A restricted unpickler: pickle bytes to an inert graph of values. It runs
//! nothing. A global outside the caller's allow-list is refused at the opcode
//! that names it; calls (REDUCE, NEWOBJ) and BUILD are recorded, not made,
//! for the caller to interpret.
//!
//! The graph lives in an arena and objects refer to each other by index, so
//! a memo reference costs nothing however often it is repeated, nesting of any
//! depth drops without recursion, and a cycle (a list appended into itself)
//! is found by whoever walks the graph, which must bound its depth.

use std::collections::HashMap;

/// An object's index in [`Pickle::objects`].
pub type Id = usize;

#[derive(Debug, Clone, PartialEq)]
pub enum Object {
    None,
    Bool(bool),
    Int(i64),
    /// An integer that needs more than 64 bits; nothing a state dict holds.
    BigInt,
    Float(f64),
    Str(String),
    Bytes(Vec<u8>),
    Tuple(Vec<Id>),
    List(Vec<Id>),
    Dict(Vec<(Id, Id)>),
    Set(Vec<Id>),
    Global {
        module: String,
        name: String,
    },
    Call(Call),
    /// A persistent id, for the caller's loader to resolve (PyTorch's storages).
    Persistent(Id),
}

/// `callable(*args)` as REDUCE or NEWOBJ describe it, with what later opcodes
/// add to the result.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub callable: Id,
    pub args: Id,
    /// SETITEM(S) into the result (an `OrderedDict`'s entries).
    pub items: Vec<(Id, Id)>,
    /// APPEND(S) into the result.
    pub appended: Vec<Id>,
    /// BUILD's argument.
    pub state: Option<Id>,
}

/// A parsed pickle: its objects, where each was made, and the one STOP returned.
#[derive(Debug)]
pub struct Pickle {
    /// Bytes read, up to and including STOP: where anything after it starts.
    pub len: usize,
    pub objects: Vec<Object>,
    /// The byte offset of the opcode that made each object.
    pub offsets: Vec<u64>,
    pub root: Id,
}

impl Pickle {
    pub fn get(&self, id: Id) -> &Object {
        &self.objects[id]
    }

    pub fn offset(&self, id: Id) -> u64 {
        self.offsets[id]
    }
}

/// Why a pickle was refused, and at which byte of it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("byte {offset}: {message}")]
pub struct PickleError {
    pub offset: u64,
    pub message: String,
    /// The bytes ended before the pickle did: more of them may parse.
    pub cut_off: bool,
}

/// The highest protocol read (Python 3.8's).
const MAX_PROTOCOL: u8 = 5;

/// Parses `bytes` up to its STOP. `allowed(module, name)` decides which
/// globals may be named at all.
pub fn parse(bytes: &[u8], allowed: &dyn Fn(&str, &str) -> bool) -> Result<Pickle, PickleError> {
    Machine {
        bytes,
        pos: 0,
        op_at: 0,
        objects: Vec::new(),
        offsets: Vec::new(),
        stack: Vec::new(),
        marks: Vec::new(),
        memo: HashMap::new(),
    }
    .run(allowed)
}

struct Machine<'a> {
    bytes: &'a [u8],
    pos: usize,
    /// Where the opcode being run starts.
    op_at: usize,
    objects: Vec<Object>,
    offsets: Vec<u64>,
    stack: Vec<Id>,
    /// Stack heights at each MARK.
    marks: Vec<usize>,
    memo: HashMap<u32, Id>,
}

impl<'a> Machine<'a> {
    fn run(mut self, allowed: &dyn Fn(&str, &str) -> bool) -> Result<Pickle, PickleError> {
        loop {
            self.op_at = self.pos;
            let op = self.u8()?;
            match op {
                0x80 => {
                    let protocol = self.u8()?;
                    if protocol > MAX_PROTOCOL {
                        return Err(self.error(format!("pickle protocol {protocol}; at most {MAX_PROTOCOL} is read")));
                    }
                }
                // FRAME: a length hint for buffered readers; the bytes follow inline.
                0x95 => {
                    self.take(8)?;
                }
                b'.' => {
                    let root = self.pop()?;
                    return Ok(Pickle { len: self.pos, objects: self.objects, offsets: self.offsets, root });
                }
                b'(' => self.marks.push(self.stack.len()),
                b'0' => {
                    self.pop()?;
                }
                b'1' => {
                    self.pop_mark()?;
                }
                b'2' => {
                    let top = *self.stack.last().ok_or_else(|| self.error("DUP on an empty stack".into()))?;
                    self.stack.push(top);
                }
                b'N' => self.push(Object::None),
                0x88 => self.push(Object::Bool(true)),
                0x89 => self.push(Object::Bool(false)),
                b'J' => {
                    let v = i32::from_le_bytes(self.array()?);
                    self.push(Object::Int(v.into()));
                }
                b'K' => {
                    let v = self.u8()?;
                    self.push(Object::Int(v.into()));
                }
                b'M' => {
                    let v = u16::from_le_bytes(self.array()?);
                    self.push(Object::Int(v.into()));
                }
                0x8a => {
                    let n = self.u8()? as usize;
                    self.long(n)?;
                }
                0x8b => {
                    let declared = i32::from_le_bytes(self.array()?) as i64;
                    let n = self.length(declared, "LONG4")?;
                    self.long(n)?;
                }
                b'G' => {
                    let v = f64::from_be_bytes(self.array()?);
                    self.push(Object::Float(v));
                }
                b'X' => {
                    let declared: i64 = u32::from_le_bytes(self.array()?).into();
                    let n = self.length(declared, "BINUNICODE")?;
                    self.unicode(n)?;
                }
                0x8c => {
                    let n = self.u8()? as usize;
                    self.unicode(n)?;
                }
                0x8d => {
                    let declared = u64::from_le_bytes(self.array()?) as i64;
                    let n = self.length(declared, "BINUNICODE8")?;
                    self.unicode(n)?;
                }
                // Python 2 strings, read as Python 3 does by default (ASCII, here Latin-1).
                b'T' => {
                    let declared: i64 = i32::from_le_bytes(self.array()?).into();
                    let n = self.length(declared, "BINSTRING")?;
                    let text = self.take(n)?.iter().map(|&b| char::from(b)).collect();
                    self.push(Object::Str(text));
                }
                b'U' => {
                    let n = self.u8()? as usize;
                    let text = self.take(n)?.iter().map(|&b| char::from(b)).collect();
                    self.push(Object::Str(text));
                }
                b'B' => {
                    let declared: i64 = u32::from_le_bytes(self.array()?).into();
                    let n = self.length(declared, "BINBYTES")?;
                    self.bytes_object(n)?;
                }
                b'C' => {
                    let n = self.u8()? as usize;
                    self.bytes_object(n)?;
                }
                0x8e | 0x96 => {
                    let declared = u64::from_le_bytes(self.array()?) as i64;
                    let n = self.length(declared, "BINBYTES8")?;
                    self.bytes_object(n)?;
                }
                b')' => self.push(Object::Tuple(Vec::new())),
                b't' => {
                    let items = self.pop_mark()?;
                    self.push(Object::Tuple(items));
                }
                0x85..=0x87 => {
                    let n = usize::from(op - 0x84);
                    let items = self.pop_n(n)?;
                    self.push(Object::Tuple(items));
                }
                b']' => self.push(Object::List(Vec::new())),
                b'l' => {
                    let items = self.pop_mark()?;
                    self.push(Object::List(items));
                }
                b'a' => {
                    let item = self.pop()?;
                    self.append(vec![item])?;
                }
                b'e' => {
                    let items = self.pop_mark()?;
                    self.append(items)?;
                }
                b'}' => self.push(Object::Dict(Vec::new())),
                b'd' => {
                    let items = self.pop_mark()?;
                    let pairs = self.pairs(items)?;
                    self.push(Object::Dict(pairs));
                }
                b's' => {
                    let items = self.pop_n(2)?;
                    let pairs = self.pairs(items)?;
                    self.set_items(pairs)?;
                }
                b'u' => {
                    let items = self.pop_mark()?;
                    let pairs = self.pairs(items)?;
                    self.set_items(pairs)?;
                }
                0x8f => self.push(Object::Set(Vec::new())),
                0x90 => {
                    let items = self.pop_mark()?;
                    let target = self.top()?;
                    match &mut self.objects[target] {
                        Object::Set(set) => set.extend(items),
                        other => {
                            let kind = kind(other);
                            return Err(self.error(format!("ADDITEMS into {kind}")));
                        }
                    }
                }
                0x91 => {
                    let items = self.pop_mark()?;
                    self.push(Object::Set(items));
                }
                b'c' => {
                    let module = self.line()?;
                    let name = self.line()?;
                    self.global(module, name, allowed)?;
                }
                0x93 => {
                    let [module, name] = self.pop_n(2)?[..] else { unreachable!("two popped") };
                    let (Object::Str(module), Object::Str(name)) = (&self.objects[module], &self.objects[name]) else {
                        return Err(self.error("STACK_GLOBAL of something other than two strings".into()));
                    };
                    self.global(module.clone(), name.clone(), allowed)?;
                }
                b'R' | 0x81 => {
                    let [callable, args] = self.pop_n(2)?[..] else { unreachable!("two popped") };
                    if !matches!(self.objects[args], Object::Tuple(_)) {
                        let kind = kind(&self.objects[args]);
                        return Err(self.error(format!("a call's arguments are {kind}, not a tuple")));
                    }
                    if !matches!(self.objects[callable], Object::Global { .. }) {
                        let kind = kind(&self.objects[callable]);
                        return Err(self.error(format!("a call of {kind}; only named globals are called")));
                    }
                    self.push(Object::Call(Call {
                        callable,
                        args,
                        items: Vec::new(),
                        appended: Vec::new(),
                        state: None,
                    }));
                }
                b'b' => {
                    let state = self.pop()?;
                    let target = self.top()?;
                    match &mut self.objects[target] {
                        Object::Call(call) if call.state.is_none() => call.state = Some(state),
                        other => {
                            let kind = kind(other);
                            return Err(self.error(format!("BUILD on {kind}")));
                        }
                    }
                }
                b'q' => {
                    let index = self.u8()?.into();
                    self.put(index)?;
                }
                b'r' => {
                    let index = u32::from_le_bytes(self.array()?);
                    self.put(index)?;
                }
                0x94 => {
                    let index = u32::try_from(self.memo.len()).map_err(|_| self.error("memo full".into()))?;
                    self.put(index)?;
                }
                b'h' => {
                    let index = self.u8()?.into();
                    self.get(index)?;
                }
                b'j' => {
                    let index = u32::from_le_bytes(self.array()?);
                    self.get(index)?;
                }
                b'Q' => {
                    let id = self.pop()?;
                    self.push(Object::Persistent(id));
                }
                _ => {
                    return Err(self.error(match opcode_name(op) {
                        Some(name) => format!("opcode {name}, which no state dict uses"),
                        None => format!("unknown opcode 0x{op:02x}"),
                    }));
                }
            }
        }
    }

    fn error(&self, message: String) -> PickleError {
        PickleError { offset: self.op_at as u64, message, cut_off: false }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], PickleError> {
        let end = self.pos.checked_add(n).filter(|&end| end <= self.bytes.len()).ok_or_else(|| PickleError {
            cut_off: true,
            ..self.error(format!("needs {n} bytes, {} are left: the pickle is cut off", self.bytes.len() - self.pos))
        })?;
        let bytes = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(bytes)
    }

    fn u8(&mut self) -> Result<u8, PickleError> {
        Ok(self.take(1)?[0])
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], PickleError> {
        Ok(self.take(N)?.try_into().expect("N bytes taken"))
    }

    /// A declared length, refused before anything is allocated for it when
    /// the rest of the pickle cannot hold it.
    fn length(&self, declared: i64, what: &str) -> Result<usize, PickleError> {
        let left = self.bytes.len() - self.pos;
        usize::try_from(declared)
            .ok()
            .filter(|&n| n <= left)
            .ok_or_else(|| self.error(format!("{what} declares {declared} bytes, but only {left} are left")))
    }

    /// A newline-terminated text argument (GLOBAL's module and name).
    fn line(&mut self) -> Result<String, PickleError> {
        let rest = &self.bytes[self.pos..];
        let n = rest
            .iter()
            .position(|&b| b == b'\n')
            .ok_or_else(|| PickleError { cut_off: true, ..self.error("an unterminated line".into()) })?;
        let text = std::str::from_utf8(&rest[..n]).map_err(|_| self.error("a line that is not UTF-8".into()))?;
        let text = text.to_owned();
        self.pos += n + 1;
        Ok(text)
    }

    fn long(&mut self, n: usize) -> Result<(), PickleError> {
        let bytes = self.take(n)?;
        let object = if n <= 8 {
            // Little-endian two's complement, sign-extended to 64 bits.
            let fill = if bytes.last().is_some_and(|&b| b & 0x80 != 0) { 0xff } else { 0 };
            let mut full = [fill; 8];
            full[..n].copy_from_slice(bytes);
            Object::Int(i64::from_le_bytes(full))
        } else {
            Object::BigInt
        };
        self.push(object);
        Ok(())
    }

    fn unicode(&mut self, n: usize) -> Result<(), PickleError> {
        let bytes = self.take(n)?;
        let text = std::str::from_utf8(bytes).map_err(|_| self.error("a string that is not UTF-8".into()))?;
        let text = text.to_owned();
        self.push(Object::Str(text));
        Ok(())
    }

    fn bytes_object(&mut self, n: usize) -> Result<(), PickleError> {
        let bytes = self.take(n)?.to_vec();
        self.push(Object::Bytes(bytes));
        Ok(())
    }

    fn global(
        &mut self,
        module: String,
        name: String,
        allowed: &dyn Fn(&str, &str) -> bool,
    ) -> Result<(), PickleError> {
        if !allowed(&module, &name) {
            return Err(self.error(format!(
                "global `{module}.{name}` is not one a state dict uses; quantforge never runs code from a pickle"
            )));
        }
        self.push(Object::Global { module, name });
        Ok(())
    }

    fn push(&mut self, object: Object) {
        self.objects.push(object);
        self.offsets.push(self.op_at as u64);
        self.stack.push(self.objects.len() - 1);
    }

    fn floor(&self) -> usize {
        self.marks.last().copied().unwrap_or(0)
    }

    fn pop(&mut self) -> Result<Id, PickleError> {
        if self.stack.len() <= self.floor() {
            return Err(self.error("pops past the stack's bottom or a MARK".into()));
        }
        Ok(self.stack.pop().expect("checked non-empty"))
    }

    fn top(&self) -> Result<Id, PickleError> {
        match self.stack.len() {
            n if n > self.floor() => Ok(self.stack[n - 1]),
            _ => Err(self.error("needs an object below its arguments, and there is none".into())),
        }
    }

    fn pop_n(&mut self, n: usize) -> Result<Vec<Id>, PickleError> {
        if self.stack.len() < self.floor() + n {
            return Err(self.error(format!("needs {n} objects on the stack")));
        }
        Ok(self.stack.split_off(self.stack.len() - n))
    }

    fn pop_mark(&mut self) -> Result<Vec<Id>, PickleError> {
        let mark = self.marks.pop().ok_or_else(|| self.error("no MARK to pop to".into()))?;
        Ok(self.stack.split_off(mark))
    }

    fn pairs(&self, items: Vec<Id>) -> Result<Vec<(Id, Id)>, PickleError> {
        if !items.len().is_multiple_of(2) {
            return Err(self.error(format!("{} items for key/value pairs", items.len())));
        }
        Ok(items.chunks_exact(2).map(|pair| (pair[0], pair[1])).collect())
    }

    fn append(&mut self, items: Vec<Id>) -> Result<(), PickleError> {
        let target = self.top()?;
        match &mut self.objects[target] {
            Object::List(list) => list.extend(items),
            Object::Call(call) => call.appended.extend(items),
            other => {
                let kind = kind(other);
                return Err(self.error(format!("APPEND into {kind}")));
            }
        }
        Ok(())
    }

    fn set_items(&mut self, pairs: Vec<(Id, Id)>) -> Result<(), PickleError> {
        let target = self.top()?;
        match &mut self.objects[target] {
            Object::Dict(dict) => dict.extend(pairs),
            Object::Call(call) => call.items.extend(pairs),
            other => {
                let kind = kind(other);
                return Err(self.error(format!("SETITEM into {kind}")));
            }
        }
        Ok(())
    }

    fn put(&mut self, index: u32) -> Result<(), PickleError> {
        let top = self.top()?;
        self.memo.insert(index, top);
        Ok(())
    }

    fn get(&mut self, index: u32) -> Result<(), PickleError> {
        let id = *self.memo.get(&index).ok_or_else(|| self.error(format!("memo entry {index} was never stored")))?;
        self.stack.push(id);
        Ok(())
    }
}

/// What an object is, for messages.
pub fn kind(object: &Object) -> &'static str {
    match object {
        Object::None => "None",
        Object::Bool(_) => "a bool",
        Object::Int(_) | Object::BigInt => "an int",
        Object::Float(_) => "a float",
        Object::Str(_) => "a string",
        Object::Bytes(_) => "bytes",
        Object::Tuple(_) => "a tuple",
        Object::List(_) => "a list",
        Object::Dict(_) => "a dict",
        Object::Set(_) => "a set",
        Object::Global { .. } => "a global",
        Object::Call(_) => "an object",
        Object::Persistent(_) => "a persistent id",
    }
}

/// The opcodes refused by name: they exist, and state dicts never use them.
fn opcode_name(op: u8) -> Option<&'static str> {
    Some(match op {
        b'i' => "INST",
        b'o' => "OBJ",
        b'I' => "INT",
        b'L' => "LONG",
        b'F' => "FLOAT",
        b'S' => "STRING",
        b'V' => "UNICODE",
        b'p' => "PUT",
        b'g' => "GET",
        b'P' => "PERSID",
        0x82 => "EXT1",
        0x83 => "EXT2",
        0x84 => "EXT4",
        0x92 => "NEWOBJ_EX",
        0x97 => "NEXT_BUFFER",
        0x98 => "READONLY_BUFFER",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn anything(_: &str, _: &str) -> bool {
        true
    }

    #[test]
    fn memo_shares_one_object() {
        // [x, x] where x = (1,): both entries are the same object.
        let pickle = parse(b"\x80\x02]q\x00(K\x01\x85q\x01h\x01e.", &anything).unwrap();
        let Object::List(items) = pickle.get(pickle.root) else { panic!("a list") };
        assert_eq!(items.len(), 2);
        assert_eq!(items[0], items[1]);
    }

    #[test]
    fn refuses_a_global_not_allowed_at_its_offset() {
        let err = parse(b"\x80\x02cos\nsystem\nX\x02\x00\x00\x00lsR.", &|m, _| m == "torch").unwrap_err();
        assert_eq!(err.offset, 2);
        assert!(err.message.contains("`os.system`"), "{err}");
    }

    #[test]
    fn refuses_declared_lengths_past_the_end() {
        let err = parse(b"\x80\x02X\xff\xff\xff\xff.", &anything).unwrap_err();
        assert!(err.message.contains("declares 4294967295 bytes"), "{err}");
        let err = parse(b"\x8d\xff\xff\xff\xff\xff\xff\xff\xff.", &anything).unwrap_err();
        assert!(err.message.contains("declares -1 bytes"), "{err}");
    }

    #[test]
    fn deep_nesting_parses_and_drops() {
        let mut bytes = b"N".to_vec();
        bytes.extend(std::iter::repeat_n(0x85, 1_000_000));
        bytes.push(b'.');
        let pickle = parse(&bytes, &anything).unwrap();
        assert_eq!(pickle.objects.len(), 1_000_001);
    }

    #[test]
    fn longs_sign_extend() {
        let pickle = parse(b"\x8a\x02\xff\x7f.", &anything).unwrap();
        assert_eq!(pickle.get(pickle.root), &Object::Int(0x7fff));
        let pickle = parse(b"\x8a\x01\xff.", &anything).unwrap();
        assert_eq!(pickle.get(pickle.root), &Object::Int(-1));
        let pickle = parse(b"\x8a\x09\0\0\0\0\0\0\0\0\x01.", &anything).unwrap();
        assert_eq!(pickle.get(pickle.root), &Object::BigInt);
    }

    #[test]
    fn stack_errors_are_errors() {
        for bytes in [&b"."[..], b"a.", b"(0.", b"1", b"K", b"\x93.", b"R.", b"h\x05.", b"2."] {
            assert!(parse(bytes, &anything).is_err(), "{bytes:?}");
        }
    }
}
