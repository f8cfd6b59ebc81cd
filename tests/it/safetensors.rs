//! SafeTensors: the malformed-file corpus (generated here, opened through
//! both access paths, each with its exact message), every dtype and its
//! conversion on read, the writer's layout, sharded indexes, and differential
//! tests against the reference implementation (Python `safetensors`): its
//! files read the same, our writer's bytes equal its, and the real
//! all-MiniLM-L6-v2 checkpoint reads and re-serializes byte for byte.

use crate::common;

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::path::Path;

use expect_test::{Expect, expect};
use half::f16;
use quantforge::formats::safetensors::{
    Dtype, METADATA_PREFIX, SafeTensorsEntry, header_bytes, read_index, safetensors_metadata, write_safetensors,
};
use quantforge::formats::{ContainerFormat, ModelFile, OpenOptions, TensorDataSource};
use quantforge::model::{StoredLayout, TensorInfo, Value};
use quantforge::types::GgmlType;
use serde_json::{Value as Json, json};

/// A SafeTensors file: the header length, `json` as the header, then `data`.
fn file(json: &str, data: &[u8]) -> Vec<u8> {
    let mut out = (json.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(json.as_bytes());
    out.extend_from_slice(data);
    out
}

/// Opens `path` both ways and checks the error message, with the path
/// replaced by `FILE`.
fn check_path(path: &Path, expected: Expect) {
    let mut messages = Vec::new();
    for use_mmap in [true, false] {
        let err = ModelFile::open(path, OpenOptions { use_mmap }).expect_err("malformed file must not load");
        messages.push(err.to_string().replace(&path.display().to_string(), "FILE"));
    }
    assert_eq!(messages[0], messages[1], "mmap and read paths disagree");
    expected.assert_eq(&messages[0]);
}

fn check(bytes: &[u8], expected: Expect) {
    let dir = tempfile::tempdir().unwrap();
    check_path(&common::write_temp(dir.path(), "bad.safetensors", bytes), expected);
}

/// Checks the message for one tensor entry `{"t": <entry>}` over `data`.
fn check_entry(entry: &str, data: &[u8], expected: Expect) {
    check(&file(&format!(r#"{{"t":{entry}}}"#), data), expected);
}

fn open_both(bytes: &[u8], check: impl Fn(&ModelFile)) {
    let dir = tempfile::tempdir().unwrap();
    let path = common::write_temp(dir.path(), "ok.safetensors", bytes);
    for use_mmap in [true, false] {
        check(&ModelFile::open(&path, OpenOptions { use_mmap }).unwrap());
    }
}

/// A small valid file: metadata, two tensors, one of them converted on read.
fn valid_file() -> Vec<u8> {
    let json = r#"{"__metadata__":{"format":"pt"},"w":{"dtype":"F16","shape":[2,3],"data_offsets":[0,12]},"mask":{"dtype":"BOOL","shape":[4],"data_offsets":[12,16]}}"#;
    file(json, &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 0, 1, 0, 1])
}

#[test]
fn valid_file_reads() {
    open_both(&valid_file(), |model| {
        assert_eq!(model.format, ContainerFormat::SafeTensors);
        assert_eq!(model.format.to_string(), "SafeTensors");
        assert_eq!(model.data_offset, 8 + 147);
        let names: Vec<&str> = model.tensors.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["w", "mask"]);
        assert_eq!(model.tensors[0].dims, [3, 2]);
        assert_eq!(model.tensors[0].ggml_type, GgmlType::F16);
        assert_eq!(model.tensors[0].layout, StoredLayout::Native);
        assert_eq!(model.tensors[1].ggml_type, GgmlType::I8);
        assert_eq!(model.tensor_data(&model.tensors[1]).unwrap().as_ref(), [0, 1, 0, 1]);
        let metadata: Vec<(&str, &Value)> = model.metadata.iter().collect();
        assert_eq!(metadata, [("safetensors.metadata.format", &Value::string("pt"))]);
        assert!(!model.has_legacy_blocks());
    });
}

#[test]
fn every_truncation_is_an_error() {
    let bytes = valid_file();
    let dir = tempfile::tempdir().unwrap();
    for cut in 0..bytes.len() {
        let path = common::write_temp(dir.path(), "cut.safetensors", &bytes[..cut]);
        for use_mmap in [true, false] {
            assert!(ModelFile::open(&path, OpenOptions { use_mmap }).is_err(), "truncated at {cut} bytes must fail");
        }
    }
}

#[test]
fn flipped_bytes_never_panic() {
    let json = r#"{"__metadata__":{"a":"b"},"x":{"dtype":"F8_E4M3","shape":[2,2],"data_offsets":[0,4]},"y":{"dtype":"U16","shape":[],"data_offsets":[4,6]},"z":{"dtype":"F32","shape":[1],"data_offsets":[6,10]}}"#;
    let valid = file(json, &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    let dir = tempfile::tempdir().unwrap();
    let noise = common::noise(7, 3 * 3000);
    for flips in noise.chunks_exact(9) {
        let mut bytes = valid.clone();
        for flip in flips.chunks_exact(3) {
            let at = usize::from(u16::from_le_bytes([flip[0], flip[1]])) % bytes.len();
            bytes[at] = flip[2];
        }
        let path = common::write_temp(dir.path(), "flipped.safetensors", &bytes);
        for use_mmap in [true, false] {
            if let Ok(model) = ModelFile::open(&path, OpenOptions { use_mmap }) {
                for tensor in &model.tensors {
                    model.tensor_data(tensor).unwrap();
                }
            }
        }
    }
}

#[test]
fn header_length() {
    // Longer than the file, within what SafeTensors allows: a cut-off file.
    check(&file("{}", b"")[..9], expect!["FILE: at byte 8: file ends early: the JSON header needs 2 bytes, 1 left"]);
    let mut long = 1000u64.to_le_bytes().to_vec();
    long.extend_from_slice(b"{}");
    check(&long, expect!["FILE: at byte 8: file ends early: the JSON header needs 1000 bytes, 2 left"]);
    // Over the reference's 100 MB limit, in a (sparse) file long enough.
    let dir = tempfile::tempdir().unwrap();
    let mut huge = 100_000_001u64.to_le_bytes().to_vec();
    huge.extend_from_slice(b"{}");
    let path = common::write_temp(dir.path(), "huge.safetensors", &huge);
    std::fs::File::options().write(true).open(&path).unwrap().set_len(100_000_100).unwrap();
    check_path(
        &path,
        expect![[
            "FILE: at byte 0: the header length is 100000001 bytes; SafeTensors readers refuse headers over 100000000"
        ]],
    );
    // Over the limit and past the end: still SafeTensors, with its length named.
    check(
        &huge,
        expect![[
            "FILE: at byte 0: the header length is 100000001 bytes; SafeTensors readers refuse headers over 100000000"
        ]],
    );
}

#[test]
fn header_text() {
    check(&file(r#"{"t":}"#, b""), expect!["FILE: at byte 13: tensor `t` must be an object, found `}`"]);
    check(&file("{\"\u{e9}\":1}", b""), expect!["FILE: at byte 14: tensor `é` must be an object, found a number"]);
    let mut bad_utf8 = file(r#"{"ab":1}"#, b"");
    bad_utf8[11] = 0xff;
    check(&bad_utf8, expect!["FILE: at byte 11: the JSON header is not valid UTF-8"]);
    check(
        &file("{} x", b""),
        expect!["FILE: at byte 11: invalid JSON: expected the end after the top-level value, found `x`"],
    );
    check(
        &file(r#"{"__metadata__":{},}"#, b""),
        expect!["FILE: at byte 27: invalid JSON: expected a string key, found `}`"],
    );
    check(&file(r#"{"t":"x"}"#, b""), expect!["FILE: at byte 13: tensor `t` must be an object, found a string"]);
    check(
        &file(r#"{"\ud800":{}}"#, b""),
        expect!["FILE: at byte 10: invalid JSON: a `\\u` escape is half of a UTF-16 surrogate pair"],
    );
    let deep = format!(
        r#"{{"t":{{"dtype":"U8","shape":[0],"data_offsets":[0,0],"x":{}{}}}}}"#,
        "[".repeat(127),
        "]".repeat(127)
    );
    check(&file(&deep, b""), expect!["FILE: at byte 190: JSON nests deeper than 128 levels"]);
}

#[test]
fn unknown_fields_are_skipped_and_padding_is_whitespace() {
    let json =
        r#"{"t":{"extra":{"a":[1,2.5e3,null,true]},"dtype":"U8","shape":[2],"data_offsets":[0,2],"more":"x"}}    "#;
    open_both(&file(json, &[7, 200]), |model| {
        assert_eq!(model.tensors.len(), 1);
        assert_eq!(model.tensor_data(&model.tensors[0]).unwrap().as_ref(), [7, 0, 200, 0]);
    });
}

#[test]
fn field_types() {
    let data = [0u8; 4];
    check_entry(
        r#"{"dtype":4,"shape":[4],"data_offsets":[0,4]}"#,
        &data,
        expect!["FILE: at byte 22: the dtype of tensor `t` must be a string, found a number"],
    );
    check_entry(
        r#"{"dtype":"U8","shape":"4","data_offsets":[0,4]}"#,
        &data,
        expect!["FILE: at byte 35: the shape of tensor `t` must be an array, found a string"],
    );
    check_entry(
        r#"{"dtype":"U8","shape":["4"],"data_offsets":[0,4]}"#,
        &data,
        expect!["FILE: at byte 36: dimension 0 of tensor `t` must be a non-negative integer, found a string"],
    );
    check_entry(
        r#"{"dtype":"U8","shape":[4],"data_offsets":{"begin":0}}"#,
        &data,
        expect!["FILE: at byte 54: the data_offsets of tensor `t` must be an array, found an object"],
    );
    check_entry(
        r#"{"dtype":"U8","shape":[4],"data_offsets":[0,null]}"#,
        &data,
        expect!["FILE: at byte 57: data_offsets[1] of tensor `t` must be a non-negative integer, found null"],
    );
    check(
        &file(r#"{"__metadata__":{"a":1}}"#, b""),
        expect!["FILE: at byte 29: `__metadata__` entry `a` must be a string, found a number"],
    );
    check(
        &file(r#"{"__metadata__":["a"]}"#, b""),
        expect!["FILE: at byte 24: `__metadata__` must be an object, found an array"],
    );
    open_both(&file(r#"{"__metadata__":null}"#, b""), |model| assert!(model.metadata.is_empty()));
}

#[test]
fn dtypes() {
    check_entry(
        r#"{"dtype":"Q4_0","shape":[4],"data_offsets":[0,4]}"#,
        &[0; 4],
        expect!["FILE: at byte 22: tensor `t` has unknown dtype `Q4_0`"],
    );
    check_entry(
        r#"{"dtype":"f32","shape":[1],"data_offsets":[0,4]}"#,
        &[0; 4],
        expect!["FILE: at byte 22: tensor `t` has unknown dtype `f32`"],
    );
    let dir = tempfile::tempdir().unwrap();
    for (dtype, bytes) in [("U64", 8), ("C64", 8), ("F4", 1), ("F6_E2M3", 1)] {
        let json = format!(r#"{{"t":{{"dtype":"{dtype}","shape":[],"data_offsets":[0,{bytes}]}}}}"#);
        let path = common::write_temp(dir.path(), "refused.safetensors", &file(&json, &vec![0; bytes]));
        let message = ModelFile::open(&path, OpenOptions::default()).unwrap_err().kind.to_string();
        assert_eq!(
            message,
            format!(
                "tensor `t` has dtype {dtype}, which no ggml type holds (readable: BOOL, U8, I8, F8_E5M2, F8_E4M3, \
                 F8_E8M0, F8_E4M3FNUZ, F8_E5M2FNUZ, I16, U16, F16, BF16, I32, U32, F32, F64, I64)"
            )
        );
    }
}

#[test]
fn shapes() {
    check_entry(
        r#"{"dtype":"U8","shape":[-1],"data_offsets":[0,0]}"#,
        b"",
        expect!["FILE: at byte 36: dimension 0 of tensor `t` must be a non-negative integer below 2^64, found -1"],
    );
    check_entry(
        r#"{"dtype":"U8","shape":[2.5],"data_offsets":[0,0]}"#,
        b"",
        expect!["FILE: at byte 36: dimension 0 of tensor `t` must be a non-negative integer below 2^64, found 2.5"],
    );
    check_entry(
        r#"{"dtype":"U8","shape":[1,2e1],"data_offsets":[0,20]}"#,
        &[0; 20],
        expect!["FILE: at byte 38: dimension 1 of tensor `t` must be a non-negative integer below 2^64, found 2e1"],
    );
    check_entry(
        r#"{"dtype":"U8","shape":[18446744073709551616],"data_offsets":[0,0]}"#,
        b"",
        expect![
            "FILE: at byte 36: dimension 0 of tensor `t` must be a non-negative integer below 2^64, found 18446744073709551616"
        ],
    );
    check_entry(
        r#"{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,0]}"#,
        b"",
        expect!["FILE: at byte 35: tensor `t` shape [4294967296, 4294967296] has more elements than fit in 63 bits"],
    );
    check_entry(
        r#"{"dtype":"F64","shape":[2305843009213693952,2],"data_offsets":[0,0]}"#,
        b"",
        expect![
            "FILE: at byte 36: tensor `t` of dtype F64 and shape [2305843009213693952, 2] needs 2^64 bytes or more"
        ],
    );
    check_entry(
        r#"{"dtype":"U8","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,1]}"#,
        &[0],
        expect!["FILE: at byte 52: tensor `t` has more than 8 dimensions"],
    );
    let json = r#"{"scalar":{"dtype":"F32","shape":[],"data_offsets":[0,4]},"empty":{"dtype":"F32","shape":[0,3],"data_offsets":[4,4]},"b":{"dtype":"U8","shape":[2,1,3,1],"data_offsets":[4,10]}}"#;
    open_both(&file(json, &[0, 0, 128, 63, 1, 2, 3, 4, 5, 6]), |model| {
        let shapes: Vec<(&str, &[u64])> = model.tensors.iter().map(|t| (t.name.as_str(), &t.dims[..])).collect();
        assert_eq!(shapes, [("scalar", &[1][..]), ("empty", &[3, 0][..]), ("b", &[1, 3, 1, 2][..])]);
        assert_eq!(model.tensor_data(&model.tensors[0]).unwrap().as_ref(), 1.0f32.to_le_bytes());
        assert!(model.tensor_data(&model.tensors[1]).unwrap().is_empty());
    });
}

#[test]
fn data_offsets() {
    check_entry(
        r#"{"dtype":"U8","shape":[4],"data_offsets":[0,3]}"#,
        &[0; 3],
        expect!["FILE: at byte 54: tensor `t` has data_offsets [0, 3] (3 bytes), but dtype U8 and shape [4] need 4"],
    );
    check_entry(
        r#"{"dtype":"F32","shape":[2,3],"data_offsets":[0,12]}"#,
        &[0; 12],
        expect![
            "FILE: at byte 57: tensor `t` has data_offsets [0, 12] (12 bytes), but dtype F32 and shape [2, 3] need 24"
        ],
    );
    check_entry(
        r#"{"dtype":"U8","shape":[0],"data_offsets":[4,0]}"#,
        &[0; 4],
        expect!["FILE: at byte 54: tensor `t` has data_offsets [4, 0], which end before they begin"],
    );
    check_entry(
        r#"{"dtype":"U8","shape":[0],"data_offsets":[0]}"#,
        b"",
        expect!["FILE: at byte 54: the data_offsets of tensor `t` must be [begin, end], found 1 number"],
    );
    check_entry(
        r#"{"dtype":"U8","shape":[0],"data_offsets":[0,0,0]}"#,
        b"",
        expect!["FILE: at byte 59: the data_offsets of tensor `t` must be [begin, end], found more than 2 numbers"],
    );
}

#[test]
fn placement() {
    let two = |a: [u64; 2], b: [u64; 2]| {
        format!(
            r#"{{"a":{{"dtype":"U8","shape":[{}],"data_offsets":[{},{}]}},"b":{{"dtype":"U8","shape":[{}],"data_offsets":[{},{}]}}}}"#,
            a[1] - a[0],
            a[0],
            a[1],
            b[1] - b[0],
            b[0],
            b[1]
        )
    };
    check(
        &file(&two([0, 4], [4, 9]), &[0; 8]),
        expect!["FILE: at byte 61: tensor `b` data [117, 122) lies outside the file (121 bytes)"],
    );
    check(&file(&two([0, 4], [2, 6]), &[0; 6]), expect!["FILE: at byte 61: tensor `b` data overlaps tensor `a`"]);
    check(&file(&two([4, 8], [0, 6]), &[0; 8]), expect!["FILE: at byte 9: tensor `a` data overlaps tensor `b`"]);
    check(
        &file(&two([0, 4], [6, 8]), &[0; 8]),
        expect![
            "FILE: at byte 117: bytes 117..119 belong to no tensor; SafeTensors tensors must cover the data section exactly"
        ],
    );
    check(
        &file(&two([2, 4], [4, 8]), &[0; 8]),
        expect![
            "FILE: at byte 113: bytes 113..115 belong to no tensor; SafeTensors tensors must cover the data section exactly"
        ],
    );
    check(
        &file(&two([0, 4], [4, 8]), &[0; 9]),
        expect![
            "FILE: at byte 121: bytes 121..122 belong to no tensor; SafeTensors tensors must cover the data section exactly"
        ],
    );
    check(
        &file("{}", b"x"),
        expect![
            "FILE: at byte 10: bytes 10..11 belong to no tensor; SafeTensors tensors must cover the data section exactly"
        ],
    );
    // Zero-size tensors may share an offset with the tensor that starts there.
    open_both(&file(&two([0, 0], [0, 8]), &[0; 8]), |model| assert_eq!(model.tensors.len(), 2));
    // A zero-size tensor inside another is an overlap, as the reference says.
    check(&file(&two([0, 8], [4, 4]), &[0; 8]), expect!["FILE: at byte 61: tensor `b` data overlaps tensor `a`"]);
}

#[test]
fn names_and_keys() {
    let t = r#"{"dtype":"U8","shape":[0],"data_offsets":[0,0]}"#;
    check(&file(&format!(r#"{{"t":{t},"t":{t}}}"#), b""), expect!["FILE: at byte 61: duplicate tensor name `t`"]);
    check(
        &file(r#"{"__metadata__":{},"__metadata__":null}"#, b""),
        expect!["FILE: at byte 27: duplicate metadata key `__metadata__`"],
    );
    check(&file(r#"{"__metadata__":{"k":"1","k":"2"}}"#, b""), expect!["FILE: at byte 33: duplicate metadata key `k`"]);
    check_entry(
        r#"{"dtype":"U8","dtype":"U8","shape":[0],"data_offsets":[0,0]}"#,
        b"",
        expect!["FILE: at byte 27: tensor `t` has `dtype` twice"],
    );
    check_entry(r#"{"dtype":"U8","data_offsets":[0,0]}"#, b"", expect!["FILE: at byte 9: tensor `t` has no `shape`"]);
    check_entry(r#"{"shape":[],"data_offsets":[0,0]}"#, b"", expect!["FILE: at byte 9: tensor `t` has no `dtype`"]);
    check_entry(r#"{"dtype":"U8","shape":[0]}"#, b"", expect!["FILE: at byte 9: tensor `t` has no `data_offsets`"]);
    let escaped = r#"{"__metadata__":{"k\n\u00e9":"v\"\u0001"},"a\/b\t\ud83d\ude00":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}"#;
    open_both(&file(escaped, b""), |model| {
        assert_eq!(model.tensors[0].name, "a/b\t😀");
        assert_eq!(model.metadata.get_str("safetensors.metadata.k\né"), Some("v\"\u{1}"));
    });
}

/// Every tensor's bytes through every way of reading them agree.
fn check_access_paths(model: &ModelFile) {
    for tensor in &model.tensors {
        let all = model.tensor_data(tensor).unwrap().into_owned();
        assert_eq!(all.len() as u64, tensor.n_bytes(), "{}", tensor.name);
        let n = all.len() as u64;
        for offset in 0..=n {
            let lens = (0..=8).chain([n - offset]).filter(|&len| len <= n - offset);
            for len in lens {
                let part = model.tensor_data_range(tensor, offset, len).unwrap();
                assert_eq!(
                    part.as_ref(),
                    &all[offset as usize..(offset + len) as usize],
                    "{} {offset}+{len}",
                    tensor.name
                );
            }
        }
        assert!(model.tensor_data_range(tensor, n, 1).is_err(), "{}: reading past the end must fail", tensor.name);
        let mut copied = Vec::new();
        model.copy_tensor_data(tensor, &mut copied).unwrap();
        assert_eq!(copied, all, "{}", tensor.name);
        let out = tempfile::NamedTempFile::new().unwrap();
        model.copy_tensor_data_to_file_at(tensor, out.as_file(), 0).unwrap();
        assert_eq!(std::fs::read(out.path()).unwrap(), all, "{}", tensor.name);
        model.release_tensor_range(tensor, 0, n);
    }
}

struct Slices(Vec<Vec<u8>>);

impl TensorDataSource for Slices {
    fn write_tensor(&mut self, tensor_idx: usize, out: &mut dyn Write) -> io::Result<()> {
        out.write_all(&self.0[tensor_idx])
    }
}

fn entry(name: &str, dtype: Dtype, shape: &[u64]) -> SafeTensorsEntry {
    SafeTensorsEntry { name: name.into(), dtype, shape: shape.to_vec() }
}

fn write_to_vec(entries: &[SafeTensorsEntry], data: Vec<Vec<u8>>, metadata: Option<&[(String, String)]>) -> Vec<u8> {
    let mut out = Vec::new();
    let layout = write_safetensors(&mut out, entries, metadata, &mut Slices(data)).unwrap();
    assert_eq!(layout.file_len, out.len() as u64);
    assert_eq!(layout, header_bytes(entries, metadata).unwrap());
    out
}

/// A dtype, a shape, stored bytes, the ggml type it reads as, and whether
/// it is converted on read.
type DtypeCase = (Dtype, Vec<u64>, Vec<u8>, GgmlType, bool);

#[test]
fn every_readable_dtype_and_its_conversion() {
    let codes: Vec<u8> = (0..=255).collect();
    let u16s: Vec<u8> = [0u16, 1, 0x8000, 0xffff].iter().flat_map(|v| v.to_le_bytes()).collect();
    let u32s: Vec<u8> = [0u32, 0x8000_0000, u32::MAX].iter().flat_map(|v| v.to_le_bytes()).collect();
    let cases: Vec<DtypeCase> = vec![
        (Dtype::F64, vec![2], (0..16).collect(), GgmlType::F64, false),
        (Dtype::F32, vec![1, 3], (0..12).collect(), GgmlType::F32, false),
        (Dtype::F16, vec![3], (0..6).collect(), GgmlType::F16, false),
        (Dtype::BF16, vec![2, 2], (0..8).collect(), GgmlType::BF16, false),
        (Dtype::I64, vec![1], (0..8).collect(), GgmlType::I64, false),
        (Dtype::I32, vec![2], (0..8).collect(), GgmlType::I32, false),
        (Dtype::I16, vec![2], (0..4).collect(), GgmlType::I16, false),
        (Dtype::I8, vec![5], (0..5).collect(), GgmlType::I8, false),
        (Dtype::U8, vec![2, 2], vec![0, 1, 128, 255], GgmlType::I16, true),
        (Dtype::Bool, vec![4], vec![0, 1, 2, 255], GgmlType::I8, true),
        (Dtype::U16, vec![4], u16s, GgmlType::I32, true),
        (Dtype::U32, vec![3], u32s, GgmlType::I64, true),
        (Dtype::F8E4M3, vec![16, 16], codes.clone(), GgmlType::F16, true),
        (Dtype::F8E5M2, vec![256], codes.clone(), GgmlType::F16, true),
        (Dtype::F8E4M3Fnuz, vec![2, 128], codes.clone(), GgmlType::F16, true),
        (Dtype::F8E5M2Fnuz, vec![256], codes.clone(), GgmlType::F16, true),
        (Dtype::F8E8M0, vec![256], codes, GgmlType::F32, true),
    ];
    let entries: Vec<SafeTensorsEntry> =
        cases.iter().map(|(dtype, shape, _, _, _)| entry(&format!("t.{dtype}"), *dtype, shape)).collect();
    let bytes = write_to_vec(&entries, cases.iter().map(|c| c.2.clone()).collect(), None);
    open_both(&bytes, |model| {
        for (dtype, shape, stored, ty, converted) in &cases {
            let name = format!("t.{dtype}");
            let tensor = model.tensors.iter().find(|t| t.name == name).unwrap();
            assert_eq!(tensor.ggml_type, *ty, "{name}");
            assert_eq!(tensor.dims, shape.iter().rev().copied().collect::<Vec<_>>(), "{name}");
            assert_eq!(tensor.stored_len, stored.len() as u64, "{name}");
            assert_eq!(matches!(tensor.layout, StoredLayout::Converted(_)), *converted, "{name}");
            let data = model.tensor_data(tensor).unwrap();
            match dtype {
                Dtype::U8 => assert_eq!(data.as_ref(), [0, 0, 1, 0, 128, 0, 255, 0]),
                Dtype::Bool => assert_eq!(data.as_ref(), [0, 1, 1, 1]),
                Dtype::U16 => assert_eq!(data.as_ref(), [0, 0, 0, 0, 1, 0, 0, 0, 0, 0x80, 0, 0, 0xff, 0xff, 0, 0]),
                Dtype::U32 => assert_eq!(
                    data.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().unwrap())).collect::<Vec<_>>(),
                    [0, 0x8000_0000, 0xffff_ffff]
                ),
                Dtype::F8E4M3 => {
                    let halves: Vec<f16> = data.chunks_exact(2).map(|c| f16::from_le_bytes([c[0], c[1]])).collect();
                    assert_eq!(halves[0x38], f16::ONE);
                    assert_eq!(halves[0x7e].to_f32(), 448.0);
                    assert!(halves[0x7f].is_nan() && halves[0xff].is_nan());
                }
                Dtype::F8E5M2 => assert_eq!(
                    data.as_ref(),
                    (0..=255u8).flat_map(|c| (u16::from(c) << 8).to_le_bytes()).collect::<Vec<_>>()
                ),
                _ if !converted => assert_eq!(data.as_ref(), stored.as_slice()),
                _ => {}
            }
        }
        check_access_paths(model);
    });
}

#[test]
fn inspect_names_the_format() {
    let dir = tempfile::tempdir().unwrap();
    let path = common::write_temp(dir.path(), "m.safetensors", &valid_file());
    let args = ["inspect", "--json", "--tensors"].map(std::ffi::OsStr::new);
    let output = common::quantforge(&[&args[..], &[path.as_os_str()]].concat());
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let report: Json = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        (&report["format"], &report["version"], &report["data_offset"]),
        (&json!("SafeTensors"), &json!(0), &json!(155))
    );
    assert_eq!(report["metadata"][0]["key"], "safetensors.metadata.format");
    assert_eq!(
        report["tensors"][1],
        json!({"name": "mask", "type": "I8", "shape": [4], "offset": 167, "bytes": 4, "role": "other"})
    );
}

#[test]
fn writer_round_trips_through_the_reader() {
    let tensors = [
        TensorInfo::new("layers.10.w", vec![3, 2], GgmlType::F16),
        TensorInfo::new("layers.9.w", vec![3, 2], GgmlType::F16),
        TensorInfo::new("Embed", vec![4], GgmlType::F32),
        TensorInfo::new("ids", vec![2], GgmlType::I64),
        TensorInfo::new("bf", vec![1], GgmlType::BF16),
    ];
    let entries: Vec<SafeTensorsEntry> = tensors.iter().map(|t| SafeTensorsEntry::from_tensor(t).unwrap()).collect();
    assert_eq!(entries[0].shape, [2, 3]);
    let data: Vec<Vec<u8>> = tensors.iter().enumerate().map(|(i, t)| vec![i as u8 + 1; t.n_bytes() as usize]).collect();
    let metadata = vec![("z".to_string(), "first".to_string()), ("a".to_string(), "second".to_string())];
    let bytes = write_to_vec(&entries, data.clone(), Some(&metadata));
    open_both(&bytes, |model| {
        let order: Vec<&str> = model.tensors.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(order, ["ids", "Embed", "bf", "layers.10.w", "layers.9.w"]);
        for (tensor, bytes) in tensors.iter().zip(&data) {
            let ours = model.tensors.iter().find(|t| t.name == tensor.name).unwrap();
            assert_eq!((&ours.dims, ours.ggml_type), (&tensor.dims, tensor.ggml_type));
            assert_eq!(model.tensor_data(ours).unwrap().as_ref(), bytes.as_slice());
        }
        assert_eq!(safetensors_metadata(&model.metadata).unwrap(), metadata);
    });
    // A source that writes the wrong number of bytes is caught.
    let mut short = data;
    short[4].pop();
    let err = write_safetensors(&mut Vec::new(), &entries, None, &mut Slices(short)).unwrap_err();
    assert_eq!(err.to_string(), "tensor `bf`: wrote 1 bytes, expected 2");
}

#[test]
fn metadata_for_writing_is_the_prefixed_strings_only() {
    let mut metadata = quantforge::model::Metadata::new();
    metadata.set("general.name", Value::string("x"));
    metadata.set(&format!("{METADATA_PREFIX}format"), Value::string("pt"));
    assert_eq!(safetensors_metadata(&metadata).unwrap(), [("format".to_string(), "pt".to_string())]);
    metadata.set(&format!("{METADATA_PREFIX}n"), Value::U32(1));
    assert_eq!(
        safetensors_metadata(&metadata).unwrap_err().to_string(),
        "metadata key `safetensors.metadata.n` is not a UTF-8 string, which SafeTensors metadata must be"
    );
}

#[test]
fn sharded_index() {
    let dir = tempfile::tempdir().unwrap();
    for shard in ["model-00002-of-00002.safetensors", "model-00001-of-00002.safetensors"] {
        common::write_temp(dir.path(), shard, b"");
    }
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    common::write_temp(&dir.path().join("sub"), "extra.safetensors", b"");
    let index = r#"{
  "metadata": {"total_size": 1234, "nested": {"a": [1, "b"]}},
  "weight_map": {
    "lm_head.weight": "model-00002-of-00002.safetensors",
    "model.embed.weight": "model-00001-of-00002.safetensors",
    "model.norm.weight": "model-00002-of-00002.safetensors",
    "extra": "sub/extra.safetensors"
  },
  "ignored": true
}"#;
    let path = common::write_temp(dir.path(), "model.safetensors.index.json", index.as_bytes());
    let read = read_index(&path).unwrap();
    assert_eq!(
        read.metadata,
        [("total_size".to_string(), "1234".to_string()), ("nested".to_string(), r#"{"a": [1, "b"]}"#.to_string())]
    );
    assert_eq!(read.weight_map.len(), 4);
    assert_eq!(read.weight_map[0], ("lm_head.weight".to_string(), "model-00002-of-00002.safetensors".to_string()));
    assert_eq!(
        read.shards(),
        [
            dir.path().join("model-00001-of-00002.safetensors"),
            dir.path().join("model-00002-of-00002.safetensors"),
            dir.path().join("sub/extra.safetensors"),
        ]
    );

    let check_index = |text: &str, expected: Expect| {
        let path = common::write_temp(dir.path(), "bad.index.json", text.as_bytes());
        let message = read_index(&path).unwrap_err().to_string().replace(&path.display().to_string(), "FILE");
        expected.assert_eq(&message);
    };
    check_index(r#"{"metadata":{}}"#, expect!["FILE: at byte 0: the index has no `weight_map`"]);
    check_index(
        r#"{"weight_map":{"a":"missing.safetensors"}}"#,
        expect!["FILE: at byte 19: tensor `a` is in shard `missing.safetensors`, which is not a file beside the index"],
    );
    check_index(
        r#"{"weight_map":{"a":"sub"}}"#,
        expect!["FILE: at byte 19: tensor `a` is in shard `sub`, which is not a file beside the index"],
    );
    for bad in ["../model-00001-of-00002.safetensors", "/etc/passwd", "", "./x", "sub/../x"] {
        let text = format!(r#"{{"weight_map":{{"a":"{bad}"}}}}"#);
        let path = common::write_temp(dir.path(), "bad.index.json", text.as_bytes());
        assert_eq!(
            read_index(&path).unwrap_err().kind.to_string(),
            format!("tensor `a` is in shard `{bad}`, which is not a relative path below the index's directory")
        );
    }
    check_index(
        r#"{"weight_map":{"a":"model-00001-of-00002.safetensors","a":"model-00001-of-00002.safetensors"}}"#,
        expect!["FILE: at byte 54: duplicate tensor name `a`"],
    );
    check_index(
        r#"{"weight_map":{"a":1}}"#,
        expect!["FILE: at byte 19: the shard of tensor `a` must be a string, found a number"],
    );
    check_index(r#"{"weight_map":[]}"#, expect!["FILE: at byte 14: `weight_map` must be an object, found an array"]);
    check_index(r#"{"weight_map":{},"weight_map":{}}"#, expect!["FILE: at byte 17: the index has `weight_map` twice"]);
    check_index("[]", expect!["FILE: at byte 0: the index must be an object, found an array"]);
}

// The reference implementation.

/// The ggml type our reader should give a dtype, and whether it converts.
fn expected_type(dtype: &str) -> (GgmlType, bool) {
    match dtype {
        "F64" => (GgmlType::F64, false),
        "F32" => (GgmlType::F32, false),
        "F16" => (GgmlType::F16, false),
        "BF16" => (GgmlType::BF16, false),
        "I64" => (GgmlType::I64, false),
        "I32" => (GgmlType::I32, false),
        "I16" => (GgmlType::I16, false),
        "I8" => (GgmlType::I8, false),
        "U8" => (GgmlType::I16, true),
        "BOOL" => (GgmlType::I8, true),
        "U16" => (GgmlType::I32, true),
        "U32" => (GgmlType::I64, true),
        "F8_E8M0" => (GgmlType::F32, true),
        "F8_E4M3" | "F8_E5M2" | "F8_E4M3FNUZ" | "F8_E5M2FNUZ" => (GgmlType::F16, true),
        other => panic!("the fixtures have no readable {other}"),
    }
}

/// Converted elements against the values the reference script decoded
/// (floats as the bits of the f64 they equal, NaN as "nan").
fn check_values(name: &str, ty: GgmlType, data: &[u8], values: &[Json]) {
    let float = |x: f64| if x.is_nan() { json!("nan") } else { json!(x.to_bits()) };
    let ours: Vec<Json> = match ty {
        GgmlType::F16 => data.chunks_exact(2).map(|c| float(f16::from_le_bytes([c[0], c[1]]).to_f64())).collect(),
        GgmlType::F32 => {
            data.chunks_exact(4).map(|c| float(f32::from_le_bytes(c.try_into().unwrap()).into())).collect()
        }
        GgmlType::I8 => data.iter().map(|&b| json!(b as i8)).collect(),
        GgmlType::I16 => data.chunks_exact(2).map(|c| json!(i16::from_le_bytes([c[0], c[1]]))).collect(),
        GgmlType::I32 => data.chunks_exact(4).map(|c| json!(i32::from_le_bytes(c.try_into().unwrap()))).collect(),
        GgmlType::I64 => data.chunks_exact(8).map(|c| json!(i64::from_le_bytes(c.try_into().unwrap()))).collect(),
        other => panic!("{name}: no conversion gives {other}"),
    };
    assert_eq!(ours.len(), values.len(), "{name}");
    for (i, (ours, theirs)) in ours.iter().zip(values).enumerate() {
        assert_eq!(ours, theirs, "{name}[{i}]");
    }
}

/// Our reading of `path` against the reference's, tensor by tensor and byte
/// for byte.
fn check_against_reference(python: &str, path: &Path) {
    let dir = tempfile::tempdir().unwrap();
    let blob_path = dir.path().join("blob");
    let theirs: Json =
        serde_json::from_str(&common::run_python(python, "tests/safetensors/dump.py".as_ref(), &[path, &blob_path]))
            .unwrap();
    let blob = std::fs::read(&blob_path).unwrap();
    let file_bytes = std::fs::read(path).unwrap();
    let model = ModelFile::open(path, OpenOptions::default()).unwrap();
    let what = path.display();
    assert_eq!(model.format, ContainerFormat::SafeTensors);

    let their_tensors = theirs["tensors"].as_array().unwrap();
    let names: Vec<&str> = model.tensors.iter().map(|t| t.name.as_str()).collect();
    let their_names: Vec<&str> = their_tensors.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, their_names, "{what}: tensors in offset order");
    for (ours, theirs) in model.tensors.iter().zip(their_tensors) {
        let name = &ours.name;
        let shape: Vec<u64> = theirs["shape"].as_array().unwrap().iter().map(|d| d.as_u64().unwrap()).collect();
        let dims: Vec<u64> = if shape.is_empty() { vec![1] } else { shape.iter().rev().copied().collect() };
        assert_eq!(ours.dims, dims, "{what}: {name}");
        let (ty, converted) = expected_type(theirs["dtype"].as_str().unwrap());
        assert_eq!(ours.ggml_type, ty, "{what}: {name}");
        assert_eq!(matches!(ours.layout, StoredLayout::Converted(_)), converted, "{what}: {name}");
        let (start, len) = (theirs["blob_offset"].as_u64().unwrap() as usize, theirs["len"].as_u64().unwrap() as usize);
        let their_bytes = &blob[start..start + len];
        let stored = &file_bytes[ours.file_offset as usize..][..ours.stored_len as usize];
        assert!(stored == their_bytes, "{what}: {name}: stored bytes differ");
        let data = model.tensor_data(ours).unwrap();
        match theirs.get("values") {
            Some(values) => check_values(name, ty, &data, values.as_array().unwrap()),
            None => assert!(!converted && data.as_ref() == their_bytes, "{what}: {name}: bytes differ"),
        }
    }

    let ours: BTreeMap<String, String> = safetensors_metadata(&model.metadata).unwrap().into_iter().collect();
    let theirs: BTreeMap<String, String> = match &theirs["metadata"] {
        Json::Null => BTreeMap::new(),
        m => m.as_object().unwrap().iter().map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned())).collect(),
    };
    assert_eq!(ours, theirs, "{what}: metadata");
    assert_eq!(model.metadata.len(), ours.len(), "{what}: nothing but __metadata__ becomes metadata");
}

struct FromModel<'a>(&'a ModelFile);

impl TensorDataSource for FromModel<'_> {
    fn write_tensor(&mut self, tensor_idx: usize, out: &mut dyn Write) -> io::Result<()> {
        self.0.copy_tensor_data(&self.0.tensors[tensor_idx], out)
    }
}

/// Re-serializes every tensor and the metadata of `path` with our writer.
fn rewrite(path: &Path) -> Vec<u8> {
    let model = ModelFile::open(path, OpenOptions::default()).unwrap();
    let entries: Vec<SafeTensorsEntry> =
        model.tensors.iter().map(|t| SafeTensorsEntry::from_tensor(t).unwrap()).collect();
    let metadata = safetensors_metadata(&model.metadata).unwrap();
    let mut out = Vec::new();
    let metadata = (!metadata.is_empty()).then_some(&metadata[..]);
    write_safetensors(&mut out, &entries, metadata, &mut FromModel(&model)).unwrap();
    out
}

#[test]
fn reference_fixtures_read_the_same() {
    let Some(python) = common::python_with_safetensors() else { return };
    let dir = tempfile::tempdir().unwrap();
    common::run_python(&python, "tests/safetensors/make_fixtures.py".as_ref(), &[dir.path()]);
    for name in ["numpy_all", "writable", "raw_all", "empty"] {
        check_against_reference(&python, &dir.path().join(format!("{name}.safetensors")));
    }
    for (name, tensor, dtype) in
        [("refused_u64", "big", "U64"), ("refused_c64", "complex", "C64"), ("refused_f4", "fp4", "F4")]
    {
        let err = ModelFile::open(&dir.path().join(format!("{name}.safetensors")), OpenOptions::default()).unwrap_err();
        assert!(
            err.kind.to_string().starts_with(&format!("tensor `{tensor}` has dtype {dtype}, which no ggml type holds"))
        );
    }
}

#[test]
fn reference_files_rewrite_byte_for_byte() {
    let Some(python) = common::python_with_safetensors() else { return };
    let dir = tempfile::tempdir().unwrap();
    common::run_python(&python, "tests/safetensors/make_fixtures.py".as_ref(), &[dir.path()]);
    for name in ["writable", "empty"] {
        let path = dir.path().join(format!("{name}.safetensors"));
        assert!(rewrite(&path) == std::fs::read(&path).unwrap(), "{name}: our bytes differ from save_file's");
    }
}

/// Names that test the sort (bytes, not locale), the escaping and the
/// dtype order; data that differs per tensor.
fn tricky_entries(dtypes: &[Dtype]) -> (Vec<SafeTensorsEntry>, Vec<Vec<u8>>) {
    let names = ["b", "B", "a.10", "a.9", "é", "😀", "x\"y\\z", "tab\there", "ctl\u{1}\u{1f}", "/slash", "Z"];
    let mut entries = Vec::new();
    let mut data = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let dtype = dtypes[i % dtypes.len()];
        let shape = match i % 4 {
            0 => vec![3],
            1 => vec![2, 3],
            2 => vec![1, 2, 1, 2],
            _ => vec![0, 5],
        };
        let n = shape.iter().product::<u64>() * dtype.bits() / 8;
        entries.push(entry(name, dtype, &shape));
        data.push((0..n).map(|j| (j as u8).wrapping_mul(31).wrapping_add(i as u8)).collect());
    }
    (entries, data)
}

fn save_with_reference(
    python: &str,
    entries: &[SafeTensorsEntry],
    data: &[Vec<u8>],
    metadata: Option<&[(String, String)]>,
) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let tensors: Vec<Json> = entries
        .iter()
        .zip(data)
        .map(|(e, d)| {
            let hex: String = d.iter().map(|b| format!("{b:02x}")).collect();
            json!({"name": e.name, "dtype": e.dtype.name(), "shape": e.shape, "hex": hex})
        })
        .collect();
    let metadata: Option<serde_json::Map<String, Json>> =
        metadata.map(|m| m.iter().map(|(k, v)| (k.clone(), json!(v))).collect());
    let spec = json!({"tensors": tensors, "metadata": metadata});
    let spec_path = common::write_temp(dir.path(), "spec.json", spec.to_string().as_bytes());
    let out = dir.path().join("out.safetensors");
    common::run_python(python, "tests/safetensors/save.py".as_ref(), &[&spec_path, &out]);
    std::fs::read(out).unwrap()
}

#[test]
fn writer_matches_save_file() {
    let Some(python) = common::python_with_safetensors() else { return };
    let numpy_dtypes = [Dtype::F64, Dtype::I8, Dtype::F32, Dtype::I64, Dtype::F16, Dtype::I32, Dtype::I16];
    let with_bf16 = [Dtype::BF16, Dtype::F32, Dtype::I8, Dtype::F16, Dtype::F8E4M3, Dtype::U8, Dtype::Bool];
    let one_key = [("note \"é\"\n".to_string(), "value\t\u{1}😀\\".to_string())];
    for dtypes in [&numpy_dtypes[..], &with_bf16[..]] {
        let (entries, data) = tricky_entries(dtypes);
        for metadata in [None, Some(&[][..]), Some(&one_key[..])] {
            let ours = write_to_vec(&entries, data.clone(), metadata);
            let theirs = save_with_reference(&python, &entries, &data, metadata);
            assert!(
                ours == theirs,
                "{dtypes:?}, metadata {metadata:?}:\nours   {}\ntheirs {}",
                String::from_utf8_lossy(&ours[..ours.len().min(600)]),
                String::from_utf8_lossy(&theirs[..theirs.len().min(600)])
            );
        }
    }
}

#[test]
fn minilm_reads_as_the_reference_reads_it_and_rewrites_byte_for_byte() {
    let Some(path) = common::minilm() else { return };
    let model = ModelFile::open(&path, OpenOptions::default()).unwrap();
    assert_eq!(model.tensors.len(), 104);
    assert_eq!(model.tensors[0].name, "embeddings.position_ids");
    assert_eq!((model.tensors[0].ggml_type, &model.tensors[0].dims[..]), (GgmlType::I64, &[512, 1][..]));
    assert_eq!(model.metadata.get_str("safetensors.metadata.format"), Some("pt"));
    // The file is what save_file writes (checked when it was chosen: Python
    // re-saving it gives the same bytes), so ours must be too.
    assert!(rewrite(&path) == std::fs::read(&path).unwrap(), "re-serialized MiniLM differs from the original");
    let Some(python) = common::python_with_safetensors() else { return };
    check_against_reference(&python, &path);
}

/// SafeTensors through recipes: a checkpoint exported as SafeTensors is the
/// same file; sharded with an index and loaded back from the index, it is
/// still the same tensors, and the one-file export of that equals the
/// original byte for byte.
#[test]
fn recipes_read_and_write_safetensors_checkpoints() {
    let Some(minilm) = common::minilm() else { return };
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(&minilm, dir.path().join("model.safetensors")).unwrap();
    let recipe = dir.path().join("r.toml");
    std::fs::write(
        &recipe,
        r#"
[input.minilm]
path = "model.safetensors"

[step.same]
op = "export"
from = "minilm"
path = "out/same.safetensors"
format = "safetensors"

[step.sharded]
op = "export"
from = "minilm"
path = "out/sharded/model.safetensors"
format = "safetensors"
split = { max_size = "30MB" }
"#,
    )
    .unwrap();
    let cache = dir.path().join("cache");
    let run = |recipe: &std::path::Path| {
        let out = common::quantforge(&["run".as_ref(), recipe.as_os_str(), "--cache-dir".as_ref(), cache.as_os_str()]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    };
    run(&recipe);
    let original = std::fs::read(&minilm).unwrap();
    assert!(std::fs::read(dir.path().join("out/same.safetensors")).unwrap() == original);
    let index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("out/sharded/model.safetensors.index.json")).unwrap())
            .unwrap();
    let shards: std::collections::BTreeSet<&str> =
        index["weight_map"].as_object().unwrap().values().map(|v| v.as_str().unwrap()).collect();
    assert!(shards.len() >= 3, "{shards:?}");
    assert!(shards.iter().all(|s| s.starts_with("model-") && s.ends_with(".safetensors")), "{shards:?}");

    let back = dir.path().join("back.toml");
    std::fs::write(
        &back,
        r#"
[input.sharded]
path = "out/sharded/model.safetensors.index.json"

[step.whole]
op = "export"
from = "sharded"
path = "out/whole.safetensors"
format = "safetensors"
"#,
    )
    .unwrap();
    run(&back);
    assert!(std::fs::read(dir.path().join("out/whole.safetensors")).unwrap() == original);
}
