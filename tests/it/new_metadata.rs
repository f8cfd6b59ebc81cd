//! Metadata edits against gguf-py (the pinned tree's, run unmodified):
//! every option of `gguf_new_metadata.py` gives its bytes under `edit` and
//! in a recipe's `set-metadata`, `--set` writes arrays of every type as
//! GGUFWriter writes them, and what the script would get wrong or drop is
//! refused by name, leaving no output.

use crate::common;

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The script and a Python that runs it, or `None` (with a message).
fn new_metadata_script() -> Option<(String, PathBuf)> {
    let script = common::reference("gguf-py/gguf/scripts/gguf_new_metadata.py")?;
    Some((common::python_with("numpy, tqdm", "numpy tqdm")?, script))
}

fn script_edit(python: &str, script: &Path, input: &Path, output: &Path, args: &[OsString]) {
    let out = Command::new(python).arg(script).arg(input).arg(output).arg("--force").args(args).output().unwrap();
    assert!(out.status.success(), "gguf_new_metadata.py {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

fn our_edit(input: &Path, output: &Path, args: &[OsString]) -> std::process::Output {
    let mut all: Vec<&dyn AsRef<OsStr>> = vec![&"edit", &input, &output];
    all.extend(args.iter().map(|a| a as &dyn AsRef<OsStr>));
    common::quantforge_with(&all)
}

fn args(list: &[&str]) -> Vec<OsString> {
    list.iter().map(OsString::from).collect()
}

fn assert_same_file(ours: &Path, theirs: &Path, what: &str) {
    assert!(std::fs::read(ours).unwrap() == std::fs::read(theirs).unwrap(), "{what}: the files differ");
}

/// The tiny model with a default and a named template, written by the script.
fn templated(python: &str, script: &Path, dir: &Path) -> PathBuf {
    let path = dir.join("templated.gguf");
    let templates = r#"[{"name": "default", "template": "{{ d }}"}, {"name": "rag", "template": "{{ r }}"}]"#;
    script_edit(python, script, &common::tiny_model(), &path, &args(&["--chat-template", templates]));
    path
}

#[test]
fn every_gguf_new_metadata_option_writes_its_bytes() {
    let Some((python, script)) = new_metadata_script() else { return };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let tiny = common::tiny_model();
    let templated = templated(&python, &script, d);
    std::fs::write(
        d.join("tokenizer_config.json"),
        r#"{"chat_template": "{% for m in messages %}\n{{ m }}\u00e9{% endfor %}"}"#,
    )
    .unwrap();
    std::fs::write(d.join("template.jinja"), "{{ a }}\r\n{{ b }}\r").unwrap();
    let config = d.join("tokenizer_config.json").into_os_string();
    let jinja = d.join("template.jinja").into_os_string();
    let named = r#"[{"name": "tool use", "template": "{{ t }}"}, {"name": "default", "template": "{{ d2 }}"}]"#;
    let cases: Vec<(&str, &Path, Vec<OsString>)> = vec![
        ("name", &tiny, args(&["--general-name", "renamed model"])),
        ("description", &tiny, args(&["--general-description", "A model\nfor tests"])),
        ("pre-tokenizer", &tiny, args(&["--pre-tokenizer", "llama-bpe"])),
        ("remove", &tiny, args(&["--remove-metadata", "llama.context_length", "--remove-metadata", "general.name"])),
        ("template", &templated, args(&["--chat-template", "{{ messages }}"])),
        ("templates", &templated, args(&["--chat-template", named])),
        ("template config", &templated, vec!["--chat-template-config".into(), config]),
        ("template file", &tiny, vec!["--chat-template-file".into(), jinja]),
        (
            "special tokens",
            &tiny,
            args(&[
                "--special-token",
                "eos",
                "<0x01>",
                "--special-token",
                "fim_pre",
                "<0x02>",
                "--special-token-by-id",
                "bos",
                "7",
                "--special-token-by-id",
                "padding",
                "0",
                "--special-token-by-id",
                "eos",
                "9",
            ]),
        ),
        (
            "together",
            &templated,
            args(&[
                "--general-name",
                "n",
                "--general-description",
                "d",
                "--chat-template",
                "t",
                "--pre-tokenizer",
                "p",
                "--special-token",
                "eot",
                "<0x03>",
                "--remove-metadata",
                "general.file_type",
            ]),
        ),
    ];
    for (what, input, options) in cases {
        let (theirs, ours) = (d.join("theirs.gguf"), d.join("ours.gguf"));
        script_edit(&python, &script, input, &theirs, &options);
        common::stdout_of_success(our_edit(input, &ours, &options));
        assert_same_file(&ours, &theirs, what);
    }
}

#[test]
fn a_recipe_makes_the_same_edits() {
    let Some((python, script)) = new_metadata_script() else { return };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let templated = templated(&python, &script, d);
    let theirs = d.join("theirs.gguf");
    let options = args(&[
        "--general-name",
        "n",
        "--chat-template",
        r#"[{"name": "tool use", "template": "{{ t }}"}]"#,
        "--special-token",
        "eot",
        "<0x03>",
        "--special-token-by-id",
        "mask",
        "5",
        "--remove-metadata",
        "general.file_type",
    ]);
    script_edit(&python, &script, &templated, &theirs, &options);
    let recipe = d.join("edit.toml");
    std::fs::write(
        &recipe,
        format!(
            r#"
[input.model]
path = "{}"

[step.trimmed]
op = "delete-metadata"
from = "model"
keys = ["general.file_type"]

[step.named]
op = "set-metadata"
from = "trimmed"
chat_templates = [{{ name = "tool use", template = "{{{{ t }}}}" }}]
set = ["general.name=str:n"]
special_tokens = {{ eot = "<0x03>" }}
special_token_ids = {{ mask = 5 }}

[step.out]
op = "export"
from = "named"
path = "ours.gguf"
"#,
            templated.display()
        ),
    )
    .unwrap();
    let cache = d.join("cache");
    common::stdout_of_success(common::quantforge_with(&[&"run", &recipe, &"--cache-dir", &cache]));
    assert_same_file(&d.join("ours.gguf"), &theirs, "recipe");
}

#[test]
fn set_writes_arrays_of_every_type_as_gguf_py_does() {
    let Some(python) = common::python_with("numpy", "numpy") else { return };
    let gguf_py = common::reference("gguf-py").expect("the tree holds gguf-py");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let out = Command::new(&python)
        .arg(common::repo().join("tests/gguf_py/metadata_fixtures.py"))
        .arg(gguf_py)
        .arg(d)
        .output()
        .unwrap();
    assert!(out.status.success(), "metadata_fixtures.py: {}", String::from_utf8_lossy(&out.stderr));
    let mut options = Vec::new();
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        options.extend(["--set".into(), OsString::from(line)]);
    }
    let ours = d.join("ours.gguf");
    common::stdout_of_success(our_edit(&d.join("base.gguf"), &ours, &options));
    assert_same_file(&ours, &d.join("arrays.gguf"), "arrays");
}

/// Each refusal names what is wrong and leaves no output file.
#[test]
fn edits_the_script_would_drop_or_get_wrong_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let tiny = common::tiny_model();
    std::fs::write(d.join("no-template.json"), r#"{"bos_token": "<s>"}"#).unwrap();
    let no_template = d.join("no-template.json").into_os_string();
    let cases: Vec<(Vec<OsString>, &str)> = vec![
        (args(&["--special-token", "eos", "<nope>"]), "no token is `<nope>` in the vocabulary"),
        (args(&["--special-token-by-id", "eos", "512"]), "id 512: the vocabulary has 512 tokens"),
        (args(&["--special-token", "beginning", "<s>"]), "unknown special token `beginning`"),
        (args(&["--special-token-by-id", "eos", "0x1"]), "`0x1` is not a token id"),
        (vec!["--chat-template-config".into(), no_template], "`chat_template` is missing"),
        (args(&["--chat-template", ""]), "--chat-template is empty"),
        (args(&["--chat-template", "[1]"]), "--chat-template lists 1, not a {name, template} table"),
        (args(&["--chat-template", "a", "--chat-template-file", "b"]), "cannot be used with"),
        (args(&["--set", "llama.vocab_size=arr[u32]:1,-2"]), "cannot set `llama.vocab_size`: element 1: `-2`"),
        (args(&["--set", "general.name=u32:1"]), "cannot set `general.name` as u32: it is str in the input"),
        (args(&["--remove-metadata", "general.url"]), "cannot delete `general.url`: no such metadata key"),
    ];
    for (options, expected) in cases {
        let output = d.join("out.gguf");
        let out = our_edit(&tiny, &output, &options);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && stderr.contains(expected), "{options:?}: {stderr}");
        assert!(!output.exists(), "{options:?} left an output");
    }
}
