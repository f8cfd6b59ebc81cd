//! Tidy, as rust-analyzer's tidy tests: the house rules ARCHITECTURE.md
//! states, held by `cargo test` — which top-level module may import which,
//! which may touch the file system, stderr or progress bars, that every file
//! says what it owns and is in the code map, that no function runs past
//! 120 lines but a parser's opcode loop, that the docs point nowhere
//! outside the repository, and that CI checks the generated tables.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use regex::Regex;

/// What each top-level module of `src/` may import (`crate::NAME`), lowest
/// layer first. A new edge is a decision: make it here, with its reason in
/// ARCHITECTURE.md's Layers section.
const MAY_IMPORT: &[(&str, &[&str])] = &[
    ("types", &[]),
    ("key", &[]),
    ("text", &[]),
    ("spelling", &[]),
    ("remote_url", &[]),
    ("model", &["types"]),
    ("codecs", &["types"]),
    ("arch", &["model", "text", "types"]),
    ("params", &["spelling", "text"]),
    ("files", &["spelling", "text"]),
    ("formats", &["files", "model", "text", "types"]),
    ("synth", &["formats", "model", "types"]),
    ("artifact", &["codecs", "formats", "key", "model", "types"]),
    ("store", &["artifact", "files", "formats", "key", "remote_url"]),
    ("backend", &["codecs", "formats", "key", "store", "types"]),
    ("tools", &["files", "key", "store", "text"]),
    ("quant", &["arch", "artifact", "backend", "codecs", "formats", "model", "spelling", "text", "types"]),
    ("convert", &["arch", "artifact", "backend", "codecs", "files", "formats", "model", "quant", "text", "types"]),
    (
        "ops",
        &[
            "arch", "artifact", "backend", "codecs", "convert", "files", "formats", "key", "model", "params", "quant",
            "text", "tools", "types",
        ],
    ),
    (
        "examine",
        &["arch", "backend", "codecs", "convert", "files", "formats", "model", "ops", "quant", "text", "types"],
    ),
    ("recipe", &["backend", "convert", "files", "formats", "key", "model", "ops", "params", "remote_url"]),
    (
        "exec",
        &[
            "artifact", "backend", "codecs", "convert", "files", "formats", "key", "model", "ops", "quant", "recipe",
            "store", "text", "tools", "types",
        ],
    ),
    ("slurm", &["exec", "files", "store"]),
    (
        "cli",
        &[
            "arch", "backend", "codecs", "convert", "examine", "exec", "files", "formats", "key", "model", "ops",
            "params", "quant", "recipe", "slurm", "spelling", "store", "text", "tools", "types",
        ],
    ),
];

/// Where `std::fs` may be used (a path under `src/`, or a prefix of one):
/// the containers, the store, the engine and the command line; a
/// checkpoint's files outside a run (a run gives a conversion its pinned
/// files instead); and `verify`, which checks a file against its derivation.
const MAY_TOUCH_FILES: &[&str] = &[
    "backend/cuda/libraries.rs",
    "cli/",
    "convert/files.rs",
    "exec/",
    "files",
    "formats/",
    "examine/verify.rs",
    "slurm/",
    "store/",
    "tools.rs",
];

/// Where stderr is written: the command line, and the progress bars of
/// the engine and the Slurm executor (indicatif's draw target).
const MAY_WRITE_STDERR: &[&str] = &["cli/", "exec/mod.rs", "slurm/queue.rs"];

/// Where progress bars are drawn.
const MAY_DRAW_PROGRESS: &[&str] = &["exec/mod.rs", "exec/export.rs", "exec/tool_steps.rs", "slurm/queue.rs"];

/// The most lines a function may take; past it, cut it along its concepts.
const MAX_FUNCTION_LINES: usize = 120;

/// The functions (file, name) that may run longer: a parser's opcode loop
/// reads best whole.
const MAY_RUN_LONG: &[(&str, &str)] = &[("formats/torch/pickle.rs", "run")];

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                // Fixtures and generated data are not the code.
                if path.file_name() != Some("data".as_ref()) {
                    stack.push(path);
                }
            } else if path.extension() == Some("rs".as_ref()) {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// `src/`'s files, relative to it, each with its code (comments stripped:
/// what a file says in a comment is not a use), read once for every test.
fn sources() -> &'static [(String, String)] {
    static SOURCES: std::sync::OnceLock<Vec<(String, String)>> = std::sync::OnceLock::new();
    SOURCES.get_or_init(|| {
        let src = common::repo().join("src");
        let blocks = Regex::new(r"(?s)/\*.*?\*/").unwrap();
        let lines = Regex::new(r"//[^\n]*").unwrap();
        rust_files(&src)
            .into_iter()
            .map(|path| {
                let relative = path.strip_prefix(&src).unwrap().to_string_lossy().into_owned();
                let text = std::fs::read_to_string(&path).unwrap();
                (relative, lines.replace_all(&blocks.replace_all(&text, ""), "").into_owned())
            })
            .collect()
    })
}

/// The top-level module a file of `src/` belongs to (none for the roots).
fn module_of(relative: &str) -> Option<&str> {
    let first = relative.split('/').next()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    (!matches!(name, "main" | "lib")).then_some(name)
}

/// The top-level modules `code` names through `crate::`, groups expanded.
fn imported(code: &str) -> BTreeSet<String> {
    let path = Regex::new(r"\bcrate::(\{|[A-Za-z_][A-Za-z0-9_]*)").unwrap();
    let mut found = BTreeSet::new();
    for m in path.captures_iter(code) {
        let head = m.get(1).unwrap();
        if head.as_str() != "{" {
            found.insert(head.as_str().to_owned());
            continue;
        }
        // The names at the group's own depth: `crate::{a, b::{c, d}}` names a and b.
        let (mut depth, mut current, mut at_start) = (1, String::new(), true);
        for c in code[head.end()..].chars() {
            match c {
                '{' => depth += 1,
                '}' if depth == 1 => break,
                '}' => depth -= 1,
                ',' if depth == 1 => {
                    if !current.is_empty() {
                        found.insert(std::mem::take(&mut current));
                    }
                    at_start = true;
                    continue;
                }
                _ => {}
            }
            if depth == 1 && at_start {
                if c.is_alphanumeric() || c == '_' {
                    current.push(c);
                } else if !current.is_empty() {
                    found.insert(std::mem::take(&mut current));
                    at_start = false;
                }
            }
        }
        if at_start && !current.is_empty() {
            found.insert(current);
        }
    }
    found
}

#[test]
fn modules_import_only_what_they_may() {
    let modules: BTreeSet<&str> = MAY_IMPORT.iter().map(|(m, _)| *m).collect();
    let mut actual: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (relative, code) in sources() {
        let Some(module) = module_of(relative) else { continue };
        assert!(modules.contains(module), "src/{relative}: module `{module}` is not in MAY_IMPORT");
        let edges = actual.entry(module.to_owned()).or_default();
        for target in imported(code) {
            if target != module && modules.contains(target.as_str()) {
                edges.insert(target);
            }
        }
    }
    let mut problems = Vec::new();
    for (module, allowed) in MAY_IMPORT {
        let uses = actual.get(*module).cloned().unwrap_or_default();
        for target in &uses {
            if !allowed.contains(&target.as_str()) {
                problems.push(format!("`{module}` imports `{target}`, which MAY_IMPORT does not allow"));
            }
        }
        for target in *allowed {
            if !uses.contains(*target) {
                problems.push(format!("`{module}` may import `{target}` but does not: take it out of MAY_IMPORT"));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The files of `src/` whose code matches `pattern` but that `allowed`
/// (paths or prefixes) does not name.
fn outside(pattern: &str, allowed: &[&str]) -> Vec<String> {
    let pattern = Regex::new(pattern).unwrap();
    sources()
        .iter()
        .filter(|(relative, code)| pattern.is_match(code) && !allowed.iter().any(|a| relative.starts_with(a)))
        .map(|(relative, _)| relative.clone())
        .collect()
}

#[test]
fn only_these_touch_the_file_system() {
    let offenders = outside(r"\bstd::fs\b|(^|[^A-Za-z_:])fs::", MAY_TOUCH_FILES);
    assert!(offenders.is_empty(), "std::fs outside MAY_TOUCH_FILES: {offenders:?}");
}

#[test]
fn only_these_write_to_stderr() {
    let offenders = outside(r"eprintln!|eprint!|\bstderr\(\)", MAY_WRITE_STDERR);
    assert!(offenders.is_empty(), "stderr written outside MAY_WRITE_STDERR: {offenders:?}");
}

#[test]
fn only_these_draw_progress_bars() {
    let offenders = outside(r"\bindicatif\b", MAY_DRAW_PROGRESS);
    assert!(offenders.is_empty(), "progress bars outside MAY_DRAW_PROGRESS: {offenders:?}");
}

/// Each function with a body in `code`: its name and how many lines it
/// takes, from its `fn` line to the brace that closes it at its indentation.
fn function_lengths(code: &str) -> Vec<(String, usize)> {
    let start = Regex::new(r"^(\s*)(pub(\([a-z]+\))? )?(const )?(async )?(unsafe )?fn ([A-Za-z0-9_]+)").unwrap();
    let lines: Vec<&str> = code.lines().collect();
    let mut lengths = Vec::new();
    for (at, line) in lines.iter().enumerate() {
        let Some(found) = start.captures(line) else { continue };
        let indent = &found[1];
        let rest = &lines[at..];
        let opens_body =
            rest.iter().find(|l| l.contains('{') || l.trim_end().ends_with(';')).is_some_and(|l| l.contains('{'));
        let close = format!("{indent}}}");
        if let Some(end) = rest.iter().position(|l| *l == close).filter(|_| opens_body) {
            lengths.push((found[7].to_owned(), end + 1));
        }
    }
    lengths
}

#[test]
fn no_function_runs_past_the_limit() {
    let long: Vec<String> = sources()
        .iter()
        .flat_map(|(relative, code)| {
            function_lengths(code).into_iter().filter_map(move |(name, lines)| {
                let allowed = MAY_RUN_LONG.contains(&(relative.as_str(), name.as_str()));
                (lines > MAX_FUNCTION_LINES && !allowed).then(|| format!("src/{relative}: fn {name}: {lines} lines"))
            })
        })
        .collect();
    assert!(long.is_empty(), "functions over {MAX_FUNCTION_LINES} lines:\n{}", long.join("\n"));
}

/// The first paragraph of a file's `//!` doc, on one line; `None` when the
/// file does not start with one.
fn what_it_owns(text: &str) -> Option<String> {
    let mut lines = Vec::new();
    for line in text.lines() {
        let Some(doc) = line.strip_prefix("//!") else { break };
        let doc = doc.trim();
        if doc.is_empty() {
            break;
        }
        lines.push(doc);
    }
    (!lines.is_empty()).then(|| lines.join(" "))
}

#[test]
fn every_file_says_what_it_owns() {
    let repo = common::repo();
    let missing: Vec<String> = [repo.join("src"), repo.join("tests")]
        .iter()
        .flat_map(|dir| rust_files(dir))
        .filter(|path| what_it_owns(&std::fs::read_to_string(path).unwrap()).is_none())
        .map(|path| path.strip_prefix(&repo).unwrap().display().to_string())
        .collect();
    assert!(missing.is_empty(), "files that do not start with a `//!` doc: {missing:?}");
}

/// The list of every file under `dir`, each with the first paragraph of its doc.
fn file_index(dir: &str) -> String {
    let repo = common::repo();
    let mut index = String::new();
    for path in rust_files(&repo.join(dir)) {
        let owns = what_it_owns(&std::fs::read_to_string(&path).unwrap()).unwrap_or_default();
        let relative = path.strip_prefix(&repo).unwrap().display().to_string();
        index.push_str(&format!("- `{relative}`: {owns}\n"));
    }
    index
}

/// Replaces what lies between `<!-- NAME -->` and `<!-- end NAME -->` in `text`.
fn with_section(text: &str, name: &str, content: &str) -> String {
    let (open, close) = (format!("<!-- {name} -->\n"), format!("<!-- end {name} -->"));
    let start =
        text.find(&open).unwrap_or_else(|| panic!("ARCHITECTURE.md has no `{}` line", open.trim())) + open.len();
    let end = text.find(&close).unwrap_or_else(|| panic!("ARCHITECTURE.md has no `{close}` line"));
    format!("{}{content}{}", &text[..start], &text[end..])
}

#[test]
fn the_code_map_names_every_file() {
    let path = common::repo().join("ARCHITECTURE.md");
    let text = std::fs::read_to_string(&path).unwrap();
    let updated = with_section(&text, "source files", &file_index("src"));
    let updated = with_section(&updated, "test files", &file_index("tests"));
    if updated != text {
        // As rust-analyzer's sourcegen: the file is made right, and the test fails until it is committed.
        std::fs::write(&path, updated).unwrap();
        panic!(
            "ARCHITECTURE.md's file lists were out of date; they are rewritten from each file's `//!` doc: commit them"
        );
    }
}

#[test]
fn the_docs_point_nowhere_outside_the_repository() {
    let repo = common::repo();
    let outside = Regex::new(r"\.\./shared|\bseeds?[ /]0\d\d\b|\bseed 0\d\d").unwrap();
    let mut files: Vec<PathBuf> = rust_files(&repo.join("src"));
    files.extend(["ARCHITECTURE.md", "README.md"].map(|f| repo.join(f)));
    for dir in ["docs", "docs/dev", "docs/schemas"] {
        for entry in std::fs::read_dir(repo.join(dir)).unwrap() {
            let path = entry.unwrap().path();
            if matches!(path.extension().and_then(|e| e.to_str()), Some("md" | "json")) {
                files.push(path);
            }
        }
    }
    let offenders: Vec<String> = files
        .iter()
        .filter(|path| outside.is_match(&std::fs::read_to_string(path).unwrap()))
        .map(|path| path.strip_prefix(&repo).unwrap().display().to_string())
        .collect();
    assert!(
        offenders.is_empty(),
        "these name a place outside the repository (`../shared`, a seed document): say the requirement instead: \
         {offenders:?}"
    );
}

#[test]
fn ci_checks_the_generated_tables() {
    let ci = std::fs::read_to_string(common::repo().join(".ci/run")).unwrap();
    assert!(
        ci.lines().any(|line| line.trim_start().starts_with("python3 scripts/gen-iq-tables.py --check")),
        ".ci/run does not run `python3 scripts/gen-iq-tables.py --check`"
    );
}

#[test]
fn the_import_reader_expands_groups() {
    let code = "use crate::{a, b::{c, d}, e::f};\nlet x = crate::g::h();";
    let found: Vec<String> = imported(code).into_iter().collect();
    assert_eq!(found, ["a", "b", "e", "g"]);
}
