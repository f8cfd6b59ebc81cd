//! The lock file (`exec::provenance::lock`): written by a complete run beside the
//! recipe, unchanged by a second run, its digests the files' own, and
//! `run --locked` failing, naming the input, when one changed.

use crate::common;

use std::path::Path;

fn sha256(path: &Path) -> String {
    common::sha256_hex(&std::fs::read(path).unwrap())
}

/// With the engine's sha256 on, as `run` sets it, the read that hashes a
/// file's blake3 (an input's, an output's) also leaves its sha256 in the
/// cache, so the lock reads no file again; off (commands that write no
/// lock), no sha256 is computed.
#[test]
fn a_run_hashes_each_file_for_its_lock_in_one_read() {
    use quantforge::store::fingerprint::remembered_sha256;
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(common::tiny_model(), dir.path().join("tiny.gguf")).unwrap();
    std::fs::write(dir.path().join("ladder.toml"), common::LADDER).unwrap();
    let recipe = quantforge::recipe::Recipe::load(&dir.path().join("ladder.toml")).unwrap();
    for sha256_on in [false, true] {
        std::fs::remove_dir_all(dir.path().join("out")).ok();
        let store = std::sync::Arc::new(quantforge::store::MemoryStore::new());
        let engine = quantforge::exec::Engine::new(store.clone(), 1).unwrap().with_sha256_of_files(sha256_on);
        let report = engine.run(&recipe, false).unwrap();
        let mut files: Vec<std::path::PathBuf> =
            report.inputs.iter().flat_map(|i| &i.files).map(|f| f.path.clone()).collect();
        files.extend(std::fs::read_dir(dir.path().join("out")).unwrap().map(|e| e.unwrap().path()));
        assert_eq!(files.len(), 4, "{files:?}");
        for path in files {
            let bytes = std::fs::read(&path).unwrap();
            let blake3 = blake3::hash(&bytes).to_hex().to_string();
            let remembered = remembered_sha256(&*store, &blake3, bytes.len() as u64);
            let expected = sha256_on.then(|| common::sha256_hex(&bytes));
            assert_eq!(remembered, expected, "{path:?}");
        }
    }
}

#[test]
fn a_run_writes_the_lock_and_a_second_leaves_it_unchanged() {
    let (dir, recipe) = common::quickstart_project();
    let lock_path = dir.path().join("recipes/quickstart.lock");
    assert!(common::quantforge_with(&[&"run", &recipe, &"-q"]).status.success());
    let first = std::fs::read_to_string(&lock_path).unwrap();
    let lock: toml::Table = toml::from_str(&first).unwrap();
    let input = &lock["input"][0];
    assert_eq!(input["name"].as_str(), Some("tiny"));
    assert_eq!(input["file"][0]["path"].as_str(), Some("../tests/data/tiny-llama.gguf"));
    assert_eq!(input["file"][0]["sha256"].as_str().unwrap(), sha256(&dir.path().join("tests/data/tiny-llama.gguf")));
    let exports = lock["export"].as_array().unwrap();
    assert_eq!(exports.len(), 3);
    for export in exports {
        let file = &export["file"][0];
        let path = dir.path().join("recipes").join(file["path"].as_str().unwrap());
        assert_eq!(file["sha256"].as_str().unwrap(), sha256(&path), "{path:?}");
        assert_eq!(file["size"].as_integer().unwrap() as u64, std::fs::metadata(&path).unwrap().len());
    }
    let modified = std::fs::metadata(&lock_path).unwrap().modified().unwrap();

    // Again, and from another directory: nothing in the lock depends on either.
    let out = common::quantforge_in(
        &dir.path().join("recipes"),
        &["run".as_ref(), "quickstart.toml".as_ref(), "-q".as_ref()],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read_to_string(&lock_path).unwrap(), first);
    assert_eq!(std::fs::metadata(&lock_path).unwrap().modified().unwrap(), modified, "rewritten with the same bytes");
    assert!(common::quantforge_with(&[&"run", &recipe, &"-q", &"--locked"]).status.success());
}

#[test]
fn locked_fails_naming_a_changed_input_and_plan_reports_it() {
    let (dir, recipe) = common::quickstart_project();
    assert!(common::quantforge_with(&[&"run", &recipe, &"-q"]).status.success());
    let lock_path = dir.path().join("recipes/quickstart.lock");
    let lock = std::fs::read(&lock_path).unwrap();
    let model = dir.path().join("tests/data/tiny-llama.gguf");
    let mut bytes = std::fs::read(&model).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&model, &bytes).unwrap();

    let out = common::quantforge_with(&[&"run", &recipe, &"-q", &"--locked"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no longer matches"), "{stderr}");
    assert!(stderr.contains("input `tiny` (../tests/data/tiny-llama.gguf) changed"), "{stderr}");
    assert!(!dir.path().join("recipes/out/.quantforge-tmp").exists());
    assert_eq!(std::fs::read(&lock_path).unwrap(), lock, "--locked leaves the lock alone");

    let plan = common::quantforge(&["plan".as_ref(), recipe.as_os_str()]);
    let stdout = String::from_utf8_lossy(&plan.stdout);
    assert!(stdout.contains("lock: input `tiny` (../tests/data/tiny-llama.gguf) changed"), "{stdout}");
}

#[test]
fn locked_fails_when_the_run_would_change_the_lock() {
    let (dir, recipe) = common::quickstart_project();
    let out = common::quantforge_with(&[&"run", &recipe, &"-q", &"--locked"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("there is no lock file"), "{out:?}");

    assert!(common::quantforge_with(&[&"run", &recipe, &"-q"]).status.success());
    let lock_path = dir.path().join("recipes/quickstart.lock");
    let lock = std::fs::read(&lock_path).unwrap();
    let text = std::fs::read_to_string(&recipe).unwrap().replace("\"Q4_K_M\"]", "\"Q4_K_S\"]");
    std::fs::write(&recipe, text).unwrap();
    let out = common::quantforge_with(&[&"run", &recipe, &"-q", &"--locked"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("export `publish[preset=Q4_K_S]` is not in the lock"), "{stderr}");
    assert!(stderr.contains("is left as it was"), "{stderr}");
    assert_eq!(std::fs::read(&lock_path).unwrap(), lock);
    assert!(common::quantforge_with(&[&"run", &recipe, &"-q"]).status.success());
    assert!(std::fs::read_to_string(&lock_path).unwrap().contains("Q4_K_S"));
}
