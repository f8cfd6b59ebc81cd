//! `quantforge attest`: the provenance attestation of a file a recipe
//! exported, as an in-toto Statement (bare JSON) or, with `--key`, a DSSE
//! envelope signed with an ed25519 key. The derivation comes from the
//! recipe (given, or the one the cache recorded for the file), its lock and
//! the cache's record of the export; the file must be what the recipe makes
//! now.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use super::cache::CacheDir;
use crate::exec::Engine;
use crate::exec::outputs::{ATTESTATION, find_export};
use crate::exec::provenance::{attest, dsse, lock};
use crate::exec::report::Status;
use crate::recipe::Recipe;
use crate::store::{LocalStore, Store};

#[derive(Debug, clap::Args)]
pub(super) struct AttestArgs {
    /// The file to attest: an export of a recipe, as its last run wrote it.
    file: PathBuf,
    /// The recipe that exported it (default: the recipe the cache recorded for the file).
    #[arg(long)]
    recipe: Option<PathBuf>,
    /// Write the attestation here (default: standard output).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    output: Option<PathBuf>,
    /// Sign it: a DSSE envelope signed with this ed25519 private key (PKCS#8 PEM, as
    /// `openssl genpkey -algorithm ed25519` writes it).
    #[arg(long, value_name = "KEY")]
    key: Option<PathBuf>,
    #[command(flatten)]
    cache: CacheDir,
}

pub(super) fn run(args: AttestArgs) -> anyhow::Result<()> {
    let file = &args.file;
    anyhow::ensure!(file.is_file(), "{}: no such file", file.display());
    let recipe = match &args.recipe {
        Some(path) => Recipe::load(path)?,
        None => Recipe::load(&recorded_recipe(&args)?)?,
    };
    // Attesting reads the cache and never creates one.
    let cache_dir = args.cache.path(Some(&recipe));
    let store: Arc<dyn Store> = Arc::new(LocalStore::open_existing(&cache_dir)?);
    let engine = Engine::new(store, 1)?;
    let Some(index) = find_export(&recipe, file) else {
        anyhow::bail!("{} is not an export of {}", file.display(), source_of(&recipe));
    };
    let report = engine.plan(&recipe)?;
    let node = &report.nodes[index];
    if node.status != Status::Hit {
        anyhow::bail!(
            "{} is not what `{}` of {} makes now ({}); run the recipe, then attest",
            file.display(),
            node.id,
            source_of(&recipe),
            node.why.join("; ")
        );
    }
    let outputs = engine.outputs(&recipe, &report)?;
    let output = args.output.as_ref().map(|path| outputs.side_file(path, "attestation", ATTESTATION)).transpose()?;
    let locked = lock::of_export(&engine, &recipe, &report, index)?;
    let statement = attest::to_json(&attest::statement(&recipe, &locked, &report, index)?);
    let bytes = match &args.key {
        Some(key) => {
            let envelope = dsse::sign(&statement, dsse::IN_TOTO_PAYLOAD_TYPE, key)?;
            let mut json = serde_json::to_vec_pretty(&envelope)?;
            json.push(b'\n');
            json
        }
        None => statement,
    };
    match &output {
        Some(path) => super::write_output(path, &bytes)?,
        None => std::io::stdout().lock().write_all(&bytes)?,
    }
    Ok(())
}

/// The recipe the cache recorded as having exported `args.file`: the cache
/// named on the command line, else the nearest `cache/` above the file (a
/// recipe's cache is in its project root, which holds its exports).
fn recorded_recipe(args: &AttestArgs) -> anyhow::Result<PathBuf> {
    let cache_dir = match &args.cache.cache_dir {
        Some(dir) => dir.clone(),
        None => {
            let file = crate::files::resolve(&args.file);
            let nearest = file.ancestors().skip(1).map(|dir| dir.join("cache")).find(|dir| LocalStore::exists_at(dir));
            nearest.ok_or_else(|| {
                anyhow::anyhow!("no cache above {}: give --recipe (or --cache-dir)", args.file.display())
            })?
        }
    };
    let store: Arc<dyn Store> = Arc::new(LocalStore::open_existing(&cache_dir)?);
    let mut recipes = Engine::new(store, 1)?.recipes_that_exported(&args.file);
    match recipes.len() {
        0 => anyhow::bail!(
            "the cache {} has no record of a recipe exporting {}; give --recipe",
            cache_dir.display(),
            args.file.display()
        ),
        1 => Ok(recipes.remove(0)),
        _ => anyhow::bail!(
            "{} was exported by several recipes ({}); give --recipe",
            args.file.display(),
            recipes.iter().map(|r| r.display().to_string()).collect::<Vec<_>>().join(", ")
        ),
    }
}

fn source_of(recipe: &Recipe) -> String {
    recipe.source.as_deref().map_or_else(|| recipe.name.clone(), |p| p.display().to_string())
}
