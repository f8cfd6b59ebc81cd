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
    // In memory where the machine has it: the shards are files, and disk
    // writes would cap the rate at a few hundred runs a second.
    let shm = std::path::Path::new("/dev/shm");
    let base = if shm.is_dir() { shm.to_owned() } else { std::env::temp_dir() };
    let dir = base.join(format!("quantforge-fuzz-shards-{}", std::process::id()));
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
