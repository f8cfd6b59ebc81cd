//! The kernels' PTX, compiled by NVRTC once per program, NVRTC version and
//! compute capability and kept in the store (checked on read like every
//! blob); without a store, compiled each run.

use crate::key::{Key, KeyBuilder};

use crate::store::{ActionKind, Store};

#[derive(serde::Serialize, serde::Deserialize)]
struct KernelEntry {
    blob: Key,
    blobs: Vec<Key>,
}

fn key(nvrtc: (i32, i32), capability: (i32, i32)) -> Key {
    let mut key = KeyBuilder::new("cuda.ptx");
    key.str(&super::kernels::program_hash().to_hex());
    for n in [nvrtc.0, nvrtc.1, capability.0, capability.1] {
        key.u64(n as u64);
    }
    key.finish()
}

/// The PTX for `capability`, from the store or compiled (and stored).
pub fn for_capability(store: Option<&dyn Store>, capability: (i32, i32)) -> Result<String, String> {
    let key = key(super::nvrtc_version()?, capability);
    if let Some(store) = store
        && let Some(entry) = store.get_action(ActionKind::Kernel, &key)
        && let Ok(entry) = serde_json::from_slice::<KernelEntry>(&entry)
        && let Ok(bytes) = store.read_blob(&entry.blob)
        && let Ok(ptx) = String::from_utf8(bytes)
    {
        return Ok(ptx);
    }
    let ptx = super::compile_ptx(capability)?;
    if let Some(store) = store {
        // Best effort: without the entry the next run compiles again.
        if let Ok(blob) = store.put_blob(ptx.as_bytes())
            && let Ok(json) = serde_json::to_vec(&KernelEntry { blob, blobs: vec![blob] })
        {
            let _ = store.put_action(ActionKind::Kernel, &key, &json);
        }
    }
    Ok(ptx)
}
