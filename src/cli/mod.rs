//! The command line: parses arguments, calls an operation, prints its report.
//!
//! The only module that knows about clap and about stdout/stderr. Data goes to
//! stdout, logs to stderr; a closed pipe ends the program quietly.

mod inspect;

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};

use crate::formats::{ModelFile, OpenOptions, human_bytes};
use crate::ops::edit::{self, Edits};
use crate::ops::inspect::InspectOptions;

#[derive(Debug, Parser)]
#[command(name = "quantforge", version, about = "A build system for model weights")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Show a model file's format, metadata and tensors (reads headers only).
    Inspect {
        file: PathBuf,
        /// Print one JSON object (documented in docs/INSPECT_JSON.md).
        #[arg(long)]
        json: bool,
        /// Add a table of every tensor: name, type, shape, offset, bytes.
        #[arg(long)]
        tensors: bool,
        #[command(flatten)]
        load: LoadArgs,
    },
    /// Write a copy of a model with metadata or tensor names changed.
    ///
    /// Tensor data is copied, not decoded; with no edits the output is
    /// byte-identical to a GGUF input.
    Edit {
        input: PathBuf,
        output: PathBuf,
        /// Set a metadata key: KEY=TYPE:VALUE with TYPE one of
        /// u8 i8 u16 i16 u32 i32 u64 i64 f32 f64 bool str.
        #[arg(long = "set", value_name = "KEY=TYPE:VALUE", value_parser = edit::parse_set)]
        set: Vec<(String, crate::model::Value)>,
        /// Delete a metadata key.
        #[arg(long = "delete", value_name = "KEY")]
        delete: Vec<String>,
        /// Rename a tensor.
        #[arg(long = "rename-tensor", value_name = "OLD=NEW", value_parser = edit::parse_rename)]
        rename_tensor: Vec<(String, String)>,
        #[command(flatten)]
        load: LoadArgs,
    },
}

#[derive(Debug, clap::Args)]
struct LoadArgs {
    /// Read the file with plain reads instead of memory-mapping it.
    #[arg(long)]
    no_mmap: bool,
}

impl LoadArgs {
    fn options(&self) -> OpenOptions {
        OpenOptions { use_mmap: !self.no_mmap }
    }
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| cause.downcast_ref::<io::Error>().is_some_and(|io| io.kind() == io::ErrorKind::BrokenPipe))
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Inspect { file, json, tensors, load } => {
            let model = ModelFile::open(&file, load.options())?;
            let report = crate::ops::inspect::inspect(&model, InspectOptions { tensors });
            let mut out = io::stdout().lock();
            if json {
                serde_json::to_writer_pretty(&mut out, &report)?;
                writeln!(out)?;
            } else {
                eprintln!("loaded {}: {}", file.display(), report.load);
                inspect::print_text(&mut out, &report)?;
            }
            out.flush()?;
        }
        Command::Edit { input, output, set, delete, rename_tensor, load } => {
            let edits = Edits { set, delete, rename_tensors: rename_tensor };
            let summary = edit::edit_file(&input, &output, &edits, load.options())
                .with_context(|| format!("cannot edit {}", input.display()))?;
            eprintln!(
                "wrote {}: {} keys, {} tensors, {}",
                output.display(),
                summary.n_keys,
                summary.n_tensors,
                human_bytes(summary.bytes_written as f64)
            );
        }
    }
    Ok(())
}
