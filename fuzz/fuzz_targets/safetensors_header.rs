//! The SafeTensors reader on bytes in memory (after a correct length
//! prefix, so the JSON and layout checks are reached, and raw), without the
//! file round trip of `parse_safetensors`: every name that parses is shown
//! bounded and escaped, never a panic.

#![no_main]

use libfuzzer_sys::fuzz_target;
use quantforge::formats::safetensors::read_header_bytes;

fuzz_target!(|data: &[u8]| {
    let header_len = data.iter().position(|&b| b == 0).unwrap_or(data.len());
    let mut prefixed = (header_len as u64).to_le_bytes().to_vec();
    prefixed.extend_from_slice(data);
    for bytes in [&prefixed[..], data] {
        let Ok(header) = read_header_bytes(bytes, std::path::Path::new("fuzz.safetensors")) else { continue };
        for tensor in &header.tensors {
            let shown = quantforge::text::name(&tensor.name);
            assert!(shown.chars().count() <= quantforge::text::NAME_SHOWN);
            assert!(!shown.chars().any(char::is_control));
        }
        assert!(header.data_offset >= 8);
    }
});
