//! Recipes: what the outputs are and how they are made.
//!
//! A recipe arrives as TOML (`parse`) or is built by a one-shot command
//! (`Recipe::one_step`); either way the engine sees the same thing: named
//! inputs and a list of nodes in dependency order, each with its op already
//! read and checked, its inputs resolved, and fan-out expanded (a list where
//! one value was expected makes one node per element). This module owns
//! what a recipe may say and every diagnostic about it; it never touches a
//! model file.

pub mod graph;
mod parse;

use std::path::{Path, PathBuf};

pub use crate::params::{
    Diagnostic, Located, OpSpec, Param, ParamKind, ParamSpec, ParamValue, Params, RecipeError, Span, nearest,
};

use crate::key::Key;
use crate::ops::Op;
use crate::remote_url::RemoteUrl;

/// A validated recipe.
#[derive(Debug, Clone)]
pub struct Recipe {
    pub name: String,
    pub inputs: Vec<InputDecl>,
    /// In dependency order: a node's inputs come before it.
    pub nodes: Vec<NodeDecl>,
    /// The recipe file (none for a one-shot command's recipe). Its directory
    /// is the output tree: exports may write nowhere else.
    pub source: Option<PathBuf>,
    /// `[recipe] remote`: the shared cache this recipe's results go to,
    /// unless the command line names another.
    pub remote: Option<RemoteUrl>,
    /// `[recipe] jobs`: workers for a run, unless the command line says.
    pub jobs: Option<usize>,
    /// `[recipe] cache`: its cache directory, unless the command line says.
    pub cache: Option<PathBuf>,
    /// `[tools] llama_cpp`: the llama.cpp build whose tools the recipe's
    /// `imatrix` and `evaluate` steps run, resolved against the recipe's
    /// directory.
    pub llama_cpp: Option<PathBuf>,
}

#[derive(Debug, Clone)]
pub struct InputDecl {
    pub name: String,
    /// Resolved against the recipe's directory.
    pub path: PathBuf,
    /// The path as the recipe (or the command line) wrote it: what a model
    /// quantized with this input as its importance matrix records of it, as
    /// llama-quantize records its `--imatrix` argument. Part of the keys of
    /// the nodes that use it, never of the nodes that read it.
    pub as_written: PathBuf,
    /// `blake3 = "…"`: the run fails if the file's hash differs.
    pub pin: Option<Key>,
    /// Where the recipe writes its `path` (1-based line and column), for
    /// errors about the file; `None` for a one-shot command's inputs.
    pub written_at: Option<(usize, usize)>,
    /// `fetch = "…"`: the command that fetches the file, named when it is missing.
    pub fetch: Option<String>,
}

/// Where a node's input comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// An `[input.NAME]`, by index (only `load` reads files directly).
    Input(usize),
    /// An earlier node, by index.
    Node(usize),
}

/// The kernel backend a node asks for. Every backend produces the same
/// bytes, so this is never part of a key.
pub use crate::backend::Choice as Backend;

/// The value of a fan-out parameter, as path templates see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    pub name: String,
    pub value: String,
    /// Given as a list (so the value tells the nodes apart and names them).
    pub listed: bool,
}

#[derive(Debug, Clone)]
pub struct NodeDecl {
    /// The step name, plus the fan-out values when there are any:
    /// `q[preset=Q8_0]`.
    pub id: String,
    pub step: String,
    pub op: Op,
    pub from: Vec<Source>,
    /// Inputs named by parameters (`imatrix = "NAME"`), as input indices.
    pub uses: Vec<usize>,
    /// Fan-out parameter values this node carries, upstream ones included.
    pub bindings: Vec<Binding>,
    /// Materialize this node's tensors in the store.
    pub keep: bool,
    pub backend: Backend,
}

/// The project `start` (a directory) is in: the nearest ancestor holding
/// `.git` or `quantforge.toml`, else `start` itself; absolute.
pub fn project_root(start: &Path) -> PathBuf {
    let start = std::path::absolute(start).unwrap_or_else(|_| start.to_owned());
    let marked = |dir: &&Path| dir.join(".git").exists() || dir.join("quantforge.toml").exists();
    start.ancestors().find(marked).unwrap_or(&start).to_owned()
}

/// The directory of the recipe file at `path`, `.` for none.
fn directory_of(path: Option<&Path>) -> &Path {
    path.and_then(Path::parent).filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."))
}

/// A recipe is text a person writes; anything larger is not one.
const MAX_RECIPE_BYTES: u64 = 16 << 20;

impl Recipe {
    /// Reads and validates the recipe at `path`. Input and export paths are
    /// relative to its directory.
    pub fn load(path: &Path) -> Result<Recipe, RecipeError> {
        let cannot = |e: &dyn std::fmt::Display| RecipeError::whole_file(path, format!("cannot read the recipe: {e}"));
        let bytes =
            crate::files::read_regular(path, MAX_RECIPE_BYTES).map_err(|e| cannot(&crate::files::IoText(&e)))?;
        let text = String::from_utf8(bytes).map_err(|_| cannot(&"it is not UTF-8 text"))?;
        let dir = directory_of(Some(path));
        let fallback_name = path.file_stem().map_or("recipe".into(), |s| s.to_string_lossy().into_owned());
        let recipe = parse::parse(&text, dir, &fallback_name).map_err(|d| RecipeError::new(path, &text, d))?;
        Ok(Recipe { source: Some(path.to_owned()), ..recipe })
    }

    /// Where the recipe's results are cached unless the command line says:
    /// `[recipe] cache`, else `cache/` in the recipe's project root, so the
    /// results never depend on the directory a command was started in.
    pub fn default_cache_dir(&self) -> PathBuf {
        if let Some(dir) = &self.cache {
            return dir.clone();
        }
        project_root(self.dir()).join("cache")
    }

    /// The directory the recipe's relative paths start from (its file's;
    /// the working directory for a one-shot command's recipe).
    pub fn dir(&self) -> &Path {
        directory_of(self.source.as_deref())
    }

    /// What node `index` is made from: the nodes on its path (itself
    /// included) in dependency order, and the inputs they read or use.
    pub fn upstream(&self, index: usize) -> (Vec<usize>, Vec<usize>) {
        let mut nodes = vec![false; self.nodes.len()];
        let mut inputs = vec![false; self.inputs.len()];
        nodes[index] = true;
        // Nodes come after their inputs, so one backward sweep reaches them all.
        for i in (0..=index).rev() {
            if !nodes[i] {
                continue;
            }
            for source in &self.nodes[i].from {
                match *source {
                    Source::Input(j) => inputs[j] = true,
                    Source::Node(j) => nodes[j] = true,
                }
            }
            for &j in &self.nodes[i].uses {
                inputs[j] = true;
            }
        }
        let chosen = |flags: Vec<bool>| flags.iter().enumerate().filter(|(_, f)| **f).map(|(i, _)| i).collect();
        (chosen(nodes), chosen(inputs))
    }

    /// The name a model quantized with the importance matrix that node
    /// `imatrix` computes records for it (`quantize.imatrix.file`): the path
    /// an export of that node writes, as the recipe writes it, else the
    /// node's id.
    pub fn imatrix_name(&self, imatrix: usize) -> PathBuf {
        let dir = self.dir();
        let exported = self.nodes.iter().find_map(|n| match &n.op {
            Op::Export(o) if n.from == [Source::Node(imatrix)] => Some(&o.path),
            _ => None,
        });
        match exported {
            Some(path) => path.strip_prefix(dir).unwrap_or(path).to_owned(),
            None => PathBuf::from(&self.nodes[imatrix].id),
        }
    }

    /// Validates recipe `text` as if read from `path`.
    pub fn parse(text: &str, path: &Path) -> Result<Recipe, RecipeError> {
        let dir = directory_of(Some(path));
        let recipe = parse::parse(text, dir, "recipe").map_err(|d| RecipeError::new(path, text, d))?;
        Ok(Recipe { source: Some(path.to_owned()), ..recipe })
    }

    /// The recipe a one-shot ladder runs: read the input once, then each
    /// rung's op and its export, in one run (each tensor decoded once for
    /// every rung, as a recipe's fan-out is). `job`'s own ops and output are
    /// not used.
    pub fn one_shot_ladder(job: OneShot<'_>, rungs: Vec<Rung>) -> Recipe {
        let mut recipe = Recipe::one_shot(OneShot { ops: Vec::new(), ..job });
        recipe.nodes.truncate(1);
        let template = recipe.nodes[0].clone();
        for rung in rungs {
            let id = |step: &str| format!("{step}[{}]", rung.name);
            let step = rung.op.name();
            let op = NodeDecl {
                id: id(step),
                step: step.into(),
                op: rung.op,
                from: vec![Source::Node(0)],
                uses: rung.uses,
                ..template.clone()
            };
            let export = Op::Export(crate::ops::export::ExportOptions {
                path: rung.output,
                format: crate::ops::export::ExportFormat::Gguf,
                split: crate::ops::export::SplitMode::Whole,
                attest: false,
                byte_order: None,
            });
            let from = vec![Source::Node(recipe.nodes.len())];
            let export = NodeDecl { id: id("export"), step: "export".into(), op: export, from, ..template.clone() };
            recipe.nodes.extend([op, export]);
        }
        recipe
    }

    /// The recipe a one-shot command runs: read the input, apply the ops in
    /// order, export.
    pub fn one_shot(job: OneShot<'_>) -> Recipe {
        let mut inputs = vec![InputDecl {
            name: "model".into(),
            path: job.input.to_owned(),
            as_written: job.input.to_owned(),
            pin: None,
            written_at: None,
            fetch: None,
        }];
        inputs.extend(job.extra_inputs.iter().map(|extra| InputDecl {
            name: extra.name.into(),
            path: extra.path.to_path_buf(),
            as_written: extra.as_written.to_path_buf(),
            pin: None,
            written_at: None,
            fetch: None,
        }));
        let node = |id: &str, op: Op, from: Source, uses: Vec<usize>| NodeDecl {
            id: id.into(),
            step: id.into(),
            op,
            from: vec![from],
            uses,
            bindings: Vec::new(),
            keep: false,
            backend: Backend::Auto,
        };
        let mut nodes = vec![node("model", job.read, Source::Input(0), job.read_uses)];
        for (op, uses) in job.ops {
            let id = op.name();
            nodes.push(node(id, op, Source::Node(nodes.len() - 1), uses));
        }
        let export = Op::Export(crate::ops::export::ExportOptions {
            path: job.output.to_owned(),
            format: job.format,
            split: job.split,
            attest: false,
            byte_order: job.byte_order,
        });
        nodes.push(node("export", export, Source::Node(nodes.len() - 1), Vec::new()));
        Recipe::of_command(job.name, inputs, nodes)
    }
}

impl Recipe {
    /// A one-shot command's recipe of `inputs` and `nodes`: no file, and
    /// nothing of what a recipe file's `[recipe]` and `[tools]` may say.
    fn of_command(name: &str, inputs: Vec<InputDecl>, nodes: Vec<NodeDecl>) -> Recipe {
        Recipe {
            name: name.into(),
            inputs,
            nodes,
            source: None,
            remote: None,
            jobs: None,
            cache: None,
            llama_cpp: None,
        }
    }

    /// The recipe of `quantforge assemble`: load every part, assemble, export.
    pub fn assemble(parts: &[&Path], output: &Path) -> Recipe {
        let named: Vec<(String, &Path)> =
            parts.iter().enumerate().map(|(i, path)| (format!("part{}", i + 1), *path)).collect();
        Recipe::combined("assemble", &named, Op::Assemble, output)
    }

    /// The recipe of `quantforge lora-merge`: the base and each adapter
    /// read, merged in the order given, exported. A GGUF adapter is loaded;
    /// a PEFT directory is converted as `convert-lora` converts it (at f32,
    /// `convert_lora_to_gguf.py`'s default), its Hugging Face base an input
    /// of the conversion.
    pub fn lora_merge(base: &Path, adapters: &[MergeAdapter<'_>], output: &Path) -> Recipe {
        let name = |i: usize| format!("lora{}", i + 1);
        let mut parts = vec![("base".to_owned(), base)];
        parts.extend(adapters.iter().enumerate().map(|(i, adapter)| (name(i), adapter.path)));
        let scales = adapters.iter().enumerate().map(|(i, adapter)| (name(i), adapter.scale)).collect();
        let op = Op::LoraMerge(crate::ops::lora_merge::LoraMergeOptions { scales });
        let mut recipe = Recipe::combined("lora-merge", &parts, op, output);
        for (i, adapter) in adapters.iter().enumerate() {
            let Some(peft_base) = adapter.peft_base else { continue };
            recipe.nodes[i + 1].op =
                Op::ConvertLora(crate::ops::convert::ConvertLoraOptions { outtype: crate::convert::OutType::F32 });
            recipe.nodes[i + 1].uses = vec![recipe.inputs.len()];
            recipe.inputs.push(InputDecl {
                name: format!("{}.base", name(i)),
                path: peft_base.to_owned(),
                as_written: peft_base.to_owned(),
                pin: None,
                written_at: None,
                fetch: None,
            });
        }
        recipe
    }

    /// A one-shot recipe of several files: load each (named), apply `op` to
    /// all of them in order, export the result to `output`.
    pub fn combined(name: &str, parts: &[(String, &Path)], op: Op, output: &Path) -> Recipe {
        let inputs: Vec<InputDecl> = parts
            .iter()
            .map(|(name, path)| InputDecl {
                name: name.clone(),
                path: path.to_path_buf(),
                as_written: path.to_path_buf(),
                pin: None,
                written_at: None,
                fetch: None,
            })
            .collect();
        let node = |id: String, op: Op, from: Vec<Source>| NodeDecl {
            step: id.clone(),
            id,
            op,
            from,
            uses: Vec::new(),
            bindings: Vec::new(),
            keep: false,
            backend: Backend::Auto,
        };
        let mut nodes: Vec<NodeDecl> = inputs
            .iter()
            .enumerate()
            .map(|(i, input)| node(input.name.clone(), Op::Load, vec![Source::Input(i)]))
            .collect();
        let id = op.name().to_owned();
        nodes.push(node(id, op, (0..parts.len()).map(Source::Node).collect()));
        let export = crate::ops::export::ExportOptions {
            path: output.to_owned(),
            format: crate::ops::export::ExportFormat::Gguf,
            split: crate::ops::export::SplitMode::Whole,
            attest: false,
            byte_order: None,
        };
        nodes.push(node("export".into(), Op::Export(export), vec![Source::Node(parts.len())]));
        Recipe::of_command(name, inputs, nodes)
    }
}

/// What a one-shot command does, as a recipe.
pub struct OneShot<'a> {
    pub name: &'a str,
    pub input: &'a Path,
    /// Named inputs the ops refer to by index from 1 (an importance matrix).
    pub extra_inputs: &'a [ExtraInput<'a>],
    /// `load`, `merge-shards` or `convert`.
    pub read: Op,
    /// The indices of the inputs the read op's parameters name.
    pub read_uses: Vec<usize>,
    /// Each op with the indices of the inputs its parameters name.
    pub ops: Vec<(Op, Vec<usize>)>,
    pub output: &'a Path,
    pub split: crate::ops::export::SplitMode,
    pub format: crate::ops::export::ExportFormat,
    /// The output's byte order; `None` keeps the result's own.
    pub byte_order: Option<crate::model::Endian>,
}

/// One rung of a one-shot ladder: an op on the model (its inputs' indices
/// as in [`OneShot::ops`]) and the file it is exported to.
pub struct Rung {
    /// Names the rung's nodes (`quantize[Q4_K_M]`).
    pub name: String,
    pub op: Op,
    pub uses: Vec<usize>,
    pub output: PathBuf,
}

/// An adapter `quantforge lora-merge` merges: a GGUF adapter, or a PEFT
/// directory with the Hugging Face base it was trained on.
#[derive(Debug, Clone, Copy)]
pub struct MergeAdapter<'a> {
    pub path: &'a Path,
    pub peft_base: Option<&'a Path>,
    pub scale: f32,
}

/// An input of a one-shot command besides its model.
#[derive(Debug, Clone, Copy)]
pub struct ExtraInput<'a> {
    pub name: &'a str,
    pub path: &'a Path,
    /// See [`InputDecl::as_written`].
    pub as_written: &'a Path,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recipe_in_the_working_directory_runs_its_tools_there() {
        assert_eq!(directory_of(Some(Path::new("x.toml"))), Path::new("."));
        assert_eq!(directory_of(Some(Path::new("recipes/x.toml"))), Path::new("recipes"));
        assert_eq!(directory_of(None), Path::new("."));
    }
}
