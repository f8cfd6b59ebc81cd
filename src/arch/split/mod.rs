//! Tensor-parallel split planning, each decision named once: how llama.cpp's tensor split
//! mode (`llama_meta_device_get_split_state`) would cut each weight of a
//! model across N devices, computed offline in five stages that each answer
//! one question and are tested alone —
//! [`classify`] (what a tensor is, from its name), [`policy`] (split along
//! which axis, mirrored or partial, aligned to which tensor's blocks),
//! [`segments`] (the pieces of a fused tensor cut one by one),
//! [`granularity`] (the unit each cut must be a multiple of) and
//! [`allocate`] (each device's extent) — composed by [`plan`]. A plan that
//! balances the devices can still be wrong; the stages keep each reason
//! apart, and every refusal names the tensor or key and the numbers.

mod allocate;
mod classify;
mod granularity;
mod layers;
mod policy;
mod segments;

use std::collections::HashMap;

pub use classify::{Classified, Part, classify};
pub use layers::Layers;
pub use policy::{Axis, Policy, Reference, policy, supports_tensor_split};
pub use segments::Segment;

use crate::arch::registry::{self, Role};
use crate::model::{KeyError, Metadata, TensorInfo};
use crate::text::Name;
use crate::types::GgmlType;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SplitError {
    #[error(transparent)]
    Metadata(#[from] KeyError),
    #[error("{tensor} {problem}")]
    Tensor { tensor: String, problem: String },
    #[error("llama.cpp has no tensor split mode for architecture `{0}`")]
    Unsupported(String),
    #[error("the split of architecture `{arch}` is not modelled yet: {why}")]
    NotModelled { arch: String, why: String },
    #[error("{0}")]
    Devices(String),
}

impl SplitError {
    fn metadata(key: impl AsRef<str>, problem: impl Into<String>) -> SplitError {
        SplitError::Metadata(KeyError::new(key.as_ref(), problem))
    }

    fn tensor(tensor: &str, problem: impl Into<String>) -> SplitError {
        SplitError::Tensor { tensor: tensor.to_owned(), problem: problem.into() }
    }
}

/// The devices a plan is for: how many, and their relative weights
/// (llama.cpp's `tensor_split`; `None` for equal shares).
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct Devices {
    pub count: usize,
    pub weights: Option<Vec<f32>>,
}

impl Devices {
    /// Checks the count (2 to 16, ggml's limit) and the weights (one per
    /// device, finite, not negative).
    pub fn new(count: usize, weights: Option<Vec<f32>>) -> Result<Devices, SplitError> {
        if !(1..=16).contains(&count) {
            return Err(SplitError::Devices(format!("{count} devices: ggml splits across 1 to 16")));
        }
        if let Some(w) = &weights {
            if w.len() != count {
                return Err(SplitError::Devices(format!("{} weights for {count} devices", w.len())));
            }
            if let Some(bad) = w.iter().find(|w| !w.is_finite() || **w < 0.0) {
                return Err(SplitError::Devices(format!("weight {bad} is not a finite share of 0 or more")));
            }
        }
        Ok(Devices { count, weights })
    }
}

/// One segment's cut.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct SegmentSplit {
    pub size: u64,
    pub repeats: u32,
    pub granularity: u64,
    /// Elements along the split axis on each device.
    pub extents: Vec<u64>,
}

/// How one tensor is placed.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct TensorSplit {
    pub name: String,
    pub role: Role,
    #[schemars(with = "String")]
    pub ggml_type: GgmlType,
    pub dims: Vec<u64>,
    pub axis: Axis,
    /// The cut of each segment along the split axis (empty when mirrored or partial).
    pub segments: Vec<SegmentSplit>,
    /// For a partial sum: each device's share of the tensor it belongs to.
    pub partial: Vec<u64>,
    /// Bytes each device holds.
    pub bytes: Vec<u64>,
}

impl TensorSplit {
    /// The extents in the shape of ggml's `ggml_backend_meta_split_state`:
    /// `ne` segment-major (segment `s`, device `j` at `s·N + j`), and each
    /// segment's repeat count `nr`.
    pub fn ggml_state(&self) -> (Vec<u64>, Vec<u32>) {
        match self.axis {
            Axis::Split(_) => (
                self.segments.iter().flat_map(|s| s.extents.iter().copied()).collect(),
                self.segments.iter().map(|s| s.repeats).collect(),
            ),
            Axis::Mirrored => (Vec::new(), vec![1]),
            Axis::Partial => (self.partial.clone(), vec![1]),
        }
    }
}

/// A model's split plan.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
pub struct DevicePlan {
    pub architecture: String,
    pub devices: Devices,
    pub tensors: Vec<TensorSplit>,
    /// Bytes on each device in all.
    pub device_bytes: Vec<u64>,
}

/// Plans the split of a model's weights across `devices`.
pub fn plan(metadata: &Metadata, tensors: &[TensorInfo], devices: &Devices) -> Result<DevicePlan, SplitError> {
    let arch = metadata.string("general.architecture")?.ok_or_else(|| KeyError::missing("general.architecture"))?;
    if !supports_tensor_split(arch) {
        return Err(SplitError::Unsupported(arch.to_owned()));
    }
    if policy::has_grouped_output_attention(arch) {
        return Err(SplitError::NotModelled { arch: arch.to_owned(), why: "its grouped output attention".into() });
    }
    let family = registry::detect(metadata, tensors).family;
    let layers = Layers::read(metadata, arch, family.layout.layers)?;
    let by_name: HashMap<&str, &TensorInfo> = tensors.iter().map(|t| (t.name.as_str(), t)).collect();
    let n = devices.count;
    let planner = Planner { arch, family, layers: &layers, by_name: &by_name, devices };
    let mut planned = Vec::with_capacity(tensors.len());
    for t in tensors {
        planned.push(planner.tensor(t)?);
    }
    let mut device_bytes = vec![0u64; n];
    for t in &planned {
        for (total, b) in device_bytes.iter_mut().zip(&t.bytes) {
            *total += b;
        }
    }
    Ok(DevicePlan { architecture: arch.to_owned(), devices: devices.clone(), tensors: planned, device_bytes })
}

struct Planner<'a> {
    arch: &'a str,
    family: &'static registry::Family,
    layers: &'a Layers,
    by_name: &'a HashMap<&'a str, &'a TensorInfo>,
    devices: &'a Devices,
}

impl Planner<'_> {
    fn tensor(&self, t: &TensorInfo) -> Result<TensorSplit, SplitError> {
        let Classified { part, layer } = classify(&t.name);
        if t.name.starts_with("blk.") && layer.is_none() {
            return Err(SplitError::tensor(&t.name, "names no layer number"));
        }
        let il = layer.unwrap_or(0);
        if il >= self.layers.n_layer() {
            return Err(SplitError::tensor(&t.name, format!("is in layer {il} of {}", self.layers.n_layer())));
        }
        let n = self.devices.count;
        let rotation = match layer {
            Some(il) => self.same_kind_before(il) % n,
            None => self.layers.n_layer() % n,
        };
        let Policy { axis, reference } = policy(self.arch, part, &t.dims);
        let role = registry::role_of(self.family, &t.name);
        let whole = tensor_bytes(t)?;
        let mut split = TensorSplit {
            name: t.name.clone(),
            role,
            ggml_type: t.ggml_type,
            dims: t.dims.clone(),
            axis,
            segments: Vec::new(),
            partial: Vec::new(),
            bytes: vec![whole; n],
        };
        let reference = self.reference(t, layer, reference)?;
        match axis {
            Axis::Mirrored => {}
            Axis::Partial => {
                if std::ptr::eq(reference, t) {
                    return Err(SplitError::tensor(&t.name, "is a partial sum of itself"));
                }
                let source = self.tensor(reference)?;
                let Axis::Split(_) = source.axis else {
                    return Err(SplitError::tensor(
                        &t.name,
                        format!("belongs to {}, which is not split", Name(&source.name)),
                    ));
                };
                split.partial =
                    (0..n).map(|j| source.segments.iter().map(|s| s.extents[j] * u64::from(s.repeats)).sum()).collect();
            }
            Axis::Split(a) => {
                let a = usize::from(a);
                let extent = *t.dims.get(a).ok_or_else(|| {
                    SplitError::tensor(&t.name, format!("has {} dimensions, none on axis {a}", t.dims.len()))
                })?;
                let place = segments::Place { name: &t.name, part, arch: self.arch, layers: self.layers, il, extent };
                let segments = segments::segments(&place)?;
                let unit = granularity::Unit {
                    at: &place,
                    block: reference.ggml_type.block_size(),
                    devices: n as u64,
                    rows: t.dims.get(1).copied().unwrap_or(1),
                };
                let granularity = granularity::granularity(&unit, &segments)?;
                for (s, &g) in segments.iter().zip(&granularity) {
                    let extents = allocate::allocate(s.size, g, self.devices.weights.as_deref(), n, rotation)
                        .map_err(|e| SplitError::tensor(&t.name, format!("cannot be allocated: {e}")))?;
                    split.segments.push(SegmentSplit { size: s.size, repeats: s.repeats, granularity: g, extents });
                }
                split.bytes = self.device_bytes(t, a, &split.segments)?;
            }
        }
        Ok(split)
    }

    /// llama.cpp's effective layer index: the earlier layers of the same
    /// kind (sliding or not, recurrent or not), so that a period of layer
    /// kinds does not alias with the device count.
    fn same_kind_before(&self, il: usize) -> usize {
        let kind = |l: usize| (self.layers.is_recr[l], self.layers.is_swa[l]);
        (0..il).filter(|&l| kind(l) == kind(il)).count()
    }

    fn reference<'t>(
        &'t self,
        t: &'t TensorInfo,
        layer: Option<usize>,
        reference: Reference,
    ) -> Result<&'t TensorInfo, SplitError> {
        let Reference::Named { suffix, fallback } = reference else { return Ok(t) };
        let prefix = layer.map_or(String::new(), |il| format!("blk.{il}."));
        let find = |suffix: &str| self.by_name.get(format!("{prefix}{suffix}").as_str()).copied();
        find(suffix).or_else(|| fallback.and_then(find)).ok_or_else(|| {
            SplitError::tensor(&t.name, format!("is split with {prefix}{suffix}, which the model does not have"))
        })
    }

    /// The bytes each device holds of `t` cut along `axis`; a cut inside a
    /// quantization block is refused.
    fn device_bytes(&self, t: &TensorInfo, axis: usize, segments: &[SegmentSplit]) -> Result<Vec<u64>, SplitError> {
        let block = t.ggml_type.block_size();
        let others: u64 = t.dims.iter().enumerate().filter(|&(i, _)| i != axis && i != 0).map(|(_, &d)| d).product();
        (0..self.devices.count)
            .map(|j| {
                let share: u64 = segments.iter().map(|s| s.extents[j] * u64::from(s.repeats)).sum();
                if axis == 0 {
                    if let Some(s) = segments.iter().find(|s| s.extents[j] % block != 0) {
                        return Err(SplitError::tensor(
                            &t.name,
                            format!(
                                "cannot be split without breaking a block: device {j} would hold {} of a segment's values, not a multiple of {}'s {block}",
                                s.extents[j], t.ggml_type
                            ),
                        ));
                    }
                    row_bytes(t, share).map(|b| b * others)
                } else {
                    row_bytes(t, t.dims[0]).map(|b| b * share * others)
                }
            })
            .collect()
    }
}

fn row_bytes(t: &TensorInfo, n: u64) -> Result<u64, SplitError> {
    t.ggml_type
        .row_size(n)
        .ok_or_else(|| SplitError::tensor(&t.name, format!("has rows of {n} values, not whole {} blocks", t.ggml_type)))
}

fn tensor_bytes(t: &TensorInfo) -> Result<u64, SplitError> {
    let rows: u64 = t.dims.iter().skip(1).product();
    Ok(row_bytes(t, t.dims.first().copied().unwrap_or(1))? * rows)
}
