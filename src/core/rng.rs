//! Seeded randomness: every random draw is keyed by (seed, domain, index), never hidden.
use crate::core::digest::FramedHasher;

/// SplitMix64: a tiny, well-known generator; enough for seeded shuffles and init.
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator keyed by a seed and a domain tag, so streams never collide.
    pub fn keyed(seed: u64, domain: &str, index: u64) -> Self {
        let mut hasher = FramedHasher::new("shardlift/rng-key/v1");
        hasher.u64(seed).field(domain.as_bytes()).u64(index);
        let digest = hasher.finish();
        let mut key = [0u8; 8];
        key.copy_from_slice(&digest.0[..8]);
        SplitMix64(u64::from_le_bytes(key))
    }

    /// The next value of the SplitMix64 sequence.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, bound) without modulo bias (rejection sampling).
    pub fn below(&mut self, bound: u64) -> u64 {
        assert!(bound > 0, "bound must be positive");
        let zone = u64::MAX - (u64::MAX % bound);
        loop {
            let value = self.next_u64();
            if value < zone {
                return value % bound;
            }
        }
    }

    /// Uniform in [-1, 1), exactly representable (24 random bits).
    pub fn symmetric_unit_f32(&mut self) -> f32 {
        let bits = (self.next_u64() >> 40) as u32; // 24 bits
        (bits as f32) * (2.0 / 16_777_216.0) - 1.0
    }
}
