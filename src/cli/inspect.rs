//! `quantforge inspect FILE`: a model's format, metadata and tensors (a
//! file, a split, a checkpoint), and the report as text.

use std::io::{self, Write};

use super::LoadArgs;
use crate::examine::inspect::InspectOptions;
use crate::examine::inspect::{Identity, InspectReport};
use crate::formats::ModelFile;
use crate::formats::human_bytes;
use crate::text::{count, for_terminal, name, name_width, one_line};
use anyhow::Context;
use std::path::PathBuf;

/// The columns a name from the file takes once escaped and bounded.
fn print_hparams(out: &mut dyn Write, label: &str, identity: &Identity) -> io::Result<()> {
    if let Some(h) = &identity.hyperparameters {
        let optional = |name: &str, v: Option<String>| v.map(|v| format!(", {name} {v}")).unwrap_or_default();
        writeln!(
            out,
            "{label}{} blocks, width {}, {} heads ({} KV) of {}{}{}{}{}",
            h.block_count,
            h.embedding_length,
            h.head_count,
            h.head_count_kv,
            h.head_dim,
            optional("context", h.context_length.map(|v| v.to_string())),
            optional("vocab", h.vocab_size.map(|v| v.to_string())),
            optional("rope base", h.rope_freq_base.map(|v| v.to_string())),
            optional("experts", h.expert_count.map(|v| v.to_string())),
        )?;
    }
    if let Some(error) = &identity.hyperparameter_error {
        writeln!(out, "{label}INVALID: {}", one_line(error))?;
    }
    Ok(())
}

pub fn print_text(out: &mut dyn Write, r: &InspectReport) -> io::Result<()> {
    writeln!(out, "file          {} ({})", r.file, human_bytes(r.file_size as f64))?;
    writeln!(
        out,
        "format        {}{}, {}-endian, alignment {}, data at byte {}",
        r.format,
        // SafeTensors and PyTorch files have no version.
        if r.version == 0 { String::new() } else { format!(" v{}", r.version) },
        match r.endian {
            crate::model::Endian::Little => "little",
            crate::model::Endian::Big => "big",
        },
        r.alignment,
        r.data_offset
    )?;
    let id = &r.identity;
    writeln!(out, "architecture  {}", name(id.architecture.as_deref().unwrap_or("(none)")))?;
    writeln!(out, "family        {} ({}; by {})", id.family.name, id.family.id, id.family.detected_by.describe())?;
    if let Some(checkpoint) = &r.checkpoint {
        let class = checkpoint.class.as_deref().map_or("no class".to_owned(), |c| name(c).to_string());
        let model_type =
            checkpoint.model_type.as_deref().map(|t| format!(" (model_type {})", name(t))).unwrap_or_default();
        let converts = match checkpoint.converts_as {
            Some(arch) => format!("`quantforge convert` writes it as {arch}"),
            None => "not a class `quantforge convert` takes (--print-supported-models lists them)".to_owned(),
        };
        writeln!(out, "config.json   {class}{model_type}: {converts}")?;
    }
    print_hparams(out, "hparams       ", id)?;
    for part in r.parts.iter().flatten() {
        writeln!(
            out,
            "part          {}: {} ({}), {}, {}",
            part.role,
            name(part.identity.architecture.as_deref().unwrap_or("(none)")),
            part.identity.family.name,
            count(part.tensor_count as u64, "tensor"),
            human_bytes(part.tensor_bytes as f64)
        )?;
        print_hparams(out, "  hparams     ", &part.identity)?;
    }
    if let Some(ft) = &r.file_type {
        writeln!(out, "file type     {} (id {})", ft.description.unwrap_or("unknown"), ft.id)?;
    }
    writeln!(
        out,
        "tensors       {}, {} elements, {}, {:.2} bits per weight",
        count(r.tensor_count as u64, "tensor"),
        r.element_count,
        human_bytes(r.tensor_bytes as f64),
        r.bits_per_weight
    )?;
    if let Some(shards) = &r.split {
        writeln!(out, "split         {} shards (the report is of the whole model)", shards.len())?;
        for shard in shards {
            let size = human_bytes(shard.file_size as f64);
            writeln!(out, "  {}  {}, {size}", name(&shard.file), count(shard.tensor_count as u64, "tensor"))?;
        }
    }
    if r.legacy_blocks_repacked {
        writeln!(out, "note          pre-GGJTv3 blocks are repacked on read (scales narrowed to f16)")?;
    }

    writeln!(out, "\nmetadata ({} keys)", r.metadata.len())?;
    let key_width = r.metadata.iter().map(|m| name_width(&m.key)).max().unwrap_or(0);
    for m in &r.metadata {
        let ty = match (m.element_type, m.len) {
            (Some(el), Some(len)) => format!("arr[{el}; {len}]"),
            _ => m.value_type.to_owned(),
        };
        let mut value = m.value.to_string();
        if m.truncated {
            value.truncate(value.len() - 1);
            value.push_str(", ...]");
        }
        // JSON escapes only the C0 controls: DEL, C1 and bidi controls too.
        writeln!(out, "  {:key_width$}  {ty:14}  {}", name(&m.key), for_terminal(&value))?;
    }

    writeln!(out, "\ntypes")?;
    for t in &r.types {
        writeln!(
            out,
            "  {:8} {:5} tensors  {:>12} elements  {:>10}",
            t.ggml_type,
            t.tensors,
            t.elements,
            human_bytes(t.bytes as f64)
        )?;
    }

    if let Some(tensors) = &r.tensors {
        let name_width = tensors.iter().map(|t| name_width(&t.name)).max().unwrap_or(4).max(4);
        writeln!(out, "\n  {:name_width$}  {:8}  {:24}  {:>12}  {:>12}", "name", "type", "shape", "offset", "bytes")?;
        for t in tensors {
            let shape = format!("{:?}", t.shape);
            writeln!(
                out,
                "  {:name_width$}  {:8}  {:24}  {:>12}  {:>12}",
                name(&t.name),
                t.ggml_type,
                shape,
                t.offset,
                t.bytes
            )?;
        }
    }
    Ok(())
}

#[derive(Debug, clap::Args)]
pub(super) struct InspectArgs {
    /// A model file, a split's shard, a Hugging Face checkpoint directory (or its
    /// *.index.json), or a repo id ORG/NAME[@REVISION] in the local Hugging Face cache.
    file: PathBuf,
    /// Add a table of every tensor: name, type, shape, offset, bytes.
    #[arg(long)]
    tensors: bool,
    #[command(flatten)]
    load: LoadArgs,
}

pub(super) fn run(args: InspectArgs, json: bool) -> anyhow::Result<()> {
    let InspectArgs { file, tensors, load } = args;
    let options = InspectOptions { tensors };
    let file = crate::formats::model_path(&file).map_err(anyhow::Error::msg)?;
    let mut report = match checkpoint_files(&file)? {
        Some(paths) if paths.len() == 1 => {
            crate::examine::inspect::inspect(&ModelFile::open(&paths[0], load.options())?, options)
        }
        // A checkpoint's shards make one model.
        Some(paths) => {
            let shards = paths.iter().map(|p| ModelFile::open(p, load.options())).collect::<Result<Vec<_>, _>>()?;
            let shards: Vec<&ModelFile> = shards.iter().collect();
            crate::examine::inspect::inspect_split(&shards, options).context("a checkpoint has shards")?
        }
        None => match crate::formats::shard_set(&file) {
            // Any shard of a split stands for the whole model.
            Some(paths) => {
                let shards = paths.iter().map(|p| ModelFile::open(p, load.options())).collect::<Result<Vec<_>, _>>()?;
                let shards: Vec<&ModelFile> = shards.iter().collect();
                crate::ops::split::check_shards(&shards)?;
                crate::examine::inspect::inspect_split(&shards, options).context("a split has shards")?
            }
            None => crate::examine::inspect::inspect(&ModelFile::open(&file, load.options())?, options),
        },
    };
    if file.is_dir() {
        let dir = crate::formats::hub_snapshot(&file);
        let config = std::fs::read(dir.join("config.json")).ok();
        let config = config.map(|bytes| serde_json::from_slice(&bytes)).transpose();
        let config = config.with_context(|| format!("{}", dir.join("config.json").display()))?;
        report.checkpoint = config.as_ref().map(crate::examine::inspect::CheckpointConfig::of);
    }
    if json {
        return super::json::print(&report);
    }
    say!("loaded {}: {}", file.display(), report.load);
    let mut out = io::stdout().lock();
    print_text(&mut out, &report)?;
    out.flush()?;
    Ok(())
}

/// The weight files `path` stands for when it is a Hugging Face checkpoint
/// directory (a Hub cache's too) or a checkpoint's `*.index.json`; `None`
/// for a model file.
fn checkpoint_files(path: &std::path::Path) -> anyhow::Result<Option<Vec<PathBuf>>> {
    if path.is_dir() {
        let dir = crate::formats::hub_snapshot(path);
        let files = crate::convert::checkpoint_weights(&crate::convert::OnDisk, &dir)?;
        anyhow::ensure!(
            !files.is_empty(),
            "{}: a directory without model*.safetensors or pytorch_model*.bin files",
            dir.display()
        );
        return Ok(Some(files));
    }
    if crate::formats::is_checkpoint_index(path) {
        return Ok(Some(crate::formats::safetensors::read_index(path)?.shards()));
    }
    Ok(None)
}
