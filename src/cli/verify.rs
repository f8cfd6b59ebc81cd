//! `quantforge verify`: is this file what it claims to be? Either the
//! export of a recipe, made again (from the cache where it can be, or all
//! recomputed with `--recompute`), or a llama-quantize derivation of a base
//! model (`--as "quantize PRESET [FLAGS]" --from BASE`), made here; exit 0
//! only when every byte is equal, else the first difference by name.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::{CommandFactory, Parser};

use super::cache::CacheDir;
use crate::exec::Engine;
use crate::exec::outputs::resolve;
use crate::ops::Op;
use crate::ops::verify::first_difference;
use crate::recipe::Recipe;
use crate::store::{MemoryStore, Store};

#[derive(Debug, clap::Args)]
pub(super) struct VerifyArgs {
    /// The file to check (an export of the recipe, or a downloaded quantized model).
    file: PathBuf,
    /// The recipe whose export the file is: that export is made again and compared.
    #[arg(long, required_unless_present = "as_command")]
    recipe: Option<PathBuf>,
    /// Compute every tensor again instead of taking the cache's (with --recipe).
    #[arg(long, requires = "recipe")]
    recompute: bool,
    /// A claimed derivation, as quantforge's (llama-quantize's) command line without its
    /// IN and OUT: "quantize [FLAGS] TYPE", e.g. "quantize --imatrix m.dat Q4_K_M".
    #[arg(long = "as", value_name = "COMMAND", requires = "from", conflicts_with = "recipe")]
    as_command: Option<String>,
    /// The base model the claimed derivation starts from.
    #[arg(long, value_name = "BASE", requires = "as_command")]
    from: Option<PathBuf>,
    #[command(flatten)]
    cache: CacheDir,
}

pub(super) fn run(args: VerifyArgs) -> anyhow::Result<()> {
    let claimed = &args.file;
    anyhow::ensure!(claimed.is_file(), "{}: no such file", claimed.display());
    let scratch = match &args.recipe {
        Some(recipe) => tempfile::Builder::new().prefix(".quantforge-verify-").tempdir_in(recipe_dir(recipe))?,
        None => tempfile::Builder::new().prefix(".quantforge-verify-").tempdir()?,
    };
    let pairs = match (&args.recipe, &args.as_command, &args.from) {
        (Some(recipe), _, _) => derive_export(&args, recipe, scratch.path())?,
        (None, Some(command), Some(base)) => vec![(claimed.clone(), derive_quantized(command, base, scratch.path())?)],
        _ => anyhow::bail!("give --recipe R, or --as COMMAND with --from BASE"),
    };
    for (claimed, derived) in &pairs {
        if let Some(difference) = first_difference(claimed, derived)? {
            anyhow::bail!("{} is not its derivation: {difference}", claimed.display());
        }
    }
    for (claimed, _) in &pairs {
        let bytes = std::fs::metadata(claimed)?.len();
        println!("verified {}: {bytes} bytes, every one equal to its derivation", claimed.display());
    }
    Ok(())
}

fn recipe_dir(recipe: &Path) -> PathBuf {
    recipe.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new(".")).to_owned()
}

/// Makes the export that wrote `args.file` again, into `scratch`, and pairs
/// each of its files with the claimed one.
fn derive_export(args: &VerifyArgs, recipe_path: &Path, scratch: &Path) -> anyhow::Result<Vec<(PathBuf, PathBuf)>> {
    let mut recipe = Recipe::load(recipe_path)?;
    let wanted = resolve(&args.file);
    let found = recipe.nodes.iter().position(|node| match &node.op {
        Op::Export(options) => resolve(&options.path) == wanted,
        _ => false,
    });
    let Some(index) = found else {
        anyhow::bail!("{} is not an export of {}", args.file.display(), recipe_path.display());
    };
    let Op::Export(options) = &mut recipe.nodes[index].op else { anyhow::bail!("node {index} is not an export") };
    if !matches!(options.split, crate::ops::export::SplitMode::Whole) {
        anyhow::bail!("{}: verifying a split export is not supported; verify its merged model", args.file.display());
    }
    let claimed = options.path.clone();
    let file_name = claimed.file_name().ok_or_else(|| anyhow::anyhow!("{}: no file name", claimed.display()))?;
    options.path = scratch.join(file_name);
    let derived = options.path.clone();
    let store: Arc<dyn Store> = match args.recompute {
        true => Arc::new(MemoryStore::new()),
        false => crate::store::open(Some(&args.cache.path(Some(&recipe))), None)?,
    };
    let engine = Engine::new(store, super::workers(recipe.jobs))?;
    let id = recipe.nodes[index].id.clone();
    let report = engine.run_targets(&recipe, &[id], false)?;
    if report.failed() {
        let errors: Vec<&str> = report.nodes.iter().filter_map(|n| n.error.as_deref()).collect();
        anyhow::bail!("the derivation failed: {}", errors.join("; "));
    }
    Ok(vec![(claimed, derived)])
}

/// Runs the claimed quantize command on `base` into `scratch`; the file it wrote.
fn derive_quantized(command: &str, base: &Path, scratch: &Path) -> anyhow::Result<PathBuf> {
    let mut words = command.split_whitespace();
    anyhow::ensure!(words.next() == Some("quantize"), "--as takes a quantize command: \"quantize [FLAGS] TYPE\"");
    let words: Vec<&str> = words.collect();
    // The type is the first word that is neither a flag nor a flag's value.
    let takes_value = |flag: &str| {
        let name = flag.trim_start_matches('-');
        super::Cli::command()
            .find_subcommand("quantize")
            .and_then(|q| q.get_arguments().find(|a| a.get_long() == Some(name)).map(|a| a.get_action().takes_values()))
            .unwrap_or(false)
    };
    let mut flags = Vec::new();
    let mut positional = Vec::new();
    let mut value_next = false;
    for word in words {
        if value_next || word.starts_with('-') {
            value_next = !value_next && word.starts_with("--") && !word.contains('=') && takes_value(word);
            flags.push(word);
        } else {
            positional.push(word);
        }
    }
    anyhow::ensure!(!positional.is_empty(), "--as names no type: \"quantize [FLAGS] TYPE\"");
    let derived = scratch.join("derived.gguf");
    let mut argv: Vec<std::ffi::OsString> = vec!["quantforge".into(), "quantize".into(), "--quiet".into()];
    argv.extend(flags.iter().map(Into::into));
    argv.push(base.into());
    argv.push(derived.clone().into());
    argv.extend(positional.iter().map(Into::into));
    let cli = super::Cli::try_parse_from(argv).map_err(|e| anyhow::anyhow!("--as: {e}"))?;
    let super::Command::Quantize(quantize) = cli.command else { anyhow::bail!("--as: not a quantize command") };
    super::quantize::run(*quantize)?;
    Ok(derived)
}
