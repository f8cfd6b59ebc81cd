//! Provenance attestations: `quantforge attest` and an export's `attest =
//! true` write an in-toto Statement v1 with a SLSA Provenance v1 predicate
//! that the in-toto bindings from PyPI accept; a DSSE envelope signed with
//! an ed25519 key verifies (with `cryptography` and with `verify
//! --attestation --pubkey`), and a flipped byte anywhere does not.

use crate::common;

use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;

use common::{quantforge_with as quantforge, stdout_of_success as ok};

fn failed(out: std::process::Output) -> String {
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    String::from_utf8(out.stderr).unwrap()
}

/// The quickstart built in a scratch project; its Q4_K_M export.
fn built_quickstart() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let (dir, recipe) = common::built_quickstart();
    let output = dir.path().join("recipes/out/tiny-llama-Q4_K_M.gguf");
    (dir, recipe, output)
}

/// What the in-toto bindings (and `cryptography`, for an envelope) say.
fn validate(attestation: &Path, public_key: Option<&Path>) -> Option<Result<(), String>> {
    let python = common::python_with("in_toto_attestation, cryptography", "in-toto-attestation cryptography")?;
    let mut command = std::process::Command::new(python);
    command.arg(common::repo().join("tests/attest/validate.py")).arg(attestation).args(public_key);
    let out = command.output().unwrap();
    Some(match out.status.success() {
        true => Ok(()),
        false => Err(format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))),
    })
}

#[test]
fn a_statement_names_the_recipe_its_steps_and_inputs_and_validates() {
    let (dir, recipe, output) = built_quickstart();
    // Found through the cache's record of the export, and through --recipe: the same bytes.
    let found = ok(quantforge(&[&"attest", &output]));
    assert_eq!(found, ok(quantforge(&[&"attest", &output, &"--recipe", &recipe])));
    let statement: serde_json::Value = serde_json::from_str(&found).unwrap();
    assert_eq!(statement["_type"], "https://in-toto.io/Statement/v1");
    assert_eq!(statement["predicateType"], "https://slsa.dev/provenance/v1");
    let bytes = std::fs::read(&output).unwrap();
    assert_eq!(statement["subject"][0]["name"], "tiny-llama-Q4_K_M.gguf");
    assert_eq!(statement["subject"][0]["digest"]["sha256"], common::sha256_hex(&bytes));
    let definition = &statement["predicate"]["buildDefinition"];
    let recipe_bytes = std::fs::read(&recipe).unwrap();
    assert_eq!(definition["externalParameters"]["recipe"]["path"], "../quickstart.toml");
    assert_eq!(definition["externalParameters"]["recipe"]["digest"]["sha256"], common::sha256_hex(&recipe_bytes));
    let steps: Vec<&str> = definition["externalParameters"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(steps, ["tiny", "q[preset=Q4_K_M]", "named[preset=Q4_K_M]", "publish[preset=Q4_K_M]"]);
    assert_eq!(definition["externalParameters"]["steps"][1]["params"]["preset"], "Q4_K_M");
    let input = &definition["resolvedDependencies"][0];
    assert_eq!(input["name"], "../tests/data/tiny-llama.gguf");
    assert_eq!(input["annotations"]["input"], "tiny");
    assert_eq!(input["digest"]["sha256"], common::sha256_hex(&std::fs::read(common::tiny_model()).unwrap()));
    assert_eq!(statement["predicate"]["runDetails"]["builder"]["version"]["quantforge"], env!("CARGO_PKG_VERSION"));

    let file = dir.path().join("statement.json");
    std::fs::write(&file, &found).unwrap();
    if let Some(result) = validate(&file, None) {
        result.unwrap();
    }
    let verified = ok(quantforge(&[&"verify", &output, &"--attestation", &file]));
    assert!(verified.contains("every one equal to its derivation"), "{verified}");

    // A file that is not what the recipe makes now is not attested.
    std::fs::write(dir.path().join("recipes/out/tiny-llama-Q6_K.gguf"), b"not a model").unwrap();
    let stderr = failed(quantforge(&[&"attest", &dir.path().join("recipes/out/tiny-llama-Q6_K.gguf")]));
    assert!(stderr.contains("is not what `publish[preset=Q6_K]`"), "{stderr}");
    assert!(stderr.contains("run the recipe, then attest"), "{stderr}");
}

#[test]
fn a_signed_envelope_verifies_and_a_flipped_byte_does_not() {
    let (dir, _recipe, output) = built_quickstart();
    let (private, public) = common::key_pair(dir.path(), "release");
    let (_, other_public) = common::key_pair(dir.path(), "other");
    let signed = dir.path().join("signed.json");
    ok(quantforge(&[&"attest", &output, &"--key", &private, &"-o", &signed]));
    if let Some(result) = validate(&signed, Some(&public)) {
        result.unwrap();
    }
    ok(quantforge(&[&"verify", &output, &"--attestation", &signed, &"--pubkey", &public]));

    let stderr = failed(quantforge(&[&"verify", &output, &"--attestation", &signed, &"--pubkey", &other_public]));
    assert!(stderr.contains("no signature in the envelope verifies"), "{stderr}");
    let stderr = failed(quantforge(&[&"verify", &output, &"--attestation", &signed]));
    assert!(stderr.contains("is signed: give --pubkey"), "{stderr}");

    let envelope: serde_json::Value = serde_json::from_slice(&std::fs::read(&signed).unwrap()).unwrap();
    for field in ["payload", "sig"] {
        let mut tampered = envelope.clone();
        let value = match field {
            "payload" => &mut tampered["payload"],
            _ => &mut tampered["signatures"][0]["sig"],
        };
        let mut bytes = BASE64.decode(value.as_str().unwrap()).unwrap();
        let middle = bytes.len() / 2;
        bytes[middle] ^= 0x01;
        *value = BASE64.encode(&bytes).into();
        let file = dir.path().join(format!("tampered-{field}.json"));
        std::fs::write(&file, serde_json::to_vec_pretty(&tampered).unwrap()).unwrap();
        if let Some(result) = validate(&file, Some(&public)) {
            assert!(result.is_err(), "a flipped byte in the {field} still validates");
        }
        let stderr = failed(quantforge(&[&"verify", &output, &"--attestation", &file, &"--pubkey", &public]));
        assert!(stderr.contains("no signature in the envelope verifies"), "{field}: {stderr}");
    }
}

#[test]
fn verify_by_attestation_refuses_a_changed_file_recipe_or_input() {
    let (dir, recipe, output) = built_quickstart();
    let statement = dir.path().join("statement.json");
    ok(quantforge(&[&"attest", &output, &"-o", &statement]));

    let original = std::fs::read(&output).unwrap();
    let mut flipped = original.clone();
    let at = flipped.len() - 100;
    flipped[at] ^= 0x40;
    std::fs::write(&output, &flipped).unwrap();
    let stderr = failed(quantforge(&[&"verify", &output, &"--attestation", &statement]));
    assert!(stderr.contains("is not the attested file: its sha256 is"), "{stderr}");
    std::fs::write(&output, &original).unwrap();

    let input = dir.path().join("tests/data/tiny-llama.gguf");
    let model = std::fs::read(&input).unwrap();
    let mut changed = model.clone();
    let at = changed.len() - 1;
    changed[at] ^= 0x01;
    std::fs::write(&input, &changed).unwrap();
    let stderr = failed(quantforge(&[&"verify", &output, &"--attestation", &statement]));
    assert!(stderr.contains("input `tiny` ("), "{stderr}");
    assert!(stderr.contains("is not the attested one: its sha256 is"), "{stderr}");
    std::fs::write(&input, &model).unwrap();

    let text = std::fs::read_to_string(&recipe).unwrap();
    std::fs::write(&recipe, format!("{text}\n# edited\n")).unwrap();
    let stderr = failed(quantforge(&[&"verify", &output, &"--attestation", &statement]));
    assert!(stderr.contains("quickstart.toml is not the attested one"), "{stderr}");
}

#[test]
fn an_export_with_attest_writes_its_statement_beside_it_once() {
    let (dir, recipe) = common::quickstart_project();
    let text = std::fs::read_to_string(&recipe).unwrap();
    std::fs::write(&recipe, format!("{text}attest = true\n")).unwrap();
    ok(quantforge(&[&"run", &recipe, &"-q"]));
    for preset in ["Q8_0", "Q6_K", "Q4_K_M"] {
        let output = dir.path().join(format!("recipes/out/tiny-llama-{preset}.gguf"));
        let beside = dir.path().join(format!("recipes/out/tiny-llama-{preset}.gguf.intoto.json"));
        let written = std::fs::read(&beside).unwrap();
        assert_eq!(written, ok(quantforge(&[&"attest", &output])).into_bytes(), "{preset}");
        if let Some(result) = validate(&beside, None) {
            result.unwrap();
        }
    }
    let beside = dir.path().join("recipes/out/tiny-llama-Q8_0.gguf.intoto.json");
    let modified = std::fs::metadata(&beside).unwrap().modified().unwrap();
    ok(quantforge(&[&"run", &recipe, &"-q"]));
    assert_eq!(std::fs::metadata(&beside).unwrap().modified().unwrap(), modified, "an unchanged run rewrote it");
}
