//! Provenance is checked in every field it states: `run --locked` compares
//! the lock's sha256s as well as its blake3s (a plain run puts the true
//! ones back), and `verify --attestation` refuses a statement — bare or
//! validly signed — whose subject, recipe or dependency digests, sizes,
//! export, steps, builder or versions are not what the file and the recipe
//! make.

use std::ffi::OsStr;
use std::path::Path;

use serde_json::Value;

use super::{Workspace, fails_with};
use crate::common;

fn run_locked(ws: &Workspace, locked: bool) -> std::process::Output {
    let (recipe, cache) = (ws.path("recipe.toml"), ws.path("cache"));
    let mut args = vec![OsStr::new("run"), recipe.as_os_str(), OsStr::new("--cache-dir"), cache.as_os_str()];
    if locked {
        args.push(OsStr::new("--locked"));
    }
    common::quantforge(&args)
}

/// The lock with the sha256 of its `section`'s first file (`input` or
/// `export`) replaced by `sha256`.
fn edit_lock_sha256(lock: &str, section: &str, sha256: &str) -> String {
    let mut value: toml::Value = toml::from_str(lock).unwrap();
    value[section][0]["file"][0]["sha256"] = toml::Value::String(sha256.to_owned());
    toml::to_string(&value).unwrap()
}

#[test]
fn locked_runs_compare_every_sha256() {
    let ws = Workspace::new();
    let lock_path = ws.path("recipe.lock");
    let lock = std::fs::read_to_string(&lock_path).unwrap();
    let forged = "0".repeat(64);
    for (section, needle) in [("input", "has sha256"), ("export", "with sha256")] {
        let edited = format!("# Written by `quantforge run`\n{}", edit_lock_sha256(&lock, section, &forged));
        std::fs::write(&lock_path, &edited).unwrap();
        fails_with(&run_locked(&ws, true), needle);
        assert_eq!(std::fs::read_to_string(&lock_path).unwrap(), edited, "--locked changed the lock");
        // A plan says so without reading a file; a plain run puts the true digest back.
        if section == "input" {
            let (recipe, cache) = (ws.path("recipe.toml"), ws.path("cache"));
            let plan = common::quantforge(&[
                OsStr::new("plan"),
                recipe.as_os_str(),
                OsStr::new("--cache-dir"),
                cache.as_os_str(),
            ]);
            let stdout = String::from_utf8_lossy(&plan.stdout);
            assert!(stdout.contains("the lock was edited"), "{stdout}");
        }
        assert!(run_locked(&ws, false).status.success());
        assert_eq!(std::fs::read_to_string(&lock_path).unwrap(), lock, "{section}: the forged sha256 stayed");
        assert!(run_locked(&ws, true).status.success());
    }
    // With an empty cache the sha256s are computed, not taken from the lock.
    std::fs::write(&lock_path, edit_lock_sha256(&lock, "input", &forged)).unwrap();
    std::fs::remove_dir_all(ws.path("cache")).unwrap();
    fails_with(&run_locked(&ws, true), "the lock was edited");
}

type Edit = fn(&mut Value);

/// Statement fields to change, each with what verify must say.
fn edits() -> Vec<(&'static str, Edit, &'static str)> {
    fn definition(s: &mut Value) -> &mut Value {
        &mut s["predicate"]["buildDefinition"]
    }
    fn flip(text: &mut Value) {
        let hex = text.as_str().unwrap();
        let first = if hex.starts_with('0') { "1" } else { "0" };
        *text = Value::String(format!("{first}{}", &hex[1..]));
    }
    vec![
        ("the subject's blake3", |s| flip(&mut s["subject"][0]["digest"]["blake3"]), "its blake3 is"),
        ("the subject's sha256", |s| flip(&mut s["subject"][0]["digest"]["sha256"]), "its sha256 is"),
        (
            "the recipe's blake3",
            |s| flip(&mut definition(s)["externalParameters"]["recipe"]["digest"]["blake3"]),
            "quickstart.toml is not the attested one: its blake3 is",
        ),
        (
            "the recipe's sha256",
            |s| flip(&mut definition(s)["externalParameters"]["recipe"]["digest"]["sha256"]),
            "quickstart.toml is not the attested one: its sha256 is",
        ),
        (
            "an input's blake3",
            |s| flip(&mut definition(s)["resolvedDependencies"][0]["digest"]["blake3"]),
            "input `tiny` (",
        ),
        (
            "an input's sha256",
            |s| flip(&mut definition(s)["resolvedDependencies"][0]["digest"]["sha256"]),
            "input `tiny` (",
        ),
        (
            "an input's size",
            |s| definition(s)["resolvedDependencies"][0]["annotations"]["size"] = 7.into(),
            "bytes, the attestation's 7",
        ),
        (
            "an input left out",
            |s| definition(s)["resolvedDependencies"] = Value::Array(vec![]),
            "does not list ../tests/data/tiny-llama.gguf (input `tiny`)",
        ),
        (
            "another export's node id",
            |s| definition(s)["externalParameters"]["export"] = "publish[preset=Q8_0]".into(),
            "names export `publish[preset=Q8_0]`, but the file is written by export `publish[preset=Q4_K_M]`",
        ),
        (
            "a step's key",
            |s| flip(&mut definition(s)["externalParameters"]["steps"][1]["key"]),
            "step `q[preset=Q4_K_M]` has key",
        ),
        (
            "a step's parameters",
            |s| definition(s)["externalParameters"]["steps"][1]["params"]["preset"] = "Q8_0".into(),
            "step `q[preset=Q4_K_M]` is stated with other parameters",
        ),
        (
            "a step left out",
            |s| {
                definition(s)["externalParameters"]["steps"].as_array_mut().unwrap().remove(2);
            },
            "step 3 is `publish[preset=Q4_K_M]` where the recipe has `named[preset=Q4_K_M]`",
        ),
        (
            "a codec version that does not exist",
            |s| definition(s)["internalParameters"]["codecVersion"] = 999.into(),
            "codec version 999 does not exist",
        ),
        (
            "codec version 0",
            |s| definition(s)["internalParameters"]["codecVersion"] = 0.into(),
            "codec version 0 does not exist",
        ),
        (
            "a key scheme that does not exist",
            |s| definition(s)["internalParameters"]["keyScheme"] = 77.into(),
            "cache key scheme 77 does not exist",
        ),
        (
            "another builder",
            |s| s["predicate"]["runDetails"]["builder"]["id"] = "https://example.com/builder".into(),
            "built by https://example.com/builder, not by quantforge",
        ),
    ]
}

#[test]
fn verify_checks_every_field_an_attestation_states() {
    let (dir, recipe) = common::quickstart_project();
    common::stdout_of_success(common::quantforge_with(&[&"run", &recipe, &"-q"]));
    let output = dir.path().join("recipes/out/tiny-llama-Q4_K_M.gguf");
    let statement: Value =
        serde_json::from_str(&common::stdout_of_success(common::quantforge_with(&[&"attest", &output]))).unwrap();
    let (private, public) = common::key_pair(dir.path(), "release");
    let write = |name: &str, value: &Value| {
        let path = dir.path().join(name);
        std::fs::write(&path, serde_json::to_vec_pretty(value).unwrap()).unwrap();
        path
    };
    let sign = |name: &str, value: &Value| {
        let payload = serde_json::to_vec_pretty(value).unwrap();
        let envelope = quantforge::exec::provenance::dsse::sign(
            &payload,
            quantforge::exec::provenance::dsse::IN_TOTO_PAYLOAD_TYPE,
            &private,
        )
        .unwrap();
        write(name, &serde_json::to_value(envelope).unwrap())
    };
    let verify = |attestation: &Path, pubkey: Option<&Path>| {
        let mut args: Vec<&dyn AsRef<OsStr>> = vec![&"verify", &output, &"--attestation", &attestation];
        if let Some(key) = &pubkey {
            args.extend([&"--pubkey" as &dyn AsRef<OsStr>, key]);
        }
        common::quantforge_with(&args)
    };
    // The statement as written, bare and signed, verifies.
    assert!(verify(&write("bare.json", &statement), None).status.success());
    assert!(verify(&sign("signed.json", &statement), Some(&public)).status.success());
    for (what, edit, needle) in edits() {
        let mut tampered = statement.clone();
        edit(&mut tampered);
        assert_ne!(tampered, statement, "{what}: the edit changed nothing");
        let bare = verify(&write("tampered.json", &tampered), None);
        let signed = verify(&sign("tampered-signed.json", &tampered), Some(&public));
        for (how, out) in [("bare", bare), ("signed", signed)] {
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "{what} ({how}) verifies");
            assert!(stderr.contains(needle), "{what} ({how}): expected {needle:?} in: {stderr}");
        }
    }
}
