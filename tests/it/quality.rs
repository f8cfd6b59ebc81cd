//! Quality in the loop: recipe steps that llama.cpp's own tools compute.
//! An `imatrix` step equals `llama-imatrix` run by hand with the same
//! arguments, byte for byte, and a model quantized with it equals
//! `llama-quantize --imatrix` with that file; a rerun is a hit; a new build
//! of the tool re-runs the step, and `plan` says why; a missing tool fails
//! the run before any work, but not a run of targets that need no tool; a tool that fails, is killed or writes garbage
//! is an error naming the step, the command line and the tool's last words,
//! and leaves nothing cached.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// The tiny model, the calibration text llama-imatrix's fixtures were made
/// from, and a recipe over both, in a directory of their own.
struct Project {
    dir: tempfile::TempDir,
}

/// The recipe's arguments to llama-imatrix, as a user would type them.
const IMATRIX_ARGS: [&str; 7] = ["-c", "64", "--chunks", "3", "--process-output", "-t", "2"];

impl Project {
    /// A project whose recipe runs the llama.cpp tools in `llama_cpp`.
    fn new(llama_cpp: &Path) -> Project {
        let dir = tempfile::tempdir().unwrap();
        std::fs::copy(common::tiny_model(), dir.path().join("tiny.gguf")).unwrap();
        std::fs::copy(common::repo().join("tests/imatrix/text.txt"), dir.path().join("text.txt")).unwrap();
        let recipe = format!(
            r#"
[tools]
llama_cpp = "{}"

[input.base]
path = "tiny.gguf"

[input.calib]
path = "text.txt"

[step.im]
op = "imatrix"
from = "base"
corpus = "calib"
chunks = 3
ctx = 64
process_output = true

[step.q]
op = "quantize"
from = "base"
preset = ["Q4_K_M", "IQ3_S"]
imatrix = "im"

[step.out]
op = "export"
from = "q"
path = "tiny-{{preset}}.gguf"

[step.matrix]
op = "export"
from = "im"
path = "imatrix.gguf"
"#,
            llama_cpp.display()
        );
        std::fs::write(dir.path().join("quality.toml"), recipe).unwrap();
        Project { dir }
    }

    /// A project whose recipe also evaluates each quantized model of `presets`
    /// against the tiny model over a text of its own.
    fn evaluating(llama_cpp: &Path, presets: &str) -> Project {
        let project = Project::new(llama_cpp);
        let text = std::fs::read_to_string(project.path("text.txt")).unwrap();
        std::fs::write(project.path("eval.txt"), text.repeat(2)).unwrap();
        let recipe = std::fs::read_to_string(project.path("quality.toml")).unwrap();
        let recipe = recipe.replace(r#"preset = ["Q4_K_M", "IQ3_S"]"#, &format!("preset = {presets}"));
        let evaluate = "\n[input.wiki]\npath = \"eval.txt\"\n\n[step.eval]\nop = \"evaluate\"\nfrom = \"q\"\n\
                        base = \"base\"\ntext = \"wiki\"\nctx = 64\n";
        std::fs::write(project.path("quality.toml"), recipe + evaluate).unwrap();
        project
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `quantforge COMMAND RECIPE --cache-dir CACHE` and `extra`.
    fn quantforge(&self, command: &str, extra: &[&str]) -> Output {
        let recipe = self.path("quality.toml");
        let cache = self.path("cache");
        let mut args: Vec<&dyn AsRef<std::ffi::OsStr>> = vec![&command, &recipe, &"--cache-dir", &cache];
        args.extend(extra.iter().map(|a| a as &dyn AsRef<std::ffi::OsStr>));
        common::quantforge_with(&args)
    }

    /// `run` or `plan`, which must succeed: its report.
    fn report(&self, command: &str) -> Value {
        let out = self.quantforge(command, &["--json"]);
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "{command} failed: {stderr}{stdout}");
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// `run`, which must fail: its report, which says why.
    fn failure(&self) -> String {
        let out = self.quantforge("run", &[]);
        assert!(!out.status.success(), "the run succeeded");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

/// The browser's window: tall enough for a run's DAG, table and both quality charts.
const WINDOW: &str = "1400,2400";

/// Held by each test while it runs llama.cpp's tools: one at a time, as a
/// recipe runs them (their logger loses its last lines on a busy machine).
fn tools_alone() -> std::sync::MutexGuard<'static, ()> {
    static TOOLS: std::sync::Mutex<()> = std::sync::Mutex::new(());
    TOOLS.lock().unwrap_or_else(|e| e.into_inner())
}

fn node<'r>(report: &'r Value, id: &str) -> &'r Value {
    report["nodes"].as_array().unwrap().iter().find(|n| n["id"] == id).unwrap_or_else(|| panic!("no node {id}"))
}

fn status(report: &Value, id: &str) -> String {
    node(report, id)["status"].as_str().unwrap().to_owned()
}

/// The reference build's binaries directory, with llama-imatrix,
/// llama-perplexity and llama-quantize built (scripts/fetch-references.sh
/// --build).
fn reference_bin() -> Option<PathBuf> {
    common::reference("build/bin/llama-quantize")?;
    common::reference("build/bin/llama-perplexity")?;
    Some(common::reference("build/bin/llama-imatrix")?.parent()?.to_owned())
}

fn run_by_hand(dir: &Path, program: &Path, args: &[&str]) {
    let out = Command::new(program).args(args).current_dir(dir).output().unwrap();
    assert!(out.status.success(), "{} failed: {}", program.display(), String::from_utf8_lossy(&out.stderr));
}

#[test]
fn an_imatrix_step_equals_llama_imatrix_by_hand_and_quantizes_as_llama_quantize_with_it() {
    let _alone = tools_alone();
    let Some(bin) = reference_bin() else { return };
    let project = Project::new(&bin);
    // Units of tensors are cut from results: the matrix must exist first.
    let units = project.quantforge("plan", &["--units"]);
    let stderr = String::from_utf8_lossy(&units.stderr);
    assert!(!units.status.success(), "plan --units ran llama-imatrix");
    assert!(stderr.contains("step `im`: llama-imatrix computes it only when the recipe runs"), "{stderr}");
    assert!(
        common::quantforge_with(&[
            &"run",
            &project.path("quality.toml"),
            &"im",
            &"--cache-dir",
            &project.path("cache")
        ])
        .status
        .success()
    );
    assert!(project.quantforge("plan", &["--units"]).status.success(), "plan --units with the matrix cached");

    let report = project.report("run");
    assert_eq!(status(&report, "im"), "hit");
    assert_eq!(node(&report, "im")["backend"], "llama-imatrix");

    let dir = project.dir.path();
    let mut args = vec!["-m", "tiny.gguf", "-f", "text.txt", "-o", "by-hand.imatrix.gguf"];
    args.extend(IMATRIX_ARGS);
    run_by_hand(dir, &bin.join("llama-imatrix"), &args);
    let exported = std::fs::read(project.path("imatrix.gguf")).unwrap();
    assert!(exported == std::fs::read(project.path("by-hand.imatrix.gguf")).unwrap(), "the step's imatrix differs");

    // As published: the matrix beside the models, under the name they record.
    for preset in ["Q4_K_M", "IQ3_S"] {
        let by_hand = format!("by-hand-{preset}.gguf");
        let args = ["--imatrix", "imatrix.gguf", "tiny.gguf", &by_hand, preset, "2"];
        run_by_hand(dir, &bin.join("llama-quantize"), &args);
        let ours = std::fs::read(project.path(&format!("tiny-{preset}.gguf"))).unwrap();
        assert!(ours == std::fs::read(project.path(&by_hand)).unwrap(), "{preset} differs from llama-quantize's");
    }

    let rerun = project.report("run");
    for n in rerun["nodes"].as_array().unwrap() {
        assert_eq!(n["status"], "hit", "{} ran again", n["id"]);
    }
}

/// A copy of the reference build's binaries and libraries, for a test to
/// rebuild (change) without touching the original.
fn copy_of(bin: &Path) -> tempfile::TempDir {
    let copy = tempfile::tempdir().unwrap();
    let status = Command::new("cp").arg("-a").arg(format!("{}/.", bin.display())).arg(copy.path()).status().unwrap();
    assert!(status.success());
    copy
}

#[test]
fn a_new_build_of_the_tool_reruns_its_step_and_plan_says_why() {
    let _alone = tools_alone();
    let Some(bin) = reference_bin() else { return };
    let tools = copy_of(&bin);
    let project = Project::new(tools.path());
    project.report("run");

    // A rebuilt tool: other bytes, the same version line.
    let binary = tools.path().join("llama-imatrix");
    let mut bytes = std::fs::read(&binary).unwrap();
    bytes.push(0);
    std::fs::write(&binary, bytes).unwrap();

    let plan = project.report("plan");
    assert_eq!(status(&plan, "im"), "miss");
    let why = node(&plan, "im")["why"].to_string();
    assert!(why.contains("`llama-imatrix` is another build"), "{why}");

    let rerun = project.report("run");
    assert_eq!(status(&rerun, "im"), "ran");
    // The same matrix again: every quantized tensor comes from the cache.
    assert_eq!(rerun["totals"]["tensors_encoded"], 0, "{rerun}");
}

#[test]
fn a_missing_tool_fails_the_run_before_any_work_and_says_how_to_get_it() {
    let _alone = tools_alone();
    let nowhere = tempfile::tempdir().unwrap();
    let project = Project::new(nowhere.path());
    for command in ["plan", "run"] {
        let out = project.quantforge(command, &[]);
        assert!(!out.status.success(), "{command} succeeded without llama-imatrix");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("step `im`: llama-imatrix is not found"), "{stderr}");
        assert!(stderr.contains("the recipe's [tools] llama_cpp names"), "{stderr}");
        assert!(stderr.contains("scripts/fetch-references.sh --build"), "{stderr}");
    }
    assert!(!project.path("tiny-Q4_K_M.gguf").exists(), "a model was written before the run failed");

    // A target that needs no tool runs without it.
    let recipe = std::fs::read_to_string(project.path("quality.toml")).unwrap();
    let plain = "\n[step.plain]\nop = \"quantize\"\nfrom = \"base\"\npreset = \"Q8_0\"\n\n\
                 [step.plain_out]\nop = \"export\"\nfrom = \"plain\"\npath = \"plain.gguf\"\n";
    std::fs::write(project.path("quality.toml"), recipe + plain).unwrap();
    let out = project.quantforge("run", &["plain_out"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(project.path("plain.gguf").exists() && !project.path("tiny-Q4_K_M.gguf").exists());
}

/// A stand-in `llama-imatrix` that answers `--version` and otherwise does
/// `body` (a shell script; `$out` is its `-o` argument).
fn stub_tool(body: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write_stub(dir.path(), "llama-imatrix", "-o", body);
    dir
}

/// Writes the stand-in `name` into `dir`: it answers `--version`, and
/// otherwise does `body` with `$out` the argument after `out_flag`.
fn write_stub(dir: &Path, name: &str, out_flag: &str, body: &str) {
    use std::os::unix::fs::PermissionsExt;
    let script = format!(
        "#!/bin/sh\n[ \"$1\" = --version ] && {{ echo 'version: 0.0.0-stub' >&2; exit 0; }}\nargs=\"$*\"\n\
         out=\nwhile [ $# -gt 0 ]; do [ \"$1\" = {out_flag} ] && out=$2; shift; done\n{body}\n"
    );
    let path = dir.join(name);
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn an_evaluation_without_statistics_is_asked_again_then_fails_with_the_base_kept() {
    let _alone = tools_alone();
    let tools = tempfile::tempdir().unwrap();
    // The base's run writes its logits (the header and length of one chunk of 64 tokens, a
    // two-token vocabulary); each evaluation prints a table and no statistics.
    let body = "case \"$args\" in\n*--kl-divergence\\ *|*--kl-divergence) echo run >> \"$(dirname \"$0\")/runs\"; \
                echo 'chunk PPL'; exit 0;;\n*) { printf '_logits_\\100\\0\\0\\0\\2\\0\\0\\0\\1\\0\\0\\0'; \
                head -c 628 /dev/zero; } > \"$out\";;\nesac";
    write_stub(tools.path(), "llama-perplexity", "--kl-divergence-base", body);
    let project = Project::new(tools.path());
    let recipe = format!(
        "[tools]\nllama_cpp = \"{}\"\n\n[input.base]\npath = \"tiny.gguf\"\n\n[input.wiki]\npath = \"text.txt\"\n\n\
         [step.q]\nop = \"quantize\"\nfrom = \"base\"\npreset = \"Q8_0\"\n\n\
         [step.eval]\nop = \"evaluate\"\nfrom = \"q\"\nbase = \"base\"\ntext = \"wiki\"\nctx = 64\n",
        tools.path().display()
    );
    std::fs::write(project.path("quality.toml"), recipe).unwrap();
    let report = project.failure();
    assert!(
        report.contains("llama-perplexity printed no statistics that read in 5 runs: no `Mean PPL(Q)` line"),
        "{report}"
    );
    assert_eq!(std::fs::read_to_string(tools.path().join("runs")).unwrap().lines().count(), 5);
    let plan = project.report("plan");
    assert_eq!(status(&plan, "eval.base[base]"), "hit", "the base's logits were not kept");
    assert_eq!(status(&plan, "eval"), "miss", "a failed evaluation was cached");
}

#[test]
fn a_tool_that_fails_is_named_with_its_command_and_last_words_and_leaves_nothing_cached() {
    let _alone = tools_alone();
    let cases = [
        ("echo 'loading the model' >&2\necho 'error: out of tokens' >&2\nexit 1", "failed (exit status 1)"),
        ("kill -9 $$", "failed (killed by SIGKILL; out of memory?)"),
        ("echo 'not an imatrix' > \"$out\"\necho 'saved' >&2", "wrote no importance matrix that reads"),
        ("echo 'saved' >&2", "wrote no importance matrix that reads"),
    ];
    for (body, problem) in cases {
        let tool = stub_tool(body);
        let project = Project::new(tool.path());
        let report = project.failure();
        assert!(report.contains("FAILED   im "), "{report}");
        assert!(report.contains(&format!("error: llama-imatrix {problem}")), "{problem}: {report}");
        // The command line, as it could be pasted into a shell.
        assert!(report.contains("-f text.txt -o /"), "{report}");
        assert!(report.contains("/llama-imatrix -t "), "{report}");
        assert!(report.contains("-c 64 --chunks 3 --process-output"), "{report}");
        if body.contains("out of tokens") {
            assert!(report.contains("its last lines:"), "{report}");
            assert!(report.contains("    error: out of tokens"), "the tool's last words: {report}");
        }
        let plan = project.report("plan");
        assert_eq!(status(&plan, "im"), "miss", "{problem}: a failed step was cached");
        assert!(!project.path("imatrix.gguf").exists());
    }
}

#[test]
fn quantize_takes_an_imatrix_from_a_step_but_not_from_an_export() {
    let _alone = tools_alone();
    let project = Project::new(Path::new("unused"));
    let recipe = std::fs::read_to_string(project.path("quality.toml")).unwrap();
    let cases = [
        (
            r#"imatrix = "im""#,
            r#"imatrix = "matrix""#,
            "`imatrix` takes an [input.NAME] or an `imatrix` step; `matrix` is an `export` step",
        ),
        (r#"imatrix = "im""#, r#"imatrix = "imm""#, "`imm` is not an input or a step"),
        (r#"corpus = "calib""#, r#"corpus = "im""#, "`corpus` must name an [input.NAME]; `im` is a step"),
        ("ctx = 64", "ctx = 0", "`ctx` must be a positive whole number, not 0"),
        ("ctx = 64", r#"ctx = "64""#, "`ctx` must be a whole number"),
    ];
    for (from, to, expected) in cases {
        std::fs::write(project.path("quality.toml"), recipe.replace(from, to)).unwrap();
        let out = project.quantforge("plan", &[]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && stderr.contains(expected), "{to}: {stderr}");
    }
}

/// Gemma 3 270M, its F16 decoding the step's model (handed to the tool as a
/// file written for it), over a Debian license text: the matrix equals
/// llama-imatrix's over the same F16 file.
#[test]
fn a_gemma_imatrix_step_equals_llama_imatrix_by_hand() {
    let _alone = tools_alone();
    let (Some(bin), Some(gemma)) = (reference_bin(), common::gemma()) else { return };
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy("/usr/share/common-licenses/GPL-3", dir.path().join("calib.txt")).unwrap();
    let recipe = format!(
        r#"
[tools]
llama_cpp = "{}"

[input.gemma]
path = "{}"

[input.calib]
path = "calib.txt"

[step.f16]
op = "dequantize"
from = "gemma"
type = "f16"

[step.base]
op = "export"
from = "f16"
path = "gemma-f16.gguf"

[step.im]
op = "imatrix"
from = "f16"
corpus = "calib"
chunks = 4
ctx = 128

[step.matrix]
op = "export"
from = "im"
path = "imatrix.gguf"
"#,
        bin.display(),
        gemma.display()
    );
    let recipe_path = dir.path().join("gemma.toml");
    std::fs::write(&recipe_path, recipe).unwrap();
    let cache = dir.path().join("cache");
    let run = || {
        let args: [&dyn AsRef<std::ffi::OsStr>; 5] = [&"run", &recipe_path, &"--json", &"--cache-dir", &cache];
        let out = common::quantforge_with(&args);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    assert_eq!(status(&run(), "im"), "ran");
    let args =
        ["-m", "gemma-f16.gguf", "-f", "calib.txt", "-o", "by-hand.gguf", "-c", "128", "--chunks", "4", "-t", "2"];
    run_by_hand(dir.path(), &bin.join("llama-imatrix"), &args);
    let ours = std::fs::read(dir.path().join("imatrix.gguf")).unwrap();
    assert!(ours == std::fs::read(dir.path().join("by-hand.gguf")).unwrap(), "the step's imatrix differs");
    assert_eq!(status(&run(), "im"), "hit");
}

/// What llama-perplexity printed of `statistic` (`Mean    KLD`, `Same top p`):
/// the number after its colon.
fn printed(stdout: &str, statistic: &str) -> f64 {
    let line = stdout.lines().find(|l| l.starts_with(statistic)).unwrap_or_else(|| panic!("no {statistic}: {stdout}"));
    let value = line.split_once(':').unwrap().1.split('±').next().unwrap();
    value.trim().trim_end_matches('%').trim().parse().unwrap()
}

/// `llama-perplexity ARGS` in `dir`, run by hand: its stdout, once it holds
/// the statistics (llama.cpp's logger may lose its last lines at exit, the
/// more often the busier the machine), asked as often as the engine asks.
fn perplexity_by_hand(dir: &Path, bin: &Path, args: &[&str]) -> String {
    for _ in 0..5 {
        let out = Command::new(bin.join("llama-perplexity")).args(args).current_dir(dir).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let stdout = String::from_utf8(out.stdout).unwrap();
        if stdout.contains("Same top p:") || !args.contains(&"--kl-divergence") {
            return stdout;
        }
    }
    panic!("llama-perplexity printed no statistics in five runs");
}

#[test]
fn an_evaluate_step_reports_what_llama_perplexity_prints_and_computes_the_base_once() {
    let _alone = tools_alone();
    let Some(bin) = reference_bin() else { return };
    let project = Project::evaluating(&bin, r#"["Q4_K_M", "IQ3_S"]"#);
    let report = project.report("run");
    assert_eq!(status(&report, "eval.base[base]"), "ran");
    assert_eq!(node(&report, "eval.base[base]")["op"], "kld-base");

    let dir = project.dir.path();
    perplexity_by_hand(
        dir,
        &bin,
        &["-m", "tiny.gguf", "-f", "eval.txt", "-c", "64", "--kl-divergence-base", "hand.kld"],
    );
    for preset in ["Q4_K_M", "IQ3_S"] {
        let model = format!("tiny-{preset}.gguf");
        let args = ["-m", &model, "--kl-divergence-base", "hand.kld", "--kl-divergence", "-c", "64"];
        let stdout = perplexity_by_hand(dir, &bin, &args);
        let evaluation = &node(&report, &format!("eval[preset={preset}]"))["evaluation"];
        for (field, statistic) in [
            ("ppl", "Mean PPL(Q)"),
            ("ppl_base", "Mean PPL(base)"),
            ("kld_mean", "Mean    KLD"),
            ("kld_median", "Median  KLD"),
            ("kld_p99", "99.0%   KLD"),
            ("kld_max", "Maximum KLD"),
            ("same_top_p", "Same top p"),
        ] {
            assert_eq!(evaluation[field].as_f64(), Some(printed(&stdout, statistic)), "{preset} {field}");
        }
        let bits = evaluation["bits_per_weight"].as_f64().unwrap();
        assert!((3.0..6.0).contains(&bits), "{preset}: {bits} bits per weight");
    }

    // A rerun runs nothing and still reports the measures.
    let rerun = project.report("run");
    for n in rerun["nodes"].as_array().unwrap() {
        assert_eq!(n["status"], "hit", "{} ran again", n["id"]);
    }
    assert_eq!(node(&rerun, "eval[preset=IQ3_S]")["evaluation"], node(&report, "eval[preset=IQ3_S]")["evaluation"]);

    // A new rung: the base's logits come from the cache, only it is evaluated.
    let recipe = std::fs::read_to_string(project.path("quality.toml")).unwrap();
    std::fs::write(project.path("quality.toml"), recipe.replace(r#""IQ3_S"]"#, r#""IQ3_S", "Q8_0"]"#)).unwrap();
    let grown = project.report("run");
    assert_eq!(status(&grown, "eval.base[base]"), "hit");
    assert_eq!(status(&grown, "eval[preset=Q8_0]"), "ran");
    assert_eq!(status(&grown, "eval[preset=Q4_K_M]"), "hit");
}

#[test]
fn the_quality_chart_is_drawn_in_a_real_browser() {
    let _alone = tools_alone();
    let (Some(bin), Some(chromium)) = (reference_bin(), common::chromium()) else { return };
    let project = Project::evaluating(&bin, r#"["Q8_0", "Q4_K_M", "IQ3_S"]"#);
    let run = project.quantforge("run", &["--json"]);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stdout));
    std::fs::write(project.path("run.json"), &run.stdout).unwrap();
    let plan = common::quantforge_with(&[&"--json", &"plan-quant", &common::tiny_model(), &"--target-bpw", &"4"]);
    std::fs::write(project.path("plan.json"), common::stdout_of_success(plan)).unwrap();
    let page = project.path("report.html");
    let (run, plan) = (project.path("run.json"), project.path("plan.json"));
    common::stdout_of_success(common::quantforge_with(&[&"report", &run, &plan, &"-o", &page]));

    let dom = common::browse(&chromium, &page, WINDOW, &["--dump-dom"]);
    let dom = String::from_utf8(dom).unwrap();
    assert!(dom.contains("<h3>quality against size: <code>eval</code></h3>"), "{dom}");
    assert!(dom.contains("mean KL divergence from the base against bits per weight"));
    // Three rungs on each of the two charts, the budget plan across both.
    assert_eq!(dom.matches("<circle").count(), 6, "{dom}");
    assert_eq!(dom.matches(">plan ").count(), 2, "{dom}");
    for preset in ["Q8_0", "Q4_K_M", "IQ3_S"] {
        assert!(dom.contains(&format!("<td>{preset}</td>")), "{preset} missing from the table");
    }

    let shot = project.path("report.png");
    let pixels = common::screenshot(&chromium, &page, WINDOW, &shot);
    // The points and whiskers (#08519c) are on screen.
    let drawn = pixels.iter().filter(|p| **p == (0x08, 0x51, 0x9c)).count();
    assert!(drawn > 6 * 20, "the points are not drawn");
}

/// `recipes/gemma-quality.toml` as shipped, two rungs of it: the matrix,
/// the base's logits and two evaluations, charted in a real browser.
#[test]
fn the_gemma_quality_recipe_measures_its_ladder() {
    let _alone = tools_alone();
    let (Some(_), Some(gemma), Some(chromium)) = (reference_bin(), common::gemma(), common::chromium()) else { return };
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("recipes")).unwrap();
    std::fs::create_dir(dir.path().join("models")).unwrap();
    std::os::unix::fs::symlink(&gemma, dir.path().join("models").join(gemma.file_name().unwrap())).unwrap();
    let recipe = dir.path().join("recipes/gemma-quality.toml");
    std::fs::copy(common::repo().join("recipes/gemma-quality.toml"), &recipe).unwrap();
    let page = dir.path().join("quality.html");
    let cache = dir.path().join("cache");
    let rungs = ["quality[preset=Q4_K_M]", "quality[preset=IQ3_S]"];
    let out = common::quantforge_with(&[
        &"run",
        &recipe,
        &rungs[0],
        &rungs[1],
        &"--cache-dir",
        &cache,
        &"--report",
        &page,
        &"--json",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(status(&report, "quality.base[f16]"), "ran");
    let [q4, iq3] = rungs.map(|id| node(&report, id)["evaluation"].clone());
    // Fewer bits per weight, further from the F16 model.
    assert!(iq3["bits_per_weight"].as_f64() < q4["bits_per_weight"].as_f64(), "{q4} {iq3}");
    assert!(iq3["kld_mean"].as_f64() > q4["kld_mean"].as_f64(), "{q4} {iq3}");
    let html = std::fs::read_to_string(&page).unwrap();
    assert_eq!(html.matches("<circle").count(), 4, "two rungs on each of two charts");
    let dom = String::from_utf8(common::browse(&chromium, &page, WINDOW, &["--dump-dom"])).unwrap();
    for preset in ["Q4_K_M", "IQ3_S"] {
        assert!(dom.contains(&format!("<td>{preset}</td>")), "{preset} missing from the table");
    }
}
