//! The index of a sharded checkpoint (`model.safetensors.index.json`, and
//! `pytorch_model.bin.index.json` in the same shape):
//! `{"metadata": {...}, "weight_map": {tensor: shard file}}`, as
//! `transformers` writes it. Parsing and checking only; loading the shards
//! together is the engine's.

use std::collections::{HashMap, HashSet};
use std::path::{Component, Path, PathBuf};

use super::super::error::{ErrorKind, FormatError, Result};
use super::json::{ParseError, Parsed, Parser};

/// A checked index: every shard it names is a file beside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointIndex {
    pub path: PathBuf,
    /// `metadata`'s entries in file order, each value as its JSON text
    /// (`("total_size", "90868376")`): the index promises nothing about them.
    pub metadata: Vec<(String, String)>,
    /// Tensor name to shard file (relative to the index's directory), in file
    /// order.
    pub weight_map: Vec<(String, String)>,
}

impl CheckpointIndex {
    /// Every shard once, sorted by file name (`model-00001-of-00003...`
    /// sorts in shard order), as paths beside the index.
    pub fn shards(&self) -> Vec<PathBuf> {
        let dir = self.path.parent().unwrap_or(Path::new(""));
        let mut names: Vec<&str> = self.weight_map.iter().map(|(_, shard)| shard.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        names.into_iter().map(|name| dir.join(name)).collect()
    }
}

pub fn read_index(path: &Path) -> Result<CheckpointIndex> {
    let bytes = std::fs::read(path).map_err(|e| FormatError::io(path, e))?;
    parse_index(path, &bytes)
}

/// The index at `path`, already read as `bytes`.
pub fn parse_index(path: &Path, bytes: &[u8]) -> Result<CheckpointIndex> {
    let text = std::str::from_utf8(bytes).map_err(|e| {
        FormatError::at(path, e.valid_up_to() as u64, ErrorKind::InvalidUtf8 { what: "the index".into() })
    })?;
    let dir = path.parent().unwrap_or(Path::new(""));
    let (metadata, weight_map) = parse(text, dir).map_err(|e| FormatError::at(path, e.offset as u64, e.kind))?;
    Ok(CheckpointIndex { path: path.to_owned(), metadata, weight_map })
}

type Entries = Vec<(String, String)>;

fn parse(text: &str, dir: &Path) -> Parsed<(Entries, Entries)> {
    let mut p = Parser::new(text);
    let mut metadata = None;
    let mut weight_map = None;
    let start = p.offset();
    p.object(&"the index", |p, key, at| {
        let duplicate = || ParseError::new(at, ErrorKind::Invalid(format!("the index has `{key}` twice")));
        match &*key {
            "metadata" if metadata.is_some() => Err(duplicate()),
            "weight_map" if weight_map.is_some() => Err(duplicate()),
            "metadata" => {
                metadata = Some(parse_metadata(p)?);
                Ok(())
            }
            "weight_map" => {
                weight_map = Some(parse_weight_map(p, dir)?);
                Ok(())
            }
            // transformers reads these two keys and nothing else.
            _ => p.skip(),
        }
    })?;
    p.finish()?;
    let weight_map =
        weight_map.ok_or_else(|| ParseError::new(start, ErrorKind::Invalid("the index has no `weight_map`".into())))?;
    Ok((metadata.unwrap_or_default(), weight_map))
}

fn parse_metadata(p: &mut Parser<'_>) -> Parsed<Entries> {
    p.unique_entries(&"`metadata`", |p, _| Ok(p.raw_value()?.to_owned()))
}

fn parse_weight_map(p: &mut Parser<'_>, dir: &Path) -> Parsed<Entries> {
    let mut entries = Vec::new();
    let mut tensors = HashSet::new();
    // Whether each shard named so far exists, so each is looked up once.
    let mut shard_exists: HashMap<String, bool> = HashMap::new();
    p.object(&"`weight_map`", |p, tensor, at| {
        if !tensors.insert(tensor.to_string()) {
            return Err(ParseError::new(at, ErrorKind::DuplicateTensor { tensor: tensor.into_owned() }));
        }
        let shard_at = p.offset();
        let shard = p.string(&format_args!("the shard of tensor `{tensor}`"))?;
        let problem = |what: &str| {
            ParseError::new(shard_at, ErrorKind::Invalid(format!("tensor `{tensor}` is in shard `{shard}`, {what}")))
        };
        let inside = !shard.is_empty() && Path::new(&*shard).components().all(|c| matches!(c, Component::Normal(_)));
        if !inside {
            return Err(problem("which is not a relative path below the index's directory"));
        }
        let exists = *shard_exists.entry(shard.to_string()).or_insert_with(|| dir.join(&*shard).is_file());
        if !exists {
            return Err(problem("which is not a file beside the index"));
        }
        entries.push((tensor.into_owned(), shard.into_owned()));
        Ok(())
    })?;
    Ok(entries)
}
