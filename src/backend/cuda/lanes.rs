//! A device's lanes — each a stream with its own staging buffers — and the
//! memory budget they share. Worker threads each take a free lane for a
//! slab, so one lane's copies up and down overlap another's kernels, and
//! slabs of several tensors are in flight at once; a lane's buffers grow to
//! the largest slab it has run, and all lanes' buffers together never
//! exceed the budget (a slab waits for memory, or runs on the CPU when no
//! lane could ever hold it).
//!
//! The pool is generic over a lane's buffers, so its accounting is tested
//! without a GPU.

use std::sync::{Condvar, Mutex, MutexGuard};

/// The device buffers a slab needs, in bytes: its bytes up, its decoded
/// values, its encoded bytes down, its importance row.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sizes {
    pub source: u64,
    pub values: u64,
    pub encoded: u64,
    pub weights: u64,
}

impl Sizes {
    pub fn total(&self) -> u64 {
        self.source + self.values + self.encoded + self.weights
    }

    /// Each buffer the larger of the two.
    pub fn max(&self, other: &Sizes) -> Sizes {
        Sizes {
            source: self.source.max(other.source),
            values: self.values.max(other.values),
            encoded: self.encoded.max(other.encoded),
            weights: self.weights.max(other.weights),
        }
    }
}

/// How a lane's device memory is held.
pub trait LaneBuffers {
    /// The buffers held now.
    fn sizes(&self) -> Sizes;
    /// Grows the buffers to `to` (every one at least that large after).
    fn grow(&mut self, to: &Sizes) -> Result<(), String>;
    /// Frees every buffer.
    fn release(&mut self);
}

/// Why a lane could not be had.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LaneError {
    #[error("a slab needing {need} bytes of device memory is more than the device budget of {budget} bytes")]
    OverBudget { need: u64, budget: u64 },
    #[error("{0}")]
    Device(String),
}

struct State<B> {
    free: Vec<B>,
    /// Lanes out, and the device bytes they hold.
    busy: usize,
    busy_bytes: u64,
}

impl<B: LaneBuffers> State<B> {
    fn held(&self) -> u64 {
        self.busy_bytes + self.free.iter().map(|b| b.sizes().total()).sum::<u64>()
    }
}

pub struct LanePool<B> {
    state: Mutex<State<B>>,
    released: Condvar,
    budget: u64,
}

/// A lane taken from its pool; given back when dropped.
pub struct Lane<'a, B: LaneBuffers> {
    pool: &'a LanePool<B>,
    buffers: Option<B>,
    held: u64,
}

impl<B: LaneBuffers> LanePool<B> {
    /// A pool of `lanes` (at least one) sharing `budget` device bytes.
    pub fn new(lanes: Vec<B>, budget: u64) -> LanePool<B> {
        assert!(!lanes.is_empty(), "a device has at least one lane");
        LanePool { state: Mutex::new(State { free: lanes, busy: 0, busy_bytes: 0 }), released: Condvar::new(), budget }
    }

    pub fn budget(&self) -> u64 {
        self.budget
    }

    fn lock(&self) -> MutexGuard<'_, State<B>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A lane whose buffers hold `need`: waits while every lane is out, or
    /// while growing one would pass the budget and other lanes are running
    /// (they give memory back when done); frees idle lanes' buffers to make
    /// room. A slab the budget could never hold is refused at once.
    pub fn take(&self, need: &Sizes) -> Result<Lane<'_, B>, LaneError> {
        if need.total() > self.budget {
            return Err(LaneError::OverBudget { need: need.total(), budget: self.budget });
        }
        let mut state = self.lock();
        loop {
            if !state.free.is_empty() {
                // The lane that would grow least.
                let growth = |b: &B| b.sizes().max(need).total() - b.sizes().total();
                let best = (0..state.free.len()).min_by_key(|&i| growth(&state.free[i])).expect("a free lane");
                let mut buffers = state.free.swap_remove(best);
                let grown = buffers.sizes().max(need).total();
                if state.held() + grown > self.budget {
                    for idle in &mut state.free {
                        idle.release();
                    }
                }
                // Keep this lane's buffers where they fit, else start it afresh.
                // Only running lanes can still be in the way (the need fits
                // the budget alone), and they give their memory back.
                if state.held() + grown > self.budget && state.held() + need.total() <= self.budget {
                    buffers.release();
                }
                if state.held() + buffers.sizes().max(need).total() <= self.budget {
                    let to = buffers.sizes().max(need);
                    if let Err(e) = buffers.grow(&to) {
                        state.free.push(buffers);
                        return Err(LaneError::Device(e));
                    }
                    let held = buffers.sizes().total();
                    state.busy += 1;
                    state.busy_bytes += held;
                    return Ok(Lane { pool: self, buffers: Some(buffers), held });
                }
                state.free.push(buffers);
            }
            state = self.released.wait(state).unwrap_or_else(|e| e.into_inner());
        }
    }
}

impl<B: LaneBuffers> std::ops::Deref for Lane<'_, B> {
    type Target = B;
    fn deref(&self) -> &B {
        self.buffers.as_ref().expect("a lane holds its buffers until dropped")
    }
}

impl<B: LaneBuffers> std::ops::DerefMut for Lane<'_, B> {
    fn deref_mut(&mut self) -> &mut B {
        self.buffers.as_mut().expect("a lane holds its buffers until dropped")
    }
}

impl<B: LaneBuffers> Drop for Lane<'_, B> {
    fn drop(&mut self) {
        let buffers = self.buffers.take().expect("a lane is dropped once");
        let mut state = self.pool.lock();
        state.busy -= 1;
        state.busy_bytes -= self.held;
        state.free.push(buffers);
        drop(state);
        self.pool.released.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;

    /// Buffers that count the bytes all of them hold at once.
    struct Counted {
        sizes: Sizes,
        total: Arc<AtomicU64>,
    }

    impl LaneBuffers for Counted {
        fn sizes(&self) -> Sizes {
            self.sizes
        }
        fn grow(&mut self, to: &Sizes) -> Result<(), String> {
            self.total.fetch_add(to.total() - self.sizes.total(), Ordering::SeqCst);
            self.sizes = *to;
            Ok(())
        }
        fn release(&mut self) {
            self.total.fetch_sub(self.sizes.total(), Ordering::SeqCst);
            self.sizes = Sizes::default();
        }
    }

    fn pool(lanes: usize, budget: u64) -> (LanePool<Counted>, Arc<AtomicU64>) {
        let total = Arc::new(AtomicU64::new(0));
        let lanes = (0..lanes).map(|_| Counted { sizes: Sizes::default(), total: total.clone() }).collect();
        (LanePool::new(lanes, budget), total)
    }

    fn values(bytes: u64) -> Sizes {
        Sizes { values: bytes, ..Sizes::default() }
    }

    #[test]
    fn lanes_never_hold_more_than_the_budget_and_every_job_runs() {
        let (pool, total) = pool(4, 100);
        let ran = AtomicU64::new(0);
        std::thread::scope(|s| {
            for t in 0..8u64 {
                let (pool, total, ran) = (&pool, &total, &ran);
                s.spawn(move || {
                    for i in 0..200u64 {
                        let need =
                            Sizes { source: (t * 7 + i) % 30, values: 1 + (t * 37 + i * 11) % 60, ..Sizes::default() };
                        let lane = pool.take(&need).unwrap();
                        assert!(lane.sizes().source >= need.source && lane.sizes().values >= need.values);
                        assert!(total.load(Ordering::SeqCst) <= 100, "over the budget");
                        ran.fetch_add(1, Ordering::SeqCst);
                    }
                });
            }
        });
        assert_eq!(ran.load(Ordering::SeqCst), 8 * 200);
        assert!(total.load(Ordering::SeqCst) <= 100);
    }

    #[test]
    fn a_slab_larger_than_the_budget_is_refused_and_idle_lanes_give_way() {
        let (pool, total) = pool(2, 100);
        assert_eq!(pool.take(&values(101)).err(), Some(LaneError::OverBudget { need: 101, budget: 100 }));
        let first = pool.take(&values(60)).unwrap();
        let second = pool.take(&Sizes { source: 30, ..Sizes::default() }).unwrap();
        drop(first);
        drop(second);
        // Growing either lane to 90 values passes the budget: the idle one's
        // buffers are freed first.
        let lane = pool.take(&values(90)).unwrap();
        assert_eq!(lane.sizes().values, 90);
        assert!(total.load(Ordering::SeqCst) <= 100);
    }
}
