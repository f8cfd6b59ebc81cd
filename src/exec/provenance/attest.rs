//! Provenance attestations, what `quantforge attest` and an export's
//! `attest = true` write: an in-toto Statement v1 whose subject is the
//! export's files (name, sha256 and blake3) and whose predicate is SLSA
//! Provenance v1. Its build definition is the recipe (its digest, the
//! export it names, and the resolved parameters and cache key of every step
//! on the export's path); its resolved dependencies are the inputs' files
//! with their digests; its builder is quantforge at its version.
//!
//! Everything comes from the recipe and the lock of a complete run, so
//! attesting an unchanged export again gives the same bytes: no clocks, no
//! host names. Paths are relative, so an attestation reads the same in every
//! checkout: the recipe's to the output's directory (where `verify` looks
//! for it), the inputs' to the recipe's directory (as in the lock).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::lock::{self, Lock, LockedFile};
use crate::exec::outputs::RunOutputs;
use crate::exec::report::{RunReport, Status};
use crate::formats::AtomicOutput;
use crate::ops::Op;
use crate::ops::export::ExportOptions;
use crate::recipe::{Recipe, Source};

pub const STATEMENT_TYPE: &str = "https://in-toto.io/Statement/v1";
pub const PROVENANCE_TYPE: &str = "https://slsa.dev/provenance/v1";
/// What `buildDefinition` means: a quantforge recipe's export (the layout
/// of the parameters is in docs/ATTESTATIONS.md).
pub const BUILD_TYPE: &str = "https://quantforge.dev/attestation/recipe-export/v1";
pub const BUILDER_ID: &str = "https://quantforge.dev/builder/quantforge";

/// The file an export's `attest = true` writes beside it.
pub fn attestation_path(options: &ExportOptions) -> PathBuf {
    let mut name = options.path.clone().into_os_string();
    name.push(".intoto.json");
    PathBuf::from(name)
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Statement {
    #[serde(rename = "_type")]
    pub statement_type: String,
    pub subject: Vec<Resource>,
    pub predicate_type: String,
    pub predicate: Provenance,
}

/// An in-toto ResourceDescriptor with the fields quantforge fills.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Resource {
    pub name: String,
    pub digest: Digests,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<InputAnnotations>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Digests {
    pub sha256: String,
    pub blake3: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputAnnotations {
    /// The recipe's name for the input this file belongs to.
    pub input: String,
    pub size: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Provenance {
    pub build_definition: BuildDefinition,
    pub run_details: RunDetails,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct BuildDefinition {
    pub build_type: String,
    pub external_parameters: RecipeParameters,
    pub internal_parameters: ToolParameters,
    pub resolved_dependencies: Vec<Resource>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RecipeParameters {
    pub recipe: RecipeReference,
    /// The export step's node id.
    pub export: String,
    /// Every node on the export's path, in dependency order.
    pub steps: Vec<Step>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecipeReference {
    /// Relative to the directory of the attested files.
    pub path: String,
    pub digest: Digests,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    pub id: String,
    pub op: String,
    /// The parameters as they enter the cache key (resolved, normalized).
    pub params: serde_json::Value,
    /// The inputs (by name) and steps (by id) it is made from.
    pub from: Vec<String>,
    /// Its cache key.
    pub key: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ToolParameters {
    pub codec_version: u32,
    pub key_scheme: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunDetails {
    pub builder: Builder,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Builder {
    pub id: String,
    pub version: BTreeMap<String, String>,
}

#[derive(Debug, thiserror::Error)]
pub enum AttestError {
    #[error("export `{0}` is not in the run's lock: it has not been written")]
    NotExported(String),
    #[error("input `{0}` is not in the run's lock")]
    InputNotLocked(String),
    #[error("{}: {}", path.display(), crate::files::IoText(source))]
    Io { path: PathBuf, source: std::io::Error },
    #[error(transparent)]
    Lock(#[from] lock::LockError),
    #[error(transparent)]
    Output(#[from] crate::exec::outputs::OutputError),
}

/// The statement for export node `export` of `recipe`, from the lock of a
/// complete run and that run's report (for the steps' keys).
pub fn statement(recipe: &Recipe, lock: &Lock, report: &RunReport, export: usize) -> Result<Statement, AttestError> {
    let node = &recipe.nodes[export];
    let Op::Export(options) = &node.op else { return Err(AttestError::NotExported(node.id.clone())) };
    let locked = lock.exports.iter().find(|e| e.step == node.id).ok_or(AttestError::NotExported(node.id.clone()))?;
    let subject = locked.files.iter().map(|f| resource(file_name(&f.path), f, None)).collect();

    let recipe_file = recipe.source.as_deref().ok_or(lock::LockError::NoRecipeFile)?;
    let text = std::fs::read(recipe_file).map_err(|source| AttestError::Io { path: recipe_file.to_owned(), source })?;
    let output_dir = options.path.parent().unwrap_or(Path::new("."));
    let recipe_reference = RecipeReference {
        path: lock::relative(&crate::files::resolve(output_dir), recipe_file),
        digest: Digests { sha256: crate::files::sha256_hex(&text), blake3: blake3::hash(&text).to_hex().to_string() },
    };

    let steps = steps(recipe, report, export);
    let (_, inputs) = recipe.upstream(export);
    let mut dependencies = Vec::new();
    for &j in &inputs {
        let name = &recipe.inputs[j].name;
        let locked = lock.inputs.iter().find(|i| &i.name == name).ok_or(AttestError::InputNotLocked(name.clone()))?;
        dependencies.extend(
            locked
                .files
                .iter()
                .map(|f| resource(f.path.clone(), f, Some(InputAnnotations { input: name.clone(), size: f.size }))),
        );
    }

    Ok(Statement {
        statement_type: STATEMENT_TYPE.to_owned(),
        subject,
        predicate_type: PROVENANCE_TYPE.to_owned(),
        predicate: Provenance {
            build_definition: BuildDefinition {
                build_type: BUILD_TYPE.to_owned(),
                external_parameters: RecipeParameters { recipe: recipe_reference, export: node.id.clone(), steps },
                internal_parameters: ToolParameters { codec_version: lock.codec_version, key_scheme: lock.key_scheme },
                resolved_dependencies: dependencies,
            },
            run_details: RunDetails {
                builder: Builder {
                    id: BUILDER_ID.to_owned(),
                    version: BTreeMap::from([("quantforge".to_owned(), lock.quantforge.clone())]),
                },
            },
        },
    })
}

/// The steps on export node `export`'s path, in dependency order, with the
/// keys `report`'s run gave them: what an attestation's
/// `externalParameters.steps` states.
pub fn steps(recipe: &Recipe, report: &RunReport, export: usize) -> Vec<Step> {
    let (nodes, _) = recipe.upstream(export);
    let source_name = |source: &Source| match *source {
        Source::Input(j) => recipe.inputs[j].name.clone(),
        Source::Node(j) => recipe.nodes[j].id.clone(),
    };
    nodes
        .iter()
        .map(|&i| {
            let node = &recipe.nodes[i];
            let mut from: Vec<String> = node.from.iter().map(source_name).collect();
            from.extend(node.uses.iter().map(|&j| recipe.inputs[j].name.clone()));
            Step {
                id: node.id.clone(),
                op: node.op.name().to_owned(),
                params: node.op.key_params(),
                from,
                key: report.nodes[i].key.clone(),
            }
        })
        .collect()
}

/// The statement as its file holds it: pretty JSON and a newline.
pub fn to_json(statement: &Statement) -> Vec<u8> {
    let mut json = serde_json::to_vec_pretty(statement).expect("a statement is plain data");
    json.push(b'\n');
    json
}

/// Writes the attestation of every export of a complete run that asks for
/// one (`attest = true`) beside it, unless the file already says the same;
/// the paths written.
pub fn write_for_run(
    recipe: &Recipe,
    lock: &Lock,
    report: &RunReport,
    outputs: &RunOutputs,
) -> Result<Vec<PathBuf>, AttestError> {
    let mut written = Vec::new();
    for (i, node) in recipe.nodes.iter().enumerate() {
        let Op::Export(options) = &node.op else { continue };
        if !options.attest || !matches!(report.nodes[i].status, Status::Hit | Status::Ran) {
            continue;
        }
        let json = to_json(&statement(recipe, lock, report, i)?);
        let path = attestation_path(options);
        let checked = outputs.export_file(&node.id, &path, crate::exec::outputs::ATTESTATION)?;
        if std::fs::read(checked.resolved()).is_ok_and(|old| old == json) {
            continue;
        }
        let write_err = |source| AttestError::Io { path: path.clone(), source };
        let mut out = AtomicOutput::create(&checked).map_err(write_err)?;
        out.writer().write_all(&json).map_err(write_err)?;
        out.commit().map_err(write_err)?;
        written.push(path);
    }
    Ok(written)
}

fn resource(name: String, file: &LockedFile, annotations: Option<InputAnnotations>) -> Resource {
    Resource { name, digest: Digests { sha256: file.sha256.clone(), blake3: file.blake3.clone() }, annotations }
}

fn file_name(path: &str) -> String {
    Path::new(path).file_name().map_or_else(|| path.to_owned(), |n| n.to_string_lossy().into_owned())
}
