//! The malformed-file corpus: every case is generated here, opened through
//! both access paths (mmap and plain reads), and must give the expected
//! typed error, never a panic and never a huge allocation.

use crate::common;

use common::{RawGguf, valid_gguf};
use expect_test::{Expect, expect};
use quantforge::formats::{ModelFile, OpenOptions};

/// Opens `bytes` as a file both ways and checks the error message, with the
/// temporary path replaced by `FILE`.
fn check(bytes: &[u8], expected: Expect) {
    let dir = tempfile::tempdir().unwrap();
    let path = common::write_temp(dir.path(), "bad.gguf", bytes);
    let mut messages = Vec::new();
    for use_mmap in [true, false] {
        let err = ModelFile::open(&path, OpenOptions { use_mmap }).expect_err("malformed file must not load");
        messages.push(err.to_string().replace(&path.display().to_string(), "FILE"));
    }
    assert_eq!(messages[0], messages[1], "mmap and read paths disagree");
    expected.assert_eq(&messages[0]);
}

#[test]
fn valid_fixture_loads() {
    let dir = tempfile::tempdir().unwrap();
    let path = common::write_temp(dir.path(), "ok.gguf", &valid_gguf().bytes());
    let model = ModelFile::open(&path, OpenOptions::default()).unwrap();
    assert_eq!(model.tensors.len(), 2);
}

#[test]
fn every_truncation_is_an_error() {
    let bytes = valid_gguf().bytes();
    let data_start = bytes.len() - 96;
    let dir = tempfile::tempdir().unwrap();
    // Cutting into the final tensor's padding leaves a loadable file.
    for cut in 0..data_start + 66 {
        let path = common::write_temp(dir.path(), "cut.gguf", &bytes[..cut]);
        for use_mmap in [true, false] {
            let result = ModelFile::open(&path, OpenOptions { use_mmap });
            assert!(result.is_err(), "truncated at {cut} bytes must fail");
        }
    }
}

#[test]
fn bad_magic() {
    check(
        b"GGUX\x03\0\0\0",
        expect![[
            r#"FILE: at byte 0: unknown file format: the first bytes are 47 47 55 58 03 00 00 00 ("GGUX....") (expected GGUF, GGML/GGMF/GGJT, SafeTensors, PyTorch or ONNX)"#
        ]],
    );
    check(
        b"",
        expect![[
            r#"FILE: at byte 0: unknown file format: the first bytes are (empty file) (expected GGUF, GGML/GGMF/GGJT, SafeTensors, PyTorch or ONNX)"#
        ]],
    );
}

#[test]
fn unsupported_versions() {
    let mut g = valid_gguf();
    g.version = 0;
    check(&g.bytes(), expect!["FILE: at byte 4: unsupported GGUF version 0 (supported: 1, 2, 3)"]);
    g.version = 99;
    check(&g.bytes(), expect!["FILE: at byte 4: unsupported GGUF version 99 (supported: 1, 2, 3)"]);
}

#[test]
fn absurd_counts() {
    let mut g = valid_gguf();
    g.n_tensors = Some(1 << 63);
    check(
        &g.bytes(),
        expect![
            "FILE: at byte 24: the tensor info section claims 9223372036854775808 entries, but only 296 bytes remain (each needs at least 32)"
        ],
    );
    let mut g = valid_gguf();
    g.n_kv = Some(1 << 63);
    check(
        &g.bytes(),
        expect![
            "FILE: at byte 24: the metadata section claims 9223372036854775808 entries, but only 296 bytes remain (each needs at least 13)"
        ],
    );
}

#[test]
fn absurd_string_lengths() {
    let mut g = RawGguf::default();
    let mut key = g.len(1 << 40);
    key.extend_from_slice(b"general.name");
    g.kvs.push(key);
    check(&g.bytes(), expect!["FILE: at byte 32: file ends early: a metadata key needs 1099511627776 bytes, 32 left"]);

    let mut g = RawGguf::default();
    let value = g.len(1 << 40);
    g.kv_raw(b"general.name", 8, value);
    check(
        &g.bytes(),
        expect!["FILE: at byte 56: file ends early: the value of `general.name` needs 1099511627776 bytes, 8 left"],
    );
}

#[test]
fn unknown_value_type() {
    let mut g = valid_gguf();
    g.kv_raw(b"x.y", 13, vec![0; 8]);
    check(&g.bytes(), expect!["FILE: at byte 113: unknown metadata value type 13 for `x.y`"]);
}

#[test]
fn invalid_bool() {
    let mut g = RawGguf::default();
    g.kv_raw(b"x.flag", 7, vec![2]);
    check(&g.bytes(), expect!["FILE: at byte 42: invalid bool value 2 for `x.flag` (expected 0 or 1)"]);
}

#[test]
fn arrays() {
    // An array claiming 2^62 u32 elements.
    let mut g = RawGguf::default();
    let mut value = g.u32(4);
    value.extend(g.len(1 << 62));
    g.kv_raw(b"x.arr", 9, value);
    check(
        &g.bytes(),
        expect![
            "FILE: at byte 53: the value of `x.arr` claims 4611686018427387904 entries, but only 11 bytes remain (each needs at least 4)"
        ],
    );

    // Arrays of arrays nested past the limit.
    let mut g = RawGguf::default();
    let mut value = Vec::new();
    for _ in 0..40 {
        value.extend(g.u32(9));
        value.extend(g.len(1));
    }
    value.extend(g.u32(4));
    value.extend(g.len(0));
    g.kv_raw(b"x.deep", 9, value);
    check(&g.bytes(), expect!["FILE: at byte 426: `x.deep` nests arrays more than 32 deep"]);
}

#[test]
fn duplicate_and_non_utf8_keys() {
    let mut g = valid_gguf();
    g.kv_str("general.architecture", "again");
    check(&g.bytes(), expect!["FILE: at byte 102: duplicate metadata key `general.architecture`"]);

    let mut g = RawGguf::default();
    let value = g.u32(1);
    g.kv_raw(b"bad.\xff\xfekey", 4, value);
    check(&g.bytes(), expect![[r#"FILE: at byte 24: metadata key "bad.��key" is not valid UTF-8"#]]);
}

#[test]
fn alignment_must_be_a_u32_power_of_two() {
    let mut g = RawGguf::default();
    g.kv_u32("general.alignment", 48);
    check(&g.bytes(), expect!["FILE: at byte 57: general.alignment is 48; it must be a non-zero power of two"]);
    let mut g = RawGguf::default();
    let value = g.u64(32);
    g.kv_raw(b"general.alignment", 10, value);
    check(&g.bytes(), expect!["FILE: at byte 61: metadata key `general.alignment` has type u64, expected u32"]);
}

#[test]
fn tensor_types() {
    let mut g = valid_gguf();
    g.tensors.clear();
    g.tensor(b"t", &[32], 99, 0);
    check(&g.bytes(), expect!["FILE: at byte 102: tensor `t` has unknown type id 99"]);
    g.tensors.clear();
    g.tensor(b"t", &[32], 4, 0);
    check(&g.bytes(), expect!["FILE: at byte 102: tensor `t` has type Q4_2 (id 4), which ggml has removed"]);
}

#[test]
fn tensor_shapes() {
    let mut g = valid_gguf();
    g.tensors.clear();
    g.tensor(b"t", &[], 0, 0);
    check(&g.bytes(), expect!["FILE: at byte 102: tensor `t` has 0 dimensions (expected 1 to 4)"]);
    g.tensors.clear();
    g.tensor(b"t", &[1, 1, 1, 1, 1], 0, 0);
    check(&g.bytes(), expect!["FILE: at byte 102: tensor `t` has 5 dimensions (expected 1 to 4)"]);
    g.tensors.clear();
    g.tensor(b"t", &[1 << 32, 1 << 32, 1 << 32], 0, 0);
    check(
        &g.bytes(),
        expect![
            "FILE: at byte 102: tensor `t` shape [4294967296, 4294967296, 4294967296] has more elements than fit in 63 bits"
        ],
    );
    g.tensors.clear();
    g.tensor(b"t", &[33], 2, 0);
    check(
        &g.bytes(),
        expect!["FILE: at byte 102: tensor `t` rows of 33 elements are not a multiple of the Q4_0 block size 32"],
    );
}

#[test]
fn tensor_placement() {
    let mut g = valid_gguf();
    g.tensors.clear();
    g.tensor(b"a.weight", &[4, 2], 0, 0).tensor(b"b.weight", &[32, 1], 8, 4096);
    check(
        &g.bytes(),
        expect!["FILE: at byte 150: tensor `b.weight` data [4320, 4354) lies outside the file (320 bytes)"],
    );

    g.tensors.clear();
    g.tensor(b"a.weight", &[4, 2], 0, 0).tensor(b"b.weight", &[32, 1], 8, 0);
    check(&g.bytes(), expect!["FILE: at byte 224: tensor `b.weight` data overlaps tensor `a.weight`"]);

    g.tensors.clear();
    g.tensor(b"a.weight", &[4, 2], 0, 0).tensor(b"b.weight", &[32, 1], 8, 33);
    check(
        &g.bytes(),
        expect!["FILE: at byte 150: tensor `b.weight` data offset 33 is not a multiple of the alignment 32"],
    );

    g.tensors.clear();
    g.tensor(b"a.weight", &[4, 2], 0, 0).tensor(b"a.weight", &[32, 1], 8, 32);
    check(&g.bytes(), expect!["FILE: at byte 150: duplicate tensor name `a.weight`"]);

    g.tensors.clear();
    g.tensor(b"a.weight", &[4, 2], 0, u64::MAX - 31);
    check(
        &g.bytes(),
        expect![
            "FILE: at byte 102: tensor `a.weight` data [18446744073709551584, 18446744073709551615) lies outside the file (256 bytes)"
        ],
    );
}

#[test]
fn legacy_headers() {
    check(b"tjgg\x04\0\0\0", expect!["FILE: at byte 4: unsupported GGJT version 4 (supported: 1, 2, 3)"]);
    check(b"fmgg\x02\0\0\0", expect!["FILE: at byte 4: unsupported GGMF version 2 (supported: 1)"]);
    let mut hp = b"tjgg\x03\0\0\0".to_vec();
    for v in [u32::MAX, 8, 256, 1, 1, 8, 1] {
        hp.extend(v.to_le_bytes());
    }
    check(
        &hp,
        expect![
            "FILE: at byte 36: the vocabulary claims 4294967295 entries, but only 0 bytes remain (each needs at least 8)"
        ],
    );
}

#[test]
fn fuzzer_findings_load_without_panicking() {
    // A GGJT header whose n_embd overflowed the feed-forward width formula
    // (found by fuzz/parse_model); it has no tensors, so it loads.
    let crash: &[u8] = &[
        b't', b'j', b'g', b'g', 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0,
        0, 0, 0, 0,
    ];
    let dir = tempfile::tempdir().unwrap();
    let path = common::write_temp(dir.path(), "crash.bin", crash);
    let model = ModelFile::open(&path, OpenOptions::default()).unwrap();
    assert_eq!(model.metadata.get("llama.feed_forward_length").and_then(|v| v.as_u64()), Some(u64::from(u32::MAX)));
}

#[test]
fn cli_reports_errors_without_panicking_and_leaves_no_output() {
    let dir = tempfile::tempdir().unwrap();
    let mut g = valid_gguf();
    g.n_tensors = Some(1 << 63);
    let bad = common::write_temp(dir.path(), "bad.gguf", &g.bytes());
    let out_path = dir.path().join("out.gguf");
    let output = common::quantforge(&["edit".as_ref(), bad.as_os_str(), out_path.as_os_str()]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.starts_with("error: cannot edit"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(!out_path.exists());
    let leftovers: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(leftovers.len(), 1, "temporary files left behind: {leftovers:?}");
}

/// A `torch.save`-shaped zip archive of `records` (name, bytes), stored.
fn torch_zip(records: &[(&str, &[u8])]) -> Vec<u8> {
    use std::io::Write;
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    for (name, bytes) in records {
        zip.start_file(*name, options).unwrap();
        zip.write_all(bytes).unwrap();
    }
    zip.finish().unwrap().into_inner()
}

/// A state dict pickle: tensor `w` of `size` f32 elements in storage `key`
/// declared to hold `numel`.
fn state_pickle(key: &str, numel: u8, size: u8) -> Vec<u8> {
    let mut p = b"\x80\x02}(X\x01\x00\x00\x00wctorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00storage".to_vec();
    p.extend(b"ctorch\nFloatStorage\nX");
    p.extend((key.len() as u32).to_le_bytes());
    p.extend(key.as_bytes());
    p.extend(b"X\x03\x00\x00\x00cpuK");
    p.push(numel);
    p.extend(b"tQK\x00K");
    p.push(size);
    p.extend(b"\x85K\x01\x85\x89ccollections\nOrderedDict\n)RtRu.");
    p
}

#[test]
fn pytorch_archives() {
    let storage = [0u8; 16];
    let dir = tempfile::tempdir().unwrap();
    let valid =
        torch_zip(&[("a/data.pkl", &state_pickle("0", 4, 4)), ("a/byteorder", b"little"), ("a/data/0", &storage)]);
    let model = ModelFile::open(&common::write_temp(dir.path(), "ok.pt", &valid), OpenOptions::default()).unwrap();
    assert_eq!(model.tensors.len(), 1);

    check(
        &torch_zip(&[("a/data/0", &storage)]),
        expect!["FILE: a zip archive without `data.pkl`: not a PyTorch checkpoint"],
    );
    check(
        &torch_zip(&[("a/data.pkl", b"N."), ("b/data.pkl", b"N.")]),
        expect!["FILE: a zip archive with 2 `data.pkl` records; torch.save writes one"],
    );
    check(
        &torch_zip(&[("a/data.pkl", &state_pickle("0", 4, 4)), ("a/byteorder", b"big"), ("a/data/0", &storage)]),
        expect!["FILE: the checkpoint's byteorder is `big`; only little-endian checkpoints are read"],
    );
    check(
        &torch_zip(&[("a/data.pkl", &state_pickle("1", 4, 4)), ("a/data/0", &storage)]),
        expect!["FILE: at byte 172: data.pkl byte 132: `w`: storage `1` has no record `data/1` in the archive"],
    );
    check(
        &torch_zip(&[("a/data.pkl", &state_pickle("0", 4, 5)), ("a/data/0", &storage)]),
        expect!["FILE: at byte 172: data.pkl byte 132: `w`: elements up to byte 20 of storage `0`, which has 16"],
    );
    check(
        &torch_zip(&[("a/data.pkl", &state_pickle("0", 5, 4)), ("a/data/0", &storage)]),
        expect![
            "FILE: at byte 172: data.pkl byte 132: `w`: storage `0` declares 5 elements of F32, more than its 16 bytes"
        ],
    );
    check(
        &torch_zip(&[("a/data.pkl", b"\x80\x02]."), ("a/data/0", &storage)]),
        expect!["FILE: at byte 42: data.pkl byte 2: the checkpoint holds a list, not a mapping of names to tensors"],
    );
    check(
        &torch_zip(&[("a/data.pkl", b"\x80\x02}(X\x01\x00\x00\x00wK\x01X\x01\x00\x00\x00wK\x02u.")]),
        expect!["FILE: at byte 58: data.pkl byte 18: `w` appears twice"],
    );
    check(
        &b"PK\x03\x04 not a zip"[..],
        expect!["FILE: not a readable zip archive: invalid Zip archive: Could not find EOCD"],
    );
    let mut legacy = quantforge::formats::torch::LEGACY_MAGIC.to_vec();
    legacy.extend(b".\x80\x02M\xe8\x03.");
    check(&legacy, expect!["FILE: at byte 15: a legacy checkpoint of protocol 1000, not 1001"]);
}

/// A protobuf field: its key, then the payload as the wire type wants it.
fn field(number: u64, payload: Field) -> Vec<u8> {
    let mut out = Vec::new();
    let (wire, body) = match payload {
        Field::Varint(v) => (0, varint(v)),
        Field::Bytes(bytes) => (2, [varint(bytes.len() as u64), bytes].concat()),
        Field::Fixed32(v) => (5, v.to_le_bytes().to_vec()),
    };
    out.extend(varint(number << 3 | wire));
    out.extend(body);
    out
}

enum Field {
    Varint(u64),
    Bytes(Vec<u8>),
    Fixed32(u32),
}

fn varint(mut v: u64) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(byte);
            return out;
        }
        out.push(byte | 0x80);
    }
}

/// A model of IR version 8 whose graph holds `initializers`.
fn onnx_model(graph: Vec<u8>) -> Vec<u8> {
    [field(1, Field::Varint(8)), field(7, Field::Bytes(graph))].concat()
}

fn initializer(tensor: Vec<u8>) -> Vec<u8> {
    field(5, Field::Bytes(tensor))
}

fn tensor(name: &str, dims: &[i64], data_type: u64, data: Vec<u8>) -> Vec<u8> {
    let mut t: Vec<u8> = dims.iter().flat_map(|&d| field(1, Field::Varint(d as u64))).collect();
    t.extend(field(2, Field::Varint(data_type)));
    t.extend(field(8, Field::Bytes(name.as_bytes().to_vec())));
    t.extend(data);
    t
}

#[test]
fn onnx_models() {
    let raw = |n: usize| field(9, Field::Bytes(vec![0; n]));
    let dir = tempfile::tempdir().unwrap();
    let valid = onnx_model(initializer(tensor("w", &[2, 3], 1, raw(24))));
    let model = ModelFile::open(&common::write_temp(dir.path(), "ok.onnx", &valid), OpenOptions::default()).unwrap();
    assert_eq!((model.tensors.len(), model.tensors[0].dims.as_slice()), (1, &[3, 2][..]));

    check(&[0x08, 0x08, 0x3a, 0x10], expect!["FILE: at byte 3: the graph declares 16 bytes; its message has 0"]);
    check(
        &[0x08, 0x08, 0x3a, 0x02, 0x0b, 0x00],
        expect!["FILE: at byte 4: a graph: wire type 3 (groups are not read)"],
    );
    check(
        &[0x08, 0x08, 0x3a, 0x02, 0x2a, 0x7f],
        expect!["FILE: at byte 5: an initializer declares 127 bytes; its message has 0"],
    );
    check(
        &[0x08, 0x08, 0x3a, 0x0b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
        expect!["FILE: at byte 4: a varint longer than 10 bytes"],
    );
    check(
        &onnx_model(initializer(tensor("w", &[-1], 1, raw(4)))),
        expect!["FILE: at byte 6: tensor `w` has a negative dimension"],
    );
    check(
        &onnx_model(initializer(tensor("w", &[2, 3], 1, raw(20)))),
        expect!["FILE: at byte 6: tensor `w`: raw_data of 20 bytes; FLOAT of shape [2, 3] needs 24"],
    );
    check(
        &onnx_model(initializer(tensor("w", &[2], 1, field(4, Field::Fixed32(0))))),
        expect!["FILE: at byte 6: tensor `w`: 1 value in its typed field; shape [2] holds 2"],
    );
    check(
        &onnx_model(initializer(tensor("w", &[2], 99, raw(8)))),
        expect!["FILE: at byte 6: tensor `w`: data type 99, which no ggml type holds"],
    );
    check(
        &onnx_model(initializer(tensor("w", &[2], 8, field(6, Field::Bytes(b"a".to_vec()))))),
        expect!["FILE: at byte 6: tensor `w`: STRING, which no ggml type holds"],
    );
    check(
        &onnx_model(initializer(tensor("w", &[1, 1, 1, 1, 1], 1, raw(4)))),
        expect!["FILE: at byte 6: tensor `w`: 5 dimensions; ggml holds at most 4"],
    );
    check(
        &onnx_model(initializer(tensor("w", &[1 << 62, 4], 1, raw(4)))),
        expect!["FILE: at byte 6: tensor `w` shape [4611686018427387904, 4] has more elements than fit in 63 bits"],
    );
    check(
        &onnx_model(initializer(tensor("w", &[2], 3, field(5, Field::Bytes([varint(1), varint(300)].concat()))))),
        expect!["FILE: at byte 6: tensor `w`: value 300 does not fit INT8"],
    );
    check(
        &onnx_model([initializer(tensor("w", &[1], 1, raw(4))), initializer(tensor("w", &[1], 1, raw(4)))].concat()),
        expect!["FILE: at byte 21: duplicate tensor name `w`"],
    );
    check(
        &onnx_model(field(15, Field::Bytes(Vec::new()))),
        expect!["FILE: at byte 5: a sparse initializer; sparse tensors are not read"],
    );
    // Subgraphs nested past the limit: an If in an If in an If…
    let mut graph = Vec::new();
    for _ in 0..20 {
        let attribute = [field(1, Field::Bytes(b"then_branch".to_vec())), field(6, Field::Bytes(graph))].concat();
        graph = field(
            1,
            Field::Bytes([field(4, Field::Bytes(b"If".to_vec())), field(5, Field::Bytes(attribute))].concat()),
        );
    }
    check(&onnx_model(graph), expect!["FILE: at byte 439: subgraphs nested deeper than 16"]);
    let constant = [field(2, Field::Bytes(b"c".to_vec())), field(4, Field::Bytes(b"Constant".to_vec()))].concat();
    check(
        &onnx_model(field(1, Field::Bytes(constant))),
        expect![
            "FILE: at byte 6: a Constant node without a value, value_float(s) or value_int(s); others are not read"
        ],
    );
    let external = [
        field(14, Field::Varint(1)),
        field(
            13,
            Field::Bytes(
                [field(1, Field::Bytes(b"location".to_vec())), field(2, Field::Bytes(b"w.bin".to_vec()))].concat(),
            ),
        ),
    ]
    .concat();
    check(
        &onnx_model(initializer(tensor("w", &[2], 1, external))),
        expect!["FILE: at byte 6: tensor `w`: external data file `w.bin`: no such file or directory"],
    );
}
