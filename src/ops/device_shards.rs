//! Per-device shards of a tensor-split plan ([`crate::arch::split`]): one
//! GGUF per device holding its slice of every split tensor and every other
//! tensor whole, and the original put back together from them byte for byte.
//!
//! This module owns the shard names (`PREFIX-devJ-of-N.gguf`), the
//! `split.device.*` keys and what each device holds; a slice's geometry is
//! [`AxisCut`]'s. A device whose share of a tensor is empty does not hold it.
//! The command `shard-devices` writes shards from a file; an export with
//! `devices = {…}` writes them from a tensor set, each slice a descriptor
//! the engine cuts from its tensor's (cached) bytes.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::arch::split::{Axis, DevicePlan, SegmentSplit, SplitError};
use crate::artifact::{Tensor, TensorSet};
use crate::files::{Replaces, WriteGuard};
use crate::formats::gguf::{self, TensorDataSource};
use crate::formats::{AtomicOutput, FormatError, ModelFile};
use crate::model::{Array, AxisCut, Endian, Metadata, TensorInfo, Value};
use crate::ops::split::ShardPlan;
use crate::text::Name;

/// `split.device.index`: the shard's device (u16).
pub const INDEX: &str = "split.device.index";
/// `split.device.count`: how many devices (u16).
pub const COUNT: &str = "split.device.count";
/// `split.device.tensors`: every tensor of the original, in its order.
pub const TENSORS: &str = "split.device.tensors";
/// `split.device.axes`: per tensor of the shard, the axis it is cut along (-1: whole).
pub const AXES: &str = "split.device.axes";
/// `split.device.pieces`: per cut tensor of the shard, its segment count,
/// then per segment its size, repeats, and this device's offset and extent
/// within each piece.
pub const PIECES: &str = "split.device.pieces";

const KEYS: [&str; 5] = [INDEX, COUNT, TENSORS, AXES, PIECES];

#[derive(Debug, thiserror::Error)]
pub enum DeviceShardError {
    #[error(transparent)]
    Format(#[from] FormatError),
    #[error("{}: {}", path.display(), crate::files::IoText(source))]
    Io { source: io::Error, path: PathBuf },
    #[error("{}: {problem}", path.display())]
    Bad { path: PathBuf, problem: String },
}

fn bad(path: &Path, problem: impl Into<String>) -> DeviceShardError {
    DeviceShardError::Bad { path: path.to_owned(), problem: problem.into() }
}

/// `PREFIX-devJ-of-N.gguf`.
pub fn shard_path(prefix: &Path, index: usize, count: usize) -> PathBuf {
    let mut name = prefix.as_os_str().to_owned();
    name.push(format!("-dev{index}-of-{count}.gguf"));
    PathBuf::from(name)
}

/// The prefix, device and count of a shard's name.
pub fn parse_shard_path(path: &Path) -> Option<(PathBuf, usize, usize)> {
    let text = path.to_str()?.strip_suffix(".gguf")?;
    let (rest, count) = text.rsplit_once("-of-")?;
    let (prefix, index) = rest.rsplit_once("-dev")?;
    let (index, count) = (index.parse().ok()?, count.parse().ok()?);
    (index < count).then(|| (PathBuf::from(prefix), index, count))
}

/// Whether a model is a device shard.
pub fn is_device_shard(metadata: &Metadata) -> bool {
    metadata.get(COUNT).is_some()
}

/// Device `device`'s part of a split tensor's segments.
fn cut_of(axis: usize, segments: &[SegmentSplit], device: usize) -> AxisCut {
    let segments = segments
        .iter()
        .map(|s| [s.size, u64::from(s.repeats), s.extents[..device].iter().sum(), s.extents[device]])
        .collect();
    AxisCut { axis, segments }
}

/// What one device's shard holds: its metadata (the model's, with the
/// `split.device.*` keys) and each tensor it holds, by index into the
/// model's tensors, whole or with its cut.
pub struct DeviceShard {
    pub metadata: Metadata,
    pub tensors: Vec<(usize, Option<AxisCut>)>,
}

/// Device `device`'s shard of a model planned as `plan`.
pub fn device_shard(metadata: &Metadata, tensors: &[TensorInfo], plan: &DevicePlan, device: usize) -> DeviceShard {
    let mut held = Vec::new();
    let (mut axes, mut pieces) = (Vec::new(), Vec::new());
    for (index, split) in plan.tensors.iter().enumerate() {
        let cut = match split.axis {
            Axis::Split(axis) => Some(cut_of(usize::from(axis), &split.segments, device)),
            Axis::Mirrored | Axis::Partial => None,
        };
        match &cut {
            Some(cut) => {
                let (_, share) = cut.lengths().expect("a plan's extents fit its segments");
                if share == 0 {
                    continue;
                }
                axes.push(cut.axis as i32);
                pieces.push(cut.segments.len() as u64);
                pieces.extend(cut.segments.iter().flatten());
            }
            None => axes.push(-1),
        }
        held.push((index, cut));
    }
    let mut metadata = metadata.clone();
    metadata.set(INDEX, Value::U16(device as u16));
    metadata.set(COUNT, Value::U16(plan.devices.count as u16));
    metadata.set(TENSORS, Value::Array(Array::String(tensors.iter().map(|t| t.name.as_str()).collect())));
    metadata.set(AXES, Value::Array(Array::I32(axes)));
    metadata.set(PIECES, Value::Array(Array::U64(pieces)));
    DeviceShard { metadata, tensors: held }
}

/// A per-device export of `set`: the set with every device's slices
/// appended (as descriptors cut from the tensor they slice), and per device
/// its file's metadata and tensors (indices into that set: whole tensors
/// are the set's own).
pub fn device_files(set: &TensorSet, plan: &DevicePlan) -> Result<(TensorSet, Vec<ShardPlan>), SplitError> {
    let infos = set.infos();
    let mut all = set.clone();
    let mut files = Vec::with_capacity(plan.devices.count);
    for device in 0..plan.devices.count {
        let shard = device_shard(&set.metadata, &infos, plan, device);
        let mut tensors = Vec::with_capacity(shard.tensors.len());
        for (index, cut) in shard.tensors {
            let Some(cut) = cut else {
                tensors.push(index);
                continue;
            };
            let whole = &set.tensors[index];
            let slice = Tensor::slice(whole.clone(), cut).ok_or_else(|| SplitError::Tensor {
                tensor: whole.name.clone(),
                problem: "cannot be sliced as planned".into(),
            })?;
            tensors.push(all.tensors.len());
            all.tensors.push(slice);
        }
        files.push(ShardPlan { metadata: shard.metadata, tensors });
    }
    Ok((all, files))
}

/// Writes one shard per device of `plan` for `model`; returns their paths.
pub fn write_shards(model: &ModelFile, plan: &DevicePlan, prefix: &Path) -> Result<Vec<PathBuf>, DeviceShardError> {
    let count = plan.devices.count;
    let mut guard = WriteGuard::default();
    guard.protect(model.path(), "the model being sharded");
    let paths: Vec<PathBuf> = (0..count).map(|device| shard_path(prefix, device, count)).collect();
    let checked = paths
        .iter()
        .map(|path| guard.check(path, Replaces::AnyFile).map_err(|e| bad(path, e.problem)))
        .collect::<Result<Vec<_>, _>>()?;
    let mut written = Vec::with_capacity(count);
    for (device, (path, checked)) in paths.into_iter().zip(&checked).enumerate() {
        let shard = device_shard(&model.metadata, &model.tensors, plan, device);
        let mut tensors = Vec::with_capacity(shard.tensors.len());
        let mut cuts = Vec::with_capacity(shard.tensors.len());
        for (index, cut) in shard.tensors {
            let whole = &model.tensors[index];
            let info = match &cut {
                Some(cut) => {
                    cut.sliced(whole).ok_or_else(|| bad(model.path(), format!("`{}` cannot be sliced", whole.name)))?
                }
                None => TensorInfo::new(whole.name.clone(), whole.dims.clone(), whole.ggml_type),
            };
            tensors.push(info);
            cuts.push((whole, cut));
        }
        let mut source = Slices { model, cuts: &cuts };
        let io = |source: io::Error| DeviceShardError::Io { source, path: path.clone() };
        let mut out = AtomicOutput::create(checked).map_err(io)?;
        gguf::write_gguf(out.writer(), Endian::Little, &shard.metadata, &tensors, &mut source).map_err(io)?;
        out.commit().map_err(io)?;
        written.push(path);
    }
    Ok(written)
}

/// The bytes of each tensor of a shard: whole, or its device's slice.
struct Slices<'a> {
    model: &'a ModelFile,
    cuts: &'a [(&'a TensorInfo, Option<AxisCut>)],
}

impl TensorDataSource for Slices<'_> {
    fn write_tensor(&mut self, idx: usize, out: &mut dyn Write) -> io::Result<()> {
        let (t, cut) = &self.cuts[idx];
        let bytes = self.model.tensor_data(t).map_err(io::Error::other)?;
        let Some(cut) = cut else { return out.write_all(&bytes) };
        let slice =
            cut.cut(t, &bytes).ok_or_else(|| io::Error::other(format!("`{}` cannot be sliced", Name(&t.name))))?;
        out.write_all(&slice)
    }
}

/// Puts the original back together from its device shards (any one of them
/// names the set) and writes it to `out`.
pub fn merge_shards(any: &Path, out: &Path) -> Result<(), DeviceShardError> {
    let (prefix, _, count) = parse_shard_path(any).ok_or_else(|| bad(any, "is not named PREFIX-devJ-of-N.gguf"))?;
    let shards = (0..count)
        .map(|j| ModelFile::open(&shard_path(&prefix, j, count), Default::default()))
        .collect::<Result<Vec<_>, _>>()?;
    let mut guard = WriteGuard::default();
    for shard in &shards {
        guard.protect(shard.path(), "one of the shards being merged");
    }
    let checked = guard.check(out, Replaces::AnyFile).map_err(|e| bad(out, e.problem))?;
    let mut placed = Vec::with_capacity(count);
    for (j, shard) in shards.iter().enumerate() {
        placed.push(Placed::read(shard, j, count)?);
    }
    let names = &placed[0].names;
    let mut metadata = shards[0].metadata.clone();
    for key in KEYS {
        metadata.remove(key);
    }
    let mut tensors = Vec::with_capacity(names.len());
    let mut sources = Vec::with_capacity(names.len());
    for name in names {
        let held: Vec<(usize, &TensorInfo, &Option<AxisCut>)> = placed
            .iter()
            .enumerate()
            .filter_map(|(j, p)| p.tensors.iter().find(|(t, _)| &t.name == name).map(|(t, cut)| (j, *t, cut)))
            .collect();
        let Some(&(_, first, first_cut)) = held.first() else {
            return Err(bad(any, format!("no shard holds `{name}`")));
        };
        let mut dims = first.dims.clone();
        if let Some(cut) = first_cut {
            dims[cut.axis] = cut.lengths().map_or(0, |(whole, _)| whole);
            let shape = |c: &AxisCut| {
                (c.axis, c.segments.iter().map(|&[size, repeats, ..]| (size, repeats)).collect::<Vec<_>>())
            };
            let cuts: Vec<&AxisCut> = held.iter().filter_map(|(_, _, c)| c.as_ref()).collect();
            if cuts.len() != held.len() || cuts.iter().any(|c| shape(c) != shape(cut)) {
                return Err(bad(any, format!("the shards cut `{name}` in different ways")));
            }
            for (segment, &[size, ..]) in cut.segments.iter().enumerate() {
                let covered = cuts.iter().fold(0u64, |sum, c| sum.saturating_add(c.segments[segment][3]));
                if covered != size {
                    return Err(bad(any, format!("the shards hold {covered} of `{name}`'s segment of {size}")));
                }
            }
        }
        tensors.push(TensorInfo::new(name.clone(), dims, first.ggml_type));
        sources.push(held.into_iter().map(|(j, t, cut)| (j, t, cut.clone())).collect::<Vec<_>>());
    }
    let mut data = Gathered { shards: &shards, whole: &tensors, sources: &sources };
    let io = |source: io::Error| DeviceShardError::Io { source, path: out.to_owned() };
    let mut file = AtomicOutput::create(&checked).map_err(io)?;
    gguf::write_gguf(file.writer(), Endian::Little, &metadata, &tensors, &mut data).map_err(io)?;
    file.commit().map_err(io)?;
    Ok(())
}

/// A shard's tensors with their cuts, checked against its keys.
struct Placed<'a> {
    names: Vec<String>,
    tensors: Vec<(&'a TensorInfo, Option<AxisCut>)>,
}

impl<'a> Placed<'a> {
    fn read(shard: &'a ModelFile, device: usize, count: usize) -> Result<Placed<'a>, DeviceShardError> {
        let path = shard.path();
        let number = |key: &str| shard.metadata.get(key).and_then(Value::as_u64);
        if number(INDEX) != Some(device as u64) || number(COUNT) != Some(count as u64) {
            return Err(bad(path, format!("is not device {device} of {count} ({INDEX}, {COUNT})")));
        }
        let array = |key: &str| match shard.metadata.get(key) {
            Some(Value::Array(a)) => Ok(a),
            _ => Err(bad(path, format!("has no array {key}"))),
        };
        let names: Vec<String> = match array(TENSORS)? {
            Array::String(names) => names.iter().map(|n| String::from_utf8_lossy(n).into_owned()).collect(),
            _ => return Err(bad(path, format!("{TENSORS} is not a list of names"))),
        };
        let (Array::I32(axes), Array::U64(pieces)) = (array(AXES)?, array(PIECES)?) else {
            return Err(bad(path, format!("{AXES} or {PIECES} has the wrong type")));
        };
        if axes.len() != shard.tensors.len() {
            return Err(bad(path, format!("{AXES} has {} entries for {} tensors", axes.len(), shard.tensors.len())));
        }
        let mut pieces = pieces.iter().copied();
        let mut tensors = Vec::with_capacity(axes.len());
        for (t, &axis) in shard.tensors.iter().zip(axes) {
            let cut = match usize::try_from(axis) {
                Err(_) => None,
                Ok(axis) if axis < t.dims.len() => {
                    let n = pieces.next().ok_or_else(|| bad(path, format!("{PIECES} ends early")))?;
                    let segments = (0..n)
                        .map(|_| {
                            let mut s = [0u64; 4];
                            for v in &mut s {
                                *v = pieces.next().ok_or_else(|| bad(path, format!("{PIECES} ends early")))?;
                            }
                            Ok(s)
                        })
                        .collect::<Result<Vec<_>, DeviceShardError>>()?;
                    let cut = AxisCut { axis, segments };
                    if cut.lengths().map(|(_, share)| share) != Some(t.dims[axis]) {
                        return Err(bad(
                            path,
                            format!("`{}`'s pieces do not add up to its dimension {axis}", Name(&t.name)),
                        ));
                    }
                    Some(cut)
                }
                Ok(axis) => {
                    return Err(bad(path, format!("`{}` is cut along axis {axis} it does not have", Name(&t.name))));
                }
            };
            tensors.push((t, cut));
        }
        if pieces.next().is_some() {
            return Err(bad(path, format!("{PIECES} has entries past its tensors")));
        }
        Ok(Placed { names, tensors })
    }
}

/// Each original tensor from its shards: a whole copy, or the slices put back in place.
struct Gathered<'a> {
    shards: &'a [ModelFile],
    whole: &'a [TensorInfo],
    sources: &'a [Vec<(usize, &'a TensorInfo, Option<AxisCut>)>],
}

impl TensorDataSource for Gathered<'_> {
    fn write_tensor(&mut self, idx: usize, out: &mut dyn Write) -> io::Result<()> {
        let whole = &self.whole[idx];
        let sources = &self.sources[idx];
        let read = |j: usize, t: &TensorInfo| self.shards[j].tensor_data(t).map_err(io::Error::other);
        if let Some(&(j, t, None)) = sources.first() {
            return out.write_all(&read(j, t)?);
        }
        let mut bytes = vec![0u8; usize::try_from(whole.n_bytes()).map_err(io::Error::other)?];
        for (j, t, cut) in sources {
            let cut =
                cut.as_ref().ok_or_else(|| io::Error::other(format!("`{}` is both whole and cut", whole.name)))?;
            cut.place(whole, &read(*j, t)?, &mut bytes)
                .ok_or_else(|| io::Error::other(format!("`{}`'s slices do not fit it", whole.name)))?;
        }
        out.write_all(&bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_names_round_trip() {
        let path = shard_path(Path::new("out/model"), 2, 4);
        assert_eq!(path, Path::new("out/model-dev2-of-4.gguf"));
        assert_eq!(parse_shard_path(&path), Some((PathBuf::from("out/model"), 2, 4)));
        assert_eq!(parse_shard_path(Path::new("m-dev4-of-4.gguf")), None);
    }
}
