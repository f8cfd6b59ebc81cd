//! Feeds arbitrary bytes to the ONNX reader as a model held in memory, as if
//! it were a file in a directory that also holds a 4096-byte `w.bin` for
//! external data to point at (the first three bytes are forced to a
//! `ModelProto`'s start when they are not one). Nothing may panic, and a
//! model that reads must place every tensor inside what holds it: raw data
//! inside the model's bytes, external data inside its file, decoded elements
//! exactly as many bytes as the tensor has.

#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use quantforge::formats::{OpenOptions, onnx};
use quantforge::model::{PlacedElements, StoredLayout};

fn model_path() -> &'static std::path::Path {
    static PATH: OnceLock<std::path::PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("quantforge-fuzz-onnx-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("w.bin"), (0..4096u32).map(|i| i as u8).collect::<Vec<u8>>()).unwrap();
        dir.join("model.onnx")
    })
}

fuzz_target!(|data: &[u8]| {
    let mut bytes = data.to_vec();
    if bytes.len() < 3 {
        return;
    }
    if !matches!(bytes[..3], [0x08, 1..=0x7f, 0x12 | 0x1a | 0x22 | 0x28 | 0x32 | 0x3a | 0x42 | 0x72]) {
        bytes[..3].copy_from_slice(&[0x08, 0x08, 0x3a]);
    }
    let Ok((_, tensors, externals)) = onnx::read_bytes(&bytes, model_path(), OpenOptions::default()) else { return };
    for t in &tensors {
        let end = t.file_offset + t.stored_len;
        match &t.layout {
            StoredLayout::Placed(placement) => match &placement.elements {
                PlacedElements::External { file } => assert!(end <= externals[*file], "{} leaves its file", t.name),
                PlacedElements::Decoded(decoded) => assert_eq!(decoded.len() as u64, t.stored_len, "{}", t.name),
                PlacedElements::Strided { .. } => panic!("{}: ONNX has no strided tensors", t.name),
            },
            _ => assert!(end <= bytes.len() as u64, "{} leaves the model", t.name),
        }
    }
});
