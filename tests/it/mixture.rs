//! The mixture presets against llama-quantize itself: for every golden in
//! `tests/data/mixture/` (written by `tests/mixture/dry_run.py` from
//! `llama-quantize --dry-run`), every run's options on that fixture must give
//! llama-quantize's type, fallback and imatrix verdict for every tensor.
//!
//! The goldens carry the fixtures' metadata and tensor lists, so this test
//! needs neither Python nor llama.cpp.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::PathBuf;

use quantforge::model::{Array, Metadata, TensorInfo, Value};
use quantforge::quant::mixture::{MixtureOptions, TensorChoice, TensorTypeOverride, choose_types};
use quantforge::types::{FileType, GgmlType};
use serde_json::Value as Json;

/// Every preset the goldens must cover, on every fixture.
const IN_SCOPE: &str = "Q2_K Q2_K_S Q3_K_S Q3_K_M Q3_K_L Q4_K_S Q4_K_M Q5_K_S Q5_K_M Q6_K Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 \
                        IQ4_NL IQ4_XS TQ1_0 TQ2_0 MXFP4_MOE F16 BF16 F32";

/// Fixtures the goldens must include.
const FIXTURES: &[&str] = &[
    "tiny-llama",
    "llama3-8b",
    "llama-70b",
    "gemma3-270m",
    "mixtral-8x7b",
    "gpt-oss-20b",
    "falcon-7b",
    "bert-base",
    "oddities",
];

/// At most this many mismatches are printed in full.
const SHOWN: usize = 40;

struct Golden {
    fixture: String,
    metadata: Metadata,
    tensors: Vec<TensorInfo>,
    legend: HashMap<char, GgmlType>,
    runs: Vec<Json>,
}

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/mixture")
}

fn ggml_type(name: &str) -> GgmlType {
    GgmlType::from_name(name).unwrap_or_else(|| panic!("unknown ggml type {name}"))
}

fn value(ty: &str, v: &Json) -> Value {
    let int = || v.as_i64().unwrap_or_else(|| panic!("{v} is not an integer"));
    let uint = || v.as_u64().unwrap_or_else(|| panic!("{v} is not an unsigned integer"));
    match ty {
        "u8" => Value::U8(uint().try_into().unwrap()),
        "i8" => Value::I8(int().try_into().unwrap()),
        "u16" => Value::U16(uint().try_into().unwrap()),
        "i16" => Value::I16(int().try_into().unwrap()),
        "u32" => Value::U32(uint().try_into().unwrap()),
        "i32" => Value::I32(int().try_into().unwrap()),
        "u64" => Value::U64(uint()),
        "i64" => Value::I64(int()),
        "f32" => Value::F32(v.as_f64().unwrap() as f32),
        "f64" => Value::F64(v.as_f64().unwrap()),
        "bool" => Value::Bool(v.as_bool().unwrap()),
        "str" => Value::string(v.as_str().unwrap()),
        _ => panic!("unexpected value type {ty}"),
    }
}

fn array(ty: &str, values: &[Json]) -> Array {
    let all = |ty| values.iter().map(move |v| value(ty, v));
    match ty {
        "u32" => Array::U32(all("u32").map(|v| if let Value::U32(x) = v { x } else { unreachable!() }).collect()),
        "i32" => Array::I32(all("i32").map(|v| if let Value::I32(x) = v { x } else { unreachable!() }).collect()),
        _ => panic!("unexpected array element type {ty}"),
    }
}

fn load(path: &PathBuf) -> Golden {
    let json: Json = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut metadata = Metadata::new();
    for entry in json["metadata"].as_array().unwrap() {
        let entry = entry.as_array().unwrap();
        let key = entry[0].as_str().unwrap();
        let v = match entry[1].as_str().unwrap() {
            "arr" => Value::Array(array(entry[2].as_str().unwrap(), entry[3].as_array().unwrap())),
            ty => value(ty, &entry[2]),
        };
        metadata.set(key, v);
    }
    // The fixtures' data lies in list order; only the order matters here
    // (for --keep-split), so the offsets are the sizes laid end to end.
    let mut offset = 0;
    let mut tensors = Vec::new();
    for t in json["tensors"].as_array().unwrap() {
        let name = t[0].as_str().unwrap().to_owned();
        let dims: Vec<u64> = t[1].as_array().unwrap().iter().map(|d| d.as_u64().unwrap()).collect();
        let ggml_type = ggml_type(t[2].as_str().unwrap());
        let tensor = TensorInfo { file_offset: offset, ..TensorInfo::new(name, dims, ggml_type) };
        offset += tensor.stored_len;
        tensors.push(tensor);
    }
    let legend = json["legend"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(code, name)| (code.chars().next().unwrap(), ggml_type(name.as_str().unwrap())))
        .collect();
    Golden {
        fixture: json["fixture"].as_str().unwrap().to_owned(),
        metadata,
        tensors,
        legend,
        runs: json["runs"].as_array().unwrap().clone(),
    }
}

fn options(json: &Json) -> MixtureOptions {
    let ftype = json["ftype"].as_str().unwrap();
    let mut options = MixtureOptions::new(FileType::from_name(ftype).unwrap_or_else(|| panic!("file type {ftype}")));
    let flag = |key: &str| json.get(key).is_some_and(|v| v.as_bool().unwrap());
    options.pure = flag("pure");
    options.leave_output_tensor = flag("leave_output_tensor");
    options.has_imatrix = flag("has_imatrix");
    options.keep_split = flag("keep_split");
    options.output_tensor_type = json.get("output_tensor_type").map(|v| ggml_type(v.as_str().unwrap()));
    options.token_embedding_type = json.get("token_embedding_type").map(|v| ggml_type(v.as_str().unwrap()));
    if let Some(specs) = json.get("tensor_types") {
        options.tensor_types =
            specs.as_array().unwrap().iter().map(|s| TensorTypeOverride::parse(s.as_str().unwrap()).unwrap()).collect();
    }
    options
}

fn describe(ty: GgmlType, from: Option<GgmlType>) -> String {
    match from {
        Some(from) => format!("{ty} (fallback from {from})"),
        None => ty.to_string(),
    }
}

/// Compares one run; returns the mismatches as lines.
fn check_run(g: &Golden, run: &Json) -> Vec<String> {
    let opts = options(&run["options"]);
    let label = format!("{} {}", g.fixture, run["options"]);
    let ours = choose_types(&g.metadata, &g.tensors, &opts);
    if let Some(theirs) = run.get("error") {
        let theirs = theirs.as_str().unwrap();
        return match ours {
            Err(e) if e.to_string().to_lowercase().contains(&theirs.to_lowercase()) => vec![],
            Err(e) => vec![format!("{label}: ours failed with `{e}`, llama-quantize with `{theirs}`")],
            Ok(_) => vec![format!("{label}: ours succeeded, llama-quantize failed with `{theirs}`")],
        };
    }
    let ours: Vec<TensorChoice> = match ours {
        Ok(ours) => ours,
        Err(e) => return vec![format!("{label}: ours failed with `{e}`, llama-quantize succeeded")],
    };
    assert_eq!(ours.len(), g.tensors.len());
    let types: Vec<char> = run["types"].as_str().unwrap().chars().collect();
    let from: Vec<char> = match run.get("fallback_from") {
        Some(f) => f.as_str().unwrap().chars().collect(),
        None => vec!['.'; g.tensors.len()],
    };
    assert_eq!((types.len(), from.len()), (g.tensors.len(), g.tensors.len()), "{label}: golden is malformed");
    let code = |c: char| if c == '.' { None } else { Some(g.legend[&c]) };

    let mut mismatches = Vec::new();
    for (i, (t, choice)) in g.tensors.iter().zip(&ours).enumerate() {
        let their_ty = code(types[i]).unwrap_or(t.ggml_type);
        let their_from = code(from[i]);
        if (choice.ty, choice.fallback_from) != (their_ty, their_from) {
            mismatches.push(format!(
                "{label} {}: ours {}, llama-quantize {}",
                t.name,
                describe(choice.ty, choice.fallback_from),
                describe(their_ty, their_from)
            ));
        }
        if choice.quantize != (their_ty != t.ggml_type) {
            mismatches.push(format!("{label} {}: ours says quantize = {}", t.name, choice.quantize));
        }
    }
    let n_fallback = ours.iter().filter(|c| c.fallback_from.is_some()).count();
    if Some(n_fallback as u64) != run["n_fallback"].as_u64() {
        mismatches.push(format!("{label}: {n_fallback} fallbacks, llama-quantize counted {}", run["n_fallback"]));
    }
    // A dry run warns when the real run would need an imatrix it was not given.
    let needs_imatrix = !opts.has_imatrix && ours.iter().any(|c| c.requires_imatrix);
    if Some(needs_imatrix) != run["needs_imatrix"].as_bool() {
        mismatches.push(format!("{label}: needs an imatrix: ours {needs_imatrix}, llama-quantize {}", !needs_imatrix));
    }
    mismatches
}

#[test]
fn choices_match_llama_quantize_dry_run() {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(golden_dir())
        .expect("tests/data/mixture exists")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    paths.sort();
    let goldens: Vec<Golden> = paths.iter().map(load).collect();
    let names: Vec<&str> = goldens.iter().map(|g| g.fixture.as_str()).collect();
    for fixture in FIXTURES {
        assert!(names.contains(fixture), "no golden for fixture {fixture}; run tests/mixture/dry_run.py");
    }

    let mut mismatches = Vec::new();
    let mut n_runs = 0;
    let mut n_decisions = 0;
    for g in &goldens {
        for preset in IN_SCOPE.split_whitespace() {
            let covered =
                g.runs.iter().any(|r| r["options"].as_object().unwrap().len() == 1 && r["options"]["ftype"] == preset);
            assert!(covered, "{}: no plain {preset} run", g.fixture);
        }
        for run in &g.runs {
            mismatches.extend(check_run(g, run));
            n_runs += 1;
            n_decisions += g.tensors.len();
        }
    }
    if !mismatches.is_empty() {
        let mut report = format!("{} mismatches with llama-quantize:\n", mismatches.len());
        for m in mismatches.iter().take(SHOWN) {
            writeln!(report, "  {m}").unwrap();
        }
        if mismatches.len() > SHOWN {
            writeln!(report, "  ... and {} more", mismatches.len() - SHOWN).unwrap();
        }
        panic!("{report}");
    }
    eprintln!("{} fixtures, {n_runs} runs, {n_decisions} tensor decisions agree", goldens.len());
}
