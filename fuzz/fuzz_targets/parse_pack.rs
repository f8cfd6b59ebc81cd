//! Feeds arbitrary bytes to the ladder-pack reader as a whole pack (the
//! magic forced at both ends, the manifest's length at its place when the
//! input is long enough). Nothing may panic, and a manifest that reads must
//! keep every blob inside the blob area and every file's pieces adding up
//! to its size.

#![no_main]

use libfuzzer_sys::fuzz_target;
use quantforge::formats::pack::{self, Piece};

fuzz_target!(|data: &[u8]| {
    let mut bytes = pack::MAGIC.to_vec();
    bytes.extend_from_slice(data);
    bytes.extend_from_slice(pack::MAGIC);
    let Ok(manifest) = pack::manifest_of(&bytes) else { return };
    let blobs_end = bytes.len() as u64 - 16;
    let inside = |b: &pack::Blob| b.offset >= 8 && b.offset + b.length <= blobs_end;
    assert!(inside(&manifest.base.blob));
    for file in &manifest.files {
        if !file.pieces.is_empty() {
            assert_eq!(file.pieces.iter().map(Piece::length).sum::<u64>(), file.size);
        }
        for piece in &file.pieces {
            if let Piece::Stored { blob, .. } = piece {
                assert!(inside(blob));
            }
        }
    }
});
