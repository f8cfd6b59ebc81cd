//! Cache keys: blake3 over a domain-separated, length-prefixed encoding.
//!
//! Every key starts with the key-scheme version, so changing how keys are
//! built invalidates every old entry instead of colliding with it. Content
//! hashes of files and blobs are plain blake3 of the bytes (what `b3sum`
//! prints); only derived keys go through [`KeyBuilder`].

use std::fmt;

/// Version of the key scheme: bump when any key's encoding changes.
pub const KEY_SCHEME_VERSION: u32 = 2;

/// A 32-byte blake3 hash: a content hash or a derived key.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key(pub [u8; 32]);

impl Key {
    pub fn of_bytes(bytes: &[u8]) -> Key {
        Key(*blake3::hash(bytes).as_bytes())
    }

    pub fn hex(&self) -> String {
        blake3::Hash::from_bytes(self.0).to_hex().to_string()
    }

    pub fn from_hex(text: &str) -> Option<Key> {
        blake3::Hash::from_hex(text.trim()).ok().map(|h| Key(*h.as_bytes()))
    }

    /// The first hex digits, for reports.
    pub fn short(&self) -> String {
        self.hex()[..12].to_owned()
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key({})", self.short())
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.hex())
    }
}

impl serde::Serialize for Key {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.hex())
    }
}

impl schemars::JsonSchema for Key {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Key".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({ "type": "string", "pattern": "^[0-9a-f]{64}$" })
    }
}

impl<'de> serde::Deserialize<'de> for Key {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Key, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Key::from_hex(&text).ok_or_else(|| serde::de::Error::custom(format!("`{text}` is not a blake3 hash")))
    }
}

/// Builds a derived key. Every field is length-prefixed or fixed-size, so
/// two different field sequences cannot encode to the same bytes.
pub struct KeyBuilder(blake3::Hasher);

impl KeyBuilder {
    /// A key of kind `domain` (e.g. `"node"`, `"tensor.convert"`).
    pub fn new(domain: &str) -> KeyBuilder {
        let mut builder = KeyBuilder(blake3::Hasher::new());
        builder.str("quantforge").u64(u64::from(KEY_SCHEME_VERSION)).str(domain);
        builder
    }

    pub fn str(&mut self, s: &str) -> &mut KeyBuilder {
        self.bytes(s.as_bytes())
    }

    pub fn bytes(&mut self, b: &[u8]) -> &mut KeyBuilder {
        self.u64(b.len() as u64);
        self.0.update(b);
        self
    }

    pub fn u64(&mut self, v: u64) -> &mut KeyBuilder {
        self.0.update(&v.to_le_bytes());
        self
    }

    pub fn key(&mut self, k: &Key) -> &mut KeyBuilder {
        self.0.update(&k.0);
        self
    }

    pub fn finish(&self) -> Key {
        Key(*self.0.finalize().as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_do_not_run_together() {
        let a = KeyBuilder::new("t").str("ab").str("c").finish();
        let b = KeyBuilder::new("t").str("a").str("bc").finish();
        assert_ne!(a, b);
        assert_ne!(KeyBuilder::new("t").finish(), KeyBuilder::new("u").finish());
    }

    #[test]
    fn hex_round_trips() {
        let k = Key::of_bytes(b"quantforge");
        assert_eq!(Key::from_hex(&k.hex()), Some(k));
        assert_eq!(k.hex(), blake3::hash(b"quantforge").to_hex().as_str());
    }
}
