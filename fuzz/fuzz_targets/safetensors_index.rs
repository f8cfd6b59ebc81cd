//! A sharded checkpoint's index (`model.safetensors.index.json`) as any
//! bytes: an index or an error naming the offset, never a panic; a parsed
//! index lists its shards.

#![no_main]

use libfuzzer_sys::fuzz_target;
use quantforge::formats::parse_index;

fuzz_target!(|data: &[u8]| {
    if let Ok(index) = parse_index(std::path::Path::new("dir/model.safetensors.index.json"), data) {
        let _ = index.shards();
    }
});
