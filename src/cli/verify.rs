//! `quantforge verify`: is this file what it claims to be? Either the
//! export of a recipe, made again (from the cache where it can be, or all
//! recomputed with `--recompute`), or a llama-quantize derivation of a base
//! model (`--as "quantize PRESET [FLAGS]" --from BASE`), made here; exit 0
//! only when every byte is equal, else the first difference by name.
//!
//! With `--attestation`, the recipe is the one the attestation names (its
//! digest checked, as is the signature with `--pubkey`), and the file and
//! every input must have the digests it records before anything is made.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::CommandFactory;

use super::cache::CacheDir;
use crate::exec::Engine;
use crate::exec::outputs::find_export;
use crate::exec::{attest, dsse};
use crate::ops::Op;
use crate::ops::verify::first_difference;
use crate::recipe::Recipe;
use crate::store::{MemoryStore, Store};

#[derive(Debug, clap::Args)]
pub(super) struct VerifyArgs {
    /// The file to check (an export of the recipe, or a downloaded quantized model).
    file: PathBuf,
    /// The recipe whose export the file is: that export is made again and compared.
    #[arg(long, required_unless_present_any = ["as_command", "attestation"])]
    recipe: Option<PathBuf>,
    /// A provenance attestation of the file (`quantforge attest`'s statement or signed
    /// envelope): the recipe it names (found beside the file unless --recipe says), with the
    /// digests it records, is the derivation.
    #[arg(long, value_name = "FILE", conflicts_with = "as_command")]
    attestation: Option<PathBuf>,
    /// The ed25519 public key (SPKI PEM) whose signature a signed attestation must carry.
    #[arg(long, value_name = "KEY", requires = "attestation")]
    pubkey: Option<PathBuf>,
    /// Compute every tensor again instead of taking the cache's (with --recipe or --attestation).
    #[arg(long)]
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

pub(super) fn run(args: VerifyArgs, json: bool) -> anyhow::Result<()> {
    let claimed = &args.file;
    anyhow::ensure!(claimed.is_file(), "{}: no such file", claimed.display());
    anyhow::ensure!(
        !args.recompute || args.as_command.is_none(),
        "--recompute is for a recipe's export: --as always computes"
    );
    let recipe = match &args.attestation {
        Some(attestation) => Some(attested_recipe(&args, attestation)?),
        None => args.recipe.clone(),
    };
    let scratch = match &recipe {
        Some(recipe) => tempfile::Builder::new().prefix(".quantforge-verify-").tempdir_in(recipe_dir(recipe))?,
        None => tempfile::Builder::new().prefix(".quantforge-verify-").tempdir()?,
    };
    let pairs = match (&recipe, &args.as_command, &args.from) {
        (Some(recipe), _, _) => derive_export(&args, recipe, scratch.path())?,
        (None, Some(command), Some(base)) => vec![(claimed.clone(), derive_quantized(command, base, scratch.path())?)],
        _ => anyhow::bail!("give --recipe R, or --as COMMAND with --from BASE"),
    };
    for (claimed, derived) in &pairs {
        if let Some(difference) = first_difference(claimed, derived)? {
            anyhow::bail!("{} is not its derivation: {difference}", claimed.display());
        }
    }
    let mut files = Vec::new();
    for (claimed, _) in &pairs {
        files.push(super::json::VerifiedFile { path: claimed.clone(), bytes: std::fs::metadata(claimed)?.len() });
    }
    if json {
        return super::json::print(&super::json::Verified { files });
    }
    for file in &files {
        println!("verified {}: {} bytes, every one equal to its derivation", file.path.display(), file.bytes);
    }
    Ok(())
}

fn recipe_dir(recipe: &Path) -> PathBuf {
    recipe.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new(".")).to_owned()
}

/// The recipe `attestation` names for `args.file`, once the attestation
/// (and its signature, with `--pubkey`) is checked and the file, the recipe
/// and every input it records have the digests it gives.
fn attested_recipe(args: &VerifyArgs, attestation: &Path) -> anyhow::Result<PathBuf> {
    const MAX_ATTESTATION_BYTES: u64 = 64 << 20;
    let bytes = crate::files::read_regular(attestation, MAX_ATTESTATION_BYTES)
        .map_err(|e| anyhow::anyhow!("{}: {e}", attestation.display()))?;
    let shown = attestation.display();
    let json: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| anyhow::anyhow!("{shown}: not JSON: {e}"))?;
    let payload = match (json.get("payloadType").is_some(), &args.pubkey) {
        (true, Some(pubkey)) => {
            let envelope: dsse::Envelope =
                serde_json::from_value(json).map_err(|e| anyhow::anyhow!("{shown}: not a DSSE envelope: {e}"))?;
            dsse::open(&envelope, pubkey).map_err(|e| anyhow::anyhow!("{shown}: {e}"))?
        }
        (true, None) => anyhow::bail!("{shown} is signed: give --pubkey to check its signature"),
        (false, Some(_)) => anyhow::bail!("{shown} is a bare statement: it has no signature to check with --pubkey"),
        (false, None) => bytes,
    };
    let statement: attest::Statement =
        serde_json::from_slice(&payload).map_err(|e| anyhow::anyhow!("{shown}: not a quantforge attestation: {e}"))?;
    let (types, build_type) = (
        (statement.statement_type.as_str(), statement.predicate_type.as_str()),
        statement.predicate.build_definition.build_type.as_str(),
    );
    if types != (attest::STATEMENT_TYPE, attest::PROVENANCE_TYPE) || build_type != attest::BUILD_TYPE {
        anyhow::bail!(
            "{shown}: a {} with a {} predicate of build type {build_type}, not quantforge's",
            types.0,
            types.1
        );
    }

    let file = &args.file;
    let name = file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let Some(subject) = statement.subject.iter().find(|s| s.name == name) else {
        anyhow::bail!("{shown} does not attest a file named {name}");
    };
    let sha256 = crate::files::sha256_file(file)?;
    if sha256 != subject.digest.sha256 {
        anyhow::bail!(
            "{} is not the attested file: its sha256 is {sha256}, the attestation's {}",
            file.display(),
            subject.digest.sha256
        );
    }

    let definition = &statement.predicate.build_definition;
    let recipe = match &args.recipe {
        Some(recipe) => recipe.clone(),
        None => file.parent().unwrap_or(Path::new("")).join(&definition.external_parameters.recipe.path),
    };
    let recipe_bytes = crate::files::read_regular(&recipe, 16 << 20)
        .map_err(|e| anyhow::anyhow!("the attested recipe {}: {e}; give --recipe", recipe.display()))?;
    let recipe_sha256 = crate::files::sha256_hex(&recipe_bytes);
    if recipe_sha256 != definition.external_parameters.recipe.digest.sha256 {
        anyhow::bail!(
            "the recipe {} is not the attested one: its sha256 is {recipe_sha256}, the attestation's {}",
            recipe.display(),
            definition.external_parameters.recipe.digest.sha256
        );
    }
    let dir = recipe_dir(&recipe);
    for dependency in &definition.resolved_dependencies {
        let path = dir.join(&dependency.name);
        let input = dependency.annotations.as_ref().map_or("?", |a| a.input.as_str());
        let sha256 = crate::files::sha256_file(&path)
            .map_err(|e| anyhow::anyhow!("input `{input}` ({}): {e}", path.display()))?;
        if sha256 != dependency.digest.sha256 {
            anyhow::bail!(
                "input `{input}` ({}) is not the attested one: its sha256 is {sha256}, the attestation's {}",
                path.display(),
                dependency.digest.sha256
            );
        }
    }
    Ok(recipe)
}

/// Makes the export that wrote `args.file` again, into `scratch`, and pairs
/// each of its files with the claimed one.
fn derive_export(args: &VerifyArgs, recipe_path: &Path, scratch: &Path) -> anyhow::Result<Vec<(PathBuf, PathBuf)>> {
    let mut recipe = Recipe::load(recipe_path)?;
    let Some(index) = find_export(&recipe, &args.file) else {
        anyhow::bail!("{} is not an export of {}", args.file.display(), recipe_path.display());
    };
    let Op::Export(options) = &mut recipe.nodes[index].op else { anyhow::bail!("node {index} is not an export") };
    if !matches!(options.split, crate::ops::export::SplitMode::Whole) {
        anyhow::bail!("{}: verifying a split export is not supported; verify its merged model", args.file.display());
    }
    let claimed = args.file.clone();
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
    super::quantize::quantize_quietly(&flags, base, &derived, &positional).map_err(|e| anyhow::anyhow!("--as: {e}"))?;
    Ok(derived)
}
