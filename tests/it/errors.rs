//! The error corpus: what a user sees when a command fails, exactly. Each
//! message names the user's thing (the recipe's file:line:col and input, the
//! path) once, in one message, says what was expected where it can, and the
//! command exits 1. Paths are relative: the commands run in a scratch
//! directory holding the files below.

use crate::common;

use std::path::Path;
use std::process::Command;

/// (command line, stderr): every case exits 1.
const CASES: &[(&str, &str)] = &[
    ("run missing-input.toml", "error: missing-input.toml:2:8: input `m`: ./missing.gguf: no such file or directory\n"),
    (
        "plan missing-input.toml",
        "error: missing-input.toml:2:8: input `m`: ./missing.gguf: no such file or directory\n",
    ),
    (
        "run nope.toml",
        "error: nope.toml has 1 problem\nnope.toml:1:1: cannot read the recipe: no such file or directory\n",
    ),
    (
        "run typo.toml",
        "error: typo.toml has 1 problem\ntypo.toml:5:6: unknown op `quantise`\n  |\n5 | op = \"quantise\"\n  |      ^\n  = hint: did you mean `quantize`?\n",
    ),
    (
        "plan badtype.toml",
        "error: badtype.toml has 1 problem\nbadtype.toml:7:13: bad override: invalid ggml type `Q8_O`; did you mean \
         `Q8_0`?\n  |\n7 | override = [{ match = \"x\", type = \"Q8_O\" }]\n  |             ^\n",
    ),
    (
        "convert repo out.gguf",
        "error: cannot convert repo: not a Hugging Face checkpoint: it has no config.json \
         (expected config.json beside model*.safetensors or pytorch_model*.bin)\n",
    ),
    ("convert nope out.gguf", "error: cannot convert nope: no such file or directory\n"),
    ("inspect repo", "error: repo: a directory without model*.safetensors or pytorch_model*.bin files\n"),
    (
        "merge nope-00001-of-00002.gguf out.gguf",
        "error: cannot merge the split of nope-00001-of-00002.gguf: shard 1 of 2 is missing\n",
    ),
    ("quantize nope.gguf out.gguf Q8_0", "error: cannot quantize nope.gguf: no such file or directory\n"),
    (
        "quantize tiny.gguf out.gguf Q9_K",
        "error: unknown quantization type `Q9_K`; valid types are Q1_0, Q2_0, Q4_0, Q4_1, MXFP4_MOE, Q5_0, Q5_1, \
         IQ2_XXS, IQ2_XS, IQ2_S, IQ2_M, IQ1_S, IQ1_M, TQ1_0, TQ2_0, Q2_K, Q2_K_S, IQ3_XXS, IQ3_S, IQ3_M, Q3_K, IQ3_XS, \
         Q3_K_S, Q3_K_M, Q3_K_L, IQ4_NL, IQ4_XS, Q4_K, Q4_K_S, Q4_K_M, Q5_K, Q5_K_S, Q5_K_M, Q6_K, Q8_0, F16, BF16, \
         F32\n  did you mean \
         `Q2_K`?\n",
    ),
    ("edit nope.gguf out.gguf", "error: cannot edit nope.gguf: no such file or directory\n"),
    ("dequantize nope.gguf out.gguf", "error: cannot dequantize nope.gguf: no such file or directory\n"),
    ("inspect nope.gguf", "error: nope.gguf: no such file or directory\n"),
    ("diff tiny.gguf nope.gguf", "error: nope.gguf: no such file or directory\n"),
    (
        "inspect notes.txt",
        "error: notes.txt: at byte 0: unknown file format: the first bytes are 68 65 6c 6c 6f 0a (\"hello.\") \
         (expected GGUF, GGML/GGMF/GGJT, SafeTensors, PyTorch or ONNX)\n",
    ),
    (
        "assemble tiny.gguf nope.gguf -o b.gguf",
        "error: cannot assemble tiny.gguf, nope.gguf (parts 1 to 2, in that order): nope.gguf: no such file or \
         directory\n",
    ),
    (
        "unbundle tiny.gguf vision out.gguf",
        "error: cannot unbundle tiny.gguf: not a bundle: general.type is absent, not `bundle`\n",
    ),
    (
        "split tiny.gguf x --max-size 1k",
        "error: cannot split tiny.gguf: `token_embd.weight` takes 262144 bytes (padded), more than the 1000 a shard \
         may hold, so shard 1 would hold no tensors; the smallest size that works is 262144 (256.0 KiB)\n",
    ),
    (
        "cache ls --cache-dir TYPO",
        "error: cache TYPO: no cache here (a run makes one; `quantforge cache dir RECIPE` says where a recipe's is)\n",
    ),
];

fn scratch() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::copy(common::tiny_model(), d.join("tiny.gguf")).unwrap();
    std::fs::write(d.join("notes.txt"), "hello\n").unwrap();
    std::fs::create_dir(d.join("repo")).unwrap();
    std::fs::write(d.join("repo/README.md"), "a repository without a checkpoint\n").unwrap();
    let missing = "[input.m]\npath = \"missing.gguf\"\n\n[step.q]\nop = \"quantize\"\nfrom = \"m\"\npreset = \"Q8_0\"\n\n\
                   [step.e]\nop = \"export\"\nfrom = \"q\"\npath = \"out.gguf\"\n";
    std::fs::write(d.join("missing-input.toml"), missing).unwrap();
    let badtype = "[input.m]\npath = \"tiny.gguf\"\n[step.q]\nop = \"quantize\"\nfrom = \"m\"\npreset = \"Q8_0\"\n\
                   override = [{ match = \"x\", type = \"Q8_O\" }]\n";
    std::fs::write(d.join("badtype.toml"), badtype).unwrap();
    std::fs::write(
        d.join("typo.toml"),
        "[input.m]\npath = \"tiny.gguf\"\n\n[step.q]\nop = \"quantise\"\nfrom = \"m\"\n",
    )
    .unwrap();
    dir
}

fn fails(dir: &Path, command: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_quantforge"))
        .current_dir(dir)
        .args(command.split(' '))
        .env_remove("QUANTFORGE_CACHE")
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "`{command}` exits 1: {out:?}");
    assert!(out.stdout.is_empty(), "`{command}` printed on stdout: {out:?}");
    String::from_utf8(out.stderr).unwrap()
}

#[test]
fn every_error_is_one_message_naming_the_users_thing() {
    let dir = scratch();
    let mut wrong = Vec::new();
    for (command, expected) in CASES {
        let stderr = fails(dir.path(), command);
        if stderr != *expected {
            wrong.push(format!("`{command}`\n  expected: {expected:?}\n  got:      {stderr:?}"));
        }
        assert_eq!(stderr.matches("error:").count(), 1, "`{command}`: {stderr}");
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    // Nothing was written by a failing command (`run` makes the recipe's cache as it starts).
    let mut left: Vec<String> =
        std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    left.sort();
    assert_eq!(left, ["badtype.toml", "cache", "missing-input.toml", "notes.txt", "repo", "tiny.gguf", "typo.toml"]);
}

/// A misspelt type on the command line is clap's usage error (exit 2), with
/// the name it was probably meant to be.
#[test]
fn a_misspelt_type_gets_a_suggestion() {
    let dir = scratch();
    let out = Command::new(env!("CARGO_BIN_EXE_quantforge"))
        .current_dir(dir.path())
        .args(["quantize", "--output-tensor-type", "Q8_O", "tiny.gguf", "out.gguf", "Q8_0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).unwrap();
    let expected = "error: invalid value 'Q8_O' for '--output-tensor-type <TYPE>': unknown ggml type `Q8_O`; \
                    did you mean `Q8_0`?\n";
    assert!(stderr.starts_with(expected), "{stderr}");
}

/// An output directory the user cannot write: the message names the
/// output and says why in words, never our temporary file's name or the
/// OS's error number (issue 44, item 9). Run as `nobody` when the tests
/// run as root, whom no mode bit stops.
#[test]
fn an_unwritable_output_directory_is_said_without_temporary_names() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let locked = dir.path().join("locked");
    std::fs::create_dir(&locked).unwrap();
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o555)).unwrap();
    // SAFETY: geteuid has no preconditions.
    let mut command = match unsafe { libc::geteuid() } {
        0 => {
            let mut c = Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups", env!("CARGO_BIN_EXE_quantforge")]);
            c
        }
        _ => Command::new(env!("CARGO_BIN_EXE_quantforge")),
    };
    let out =
        command.arg("quantize").arg(common::tiny_model()).arg(locked.join("x.gguf")).arg("Q4_K_M").output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("x.gguf") && stderr.contains("permission denied"), "{stderr}");
    assert!(!stderr.contains(".quantforge-") && !stderr.contains("os error"), "{stderr}");
}
