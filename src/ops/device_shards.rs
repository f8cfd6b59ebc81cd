//! Per-device shards of a tensor-split plan ([`crate::arch::split`]): one
//! GGUF per device holding its slice of every split tensor and every other
//! tensor whole, and the original put back together from them byte for byte.
//!
//! This module owns the shard names (`PREFIX-devJ-of-N.gguf`), the
//! `split.device.*` keys and the geometry of a slice. Along a split axis a
//! tensor is pieces — each segment `repeats` times — and within each piece
//! the devices' extents lie in device order, as ggml's meta backend lays
//! them out. A device whose share of a tensor is empty does not hold it.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::arch::split::{Axis, DevicePlan, SegmentSplit};
use crate::formats::gguf::{self, TensorDataSource};
use crate::formats::{AtomicOutput, FormatError, ModelFile, same_file};
use crate::model::{Array, Metadata, TensorInfo, Value};

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

/// One cut: its segments as (size, repeats, this device's offset, extent).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Cut {
    axis: usize,
    segments: Vec<[u64; 4]>,
}

impl Cut {
    fn of(axis: usize, segments: &[SegmentSplit], device: usize) -> Cut {
        let segments = segments
            .iter()
            .map(|s| [s.size, u64::from(s.repeats), s.extents[..device].iter().sum(), s.extents[device]])
            .collect();
        Cut { axis, segments }
    }

    /// Elements along the axis, whole and on this device (`None` past
    /// u64 or a device's part past its piece: a shard's keys are not trusted).
    fn lengths(&self) -> Option<(u64, u64)> {
        self.segments.iter().try_fold((0u64, 0u64), |(whole, share), &[size, repeats, offset, extent]| {
            if offset.checked_add(extent)? > size {
                return None;
            }
            Some((whole.checked_add(size.checked_mul(repeats)?)?, share.checked_add(extent.checked_mul(repeats)?)?))
        })
    }

    /// The (start, length) of this device's part of each piece, in axis order.
    fn ranges(&self) -> Vec<(u64, u64)> {
        let mut ranges = Vec::new();
        let mut base = 0;
        for &[size, repeats, offset, extent] in &self.segments {
            for r in 0..repeats {
                if extent > 0 {
                    ranges.push((base + r * size + offset, extent));
                }
            }
            base += size * repeats;
        }
        ranges
    }

    /// Byte runs `(in the whole tensor, in the slice, length)` of the slice
    /// of `whole` (dims of the uncut tensor).
    fn byte_runs(&self, whole: &TensorInfo) -> Option<Vec<(usize, usize, usize)>> {
        let (axis_len, share) = self.lengths()?;
        // Every run lies inside the whole tensor, whose byte size fits u64:
        // the offsets below cannot overflow.
        whole.ggml_type.row_size(whole.dims[0])?.checked_mul(whole.dims[1..].iter().product())?;
        if whole.dims.get(self.axis) != Some(&axis_len) {
            return None;
        }
        let row = |n: u64| whole.ggml_type.row_size(n);
        let mut runs = Vec::new();
        if self.axis == 0 {
            let rows: u64 = whole.dims[1..].iter().product();
            let (full_row, slice_row) = (row(axis_len)?, row(share)?);
            for r in 0..rows {
                let mut at = 0;
                for (start, len) in self.ranges() {
                    let (skip, bytes) = (row(start)?, row(len)?);
                    runs.push(((r * full_row + skip) as usize, (r * slice_row + at) as usize, bytes as usize));
                    at += bytes;
                }
            }
        } else {
            let inner = row(whole.dims[0])? * whole.dims[1..self.axis].iter().product::<u64>();
            let outer: u64 = whole.dims[self.axis + 1..].iter().product();
            for o in 0..outer {
                let mut at = 0;
                for (start, len) in self.ranges() {
                    let full = (o * axis_len + start) * inner;
                    runs.push((full as usize, ((o * share + at) * inner) as usize, (len * inner) as usize));
                    at += len;
                }
            }
        }
        Some(runs)
    }
}

/// Writes one shard per device of `plan` for `model`; returns their paths.
pub fn write_shards(model: &ModelFile, plan: &DevicePlan, prefix: &Path) -> Result<Vec<PathBuf>, DeviceShardError> {
    let count = plan.devices.count;
    let names: Array = Array::String(model.tensors.iter().map(|t| t.name.as_str()).collect());
    let mut written = Vec::with_capacity(count);
    for device in 0..count {
        let path = shard_path(prefix, device, count);
        if same_file(model.path(), &path) {
            return Err(bad(&path, "is the model being sharded"));
        }
        let mut tensors = Vec::new();
        let mut cuts = Vec::new();
        let (mut axes, mut pieces) = (Vec::new(), Vec::new());
        for (t, split) in model.tensors.iter().zip(&plan.tensors) {
            let cut = match split.axis {
                Axis::Split(axis) => Some(Cut::of(usize::from(axis), &split.segments, device)),
                Axis::Mirrored | Axis::Partial => None,
            };
            let mut info = t.clone();
            match &cut {
                Some(cut) => {
                    let (_, share) = cut.lengths().expect("a plan's extents fit its segments");
                    if share == 0 {
                        continue;
                    }
                    info.dims[cut.axis] = share;
                    axes.push(cut.axis as i32);
                    pieces.push(cut.segments.len() as u64);
                    pieces.extend(cut.segments.iter().flatten());
                }
                None => axes.push(-1),
            }
            tensors.push(TensorInfo::new(info.name, info.dims, info.ggml_type));
            cuts.push((t, cut));
        }
        let mut metadata = model.metadata.clone();
        metadata.set(INDEX, Value::U16(device as u16));
        metadata.set(COUNT, Value::U16(count as u16));
        metadata.set(TENSORS, Value::Array(names.clone()));
        metadata.set(AXES, Value::Array(Array::I32(axes)));
        metadata.set(PIECES, Value::Array(Array::U64(pieces)));
        let mut source = Slices { model, cuts: &cuts };
        let io = |source: io::Error| DeviceShardError::Io { source, path: path.clone() };
        let mut out = AtomicOutput::create(&path).map_err(io)?;
        gguf::write_gguf(out.writer(), model.endian, &metadata, &tensors, &mut source).map_err(io)?;
        out.commit().map_err(io)?;
        written.push(path);
    }
    Ok(written)
}

/// The bytes of each tensor of a shard: whole, or its device's slice.
struct Slices<'a> {
    model: &'a ModelFile,
    cuts: &'a [(&'a TensorInfo, Option<Cut>)],
}

impl TensorDataSource for Slices<'_> {
    fn write_tensor(&mut self, idx: usize, out: &mut dyn Write) -> io::Result<()> {
        let (t, cut) = &self.cuts[idx];
        let bytes = self.model.tensor_data(t).map_err(io::Error::other)?;
        let Some(cut) = cut else { return out.write_all(&bytes) };
        let runs = cut.byte_runs(t).ok_or_else(|| io::Error::other(format!("`{}` cannot be sliced", t.name)))?;
        let mut slice = Vec::with_capacity(runs.iter().map(|r| r.2).sum());
        for (full, _, len) in runs {
            slice.extend_from_slice(&bytes[full..full + len]);
        }
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
    if shards.iter().any(|s| same_file(s.path(), out)) {
        return Err(bad(out, "is one of the shards being merged"));
    }
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
        let held: Vec<(usize, &TensorInfo, &Option<Cut>)> = placed
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
            let shape =
                |c: &Cut| (c.axis, c.segments.iter().map(|&[size, repeats, ..]| (size, repeats)).collect::<Vec<_>>());
            let cuts: Vec<&Cut> = held.iter().filter_map(|(_, _, c)| c.as_ref()).collect();
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
    let mut file = AtomicOutput::create(out).map_err(io)?;
    gguf::write_gguf(file.writer(), shards[0].endian, &metadata, &tensors, &mut data).map_err(io)?;
    file.commit().map_err(io)?;
    Ok(())
}

/// A shard's tensors with their cuts, checked against its keys.
struct Placed<'a> {
    names: Vec<String>,
    tensors: Vec<(&'a TensorInfo, Option<Cut>)>,
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
                    let cut = Cut { axis, segments };
                    if cut.lengths().map(|(_, share)| share) != Some(t.dims[axis]) {
                        return Err(bad(path, format!("`{}`'s pieces do not add up to its dimension {axis}", t.name)));
                    }
                    Some(cut)
                }
                Ok(axis) => return Err(bad(path, format!("`{}` is cut along axis {axis} it does not have", t.name))),
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
    sources: &'a [Vec<(usize, &'a TensorInfo, Option<Cut>)>],
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
            let slice = read(*j, t)?;
            let runs =
                cut.byte_runs(whole).ok_or_else(|| io::Error::other(format!("`{}` cannot be placed", whole.name)))?;
            for (full, at, len) in runs {
                let (Some(part), Some(place)) = (slice.get(at..at + len), bytes.get_mut(full..full + len)) else {
                    return Err(io::Error::other(format!("`{}`'s slices do not fit it", whole.name)));
                };
                place.copy_from_slice(part);
            }
        }
        out.write_all(&bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::GgmlType;

    #[test]
    fn shard_names_round_trip() {
        let path = shard_path(Path::new("out/model"), 2, 4);
        assert_eq!(path, Path::new("out/model-dev2-of-4.gguf"));
        assert_eq!(parse_shard_path(&path), Some((PathBuf::from("out/model"), 2, 4)));
        assert_eq!(parse_shard_path(Path::new("m-dev4-of-4.gguf")), None);
    }

    #[test]
    fn slices_of_every_device_cover_the_tensor_once() {
        // A fused [8, 12] F32 tensor cut along axis 1 as Q (6) and K/V (3 twice).
        let whole = TensorInfo::new("t", vec![8, 12], GgmlType::F32);
        let extents = [[4u64, 2], [2, 1]];
        let segments: Vec<SegmentSplit> = [(6, 1), (3, 2)]
            .iter()
            .zip(extents)
            .map(|(&(size, repeats), extents)| SegmentSplit {
                size,
                repeats,
                granularity: 1,
                extents: extents.to_vec(),
            })
            .collect();
        let mut seen = vec![0u32; whole.n_bytes() as usize];
        for device in 0..2 {
            let cut = Cut::of(1, &segments, device);
            for (full, _, len) in cut.byte_runs(&whole).unwrap() {
                seen[full..full + len].iter_mut().for_each(|s| *s += 1);
            }
        }
        assert!(seen.iter().all(|&s| s == 1), "{seen:?}");
        // Device 1's part of the first K/V piece starts after device 0's 2 rows.
        assert_eq!(Cut::of(1, &segments, 1).ranges(), [(4, 2), (8, 1), (11, 1)]);
    }
}
