//! Which vector instructions the codecs use, chosen once at start-up.
//!
//! Every kernel has a scalar reference that defines its bytes; a vector
//! version must produce the same bytes and is tested against it at every
//! level the machine has. `QUANTFORGE_SIMD=scalar|avx2|avx512` forces a
//! lower level (to test it, or to rule it out); a level the machine lacks is
//! never chosen. The levels are x86-64's; an aarch64 NEON level slots in the
//! same way.

use std::sync::OnceLock;

/// An instruction-set level, lowest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Scalar,
    /// AVX2 with FMA-free arithmetic (x86-64).
    Avx2,
    /// AVX-512 F and BW (x86-64).
    Avx512,
}

impl Level {
    pub const ALL: [Level; 3] = [Level::Scalar, Level::Avx2, Level::Avx512];

    pub fn name(self) -> &'static str {
        match self {
            Level::Scalar => "scalar",
            Level::Avx2 => "avx2",
            Level::Avx512 => "avx512",
        }
    }

    /// Whether this machine can run the level.
    pub fn is_supported(self) -> bool {
        match self {
            Level::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Level::Avx2 => std::arch::is_x86_feature_detected!("avx2"),
            #[cfg(target_arch = "x86_64")]
            Level::Avx512 => {
                std::arch::is_x86_feature_detected!("avx512f") && std::arch::is_x86_feature_detected!("avx512bw")
            }
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }
}

/// The level the codecs use: the highest the machine supports, or lower
/// when `QUANTFORGE_SIMD` asks.
pub fn level() -> Level {
    static LEVEL: OnceLock<Level> = OnceLock::new();
    *LEVEL.get_or_init(|| {
        let best = Level::ALL.into_iter().rev().find(|l| l.is_supported()).unwrap_or(Level::Scalar);
        let asked =
            std::env::var("QUANTFORGE_SIMD").ok().and_then(|name| Level::ALL.into_iter().find(|l| l.name() == name));
        asked.map_or(best, |asked| asked.min(best))
    })
}

/// Every level this machine can run (for differential tests).
pub fn supported() -> Vec<Level> {
    Level::ALL.into_iter().filter(|l| l.is_supported()).collect()
}
