//! Helpers shared by the integration tests: a raw GGUF/GGML byte builder that
//! can write malformed files on purpose, and access to the built binary.

#![allow(dead_code)]

pub mod rows;

use std::ffi::OsStr;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, SystemTime};

/// The repository root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn tiny_model() -> PathBuf {
    repo().join("tests/data/tiny-llama.gguf")
}

/// The real Gemma model, or `None` (with a message) when it was not fetched.
pub fn gemma() -> Option<PathBuf> {
    let path = repo().join("models/gemma-3-270m-q4_k_m.gguf");
    if path.exists() {
        Some(path)
    } else {
        assert!(std::env::var_os("CI").is_none(), "CI must fetch {} (scripts/fetch-models.sh)", path.display());
        eprintln!("skipped: {} is absent; run scripts/fetch-models.sh", path.display());
        None
    }
}

pub fn quantforge(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_quantforge")).args(args).output().expect("the binary runs")
}

/// `quantforge` with arguments of any kind that reads as an OS string
/// (`&"run"`, `&path`, …).
pub fn quantforge_with(args: &[&dyn AsRef<std::ffi::OsStr>]) -> Output {
    let args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_ref()).collect();
    quantforge(&args)
}

/// The standard output of a command that must have succeeded (else the test
/// fails, showing its standard error).
pub fn stdout_of_success(out: Output) -> String {
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// `quantforge ARGS`, which must succeed (else the test fails, showing the
/// arguments and the standard error): its standard output.
pub fn quantforge_ok<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> String {
    let args: Vec<&std::ffi::OsStr> = args.iter().map(AsRef::as_ref).collect();
    let out = quantforge(&args);
    assert!(out.status.success(), "quantforge {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// `quantforge ARGS`, which must fail: its standard error.
pub fn quantforge_err<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> String {
    let args: Vec<&std::ffi::OsStr> = args.iter().map(AsRef::as_ref).collect();
    let out = quantforge(&args);
    assert!(!out.status.success(), "quantforge {args:?} should fail");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `quantforge run RECIPE --json --cache-dir CACHE EXTRA…`: the run's
/// report, or the standard error of a run that failed.
pub fn try_run_json(recipe: &Path, cache: &Path, extra: &[&str]) -> Result<serde_json::Value, String> {
    let mut args: Vec<&std::ffi::OsStr> =
        vec!["run".as_ref(), recipe.as_os_str(), "--json".as_ref(), "--cache-dir".as_ref(), cache.as_os_str()];
    args.extend(extra.iter().map(std::ffi::OsStr::new));
    let out = quantforge(&args);
    match out.status.success() {
        true => Ok(serde_json::from_slice(&out.stdout).expect("run --json prints JSON")),
        false => Err(String::from_utf8_lossy(&out.stderr).into_owned()),
    }
}

/// [`try_run_json`] of a run that must succeed.
pub fn run_json(recipe: &Path, cache: &Path, extra: &[&str]) -> serde_json::Value {
    try_run_json(recipe, cache, extra).unwrap_or_else(|stderr| panic!("quantforge run failed: {stderr}"))
}

pub fn quantforge_in(dir: &Path, args: &[&std::ffi::OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_quantforge")).args(args).current_dir(dir).output().expect("the binary runs")
}

/// Python with gguf-py importable, or `None` (with a message). CI installs
/// it, so the differential tests run there; a developer without it is told.
pub fn python_with_gguf() -> Option<String> {
    python_with("gguf, numpy", "gguf numpy")
}

/// Python with the `safetensors` package (and numpy) importable, or `None`
/// (with a message). CI installs it, so the differential tests run there.
pub fn python_with_safetensors() -> Option<String> {
    python_with("safetensors, numpy", "safetensors numpy")
}

/// Python that can `import MODULES`, or `None` (with a message naming the
/// pip packages); in CI, which installs them, a missing one fails the test.
pub fn python_with(modules: &str, packages: &str) -> Option<String> {
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let import = format!("import {modules}");
    let ok = Command::new(&python).args(["-c", &import]).output().is_ok_and(|o| o.status.success());
    if ok {
        Some(python)
    } else {
        assert!(std::env::var_os("CI").is_none(), "CI must install {packages} (pip install {packages})");
        eprintln!("skipped: `{python} -c '{import}'` failed; pip install {packages}");
        None
    }
}

/// all-MiniLM-L6-v2's SafeTensors weights, or `None` (with a message) when
/// they were not fetched; CI fetches them.
pub fn minilm() -> Option<PathBuf> {
    let path = repo().join("models/minilm/model.safetensors");
    if path.exists() {
        Some(path)
    } else {
        assert!(std::env::var_os("CI").is_none(), "CI must fetch {} (scripts/fetch-minilm.sh)", path.display());
        eprintln!("skipped: {} is absent; run scripts/fetch-minilm.sh", path.display());
        None
    }
}

/// The S3 server of `scripts/s3-server.sh`.
pub const S3_PORT: u16 = 8333;

/// The client variables for the test server, or `None` (with a message)
/// when it is not running outside CI.
pub fn s3_env() -> Option<Vec<(String, String)>> {
    if TcpStream::connect_timeout(&([127, 0, 0, 1], S3_PORT).into(), Duration::from_secs(1)).is_err() {
        assert!(std::env::var_os("CI").is_none(), "CI must start the S3 server (scripts/s3-server.sh start)");
        eprintln!("skipped: no S3 server on 127.0.0.1:{S3_PORT}; start one with scripts/s3-server.sh start");
        return None;
    }
    let out = Command::new("bash").arg(repo().join("scripts/s3-server.sh")).arg("env").output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    Some(
        text.lines()
            .filter_map(|l| l.strip_prefix("export ")?.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
    )
}

/// A prefix no other test (or earlier run) uses.
pub fn unique_url(env: &[(String, String)], test: &str) -> String {
    let bucket = &env.iter().find(|(k, _)| k == "QUANTFORGE_TEST_BUCKET").unwrap().1;
    let nanos = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap().as_nanos();
    format!("s3://{bucket}/{test}-{}-{nanos}", std::process::id())
}

/// Every file in `dir` (none when it is absent), by name, with its bytes.
pub fn files_in(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .map(|entries| entries.map(|e| e.unwrap().path()).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&p).unwrap()))
        .collect();
    files.sort();
    files
}

/// Tensors a run report says were encoded, over all its nodes.
pub fn encoded(report: &serde_json::Value) -> u64 {
    report["nodes"].as_array().unwrap().iter().map(|n| n["tensors_encoded"].as_u64().unwrap()).sum()
}

pub fn write_temp(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).expect("write temp file");
    path
}

/// Raw GGUF bytes, little-endian, with every field under the test's control.
#[derive(Clone)]
pub struct RawGguf {
    pub version: u32,
    pub big_endian: bool,
    /// Overrides for the counts in the header.
    pub n_tensors: Option<u64>,
    pub n_kv: Option<u64>,
    pub kvs: Vec<Vec<u8>>,
    pub tensors: Vec<Vec<u8>>,
    pub alignment: u64,
    pub data: Vec<u8>,
}

impl Default for RawGguf {
    fn default() -> RawGguf {
        RawGguf {
            version: 3,
            big_endian: false,
            n_tensors: None,
            n_kv: None,
            kvs: Vec::new(),
            tensors: Vec::new(),
            alignment: 32,
            data: Vec::new(),
        }
    }
}

impl RawGguf {
    fn wide(&self) -> bool {
        self.version != 1
    }

    pub fn u32(&self, v: u32) -> Vec<u8> {
        if self.big_endian { v.to_be_bytes().to_vec() } else { v.to_le_bytes().to_vec() }
    }

    pub fn u64(&self, v: u64) -> Vec<u8> {
        if self.big_endian { v.to_be_bytes().to_vec() } else { v.to_le_bytes().to_vec() }
    }

    /// A count or length: u32 in version 1, u64 after.
    pub fn len(&self, v: u64) -> Vec<u8> {
        if self.wide() { self.u64(v) } else { self.u32(v as u32) }
    }

    pub fn string(&self, s: &[u8]) -> Vec<u8> {
        let mut out = self.len(s.len() as u64);
        out.extend_from_slice(s);
        out
    }

    /// A metadata entry with a raw type id and raw value bytes.
    pub fn kv_raw(&mut self, key: &[u8], type_id: u32, value: Vec<u8>) -> &mut RawGguf {
        let mut entry = self.string(key);
        entry.extend(self.u32(type_id));
        entry.extend(value);
        self.kvs.push(entry);
        self
    }

    pub fn kv_u32(&mut self, key: &str, v: u32) -> &mut RawGguf {
        let value = self.u32(v);
        self.kv_raw(key.as_bytes(), 4, value)
    }

    pub fn kv_str(&mut self, key: &str, v: &str) -> &mut RawGguf {
        let value = self.string(v.as_bytes());
        self.kv_raw(key.as_bytes(), 8, value)
    }

    pub fn tensor(&mut self, name: &[u8], dims: &[u64], type_id: u32, offset: u64) -> &mut RawGguf {
        let mut info = self.string(name);
        info.extend(self.u32(dims.len() as u32));
        for &d in dims {
            info.extend(self.len(d));
        }
        info.extend(self.u32(type_id));
        info.extend(self.u64(offset));
        self.tensors.push(info);
        self
    }

    pub fn bytes(&self) -> Vec<u8> {
        let mut out = b"GGUF".to_vec();
        out.extend(self.u32(self.version));
        out.extend(self.len(self.n_tensors.unwrap_or(self.tensors.len() as u64)));
        out.extend(self.len(self.n_kv.unwrap_or(self.kvs.len() as u64)));
        for kv in &self.kvs {
            out.extend(kv);
        }
        for t in &self.tensors {
            out.extend(t);
        }
        while !(out.len() as u64).is_multiple_of(self.alignment) {
            out.push(0);
        }
        out.extend(&self.data);
        out
    }
}

/// A small valid file: two keys, an F32 tensor and a Q8_0 tensor.
pub fn valid_gguf() -> RawGguf {
    let mut g = RawGguf::default();
    g.kv_str("general.architecture", "llama").kv_u32("general.alignment", 32);
    g.tensor(b"a.weight", &[4, 2], 0, 0).tensor(b"b.weight", &[32, 1], 8, 32);
    g.data = (0..32u8).chain(0..34).chain([0; 30]).collect();
    g
}

/// One tensor of a legacy file: name, dims (ggml order), type id, stored bytes.
pub struct LegacyTensor {
    pub name: String,
    pub dims: Vec<u32>,
    pub type_id: u32,
    pub data: Vec<u8>,
}

/// A legacy GGML-family file: `magic` is the on-disk bytes (`lmgg`, `fmgg`,
/// `tjgg`).
pub struct LegacyFile {
    pub magic: [u8; 4],
    pub version: u32,
    /// n_vocab, n_embd, n_mult, n_head, n_layer, n_rot, ftype.
    pub hparams: [u32; 7],
    pub vocab: Vec<(Vec<u8>, f32)>,
    pub tensors: Vec<LegacyTensor>,
}

impl LegacyFile {
    pub fn bytes(&self) -> Vec<u8> {
        let mut out = self.magic.to_vec();
        if &self.magic != b"lmgg" {
            out.extend(self.version.to_le_bytes());
        }
        for v in self.hparams {
            out.extend(v.to_le_bytes());
        }
        for (text, score) in &self.vocab {
            out.extend((text.len() as u32).to_le_bytes());
            out.extend(text);
            if &self.magic != b"lmgg" {
                out.extend(score.to_le_bytes());
            }
        }
        for t in &self.tensors {
            out.extend((t.dims.len() as u32).to_le_bytes());
            out.extend((t.name.len() as u32).to_le_bytes());
            out.extend(t.type_id.to_le_bytes());
            for d in &t.dims {
                out.extend(d.to_le_bytes());
            }
            out.extend(t.name.as_bytes());
            if &self.magic == b"tjgg" {
                while !out.len().is_multiple_of(32) {
                    out.push(0);
                }
            }
            out.extend(&t.data);
        }
        out
    }
}

/// A three-preset ladder of `tiny.gguf` (beside the recipe) to `out/`.
pub const LADDER: &str = r#"
[recipe]
name = "ladder"

[input.tiny]
path = "tiny.gguf"

[step.q]
op = "quantize"
from = "tiny"
preset = ["Q8_0", "Q4_K_M", "Q3_K_S"]

[step.out]
op = "export"
from = "q"
path = "out/tiny-{preset}.gguf"
"#;

/// Deterministic pseudo-random bytes.
pub fn noise(seed: u64, n: usize) -> Vec<u8> {
    let mut state = seed;
    (0..n)
        .map(|_| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (state >> 56) as u8
        })
        .collect()
}

/// One golden file of `tests/data/golden` (layout in tests/ggml_ref/ggml_ref.py):
/// input rows, optional importance, ggml's encoded bytes and decoded values.
pub struct Golden {
    pub ty: quantforge::types::GgmlType,
    pub n_per_row: usize,
    pub rows: Vec<f32>,
    pub importance: Option<Vec<f32>>,
    pub encoded: Vec<u8>,
    pub decoded: Vec<f32>,
}

pub fn read_golden(path: &Path) -> Golden {
    let data = std::fs::read(path).expect("golden file");
    assert_eq!(&data[..4], b"QFGV", "{}", path.display());
    let word = |i: usize| u32::from_le_bytes(data[4 + 4 * i..8 + 4 * i].try_into().unwrap()) as usize;
    assert_eq!(word(0), 1, "golden version");
    let ty = quantforge::types::GgmlType::from_id(word(1) as u32).expect("known type");
    let (n_rows, n_per_row, has_importance) = (word(2), word(3), word(4) != 0);
    let floats = |bytes: &[u8]| -> Vec<f32> {
        bytes.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
    };
    let n = n_rows * n_per_row;
    let mut at = 24;
    let rows = floats(&data[at..at + 4 * n]);
    at += 4 * n;
    let importance = has_importance.then(|| {
        let v = floats(&data[at..at + 4 * n_per_row]);
        at += 4 * n_per_row;
        v
    });
    let encoded_len = data.len() - at - 4 * n;
    let encoded = data[at..at + encoded_len].to_vec();
    let decoded = floats(&data[at + encoded_len..]);
    Golden { ty, n_per_row, rows, importance, encoded, decoded }
}

/// Every golden file, sorted by name.
pub fn golden_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo().join("tests/data/golden"))
        .expect("tests/data/golden")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "qfgv"))
        .collect();
    files.sort();
    files
}

/// A file of the reference llama.cpp (scripts/fetch-references.sh), by its
/// path inside the llama.cpp tree, or `None` with a message; CI must have it.
pub fn reference(path_in_llama_cpp: &str) -> Option<PathBuf> {
    let refs = std::env::var_os("QUANTFORGE_REFS")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/quantforge/refs")))?;
    let path = refs.join("llama.cpp").join(path_in_llama_cpp);
    if path.exists() {
        return Some(path);
    }
    assert!(std::env::var_os("CI").is_none(), "CI must run scripts/fetch-references.sh --build");
    eprintln!("skipped: {} is absent; run scripts/fetch-references.sh --build", path.display());
    None
}

/// The sha256 of `bytes`, in hex (the digest the fixture scripts record).
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// Checks every tensor of `model` against `expected` (objects with `name`,
/// `type`, `dims` in ggml order and the `sha256` of its bytes, in the
/// model's order) by each way its bytes are read: whole, copied, a range.
pub fn check_tensors(model: &quantforge::formats::ModelFile, expected: &[serde_json::Value], what: &str) {
    let names: Vec<&str> = model.tensors.iter().map(|t| t.name.as_str()).collect();
    let want: Vec<&str> = expected.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, want, "{what}: the tensors in order");
    for (tensor, want) in model.tensors.iter().zip(expected) {
        let name = &tensor.name;
        assert_eq!(tensor.ggml_type.name(), want["type"].as_str().unwrap(), "{what} {name}");
        let dims: Vec<u64> = want["dims"].as_array().unwrap().iter().map(|d| d.as_u64().unwrap()).collect();
        assert_eq!(tensor.dims, dims, "{what} {name}");
        let data = model.tensor_data(tensor).unwrap();
        assert_eq!(sha256_hex(&data), want["sha256"].as_str().unwrap(), "{what} {name}");
        let mut copied = Vec::new();
        model.copy_tensor_data(tensor, &mut copied).unwrap();
        assert!(copied == *data, "{what} {name}: copy_tensor_data");
        let n = tensor.n_bytes();
        if n >= 4 {
            let range = model.tensor_data_range(tensor, 1, n - 2).unwrap();
            assert!(*range == data[1..n as usize - 1], "{what} {name}: a range");
        }
    }
}

/// A scratch project holding the quickstart recipe and the tiny model laid
/// out as in the repository: (the project, its `recipes/quickstart.toml`).
pub fn quickstart_project() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("recipes")).unwrap();
    std::fs::create_dir_all(dir.path().join("tests/data")).unwrap();
    std::fs::copy(repo().join("recipes/quickstart.toml"), dir.path().join("recipes/quickstart.toml")).unwrap();
    std::fs::copy(tiny_model(), dir.path().join("tests/data/tiny-llama.gguf")).unwrap();
    let recipe = dir.path().join("recipes/quickstart.toml");
    (dir, recipe)
}

/// An ed25519 key pair as OpenSSL writes it: (private PKCS#8, public SPKI).
pub fn key_pair(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let (private, public) = (dir.join(format!("{name}.pem")), dir.join(format!("{name}.pub")));
    let run = |args: &[&OsStr]| {
        let out = std::process::Command::new("openssl").args(args).output().expect("openssl runs");
        assert!(out.status.success(), "openssl: {}", String::from_utf8_lossy(&out.stderr));
    };
    run(&["genpkey".as_ref(), "-algorithm".as_ref(), "ed25519".as_ref(), "-out".as_ref(), private.as_os_str()]);
    run(&[
        "pkey".as_ref(),
        "-in".as_ref(),
        private.as_os_str(),
        "-pubout".as_ref(),
        "-out".as_ref(),
        public.as_os_str(),
    ]);
    (private, public)
}

/// The `--pre NAME` a conversion of the fixture checkpoint `dir` needs: its
/// tokenizer was trained here, so the converter knows no check hash of it and
/// its reference was made naming the pre-tokenizer the real family has (the
/// one its golden summary records). Empty for any other checkpoint.
pub fn fixture_pre(dir: &std::path::Path) -> Vec<std::ffi::OsString> {
    fixture_pre_name(dir).map(|name| vec!["--pre".into(), name.into()]).unwrap_or_default()
}

/// The pre-tokenizer name of [`fixture_pre`], for a recipe's `pre = "…"`.
pub fn fixture_pre_name(dir: &std::path::Path) -> Option<String> {
    let data = repo().join("tests/data/convert");
    let name = dir.file_name()?.to_str()?;
    let hashes: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(data.join("pre_tokenizers/check_hashes.json")).unwrap()).unwrap();
    let entry = hashes["checkpoints"].get(name)?;
    if !entry["pre"].is_null() {
        return None;
    }
    let golden: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(data.join(format!("{name}-f16.json"))).unwrap()).unwrap();
    let pre = golden["metadata"].as_array().unwrap().iter().find(|m| m["key"] == "tokenizer.ggml.pre")?;
    Some(pre["value"].as_str().unwrap().to_owned())
}

/// Debian's `chromium`, or `None` (with a message); CI installs it.
pub fn chromium() -> Option<PathBuf> {
    let found = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|dir| dir.join("chromium"))
        .find(|p| p.is_file());
    if found.is_none() {
        assert!(std::env::var_os("CI").is_none(), "CI must install chromium (apt-get install chromium)");
        eprintln!("skipped: no chromium on PATH (apt-get install chromium)");
    }
    found
}

/// Runs headless Chromium on `page` in a window of `size` (`WIDTH,HEIGHT`) with `args`; its stdout.
pub fn browse(chromium: &Path, page: &Path, size: &str, args: &[&str]) -> Vec<u8> {
    let url = format!("file://{}", page.display());
    let out = Command::new(chromium)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", &format!("--window-size={size}")])
        .args(args)
        .arg(&url)
        .output()
        .unwrap();
    assert!(out.status.success(), "chromium: {}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

/// What Chromium draws of `page` in a window of `size`, as RGB pixels (the
/// screenshot kept at `shot`).
pub fn screenshot(chromium: &Path, page: &Path, size: &str, shot: &Path) -> Vec<(u8, u8, u8)> {
    browse(chromium, page, size, &[&format!("--screenshot={}", shot.display())]);
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(shot).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut pixels = vec![0; reader.output_buffer_size().unwrap()];
    let frame = reader.next_frame(&mut pixels).unwrap();
    let channels = frame.color_type.samples();
    pixels[..frame.buffer_size()].chunks(channels).map(|p| (p[0], p[1], p[2])).collect()
}

/// llama-quantize of the reference build, when it is there.
pub fn llama_quantize() -> Option<PathBuf> {
    reference("build/bin/llama-quantize")
}

/// Runs a Python fixture script of `tests/DIR/` with `args`; its stdout.
pub fn run_python(python: &str, script: &Path, args: &[&Path]) -> String {
    let output = Command::new(python).arg(repo().join(script)).args(args).output().expect("python runs");
    assert!(output.status.success(), "{} failed: {}", script.display(), String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).expect("UTF-8 output")
}

/// Flips a bit of the byte at `at` (wrapped to the file's length) of the
/// file at `path`; an empty file gets a byte.
pub fn flip_byte(path: &Path, at: usize) {
    let mut bytes = std::fs::read(path).unwrap();
    let at = at % bytes.len().max(1);
    if bytes.is_empty() {
        bytes.push(1);
    } else {
        bytes[at] ^= 0x20;
    }
    std::fs::write(path, bytes).unwrap();
}

/// The quickstart recipe and the tiny model in a scratch project, built once.
pub fn built_quickstart() -> (tempfile::TempDir, PathBuf) {
    let (dir, recipe) = quickstart_project();
    let out = quantforge(&["run".as_ref(), recipe.as_os_str(), "-q".as_ref()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    (dir, recipe)
}

/// Random blocks of `ty` (valid blocks of every type) whose f16 scales are
/// finite, so decoders compute with numbers rather than NaN payloads.
pub fn random_blocks(ty: quantforge::types::GgmlType, n_blocks: usize, seed: u64) -> Vec<u8> {
    use quantforge::types::GgmlType::*;
    match ty {
        IQ2_XXS | IQ2_XS | IQ2_S | IQ3_XXS | IQ3_S | IQ1_S | IQ1_M => random_grid_blocks(ty, n_blocks, seed),
        _ => random_scaled_blocks(ty, n_blocks, seed),
    }
}

/// Random bytes are valid blocks of these types; only the f16 block scale is
/// set, to a finite value (zero, subnormal, tiny to largest), so both
/// decoders compute with numbers rather than NaN payloads.
fn random_grid_blocks(ty: quantforge::types::GgmlType, n_blocks: usize, seed: u64) -> Vec<u8> {
    let type_size = ty.type_size() as usize;
    let mut data = noise(seed, n_blocks * type_size);
    let scales = noise(seed ^ 0x5eed, 2 * n_blocks);
    for (i, block) in data.chunks_exact_mut(type_size).enumerate() {
        let mut bits = u16::from_le_bytes([scales[2 * i], scales[2 * i + 1]]);
        if bits & 0x7c00 == 0x7c00 {
            bits &= !0x4000; // an infinity or NaN exponent: clear its top bit
        }
        match i {
            0 => bits = 0,
            1 => bits = 0x8000,
            2 => bits = 0x7bff, // 65504
            _ => {}
        }
        if ty == quantforge::types::GgmlType::IQ1_M {
            // The scale is the top nibbles of the block's last four u16.
            let base = type_size - ty.block_size() as usize / 32;
            for k in 0..4 {
                let byte = &mut block[base + 2 * k + 1];
                *byte = (*byte & 0x0f) | ((((bits >> (4 * k)) & 0xf) as u8) << 4);
            }
        } else {
            block[..2].copy_from_slice(&bits.to_le_bytes());
        }
    }
    data
}

/// Random blocks whose f16 fields are finite: every type stores its scale
/// (or scales) as f16 at the positions listed, or has no f16 fields.
fn random_scaled_blocks(ty: quantforge::types::GgmlType, n_blocks: usize, seed: u64) -> Vec<u8> {
    let size = ty.type_size() as usize;
    let mut data = noise(seed, n_blocks * size);
    let f16_fields: &[usize] = match ty {
        quantforge::types::GgmlType::Q4_0
        | quantforge::types::GgmlType::Q5_0
        | quantforge::types::GgmlType::Q8_0
        | quantforge::types::GgmlType::IQ4_NL
        | quantforge::types::GgmlType::IQ4_XS => &[0],
        quantforge::types::GgmlType::Q4_1
        | quantforge::types::GgmlType::Q5_1
        | quantforge::types::GgmlType::Q4_K
        | quantforge::types::GgmlType::Q5_K => &[0, 2],
        quantforge::types::GgmlType::Q2_K => &[80, 82],
        quantforge::types::GgmlType::Q3_K => &[108],
        quantforge::types::GgmlType::Q6_K => &[208],
        quantforge::types::GgmlType::TQ1_0 => &[52],
        quantforge::types::GgmlType::TQ2_0 => &[64],
        _ => &[],
    };
    for (i, block) in data.chunks_exact_mut(size).enumerate() {
        for &at in f16_fields {
            let value = half::f16::from_f32((i as f32 - 3.5) * 0.0371);
            block[at..at + 2].copy_from_slice(&value.to_le_bytes());
        }
    }
    data
}
