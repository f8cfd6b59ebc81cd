//! Feeds arbitrary bytes, read as a model file, to the split planner
//! (`plan-devices`) for 1 to 4 devices, equal and weighted: whatever the
//! metadata claims (head counts, widths, recurrent layers, state sizes),
//! a plan is made or refused with an error, never a panic; a plan made
//! places every split tensor's extents within its segments.

#![no_main]

use libfuzzer_sys::fuzz_target;
use quantforge::arch::split::{self, Axis, Devices};
use quantforge::formats::{ModelFile, OpenOptions};

fuzz_target!(|data: &[u8]| {
    let shm = std::path::Path::new("/dev/shm");
    let base = if shm.is_dir() { shm.to_owned() } else { std::env::temp_dir() };
    let path = base.join(format!("quantforge-fuzz-plan-{}.gguf", std::process::id()));
    std::fs::write(&path, data).unwrap();
    let Ok(model) = ModelFile::open(&path, OpenOptions::default()) else { return };
    for (count, weights) in [(1, None), (2, None), (3, Some(vec![2.0, 1.0, 1.0])), (4, None)] {
        let devices = Devices::new(count, weights).unwrap();
        let Ok(plan) = split::plan(&model.metadata, &model.tensors, &devices) else { continue };
        for t in &plan.tensors {
            if let Axis::Split(_) = t.axis {
                for s in &t.segments {
                    assert_eq!(s.extents.iter().sum::<u64>(), s.size, "{}", t.name);
                }
            }
        }
    }
});
