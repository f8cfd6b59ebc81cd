//! Content hashes of input files, remembered by stat fingerprint, and the
//! sha256 of a content (a lock's digest), remembered by its blake3.
//!
//! Like git's index: a file whose device, inode, size, mtime and ctime are
//! unchanged is taken to hold the bytes it held when it was hashed, so an
//! unchanged multi-GB input costs one `stat`. A file touched without changing
//! its bytes is re-hashed once, gets the same content hash, and so changes no
//! key. A fingerprint is not recorded while the file's mtime is within
//! [`RACY_WINDOW`] of now, since a write in the same clock tick would not
//! change it.

use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, SystemTime};

use super::{ActionKind, Key, KeyBuilder, Store};

const RACY_WINDOW: Duration = Duration::from_secs(2);

/// A file's content hash and whether it had to be read to get it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContentHash {
    pub hash: Key,
    pub rehashed: bool,
    pub len: u64,
    /// The stat fingerprint the file had when it was hashed (or looked up).
    pub stat: Key,
}

/// The identity of a file's current version as `stat` sees it.
pub fn stat_key(meta: &fs::Metadata) -> Key {
    let mut key = KeyBuilder::new("stat");
    key.u64(meta.dev()).u64(meta.ino()).u64(meta.size());
    key.u64(meta.mtime() as u64).u64(meta.mtime_nsec() as u64);
    key.u64(meta.ctime() as u64).u64(meta.ctime_nsec() as u64);
    key.finish()
}

/// Bytes read per step of [`hash_file`]: large enough for blake3 to spread
/// each step over every core, small enough that hashing a 100 GB input
/// holds one buffer, not a mapping of the whole file — and that the buffer
/// is not a run's largest allocation (16 MiB was: a third of a ladder's peak
/// RSS, docs/PERFORMANCE.md).
const HASH_CHUNK: usize = 4 << 20;

/// blake3 of a whole file, read a chunk at a time, each chunk hashed on all
/// cores.
pub fn hash_file(path: &Path) -> std::io::Result<Key> {
    let mut file = crate::files::open_regular(path, crate::files::Symlinks::Follow)?;
    let mut hasher = blake3::Hasher::new();
    let mut buf = vec![0u8; HASH_CHUNK];
    loop {
        let filled = crate::files::read_full(&mut file, &mut buf)?;
        if filled == 0 {
            break;
        }
        hasher.update_rayon(&buf[..filled]);
    }
    Ok(Key(*hasher.finalize().as_bytes()))
}

/// A key for `path`'s current version without reading it: its stat
/// fingerprint. Only for a store that keeps nothing, where a key needs to be
/// unique within one run and never outlives it.
pub fn stat_identity(path: &Path) -> io::Result<ContentHash> {
    let meta = input_metadata(path)?;
    let stat = stat_key(&meta);
    Ok(ContentHash { hash: stat, rehashed: false, len: meta.size(), stat })
}

/// The blake3 of `path`'s bytes, re-hashing only when its stat changed.
/// Errors are the file's: remembering the hash is best effort (a read-only
/// cache hashes again next time).
pub fn content_hash(store: &dyn Store, path: &Path) -> io::Result<ContentHash> {
    content_hash_by(store, path, hash_file)
}

/// [`content_hash`], the file hashed by `hash` when it is read.
fn content_hash_by(
    store: &dyn Store,
    path: &Path,
    hash: impl FnOnce(&Path) -> io::Result<Key>,
) -> io::Result<ContentHash> {
    let meta = input_metadata(path)?;
    let stat = stat_key(&meta);
    if let Some(hash) = store.get_action(ActionKind::Stat, &stat).as_deref().and_then(parse_hex) {
        return Ok(ContentHash { hash, rehashed: false, len: meta.size(), stat });
    }
    let hash = hash(path)?;
    // The file may have changed while it was read: the hash is of its bytes
    // only if its stat is still the one looked up.
    if input_metadata(path).map(|m| stat_key(&m)).ok() != Some(stat) {
        return Err(io::Error::other("changed while it was being hashed"));
    }
    let settled = meta.modified().ok().and_then(|m| SystemTime::now().duration_since(m).ok());
    if settled.is_some_and(|age| age > RACY_WINDOW) {
        let _ = store.put_action(ActionKind::Stat, &stat, hash.hex().as_bytes());
    }
    Ok(ContentHash { hash, rehashed: true, len: meta.size(), stat })
}

/// [`content_hash`], the file's sha256 computed in the same read when it
/// is read at all (and remembered, for a lock to find without reading it).
pub fn content_hash_and_sha256(store: &dyn Store, path: &Path) -> io::Result<ContentHash> {
    content_hash_by(store, path, |path| hash_file_and_sha256(store, path).map(|(hash, _)| hash))
}

/// [`hash_file`] and the file's length, its sha256 computed in the same
/// read and remembered in `store` (for a lock to find without reading it).
pub fn hash_file_and_sha256(store: &dyn Store, path: &Path) -> io::Result<(Key, u64)> {
    let (sha256, blake3, len) = crate::files::sha256_and_blake3_file(path)?;
    remember_sha256(store, &blake3, len, &sha256);
    let hash = Key::from_hex(&blake3).ok_or_else(|| io::Error::other("a blake3 that is not 32 bytes of hex"))?;
    Ok((hash, len))
}

fn sha256_key(blake3: &str, size: u64) -> Key {
    KeyBuilder::new("sha256-of-content").str(blake3).u64(size).finish()
}

/// The sha256 of the content of `size` bytes with blake3 `blake3` (hex), if remembered.
pub fn remembered_sha256(store: &dyn Store, blake3: &str, size: u64) -> Option<String> {
    let bytes = store.get_action(ActionKind::Sha256, &sha256_key(blake3, size))?;
    let text = String::from_utf8(bytes).ok()?;
    Key::from_hex(&text).map(|_| text)
}

/// Remembers the sha256 of the content `(blake3, size)`, for a lock to
/// find without reading the file.
pub fn remember_sha256(store: &dyn Store, blake3: &str, size: u64, sha256: &str) {
    // Best effort: without the entry the next lock reads the file again.
    let _ = store.put_action(ActionKind::Sha256, &sha256_key(blake3, size), sha256.as_bytes());
}

/// A file's content hash with the parts of its stat that every machine
/// mounting the same file system sees alike (the device number is each
/// client's own): what a planner hands the tasks it submits, so that a
/// task takes the hash for as long as the file's stat is the one hashed,
/// exactly as the stat table does, instead of reading the file again.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Pin {
    pub path: std::path::PathBuf,
    pub hash: Key,
    pub len: u64,
    pub ino: u64,
    pub mtime_ns: i128,
    pub ctime_ns: i128,
}

impl Pin {
    /// The pin of `path`, hashed as `hash` while its stat fingerprint was
    /// `stat`; `None` when its stat moved since.
    pub fn of(path: &Path, hash: Key, stat: Key) -> Option<Pin> {
        let meta = input_metadata(path).ok().filter(|m| stat_key(m) == stat)?;
        let (mtime_ns, ctime_ns) = times_ns(&meta);
        Some(Pin { path: path.to_owned(), hash, len: meta.size(), ino: meta.ino(), mtime_ns, ctime_ns })
    }

    /// The content hash of `path` if this pin still describes it.
    pub fn check(&self, path: &Path) -> Option<ContentHash> {
        let meta = input_metadata(path).ok()?;
        let same = path == self.path
            && meta.size() == self.len
            && meta.ino() == self.ino
            && times_ns(&meta) == (self.mtime_ns, self.ctime_ns);
        same.then(|| ContentHash { hash: self.hash, rehashed: false, len: self.len, stat: stat_key(&meta) })
    }
}

fn times_ns(meta: &fs::Metadata) -> (i128, i128) {
    let ns = |secs: i64, nanos: i64| i128::from(secs) * 1_000_000_000 + i128::from(nanos);
    (ns(meta.mtime(), meta.mtime_nsec()), ns(meta.ctime(), meta.ctime_nsec()))
}

fn parse_hex(bytes: &[u8]) -> Option<Key> {
    std::str::from_utf8(bytes).ok().and_then(Key::from_hex)
}

/// An input's metadata, refusing what is not a regular file: a FIFO would
/// block the hash, a device would never end.
fn input_metadata(path: &Path) -> io::Result<fs::Metadata> {
    let meta = fs::metadata(path)?;
    if !meta.is_file() {
        let problem = format!("is {}, not a regular file", crate::files::describe(meta.file_type()));
        return Err(io::Error::new(io::ErrorKind::InvalidInput, problem));
    }
    Ok(meta)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pin_holds_until_the_file_changes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.bin");
        fs::write(&path, b"weights").unwrap();
        let meta = fs::metadata(&path).unwrap();
        let content = ContentHash { hash: hash_file(&path).unwrap(), rehashed: true, len: 7, stat: stat_key(&meta) };
        let pin = Pin::of(&path, content.hash, content.stat).unwrap();
        let json = serde_json::to_string(&pin).unwrap();
        let pin: Pin = serde_json::from_str(&json).unwrap();
        assert_eq!(pin.check(&path).map(|c| c.hash), Some(content.hash));
        assert_eq!(pin.check(&dir.path().join("other.bin")), None, "a pin names one path");

        std::thread::sleep(Duration::from_millis(10));
        fs::write(&path, b"WEIGHTS").unwrap();
        assert_eq!(pin.check(&path), None, "same length, new bytes: the stat moved");
        assert!(Pin::of(&path, content.hash, content.stat).is_none(), "no pin for a stat that is not the hashed one");
    }

    #[test]
    fn a_file_hashed_in_chunks_hashes_as_its_bytes() {
        let dir = tempfile::tempdir().unwrap();
        for len in [0, HASH_CHUNK - 1, HASH_CHUNK, 2 * HASH_CHUNK + 123] {
            let bytes: Vec<u8> = (0..len as u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8).collect();
            let path = dir.path().join(format!("{len}.bin"));
            fs::write(&path, &bytes).unwrap();
            assert_eq!(hash_file(&path).unwrap(), Key::of_bytes(&bytes), "{len} bytes");
        }
    }
}
