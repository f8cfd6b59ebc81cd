//! `quantforge edit`: its arguments — `gguf_new_metadata.py`'s options under
//! their own names beside `--set`, `--delete` and `--rename-tensor` — and
//! how they become the edit ops.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use serde_json::Value as Json;

use super::{CacheArgs, LoadArgs, wrote};
use crate::exec::oneshot::{self, WriteAs};
use crate::files::IoText;
use crate::model::{ChatTemplate, Endian, SpecialToken, Value};
use crate::ops::edit::{self, Edits};
use crate::ops::export::ExportFormat;
use crate::ops::metadata::TokenRef;

#[derive(Debug, clap::Args)]
#[command(group = clap::ArgGroup::new("template").multiple(false))]
pub(super) struct EditArgs {
    /// The model to copy.
    input: PathBuf,
    /// The edited copy.
    output: PathBuf,
    /// Set a metadata key: KEY=TYPE:VALUE with TYPE one of u8 i8 u16 i16
    /// u32 i32 u64 i64 f32 f64 bool str, or an array arr[TYPE] whose VALUE is
    /// a JSON array (arr[str]:["a","b"], arr[arr[i32]]:[[1],[2,3]]) or its
    /// elements between commas (arr[u32]:1,2,3).
    #[arg(long = "set", value_name = "KEY=TYPE:VALUE", value_parser = edit::parse_set)]
    set: Vec<(String, Value)>,
    /// Delete a metadata key (refused when the input has no such key).
    #[arg(long = "delete", visible_alias = "remove-metadata", value_name = "KEY")]
    delete: Vec<String>,
    /// Rename a tensor.
    #[arg(long = "rename-tensor", value_name = "OLD=NEW", value_parser = edit::parse_rename)]
    rename_tensor: Vec<(String, String)>,
    /// Set general.name.
    #[arg(long = "general-name", value_name = "NAME")]
    general_name: Option<String>,
    /// Set general.description.
    #[arg(long = "general-description", value_name = "TEXT")]
    general_description: Option<String>,
    /// Set tokenizer.ggml.pre.
    #[arg(long = "pre-tokenizer", value_name = "NAME")]
    pre_tokenizer: Option<String>,
    /// Replace the chat template(s): a template, or a JSON list of
    /// {"name", "template"} tables when it starts with `[`.
    #[arg(long = "chat-template", value_name = "TEMPLATE", group = "template")]
    chat_template: Option<String>,
    /// Replace the chat template(s) with a tokenizer_config.json's.
    #[arg(long = "chat-template-config", value_name = "FILE", group = "template")]
    chat_template_config: Option<PathBuf>,
    /// Replace the chat template(s) with a Jinja file's text.
    #[arg(long = "chat-template-file", value_name = "FILE", group = "template")]
    chat_template_file: Option<PathBuf>,
    /// Set a special token's id to the first id of TOKEN in the vocabulary.
    /// KIND: bos eos eot eom unknown seperator padding mask fim_pre fim_suf
    /// fim_mid fim_pad fim_rep fim_sep prefix suffix middle.
    #[arg(long = "special-token", num_args = 2, value_names = ["KIND", "TOKEN"])]
    special_token: Vec<String>,
    /// Set a special token's id, checked against the vocabulary.
    #[arg(long = "special-token-by-id", num_args = 2, value_names = ["KIND", "ID"])]
    special_token_by_id: Vec<String>,
    /// Let an edit change the type of a key the input has (refused otherwise).
    #[arg(long = "force-type")]
    force_type: bool,
    /// The copy's container: gguf, or ggjt (GGJT v3, llama.cpp's last
    /// legacy format, for a LLaMA model whose every key and tensor it holds).
    #[arg(long = "format", value_name = "FORMAT", default_value = "gguf", value_parser = format_parser())]
    format: ExportFormat,
    /// Write the copy in this byte order (default: the input's), as
    /// gguf_convert_endian.py converts: F32, F16, BF16, Q1_0, Q4_0, Q8_0,
    /// Q4_K, Q6_K, TQ2_0, MXFP4 and NVFP4 tensors; any other type is refused.
    #[arg(long = "byte-order", value_name = "ORDER", value_parser = byte_order_parser())]
    byte_order: Option<Endian>,
    #[command(flatten)]
    load: LoadArgs,
    #[command(flatten)]
    cache: CacheArgs,
}

fn byte_order_parser() -> impl clap::builder::TypedValueParser<Value = Endian> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(["big", "little"])
        .map(|order| if order == "big" { Endian::Big } else { Endian::Little })
}

fn format_parser() -> impl clap::builder::TypedValueParser<Value = ExportFormat> {
    use clap::builder::TypedValueParser;
    let names = [ExportFormat::Gguf, ExportFormat::Ggjt].map(ExportFormat::name);
    clap::builder::PossibleValuesParser::new(names)
        .try_map(|name| ExportFormat::from_name(&name).ok_or("unknown format"))
}

pub(super) fn run(args: EditArgs, json: bool) -> anyhow::Result<()> {
    let settings = args.cache.settings(Some(1), args.load.options())?;
    let (input, output) = (args.input.clone(), args.output.clone());
    let write_as = WriteAs { format: args.format, byte_order: args.byte_order };
    if write_as.format == ExportFormat::Ggjt && write_as.byte_order.is_some() {
        bail!("--byte-order: GGJT is little-endian only");
    }
    let edits = edits(args)?;
    let report = oneshot::edit_file(&input, &output, edits, write_as, &settings)
        .with_context(|| format!("cannot edit {}", input.display()))?;
    wrote("edit", &report, json)
}

/// The edits in `gguf_new_metadata.py`'s order: its named keys (name,
/// description, pre-tokenizer), then `--set`, then special tokens by text,
/// then by id.
fn edits(args: EditArgs) -> anyhow::Result<Edits> {
    let named = [
        ("general.name", args.general_name),
        ("general.description", args.general_description),
        ("tokenizer.ggml.pre", args.pre_tokenizer),
    ];
    let mut set: Vec<(String, Value)> =
        named.into_iter().filter_map(|(key, text)| Some((key.to_owned(), Value::string(&text?)))).collect();
    set.extend(args.set);
    let mut special_tokens = Vec::new();
    // Each occurrence takes two values, so the lists hold pairs.
    for pair in args.special_token.chunks_exact(2) {
        special_tokens.push((special_token_kind(&pair[0])?, TokenRef::Text(pair[1].clone())));
    }
    for pair in args.special_token_by_id.chunks_exact(2) {
        let id = pair[1].parse().with_context(|| format!("`{}` is not a token id", pair[1]))?;
        special_tokens.push((special_token_kind(&pair[0])?, TokenRef::Id(id)));
    }
    let chat_template = if let Some(text) = args.chat_template {
        Some(chat_template_text(&text)?)
    } else if let Some(path) = args.chat_template_config {
        Some(chat_template_config(&path)?)
    } else if let Some(path) = args.chat_template_file {
        Some(ChatTemplate::One(read_text(&path)?))
    } else {
        None
    };
    Ok(Edits {
        chat_template,
        set,
        special_tokens,
        delete: args.delete,
        rename_tensors: args.rename_tensor,
        force_type: args.force_type,
    })
}

fn special_token_kind(kind: &str) -> anyhow::Result<SpecialToken> {
    SpecialToken::from_kind(kind).with_context(|| {
        let kinds: Vec<&str> = SpecialToken::ALL.iter().map(|t| t.kind()).collect();
        format!("unknown special token `{kind}` (expected one of {})", kinds.join(", "))
    })
}

/// `--chat-template`: the template, or a JSON list of named ones.
fn chat_template_text(text: &str) -> anyhow::Result<ChatTemplate> {
    let json = if text.starts_with('[') {
        serde_json::from_str(text).context("--chat-template starts with `[` but is not JSON")?
    } else {
        Json::String(text.to_owned())
    };
    chat_template_of(&json).map_err(|what| anyhow::anyhow!("--chat-template {what}"))
}

/// `--chat-template-config`: the file's `chat_template`, which must be given.
fn chat_template_config(path: &Path) -> anyhow::Result<ChatTemplate> {
    let text = read_text(path)?;
    let config: Json = serde_json::from_str(&text).with_context(|| format!("{} is not JSON", path.display()))?;
    let template = config.get("chat_template").unwrap_or(&Json::Null);
    chat_template_of(template).map_err(|what| anyhow::anyhow!("{}: `chat_template` {what}", path.display()))
}

/// A template that writes something: an empty text or list would remove the
/// input's templates and write none, which `gguf_new_metadata.py` skips.
fn chat_template_of(json: &Json) -> Result<ChatTemplate, String> {
    match ChatTemplate::from_json(json)? {
        Some(ChatTemplate::One(t)) if t.is_empty() => Err("is empty".into()),
        Some(ChatTemplate::Named(named)) if named.is_empty() => Err("lists no template".into()),
        Some(template) => Ok(template),
        None => Err("is missing".into()),
    }
}

/// A template or config file, refused when empty (it would remove the
/// input's templates and write none).
fn read_text(path: &Path) -> anyhow::Result<String> {
    let text = crate::files::read_text(path, ChatTemplate::FILE_LIMIT)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {}", path.display(), IoText(&e)))?;
    if text.is_empty() {
        bail!("{} is empty", path.display());
    }
    Ok(text)
}
