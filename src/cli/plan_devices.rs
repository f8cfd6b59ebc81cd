//! `quantforge plan-devices`: how llama.cpp's tensor split mode would cut a
//! model across N devices ([`crate::arch::split`]), as a table or `--json`;
//! `quantforge shard-devices`: that plan written as one file per device
//! ([`crate::ops::device_shards`]).

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use anyhow::Context;

use super::{LoadArgs, json};
use crate::arch::split::{self, Axis, DevicePlan, Devices};
use crate::formats::{ModelFile, human_bytes};
use crate::text::{Name, name_width};

#[derive(Debug, clap::Args)]
pub struct PlanDevicesArgs {
    /// The model to place (GGUF).
    model: PathBuf,
    #[command(flatten)]
    devices: DeviceArgs,
}

#[derive(Debug, clap::Args)]
pub struct ShardDevicesArgs {
    /// The model to cut (GGUF).
    model: PathBuf,
    /// Shards are named OUT_PREFIX-devJ-of-N.gguf.
    out_prefix: PathBuf,
    #[command(flatten)]
    devices: DeviceArgs,
}

#[derive(Debug, clap::Args)]
struct DeviceArgs {
    /// How many devices to split across (1 to 16).
    #[arg(long)]
    devices: usize,
    /// Relative weights of the devices, as llama.cpp's --tensor-split takes them (3,1: three quarters on the first).
    #[arg(long, value_name = "W1,W2,…")]
    split: Option<String>,
    #[command(flatten)]
    load: LoadArgs,
}

/// `model` and its plan across the devices `args` name.
fn planned(model: &Path, args: &DeviceArgs) -> anyhow::Result<(ModelFile, DevicePlan)> {
    let weights = match &args.split {
        Some(text) => Some(
            text.split(',')
                .map(|w| w.trim().parse::<f32>().map_err(|_| anyhow::anyhow!("--split: `{w}` is not a number")))
                .collect::<anyhow::Result<Vec<f32>>>()?,
        ),
        None => None,
    };
    let flags = if args.split.is_some() { "--devices, --split" } else { "--devices" };
    let devices = Devices::new(args.devices, weights).with_context(|| flags.to_owned())?;
    let file = ModelFile::open(model, args.load.options())?;
    let plan = split::plan(&file.metadata, &file.tensors, &devices)
        .with_context(|| format!("cannot plan {} across {} devices", model.display(), devices.count))?;
    Ok((file, plan))
}

pub fn run(args: PlanDevicesArgs, as_json: bool) -> anyhow::Result<()> {
    let (_, plan) = planned(&args.model, &args.devices)?;
    if as_json {
        return json::print(&plan);
    }
    let mut out = io::stdout().lock();
    print_text(&mut out, &plan)?;
    out.flush()?;
    Ok(())
}

/// Writes the plan's shards; prints the plan under `--json`.
pub fn shard(args: ShardDevicesArgs, as_json: bool) -> anyhow::Result<()> {
    let (model, plan) = planned(&args.model, &args.devices)?;
    let paths = crate::ops::device_shards::write_shards(&model, &plan, &args.out_prefix)
        .with_context(|| format!("cannot shard {}", args.model.display()))?;
    if as_json {
        return json::print(&plan);
    }
    for (path, bytes) in paths.iter().zip(&plan.device_bytes) {
        say!("wrote {}: {} of tensor data", path.display(), human_bytes(*bytes as f64));
    }
    Ok(())
}

fn print_text(out: &mut impl Write, plan: &DevicePlan) -> io::Result<()> {
    let weights = match &plan.devices.weights {
        Some(w) => format!(", weights {}", w.iter().map(f32::to_string).collect::<Vec<_>>().join(",")),
        None => String::new(),
    };
    writeln!(out, "{} across {} devices{weights}", Name(&plan.architecture), plan.devices.count)?;
    let width = plan.tensors.iter().map(|t| name_width(&t.name)).max().unwrap_or(0);
    for t in &plan.tensors {
        let how = match t.axis {
            Axis::Mirrored => "mirrored".to_owned(),
            Axis::Partial => format!("partial sums over {:?}", t.partial),
            Axis::Split(axis) => {
                let segments: Vec<String> = t
                    .segments
                    .iter()
                    .map(|s| {
                        let extents: Vec<String> = s.extents.iter().map(u64::to_string).collect();
                        format!("{}×{} by {}: {}", s.size, s.repeats, s.granularity, extents.join(" "))
                    })
                    .collect();
                format!("axis {axis}, {}", segments.join("; "))
            }
        };
        let role = serde_json::to_value(t.role).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default();
        writeln!(out, "  {:width$}  {:16} {:6} {how}", Name(&t.name), role, t.ggml_type.name())?;
    }
    for (j, bytes) in plan.device_bytes.iter().enumerate() {
        writeln!(out, "device {j}: {}", human_bytes(*bytes as f64))?;
    }
    Ok(())
}
