//! FP8 scales as `convert` reads them: any `quantization_config` is taken or
//! refused, and any weight and scale shapes (with or without a block size)
//! either fit, and then every weight element is scaled from a scale inside
//! the tensor (a run of the weight from any element on), or are refused —
//! never a panic or a read past the scales.

#![no_main]

use libfuzzer_sys::fuzz_target;
use quantforge::convert::{Fp8, WeightScale};

fuzz_target!(|data: &[u8]| {
    if let Ok(config) = serde_json::from_slice::<serde_json::Value>(data) {
        let _ = Fp8::of(&serde_json::json!({ "quantization_config": config }));
        return;
    }
    let mut bytes = data.iter().copied();
    let mut next = || bytes.next().unwrap_or(0);
    let dims = |n: u8, next: &mut dyn FnMut() -> u8| (0..n % 5).map(|_| u64::from(next() % 17)).collect::<Vec<u64>>();
    let n = next();
    let weight = dims(n, &mut next);
    let n = next();
    let scale = dims(n, &mut next);
    let block = match next() % 3 {
        0 => None,
        _ => Some([u64::from(next()), u64::from(next())]),
    };
    let scale_len = scale.iter().product::<u64>() as usize;
    let values: Vec<f32> = (0..scale_len).map(|i| i as f32 + 1.0).collect();
    let Ok(scales) = WeightScale::new(&weight, &scale, block, values) else { return };
    let n_weight = weight.iter().product::<u64>() as usize;
    let first = usize::from(next()) * 7 % n_weight.max(1);
    let len = (usize::from(next()) * 13 % (n_weight - first + 1)).min(n_weight - first);
    let mut run = vec![1f32; len];
    scales.apply(first, &mut run);
    assert!(run.iter().all(|v| *v >= 1.0 && *v <= scale_len as f32));
});
