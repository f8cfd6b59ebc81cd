//! Where the exports prepared ahead of their turn want each conversion, so
//! a tensor encoded by one export is written straight into every other
//! export that holds it (a ladder's siblings and shared tensors), once,
//! rather than into a blob those exports copy again (issue 44).
//!
//! An export registers its files and each encoded tensor's offset before it
//! waits for a worker slot. An encoder writes its tensor to every open
//! place and marks them written under the bytes' blake3; the export finds
//! its tensor placed and, once its files are committed, records each as a
//! range of them in the cache. A place whose export never commits takes
//! its bytes with it: an interrupted run keeps the tensors of the exports
//! it finished and of blobs, not those still in temporary files.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::sync::{Arc, Mutex};

use crate::key::Key;

/// A place in an output file: the file (device and inode, which a rename
/// keeps) and an offset in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Place {
    file: (u64, u64),
    pub offset: u64,
}

impl Place {
    /// `offset` in `file`; `None` when the file cannot be asked what it is.
    pub fn of(file: &File, offset: u64) -> Option<Place> {
        let meta = file.metadata().ok()?;
        Some(Place { file: (meta.dev(), meta.ino()), offset })
    }

    /// `offset` in the same file.
    pub fn at(self, offset: u64) -> Place {
        Place { offset, ..self }
    }
}

/// The blake3 of each tensor encoders put into an export's files, by the
/// tensor's key and its place.
pub type Filled = HashMap<(Key, Place), Key>;

/// The places of the run's prepared exports, by tensor key.
#[derive(Default)]
pub struct Destinations {
    by_key: Mutex<HashMap<Key, Vec<Destination>>>,
}

struct Destination {
    /// The export node whose file this is.
    export: usize,
    file: Arc<File>,
    place: Place,
    /// The blake3 of the bytes an encoder put here.
    written: Option<Key>,
}

/// One place an encoder writes a tensor's bytes to.
pub(super) struct Open {
    pub(super) place: Place,
    pub(super) file: Arc<File>,
    /// Where the next byte goes.
    pub(super) offset: u64,
}

impl Destinations {
    /// Registers export `export`'s `file` as where the tensors keyed
    /// `placed` go, each at its offset.
    pub fn register(&self, export: usize, file: &Arc<File>, placed: impl IntoIterator<Item = (Key, u64)>) {
        let Some(origin) = Place::of(file, 0) else { return };
        let mut by_key = self.by_key.lock().unwrap_or_else(|e| e.into_inner());
        for (key, offset) in placed {
            let (file, place) = (Arc::clone(file), origin.at(offset));
            by_key.entry(key).or_default().push(Destination { export, file, place, written: None });
        }
    }

    /// The places of `key` no encoder has written yet but `own` (where the
    /// encoder writes itself), and whether `own` is one of them.
    pub(super) fn open(&self, key: &Key, own: Option<Place>) -> (Vec<Open>, bool) {
        let by_key = self.by_key.lock().unwrap_or_else(|e| e.into_inner());
        let mut mine = false;
        let mut open = Vec::new();
        for d in by_key.get(key).into_iter().flatten().filter(|d| d.written.is_none()) {
            match Some(d.place) == own {
                true => mine = true,
                false => open.push(Open { place: d.place, file: Arc::clone(&d.file), offset: d.place.offset }),
            }
        }
        (open, mine)
    }

    /// Marks `places` of `key` as holding bytes whose blake3 is `hash`.
    pub(super) fn mark_written(&self, key: &Key, places: &[Place], hash: Key) {
        let mut by_key = self.by_key.lock().unwrap_or_else(|e| e.into_inner());
        for d in by_key.get_mut(key).into_iter().flatten() {
            if places.contains(&d.place) {
                d.written = Some(hash);
            }
        }
    }

    /// The blake3 of `key`'s bytes an encoder wrote at `place`.
    pub(super) fn written(&self, key: &Key, place: Place) -> Option<Key> {
        let by_key = self.by_key.lock().unwrap_or_else(|e| e.into_inner());
        by_key.get(key)?.iter().find(|d| d.place == place)?.written
    }

    /// Some place holding `key`'s bytes: its file, offset and their blake3.
    pub(super) fn any_written(&self, key: &Key) -> Option<(Arc<File>, u64, Key)> {
        let by_key = self.by_key.lock().unwrap_or_else(|e| e.into_inner());
        let d = by_key.get(key)?.iter().find(|d| d.written.is_some())?;
        Some((Arc::clone(&d.file), d.place.offset, d.written?))
    }

    /// Export `export`'s files are complete: no encoder writes into them
    /// from now on (its places none filled are forgotten). Returns the
    /// places encoders filled, which stay for [`Self::any_written`] to copy
    /// from until the export has recorded them ([`Self::forget`]).
    pub fn complete(&self, export: usize) -> Filled {
        let mut by_key = self.by_key.lock().unwrap_or_else(|e| e.into_inner());
        let mut filled = Filled::new();
        by_key.retain(|key, places| {
            places.retain(|d| match (d.export == export, d.written) {
                (true, Some(hash)) => {
                    filled.insert((*key, d.place), hash);
                    true
                }
                (true, None) => false,
                (false, _) => true,
            });
            !places.is_empty()
        });
        filled
    }

    /// Forgets export `export`'s places: it recorded them, or failed.
    pub fn forget(&self, export: usize) {
        let mut by_key = self.by_key.lock().unwrap_or_else(|e| e.into_inner());
        by_key.retain(|_, places| {
            places.retain(|d| d.export != export);
            !places.is_empty()
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_encoder_sees_the_open_places_but_its_own_and_marks_only_those_it_wrote() {
        let destinations = Destinations::default();
        let (a, b) = (Arc::new(tempfile::tempfile().unwrap()), Arc::new(tempfile::tempfile().unwrap()));
        let (key, other) = (Key([1; 32]), Key([2; 32]));
        destinations.register(0, &a, [(key, 64), (other, 128)]);
        // Another file of the same export, the same offset: another place.
        destinations.register(0, &b, [(key, 64)]);
        destinations.register(1, &b, [(key, 4096)]);
        let place = |file: &File, offset| Place::of(file, offset).unwrap();

        let (open, mine) = destinations.open(&key, Some(place(&a, 64)));
        assert!(mine);
        assert_eq!(open.iter().map(|o| o.place).collect::<Vec<_>>(), [place(&b, 64), place(&b, 4096)]);

        // Export 2 registered after the encoder looked: not written by it.
        destinations.register(2, &a, [(key, 0)]);
        destinations.mark_written(&key, &[place(&a, 64), place(&b, 4096)], Key([9; 32]));
        assert_eq!(destinations.written(&key, place(&b, 4096)), Some(Key([9; 32])));
        assert_eq!(destinations.written(&key, place(&b, 64)), None);
        assert_eq!(destinations.written(&key, place(&a, 0)), None);
        assert_eq!(destinations.written(&other, place(&a, 128)), None);
        let (open, mine) = destinations.open(&key, None);
        assert!(!mine);
        assert_eq!(open.iter().map(|o| o.place).collect::<Vec<_>>(), [place(&b, 64), place(&a, 0)]);

        let filled = destinations.complete(0);
        assert_eq!(filled, Filled::from([((key, place(&a, 64)), Key([9; 32]))]));
        // Its unfilled place is gone, its filled one stays to copy from.
        assert_eq!(destinations.open(&key, None).0.iter().map(|o| o.place).collect::<Vec<_>>(), [place(&a, 0)]);
        assert_eq!(destinations.written(&key, place(&a, 64)), Some(Key([9; 32])));
        destinations.forget(0);
        assert_eq!(destinations.written(&key, place(&a, 64)), None);
        let (file, offset, hash) = destinations.any_written(&key).unwrap();
        assert_eq!((place(&file, offset), hash), (place(&b, 4096), Key([9; 32])));
    }
}
