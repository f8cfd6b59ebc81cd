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
use crate::examine::verify::first_difference;
use crate::exec::Engine;
use crate::exec::outputs::find_export;
use crate::exec::provenance::{attest, dsse};
use crate::ops::Op;
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
    let attested = args.attestation.as_ref().map(|attestation| attested_recipe(&args, attestation)).transpose()?;
    let recipe = match &attested {
        Some(attested) => Some(attested.recipe.clone()),
        None => args.recipe.clone(),
    };
    let scratch = match &recipe {
        Some(recipe) => crate::formats::scratch_dir(&recipe_dir(recipe))?,
        None => crate::formats::scratch_dir(&std::env::temp_dir())?,
    };
    let pairs = match (&recipe, &args.as_command, &args.from) {
        (Some(recipe), _, _) => {
            let derivation = derive_export(&args, recipe, scratch.path())?;
            if let Some(attested) = &attested {
                check_attested_derivation(attested, &derivation)?;
            }
            derivation.pairs
        }
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

/// An attestation whose signature, digests and versions were checked, and
/// the recipe it names.
struct Attested {
    shown: String,
    recipe: PathBuf,
    statement: attest::Statement,
}

/// The recipe `attestation` names for `args.file`, once the attestation
/// (and its signature, with `--pubkey`) is checked and every digest it
/// states holds: the file's, the recipe's and every input file's, sha256
/// and blake3 alike, each input's size, the builder and the codec and
/// key-scheme versions. What only a derivation can show (that the export
/// and its steps are the ones it names) is [`check_attested_derivation`]'s.
fn attested_recipe(args: &VerifyArgs, attestation: &Path) -> anyhow::Result<Attested> {
    const MAX_ATTESTATION_BYTES: u64 = 64 << 20;
    let bytes = crate::files::read_regular(attestation, MAX_ATTESTATION_BYTES)
        .map_err(|e| anyhow::anyhow!("{}: {}", attestation.display(), crate::files::IoText(&e)))?;
    let shown = attestation.display().to_string();
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
    let builder = &statement.predicate.run_details.builder;
    if builder.id != attest::BUILDER_ID {
        anyhow::bail!("{shown}: built by {}, not by quantforge ({})", builder.id, attest::BUILDER_ID);
    }
    let versions = &statement.predicate.build_definition.internal_parameters;
    known_version("codec version", versions.codec_version, crate::codecs::CODEC_VERSION, &shown)?;
    known_version("cache key scheme", versions.key_scheme, crate::key::KEY_SCHEME_VERSION, &shown)?;

    let file = &args.file;
    let name = file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let Some(subject) = statement.subject.iter().find(|s| s.name == name) else {
        anyhow::bail!("{shown} does not attest a file named {}", crate::text::Name(&name));
    };
    if statement.subject.len() != 1 {
        anyhow::bail!("{shown} attests {} files; a whole export writes one", statement.subject.len());
    }
    check_digests(file, &subject.digest, &format!("{} is not the attested file", file.display()))?;

    let definition = &statement.predicate.build_definition;
    let recipe = match &args.recipe {
        Some(recipe) => recipe.clone(),
        None => file.parent().unwrap_or(Path::new("")).join(&definition.external_parameters.recipe.path),
    };
    let recipe_bytes = crate::files::read_regular(&recipe, 16 << 20)
        .map_err(|e| anyhow::anyhow!("the attested recipe {}: {e}; give --recipe", recipe.display()))?;
    let digest = &definition.external_parameters.recipe.digest;
    let (sha256, blake3) = (crate::files::sha256_hex(&recipe_bytes), blake3::hash(&recipe_bytes).to_hex().to_string());
    if let Some(difference) = digest_difference(digest, &sha256, &blake3) {
        anyhow::bail!("the recipe {} is not the attested one: {difference}", recipe.display());
    }
    let dir = recipe_dir(&recipe);
    for dependency in &definition.resolved_dependencies {
        let path = dir.join(&dependency.name);
        let Some(annotations) = &dependency.annotations else {
            anyhow::bail!("{shown}: dependency {} names no input", crate::text::Name(&dependency.name));
        };
        let input = &annotations.input;
        let what = format!("input `{input}` ({}) is not the attested one", path.display());
        let size = check_digests(&path, &dependency.digest, &what)?;
        if size != annotations.size {
            anyhow::bail!("{what}: it is {size} bytes, the attestation's {}", annotations.size);
        }
    }
    Ok(Attested { shown, recipe, statement })
}

/// A version an attestation states: this build's, or an earlier one this
/// codebase has had; never one that does not exist.
fn known_version(what: &str, stated: u32, ours: u32, shown: &str) -> anyhow::Result<()> {
    match stated {
        0 => anyhow::bail!("{shown}: {what} 0 does not exist (versions start at 1)"),
        v if v > ours => anyhow::bail!("{shown}: {what} {v} does not exist (this quantforge has {ours}, the newest)"),
        _ => Ok(()),
    }
}

/// Hashes `path` once and compares both digests with `stated`; its length.
fn check_digests(path: &Path, stated: &attest::Digests, what: &str) -> anyhow::Result<u64> {
    let (sha256, blake3, len) = crate::files::sha256_and_blake3_file(path)
        .map_err(|e| anyhow::anyhow!("{}: {}", path.display(), crate::files::IoText(&e)))?;
    match digest_difference(stated, &sha256, &blake3) {
        Some(difference) => anyhow::bail!("{what}: {difference}"),
        None => Ok(len),
    }
}

fn digest_difference(stated: &attest::Digests, sha256: &str, blake3: &str) -> Option<String> {
    if sha256 != stated.sha256 {
        return Some(format!("its sha256 is {sha256}, the attestation's {}", stated.sha256));
    }
    if blake3 != stated.blake3 {
        return Some(format!("its blake3 is {blake3}, the attestation's {}", stated.blake3));
    }
    None
}

/// What the attestation states of the derivation, against the derivation
/// made here: the export that writes the file is the one it names, its
/// dependencies are exactly the files that export reads, and (when it was
/// made by this build's codec and key scheme, which make the keys) every
/// step with its parameters and cache key.
fn check_attested_derivation(attested: &Attested, derivation: &Derivation) -> anyhow::Result<()> {
    let shown = &attested.shown;
    let definition = &attested.statement.predicate.build_definition;
    let recipe = &derivation.recipe;
    let export = &recipe.nodes[derivation.export].id;
    if definition.external_parameters.export != *export {
        anyhow::bail!(
            "{shown} names export `{}`, but the file is written by export `{export}`",
            crate::text::Name(&definition.external_parameters.export)
        );
    }
    let (_, inputs) = recipe.upstream(derivation.export);
    let names: Vec<&str> = inputs.iter().map(|&j| recipe.inputs[j].name.as_str()).collect();
    let dir = crate::files::resolve(&recipe_dir(&attested.recipe));
    // (file name as the attestation writes it, blake3, input) of each file.
    let read: Vec<(String, String, String)> = derivation
        .report
        .inputs
        .iter()
        .filter(|input| names.contains(&input.name.as_str()))
        .flat_map(|input| {
            let relative = |path: &Path| crate::exec::provenance::lock::relative(&dir, path);
            input.files.iter().map(move |f| (relative(&f.path), f.blake3.clone(), input.name.clone()))
        })
        .collect();
    let stated: Vec<(String, String, String)> = definition
        .resolved_dependencies
        .iter()
        .map(|d| {
            let input = d.annotations.as_ref().map_or_else(String::new, |a| a.input.clone());
            (d.name.clone(), d.digest.blake3.clone(), input)
        })
        .collect();
    if read != stated {
        let missing = read.iter().find(|r| !stated.contains(r)).map(|(name, _, input)| (name, input));
        let extra = stated.iter().find(|s| !read.contains(s)).map(|(name, _, input)| (name, input));
        let problem = match (missing, extra) {
            (Some((name, input)), _) => {
                format!("does not list {name} (input `{input}`), which export `{export}` reads")
            }
            (None, Some((name, input))) => {
                format!("lists {} (input `{input}`), which export `{export}` does not read", crate::text::Name(name))
            }
            (None, None) => format!("lists export `{export}`'s inputs in another order"),
        };
        anyhow::bail!("{shown} {problem}");
    }
    let versions = &definition.internal_parameters;
    if (versions.codec_version, versions.key_scheme) != (crate::codecs::CODEC_VERSION, crate::key::KEY_SCHEME_VERSION) {
        tracing::warn!(
            "{shown} was made with codec version {} and key scheme {}; this quantforge's keys differ, so its steps' \
             keys are not compared (the bytes are)",
            versions.codec_version,
            versions.key_scheme
        );
        return Ok(());
    }
    let expected = attest::steps(recipe, &derivation.report, derivation.export);
    let stated = &definition.external_parameters.steps;
    if let Some((i, step)) = expected.iter().enumerate().find(|(i, step)| stated.get(*i) != Some(step)) {
        let problem = match stated.get(i) {
            Some(other) if other.id != step.id => {
                format!("step {} is `{}` where the recipe has `{}`", i + 1, crate::text::Name(&other.id), step.id)
            }
            Some(other) if other.key != step.key => {
                format!("step `{}` has key {}, where the recipe makes it {}", step.id, other.key, step.key)
            }
            Some(_) => format!("step `{}` is stated with other parameters, op or inputs than the recipe's", step.id),
            None => format!("does not list step `{}`", step.id),
        };
        anyhow::bail!("{shown}: {problem}");
    }
    if stated.len() != expected.len() {
        anyhow::bail!("{shown} lists {} steps; export `{export}` is made by {}", stated.len(), expected.len());
    }
    Ok(())
}

/// The export made again: each claimed file paired with its derivation,
/// and the run that made them.
struct Derivation {
    pairs: Vec<(PathBuf, PathBuf)>,
    recipe: Recipe,
    export: usize,
    report: crate::exec::report::RunReport,
}

/// Makes the export that wrote `args.file` again, into `scratch`, and pairs
/// each of its files with the claimed one.
fn derive_export(args: &VerifyArgs, recipe_path: &Path, scratch: &Path) -> anyhow::Result<Derivation> {
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
    // The derived file is scratch: the cache keeps its tensors whole.
    let engine = Engine::new(store, super::workers(recipe.jobs))?.with_link(Vec::new());
    let id = recipe.nodes[index].id.clone();
    let report = engine.run_targets(&recipe, &[id], false)?;
    if report.failed() {
        let errors: Vec<&str> = report.nodes.iter().filter_map(|n| n.error.as_deref()).collect();
        anyhow::bail!("the derivation failed: {}", errors.join("; "));
    }
    Ok(Derivation { pairs: vec![(claimed, derived)], recipe, export: index, report })
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
    super::quantize::quantize_quietly(&flags, base, &derived, &positional)
        .map_err(|e| anyhow::anyhow!("--as: {e:#}"))?;
    Ok(derived)
}
