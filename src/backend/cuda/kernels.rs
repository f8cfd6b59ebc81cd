//! The CUDA kernels: their sources, and the one table of which kernel
//! decodes or encodes which type with what grid — read by the device
//! backend and by the host emulation alike.

use crate::types::GgmlType;

/// Threads in every kernel's block (`QF_THREADS` in `common.cuh`).
pub const THREADS: u32 = 256;

/// The sources in the order NVRTC (and `emulate.cpp`) reads them.
/// `iq_grids.cuh` is the codecs' IQ tables, written by build.rs.
const SOURCES: [(&str, &str); 10] = [
    ("common.cuh", include_str!("kernels/common.cuh")),
    ("iq_grids.cuh", include_str!(concat!(env!("OUT_DIR"), "/iq_grids.cuh"))),
    ("search.cuh", include_str!("kernels/search.cuh")),
    ("float.cu", include_str!("kernels/float.cu")),
    ("legacy.cu", include_str!("kernels/legacy.cu")),
    ("kquants.cu", include_str!("kernels/kquants.cu")),
    ("ternary.cu", include_str!("kernels/ternary.cu")),
    ("iq4.cu", include_str!("kernels/iq4.cu")),
    ("fp4.cu", include_str!("kernels/fp4.cu")),
    ("iq_grid.cu", include_str!("kernels/iq_grid.cu")),
];

/// What a kernel does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Bytes of its type to f32.
    Decode,
    /// f32 to bytes of its type.
    Encode,
}

#[derive(Debug, Clone, Copy)]
pub struct Kernel {
    pub name: &'static str,
    pub ggml_type: GgmlType,
    pub direction: Direction,
    /// Items one block covers: ggml blocks of a block type, elements of a
    /// float type.
    pub items_per_block: u32,
    /// An encoder that honours importance weights (a row of them, one per
    /// column); the others run without.
    pub weighted: bool,
}

const fn kernel(name: &'static str, ggml_type: GgmlType, direction: Direction, items_per_block: u32) -> Kernel {
    Kernel { name, ggml_type, direction, items_per_block, weighted: false }
}

const fn weighted(mut kernel: Kernel) -> Kernel {
    kernel.weighted = true;
    kernel
}

/// A 32-thread group per ggml block of 32.
const GROUPS: u32 = THREADS / 32;

/// A block per 256-value super-block.
const SUPER_BLOCK: u32 = 1;

/// Super-blocks a block covers when each thread searches one group of
/// `group` values (the K-quant and IQ4_XS encoders; `qf_searched_super_blocks` in
/// `search.cuh`).
const fn searched_super_blocks(group: u32) -> u32 {
    THREADS * group / 256
}

/// A 64-thread group per NVFP4 block of 64.
const NVFP4_GROUPS: u32 = THREADS / 64;

pub static KERNELS: [Kernel; 43] = [
    kernel("qf_copy_f32", GgmlType::F32, Direction::Decode, THREADS),
    kernel("qf_decode_f16", GgmlType::F16, Direction::Decode, THREADS),
    kernel("qf_decode_bf16", GgmlType::BF16, Direction::Decode, THREADS),
    kernel("qf_decode_f64", GgmlType::F64, Direction::Decode, THREADS),
    kernel("qf_encode_f16", GgmlType::F16, Direction::Encode, THREADS),
    kernel("qf_encode_bf16", GgmlType::BF16, Direction::Encode, THREADS),
    kernel("qf_decode_q4_0", GgmlType::Q4_0, Direction::Decode, GROUPS),
    kernel("qf_decode_q4_1", GgmlType::Q4_1, Direction::Decode, GROUPS),
    kernel("qf_decode_q5_0", GgmlType::Q5_0, Direction::Decode, GROUPS),
    kernel("qf_decode_q5_1", GgmlType::Q5_1, Direction::Decode, GROUPS),
    kernel("qf_decode_q8_0", GgmlType::Q8_0, Direction::Decode, GROUPS),
    kernel("qf_decode_q8_1", GgmlType::Q8_1, Direction::Decode, GROUPS),
    weighted(kernel("qf_encode_q4_0", GgmlType::Q4_0, Direction::Encode, GROUPS)),
    weighted(kernel("qf_encode_q4_1", GgmlType::Q4_1, Direction::Encode, GROUPS)),
    weighted(kernel("qf_encode_q5_0", GgmlType::Q5_0, Direction::Encode, GROUPS)),
    weighted(kernel("qf_encode_q5_1", GgmlType::Q5_1, Direction::Encode, GROUPS)),
    kernel("qf_encode_q8_0", GgmlType::Q8_0, Direction::Encode, GROUPS),
    kernel("qf_decode_q2_k", GgmlType::Q2_K, Direction::Decode, SUPER_BLOCK),
    kernel("qf_decode_q3_k", GgmlType::Q3_K, Direction::Decode, SUPER_BLOCK),
    kernel("qf_decode_q4_k", GgmlType::Q4_K, Direction::Decode, SUPER_BLOCK),
    kernel("qf_decode_q5_k", GgmlType::Q5_K, Direction::Decode, SUPER_BLOCK),
    kernel("qf_decode_q6_k", GgmlType::Q6_K, Direction::Decode, SUPER_BLOCK),
    kernel("qf_decode_q8_k", GgmlType::Q8_K, Direction::Decode, SUPER_BLOCK),
    kernel("qf_decode_tq1_0", GgmlType::TQ1_0, Direction::Decode, SUPER_BLOCK),
    kernel("qf_decode_tq2_0", GgmlType::TQ2_0, Direction::Decode, SUPER_BLOCK),
    weighted(kernel("qf_encode_q2_k", GgmlType::Q2_K, Direction::Encode, searched_super_blocks(16))),
    weighted(kernel("qf_encode_q3_k", GgmlType::Q3_K, Direction::Encode, searched_super_blocks(16))),
    weighted(kernel("qf_encode_q4_k", GgmlType::Q4_K, Direction::Encode, searched_super_blocks(32))),
    weighted(kernel("qf_encode_q5_k", GgmlType::Q5_K, Direction::Encode, searched_super_blocks(32))),
    weighted(kernel("qf_encode_q6_k", GgmlType::Q6_K, Direction::Encode, searched_super_blocks(16))),
    kernel("qf_decode_iq4_nl", GgmlType::IQ4_NL, Direction::Decode, GROUPS),
    kernel("qf_decode_iq4_xs", GgmlType::IQ4_XS, Direction::Decode, SUPER_BLOCK),
    kernel("qf_decode_mxfp4", GgmlType::MXFP4, Direction::Decode, GROUPS),
    kernel("qf_decode_nvfp4", GgmlType::NVFP4, Direction::Decode, NVFP4_GROUPS),
    kernel("qf_decode_iq2_xxs", GgmlType::IQ2_XXS, Direction::Decode, SUPER_BLOCK),
    kernel("qf_decode_iq2_xs", GgmlType::IQ2_XS, Direction::Decode, SUPER_BLOCK),
    kernel("qf_decode_iq2_s", GgmlType::IQ2_S, Direction::Decode, SUPER_BLOCK),
    kernel("qf_decode_iq3_xxs", GgmlType::IQ3_XXS, Direction::Decode, SUPER_BLOCK),
    kernel("qf_decode_iq3_s", GgmlType::IQ3_S, Direction::Decode, SUPER_BLOCK),
    kernel("qf_decode_iq1_s", GgmlType::IQ1_S, Direction::Decode, SUPER_BLOCK),
    kernel("qf_decode_iq1_m", GgmlType::IQ1_M, Direction::Decode, SUPER_BLOCK),
    weighted(kernel("qf_encode_iq4_nl", GgmlType::IQ4_NL, Direction::Encode, THREADS)),
    weighted(kernel("qf_encode_iq4_xs", GgmlType::IQ4_XS, Direction::Encode, searched_super_blocks(32))),
];

/// The first non-finite value of an f32 buffer (`float.cu`).
pub const FIND_NON_FINITE: Kernel = kernel("qf_find_non_finite", GgmlType::F32, Direction::Decode, THREADS);

/// The kernel that moves `ggml_type` in `direction`, if there is one.
pub fn find(ggml_type: GgmlType, direction: Direction) -> Option<&'static Kernel> {
    KERNELS.iter().find(|k| k.ggml_type == ggml_type && k.direction == direction)
}

impl Kernel {
    /// Items in `n_elements` values of the kernel's type.
    pub fn items(&self, n_elements: u64) -> u64 {
        n_elements / self.ggml_type.block_size()
    }

    /// Blocks in the grid for `items` items.
    pub fn grid(&self, items: u64) -> u64 {
        items.div_ceil(u64::from(self.items_per_block))
    }
}

/// Every kernel as one NVRTC program: `QF_KERNEL` makes each an
/// `extern "C"` entry point.
pub fn program() -> String {
    let mut text = String::from("#define QF_KERNEL(name) extern \"C\" __global__ void name\n");
    for (name, source) in SOURCES {
        text.push_str(&format!("// {name}\n{source}\n"));
    }
    text
}

/// NVRTC's options besides the architecture: no contraction of a multiply
/// and an add (the CPU codecs never fuse), IEEE division and square root.
pub const NVRTC_OPTIONS: [&str; 4] = ["--fmad=false", "--prec-div=true", "--prec-sqrt=true", "--ftz=false"];

/// The blake3 of the program and its options: with the NVRTC version and
/// the compute capability, the key of a compiled module.
pub fn program_hash() -> blake3::Hash {
    let mut hasher = blake3::Hasher::new();
    hasher.update(program().as_bytes());
    for option in NVRTC_OPTIONS {
        hasher.update(option.as_bytes());
    }
    hasher.finalize()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kernel_is_in_the_program_once_and_types_have_one_kernel_a_direction() {
        let program = program();
        for k in KERNELS.iter().chain([&FIND_NON_FINITE]) {
            assert_eq!(program.matches(&format!("QF_KERNEL({})", k.name)).count(), 1, "{}", k.name);
        }
        for k in &KERNELS {
            assert!(std::ptr::eq(find(k.ggml_type, k.direction).unwrap(), k), "{} twice", k.name);
        }
    }

    /// The values of the kernels' table `name` (an array of hex literals).
    fn grid_table(name: &str) -> Vec<u64> {
        let program = program();
        let start = program.find(&format!(" {name}[")).unwrap_or_else(|| panic!("no table {name}"));
        let body = &program[start..];
        let body = &body[body.find('{').unwrap() + 1..body.find('}').unwrap()];
        body.split(", ").map(|v| u64::from_str_radix(v.trim_start_matches("0x"), 16).unwrap()).collect()
    }

    /// The IQ grids are written into the program from the codecs' tables
    /// at build time: every value arrives.
    #[test]
    fn the_kernels_iq_grids_are_the_codecs() {
        use crate::codecs::iq_tables::*;
        let widen = |t: &[u32]| t.iter().map(|&v| u64::from(v)).collect::<Vec<_>>();
        assert_eq!(grid_table("qf_iq2xxs_grid"), IQ2XXS_GRID);
        assert_eq!(grid_table("qf_iq2xs_grid"), IQ2XS_GRID);
        assert_eq!(grid_table("qf_iq2s_grid"), IQ2S_GRID);
        assert_eq!(grid_table("qf_iq1s_grid"), IQ1S_GRID);
        assert_eq!(grid_table("qf_iq3xxs_grid"), widen(&IQ3XXS_GRID));
        assert_eq!(grid_table("qf_iq3s_grid"), widen(&IQ3S_GRID));
        assert_eq!(grid_table("qf_ksigns_iq2xs"), KSIGNS_IQ2XS.map(u64::from));
        assert_eq!(grid_table("qf_kmask_iq2xs"), KMASK_IQ2XS.map(u64::from));
        assert!(program().contains(&format!("#define QF_IQ1S_DELTA {IQ1S_DELTA}f")));
    }

    /// The value tables the kernels carry are ggml's, as the codecs hold them.
    #[test]
    fn the_kernels_tables_are_the_codecs() {
        let tables =
            [("qf_kvalues", crate::codecs::blocks::KVALUES), ("qf_e2m1_doubled", crate::codecs::fp4::E2M1_DOUBLED)];
        for (name, table) in tables {
            let values: Vec<String> = table.iter().map(|v| v.to_string()).collect();
            let line = format!("{name}[16] = {{{}}};", values.join(", "));
            assert!(program().contains(&line), "the kernels' table differs from {line}");
        }
    }

    /// The grid the table gives a kernel is the one its source assumes.
    #[test]
    fn the_kernels_block_shapes_are_the_tables() {
        let program = program();
        assert!(program.contains(&format!("#define QF_THREADS {THREADS}\n")));
        assert!(program.contains("#define QK_K 256\n"));
        assert!(program.contains("qf_searched_super_blocks(int n) { return QF_THREADS * n / QK_K; }"));
    }
}
