//! A small deterministic generator for synthetic weights: splitmix64 to seed,
//! xorshift64* to draw. Reproducible across runs and thread counts, because
//! every tensor row is seeded from (seed, tensor name, row).

/// splitmix64: turns consecutive or similar seeds into unrelated states.
pub(crate) fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// FNV-1a of a name, to give each tensor its own stream.
pub(crate) fn hash_name(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

/// xorshift64*.
pub(crate) struct Rng(u64);

impl Rng {
    /// A generator for row `row` of the stream `stream`.
    pub(crate) fn for_row(stream: u64, row: u64) -> Rng {
        let mut s = stream ^ row.wrapping_mul(0xD6E8_FEB8_6659_FD93);
        Rng(splitmix64(&mut s) | 1)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A roughly standard normal value: the sum of four 16-bit uniforms
    /// (Irwin-Hall), centred and scaled to unit variance. One draw per value
    /// keeps a 4B-parameter model cheap to generate; the tails stop at ±3.46.
    pub(crate) fn normalish(&mut self) -> f32 {
        let r = self.next_u64();
        let sum: u64 = (0..4).map(|i| (r >> (16 * i)) & 0xFFFF).sum();
        // Four uniforms on [0, 1): mean 2, variance 1/3.
        let s = (sum as f32 + 2.0) / 65536.0;
        (s - 2.0) * 1.732_050_8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalish_has_unit_moments_and_is_reproducible() {
        let mut rng = Rng::for_row(42, 7);
        let v: Vec<f32> = (0..200_000).map(|_| rng.normalish()).collect();
        let mean = v.iter().sum::<f32>() / v.len() as f32;
        let var = v.iter().map(|x| (x - mean) * (x - mean)).sum::<f32>() / v.len() as f32;
        assert!(mean.abs() < 0.01, "mean {mean}");
        assert!((var - 1.0).abs() < 0.02, "variance {var}");
        let mut again = Rng::for_row(42, 7);
        assert_eq!(again.normalish(), v[0]);
        assert_ne!(Rng::for_row(42, 8).normalish(), v[0]);
        assert_ne!(hash_name("a"), hash_name("b"));
    }
}
