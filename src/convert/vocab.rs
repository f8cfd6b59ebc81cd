//! The tokenizer keys of a converted checkpoint (`tokenizer.*`), as
//! `convert_hf_to_gguf.py` writes them: a SentencePiece vocabulary from
//! `tokenizer.model` (LLaMA, Mistral, Gemma 3, and Phi-3's own variant) or a
//! GPT-2 BPE one from `tokenizer.json` (Qwen2, Qwen3), then gguf-py's
//! `SpecialVocab`: merges, special token ids, add-token flags, chat template
//! (reference: sec. 7 of `docs/notes/convert-hf-reference.md`).

use std::path::Path;

use serde_json::Value as Json;

use super::checkpoint::Checkpoint;
use super::error::ConvertError;
use super::family::Vocab;
use super::files::TEXT_LIMIT;
use super::pre_tokenizer::pre_tokenizer_name;
use crate::formats::sentencepiece::{PieceType, SentencePieceError, SentencePieceModel};
use crate::model::{Array, ChatTemplate, Metadata, SpecialToken, TOKENS_KEY, Value};

/// GGUF token types (`tokenizer.ggml.token_type`).
const NORMAL: i32 = 1;
const UNKNOWN: i32 = 2;
const CONTROL: i32 = 3;
const USER_DEFINED: i32 = 4;
const UNUSED: i32 = 5;
const BYTE: i32 = 6;

/// `SpecialVocab`'s token kinds, in its order.
const SPECIAL_TYPES: [&str; 7] = ["bos", "eos", "unk", "sep", "pad", "cls", "mask"];

/// Writes the tokenizer keys of a checkpoint whose family reads its
/// tokenizer as `vocab` says; `pre` names the pre-tokenizer of a
/// `tokenizer.json` vocabulary where its check hash is not enough.
pub fn tokenizer_keys(
    ckpt: &Checkpoint,
    vocab: Vocab,
    pre: Option<&str>,
    keys: &mut Metadata,
) -> Result<(), ConvertError> {
    let files = TokenizerFiles::read(ckpt)?;
    let sentencepiece = ckpt.has("tokenizer.model")?;
    match vocab {
        Vocab::Phi3 => {
            let class = files.config.as_ref().and_then(|c| c.get("tokenizer_class")).and_then(Json::as_str);
            if class == Some("GPT2Tokenizer") {
                return gpt2(ckpt, &files, pre, keys);
            }
            let (tokens, scores, types) = sentencepiece_lists(ckpt, &files, true)?;
            sentencepiece_keys(tokens, scores, types, ckpt, &files, keys)
        }
        Vocab::Llama => {
            if let Some(add) = files.config.as_ref().and_then(|c| c.get("add_prefix_space")).filter(|v| !v.is_null()) {
                keys.set("tokenizer.ggml.add_space_prefix", Value::Bool(truthy(Some(add))));
            }
            match sentencepiece {
                true => {
                    let (tokens, scores, types) = sentencepiece_lists(ckpt, &files, false)?;
                    sentencepiece_keys(tokens, scores, types, ckpt, &files, keys)?;
                }
                false => gpt2(ckpt, &files, pre, keys)?,
            }
            match ckpt.config.get("vocab_size").and_then(Json::as_u64) {
                // CodeLlama's infill tokens: of them only the end of turn has a key.
                Some(32016) => keys.set("tokenizer.ggml.eot_token_id", Value::U32(32010)),
                Some(49152) => keys.set("tokenizer.ggml.add_bos_token", Value::Bool(false)),
                _ => {}
            }
            Ok(())
        }
        Vocab::Gemma { end_of_turn } if sentencepiece => {
            let (tokens, scores, types) = sentencepiece_lists(ckpt, &files, false)?;
            sentencepiece_keys(tokens, scores, types, ckpt, &files, keys)?;
            if let Some(default) = end_of_turn {
                let id = ckpt.config.get("eot_token_id").and_then(Json::as_u64).unwrap_or(default);
                keys.set("tokenizer.ggml.eot_token_id", Value::U32(id as u32));
            }
            keys.set("tokenizer.ggml.add_space_prefix", Value::Bool(false));
            Ok(())
        }
        Vocab::SentencePieceThenSpacePrefix => {
            let (tokens, scores, types) = sentencepiece_lists(ckpt, &files, false)?;
            sentencepiece_keys(tokens, scores, types, ckpt, &files, keys)?;
            if let Some(add) = files.config.as_ref().and_then(|c| c.get("add_prefix_space")) {
                // Written whenever the key is there; a null packs as false.
                keys.set("tokenizer.ggml.add_space_prefix", Value::Bool(truthy(Some(add))));
            }
            Ok(())
        }
        Vocab::SentencePieceOrBpe if sentencepiece => {
            let (tokens, scores, types) = sentencepiece_lists(ckpt, &files, false)?;
            sentencepiece_keys(tokens, scores, types, ckpt, &files, keys)
        }
        Vocab::Gemma { .. } => gpt2(ckpt, &files, pre, keys),
        Vocab::SentencePieceOrBpe | Vocab::Bpe => gpt2(ckpt, &files, pre, keys),
        Vocab::Roberta if files.tokenizer.is_some() => {
            gpt2(ckpt, &files, pre, keys)?;
            keys.set("tokenizer.ggml.token_type_count", token_type_count(ckpt)?);
            Ok(())
        }
        Vocab::WordPiece | Vocab::Roberta => word_piece(ckpt, &files, pre, keys),
        Vocab::XlmRoberta => xlm_roberta(ckpt, &files, keys),
        Vocab::ModernBert => {
            for key in ["add_bos_token", "add_eos_token", "add_sep_token"] {
                keys.set(&format!("tokenizer.ggml.{key}"), Value::Bool(true));
            }
            gpt2(ckpt, &files, pre, keys)
        }
        Vocab::InternLm2 => internlm2(ckpt, &files, keys),
        Vocab::Glm4 => {
            gpt2_tokens(ckpt, &files, pre, keys)?;
            let mut special = SpecialVocab::load(ckpt, &files, true, None)?;
            let (end, user) = (added_token_id(&files, "<|endoftext|>")?, added_token_id(&files, "<|user|>")?);
            for (typ, id) in [("eos", end), ("eot", user), ("unk", end), ("bos", end)] {
                special.set_special(typ, Some(&Json::from(id)));
            }
            special.write(keys);
            Ok(())
        }
    }
}

/// XLM-RoBERTa's Unigram vocabulary from `sentencepiece.bpe.model`
/// (`_xlmroberta_set_vocab`), written as llama.cpp's T5 tokenizer reads it:
/// fairseq's ids (`<s>`, `<pad>`, `</s>`, `<unk>` first, every other piece
/// one place later, the last place dropped), the normalizer's settings and
/// the token-type count.
fn xlm_roberta(ckpt: &Checkpoint, files: &TokenizerFiles, keys: &mut Metadata) -> Result<(), ConvertError> {
    let path = ckpt.dir.join("sentencepiece.bpe.model");
    if !ckpt.has("sentencepiece.bpe.model")? {
        return Err(ConvertError::Config(format!(
            "{}: no sentencepiece.bpe.model; the converter then reads tokenizer.json through transformers' \
             tokenizer, which this conversion does not model",
            ckpt.dir.display()
        )));
    }
    let model = sentencepiece_model(ckpt, &path)?;
    if model.trainer.model_type != 1 {
        return Err(ConvertError::Config(format!("{}: not a Unigram model", path.display())));
    }
    let config_vocab = ckpt.config.get("vocab_size").and_then(Json::as_u64).unwrap_or(0) as usize;
    let vocab_size = config_vocab.max(model.pieces.len());
    if vocab_size < 4 {
        return Err(ConvertError::Config(format!("{}: fewer than four pieces", path.display())));
    }
    let (tokens, scores, types) = padded_pieces(&model, vocab_size);
    let realign = |head: [String; 4], rest: &[String]| head.into_iter().chain(rest.iter().cloned()).collect();
    let tokens: Vec<String> = realign(["<s>", "<pad>", "</s>", "<unk>"].map(String::from), &tokens[3..vocab_size - 1]);
    let scores: Vec<f32> = [0.0; 4].into_iter().chain(scores[3..vocab_size - 1].iter().copied()).collect();
    let types: Vec<i32> =
        [CONTROL, CONTROL, CONTROL, UNKNOWN].into_iter().chain(types[3..vocab_size - 1].iter().copied()).collect();
    let n_vocab = tokens.len();
    keys.set("tokenizer.ggml.model", Value::string("t5"));
    keys.set("tokenizer.ggml.pre", Value::string("default"));
    keys.set(TOKENS_KEY, string_array(tokens));
    keys.set("tokenizer.ggml.scores", Value::Array(Array::F32(scores)));
    keys.set("tokenizer.ggml.token_type", Value::Array(Array::I32(types)));
    let normalizer = model.normalizer;
    keys.set("tokenizer.ggml.add_space_prefix", Value::Bool(normalizer.add_dummy_prefix));
    keys.set("tokenizer.ggml.token_type_count", token_type_count(ckpt)?);
    keys.set("tokenizer.ggml.remove_extra_whitespaces", Value::Bool(normalizer.remove_extra_whitespaces));
    if !normalizer.precompiled_charsmap.is_empty() {
        keys.set("tokenizer.ggml.precompiled_charsmap", Value::Array(Array::U8(normalizer.precompiled_charsmap)));
    }
    SpecialVocab::load(ckpt, files, false, Some(n_vocab))?.write(keys);
    Ok(())
}

/// InternLM2's SentencePiece reading (`InternLM2Model.set_vocab`).
fn internlm2(ckpt: &Checkpoint, files: &TokenizerFiles, keys: &mut Metadata) -> Result<(), ConvertError> {
    const CHAT_EOS: &str = "<|im_end|>";
    let path = ckpt.dir.join("tokenizer.model");
    let model = sentencepiece_model(ckpt, &path)?;
    let vocab_size = ckpt.config.get("vocab_size").and_then(Json::as_u64).map_or(model.pieces.len(), |n| n as usize);
    if vocab_size > model.pieces.len() {
        return Err(ConvertError::Config(format!(
            "`vocab_size` ({vocab_size}) is past the {} pieces of {}",
            model.pieces.len(),
            path.display()
        )));
    }
    let mut tokens = Vec::with_capacity(vocab_size);
    let mut scores = Vec::with_capacity(vocab_size);
    let mut types = Vec::with_capacity(vocab_size);
    for piece in &model.pieces[..vocab_size] {
        // A NUL would read as an empty string in C.
        tokens.push(if piece.piece == "\0" { "🐉".to_owned() } else { piece.piece.clone() });
        scores.push(piece.score);
        types.push(if piece.piece.starts_with("[UNUSED") { UNUSED } else { piece_type(piece.kind) });
    }
    if let Some(Json::Object(added)) = ckpt.json("added_tokens.json")? {
        for text in added.keys() {
            tokens.push(text.clone());
            scores.push(-1000.0);
            types.push(USER_DEFINED);
        }
    }
    let mut chat_eos = None;
    let decoder = files.config.as_ref().and_then(|c| c.get("added_tokens_decoder")).and_then(Json::as_object);
    let from_config = decoder.into_iter().flatten().map(|(id, data)| (id.parse::<u64>().ok(), data));
    let listed = files.tokenizer.as_ref().and_then(|t| t.get("added_tokens")).and_then(Json::as_array);
    let from_tokenizer = listed.into_iter().flatten().map(|data| (data.get("id").and_then(Json::as_u64), data));
    for (id, data) in from_config.chain(from_tokenizer) {
        let content = data.get("content").and_then(Json::as_str);
        let (Some(id), Some(content)) = (id, content) else {
            return Err(ConvertError::Config(format!("an added token without an id or content: {data}")));
        };
        let slot = usize::try_from(id).ok().filter(|&i| i < tokens.len()).ok_or_else(|| {
            ConvertError::Config(format!("added token `{content}` has id {id}, past the {} tokens", tokens.len()))
        })?;
        if content == CHAT_EOS {
            chat_eos = Some(id);
        }
        let special = truthy(data.get("special"));
        (tokens[slot], scores[slot], types[slot]) =
            (content.to_owned(), -1000.0, if special { CONTROL } else { USER_DEFINED });
    }
    let n_vocab = tokens.len();
    keys.set("tokenizer.ggml.model", Value::string("llama"));
    keys.set("tokenizer.ggml.pre", Value::string("default"));
    keys.set(TOKENS_KEY, string_array(tokens));
    keys.set("tokenizer.ggml.scores", Value::Array(Array::F32(scores)));
    keys.set("tokenizer.ggml.token_type", Value::Array(Array::I32(types)));
    keys.set("tokenizer.ggml.add_space_prefix", Value::Bool(model.normalizer.add_dummy_prefix));
    let mut special = SpecialVocab::load(ckpt, files, false, Some(n_vocab))?;
    let Some(eos) = special.ids.iter_mut().find(|(typ, _)| typ == "eos") else {
        return Err(ConvertError::Config("the tokenizer files give no end-of-sequence token".into()));
    };
    if let Some(id) = chat_eos {
        // The chat models end a turn, not the sequence, with `<|im_end|>`.
        eos.1 = id;
    }
    special.write(keys);
    Ok(())
}

/// The id of the token `tokenizer.json` adds as `content`.
fn added_token_id(files: &TokenizerFiles, content: &str) -> Result<u64, ConvertError> {
    let added = files.tokenizer.as_ref().and_then(|t| t.get("added_tokens")).and_then(Json::as_array);
    added
        .into_iter()
        .flatten()
        .find(|token| token.get("content").and_then(Json::as_str) == Some(content))
        .and_then(|token| token.get("id").and_then(Json::as_u64))
        .ok_or_else(|| ConvertError::Config(format!("tokenizer.json adds no `{content}` token")))
}

/// `tokenizer.json` and `tokenizer_config.json`, read once (either may be absent).
struct TokenizerFiles {
    tokenizer: Option<Json>,
    config: Option<Json>,
}

impl TokenizerFiles {
    fn read(ckpt: &Checkpoint) -> Result<TokenizerFiles, ConvertError> {
        Ok(TokenizerFiles { tokenizer: ckpt.json("tokenizer.json")?, config: ckpt.json("tokenizer_config.json")? })
    }
}

/// The checkpoint's SentencePiece model at `path`.
fn sentencepiece_model(ckpt: &Checkpoint, path: &Path) -> Result<SentencePieceModel, ConvertError> {
    let at = |offset, problem| {
        ConvertError::Config(SentencePieceError { path: path.to_owned(), offset, problem }.to_string())
    };
    let bytes = ckpt.files.read(path, TEXT_LIMIT)?.ok_or_else(|| at(0, "no such file".into()))?;
    SentencePieceModel::parse(&bytes).map_err(|(offset, problem)| at(offset, problem))
}

/// The converter's `does_token_look_special`.
fn looks_special(text: &str) -> bool {
    matches!(text, "<pad>" | "<mask>" | "<2mass>" | "[@BOS@]")
        || (text.starts_with("<|") && text.ends_with("|>"))
        || (text.starts_with("<｜") && text.ends_with("｜>"))
        || (text.starts_with("<unused") && text.ends_with('>'))
}

type Lists = (Vec<String>, Vec<f32>, Vec<i32>);

/// Tokens, scores and types from `tokenizer.model`, overlaid with
/// `added_tokens.json` and `tokenizer_config.json`'s `added_tokens_decoder`
/// (Phi-3's variant: no look-special test, no `▁` replacement, then
/// `tokenizer.json`'s `added_tokens` too).
fn sentencepiece_lists(ckpt: &Checkpoint, files: &TokenizerFiles, phi3: bool) -> Result<Lists, ConvertError> {
    let model = sentencepiece_model(ckpt, &ckpt.dir.join("tokenizer.model"))?;
    let config_vocab = if phi3 {
        ckpt.config.get("vocab_size")
    } else {
        ckpt.hparam(&["vocab_size_per_layer_input", "vocab_size"]).filter(|v| !v.is_null())
    };
    let vocab_size = config_vocab.and_then(Json::as_u64).map_or(model.pieces.len(), |n| n as usize);
    let (mut tokens, mut scores, mut types) = padded_pieces(&model, vocab_size);
    if let Some(Json::Object(added)) = ckpt.json("added_tokens.json")? {
        for (text, id) in added {
            let Some(id) = id.as_u64().map(|i| i as usize).filter(|&i| i < vocab_size) else { continue };
            (tokens[id], scores[id], types[id]) = (text, -1000.0, USER_DEFINED);
        }
    }
    if let Some(Json::Object(decoder)) = files.config.as_ref().and_then(|c| c.get("added_tokens_decoder")) {
        for (id, data) in decoder {
            let Some(id) = id.parse::<usize>().ok().filter(|&i| i < vocab_size) else { continue };
            let content = data.get("content").and_then(Json::as_str).unwrap_or_default();
            let special = data.get("special").and_then(Json::as_bool).unwrap_or(false);
            let (text, kind) = if phi3 {
                (content.to_owned(), if special { CONTROL } else { USER_DEFINED })
            } else if special || looks_special(content) {
                (content.to_owned(), CONTROL)
            } else {
                (content.replace('▁', " "), USER_DEFINED)
            };
            (tokens[id], scores[id], types[id]) = (text, -1000.0, kind);
        }
    }
    if phi3 && let Some(tokenizer) = &files.tokenizer {
        for data in tokenizer.get("added_tokens").and_then(Json::as_array).into_iter().flatten() {
            let Some(id) = data.get("id").and_then(Json::as_u64).map(|i| i as usize).filter(|&i| i < vocab_size) else {
                continue;
            };
            let content = data.get("content").and_then(Json::as_str).unwrap_or_default();
            let special = data.get("special").and_then(Json::as_bool).unwrap_or(false);
            (tokens[id], scores[id], types[id]) =
                (content.to_owned(), -1000.0, if special { CONTROL } else { USER_DEFINED });
        }
    }
    Ok((tokens, scores, types))
}

/// The pieces of `model` as `SentencePieceProcessor` gives them, in lists
/// of `vocab_size` (`[PADn]`, unused, past its pieces; pieces past it left out).
fn padded_pieces(model: &SentencePieceModel, vocab_size: usize) -> Lists {
    let mut tokens: Vec<String> = (0..vocab_size).map(|i| format!("[PAD{i}]")).collect();
    let mut scores = vec![-10000.0f32; vocab_size];
    let mut types = vec![UNUSED; vocab_size];
    for (id, piece) in model.pieces.iter().enumerate().take(vocab_size) {
        (tokens[id], scores[id], types[id]) = (piece.piece.clone(), piece.score, piece_type(piece.kind));
    }
    (tokens, scores, types)
}

/// A piece's token type as the converter asks `SentencePieceProcessor`
/// (unknown, control, unused, byte, else normal: a user-defined piece is
/// normal).
fn piece_type(kind: PieceType) -> i32 {
    match kind {
        PieceType::Unknown => UNKNOWN,
        PieceType::Control => CONTROL,
        PieceType::Unused => UNUSED,
        PieceType::Byte => BYTE,
        PieceType::Normal | PieceType::UserDefined => NORMAL,
    }
}

fn sentencepiece_keys(
    tokens: Vec<String>,
    scores: Vec<f32>,
    types: Vec<i32>,
    ckpt: &Checkpoint,
    files: &TokenizerFiles,
    keys: &mut Metadata,
) -> Result<(), ConvertError> {
    let n_vocab = tokens.len();
    keys.set("tokenizer.ggml.model", Value::string("llama"));
    keys.set("tokenizer.ggml.pre", Value::string("default"));
    keys.set(TOKENS_KEY, string_array(tokens));
    keys.set("tokenizer.ggml.scores", Value::Array(Array::F32(scores)));
    keys.set("tokenizer.ggml.token_type", Value::Array(Array::I32(types)));
    SpecialVocab::load(ckpt, files, false, Some(n_vocab))?.write(keys);
    Ok(())
}

fn string_array(strings: Vec<String>) -> Value {
    Value::Array(Array::String(strings.into_iter().collect()))
}

/// A GPT-2 BPE vocabulary from `tokenizer.json`.
fn gpt2(ckpt: &Checkpoint, files: &TokenizerFiles, pre: Option<&str>, keys: &mut Metadata) -> Result<(), ConvertError> {
    gpt2_tokens(ckpt, files, pre, keys)?;
    SpecialVocab::load(ckpt, files, true, None)?.write(keys);
    Ok(())
}

/// A GPT-2 BPE vocabulary's model, pre-tokenizer, tokens and their types.
fn gpt2_tokens(
    ckpt: &Checkpoint,
    files: &TokenizerFiles,
    pre: Option<&str>,
    keys: &mut Metadata,
) -> Result<(), ConvertError> {
    let (tokens, types) = vocab_base(ckpt, files)?;
    keys.set("tokenizer.ggml.model", Value::string("gpt2"));
    keys.set("tokenizer.ggml.pre", Value::string(&pre_tokenizer_name(ckpt, pre)?));
    keys.set(TOKENS_KEY, string_array(tokens));
    keys.set("tokenizer.ggml.token_type", Value::Array(Array::I32(types)));
    Ok(())
}

/// BERT's WordPiece vocabulary (`BertModel.set_vocab`): the token-type
/// count, then the tokens with the phantom space llama.cpp's WordPiece
/// reads: none for a special token, `##` dropped from a word's
/// continuation, `▁` before every other.
fn word_piece(
    ckpt: &Checkpoint,
    files: &TokenizerFiles,
    pre: Option<&str>,
    keys: &mut Metadata,
) -> Result<(), ConvertError> {
    let (tokens, types) = vocab_base(ckpt, files)?;
    keys.set("tokenizer.ggml.token_type_count", token_type_count(ckpt)?);
    let phantom = |(token, kind): (String, &i32)| match (*kind, token.strip_prefix("##")) {
        (CONTROL, _) => token,
        (_, Some(continued)) => continued.to_owned(),
        _ => format!("\u{2581}{token}"),
    };
    let n_vocab = tokens.len();
    let tokens: Vec<String> = tokens.into_iter().zip(&types).map(phantom).collect();
    keys.set("tokenizer.ggml.model", Value::string("bert"));
    keys.set("tokenizer.ggml.pre", Value::string(&pre_tokenizer_name(ckpt, pre)?));
    keys.set(TOKENS_KEY, string_array(tokens));
    keys.set("tokenizer.ggml.token_type", Value::Array(Array::I32(types)));
    SpecialVocab::load(ckpt, files, false, Some(n_vocab))?.write(keys);
    Ok(())
}

/// `type_vocab_size`, 1 when the config has none.
fn token_type_count(ckpt: &Checkpoint) -> Result<Value, ConvertError> {
    match ckpt.config.get("type_vocab_size") {
        None => Ok(Value::U32(1)),
        Some(n) => super::hparams::count_of("type_vocab_size", n),
    }
}

/// `get_vocab_base`'s lists from `tokenizer.json`: the model's vocabulary
/// and the added tokens by id, `[PADn]` for ids neither has.
fn vocab_base(ckpt: &Checkpoint, files: &TokenizerFiles) -> Result<(Vec<String>, Vec<i32>), ConvertError> {
    let tokenizer = files
        .tokenizer
        .as_ref()
        .ok_or_else(|| ConvertError::Config(format!("{}: no tokenizer.model or tokenizer.json", ckpt.dir.display())))?;
    let vocab = tokenizer["model"]["vocab"]
        .as_object()
        .ok_or_else(|| ConvertError::Config("tokenizer.json: no model.vocab".into()))?;
    let added: Vec<&Json> = tokenizer.get("added_tokens").and_then(Json::as_array).into_iter().flatten().collect();
    let mut by_id: std::collections::BTreeMap<usize, (String, Option<bool>)> = std::collections::BTreeMap::new();
    for (text, id) in vocab {
        if let Some(id) = id.as_u64() {
            by_id.insert(id as usize, (text.clone(), None));
        }
    }
    for data in &added {
        if let (Some(id), Some(content)) =
            (data.get("id").and_then(Json::as_u64), data.get("content").and_then(Json::as_str))
        {
            let special = data.get("special").and_then(Json::as_bool).unwrap_or(false);
            by_id.insert(id as usize, (content.to_owned(), Some(special)));
        }
    }
    let vocab_size = ckpt.config.get("vocab_size").and_then(Json::as_u64).map_or(by_id.len(), |n| n as usize);
    let mut tokens = Vec::with_capacity(vocab_size);
    let mut types = Vec::with_capacity(vocab_size);
    for i in 0..vocab_size {
        match by_id.get(&i) {
            None => {
                tokens.push(format!("[PAD{i}]"));
                types.push(UNUSED);
            }
            Some((text, None)) => {
                tokens.push(text.clone());
                types.push(NORMAL);
            }
            Some((text, Some(special))) => {
                if *special || looks_special(text) {
                    tokens.push(text.clone());
                    types.push(CONTROL);
                } else {
                    tokens.push(text.replace('▁', " "));
                    types.push(USER_DEFINED);
                }
            }
        }
    }
    Ok((tokens, types))
}

/// Python's truthiness of a JSON value, `None` being Python's `None`.
fn truthy(value: Option<&Json>) -> bool {
    match value {
        None | Some(Json::Null) => false,
        Some(Json::Bool(b)) => *b,
        Some(Json::String(s)) => !s.is_empty(),
        Some(Json::Object(o)) => !o.is_empty(),
        Some(Json::Array(a)) => !a.is_empty(),
        Some(Json::Number(n)) => n.as_f64() != Some(0.0),
    }
}

/// A template entry's special token, as the JSON string the config's
/// entries are compared with.
fn special_id(entry: &Json) -> Option<Json> {
    entry.get("SpecialToken").and_then(|s| s.get("id")).filter(|id| truthy(Some(id))).cloned()
}

/// The tokenizer config's BOS, CLS, EOS and SEP as the post-processor
/// reads them, and the config they are written back to.
struct ConfigTokens<'c> {
    config: &'c mut Option<Json>,
    /// Python's truthiness: a config that is missing or empty is no config.
    has_config: bool,
    bos: Option<Json>,
    cls: Option<Json>,
    eos: Option<Json>,
    sep: Option<Json>,
}

impl<'c> ConfigTokens<'c> {
    fn read(config: &'c mut Option<Json>) -> ConfigTokens<'c> {
        let has_config = config.as_ref().and_then(Json::as_object).is_some_and(|o| !o.is_empty());
        let entry = |key: &str| config.as_ref().and_then(|c| c.get(key)).cloned();
        let (bos, cls, eos, sep) = (entry("bos_token"), entry("cls_token"), entry("eos_token"), entry("sep_token"));
        ConfigTokens { config, has_config, bos, cls, eos, sep }
    }

    fn put(&mut self, key: &str, value: &Option<Json>) {
        if let Some(map) = self.config.as_mut().and_then(Json::as_object_mut) {
            map.insert(key.to_owned(), value.clone().unwrap_or(Json::Null));
        }
    }
}

/// gguf-py's `SpecialVocab`: what it reads from `tokenizer.json`,
/// `tokenizer_config.json` and `config.json` (the checkpoint's), in its
/// insertion orders.
#[derive(Default)]
struct SpecialVocab {
    merges: Vec<String>,
    ids: Vec<(String, u64)>,
    add: Vec<(String, bool)>,
    chat_template: Option<ChatTemplate>,
    normalizer_lowercase: Option<bool>,
    normalizer_strip_accents: Option<bool>,
    n_vocab: Option<usize>,
}

impl SpecialVocab {
    fn load(
        ckpt: &Checkpoint,
        files: &TokenizerFiles,
        load_merges: bool,
        n_vocab: Option<usize>,
    ) -> Result<SpecialVocab, ConvertError> {
        let mut v = SpecialVocab { n_vocab, ..SpecialVocab::default() };
        // The converter edits its copy of the tokenizer config as it reads
        // the post-processor, and may add EOT and EOM to the token kinds.
        let (tokenizer, mut config) = (&files.tokenizer, files.config.clone());
        let mut types: Vec<&'static str> = SPECIAL_TYPES.to_vec();
        let added: &[Json] =
            tokenizer.as_ref().and_then(|t| t.get("added_tokens")).and_then(Json::as_array).map_or(&[], Vec::as_slice);
        if let Some(tokenizer) = tokenizer {
            if load_merges && let Some(merges) = tokenizer["model"].get("merges").and_then(Json::as_array) {
                v.merges = merges
                    .iter()
                    .filter_map(|m| match m {
                        Json::String(s) => Some(s.clone()),
                        // Pairs (transformers ≥ 4.45): spaces inside a part become U+0120.
                        Json::Array(pair) => Some(
                            pair.iter()
                                .filter_map(Json::as_str)
                                .map(|p| p.replace(' ', "\u{120}"))
                                .collect::<Vec<_>>()
                                .join(" "),
                        ),
                        _ => None,
                    })
                    .collect();
            }
            if let Some(normalizer) = tokenizer.get("normalizer").filter(|n| !n.is_null()) {
                v.normalizer(normalizer);
            }
            v.post_processor(tokenizer, &mut config, &mut types);
        }
        if let Some(config) = config.as_ref().filter(|c| c.as_object().is_some_and(|o| !o.is_empty())) {
            v.chat_template = match config.get("chat_template") {
                Some(template) => chat_template_of(template, "tokenizer_config.json")?,
                None => chat_template_file(ckpt)?,
            };
            for &typ in &types {
                if let Some(Json::Bool(add)) = config.get(format!("add_{typ}_token").as_str())
                    && !v.add.iter().any(|(t, _)| t == typ)
                {
                    v.add.push((typ.to_owned(), *add));
                }
                let content = match config.get(format!("{typ}_token").as_str()) {
                    Some(Json::String(s)) => s.as_str(),
                    Some(Json::Object(o)) => match o.get("content") {
                        Some(Json::String(s)) => s.as_str(),
                        _ => continue,
                    },
                    _ => continue,
                };
                let id = added
                    .iter()
                    .find(|a| a.get("content").and_then(Json::as_str) == Some(content))
                    .and_then(|a| a.get("id"));
                v.set_special(typ, id);
            }
        }
        for &typ in &types {
            let key = format!("{typ}_token_id");
            let id =
                ckpt.config.get(&key).filter(|v| !v.is_null()).or_else(|| ckpt.config.get("text_config")?.get(&key));
            v.set_special(typ, id);
        }
        Ok(v)
    }

    /// The lowercase and strip-accents flags of `tokenizer.json`'s normalizer
    /// (standalone, a `BertNormalizer`'s attributes, or inside a `Sequence`).
    fn normalizer(&mut self, normalizer: &Json) {
        match normalizer.get("type").and_then(Json::as_str) {
            Some("Lowercase") => self.normalizer_lowercase = Some(true),
            Some("StripAccents") => self.normalizer_strip_accents = Some(true),
            Some("BertNormalizer") => {
                if let Some(v) = normalizer.get("lowercase") {
                    self.normalizer_lowercase = v.as_bool();
                }
                if let Some(v) = normalizer.get("strip_accents") {
                    self.normalizer_strip_accents = v.as_bool();
                }
            }
            Some("Sequence") => {
                for inner in normalizer.get("normalizers").and_then(Json::as_array).into_iter().flatten() {
                    self.normalizer(inner);
                }
            }
            _ => {}
        }
    }

    /// `_set_special_token`: ints only, below the vocabulary size, first one wins.
    fn set_special(&mut self, typ: &str, id: Option<&Json>) {
        let Some(id) = id.and_then(Json::as_u64) else { return };
        if self.n_vocab.is_some_and(|n| id as usize >= n) || self.ids.iter().any(|(t, _)| t == typ) {
            return;
        }
        self.ids.push((typ.to_owned(), id));
    }

    /// The add-token flags `tokenizer.json`'s post-processor implies (the
    /// converter's own crude reading of `ByteLevel`, `RobertaProcessing` and
    /// `TemplateProcessing`), and its edits of the tokenizer config: CLS as
    /// BOS and SEP as EOS where those are unset, the template's first and
    /// last special tokens as BOS/CLS and EOS (a different EOS kept as EOT,
    /// else EOM), a pair's separator as SEP.
    fn post_processor(&mut self, tokenizer: &Json, config: &mut Option<Json>, types: &mut Vec<&'static str>) {
        let mut tokens = ConfigTokens::read(config);
        if !truthy(tokens.bos.as_ref()) && truthy(tokens.cls.as_ref()) && tokens.has_config {
            tokens.bos = tokens.cls.clone();
            tokens.put("bos_token", &tokens.bos.clone());
        }
        if !truthy(tokens.eos.as_ref()) && truthy(tokens.sep.as_ref()) && tokens.has_config {
            tokens.eos = tokens.sep.clone();
            tokens.put("eos_token", &tokens.eos.clone());
        }
        let Some(post) = tokenizer.get("post_processor").filter(|p| truthy(Some(p))) else { return };
        let processors: Vec<&Json> = match post.get("processors").and_then(Json::as_array) {
            Some(list) => list.iter().collect(),
            None => vec![post],
        };
        for processor in processors {
            match processor.get("type").and_then(Json::as_str) {
                Some("ByteLevel") => {
                    self.add_default("bos", false);
                    self.add_default("eos", false);
                }
                Some("RobertaProcessing") => {
                    for typ in ["bos", "eos", "sep"] {
                        self.set_add(typ, true);
                    }
                    let first_of = |key: &str, default: &Option<Json>| {
                        processor.get(key).and_then(Json::as_array).and_then(|a| a.first()).cloned().or(default.clone())
                    };
                    if !truthy(tokens.cls.as_ref()) && tokens.has_config {
                        tokens.cls = first_of("cls", &tokens.bos);
                        tokens.put("cls_token", &tokens.cls.clone());
                    }
                    if !truthy(tokens.sep.as_ref()) && tokens.has_config {
                        tokens.sep = first_of("sep", &tokens.eos);
                        tokens.put("sep_token", &tokens.sep.clone());
                    }
                }
                Some("TemplateProcessing") => self.template_processing(processor, &mut tokens, types),
                _ => {}
            }
        }
    }

    /// A `TemplateProcessing` post-processor: its single template's first and
    /// last special tokens as BOS/CLS and EOS, its pair template's separator
    /// as SEP.
    fn template_processing(&mut self, processor: &Json, tokens: &mut ConfigTokens, types: &mut Vec<&'static str>) {
        let template =
            |key: &str| -> Vec<&Json> { processor.get(key).and_then(Json::as_array).into_iter().flatten().collect() };
        let (single, pair) = (template("single"), template("pair"));
        let is = |id: &Json, of: &Option<Json>| of.as_ref() == Some(id);
        let (mut first, mut last) = (None, None);
        if single.len() > 1 {
            first = special_id(single[0]);
            if let Some(f) = &first {
                if !tokens.has_config {
                    tokens.bos = Some(f.clone());
                } else if !is(f, &tokens.bos) && !is(f, &tokens.cls) {
                    if !truthy(tokens.bos.as_ref()) {
                        tokens.bos = Some(f.clone());
                        tokens.put("bos_token", &tokens.bos.clone());
                    }
                    if !truthy(tokens.cls.as_ref()) {
                        tokens.cls = Some(f.clone());
                        tokens.put("cls_token", &tokens.cls.clone());
                    }
                }
                self.set_add("bos", is(f, &tokens.bos) || is(f, &tokens.cls));
            }
            last = special_id(single[single.len() - 1]);
            if let Some(l) = &last {
                if !tokens.has_config {
                    tokens.eos = Some(l.clone());
                } else if !is(l, &tokens.eos) {
                    for kept in ["eot", "eom"] {
                        if !types.contains(&kept) {
                            types.push(kept);
                            tokens.put(&format!("{kept}_token"), &tokens.eos.clone());
                            break;
                        }
                    }
                    tokens.eos = Some(l.clone());
                    tokens.put("eos_token", &tokens.eos.clone());
                }
                self.set_add("eos", is(l, &tokens.eos));
            }
        }
        if pair.is_empty() {
            return;
        }
        let start = usize::from(first.is_some() && special_id(pair[0]) == first);
        let stop = if last.is_some() && special_id(pair[pair.len() - 1]) == last { pair.len() - 1 } else { pair.len() };
        let inner = if start <= stop { &pair[start..stop] } else { &pair[0..0] };
        let seq = |e: &Json| e.get("Sequence").and_then(|s| s.get("id")).and_then(Json::as_str).map(str::to_owned);
        if !inner.is_empty()
            && seq(inner[0]).as_deref() == Some("A")
            && seq(inner[inner.len() - 1]).as_deref() == Some("B")
            && inner.len() > 2
        {
            let middle = &inner[1..inner.len() - 1];
            let is_sep = |e: &Json| special_id(e).is_some_and(|id| is(&id, &tokens.sep) || is(&id, &tokens.eos));
            let mut add_sep = is_sep(middle[0]) && last.is_none();
            if middle.len() == 2 && is_sep(middle[1]) {
                add_sep = true;
            }
            self.set_add("sep", add_sep);
            if add_sep && !truthy(tokens.sep.as_ref()) && tokens.has_config {
                tokens.put("sep_token", &tokens.eos.clone());
            }
        }
    }

    /// An add-token flag, unless one is already set.
    fn add_default(&mut self, typ: &str, value: bool) {
        if !self.add.iter().any(|(t, _)| t == typ) {
            self.add.push((typ.to_owned(), value));
        }
    }

    fn set_add(&mut self, typ: &str, value: bool) {
        match self.add.iter_mut().find(|(t, _)| t == typ) {
            Some((_, v)) => *v = value,
            None => self.add.push((typ.to_owned(), value)),
        }
    }

    fn write(self, keys: &mut Metadata) {
        if !self.merges.is_empty() {
            keys.set("tokenizer.ggml.merges", string_array(self.merges));
        }
        for (typ, id) in self.ids {
            let token = match typ.as_str() {
                "bos" => SpecialToken::Bos,
                "eos" => SpecialToken::Eos,
                "unk" => SpecialToken::Unknown,
                "sep" => SpecialToken::Seperator,
                "pad" => SpecialToken::Padding,
                "mask" => SpecialToken::Mask,
                "eot" => SpecialToken::Eot,
                "eom" => SpecialToken::Eom,
                _ => continue,
            };
            keys.set(token.key(), Value::U32(id as u32));
        }
        for (typ, add) in self.add {
            if matches!(typ.as_str(), "bos" | "eos" | "sep") {
                keys.set(&format!("tokenizer.ggml.add_{typ}_token"), Value::Bool(add));
            }
        }
        if let Some(template) = &self.chat_template {
            template.write(keys);
        }
        if let Some(lowercase) = self.normalizer_lowercase {
            keys.set("tokenizer.ggml.normalizer.lowercase", Value::Bool(lowercase));
        }
        if let Some(strip) = self.normalizer_strip_accents {
            keys.set("tokenizer.ggml.normalizer.strip_accents", Value::Bool(strip));
        }
    }
}

/// The template `value` of file `source`, refused as the file's (the
/// converter drops a template it cannot read, with a warning).
fn chat_template_of(value: &Json, source: &str) -> Result<Option<ChatTemplate>, ConvertError> {
    ChatTemplate::from_json(value).map_err(|what| ConvertError::Config(format!("{source}: `chat_template` {what}")))
}

/// `chat_template.jinja` (read, as every template file, with universal
/// newlines), with the templates
/// of `additional_chat_templates/*.jinja` by their stem beside it as the
/// default (in name order: the converter takes the directory's listing
/// order), or `chat_template.json`'s.
fn chat_template_file(ckpt: &Checkpoint) -> Result<Option<ChatTemplate>, ConvertError> {
    let read = |path: &Path| -> Result<Option<String>, ConvertError> {
        let Some(bytes) = ckpt.files.read(path, ChatTemplate::FILE_LIMIT)? else { return Ok(None) };
        let text = String::from_utf8(bytes)
            .map_err(|e| ConvertError::Config(format!("{}: is not UTF-8 text: {e}", path.display())))?;
        Ok(Some(crate::files::universal_newlines(text)))
    };
    if let Some(default) = read(&ckpt.dir.join("chat_template.jinja"))? {
        let mut named = Vec::new();
        for path in ckpt.files.list(&ckpt.dir.join("additional_chat_templates"))? {
            if let (Some(stem), Some("jinja")) =
                (path.file_stem().and_then(|s| s.to_str()), path.extension().and_then(|e| e.to_str()))
                && let Some(text) = read(&path)?
            {
                named.push((stem.to_owned(), text));
            }
        }
        if named.is_empty() {
            return Ok(Some(ChatTemplate::One(default)));
        }
        named.sort();
        named.insert(0, ("default".to_owned(), default));
        return Ok(Some(ChatTemplate::Named(named)));
    }
    match ckpt.json("chat_template.json")? {
        Some(json) => json.get("chat_template").map_or(Ok(None), |t| chat_template_of(t, "chat_template.json")),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizer_flags_nest_like_gguf_py() {
        let mut v = SpecialVocab::default();
        let sequence = serde_json::json!({"type": "Sequence", "normalizers": [
            {"type": "NFD"}, {"type": "Lowercase"}, {"type": "BertNormalizer", "strip_accents": false}
        ]});
        v.normalizer(&sequence);
        assert_eq!((v.normalizer_lowercase, v.normalizer_strip_accents), (Some(true), Some(false)));
        let mut keys = Metadata::new();
        v.write(&mut keys);
        let written: Vec<&str> = keys.iter().map(|(k, _)| k).collect();
        assert_eq!(written, ["tokenizer.ggml.normalizer.lowercase", "tokenizer.ggml.normalizer.strip_accents"]);
    }

    #[test]
    fn special_ids_keep_the_first_and_respect_the_vocabulary() {
        let mut v = SpecialVocab { n_vocab: Some(10), ..SpecialVocab::default() };
        v.set_special("bos", Some(&serde_json::json!(1)));
        v.set_special("bos", Some(&serde_json::json!(2)));
        v.set_special("eos", Some(&serde_json::json!(10)));
        v.set_special("pad", Some(&serde_json::json!([1, 2])));
        assert_eq!(v.ids, [("bos".to_owned(), 1)]);
    }

    #[test]
    fn look_special_heuristic() {
        assert!(looks_special("<|im_start|>") && looks_special("<unused12>") && looks_special("<pad>"));
        assert!(!looks_special("<think>") && !looks_special("hello"));
    }
}
