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

/// A cube point's place in four bytes (the table of 65,536 slots then
/// stays in cache beside the lists): on the grid with its index, or off it
/// with the place of its neighbour list — the list's first chunk of
/// [`LANES`] and its length (lists start on a chunk and are padded to one).
#[derive(Clone, Copy)]
struct Slot(u32);

impl Slot {
    const ON_GRID: u32 = 1 << 31;
    const LEN_BITS: u32 = 9;

    fn on(k: usize) -> Slot {
        Slot(Slot::ON_GRID | k as u32)
    }

    fn off(start: usize, len: usize) -> Slot {
        assert!(start.is_multiple_of(LANES) && len < 1 << Slot::LEN_BITS && start / LANES < 1 << (31 - Slot::LEN_BITS));
        Slot(((start / LANES) as u32) << Slot::LEN_BITS | len as u32)
    }

    fn is_on(self) -> bool {
        self.0 & Slot::ON_GRID != 0
    }
}

/// Neighbour coordinates are evaluated this many at a time (one AVX2
/// register): lists are padded to a multiple of it. Lists are short (a
/// median of 5 to 62 points by lattice), so wider chunks would mostly
/// compute padding.
const LANES: usize = 8;

pub(super) struct Lattice {
    /// Coordinates per point: 8, or 4 for the IQ3 grids.
    dims: usize,
    /// Bits per coordinate in a point's code (ggml's map index).
    bits: u32,
    /// Grid point `k`'s coordinates `2l + 1` at `points[k·dims..][..dims]`.
    points: Vec<i8>,
    /// Indexed by code: `Σ l_i << (bits·i)`.
    slots: Vec<Slot>,
    /// Each neighbour list, padded to a whole chunk (with index 0).
    neighbours: Vec<u16>,
    /// Each neighbour list's coordinates, coordinate-major: for a list at
    /// `start` of `n` points padded to `p`, coordinate `i` of point `j` at
    /// `dims·start + i·p + j`, so one coordinate of many points is
    /// contiguous. Bytes, not floats: the lists of a lattice then fit a
    /// core's L2 cache.
    coords: Vec<i8>,
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
    coords: &'a [i8],
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
        let mut slots = vec![Slot::off(0, 0); 1 << (bits as usize * dims)];
        for (k, point) in points.chunks_exact(dims).enumerate() {
            let code =
                point.iter().enumerate().map(|(i, &p)| (((p - 1) / 2) as usize) << (bits as usize * i)).sum::<usize>();
            slots[code] = Slot::on(k);
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
            if !reachable || slot.is_on() {
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
            let len = neighbours.len() - start;
            let padded = len.next_multiple_of(LANES);
            let at = coords.len();
            coords.resize(at + dims * padded, 0);
            for (j, &k) in neighbours[start..].iter().enumerate() {
                for (i, &p) in points[usize::from(k) * dims..][..dims].iter().enumerate() {
                    coords[at + i * padded + j] = p;
                }
            }
            debug_assert_eq!(at, dims * start);
            neighbours.resize(start + padded, 0);
            *slot = Slot::off(start, len);
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
    #[inline(always)]
    pub(super) fn place(&self, levels: &[i8]) -> Place<'_> {
        let code = levels.iter().enumerate().map(|(i, &l)| (l as usize) << (self.bits as usize * i)).sum::<usize>();
        let slot = self.slots[code];
        if slot.is_on() {
            return Place::OnGrid((slot.0 & !Slot::ON_GRID) as usize);
        }
        let start = (slot.0 >> Slot::LEN_BITS) as usize * LANES;
        let len = (slot.0 & ((1 << Slot::LEN_BITS) - 1)) as usize;
        Place::OffGrid(Neighbours {
            indices: &self.neighbours[start..][..len],
            coords: &self.coords[self.dims * start..][..self.dims * len.next_multiple_of(LANES)],
        })
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
        self.write_levels(best, levels);
        best
    }

    /// Grid point `k`'s levels.
    fn write_levels(&self, k: usize, levels: &mut [i8]) {
        for (l, &p) in levels.iter_mut().zip(self.point(k)) {
            *l = Lattice::level(p) as i8;
        }
    }

    /// The level `l` of a point's coordinate `2l + 1`.
    pub(super) fn level(point_coordinate: i8) -> usize {
        ((point_coordinate - 1) / 2) as usize
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
    /// coordinate itself (the IQ2 and IQ3 searches), [`LANES`] neighbours at
    /// a time where the machine has AVX2.
    #[inline(always)]
    pub(super) fn nearest(
        &self,
        neighbours: Neighbours<'_>,
        xval: &[f32],
        weight: &[f32],
        scale: f32,
        levels: &mut [i8],
    ) -> usize {
        #[cfg(target_arch = "x86_64")]
        if self.1 >= Level::Avx2 && Level::Avx2.is_supported() {
            let dims = self.dims;
            // SAFETY: AVX2 is present (checked just above).
            let position = unsafe { nearest_position_avx2(neighbours, &xval[..dims], &weight[..dims], scale) };
            let best = usize::from(neighbours.indices[position]);
            self.write_levels(best, levels);
            return best;
        }
        self.best_neighbour(neighbours.indices, xval, weight, scale, f32::from, levels)
    }
}

/// The position in `neighbours` of [`AtLevel::nearest`]'s choice, with
/// AVX2: lane `j` of a chunk is neighbour `8c + j`, its distance summed in
/// the scalar order (`(w · diff) · diff`, no fused multiply-add), so every
/// distance is the scalar one. Each lane keeps the first of its least
/// distances and the chunk it came from (an ordered `<`, so a NaN never
/// wins); the scalar scan's choice, the first neighbour of least distance,
/// is then the least over the lanes, the earliest position on a tie.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn nearest_position_avx2(neighbours: Neighbours<'_>, xval: &[f32], weight: &[f32], scale: f32) -> usize {
    use std::arch::x86_64::*;

    let n = neighbours.indices.len();
    let dims = xval.len();
    let padded = n.next_multiple_of(LANES);
    assert!(weight.len() == dims && neighbours.coords.len() >= dims * padded);
    let vscale = _mm256_set1_ps(scale);
    let lane_ids = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    let mut least = _mm256_set1_ps(f32::MAX);
    let mut least_chunk = _mm256_set1_epi32(-1);
    for chunk in 0..padded / LANES {
        let mut d2 = _mm256_setzero_ps();
        for (i, (&x, &w)) in xval.iter().zip(weight).enumerate() {
            // SAFETY: the eight bytes end at `i·padded + chunk·8 + 8 ≤ dims·padded`, inside `coords` (asserted above).
            let q = unsafe { _mm_loadl_epi64(neighbours.coords.as_ptr().add(i * padded + chunk * LANES).cast()) };
            let q = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q));
            let diff = _mm256_sub_ps(_mm256_mul_ps(vscale, q), _mm256_set1_ps(x));
            d2 = _mm256_add_ps(d2, _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(w), diff), diff));
        }
        let real = _mm256_cmpgt_epi32(_mm256_set1_epi32((n - chunk * LANES) as i32), lane_ids);
        let better = _mm256_and_ps(_mm256_cmp_ps::<_CMP_LT_OQ>(d2, least), _mm256_castsi256_ps(real));
        least = _mm256_blendv_ps(least, d2, better);
        least_chunk = _mm256_blendv_epi8(least_chunk, _mm256_set1_epi32(chunk as i32), _mm256_castps_si256(better));
    }
    let (mut lane_least, mut lane_chunk) = ([0.0f32; LANES], [0i32; LANES]);
    // SAFETY: both arrays hold exactly one vector.
    unsafe {
        _mm256_storeu_ps(lane_least.as_mut_ptr(), least);
        _mm256_storeu_si256(lane_chunk.as_mut_ptr().cast(), least_chunk);
    }
    let (mut best, mut best_d2) = (0, f32::MAX);
    for (lane, (&d, &chunk)) in lane_least.iter().zip(&lane_chunk).enumerate() {
        let Ok(chunk) = usize::try_from(chunk) else { continue };
        let position = chunk * LANES + lane;
        if d < best_d2 || (d == best_d2 && position < best) {
            (best, best_d2) = (position, d);
        }
    }
    best
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
                // Ties, plain values, distances that overflow to infinity,
                // and a NaN weight that makes every distance NaN.
                let mode = next() % 4;
                let value = |r: u64| match mode {
                    0 => (r % 5) as f32,
                    2 => (r % 10_000) as f32 * 3e34,
                    _ => (r % 10_000) as f32 / 997.0,
                };
                let xval: Vec<f32> = (0..dims).map(|_| value(next())).collect();
                let mut weight: Vec<f32> = (0..dims).map(|_| value(next())).collect();
                if mode == 3 {
                    weight[0] = f32::NAN;
                }
                let scale = if mode == 0 { 1.0 } else { value(next()) / 3.0 };
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
