//! `quantforge diff A B`: two models compared tensor by tensor, and the
//! report as text.

use std::io::{self, Write};

use super::json;
use crate::examine::diff::DiffReport;
use crate::text::name;
use std::path::PathBuf;

pub fn print_text(out: &mut dyn Write, r: &DiffReport) -> io::Result<()> {
    let width = r.tensors.iter().map(|t| name(&t.name).chars().count()).max().unwrap_or(6).max(6);
    writeln!(
        out,
        "{:width$}  {:>7} {:>7}  {:>12} {:>12} {:>12} {:>10} {:>12}",
        "tensor", "A", "B", "MAE", "RMSE", "max", "cosine", "weighted SE"
    )?;
    for t in &r.tensors {
        let s = &t.stats;
        writeln!(
            out,
            "{:width$}  {:>7} {:>7}  {:>12.4e} {:>12.4e} {:>12.4e} {:>10.6} {:>12.4e}",
            name(&t.name),
            t.type_a,
            t.type_b,
            s.mae,
            s.rmse,
            s.max_abs_error,
            s.cosine,
            s.weighted_sq_error
        )?;
    }
    let s = &r.total;
    writeln!(
        out,
        "{:width$}  {:>7} {:>7}  {:>12.4e} {:>12.4e} {:>12.4e} {:>10.6} {:>12.4e}",
        "total", "", "", s.mae, s.rmse, s.max_abs_error, s.cosine, s.weighted_sq_error
    )?;
    for only in &r.only_in_a {
        writeln!(out, "only in A: {}", name(only))?;
    }
    for only in &r.only_in_b {
        writeln!(out, "only in B: {}", name(only))?;
    }
    Ok(())
}

#[derive(Debug, clap::Args)]
pub(super) struct DiffArgs {
    /// The reference model.
    a: PathBuf,
    /// The model compared with it (its tensors matched by name).
    b: PathBuf,
    /// Weigh each squared error by this importance matrix's column weight.
    #[arg(long, value_name = "FILE")]
    imatrix: Option<PathBuf>,
}

pub(super) fn run(args: DiffArgs, json: bool) -> anyhow::Result<()> {
    let DiffArgs { a, b, imatrix } = args;
    let imatrix = imatrix.map(|path| crate::quant::imatrix::ImportanceMatrix::load(&path)).transpose()?;
    let report = crate::examine::diff::diff_files(&a, &b, imatrix.as_ref())?;
    if json {
        return json::print(&report);
    }
    let mut out = io::stdout().lock();
    print_text(&mut out, &report)?;
    out.flush()?;
    Ok(())
}
