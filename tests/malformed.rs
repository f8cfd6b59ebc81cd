//! The malformed-file corpus: every case is generated here, opened through
//! both access paths (mmap and plain reads), and must give the expected
//! typed error, never a panic and never a huge allocation.

mod common;

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
            r#"FILE: at byte 0: unknown file format: the first bytes are 47 47 55 58 03 00 00 00 ("GGUX....") (expected GGUF, GGML/GGMF/GGJT, SafeTensors or a .pt zip)"#
        ]],
    );
    check(
        b"",
        expect![[
            r#"FILE: at byte 0: unknown file format: the first bytes are (empty file) (expected GGUF, GGML/GGMF/GGJT, SafeTensors or a .pt zip)"#
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
