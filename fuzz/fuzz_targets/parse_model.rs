//! Feeds arbitrary bytes to the container parsers (GGUF and the legacy GGML
//! family, chosen by magic as in real use). Bytes starting with a known
//! magic are also tried with the other magics, so every parser sees every
//! input shape. A parse that succeeds must also survive reading every
//! tensor and writing the model back out, to the same bytes whether the
//! file was mapped or read.

#![no_main]

use std::io::Write;

use libfuzzer_sys::fuzz_target;
use quantforge::formats::{ModelFile, OpenOptions, TensorDataSource, gguf};

struct Copy<'a>(&'a ModelFile);

impl TensorDataSource for Copy<'_> {
    fn write_tensor(&mut self, idx: usize, out: &mut dyn Write) -> std::io::Result<()> {
        self.0.copy_tensor_data(&self.0.tensors[idx], out)
    }
}

fuzz_target!(|data: &[u8]| {
    let dir = std::env::temp_dir();
    let path = dir.join(format!("quantforge-fuzz-{}.bin", std::process::id()));
    for magic in [None, Some(*b"GGUF"), Some(*b"tjgg"), Some(*b"fmgg"), Some(*b"lmgg")] {
        let mut bytes = data.to_vec();
        if let Some(magic) = magic {
            if bytes.len() < 4 {
                continue;
            }
            bytes[..4].copy_from_slice(&magic);
        }
        std::fs::write(&path, &bytes).unwrap();
        // A mapped file is parsed in place, a read one through a stream: both
        // must accept the same files and write them back to the same bytes.
        let [mapped, read] = [true, false].map(|use_mmap| {
            let model = ModelFile::open(&path, OpenOptions { use_mmap }).ok()?;
            for t in &model.tensors {
                let _ = model.tensor_data(t);
            }
            let mut out = Vec::new();
            let written = gguf::write_gguf(&mut out, model.endian, &model.metadata, &model.tensors, &mut Copy(&model));
            Some(written.map(|_| out).ok())
        });
        assert_eq!(mapped, read, "mapped and read parses differ");
    }
});
