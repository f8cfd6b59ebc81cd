//! Writing GGJT v3, the last legacy container, as llama.cpp wrote it before
//! GGUF: seven LLaMA hyperparameters, a SentencePiece vocabulary with
//! scores, then each tensor's header and its data aligned to 32 bytes.
//!
//! A model is written only when reading the file back gives its metadata
//! again (the legacy reader's defaults included); a key, a type or a shape
//! GGJT has no room for is refused by name, never dropped. A GGJT v3 file
//! read in comes back byte for byte: its [`LegacyHeader`] supplies what the
//! GGUF metadata lost, wherever it still describes the model.

use std::collections::HashMap;

use super::{
    GGJT_ALIGNMENT, Hyperparameters, LegacyHeader, LegacyVariant, MAGIC_GGJT, VocabEntry, build_metadata,
    feed_forward_length, gguf_tensor_name, gguf_token_text, legacy_tensor_name, legacy_token_text,
};
use crate::model::{Array, Metadata, TOKENS_KEY, TensorInfo, Value, tensor_bytes};
use crate::types::GgmlType;

/// The tensor types a GGJT v3 file holds: those ggml stored before GGUF.
pub const GGJT_TYPES: [GgmlType; 12] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
];

const VERSION: u32 = 3;

/// Keys GGJT v3 implies rather than stores, with the value it implies.
fn implied(key: &str, n_vocab: u32) -> Option<Value> {
    match key {
        "llama.vocab_size" => Some(Value::U32(n_vocab)),
        // GGJT v3 is the file version of ggml's second quantization format.
        "general.quantization_version" => Some(Value::U32(2)),
        _ => None,
    }
}

#[derive(Debug, thiserror::Error)]
pub enum GgjtError {
    #[error("GGJT holds LLaMA models only; this one's architecture is {0}")]
    NotLlama(String),
    #[error("GGJT needs `{0}` as a u32")]
    MissingKey(&'static str),
    #[error(
        "GGJT cannot hold grouped-query attention ({head_count} heads, {head_count_kv} key/value heads): \
         it has one head count"
    )]
    GroupedQueryAttention { head_count: u32, head_count_kv: String },
    #[error("GGJT holds a SentencePiece vocabulary with scores: {0}")]
    Vocabulary(String),
    #[error(
        "no n_mult gives feed_forward_length {n_ff} from embedding_length {n_embd}, as GGJT derives one from the other"
    )]
    NoNMult { n_ff: u32, n_embd: u32 },
    #[error("GGJT v3 cannot hold tensor `{tensor}` of type {ty} (it holds {})", type_list())]
    Type { tensor: String, ty: GgmlType },
    #[error("GGJT cannot hold tensor `{tensor}`: {why}")]
    Tensor { tensor: String, why: String },
    #[error(
        "GGJT cannot hold {} (reading the file back would not give {}): {}; delete them first \
         (edit --delete KEY, or a delete-metadata step)",
        if .0.len() == 1 { "this metadata key" } else { "these metadata keys" },
        if .0.len() == 1 { "its value" } else { "their values" },
        .0.join(", ")
    )]
    Keys(Vec<String>),
}

fn type_list() -> String {
    GGJT_TYPES.iter().map(|t| t.name()).collect::<Vec<_>>().join(", ")
}

/// Where everything of a GGJT v3 file goes.
#[derive(Debug)]
pub struct GgjtLayout {
    /// Up to the first tensor's data: the file header, the vocabulary, the
    /// first tensor's header and its padding.
    pub header: Vec<u8>,
    /// Each tensor's data offset, in file order.
    pub tensor_offsets: Vec<u64>,
    /// The bytes after each tensor's data: the next one's header and
    /// padding (none after the last).
    pub after: Vec<Vec<u8>>,
    pub file_len: u64,
}

/// The GGJT v3 file holding `metadata` and `tensors` (in this order), with
/// `legacy` the facts of the legacy file it was read from, if any.
pub fn layout(
    metadata: &Metadata,
    tensors: &[TensorInfo],
    legacy: Option<&LegacyHeader>,
) -> Result<GgjtLayout, GgjtError> {
    let hp = hyperparameters(metadata, tensors, legacy)?;
    let vocab = vocabulary(metadata, legacy)?;
    let mut header = Vec::new();
    for word in [MAGIC_GGJT, VERSION, hp.n_vocab, hp.n_embd, hp.n_mult, hp.n_head, hp.n_layer, hp.n_rot, hp.ftype] {
        header.extend_from_slice(&word.to_le_bytes());
    }
    for entry in &vocab {
        header.extend_from_slice(&(entry.text.len() as u32).to_le_bytes());
        header.extend_from_slice(&entry.text);
        header.extend_from_slice(&entry.score.to_le_bytes());
    }
    let heads = tensors.iter().map(tensor_header).collect::<Result<Vec<_>, _>>()?;
    check_metadata_comes_back(metadata, build_metadata(LegacyVariant::Ggjt, VERSION, &hp, vocab, tensors), hp.n_vocab)?;

    let mut tensor_offsets = Vec::with_capacity(tensors.len());
    let mut after: Vec<Vec<u8>> = Vec::with_capacity(tensors.len());
    let mut end = header.len() as u64;
    for (tensor, mut head) in tensors.iter().zip(heads) {
        let n_bytes = tensor_bytes(tensor.ggml_type, &tensor.dims)
            .ok_or_else(|| GgjtError::Tensor { tensor: tensor.name.clone(), why: "it is too large".into() })?;
        let data = (end + head.len() as u64).next_multiple_of(GGJT_ALIGNMENT);
        head.resize((data - end) as usize, 0);
        match after.last_mut() {
            Some(gap) => *gap = head,
            None => header.extend_from_slice(&head),
        }
        after.push(Vec::new());
        tensor_offsets.push(data);
        end = data + n_bytes;
    }
    Ok(GgjtLayout { header, tensor_offsets, after, file_len: end })
}

fn hyperparameters(
    metadata: &Metadata,
    tensors: &[TensorInfo],
    legacy: Option<&LegacyHeader>,
) -> Result<Hyperparameters, GgjtError> {
    match metadata.get_str("general.architecture") {
        Some("llama") => {}
        Some(other) => return Err(GgjtError::NotLlama(format!("`{other}`"))),
        None => return Err(GgjtError::NotLlama("not given".into())),
    }
    let u32_of = |key: &'static str| match metadata.get(key) {
        Some(Value::U32(v)) => Ok(*v),
        _ => Err(GgjtError::MissingKey(key)),
    };
    let (n_embd, n_head, n_layer) =
        (u32_of("llama.embedding_length")?, u32_of("llama.attention.head_count")?, u32_of("llama.block_count")?);
    let ftype = u32_of("general.file_type")?;
    if n_head == 0 {
        return Err(GgjtError::MissingKey("llama.attention.head_count"));
    }
    if let Some(kv) = metadata.get("llama.attention.head_count_kv")
        && *kv != Value::U32(n_head)
    {
        let head_count_kv = kv.to_string();
        return Err(GgjtError::GroupedQueryAttention { head_count: n_head, head_count_kv });
    }
    let n_vocab = match metadata.get(TOKENS_KEY) {
        Some(Value::Array(tokens)) => u32::try_from(tokens.len()).unwrap_or(u32::MAX),
        _ => 0,
    };
    // The width the reader will find: layer 0's gate, else what n_mult gives.
    let mut hp = Hyperparameters { n_vocab, n_embd, n_mult: 0, n_head, n_layer, n_rot: n_embd / n_head, ftype };
    let n_ff = if tensors.iter().any(|t| t.name == "blk.0.ffn_gate.weight") {
        feed_forward_length(&hp, tensors)
    } else {
        u32_of("llama.feed_forward_length")?
    };
    match legacy.filter(|l| (l.n_embd, l.n_head, l.n_ff) == (n_embd, n_head, n_ff)) {
        Some(l) => (hp.n_mult, hp.n_rot) = (l.n_mult, l.n_rot),
        None => hp.n_mult = find_n_mult(n_ff, n_embd).ok_or(GgjtError::NoNMult { n_ff, n_embd })?,
    }
    Ok(hp)
}

/// The largest `n_mult` (at most 8192) from which old llama.cpp computes
/// `n_ff`, as its GGJT-era `convert.py` chose one.
fn find_n_mult(n_ff: u32, n_embd: u32) -> Option<u32> {
    let base = 8 * u64::from(n_embd) / 3;
    (2..=8192u32).rev().find(|&n_mult| base.div_ceil(u64::from(n_mult)) * u64::from(n_mult) == u64::from(n_ff))
}

/// The legacy vocabulary: each GGUF token's legacy text (the file's own
/// where the GGUF text is still what it read) and score.
fn vocabulary(metadata: &Metadata, legacy: Option<&LegacyHeader>) -> Result<Vec<VocabEntry>, GgjtError> {
    let refuse = |why: &str| GgjtError::Vocabulary(why.to_owned());
    if metadata.get_str("tokenizer.ggml.model") != Some("llama") {
        return Err(refuse("`tokenizer.ggml.model` must be `llama`"));
    }
    let Some(Value::Array(Array::String(tokens))) = metadata.get(TOKENS_KEY) else {
        return Err(refuse("no `tokenizer.ggml.tokens`"));
    };
    let Some(Value::Array(Array::F32(scores))) = metadata.get("tokenizer.ggml.scores") else {
        return Err(refuse("no `tokenizer.ggml.scores` (f32)"));
    };
    if scores.len() != tokens.len() || u32::try_from(tokens.len()).is_err() {
        return Err(refuse("`tokenizer.ggml.scores` must give one score per token"));
    }
    let own: HashMap<usize, &[u8]> =
        legacy.iter().flat_map(|l| &l.token_texts).map(|(id, text)| (*id as usize, text.as_slice())).collect();
    let entries = tokens.iter().zip(scores).enumerate().map(|(id, (text, &score))| {
        let text = match own.get(&id) {
            Some(&original) if *gguf_token_text(id, original).0 == *text => original.to_vec(),
            _ => legacy_token_text(id, text),
        };
        VocabEntry { text, score }
    });
    Ok(entries.collect())
}

/// A tensor's header (without padding): dims, name length and type, the
/// dims, the legacy name.
fn tensor_header(tensor: &TensorInfo) -> Result<Vec<u8>, GgjtError> {
    let refuse = |why: String| GgjtError::Tensor { tensor: tensor.name.clone(), why };
    if !GGJT_TYPES.contains(&tensor.ggml_type) {
        return Err(GgjtError::Type { tensor: tensor.name.clone(), ty: tensor.ggml_type });
    }
    let name = legacy_tensor_name(&tensor.name);
    let read_back = gguf_tensor_name(&name);
    if read_back != tensor.name {
        return Err(refuse(format!("its legacy name `{name}` reads back as `{read_back}`")));
    }
    let mut head = Vec::with_capacity(12 + 4 * tensor.dims.len() + name.len());
    head.extend_from_slice(&(tensor.dims.len() as u32).to_le_bytes());
    head.extend_from_slice(&(name.len() as u32).to_le_bytes());
    head.extend_from_slice(&tensor.ggml_type.id().to_le_bytes());
    for &dim in &tensor.dims {
        let dim = u32::try_from(dim).map_err(|_| refuse(format!("its dimension {dim} does not fit a u32")))?;
        head.extend_from_slice(&dim.to_le_bytes());
    }
    head.extend_from_slice(name.as_bytes());
    Ok(head)
}

/// Refuses, naming them, the keys whose values reading the file back would
/// not give: the description is the reader's own, and the keys GGJT implies
/// must hold what it implies.
fn check_metadata_comes_back(metadata: &Metadata, read_back: Metadata, n_vocab: u32) -> Result<(), GgjtError> {
    let lost: Vec<String> = metadata
        .iter()
        .filter(|(key, value)| match read_back.get(key) {
            _ if *key == "general.description" => false,
            Some(back) => !back.is_identical(value),
            None => implied(key, n_vocab).is_none_or(|back| !back.is_identical(value)),
        })
        .map(|(key, _)| format!("`{key}`"))
        .collect();
    if lost.is_empty() { Ok(()) } else { Err(GgjtError::Keys(lost)) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn n_mult_is_the_largest_that_gives_the_width() {
        // LLaMA 7B as convert.py wrote it, and a width no n_mult gives.
        assert_eq!(find_n_mult(11008, 4096), Some(5504));
        assert_eq!(find_n_mult(128, 64), None);
    }

    #[test]
    fn legacy_names_come_back() {
        for name in ["blk.3.attn_q.weight", "output_norm.weight", "token_embd.weight", "something.else"] {
            assert_eq!(gguf_tensor_name(&legacy_tensor_name(name)), name);
        }
        assert_eq!(legacy_tensor_name("blk.11.ffn_down.weight"), "layers.11.feed_forward.w2.weight");
        assert_eq!(legacy_tensor_name("blk.0.attn_q_norm.weight"), "blk.0.attn_q_norm.weight");
    }
}
