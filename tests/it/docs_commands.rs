//! The commands README.md and docs/ show (issue 44, item 12): every flag
//! each one names is one its subcommand takes, and each one that needs no
//! download or placeholder runs, as written, in a copy of a fresh clone.

use crate::common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A command as a document shows it, and where.
struct Shown {
    doc: String,
    line: String,
    /// In a code block (a command to type), not a mention in the text.
    block: bool,
}

/// Every `quantforge …` (or `cargo run --release -- …`) command in the
/// shell blocks and inline code of the README and docs/, comments dropped,
/// continuation lines joined.
fn shown_commands() -> Vec<Shown> {
    let repo = common::repo();
    let mut docs = vec![repo.join("README.md")];
    let mut more: Vec<PathBuf> = std::fs::read_dir(repo.join("docs"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    more.sort();
    docs.extend(more);
    let fence = regex::Regex::new(r"(?s)```(\w*)\n(.*?)```").unwrap();
    let inline = regex::Regex::new(r"`(quantforge [^`]+)`").unwrap();
    let mut shown = Vec::new();
    for doc in docs {
        let text = std::fs::read_to_string(&doc).unwrap();
        let name = doc.strip_prefix(&repo).unwrap().display().to_string();
        for block in fence.captures_iter(&text) {
            if !matches!(&block[1], "" | "sh" | "bash" | "console" | "shell") {
                continue;
            }
            let joined = block[2].replace("\\\n", " ");
            for line in joined.lines() {
                let line = without_comment(line.trim().trim_start_matches("$ "));
                let line = line
                    .strip_prefix("cargo run --release -- ")
                    .map_or(line.clone(), |rest| format!("quantforge {rest}"));
                if line.starts_with("quantforge ") {
                    shown.push(Shown { doc: name.clone(), line, block: true });
                }
            }
        }
        for span in inline.captures_iter(&text) {
            shown.push(Shown { doc: name.clone(), line: without_comment(&span[1]), block: false });
        }
    }
    shown
}

/// `line` up to a `#` that starts a shell comment (not one in quotes).
fn without_comment(line: &str) -> String {
    let mut quote = None;
    let mut previous = ' ';
    for (i, c) in line.char_indices() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '"' || c == '\'' => quote = Some(c),
            None if c == '#' && previous == ' ' => return line[..i].trim().to_owned(),
            None => {}
        }
        previous = c;
    }
    line.trim().to_owned()
}

/// The words of a command, quotes removed (no expansion: none is shown).
fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut quote = None;
    for c in line.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => word.push(c),
            None if c == '"' || c == '\'' => quote = Some(c),
            None if c.is_whitespace() => {
                if !word.is_empty() {
                    out.push(std::mem::take(&mut word));
                }
            }
            None => word.push(c),
        }
    }
    if !word.is_empty() {
        out.push(word);
    }
    out
}

/// The subcommand path of `words` (after `quantforge`): each word that is
/// a subcommand of the one before.
fn subcommands(words: &[String], help: &mut Help) -> Vec<String> {
    let mut path = Vec::new();
    for word in &words[1..] {
        if word.starts_with('-') {
            continue;
        }
        if !help.subcommands(&path).contains(word) {
            break;
        }
        path.push(word.clone());
    }
    path
}

/// `quantforge [SUB…] --help`, asked once per subcommand path.
#[derive(Default)]
struct Help(HashMap<Vec<String>, String>);

impl Help {
    fn text(&mut self, path: &[String]) -> &str {
        self.0.entry(path.to_vec()).or_insert_with(|| {
            let out = Command::new(env!("CARGO_BIN_EXE_quantforge")).args(path).arg("--help").output().unwrap();
            String::from_utf8_lossy(&out.stdout).into_owned()
        })
    }

    /// The subcommands `path` lists under `Commands:`.
    fn subcommands(&mut self, path: &[String]) -> Vec<String> {
        let text = self.text(path);
        let Some(list) = text.split("Commands:\n").nth(1) else { return Vec::new() };
        list.lines()
            .take_while(|l| l.starts_with("  "))
            .filter_map(|l| l.split_whitespace().next())
            .map(str::to_owned)
            .collect()
    }
}

#[test]
fn every_flag_a_document_shows_is_one_its_command_takes() {
    let mut help = Help::default();
    let flag = regex::Regex::new(r"^--[a-z][a-z0-9-]*").unwrap();
    let mut wrong = Vec::new();
    let shown = shown_commands();
    assert!(shown.len() > 50, "the documents show their commands: {}", shown.len());
    for command in &shown {
        let words = words(&command.line);
        let path = subcommands(&words, &mut help);
        // `cache ls | du | gc [--max-size S]`: a flag of any of the alternatives.
        let mut text = help.text(&path).to_owned();
        if let Some((_, parent)) = path.split_last() {
            for sibling in help.subcommands(parent).into_iter().filter(|s| words.contains(s)) {
                let mut other = parent.to_vec();
                other.push(sibling);
                text += help.text(&other);
            }
        }
        for word in words.iter().flat_map(|w| w.split(['[', ']', '|', '(', ')'])) {
            let Some(name) = flag.find(word) else { continue };
            // `--split-max-*` names a family of flags.
            let name = name.as_str().trim_end_matches('-');
            let listed = text.contains(&format!("{name} "))
                || text.contains(&format!("{name}\n"))
                || text.contains(&format!("{name}="))
                || text.contains(&format!("{name},"))
                || text.contains(&format!("{name}-"));
            if !listed {
                wrong.push(format!(
                    "{}: `{}`: `quantforge {}` takes no {name}",
                    command.doc,
                    command.line,
                    path.join(" ")
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// A copy of the repository's tracked files, as a fresh clone has them.
fn fresh_clone() -> tempfile::TempDir {
    let repo = common::repo();
    let listed = Command::new("git").args(["ls-files", "-z"]).current_dir(&repo).output().unwrap();
    let dir = tempfile::tempdir().unwrap();
    for file in listed.stdout.split(|&b| b == 0).filter(|f| !f.is_empty()) {
        let file = Path::new(std::str::from_utf8(file).unwrap());
        let from = repo.join(file);
        if !from.is_file() {
            continue;
        }
        let to = dir.path().join(file);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(&from, &to).unwrap();
    }
    dir
}

/// Whether `line` is a whole command to type: no placeholder (`RECIPE`,
/// `[--flag]`, `A|B`, `…`), nothing to download (`models/`), no other
/// machine (`s3://`, Slurm), and every file it names present in a clone
/// (a command naming a file it would make is left out).
fn runs_as_written(line: &str, clone: &Path) -> bool {
    let unquoted = regex::Regex::new(r#""[^"]*"|'[^']*'"#).unwrap().replace_all(line, "");
    let placeholder = regex::Regex::new(r"\b[A-Z][A-Z0-9_]*\b|[\[\]|…()*]|\.\.\.").unwrap();
    let path_like = regex::Regex::new(r"^[^-].*(/|\.[a-z0-9]+$)").unwrap();
    let elsewhere = ["models/", "s3://", "--executor", "--cache-url", "--remote", "/tmp/", "$"];
    !placeholder.is_match(&unquoted)
        && !elsewhere.iter().any(|e| line.contains(e))
        && words(line).iter().skip(1).filter(|w| path_like.is_match(w)).all(|w| clone.join(w).exists())
}

#[test]
fn every_whole_command_runs_as_written_in_a_fresh_clone() {
    let clone = fresh_clone();
    let mut ran = Vec::new();
    let mut failed = Vec::new();
    for command in shown_commands() {
        if !runs_as_written(&command.line, clone.path()) || ran.contains(&command.line) {
            continue;
        }
        let words = words(&command.line);
        let out = Command::new(env!("CARGO_BIN_EXE_quantforge"))
            .args(&words[1..])
            .current_dir(clone.path())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        // A mention in the text (`quantforge convert`) is not a command:
        // clap asks for what it leaves out. A block's command must run.
        let mention = !command.block && out.status.code() == Some(2) && stderr.contains("required");
        if !out.status.success() && !mention {
            failed.push(format!("{}: `{}`: {}", command.doc, command.line, stderr.trim()));
        }
        ran.push(command.line);
    }
    eprintln!("ran as written: {ran:#?}");
    assert!(ran.iter().any(|l| l == "quantforge run recipes/quickstart.toml"), "the README's main job ran: {ran:?}");
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}
