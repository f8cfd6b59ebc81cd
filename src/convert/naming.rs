//! The `general.*` keys a conversion writes before the architecture keys:
//! `general.type`, sampling defaults from `generation_config.json`, and the
//! model's name, basename, finetune, version and size label, as gguf-py's
//! `Metadata` derives them from the model card's front matter, `config.json`
//! and the directory name (reference: sec. 8 of
//! `docs/notes/convert-hf-reference.md`).

use std::collections::BTreeMap;

use regex::Regex;
use serde_json::Value as Json;

use super::checkpoint::Checkpoint;
use crate::model::{Array, Metadata, Value};

/// What the heuristics fill in; `None` is Python's `None`.
#[derive(Default)]
struct Naming {
    name: Option<String>,
    author: Option<String>,
    version: Option<String>,
    organization: Option<String>,
    finetune: Option<String>,
    basename: Option<String>,
    description: Option<String>,
    size_label: Option<String>,
    license: Option<String>,
    license_name: Option<String>,
    license_link: Option<String>,
    base_models: Option<Vec<BTreeMap<&'static str, String>>>,
    tags: Option<Vec<String>>,
    languages: Option<Vec<String>>,
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
            if total_params != 0 {
                let chars: Vec<char> = p.chars().collect();
                let (number, suffix) = (chars[..chars.len() - 1].iter().collect::<String>(), chars[chars.len() - 1]);
                if let (Ok(number), Some(power)) = (number.parse::<f64>(), " KMBT".find(suffix)) {
                    let label = number * 1000f64.powi(power as i32);
                    let total = total_params as f64;
                    let small = total_params < 0 && label < (total_params.abs() / 8) as f64;
                    let far = total_params > 0 && (label - total).abs() > (7 * total_params / 8) as f64;
                    if small || far {
                        add(&mut kinds, "finetune");
                        p = format!("{}{}", number_text(&chars), suffix.to_ascii_lowercase());
                    }
                }
            }
            if kinds[i].is_empty() {
                add(&mut kinds, "size_label");
            }
            *part = p;
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

/// The model card's YAML front matter, for the flat keys the heuristics
/// read: `key: value` and `key:` followed by `- item` lines.
fn model_card(dir: &std::path::Path) -> BTreeMap<String, Json> {
    let mut card = BTreeMap::new();
    let Ok(text) = std::fs::read_to_string(dir.join("README.md")) else { return card };
    let text = text.replace("\r\n", "\n");
    let mut lines = text.lines();
    if lines.next() != Some("---") {
        return card;
    }
    let mut list_key: Option<String> = None;
    for line in lines.take_while(|l| *l != "---") {
        if let Some(item) = line.strip_prefix("- ").or_else(|| line.strip_prefix("  - ")) {
            if let Some(key) = &list_key {
                let entry = card.entry(key.clone()).or_insert_with(|| Json::Array(Vec::new()));
                if let Json::Array(items) = entry {
                    items.push(Json::String(unquote(item)));
                }
            }
            continue;
        }
        let Some((key, value)) = line.split_once(':') else { continue };
        let value = value.trim();
        if value.is_empty() {
            list_key = Some(key.trim().to_owned());
        } else {
            list_key = None;
            card.insert(key.trim().to_owned(), Json::String(unquote(value)));
        }
    }
    card
}

fn unquote(s: &str) -> String {
    let s = s.trim();
    s.strip_prefix('"')
        .and_then(|s| s.strip_suffix('"'))
        .or_else(|| s.strip_prefix('\'').and_then(|s| s.strip_suffix('\'')))
        .unwrap_or(s)
        .to_owned()
}

fn strings(v: &Json) -> Vec<String> {
    match v {
        Json::String(s) => vec![s.clone()],
        Json::Array(items) => items.iter().filter_map(Json::as_str).map(str::to_owned).collect(),
        _ => Vec::new(),
    }
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

/// `general.type`, the sampling keys and the naming keys, in the converter's order.
pub fn general_keys(ckpt: &Checkpoint, counts: &ParameterCounts, keys: &mut Metadata) {
    let total_params = counts.total;
    let mut m = Naming::default();
    let card = model_card(&ckpt.dir);
    let from_card = |field: &mut Option<String>, names: &[&str]| {
        for name in names {
            if field.is_none()
                && let Some(v) = card.get(*name)
            {
                *field = v.as_str().map(str::to_owned);
            }
        }
    };
    from_card(&mut m.name, &["name", "model_name"]);
    from_card(&mut m.author, &["author", "model_author", "model_creator"]);
    from_card(&mut m.version, &["version", "model_version"]);
    from_card(&mut m.organization, &["organization", "model_organization"]);
    from_card(&mut m.description, &["description", "model_description"]);
    from_card(&mut m.finetune, &["finetune", "model_finetune"]);
    from_card(&mut m.basename, &["basename", "model_basename", "model_type"]);
    from_card(&mut m.size_label, &["size_label", "model_size_label"]);
    let total = total_params as i64;
    if let Some(value) = card.get("base_model").or_else(|| card.get("base_models")) {
        let mut models = Vec::new();
        for id in strings(value) {
            let mut entry = BTreeMap::new();
            let (full, org, _, _, version, _) = model_id_components(&id, total);
            if let Some(full) = &full {
                entry.insert("name", id_to_title(full));
            }
            if let Some(org) = &org {
                entry.insert("organization", id_to_title(org));
            }
            if let Some(version) = version {
                entry.insert("version", version);
            }
            if let (Some(org), Some(full)) = (&org, &full) {
                entry.insert("repo_url", format!("https://huggingface.co/{org}/{full}"));
            }
            models.push(entry);
        }
        m.base_models = Some(models);
    }
    from_card(&mut m.license, &["license"]);
    from_card(&mut m.license_name, &["license_name"]);
    from_card(&mut m.license_link, &["license_link"]);
    for (field, names) in [(&mut m.tags, ["tags", "pipeline_tag"]), (&mut m.languages, ["languages", "language"])] {
        for name in names {
            if let Some(v) = card.get(name) {
                field.get_or_insert_with(Vec::new).extend(strings(v));
            }
        }
    }
    let mut fill = |components: Components| {
        let (full, org, basename, finetune, version, size_label) = components;
        if m.name.is_none() {
            m.name = full.map(|f| id_to_title(&f));
        }
        if m.organization.is_none() {
            m.organization = org.map(|o| id_to_title(&o));
        }
        m.basename = m.basename.take().or(basename);
        m.finetune = m.finetune.take().or(finetune);
        m.version = m.version.take().or(version);
        m.size_label = m.size_label.take().or(size_label);
    };
    if let Some(id) = ckpt.config.get("_name_or_path").and_then(Json::as_str).filter(|id| id.matches('/').count() <= 1)
    {
        fill(model_id_components(id, total));
    }
    let dir_name = match &ckpt.repository {
        Some(name) => name.clone(),
        None => ckpt.dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
    };
    fill(model_id_components(&dir_name, total));
    if m.name.is_none() {
        m.name = Some(dir_name);
    }
    if m.size_label.is_none() && total_params > 0 {
        m.size_label = Some(counts.size_label());
    }
    if let Some(name) = &ckpt.model_name {
        m.name = Some(name.clone());
    }

    keys.set("general.type", Value::string("model"));
    let generation = std::fs::read_to_string(ckpt.dir.join("generation_config.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<Json>(&t).ok())
        .unwrap_or(Json::Null);
    if let Some(sequence) = generation.get("sequence").and_then(Json::as_str) {
        keys.set("general.sampling.sequence", Value::string(sequence));
    }
    // (key, generation_config names, written as i32 rather than f32)
    let sampling: [(&str, &[&str], bool); 11] = [
        ("top_k", &["top_k"], true),
        ("top_p", &["top_p"], false),
        ("min_p", &["min_p"], false),
        ("xtc_probability", &["xtc_probability"], false),
        ("xtc_threshold", &["xtc_threshold"], false),
        ("temp", &["temperature"], false),
        ("penalty_last_n", &["penalty_last_n"], true),
        ("penalty_repeat", &["penalty_repeat", "repetition_penalty"], false),
        ("mirostat", &["mirostat"], true),
        ("mirostat_tau", &["mirostat_tau"], false),
        ("mirostat_eta", &["mirostat_eta"], false),
    ];
    for (key, names, integer) in sampling {
        let Some(v) = names.iter().find_map(|n| generation.get(*n).filter(|v| !v.is_null())) else { continue };
        let value =
            if integer { v.as_i64().map(|n| Value::I32(n as i32)) } else { v.as_f64().map(|x| Value::F32(x as f32)) };
        if let Some(value) = value {
            keys.set(&format!("general.sampling.{key}"), value);
        }
    }
    let text = |keys: &mut Metadata, key: &str, value: Option<String>| {
        if let Some(v) = value.filter(|v| !v.is_empty()) {
            keys.set(key, Value::string(&v));
        }
    };
    keys.set("general.name", Value::string(m.name.as_deref().unwrap_or_default()));
    text(keys, "general.author", m.author);
    text(keys, "general.version", m.version);
    text(keys, "general.organization", m.organization);
    text(keys, "general.finetune", m.finetune);
    text(keys, "general.basename", m.basename);
    text(keys, "general.description", m.description);
    text(keys, "general.size_label", m.size_label);
    text(keys, "general.license", m.license);
    text(keys, "general.license.name", m.license_name);
    text(keys, "general.license.link", m.license_link);
    if let Some(models) = m.base_models {
        keys.set("general.base_model.count", Value::U32(models.len() as u32));
        for (i, model) in models.into_iter().enumerate() {
            for field in ["name", "author", "version", "organization", "description", "url", "doi", "uuid", "repo_url"]
            {
                text(keys, &format!("general.base_model.{i}.{field}"), model.get(field).cloned());
            }
        }
    }
    for (key, list) in [("general.tags", m.tags), ("general.languages", m.languages)] {
        if let Some(list) = list.filter(|l| !l.is_empty()) {
            keys.set(key, Value::Array(Array::String(list.into_iter().collect())));
        }
    }
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
