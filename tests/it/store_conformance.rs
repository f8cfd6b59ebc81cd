//! One conformance suite for every store the engine runs on: `LocalStore`,
//! `MemoryStore`, and `Layered` over a `file://` remote each keep the
//! `BlobStore` and `ActionCache` contracts — blobs named by their blake3,
//! ranges and copies checked, a misfit copy refused before a byte lands,
//! corrupt and missing blobs reported as recoverable, action entries that
//! come back as they were put, replaced, or kept when put only if absent.

use std::io::{Read, Seek, SeekFrom, Write};
use std::sync::Arc;

use quantforge::key::Key;
use quantforge::store::remote::{Layered, RemoteMode, RemoteUrl};
use quantforge::store::{ActionKind, LocalStore, MemoryStore, Store, StoreError};

/// A store under test, with its way to damage a stored blob in place.
struct Subject {
    name: &'static str,
    store: Arc<dyn Store>,
    corrupt: Box<dyn Fn(&Key)>,
    /// Whether the store holds a second copy it may heal a damaged blob from.
    second_copy: bool,
    _dirs: Vec<tempfile::TempDir>,
}

/// Overwrites the first byte of a blob file under a local store's root.
fn corrupt_file_under(root: std::path::PathBuf) -> Box<dyn Fn(&Key)> {
    Box::new(move |hash: &Key| {
        let name = hash.hex();
        let path = walkdir(&root.join("blobs")).into_iter().find(|p| p.to_string_lossy().contains(&name[2..]));
        let path = path.expect("the blob's file is under the store");
        let mut file = std::fs::OpenOptions::new().read(true).write(true).open(path).unwrap();
        let mut first = [0u8];
        file.read_exact(&mut first).unwrap();
        file.seek(SeekFrom::Start(0)).unwrap();
        file.write_all(&[first[0] ^ 0xff]).unwrap();
        // As any later write does; within one tick of the kernel's coarse
        // clock the write alone may leave the mtime where it was.
        let later = file.metadata().unwrap().modified().unwrap() + std::time::Duration::from_secs(1);
        file.set_modified(later).unwrap();
    })
}

fn walkdir(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        match path.is_dir() {
            true => files.extend(walkdir(&path)),
            false => files.push(path),
        }
    }
    files
}

fn subjects() -> Vec<Subject> {
    let local_dir = tempfile::tempdir().unwrap();
    let local = Subject {
        name: "LocalStore",
        store: Arc::new(LocalStore::open(local_dir.path()).unwrap()),
        corrupt: corrupt_file_under(local_dir.path().to_owned()),
        second_copy: false,
        _dirs: vec![local_dir],
    };

    let memory = Arc::new(MemoryStore::new());
    let damaged = memory.clone();
    let memory = Subject {
        name: "MemoryStore",
        store: memory,
        corrupt: Box::new(move |hash: &Key| damaged.corrupt_blob(hash, b"not what it was")),
        second_copy: false,
        _dirs: Vec::new(),
    };

    let (near, far) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let url = RemoteUrl::parse(&format!("file://{}", far.path().display())).unwrap();
    let layered = Layered::open(LocalStore::open(near.path()).unwrap(), &url, RemoteMode::Required).unwrap();
    let layered = Subject {
        name: "Layered over file://",
        store: Arc::new(layered),
        corrupt: corrupt_file_under(near.path().to_owned()),
        second_copy: true,
        _dirs: vec![near, far],
    };
    vec![local, memory, layered]
}

fn for_each_store(check: impl Fn(&Subject)) {
    for subject in subjects() {
        eprintln!("store: {}", subject.name);
        check(&subject);
    }
}

#[test]
fn blobs_are_named_by_their_blake3_and_read_back_whole_or_in_ranges() {
    for_each_store(|s| {
        let bytes: Vec<u8> = (0..5000u32).map(|i| (i * 7 % 251) as u8).collect();
        let hash = s.store.put_blob(&bytes).unwrap();
        assert_eq!(hash, Key::of_bytes(&bytes), "{}", s.name);
        assert_eq!(s.store.put_blob(&bytes).unwrap(), hash, "{}: the same bytes, the same name", s.name);
        assert!(s.store.has_blob(&hash) && s.store.has_blobs(&[hash, hash]), "{}", s.name);
        assert_eq!(s.store.read_blob(&hash).unwrap(), bytes, "{}", s.name);
        assert_eq!(s.store.read_blob_range(&hash, 1000, 24).unwrap(), &bytes[1000..1024], "{}", s.name);
        assert_eq!(s.store.read_blob(&s.store.put_blob(b"").unwrap()).unwrap(), b"", "{}: the empty blob", s.name);
    });
}

#[test]
fn a_blob_written_in_pieces_is_the_blob_put_whole() {
    for_each_store(|s| {
        let bytes: Vec<u8> = (0..70_000u32).map(|i| (i % 253) as u8).collect();
        let Some(mut writer) = s.store.blob_writer().unwrap() else { panic!("{}: keeps encoded tensors", s.name) };
        for piece in bytes.chunks(4096) {
            writer.write_all(piece).unwrap();
        }
        let (hash, len) = writer.commit().unwrap();
        assert_eq!((hash, len), (Key::of_bytes(&bytes), bytes.len() as u64), "{}", s.name);
        assert_eq!(s.store.read_blob(&hash).unwrap(), bytes, "{}", s.name);
    });
}

#[test]
fn copies_land_at_their_offset_and_a_misfit_is_refused_before_a_byte() {
    for_each_store(|s| {
        let bytes = b"eight by".repeat(64);
        let hash = s.store.put_blob(&bytes).unwrap();
        let out = tempfile::tempfile().unwrap();
        out.set_len(1024).unwrap();
        s.store.copy_blob_into(&hash, bytes.len() as u64, &out, 100).unwrap();
        let mut written = Vec::new();
        (&out).seek(SeekFrom::Start(0)).unwrap();
        (&out).read_to_end(&mut written).unwrap();
        assert_eq!(&written[100..100 + bytes.len()], &bytes[..], "{}", s.name);
        assert!(written[..100].iter().all(|&b| b == 0), "{}", s.name);

        let untouched = tempfile::tempfile().unwrap();
        let err = s.store.copy_blob_into(&hash, bytes.len() as u64 + 1, &untouched, 0).unwrap_err();
        assert!(matches!(err, StoreError::Misfit { .. }) && err.is_recoverable(), "{}: {err}", s.name);
        assert_eq!(untouched.metadata().unwrap().len(), 0, "{}: nothing written", s.name);
    });
}

#[test]
fn missing_and_corrupt_blobs_are_recoverable_errors() {
    for_each_store(|s| {
        let absent = Key::of_bytes(b"never stored");
        assert!(!s.store.has_blob(&absent), "{}", s.name);
        let err = s.store.read_blob(&absent).unwrap_err();
        assert!(err.is_recoverable(), "{}: {err}", s.name);

        let hash = s.store.put_blob(b"a blob to damage").unwrap();
        (s.corrupt)(&hash);
        // Never the damaged bytes: an error to recover from, or (from a
        // store with a second copy) the blob itself.
        match s.store.read_blob(&hash) {
            Ok(bytes) => assert!(s.second_copy && bytes == b"a blob to damage", "{}: served damaged bytes", s.name),
            Err(err) => assert!(matches!(err, StoreError::Corrupt { .. }) && err.is_recoverable(), "{}: {err}", s.name),
        }
        // A damaged blob is put again whole under its name.
        s.store.put_blob(b"a blob to damage").unwrap();
        assert_eq!(s.store.read_blob(&hash).unwrap(), b"a blob to damage", "{}", s.name);
    });
}

#[test]
fn a_blob_this_process_wrote_is_checked_again_once_its_file_changes() {
    for_each_store(|s| {
        let bytes = b"written here".repeat(100);
        let Some(mut writer) = s.store.blob_writer().unwrap() else { panic!("{}: keeps encoded tensors", s.name) };
        writer.write_all(&bytes).unwrap();
        let (hash, len) = writer.commit().unwrap();
        let out = tempfile::tempfile().unwrap();
        s.store.copy_blob_into(&hash, len, &out, 0).unwrap();

        (s.corrupt)(&hash);
        let out = tempfile::tempfile().unwrap();
        match s.store.copy_blob_into(&hash, len, &out, 0) {
            Ok(()) => {
                let mut copied = Vec::new();
                (&out).read_to_end(&mut copied).unwrap();
                assert!(s.second_copy && copied == bytes, "{}: copied damaged bytes", s.name);
            }
            Err(err) => assert!(matches!(err, StoreError::Corrupt { .. }) && err.is_recoverable(), "{}: {err}", s.name),
        }
    });
}

#[test]
fn action_entries_come_back_as_put_replaced_or_kept() {
    for_each_store(|s| {
        let key = Key::of_bytes(b"an action");
        let kind = ActionKind::Node;
        assert_eq!(s.store.get_action(kind, &key), None, "{}", s.name);
        s.store.put_action(kind, &key, b"first").unwrap();
        assert_eq!(s.store.get_action(kind, &key).as_deref(), Some(&b"first"[..]), "{}", s.name);
        assert_eq!(s.store.get_action(ActionKind::Export, &key), None, "{}: kinds are apart", s.name);
        s.store.put_action(kind, &key, b"second").unwrap();
        assert_eq!(s.store.get_action(kind, &key).as_deref(), Some(&b"second"[..]), "{}: replaced", s.name);
        assert!(!s.store.put_action_if_absent(kind, &key, b"third").unwrap(), "{}", s.name);
        assert_eq!(s.store.get_action(kind, &key).as_deref(), Some(&b"second"[..]), "{}: kept", s.name);
        let other = Key::of_bytes(b"another action");
        assert!(s.store.put_action_if_absent(kind, &other, b"new").unwrap(), "{}", s.name);
        s.store.touch_action(kind, &key);
        let mut listed: Vec<Key> = s.store.list_actions(kind).unwrap().into_iter().map(|(k, _)| k).collect();
        listed.sort_by_key(Key::hex);
        let mut expected = vec![key, other];
        expected.sort_by_key(Key::hex);
        assert_eq!(listed, expected, "{}", s.name);
    });
}
