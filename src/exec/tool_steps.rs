//! Steps an external tool computes (`imatrix`): the model handed to the
//! tool as a GGUF file, the tool run in the recipe's directory (so the
//! paths it records are the ones the recipe wrote), its progress shown, and
//! its output taken into the cache only when the whole of it reads; and the
//! importance matrix such a step made, as a `quantize` step uses it.

use std::path::{Path, PathBuf};
use std::process::Command;

use indicatif::{ProgressBar, ProgressStyle};

use super::{NodeError, Shared};
use crate::artifact::{HeaderEnd, Tensor, TensorSet};
use crate::formats::{ModelFile, OpenOptions};
use crate::model::TensorInfo;
use crate::ops::Op;
use crate::ops::evaluate::{EvaluateOptions, Evaluation, StatisticsError};
use crate::ops::imatrix::ImatrixOptions;
use crate::quant::imatrix::ImportanceMatrix;
use crate::quant::plan::QuantizeOptions;
use crate::recipe::Source;
use crate::tools::{self, Progress, RunFailure, Tool};
use crate::types::GgmlType;
use tempfile::TempDir;

impl Shared {
    /// Runs `llama-imatrix` for node `i` over `model` (its input's result).
    pub(super) fn imatrix(
        &self,
        i: usize,
        model: &TensorSet,
        options: &ImatrixOptions,
    ) -> Result<TensorSet, NodeError> {
        let scratch = self.scratch()?;
        let output = scratch.path().join("imatrix.gguf");
        let mut command = self.command_over_text(i, model, &scratch)?;
        command.arg("-o").arg(&output).args(options.arguments());
        let finished = self.run_tool(i, Tool::Imatrix, command)?;
        // The whole file is checked before any of it is stored: a matrix
        // that does not read leaves nothing in the cache.
        let unreadable = |e: &dyn std::fmt::Display| {
            finished.failure(Tool::Imatrix, format!("wrote no importance matrix that reads: {e}"))
        };
        ImportanceMatrix::load(&output).map_err(|e| unreadable(&e))?;
        let file = ModelFile::open(&output, OpenOptions::default()).map_err(|e| unreadable(&e))?;
        let mut tensors = Vec::with_capacity(file.tensors.len());
        for info in &file.tensors {
            let bytes = file.tensor_data(info).map_err(|e| unreadable(&e))?;
            tensors.push(Tensor::generated(info, self.store.put_blob(&bytes)?));
        }
        Ok(TensorSet {
            endian: file.endian,
            metadata: file.metadata.clone(),
            tensors,
            header_end: HeaderEnd::Aligned,
            legacy: None,
        })
    }

    /// Runs `llama-perplexity --kl-divergence-base` for node `i`: the
    /// logits of `base` over the text, kept as one blob (a tensor of bytes).
    pub(super) fn kld_base(
        &self,
        i: usize,
        base: &TensorSet,
        options: &EvaluateOptions,
    ) -> Result<TensorSet, NodeError> {
        let scratch = self.scratch()?;
        let output = scratch.path().join("base.kld");
        let mut command = self.command_over_text(i, base, &scratch)?;
        command.arg("--kl-divergence-base").arg(&output).args(options.arguments());
        let finished = self.run_tool(i, Tool::Perplexity, command)?;
        let unreadable = |e: std::io::Error| {
            finished.failure(Tool::Perplexity, format!("wrote no logits file that reads: {}", crate::files::IoText(&e)))
        };
        let mut file = crate::files::open_regular(&output, crate::files::Symlinks::Refuse).map_err(unreadable)?;
        // The whole file is checked before any of it is stored: its header
        // names the text's shape, and its length must be what that makes.
        let mut header = [0; crate::ops::evaluate::LOGITS_HEADER];
        std::io::Read::read_exact(&mut file, &mut header).map_err(unreadable)?;
        let len = file.metadata().map_err(unreadable)?.len();
        crate::ops::evaluate::check_logits(&header, len, options.ctx)
            .map_err(|e| finished.failure(Tool::Perplexity, format!("wrote no logits file that reads: {e}")))?;
        std::io::Seek::rewind(&mut file).map_err(unreadable)?;
        let logits = TensorInfo::new(LOGITS, vec![len], GgmlType::I8);
        let hash = match self.store.blob_writer()? {
            Some(mut writer) => {
                std::io::copy(&mut file, &mut writer).map_err(unreadable)?;
                writer.commit()?.0
            }
            None => {
                let mut bytes = Vec::new();
                std::io::Read::read_to_end(&mut file, &mut bytes).map_err(unreadable)?;
                self.store.put_blob(&bytes)?
            }
        };
        Ok(TensorSet {
            endian: crate::model::Endian::Little,
            metadata: crate::model::Metadata::new(),
            tensors: vec![Tensor::generated(&logits, hash)],
            header_end: HeaderEnd::Aligned,
            legacy: None,
        })
    }

    /// Runs `llama-perplexity --kl-divergence` for node `i`: `model`
    /// against the base's `logits` (a `kld-base` node's result).
    pub(super) fn evaluate(
        &self,
        i: usize,
        model: &TensorSet,
        logits: &TensorSet,
        options: &EvaluateOptions,
    ) -> Result<TensorSet, NodeError> {
        let node = &self.bound.recipe.nodes[i];
        let Some(logits) = logits.tensors.iter().find(|t| t.name == LOGITS) else {
            return Err(NodeError::Unbound { node: node.id.clone(), what: "base logits" });
        };
        let scratch = self.scratch()?;
        let logits_path = scratch.path().join("base.kld");
        let model_path = self.beside_other_steps(|| -> Result<PathBuf, NodeError> {
            let write_err = |source| NodeError::Write { path: logits_path.clone(), source };
            let file = std::fs::File::create_new(&logits_path).map_err(write_err)?;
            if !self.materializer().copy_at(logits, &file, 0)? {
                return Err(NodeError::Unbound { node: node.id.clone(), what: "base logits in the cache" });
            }
            self.model_path(i, 0, model, &scratch)
        })?;
        let bytes: u64 = model.tensors.iter().map(Tensor::n_bytes).sum();
        let weights: u64 = model.tensors.iter().map(|t| t.info().n_elements()).sum();
        let bits_per_weight = if weights == 0 { 0.0 } else { bytes as f64 * 8.0 / weights as f64 };
        let mut attempt = 1;
        loop {
            let mut command = self.command(i)?;
            command.arg("-m").arg(&model_path).arg("--kl-divergence-base").arg(&logits_path);
            command.arg("--kl-divergence").args(options.arguments());
            let finished = self.run_tool(i, Tool::Perplexity, command)?;
            match Evaluation::parse(&finished.stdout, bytes, bits_per_weight) {
                Ok(evaluation) => return Ok(evaluation.to_set()),
                // llama.cpp's logger writes from a thread its exit does not
                // wait for (llama.cpp #22142): the statistics, printed last,
                // are lost now and then. The same run prints them again.
                Err(StatisticsError::Missing(_)) if attempt < STATISTICS_ATTEMPTS => attempt += 1,
                Err(e @ StatisticsError::Missing(_)) => {
                    let problem = format!("printed no statistics that read in {attempt} runs: {e}");
                    return Err(finished.failure(Tool::Perplexity, problem).into());
                }
                Err(e) => {
                    return Err(finished
                        .failure(Tool::Perplexity, format!("printed statistics that do not read: {e}"))
                        .into());
                }
            }
        }
    }

    /// A directory for a tool's files (the model handed to it, what it
    /// writes): in the recipe's directory, beside the exports, named so
    /// that one a killed run left is swept by the next.
    fn scratch(&self) -> Result<TempDir, NodeError> {
        let dir = self.bound.recipe.dir();
        crate::formats::scratch_dir(dir).map_err(|source| NodeError::Write { path: dir.to_owned(), source })
    }

    /// Runs `prepare` while no tool runs: a step's own work (its model
    /// written for the tool, the base's logits copied out) beside other
    /// steps, the tool alone.
    fn beside_other_steps<T>(&self, prepare: impl FnOnce() -> T) -> T {
        let _no_tool_running = self.tool_runs.read().unwrap_or_else(|e| e.into_inner());
        prepare()
    }

    /// The tool of node `i`, to be run in the recipe's directory (so the
    /// paths it records are the ones the recipe wrote) on as many threads
    /// as the run has workers, at most the cores.
    fn command(&self, i: usize) -> Result<Command, NodeError> {
        let Some(tool) = &self.bound.tools[i] else {
            return Err(NodeError::Unbound { node: self.bound.recipe.nodes[i].id.clone(), what: "tool" });
        };
        let threads = self.pool.current_num_threads().min(std::thread::available_parallelism().map_or(1, usize::from));
        let mut command = Command::new(&tool.path);
        command.current_dir(self.bound.recipe.dir()).arg("-t").arg(threads.to_string());
        Ok(command)
    }

    /// The tool of node `i` reading `model` (its first source, written for
    /// it beside other steps where it is no file already) and the node's
    /// text: `-m MODEL -f TEXT`.
    fn command_over_text(&self, i: usize, model: &TensorSet, scratch: &TempDir) -> Result<Command, NodeError> {
        let model_path = self.beside_other_steps(|| self.model_path(i, 0, model, scratch))?;
        let mut command = self.command(i)?;
        command.arg("-m").arg(&model_path).arg("-f").arg(self.text_arg(i)?);
        Ok(command)
    }

    /// Node `i`'s text (its first input used): as the recipe writes its
    /// path where that names the file from the recipe's directory (a tool
    /// records it, as it would by hand), else absolute.
    fn text_arg(&self, i: usize) -> Result<PathBuf, NodeError> {
        let recipe = &self.bound.recipe;
        let Some(&text) = recipe.nodes[i].uses.first() else {
            return Err(NodeError::Unbound { node: recipe.nodes[i].id.clone(), what: "text" });
        };
        let text = &recipe.inputs[text];
        Ok(match recipe.dir().join(&text.as_written) == text.path {
            true => text.as_written.clone(),
            false => absolute(&text.path),
        })
    }

    /// Runs a tool for node `i` to its end, a progress bar counting the
    /// chunks it reports done.
    fn run_tool(&self, i: usize, tool: Tool, command: Command) -> Result<tools::Finished, NodeError> {
        let _alone = self.tool_runs.write().unwrap_or_else(|e| e.into_inner());
        let bar = self.progress.add(ProgressBar::new(0));
        let style = ProgressStyle::with_template("{msg:28!} {wide_bar} {pos:>5}/{len:<5} chunks {elapsed:>4}");
        bar.set_style(style.unwrap_or_else(|_| ProgressStyle::default_bar()));
        let label = format!("{} {}", self.bound.recipe.nodes[i].op.name(), self.bound.recipe.nodes[i].id);
        bar.set_message(crate::text::shorten(&label, 28).into_owned());
        let finished = tools::run(tool, command, &|item| match Progress::parse(item) {
            Some(Progress::Total(n)) => bar.set_length(n),
            Some(Progress::Done(n)) => bar.set_position(n),
            None => {}
        });
        bar.finish_and_clear();
        Ok(finished?)
    }

    /// The model node `i` takes from its source `k` (`model`), as a GGUF
    /// file a tool can read: the input file itself where the source loads
    /// one as it stands, else written to `scratch`. Absolute: the tool runs
    /// in the recipe's directory.
    fn model_path(&self, i: usize, k: usize, model: &TensorSet, scratch: &TempDir) -> Result<PathBuf, NodeError> {
        match self.model_file(i, k) {
            Some(path) => Ok(absolute(&path)),
            None => self.write_scratch(model, scratch, "model.gguf"),
        }
    }

    /// The file node `i`'s source `k` already is, when it is a GGUF file
    /// loaded as it stands: the tool reads it where it lies.
    fn model_file(&self, i: usize, k: usize) -> Option<PathBuf> {
        let recipe = &self.bound.recipe;
        let &Source::Node(j) = recipe.nodes[i].from.get(k)? else { return None };
        let (Op::Load, [Source::Input(k)]) = (&recipe.nodes[j].op, recipe.nodes[j].from.as_slice()) else {
            return None;
        };
        let bound = self.bound.inputs[*k].as_ref()?;
        let [content] = bound.shards.as_slice() else { return None };
        let path = self.bound.files.path(content)?;
        let model = self.bound.files.model(content).ok()?;
        matches!(model.format, crate::formats::ContainerFormat::Gguf { .. }).then(|| path.clone())
    }

    /// The importance matrix a step computed (`imatrix = "STEP"`), read
    /// from its result `set` as llama-quantize reads the file, and recorded
    /// as what the recipe exports it as.
    pub(super) fn importance_from_step(
        &self,
        imatrix_node: usize,
        set: &TensorSet,
        options: &QuantizeOptions,
    ) -> Result<Option<ImportanceMatrix>, NodeError> {
        let m = self.materializer();
        let mut bytes = std::collections::HashMap::new();
        for tensor in &set.tensors {
            bytes.insert(tensor.name.as_str(), m.whole(tensor)?);
        }
        let name = self.bound.recipe.imatrix_name(imatrix_node);
        let data = |info: &crate::model::TensorInfo| Ok(bytes.get(info.name.as_str()).cloned().unwrap_or_default());
        let matrix = ImportanceMatrix::from_parts(&name, &set.metadata, &set.infos(), &data)?;
        Ok(crate::quant::plan::prepare_imatrix(matrix, &name, options)?)
    }
}

/// Runs of `llama-perplexity --kl-divergence` that may lose their
/// statistics before an evaluation fails.
const STATISTICS_ATTEMPTS: u32 = 5;

/// The name of the one tensor of a `kld-base` node's result: the logits
/// file's bytes.
const LOGITS: &str = "logits";

fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_owned())
}

impl From<RunFailure> for NodeError {
    fn from(e: RunFailure) -> NodeError {
        NodeError::Tool(Box::new(e))
    }
}
