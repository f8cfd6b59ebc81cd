//! What a run or a plan did, per node and in total: the JSON report and its
//! text form.

use std::path::PathBuf;

use crate::files::link::LinkMode;
use crate::quant::plan::Fallbacks;
use crate::store::Incident;
use crate::store::remote::TransferReport;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// The result was in the cache (or the exported file was up to date).
    Hit,
    /// The node was computed.
    Ran,
    /// (plan only) The node would be computed.
    Miss,
    /// Nothing downstream needed the node and its result is not cached, or
    /// an input failed (then `error` says which).
    Skipped,
    Failed,
}

impl Status {
    /// How reports say it.
    pub fn name(self) -> &'static str {
        match self {
            Status::Hit => "hit",
            Status::Ran => "ran",
            Status::Miss => "miss",
            Status::Skipped => "skipped",
            Status::Failed => "FAILED",
        }
    }
}

#[derive(Debug, Clone, serde::Serialize, schemars::JsonSchema)]
pub struct InputReport {
    pub name: String,
    pub path: PathBuf,
    /// blake3 of the file's bytes (without a cache: of its stat identity,
    /// since nothing outlives the run).
    pub content_key: String,
    pub bytes: u64,
    /// The file was read to hash it (its stat fingerprint was new).
    pub rehashed: bool,
    /// Each file of the input (a split's shards, a checkpoint's files), with
    /// the blake3 of its bytes.
    pub files: Vec<InputFileReport>,
}

#[derive(Debug, Clone, serde::Serialize, schemars::JsonSchema)]
pub struct InputFileReport {
    pub path: PathBuf,
    pub bytes: u64,
    pub blake3: String,
    /// How the file was opened, when the run opened it (a run of cache
    /// hits reads no model).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub load: Option<crate::formats::LoadReport>,
}

#[derive(Debug, Clone, serde::Serialize, schemars::JsonSchema)]
pub struct NodeReport {
    pub id: String,
    pub step: String,
    pub op: &'static str,
    /// The earlier nodes it reads, by id.
    pub from: Vec<String>,
    /// The recipe inputs it reads (a `load`'s file, an importance matrix), by name.
    pub inputs: Vec<String>,
    pub status: Status,
    pub key: String,
    /// The backend that ran the node's conversions (`cpu-avx512`); for an
    /// export, every backend whose conversions it wrote, joined by `+`.
    pub backend: String,
    pub duration_ms: f64,
    /// Tensor bytes the node read (its inputs' tensor data).
    pub bytes_in: u64,
    /// Tensor bytes of its result; for an export, the file's length.
    pub bytes_out: u64,
    /// Tensors whose bytes were computed by a codec in this run, each
    /// counted once: by the node that encoded it, or, for a sibling encoded
    /// alongside another node's tensor, by the first node that needed it.
    pub tensors_encoded: u64,
    /// Tensors encoded in this run that another node counted already (two
    /// exports of one quantization): the bytes copied, not computed again.
    #[serde(default)]
    pub tensors_shared: u64,
    /// Tensors copied from blobs an earlier run stored.
    pub tensors_reused: u64,
    /// Tensors copied unchanged from input files.
    pub tensors_copied: u64,
    /// Source tensors read and decoded for the tensors encoded: a tensor
    /// converted to several types in one run (a ladder) is decoded once.
    pub tensors_decoded: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<PathBuf>,
    /// The files an export wrote (one, or a split's shards).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<FileReport>,
    /// Tensors a quantization wrote in another type than their rule chose
    /// (their rows do not divide into its blocks), as llama-quantize warns.
    #[serde(skip_serializing_if = "Fallbacks::is_empty")]
    pub fallbacks: Fallbacks,
    /// (plan) Why the node is not a hit.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub why: Vec<String>,
    /// An `evaluate` node's measures of its model against the base, ran or
    /// taken from the cache.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evaluation: Option<crate::ops::evaluate::Evaluation>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Debug, Clone, serde::Serialize, schemars::JsonSchema)]
pub struct FileReport {
    pub path: PathBuf,
    pub bytes: u64,
    pub tensors: usize,
    /// How the cache holds the file (`--link`): a reflink or hard link of
    /// it, or no copy (`copy`: its encoded tensors are found in the file).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub link: Option<LinkMode>,
    /// Put back from the cache, nothing encoded or copied tensor by tensor.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub restored: bool,
}

impl FileReport {
    pub fn new(path: PathBuf, bytes: u64, tensors: usize) -> FileReport {
        FileReport { path, bytes, tensors, link: None, restored: false }
    }
}

#[derive(Debug, Clone, Default, serde::Serialize, schemars::JsonSchema)]
pub struct Totals {
    pub nodes: usize,
    pub hit: usize,
    pub ran: usize,
    pub miss: usize,
    pub skipped: usize,
    pub failed: usize,
    pub tensors_encoded: u64,
    #[serde(default)]
    pub tensors_shared: u64,
    pub tensors_reused: u64,
    pub tensors_copied: u64,
    pub tensors_decoded: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
}

#[derive(Debug, Clone, serde::Serialize, schemars::JsonSchema)]
pub struct RunReport {
    pub recipe: String,
    pub dry_run: bool,
    pub jobs: usize,
    pub wall_ms: f64,
    pub inputs: Vec<InputReport>,
    pub nodes: Vec<NodeReport>,
    pub totals: Totals,
    /// Corrupt blobs and entries the store found, quarantined and
    /// recomputed during the run.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cache_incidents: Vec<Incident>,
    /// What moved to and from the remote cache, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remote: Option<TransferReport>,
}

impl RunReport {
    pub fn new(
        recipe: String,
        dry_run: bool,
        jobs: usize,
        inputs: Vec<InputReport>,
        nodes: Vec<NodeReport>,
    ) -> RunReport {
        let mut totals = Totals { nodes: nodes.len(), ..Totals::default() };
        for n in &nodes {
            match n.status {
                Status::Hit => totals.hit += 1,
                Status::Ran => totals.ran += 1,
                Status::Miss => totals.miss += 1,
                Status::Skipped => totals.skipped += 1,
                Status::Failed => totals.failed += 1,
            }
            totals.tensors_encoded += n.tensors_encoded;
            totals.tensors_shared += n.tensors_shared;
            totals.tensors_reused += n.tensors_reused;
            totals.tensors_copied += n.tensors_copied;
            totals.tensors_decoded += n.tensors_decoded;
            totals.bytes_in += n.bytes_in;
            totals.bytes_out += n.bytes_out;
        }
        RunReport {
            recipe,
            dry_run,
            jobs,
            wall_ms: 0.0,
            inputs,
            nodes,
            totals,
            cache_incidents: Vec::new(),
            remote: None,
        }
    }

    /// Bytes of the files the exports wrote or found up to date.
    pub fn output_bytes(&self) -> u64 {
        self.nodes.iter().filter(|n| n.output.is_some()).map(|n| n.bytes_out).sum()
    }

    /// Every file the exports wrote.
    pub fn files(&self) -> impl Iterator<Item = &FileReport> {
        self.nodes.iter().flat_map(|n| &n.files)
    }

    pub fn failed(&self) -> bool {
        self.totals.failed > 0
    }
}
