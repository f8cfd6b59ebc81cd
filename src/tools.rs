//! External tools: llama.cpp's `llama-imatrix` and `llama-perplexity`.
//!
//! An importance matrix and a perplexity need a forward pass of the model,
//! and quantforge is no inference engine: llama.cpp's own tools are. This
//! module finds them (never bundled: a recipe's `[tools] llama_cpp`, then
//! `QUANTFORGE_LLAMA_CPP`, then `PATH`, then the reference build
//! `scripts/fetch-references.sh --build` makes), names what was found by content (a
//! rebuilt llama.cpp is another tool, whatever its `--version` says), and
//! runs them: their output watched for progress, their failure reported
//! with the command line and their last words.

use std::collections::VecDeque;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};

use crate::key::{Key, KeyBuilder};

/// The variable naming a llama.cpp build when the recipe does not.
pub const ENV_VAR: &str = "QUANTFORGE_LLAMA_CPP";

/// How to get the tools, said wherever one is missing.
pub const HOW_TO_GET: &str = "`scripts/fetch-references.sh --build` builds llama-imatrix and llama-perplexity \
     (into ~/.cache/quantforge/refs/llama.cpp/build/bin); point `[tools] llama_cpp` or QUANTFORGE_LLAMA_CPP there, \
     or put them on PATH";

/// The tools a recipe step may run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tool {
    Imatrix,
    Perplexity,
}

impl Tool {
    pub const ALL: [Tool; 2] = [Tool::Imatrix, Tool::Perplexity];

    /// The binary's file name.
    pub fn binary(self) -> &'static str {
        match self {
            Tool::Imatrix => "llama-imatrix",
            Tool::Perplexity => "llama-perplexity",
        }
    }
}

/// Where a tool was looked for and found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    /// The recipe's `[tools] llama_cpp`.
    Recipe,
    /// [`ENV_VAR`].
    Environment,
    Path,
    /// The reference build `scripts/fetch-references.sh --build` makes.
    References,
}

impl Origin {
    pub fn describe(self) -> &'static str {
        match self {
            Origin::Recipe => "the recipe's [tools] llama_cpp",
            Origin::Environment => ENV_VAR,
            Origin::Path => "PATH",
            Origin::References => "the reference build of scripts/fetch-references.sh",
        }
    }
}

/// A tool found, and what it is.
#[derive(Debug, Clone)]
pub struct FoundTool {
    pub tool: Tool,
    pub path: PathBuf,
    pub origin: Origin,
    /// The first line `--version` prints.
    pub version: String,
    /// blake3 over the version, the binary and the llama.cpp libraries
    /// beside it (a tool's results depend on all three).
    pub identity: Key,
}

#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    #[error("{} is not found: {looked}; {HOW_TO_GET}", tool.binary())]
    Missing { tool: Tool, looked: String },
    #[error("{}: cannot read it to identify it: {}", path.display(), crate::files::IoText(source))]
    Unreadable { path: PathBuf, source: io::Error },
    #[error("{}: `--version` {problem}", path.display())]
    NoVersion { path: PathBuf, problem: String },
}

/// Where to look for llama.cpp's tools: the recipe's `[tools] llama_cpp`
/// (resolved against the recipe's directory), else [`ENV_VAR`], else `PATH`,
/// else the reference build.
/// A directory named explicitly that lacks the tool is an error, never a
/// reason to look further.
pub fn find(
    tool: Tool,
    recipe_llama_cpp: Option<&Path>,
    hash: &dyn Fn(&Path) -> io::Result<Key>,
) -> Result<FoundTool, ToolError> {
    let named = |dir: &Path, origin: Origin| -> Result<(PathBuf, Origin), ToolError> {
        let candidates = candidates(dir, tool);
        match candidates.iter().find(|p| is_executable(p)) {
            Some(path) => Ok((path.clone(), origin)),
            None => {
                let tried = candidates.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ");
                Err(ToolError::Missing {
                    tool,
                    looked: format!("{} names {} (tried {tried})", origin.describe(), dir.display()),
                })
            }
        }
    };
    let (path, origin) = match (recipe_llama_cpp, std::env::var_os(ENV_VAR).filter(|v| !v.is_empty())) {
        (Some(dir), _) => named(dir, Origin::Recipe)?,
        (None, Some(dir)) => named(Path::new(&dir), Origin::Environment)?,
        (None, None) => {
            let on_path = std::env::var_os("PATH")
                .iter()
                .flat_map(std::env::split_paths)
                .map(|dir| dir.join(tool.binary()))
                .find(|p| is_executable(p));
            let references = || {
                let dir = reference_build()?;
                candidates(&dir, tool).into_iter().find(|p| is_executable(p))
            };
            match on_path.map(|p| (p, Origin::Path)).or_else(|| references().map(|p| (p, Origin::References))) {
                Some(found) => found,
                None => {
                    let looked =
                        format!("no [tools] llama_cpp named, {ENV_VAR} unset, not on PATH, and no reference build");
                    return Err(ToolError::Missing { tool, looked });
                }
            }
        }
    };
    identify(tool, path, origin, hash)
}

/// Where `scripts/fetch-references.sh` puts llama.cpp: `$QUANTFORGE_REFS/llama.cpp`,
/// by default under `~/.cache/quantforge/refs`.
fn reference_build() -> Option<PathBuf> {
    let refs = match std::env::var_os("QUANTFORGE_REFS").filter(|v| !v.is_empty()) {
        Some(refs) => PathBuf::from(refs),
        None => PathBuf::from(std::env::var_os("HOME")?).join(".cache/quantforge/refs"),
    };
    Some(refs.join("llama.cpp"))
}

/// The places a llama.cpp directory may hold a tool: the directory itself,
/// its `bin/` (an install) or its `build/bin/` (a source tree built with
/// CMake).
fn candidates(dir: &Path, tool: Tool) -> Vec<PathBuf> {
    ["", "bin", "build/bin"].iter().map(|sub| dir.join(sub).join(tool.binary())).collect()
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Names a found tool by what it is: its version line, its binary, and the
/// llama.cpp libraries beside it (`lib/` of an install as well).
fn identify(
    tool: Tool,
    path: PathBuf,
    origin: Origin,
    hash: &dyn Fn(&Path) -> io::Result<Key>,
) -> Result<FoundTool, ToolError> {
    let path = crate::files::resolve(&path);
    let version = version(&path)?;
    let unreadable = |source| ToolError::Unreadable { path: path.clone(), source };
    let mut key = KeyBuilder::new("tool");
    key.str(tool.binary()).str(&version).key(&hash(&path).map_err(unreadable)?);
    for library in libraries(tool, &path) {
        let name = library.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let content = hash(&library).map_err(|source| ToolError::Unreadable { path: library.clone(), source })?;
        key.str(&name).key(&content);
    }
    Ok(FoundTool { tool, path, origin, version, identity: key.finish() })
}

/// The llama.cpp shared libraries a tool's binary at `path` loads from its
/// own directory or a sibling `lib/`: ggml's, llama's and the tool's own
/// (`libllama-perplexity-impl.so`, where llama.cpp moved a tool's code),
/// not another tool's; regular files only (the `.so` links name the same
/// bytes), by name.
fn libraries(tool: Tool, binary: &Path) -> Vec<PathBuf> {
    let Some(dir) = binary.parent() else { return Vec::new() };
    let own = format!("lib{}-impl.so", tool.binary());
    let mut found: Vec<PathBuf> = [dir.to_owned(), dir.join("../lib")]
        .iter()
        .filter_map(|d| std::fs::read_dir(d).ok())
        .flatten()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .map(|e| e.path())
        .filter(|p| {
            let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            let shared = ["libggml", "libllama.so", "libllama-common.so", &own];
            shared.iter().any(|prefix| name.starts_with(prefix)) && name.contains(".so")
        })
        .collect();
    found.sort();
    found
}

/// What `path --version` says after `version:` (llama.cpp prints it on
/// stderr), else its first line.
fn version(path: &Path) -> Result<String, ToolError> {
    let problem = |problem: String| ToolError::NoVersion { path: path.to_owned(), problem };
    let output = Command::new(path)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| problem(format!("cannot be run: {}", crate::files::IoText(&e))))?;
    if !output.status.success() {
        return Err(problem(format!("failed ({})", describe_status(output.status))));
    }
    let text = String::from_utf8_lossy(&output.stderr).into_owned() + &String::from_utf8_lossy(&output.stdout);
    // A GPU build says what it found before its version.
    let lines = || text.lines().map(str::trim).filter(|l| !l.is_empty());
    let version = lines().find_map(|l| l.strip_prefix("version:")).or_else(|| lines().next());
    version.map(|v| v.trim().to_owned()).ok_or_else(|| problem("printed nothing".into()))
}

/// How a tool ended, as a shell says it.
pub fn describe_status(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(libc::SIGKILL)) => "killed by SIGKILL; out of memory?".into(),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        (None, None) => "ended abnormally".into(),
    }
}

/// A tool's run that did not give a usable result.
#[derive(Debug, thiserror::Error)]
#[error("{} {problem}\n  command: {command}{}", tool.binary(), tail_text(.tail))]
pub struct RunFailure {
    pub tool: Tool,
    /// The command line, as a shell would take it.
    pub command: String,
    /// What went wrong: how it ended, or what of its output did not parse.
    pub problem: String,
    /// Its last lines of output (stderr, where llama.cpp logs).
    pub tail: Vec<String>,
}

fn tail_text(tail: &[String]) -> String {
    if tail.is_empty() {
        return String::new();
    }
    let lines: Vec<String> = tail.iter().map(|l| format!("\n    {}", crate::text::for_terminal(l))).collect();
    format!("\n  its last lines:{}", lines.concat())
}

/// How many of a tool's last stderr lines a failure quotes.
const TAIL_LINES: usize = 12;

/// A tool's run, finished: what it printed on stdout, and its last stderr lines.
pub struct Finished {
    pub stdout: String,
    pub tail: Vec<String>,
    pub command: String,
}

impl Finished {
    /// A failure of this run: its output did not give what was asked.
    pub fn failure(&self, tool: Tool, problem: impl Into<String>) -> RunFailure {
        RunFailure { tool, command: self.command.clone(), problem: problem.into(), tail: self.tail.clone() }
    }
}

/// Runs `command` (a [`FoundTool`]'s binary and its arguments) to its end,
/// telling `on_output` each line or comma-separated item of its stdout and
/// stderr as it comes (llama.cpp prints a chunk's result as `[3]5.41,`,
/// without a newline). Any ending but exit status 0 is a failure.
pub fn run(tool: Tool, mut command: Command, on_output: &(dyn Fn(&str) + Sync)) -> Result<Finished, RunFailure> {
    let line = command_line(&command);
    let failure = |problem: String, tail: Vec<String>| RunFailure { tool, command: line.clone(), problem, tail };
    // llama.cpp reads any flag from a LLAMA_ARG_* variable too: one in this
    // environment would change a result its key does not know of.
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("LLAMA_ARG_") {
            command.env_remove(name);
        }
    }
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| failure(format!("cannot be started: {}", crate::files::IoText(&e)), Vec::new()))?;
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return Err(failure("started without its output pipes".into(), Vec::new()));
    };
    let (out, tail) = std::thread::scope(|scope| {
        let err = scope.spawn(|| {
            let (mut tail, mut line) = (VecDeque::with_capacity(TAIL_LINES), String::new());
            watch(stderr, &mut |item, ends_line| {
                on_output(item);
                line.push_str(item);
                if !ends_line {
                    line.push(',');
                    return;
                }
                if tail.len() == TAIL_LINES {
                    tail.pop_front();
                }
                tail.push_back(std::mem::take(&mut line));
            });
            tail.into_iter().collect::<Vec<String>>()
        });
        let mut text = String::new();
        watch(stdout, &mut |item, ends_line| {
            on_output(item);
            text.push_str(item);
            text.push(if ends_line { '\n' } else { ',' });
        });
        (text, err.join().unwrap_or_default())
    });
    let status = child.wait().map_err(|e| failure(format!("could not be waited for: {e}"), tail.clone()))?;
    if !status.success() {
        return Err(failure(format!("failed ({})", describe_status(status)), tail));
    }
    Ok(Finished { stdout: out, tail, command: line })
}

/// Reads `from` to its end, handing `each` every line (`true`) or
/// comma-ended item of a line (`false`), without their separators.
fn watch(mut from: impl Read, each: &mut dyn FnMut(&str, bool)) {
    let mut pending = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            // A signal this process handles (a terminal resize, a child's end) interrupts the read, not the output.
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        for &byte in &buf[..n] {
            match byte {
                b'\n' | b',' => {
                    each(String::from_utf8_lossy(&pending).trim_end_matches('\r'), byte == b'\n');
                    pending.clear();
                }
                _ => pending.push(byte),
            }
        }
    }
    if !pending.is_empty() {
        each(&String::from_utf8_lossy(&pending), true);
    }
}

/// `command` as a shell would take it: each word quoted where it needs to be.
fn command_line(command: &Command) -> String {
    let words = std::iter::once(command.get_program()).chain(command.get_args());
    words.map(|w| shell_quote(&w.to_string_lossy())).collect::<Vec<_>>().join(" ")
}

fn shell_quote(word: &str) -> String {
    let plain = !word.is_empty() && word.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
    match plain {
        true => word.to_owned(),
        false => format!("'{}'", word.replace('\'', r"'\''")),
    }
}

/// What llama.cpp's tools say of their progress: the chunk count they
/// compute over (`computing over 3 chunks, …`), then each chunk as it
/// finishes: its perplexity (`[2]542.1968`, llama-imatrix and
/// llama-perplexity) or its row of the KL-divergence table (`   2
/// 537.3171 ±   29.4788 …`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    Total(u64),
    Done(u64),
}

impl Progress {
    pub fn parse(item: &str) -> Option<Progress> {
        if let Some((_, rest)) = item.split_once("computing over ") {
            return rest.split_whitespace().next()?.parse().ok().map(Progress::Total);
        }
        if let Some((chunk, value)) = item.strip_prefix('[').and_then(|i| i.split_once(']')) {
            value.parse::<f64>().ok()?;
            return chunk.parse().ok().map(Progress::Done);
        }
        let mut words = item.split_whitespace();
        let (chunk, ppl, sign) = (words.next()?, words.next()?, words.next()?);
        (ppl.parse::<f64>().is_ok() && sign == "±").then_some(())?;
        chunk.parse().ok().map(Progress::Done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_is_read_from_the_tools_own_lines() {
        let total = "0.00.014.160 I compute_imatrix: computing over 3 chunks";
        assert_eq!(Progress::parse(total), Some(Progress::Total(3)));
        assert_eq!(Progress::parse("[2]542.1968"), Some(Progress::Done(2)));
        let row = "   2     537.3171 ±   29.4788      -0.00909 ±    0.00612       0.00176 ±    0.00003";
        assert_eq!(Progress::parse(row), Some(Progress::Done(2)));
        assert_eq!(Progress::parse("[2] of something"), None);
        assert_eq!(Progress::parse("Final estimate: PPL = 553.5500 +/- 24.90901"), None);
        assert_eq!(Progress::parse("Mean PPL(Q)                   : 549.005432 ±   8.291643"), None);
    }

    #[test]
    fn output_is_cut_at_lines_and_commas() {
        let mut seen = Vec::new();
        watch(&b"a b\n[1]5.4,[2]6.1,\nlast"[..], &mut |item, ends| seen.push((item.to_owned(), ends)));
        let expected = [("a b", true), ("[1]5.4", false), ("[2]6.1", false), ("", true), ("last", true)];
        assert_eq!(seen, expected.map(|(s, e)| (s.to_owned(), e)));
    }

    #[test]
    fn command_lines_quote_what_a_shell_would_split() {
        let mut command = Command::new("/opt/llama-imatrix");
        command.args(["-f", "my corpus.txt", "-c", "512", "it's"]);
        assert_eq!(command_line(&command), r"/opt/llama-imatrix -f 'my corpus.txt' -c 512 'it'\''s'");
    }

    #[test]
    fn a_named_directory_without_the_tool_is_an_error_naming_where_it_looked() {
        let dir = tempfile::tempdir().unwrap();
        let hash = |p: &Path| crate::store::fingerprint::hash_file(p);
        let err = find(Tool::Imatrix, Some(dir.path()), &hash).unwrap_err().to_string();
        assert!(err.contains("the recipe's [tools] llama_cpp names"), "{err}");
        assert!(err.contains("build/bin/llama-imatrix"), "{err}");
        assert!(err.contains("fetch-references.sh --build"), "{err}");
    }
}
