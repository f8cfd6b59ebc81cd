//! Why a node misses: each run records, per recipe node, the parts its key
//! was built from; `plan` compares today's parts with those and names what
//! changed (an input's content, a parameter, the codec or op version, the
//! build of the external tool it runs), or,
//! for an export whose key did not change, which of its files was deleted
//! or modified.

use crate::codecs::CODEC_VERSION;
use crate::key::{KEY_SCHEME_VERSION, Key};
use crate::ops::Op;
use crate::recipe::Source;
use crate::store::ActionKind;
use crate::store::fingerprint::hash_file;

use super::export::exported_files;
use super::{Shared, input_hash};

#[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct KeyParts {
    key: Key,
    scheme: u32,
    codec_version: u32,
    op: String,
    op_version: u32,
    params: serde_json::Value,
    /// (name, key) of each input, in order.
    inputs: Vec<(String, Key)>,
    /// The external tool the node runs: its binary, version and identity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tool: Option<ToolPart>,
}

#[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct ToolPart {
    binary: String,
    version: String,
    identity: Key,
}

impl Shared {
    fn recent_key(&self, i: usize) -> Key {
        crate::store::recent_key(&self.bound.recipe.name, &self.bound.recipe.nodes[i].id)
    }

    fn key_parts(&self, i: usize) -> KeyParts {
        let recipe = &self.bound.recipe;
        let node = &recipe.nodes[i];
        let mut inputs = Vec::new();
        for src in &node.from {
            inputs.push(match *src {
                Source::Input(j) => (recipe.inputs[j].name.clone(), input_hash(&self.bound.inputs, j)),
                Source::Node(j) => (recipe.nodes[j].id.clone(), self.bound.keys[j]),
            });
        }
        for &j in &node.uses {
            inputs.push((recipe.inputs[j].name.clone(), input_hash(&self.bound.inputs, j)));
        }
        KeyParts {
            key: self.bound.keys[i],
            scheme: KEY_SCHEME_VERSION,
            codec_version: CODEC_VERSION,
            op: node.op.name().to_owned(),
            op_version: node.op.spec().version,
            params: node.op.key_params(),
            inputs,
            tool: self.bound.tools[i].as_ref().map(|t| ToolPart {
                binary: t.tool.binary().to_owned(),
                version: t.version.clone(),
                identity: t.identity,
            }),
        }
    }

    /// Records the parts of node `i`'s key, unless already recorded.
    pub(super) fn remember(&self, i: usize) {
        let recent = self.recent_key(i);
        let recorded = self
            .store
            .get_action(ActionKind::Recent, &recent)
            .and_then(|b| serde_json::from_slice::<KeyParts>(&b).ok());
        if recorded.is_some_and(|r| r.key == self.bound.keys[i]) {
            return;
        }
        if let Ok(json) = serde_json::to_vec(&self.key_parts(i)) {
            // Best effort: without the record, plan can only say "not cached".
            let _ = self.store.put_action(ActionKind::Recent, &recent, &json);
        }
    }

    /// What became of the files export node `i` wrote last, as DVC says it:
    /// each `deleted` or `modified`; none for another node.
    fn changed_outputs(&self, i: usize) -> Vec<String> {
        let Op::Export(options) = &self.bound.recipe.nodes[i].op else { return Vec::new() };
        let Some(files) = exported_files(&*self.store, &self.bound.keys[i], options) else { return Vec::new() };
        let changed = files.into_iter().filter_map(|(path, len, hash)| {
            let shown = crate::text::for_terminal(&path.display().to_string()).into_owned();
            match std::fs::metadata(&path) {
                Err(_) => Some(format!("`{shown}` was deleted")),
                Ok(meta) if meta.len() != len || hash_file(&path).ok() != Some(hash) => {
                    Some(format!("`{shown}` was modified"))
                }
                Ok(_) => None,
            }
        });
        changed.collect()
    }

    /// Why node `i` is not in the cache, as short sentences.
    pub(super) fn why(&self, i: usize) -> Vec<String> {
        let now = self.key_parts(i);
        let Some(before) = self
            .store
            .get_action(ActionKind::Recent, &self.recent_key(i))
            .and_then(|b| serde_json::from_slice::<KeyParts>(&b).ok())
        else {
            return vec!["never built with this cache".into()];
        };
        if before.key == now.key {
            let changed = self.changed_outputs(i);
            if changed.is_empty() {
                return vec!["its cached result was removed (cache gc)".into()];
            }
            return changed;
        }
        let mut reasons = Vec::new();
        if before.scheme != now.scheme {
            reasons.push(format!("the cache key scheme changed ({} → {})", before.scheme, now.scheme));
        }
        if before.codec_version != now.codec_version {
            reasons.push(format!("the codec version changed ({} → {})", before.codec_version, now.codec_version));
        }
        if before.op != now.op || before.op_version != now.op_version {
            reasons.push(format!(
                "the op changed ({} v{} → {} v{})",
                before.op, before.op_version, now.op, now.op_version
            ));
        }
        if let (Some(old), Some(new)) = (before.params.as_object(), now.params.as_object()) {
            for (name, value) in new {
                match old.get(name) {
                    Some(previous) if previous == value => {}
                    Some(previous) => reasons.push(format!("parameter `{name}` changed: {previous} → {value}")),
                    None => reasons.push(format!("parameter `{name}` is new: {value}")),
                }
            }
            for name in old.keys().filter(|k| !new.contains_key(*k)) {
                reasons.push(format!("parameter `{name}` was removed"));
            }
        }
        for (name, key) in &now.inputs {
            match before.inputs.iter().find(|(n, _)| n == name) {
                Some((_, old)) if old == key => {}
                Some((_, old)) => reasons.push(format!("input `{name}` changed ({} → {})", old.short(), key.short())),
                None => reasons.push(format!("input `{name}` is new")),
            }
        }
        match (&before.tool, &now.tool) {
            (Some(old), Some(new)) if old.identity != new.identity => reasons.push(format!(
                "`{}` is another build: {} ({}) → {} ({})",
                new.binary,
                old.version,
                old.identity.short(),
                new.version,
                new.identity.short()
            )),
            _ => {}
        }
        if reasons.is_empty() {
            reasons.push("its key changed".into());
        }
        reasons
    }
}
