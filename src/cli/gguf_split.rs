//! `quantforge gguf-split`: llama-gguf-split's own command line, for the
//! scripts that call it. Its flags as it reads them (`--` flags first, `_`
//! read as `-`, sizes in its M and G units, its 128-tensor default), its
//! messages for misuse with its usage on stdout, and its exit statuses: 0
//! for `--help` and `--version`, 1 for misuse and failures. The work is
//! `split`'s and `merge`'s.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::codecs::REFERENCE_LLAMA_CPP;
use crate::exec::oneshot::OneShotSettings;
use crate::formats::{ModelFile, OpenOptions};
use crate::ops::split::{SplitLimit, SplitOptions};

/// llama-gguf-split's tensors per shard when no limit is given.
pub(super) const DEFAULT_MAX_TENSORS: usize = 128;

/// What a command line asks for.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Action {
    Help,
    Version,
    Split { input: PathBuf, out_prefix: PathBuf, options: SplitOptions, dry_run: bool },
    Merge { first_shard: PathBuf, output: PathBuf, dry_run: bool, delete_splits: bool },
}

/// Misuse, worded as llama-gguf-split words it (after `error: `).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(super) struct Misuse(String);

/// The usage llama-gguf-split prints, for this command.
pub(super) fn usage() -> String {
    format!(
        "\nusage: quantforge gguf-split [options] GGUF_IN GGUF_OUT\n\n\
         Apply a GGUF operation on IN to OUT.\n\
         options:\n  \
         -h, --help              show this help message and exit\n  \
         --version               show version and build info\n  \
         --split                 split GGUF to multiple GGUF (enabled by default)\n  \
         --merge                 merge multiple GGUF to a single GGUF\n  \
         --split-max-tensors     max tensors in each split (default: {DEFAULT_MAX_TENSORS})\n  \
         --split-max-size N(M|G) max size per split\n  \
         --no-tensor-first-split do not add tensors to the first split (disabled by default)\n  \
         --dry-run               only print out a split plan and exit, without writing any new files\n  \
         --delete-splits         delete the split files during merge to free up disk space (quantforge deletes \
         them once the merged file is whole)\n\n"
    )
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Operation {
    Split,
    Merge,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Tensors,
    Size,
}

/// Reads `args` (after the command name) as llama-gguf-split's
/// `split_params_parse_ex` does. Only arguments starting with `--` are
/// flags, so `-h` is a file name there, as it is here.
pub(super) fn parse(args: &[OsString]) -> Result<Action, Misuse> {
    let misuse = |message: &str| Err(Misuse(message.to_owned()));
    let (mut operation, mut mode) = (None, None);
    let (mut max_tensors, mut max_bytes) = (DEFAULT_MAX_TENSORS as i64, 0u64);
    let (mut no_tensor_first_split, mut dry_run, mut delete_splits) = (false, false, false);
    let mut rest = args.iter().peekable();
    while let Some(arg) = rest.next_if(|a| a.as_encoded_bytes().starts_with(b"--")) {
        let flag = arg.to_string_lossy().replace('_', "-");
        let mut value = || rest.next().map(|v| v.to_string_lossy().into_owned());
        match flag.as_str() {
            "--help" => return Ok(Action::Help),
            "--version" => return Ok(Action::Version),
            "--dry-run" => dry_run = true,
            "--no-tensor-first-split" => no_tensor_first_split = true,
            "--delete-splits" => delete_splits = true,
            "--split" | "--merge" => {
                let asked = if flag == "--split" { Operation::Split } else { Operation::Merge };
                if operation.is_some_and(|o| o != asked) {
                    return misuse("either --split or --merge can be specified, but not both");
                }
                operation = Some(asked);
            }
            "--split-max-tensors" | "--split-max-size" => {
                let Some(text) = value() else {
                    return misuse(&format!("invalid parameter for argument: {flag}"));
                };
                let asked = if flag == "--split-max-size" { Mode::Size } else { Mode::Tensors };
                if mode.is_some_and(|m| m != asked) {
                    return misuse("either --split-max-tensors or --split-max-size can be specified, but not both");
                }
                mode = Some(asked);
                match asked {
                    Mode::Tensors => max_tensors = c_atoi(&text),
                    Mode::Size => max_bytes = size_in_bytes(&text)?,
                }
            }
            _ => return misuse(&format!("unknown argument: {flag}")),
        }
    }
    let positional: Vec<&OsString> = rest.collect();
    let [input, output] = positional[..] else { return misuse("bad arguments") };
    let (input, output) = (PathBuf::from(input), PathBuf::from(output));
    if operation == Some(Operation::Merge) {
        return Ok(Action::Merge { first_shard: input, output, dry_run, delete_splits });
    }
    let limit = match mode {
        Some(Mode::Size) => SplitLimit::MaxSize(max_bytes),
        // llama-gguf-split divides by the count: zero or less is no limit it can keep.
        _ if max_tensors <= 0 => return misuse(&format!("--split-max-tensors must be positive, got {max_tensors}")),
        _ => SplitLimit::MaxTensors(max_tensors as usize),
    };
    Ok(Action::Split { input, out_prefix: output, options: SplitOptions { limit, no_tensor_first_split }, dry_run })
}

/// `split_str_to_n_bytes`: a whole number then `M` (10^6 bytes) or `G`
/// (10^9), the number read as `sscanf("%d")` reads it (`1.5G` is 1G).
fn size_in_bytes(text: &str) -> Result<u64, Misuse> {
    let unit = match text.chars().last() {
        Some('M') => 1_000_000,
        Some('G') => 1_000_000_000,
        last => {
            let got = last.map(String::from).unwrap_or_default();
            return Err(Misuse(format!("supported units are M (megabytes) or G (gigabytes), but got: {got}")));
        }
    };
    match c_atoi(text) {
        n if n <= 0 => Err(Misuse("size must be a positive value".to_owned())),
        n => Ok(n as u64 * unit),
    }
}

/// C's `atoi` (and `sscanf("%d")`, where it reads a number): leading
/// whitespace, a sign, then digits up to the first other character; 0 when
/// there are none. Saturates instead of overflowing.
fn c_atoi(text: &str) -> i64 {
    let text = text.trim_start();
    let (sign, digits) = match text.as_bytes().first() {
        Some(b'-') => (-1, &text[1..]),
        Some(b'+') => (1, &text[1..]),
        _ => (1, text),
    };
    let magnitude = digits
        .bytes()
        .take_while(u8::is_ascii_digit)
        .fold(0i64, |n, d| n.saturating_mul(10).saturating_add(i64::from(d - b'0')));
    sign * magnitude.min(i64::from(i32::MAX))
}

/// Runs a llama-gguf-split command line. Misuse prints the usage on
/// stdout and fails with llama-gguf-split's message.
pub(super) fn run(args: &[OsString], json: bool) -> anyhow::Result<()> {
    let action = parse(args).inspect_err(|_| print!("{}", usage()))?;
    let settings = OneShotSettings { jobs: 1, progress: super::show_progress(), ..Default::default() };
    match action {
        Action::Help => print!("{}", usage()),
        Action::Version => {
            say!(
                "version: quantforge {} (llama-gguf-split's command line of the {REFERENCE_LLAMA_CPP})",
                env!("CARGO_PKG_VERSION")
            )
        }
        Action::Split { input, out_prefix, options, dry_run: true } => {
            super::split::print_plan(&input, &out_prefix, options, json)?
        }
        Action::Split { input, out_prefix, options, dry_run: false } => {
            let report = super::split::split(&input, &out_prefix, options, &settings)?;
            super::wrote("split", &report, json)?;
        }
        Action::Merge { first_shard, output, dry_run, delete_splits } => {
            // As llama-gguf-split: never over an existing file, checked before anything is read.
            anyhow::ensure!(!output.exists(), "output file {} already exists", output.display());
            let shards = shards_of(&first_shard);
            if dry_run {
                let model = ModelFile::open(&first_shard, OpenOptions::default())?;
                let tensors = crate::text::count(model.tensors.len() as u64, "tensor");
                let from = crate::text::count(shards.len() as u64, "shard");
                println!("would write {}: {tensors} from {from}", output.display());
                return Ok(());
            }
            // llama-gguf-split's merge keeps the split keys (split.count = 0).
            let report = super::split::merge(&first_shard, &output, true, &settings)?;
            super::wrote("merge", &report, json)?;
            if delete_splits {
                delete(&shards)?;
            }
        }
    }
    Ok(())
}

/// The shards a merge reads, for `--delete-splits`.
fn shards_of(first_shard: &Path) -> Vec<PathBuf> {
    crate::formats::shard_set(first_shard).unwrap_or_else(|| vec![first_shard.to_owned()])
}

/// `--delete-splits`, once the merged file is whole (llama-gguf-split
/// deletes each as it goes, and a failure midway leaves neither): every
/// shard is tried; any that stays fails the command.
fn delete(shards: &[PathBuf]) -> anyhow::Result<()> {
    let mut kept = Vec::new();
    for shard in shards {
        match std::fs::remove_file(shard) {
            Ok(()) => say!("deleted file {}", shard.display()),
            Err(e) => kept.push(format!("{}: {}", shard.display(), crate::files::IoText(&e))),
        }
    }
    anyhow::ensure!(kept.is_empty(), "failed to delete {}", kept.join(", "));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_words(line: &str) -> Result<Action, Misuse> {
        parse(&line.split_whitespace().map(OsString::from).collect::<Vec<_>>())
    }

    fn split(limit: SplitLimit, no_tensor_first_split: bool, dry_run: bool) -> Action {
        let options = SplitOptions { limit, no_tensor_first_split };
        Action::Split { input: "in.gguf".into(), out_prefix: "out".into(), options, dry_run }
    }

    #[test]
    fn reads_flags_as_llama_gguf_split_does() {
        assert_eq!(parse_words("in.gguf out").unwrap(), split(SplitLimit::MaxTensors(128), false, false));
        assert_eq!(
            parse_words("--split --split_max_size 2G --no-tensor-first-split --dry-run in.gguf out").unwrap(),
            split(SplitLimit::MaxSize(2_000_000_000), true, true)
        );
        assert_eq!(
            parse_words("--split-max-size 1.5G in.gguf out").unwrap(),
            split(SplitLimit::MaxSize(1_000_000_000), false, false)
        );
        assert_eq!(
            parse_words("--split-max-tensors 7x in.gguf out").unwrap(),
            split(SplitLimit::MaxTensors(7), false, false)
        );
        assert_eq!(
            parse_words("--merge --delete-splits a-00001-of-00002.gguf m.gguf").unwrap(),
            Action::Merge {
                first_shard: "a-00001-of-00002.gguf".into(),
                output: "m.gguf".into(),
                dry_run: false,
                delete_splits: true
            }
        );
        assert_eq!(parse_words("--dry-run --help").unwrap(), Action::Help);
        assert_eq!(parse_words("--version in out").unwrap(), Action::Version);
    }

    #[test]
    fn misuse_is_worded_as_llama_gguf_split_words_it() {
        for (line, message) in [
            ("--split --merge a b", "either --split or --merge can be specified, but not both"),
            (
                "--split-max-size 1G --split-max-tensors 3 a b",
                "either --split-max-tensors or --split-max-size can be specified, but not both",
            ),
            ("--split-max-size 100K a b", "supported units are M (megabytes) or G (gigabytes), but got: K"),
            ("--split-max-size 0M a b", "size must be a positive value"),
            ("--split-max-size", "invalid parameter for argument: --split-max-size"),
            ("--frobnicate a b", "unknown argument: --frobnicate"),
            ("a", "bad arguments"),
            ("-h", "bad arguments"),
            ("a b c", "bad arguments"),
            ("--split-max-tensors 0 a b", "--split-max-tensors must be positive, got 0"),
        ] {
            assert_eq!(parse_words(line), Err(Misuse(message.to_owned())), "{line}");
        }
    }
}
