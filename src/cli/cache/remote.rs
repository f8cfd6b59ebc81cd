//! The remote cache's commands (`--remote`, `push`, `pull`) and what they
//! tell: transfers, and a required remote that failed.

use super::*;

/// The recipe, and the local cache in front of its remote (the command
/// line's, else the recipe's); the remote must answer.
fn layered_for(path: &std::path::Path, dir: &CacheDir) -> anyhow::Result<(Arc<Layered>, Recipe)> {
    let recipe = Recipe::load(path)?;
    let Some((url, _)) = dir.remote.remote(Some(&recipe))? else {
        anyhow::bail!("no remote cache: give --cache-url URL, set QUANTFORGE_CACHE_URL or `remote` in [recipe]");
    };
    let local = LocalStore::open(&dir.path(Some(&recipe)))?;
    Ok((Arc::new(Layered::open(local, &url, RemoteMode::Required)?), recipe))
}

/// The remote named by `--cache-url` (or `QUANTFORGE_CACHE_URL`), answering.
pub(super) fn remote_of(dir: &CacheDir) -> anyhow::Result<Remote> {
    let Some((url, _)) = dir.remote.remote(None)? else {
        anyhow::bail!("--remote needs the remote's URL: --cache-url URL or QUANTFORGE_CACHE_URL");
    };
    let remote = Remote::new(&url)?;
    remote.probe().map_err(|e| anyhow::anyhow!("the remote cache does not answer: {e}"))?;
    Ok(remote)
}

/// Tells what moved to and from the remote, and whether it failed: a
/// warning, or with `--remote-required` an error.
pub(in crate::cli) fn report_transfers(transfers: Option<&TransferReport>, required: bool) -> anyhow::Result<()> {
    let Some(t) = transfers else { return Ok(()) };
    if t.blobs_fetched + t.entries_fetched + t.blobs_uploaded + t.entries_published > 0 {
        let rate = t.bytes_fetched as f64 / t.fetch_seconds.max(1e-9);
        say!(
            "remote {}: fetched {} entries and {} blobs ({}, {}/s); uploaded {} blobs ({}), published {} entries",
            t.location,
            t.entries_fetched,
            t.blobs_fetched,
            human_bytes(t.bytes_fetched as f64),
            human_bytes(if t.blobs_fetched > 0 { rate } else { 0.0 }),
            t.blobs_uploaded,
            human_bytes(t.bytes_uploaded as f64),
            t.entries_published,
        );
    }
    // A failure of the whole remote names it first; once is enough.
    let failure = t.failure.as_deref().map(|f| f.strip_prefix(&format!("{}: ", t.location)).unwrap_or(f));
    match (failure, required) {
        (Some(failure), true) => anyhow::bail!("remote cache {}: {}", t.location, crate::text::for_terminal(failure)),
        (Some(failure), false) => tracing::warn!(
            "remote cache {}: {}; went on with the local cache only",
            t.location,
            crate::text::for_terminal(failure)
        ),
        (None, _) => {}
    }
    Ok(())
}

/// `cache du --remote`: what the remote cache holds.
pub(super) fn du_remote(dir: &CacheDir, json: bool, out: &mut dyn Write) -> anyhow::Result<()> {
    let remote = remote_of(dir)?;
    let usage = remote.usage()?;
    if json {
        return json::print(&usage);
    }
    writeln!(out, "{}: {} in {} blobs", remote.location(), human_bytes(usage.blob_bytes as f64), usage.blobs)?;
    writeln!(
        out,
        "entries: {} tensors, {} nodes, {} exports",
        usage.tensor_entries, usage.node_entries, usage.export_entries
    )?;
    Ok(())
}

/// `cache gc --remote --older-than AGE`.
pub(super) fn gc_remote(dir: &CacheDir, age: Duration, json: bool, out: &mut dyn Write) -> anyhow::Result<()> {
    let report = remote_of(dir)?.gc(age)?;
    if json {
        return json::print(&report);
    }
    writeln!(
        out,
        "removed {} entries, {} blobs ({}) from the remote",
        report.entries_removed,
        report.blobs_removed,
        human_bytes(report.bytes_freed as f64)
    )?;
    Ok(())
}

/// `cache verify --remote`: fails when something is corrupt and not repaired.
pub(super) fn verify_remote(dir: &CacheDir, repair: bool, json: bool, out: &mut dyn Write) -> anyhow::Result<()> {
    let remote = remote_of(dir)?;
    let report = remote.verify(repair)?;
    if json {
        json::print(&report)?;
    } else {
        for key in &report.corrupt_blobs {
            writeln!(out, "corrupt blob {key}")?;
        }
        for entry in report.broken_entries.iter().chain(&report.incomplete_entries) {
            writeln!(out, "broken {entry}")?;
        }
        writeln!(
            out,
            "checked {} blobs ({}) and {} entries on {}",
            report.blobs_checked,
            human_bytes(report.bytes_checked as f64),
            report.entries_checked,
            remote.location()
        )?;
    }
    out.flush()?;
    if !report.is_clean() && !repair {
        anyhow::bail!(
            "the remote cache has {} corrupt blobs and {} broken entries \
             (`quantforge cache verify --remote --repair` deletes them)",
            report.corrupt_blobs.len(),
            report.broken_entries.len() + report.incomplete_entries.len()
        );
    }
    Ok(())
}

/// `cache push RECIPE`: the results its outputs are made of, uploaded.
pub(super) fn push(recipe: &Path, dir: &CacheDir, json: bool, out: &mut dyn Write) -> anyhow::Result<()> {
    let (layered, recipe) = layered_for(recipe, dir)?;
    let engine = Engine::new(layered.clone(), 1)?;
    let entries = engine.result_entries(&recipe)?;
    let pushed = entries.iter().filter(|(kind, key)| layered.push(*kind, key)).count();
    let t = layered.transfers().unwrap_or_default();
    if json {
        json::print(&json::Transferred { entries: entries.len(), transfers: t.clone() })?;
    } else {
        writeln!(
            out,
            "pushed {pushed} of {} entries to {}: {} blobs uploaded ({}), {} entries new there",
            entries.len(),
            layered.remote().location(),
            t.blobs_uploaded,
            human_bytes(t.bytes_uploaded as f64),
            t.entries_published
        )?;
    }
    report_transfers(Some(&t), true)?;
    Ok(())
}

/// `cache pull RECIPE`: the results its outputs are made of, downloaded.
pub(super) fn pull(recipe: &Path, dir: &CacheDir, json: bool, out: &mut dyn Write) -> anyhow::Result<()> {
    let (layered, recipe) = layered_for(recipe, dir)?;
    let engine = Engine::new(layered.clone(), 1)?;
    // Node entries name their manifests, which name the tensors:
    // fetched in two rounds.
    let mut entries = Vec::new();
    for _ in 0..2 {
        entries = engine.result_entries(&recipe)?;
        for kind in ActionKind::RESULTS {
            let keys: Vec<Key> = entries.iter().filter(|(k, _)| *k == kind).map(|(_, key)| *key).collect();
            layered.prefetch_actions(kind, &keys);
        }
    }
    let t = layered.transfers().unwrap_or_default();
    match json {
        true => json::print(&json::Transferred { entries: entries.len(), transfers: t.clone() })?,
        false => writeln!(
            out,
            "pulled {} entries and {} blobs ({}) from {}",
            t.entries_fetched,
            t.blobs_fetched,
            human_bytes(t.bytes_fetched as f64),
            layered.remote().location()
        )?,
    }
    report_transfers(Some(&t), true)?;
    Ok(())
}
