//! Sealed action entries: a header line binding the bytes to their kind and
//! key, then the bytes as given.
//!
//! ```text
//! quantforge-entry 1 KIND KEY CHECK\n
//! {"blob":"…", …}
//! ```
//!
//! `CHECK` is a derived key over the kind, the key and the payload. It
//! catches a flipped byte, an entry copied to another key's path, and an
//! entry whose fields were swapped with another's. It is a checksum, not a
//! signature: it does not stop someone who writes a new seal on purpose —
//! blobs, checked against their content hash on every read, are what make a
//! forged entry unable to emit bytes other than some real blob's.

use super::{ActionKind, Key, KeyBuilder};

const MAGIC: &str = "quantforge-entry";
const VERSION: u32 = 1;

fn check(kind: ActionKind, key: &Key, payload: &[u8]) -> Key {
    KeyBuilder::new("entry.seal").str(kind.name()).key(key).bytes(payload).finish()
}

pub fn seal(kind: ActionKind, key: &Key, payload: &[u8]) -> Vec<u8> {
    let header = format!("{MAGIC} {VERSION} {} {} {}\n", kind.name(), key.hex(), check(kind, key, payload).hex());
    let mut out = Vec::with_capacity(header.len() + payload.len());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(payload);
    out
}

/// The payload of a sealed entry found under `kind` and `key`, or what is
/// wrong with it.
pub fn unseal<'a>(kind: ActionKind, key: &Key, sealed: &'a [u8]) -> Result<&'a [u8], &'static str> {
    let newline = sealed.iter().position(|&b| b == b'\n').ok_or("not a sealed entry")?;
    let header = std::str::from_utf8(&sealed[..newline]).map_err(|_| "not a sealed entry")?;
    let payload = &sealed[newline + 1..];
    let fields: Vec<&str> = header.split(' ').collect();
    let [magic, version, found_kind, found_key, found_check] = fields[..] else { return Err("not a sealed entry") };
    if magic != MAGIC || version != VERSION.to_string() {
        return Err("not a sealed entry of this version");
    }
    if found_kind != kind.name() || Key::from_hex(found_key) != Some(*key) {
        return Err("an entry of another key");
    }
    if Key::from_hex(found_check) != Some(check(kind, key, payload)) {
        return Err("altered (its checksum does not match)");
    }
    Ok(payload)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_every_alteration() {
        let key = Key::of_bytes(b"k");
        let sealed = seal(ActionKind::Tensor, &key, b"{\"blob\":1}");
        assert_eq!(unseal(ActionKind::Tensor, &key, &sealed), Ok(&b"{\"blob\":1}"[..]));
        assert_eq!(unseal(ActionKind::Node, &key, &sealed), Err("an entry of another key"));
        assert_eq!(unseal(ActionKind::Tensor, &Key::of_bytes(b"j"), &sealed), Err("an entry of another key"));
        for i in 0..sealed.len() {
            let mut flipped = sealed.clone();
            flipped[i] ^= 0x01;
            assert!(unseal(ActionKind::Tensor, &key, &flipped).is_err(), "flip at {i} passed");
        }
        assert_eq!(unseal(ActionKind::Tensor, &key, b"{\"blob\":1}"), Err("not a sealed entry"));
    }
}
