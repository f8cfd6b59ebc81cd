//! MXFP4 codes and scales as `convert` repacks them: any pair of shapes
//! (and any selection of every other row) either fits, and then every row
//! repacks to its scale bytes and its codes' nibbles moved (the same
//! nibbles, block by block), or is refused — never a panic or a read past
//! either tensor.

#![no_main]

use libfuzzer_sys::fuzz_target;
use quantforge::artifact::RowRange;
use quantforge::convert::mxfp4::{repacked_dims, repacked_rows};
use quantforge::formats::{ModelFile, OpenOptions};

/// A SafeTensors file of U8 tensors `w_blocks` and `w_scales` (PyTorch
/// order shapes), their bytes from `fill`.
fn safetensors(blocks: &[u64], scales: &[u64], fill: &[u8]) -> Vec<u8> {
    let (n_blocks, n_scales) = (blocks.iter().product::<u64>(), scales.iter().product::<u64>());
    let header = format!(
        r#"{{"w_blocks":{{"dtype":"U8","shape":{blocks:?},"data_offsets":[0,{n_blocks}]}},"w_scales":{{"dtype":"U8","shape":{scales:?},"data_offsets":[{n_blocks},{}]}}}}"#,
        n_blocks + n_scales
    );
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(header.as_bytes());
    file.extend((0..n_blocks + n_scales).map(|i| fill.get(i as usize % fill.len().max(1)).copied().unwrap_or(0)));
    file
}

fuzz_target!(|data: &[u8]| {
    let mut bytes = data.iter().copied();
    let mut next = || bytes.next().unwrap_or(0);
    let dims = |n: u8, next: &mut dyn FnMut() -> u8| (0..n % 5).map(|_| u64::from(next() % 20)).collect::<Vec<u64>>();
    let n = next();
    let blocks = dims(n, &mut next);
    let n = next();
    let scales = dims(n, &mut next);
    let rows = match next() % 3 {
        0 => None,
        start => Some(RowRange { group: 2, start: usize::from(start - 1), len: 1 }),
    };
    let fill: Vec<u8> = bytes.collect();
    let dir = std::env::temp_dir().join(format!("quantforge-fuzz-mxfp4-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join("model.safetensors");
    std::fs::write(&path, safetensors(&blocks, &scales, &fill)).unwrap();
    let Ok(model) = ModelFile::open(&path, OpenOptions { use_mmap: true }) else { return };
    let [codes, exponents] = [&model.tensors[0], &model.tensors[1]];
    let Ok(dims) = repacked_dims(codes, exponents, rows) else { return };
    let n_rows = dims[1..].iter().product::<u64>() as usize;
    let out = repacked_rows((&model, codes), (&model, exponents), rows, 0, n_rows).expect("a fitting pair repacks");
    let block_bytes = 17;
    assert_eq!(out.len() as u64, n_rows as u64 * dims[0] / 32 * block_bytes);
    let ones = |b: &[u8]| b.iter().map(|b| b.count_ones()).sum::<u32>();
    if rows.is_none() {
        let source = model.tensor_data(codes).unwrap();
        // Read as 16-bit values: the low byte of each is the stored byte.
        let stored: Vec<u8> = source.chunks_exact(2).map(|v| v[0]).collect();
        let repacked: Vec<u8> = out.chunks_exact(block_bytes as usize).flat_map(|b| b[1..].to_vec()).collect();
        assert_eq!(ones(&stored), ones(&repacked));
    }
});
