//! Who encodes what: conversions claimed while a node encodes them, so
//! no tensor is encoded twice in a run, and the siblings (other types of
//! the same source) a ladder's encode computes alongside.

use super::*;

/// The conversions in the run's tensor sets, by the key of the tensor each
/// converts. A ladder's presets convert the same input tensors to several
/// types; encoding one computes every sibling no node has claimed yet with
/// it, reading and decoding each slab of the input once, and stores them
/// for the exports that need them.
#[derive(Default)]
pub struct Fanout {
    by_source: Mutex<HashMap<Key, Vec<Tensor>>>,
}

impl Fanout {
    /// Notes the conversions of a set a node produced.
    pub fn register(&self, tensors: &[Tensor]) {
        let mut by_source = self.by_source.lock().unwrap_or_else(|e| e.into_inner());
        for t in tensors {
            let TensorData::Convert { from, .. } = &t.data else { continue };
            let siblings = by_source.entry(from.key).or_default();
            if !siblings.iter().any(|s| s.key == t.key) {
                siblings.push(t.clone());
            }
        }
    }

    /// The other conversions of `tensor`'s source.
    pub(super) fn siblings(&self, tensor: &Tensor) -> Vec<Tensor> {
        let TensorData::Convert { from, .. } = &tensor.data else { return Vec::new() };
        let by_source = self.by_source.lock().unwrap_or_else(|e| e.into_inner());
        by_source
            .get(&from.key)
            .map_or_else(Vec::new, |all| all.iter().filter(|s| s.key != tensor.key).cloned().collect())
    }
}

/// The conversions some node of the run is encoding, and those it has
/// encoded, by key: an export that needs one being encoded waits for it and
/// copies its blob rather than encode it a second time (two exports of one
/// quantization, a ladder's shared tensors).
///
/// Only a node's own thread waits, never a worker of the pool: encodes run
/// their slabs on the pool, so a waiting worker could hold up the very
/// encode it waits for. A thread waits only while it claims nothing, so no
/// two wait on each other.
#[derive(Default)]
pub struct InFlight {
    state: Mutex<InFlightState>,
    finished: Condvar,
}

#[derive(Default)]
struct InFlightState {
    encoding: HashSet<Key>,
    /// Encoded this run: in the store even under `--force`.
    encoded: HashSet<Key>,
    /// Counted as encoded by some node's counters.
    credited: HashSet<Key>,
}

/// What [`InFlight::claim`] found.
pub(super) enum Claim<'a> {
    /// This thread encodes it; others wait until the guard drops.
    Mine(ClaimGuard<'a>),
    /// Another node encoded it while this one waited.
    Encoded,
    /// Nothing to wait for, or no waiting here: encode it.
    Alone,
}

pub(super) struct ClaimGuard<'a> {
    in_flight: &'a InFlight,
    key: Key,
    pub(super) done: bool,
}

impl InFlight {
    pub(super) fn claim(&self, key: Key) -> Claim<'_> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.encoded.contains(&key) {
            return Claim::Encoded;
        }
        if !state.encoding.contains(&key) {
            state.encoding.insert(key);
            return Claim::Mine(ClaimGuard { in_flight: self, key, done: false });
        }
        if rayon::current_thread_index().is_some() {
            return Claim::Alone;
        }
        while state.encoding.contains(&key) {
            state = self.finished.wait(state).unwrap_or_else(|e| e.into_inner());
        }
        match state.encoded.contains(&key) {
            true => Claim::Encoded,
            false => Claim::Alone,
        }
    }

    /// Claims `key` when nobody encodes or has encoded it, never waiting.
    pub(super) fn try_claim(&self, key: Key) -> Option<ClaimGuard<'_>> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.encoded.contains(&key) || !state.encoding.insert(key) {
            return None;
        }
        Some(ClaimGuard { in_flight: self, key, done: false })
    }

    pub(super) fn encoded_this_run(&self, key: &Key) -> bool {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).encoded.contains(key)
    }

    /// Whether `key` was encoded in this run or is being encoded: a node
    /// that finds it stored while its encoder still holds the claim (the
    /// entry is written before the claim is released) counts it as this
    /// run's work, never as an earlier run's.
    pub(super) fn made_this_run(&self, key: &Key) -> bool {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.encoded.contains(key) || state.encoding.contains(key)
    }

    /// Marks `key` counted as encoded; false when a node counted it before.
    pub(super) fn credit(&self, key: Key) -> bool {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).credited.insert(key)
    }
}

impl Drop for ClaimGuard<'_> {
    fn drop(&mut self) {
        let mut state = self.in_flight.state.lock().unwrap_or_else(|e| e.into_inner());
        state.encoding.remove(&self.key);
        if self.done {
            state.encoded.insert(self.key);
        }
        drop(state);
        self.in_flight.finished.notify_all();
    }
}

impl Materializer<'_> {
    /// Claims a conversion before encoding it, when its bytes will be in
    /// the store for others to copy.
    pub(super) fn claim(&self, tensor: &Tensor) -> Claim<'_> {
        match self.store.keeps_results() && tensor.is_derived() {
            true => self.in_flight.claim(tensor.key),
            false => Claim::Alone,
        }
    }

    /// The siblings of `tensor` ([`Fanout`]) this thread may encode with
    /// it: not in the store, claimed from every other node. Only where the
    /// store keeps results, which is how the others get them.
    pub(super) fn claim_siblings(&self, tensor: &Tensor) -> Vec<(Tensor, ClaimGuard<'_>)> {
        if !self.store.keeps_results() {
            return Vec::new();
        }
        self.fanout
            .siblings(tensor)
            .into_iter()
            .filter(|s| self.cached(s).is_none())
            .filter_map(|s| self.in_flight.try_claim(s.key).map(|guard| (s, guard)))
            .collect()
    }
}
