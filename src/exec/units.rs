//! Work units: the tensor encodes a run needs, grouped into pieces that any
//! machine sharing the cache can compute (`quantforge work`), and the
//! exports that assemble them from the cache (an ordinary `run`).
//!
//! Units are cut from every derived tensor the recipe's exports and kept
//! steps are made of, cached or not, in recipe order, so a unit's identity
//! does not move as units finish: its ID is `INDEX-DIGEST`, the digest over
//! its tensors' keys. A worker derives the units again from the recipe and
//! its inputs and refuses an ID whose digest differs (the recipe, an input
//! or the unit size changed since planning) instead of computing something
//! else. A tensor computed from another unit's tensor is in a later stage,
//! so a scheduler can run stages in order and nothing is computed twice.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::artifact::{Tensor, TensorData, TensorSet};
use crate::codecs::encode_ns_per_weight;
use crate::key::{Key, KeyBuilder};
use crate::ops::Op;
use crate::recipe::{Recipe, Source};
use crate::store::remote::TransferReport;

use super::materialize::{MaterializeError, SLAB_ELEMENTS};
use super::{Engine, RunError, Shared, ms};

/// How much estimated work one unit holds: seconds of one core.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct UnitSize {
    pub seconds: f64,
}

impl Default for UnitSize {
    /// Five core-minutes: long enough that starting a task is noise, short
    /// enough that a 400B ladder stays under Slurm's default array limit.
    fn default() -> UnitSize {
        UnitSize { seconds: 300.0 }
    }
}

impl UnitSize {
    /// `90`, `90s`, `5m` or `2h`.
    pub fn parse(text: &str) -> Result<UnitSize, String> {
        let text = text.trim();
        let (number, scale) = match text.char_indices().last() {
            Some((i, 's')) => (&text[..i], 1.0),
            Some((i, 'm')) => (&text[..i], 60.0),
            Some((i, 'h')) => (&text[..i], 3600.0),
            _ => (text, 1.0),
        };
        match number.parse::<f64>() {
            Ok(n) if n.is_finite() && n > 0.0 => Ok(UnitSize { seconds: n * scale }),
            _ => Err(format!("`{text}` is not a duration: a positive number of seconds, or with s, m or h")),
        }
    }
}

/// What a run still has to compute, as units, and the exports to assemble.
#[derive(Debug, Clone, serde::Serialize, schemars::JsonSchema)]
pub struct UnitPlan {
    pub recipe: String,
    pub unit_seconds: f64,
    /// Units in the recipe, finished ones included.
    pub total_units: usize,
    pub stages: usize,
    /// The units with a tensor not yet in the cache, in stage order.
    pub units: Vec<Unit>,
    /// The exports whose files are not up to date.
    pub exports: Vec<ExportUnit>,
}

#[derive(Debug, Clone, serde::Serialize, schemars::JsonSchema)]
pub struct Unit {
    pub id: String,
    pub stage: usize,
    pub tensors: usize,
    /// Tensors not yet in the cache.
    pub pending: usize,
    pub weights: u64,
    pub bytes_out: u64,
    /// One core's estimated time for the pending tensors.
    pub estimate_seconds: f64,
    /// Working memory of one slab of the unit's largest tensor in flight.
    pub slab_bytes: u64,
}

/// An export to write from the cache once the units are done.
#[derive(Debug, Clone, serde::Serialize, schemars::JsonSchema)]
pub struct ExportUnit {
    /// The node's id: `run RECIPE ID` writes it.
    pub id: String,
    pub path: PathBuf,
}

/// What `work` did.
#[derive(Debug, Clone, serde::Serialize, schemars::JsonSchema)]
pub struct WorkReport {
    pub recipe: String,
    pub units: Vec<UnitWork>,
    pub wall_ms: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remote: Option<TransferReport>,
}

#[derive(Debug, Clone, serde::Serialize, schemars::JsonSchema)]
pub struct UnitWork {
    pub id: String,
    pub tensors: usize,
    pub encoded: u64,
    /// Tensors already in the cache.
    pub reused: u64,
}

/// A unit as cut, before the cache is asked about it.
struct Draft {
    id: String,
    stage: usize,
    tensors: Vec<Tensor>,
}

/// One tensor of the units and what it costs.
struct Candidate {
    tensor: Tensor,
    /// An export that writes it or a step that keeps it still has to run.
    needed: bool,
    stage: usize,
    cost_ns: f64,
}

impl Engine {
    /// The units `recipe` still needs computed, cut at `size`. `record`
    /// caches the step results computed to find them (the workers then load
    /// them instead of computing them again); without it nothing is written.
    pub fn units(&self, recipe: &Recipe, size: UnitSize, record: bool) -> Result<UnitPlan, RunError> {
        let (shared, needed_exports) = self.shared_with_sets(recipe, record)?;
        let (drafts, stages, candidates) = cut(&shared, &needed_exports, size);
        let materializer = shared.materializer();
        let needed: HashMap<Key, bool> = candidates.iter().map(|c| (c.tensor.key, c.needed)).collect();
        let persisted: HashSet<Key> = needed.keys().copied().collect();
        let all: Vec<&Tensor> = drafts.iter().flat_map(|d| &d.tensors).collect();
        materializer.prefetch(&all);
        let units = drafts
            .iter()
            .filter_map(|draft| {
                let pending: Vec<&Tensor> = draft
                    .tensors
                    .iter()
                    .filter(|t| needed.get(&t.key).copied().unwrap_or(false) && !materializer.is_cached(t))
                    .collect();
                (!pending.is_empty()).then(|| Unit {
                    id: draft.id.clone(),
                    stage: draft.stage,
                    tensors: draft.tensors.len(),
                    pending: pending.len(),
                    weights: draft.tensors.iter().map(|t| t.info().n_elements()).sum(),
                    bytes_out: draft.tensors.iter().map(Tensor::n_bytes).sum(),
                    estimate_seconds: pending.iter().map(|t| cost_ns(t, &persisted)).sum::<f64>() / 1e9,
                    slab_bytes: draft.tensors.iter().map(slab_bytes).max().unwrap_or(0),
                })
            })
            .collect();
        let exports = shared
            .bound
            .recipe
            .nodes
            .iter()
            .enumerate()
            .filter(|(i, _)| needed_exports[*i])
            .filter_map(|(_, node)| match &node.op {
                Op::Export(o) => Some(ExportUnit { id: node.id.clone(), path: o.path.clone() }),
                _ => None,
            })
            .collect();
        Ok(UnitPlan {
            recipe: shared.bound.recipe.name.clone(),
            unit_seconds: size.seconds,
            total_units: drafts.len(),
            stages,
            units,
            exports,
        })
    }

    /// Computes the tensors of the units `ids` (cut at `size`) that the
    /// cache lacks and stores them; a unit already done costs its lookups.
    pub fn work(&self, recipe: &Recipe, ids: &[String], size: UnitSize) -> Result<WorkReport, RunError> {
        let started = Instant::now();
        let (shared, needed_exports) = self.shared_with_sets(recipe, true)?;
        let (drafts, _, _) = cut(&shared, &needed_exports, size);
        let mut chosen = Vec::with_capacity(ids.len());
        for id in ids {
            chosen.push(find_unit(&drafts, id)?);
        }
        let mut units = Vec::with_capacity(chosen.len());
        for draft in chosen {
            let materializer = shared.materializer();
            let tensors: Vec<&Tensor> = draft.tensors.iter().collect();
            materializer.prefetch(&tensors);
            // One tensor more in flight than there are workers: while one
            // waits for its upload to the shared cache, the workers encode.
            let next = AtomicUsize::new(0);
            let failed: Mutex<Option<MaterializeError>> = Mutex::new(None);
            std::thread::scope(|scope| {
                for _ in 0..=self.jobs.min(tensors.len()) {
                    scope.spawn(|| {
                        while let Some(tensor) = tensors.get(next.fetch_add(1, Ordering::Relaxed)) {
                            if let Err(e) = materializer.persist(tensor) {
                                next.store(tensors.len(), Ordering::Relaxed);
                                failed.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert(e);
                            }
                        }
                    });
                }
            });
            if let Some(e) = failed.into_inner().unwrap_or_else(|e| e.into_inner()) {
                return Err(RunError::Unit { id: draft.id.clone(), why: e.to_string() });
            }
            units.push(UnitWork {
                id: draft.id.clone(),
                tensors: tensors.len(),
                encoded: materializer.counters.encoded.load(Ordering::Relaxed),
                reused: materializer.counters.reused.load(Ordering::Relaxed),
            });
        }
        Ok(WorkReport {
            recipe: shared.bound.recipe.name.clone(),
            units,
            wall_ms: ms(started),
            remote: self.store.transfers(),
        })
    }

    /// The run's shared state with every step's result set, and which
    /// exports are not up to date.
    fn shared_with_sets(&self, recipe: &Recipe, record: bool) -> Result<(Shared, Vec<bool>), RunError> {
        let (bound, _) = self.bind(recipe)?;
        let n = bound.recipe.nodes.len();
        let mut shared = self.shared(bound, vec![None; n], false)?;
        let mut needed_exports = vec![false; n];
        for (i, needed) in needed_exports.iter_mut().enumerate() {
            let node = &shared.bound.recipe.nodes[i];
            if let Op::Export(o) = &node.op {
                *needed = !self.export_is_fresh(&shared.bound.keys[i], o);
                continue;
            }
            let inputs = node
                .from
                .iter()
                .filter_map(|s| match s {
                    Source::Node(j) => shared.loaded[*j].clone(),
                    Source::Input(_) => None,
                })
                .collect();
            let (set, _) = shared
                .manifest(i, inputs, !record)
                .map_err(|e| RunError::Step { node: node.id.clone(), source: Box::new(e) })?;
            shared.loaded[i] = Some(set);
        }
        Ok((shared, needed_exports))
    }
}

/// Cuts the units: every derived tensor the exports and kept steps are made
/// of, in recipe order and by stage, packed up to `size` of estimated work.
fn cut(shared: &Shared, needed_exports: &[bool], size: UnitSize) -> (Vec<Draft>, usize, Vec<Candidate>) {
    let recipe = &shared.bound.recipe;
    let mut order: Vec<(&Tensor, bool)> = Vec::new();
    for (i, node) in recipe.nodes.iter().enumerate() {
        let (sets, needed): (Vec<&Arc<TensorSet>>, bool) = match &node.op {
            Op::Export(_) => (
                node.from
                    .iter()
                    .filter_map(|s| match s {
                        Source::Node(j) => shared.loaded[*j].as_ref(),
                        Source::Input(_) => None,
                    })
                    .collect(),
                needed_exports[i],
            ),
            _ if node.keep => {
                let kept = super::node_entry(&*shared.store, &shared.bound.keys[i]).is_some_and(|e| e.kept);
                (shared.loaded[i].iter().collect(), !kept)
            }
            _ => continue,
        };
        for tensor in sets.into_iter().flat_map(|s| &s.tensors).filter(|t| t.is_derived()) {
            order.push((tensor, needed));
        }
    }
    let mut index: HashMap<Key, usize> = HashMap::new();
    let mut candidates: Vec<Candidate> = Vec::new();
    for (tensor, needed) in order {
        match index.get(&tensor.key) {
            Some(&at) => candidates[at].needed |= needed,
            None => {
                index.insert(tensor.key, candidates.len());
                candidates.push(Candidate { tensor: tensor.clone(), needed, stage: 0, cost_ns: 0.0 });
            }
        }
    }
    let persisted: HashSet<Key> = index.keys().copied().collect();
    let mut stages_by_key: HashMap<Key, usize> = HashMap::new();
    for candidate in &mut candidates {
        candidate.stage = stage(&candidate.tensor, &persisted, &mut stages_by_key);
        candidate.cost_ns = cost_ns(&candidate.tensor, &persisted);
    }
    let stages = candidates.iter().map(|c| c.stage + 1).max().unwrap_or(0);
    let budget_ns = size.seconds * 1e9;
    let mut drafts = Vec::new();
    for stage in 0..stages {
        let mut current: Vec<Tensor> = Vec::new();
        let mut current_ns = 0.0;
        for candidate in candidates.iter().filter(|c| c.stage == stage) {
            if !current.is_empty() && current_ns + candidate.cost_ns > budget_ns {
                drafts.push(draft(drafts.len(), stage, std::mem::take(&mut current)));
                current_ns = 0.0;
            }
            current.push(candidate.tensor.clone());
            current_ns += candidate.cost_ns;
        }
        if !current.is_empty() {
            drafts.push(draft(drafts.len(), stage, current));
        }
    }
    (drafts, stages, candidates)
}

fn draft(index: usize, stage: usize, tensors: Vec<Tensor>) -> Draft {
    let mut digest = KeyBuilder::new("work-unit");
    tensors.iter().for_each(|t| {
        digest.key(&t.key);
    });
    let id = format!("{index}-{}", &digest.finish().hex()[..8]);
    Draft { id, stage, tensors }
}

fn find_unit<'d>(drafts: &'d [Draft], id: &str) -> Result<&'d Draft, RunError> {
    let index = unit_index(id);
    let why = match index.and_then(|i| drafts.get(i)) {
        Some(draft) if draft.id == id => return Ok(draft),
        Some(draft) => format!(
            "this recipe's unit {} is now {}: the recipe, an input or --unit-size differs from the plan's \
             (plan again, with the same --unit-size)",
            index.unwrap_or_default(),
            draft.id
        ),
        None if index.is_none() => "a unit ID is INDEX-DIGEST, as `plan --units` prints it".into(),
        None => format!("the recipe has {} units at this --unit-size", drafts.len()),
    };
    Err(RunError::Unit { id: id.to_owned(), why })
}

/// The stage of a persisted tensor: one after the latest persisted tensor
/// its bytes are computed from.
fn stage(tensor: &Tensor, persisted: &HashSet<Key>, memo: &mut HashMap<Key, usize>) -> usize {
    if let Some(&s) = memo.get(&tensor.key) {
        return s;
    }
    let mut link = tensor;
    let mut result = 0;
    while let TensorData::Convert { from, .. } = &link.data {
        if from.is_derived() && persisted.contains(&from.key) {
            result = stage(from, persisted, memo) + 1;
            break;
        }
        link = from;
    }
    memo.insert(tensor.key, result);
    result
}

/// One core's time to compute `tensor`: its encode and those of the links
/// of its chain that no unit stores.
fn cost_ns(tensor: &Tensor, persisted: &HashSet<Key>) -> f64 {
    let mut total = 0.0;
    let mut link = tensor;
    loop {
        total += link.info().n_elements() as f64 * encode_ns_per_weight(link.ggml_type);
        match &link.data {
            TensorData::Convert { from, .. } if from.is_derived() && !persisted.contains(&from.key) => link = from,
            _ => return total,
        }
    }
}

/// Memory of one slab of `tensor` in flight: its f32 rows, and the rows of
/// every link of its chain and of the result in their types.
fn slab_bytes(tensor: &Tensor) -> u64 {
    let n_per_row = tensor.dims.first().copied().unwrap_or(1).max(1);
    let elements = (SLAB_ELEMENTS as u64).max(n_per_row) / n_per_row * n_per_row;
    let mut bytes_per_weight = 4.0;
    let mut link = Some(tensor);
    while let Some(t) = link {
        bytes_per_weight += t.ggml_type.bits_per_weight() / 8.0;
        link = match &t.data {
            TensorData::Convert { from, .. } => Some(from),
            _ => None,
        };
    }
    (elements as f64 * bytes_per_weight).ceil() as u64
}

/// Spreads `units` over `jobs` jobs of about equal estimated time (longest
/// first onto the least loaded), each job's units in stage order.
pub fn matrix(units: &[Unit], jobs: usize) -> Vec<Vec<String>> {
    let jobs = jobs.clamp(1, units.len().max(1));
    let mut by_cost: Vec<&Unit> = units.iter().collect();
    by_cost.sort_by(|a, b| b.estimate_seconds.total_cmp(&a.estimate_seconds).then_with(|| a.id.cmp(&b.id)));
    let mut load = vec![0.0f64; jobs];
    let mut assigned: Vec<Vec<&Unit>> = vec![Vec::new(); jobs];
    for unit in by_cost {
        let least = (0..jobs).min_by(|&a, &b| load[a].total_cmp(&load[b])).unwrap_or(0);
        load[least] += unit.estimate_seconds;
        assigned[least].push(unit);
    }
    assigned
        .into_iter()
        .filter(|units| !units.is_empty())
        .map(|mut units| {
            units.sort_by_key(|u| (u.stage, unit_index(&u.id).unwrap_or(usize::MAX)));
            units.into_iter().map(|u| u.id.clone()).collect()
        })
        .collect()
}

/// The INDEX of an `INDEX-DIGEST` unit ID.
fn unit_index(id: &str) -> Option<usize> {
    id.split_once('-').and_then(|(i, _)| i.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_sizes_parse_with_their_unit() {
        assert_eq!(UnitSize::parse("90").unwrap().seconds, 90.0);
        assert_eq!(UnitSize::parse("90s").unwrap().seconds, 90.0);
        assert_eq!(UnitSize::parse("5m").unwrap().seconds, 300.0);
        assert_eq!(UnitSize::parse("0.5h").unwrap().seconds, 1800.0);
        for bad in ["", "0", "-3m", "m", "5d", "nan"] {
            assert!(UnitSize::parse(bad).is_err(), "{bad}");
        }
    }

    fn unit(id: &str, stage: usize, seconds: f64) -> Unit {
        Unit {
            id: id.into(),
            stage,
            tensors: 1,
            pending: 1,
            weights: 0,
            bytes_out: 0,
            estimate_seconds: seconds,
            slab_bytes: 0,
        }
    }

    #[test]
    fn a_matrix_balances_estimates_and_keeps_stage_order() {
        let units = [unit("0-a", 0, 10.0), unit("1-b", 0, 6.0), unit("2-c", 1, 5.0), unit("3-d", 1, 1.0)];
        let jobs = matrix(&units, 2);
        assert_eq!(jobs, vec![vec!["0-a".to_owned(), "3-d".into()], vec!["1-b".into(), "2-c".into()]]);
        assert_eq!(matrix(&units, 9).len(), 4, "never a job without a unit");
        assert!(matrix(&[], 3).is_empty());
    }
}
