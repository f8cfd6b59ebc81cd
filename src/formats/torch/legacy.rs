//! The format `torch.save` wrote before PyTorch 1.6 (and still writes with
//! `_use_new_zipfile_serialization=False`): five pickles one after another
//! — a magic number, the protocol version (1001), `sys_info` (byte order and
//! type sizes), the object, and the list of storage keys — then each storage
//! in that list's order as a little-endian u64 element count followed by its
//! elements. A storage's element size comes from the class the object's
//! pickle names it with, so the storages are found after the object is read.

use std::collections::HashMap;
use std::path::Path;

use super::super::error::{ErrorKind, FormatError, Result};
use super::super::source::Source;
use super::archive::{Archive, StorageRecord};
use super::pickle::{self, Object, Pickle};
use super::state::{is_allowed_global, storage_element_sizes};

/// The first bytes of a legacy file: protocol 2, then the magic number
/// 0x1950a86a20f9469cfc6c as a 10-byte LONG1.
pub const MAGIC: [u8; 14] = *b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19";

const PROTOCOL_VERSION: i64 = 1001;

pub(super) fn read(source: &Source) -> Result<Archive> {
    let path = source.path();
    let mut offset = 0;
    let mut next = |allowed: &dyn Fn(&str, &str) -> bool| -> Result<(Pickle, Vec<u8>, u64)> {
        let (pickle, bytes) = pickle_at(source, offset, allowed)?;
        let at = offset;
        offset += pickle.len as u64;
        Ok((pickle, bytes, at))
    };
    let nothing = |_: &str, _: &str| false;
    next(&nothing)?;
    let (version, _, at) = next(&nothing)?;
    match version.get(version.root) {
        Object::Int(PROTOCOL_VERSION) => {}
        Object::Int(other) => {
            return Err(invalid(path, at, format!("a legacy checkpoint of protocol {other}, not {PROTOCOL_VERSION}")));
        }
        other => {
            let kind = pickle::kind(other);
            return Err(invalid(
                path,
                at,
                format!("a legacy checkpoint whose protocol is {kind}, not {PROTOCOL_VERSION}"),
            ));
        }
    }
    let (sys_info, _, at) = next(&nothing)?;
    let little_endian = match sys_info.get(sys_info.root) {
        Object::Dict(entries) => entries.iter().find_map(|&(k, v)| match (sys_info.get(k), sys_info.get(v)) {
            (Object::Str(k), Object::Bool(little)) if k == "little_endian" => Some(*little),
            _ => None,
        }),
        _ => None,
    };
    if little_endian != Some(true) {
        return Err(invalid(
            path,
            at,
            "a legacy checkpoint that is not little-endian; only little-endian ones are read".into(),
        ));
    }
    let (object, object_bytes, object_at) = next(&is_allowed_global)?;
    let (keys, _, keys_at) = next(&nothing)?;
    let sizes = storage_element_sizes(&object).map_err(|(at, message)| invalid(path, object_at + at, message))?;

    let Object::List(key_ids) = keys.get(keys.root) else {
        return Err(invalid(path, keys_at, "the storage keys are not a list".into()));
    };
    let mut storages = HashMap::new();
    let mut at = offset;
    for &id in key_ids {
        let Object::Str(key) = keys.get(id) else {
            return Err(invalid(path, keys_at + keys.offset(id), "a storage key that is not a string".into()));
        };
        let Some(&size) = sizes.get(key) else {
            return Err(invalid(
                path,
                at,
                format!("storage `{key}` is stored but no tensor names it, so its size is unknown"),
            ));
        };
        let count = source.read_range(at, 8)?;
        let count = u64::from_le_bytes(count[..].try_into().expect("8 bytes read"));
        let len = count.checked_mul(size).filter(|&len| len <= source.len() - (at + 8));
        let Some(len) = len else {
            return Err(invalid(
                path,
                at,
                format!("storage `{key}` declares {count} elements of {size} bytes, past the file's end"),
            ));
        };
        storages.insert(key.clone(), StorageRecord { offset: at + 8, len, stored: true });
        at += 8 + len;
    }
    Ok(Archive { pickle_name: "the object's pickle", pickle: object_bytes, pickle_offset: object_at, storages })
}

/// The pickle starting at `offset`, read from the map in place or, without
/// one, from a window that grows until the pickle fits.
fn pickle_at(source: &Source, offset: u64, allowed: &dyn Fn(&str, &str) -> bool) -> Result<(Pickle, Vec<u8>)> {
    let left = source.len() - offset;
    let mut window = if source.mapped().is_some() { left } else { left.min(1 << 20) };
    loop {
        let bytes = source.read_range(offset, window)?;
        match pickle::parse(&bytes, allowed) {
            Ok(pickle) => {
                let bytes = bytes[..pickle.len].to_vec();
                return Ok((pickle, bytes));
            }
            Err(e) if e.cut_off && window < left => window = left.min(window * 4),
            Err(e) => return Err(invalid(source.path(), offset + e.offset, e.message)),
        }
    }
}

fn invalid(path: &Path, offset: u64, message: String) -> FormatError {
    FormatError::at(path, offset, ErrorKind::Invalid(message))
}
