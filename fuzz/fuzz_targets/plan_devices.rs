//! Feeds arbitrary bytes, read as a GGUF header (the metadata and tensor
//! table are all the planner reads), to the split planner (`plan-devices`)
//! for 1 to 4 devices, equal and weighted: whatever the metadata claims
//! (head counts, widths, recurrent layers, state sizes), a plan is made or
//! refused with an error, never a panic; a plan made gives every split
//! segment's extents in full.

#![no_main]

use libfuzzer_sys::fuzz_target;
use quantforge::arch::split::{self, Axis, Devices};
use quantforge::formats::gguf;

fuzz_target!(|data: &[u8]| {
    let Ok(header) = gguf::read_header_bytes(data, std::path::Path::new("fuzz.gguf")) else { return };
    for (count, weights) in [(1, None), (2, None), (3, Some(vec![2.0, 1.0, 1.0])), (4, None)] {
        let devices = Devices::new(count, weights).unwrap();
        let Ok(plan) = split::plan(&header.metadata, &header.tensors, &devices) else { continue };
        for t in &plan.tensors {
            if let Axis::Split(_) = t.axis {
                for s in &t.segments {
                    assert_eq!(s.extents.iter().sum::<u64>(), s.size, "{}", t.name);
                }
            }
        }
    }
});
