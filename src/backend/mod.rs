//! Compute backends: where tensor conversions run.
//!
//! Every conversion of tensor bytes — decode, encode with optional
//! importance weights, requantize — goes through a [`Backend`] a slab of
//! rows at a time. Backends differ in speed only: each writes the bytes the
//! scalar codecs define (`docs/CODECS.md`), so the backend is never part of
//! a key. A recipe node asks for one by name ([`Choice`]); the engine
//! resolves every node's choice when the run is planned, so a backend this
//! machine cannot provide fails the run before any work, whatever the cache
//! holds. Only `auto` chooses for itself: what `--backend` names, or else
//! a CUDA device when one opens and passes its check (`cuda::check`) for
//! slabs of at least [`AUTO_CUDA_MIN_VALUES`], the CPU for the rest.
//!
//! How to add a backend: implement [`Backend`] in a module of its own here,
//! give it a [`Choice`] name, and resolve that name in [`resolve`].

mod cpu;
pub mod cuda;

use std::sync::{Arc, OnceLock};

pub use cpu::CpuBackend;

use crate::codecs::CodecError;
use crate::codecs::simd::{self, Level};
use crate::store::Store;
use crate::types::GgmlType;

/// Rows of one tensor to convert from one type to another.
#[derive(Debug, Clone, Copy)]
pub struct Slab<'a> {
    pub from: GgmlType,
    pub to: GgmlType,
    /// Elements per row.
    pub n_per_row: usize,
    /// The tensor row that `source` starts with (for importance weights and
    /// messages).
    pub first_row: usize,
    /// Rows per expert: importance weights hold one row of weights each.
    pub rows_per_expert: usize,
    /// Whole rows of `from`.
    pub source: &'a [u8],
    /// One row of weights per expert (`n_per_row` values each), if any.
    pub importance: Option<&'a [f32]>,
    /// The tensor row of each of the slab's rows, when they are not the
    /// consecutive rows from `first_row` (the budget planner's samples).
    pub row_numbers: Option<&'a [usize]>,
}

impl Slab<'_> {
    pub fn rows(&self) -> usize {
        let row = self.from.row_size(self.n_per_row as u64).unwrap_or(0) as usize;
        self.source.len().checked_div(row).unwrap_or(0)
    }

    /// The tensor row of the slab's row `r`.
    pub fn row_number(&self, r: usize) -> usize {
        self.row_numbers.and_then(|rows| rows.get(r).copied()).unwrap_or(self.first_row + r)
    }

    /// The importance weights of tensor row `row`.
    pub fn weights_of(&self, row: usize) -> Option<&[f32]> {
        let expert = row / self.rows_per_expert.max(1);
        self.importance.and_then(|w| w.get(expert * self.n_per_row..(expert + 1) * self.n_per_row))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SlabError {
    #[error(transparent)]
    Codec(#[from] CodecError),
    /// A decoded value that is NaN or infinite: llama.cpp refuses to
    /// quantize such weights, and so do we.
    #[error("row {row} holds {value}; llama.cpp refuses to quantize non-finite weights too")]
    NonFinite { row: usize, value: f32 },
}

/// Kernels for tensor conversions.
pub trait Backend: Send + Sync {
    /// The name the run report shows (`cpu-avx512`).
    fn name(&self) -> String;

    /// Decodes the slab's rows (of `slab.from`; `slab.to` is ignored) into
    /// `out`, one f32 per element.
    fn decode(&self, slab: &Slab<'_>, out: &mut [f32]) -> Result<(), CodecError>;

    /// Converts the slab's rows into `out` (rows of `slab.to`), refusing a
    /// non-finite decoded value.
    fn convert(&self, slab: &Slab<'_>, out: &mut [u8]) -> Result<(), SlabError>;

    /// The name of what runs `slab` (a backend may hand some types to
    /// another): its decode, or with `encoding` its conversion.
    fn ran_on(&self, _slab: &Slab<'_>, _encoding: bool) -> String {
        self.name()
    }
}

/// The backend a node asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Choice {
    /// The fastest this machine has.
    #[default]
    Auto,
    /// The CPU at its best vector level (`QUANTFORGE_SIMD` may lower it).
    Cpu,
    /// The CPU at exactly this vector level.
    CpuAt(Level),
    Cuda,
}

impl Choice {
    pub const NAMES: [&str; 6] = ["auto", "cpu", "cpu-scalar", "cpu-avx2", "cpu-avx512", "cuda"];

    pub fn from_name(name: &str) -> Option<Choice> {
        match name {
            "auto" => Some(Choice::Auto),
            "cpu" => Some(Choice::Cpu),
            "cuda" => Some(Choice::Cuda),
            _ => {
                let level = name.strip_prefix("cpu-")?;
                Level::ALL.into_iter().find(|l| l.name() == level).map(Choice::CpuAt)
            }
        }
    }

    pub fn name(self) -> String {
        match self {
            Choice::Auto => "auto".into(),
            Choice::Cpu => "cpu".into(),
            Choice::CpuAt(level) => format!("cpu-{}", level.name()),
            Choice::Cuda => "cuda".into(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BackendError {
    #[error("backend `{asked}` is not available: this CPU runs {}", have.join(", "))]
    MissingLevel { asked: String, have: Vec<String> },
    #[error("backend `cuda` is not available: {0}; use `auto` or `cpu`")]
    NoCuda(String),
}

/// The fewest values a slab sends to the device under `auto`. Below it the
/// copies and launches outweigh the arithmetic: a slab costs the device
/// ~50 µs in launches and synchronisation however small, and the CPU's
/// cores encode K-quants at ~2·10⁹ values a second, so slabs under ~10⁵
/// values finish sooner on the CPU. Norms and biases stay there; matrices
/// (a slab is up to 2²⁰ values) go to the device.
pub const AUTO_CUDA_MIN_VALUES: u64 = 1 << 18;

/// What `auto` resolves to when the command line names a backend
/// (`--backend`); set once, before anything is resolved.
static DEFAULT: OnceLock<Choice> = OnceLock::new();

/// Makes `auto` mean `choice` for the rest of the process.
pub fn set_default(choice: Choice) {
    let _ = DEFAULT.set(choice);
}

/// The backend for `choice` on this machine.
pub fn resolve(choice: Choice) -> Result<Arc<dyn Backend>, BackendError> {
    resolve_with_store(choice, None)
}

/// The backend for `choice`, with `store` keeping what it compiles (the
/// CUDA kernels' PTX).
pub fn resolve_with_store(choice: Choice, store: Option<&dyn Store>) -> Result<Arc<dyn Backend>, BackendError> {
    tracing::trace!("backend: {} asked", choice.name());
    match choice {
        Choice::Auto => match DEFAULT.get() {
            Some(&default) if default != Choice::Auto => resolve_with_store(default, store),
            _ => match cuda::open(store) {
                Ok(opened) => Ok(Arc::new(opened.backend().from_values(AUTO_CUDA_MIN_VALUES))),
                Err(why) => {
                    tracing::debug!("auto: no CUDA ({why}); the CPU runs");
                    Ok(Arc::new(CpuBackend::new(simd::level())))
                }
            },
        },
        Choice::Cpu => Ok(Arc::new(CpuBackend::new(simd::level()))),
        Choice::CpuAt(level) if level.is_supported() => Ok(Arc::new(CpuBackend::new(level))),
        Choice::CpuAt(_) => Err(BackendError::MissingLevel {
            asked: choice.name(),
            have: simd::supported().into_iter().map(|l| format!("cpu-{}", l.name())).collect(),
        }),
        Choice::Cuda => match cuda::open(store) {
            Ok(opened) => Ok(Arc::new(opened.backend())),
            Err(why) => Err(BackendError::NoCuda(why)),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for name in Choice::NAMES {
            assert_eq!(Choice::from_name(name).map(Choice::name).as_deref(), Some(name));
        }
        assert_eq!(Choice::from_name("cpu-neon"), None);
    }

    #[test]
    fn unavailable_backends_are_errors_naming_what_there_is() {
        assert!(matches!(resolve(Choice::Cuda).err(), Some(BackendError::NoCuda(_))));
        assert_eq!(resolve(Choice::CpuAt(Level::Scalar)).unwrap().name(), "cpu-scalar");
        if let Some(missing) = Level::ALL.into_iter().find(|l| !l.is_supported()) {
            let message = resolve(Choice::CpuAt(missing)).err().unwrap().to_string();
            assert!(message.contains("this CPU runs cpu-scalar"), "{message}");
        }
    }
}
