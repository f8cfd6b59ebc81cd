//! Feeds arbitrary bytes to `merge` as a set of device shards
//! (`shard-devices` output): the bytes as the one shard of a single device,
//! then as the first of two with the second device's shard the bytes'
//! second half. Nothing may panic, whatever the shards' `split.device.*`
//! keys claim; a merge that succeeds writes a file that reads back.

#![no_main]

use libfuzzer_sys::fuzz_target;
use quantforge::formats::{ModelFile, OpenOptions};
use quantforge::ops::device_shards::{merge_shards, shard_path};

fuzz_target!(|data: &[u8]| {
    let dir = std::env::temp_dir().join(format!("quantforge-fuzz-shards-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let prefix = dir.join("s");
    let out = dir.join("merged.gguf");
    let (first, second) = data.split_at(data.len() / 2);
    for shards in [vec![data], vec![data, second], vec![first, second]] {
        for (j, bytes) in shards.iter().enumerate() {
            std::fs::write(shard_path(&prefix, j, shards.len()), bytes).unwrap();
        }
        if merge_shards(&shard_path(&prefix, 0, shards.len()), &out).is_ok() {
            ModelFile::open(&out, OpenOptions::default()).expect("a merged file reads back");
        }
    }
});
