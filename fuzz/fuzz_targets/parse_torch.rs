//! Feeds arbitrary bytes to the PyTorch reader as a checkpoint file: the zip
//! format, or (when the bytes do not start a zip archive) the legacy format,
//! its magic put in front. Nothing may panic; a checkpoint that opens must
//! read every tensor, the same whether the file is mapped or not.

#![no_main]

use libfuzzer_sys::fuzz_target;
use quantforge::formats::torch::LEGACY_MAGIC;
use quantforge::formats::{ModelFile, OpenOptions};

fuzz_target!(|data: &[u8]| {
    let mut bytes = data.to_vec();
    if !bytes.starts_with(b"PK") && !bytes.starts_with(&LEGACY_MAGIC) {
        bytes.splice(0..0, LEGACY_MAGIC);
    }
    let path = std::env::temp_dir().join(format!("quantforge-fuzz-torch-{}.pt", std::process::id()));
    std::fs::write(&path, &bytes).unwrap();
    let [mapped, read] = [true, false].map(|use_mmap| {
        let model = ModelFile::open(&path, OpenOptions { use_mmap }).ok()?;
        Some(model.tensors.iter().map(|t| model.tensor_data(t).map(|d| d.into_owned()).ok()).collect::<Vec<_>>())
    });
    assert_eq!(mapped, read, "mapped and read parses differ");
});
