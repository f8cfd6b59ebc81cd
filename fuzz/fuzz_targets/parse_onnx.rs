//! Feeds arbitrary bytes to the ONNX reader as a model file, in a directory
//! that also holds a 4096-byte `w.bin` for external data to point at. The
//! bytes always go to the ONNX reader (the first three are forced to a
//! `ModelProto`'s start when they are not one). Nothing may panic; a model
//! that opens must read every tensor, the same whether mapped or not.

#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use quantforge::formats::{ModelFile, OpenOptions};

fn dir() -> &'static std::path::Path {
    static DIR: OnceLock<std::path::PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("quantforge-fuzz-onnx-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("w.bin"), (0..4096u32).map(|i| i as u8).collect::<Vec<u8>>()).unwrap();
        dir
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
    let path = dir().join("model.onnx");
    std::fs::write(&path, &bytes).unwrap();
    let [mapped, read] = [true, false].map(|use_mmap| {
        let model = ModelFile::open(&path, OpenOptions { use_mmap }).ok()?;
        Some(model.tensors.iter().map(|t| model.tensor_data(t).map(|d| d.into_owned()).ok()).collect::<Vec<_>>())
    });
    assert_eq!(mapped, read, "mapped and read parses differ");
});
