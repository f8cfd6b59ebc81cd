//! `quantforge plan-devices`: how llama.cpp's tensor split mode would cut a
//! model across N devices ([`crate::arch::split`]), as a table or `--json`.

use std::io::{self, Write};
use std::path::PathBuf;

use anyhow::Context;

use super::{LoadArgs, json};
use crate::arch::split::{self, Axis, DevicePlan, Devices};
use crate::formats::{ModelFile, human_bytes};

#[derive(Debug, clap::Args)]
pub struct PlanDevicesArgs {
    model: PathBuf,
    /// How many devices to split across (1 to 16).
    #[arg(long)]
    devices: usize,
    /// Relative weights of the devices, as llama.cpp's --tensor-split takes them (3,1: three quarters on the first).
    #[arg(long, value_name = "W1,W2,…")]
    split: Option<String>,
    #[command(flatten)]
    load: LoadArgs,
}

pub fn run(args: PlanDevicesArgs, as_json: bool) -> anyhow::Result<()> {
    let weights = match &args.split {
        Some(text) => Some(
            text.split(',')
                .map(|w| w.trim().parse::<f32>().map_err(|_| anyhow::anyhow!("--split: `{w}` is not a number")))
                .collect::<anyhow::Result<Vec<f32>>>()?,
        ),
        None => None,
    };
    let devices = Devices::new(args.devices, weights)?;
    let model = ModelFile::open(&args.model, args.load.options())?;
    let plan = split::plan(&model.metadata, &model.tensors, &devices)
        .with_context(|| format!("cannot plan {} across {} devices", args.model.display(), devices.count))?;
    if as_json {
        return json::print(&plan);
    }
    let mut out = io::stdout().lock();
    print_text(&mut out, &plan)?;
    out.flush()?;
    Ok(())
}

fn print_text(out: &mut impl Write, plan: &DevicePlan) -> io::Result<()> {
    let weights = match &plan.devices.weights {
        Some(w) => format!(", weights {}", w.iter().map(f32::to_string).collect::<Vec<_>>().join(",")),
        None => String::new(),
    };
    writeln!(out, "{} across {} devices{weights}", plan.architecture, plan.devices.count)?;
    let width = plan.tensors.iter().map(|t| t.name.len()).max().unwrap_or(0);
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
        writeln!(out, "  {:width$}  {:16} {:6} {how}", t.name, role, t.ggml_type.name())?;
    }
    for (j, bytes) in plan.device_bytes.iter().enumerate() {
        writeln!(out, "device {j}: {}", human_bytes(*bytes as f64))?;
    }
    Ok(())
}
