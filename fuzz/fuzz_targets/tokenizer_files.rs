//! A checkpoint's tokenizer files as `convert` reads them for its tokenizer
//! keys: `tokenizer.json` (its vocabulary, merges, added tokens, normalizer
//! and post-processor), `tokenizer_config.json` (special tokens, add-token
//! flags, chat template), `config.json` (special ids), `added_tokens.json`
//! and `chat_template.jinja`, read from memory. The first byte picks the
//! family's vocabulary reading; the rest is the files, split at `\0\0`. Any
//! bytes give keys or an error, never a panic.

#![no_main]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use libfuzzer_sys::fuzz_target;

#[path = "../shared/split_files.rs"]
mod split_files;
use split_files::split_files;
use quantforge::convert::family::Vocab;
use quantforge::convert::{Checkpoint, CheckpointError, CheckpointFiles, tokenizer_keys};
use quantforge::formats::ModelFile;
use quantforge::model::Metadata;

const NAMES: [&str; 5] =
    ["tokenizer.json", "tokenizer_config.json", "config.json", "added_tokens.json", "chat_template.jinja"];

/// The checkpoint's files, by path, held in memory.
struct InMemory(Vec<(PathBuf, Vec<u8>)>);

impl CheckpointFiles for InMemory {
    fn read(&self, path: &Path, limit: u64) -> Result<Option<Vec<u8>>, CheckpointError> {
        Ok(self.0.iter().find(|(p, _)| p == path).map(|(_, b)| b.clone()).filter(|b| b.len() as u64 <= limit))
    }

    fn model(&self, path: &Path) -> Result<Arc<ModelFile>, CheckpointError> {
        Err(CheckpointError::NoWeights(path.to_owned()))
    }

    fn list(&self, dir: &Path) -> Result<Vec<PathBuf>, CheckpointError> {
        Ok(self.0.iter().map(|(p, _)| p.clone()).filter(|p| p.parent() == Some(dir)).collect())
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else { return };
    let vocab = match pick % 8 {
        0 => Vocab::Bpe,
        1 => Vocab::WordPiece,
        2 => Vocab::Roberta,
        3 => Vocab::ModernBert,
        4 => Vocab::Llama,
        5 => Vocab::Phi3,
        6 => Vocab::Glm4,
        _ => Vocab::Gemma { end_of_turn: Some(106) },
    };
    let dir = Path::new("checkpoint");
    let mut files = Vec::new();
    for (name, bytes) in NAMES.iter().zip(split_files(rest)) {
        if !bytes.is_empty() {
            files.push((dir.join(name), bytes.to_vec()));
        }
    }
    let config = files
        .iter()
        .find(|(p, _)| p.ends_with("config.json") && !p.ends_with("tokenizer_config.json"))
        .and_then(|(_, b)| serde_json::from_slice(b).ok())
        .unwrap_or(serde_json::Value::Null);
    let checkpoint = Checkpoint {
        dir: dir.to_owned(),
        files: Arc::new(InMemory(files)),
        repository: None,
        model_name: None,
        metadata_override: None,
        file_config: config.clone(),
        config,
        shards: Vec::new(),
    };
    let mut keys = Metadata::new();
    let _ = tokenizer_keys(&checkpoint, vocab, Some("default"), &mut keys);
});
