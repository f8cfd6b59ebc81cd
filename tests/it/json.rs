//! `--json`: every document a command prints matches its schema (checked by
//! Python's `jsonschema`, not by us), the schemas under `docs/schemas` are
//! the program's own, and a failure under `--json` is a document too.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{python_with, quantforge_with, quickstart_project, repo, stdout_of_success, tiny_model};

fn schemas_dir() -> PathBuf {
    repo().join("docs/schemas")
}

/// Every schema name, as `quantforge schema` lists them.
fn schema_names() -> Vec<String> {
    let listing = stdout_of_success(quantforge_with(&[&"schema"]));
    listing.lines().map(|line| line.split_whitespace().next().unwrap().to_owned()).collect()
}

#[test]
fn the_committed_schemas_are_the_programs() {
    let names = schema_names();
    let update = std::env::var_os("UPDATE_SCHEMAS").is_some();
    for name in &names {
        let schema = stdout_of_success(quantforge_with(&[&"schema", name]));
        let path = schemas_dir().join(format!("{name}.json"));
        if update {
            std::fs::create_dir_all(schemas_dir()).unwrap();
            std::fs::write(&path, &schema).unwrap();
        }
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(committed == schema, "{} is stale: UPDATE_SCHEMAS=1 cargo test --test it json::", path.display());
    }
    let mut files: Vec<String> = std::fs::read_dir(schemas_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().trim_end_matches(".json").to_owned())
        .collect();
    files.sort();
    let mut listed = names.clone();
    listed.sort();
    assert_eq!(files, listed, "docs/schemas holds exactly the listed schemas");
    let guide = std::fs::read_to_string(repo().join("docs/JSON.md")).unwrap();
    for name in &names {
        assert!(guide.contains(&format!("[`{name}`](schemas/{name}.json)")), "docs/JSON.md does not link {name}");
    }
}

/// Runs quantforge with `--json` in `dir`; the document it printed.
fn document(dir: &Path, args: &[&dyn AsRef<std::ffi::OsStr>]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_quantforge"))
        .current_dir(dir)
        .arg("--json")
        .args(args.iter().map(|a| a.as_ref()))
        .output()
        .unwrap();
    stdout_of_success(out)
}

/// Each document with the schema it claims, validated by `jsonschema`'s
/// Draft 2020-12 validator.
fn validate(python: &str, dir: &Path, documents: &[(&str, String)]) {
    let mut args = vec![schemas_dir().display().to_string()];
    for (no, (schema, text)) in documents.iter().enumerate() {
        let path = dir.join(format!("document-{no}-{schema}.json"));
        std::fs::write(&path, text).unwrap();
        args.push(format!("{schema}={}", path.display()));
    }
    const CHECK: &str = r#"
import json, sys, jsonschema
for arg in sys.argv[2:]:
    name, path = arg.split("=", 1)
    schema = json.load(open(f"{sys.argv[1]}/{name}.json"))
    try:
        jsonschema.Draft202012Validator(schema).validate(json.load(open(path)))
    except jsonschema.ValidationError as e:
        sys.exit(f"{path} does not match {name}: {e.message} at {list(e.absolute_path)}")
print(len(sys.argv) - 2, "documents valid")
"#;
    let out = Command::new(python).arg("-c").arg(CHECK).args(&args).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), format!("{} documents valid", documents.len()));
}

#[test]
fn every_document_matches_its_schema() {
    let Some(python) = python_with("jsonschema", "jsonschema") else { return };
    let (project, recipe) = quickstart_project();
    let dir = project.path();
    let model = tiny_model();
    let multimodal = repo().join("tests/data/multimodal");
    let remote = format!("file://{}", dir.join("remote").display());
    let cache = dir.join("recipes/cache");
    let mut docs: Vec<(&str, String)> = Vec::new();

    docs.push(("plan", document(dir, &[&"plan", &recipe])));
    docs.push(("units", document(dir, &[&"plan", &recipe, &"--units"])));
    let units: serde_json::Value = serde_json::from_str(&document(dir, &[&"plan", &recipe, &"--units"])).unwrap();
    docs.push(("matrix", document(dir, &[&"plan", &recipe, &"--units", &"--matrix", &"2"])));
    let unit = units["units"][0]["id"].as_str().unwrap().to_owned();
    docs.push(("work", document(dir, &[&"work", &recipe, &"--unit", &unit, &"--cache-url", &remote])));
    docs.push(("run", document(dir, &[&"run", &recipe, &"--cache-url", &remote])));
    let export = dir.join("recipes/out/tiny-llama-Q4_K_M.gguf");
    docs.push(("verify", document(dir, &[&"verify", &export, &"--recipe", &recipe])));

    docs.push(("cache-ls", document(dir, &[&"cache", &"ls", &"--cache-dir", &cache])));
    docs.push(("cache-du", document(dir, &[&"cache", &"du", &"--cache-dir", &cache])));
    docs.push(("cache-verify", document(dir, &[&"cache", &"verify", &"--cache-dir", &cache])));
    docs.push(("cache-dir", document(dir, &[&"cache", &"dir", &recipe])));
    docs.push(("cache-transfer", document(dir, &[&"cache", &"push", &recipe, &"--cache-url", &remote])));
    docs.push(("cache-transfer", document(dir, &[&"cache", &"pull", &recipe, &"--cache-url", &remote])));
    docs.push(("cache-ls", document(dir, &[&"cache", &"ls", &"--remote", &"--cache-url", &remote])));
    docs.push(("cache-du-remote", document(dir, &[&"cache", &"du", &"--remote", &"--cache-url", &remote])));
    docs.push(("cache-verify-remote", document(dir, &[&"cache", &"verify", &"--remote", &"--cache-url", &remote])));
    let gc_remote = document(dir, &[&"cache", &"gc", &"--remote", &"--older-than", &"1w", &"--cache-url", &remote]);
    docs.push(("cache-gc-remote", gc_remote));
    docs.push(("cache-gc", document(dir, &[&"cache", &"gc", &"--older-than", &"1w", &"--cache-dir", &cache])));

    docs.push(("inspect", document(dir, &[&"inspect", &model, &"--tensors"])));
    docs.push(("diff", document(dir, &[&"diff", &model, &export])));
    docs.push(("plan-quant", document(dir, &[&"plan-quant", &model, &"--target-bpw", &"5"])));
    docs.push(("plan-quant", document(dir, &[&"quantize", &"--dry-run", &"--target-size", &"2MB", &model, &"x"])));
    docs.push(("quantize-plan", document(dir, &[&"quantize", &"--dry-run", &model, &"x.gguf", &"Q4_K_M"])));
    docs.push(("written", document(dir, &[&"quantize", &model, &"q.gguf", &"Q4_K_M"])));
    docs.push(("written", document(dir, &[&"dequantize", &"q.gguf", &"f16.gguf"])));
    docs.push(("written", document(dir, &[&"edit", &model, &"named.gguf", &"--set", &"general.name=str:x"])));
    docs.push(("split-plan", document(dir, &[&"split", &model, &"shard", &"--max-tensors", &"8", &"--dry-run"])));
    docs.push(("plan-devices", document(dir, &[&"plan-devices", &model, &"--devices", &"3", &"--split", &"2,1,1"])));
    let split = document(dir, &[&"split", &model, &"shard", &"--max-tensors", &"8"]);
    let shards: serde_json::Value = serde_json::from_str(&split).unwrap();
    assert!(shards["files"].as_array().unwrap().len() > 1, "{split}");
    let first = shards["files"][0]["path"].as_str().unwrap().to_owned();
    docs.push(("written", split));
    docs.push(("written", document(dir, &[&"merge", &first, &"merged.gguf"])));
    let (lm, mmproj) = (multimodal.join("smolvlm-lm.gguf"), multimodal.join("smolvlm-mmproj.gguf"));
    docs.push(("written", document(dir, &[&"assemble", &lm, &mmproj, &"-o", &"bundle.gguf"])));
    docs.push(("written", document(dir, &[&"unbundle", &"bundle.gguf", &"vision", &"vision.gguf"])));

    docs.push(("pack", document(dir, &[&"pack", &"--base", &model, &"q.gguf", &"-o", &"ladder.qfpack"])));
    docs.push(("pack-list", document(dir, &[&"unpack", &"ladder.qfpack", &"--list"])));
    docs.push(("unpack", document(dir, &[&"unpack", &"ladder.qfpack", &"unpacked"])));
    validate(&python, dir, &docs);
}

/// Runs quantforge with `--json`, expecting it to fail.
fn failure(args: &[&dyn AsRef<std::ffi::OsStr>]) -> (serde_json::Value, String, Output) {
    let mut all: Vec<&dyn AsRef<std::ffi::OsStr>> = vec![&"--json"];
    all.extend_from_slice(args);
    let out = quantforge_with(&all);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let document = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"));
    (document, String::from_utf8_lossy(&out.stderr).into_owned(), out)
}

#[test]
fn a_failure_under_json_is_a_document() {
    let dir = tempfile::tempdir().unwrap();
    let recipe = dir.path().join("bad.toml");
    std::fs::write(
        &recipe,
        "[input.m]\npath = \"m.gguf\"\n\n[step.q]\nop = \"quantize\"\nfrom = \"m\"\npreset = \"Q8_O\"\n",
    )
    .unwrap();
    let (document, stderr, _) = failure(&[&"run", &recipe]);
    let error = &document["error"];
    assert_eq!(format!("error: {}\n", error["message"].as_str().unwrap()), stderr);
    let problem = &error["problems"][0];
    assert_eq!(problem["file"].as_str().unwrap(), recipe.to_str().unwrap());
    assert_eq!((problem["line"].as_u64(), problem["column"].as_u64()), (Some(7), Some(10)), "{document}");
    assert_eq!(problem["hint"], "did you mean `Q8_0`?");

    let missing = dir.path().join("missing.gguf");
    let (document, stderr, _) = failure(&[&"inspect", &missing]);
    assert!(document["error"].get("problems").is_none(), "{document}");
    assert_eq!(format!("error: {}\n", document["error"]["message"].as_str().unwrap()), stderr);
    assert_eq!(document["error"]["stage"], "mapping", "{document}");

    // The stage a load failed in: a cut header, then a tensor past the end.
    let model = std::fs::read(tiny_model()).unwrap();
    let cut = dir.path().join("cut.gguf");
    std::fs::write(&cut, &model[..100]).unwrap();
    let (document, _, _) = failure(&[&"inspect", &cut]);
    assert_eq!(document["error"]["stage"], "header", "{document}");
    std::fs::write(&cut, &model[..model.len() - 64]).unwrap();
    let (document, _, placement) = failure(&[&"inspect", &cut]);
    assert_eq!(document["error"]["stage"], "placement", "{document}");

    let (document, _, _) = failure(&[&"completions", &"bash"]);
    assert_eq!(
        document["error"]["message"],
        "--json: this command prints a document of another kind (a script, a page, a graph)"
    );

    // A command failing after its document prints no second one.
    let (project, quickstart) = quickstart_project();
    let cache = project.path().join("recipes/cache");
    stdout_of_success(quantforge_with(&[&"run", &quickstart]));
    let blob = walk(&cache).into_iter().find(|p| p.components().any(|c| c.as_os_str() == "blobs")).unwrap();
    let mut bytes = std::fs::read(&blob).unwrap();
    bytes[0] ^= 1;
    std::fs::write(&blob, bytes).unwrap();
    let (document, stderr, _) = failure(&[&"cache", &"verify", &"--cache-dir", &cache]);
    assert_eq!(document["corrupt_blobs"].as_array().unwrap().len(), 1, "{document}");
    assert!(stderr.starts_with("error: the cache has 1 corrupt blobs"), "{stderr}");

    let Some(python) = python_with("jsonschema", "jsonschema") else { return };
    let (_, _, out) = failure(&[&"run", &recipe]);
    validate(
        &python,
        dir.path(),
        &[("error", String::from_utf8(out.stdout).unwrap()), ("error", String::from_utf8(placement.stdout).unwrap())],
    );
}

/// Every file under `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        match path.is_dir() {
            true => files.extend(walk(&path)),
            false => files.push(path),
        }
    }
    files
}
