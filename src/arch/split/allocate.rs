//! Stage 5, allocation: each segment's extent per device — proportional to
//! the devices' weights (llama.cpp's `tensor_split`) or equal without
//! them, every boundary rounded down to the segment's granularity, the
//! last device taking the rest. The rounding's loser rotates from layer to
//! layer (`rotation`), so no device is short everywhere.

/// The extents of a segment of `size` cut at multiples of `granularity`
/// across `weights.len()` devices (or `devices` equal ones), indexed by
/// device. Weights are summed in f32 and each boundary computed in f32 as
/// the reference computes them, so the plans agree to the element.
pub fn allocate(
    size: u64,
    granularity: u64,
    weights: Option<&[f32]>,
    devices: usize,
    rotation: usize,
) -> Result<Vec<u64>, String> {
    if granularity == 0 {
        return Err("its granularity is 0".into());
    }
    let mut scan = vec![0.0f32; devices];
    for j in 0..devices {
        scan[j] = weights.map_or(0.0, |w| w[(j + rotation) % devices]);
        if j > 0 {
            scan[j] += scan[j - 1];
        }
    }
    let total = scan[devices - 1];
    let size = i64::try_from(size).map_err(|_| "it is too large".to_owned())?;
    let granularity = i64::try_from(granularity).map_err(|_| "its granularity is too large".to_owned())?;
    let mut extents = vec![0u64; devices];
    let mut low = 0i64;
    for (j, &share) in scan.iter().enumerate().take(devices - 1) {
        let mut high =
            if total == 0.0 { size * (j as i64 + 1) / devices as i64 } else { (size as f32 * share / total) as i64 };
        high -= high % granularity;
        extents[(j + rotation) % devices] =
            u64::try_from(high - low).map_err(|_| "a device's share is negative".to_owned())?;
        low = high;
    }
    extents[(devices - 1 + rotation) % devices] =
        u64::try_from(size - low).map_err(|_| "a device's share is negative".to_owned())?;
    Ok(extents)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_shares_round_down_and_the_rotation_moves_the_remainder() {
        assert_eq!(allocate(1000, 128, None, 3, 0).unwrap(), [256, 384, 360]);
        assert_eq!(allocate(1000, 128, None, 3, 1).unwrap(), [360, 256, 384]);
        assert_eq!(allocate(1000, 1, Some(&[3.0, 1.0]), 2, 0).unwrap(), [750, 250]);
        // A segment smaller than its granularity lands whole on one device.
        assert_eq!(allocate(64, 128, None, 2, 1).unwrap(), [64, 0]);
        assert!(allocate(64, 0, None, 2, 0).is_err());
    }
}
