//! The tokenizer keys the converter and metadata edits both write: special
//! tokens by kind (gguf-py's `Keys.Tokenizer.*_ID`) and chat templates
//! (its `add_chat_template`).

use serde_json::Value as Json;

use super::{Array, Metadata, Value};

/// The vocabulary, `tokenizer.ggml.tokens`.
pub const TOKENS_KEY: &str = "tokenizer.ggml.tokens";

/// A special token's role, named as gguf-py's `gguf_new_metadata.py` names
/// it: its key's last part without `_token_id`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SpecialToken {
    Bos,
    Eos,
    Eot,
    Eom,
    Unknown,
    Seperator,
    Padding,
    Mask,
    FimPre,
    FimSuf,
    FimMid,
    FimPad,
    FimRep,
    FimSep,
    Prefix,
    Suffix,
    Middle,
}

impl SpecialToken {
    /// In gguf-py's order, the order its `--special-token` help lists them.
    pub const ALL: [SpecialToken; 17] = [
        SpecialToken::Bos,
        SpecialToken::Eos,
        SpecialToken::Eot,
        SpecialToken::Eom,
        SpecialToken::Unknown,
        SpecialToken::Seperator,
        SpecialToken::Padding,
        SpecialToken::Mask,
        SpecialToken::FimPre,
        SpecialToken::FimSuf,
        SpecialToken::FimMid,
        SpecialToken::FimPad,
        SpecialToken::FimRep,
        SpecialToken::FimSep,
        SpecialToken::Prefix,
        SpecialToken::Suffix,
        SpecialToken::Middle,
    ];

    /// The metadata key holding the token's id (a `u32`).
    pub fn key(self) -> &'static str {
        match self {
            SpecialToken::Bos => "tokenizer.ggml.bos_token_id",
            SpecialToken::Eos => "tokenizer.ggml.eos_token_id",
            SpecialToken::Eot => "tokenizer.ggml.eot_token_id",
            SpecialToken::Eom => "tokenizer.ggml.eom_token_id",
            SpecialToken::Unknown => "tokenizer.ggml.unknown_token_id",
            SpecialToken::Seperator => "tokenizer.ggml.seperator_token_id",
            SpecialToken::Padding => "tokenizer.ggml.padding_token_id",
            SpecialToken::Mask => "tokenizer.ggml.mask_token_id",
            SpecialToken::FimPre => "tokenizer.ggml.fim_pre_token_id",
            SpecialToken::FimSuf => "tokenizer.ggml.fim_suf_token_id",
            SpecialToken::FimMid => "tokenizer.ggml.fim_mid_token_id",
            SpecialToken::FimPad => "tokenizer.ggml.fim_pad_token_id",
            SpecialToken::FimRep => "tokenizer.ggml.fim_rep_token_id",
            SpecialToken::FimSep => "tokenizer.ggml.fim_sep_token_id",
            SpecialToken::Prefix => "tokenizer.ggml.prefix_token_id",
            SpecialToken::Suffix => "tokenizer.ggml.suffix_token_id",
            SpecialToken::Middle => "tokenizer.ggml.middle_token_id",
        }
    }

    /// `bos`, `unknown`, `fim_pre`: the kind as the command line names it.
    pub fn kind(self) -> &'static str {
        let key = self.key();
        &key["tokenizer.ggml.".len()..key.len() - "_token_id".len()]
    }

    pub fn from_kind(kind: &str) -> Option<SpecialToken> {
        SpecialToken::ALL.into_iter().find(|t| t.kind() == kind)
    }
}

/// Every key a chat template is written under starts so: the default's, a
/// named one's (`tokenizer.chat_template.NAME`), and the list of names.
const CHAT_TEMPLATE_PREFIX: &str = "tokenizer.chat_template";

/// A chat template as gguf-py's `add_chat_template` takes it: one, or a list
/// of named ones (`default` the plain key's, every other
/// `tokenizer.chat_template.NAME`).
#[derive(Debug, Clone, PartialEq)]
pub enum ChatTemplate {
    One(String),
    Named(Vec<(String, String)>),
}

impl ChatTemplate {
    /// The most a template file (or a config holding one) may hold: real
    /// ones are a few KiB.
    pub const FILE_LIMIT: u64 = 16 << 20;

    /// A JSON template: a string, a list of `{name, template}` entries, or
    /// null (none). Anything else is refused, saying what it is.
    pub fn from_json(value: &Json) -> Result<Option<ChatTemplate>, String> {
        match value {
            Json::Null => Ok(None),
            Json::String(template) => Ok(Some(ChatTemplate::One(template.clone()))),
            Json::Array(entries) => {
                let mut named = Vec::with_capacity(entries.len());
                for entry in entries {
                    let Json::Object(entry) = entry else {
                        return Err(format!("lists {entry}, not a {{name, template}} table"));
                    };
                    let name = match entry.get("name") {
                        None => "",
                        Some(name) => name.as_str().ok_or_else(|| format!("names a template with {name}"))?,
                    };
                    match entry.get("template") {
                        None | Some(Json::Null) => {}
                        Some(Json::String(template)) => named.push((name.to_owned(), template.clone())),
                        Some(other) => return Err(format!("has a template that is {other}, not text")),
                    }
                }
                Ok(Some(ChatTemplate::Named(named)))
            }
            other => Err(format!("is {other}, neither text nor a list of named templates")),
        }
    }

    /// gguf-py's `add_chat_template`: names kept to ASCII letters and
    /// digits (others become `_`), unnamed ones dropped; each named one
    /// under its own key in list order (a repeated name overwrites in
    /// place), then the list of names, then the default as the plain key.
    /// gguf-py lists the names in the order of a Python set, which differs
    /// from run to run; this lists them in their first order.
    pub fn write(&self, keys: &mut Metadata) {
        let template = match self {
            ChatTemplate::One(template) => Some(template),
            ChatTemplate::Named(entries) => {
                let mut default = None;
                let mut names: Vec<String> = Vec::new();
                for (name, template) in entries {
                    let name: String = name.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
                    match name.as_str() {
                        "" => {}
                        "default" => default = Some(template),
                        _ => {
                            // gguf-py's `add_string` writes no empty text.
                            if !template.is_empty() {
                                keys.set(&format!("{CHAT_TEMPLATE_PREFIX}.{name}"), Value::string(template));
                            }
                            if !names.contains(&name) {
                                names.push(name);
                            }
                        }
                    }
                }
                if !names.is_empty() {
                    keys.set("tokenizer.chat_templates", Value::Array(Array::String(names.iter().collect())));
                }
                default
            }
        };
        if let Some(template) = template.filter(|t| !t.is_empty()) {
            keys.set(CHAT_TEMPLATE_PREFIX, Value::string(template));
        }
    }

    /// `gguf_new_metadata.py --chat-template`: every key whose name starts
    /// as a template's does removed, then this written after the rest.
    pub fn replace_in(&self, keys: &mut Metadata) {
        keys.retain(|key| !key.starts_with(CHAT_TEMPLATE_PREFIX));
        self.write(keys);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_gguf_py_names() {
        let kinds: Vec<&str> = SpecialToken::ALL.iter().map(|t| t.kind()).collect();
        assert_eq!(kinds[..8], ["bos", "eos", "eot", "eom", "unknown", "seperator", "padding", "mask"]);
        assert_eq!(SpecialToken::from_kind("fim_rep"), Some(SpecialToken::FimRep));
        assert_eq!(SpecialToken::from_kind("unk"), None);
    }

    #[test]
    fn named_chat_templates_list_their_names_once_in_first_order() {
        let named = |entries: &[(&str, &str)]| {
            ChatTemplate::Named(entries.iter().map(|&(n, t)| (n.to_owned(), t.to_owned())).collect())
        };
        let mut keys = Metadata::default();
        named(&[("rag", "r1"), ("tool use", "t"), ("rag", "r2"), ("default", "d")]).write(&mut keys);
        let got: Vec<(&str, Value)> = keys.iter().map(|(k, v)| (k, v.clone())).collect();
        assert_eq!(
            got,
            [
                ("tokenizer.chat_template.rag", Value::string("r2")),
                ("tokenizer.chat_template.tool_use", Value::string("t")),
                ("tokenizer.chat_templates", Value::Array(Array::String(["rag", "tool_use"].into()))),
                ("tokenizer.chat_template", Value::string("d")),
            ]
        );
    }

    #[test]
    fn replacing_drops_every_old_template_key_and_appends_the_new() {
        let mut keys = Metadata::new();
        keys.set("tokenizer.chat_template", Value::string("old"));
        keys.set("tokenizer.chat_template.rag", Value::string("old rag"));
        keys.set("general.name", Value::string("m"));
        ChatTemplate::Named(vec![("tool use".into(), "t".into()), ("default".into(), "d".into())])
            .replace_in(&mut keys);
        let order: Vec<&str> = keys.iter().map(|(k, _)| k).collect();
        assert_eq!(
            order,
            ["general.name", "tokenizer.chat_template.tool_use", "tokenizer.chat_templates", "tokenizer.chat_template"]
        );
        assert_eq!(keys.get("tokenizer.chat_template"), Some(&Value::string("d")));
    }
}
