//! The size-budget planner end to end on the tiny model: the written file
//! is exactly the plan's size and never over the budget, and at the size of
//! llama-quantize's Q4_K_M its weighted error (as `diff` measures it) is
//! lower than Q4_K_M's.

use crate::common;

use std::ffi::OsStr;
use std::path::Path;

use serde_json::Value as Json;

fn json(args: &[&str]) -> Json {
    serde_json::from_str(&common::quantforge_ok(args)).unwrap()
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn weighted_error(a: &Path, b: &Path) -> f64 {
    json(&["diff", "--json", path(a), path(b)])["total"]["weighted_sq_error"].as_f64().unwrap()
}

#[test]
fn plan_fits_the_budget_and_beats_q4_k_m_at_its_size() {
    let dir = tempfile::tempdir().unwrap();
    let tiny = common::tiny_model();
    let q4km = dir.path().join("q4km.gguf");
    common::quantforge_ok(&["quantize", path(&tiny), path(&q4km), "Q4_K_M"]);
    let budget = std::fs::metadata(&q4km).unwrap().len();

    let plan = json(&["plan-quant", path(&tiny), "--target-size", &budget.to_string(), "--json"]);
    let planned_size = plan["file_size"].as_u64().unwrap();
    assert!(planned_size <= budget, "{planned_size} > {budget}");
    let tensors = plan["tensors"].as_array().unwrap();
    assert!(tensors.iter().any(|t| !t["candidates"].as_array().unwrap().is_empty()));
    assert!(tensors.iter().all(|t| t["role"].is_string()));

    let planned = dir.path().join("planned.gguf");
    common::quantforge_ok(&["quantize", "--target-size", &budget.to_string(), path(&tiny), path(&planned)]);
    assert_eq!(std::fs::metadata(&planned).unwrap().len(), planned_size);

    let (ours, theirs) = (weighted_error(&tiny, &planned), weighted_error(&tiny, &q4km));
    assert!(ours < theirs, "planned {ours} vs Q4_K_M {theirs}");
    // The prediction comes from sampled rows; on this model every row is sampled.
    let predicted = plan["predicted_error"].as_f64().unwrap();
    assert!((predicted - ours).abs() <= 1e-6 * ours, "predicted {predicted}, measured {ours}");
}

#[test]
fn bits_per_weight_targets_and_reports() {
    let dir = tempfile::tempdir().unwrap();
    let tiny = common::tiny_model();
    let svg = dir.path().join("plan.svg");
    let text = common::quantforge_ok(&["plan-quant", path(&tiny), "--target-bpw", "5", "--svg", path(&svg)]);
    assert!(text.contains("blk.0.attn_q.weight") && text.contains("predicted weighted squared error"), "{text}");
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>") && svg.contains("<rect"), "{svg}");
    let plan = json(&["plan-quant", path(&tiny), "--target-bpw", "5", "--json"]);
    let elements: u64 = plan["tensors"].as_array().unwrap().iter().map(|t| t["elements"].as_u64().unwrap()).sum();
    let tensor_bytes: u64 = plan["tensors"].as_array().unwrap().iter().map(|t| t["bytes"].as_u64().unwrap()).sum();
    let bpw = tensor_bytes as f64 * 8.0 / elements as f64;
    assert!(bpw <= 5.0 && bpw > 4.5, "{bpw} bits per weight");
}

#[test]
fn budgets_below_the_smallest_plan_are_refused() {
    let tiny = common::tiny_model();
    let output = common::quantforge(&[
        OsStr::new("plan-quant"),
        tiny.as_os_str(),
        OsStr::new("--target-size"),
        OsStr::new("100KB"),
    ]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("below the smallest plan"), "{stderr}");
}

#[test]
fn diff_weighted_error_without_an_imatrix_is_the_squared_error() {
    let dir = tempfile::tempdir().unwrap();
    let tiny = common::tiny_model();
    let q8 = dir.path().join("q8.gguf");
    common::quantforge_ok(&["quantize", path(&tiny), path(&q8), "Q8_0"]);
    let report = json(&["diff", "--json", path(&tiny), path(&q8)]);
    for t in report["tensors"].as_array().unwrap() {
        let (n, rmse) = (t["elements"].as_f64().unwrap(), t["rmse"].as_f64().unwrap());
        let weighted = t["weighted_sq_error"].as_f64().unwrap();
        assert!((weighted - n * rmse * rmse).abs() <= 1e-9 * weighted.max(1e-30), "{t}");
    }
}

#[test]
fn recipe_budget_writes_what_the_one_shot_plan_writes() {
    let dir = tempfile::tempdir().unwrap();
    let tiny = common::tiny_model();
    let budget = "880KiB";
    let one_shot = dir.path().join("one-shot.gguf");
    common::quantforge_ok(&["quantize", "--target-size", budget, path(&tiny), path(&one_shot)]);
    let recipe = dir.path().join("budget.toml");
    std::fs::write(
        &recipe,
        format!(
            "[recipe]\nname = \"budget\"\n\n[input.tiny]\npath = {:?}\n\n[step.fit]\nop = \"quantize\"\nfrom = \"tiny\"\n\
             budget = \"{budget}\"\n\n[step.out]\nop = \"export\"\nfrom = \"fit\"\npath = \"fit.gguf\"\n",
            path(&tiny)
        ),
    )
    .unwrap();
    let cache = dir.path().join("cache");
    let first = json(&["run", path(&recipe), "--json", "--cache-dir", path(&cache)]);
    let written = dir.path().join("fit.gguf");
    assert_eq!(std::fs::read(&written).unwrap(), std::fs::read(&one_shot).unwrap());
    assert!(std::fs::metadata(&written).unwrap().len() <= 880 * 1024);
    assert!(first["totals"]["tensors_encoded"].as_u64().unwrap() > 0, "{first}");
    let second = json(&["run", path(&recipe), "--json", "--cache-dir", path(&cache)]);
    assert_eq!(second["totals"]["tensors_encoded"].as_u64(), Some(0), "{second}");
}
