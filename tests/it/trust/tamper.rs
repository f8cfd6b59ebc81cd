//! An export never holds bytes that failed their hash: a cached tensor blob
//! that was prepended to, appended to, cut short or flipped — the first,
//! a middle or the last tensor of a file — is caught while the export is
//! assembled from the cache, and the export either holds the reference
//! bytes (the tensor encoded again) or the run fails and leaves no file.

use std::path::PathBuf;

use quantforge::formats::{ModelFile, OpenOptions};

use super::{OUTPUTS, Workspace, incidents};

#[derive(Debug, Clone, Copy)]
enum Tamper {
    Prepend,
    Append,
    Truncate,
    Flip,
}

impl Tamper {
    const ALL: [Tamper; 4] = [Tamper::Prepend, Tamper::Append, Tamper::Truncate, Tamper::Flip];

    fn apply(self, blob: &PathBuf) {
        let mut bytes = std::fs::read(blob).unwrap();
        match self {
            Tamper::Prepend => bytes.splice(0..0, *b"junk").for_each(drop),
            Tamper::Append => bytes.extend(b"junk"),
            Tamper::Truncate => bytes.truncate(bytes.len() - 1),
            Tamper::Flip => {
                let middle = bytes.len() / 2;
                bytes[middle] ^= 0x10;
            }
        }
        std::fs::write(blob, bytes).unwrap();
    }
}

/// The cached blobs holding the tensors of `output` in file order: each
/// tensor whose bytes a blob holds exactly.
fn blobs_in_file_order(ws: &Workspace, output: &str) -> Vec<(String, PathBuf)> {
    let file = ModelFile::open(&ws.path(output), OpenOptions::default()).unwrap();
    let blobs: Vec<(PathBuf, Vec<u8>)> =
        ws.store_files("blobs").into_iter().map(|path| (path.clone(), std::fs::read(path).unwrap())).collect();
    let mut tensors: Vec<_> = file.tensors.iter().collect();
    tensors.sort_by_key(|t| t.file_offset);
    tensors
        .into_iter()
        .filter_map(|t| {
            let bytes = file.tensor_data(t).unwrap();
            blobs.iter().find(|(_, b)| **b == *bytes).map(|(path, _)| (t.name.clone(), path.clone()))
        })
        .collect()
}

#[test]
fn a_tampered_blob_never_reaches_an_export() {
    let ws = Workspace::new();
    let output = OUTPUTS[1];
    let blobs = blobs_in_file_order(&ws, output);
    assert!(blobs.len() >= 3, "the Q4_K_M export's tensors come from blobs: {blobs:?}");
    let positions = [("first", 0), ("middle", blobs.len() / 2), ("last", blobs.len() - 1)];
    for (position, index) in positions {
        for tamper in Tamper::ALL {
            let ws = Workspace::new();
            let (tensor, _) = &blobs[index];
            // The same content in a fresh workspace: the same blob name.
            let blob = blobs_in_file_order(&ws, output).into_iter().find(|(t, _)| t == tensor).unwrap().1;
            tamper.apply(&blob);
            let what = format!("{tamper:?} of the {position} tensor `{tensor}`");
            let report = ws.rerun_from_cache(&what).unwrap_or_else(|| panic!("{what}: the run failed"));
            assert!(incidents(&report).iter().any(|i| i.contains("blob")), "{what}: not reported: {report:#}");
            // Quarantined, and stored again with bytes that match its name.
            if let Ok(bytes) = std::fs::read(&blob) {
                let name = blob.file_name().unwrap().to_string_lossy().into_owned();
                assert_eq!(blake3::hash(&bytes).to_hex().as_str(), name, "{what}: a bad blob stayed");
            }
        }
    }
}
