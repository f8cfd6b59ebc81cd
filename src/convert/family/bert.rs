//! The BERT family: `BertModel`, `RobertaModel`, `DistilBertModel`,
//! `XLMRobertaModel`, `NomicBertModel` and `ModernBertModel` in the
//! converter (`conversion/bert.py`). An encoder for embeddings: the
//! text model's keys with non-causal attention and the pooling a
//! sentence-transformers checkpoint declares (`modules.json` and its
//! pooling module's `config.json`); a WordPiece vocabulary written with
//! the converter's phantom spaces; checkpoint names without `bert.`, old
//! `gamma`/`beta` norm names as `weight`/`bias`, and the pooler and
//! pre-training heads left out. RoBERTa's positions start past its padding
//! id (the first `pad_token_id + 1` position rows dropped, the context that
//! much shorter) and its vocabulary is byte-level BPE; XLM-RoBERTa's
//! positions start so too, its vocabulary a SentencePiece Unigram model.
//! Nomic BERT and ModernBERT are BERT's keys over architectures of their
//! own (rotary positions, fused Q/K/V, GLU feed-forwards; ModernBERT's
//! local and global attention).

use std::borrow::Cow;

use serde_json::{Value as Json, json};

use super::{Conversion, Transform, Vocab};
use crate::convert::config::Modelled;
use crate::convert::error::ConvertError;
use crate::convert::hparams::{Hparams, count_of, text_model_keys};
use crate::model::{Metadata, Value};

pub const CONVERSION: Conversion = Conversion {
    family: "bert",
    classes: &[("BertModel", "bert"), ("BertForMaskedLM", "bert")],
    config: Modelled {
        reads: &["layer_norm_eps", "type_vocab_size"],
        // llama.cpp's bert: exact GELU, learned absolute positions, an encoder.
        defaults: || {
            vec![
                ("hidden_act", json!("gelu")),
                ("position_embedding_type", json!("absolute")),
                ("is_decoder", json!(false)),
                ("add_cross_attention", json!(false)),
                ("chunk_size_feed_forward", json!(0)),
                ("gradient_checkpointing", json!(false)),
            ]
        },
        window: &[],
        pattern: Some(no_classifier),
        rope_scalings: &[],
    },
    dropped: &[],
    transforms: &[Transform::Rename(as_the_converter_names)],
    generated: &[],
    keys,
    vocab: Vocab::WordPiece,
};

pub const ROBERTA: Conversion = Conversion {
    family: "bert",
    classes: &[("RobertaModel", "bert")],
    config: CONVERSION.config,
    dropped: &[],
    transforms: &[Transform::Rename(as_roberta_names), Transform::PositionsPastPadding],
    generated: &[],
    keys: roberta_keys,
    vocab: Vocab::Roberta,
};

pub const DISTILBERT: Conversion = Conversion {
    family: "bert",
    classes: &[("DistilBertModel", "bert"), ("DistilBertForMaskedLM", "bert")],
    config: Modelled {
        reads: &["dim", "n_layers", "n_heads", "hidden_dim"],
        defaults: || vec![("activation", json!("gelu")), ("sinusoidal_pos_embds", json!(false))],
        window: &[],
        pattern: Some(no_classifier),
        rope_scalings: &[],
    },
    dropped: &[],
    transforms: &[Transform::Rename(as_distilbert_names)],
    generated: &[],
    keys: distilbert_keys,
    vocab: Vocab::WordPiece,
};

pub const NOMIC_BERT: Conversion = Conversion {
    family: "nomic-bert",
    classes: &[("NomicBertModel", "nomic-bert")],
    config: Modelled {
        reads: &[
            "n_positions",
            "max_trained_positions",
            "n_embd",
            "n_head",
            "n_inner",
            "n_layer",
            "layer_norm_epsilon",
            "rotary_emb_base",
            "type_vocab_size",
            "pad_vocab_size_multiple",
            // How nomic's own code runs (kernels, fused ops, loss), not what it computes.
            "auto_map",
            "dense_seq_output",
            "fused_bias_fc",
            "fused_dropout_add_ln",
            "use_flash_attn",
            "use_xentropy",
            // GPT-2's sequence-summary head settings, inherited by the config, unused by the encoder.
            "summary_activation",
            "summary_first_dropout",
            "summary_proj_to_labels",
            "summary_type",
            "summary_use_proj",
        ],
        // What the converter asserts, and what llama.cpp's nomic-bert computes.
        defaults: || {
            vec![
                ("activation_function", json!("swiglu")),
                ("causal", json!(false)),
                ("qkv_proj_bias", json!(false)),
                ("mlp_fc1_bias", json!(false)),
                ("mlp_fc2_bias", json!(false)),
                ("prenorm", json!(false)),
                ("rotary_emb_fraction", json!(1.0)),
                ("rotary_emb_interleaved", json!(false)),
                ("rotary_emb_scale_base", Json::Null),
                ("rotary_scaling_factor", Json::Null),
                ("moe_every_n_layers", json!(0)),
                ("use_rms_norm", json!(false)),
                ("parallel_block", json!(false)),
                ("parallel_block_tied_norm", json!(false)),
                ("scale_attn_weights", json!(true)),
                ("scale_attn_by_inverse_layer_idx", json!(false)),
                ("reorder_and_upcast_attn", json!(false)),
            ]
        },
        window: &[],
        pattern: Some(no_classifier),
        rope_scalings: &[],
    },
    dropped: &[],
    transforms: &[Transform::Rename(as_the_converter_names)],
    generated: &[],
    keys: nomic_keys,
    vocab: Vocab::WordPiece,
};

/// RoBERTa's conversion with its own vocabulary.
pub const XLM_ROBERTA: Conversion =
    Conversion { classes: &[("XLMRobertaModel", "bert")], vocab: Vocab::XlmRoberta, ..ROBERTA };

pub const MODERN_BERT: Conversion = Conversion {
    family: "modern-bert",
    classes: &[("ModernBertModel", "modern-bert")],
    config: Modelled {
        reads: &[
            "local_attention",
            "global_attn_every_n_layers",
            "global_rope_theta",
            "local_rope_theta",
            "norm_eps",
            "hidden_activation",
            "cls_token_id",
            "sep_token_id",
            "classifier_pooling",
            // The classification and masked-LM heads, which this class has not.
            "classifier_activation",
            "classifier_bias",
            "decoder_bias",
            // Training and kernels only.
            "mlp_dropout",
            "initializer_cutoff_factor",
            "deterministic_flash_attn",
            "repad_logits_with_grad",
            "sparse_prediction",
            "sparse_pred_ignore_index",
            "reference_compile",
        ],
        // llama.cpp's modern-bert has no biases.
        defaults: || vec![("attention_bias", json!(false)), ("mlp_bias", json!(false)), ("norm_bias", json!(false))],
        window: &[],
        pattern: Some(modern_bert_activation),
        rope_scalings: &[],
    },
    dropped: &[],
    transforms: &[Transform::Rename(without_model_prefix)],
    generated: &[],
    keys: modern_bert_keys,
    vocab: Vocab::ModernBert,
};

/// `ModernBertModel.filter_tensors`: without `model.`, then as BERT's.
fn without_model_prefix(name: &str) -> Option<Cow<'_, str>> {
    as_the_converter_names(name.strip_prefix("model.").unwrap_or(name))
}

/// llama.cpp's modern-bert runs its GLU pair with GELU or SiLU.
fn modern_bert_activation(config: &serde_json::Map<String, Json>) -> Option<(&'static str, Json)> {
    no_classifier(config).or_else(|| {
        let act = config.get("hidden_activation")?;
        (!matches!(act.as_str(), Some("gelu" | "silu"))).then(|| ("hidden_activation", act.clone()))
    })
}

/// `ModernBertModel.set_gguf_parameters`: BERT's keys, then the window,
/// every how many blocks one attends globally, no rope scaling, the
/// vocabulary size and the activation.
fn modern_bert_keys(hp: &Hparams<'_>, out: &mut Metadata) -> Result<(), ConvertError> {
    keys(hp, out)?;
    let window = hp.value(&["local_attention"]).ok_or_else(|| ConvertError::Config("no `local_attention`".into()))?;
    hp.put(out, "attention.sliding_window", Some(count_of("local_attention", window)?));
    if let Some(every) = hp.value(&["global_attn_every_n_layers"]) {
        hp.put(out, "attention.sliding_window_pattern", Some(count_of("global_attn_every_n_layers", every)?));
    }
    hp.put(out, "rope.scaling.type", Some(Value::string("none")));
    hp.put(out, "vocab_size", hp.count(&["vocab_size"])?);
    if let Some(act) = hp.value(&["hidden_activation"]).and_then(Json::as_str).filter(|a| !a.is_empty()) {
        hp.put(out, "hidden_activation", Some(Value::string(act)));
    }
    Ok(())
}

/// `DistilBertModel.filter_tensors`: without `distilbert.`, its masked-LM
/// head (`vocab_*`) left out, then as BERT's.
fn as_distilbert_names(name: &str) -> Option<Cow<'_, str>> {
    let name = name.strip_prefix("distilbert.").unwrap_or(name);
    if name.starts_with("vocab_") {
        return None;
    }
    as_the_converter_names(name)
}

/// DistilBERT's: BERT's, after the LayerNorm epsilon it fixes at 1e-12
/// (the config has none).
fn distilbert_keys(hp: &Hparams<'_>, out: &mut Metadata) -> Result<(), ConvertError> {
    hp.put(out, "attention.layer_norm_epsilon", Some(Value::F32(1e-12)));
    keys(hp, out)
}

/// `RobertaModel.filter_tensors`: without `roberta.`, then as BERT's.
fn as_roberta_names(name: &str) -> Option<Cow<'_, str>> {
    as_the_converter_names(name.strip_prefix("roberta.").unwrap_or(name))
}

/// `BertModel.filter_tensors`: the name the mapping reads, or `None` for
/// the tensors it leaves out.
fn as_the_converter_names(name: &str) -> Option<Cow<'_, str>> {
    let name = name.strip_prefix("bert.").unwrap_or(name);
    if ["embeddings.position_ids", "pooler.dense.weight", "pooler.dense.bias"].contains(&name)
        || name.starts_with("cls.predictions")
        || name.starts_with("cls.seq_relationship")
    {
        return None;
    }
    Some(match (name.strip_suffix(".gamma"), name.strip_suffix(".beta")) {
        (Some(stem), _) => Cow::Owned(format!("{stem}.weight")),
        (_, Some(stem)) => Cow::Owned(format!("{stem}.bias")),
        _ => Cow::Borrowed(name),
    })
}

/// A classification head's labels (`id2label` beyond the two defaults)
/// are not written by this conversion.
fn no_classifier(config: &serde_json::Map<String, Json>) -> Option<(&'static str, Json)> {
    let labels = config.get("id2label")?;
    let defaults = json!({"0": "LABEL_0", "1": "LABEL_1"});
    (*labels != defaults && !labels.is_null()).then(|| ("id2label", labels.clone()))
}

/// `BertModel.set_gguf_parameters`: the text model's keys, attention that
/// is not causal, the pooling declared beside the checkpoint and the one
/// its config gives a classification head.
fn keys(hp: &Hparams<'_>, keys: &mut Metadata) -> Result<(), ConvertError> {
    text_model_keys(hp, keys, None)?;
    hp.put(keys, "attention.causal", Some(Value::Bool(false)));
    hp.put(keys, "pooling_type", pooling_type(hp.ckpt)?);
    // The pooling before a classification head (ModernBERT's config has one).
    if let Some(pooling) = hp.ckpt.config.get("classifier_pooling").filter(|v| !v.is_null()) {
        let id = match pooling.as_str() {
            Some("mean") => 1,
            Some("cls") => 2,
            _ => return Err(ConvertError::Config(format!("`classifier_pooling` {pooling}: neither cls nor mean"))),
        };
        hp.put(keys, "classifier.pooling_type", Some(Value::U32(id)));
    }
    Ok(())
}

/// Nomic BERT's: BERT's keys with the context it was trained for (2048
/// for nomic-embed-text v1 and v1.5's 8192 positions), the converter's two
/// known position settings; any other is refused, as the converter refuses it.
fn nomic_keys(hp: &Hparams<'_>, out: &mut Metadata) -> Result<(), ConvertError> {
    let positions = hp.u64(&["n_positions"]);
    let trained = hp.u64(&["max_trained_positions"]).unwrap_or(2048);
    let context = match (positions, trained) {
        (Some(8192), 2048) => 2048,
        (Some(2048), 2048) => 512,
        _ => {
            let shown = positions.map_or("none".to_owned(), |p| p.to_string());
            return Err(ConvertError::Config(format!(
                "unrecognized positions: n_positions = {shown}, max_trained_positions = {trained}"
            )));
        }
    };
    keys(&hp.with("n_positions", json!(context)), out)
}

/// RoBERTa's: BERT's keys with a context `pad_token_id + 1` shorter.
fn roberta_keys(hp: &Hparams<'_>, out: &mut Metadata) -> Result<(), ConvertError> {
    let Some(offset) = position_offset(hp.ckpt)? else { return keys(hp, out) };
    match hp.u64(&["max_position_embeddings"]) {
        Some(positions) => {
            let shorter = positions.checked_sub(offset).ok_or_else(|| {
                ConvertError::Config(format!("`max_position_embeddings` ({positions}) is below `pad_token_id` + 1"))
            })?;
            keys(&hp.with("max_position_embeddings", json!(shorter)), out)
        }
        None => keys(hp, out),
    }
}

/// How many position rows RoBERTa skips: `pad_token_id + 1`, when the
/// config has a padding id.
pub fn position_offset(ckpt: &crate::convert::Checkpoint) -> Result<Option<u64>, ConvertError> {
    match ckpt.config.get("pad_token_id") {
        None | Some(Json::Null) => Ok(None),
        Some(pad) => pad
            .as_u64()
            .map(|pad| Some(pad + 1))
            .ok_or_else(|| ConvertError::Config(format!("`pad_token_id` ({pad}) is not a token id"))),
    }
}

/// `_try_set_pooling_type`: the first `*Pooling` module of `modules.json`
/// and its mode (llama.cpp's ids: 1 mean, 2 CLS, 3 last token).
pub(super) fn pooling_type(ckpt: &crate::convert::Checkpoint) -> Result<Option<Value>, ConvertError> {
    let Some(modules) = ckpt.json("modules.json")? else { return Ok(None) };
    let pooling = modules
        .as_array()
        .into_iter()
        .flatten()
        .find(|m| m.get("type").and_then(Json::as_str).is_some_and(|t| t.ends_with("Pooling")));
    let Some(path) = pooling.and_then(|m| m.get("path")).and_then(Json::as_str) else { return Ok(None) };
    let config_name = std::path::Path::new(path).join("config.json");
    let config_path = ckpt.dir.join(&config_name);
    let config = ckpt.json(&config_name)?.ok_or_else(|| {
        ConvertError::Config(format!("{}: the pooling module's config is missing", config_path.display()))
    })?;
    let on = |key: &str| config.get(key).and_then(Json::as_bool).unwrap_or(false);
    let id = if on("pooling_mode_mean_tokens") {
        1
    } else if on("pooling_mode_cls_token") {
        2
    } else if on("pooling_mode_lasttoken") {
        3
    } else {
        match config.get("pooling_mode").and_then(Json::as_str) {
            Some("mean") => 1,
            Some("cls") => 2,
            Some("lasttoken") => 3,
            _ => {
                return Err(ConvertError::Config(format!(
                    "{}: a pooling other than mean, CLS or last token, which llama.cpp does not compute",
                    config_path.display()
                )));
            }
        }
    };
    Ok(Some(Value::U32(id)))
}
