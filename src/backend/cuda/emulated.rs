//! The kernels run on the host (`emulate/host_prelude.h`): the same
//! sources, grids and item counts as on a GPU, so tests prove each kernel's
//! bytes equal to the Rust codecs' on machines without one.

use std::ffi::{CString, c_char, c_int, c_uint, c_ulonglong, c_void};

use super::kernels::{Direction, Kernel, THREADS};
use crate::types::GgmlType;

unsafe extern "C" {
    fn qf_emulate_launch(
        name: *const c_char,
        grid: c_uint,
        threads: c_uint,
        source: *const c_void,
        destination: *mut c_void,
        n: c_ulonglong,
        importance: *const f32,
        n_per_row: c_ulonglong,
    ) -> c_int;
}

/// Runs `kernel` over `items` items from `source` into `destination`, whose
/// lengths must hold them.
fn launch(kernel: &Kernel, items: u64, source: &[u8], destination: &mut [u8]) {
    launch_weighted(kernel, items, source, destination, None);
}

/// [`launch`] with a row of importance weights (one per column of rows of
/// its length).
fn launch_weighted(kernel: &Kernel, items: u64, source: &[u8], destination: &mut [u8], importance: Option<&[f32]>) {
    let name = CString::new(kernel.name).expect("kernel names hold no NUL");
    let grid = c_uint::try_from(kernel.grid(items)).expect("an emulated grid fits u32");
    // SAFETY: the kernel reads `items` items of its input from `source` and
    // writes as many of its output to `destination`; callers size both.
    let (weights, n_per_row) = importance.map_or((std::ptr::null(), 1), |w| (w.as_ptr(), w.len() as u64));
    let status = unsafe {
        qf_emulate_launch(
            name.as_ptr(),
            grid,
            THREADS,
            source.as_ptr().cast(),
            destination.as_mut_ptr().cast(),
            items,
            weights,
            n_per_row,
        )
    };
    assert_eq!(status, 0, "kernel {} is not compiled in", kernel.name);
}

/// Decodes whole blocks of `ggml_type` into `out` (one f32 an element);
/// false when no kernel decodes the type.
pub fn decode(ggml_type: GgmlType, source: &[u8], out: &mut [f32]) -> bool {
    let Some(kernel) = super::kernels::find(ggml_type, Direction::Decode) else { return false };
    let items = kernel.items(out.len() as u64);
    assert!(source.len() as u64 >= ggml_type.row_size(out.len() as u64).unwrap_or(u64::MAX), "short source");
    launch(kernel, items, source, bytemuck::cast_slice_mut(out));
    true
}

/// Encodes `values` (rows of `importance.len()` values, when weights are
/// given) as `ggml_type` into `out`; false when no kernel encodes the type
/// with (or without) importance weights.
pub fn encode(ggml_type: GgmlType, values: &[f32], importance: Option<&[f32]>, out: &mut [u8]) -> bool {
    let Some(kernel) = super::kernels::find(ggml_type, Direction::Encode) else { return false };
    if importance.is_some() && !kernel.weighted {
        return false;
    }
    let items = kernel.items(values.len() as u64);
    assert!(out.len() as u64 >= ggml_type.row_size(values.len() as u64).unwrap_or(u64::MAX), "short output");
    launch_weighted(kernel, items, bytemuck::cast_slice(values), out, importance);
    true
}

/// The index of the first NaN or infinity of `values`, by the kernel.
pub fn find_non_finite(values: &[f32]) -> Option<usize> {
    // A u64, aligned for the kernel's atomic minimum.
    let mut first = values.len() as u64;
    launch(
        &super::kernels::FIND_NON_FINITE,
        values.len() as u64,
        bytemuck::cast_slice(values),
        bytemuck::bytes_of_mut(&mut first),
    );
    let first = first as usize;
    (first < values.len()).then_some(first)
}
