//! The lattices the IQ grid quantizers search, built as ggml's
//! `iq2xs_init_impl` and `iq3xs_init_impl` build them: each grid point as
//! odd integers `2l + 1`, a map from every reachable point of the cube
//! (`l` below the grid's level count in each coordinate) to its grid index,
//! and for the points off the grid the grid points nearest to them.
//!
//! The points come from the published decode grids ([`super::iq_tables`]):
//! a coordinate's level `l` is the rank of its byte among the grid's
//! distinct bytes, which is how ggml's own code lists (`kgrid_2bit_256`, …)
//! map to those grids. Built once per lattice, on first use.

use std::sync::OnceLock;

use super::iq_tables::{IQ1S_GRID, IQ2S_GRID, IQ2XS_GRID, IQ2XXS_GRID, IQ3S_GRID, IQ3XXS_GRID};
use super::simd::Level;

/// A cube point's place: on the grid, or off it with its nearest grid
/// points (their indices at `start`, their coordinates at `coords`).
#[derive(Clone, Copy)]
enum Slot {
    On(u16),
    Off { start: u32, len: u32, coords: u32 },
}

/// Neighbour coordinates are evaluated this many at a time: lists are
/// padded to a multiple of it.
const LANES: usize = 32;

pub(super) struct Lattice {
    /// Coordinates per point: 8, or 4 for the IQ3 grids.
    dims: usize,
    /// Bits per coordinate in a point's code (ggml's map index).
    bits: u32,
    /// Grid point `k`'s coordinates `2l + 1` at `points[k·dims..][..dims]`.
    points: Vec<i8>,
    /// Indexed by code: `Σ l_i << (bits·i)`.
    slots: Vec<Slot>,
    neighbours: Vec<u16>,
    /// Each neighbour list's coordinates as f32, coordinate-major: for a
    /// list of `n` points padded to `p`, coordinate `i` of point `j` at
    /// `i·p + j`, so one coordinate of many points is contiguous.
    coords: Vec<f32>,
}

/// Where a point of the cube falls.
pub(super) enum Place<'a> {
    OnGrid(usize),
    OffGrid(Neighbours<'a>),
}

/// The grid points nearest to an off-grid point: ggml's `nwant` nearest
/// distances, ties ordered by index.
#[derive(Clone, Copy)]
pub(super) struct Neighbours<'a> {
    pub(super) indices: &'a [u16],
    /// Coordinate-major, padded (see [`Lattice`]'s `coords`).
    coords: &'a [f32],
}

impl Lattice {
    /// `grid`: each point's bytes (the first `dims` of them); `nwant`: how
    /// many distinct nearest distances a neighbour list covers.
    fn new(
        dims: usize,
        bits: u32,
        grid: impl Iterator<Item = [u8; 8]>,
        order: impl Fn(u8) -> i32,
        nwant: usize,
    ) -> Lattice {
        let grid: Vec<[u8; 8]> = grid.collect();
        let mut bytes: Vec<u8> = grid.iter().flat_map(|p| p[..dims].iter().copied()).collect();
        bytes.sort_by_key(|&b| order(b));
        bytes.dedup();
        let level = |b: u8| bytes.iter().position(|&x| x == b).expect("a byte of the grid") as i8;
        let points: Vec<i8> = grid.iter().flat_map(|p| p[..dims].iter().map(|&b| 2 * level(b) + 1)).collect();

        let n_levels = bytes.len();
        let mut slots = vec![Slot::Off { start: 0, len: 0, coords: 0 }; 1 << (bits as usize * dims)];
        for (k, point) in points.chunks_exact(dims).enumerate() {
            let code =
                point.iter().enumerate().map(|(i, &p)| (((p - 1) / 2) as usize) << (bits as usize * i)).sum::<usize>();
            slots[code] = Slot::On(k as u16);
        }
        // Only codes whose every coordinate is a level can be asked for: the
        // quantizers clamp each coordinate to the levels first.
        let mut neighbours = Vec::new();
        let mut coords = Vec::new();
        let mut by_distance = Vec::with_capacity(grid.len());
        let mut coordinates = vec![0i8; dims];
        for (code, slot) in slots.iter_mut().enumerate() {
            let mut rest = code;
            let mut reachable = true;
            for c in coordinates.iter_mut() {
                let l = rest & ((1 << bits) - 1);
                rest >>= bits;
                reachable &= l < n_levels;
                *c = 2 * l as i8 + 1;
            }
            if !reachable || matches!(slot, Slot::On(_)) {
                continue;
            }
            by_distance.clear();
            by_distance.extend(points.chunks_exact(dims).enumerate().map(|(k, p)| {
                let d2: i32 = p.iter().zip(&coordinates).map(|(&a, &b)| i32::from(a - b) * i32::from(a - b)).sum();
                (d2, k as u16)
            }));
            by_distance.sort_unstable();
            let start = neighbours.len();
            let mut distances = 0;
            let mut last = None;
            for &(d2, k) in &by_distance {
                if last != Some(d2) {
                    if distances == nwant {
                        break;
                    }
                    distances += 1;
                    last = Some(d2);
                }
                neighbours.push(k);
            }
            let list = &neighbours[start..];
            let padded = list.len().next_multiple_of(LANES);
            let at = coords.len();
            coords.resize(at + dims * padded, 0.0);
            for (j, &k) in list.iter().enumerate() {
                for (i, &p) in points[usize::from(k) * dims..][..dims].iter().enumerate() {
                    coords[at + i * padded + j] = f32::from(p);
                }
            }
            *slot = Slot::Off { start: start as u32, len: list.len() as u32, coords: at as u32 };
        }
        Lattice { dims, bits, points, slots, neighbours, coords }
    }

    /// The lattice of IQ2_XXS (256 points), IQ2_XS (512), IQ2_S (1024),
    /// IQ3_XXS (256, 4-d), IQ3_S (512, 4-d) or IQ1_S/IQ1_M (2048).
    pub(super) fn of(grid: Grid) -> &'static Lattice {
        static LATTICES: [OnceLock<Lattice>; 6] = [const { OnceLock::new() }; 6];
        let unsigned = |b: u8| i32::from(b);
        let of_u32 = |p: &u32| {
            let mut point = [0u8; 8];
            point[..4].copy_from_slice(&p.to_le_bytes());
            point
        };
        LATTICES[grid as usize].get_or_init(|| match grid {
            Grid::Iq2Xxs => Lattice::new(8, 2, IQ2XXS_GRID.iter().map(|p| p.to_le_bytes()), unsigned, 2),
            Grid::Iq2Xs => Lattice::new(8, 2, IQ2XS_GRID.iter().map(|p| p.to_le_bytes()), unsigned, 2),
            Grid::Iq2S => Lattice::new(8, 2, IQ2S_GRID.iter().map(|p| p.to_le_bytes()), unsigned, 1),
            Grid::Iq3Xxs => Lattice::new(4, 3, IQ3XXS_GRID.iter().map(of_u32), unsigned, 2),
            Grid::Iq3S => Lattice::new(4, 3, IQ3S_GRID.iter().map(of_u32), unsigned, 3),
            Grid::Iq1S => Lattice::new(8, 2, IQ1S_GRID.iter().map(|p| p.to_le_bytes()), |b| i32::from(b as i8), 3),
        })
    }

    pub(super) fn dims(&self) -> usize {
        self.dims
    }

    /// Grid point `k`'s coordinates (`2l + 1`).
    pub(super) fn point(&self, k: usize) -> &[i8] {
        &self.points[k * self.dims..][..self.dims]
    }

    /// Where the point of levels `levels` (each below the level count) falls.
    pub(super) fn place(&self, levels: &[i8]) -> Place<'_> {
        let code = levels.iter().enumerate().map(|(i, &l)| (l as usize) << (self.bits as usize * i)).sum::<usize>();
        match self.slots[code] {
            Slot::On(k) => Place::OnGrid(usize::from(k)),
            Slot::Off { start, len, coords } => {
                let padded = (len as usize).next_multiple_of(LANES);
                Place::OffGrid(Neighbours {
                    indices: &self.neighbours[start as usize..][..len as usize],
                    coords: &self.coords[coords as usize..][..self.dims * padded],
                })
            }
        }
    }

    /// ggml's `iq2_find_best_neighbour` (and `iq3_…`, `iq1_…2`): the
    /// neighbour of least weighted squared distance from `scale · value(p)`
    /// to `xval` (the first of equals), where `p` runs over the point's
    /// coordinates; writes its levels to `levels` and returns its index.
    /// Where every distance is NaN or infinite ggml stops (or reads past its
    /// arrays); the first neighbour is taken.
    pub(super) fn best_neighbour(
        &self,
        neighbours: &[u16],
        xval: &[f32],
        weight: &[f32],
        scale: f32,
        value: impl Fn(i8) -> f32,
        levels: &mut [i8],
    ) -> usize {
        let mut best_d2 = f32::MAX;
        let mut best = usize::from(neighbours[0]);
        for &k in neighbours {
            let mut d2 = 0.0f32;
            for ((&p, &x), &w) in self.point(usize::from(k)).iter().zip(xval).zip(weight) {
                let diff = scale * value(p) - x;
                d2 += w * diff * diff;
            }
            if d2 < best_d2 {
                best_d2 = d2;
                best = usize::from(k);
            }
        }
        for (l, &p) in levels.iter_mut().zip(self.point(best)) {
            *l = (p - 1) / 2;
        }
        best
    }

    /// The level `l` of a point's coordinate `2l + 1`.
    pub(super) fn level(point_coordinate: i8) -> usize {
        ((point_coordinate - 1) / 2) as usize
    }
}

impl Lattice {
    /// The body of [`AtLevel::nearest`], compiled into each level's wrapper.
    #[inline(always)]
    fn nearest_in(
        &self,
        neighbours: Neighbours<'_>,
        xval: &[f32],
        weight: &[f32],
        scale: f32,
        levels: &mut [i8],
    ) -> usize {
        let n = neighbours.indices.len();
        let padded = n.next_multiple_of(LANES);
        let mut best_d2 = f32::MAX;
        let mut best = usize::from(neighbours.indices[0]);
        for chunk in 0..padded / LANES {
            let mut d2 = [0.0f32; LANES];
            for (i, (&x, &w)) in xval.iter().zip(weight).enumerate().take(self.dims) {
                let q = &neighbours.coords[i * padded + chunk * LANES..][..LANES];
                for (d, &q) in d2.iter_mut().zip(q) {
                    let diff = scale * q - x;
                    *d += w * diff * diff;
                }
            }
            for (lane, &d) in d2.iter().enumerate().take(n - chunk * LANES) {
                if d < best_d2 {
                    best_d2 = d;
                    best = usize::from(neighbours.indices[chunk * LANES + lane]);
                }
            }
        }
        for (l, &p) in levels.iter_mut().zip(self.point(best)) {
            *l = (p - 1) / 2;
        }
        best
    }
}

/// A lattice searched with the vector instructions of a level (or lower,
/// where the machine lacks it).
#[derive(Clone, Copy)]
pub(super) struct AtLevel<'a>(pub(super) &'a Lattice, pub(super) Level);

impl std::ops::Deref for AtLevel<'_> {
    type Target = Lattice;

    fn deref(&self) -> &Lattice {
        self.0
    }
}

impl AtLevel<'_> {
    /// [`Lattice::best_neighbour`] with each coordinate's value the
    /// coordinate itself (the IQ2 and IQ3 searches): the same sums, each
    /// accumulated in the same order, [`LANES`] neighbours at a time, so the
    /// compiler's vectorization across neighbours is exact.
    pub(super) fn nearest(
        &self,
        neighbours: Neighbours<'_>,
        xval: &[f32],
        weight: &[f32],
        scale: f32,
        levels: &mut [i8],
    ) -> usize {
        #[cfg(target_arch = "x86_64")]
        {
            if self.1 >= Level::Avx512 && Level::Avx512.is_supported() {
                // SAFETY: AVX-512 F is present (checked just above).
                return unsafe { self.nearest_avx512(neighbours, xval, weight, scale, levels) };
            }
            if self.1 >= Level::Avx2 && Level::Avx2.is_supported() {
                // SAFETY: AVX2 is present (checked just above).
                return unsafe { self.nearest_avx2(neighbours, xval, weight, scale, levels) };
            }
        }
        self.0.nearest_in(neighbours, xval, weight, scale, levels)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn nearest_avx512(
        &self,
        neighbours: Neighbours<'_>,
        xval: &[f32],
        weight: &[f32],
        scale: f32,
        levels: &mut [i8],
    ) -> usize {
        self.0.nearest_in(neighbours, xval, weight, scale, levels)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn nearest_avx2(
        &self,
        neighbours: Neighbours<'_>,
        xval: &[f32],
        weight: &[f32],
        scale: f32,
        levels: &mut [i8],
    ) -> usize {
        self.0.nearest_in(neighbours, xval, weight, scale, levels)
    }
}

/// The grids with a lattice of their own.
#[derive(Clone, Copy)]
pub(super) enum Grid {
    Iq2Xxs,
    Iq2Xs,
    Iq2S,
    Iq3Xxs,
    Iq3S,
    Iq1S,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The quantizers start every point at level 0 and at grid index 0
    /// before any trial wins; that is one point only if code 0 is grid point 0.
    #[test]
    fn the_lowest_point_of_every_lattice_is_its_first() {
        for grid in [Grid::Iq2Xxs, Grid::Iq2Xs, Grid::Iq2S, Grid::Iq3Xxs, Grid::Iq3S, Grid::Iq1S] {
            let lattice = Lattice::of(grid);
            assert!(matches!(lattice.place(&vec![0; lattice.dims()]), Place::OnGrid(0)));
        }
    }

    /// The vectorized neighbour search picks what the scalar definition
    /// picks, at every level, ties (integer values) included.
    #[test]
    fn nearest_equals_the_scalar_search_at_every_level() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for grid in [Grid::Iq2Xxs, Grid::Iq2Xs, Grid::Iq2S, Grid::Iq3Xxs, Grid::Iq3S] {
            let lattice = Lattice::of(grid);
            let dims = lattice.dims();
            let n_levels = if dims == 8 { 3 } else { 8 };
            let mut checked = 0;
            while checked < 300 {
                let levels: Vec<i8> = (0..dims).map(|_| (next() % n_levels) as i8).collect();
                let Place::OffGrid(neighbours) = lattice.place(&levels) else { continue };
                let tie = next() % 2 == 0;
                let value = |r: u64| if tie { (r % 5) as f32 } else { (r % 10_000) as f32 / 997.0 };
                let xval: Vec<f32> = (0..dims).map(|_| value(next())).collect();
                let weight: Vec<f32> = (0..dims).map(|_| value(next())).collect();
                let scale = if tie { 1.0 } else { value(next()) / 3.0 };
                let mut expected = vec![0i8; dims];
                let want = lattice.best_neighbour(neighbours.indices, &xval, &weight, scale, f32::from, &mut expected);
                for level in crate::codecs::simd::supported() {
                    let mut got = vec![0i8; dims];
                    let found = AtLevel(lattice, level).nearest(neighbours, &xval, &weight, scale, &mut got);
                    assert_eq!((found, &got), (want, &expected), "{} at {}", dims, level.name());
                }
                checked += 1;
            }
        }
    }

    /// ggml's neighbour lists hold every grid point at the `nwant` nearest
    /// distances; checked here for one off-grid point of IQ2_XXS by brute force.
    #[test]
    fn an_off_grid_point_lists_the_grid_points_at_its_two_nearest_distances() {
        let lattice = Lattice::of(Grid::Iq2Xxs);
        let levels = [2i8, 2, 2, 2, 2, 2, 2, 2];
        let Place::OffGrid(neighbours) = lattice.place(&levels) else { panic!("all-2 is not an IQ2_XXS point") };
        let neighbours = neighbours.indices;
        let distance = |k: usize| -> i32 {
            lattice.point(k).iter().zip(levels).map(|(&p, l)| i32::from(p - (2 * l + 1)).pow(2)).sum()
        };
        let mut all: Vec<i32> = (0..256).map(distance).collect();
        all.sort_unstable();
        all.dedup();
        let expected: Vec<u16> = (0..256).filter(|&k| distance(k) <= all[1]).map(|k| k as u16).collect();
        let mut listed = neighbours.to_vec();
        listed.sort_unstable();
        assert_eq!(listed, expected);
    }
}
