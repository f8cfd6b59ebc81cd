//! Any legacy file that parses and that GGJT v3 can hold, written as GGJT v3
//! by `ggjt_layout`, reads back as the same model: the same metadata (but
//! the description, which names the container), the same tensors in the
//! same places relative to their headers; and a GGJT v3 file comes back byte
//! for byte but where it padded with other bytes than zeros. Writing never
//! panics.

#![no_main]

use libfuzzer_sys::fuzz_target;
use quantforge::formats::ggml_legacy::{self, LegacyModel, LegacyVariant};
use quantforge::model::tensor_bytes;

fn read(bytes: &[u8]) -> Option<LegacyModel> {
    ggml_legacy::read_bytes(bytes, "fuzz.bin".as_ref()).ok()
}

fuzz_target!(|data: &[u8]| {
    let Some(model) = read(data) else { return };
    let Ok(layout) = ggml_legacy::ggjt_layout(&model.metadata, &model.tensors, Some(&model.legacy)) else { return };
    let mut file = layout.header.clone();
    for ((tensor, offset), after) in model.tensors.iter().zip(&layout.tensor_offsets).zip(&layout.after) {
        assert_eq!(file.len() as u64, *offset, "{}", tensor.name);
        let n_bytes = tensor_bytes(tensor.ggml_type, &tensor.dims).expect("a held tensor has a size") as usize;
        let stored = &data[tensor.file_offset as usize..][..tensor.stored_len as usize];
        match tensor.layout {
            quantforge::model::StoredLayout::Native => file.extend_from_slice(stored),
            _ => file.resize(file.len() + n_bytes, 0),
        }
        file.extend_from_slice(after);
    }
    assert_eq!(file.len() as u64, layout.file_len);
    let back = read(&file).expect("a written GGJT file reads");
    assert_eq!((back.variant, back.version), (LegacyVariant::Ggjt, 3));
    let described = |m: &LegacyModel| m.metadata.iter().filter(|(k, _)| *k != "general.description").count();
    assert_eq!(described(&back), described(&model));
    for (key, value) in model.metadata.iter().filter(|(k, _)| *k != "general.description") {
        assert!(back.metadata.get(key).is_some_and(|v| v.is_identical(value)), "`{key}` differs");
    }
    for (a, b) in back.tensors.iter().zip(&model.tensors) {
        assert_eq!((&a.name, a.ggml_type, &a.dims), (&b.name, b.ggml_type, &b.dims));
    }
    assert_eq!(back.tensors.len(), model.tensors.len());
    if (model.variant, model.version) == (LegacyVariant::Ggjt, 3) {
        assert_eq!(file.len(), data.len());
        let differs = file.iter().zip(data).position(|(ours, theirs)| ours != theirs && *ours != 0);
        assert!(differs.is_none(), "a GGJT v3 file came back otherwise at byte {differs:?}");
    }
});
