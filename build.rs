//! Compiles the CUDA kernels for the host (src/backend/cuda/emulate), so
//! tests run every kernel without a GPU. The GPU build of the same sources
//! happens at run time, through NVRTC.

fn main() {
    let dir = "src/backend/cuda";
    println!("cargo:rerun-if-changed={dir}/emulate");
    println!("cargo:rerun-if-changed={dir}/kernels");
    cc::Build::new()
        .cpp(true)
        .file(format!("{dir}/emulate/emulate.cpp"))
        .std("c++20")
        .opt_level(2)
        .flag("-ffp-contract=off")
        .flag("-fno-fast-math")
        .flag("-pthread")
        .warnings(true)
        .compile("quantforge_cuda_emulation");
    println!("cargo:rustc-link-lib=pthread");
}
