//! A multimodal checkpoint's vision tower as `convert --mmproj` reads it:
//! `config.json` (laid over by its `text_config`; its `vision_config` and
//! the tower's own settings), the image processor's
//! `preprocessor_config.json` and `processor_config.json`, and the added
//! tokens of `tokenizer_config.json` and `tokenizer.json` (Pixtral's
//! `[IMG_BREAK]`), read from memory beside the weights of one of the
//! multimodal fixtures (LLaVA-1.5's written as llama.cpp's legacy scripts
//! write it). The first byte picks the fixture and the outtype;
//! the rest is the files, split at `\0\0`. Any bytes give a projector file's
//! metadata and tensors or an error, never a panic.

#![no_main]

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;

#[path = "../shared/split_files.rs"]
mod split_files;
use split_files::split_files;
use quantforge::convert::{Checkpoint, CheckpointError, CheckpointFiles, OutType, Scope, convert};
use quantforge::formats::{ModelFile, OpenOptions};

const NAMES: [&str; 5] =
    ["config.json", "preprocessor_config.json", "processor_config.json", "tokenizer_config.json", "tokenizer.json"];

const FIXTURES: [&str; 6] = [
    "gemma-3-tiny-vl-it",
    "pixtral-tiny",
    "Mistral-Small-3.1-Tiny-Instruct",
    "Qwen2-VL-Tiny-Instruct",
    "Qwen2.5-VL-Tiny-Instruct",
    "llava-1.5-tiny-hf",
];

const OUTTYPES: [OutType; 4] = [OutType::F32, OutType::F16, OutType::BF16, OutType::Q8_0];

/// A checkpoint's text files, by path, in memory, beside one opened shard.
struct InMemory {
    files: Vec<(PathBuf, Vec<u8>)>,
    shard: (PathBuf, Arc<ModelFile>),
}

impl CheckpointFiles for InMemory {
    fn read(&self, path: &Path, limit: u64) -> Result<Option<Vec<u8>>, CheckpointError> {
        Ok(self.files.iter().find(|(p, _)| p == path).map(|(_, b)| b.clone()).filter(|b| b.len() as u64 <= limit))
    }

    fn model(&self, path: &Path) -> Result<Arc<ModelFile>, CheckpointError> {
        match path == self.shard.0 {
            true => Ok(self.shard.1.clone()),
            false => Err(CheckpointError::NoWeights(path.to_owned())),
        }
    }

    fn list(&self, dir: &Path) -> Result<Vec<PathBuf>, CheckpointError> {
        let paths = self.files.iter().map(|(p, _)| p.clone()).chain([self.shard.0.clone()]);
        Ok(paths.filter(|p| p.parent() == Some(dir)).collect())
    }
}

/// Each fixture's weights, opened once.
fn shards() -> &'static Vec<Arc<ModelFile>> {
    static SHARDS: OnceLock<Vec<Arc<ModelFile>>> = OnceLock::new();
    SHARDS.get_or_init(|| {
        let checkpoints = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/convert/checkpoints");
        FIXTURES
            .iter()
            .map(|name| {
                let path = checkpoints.join(name).join("model.safetensors");
                Arc::new(ModelFile::open(&path, OpenOptions::default()).expect("the fixtures are checked out"))
            })
            .collect()
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else { return };
    let shard = shards()[usize::from(pick) % FIXTURES.len()].clone();
    let outtype = OUTTYPES[usize::from(pick / 8) % OUTTYPES.len()];
    let dir = Path::new("checkpoint");
    let mut files = Vec::new();
    for (name, bytes) in NAMES.iter().zip(split_files(rest)) {
        if !bytes.is_empty() {
            files.push((dir.join(name), bytes.to_vec()));
        }
    }
    let memory = InMemory { files, shard: (dir.join("model.safetensors"), shard) };
    let Ok(checkpoint) = Checkpoint::open(dir, Arc::new(memory)) else { return };
    let _ = convert(&checkpoint, outtype, None, Scope::Mmproj);
});
