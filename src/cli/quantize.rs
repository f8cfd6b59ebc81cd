//! `quantforge quantize`: flags to options, the plan or the run's summary to the terminal.

use std::io::{self, Write};

use anyhow::Context;

use super::{QuantizeArgs, default_threads, parse_preset};
use crate::formats::{ModelFile, OpenOptions, human_bytes};
use crate::ops::quantize::{self, QuantizeOptions, QuantizePlan};
use crate::quant::imatrix::ImportanceMatrix;
use crate::quant::mixture::MixtureOptions;

pub(super) fn run(args: QuantizeArgs) -> anyhow::Result<()> {
    let ftype = parse_preset(&args.preset)?;
    let mut mixture = MixtureOptions::new(ftype);
    mixture.pure = args.pure;
    mixture.leave_output_tensor = args.leave_output_tensor;
    mixture.output_tensor_type = args.output_tensor_type;
    mixture.token_embedding_type = args.token_embedding_type;
    mixture.tensor_types = args.tensor_type;
    let options = QuantizeOptions {
        mixture,
        allow_requantize: args.allow_requantize,
        imatrix: args.imatrix,
        include_weights: args.include_weights,
        exclude_weights: args.exclude_weights,
        override_kv: args.override_kv,
        threads: args.threads.or(args.nthreads).unwrap_or_else(default_threads),
    };
    if args.dry_run {
        let model = ModelFile::open(&args.input, OpenOptions::default())?;
        let imatrix = match &options.imatrix {
            Some(path) => Some(ImportanceMatrix::load(path)?),
            None => None,
        };
        let plan = quantize::plan(&model, &options, imatrix.as_ref())?;
        return print_plan(&mut io::stdout().lock(), &plan).map_err(Into::into);
    }
    let started = std::time::Instant::now();
    let report = quantize::quantize_file(&args.input, &args.output, &options)
        .with_context(|| format!("cannot quantize {}", args.input.display()))?;
    let plan = &report.plan;
    eprintln!(
        "wrote {}: {} ({}), {} tensors, {} converted, {} fell back, in {:.2} s",
        args.output.display(),
        plan.ftype.description(),
        human_bytes(report.bytes_written as f64),
        plan.tensors.len(),
        plan.tensors.iter().filter(|t| t.converts()).count(),
        plan.n_fallback(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

fn print_plan(out: &mut dyn Write, plan: &QuantizePlan) -> io::Result<()> {
    let width = plan.tensors.iter().map(|t| t.info.name.len()).max().unwrap_or(6);
    for t in &plan.tensors {
        let fallback = t.fallback_from.map(|f| format!(" (fallback from {f})")).unwrap_or_default();
        writeln!(
            out,
            "{:width$}  {:24}  {:>7} -> {:7}  {:>10} -> {:>10}{fallback}",
            t.info.name,
            format!("{:?}", t.info.dims),
            t.from.name(),
            t.info.ggml_type.name(),
            human_bytes(t.bytes_in as f64),
            human_bytes(t.bytes_out as f64)
        )?;
    }
    writeln!(
        out,
        "output: {} bytes ({}), {}",
        plan.file_size,
        human_bytes(plan.file_size as f64),
        plan.ftype.description()
    )?;
    if plan.n_fallback() > 0 {
        writeln!(
            out,
            "warning: {} of {} tensors required fallback quantization",
            plan.n_fallback(),
            plan.tensors.len()
        )?;
    }
    if plan.tensors.iter().any(|t| t.converts() && t.requires_imatrix) {
        writeln!(out, "warning: this quantization will need an importance matrix (--imatrix)")?;
    }
    Ok(())
}
