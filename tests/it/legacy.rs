//! Legacy GGML containers: read into the same model as GGUF, blocks of old
//! layouts repacked, and — where llama.cpp's `convert_llama_ggml_to_gguf.py`
//! is available (scripts/fetch-references.sh) — converted to the same bytes
//! as that script writes.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{LegacyFile, LegacyTensor, noise};
use half::f16;
use quantforge::exec::oneshot::{OneShotSettings, WriteAs, edit_file};
use quantforge::formats::ggml_legacy::GGJT_TYPES;
use quantforge::formats::{ContainerFormat, LegacyVariant, ModelFile, OpenOptions};
use quantforge::model::Value;
use quantforge::ops::edit::Edits;
use quantforge::ops::export::ExportFormat;
use quantforge::types::GgmlType;

const N_VOCAB: u32 = 300;
const N_EMBD: u32 = 64;
const N_FF: u32 = 128;

fn vocab() -> Vec<(Vec<u8>, f32)> {
    (0..N_VOCAB)
        .map(|i| {
            let text = match i {
                0..=2 => Vec::new(),
                3..=258 => vec![(i - 3) as u8],
                _ => format!(" word{i}").into_bytes(),
            };
            (text, -(i as f32) / 7.0)
        })
        .collect()
}

/// Bytes of a tensor of `n_elements` of a type whose blocks are
/// `block_bytes` bytes per `block_size` elements.
fn tensor(name: &str, dims: &[u32], type_id: u32, block_size: u32, block_bytes: usize, seed: u64) -> LegacyTensor {
    let n: u32 = dims.iter().product();
    let n_blocks = (n / block_size) as usize;
    let data = match type_id {
        // Small normal-ish values so scales are sane when read as floats.
        0 => (0..n).flat_map(|i| ((i % 17) as f32 * 0.01 - 0.08).to_le_bytes()).collect(),
        1 => (0..n).flat_map(|i| f16::from_f32((i % 13) as f32 * 0.01 - 0.06).to_le_bytes()).collect(),
        _ => with_sane_scales(noise(seed, n_blocks * block_bytes), block_bytes),
    };
    LegacyTensor { name: name.into(), dims: dims.to_vec(), type_id, data }
}

/// Overwrites the first two f16 values of each block (the scale, and the
/// minimum of the `_1` types) with finite values: a NaN scale would not
/// survive the f16 → f32 → f16 trip of the old-layout fixtures bit for bit.
fn with_sane_scales(mut data: Vec<u8>, block_bytes: usize) -> Vec<u8> {
    for block in data.chunks_exact_mut(block_bytes) {
        block[..2].copy_from_slice(&f16::from_f32(0.0123).to_le_bytes());
        block[2..4].copy_from_slice(&f16::from_f32(-0.25).to_le_bytes());
    }
    data
}

/// A one-layer LLaMA in a legacy container, weights of `weight_type` (with
/// its current block geometry) and F32 norms.
fn llama(magic: &[u8; 4], version: u32, ftype: u32, weight_type: GgmlType) -> LegacyFile {
    llama_of_width(magic, version, ftype, weight_type, (N_EMBD, N_FF))
}

/// [`llama`] with rows as wide as a K-quant's blocks, and the feed-forward
/// width LLaMA's rule gives (n_mult 768).
fn wide_llama(ftype: u32, weight_type: GgmlType) -> LegacyFile {
    llama_of_width(b"tjgg", 3, ftype, weight_type, (256, 768))
}

fn llama_of_width(magic: &[u8; 4], version: u32, ftype: u32, weight_type: GgmlType, widths: (u32, u32)) -> LegacyFile {
    let (n_embd, n_ff) = widths;
    let (block, bytes) = (weight_type.block_size() as u32, weight_type.type_size() as usize);
    let w = |name: &str, dims: &[u32], seed| tensor(name, dims, weight_type.id(), block, bytes, seed);
    let norm = |name: &str| tensor(name, &[n_embd], 0, 1, 4, 0);
    LegacyFile {
        magic: *magic,
        version,
        hparams: [N_VOCAB, n_embd, 256, 4, 1, n_embd / 4, ftype],
        vocab: vocab(),
        tensors: vec![
            w("tok_embeddings.weight", &[n_embd, N_VOCAB], 1),
            norm("norm.weight"),
            w("output.weight", &[n_embd, N_VOCAB], 2),
            w("layers.0.attention.wq.weight", &[n_embd, n_embd], 3),
            w("layers.0.attention.wk.weight", &[n_embd, n_embd], 4),
            w("layers.0.attention.wv.weight", &[n_embd, n_embd], 5),
            w("layers.0.attention.wo.weight", &[n_embd, n_embd], 6),
            norm("layers.0.attention_norm.weight"),
            w("layers.0.feed_forward.w1.weight", &[n_embd, n_ff], 7),
            w("layers.0.feed_forward.w2.weight", &[n_ff, n_embd], 8),
            w("layers.0.feed_forward.w3.weight", &[n_embd, n_ff], 9),
            norm("layers.0.ffn_norm.weight"),
        ],
    }
}

fn open(dir: &Path, file: &LegacyFile) -> (PathBuf, ModelFile) {
    let path = common::write_temp(dir, "model.bin", &file.bytes());
    let model = ModelFile::open(&path, OpenOptions::default()).expect("legacy file loads");
    (path, model)
}

#[test]
fn ggjt_v3_reads_as_a_llama_model() {
    let dir = tempfile::tempdir().unwrap();
    let file = llama(b"tjgg", 3, 2, GgmlType::Q4_0);
    let (_, model) = open(dir.path(), &file);
    assert_eq!(model.format, ContainerFormat::Legacy { variant: LegacyVariant::Ggjt, version: 3 });
    let m = &model.metadata;
    assert_eq!(m.get_str("general.architecture"), Some("llama"));
    assert_eq!(m.get_str("general.description"), Some("converted from legacy GGJTv3 MOSTLY_Q4_0 format"));
    assert_eq!(m.get("llama.feed_forward_length"), Some(&Value::U32(N_FF)));
    assert_eq!(m.get("llama.rope.dimension_count"), Some(&Value::U32(N_EMBD / 4)));
    let names: Vec<&str> = model.tensors.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(&names[..4], ["token_embd.weight", "output_norm.weight", "output.weight", "blk.0.attn_q.weight"]);
    assert!(names.contains(&"blk.0.ffn_gate.weight"));
    for (ours, theirs) in model.tensors.iter().zip(&file.tensors) {
        assert_eq!(model.tensor_data(ours).unwrap().as_ref(), theirs.data.as_slice(), "{}", ours.name);
    }
    assert!(!model.has_legacy_blocks());
}

/// Writes current-layout blocks of `ty` in the layout of an older file.
fn to_old_layout(ty: GgmlType, current: &[u8], f32_scales: bool, interleaved: bool) -> Vec<u8> {
    let n_scales = if matches!(ty, GgmlType::Q4_1 | GgmlType::Q5_1) { 2 } else { 1 };
    let mut out = Vec::new();
    for block in current.chunks_exact(ty.type_size() as usize) {
        let (scales, rest) = block.split_at(2 * n_scales);
        for s in scales.chunks_exact(2) {
            let value = f16::from_le_bytes([s[0], s[1]]);
            if f32_scales {
                out.extend(value.to_f32().to_le_bytes());
            } else {
                out.extend(s);
            }
        }
        if interleaved {
            let (qh, nibbles) = rest.split_at(rest.len() - 16);
            out.extend(qh);
            let mut values = [0u8; 32];
            for (j, b) in nibbles.iter().enumerate() {
                values[j] = b & 0xf;
                values[j + 16] = b >> 4;
            }
            out.extend((0..16).map(|i| values[2 * i] | (values[2 * i + 1] << 4)));
        } else {
            out.extend(rest);
        }
    }
    out
}

#[test]
fn old_block_layouts_are_repacked() {
    let dir = tempfile::tempdir().unwrap();
    // (variant magic, version, type, f32 scales, interleaved nibbles)
    let cases = [
        (b"tjgg", 1, GgmlType::Q4_0, true, true),
        (b"tjgg", 1, GgmlType::Q4_1, true, true),
        (b"tjgg", 1, GgmlType::Q5_0, false, true),
        (b"tjgg", 1, GgmlType::Q5_1, false, true),
        (b"tjgg", 1, GgmlType::Q8_0, true, false),
        (b"tjgg", 2, GgmlType::Q4_0, true, false),
        (b"tjgg", 2, GgmlType::Q4_1, true, false),
        (b"tjgg", 2, GgmlType::Q8_0, true, false),
        (b"tjgg", 2, GgmlType::Q5_1, false, false),
        (b"fmgg", 1, GgmlType::Q4_0, true, true),
        (b"lmgg", 1, GgmlType::Q4_1, true, true),
    ];
    for (magic, version, ty, f32_scales, interleaved) in cases {
        let mut file = llama(magic, version, 2, ty);
        let current: Vec<Vec<u8>> = file.tensors.iter().map(|t| t.data.clone()).collect();
        for t in &mut file.tensors {
            if t.type_id == ty.id() {
                t.data = to_old_layout(ty, &t.data, f32_scales, interleaved);
            }
        }
        let (_, model) = open(dir.path(), &file);
        assert_eq!(model.has_legacy_blocks(), f32_scales || interleaved, "{ty} in {magic:?} v{version}");
        for (tensor, expected) in model.tensors.iter().zip(&current) {
            let got = model.tensor_data(tensor).unwrap();
            assert!(got.as_ref() == expected.as_slice(), "{ty} in {magic:?} v{version}: {}", tensor.name);
        }
    }
}

fn converter() -> Option<(String, PathBuf)> {
    let python = common::python_with_gguf()?;
    Some((python, common::reference("convert_llama_ggml_to_gguf.py")?))
}

/// Converts with llama.cpp's script and checks our conversion has the same
/// metadata (but for the `general.name` the script takes from the file name)
/// and the same tensors, by name and type, in the same order.
///
/// The script's tensors cannot be compared further: with gguf-py 0.19 it
/// passes element dimensions where `add_tensor` expects byte dimensions, so
/// its F16 tensors come out with half their row length and quantized ones
/// are refused outright. Our tensor bytes are checked against the input in
/// the tests above.
#[test]
fn conversion_matches_llama_cpp_convert_script() {
    let Some((python, script)) = converter() else { return };
    // The script refuses quantized files older than GGJTv3, and fails on
    // quantized tensors in any file.
    let cases = [
        (b"tjgg", 3, 1, GgmlType::F16),
        (b"tjgg", 3, 0, GgmlType::F32),
        (b"tjgg", 2, 1, GgmlType::F16),
        (b"tjgg", 1, 1, GgmlType::F16),
        (b"fmgg", 1, 0, GgmlType::F32),
        (b"lmgg", 1, 1, GgmlType::F16),
    ];
    let dir = tempfile::tempdir().unwrap();
    let dump = |path: &Path| -> serde_json::Value {
        let out = Command::new(&python).arg(common::repo().join("tests/gguf_py/dump.py")).arg(path).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let summary = |mut v: serde_json::Value| {
        let tensors: Vec<(String, u64)> = v["tensors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| (t["name"].as_str().unwrap().to_owned(), t["type"].as_u64().unwrap()))
            .collect();
        let metadata = v["metadata"].take();
        (metadata, tensors)
    };
    let same_as_script = |input: &Path, label: &str| {
        let reference = dir.path().join("reference.gguf");
        let output = Command::new(&python)
            .arg(&script)
            .args(["--input".as_ref(), input.as_os_str(), "--output".as_ref(), reference.as_os_str()])
            .output()
            .unwrap();
        assert!(output.status.success(), "{label}: {}", String::from_utf8_lossy(&output.stderr));
        let unnamed = dir.path().join("reference-unnamed.gguf");
        let drop_name = Edits { delete: vec!["general.name".into()], ..Edits::default() };
        edit_file(&reference, &unnamed, drop_name, WriteAs::default(), &OneShotSettings::default()).unwrap();

        let ours = dir.path().join("ours.gguf");
        edit_file(input, &ours, Edits::default(), WriteAs::default(), &OneShotSettings::default()).unwrap();
        assert_eq!(summary(dump(&ours)), summary(dump(&unnamed)), "{label}");
    };
    for (magic, version, ftype, ty) in cases {
        let label = format!("{}v{version} {ty}", String::from_utf8_lossy(magic));
        let input = common::write_temp(dir.path(), "legacy.bin", &llama(magic, version, ftype, ty).bytes());
        same_as_script(&input, &label);
        // The GGJT v3 file we write of it reads in the script as in ours.
        let ggjt = dir.path().join("ours-ggjt.bin");
        edit_file(&input, &ggjt, Edits::default(), GGJT, &OneShotSettings::default()).unwrap();
        same_as_script(&ggjt, &format!("{label} written as GGJT v3"));
    }
}

const GGJT: WriteAs = WriteAs { format: ExportFormat::Ggjt, byte_order: None };

/// Checks that two models hold the same metadata but their descriptions
/// (and the keys in `besides`), in any order (GGJT's is its reader's), and
/// the same tensors, bytes included.
fn assert_same_model(ours: &Path, expected: &Path, besides: &[&str], label: &str) {
    let open = |path: &Path| ModelFile::open(path, OpenOptions::default()).unwrap();
    let (a, b) = (open(ours), open(expected));
    let keys = |m: &ModelFile| -> Vec<(String, Value)> {
        let kept = |k: &str| k != "general.description" && !besides.contains(&k);
        let mut keys: Vec<_> =
            m.metadata.iter().filter(|(k, _)| kept(k)).map(|(k, v)| (k.to_owned(), v.clone())).collect();
        keys.sort_by(|a, b| a.0.cmp(&b.0));
        keys
    };
    let (ka, kb) = (keys(&a), keys(&b));
    let names = |keys: &[(String, Value)]| keys.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>();
    assert_eq!(names(&ka), names(&kb), "{label}: metadata keys");
    for ((key, va), (_, vb)) in ka.iter().zip(&kb) {
        assert!(va.is_identical(vb), "{label}: `{key}` differs");
    }
    assert_eq!(a.tensors.len(), b.tensors.len(), "{label}: tensor count");
    for (ta, tb) in a.tensors.iter().zip(&b.tensors) {
        assert_eq!((&ta.name, ta.ggml_type, &ta.dims), (&tb.name, tb.ggml_type, &tb.dims), "{label}");
        assert!(a.tensor_data(ta).unwrap() == b.tensor_data(tb).unwrap(), "{label}: `{}` differs", ta.name);
    }
}

#[test]
fn a_ggjt_v3_file_comes_back_byte_for_byte_in_every_type_it_holds() {
    let dir = tempfile::tempdir().unwrap();
    for ty in GGJT_TYPES {
        let file = if ty.block_size() == 256 { wide_llama(1, ty) } else { llama(b"tjgg", 3, 1, ty) };
        let input = common::write_temp(dir.path(), "model.bin", &file.bytes());
        let output = dir.path().join("back.bin");
        edit_file(&input, &output, Edits::default(), GGJT, &OneShotSettings::default()).unwrap();
        assert!(std::fs::read(&output).unwrap() == file.bytes(), "{ty}: the files differ");
    }
}

/// Older containers, a GGUF without the legacy facts, and a quantized
/// legacy model are written as GGJT v3 files that read back as the model.
#[test]
fn models_written_as_ggjt_v3_read_back_as_themselves() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let write = |input: &Path, name: &str| {
        let output = d.join(name);
        edit_file(input, &output, Edits::default(), GGJT, &OneShotSettings::default()).unwrap();
        output
    };
    for (magic, version) in [(b"lmgg", 1), (b"fmgg", 1), (b"tjgg", 1), (b"tjgg", 2)] {
        let input = common::write_temp(d, "old.bin", &llama(magic, version, 1, GgmlType::F16).bytes());
        assert_same_model(&write(&input, "v3.bin"), &input, &[], &format!("{magic:?} v{version}"));
    }

    // Through GGUF, which keeps no n_mult: the one LLaMA's rule gives.
    let legacy = common::write_temp(d, "wide.bin", &wide_llama(1, GgmlType::F16).bytes());
    let gguf = d.join("wide.gguf");
    edit_file(&legacy, &gguf, Edits::default(), WriteAs::default(), &OneShotSettings::default()).unwrap();
    let via_gguf = write(&gguf, "via-gguf.bin");
    assert_same_model(&via_gguf, &legacy, &[], "through GGUF");
    let n_mult = |path: &Path| u32::from_le_bytes(std::fs::read(path).unwrap()[16..20].try_into().unwrap());
    assert_eq!((n_mult(&legacy), n_mult(&via_gguf)), (256, 768));

    // Quantized in a recipe, which keeps the legacy facts from load to
    // export: the K-quant mixture, the new file type, and n_mult.
    let quantized = d.join("q4_k_m.gguf");
    common::stdout_of_success(common::quantforge_with(&[&"quantize", &legacy, &quantized, &"Q4_K_M"]));
    let recipe = d.join("ggjt.toml");
    let text = format!(
        "[input.m]\npath = {:?}\n\n[step.q]\nop = \"quantize\"\nfrom = \"m\"\npreset = \"Q4_K_M\"\n\n\
         [step.out]\nop = \"export\"\nfrom = \"q\"\npath = \"q4_k_m.bin\"\nformat = \"ggjt\"\n",
        legacy.display().to_string()
    );
    std::fs::write(&recipe, text).unwrap();
    common::stdout_of_success(common::quantforge_with(&[&"run", &recipe, &"--cache-dir", &d.join("cache")]));
    let back = d.join("q4_k_m.bin");
    assert_eq!(n_mult(&back), 256);
    assert_same_model(&back, &quantized, &["general.quantization_version"], "quantized");
}

#[test]
fn what_ggjt_cannot_hold_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let legacy = common::write_temp(d, "model.bin", &llama(b"tjgg", 3, 1, GgmlType::F16).bytes());
    let wide = common::write_temp(d, "wide.bin", &wide_llama(1, GgmlType::F16).bytes());
    let iq4 = d.join("iq4_nl.gguf");
    common::stdout_of_success(common::quantforge_with(&[&"quantize", &"--pure", &wide, &iq4, &"IQ4_NL"]));
    let output = d.join("out.bin");
    let tiny = common::tiny_model();
    let cases: Vec<(&Path, Vec<&str>, &str)> = vec![
        (&tiny, vec![], "grouped-query attention (4 heads, 2 key/value heads)"),
        (
            &legacy,
            vec!["--set", "general.name=str:x"],
            "cannot hold this metadata key (reading the file back would not give its value): `general.name`",
        ),
        (&legacy, vec!["--set", "llama.context_length=u32:4096"], "`llama.context_length`"),
        (&iq4, vec![], "weight` of type IQ4_NL (it holds F32, F16, Q4_0"),
        (
            &legacy,
            vec!["--rename-tensor", "blk.0.attn_q.weight=layers.0.attention.wq.weight"],
            "reads back as `blk.0.attn_q.weight`",
        ),
        (&legacy, vec!["--byte-order", "big"], "GGJT is little-endian only"),
    ];
    for (input, options, expected) in cases {
        let mut args: Vec<&dyn AsRef<std::ffi::OsStr>> = vec![&"edit", &input, &output, &"--format", &"ggjt"];
        args.extend(options.iter().map(|o| o as &dyn AsRef<std::ffi::OsStr>));
        let out = common::quantforge_with(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && stderr.contains(expected), "{options:?}: {stderr}");
        assert!(!output.exists(), "{options:?} left an output");
    }
    let recipe = d.join("split.toml");
    let text = format!(
        "[input.m]\npath = {:?}\n\n[step.out]\nop = \"export\"\nfrom = \"m\"\npath = \"m.bin\"\n\
         format = \"ggjt\"\nsplit = {{ max_size = \"1M\" }}\n",
        legacy.display().to_string()
    );
    std::fs::write(&recipe, text).unwrap();
    let out = common::quantforge_with(&[&"run", &recipe, &"--cache-dir", &d.join("cache")]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("GGJT is one little-endian file: `split` does not apply"),
        "{stderr}"
    );
}
