//! The rows the codec tests share: random rows at scales from 3e-42 to
//! 1e30 and the edge cases that break careless vector or GPU code — zero and
//! constant blocks, huge and subnormal values, signed zeros, exact ties.

/// A small deterministic generator (xorshift), so failures reproduce.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub fn float(&mut self, scale: f32) -> f32 {
        ((self.next() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
    }
}

pub fn rows() -> Vec<Vec<f32>> {
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let mut rows: Vec<Vec<f32>> = Vec::new();
    for scale in [1.0, 1e-3, 1e3, 1e30, 1e-38, 3e-42] {
        for _ in 0..64 {
            rows.push((0..256).map(|_| rng.float(scale)).collect());
        }
    }
    rows.push(vec![0.0; 256]);
    rows.push(vec![-0.0; 256]);
    rows.push(vec![0.75; 256]);
    rows.push(vec![-3.0e9; 256]);
    // amax 127 makes the scale exactly 1, so these are exact ties.
    let ties: Vec<f32> = (0..256).map(|i| if i % 32 == 0 { 127.0 } else { (i % 32) as f32 - 16.5 }).collect();
    rows.push(ties.iter().map(|v| -v).collect());
    rows.push(ties);
    // Values next to a tie, on both sides.
    let near: Vec<f32> = (0..256)
        .map(|i| match i % 32 {
            0 => 127.0,
            k if k % 2 == 0 => f32::from_bits((k as f32 + 0.5).to_bits() - 1),
            k => f32::from_bits((k as f32 + 0.5).to_bits() + 1),
        })
        .collect();
    rows.push(near);
    rows
}
