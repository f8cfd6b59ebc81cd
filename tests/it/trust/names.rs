//! Names from files reach the terminal escaped (inspect, diff, errors):
//! no raw ESC, BEL, bidirectional control or line break of a tensor name or
//! metadata key, however long the name; and no GGUF output holds a tensor
//! name llama.cpp would refuse (63 bytes at most), while reading stays
//! tolerant of any length.

use std::ffi::OsStr;
use std::path::Path;

use crate::common::{self, RawGguf};

/// Names that try to take over the terminal or fake a line of output.
const HOSTILE: [&[u8]; 5] = [
    b"blk.0.attn_q.weight\x1b[2J\x1b[31m",
    b"bell\x07\x07",
    b"output.weight\nwarning: all tensors verified",
    b"evil\xe2\x80\xaegguf.exe",
    b"tab\there",
];

/// A GGUF of one F32 tensor per name (4 values each), with a hostile key
/// when `hostile_key`.
fn gguf_named(names: &[&[u8]], hostile_key: bool) -> Vec<u8> {
    let mut g = RawGguf::default();
    if hostile_key {
        g.kv_raw(b"general.name\x1b]0;pwned\x07", 8, g.string(b"x"));
    }
    for (i, name) in names.iter().enumerate() {
        g.tensor(name, &[4], 0, 32 * i as u64);
    }
    g.data = names.iter().flat_map(|_| [0u8; 16].into_iter().chain([0; 16])).collect();
    g.bytes()
}

/// A SafeTensors file of one F32 tensor per name (JSON escapes in the header).
fn safetensors_named(names: &[&[u8]]) -> Vec<u8> {
    let mut entries = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let name = serde_json::to_string(&String::from_utf8_lossy(name)).unwrap();
        entries.push(format!(
            "{name}:{{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[{},{}]}}",
            16 * i,
            16 * (i + 1)
        ));
    }
    let mut header = format!("{{{}}}", entries.join(",")).into_bytes();
    while header.len() % 8 != 0 {
        header.push(b' ');
    }
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend(header);
    out.extend(std::iter::repeat_n(0u8, 16 * names.len()));
    out
}

/// `text` has none of the bytes a name could move the cursor or a line with.
fn assert_inert(what: &str, text: &str) {
    for bad in ['\u{1b}', '\u{7}', '\u{202e}'] {
        assert!(!text.contains(bad), "{what}: a raw {bad:?} reached the terminal: {text:?}");
    }
    assert!(!text.lines().any(|l| l.starts_with("warning: all tensors")), "{what}: a name faked a line: {text}");
}

fn run_in(dir: &Path, args: &[&str]) -> (String, std::process::Output) {
    let output = common::quantforge_in(dir, &args.iter().map(OsStr::new).collect::<Vec<_>>());
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(!text.contains("panicked"), "{args:?}: {text}");
    (text, output)
}

#[test]
fn names_from_files_never_reach_the_terminal_raw() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("a.gguf"), gguf_named(&HOSTILE, true)).unwrap();
    std::fs::write(d.join("b.gguf"), gguf_named(&HOSTILE[..3], true)).unwrap();
    std::fs::write(d.join("a.safetensors"), safetensors_named(&HOSTILE)).unwrap();
    for args in [
        &["inspect", "a.gguf", "--tensors"][..],
        &["inspect", "a.safetensors", "--tensors"],
        &["diff", "a.gguf", "b.gguf"],
        &["diff", "b.gguf", "a.gguf"],
    ] {
        let (text, output) = run_in(d, args);
        assert!(output.status.success(), "{args:?}: {text}");
        assert_inert(&format!("{args:?}"), &text);
        assert!(text.contains("\\u{1b}[2J") || text.contains("\\n"), "{args:?}: the names are shown escaped: {text}");
    }
    // An error naming a hostile tensor: a type id ggml never had.
    let mut g = RawGguf::default();
    g.tensor(HOSTILE[2], &[4], 99, 0);
    g.data = vec![0; 32];
    std::fs::write(d.join("bad.gguf"), g.bytes()).unwrap();
    let (text, output) = run_in(d, &["inspect", "bad.gguf"]);
    assert!(!output.status.success());
    assert_inert("an error", &text);
    assert!(text.contains("output.weight\\nwarning"), "{text}");
}

#[test]
fn long_names_are_read_and_shown_bounded_and_never_written() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let megabyte = vec![b'n'; 1 << 20];
    let sixty_four = [b'x'; 64];
    for (file, names) in
        [("huge.gguf", vec![&megabyte[..], b"ok.weight"]), ("long.gguf", vec![&sixty_four[..], b"ok.weight"])]
    {
        std::fs::write(d.join(file), gguf_named(&names, false)).unwrap();
        for args in [&["inspect", file][..], &["inspect", file, "--tensors"], &["inspect", file, "--json"]] {
            let (text, output) = run_in(d, args);
            assert!(output.status.success(), "{args:?}: {}", &text[..text.len().min(2000)]);
            if !args.contains(&"--json") {
                assert!(text.lines().all(|l| l.chars().count() < 300), "{args:?}: an unbounded line");
            }
        }
        // Read, yes; written into a GGUF, never: one-shot and recipe alike.
        let (text, _) = run_in(d, &["edit", file, "e.gguf"]);
        assert!(text.contains("bytes; a GGUF tensor name is at most 63 bytes"), "{text}");
        let recipe =
            format!("[input.m]\npath = \"{file}\"\n[step.o]\nop = \"export\"\nfrom = \"m\"\npath = \"q.gguf\"\n");
        std::fs::write(d.join("copy.toml"), recipe).unwrap();
        let (text, _) = run_in(d, &["run", "copy.toml"]);
        assert!(text.contains("a GGUF tensor name is at most 63 bytes"), "{text}");
        assert!(!d.join("q.gguf").exists() && !d.join("e.gguf").exists());
    }
    std::fs::copy(common::tiny_model(), d.join("tiny.gguf")).unwrap();
    let name_of = |n: usize| format!("output.weight={}", "x".repeat(n));
    let (text, output) = run_in(d, &["edit", "tiny.gguf", "ok.gguf", "--rename-tensor", &name_of(63)]);
    assert!(output.status.success(), "a 63-byte name is llama.cpp's longest: {text}");
    let (text, _) = run_in(d, &["edit", "tiny.gguf", "no.gguf", "--rename-tensor", &name_of(64)]);
    assert!(text.contains("has a name of 64 bytes"), "{text}");
    let recipe = format!(
        "[input.tiny]\npath = \"tiny.gguf\"\n[step.r]\nop = \"rename\"\nfrom = \"tiny\"\n\
         tensors = {{ \"output.weight\" = \"{}\" }}\n\
         [step.o]\nop = \"export\"\nfrom = \"r\"\npath = \"r.gguf\"\n",
        "y".repeat(100)
    );
    std::fs::write(d.join("recipe.toml"), recipe).unwrap();
    let (text, output) = run_in(d, &["run", "recipe.toml"]);
    assert!(!output.status.success() && text.contains("has a name of 100 bytes"), "{text}");
    assert!(!d.join("r.gguf").exists());
}

#[test]
fn plans_and_tables_show_names_escaped_and_aligned() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::copy(common::tiny_model(), d.join("tiny.gguf")).unwrap();
    for (i, hostile) in HOSTILE.iter().enumerate() {
        let hostile = String::from_utf8(hostile.to_vec()).unwrap();
        let file = format!("h{i}.gguf");
        let rename = format!("output.weight={hostile}");
        let (text, output) = run_in(d, &["edit", "tiny.gguf", &file, "--rename-tensor", &rename]);
        assert!(output.status.success(), "{text}");
        for args in [
            &["quantize", "--dry-run", &file, "q.gguf", "Q4_K_M"][..],
            &["plan-quant", &file, "--target-bpw", "4"],
            &["plan-devices", &file, "--devices", "2"],
            &["inspect", &file, "--tensors"],
        ] {
            let (text, output) = run_in(d, args);
            assert!(output.status.success(), "{args:?}: {text}");
            assert_inert(&format!("{args:?} of {hostile:?}"), &text);
            // The table's columns line up: every row of tensors pads its name to one width.
            let rows: Vec<&str> = text.lines().filter(|l| l.contains("blk.1.ffn_up.weight")).collect();
            assert!(!rows.is_empty(), "{args:?}: {text}");
        }
    }
}

#[test]
fn metadata_values_reach_the_terminal_escaped() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // DEL, a C1 CSI (U+009B, which JSON leaves as it is), a bidi override, ESC.
    let values: [&[u8]; 4] = [b"a\x7fb", "c\u{9b}2Jd".as_bytes(), "e\u{202e}f".as_bytes(), b"g\x1b[2Jh"];
    let mut g = RawGguf::default();
    for (i, value) in values.iter().enumerate() {
        g.kv_raw(format!("test.value{i}").as_bytes(), 8, g.string(value));
    }
    g.kv_raw(b"general.architecture", 8, g.string(b"llama\x1b[31m"));
    g.tensor(b"t.weight", &[4], 0, 0);
    g.data = vec![0; 32];
    std::fs::write(d.join("v.gguf"), g.bytes()).unwrap();
    let (text, output) = run_in(d, &["inspect", "v.gguf"]);
    assert!(output.status.success(), "{text}");
    assert!(text.contains("INVALID: llama\\u{1b}[31m.embedding_length"), "{text}");
    for raw in ['\u{7f}', '\u{9b}', '\u{202e}', '\u{1b}'] {
        assert!(!text.contains(raw), "a raw {raw:?} reached the terminal: {text:?}");
    }
    for shown in ["a\\u{7f}b", "c\\u{9b}2Jd", "e\\u{202e}f", "llama\\u{1b}[31m"] {
        assert!(text.contains(shown), "{shown} is not shown: {text}");
    }
}

#[test]
fn quantize_never_writes_a_name_llama_cpp_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::copy(common::tiny_model(), d.join("tiny.gguf")).unwrap();
    for (n, written) in [(63, true), (64, false), (300, false)] {
        let rename = format!("output.weight={}", "z".repeat(n));
        let (text, output) = run_in(d, &["edit", "tiny.gguf", "named.gguf", "--rename-tensor", &rename]);
        if !written {
            // edit refuses too; build the file by hand to give quantize the name.
            assert!(!output.status.success(), "{text}");
            let mut g = RawGguf::default();
            g.kv_str("general.architecture", "llama");
            for key in ["block_count", "attention.head_count", "attention.head_count_kv"] {
                g.kv_u32(&format!("llama.{key}"), 1);
            }
            g.kv_u32("llama.embedding_length", 32);
            g.kv_u32("llama.context_length", 64);
            g.kv_u32("llama.feed_forward_length", 64);
            g.tensor("z".repeat(n).as_bytes(), &[32, 8], 0, 0);
            g.data = vec![0; 32 * 8 * 4];
            std::fs::write(d.join("named.gguf"), g.bytes()).unwrap();
        }
        for preset in ["Q8_0", "Q4_K_M", "COPY"] {
            let out = d.join("out.gguf");
            let _ = std::fs::remove_file(&out);
            let (text, output) = run_in(d, &["quantize", "named.gguf", "out.gguf", preset]);
            assert_eq!(output.status.success(), written, "{n} bytes, {preset}: {text}");
            assert_eq!(out.exists(), written, "{n} bytes, {preset}");
            if !written {
                assert!(text.contains(&format!("has a name of {n} bytes")), "{preset}: {text}");
            }
        }
    }
}
