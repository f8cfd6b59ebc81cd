//! Scheduling: the needed nodes as tokio tasks, each waiting for its inputs,
//! then for a worker slot, then computing on a blocking thread.

use std::sync::Arc;

use super::report::{NodeReport, Status};
use super::{NodeError, Shared};
use crate::artifact::TensorSet;
use crate::recipe::Source;

/// A finished node, as its consumers see it.
pub(super) enum Outcome {
    Set(Arc<TensorSet>),
    Written,
    Failed,
}

/// Runs the needed nodes as tokio tasks: each waits for its inputs, then
/// for a worker slot, then computes on a blocking thread.
pub(super) async fn schedule(
    shared: Arc<Shared>,
    needed: Vec<bool>,
    must_run: Vec<bool>,
    jobs: usize,
) -> Vec<(usize, NodeReport)> {
    use tokio::sync::{Semaphore, watch};
    let n = needed.len();
    let (senders, receivers): (Vec<_>, Vec<_>) = (0..n).map(|_| watch::channel::<Option<Arc<Outcome>>>(None)).unzip();
    let receivers = Arc::new(receivers);
    let slots = Arc::new(Semaphore::new(jobs));
    let mut tasks = tokio::task::JoinSet::new();
    for (i, sender) in senders.into_iter().enumerate() {
        if !needed[i] {
            continue;
        }
        let (shared, receivers, slots, run) =
            (Arc::clone(&shared), Arc::clone(&receivers), Arc::clone(&slots), must_run[i]);
        tasks.spawn(async move {
            let node = &shared.bound.recipe.nodes[i];
            let mut inputs = Vec::new();
            let mut failed_input = None;
            if run {
                for src in &node.from {
                    let Source::Node(j) = *src else { continue };
                    let mut rx = receivers[j].clone();
                    let outcome = rx.wait_for(Option::is_some).await.ok().and_then(|v| v.clone());
                    match outcome.as_deref() {
                        Some(Outcome::Set(set)) => inputs.push(Arc::clone(set)),
                        _ => failed_input = Some(shared.bound.recipe.nodes[j].id.clone()),
                    }
                }
            }
            let (outcome, report) = match failed_input {
                Some(id) => {
                    let mut report = shared.report(i, Status::Skipped);
                    report.error = Some(NodeError::Upstream(id).to_string());
                    (Outcome::Failed, report)
                }
                None => {
                    let slot = Arc::clone(&slots).acquire_owned().await.ok();
                    if run {
                        tracing::debug!("{}: started", node.id);
                    }
                    let worker = Arc::clone(&shared);
                    match tokio::task::spawn_blocking(move || worker.execute(i, inputs, run, slot)).await {
                        Ok(done) => done,
                        Err(e) => {
                            let mut report = shared.report(i, Status::Failed);
                            report.error = Some(format!("worker stopped: {e}"));
                            (Outcome::Failed, report)
                        }
                    }
                }
            };
            match &report.error {
                Some(error) => tracing::info!("{}: {} ({error})", report.id, report.status.name()),
                None => tracing::info!(
                    "{}: {} in {:.0} ms on {}, {} tensors encoded, {} shared, {} reused, {} copied",
                    report.id,
                    report.status.name(),
                    report.duration_ms,
                    report.backend,
                    report.tensors_encoded,
                    report.tensors_shared,
                    report.tensors_reused,
                    report.tensors_copied
                ),
            }
            // Consumers may all be gone (hits); nobody listening is fine.
            let _ = sender.send(Some(Arc::new(outcome)));
            (i, report)
        });
    }
    let mut done = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        if let Ok(result) = joined {
            done.push(result);
        }
    }
    done
}
