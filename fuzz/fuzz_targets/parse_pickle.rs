//! Feeds arbitrary bytes to the restricted unpickler as a checkpoint's
//! `data.pkl`, beside ten storages `0`..`9` of 4096 bytes each, and reads
//! the state dict. Nothing may panic, and a tensor that reads must stay
//! inside its storage: its stored bytes, and for a strided view the
//! farthest element its strides reach.

#![no_main]

use std::collections::HashMap;
use std::path::Path;

use libfuzzer_sys::fuzz_target;
use quantforge::formats::torch::{Archive, StorageRecord, read_state};
use quantforge::model::{PlacedElements, StoredLayout, element_count};

const STORAGE: u64 = 4096;

fuzz_target!(|data: &[u8]| {
    let storages: HashMap<String, StorageRecord> = (0..10)
        .map(|key| (key.to_string(), StorageRecord { offset: key * STORAGE, len: STORAGE, stored: true }))
        .collect();
    let archive = Archive { pickle_name: "data.pkl", pickle: data.to_vec(), pickle_offset: 0, storages };
    let Ok((_, tensors)) = read_state(Path::new("fuzz.pt"), &archive) else { return };
    for t in &tensors {
        let storage_end = (t.file_offset / STORAGE + 1) * STORAGE;
        assert!(t.file_offset + t.stored_len <= storage_end, "{} leaves its storage", t.name);
        if let StoredLayout::Placed(placement) = &t.layout {
            let PlacedElements::Strided { strides, element_size } = &placement.elements else { continue };
            if element_count(&t.dims) == Some(0) {
                continue;
            }
            let reach: u64 = t.dims.iter().zip(strides).map(|(d, s)| (d - 1) * s).sum();
            assert!((reach + 1) * element_size <= t.stored_len, "{} reaches past its span", t.name);
        }
    }
});
