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
use crate::ops::Op;
use crate::ops::imatrix::{ImatrixOptions, Progress};
use crate::quant::imatrix::ImportanceMatrix;
use crate::quant::plan::QuantizeOptions;
use crate::recipe::Source;
use crate::tools::{self, RunFailure, Tool};

impl Shared {
    /// Runs `llama-imatrix` for node `i` over `model` (its input's result).
    pub(super) fn imatrix(
        &self,
        i: usize,
        model: &TensorSet,
        options: &ImatrixOptions,
    ) -> Result<TensorSet, NodeError> {
        let recipe = &self.bound.recipe;
        let node = &recipe.nodes[i];
        let (Some(tool), Some(&corpus)) = (&self.bound.tools[i], node.uses.first()) else {
            return Err(NodeError::Upstream(node.id.clone()));
        };
        let scratch_err = |source| NodeError::Write { path: std::env::temp_dir(), source };
        let scratch = tempfile::Builder::new().prefix("quantforge-imatrix-").tempdir().map_err(scratch_err)?;
        let model_path = match self.model_file(i) {
            Some(path) => path,
            None => self.write_scratch(model, &scratch, "model.gguf")?,
        };
        let output = scratch.path().join("imatrix.gguf");
        let dir = recipe_dir(&self.bound.recipe.source);
        let corpus = &recipe.inputs[corpus];
        // As written where it names the file from the recipe's directory:
        // the matrix records it (`imatrix.datasets`), as it would by hand.
        let corpus_arg = match dir.join(&corpus.as_written) == corpus.path {
            true => corpus.as_written.clone(),
            false => absolute(&corpus.path),
        };
        let threads = self.pool.current_num_threads().min(std::thread::available_parallelism().map_or(1, usize::from));
        let mut command = Command::new(&tool.path);
        command.current_dir(dir).arg("-m").arg(absolute(&model_path)).arg("-f").arg(&corpus_arg);
        command.arg("-o").arg(&output).args(options.arguments()).arg("-t").arg(threads.to_string());

        let bar = self.progress.add(ProgressBar::new(0));
        let style = ProgressStyle::with_template("{msg:28!} {wide_bar} {pos:>5}/{len:<5} chunks {elapsed:>4}");
        bar.set_style(style.unwrap_or_else(|_| ProgressStyle::default_bar()));
        bar.set_message(crate::text::shorten(&format!("imatrix {}", node.id), 28).into_owned());
        let finished = tools::run(Tool::Imatrix, command, &|item| match Progress::parse(item) {
            Some(Progress::Total(n)) => bar.set_length(n),
            Some(Progress::Done(n)) => bar.set_position(n),
            None => {}
        });
        bar.finish_and_clear();
        let finished = finished?;
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

    /// The file node `i`'s model already is, when its input is a GGUF file
    /// loaded as it stands: the tool reads it where it lies.
    fn model_file(&self, i: usize) -> Option<PathBuf> {
        let recipe = &self.bound.recipe;
        let &Source::Node(j) = recipe.nodes[i].from.first()? else { return None };
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
    pub(super) fn step_imatrix(
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

/// The directory a recipe's relative paths start from.
fn recipe_dir(source: &Option<PathBuf>) -> PathBuf {
    let dir = source.as_deref().and_then(Path::parent).filter(|p| !p.as_os_str().is_empty());
    dir.unwrap_or(Path::new(".")).to_owned()
}

fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_owned())
}

impl From<RunFailure> for NodeError {
    fn from(e: RunFailure) -> NodeError {
        NodeError::Tool(Box::new(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recipe_in_the_working_directory_runs_its_tools_there() {
        assert_eq!(recipe_dir(&Some(PathBuf::from("x.toml"))), PathBuf::from("."));
        assert_eq!(recipe_dir(&Some(PathBuf::from("recipes/x.toml"))), PathBuf::from("recipes"));
        assert_eq!(recipe_dir(&None), PathBuf::from("."));
    }
}
