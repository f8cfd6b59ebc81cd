//! Which pre-tokenizer a `tokenizer.json` vocabulary has (`tokenizer.ggml.pre`),
//! told as `convert_hf_to_gguf.py`'s `get_vocab_base_pre` tells it: encode a
//! fixed check text with the Hugging Face tokenizer, hash the id list (sha256
//! of Python's `str(ids)`), look the hash up among the released tokenizers it
//! knows. Both facts are the converter's, carried over as data by
//! `tests/convert/extract_pre_tokenizers.py`: `pre_tokenizer/check_text.txt`
//! and `pre_tokenizer/hashes.tsv`.
//!
//! The converter encodes with `transformers.AutoTokenizer`, which edits the
//! `tokenizers` pipeline of `tokenizer.json` before encoding; the edits that
//! change ids are made here too (see [`TransformersClass`]). An unknown hash
//! is refused as the converter refuses it, with the hash and the `--pre` flag
//! that names the pre-tokenizer instead.

use std::path::Path;

use serde_json::{Map, Value as Json};
use sha2::{Digest, Sha256};
use tokenizers::Tokenizer;
use tokenizers::processors::template::TemplateProcessing;

use super::checkpoint::{Checkpoint, read_optional_json};
use super::error::ConvertError;
use super::files::{CheckpointFiles, TEXT_LIMIT};

const CHECK_TEXT: &str = include_str!("pre_tokenizer/check_text.txt");
const HASHES: &str = include_str!("pre_tokenizer/hashes.tsv");

/// The pre-tokenizer name a conversion writes: `chosen` (`--pre`) when the
/// user names one, else the name the checkpoint's check hash is known by.
pub fn pre_tokenizer_name(ckpt: &Checkpoint, chosen: Option<&str>) -> Result<String, ConvertError> {
    if let Some(name) = chosen {
        return Ok(name.to_owned());
    }
    let hash = check_hash(&*ckpt.files, &ckpt.dir, &ckpt.config)?;
    match known_name(&hash) {
        Some(name) => Ok(name.to_owned()),
        None => Err(ConvertError::UnknownPreTokenizer { dir: ckpt.dir.clone(), hash }),
    }
}

/// The name the converter gives a check hash, if it knows the hash.
pub fn known_name(hash: &str) -> Option<&'static str> {
    HASHES
        .lines()
        .filter_map(|line| line.split_once('\t'))
        .find(|(h, _)| *h == hash)
        .map(|(_, rest)| rest.split_once('\t').map_or(rest, |(name, _reference)| name))
}

/// `get_vocab_base_pre`'s hash of the tokenizer in `dir` (`config` is the
/// checkpoint's `config.json`, where transformers looks when
/// `tokenizer_config.json` names no tokenizer class).
pub fn check_hash(files: &dyn CheckpointFiles, dir: &Path, config: &Json) -> Result<String, ConvertError> {
    let tokenizer_json = dir.join("tokenizer.json");
    let bytes = files
        .read(&tokenizer_json, TEXT_LIMIT)?
        .ok_or_else(|| ConvertError::Tokenizer { path: tokenizer_json.clone(), problem: "no such file".into() })?;
    let tokenizer_config = read_optional_json(files, &dir.join("tokenizer_config.json"))?.unwrap_or(Json::Null);
    let special_tokens_map = read_optional_json(files, &dir.join("special_tokens_map.json"))?.unwrap_or(Json::Null);
    check_hash_of(&bytes, &tokenizer_config, &special_tokens_map, config)
        .map_err(|problem| ConvertError::Tokenizer { path: tokenizer_json, problem })
}

/// [`check_hash`] of a `tokenizer.json`'s bytes beside the JSON of
/// `tokenizer_config.json`, `special_tokens_map.json` (null where absent)
/// and `config.json`; the error says what is wrong with the tokenizer.
pub fn check_hash_of(
    tokenizer_json: &[u8],
    tokenizer_config: &Json,
    special_tokens_map: &Json,
    config: &Json,
) -> Result<String, String> {
    let settings = Settings { tokenizer_config, special_tokens_map };
    let class = TransformersClass::of(tokenizer_config, config);
    let mut pipeline: Json = serde_json::from_slice(tokenizer_json).map_err(|e| e.to_string())?;
    class.edit_pipeline(&mut pipeline, &settings)?;
    // The tokenizers library is trusted no more than the file: a panic in it
    // is this tokenizer's error, not the process's end.
    let encoded = std::panic::catch_unwind(|| -> Result<Vec<u32>, String> {
        let mut tokenizer = Tokenizer::from_bytes(serde_json::to_vec(&pipeline).map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
        class.edit_tokenizer(&mut tokenizer, &settings)?;
        tokenizer.with_truncation(None).map_err(|e| e.to_string())?;
        tokenizer.with_padding(None);
        let encoding = tokenizer.encode(CHECK_TEXT, true).map_err(|e| e.to_string())?;
        Ok(encoding.get_ids().to_vec())
    });
    let ids = encoded.map_err(|_| "the tokenizers library failed on it (it panicked)".to_owned())??;
    Ok(hex_sha256(python_list(&ids).as_bytes()))
}

/// Python's `str()` of a list of ints: `[1, 2, 3]`.
fn python_list(ids: &[u32]) -> String {
    let items: Vec<String> = ids.iter().map(u32::to_string).collect();
    format!("[{}]", items.join(", "))
}

fn hex_sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// The tokenizer settings transformers reads beside `tokenizer.json`.
struct Settings<'a> {
    tokenizer_config: &'a Json,
    special_tokens_map: &'a Json,
}

impl Settings<'_> {
    fn flag(&self, key: &str) -> Option<bool> {
        self.tokenizer_config.get(key).and_then(Json::as_bool)
    }

    /// A special token's text: `tokenizer_config.json`'s first, then
    /// `special_tokens_map.json`'s (a string or an `AddedToken` object);
    /// `Some(None)` where the config sets it to null.
    fn special(&self, key: &str) -> Option<Option<String>> {
        let text = |v: &Json| v.as_str().or_else(|| v.get("content").and_then(Json::as_str)).map(str::to_owned);
        match self.tokenizer_config.get(key) {
            Some(Json::Null) => Some(None),
            Some(value) => Some(text(value)),
            None => self.special_tokens_map.get(key).map(text),
        }
    }
}

/// The transformers tokenizer class `AutoTokenizer` picks, as far as it
/// changes the ids of an encoding: the class named by
/// `tokenizer_config.json` (or `config.json`), else the one its
/// `model_type` maps to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TransformersClass {
    /// `LlamaTokenizerFast` and its kin (Code Llama, Gemma, Cohere): the
    /// post-processor rebuilt from `add_bos_token` (default true) and
    /// `add_eos_token`. LLaMA's own class (`llama`) takes no
    /// `add_prefix_space` reset, and with the key set rebuilds the whole
    /// pipeline from `tokenizer.model`, which is not modelled here.
    LlamaLike { bos: &'static str, eos: &'static str, llama: bool },
    /// `GPTNeoXTokenizerFast`: the post-processor rebuilt, both flags false
    /// by default.
    GptNeoX,
    /// `BertTokenizerFast`: the normalizer's case, accent and CJK settings
    /// taken from `tokenizer_config.json`.
    Bert,
    /// Any other class: `tokenizer.json` as it is, but for the base class's
    /// `add_prefix_space` rule.
    Plain,
}

/// `model_type`s that transformers 4.57's `TOKENIZER_MAPPING_NAMES` maps to a
/// class other than [`TransformersClass::Plain`].
const LLAMA_MODEL_TYPES: &[&str] = &[
    "arcee",
    "aria",
    "chameleon",
    "colpali",
    "deepseek_v2",
    "deepseek_v3",
    "deepseek_vl",
    "deepseek_vl_hybrid",
    "diffllama",
    "ernie4_5",
    "ernie4_5_moe",
    "idefics",
    "idefics2",
    "idefics3",
    "jamba",
    "janus",
    "jetmoe",
    "llama",
    "llama4",
    "llama4_text",
    "llava",
    "llava_next",
    "llava_next_video",
    "llava_onevision",
    "ministral",
    "mistral",
    "mistral3",
    "mixtral",
    "mllama",
    "paligemma",
    "persimmon",
    "phi3",
    "phimoe",
    "video_llava",
    "vipllava",
    "zamba",
    "zamba2",
];
const GEMMA_MODEL_TYPES: &[&str] = &[
    "gemma",
    "gemma2",
    "gemma3",
    "gemma3_text",
    "gemma3n",
    "gemma3n_text",
    "recurrent_gemma",
    "shieldgemma2",
    "siglip2",
    "t5gemma",
];
const COHERE_MODEL_TYPES: &[&str] = &["aya_vision", "cohere", "cohere2"];
const GPT_NEOX_MODEL_TYPES: &[&str] =
    &["falcon_mamba", "gpt_neox", "mamba", "mamba2", "mpt", "olmo", "olmo2", "olmoe", "rwkv", "stablelm", "xlstm"];
const BERT_MODEL_TYPES: &[&str] = &[
    "align",
    "bark",
    "bert",
    "blip",
    "bros",
    "chinese_clip",
    "ernie",
    "git",
    "grounding-dino",
    "megatron-bert",
    "mm-grounding-dino",
    "nezha",
    "qdqbert",
    "tvp",
    "vilt",
    "visual_bert",
];

const LLAMA: TransformersClass = TransformersClass::LlamaLike { bos: "<s>", eos: "</s>", llama: true };
const CODE_LLAMA: TransformersClass = TransformersClass::LlamaLike { bos: "<s>", eos: "</s>", llama: false };
const GEMMA: TransformersClass = TransformersClass::LlamaLike { bos: "<bos>", eos: "<eos>", llama: false };
const COHERE: TransformersClass =
    TransformersClass::LlamaLike { bos: "<BOS_TOKEN>", eos: "<|END_OF_TURN_TOKEN|>", llama: false };

impl TransformersClass {
    fn of(tokenizer_config: &Json, config: &Json) -> TransformersClass {
        let named = tokenizer_config.get("tokenizer_class").or_else(|| config.get("tokenizer_class"));
        if let Some(name) = named.and_then(Json::as_str) {
            return match name.strip_suffix("Fast").unwrap_or(name) {
                "LlamaTokenizer" => LLAMA,
                "CodeLlamaTokenizer" => CODE_LLAMA,
                "GemmaTokenizer" => GEMMA,
                "CohereTokenizer" => COHERE,
                "GPTNeoXTokenizer" => TransformersClass::GptNeoX,
                "BertTokenizer" => TransformersClass::Bert,
                _ => TransformersClass::Plain,
            };
        }
        let model_type = config.get("model_type").and_then(Json::as_str).unwrap_or_default();
        let is = |types: &[&str]| types.contains(&model_type);
        match () {
            _ if is(LLAMA_MODEL_TYPES) => LLAMA,
            _ if model_type == "code_llama" => CODE_LLAMA,
            _ if is(GEMMA_MODEL_TYPES) => GEMMA,
            _ if is(COHERE_MODEL_TYPES) => COHERE,
            _ if is(GPT_NEOX_MODEL_TYPES) => TransformersClass::GptNeoX,
            _ if is(BERT_MODEL_TYPES) => TransformersClass::Bert,
            _ => TransformersClass::Plain,
        }
    }

    /// The edits `PreTrainedTokenizerFast.__init__` and the class's own make
    /// to the serialized pipeline.
    fn edit_pipeline(self, pipeline: &mut Json, settings: &Settings) -> Result<(), String> {
        // The base class resets a top-level pre-tokenizer's `add_prefix_space`
        // to the init argument (false unless given); LLaMA's class passes
        // None, which the rebuild refuses, leaving it as it is.
        let wanted = match self {
            TransformersClass::LlamaLike { llama: true, .. } => match settings.tokenizer_config.get("add_prefix_space")
            {
                None | Some(Json::Null) => None,
                Some(_) => {
                    return Err(
                        "tokenizer_config.json sets add_prefix_space for a LlamaTokenizer, which transformers \
                                then rebuilds from tokenizer.model (not modelled: name the pre-tokenizer with --pre)"
                            .to_owned(),
                    );
                }
            },
            _ => Some(settings.flag("add_prefix_space").unwrap_or(false)),
        };
        if let (Some(wanted), Some(pre)) = (wanted, pipeline.get_mut("pre_tokenizer").and_then(Json::as_object_mut))
            && pre.get("add_prefix_space").is_some_and(|v| v.as_bool() != Some(wanted))
        {
            pre.insert("add_prefix_space".to_owned(), Json::Bool(wanted));
        }
        if self == TransformersClass::Bert
            && let Some(normalizer) = pipeline.get_mut("normalizer").and_then(Json::as_object_mut)
        {
            bert_normalizer_settings(normalizer, settings);
        }
        pipeline.get("post_processor").map_or(Ok(()), templates_define_their_tokens)
    }

    /// The edits made on the loaded tokenizer: the rebuilt post-processor.
    fn edit_tokenizer(self, tokenizer: &mut Tokenizer, settings: &Settings) -> Result<(), String> {
        let (default_bos, bos_text, eos_text) = match self {
            TransformersClass::LlamaLike { bos, eos, .. } => (true, bos, eos),
            TransformersClass::GptNeoX => (false, "<|endoftext|>", "<|endoftext|>"),
            TransformersClass::Bert | TransformersClass::Plain => return Ok(()),
        };
        let add_bos = settings.flag("add_bos_token").unwrap_or(default_bos);
        let add_eos = settings.flag("add_eos_token").unwrap_or(false);
        let mut special_tokens = Vec::new();
        let mut special = |key: &str, default: &str| -> Result<String, String> {
            let text = match settings.special(key) {
                Some(Some(text)) => text,
                Some(None) => return Err(format!("add_{key} is set but {key} is null or not a token")),
                None => default.to_owned(),
            };
            let id =
                tokenizer.token_to_id(&text).ok_or_else(|| format!("its {key} `{text}` is not in the vocabulary"))?;
            special_tokens.push((text.clone(), id));
            Ok(format!("{text}:0"))
        };
        let mut single = Vec::new();
        if add_bos {
            single.push(special("bos_token", bos_text)?);
        }
        single.push("$A:0".to_owned());
        if add_eos {
            single.push(special("eos_token", eos_text)?);
        }
        let processor = TemplateProcessing::builder()
            .try_single(single.join(" "))
            .map_err(|e| e.to_string())?
            .special_tokens(special_tokens)
            .build()
            .map_err(|e| e.to_string())?;
        tokenizer.with_post_processor(Some(processor));
        Ok(())
    }
}

/// Refuses a template post-processor (or one in a sequence) that places a
/// special token it does not define: the tokenizers library takes such a
/// file and fails only while encoding.
fn templates_define_their_tokens(processor: &Json) -> Result<(), String> {
    match processor.get("type").and_then(Json::as_str) {
        Some("Sequence") => {
            let mut processors = processor.get("processors").and_then(Json::as_array).into_iter().flatten();
            processors.try_for_each(templates_define_their_tokens)
        }
        Some("TemplateProcessing") => {
            let defined = processor.get("special_tokens").and_then(Json::as_object);
            let pieces = ["single", "pair"].into_iter().flat_map(|t| processor.get(t).and_then(Json::as_array));
            for piece in pieces.flatten() {
                let Some(id) = piece.get("SpecialToken").and_then(|t| t.get("id")).and_then(Json::as_str) else {
                    continue;
                };
                if !defined.is_some_and(|tokens| tokens.contains_key(id)) {
                    return Err(format!(
                        "its post-processor's template places `{id}`, a special token it does not define"
                    ));
                }
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// `BertTokenizerFast`: where the normalizer's `lowercase`, `strip_accents`
/// or `handle_chinese_chars` differs from `do_lower_case` (default true),
/// `strip_accents` (default none) or `tokenize_chinese_chars` (default
/// true), all three are set from the config.
fn bert_normalizer_settings(normalizer: &mut Map<String, Json>, settings: &Settings) {
    let lowercase = Json::Bool(settings.flag("do_lower_case").unwrap_or(true));
    let strip_accents = settings.tokenizer_config.get("strip_accents").cloned().unwrap_or(Json::Null);
    let chinese = Json::Bool(settings.flag("tokenize_chinese_chars").unwrap_or(true));
    let wanted = [("lowercase", lowercase), ("strip_accents", strip_accents), ("handle_chinese_chars", chinese)];
    if wanted.iter().any(|(key, value)| normalizer.get(*key).is_some_and(|v| v != value)) {
        for (key, value) in wanted {
            normalizer.insert(key.to_owned(), value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ids_hash_as_python_prints_them() {
        assert_eq!(python_list(&[1, 22, 333]), "[1, 22, 333]");
        assert_eq!(python_list(&[]), "[]");
    }

    #[test]
    fn the_table_holds_one_name_per_hash_the_later_one() {
        let hashes: Vec<&str> = HASHES.lines().map(|line| line.split('\t').next().unwrap()).collect();
        let unique: std::collections::HashSet<&&str> = hashes.iter().collect();
        assert_eq!((hashes.len(), unique.len()), (95, 95));
        // Listed for bge-small-en-v1.5, then again for jina-v2-en: the converter's `if` chain keeps the later.
        assert_eq!(known_name("0876d13b50744004aa9aeae05e7b0647eac9d801b5ba4668afc01e709c15e19f"), Some("jina-v2-en"));
        assert_eq!(known_name("0000"), None);
    }

    #[test]
    fn a_template_placing_a_token_it_does_not_define_is_refused() {
        let template = |defined: Json| {
            json!({"type": "Sequence", "processors": [{"type": "ByteLevel"}, {
                "type": "TemplateProcessing",
                "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                "pair": [],
                "special_tokens": defined,
            }]})
        };
        assert!(templates_define_their_tokens(&template(json!({}))).unwrap_err().contains("`<s>`"));
        let defined = json!({"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}});
        assert!(templates_define_their_tokens(&template(defined)).is_ok());
    }
}
