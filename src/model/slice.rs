//! One device's slice of a tensor cut along one axis: the geometry shared by
//! the per-device shard writer, its merge, and the engine that materializes
//! a slice as an export's tensor.
//!
//! Along the axis a tensor is pieces — each segment `repeats` times — and
//! within each piece this device holds `extent` elements from `offset`, as
//! ggml's meta backend lays a tensor-split weight out.

use ndarray::{Array3, ArrayView3, ArrayViewMut3, s};

use super::TensorInfo;

/// A slice: the axis and, per segment, `[size, repeats, offset, extent]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct AxisCut {
    pub axis: usize,
    pub segments: Vec<[u64; 4]>,
}

impl AxisCut {
    /// Elements along the axis, whole and in the slice (`None` past u64 or
    /// with an extent past its segment: a shard's keys are not trusted).
    pub fn lengths(&self) -> Option<(u64, u64)> {
        self.segments.iter().try_fold((0u64, 0u64), |(whole, share), &[size, repeats, offset, extent]| {
            if offset.checked_add(extent)? > size {
                return None;
            }
            Some((whole.checked_add(size.checked_mul(repeats)?)?, share.checked_add(extent.checked_mul(repeats)?)?))
        })
    }

    /// The (start, length) along the axis of each part of the slice, in
    /// axis order (empty parts left out).
    pub fn ranges(&self) -> Vec<(u64, u64)> {
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

    /// The slice's descriptor: `whole` with the axis at the slice's length,
    /// when the cut fits it.
    pub fn sliced(&self, whole: &TensorInfo) -> Option<TensorInfo> {
        let (axis_len, share) = self.lengths()?;
        if whole.dims.get(self.axis) != Some(&axis_len) {
            return None;
        }
        let mut dims = whole.dims.clone();
        dims[self.axis] = share;
        Some(TensorInfo::new(whole.name.clone(), dims, whole.ggml_type))
    }

    /// For a cut along axis 1 or above, the slice's rows as runs of the
    /// whole tensor's rows `(first, count)`, in slice order; `None` for a
    /// cut along axis 0 (every row is cut instead) or one that does not fit.
    pub fn row_runs(&self, whole: &TensorInfo) -> Option<Vec<(u64, u64)>> {
        let (axis_len, _) = self.lengths()?;
        if self.axis == 0 || whole.dims.get(self.axis) != Some(&axis_len) {
            return None;
        }
        let inner: u64 = whole.dims[1..self.axis].iter().product();
        let outer: u64 = whole.dims[self.axis + 1..].iter().product();
        let ranges = self.ranges();
        let mut runs = Vec::with_capacity(ranges.len() * outer as usize);
        for o in 0..outer {
            for &(start, len) in &ranges {
                runs.push(((o * axis_len + start).checked_mul(inner)?, len.checked_mul(inner)?));
            }
        }
        Some(runs)
    }

    /// The slice of `bytes`, the whole tensor's.
    pub fn cut(&self, whole: &TensorInfo, bytes: &[u8]) -> Option<Vec<u8>> {
        let geometry = self.geometry(whole)?;
        let view = ArrayView3::from_shape(geometry.whole, bytes).ok()?;
        let mut slice = Array3::zeros(geometry.slice);
        let mut at = 0;
        for &(start, len) in &geometry.parts {
            slice.slice_mut(s![.., at..at + len, ..]).assign(&view.slice(s![.., start..start + len, ..]));
            at += len;
        }
        Some(slice.into_raw_vec_and_offset().0)
    }

    /// Puts `slice` (this cut's bytes) in its place in `bytes`, the whole
    /// tensor's.
    pub fn place(&self, whole: &TensorInfo, slice: &[u8], bytes: &mut [u8]) -> Option<()> {
        let geometry = self.geometry(whole)?;
        let slice = ArrayView3::from_shape(geometry.slice, slice).ok()?;
        let mut view = ArrayViewMut3::from_shape(geometry.whole, bytes).ok()?;
        let mut at = 0;
        for &(start, len) in &geometry.parts {
            view.slice_mut(s![.., start..start + len, ..]).assign(&slice.slice(s![.., at..at + len, ..]));
            at += len;
        }
        Some(())
    }

    /// The tensor's bytes seen as `[outer, units along the axis, bytes a
    /// unit]` — a unit is a quantization block of a row for a cut along
    /// axis 0, a whole slab of rows for one along a higher axis — with the
    /// slice's parts in units; `None` when the cut does not fit or cuts a block.
    fn geometry(&self, whole: &TensorInfo) -> Option<Geometry> {
        let (axis_len, share) = self.lengths()?;
        if whole.dims.get(self.axis) != Some(&axis_len) {
            return None;
        }
        let size = |dims: &[u64]| usize::try_from(dims.iter().try_fold(1u64, |n, &d| n.checked_mul(d))?).ok();
        let t = whole.ggml_type;
        let (elements_per_unit, unit_bytes) = match self.axis {
            0 => (t.block_size(), usize::try_from(t.type_size()).ok()?),
            axis => (1, usize::try_from(t.row_size(whole.dims[0])?).ok()?.checked_mul(size(&whole.dims[1..axis])?)?),
        };
        let units =
            |n: u64| usize::try_from(n / elements_per_unit).ok().filter(|_| n.is_multiple_of(elements_per_unit));
        let outer = size(&whole.dims[self.axis + 1..])?;
        let parts =
            self.ranges().into_iter().map(|(start, len)| Some((units(start)?, units(len)?))).collect::<Option<_>>()?;
        Some(Geometry {
            whole: (outer, units(axis_len)?, unit_bytes),
            slice: (outer, units(share)?, unit_bytes),
            parts,
        })
    }
}

struct Geometry {
    whole: (usize, usize, usize),
    slice: (usize, usize, usize),
    /// (start, length) in units.
    parts: Vec<(usize, usize)>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::GgmlType;

    #[test]
    fn the_slices_of_every_device_cover_the_tensor_once() {
        // A fused [2, 12] F32 tensor cut along axis 1 as Q (6) and K/V (3 twice):
        // device 0 holds 4 of Q and 2 of each K/V piece, device 1 the rest.
        let whole = TensorInfo::new("t", vec![2, 12], GgmlType::F32);
        let cut = |device: usize| AxisCut {
            axis: 1,
            segments: vec![[6, 1, [0, 4][device], [4, 2][device]], [3, 2, device as u64 * 2, 2 - device as u64]],
        };
        let bytes: Vec<u8> = (0..whole.n_bytes()).map(|b| b as u8).collect();
        let rows = |rows: &[u8]| rows.iter().flat_map(|&r| 8 * r..8 * (r + 1)).collect::<Vec<u8>>();
        assert_eq!(cut(0).cut(&whole, &bytes).unwrap(), rows(&[0, 1, 2, 3, 6, 7, 9, 10]));
        assert_eq!(cut(1).cut(&whole, &bytes).unwrap(), rows(&[4, 5, 8, 11]));
        let mut merged = vec![0; bytes.len()];
        for device in 0..2 {
            let slice = cut(device).cut(&whole, &bytes).unwrap();
            cut(device).place(&whole, &slice, &mut merged).unwrap();
        }
        assert_eq!(merged, bytes);
        assert_eq!(cut(1).ranges(), [(4, 2), (8, 1), (11, 1)]);
        assert_eq!(cut(1).row_runs(&whole).unwrap(), [(4, 2), (8, 1), (11, 1)]);
        assert_eq!(cut(1).sliced(&whole).unwrap().dims, [2, 4]);
    }

    #[test]
    fn a_cut_along_rows_keeps_whole_blocks() {
        // Q4_0 is 18 bytes a 32-element block: a 512-wide row is 16 blocks.
        let whole = TensorInfo::new("t", vec![512, 2], GgmlType::Q4_0);
        let bytes: Vec<u8> = (0..whole.n_bytes()).map(|b| b as u8).collect();
        let cut = AxisCut { axis: 0, segments: vec![[512, 1, 128, 256]] };
        let expected: Vec<u8> = [72..216, 288 + 72..288 + 216].into_iter().flat_map(|r| r.map(|b| b as u8)).collect();
        assert_eq!(cut.cut(&whole, &bytes).unwrap(), expected);
        assert_eq!(cut.row_runs(&whole), None);
        let inside_a_block = AxisCut { axis: 0, segments: vec![[512, 1, 16, 256]] };
        assert_eq!(inside_a_block.cut(&whole, &bytes), None);
    }

    #[test]
    fn cuts_that_do_not_fit_are_refused() {
        let whole = TensorInfo::new("t", vec![8, 12], GgmlType::F32);
        let bytes = vec![0; whole.n_bytes() as usize];
        let past_its_segment = AxisCut { axis: 1, segments: vec![[12, 1, 8, 8]] };
        assert_eq!(past_its_segment.lengths(), None);
        assert_eq!(past_its_segment.cut(&whole, &bytes), None);
        let wrong_length = AxisCut { axis: 1, segments: vec![[10, 1, 0, 5]] };
        assert_eq!(wrong_length.sliced(&whole), None);
        assert_eq!(wrong_length.cut(&whole, &bytes), None);
        let overflowing = AxisCut { axis: 1, segments: vec![[u64::MAX, 2, 0, 1]] };
        assert_eq!(overflowing.lengths(), None);
        let short = AxisCut { axis: 1, segments: vec![[12, 1, 0, 6]] };
        assert_eq!(short.cut(&whole, &bytes[1..]), None);
    }
}
