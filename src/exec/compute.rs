//! Running one node: its result computed (or taken from the cache),
//! recorded as a manifest, its derived tensors kept when asked.

use super::*;

/// The node-cache entry: where the manifest is and what it needs.
#[derive(serde::Serialize, serde::Deserialize)]
pub(super) struct NodeEntry {
    pub(super) manifest: Key,
    pub(super) blobs: Vec<Key>,
    pub(super) recipe: String,
    pub(super) id: String,
    pub(super) op: String,
    pub(super) tensors: usize,
    pub(super) bytes: u64,
    /// Every derived tensor is in the store (`keep = true`).
    pub(super) kept: bool,
    /// Tensors its quantization wrote in a fallback type, said again when
    /// the result is taken from the cache.
    #[serde(default, skip_serializing_if = "Fallbacks::is_empty")]
    pub(super) fallbacks: Fallbacks,
}

/// Marks the conversions node `key` made (those none of its inputs holds)
/// as its own, so they run on its backend.
pub(super) fn claim_conversions(set: &mut TensorSet, key: &Key, inputs: &[Arc<TensorSet>]) {
    let upstream: std::collections::HashSet<Key> =
        inputs.iter().flat_map(|s| s.tensors.iter().map(|t| t.key)).collect();
    for tensor in &mut set.tensors {
        if let crate::artifact::TensorData::Convert { producer: producer @ None, .. } = &mut tensor.data
            && !upstream.contains(&tensor.key)
        {
            *producer = Some(*key);
        }
    }
}

/// A node's cached result, read and checked, with the fallbacks it was made
/// with; `None` when absent or unusable (the store quarantines what is
/// corrupt).
pub(super) fn cached_set(store: &dyn Store, key: &Key) -> Option<(Arc<TensorSet>, Fallbacks)> {
    let entry = node_entry(store, key)?;
    let bytes = store.read_blob(&entry.manifest).ok()?;
    let set = TensorSet::decode(&bytes, &entry.manifest.hex()).ok()?;
    store.touch_action(ActionKind::Node, key);
    Some((Arc::new(set), entry.fallbacks))
}

/// A node's cache entry, if it, its manifest and every blob it names are in
/// the store.
pub(super) fn node_entry(store: &dyn Store, key: &Key) -> Option<NodeEntry> {
    let entry = node_record(store, key)?;
    let complete = store.has_blob(&entry.manifest) && store.has_blobs(&entry.blobs);
    complete.then_some(entry)
}

/// A node's cache entry as recorded, its blobs unchecked: what a report
/// says of a result already checked (or not needed) this run.
pub(super) fn node_record(store: &dyn Store, key: &Key) -> Option<NodeEntry> {
    serde_json::from_slice(&store.get_action(ActionKind::Node, key)?).ok()
}

pub(super) fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1e3
}

pub(super) fn total_bytes(set: &TensorSet) -> u64 {
    set.tensors.iter().map(Tensor::n_bytes).sum()
}

/// A worker slot: one of the `jobs` nodes that may compute at once.
pub(super) type Slot = tokio::sync::OwnedSemaphorePermit;

/// What the node tasks share.
pub(super) struct Shared {
    pub(super) bound: Bound,
    pub(super) backends: Backends,
    /// Results found in the cache and checked before the run started.
    pub(super) loaded: Vec<Option<Arc<TensorSet>>>,
    pub(super) store: Arc<dyn Store>,
    pub(super) pool: Arc<rayon::ThreadPool>,
    /// Nothing is taken from the cache (`--force`).
    pub(super) rebuild: bool,
    pub(super) buffer_limit: Option<u64>,
    pub(super) link: Vec<LinkMode>,
    /// Exports hash their files by sha256 too (`Engine::with_sha256_of_files`).
    pub(super) sha256_of_files: bool,
    /// Conversions being encoded by some node, so no other encodes them again.
    pub(super) in_flight: InFlight,
    /// Every conversion of the sets produced so far, for encoding siblings together.
    pub(super) fanout: Fanout,
    /// Where the prepared exports want each conversion.
    pub(super) destinations: Destinations,
    /// The export nodes this run writes, prepared as soon as their input is.
    pub(super) writes: Vec<bool>,
    /// The files of exports prepared before their turn, by node.
    pub(super) prepared: Mutex<HashMap<usize, Vec<AtomicOutput>>>,
    pub(super) progress: MultiProgress,
    /// Written while an external tool runs, read by every other node while
    /// it works: a tool runs alone. Each takes every core, and llama.cpp's
    /// tools print from a logging thread their exit does not wait for
    /// (llama.cpp #22142), which loses their last lines when the machine is
    /// busy.
    pub(super) tool_runs: std::sync::RwLock<()>,
}

impl Shared {
    pub(super) fn report(&self, i: usize, status: Status) -> NodeReport {
        let recipe = &self.bound.recipe;
        let node = &recipe.nodes[i];
        let input_names = node.from.iter().filter_map(|src| match src {
            Source::Input(k) => Some(*k),
            Source::Node(_) => None,
        });
        NodeReport {
            id: node.id.clone(),
            step: node.step.clone(),
            op: node.op.name(),
            from: node
                .from
                .iter()
                .filter_map(|src| match src {
                    Source::Node(j) => Some(recipe.nodes[*j].id.clone()),
                    Source::Input(_) => None,
                })
                .collect(),
            inputs: input_names.chain(node.uses.iter().copied()).map(|k| recipe.inputs[k].name.clone()).collect(),
            status,
            key: self.bound.keys[i].hex(),
            // A tool's step runs on whatever the tool runs on.
            backend: match &self.bound.tools[i] {
                Some(found) => found.tool.binary().to_owned(),
                None => self.backends.of(Some(&self.bound.keys[i])).name(),
            },
            duration_ms: 0.0,
            bytes_in: 0,
            bytes_out: 0,
            tensors_encoded: 0,
            tensors_shared: 0,
            tensors_reused: 0,
            tensors_copied: 0,
            tensors_decoded: 0,
            output: match &node.op {
                Op::Export(o) => Some(o.path.clone()),
                _ => None,
            },
            files: Vec::new(),
            fallbacks: Fallbacks::default(),
            why: Vec::new(),
            evaluation: None,
            error: None,
        }
    }

    /// Computes (or loads) node `i` on a blocking thread, in worker `slot`
    /// (given back when it returns, or by an export once its files are
    /// written).
    pub(super) fn execute(
        &self,
        i: usize,
        inputs: Vec<Arc<TensorSet>>,
        run: bool,
        slot: Option<Slot>,
    ) -> (Outcome, NodeReport) {
        let _no_tool_running = match self.bound.recipe.nodes[i].op.tool() {
            None => Some(self.tool_runs.read().unwrap_or_else(|e| e.into_inner())),
            Some(_) => None,
        };
        let started = Instant::now();
        let mut report = self.report(i, if run { Status::Ran } else { Status::Hit });
        report.bytes_in = inputs.iter().map(|s| total_bytes(s)).sum();
        let result = match &self.bound.recipe.nodes[i].op {
            Op::Export(o) => {
                let written = self.export(i, &inputs, o, &mut report, slot);
                self.destinations.forget(i);
                written.map(|()| Outcome::Written)
            }
            _ => self.manifest(i, inputs, false).and_then(|(set, fallbacks)| {
                // The exports of this set prepared before its conversions are
                // known to any encoder: none of them is written anywhere else.
                self.prepare_exports_of(i, &set);
                self.fanout.register(&set.tensors);
                report.bytes_out = total_bytes(&set);
                if matches!(self.bound.recipe.nodes[i].op, Op::Evaluate(_)) {
                    report.evaluation = ops::evaluate::Evaluation::from_set(&set);
                }
                report.fallbacks = fallbacks;
                if self.bound.recipe.nodes[i].keep && run { self.keep(i, set, &mut report) } else { Ok(set) }
                    .map(Outcome::Set)
            }),
        };
        report.duration_ms = ms(started);
        // Whatever went wrong, an input that moved under the run is the
        // cause to report: its bytes were not the ones the run hashed.
        let result = match self.bound.files.check_unchanged() {
            Ok(()) => result,
            Err(changed) => Err(changed.into()),
        };
        match result {
            Ok(outcome) => (outcome, report),
            Err(e) => {
                report.status = Status::Failed;
                report.error = Some(e.to_string());
                (Outcome::Failed, report)
            }
        }
    }

    /// Node `i`'s tensor set and its fallbacks: from the node cache, or
    /// computed from `inputs` and cached. `dry` computes without caching
    /// (for `plan`).
    pub(super) fn manifest(
        &self,
        i: usize,
        inputs: Vec<Arc<TensorSet>>,
        dry: bool,
    ) -> Result<(Arc<TensorSet>, Fallbacks), NodeError> {
        if let Some(set) = &self.loaded[i] {
            let fallbacks = node_record(&*self.store, &self.bound.keys[i]).map(|e| e.fallbacks);
            return Ok((Arc::clone(set), fallbacks.unwrap_or_default()));
        }
        if !self.rebuild
            && let Some(cached) = cached_set(&*self.store, &self.bound.keys[i])
        {
            return Ok(cached);
        }
        if let Some(tool) = self.bound.recipe.nodes[i].op.tool().filter(|_| dry) {
            return Err(NodeError::NotPlanned { tool: tool.binary() });
        }
        let (mut set, fallbacks) = self.compute(i, &inputs)?;
        claim_conversions(&mut set, &self.bound.keys[i], &inputs);
        let derived = set.tensors.iter().any(Tensor::is_derived);
        // A kept node's entry is written once, by `keep`, when its tensors
        // are stored: an entry is never replaced by a better one under the
        // same key (a shared cache keeps the first).
        if !dry && self.store.keeps_results() && !(self.bound.recipe.nodes[i].keep && derived) {
            self.cache_manifest(i, &set, !derived, &fallbacks)?;
        }
        Ok((Arc::new(set), fallbacks))
    }

    /// The evaluation an `evaluate` node's cached result holds.
    pub(super) fn cached_evaluation(&self, i: usize) -> Option<ops::evaluate::Evaluation> {
        if !matches!(self.bound.recipe.nodes[i].op, Op::Evaluate(_)) {
            return None;
        }
        let (set, _) = cached_set(&*self.store, &self.bound.keys[i])?;
        ops::evaluate::Evaluation::from_set(&set)
    }

    /// What the record of node `i`'s cached result says: its size (an
    /// export's files, another node's tensor bytes) and its fallbacks.
    pub(super) fn cached_record(&self, i: usize) -> (u64, Fallbacks) {
        let key = &self.bound.keys[i];
        match &self.bound.recipe.nodes[i].op {
            Op::Export(o) => {
                let files = export::exported_files(&*self.store, key, o);
                (files.map_or(0, |files| files.iter().map(|f| f.1).sum()), Fallbacks::default())
            }
            _ => node_record(&*self.store, key).map_or_else(Default::default, |e| (e.bytes, e.fallbacks)),
        }
    }

    /// Records node `i`'s result; `kept` when every derived tensor of it is
    /// in the store.
    pub(super) fn cache_manifest(
        &self,
        i: usize,
        set: &TensorSet,
        kept: bool,
        fallbacks: &Fallbacks,
    ) -> Result<(), NodeError> {
        let node = &self.bound.recipe.nodes[i];
        let encoded = set.encode().map_err(|source| NodeError::Write { path: self.store.location().into(), source })?;
        let manifest = self.store.put_blob(&encoded)?;
        let (mut blobs, _) = set.references();
        blobs.push(manifest);
        let entry = NodeEntry {
            manifest,
            blobs,
            recipe: self.bound.recipe.name.clone(),
            id: node.id.clone(),
            op: node.op.name().to_owned(),
            tensors: set.tensors.len(),
            bytes: total_bytes(set),
            kept,
            fallbacks: fallbacks.clone(),
        };
        let json = serde_json::to_vec(&entry)
            .map_err(|e| NodeError::Write { path: self.store.location().into(), source: e.into() })?;
        self.store.put_action(ActionKind::Node, &self.bound.keys[i], &json)?;
        Ok(())
    }

    /// The run's pinned input files, as a conversion reads them.
    fn pinned_files(&self) -> Arc<dyn ops::convert::PinnedFiles> {
        self.bound.files.clone()
    }

    /// Applies node `i`'s op: pure, apart from importance weights stored as
    /// blobs. A quantization also says which tensors fell back.
    pub(super) fn compute(&self, i: usize, inputs: &[Arc<TensorSet>]) -> Result<(TensorSet, Fallbacks), NodeError> {
        let node: &NodeDecl = &self.bound.recipe.nodes[i];
        let input = || inputs.first().map(Arc::as_ref).ok_or_else(|| NodeError::Upstream(node.id.clone()));
        let quantized = |q: ops::quantize::Quantized| Ok((q.set, q.fallbacks));
        let set = match &node.op {
            Op::Load | Op::MergeShards(_) => {
                let Some(&Source::Input(j)) = node.from.first() else {
                    return Err(NodeError::Upstream(node.id.clone()));
                };
                let Some(bound) = self.bound.inputs[j].as_ref() else {
                    return Err(NodeError::Upstream(node.id.clone()));
                };
                let models = bound.shards.iter().map(|h| self.bound.files.model(h)).collect::<Result<Vec<_>, _>>()?;
                let input = ops::load::LoadInput {
                    path: &self.bound.recipe.inputs[j].path,
                    shards: models.iter().map(|m| &**m).zip(bound.shards.iter().copied()).collect(),
                    index: bound.index.as_ref(),
                };
                let merge = match &node.op {
                    Op::MergeShards(o) => Some(*o),
                    _ => None,
                };
                ops::load::read(&input, merge)?
            }
            Op::Convert(o) => {
                let Some(&Source::Input(j)) = node.from.first() else {
                    return Err(NodeError::Upstream(node.id.clone()));
                };
                let metadata = node.uses.first().map(|&m| self.bound.recipe.inputs[m].path.as_path());
                ops::convert::apply(&self.bound.recipe.inputs[j].path, o, metadata, &self.pinned_files(), &*self.store)?
            }
            Op::ConvertLora(o) => {
                let (Some(&Source::Input(j)), Some(&base)) = (node.from.first(), node.uses.first()) else {
                    return Err(NodeError::Upstream(node.id.clone()));
                };
                let inputs = &self.bound.recipe.inputs;
                ops::convert::apply_lora(&inputs[j].path, &inputs[base].path, o, &self.pinned_files(), &*self.store)?
            }
            Op::Dequantize(o) => {
                return quantized(ops::quantize::apply(input()?, &o.quantize_options(), None, &*self.store)?);
            }
            Op::Quantize(o) => {
                let imatrix = match (node.uses.first(), imatrix_step_of(node), inputs.get(1)) {
                    (Some(&j), _, _) => {
                        let decl = &self.bound.recipe.inputs[j];
                        crate::quant::plan::load_imatrix(&decl.path, &decl.as_written, o)?
                    }
                    (None, Some(j), Some(set)) => self.importance_from_step(j, set, o)?,
                    _ => None,
                };
                let input = input()?;
                let m = self.materializer();
                let rows = SetRows { materializer: &m, set: input };
                let backend = self.backends.of(Some(&self.bound.keys[i]));
                return quantized(self.pool.install(|| {
                    ops::quantize::apply_planned(input, o, imatrix.as_ref(), &rows, backend, &*self.store)
                })?);
            }
            Op::Filter(o) => ops::filter::apply(input()?, o),
            Op::Rename(o) => ops::rename::apply(input()?, o)?,
            Op::SetMetadata(o) => o.apply(input()?)?,
            Op::DeleteMetadata(o) => o.apply(input()?)?,
            Op::LoraMerge(o) => {
                let source_name = |source: &Source| match *source {
                    Source::Input(j) => self.bound.recipe.inputs[j].name.clone(),
                    Source::Node(j) => self.bound.recipe.nodes[j].id.clone(),
                };
                let base = inputs.first().ok_or_else(|| NodeError::Upstream(node.id.clone()))?;
                let adapters: Vec<ops::lora_merge::MergedAdapter<'_>> = node.from[1..]
                    .iter()
                    .zip(&inputs[1..])
                    .map(|(source, set)| {
                        let name = source_name(source);
                        let scale = o.scale_of(&name);
                        ops::lora_merge::MergedAdapter { name, set, scale }
                    })
                    .collect();
                ops::lora_merge::apply(base, &adapters)?
            }
            Op::Imatrix(o) => self.imatrix(i, input()?, o)?,
            Op::KldBase(o) => self.kld_base(i, input()?, o)?,
            Op::Evaluate(o) => {
                let logits = inputs.get(1).ok_or_else(|| NodeError::Upstream(node.id.clone()))?;
                self.evaluate(i, input()?, logits, o)?
            }
            Op::Assemble => ops::assemble::assemble(&inputs.iter().map(Arc::as_ref).collect::<Vec<_>>())?,
            Op::Unbundle(o) => ops::assemble::unbundle(input()?, o.part)?,
            Op::Export(_) => return Err(NodeError::Upstream(node.id.clone())),
        };
        Ok((set, Fallbacks::default()))
    }

    pub(super) fn materializer(&self) -> Materializer<'_> {
        Materializer {
            store: &*self.store,
            files: &self.bound.files,
            backends: &self.backends,
            pool: &self.pool,
            rebuild: self.rebuild,
            in_flight: &self.in_flight,
            fanout: &self.fanout,
            destinations: &self.destinations,
            counters: Default::default(),
            buffer_limit: self.buffer_limit,
            on_written: None,
        }
    }

    /// Puts every derived tensor of `set` in the store (`keep = true`).
    pub(super) fn keep(
        &self,
        i: usize,
        set: Arc<TensorSet>,
        report: &mut NodeReport,
    ) -> Result<Arc<TensorSet>, NodeError> {
        let m = self.materializer();
        set.tensors.iter().try_for_each(|t| m.persist(t))?;
        self.cache_manifest(i, &set, true, &report.fallbacks)?;
        report.tensors_encoded = m.counters.encoded.load(Ordering::Relaxed);
        report.tensors_shared = m.counters.shared.load(Ordering::Relaxed);
        report.tensors_reused = m.counters.reused.load(Ordering::Relaxed);
        report.tensors_decoded = m.counters.decoded.load(Ordering::Relaxed);
        Ok(set)
    }
}
