//! The HTML report (`run --report`, `quantforge report`): one self-contained
//! page, rendered by a real browser — headless Chromium from Debian's
//! packages — whose DOM holds every node and whose screenshot is not blank.

use crate::common;

use common::{quantforge_with, quickstart_project, stdout_of_success, tiny_model};

/// The browser's window: the page's DAG, table and three charts.
const WINDOW: &str = "1400,1800";

const NODES: [&str; 10] = [
    "tiny",
    "q[preset=Q8_0]",
    "q[preset=Q6_K]",
    "q[preset=Q4_K_M]",
    "named[preset=Q8_0]",
    "named[preset=Q6_K]",
    "named[preset=Q4_K_M]",
    "publish[preset=Q8_0]",
    "publish[preset=Q6_K]",
    "publish[preset=Q4_K_M]",
];

#[test]
fn a_run_report_is_one_self_contained_page() {
    let (project, recipe) = quickstart_project();
    let page = project.path().join("run.html");
    stdout_of_success(quantforge_with(&[&"run", &recipe, &"--report", &page]));
    let html = std::fs::read_to_string(&page).unwrap();
    for id in NODES {
        assert!(html.contains(&format!("data-id=\"{id}\" data-status=\"ran\"")), "{id} is not drawn as ran");
    }
    assert!(html.contains("data-id=\"tiny\" data-status=\"input\""));
    for export in ["tiny-llama-Q8_0.gguf", "tiny-llama-Q6_K.gguf", "tiny-llama-Q4_K_M.gguf"] {
        assert!(html.contains(&format!("recipes/out/{export}</code></h3>")), "{export}");
    }
    // Nothing fetched: no script, no stylesheet or image from elsewhere.
    for outside in ["<script", "<link", "src=", "href=", "@import", "url(http"] {
        assert!(!html.contains(outside), "the page has {outside}");
    }
    // A second run: every node a hit, each export still charted from its file.
    stdout_of_success(quantforge_with(&[&"run", &recipe, &"--report", &page]));
    let html = std::fs::read_to_string(&page).unwrap();
    assert_eq!(html.matches("data-status=\"hit\"").count(), NODES.len());
    assert_eq!(
        html.matches("<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\"").count(),
        3,
        "one chart per export"
    );
    // Bits per weight by layer, weighted by bytes: one bar per layer (two
    // blocks and the rest), not a 32-bit bar per norm.
    let bars = html.matches("<title>blk.").count() + html.matches("<title>other tensors ").count();
    assert_eq!(bars, 3 * 3, "three bars per export: {html}");
    assert!(!html.contains("<title>blk.0.attn_norm.weight"), "a bar per tensor");
    // A hit's size is its cached result's, not 0 B.
    let doc = stdout_of_success(quantforge_with(&[&"run", &recipe, &"--json"]));
    let report: serde_json::Value = serde_json::from_str(&doc).unwrap();
    for node in report["nodes"].as_array().unwrap() {
        assert_eq!(node["status"], "hit", "{node}");
        assert!(node["bytes_out"].as_u64().unwrap() > 0, "{node}");
    }
    // Every node that ran says why, --force too.
    stdout_of_success(quantforge_with(&[&"run", &recipe, &"--force", &"--report", &page]));
    let html = std::fs::read_to_string(&page).unwrap();
    // Once in the table's reason column, once in the DAG's tooltip.
    assert_eq!(html.matches("--force: nothing is taken from the cache").count(), 2 * NODES.len(), "{html}");
}

#[test]
fn chromium_renders_every_section() {
    let Some(chromium) = common::chromium() else { return };
    let (project, recipe) = quickstart_project();
    let dir = project.path();
    let export = dir.join("recipes/out/tiny-llama-Q4_K_M.gguf");
    let run = stdout_of_success(quantforge_with(&[&"--json", &"run", &recipe]));
    std::fs::write(dir.join("run.json"), run).unwrap();
    let plan = stdout_of_success(quantforge_with(&[&"--json", &"plan-quant", &tiny_model(), &"--target-bpw", &"5"]));
    std::fs::write(dir.join("plan.json"), plan).unwrap();
    let diff = stdout_of_success(quantforge_with(&[&"--json", &"diff", &tiny_model(), &export]));
    std::fs::write(dir.join("diff.json"), diff).unwrap();
    let page = dir.join("report.html");
    let (run, plan, diff) = (dir.join("run.json"), dir.join("plan.json"), dir.join("diff.json"));
    stdout_of_success(quantforge_with(&[&"report", &run, &plan, &diff, &"-o", &page]));

    // The DOM as Chromium built it.
    let dom = String::from_utf8(common::browse(&chromium, &page, WINDOW, &["--dump-dom"])).unwrap();
    assert_eq!(dom.matches("<g class=\"node ran\"").count(), NODES.len(), "{dom}");
    for id in NODES {
        assert!(dom.contains(&format!("data-id=\"{id}\"")), "{id} missing from the DOM");
    }
    for heading in ["<h2>run of <code>quickstart</code></h2>", "<h2>size plan <code>", "<h2>diff <code>"] {
        assert!(dom.contains(heading), "{heading} missing from the DOM");
    }
    assert!(dom.contains("predicted weighted squared error</text>") && dom.contains("RMSE per tensor"));

    // What it drew.
    let shot = dir.join("report.png");
    let pixels = common::screenshot(&chromium, &page, WINDOW, &shot);
    let drawn = pixels.iter().filter(|p| **p != (255, 255, 255)).count();
    let total = pixels.len();
    assert!(drawn * 50 > total, "only {drawn} of {total} pixels are not white");
    // The boxes of nodes that ran (#c6dbef) are on screen.
    let ran = pixels.iter().filter(|p| **p == (0xc6, 0xdb, 0xef)).count();
    assert!(ran > 10 * 200, "{ran} pixels of ran boxes");
}

#[test]
fn a_document_of_another_kind_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let doc = dir.path().join("inspect.json");
    std::fs::write(&doc, stdout_of_success(quantforge_with(&[&"--json", &"inspect", &tiny_model()]))).unwrap();
    let out = quantforge_with(&[&"report", &doc, &"-o", &dir.path().join("r.html")]);
    assert_eq!(out.status.code(), Some(1));
    let expected = format!("error: {}: not a run, plan, plan-quant or diff document (`--json`)\n", doc.display());
    assert_eq!(String::from_utf8_lossy(&out.stderr), expected);
    assert!(!dir.path().join("r.html").exists());
}
