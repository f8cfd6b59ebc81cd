//! The `general.*` keys a conversion writes before the architecture keys:
//! `general.type`, sampling defaults from `generation_config.json`, and the
//! model's naming, provenance, licence and lineage, as gguf-py's `Metadata`
//! derives them from the model card's front matter, `config.json` and the
//! directory name, then takes them from the converter's `--metadata` file
//! and `--model-name` (reference: sec. 8 of
//! `docs/notes/convert-hf-reference.md`). A value of the wrong type for its
//! key is refused by name, where the converter would stop on it.

use std::collections::BTreeMap;
use std::path::Path;

use regex::Regex;
use serde_json::{Map, Value as Json};

use super::checkpoint::Checkpoint;
use super::error::ConvertError;
use super::files::{CheckpointFiles, TEXT_LIMIT};
use super::model_card;
use crate::model::{Array, Metadata, Value};

/// How a field's value is written.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Str,
    I32,
    F32,
    /// A string, or a list of them joined with commas.
    License,
    /// A list of tables, written as `PREFIX.count` and `PREFIX.{i}.FIELD`.
    Entries(&'static str),
    StrList,
}

/// gguf-py's `Metadata` fields, in the order `set_gguf_meta_model` writes
/// them: each with the key it is written to (and taken from in a metadata
/// file) and how.
const FIELDS: &[(&str, Kind)] = &[
    ("general.sampling.sequence", Kind::Str),
    ("general.sampling.top_k", Kind::I32),
    ("general.sampling.top_p", Kind::F32),
    ("general.sampling.min_p", Kind::F32),
    ("general.sampling.xtc_probability", Kind::F32),
    ("general.sampling.xtc_threshold", Kind::F32),
    ("general.sampling.temp", Kind::F32),
    ("general.sampling.penalty_last_n", Kind::I32),
    ("general.sampling.penalty_repeat", Kind::F32),
    ("general.sampling.mirostat", Kind::I32),
    ("general.sampling.mirostat_tau", Kind::F32),
    ("general.sampling.mirostat_eta", Kind::F32),
    ("general.name", Kind::Str),
    ("general.author", Kind::Str),
    ("general.version", Kind::Str),
    ("general.organization", Kind::Str),
    ("general.finetune", Kind::Str),
    ("general.basename", Kind::Str),
    ("general.description", Kind::Str),
    ("general.quantized_by", Kind::Str),
    ("general.size_label", Kind::Str),
    ("general.license", Kind::License),
    ("general.license.name", Kind::Str),
    ("general.license.link", Kind::Str),
    ("general.url", Kind::Str),
    ("general.doi", Kind::Str),
    ("general.uuid", Kind::Str),
    ("general.repo_url", Kind::Str),
    ("general.source.url", Kind::Str),
    ("general.source.doi", Kind::Str),
    ("general.source.uuid", Kind::Str),
    ("general.source.repo_url", Kind::Str),
    ("general.base_models", Kind::Entries("general.base_model")),
    ("general.datasets", Kind::Entries("general.dataset")),
    ("general.tags", Kind::StrList),
    ("general.languages", Kind::StrList),
];

/// The fields of a base model or dataset entry, in the order written.
const ENTRY_FIELDS: [&str; 9] =
    ["name", "author", "version", "organization", "description", "url", "doi", "uuid", "repo_url"];

/// What the heuristics, the metadata file and `--model-name` found, by
/// [`FIELDS`] key, each with where it came from (for errors); absent is
/// Python's `None`.
#[derive(Default)]
struct Naming {
    values: BTreeMap<&'static str, (Json, String)>,
}

impl Naming {
    fn get(&self, key: &str) -> Option<&Json> {
        self.values.get(key).map(|(v, _)| v)
    }

    fn is_none(&self, key: &str) -> bool {
        self.get(key).is_none()
    }

    /// Sets `key` (a [`FIELDS`] key); null is `None`.
    fn set(&mut self, key: &'static str, value: Json, from: &str) {
        match value {
            Json::Null => self.values.remove(key),
            value => self.values.insert(key, (value, from.to_owned())),
        };
    }

    fn set_if_none(&mut self, key: &'static str, value: Option<String>, from: &'static str) {
        if let Some(value) = value
            && self.is_none(key)
        {
            self.set(key, Json::String(value), from);
        }
    }
}

/// The converter's `--metadata FILE`: values for the naming, provenance and
/// sampling keys, by GGUF key, taken over what the heuristics found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataOverride {
    /// The file, for errors.
    pub source: String,
    pub values: Map<String, Json>,
}

impl MetadataOverride {
    /// The JSON object of `path`; a key the converter does not take is refused.
    pub fn read(files: &dyn CheckpointFiles, path: &Path) -> Result<MetadataOverride, ConvertError> {
        let source = path.display().to_string();
        let bad = |problem: String| ConvertError::MetadataFile { file: source.clone(), problem };
        let bytes = files.read(path, TEXT_LIMIT)?.ok_or_else(|| bad("no such file".into()))?;
        let Json::Object(values) = serde_json::from_slice(&bytes).map_err(|e| bad(e.to_string()))? else {
            return Err(bad("not a JSON object".into()));
        };
        MetadataOverride::new(source, values)
    }

    /// `values` for the keys the converter takes; any other refused.
    pub fn new(source: String, values: Map<String, Json>) -> Result<MetadataOverride, ConvertError> {
        if values.contains_key("general.license") {
            // gguf-py reads the licence from the model card alone and drops this one unsaid.
            let problem = "`general.license` is not taken from a metadata file (the converter reads the licence from \
                           the model card); give general.license.name or general.license.link, or edit the key after \
                           converting"
                .to_owned();
            return Err(ConvertError::MetadataFile { file: source, problem });
        }
        if let Some(unknown) = values.keys().find(|k| !FIELDS.iter().any(|(key, _)| key == k)) {
            let problem = format!(
                "`{}` is not a key the converter takes from a metadata file (it takes general.name, general.author, \
                 general.license, general.base_models, general.tags, general.sampling.*, …)",
                crate::text::Name(unknown)
            );
            return Err(ConvertError::MetadataFile { file: source, problem });
        }
        Ok(MetadataOverride { source, values })
    }
}

/// The components of a model id (`org/Name-7B-Instruct-v0.2`): full name,
/// organization, basename, finetune, version, size label.
type Components = (Option<String>, Option<String>, Option<String>, Option<String>, Option<String>, Option<String>);

/// gguf-py's `Metadata.id_to_title`.
fn id_to_title(id: &str) -> String {
    let keep = Regex::new(r"^(v\d+(?:\.\d+)*|\d.*)$").expect("a valid regex");
    id.trim()
        .replace('-', " ")
        .split_whitespace()
        .map(|w| if is_lower(w) && !keep.is_match(w) { title(w) } else { w.to_owned() })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Python's `str.islower()`: some cased character, none upper case.
fn is_lower(w: &str) -> bool {
    w.chars().any(char::is_lowercase) && !w.chars().any(char::is_uppercase)
}

/// Python's `str.title()`: upper case after a non-letter, lower case after a letter.
fn title(w: &str) -> String {
    let mut out = String::new();
    let mut after_letter = false;
    for c in w.chars() {
        if after_letter {
            out.extend(c.to_lowercase());
        } else {
            out.extend(c.to_uppercase());
        }
        after_letter = c.is_alphabetic();
    }
    out
}

/// gguf-py's `Metadata.get_model_id_components`.
fn model_id_components(model_id: &str, total_params: i64) -> Components {
    if model_id.contains(' ') {
        return (Some(model_id.to_owned()), None, None, None, None, None);
    }
    let (mut org, full) = match model_id.split_once('/') {
        Some((org, full)) => (Some(org.to_owned()), full.to_owned()),
        None => (None, model_id.to_owned()),
    };
    if org.as_deref().is_some_and(|o| o.starts_with('.')) {
        org = None;
    }
    let mut parts: Vec<String> = full.split('-').filter(|p| !p.is_empty()).map(str::to_owned).collect();
    let mut kinds: Vec<Vec<&str>> = vec![Vec::new(); parts.len()];
    let version = Regex::new(r"(?i)^(v|iter)?\d+([.]\d+)*$").expect("a valid regex");
    let quant = Regex::new(r"(?i)^(i?q\d(_\w)*|b?fp?(16|32))$").expect("a valid regex");
    let size = Regex::new(r"(?i)^(([A]|\d+[x])?\d+([._]\d+)?[KMBT][\d]?|small|mini|medium|large|x?xl)$")
        .expect("a valid regex");
    let finetune_word = Regex::new(r"(?i)^(chat|instruct|vision|lora)$").expect("a valid regex");
    for (i, part) in parts.iter_mut().enumerate() {
        let add = |kinds: &mut Vec<Vec<&str>>, kind| {
            if !kinds[i].contains(&kind) {
                kinds[i].push(kind);
            }
        };
        if version.is_match(part) {
            add(&mut kinds, "version");
        } else if quant.is_match(part) {
            add(&mut kinds, "type");
            *part = part.to_uppercase();
        } else if i > 0 && size.is_match(part) {
            let (normalized, is_finetune) = normalized_size(part, total_params);
            add(&mut kinds, if is_finetune { "finetune" } else { "size_label" });
            *part = normalized;
        } else if i > 0 && finetune_word.is_match(part) {
            if total_params < 0 && part.eq_ignore_ascii_case("lora") {
                add(&mut kinds, "type");
            } else {
                add(&mut kinds, "finetune");
            }
        }
    }
    // Word sizes go when a numeric size label is present.
    let numeric_size =
        parts.iter().zip(&kinds).any(|(p, k)| k.contains(&"size_label") && p.chars().any(|c| c.is_ascii_digit()));
    if numeric_size {
        for (p, k) in parts.iter().zip(kinds.iter_mut()) {
            if k.contains(&"size_label") && p.chars().all(char::is_alphabetic) {
                k.retain(|&x| x != "size_label");
            }
        }
    }
    let mut at_start = true;
    for (p, k) in parts.iter().zip(kinds.iter_mut()) {
        if at_start && ((k.is_empty() && p.chars().next().is_some_and(char::is_alphabetic)) || k.contains(&"version")) {
            k.push("basename");
        } else {
            at_start = false;
            if k.is_empty() {
                k.push("finetune");
            }
        }
    }
    for k in kinds.iter_mut().rev() {
        if k.contains(&"basename") && k.len() > 1 {
            k.retain(|&x| x != "basename");
        } else {
            break;
        }
    }
    let join = |pick: &dyn Fn(&[&str]) -> bool| -> Option<String> {
        let mut chosen: Vec<&str> = Vec::new();
        for (p, k) in parts.iter().zip(&kinds) {
            if pick(k) {
                chosen.push(p);
            }
        }
        (!chosen.is_empty()).then(|| chosen.join("-"))
    };
    let mut basename = join(&|k| k.contains(&"basename"));
    let size_label = {
        let mut seen: Vec<&str> = Vec::new();
        for (p, k) in parts.iter().zip(&kinds) {
            if k.contains(&"size_label") && !seen.contains(&p.as_str()) {
                seen.push(p);
            }
        }
        (!seen.is_empty()).then(|| seen.join("-"))
    };
    let finetune = join(&|k| k.contains(&"finetune"));
    let version = join(&|k| k.contains(&"version") && !k.contains(&"basename"));
    if size_label.is_none() && finetune.is_none() && version.is_none() {
        basename = None;
    }
    (Some(full), org, basename, finetune, version, size_label)
}

/// A size-label part as gguf-py writes it (`7b1` → `7.1B`), and whether it
/// is too far from the parameter count to be the model's size (then it is a
/// fine-tune tag, its suffix in lower case).
fn normalized_size(part: &str, total_params: i64) -> (String, bool) {
    let mut p = part.replace('_', ".");
    let chars: Vec<char> = p.chars().collect();
    if chars.last().is_some_and(|c| c.is_ascii_digit()) && chars.len() >= 2 {
        // bloom-7b1 → 7.1b
        let n = chars.len();
        p = format!("{}.{}{}", chars[..n - 2].iter().collect::<String>(), chars[n - 1], chars[n - 2]);
    }
    let chars: Vec<char> = p.chars().collect();
    if chars.len() > 1 && chars[chars.len() - 2].is_ascii_digit() && "kmbt".contains(chars[chars.len() - 1]) {
        p = format!(
            "{}{}",
            chars[..chars.len() - 1].iter().collect::<String>(),
            chars[chars.len() - 1].to_ascii_uppercase()
        );
    }
    if total_params == 0 {
        return (p, false);
    }
    let chars: Vec<char> = p.chars().collect();
    let (number, suffix) = (chars[..chars.len() - 1].iter().collect::<String>(), chars[chars.len() - 1]);
    if let (Ok(number), Some(power)) = (number.parse::<f64>(), " KMBT".find(suffix)) {
        let label = number * 1000f64.powi(power as i32);
        let total = total_params as f64;
        let small = total_params < 0 && label < (total_params.abs() / 8) as f64;
        let far = total_params > 0 && (label - total).abs() > (7 * total_params / 8) as f64;
        if small || far {
            return (format!("{}{}", number_text(&chars), suffix.to_ascii_lowercase()), true);
        }
    }
    (p, false)
}

/// The digits of a size label without its suffix (`180` of `180K`).
fn number_text(chars: &[char]) -> String {
    chars[..chars.len() - 1].iter().collect()
}

/// gguf-py's `model_weight_count_rounded_notation` (`min_digits` 2).
fn rounded_count(n: u64) -> String {
    let n = n as f64;
    let (scaled, suffix) = if n > 1e12 {
        (n * 1e-12, "T")
    } else if n > 1e9 {
        (n * 1e-9, "B")
    } else if n > 1e6 {
        (n * 1e-6, "M")
    } else {
        (n * 1e-3, "K")
    };
    let digits = format!("{}", scaled.round_ties_even() as u64);
    let fix = 2usize.saturating_sub(digits.trim_start_matches('0').len());
    format!("{scaled:.fix$}{suffix}")
}

/// A conversion's parameters as gguf-py's `get_total_parameter_count`
/// counts them: all, those outside the experts, one expert's, and the
/// experts a stack holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ParameterCounts {
    pub total: u64,
    pub shared: u64,
    pub per_expert: u64,
    pub experts: u64,
}

impl ParameterCounts {
    pub fn of<'a>(tensors: impl Iterator<Item = &'a crate::model::TensorInfo>) -> ParameterCounts {
        let mut counts = ParameterCounts::default();
        let (mut expert_sum, mut stacks) = (0, 0);
        for tensor in tensors {
            let size = tensor.n_elements();
            counts.total += size;
            // A stack's expert count is its outermost dimension (a bias's second).
            let outer = if tensor.name.contains(".bias") { 1 } else { 2 };
            match tensor.dims.get(outer).filter(|_| tensor.name.contains("_exps.") && tensor.dims.len() >= 3) {
                Some(&n) if n > 0 => {
                    counts.per_expert += size / n;
                    expert_sum += n;
                    stacks += 1;
                }
                _ => counts.shared += size,
            }
        }
        counts.experts = expert_sum.checked_div(stacks).unwrap_or(0);
        counts
    }

    /// `size_label`: `8x7.2B` for experts (one expert and the rest), else the total.
    fn size_label(&self) -> String {
        match self.experts {
            0 => rounded_count(self.total),
            n => format!("{n}x{}", rounded_count(self.shared + self.per_expert)),
        }
    }
}

/// What a file's naming keys are derived from: gguf-py's `Metadata.load`
/// arguments as a conversion passes them.
pub struct NamingSource<'a> {
    /// That directory's `config.json`, for its `_name_or_path`.
    pub config: Option<&'a Json>,
    /// The name read as a model id (the directory's, or a Hub cache's repository).
    pub dir_name: String,
    /// The name written when nothing else gives one.
    pub fallback_name: String,
    /// gguf-py's parameter count; negative for an adapter, whose count is
    /// not exact (no size label is derived from it then).
    pub total: i64,
    /// `general.type`: `model`, or `adapter` (then `adapter.type` is `lora`).
    pub gguf_type: &'static str,
}

impl NamingSource<'_> {
    /// A model converted from `ckpt`'s own directory.
    pub fn of_model<'c>(ckpt: &'c Checkpoint, counts: &ParameterCounts) -> NamingSource<'c> {
        let dir_name = match &ckpt.repository {
            Some(name) => name.clone(),
            None => ckpt.dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
        };
        NamingSource {
            config: Some(&ckpt.file_config),
            fallback_name: dir_name.clone(),
            dir_name,
            total: counts.total as i64,
            gguf_type: "model",
        }
    }
}

/// `general.type`, the sampling keys and the naming keys, in the converter's order.
pub fn general_keys(
    source: &NamingSource<'_>,
    counts: &ParameterCounts,
    ckpt: &Checkpoint,
    keys: &mut Metadata,
) -> Result<(), ConvertError> {
    let mut m = Naming::default();
    let total = source.total;
    from_model_card(&mut m, &model_card::front_matter(&*ckpt.files, &ckpt.dir)?, total);
    let fill = |m: &mut Naming, components: Components| {
        let (full, org, basename, finetune, version, size_label) = components;
        let from = "the model's id";
        m.set_if_none("general.name", full.map(|f| id_to_title(&f)), from);
        m.set_if_none("general.organization", org.map(|o| id_to_title(&o)), from);
        m.set_if_none("general.basename", basename, from);
        m.set_if_none("general.finetune", finetune, from);
        m.set_if_none("general.version", version, from);
        m.set_if_none("general.size_label", size_label, from);
    };
    if let Some(id) = source
        .config
        .and_then(|c| c.get("_name_or_path"))
        .and_then(Json::as_str)
        .filter(|id| id.matches('/').count() <= 1)
    {
        fill(&mut m, model_id_components(id, total));
    }
    fill(&mut m, model_id_components(&source.dir_name, total));
    from_generation_config(&mut m, ckpt)?;
    if let Some(file) = &ckpt.metadata_override {
        for (key, value) in &file.values {
            let Some(&(key, _)) = FIELDS.iter().find(|(k, _)| k == key) else { continue };
            m.set(key, value.clone(), &format!("metadata file {}", file.source));
        }
    }
    if let Some(name) = &ckpt.model_name {
        m.set("general.name", Json::String(name.clone()), "--model-name");
    }
    m.set_if_none("general.name", Some(source.fallback_name.clone()), "the directory");
    if m.is_none("general.size_label") && total > 0 {
        m.set("general.size_label", Json::String(counts.size_label()), "the parameter count");
    }
    keys.set("general.type", Value::string(source.gguf_type));
    if source.gguf_type == "adapter" {
        keys.set("adapter.type", Value::string("lora"));
    }
    for &(key, kind) in FIELDS {
        if let Some((value, from)) = m.values.get(key) {
            write_field(keys, key, kind, value, from)?;
        }
    }
    Ok(())
}

/// `apply_metadata_heuristic`'s model card part: gguf-py's own keys, then
/// theirs with `model_` before them, then Hugging Face's.
fn from_model_card(m: &mut Naming, card: &Map<String, Json>, total: i64) {
    const FROM: &str = "README.md's front matter";
    let take = |m: &mut Naming, key: &'static str, card_key: &str| {
        if let Some(value) = card.get(card_key)
            && m.is_none(key)
        {
            m.set(key, value.clone(), FROM);
        }
    };
    for prefix in ["", "model_"] {
        for (key, card_key) in [
            ("general.name", "name"),
            ("general.author", "author"),
            ("general.version", "version"),
            ("general.organization", "organization"),
            ("general.description", "description"),
            ("general.finetune", "finetune"),
            ("general.basename", "basename"),
            ("general.size_label", "size_label"),
            ("general.source.url", "url"),
            ("general.source.doi", "doi"),
            ("general.source.uuid", "uuid"),
            ("general.source.repo_url", "repo_url"),
        ] {
            take(m, key, &format!("{prefix}{card_key}"));
        }
    }
    take(m, "general.name", "model_name");
    take(m, "general.author", "model_creator");
    take(m, "general.basename", "model_type");
    for (key, names) in [
        ("general.base_models", ["base_model", "base_models", "base_model_sources"]),
        // gguf-py gives a dataset a model's repository URL too.
        ("general.datasets", ["datasets", "dataset", "dataset_sources"]),
    ] {
        if let Some(value) = names.iter().find_map(|n| card.get(*n)) {
            let ids = match value {
                Json::String(_) => std::slice::from_ref(value),
                Json::Array(ids) => ids.as_slice(),
                _ => &[],
            };
            let entries = ids.iter().map(|id| lineage_entry(id, total)).collect();
            // gguf-py appends to what is there (nothing, from a card alone).
            m.set(key, Json::Array(entries), FROM);
        }
    }
    take(m, "general.license", "license");
    take(m, "general.license.name", "license_name");
    take(m, "general.license.link", "license_link");
    for (key, card_keys) in
        [("general.tags", ["tags", "pipeline_tag"]), ("general.languages", ["languages", "language"])]
    {
        for card_key in card_keys {
            let items = match card.get(card_key) {
                Some(item @ Json::String(_)) => vec![item.clone()],
                Some(Json::Array(items)) => items.clone(),
                _ => continue,
            };
            let mut all = match m.get(key) {
                Some(Json::Array(before)) => before.clone(),
                _ => Vec::new(),
            };
            all.extend(items);
            m.set(key, Json::Array(all), FROM);
        }
    }
}

/// A base model or dataset named in a model card: a Hugging Face id (its
/// name, organization, version and repository), a URL (the repository, and
/// what a Hugging Face one's id says), or a table taken as it is.
fn lineage_entry(id: &Json, total: i64) -> Json {
    let mut entry = Map::new();
    let describe = |entry: &mut Map<String, Json>, model_id: &str, with_repo: bool| {
        let (full, org, _, _, version, _) = model_id_components(model_id, total);
        if let Some(full) = &full {
            entry.insert("name".into(), Json::String(id_to_title(full)));
        }
        if let Some(org) = &org {
            entry.insert("organization".into(), Json::String(id_to_title(org)));
        }
        if let Some(version) = version {
            entry.insert("version".into(), Json::String(version));
        }
        if let (true, Some(org), Some(full)) = (with_repo, &org, &full) {
            entry.insert("repo_url".into(), Json::String(format!("https://huggingface.co/{org}/{full}")));
        }
    };
    match id {
        Json::String(url) if ["http://", "https://", "ssh://"].iter().any(|p| url.starts_with(p)) => {
            entry.insert("repo_url".into(), Json::String(url.clone()));
            let hub_id = Regex::new(r"^https?://huggingface.co/([^/]+/[^/]+)$").expect("a valid regex");
            if url.contains("huggingface.co")
                && let Some(found) = hub_id.captures(url)
            {
                describe(&mut entry, &found[1], false);
            }
        }
        Json::String(model_id) => describe(&mut entry, model_id, true),
        Json::Object(table) => return Json::Object(table.clone()),
        // gguf-py logs these and keeps an empty entry.
        _ => {}
    }
    Json::Object(entry)
}

/// `generation_config.json`'s sampling defaults.
fn from_generation_config(m: &mut Naming, ckpt: &Checkpoint) -> Result<(), ConvertError> {
    // gguf-py takes a file it cannot parse as none.
    let generation = ckpt
        .files
        .read(&ckpt.dir.join("generation_config.json"), TEXT_LIMIT)?
        .and_then(|bytes| serde_json::from_slice::<Json>(&bytes).ok())
        .unwrap_or(Json::Null);
    const FROM: &str = "generation_config.json";
    for (key, names) in [
        ("general.sampling.sequence", &["sequence"][..]),
        ("general.sampling.top_k", &["top_k"]),
        ("general.sampling.top_p", &["top_p"]),
        ("general.sampling.min_p", &["min_p"]),
        ("general.sampling.xtc_probability", &["xtc_probability"]),
        ("general.sampling.xtc_threshold", &["xtc_threshold"]),
        ("general.sampling.temp", &["temperature"]),
        ("general.sampling.penalty_last_n", &["penalty_last_n"]),
        ("general.sampling.penalty_repeat", &["penalty_repeat", "repetition_penalty"]),
        ("general.sampling.mirostat", &["mirostat"]),
        ("general.sampling.mirostat_tau", &["mirostat_tau"]),
        ("general.sampling.mirostat_eta", &["mirostat_eta"]),
    ] {
        if let Some(value) = names.iter().find_map(|n| generation.get(*n)) {
            m.set(key, value.clone(), FROM);
        }
    }
    Ok(())
}

/// Writes `value` to `key` as gguf-py's writer does: empty strings and
/// lists not at all, a licence list joined, lineage entries field by field.
fn write_field(
    keys: &mut Metadata,
    key: &'static str,
    kind: Kind,
    value: &Json,
    from: &str,
) -> Result<(), ConvertError> {
    let wrong = |field: &str, value: &Json, expected: &'static str| ConvertError::MetadataValue {
        source_name: from.to_owned(),
        field: field.to_owned(),
        value: crate::text::shorten(&value.to_string(), 80).into_owned(),
        key: key.to_owned(),
        expected,
    };
    let text = |keys: &mut Metadata, key: &str, field: &str, value: &Json| match value {
        Json::String(s) if s.is_empty() => Ok(()),
        Json::String(s) => {
            keys.set(key, Value::string(s));
            Ok(())
        }
        other => Err(wrong(field, other, "a string")),
    };
    match kind {
        Kind::Str => text(keys, key, key, value)?,
        Kind::I32 => {
            let n = value
                .as_i64()
                .and_then(|n| i32::try_from(n).ok())
                .ok_or_else(|| wrong(key, value, "a 32-bit integer"))?;
            keys.set(key, Value::I32(n));
        }
        Kind::F32 => {
            let x = value.as_f64().ok_or_else(|| wrong(key, value, "a number"))?;
            keys.set(key, Value::F32(x as f32));
        }
        Kind::License => match value {
            Json::Array(items) => {
                let parts: Option<Vec<&str>> = items.iter().map(Json::as_str).collect();
                let joined = parts.ok_or_else(|| wrong(key, value, "a string or a list of strings"))?.join(",");
                text(keys, key, key, &Json::String(joined))?;
            }
            other => text(keys, key, key, other)?,
        },
        Kind::Entries(prefix) => {
            let Json::Array(entries) = value else { return Err(wrong(key, value, "a list of tables")) };
            let count = u32::try_from(entries.len()).map_err(|_| wrong(key, value, "fewer than 2^32 entries"))?;
            keys.set(&format!("{prefix}.count"), Value::U32(count));
            for (i, entry) in entries.iter().enumerate() {
                let Json::Object(entry) = entry else { return Err(wrong(&format!("{key}[{i}]"), entry, "a table")) };
                for field in ENTRY_FIELDS {
                    if let Some(v) = entry.get(field) {
                        text(keys, &format!("{prefix}.{i}.{field}"), &format!("{key}[{i}].{field}"), v)?;
                    }
                }
            }
        }
        Kind::StrList => {
            let Json::Array(items) = value else { return Err(wrong(key, value, "a list of strings")) };
            let strings: Option<Vec<&str>> = items.iter().map(Json::as_str).collect();
            let strings = strings.ok_or_else(|| wrong(key, value, "a list of strings"))?;
            if !strings.is_empty() {
                keys.set(key, Value::Array(Array::String(strings.into_iter().collect())));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_become_titles_and_components() {
        assert_eq!(id_to_title("tiny-llama-3-chat"), "Tiny Llama 3 Chat");
        assert_eq!(id_to_title("Mistral-Tiny-180K-v0.3"), "Mistral Tiny 180K v0.3");
        let c = model_id_components("Mistral-Tiny-180K-v0.3", 180_000);
        assert_eq!(
            (c.2.as_deref(), c.4.as_deref(), c.5.as_deref()),
            (Some("Mistral-Tiny"), Some("v0.3"), Some("180K"))
        );
        let c = model_id_components("Phi-3-mini-4k-instruct", 120_000);
        assert_eq!(
            (c.2.as_deref(), c.3.as_deref(), c.5.as_deref()),
            (Some("Phi-3"), Some("4k-instruct"), Some("mini"))
        );
    }

    #[test]
    fn counts_round_like_python() {
        assert_eq!(rounded_count(115_264), "115K");
        assert_eq!(rounded_count(7_241_732_096), "7.2B");
        assert_eq!(rounded_count(1_500), "1.5K");
    }
}
