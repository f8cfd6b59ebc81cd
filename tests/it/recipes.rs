//! Recipes end to end: diagnostics for bad recipes, byte identity with the
//! one-shot commands, the cache (hits, per-tensor reuse, stat fingerprints),
//! and crash and concurrency safety of the store.

use crate::common;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime};

use quantforge::recipe::Recipe;
use serde_json::Value;

fn os(s: &str) -> &OsStr {
    OsStr::new(s)
}

/// Runs whose cache keeps every encoded tensor as a blob of its own.
const WHOLE: &[&str] = &["--link", "whole"];

fn totals(report: &Value, field: &str) -> u64 {
    report["totals"][field].as_u64().unwrap()
}

/// A directory with a copy of the tiny model and a recipe over it.
struct Workspace {
    dir: tempfile::TempDir,
}

impl Workspace {
    fn new() -> Workspace {
        let dir = tempfile::tempdir().unwrap();
        std::fs::copy(common::tiny_model(), dir.path().join("tiny.gguf")).unwrap();
        Workspace { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn recipe(&self, name: &str, text: &str) -> PathBuf {
        let path = self.path(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    fn cache(&self) -> PathBuf {
        self.path("cache")
    }
}

use common::LADDER;

#[test]
fn bad_recipes_give_their_diagnostics() {
    let corpus = common::repo().join("tests/data/recipes/bad");
    let mut checked = 0;
    for entry in std::fs::read_dir(&corpus).unwrap() {
        let path = entry.unwrap().path();
        if path.extension() != Some(OsStr::new("toml")) {
            continue;
        }
        let expected = std::fs::read_to_string(path.with_extension("expected")).unwrap();
        let error = Recipe::load(&path).err().unwrap_or_else(|| panic!("{} was accepted", path.display()));
        let text = error.to_string();
        for line in expected.lines().filter(|l| !l.is_empty()) {
            assert!(text.contains(line), "{}: expected `{line}` in:\n{text}", path.display());
        }
        checked += 1;
    }
    assert!(checked >= 30, "only {checked} bad recipes");
}

#[test]
fn cli_prints_every_problem_and_exits_1() {
    let path = common::repo().join("tests/data/recipes/bad/many_problems.toml");
    let output = common::quantforge(&[os("run"), path.as_os_str(), os("--cache-dir"), os("/nonexistent/never")]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("many_problems.toml:6:8: `bse` is not an input or a step"), "{stderr}");
    assert!(stderr.contains("= hint: did you mean `export`?"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn run_equals_one_shot_quantize_for_any_job_count() {
    let ws = Workspace::new();
    let recipe = ws.recipe("ladder.toml", LADDER);
    let report = common::run_json(&recipe, &ws.cache(), &["--jobs", "1"]);
    assert_eq!(totals(&report, "failed"), 0);
    for preset in ["Q8_0", "Q4_K_M", "Q3_K_S"] {
        let one_shot = ws.path(&format!("one-shot-{preset}.gguf"));
        common::stdout_of_success(common::quantforge(&[
            os("quantize"),
            ws.path("tiny.gguf").as_os_str(),
            one_shot.as_os_str(),
            os(preset),
        ]));
        let ours = std::fs::read(ws.path(&format!("out/tiny-{preset}.gguf"))).unwrap();
        assert!(ours == std::fs::read(&one_shot).unwrap(), "{preset}: run and quantize differ");
    }
    let first: Vec<Vec<u8>> = ["Q8_0", "Q4_K_M", "Q3_K_S"]
        .iter()
        .map(|p| std::fs::read(ws.path(&format!("out/tiny-{p}.gguf"))).unwrap())
        .collect();
    std::fs::remove_dir_all(ws.path("out")).unwrap();
    std::fs::remove_dir_all(ws.cache()).unwrap();
    // One export at a time: the first encodes each input tensor's
    // conversions for every preset together, decoding it once; the others
    // copy what it stored.
    let inputs = quantforge::formats::ModelFile::open(&ws.path("tiny.gguf"), Default::default()).unwrap().tensors.len();
    let (encoded, decoded) = (totals(&report, "tensors_encoded"), totals(&report, "tensors_decoded"));
    assert!(decoded <= inputs as u64 && 2 * decoded < encoded, "each input decoded once for all presets: {report}");
    let parallel = common::run_json(&recipe, &ws.cache(), &["--jobs", "4"]);
    // A fresh cache: every tensor one export needs is encoded in this run at
    // least once. Exports running side by side may both encode a tensor they
    // share, or one may reuse what the other has just stored.
    assert!(totals(&parallel, "tensors_encoded") >= encoded, "{parallel}");
    for (preset, bytes) in ["Q8_0", "Q4_K_M", "Q3_K_S"].iter().zip(&first) {
        assert!(&std::fs::read(ws.path(&format!("out/tiny-{preset}.gguf"))).unwrap() == bytes, "{preset}: jobs 1 vs 4");
    }
}

#[test]
fn rerun_is_all_hits_even_after_touching_the_input() {
    let ws = Workspace::new();
    let recipe = ws.recipe("ladder.toml", LADDER);
    let first = common::run_json(&recipe, &ws.cache(), WHOLE);
    assert!(totals(&first, "tensors_encoded") > 0);
    // Seed 002's start-up metrics of each input the run opened.
    let load = &first["inputs"][0]["files"][0]["load"];
    assert_eq!(load["mode"], "mmap", "{first}");
    assert!(load["duration"].as_f64().unwrap() > 0.0 && load["bytes_parsed"].as_u64().unwrap() > 0, "{load}");
    let second = common::run_json(&recipe, &ws.cache(), WHOLE);
    assert_eq!(totals(&second, "tensors_encoded"), 0, "{second}");
    assert!(second["inputs"][0]["files"][0].get("load").is_none(), "a run of hits opens no model: {second}");
    assert_eq!(totals(&second, "ran"), 0, "{second}");
    assert_eq!(totals(&second, "hit"), totals(&second, "nodes"));

    let input = std::fs::File::options().write(true).open(ws.path("tiny.gguf")).unwrap();
    input.set_modified(SystemTime::now() - Duration::from_secs(3600)).unwrap();
    let touched = common::run_json(&recipe, &ws.cache(), WHOLE);
    assert!(touched["inputs"][0]["rehashed"].as_bool().unwrap(), "a new mtime means a new fingerprint");
    assert_eq!(totals(&touched, "ran"), 0, "same bytes, same keys: {touched}");
    let again = common::run_json(&recipe, &ws.cache(), WHOLE);
    assert!(!again["inputs"][0]["rehashed"].as_bool().unwrap(), "the settled fingerprint is remembered");

    // A deleted output is rebuilt from cached tensors, without codec work
    // (the cache keeps them whole; with --link copy, tests/it/link_modes.rs).
    std::fs::remove_file(ws.path("out/tiny-Q8_0.gguf")).unwrap();
    let rebuilt = common::run_json(&recipe, &ws.cache(), WHOLE);
    assert_eq!(totals(&rebuilt, "ran"), 1);
    assert_eq!(totals(&rebuilt, "tensors_encoded"), 0);
    assert!(totals(&rebuilt, "tensors_reused") > 0);
}

#[test]
fn targets_build_only_what_they_need() {
    let ws = Workspace::new();
    let recipe = ws.recipe("ladder.toml", LADDER);
    let one = common::run_json(&recipe, &ws.cache(), &["out[preset=Q4_K_M]"]);
    let written: Vec<String> =
        std::fs::read_dir(ws.path("out")).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    assert_eq!(written, ["tiny-Q4_K_M.gguf"]);
    assert_eq!(totals(&one, "ran"), 3, "load, quantize, export: {one}");
    // A step names all of its nodes; an export path names its export.
    let step = common::run_json(&recipe, &ws.cache(), &["q"]);
    assert_eq!(totals(&step, "tensors_encoded"), 0, "a step that is not kept has nothing to store: {step}");
    let by_path = common::run_json(&recipe, &ws.cache(), &["out/tiny-Q8_0.gguf"]);
    assert_eq!(totals(&by_path, "ran"), 1, "the steps' results are cached now: {by_path}");
    assert!(ws.path("out/tiny-Q8_0.gguf").exists() && !ws.path("out/tiny-Q3_K_S.gguf").exists());

    let cache = ws.cache();
    let args = [os("run"), recipe.as_os_str(), os("publish"), os("--cache-dir"), cache.as_os_str()];
    let out = common::quantforge(&args);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no step, export or output path `publish`") && stderr.contains("q, out"), "{stderr}");
}

#[test]
fn force_rebuilds_and_plan_exit_code_tells_ci() {
    let ws = Workspace::new();
    let text = LADDER.replace("name = \"ladder\"", "name = \"ladder\"\njobs = 3");
    let recipe = ws.recipe("ladder.toml", &text);
    let cache = ws.cache();
    let status = || {
        let args = [os("plan"), recipe.as_os_str(), os("--exit-code"), os("--cache-dir"), cache.as_os_str()];
        common::quantforge(&args).status.code()
    };
    assert_eq!(status(), Some(2), "work pending");
    let first = common::run_json(&recipe, &ws.cache(), &[]);
    assert_eq!(first["jobs"], 3, "[recipe] jobs sets the workers");
    assert_eq!(common::run_json(&recipe, &ws.cache(), &["--jobs", "1"])["jobs"], 1, "the command line overrides it");
    assert_eq!(status(), Some(0), "up to date");

    let forced = common::run_json(&recipe, &ws.cache(), &["--force"]);
    assert_eq!(totals(&forced, "hit"), 0, "{forced}");
    // Nothing comes from the cache as it was: every conversion is encoded
    // again, once, as in the first run (a tensor two exports share, or one
    // encoded with its siblings, is copied from the blob the run made).
    assert_eq!(totals(&forced, "tensors_encoded"), totals(&first, "tensors_encoded"), "{forced}");
    let targeted = common::run_json(&recipe, &ws.cache(), &["out[preset=Q8_0]", "--force"]);
    assert_eq!(totals(&targeted, "ran"), 3, "load, quantize, export: {targeted}");
    assert_eq!(status(), Some(0));
}

#[test]
fn graph_prints_the_dag_as_dot_and_mermaid() {
    let ws = Workspace::new();
    let recipe = ws.recipe("ladder.toml", LADDER);
    let graph = |format: &str| {
        common::stdout_of_success(common::quantforge(&[os("graph"), recipe.as_os_str(), os("--format"), os(format)]))
    };
    let dot = graph("dot");
    assert!(dot.starts_with("digraph \"ladder\" {"), "{dot}");
    assert!(dot.contains("i0 [shape=ellipse, label=\"tiny\"];"), "{dot}");
    assert!(dot.contains("n1 [shape=box, label=\"q[preset=Q8_0]\\nquantize\"];"), "{dot}");
    assert!(dot.contains("n4 [shape=parallelogram, label=\"out[preset=Q8_0]\\nexport\"];"), "{dot}");
    assert!(dot.contains("  i0 -> n0;") && dot.contains("  n1 -> n4;"), "{dot}");
    assert_eq!(dot.matches(" -> ").count(), 7, "{dot}");
    let mermaid = graph("mermaid");
    assert!(mermaid.starts_with("flowchart LR\n"), "{mermaid}");
    assert!(mermaid.contains("n4[/\"out[preset=Q8_0]<br>export\"/]") && mermaid.contains("  n1 --> n4"), "{mermaid}");
    assert_eq!(mermaid.matches(" --> ").count(), 7, "{mermaid}");
}

#[test]
fn the_cache_belongs_to_the_project_not_the_working_directory() {
    let (project, elsewhere) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let root = project.path();
    std::fs::create_dir_all(root.join(".git")).unwrap();
    std::fs::create_dir_all(root.join("recipes")).unwrap();
    std::fs::copy(common::tiny_model(), root.join("recipes/tiny.gguf")).unwrap();
    let recipe = root.join("recipes/ladder.toml");
    std::fs::write(&recipe, LADDER).unwrap();
    let quantforge = |cwd: &Path, args: &[&OsStr]| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_quantforge"));
        command.current_dir(cwd).args(args).env_remove("QUANTFORGE_CACHE");
        command.output().unwrap()
    };
    let run_json = |cwd: &Path| -> Value {
        serde_json::from_str(&common::stdout_of_success(quantforge(
            cwd,
            &[os("run"), recipe.as_os_str(), os("--json")],
        )))
        .unwrap()
    };
    let first = run_json(elsewhere.path());
    assert!(totals(&first, "tensors_encoded") > 0);
    assert!(root.join("cache").is_dir() && !elsewhere.path().join("cache").exists());
    let again = run_json(&root.join("recipes"));
    assert_eq!(totals(&again, "hit"), totals(&again, "nodes"), "one cache, wherever the command starts");
    let shown = common::stdout_of_success(quantforge(elsewhere.path(), &[os("cache"), os("dir"), recipe.as_os_str()]));
    assert_eq!(shown.trim(), root.join("cache").to_str().unwrap());

    // `[recipe] cache` names another, relative to the recipe.
    std::fs::write(&recipe, LADDER.replace("name = \"ladder\"", "name = \"ladder\"\ncache = \"../other\"")).unwrap();
    let shown = common::stdout_of_success(quantforge(elsewhere.path(), &[os("cache"), os("dir"), recipe.as_os_str()]));
    assert_eq!(Path::new(shown.trim()), root.join("recipes/../other"));

    // A one-shot command caches in the user's cache directory when asked.
    let xdg = tempfile::tempdir().unwrap();
    let out = root.join("q.gguf");
    let mut command = Command::new(env!("CARGO_BIN_EXE_quantforge"));
    command.args([os("quantize"), os("--user-cache"), common::tiny_model().as_os_str(), out.as_os_str(), os("Q8_0")]);
    common::stdout_of_success(command.env("XDG_CACHE_HOME", xdg.path()).output().unwrap());
    assert!(xdg.path().join("quantforge").is_dir());
}

/// A quantized model records its importance matrix as the recipe writes its
/// path (as llama-quantize records its `--imatrix` argument), so the bytes
/// do not depend on where the command starts; and that name is in the key.
#[test]
fn an_importance_matrix_is_recorded_as_the_recipe_writes_it() {
    let project = tempfile::tempdir().unwrap();
    let dir = project.path().join("recipes");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(common::tiny_model(), dir.join("tiny.gguf")).unwrap();
    std::fs::copy(common::repo().join("tests/data/imatrix/tiny-llama.imatrix.gguf"), dir.join("im.gguf")).unwrap();
    let recipe = dir.join("im.toml");
    let text = |path: &str| {
        format!(
            "[input.tiny]\npath = \"tiny.gguf\"\n[input.im]\npath = \"{path}\"\n\
             [step.q]\nop = \"quantize\"\nfrom = \"tiny\"\npreset = \"Q4_K_M\"\nimatrix = \"im\"\n\
             [step.out]\nop = \"export\"\nfrom = \"q\"\npath = \"out/q.gguf\"\n"
        )
    };
    std::fs::write(&recipe, text("im.gguf")).unwrap();
    let in_dir = |cwd: &Path, args: &[&OsStr]| {
        Command::new(env!("CARGO_BIN_EXE_quantforge")).current_dir(cwd).args(args).output().unwrap()
    };
    let output = dir.join("out/q.gguf");
    let mut made = Vec::new();
    for (cwd, cache) in [(project.path(), "c1"), (dir.as_path(), "c2")] {
        let cache = project.path().join(cache);
        common::stdout_of_success(in_dir(
            cwd,
            &[os("run"), recipe.as_os_str(), os("-q"), os("--cache-dir"), cache.as_os_str()],
        ));
        made.push(std::fs::read(&output).unwrap());
    }
    assert!(made[0] == made[1], "the bytes depend on the working directory");
    let model = quantforge::formats::ModelFile::open(&output, Default::default()).unwrap();
    assert_eq!(model.metadata.get_str("quantize.imatrix.file"), Some("im.gguf"));
    let one_shot = project.path().join("one-shot.gguf");
    let args =
        [os("quantize"), os("-q"), os("--imatrix"), os("im.gguf"), os("tiny.gguf"), one_shot.as_os_str(), os("Q4_K_M")];
    common::stdout_of_success(in_dir(&dir, &args));
    assert!(std::fs::read(&one_shot).unwrap() == made[0], "the one-shot command writes other bytes");

    std::fs::write(&recipe, text("./im.gguf")).unwrap();
    let report = common::run_json(&recipe, &project.path().join("c1"), &[]);
    let q = report["nodes"].as_array().unwrap().iter().find(|n| n["id"] == "q").unwrap();
    assert_eq!(q["status"], "ran", "another name for the matrix is another key");
    let model = quantforge::formats::ModelFile::open(&output, Default::default()).unwrap();
    assert_eq!(model.metadata.get_str("quantize.imatrix.file"), Some("./im.gguf"));
}

/// `preset` takes llama-quantize's ftype numbers too (alone or in a fan-out
/// list), naming the node by the number, with the preset's bytes.
#[test]
fn a_preset_may_be_its_ftype_number() {
    let ws = Workspace::new();
    let recipe = ws.recipe("numbers.toml", &LADDER.replace(r#"["Q8_0", "Q4_K_M", "Q3_K_S"]"#, r#"[7, "Q6_K"]"#));
    let report = common::run_json(&recipe, &ws.cache(), &[]);
    let ids: Vec<&str> = report["nodes"].as_array().unwrap().iter().map(|n| n["id"].as_str().unwrap()).collect();
    assert!(ids.contains(&"q[preset=7]") && ids.contains(&"q[preset=Q6_K]"), "{ids:?}");
    let one_shot = ws.path("q8.gguf");
    common::stdout_of_success(common::quantforge(&[
        os("quantize"),
        os("-q"),
        ws.path("tiny.gguf").as_os_str(),
        one_shot.as_os_str(),
        os("Q8_0"),
    ]));
    assert!(std::fs::read(ws.path("out/tiny-7.gguf")).unwrap() == std::fs::read(&one_shot).unwrap());
}

/// `prune_layers` and the `COPY` type in a recipe write what `quantize
/// --prune-layers … COPY` writes (which `tests/it/quantize_llama.rs` holds to
/// llama-quantize's bytes).
#[test]
fn a_recipe_prunes_layers_and_copies_as_quantize_does() {
    let ws = Workspace::new();
    let recipe = ws.recipe(
        "pruned.toml",
        &LADDER.replace(r#"["Q8_0", "Q4_K_M", "Q3_K_S"]"#, "[\"COPY\", \"Q4_K_M\"]\nprune_layers = [1, 0, 1]"),
    );
    common::run_json(&recipe, &ws.cache(), &[]);
    for preset in ["COPY", "Q4_K_M"] {
        let one_shot = ws.path(&format!("one-shot-{preset}.gguf"));
        common::stdout_of_success(common::quantforge(&[
            os("quantize"),
            os("-q"),
            os("--prune-layers"),
            os("0,1"),
            ws.path("tiny.gguf").as_os_str(),
            one_shot.as_os_str(),
            os(preset),
        ]));
        let ours = std::fs::read(ws.path(&format!("out/tiny-{preset}.gguf"))).unwrap();
        assert!(ours == std::fs::read(&one_shot).unwrap(), "{preset} differs from the one-shot quantize");
    }
}

/// An export with `devices = {…}` writes what `shard-devices` writes from
/// the quantized file, slices cut from the per-tensor cache: a rerun that
/// must write a shard again encodes nothing, and `merge` gives the
/// quantized file back.
#[test]
fn an_export_per_device_is_shard_devices_of_its_tensors_cut_from_the_cache() {
    let ws = Workspace::new();
    let text = LADDER.replace(r#"preset = ["Q8_0", "Q4_K_M", "Q3_K_S"]"#, r#"preset = "Q4_K_M""#).replace(
        r#"path = "out/tiny-{preset}.gguf""#,
        "path = \"out/tiny.gguf\"\ndevices = { count = 3, split = [1, 2, 1] }",
    ) + "\n[step.raw]\nop = \"export\"\nfrom = \"tiny\"\npath = \"out/raw.gguf\"\ndevices = { count = 2 }\n";
    let recipe = ws.recipe("devices.toml", &text);
    let first = common::run_json(&recipe, &ws.cache(), &[]);
    assert!(totals(&first, "tensors_encoded") > 0, "{first}");
    let shard = |j: usize| ws.path(&format!("out/tiny-dev{j}-of-3.gguf"));
    let written: Vec<Vec<u8>> = (0..3).map(|j| std::fs::read(shard(j)).unwrap()).collect();

    std::fs::remove_file(shard(1)).unwrap();
    let again = common::run_json(&recipe, &ws.cache(), &[]);
    assert_eq!(totals(&again, "tensors_encoded"), 0, "{again}");
    assert!(std::fs::read(shard(1)).unwrap() == written[1]);

    let quantized = ws.path("one-shot.gguf");
    common::stdout_of_success(common::quantforge(&[
        os("quantize"),
        ws.path("tiny.gguf").as_os_str(),
        quantized.as_os_str(),
        os("Q4_K_M"),
    ]));
    let prefix = ws.path("cli");
    common::stdout_of_success(common::quantforge(&[
        os("shard-devices"),
        quantized.as_os_str(),
        prefix.as_os_str(),
        os("--devices"),
        os("3"),
        os("--split"),
        os("1,2,1"),
    ]));
    for (j, bytes) in written.iter().enumerate() {
        let cli = std::fs::read(ws.path(&format!("cli-dev{j}-of-3.gguf"))).unwrap();
        assert!(*bytes == cli, "device {j}: the export and shard-devices differ");
    }
    let merged = ws.path("merged.gguf");
    common::stdout_of_success(common::quantforge(&[os("merge"), shard(2).as_os_str(), merged.as_os_str()]));
    assert!(std::fs::read(merged).unwrap() == std::fs::read(quantized).unwrap());

    // Slices of the input's own tensors, copied from the file.
    let raw = ws.path("raw");
    let tiny = ws.path("tiny.gguf");
    common::stdout_of_success(common::quantforge(&[
        os("shard-devices"),
        tiny.as_os_str(),
        raw.as_os_str(),
        os("--devices"),
        os("2"),
    ]));
    for j in 0..2 {
        let (ours, cli) = (ws.path(&format!("out/raw-dev{j}-of-2.gguf")), ws.path(&format!("raw-dev{j}-of-2.gguf")));
        assert!(std::fs::read(ours).unwrap() == std::fs::read(cli).unwrap(), "device {j} of the input differs");
    }
}

/// Ops are kebab-case and fields snake_case; the other spelling of either
/// reads the same, and a field given in both spellings is refused.
#[test]
fn op_and_field_names_take_either_separator() {
    let parse = |text: &str| Recipe::parse(text, Path::new("r.toml"));
    let with = |field: &str, op: &str| {
        LADDER.replace("from = \"tiny\"\n", &format!("from = \"tiny\"\n{field} = \"Q8_0\"\n")).replace(
            "[step.out]",
            &format!("[step.named]\nop = \"{op}\"\nfrom = \"q\"\nset = [\"general.name=str:x\"]\n\n[step.out]"),
        )
    };
    let keys = |recipe: &Recipe| recipe.nodes.iter().map(|n| n.op.key_params().to_string()).collect::<Vec<_>>();
    let snake = parse(&with("output_tensor_type", "set-metadata")).unwrap();
    let kebab = parse(&with("output-tensor-type", "set_metadata")).unwrap();
    assert_eq!(keys(&snake), keys(&kebab));
    assert!(keys(&snake)[1].contains("\"output_tensor_type\":\"Q8_0\""), "{:?}", keys(&snake));
    let both = with("output_tensor_type", "set-metadata")
        .replace("from = \"tiny\"\n", "from = \"tiny\"\noutput-tensor-type = \"Q6_K\"\n");
    let error = parse(&both).err().unwrap().to_string();
    assert!(error.contains("`output_tensor_type` is given twice"), "{error}");
}

#[test]
fn changing_one_tensors_type_encodes_one_tensor() {
    let ws = Workspace::new();
    let base = LADDER.replace(r#"preset = ["Q8_0", "Q4_K_M", "Q3_K_S"]"#, r#"preset = "Q4_K_M""#);
    let recipe = ws.recipe("one.toml", &base);
    common::run_json(&recipe, &ws.cache(), &[]);
    let changed = base.replace(
        r#"preset = "Q4_K_M""#,
        r#"preset = "Q4_K_M"
override = [{ match = "blk\\.1\\.ffn_down\\.weight", type = "Q8_0" }]"#,
    );
    let recipe = ws.recipe("one.toml", &changed);
    let plan = common::stdout_of_success(common::quantforge(&[
        os("plan"),
        recipe.as_os_str(),
        os("--cache-dir"),
        ws.cache().as_os_str(),
    ]));
    assert!(plan.contains("because parameter `override` changed"), "{plan}");
    let report = common::run_json(&recipe, &ws.cache(), &[]);
    assert_eq!(totals(&report, "tensors_encoded"), 1, "{report}");
    let one_shot = ws.path("one-shot.gguf");
    common::stdout_of_success(common::quantforge(&[
        os("quantize"),
        os("--tensor-type"),
        os(r"blk\.1\.ffn_down\.weight=Q8_0"),
        ws.path("tiny.gguf").as_os_str(),
        one_shot.as_os_str(),
        os("Q4_K_M"),
    ]));
    assert!(std::fs::read(ws.path("out/tiny-Q4_K_M.gguf")).unwrap() == std::fs::read(one_shot).unwrap());
}

#[test]
fn killed_runs_leave_a_consistent_cache() {
    let ws = Workspace::new();
    let recipe = ws.recipe("ladder.toml", LADDER);
    let reference = ws.path("reference-cache");
    common::run_json(&recipe, &reference, &[]);
    let expected: Vec<Vec<u8>> = ["Q8_0", "Q4_K_M", "Q3_K_S"]
        .iter()
        .map(|p| std::fs::read(ws.path(&format!("out/tiny-{p}.gguf"))).unwrap())
        .collect();
    std::fs::remove_dir_all(ws.path("out")).unwrap();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..24 {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let delay = Duration::from_millis((seed >> 33) % 700);
        let mut child = Command::new(env!("CARGO_BIN_EXE_quantforge"))
            .args([os("run"), recipe.as_os_str(), os("--cache-dir"), ws.cache().as_os_str()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(delay);
        child.kill().unwrap();
        child.wait().unwrap();
        let verify = common::quantforge(&[os("cache"), os("verify"), os("--cache-dir"), ws.cache().as_os_str()]);
        assert!(verify.status.success(), "after a kill at {delay:?}: {}", String::from_utf8_lossy(&verify.stdout));
    }
    let report = common::run_json(&recipe, &ws.cache(), &[]);
    assert_eq!(totals(&report, "failed"), 0);
    for (preset, bytes) in ["Q8_0", "Q4_K_M", "Q3_K_S"].iter().zip(&expected) {
        assert!(&std::fs::read(ws.path(&format!("out/tiny-{preset}.gguf"))).unwrap() == bytes, "{preset}");
    }
    let left: Vec<_> = std::fs::read_dir(ws.path("out"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".tmp"))
        .collect();
    assert!(left.is_empty(), "temporary files of killed runs survived the next run: {left:?}");
    common::stdout_of_success(common::quantforge(&[
        os("cache"),
        os("verify"),
        os("--cache-dir"),
        ws.cache().as_os_str(),
    ]));
}

#[test]
fn concurrent_runs_share_one_cache() {
    let ws = Workspace::new();
    let a = ws.recipe("a.toml", LADDER);
    let b = ws.recipe("b.toml", &LADDER.replace("out/tiny-", "out-b/tiny-"));
    let spawn = |recipe: &Path| {
        Command::new(env!("CARGO_BIN_EXE_quantforge"))
            .args([os("run"), recipe.as_os_str(), os("--json"), os("--cache-dir"), ws.cache().as_os_str()])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (first, second) = (spawn(&a), spawn(&b));
    common::stdout_of_success(first.wait_with_output().unwrap());
    common::stdout_of_success(second.wait_with_output().unwrap());
    for preset in ["Q8_0", "Q4_K_M", "Q3_K_S"] {
        let x = std::fs::read(ws.path(&format!("out/tiny-{preset}.gguf"))).unwrap();
        let y = std::fs::read(ws.path(&format!("out-b/tiny-{preset}.gguf"))).unwrap();
        assert!(x == y, "{preset}");
    }
    common::stdout_of_success(common::quantforge(&[
        os("cache"),
        os("verify"),
        os("--cache-dir"),
        ws.cache().as_os_str(),
    ]));
}

#[test]
fn fused_chain_never_stores_the_intermediate_unless_kept() {
    let ws = Workspace::new();
    let chain = r#"
[input.tiny]
path = "tiny.gguf"

[step.q8]
op = "quantize"
from = "tiny"
preset = "Q8_0"

[step.f32]
op = "dequantize"
from = "q8"
type = "f32"

[step.q4]
op = "quantize"
from = "f32"
preset = "Q4_0"
allow_requantize = true

[step.out]
op = "export"
from = "q4"
path = "q4.gguf"
"#;
    let recipe = ws.recipe("chain.toml", chain);
    let report = common::run_json(&recipe, &ws.cache(), &[]);
    let usage = common::stdout_of_success(common::quantforge(&[
        os("cache"),
        os("du"),
        os("--cache-dir"),
        ws.cache().as_os_str(),
    ]));
    let kept = ws.recipe("kept.toml", &chain.replace("type = \"f32\"", "type = \"f32\"\nkeep = true"));
    let kept_report = common::run_json(&kept, &ws.cache(), &[]);
    let kept_usage = common::stdout_of_success(common::quantforge(&[
        os("cache"),
        os("du"),
        os("--cache-dir"),
        ws.cache().as_os_str(),
    ]));
    assert_ne!(usage, kept_usage, "keep = true adds the F32 tensors to the store");
    let f32_node = kept_report["nodes"].as_array().unwrap().iter().find(|n| n["step"] == "f32").unwrap();
    assert!(f32_node["tensors_encoded"].as_u64().unwrap() > 0, "{kept_report}");
    assert_eq!(totals(&report, "failed"), 0);
    // Same bytes either way: keeping changes where bytes live, not what they are.
    assert_eq!(kept_report["nodes"].as_array().unwrap().iter().find(|n| n["step"] == "out").unwrap()["status"], "hit");
}

#[test]
fn verify_finds_corruption_and_gc_collects() {
    let ws = Workspace::new();
    let recipe = ws.recipe("ladder.toml", LADDER);
    common::run_json(&recipe, &ws.cache(), WHOLE);
    let cache = ws.cache();
    let cache_cmd = |args: &[&str]| {
        let mut full = vec![os("cache")];
        full.extend(args.iter().map(|a| os(a)));
        full.extend([os("--cache-dir"), cache.as_os_str()]);
        common::quantforge(&full)
    };
    let listing = common::stdout_of_success(cache_cmd(&["ls"]));
    assert!(listing.contains("ladder/out[preset=Q4_K_M]"), "{listing}");

    // Flip one byte of one blob: verify names it and fails.
    let shard = std::fs::read_dir(ws.cache().join("blobs")).unwrap().next().unwrap().unwrap().path();
    let blob = std::fs::read_dir(shard).unwrap().next().unwrap().unwrap().path();
    let mut bytes = std::fs::read(&blob).unwrap();
    bytes[0] ^= 1;
    std::fs::write(&blob, bytes).unwrap();
    let verify = cache_cmd(&["verify"]);
    assert_eq!(verify.status.code(), Some(1));
    let name = blob.file_name().unwrap().to_str().unwrap();
    assert!(String::from_utf8_lossy(&verify.stdout).contains(&format!("corrupt blob {name}")));

    // A bare gc removes nothing a run can use (the hints that spare a
    // rehash included), and says so; a dry run says what would go and why,
    // and removes nothing.
    let before = common::stdout_of_success(cache_cmd(&["du"]));
    let bare = common::stdout_of_success(cache_cmd(&["gc"]));
    assert!(bare.starts_with("removed 0 entries (0 broken), 0 blobs no entry names (0 B)"), "{bare}");
    let dry = common::stdout_of_success(cache_cmd(&["gc", "--max-size", "0", "--dry-run"]));
    assert!(
        dry.starts_with("would remove ") && !dry.starts_with("would remove 0 ") && dry.contains(" beyond 0 B"),
        "{dry}"
    );
    assert_eq!(common::stdout_of_success(cache_cmd(&["du"])), before, "a dry run removes nothing");

    // Collecting everything, then running again, rebuilds what is needed.
    std::fs::remove_file(&blob).unwrap();
    // Nothing is two weeks old (ages take weeks as they take days): only
    // the entries naming the removed blob go, as broken.
    let young = common::stdout_of_success(cache_cmd(&["gc", "--older-than", "2w"]));
    assert!(young.contains("(0 unused for 2w, ") && !young.contains(" 0 broken)"), "{young}");
    assert!(young.contains(", 0 blobs no entry names (0 B)"), "{young}");
    std::fs::write(ws.cache().join("tmp/stray"), b"left by a killed run").unwrap();
    let gc = common::stdout_of_success(cache_cmd(&["gc", "--max-size", "0"]));
    assert!(gc.contains("1 temporary file of killed runs"), "{gc}");
    let usage = common::stdout_of_success(cache_cmd(&["du"]));
    assert!(usage.contains("0 B in 0 blobs"), "{usage}");
    std::fs::remove_dir_all(ws.path("out")).unwrap();
    let report = common::run_json(&recipe, &ws.cache(), WHOLE);
    assert_eq!(totals(&report, "failed"), 0);
    assert!(totals(&report, "tensors_encoded") > 0);
    common::stdout_of_success(cache_cmd(&["verify"]));
}

#[test]
fn superseded_results_are_marked_and_evicted_before_the_latest_builds() {
    let ws = Workspace::new();
    let recipe = ws.recipe("ladder.toml", LADDER);
    common::run_json(&recipe, &ws.cache(), &[]);
    // The same nodes built again under other keys: the first build's
    // quantizations and exports are superseded.
    let changed =
        LADDER.replace("preset = [", "override = [{ match = \"output\\\\.weight\", type = \"Q8_0\" }]\npreset = [");
    std::fs::write(&recipe, changed).unwrap();
    common::run_json(&recipe, &ws.cache(), &[]);
    let cache = ws.cache();
    let cache_cmd = |args: &[&str]| {
        let mut full = vec![os("cache")];
        full.extend(args.iter().map(|a| os(a)));
        full.extend([os("--cache-dir"), cache.as_os_str()]);
        common::stdout_of_success(common::quantforge(&full))
    };
    let cache_json = |args: &[&str]| -> Value {
        let mut full = vec![os("--json"), os("cache")];
        full.extend(args.iter().map(|a| os(a)));
        full.extend([os("--cache-dir"), cache.as_os_str()]);
        serde_json::from_str(&common::stdout_of_success(common::quantforge(&full))).unwrap()
    };
    let listing = cache_cmd(&["ls"]);
    assert!(listing.starts_with("KEY "), "a header first: {listing}");
    assert_eq!(listing.lines().filter(|l| l.contains("  superseded  ")).count(), 6, "{listing}");
    assert!(listing.ends_with("6 superseded (`cache gc --superseded` removes them)\n"), "{listing}");
    let entries = cache_json(&["ls"]);
    let entries = entries.as_array().unwrap();

    // The latest builds' entries made to look least recently used: an
    // eviction by age alone would take them first.
    let day_ago = SystemTime::now() - Duration::from_secs(86_400);
    for entry in entries.iter().filter(|e| e["superseded"] == false) {
        let hex = entry["key"].as_str().unwrap();
        let kind = entry["kind"].as_str().unwrap();
        let path = cache.join("actions").join(kind).join(&hex[..2]).join(hex);
        std::fs::File::options().write(true).open(&path).unwrap().set_modified(day_ago).unwrap();
    }
    let total = cache_json(&["du"])["blob_bytes"].as_u64().unwrap();
    let dry = cache_cmd(&["gc", "--superseded", "--dry-run"]);
    assert!(dry.starts_with("would remove 6 entries (6 superseded, 0 broken)"), "{dry}");
    let budget = total - cache_json(&["gc", "--superseded", "--dry-run"])["bytes_freed"].as_u64().unwrap();
    let latest = |listing: &str| listing.lines().filter(|l| l.contains("  latest  ")).count();
    let latest_before = latest(&listing);
    // What the superseded entries alone hold goes (the quantizations'
    // manifests); a superseded export whose tensors lie in the latest
    // exports costs nothing, and may stay.
    let evicted = cache_cmd(&["gc", "--max-size", &budget.to_string()]);
    assert!(evicted.starts_with("removed 3 entries (3 beyond"), "{evicted}");
    assert_eq!(latest(&cache_cmd(&["ls"])), latest_before, "every latest build's entry stays");
    let rerun = common::run_json(&recipe, &ws.cache(), &[]);
    assert_eq!(totals(&rerun, "hit"), totals(&rerun, "nodes"), "the latest build was kept: {rerun:#}");
}

#[test]
fn filter_rename_and_metadata_steps_move_descriptors_only() {
    let ws = Workspace::new();
    let recipe = ws.recipe(
        "edit.toml",
        r#"
[input.tiny]
path = "tiny.gguf"

[step.some]
op = "filter"
from = "tiny"
include = ["^blk\\.0\\.", "^output"]
exclude = ["_norm"]

[step.renamed]
op = "rename"
from = "some"
tensors = { "output.weight" = "lm_head.weight" }

[step.named]
op = "set-metadata"
from = "renamed"
set = ["general.name=str:edited"]

[step.trimmed]
op = "delete-metadata"
from = "named"
keys = ["general.file_type"]

[step.out]
op = "export"
from = "trimmed"
path = "edited.gguf"
"#,
    );
    let report = common::run_json(&recipe, &ws.cache(), &[]);
    assert_eq!(totals(&report, "tensors_encoded"), 0, "{report}");
    let model = quantforge::formats::ModelFile::open(&ws.path("edited.gguf"), Default::default()).unwrap();
    let names: Vec<&str> = model.tensors.iter().map(|t| t.name.as_str()).collect();
    assert!(names.contains(&"lm_head.weight") && !names.contains(&"output.weight"), "{names:?}");
    assert!(
        names.iter().all(|n| (n.starts_with("blk.0.") || *n == "lm_head.weight") && !n.contains("_norm")),
        "{names:?}"
    );
    assert_eq!(model.metadata.get_str("general.name"), Some("edited"));
    assert!(model.metadata.get("general.file_type").is_none());
    // The bytes are the input's, moved: every tensor equals its source.
    let source = quantforge::formats::ModelFile::open(&ws.path("tiny.gguf"), Default::default()).unwrap();
    for t in &model.tensors {
        let name = if t.name == "lm_head.weight" { "output.weight" } else { t.name.as_str() };
        let original = source.tensors.iter().find(|s| s.name == name).unwrap();
        assert!(model.tensor_data(t).unwrap() == source.tensor_data(original).unwrap(), "{}", t.name);
    }
}

/// Two exports of one quantization, run at once: each conversion is encoded
/// once in the run (the other export waits and copies its blob), also under
/// `--force`, and the files are those of a run one node at a time.
#[test]
fn a_conversion_two_exports_need_is_encoded_once_per_run() {
    let ws = Workspace::new();
    let recipe = ws.recipe(
        "shared.toml",
        r#"
[input.tiny]
path = "tiny.gguf"

[step.q]
op = "quantize"
from = "tiny"
preset = "Q4_K_M"

[step.a]
op = "export"
from = "q"
path = "a.gguf"

[step.named]
op = "set-metadata"
from = "q"
set = ["general.name=str:b"]

[step.b]
op = "export"
from = "named"
path = "b.gguf"
"#,
    );
    // The tiny model has 16 tensors to quantize, 5 to copy, per export.
    // Counted as cargo counts: encoded once, shared with the other export,
    // nothing from an earlier run — on a first run, and under --force.
    let counts =
        |report: &Value| ["tensors_encoded", "tensors_shared", "tensors_reused"].map(|field| totals(report, field));
    let concurrent = common::run_json(&recipe, &ws.cache(), &["-j", "2"]);
    assert_eq!(counts(&concurrent), [16, 16, 0], "{concurrent}");
    let files = [std::fs::read(ws.path("a.gguf")).unwrap(), std::fs::read(ws.path("b.gguf")).unwrap()];
    let forced = common::run_json(&recipe, &ws.cache(), &["-j", "2", "--force"]);
    assert_eq!(counts(&forced), [16, 16, 0], "{forced}");
    let sequential = common::run_json(&recipe, &ws.path("other-cache"), &["-j", "1"]);
    assert_eq!(totals(&sequential, "tensors_encoded"), 16);
    assert!(std::fs::read(ws.path("a.gguf")).unwrap() == files[0]);
    assert!(std::fs::read(ws.path("b.gguf")).unwrap() == files[1]);
}

/// `plan` says what became of an output, as DVC does: `deleted` or
/// `modified`, naming the file; and a step whose exports are up to date is
/// skipped, not a miss to explain, even when its result left the cache.
#[test]
fn plan_says_which_output_was_deleted_or_modified() {
    let ws = Workspace::new();
    let recipe = ws.recipe("ladder.toml", LADDER);
    common::run_json(&recipe, &ws.cache(), &[]);
    let plan = || {
        common::stdout_of_success(common::quantforge(&[
            os("plan"),
            recipe.as_os_str(),
            os("--cache-dir"),
            ws.cache().as_os_str(),
        ]))
    };
    std::fs::remove_file(ws.path("out/tiny-Q8_0.gguf")).unwrap();
    let mut modified = std::fs::read(ws.path("out/tiny-Q4_K_M.gguf")).unwrap();
    let last = modified.len() - 1;
    modified[last] ^= 1;
    std::fs::write(ws.path("out/tiny-Q4_K_M.gguf"), modified).unwrap();
    let text = plan();
    assert!(text.contains("out/tiny-Q8_0.gguf` was deleted"), "{text}");
    assert!(text.contains("out/tiny-Q4_K_M.gguf` was modified"), "{text}");
    assert!(!text.contains("tiny-Q3_K_S.gguf` was"), "{text}");

    // The exports back as they were, every intermediate result gone: the
    // quantizations are not misses, since run would not execute them.
    common::run_json(&recipe, &ws.cache(), &[]);
    std::fs::remove_dir_all(ws.cache().join("actions/nodes")).unwrap();
    let report: Value = serde_json::from_str(&common::stdout_of_success(common::quantforge(&[
        os("plan"),
        recipe.as_os_str(),
        os("--cache-dir"),
        ws.cache().as_os_str(),
        os("--json"),
    ])))
    .unwrap();
    let nodes = report["report"]["nodes"].as_array().or(report["nodes"].as_array()).unwrap().clone();
    for node in nodes {
        assert_ne!(node["status"], "miss", "{node}");
        assert!(node.get("why").is_none(), "{node}");
    }
}

/// A ladder's first run encodes every conversion once and takes nothing
/// from the cache; each export counts its own tensors (a sibling encoded
/// alongside another export's counts for the export that needs it), so no
/// export reads "0 encoded" while another takes every encode.
#[test]
fn a_ladders_counters_add_up() {
    let ws = Workspace::new();
    let recipe = ws.recipe("ladder.toml", LADDER);
    for extra in [&[][..], &["--force"][..]] {
        let report = common::run_json(&recipe, &ws.cache(), extra);
        assert_eq!(totals(&report, "tensors_reused"), 0, "{extra:?}: {report}");
        let exports: Vec<&Value> = report["nodes"].as_array().unwrap().iter().filter(|n| n["op"] == "export").collect();
        for export in &exports {
            let (encoded, shared) =
                (export["tensors_encoded"].as_u64().unwrap(), export["tensors_shared"].as_u64().unwrap());
            assert_eq!(encoded + shared, 16, "{extra:?}: every quantized tensor of {}", export["id"]);
            assert!(encoded > 0, "{extra:?}: {} encoded nothing of its own", export["id"]);
        }
        let (decoded, encoded) = (totals(&report, "tensors_decoded"), totals(&report, "tensors_encoded"));
        assert!(decoded < encoded, "{extra:?}: sources decoded for several types at once: {report}");
    }
}

/// An export is named as a target however its path is spelled, from the
/// recipe's directory, its parent and the output directory; `attest` finds
/// the run that wrote it from anywhere.
#[test]
fn a_path_names_its_export_however_spelled() {
    let ws = Workspace::new();
    let recipe = ws.recipe("ladder.toml", LADDER);
    let cache = ws.cache();
    common::run_json(&recipe, &cache, &[]);
    let root = ws.path("");
    let parent = root.parent().unwrap().to_owned();
    let name = root.file_name().unwrap().to_str().unwrap().to_owned();
    let out_dir = ws.path("out");
    let absolute = ws.path("out/tiny-Q8_0.gguf");
    let cases: Vec<(&Path, String, String)> = vec![
        (&root, "ladder.toml".into(), "out/tiny-Q8_0.gguf".into()),
        (&root, "ladder.toml".into(), "./out/tiny-Q8_0.gguf".into()),
        (&root, "./ladder.toml".into(), "out//tiny-Q8_0.gguf".into()),
        (&root, "ladder.toml".into(), absolute.display().to_string()),
        (&parent, format!("{name}/ladder.toml"), format!("{name}/out/tiny-Q8_0.gguf")),
        (&parent, format!("{name}/ladder.toml"), "out/tiny-Q8_0.gguf".into()),
        (&out_dir, "../ladder.toml".into(), "tiny-Q8_0.gguf".into()),
        (&out_dir, "../ladder.toml".into(), "../out/tiny-Q8_0.gguf".into()),
    ];
    for (cwd, recipe, target) in &cases {
        let args = [os("run"), os(recipe), os(target), os("--cache-dir"), cache.as_os_str()];
        let out = common::quantforge_in(cwd, &args);
        assert!(out.status.success(), "{} {recipe} {target}: {}", cwd.display(), String::from_utf8_lossy(&out.stderr));
    }
    for (cwd, file) in
        [(&root, "out/tiny-Q8_0.gguf"), (&out_dir, "tiny-Q8_0.gguf"), (&parent, &*format!("{name}/out/tiny-Q8_0.gguf"))]
    {
        let out = common::quantforge_in(cwd, &[os("attest"), os(file), os("--cache-dir"), cache.as_os_str()]);
        assert!(out.status.success(), "attest {file} in {}: {}", cwd.display(), String::from_utf8_lossy(&out.stderr));
    }
}
