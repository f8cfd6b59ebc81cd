//! The store seam proven by a second implementation: recipes run on a
//! `MemoryStore` exactly as on the cache directory — the same bytes, hits on
//! a rerun, per-tensor reuse, and corrupt blobs caught and recomputed.

use crate::common;

use std::path::Path;
use std::sync::Arc;

use quantforge::exec::Engine;
use quantforge::recipe::Recipe;
use quantforge::store::{BlobStore, MemoryStore};

use common::LADDER;

const PRESETS: [&str; 3] = ["Q8_0", "Q4_K_M", "Q3_K_S"];

fn workspace() -> (tempfile::TempDir, Recipe) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(common::tiny_model(), dir.path().join("tiny.gguf")).unwrap();
    let path = dir.path().join("ladder.toml");
    std::fs::write(&path, LADDER).unwrap();
    let recipe = Recipe::load(&path).unwrap();
    (dir, recipe)
}

fn outputs(dir: &Path) -> Vec<Vec<u8>> {
    PRESETS.iter().map(|p| std::fs::read(dir.join(format!("out/tiny-{p}.gguf"))).unwrap()).collect()
}

#[test]
fn recipes_run_on_a_memory_store_as_on_the_cache_directory() {
    // The reference: the command line on a cache directory.
    let (disk, _) = workspace();
    let recipe_path = disk.path().join("ladder.toml");
    let cache = disk.path().join("cache");
    let output =
        common::quantforge(&["run".as_ref(), recipe_path.as_os_str(), "--cache-dir".as_ref(), cache.as_os_str()]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));

    let (dir, recipe) = workspace();
    let store = Arc::new(MemoryStore::new());
    let engine = Engine::new(store.clone(), 2).unwrap();
    let first = engine.run(&recipe, false).unwrap();
    assert!(!first.failed());
    assert!(first.totals.tensors_encoded > 0);
    assert_eq!(outputs(dir.path()), outputs(disk.path()), "same bytes on either store");

    let second = engine.run(&recipe, false).unwrap();
    assert_eq!(second.totals.ran, 0, "a rerun is all hits");
    assert_eq!(second.totals.tensors_encoded, 0);

    // Outputs gone: rebuilt from the store's blobs, nothing encoded.
    std::fs::remove_dir_all(dir.path().join("out")).unwrap();
    let third = engine.run(&recipe, false).unwrap();
    assert_eq!(third.totals.tensors_encoded, 0);
    assert!(third.totals.tensors_reused > 0);
    assert_eq!(outputs(dir.path()), outputs(disk.path()));

    // Every blob corrupted: caught, reported, recomputed, same bytes.
    for hash in store.blob_hashes() {
        store.corrupt_blob(&hash, b"not what it was");
    }
    std::fs::remove_dir_all(dir.path().join("out")).unwrap();
    let fourth = engine.run(&recipe, false).unwrap();
    assert!(!fourth.failed());
    assert!(!fourth.cache_incidents.is_empty());
    assert!(fourth.totals.tensors_encoded > 0);
    assert_eq!(outputs(dir.path()), outputs(disk.path()));
    assert!(store.blob_hashes().iter().all(|h| store.read_blob(h).is_ok()), "what is left is sound");
}
