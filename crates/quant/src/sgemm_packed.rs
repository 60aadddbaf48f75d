//! f32 matrix products against a right-hand side packed into panels of
//! [`PANEL`] columns, for products too large for [`crate::vector::sgemm`]'s
//! strided reads: a vision encoder's projections (thousands of rows by a
//! weight of millions of elements) and its attention over thousands of keys.
//!
//! A strided `B` walks a new cache line, and on wide matrices a new page,
//! for every step of the sum; a packed panel is read front to back. Each C
//! element is summed over `k` in order with one fused multiply-add per step,
//! in the scalar reference and the SIMD kernels alike, so they agree to the
//! bit.

use crate::QuantError;

/// Columns per panel: two AVX2 registers, one AVX-512 register.
pub const PANEL: usize = 16;

/// A `k × n` matrix stored as `ceil(n / PANEL)` panels, each `k` rows of
/// [`PANEL`] columns (the last zero-padded), so a product reads it in order.
#[derive(Debug, Clone, Default)]
pub struct PackedB {
    k: usize,
    n: usize,
    data: Vec<f32>,
}

impl PackedB {
    /// An empty matrix; [`Self::reset`] shapes it.
    pub fn new() -> Self {
        Self::default()
    }

    /// Shape it `k × n`, all zeros, reusing the buffer.
    pub fn reset(&mut self, k: usize, n: usize) {
        self.k = k;
        self.n = n;
        self.data.clear();
        self.data.resize(n.div_ceil(PANEL) * PANEL * k, 0.0);
    }

    /// Rows (the sum's length).
    pub fn k(&self) -> usize {
        self.k
    }

    /// Columns (the product's width).
    pub fn n(&self) -> usize {
        self.n
    }

    /// The panels back to back, `k * PANEL` floats each, to fill in
    /// parallel: element `(p, j)` of the matrix is at
    /// `(j / PANEL) * k * PANEL + p * PANEL + j % PANEL`.
    pub fn panels_mut(&mut self) -> &mut [f32] {
        &mut self.data
    }

    /// Pack the row-major `b` (`k × n`, rows `ldb` apart).
    pub fn pack(&mut self, k: usize, n: usize, b: &[f32], ldb: usize) -> Result<(), QuantError> {
        if k > 0 && n > 0 && (ldb < n || b.len() < (k - 1) * ldb + n) {
            return Err(QuantError::BufferTooShort {
                what: "packed sgemm B",
                need: (k - 1) * ldb + n,
                have: b.len(),
            });
        }
        self.reset(k, n);
        let len = (k * PANEL).max(1);
        for (s, panel) in self.data.chunks_exact_mut(len).enumerate() {
            let (j0, w) = (s * PANEL, (n - s * PANEL).min(PANEL));
            for (p, dst) in panel.chunks_exact_mut(PANEL).enumerate() {
                dst[..w].copy_from_slice(&b[p * ldb + j0..][..w]);
            }
        }
        Ok(())
    }
}

/// `C = A · B` for row-major `A` (`m × b.k()`, rows `lda` apart) and `C`
/// (`m × b.n()`, rows `ldc` apart), through the best kernel for this CPU.
pub fn sgemm_packed(
    m: usize,
    a: &[f32],
    lda: usize,
    b: &PackedB,
    c: &mut [f32],
    ldc: usize,
) -> Result<(), QuantError> {
    check(m, a, lda, b, c, ldc)?;
    if m == 0 || b.n == 0 {
        return Ok(());
    }
    #[cfg(target_arch = "x86_64")]
    if !matches!(crate::simd::best().gemm, crate::simd::GemmTier::Portable) {
        // SAFETY: the non-portable tiers are chosen only on CPUs with AVX2
        // and FMA; `check` bounds every read and write.
        unsafe { x86::packed_avx2(m, a.as_ptr(), lda, b, c.as_mut_ptr(), ldc) };
        return Ok(());
    }
    sgemm_packed_scalar(m, a, lda, b, c, ldc)
}

/// The scalar reference of [`sgemm_packed`]: each element summed over `k`
/// in order with fused multiply-adds.
pub fn sgemm_packed_scalar(
    m: usize,
    a: &[f32],
    lda: usize,
    b: &PackedB,
    c: &mut [f32],
    ldc: usize,
) -> Result<(), QuantError> {
    check(m, a, lda, b, c, ldc)?;
    let (k, n) = (b.k, b.n);
    for i in 0..m {
        for j in 0..n {
            let panel = &b.data[(j / PANEL) * k * PANEL..];
            let mut acc = 0.0f32;
            for p in 0..k {
                acc = a[i * lda + p].mul_add(panel[p * PANEL + j % PANEL], acc);
            }
            c[i * ldc + j] = acc;
        }
    }
    Ok(())
}

fn check(
    m: usize,
    a: &[f32],
    lda: usize,
    b: &PackedB,
    c: &[f32],
    ldc: usize,
) -> Result<(), QuantError> {
    if lda < b.k || ldc < b.n {
        return Err(QuantError::Shape(format!(
            "packed sgemm: a row stride is shorter than its row (lda {lda} < k {}, or ldc {ldc} < n {})",
            b.k, b.n
        )));
    }
    if m == 0 || b.n == 0 {
        return Ok(());
    }
    let need = |ld: usize, cols: usize| {
        (m - 1)
            .checked_mul(ld)
            .and_then(|v| v.checked_add(cols))
            .ok_or(QuantError::Overflow)
    };
    let (na, nc) = (need(lda, b.k)?, need(ldc, b.n)?);
    if b.k > 0 && a.len() < na {
        return Err(QuantError::BufferTooShort {
            what: "packed sgemm A",
            need: na,
            have: a.len(),
        });
    }
    if c.len() < nc {
        return Err(QuantError::BufferTooShort {
            what: "packed sgemm C",
            need: nc,
            have: c.len(),
        });
    }
    Ok(())
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{PackedB, PANEL};
    use crate::sgemm::x86::tile256;
    use std::arch::x86_64::*;

    /// Rows of A per tile: 6 rows × 2 registers of accumulators.
    const MR: usize = 6;

    /// # Safety
    /// avx2 and fma present; the pointers hold the shapes (see `check`).
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn packed_avx2(
        m: usize,
        a: *const f32,
        lda: usize,
        b: &PackedB,
        c: *mut f32,
        ldc: usize,
    ) {
        let (k, n) = (b.k, b.n);
        let lane = |w: usize, base: usize| -> __m256i {
            let v: [i32; 8] = std::array::from_fn(|l| if base + l < w { -1 } else { 0 });
            // SAFETY: reading eight i32 from a local array.
            unsafe { _mm256_loadu_si256(v.as_ptr() as *const _) }
        };
        for s in 0..n.div_ceil(PANEL) {
            let w = (n - s * PANEL).min(PANEL);
            let (m0, m1) = (lane(w, 0), lane(w, 8));
            let bp = b.data[s * k * PANEL..].as_ptr();
            let mut i = 0;
            while i < m {
                let rows = (m - i).min(MR);
                // SAFETY: rows i..i+rows of A and C, panel s of B (whole,
                // padded) and columns s*PANEL..+w of C are inside the shapes.
                unsafe {
                    let (ap, cp) = (a.add(i * lda), c.add(i * ldc + s * PANEL));
                    match rows {
                        6 => tile256::<6, true>(k, ap, lda, bp, PANEL, cp, ldc, m0, m1),
                        5 => tile256::<5, true>(k, ap, lda, bp, PANEL, cp, ldc, m0, m1),
                        4 => tile256::<4, true>(k, ap, lda, bp, PANEL, cp, ldc, m0, m1),
                        3 => tile256::<3, true>(k, ap, lda, bp, PANEL, cp, ldc, m0, m1),
                        2 => tile256::<2, true>(k, ap, lda, bp, PANEL, cp, ldc, m0, m1),
                        1 => tile256::<1, true>(k, ap, lda, bp, PANEL, cp, ldc, m0, m1),
                        _ => {}
                    }
                }
                i += rows;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The kernel in use gives the scalar reference's bits and the
        /// strided product's values, for shapes with tails everywhere.
        #[test]
        fn packed_matches_scalar(m in 1usize..20, n in 1usize..50, k in 0usize..40, pad in 0usize..3, seed in any::<u64>()) {
            let mut x = seed | 1;
            let mut next = move || {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 40) as f32 / (1u64 << 23) as f32 - 1.0
            };
            let (lda, ldb, ldc) = (k + pad, n + pad, n + 2 * pad);
            let a: Vec<f32> = (0..m * lda).map(|_| next()).collect();
            let b: Vec<f32> = (0..k.max(1) * ldb).map(|_| next()).collect();
            let mut packed = PackedB::new();
            packed.pack(k, n, &b, ldb).unwrap();
            let mut want = vec![7.0f32; m * ldc];
            sgemm_packed_scalar(m, &a, lda, &packed, &mut want, ldc).unwrap();
            let mut got = vec![7.0f32; m * ldc];
            sgemm_packed(m, &a, lda, &packed, &mut got, ldc).unwrap();
            prop_assert_eq!(&got, &want);
            let mut strided = vec![7.0f32; m * ldc];
            crate::sgemm::sgemm_scalar(m, n, k, &a, lda, &b, ldb, &mut strided, ldc).unwrap();
            prop_assert_eq!(&strided, &want);
        }
    }

    #[test]
    fn short_operands_are_errors() {
        let mut p = PackedB::new();
        assert!(p.pack(2, 3, &[1.0; 5], 3).is_err());
        p.pack(2, 3, &[1.0; 6], 3).unwrap();
        let mut c = [0.0f32; 6];
        assert!(sgemm_packed(2, &[1.0; 3], 2, &p, &mut c, 3).is_err());
        assert!(sgemm_packed(2, &[1.0; 4], 2, &p, &mut c[..5], 3).is_err());
        sgemm_packed(2, &[1.0; 4], 2, &p, &mut c, 3).unwrap();
        assert_eq!(c, [2.0; 6]);
    }
}
