//! The GGUF reader on bytes in memory, without the file round trip of
//! `parse_model` (so tens of thousands of inputs a second): a header that
//! parses has every name shown as a terminal would show it, and its layout
//! computed as a writer would (which refuses names llama.cpp cannot read),
//! never a panic at any length.

#![no_main]

use libfuzzer_sys::fuzz_target;
use quantforge::formats::gguf;

fuzz_target!(|data: &[u8]| {
    let Ok(header) = gguf::read_header_bytes(data, std::path::Path::new("fuzz.gguf")) else { return };
    for tensor in &header.tensors {
        let shown = quantforge::text::name(&tensor.name);
        assert!(shown.chars().count() <= quantforge::text::NAME_SHOWN);
        assert!(!shown.chars().any(char::is_control));
    }
    for (key, _) in header.metadata.iter() {
        let _ = quantforge::text::name(key);
    }
    if let Ok(layout) = gguf::layout(&header.metadata, &header.tensors) {
        assert!(header.tensors.iter().all(|t| t.name.len() <= gguf::MAX_TENSOR_NAME_BYTES));
        assert!(layout.data_offset >= layout.header_len);
    }
});
