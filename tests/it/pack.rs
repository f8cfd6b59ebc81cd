//! Ladder packs: a ladder made by llama-quantize from the tiny model (plain
//! presets, an importance matrix, `--pure`, `--leave-output-tensor`, type
//! overrides, and a type quantforge cannot write) packs into little more
//! than its base, and unpacks byte for byte; a file only partly reproduced
//! stores only what differs; a tampered pack is refused and writes nothing.

use crate::common;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use common::{quantforge_with as quantforge, stdout_of_success as ok};

fn imatrix() -> PathBuf {
    common::repo().join("tests/data/imatrix/tiny-llama.imatrix.gguf")
}

/// llama-quantize's ladder of the tiny model in `dir`: (file, how it was made).
fn llama_ladder(llama: &Path, dir: &Path) -> Vec<PathBuf> {
    let imatrix = imatrix();
    let imatrix = imatrix.to_str().unwrap();
    let ladder: [(&str, &str, &[&str]); 9] = [
        ("tiny-Q8_0.gguf", "Q8_0", &[]),
        ("tiny-Q4_K_M.gguf", "Q4_K_M", &[]),
        ("tiny-imatrix-Q4_K_S.gguf", "Q4_K_S", &["--imatrix", imatrix]),
        ("tiny-imatrix-IQ4_XS.gguf", "IQ4_XS", &["--imatrix", imatrix]),
        ("tiny-pure-Q3_K_M.gguf", "Q3_K_M", &["--pure"]),
        ("tiny-lot-Q5_K_S.gguf", "Q5_K_S", &["--leave-output-tensor"]),
        ("tiny-types-Q4_K_M.gguf", "Q4_K_M", &["--token-embedding-type", "q8_0", "--output-tensor-type", "q5_k"]),
        ("tiny-IQ2_XXS.gguf", "IQ2_XXS", &["--imatrix", imatrix]),
        ("tiny-q1-Q4_K_M.gguf", "Q4_K_M", &["--tensor-type", "ffn_up=q1_0"]),
    ];
    ladder
        .iter()
        .map(|(name, preset, flags)| {
            let out = dir.join(name);
            let made = std::process::Command::new(llama)
                .args(*flags)
                .arg(common::tiny_model())
                .arg(&out)
                .arg(preset)
                .output()
                .unwrap();
            assert!(made.status.success(), "llama-quantize {name}: {}", String::from_utf8_lossy(&made.stderr));
            out
        })
        .collect()
}

#[test]
fn a_llama_quantize_ladder_packs_to_its_base_and_unpacks_byte_for_byte() {
    let Some(llama) = common::reference("build/bin/llama-quantize") else { return };
    let dir = tempfile::tempdir().unwrap();
    let ladder = llama_ladder(&llama, dir.path());
    let pack = dir.path().join("tiny.qfpack");
    let (base, imatrix) = (common::tiny_model(), imatrix());
    let mut args: Vec<&dyn AsRef<OsStr>> = vec![&"pack", &"--base", &base, &"-o", &pack];
    args.extend([&"--imatrix" as &dyn AsRef<OsStr>, &imatrix]);
    args.extend(ladder.iter().map(|p| p as &dyn AsRef<OsStr>));
    ok(quantforge(&args));

    let listed = ok(quantforge(&[&"unpack", &pack, &"--list"]));
    for line in listed.lines().filter(|l| l.starts_with("tiny-") && l.contains(".gguf ")) {
        let stored = line.contains("stored");
        assert_eq!(stored, line.starts_with("tiny-q1-"), "only the Q1_0 tensors are stored: {line}");
    }
    // A type quantforge does not write (Q1_0): the file is still derived,
    // only those tensors stored.
    let q1 = listed.lines().find(|l| l.starts_with("tiny-q1-")).unwrap();
    assert!(q1.contains("quantize Q4_K_M, ") && q1.ends_with(" bytes stored"), "{q1}");
    assert!(listed.contains("tiny-imatrix-Q4_K_S.gguf") && listed.contains("--imatrix IMATRIX --imatrix-name"));
    assert!(listed.contains("--pure"), "{listed}");
    let size = |p: &Path| std::fs::metadata(p).unwrap().len();
    let held = size(&common::tiny_model()) + size(&imatrix) + size(&dir.path().join("tiny-q1-Q4_K_M.gguf")) / 4;
    assert!(size(&pack) < held, "pack {} bytes: more than the base, the matrix and ¼ of the Q1_0 file", size(&pack));

    let out = dir.path().join("out");
    ok(quantforge(&[&"unpack", &pack, &out]));
    for file in &ladder {
        let name = file.file_name().unwrap();
        assert!(std::fs::read(out.join(name)).unwrap() == std::fs::read(file).unwrap(), "{name:?} differs");
    }
    assert_eq!(std::fs::read(out.join("tiny-llama.gguf")).unwrap(), std::fs::read(common::tiny_model()).unwrap());

    // One file alone: nothing else, and no scratch, is left in the directory.
    let one = dir.path().join("one");
    ok(quantforge(&[&"unpack", &pack, &one, &"tiny-imatrix-IQ4_XS.gguf"]));
    let left: Vec<String> =
        std::fs::read_dir(&one).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert_eq!(left, ["tiny-imatrix-IQ4_XS.gguf"]);
    let out = quantforge(&[&"unpack", &pack, &one, &"tiny-Q2_K.gguf"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("no file `tiny-Q2_K.gguf` in the pack"), "{out:?}");
}

#[test]
fn a_file_partly_reproduced_stores_only_what_differs() {
    let dir = tempfile::tempdir().unwrap();
    let made = dir.path().join("tiny-Q6_K.gguf");
    ok(quantforge(&[&"quantize", &"-q", &common::tiny_model(), &made, &"Q6_K"]));
    let model = quantforge::formats::ModelFile::open(&made, Default::default()).unwrap();
    let tensor = model.tensors.iter().find(|t| t.name == "blk.1.ffn_down.weight").unwrap();
    let (at, len) = (tensor.file_offset as usize, tensor.stored_len);
    drop(model);
    let mut bytes = std::fs::read(&made).unwrap();
    bytes[at + 7] ^= 0x10;
    let edited = dir.path().join("tiny-Q6_K-edited.gguf");
    std::fs::write(&edited, &bytes).unwrap();

    let pack = dir.path().join("p.qfpack");
    ok(quantforge(&[&"pack", &"--base", &common::tiny_model(), &edited, &"-o", &pack]));
    let listed = ok(quantforge(&[&"unpack", &pack, &"--list"]));
    assert!(listed.contains(&format!("quantize Q6_K, {len} bytes stored")), "{listed}");
    let out = dir.path().join("out");
    ok(quantforge(&[&"unpack", &pack, &out, &"tiny-Q6_K-edited.gguf"]));
    assert!(std::fs::read(out.join("tiny-Q6_K-edited.gguf")).unwrap() == bytes);
}

/// `pack` with its manifest replaced by `edit`'s result.
fn with_manifest(pack: &[u8], edit: impl FnOnce(&mut serde_json::Value)) -> Vec<u8> {
    let len = pack.len();
    let manifest_len = u64::from_le_bytes(pack[len - 16..len - 8].try_into().unwrap()) as usize;
    let start = len - 16 - manifest_len;
    let mut manifest: serde_json::Value = serde_json::from_slice(&pack[start..len - 16]).unwrap();
    edit(&mut manifest);
    let json = serde_json::to_vec(&manifest).unwrap();
    let mut out = pack[..start].to_vec();
    out.extend_from_slice(&json);
    out.extend_from_slice(&(json.len() as u64).to_le_bytes());
    out.extend_from_slice(&pack[len - 8..]);
    out
}

#[test]
fn a_tampered_pack_is_refused_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let made = dir.path().join("tiny-Q4_0.gguf");
    ok(quantforge(&[&"quantize", &"-q", &common::tiny_model(), &made, &"Q4_0"]));
    let mut bytes = std::fs::read(&made).unwrap();
    let at = bytes.len() - 64;
    bytes[at] ^= 0x01;
    std::fs::write(&made, &bytes).unwrap();
    let pack = dir.path().join("p.qfpack");
    ok(quantforge(&[&"pack", &"--base", &common::tiny_model(), &made, &"-o", &pack]));
    let good = std::fs::read(&pack).unwrap();

    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("truncated", good[..good.len() - 3].to_vec(), "not a quantforge pack: no QFPACK magic"),
        (
            "a name that leaves the directory",
            with_manifest(&good, |m| m["files"][0]["name"] = "../escape.gguf".into()),
            "`../escape.gguf` is not a plain file name",
        ),
        (
            "a blob past the blobs",
            with_manifest(&good, |m| m["base"]["blob"]["offset"] = (good.len() as u64).into()),
            "its blob lies outside the pack's blobs",
        ),
        ("pieces that do not add up", with_manifest(&good, |m| m["files"][0]["size"] = 12.into()), "pieces of"),
        ("an unknown field", with_manifest(&good, |m| m["signed"] = true.into()), "unknown field `signed`"),
        (
            "another sha256",
            with_manifest(&good, |m| m["files"][0]["sha256"] = "00".repeat(32).into()),
            "the pack records 0000",
        ),
    ];
    for (what, bytes, expected) in cases {
        let file = dir.path().join("bad.qfpack");
        std::fs::write(&file, bytes).unwrap();
        let out_dir = dir.path().join(format!("out-{}", what.replace(' ', "-")));
        let out = quantforge(&[&"unpack", &file, &out_dir, &"tiny-Q4_0.gguf"]);
        assert_eq!(out.status.code(), Some(1), "{what}: {out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(expected), "{what}: {stderr}");
        assert!(!out_dir.join("tiny-Q4_0.gguf").exists(), "{what}: a file was written");
        assert!(!dir.path().join("escape.gguf").exists(), "{what}: a file escaped");
    }
}
