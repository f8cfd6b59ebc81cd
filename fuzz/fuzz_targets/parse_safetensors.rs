//! Feeds arbitrary bytes to the SafeTensors reader (as a header after a
//! correct length prefix, so the JSON and layout checks are reached, and as
//! raw bytes) and to the sharded-checkpoint index parser. A file that opens
//! must also survive reading every tensor (converted dtypes included).

#![no_main]

use libfuzzer_sys::fuzz_target;
use quantforge::formats::safetensors::read_index;
use quantforge::formats::{ModelFile, OpenOptions};

fuzz_target!(|data: &[u8]| {
    let dir = std::env::temp_dir().join(format!("quantforge-fuzz-st-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let file = dir.join("model.safetensors");
    let header_len = data.iter().position(|&b| b == 0).unwrap_or(data.len());
    let mut prefixed = (header_len as u64).to_le_bytes().to_vec();
    prefixed.extend_from_slice(data);
    for bytes in [&prefixed[..], data] {
        std::fs::write(&file, bytes).unwrap();
        for use_mmap in [true, false] {
            if let Ok(model) = ModelFile::open(&file, OpenOptions { use_mmap }) {
                for t in &model.tensors {
                    let _ = model.tensor_data(t);
                }
            }
        }
    }
    let index = dir.join("model.safetensors.index.json");
    std::fs::write(&index, data).unwrap();
    if let Ok(index) = read_index(&index) {
        let _ = index.shards();
    }
});
