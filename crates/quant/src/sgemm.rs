//! A small f32 matrix product for prefill attention (`Q·Kᵀ` and `P·V` over a
//! block of queries), where the per-pair dot products and axpys of decode
//! would spend their time on horizontal sums and reloads.
//!
//! Row-major throughout: `C[m×n] = A[m×k] · B[k×n]`. The register tile
//! broadcasts one element of A and multiplies it into a row of B held in
//! vector registers, so each C element's sum runs over `k` in order with one
//! fused multiply-add per step; the scalar reference does the same and the
//! SIMD kernels match it bit for bit.

use crate::QuantError;

type Kernel = unsafe fn(usize, usize, usize, *const f32, usize, *const f32, usize, *mut f32, usize);

/// The kernel of the kernel set in use (`HEARTH_CPU` and
/// [`crate::select_kernels`] included), or `None` for the scalar reference.
fn kernel() -> Option<Kernel> {
    #[cfg(target_arch = "x86_64")]
    match crate::simd::best().gemm.vector() {
        crate::simd::GemmTier::Avx512Vnni => return Some(x86::sgemm_avx512 as Kernel),
        crate::simd::GemmTier::Avx2 | crate::simd::GemmTier::AvxVnni => {
            return Some(x86::sgemm_avx2 as Kernel)
        }
        crate::simd::GemmTier::Portable | crate::simd::GemmTier::Amx => {}
    }
    // NEON is part of every AArch64 CPU: its kernel runs on every tier but
    // the portable reference, `HEARTH_CPU=scalar`.
    #[cfg(target_arch = "aarch64")]
    match crate::simd::best().gemm {
        crate::simd::GemmTier::Neon | crate::simd::GemmTier::Dotprod => {
            return Some(neon::sgemm_neon as Kernel)
        }
        _ => {}
    }
    None
}

/// Checks that the operands hold the shapes (`m`, `n`, `k` and row strides).
#[allow(clippy::too_many_arguments)]
fn check(
    m: usize,
    n: usize,
    k: usize,
    a: &[f32],
    lda: usize,
    b: &[f32],
    ldb: usize,
    c: &[f32],
    ldc: usize,
) -> Result<(), QuantError> {
    if lda < k || ldb < n || ldc < n {
        return Err(QuantError::Shape(format!(
            "sgemm: a row stride is shorter than its row (lda {lda} < k {k}, ldb {ldb} or ldc {ldc} < n {n})"
        )));
    }
    if m == 0 || n == 0 {
        return Ok(());
    }
    rows_fit("sgemm C", m, ldc, n, c.len())?;
    if k > 0 {
        rows_fit("sgemm A", m, lda, k, a.len())?;
        rows_fit("sgemm B", k, ldb, n, b.len())?;
    }
    Ok(())
}

/// Checks that `m` rows of `cols` elements, `ld` apart, fit in `len`.
pub(crate) fn rows_fit(
    what: &'static str,
    m: usize,
    ld: usize,
    cols: usize,
    len: usize,
) -> Result<(), QuantError> {
    if m == 0 {
        return Ok(());
    }
    let need = (m - 1)
        .checked_mul(ld)
        .and_then(|v| v.checked_add(cols))
        .ok_or(QuantError::Overflow)?;
    if len < need {
        return Err(QuantError::BufferTooShort {
            what,
            need,
            have: len,
        });
    }
    Ok(())
}

/// `C = A · B` for row-major `A` (`m × k`, rows `lda` apart), `B` (`k × n`,
/// rows `ldb` apart) and `C` (`m × n`, rows `ldc` apart), through the best
/// kernel for this CPU.
///
/// A slice shorter than its shape and stride imply is an error.
#[allow(clippy::too_many_arguments)]
pub fn sgemm(
    m: usize,
    n: usize,
    k: usize,
    a: &[f32],
    lda: usize,
    b: &[f32],
    ldb: usize,
    c: &mut [f32],
    ldc: usize,
) -> Result<(), QuantError> {
    check(m, n, k, a, lda, b, ldb, c, ldc)?;
    if m == 0 || n == 0 {
        return Ok(());
    }
    match kernel() {
        // SAFETY: the kernel was installed after detecting its features, and
        // `check` bounds every element it reads or writes.
        Some(f) => unsafe {
            f(
                m,
                n,
                k,
                a.as_ptr(),
                lda,
                b.as_ptr(),
                ldb,
                c.as_mut_ptr(),
                ldc,
            )
        },
        None => sgemm_scalar(m, n, k, a, lda, b, ldb, c, ldc)?,
    }
    Ok(())
}

/// The scalar reference for [`sgemm`]: each element summed over `k` in order
/// with fused multiply-adds, as the SIMD lanes do.
#[allow(clippy::too_many_arguments)]
pub fn sgemm_scalar(
    m: usize,
    n: usize,
    k: usize,
    a: &[f32],
    lda: usize,
    b: &[f32],
    ldb: usize,
    c: &mut [f32],
    ldc: usize,
) -> Result<(), QuantError> {
    check(m, n, k, a, lda, b, ldb, c, ldc)?;
    for i in 0..m {
        for j in 0..n {
            let mut acc = 0.0f32;
            for p in 0..k {
                acc = a[i * lda + p].mul_add(b[p * ldb + j], acc);
            }
            c[i * ldc + j] = acc;
        }
    }
    Ok(())
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86 {
    #![allow(clippy::incompatible_msrv)] // AVX-512 intrinsics: stable since 1.89, checked at run time.

    use std::arch::x86_64::*;

    /// Rows of A per AVX-512 tile (2 × 12 accumulators of 16 lanes).
    const MR512: usize = 12;
    /// Rows of A per AVX2 tile (2 × 6 accumulators of 8 lanes).
    const MR256: usize = 6;

    /// # Safety
    /// avx512f present; the pointers hold the shapes (see `super::check`).
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn sgemm_avx512(
        m: usize,
        n: usize,
        k: usize,
        a: *const f32,
        lda: usize,
        b: *const f32,
        ldb: usize,
        c: *mut f32,
        ldc: usize,
    ) {
        let mut j = 0;
        while j < n {
            let w = (n - j).min(32);
            let mask_lo: __mmask16 = if w >= 16 { 0xffff } else { (1u16 << w) - 1 };
            let mask_hi: __mmask16 = if w >= 32 {
                0xffff
            } else if w > 16 {
                (1u16 << (w - 16)) - 1
            } else {
                0
            };
            let mut i = 0;
            while i < m {
                let rows = (m - i).min(MR512);
                // SAFETY: rows i..i+rows and columns j..j+w are inside the
                // shapes; the masks keep loads and stores to those columns.
                unsafe {
                    let (ap, bp, cp) = (a.add(i * lda), b.add(j), c.add(i * ldc + j));
                    macro_rules! go {
                        ($($r:literal),*) => {
                            match rows {
                                $($r => tile512::<$r>(k, ap, lda, bp, ldb, cp, ldc, mask_lo, mask_hi),)*
                                _ => {}
                            }
                        };
                    }
                    go!(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12);
                }
                i += rows;
            }
            j += w;
        }
    }

    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx512f")]
    unsafe fn tile512<const R: usize>(
        k: usize,
        a: *const f32,
        lda: usize,
        b: *const f32,
        ldb: usize,
        c: *mut f32,
        ldc: usize,
        mask_lo: __mmask16,
        mask_hi: __mmask16,
    ) {
        let mut lo = [_mm512_setzero_ps(); R];
        let mut hi = [_mm512_setzero_ps(); R];
        for p in 0..k {
            // SAFETY: row p of B (masked columns) and element p of each of the
            // R rows of A are inside the shapes.
            unsafe {
                let b0 = _mm512_maskz_loadu_ps(mask_lo, b.add(p * ldb));
                let b1 = _mm512_maskz_loadu_ps(mask_hi, b.add(p * ldb + 16));
                for r in 0..R {
                    let av = _mm512_set1_ps(*a.add(r * lda + p));
                    lo[r] = _mm512_fmadd_ps(av, b0, lo[r]);
                    hi[r] = _mm512_fmadd_ps(av, b1, hi[r]);
                }
            }
        }
        for r in 0..R {
            // SAFETY: masked stores to row r's columns inside the shape.
            unsafe {
                _mm512_mask_storeu_ps(c.add(r * ldc), mask_lo, lo[r]);
                _mm512_mask_storeu_ps(c.add(r * ldc + 16), mask_hi, hi[r]);
            }
        }
    }

    /// # Safety
    /// avx2 and fma present; the pointers hold the shapes (see `super::check`).
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn sgemm_avx2(
        m: usize,
        n: usize,
        k: usize,
        a: *const f32,
        lda: usize,
        b: *const f32,
        ldb: usize,
        c: *mut f32,
        ldc: usize,
    ) {
        let lane = |w: usize, base: usize| -> __m256i {
            let v: [i32; 8] = std::array::from_fn(|l| if base + l < w { -1 } else { 0 });
            // SAFETY: reading eight i32 from a local array.
            unsafe { _mm256_loadu_si256(v.as_ptr() as *const _) }
        };
        let mut j = 0;
        while j < n {
            let w = (n - j).min(16);
            let (m0, m1) = (lane(w, 0), lane(w, 8));
            let mut i = 0;
            while i < m {
                let rows = (m - i).min(MR256);
                // SAFETY: as in the AVX-512 kernel, with mask vectors.
                unsafe {
                    let (ap, bp, cp) = (a.add(i * lda), b.add(j), c.add(i * ldc + j));
                    match rows {
                        6 => tile256::<6, false>(k, ap, lda, bp, ldb, cp, ldc, m0, m1),
                        5 => tile256::<5, false>(k, ap, lda, bp, ldb, cp, ldc, m0, m1),
                        4 => tile256::<4, false>(k, ap, lda, bp, ldb, cp, ldc, m0, m1),
                        3 => tile256::<3, false>(k, ap, lda, bp, ldb, cp, ldc, m0, m1),
                        2 => tile256::<2, false>(k, ap, lda, bp, ldb, cp, ldc, m0, m1),
                        1 => tile256::<1, false>(k, ap, lda, bp, ldb, cp, ldc, m0, m1),
                        _ => {}
                    }
                }
                i += rows;
            }
            j += w;
        }
    }

    /// One tile of `R` rows by 16 columns: `C = A · B` over `k`. With
    /// `WHOLE_ROWS`, every row of B holds 16 readable floats (a packed,
    /// padded panel, `ldb` = 16) and is read with plain loads; otherwise
    /// the lanes past the matrix are masked off.
    ///
    /// # Safety
    /// avx2 and fma present; R rows of A (`k` each, `lda` apart), `k` rows
    /// of B and R rows of C (`ldc` apart) hold the masked columns.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx2,fma")]
    pub(crate) unsafe fn tile256<const R: usize, const WHOLE_ROWS: bool>(
        k: usize,
        a: *const f32,
        lda: usize,
        b: *const f32,
        ldb: usize,
        c: *mut f32,
        ldc: usize,
        m0: __m256i,
        m1: __m256i,
    ) {
        let mut lo = [_mm256_setzero_ps(); R];
        let mut hi = [_mm256_setzero_ps(); R];
        for p in 0..k {
            // SAFETY: as in `tile512`; masked lanes are not read, and with
            // WHOLE_ROWS all 16 are inside the panel.
            unsafe {
                let (b0, b1) = if WHOLE_ROWS {
                    (
                        _mm256_loadu_ps(b.add(p * ldb)),
                        _mm256_loadu_ps(b.add(p * ldb + 8)),
                    )
                } else {
                    (
                        _mm256_maskload_ps(b.add(p * ldb), m0),
                        _mm256_maskload_ps(b.add(p * ldb + 8), m1),
                    )
                };
                for r in 0..R {
                    let av = _mm256_set1_ps(*a.add(r * lda + p));
                    lo[r] = _mm256_fmadd_ps(av, b0, lo[r]);
                    hi[r] = _mm256_fmadd_ps(av, b1, hi[r]);
                }
            }
        }
        // Masked stores are slow on AMD's cores: full strips store plainly.
        let full = _mm256_movemask_ps(_mm256_castsi256_ps(m1)) == 0xff;
        for r in 0..R {
            // SAFETY: stores to row r's columns inside the shape (all 16
            // when the strip is full, else the masked ones).
            unsafe {
                if full {
                    _mm256_storeu_ps(c.add(r * ldc), lo[r]);
                    _mm256_storeu_ps(c.add(r * ldc + 8), hi[r]);
                } else {
                    _mm256_maskstore_ps(c.add(r * ldc), m0, lo[r]);
                    _mm256_maskstore_ps(c.add(r * ldc + 8), m1, hi[r]);
                }
            }
        }
    }

    /// Every kernel this CPU runs, for the tests.
    #[cfg(test)]
    pub(super) fn available() -> Vec<(&'static str, super::Kernel)> {
        let mut v: Vec<(&'static str, super::Kernel)> = Vec::new();
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            v.push(("avx2", sgemm_avx2));
        }
        if is_x86_feature_detected!("avx512f") {
            v.push(("avx512", sgemm_avx512));
        }
        v
    }
}

#[cfg(target_arch = "aarch64")]
pub(crate) mod neon {
    use std::arch::aarch64::*;

    /// Rows of A per tile (the packed product's too): 6 rows × 4 vectors of 4 columns is 24
    /// accumulators, with the 4 of B and a broadcast of A inside the 32
    /// registers.
    pub(crate) const MR: usize = 6;

    /// [`super::sgemm`] on NEON: tiles of up to 6 rows by 16 columns, each
    /// C element summed over `k` in order with one fused multiply-add per
    /// step (`fmla`), as the reference sums it; the last `n % 4` columns,
    /// which fill no vector, by the reference's loop.
    ///
    /// # Safety
    /// The pointers hold the shapes (see `super::check`).
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn sgemm_neon(
        m: usize,
        n: usize,
        k: usize,
        a: *const f32,
        lda: usize,
        b: *const f32,
        ldb: usize,
        c: *mut f32,
        ldc: usize,
    ) {
        macro_rules! rows {
            ($v:literal, $rows:expr, $ap:expr, $bp:expr, $cp:expr) => {
                match $rows {
                    6 => tile::<6, $v>(k, $ap, lda, $bp, ldb, $cp, ldc, 4 * $v),
                    5 => tile::<5, $v>(k, $ap, lda, $bp, ldb, $cp, ldc, 4 * $v),
                    4 => tile::<4, $v>(k, $ap, lda, $bp, ldb, $cp, ldc, 4 * $v),
                    3 => tile::<3, $v>(k, $ap, lda, $bp, ldb, $cp, ldc, 4 * $v),
                    2 => tile::<2, $v>(k, $ap, lda, $bp, ldb, $cp, ldc, 4 * $v),
                    _ => tile::<1, $v>(k, $ap, lda, $bp, ldb, $cp, ldc, 4 * $v),
                }
            };
        }
        let mut j = 0;
        while j + 4 <= n {
            let vectors = ((n - j) / 4).min(4);
            let mut i = 0;
            while i < m {
                let rows = (m - i).min(MR);
                // SAFETY: rows i..i + rows of A and C and columns
                // j..j + 4 * vectors of B and C lie inside the shapes.
                unsafe {
                    let (ap, bp, cp) = (a.add(i * lda), b.add(j), c.add(i * ldc + j));
                    match vectors {
                        4 => rows!(4, rows, ap, bp, cp),
                        3 => rows!(3, rows, ap, bp, cp),
                        2 => rows!(2, rows, ap, bp, cp),
                        _ => rows!(1, rows, ap, bp, cp),
                    }
                }
                i += rows;
            }
            j += 4 * vectors;
        }
        for i in 0..m {
            for jj in j..n {
                let mut acc = 0.0f32;
                for p in 0..k {
                    // SAFETY: element (i, p) of A and (p, jj) of B lie
                    // inside the shapes.
                    acc = unsafe { (*a.add(i * lda + p)).mul_add(*b.add(p * ldb + jj), acc) };
                }
                // SAFETY: element (i, jj) of C lies inside the shape.
                unsafe { *c.add(i * ldc + jj) = acc };
            }
        }
    }

    /// One tile of `R` rows by `4 * V` columns: `C = A · B` over `k`, of
    /// which the first `w` columns (at most `4 * V`) are stored.
    ///
    /// # Safety
    /// R rows of A (`k` each, `lda` apart) and `k` rows of B hold the
    /// tile's `4 * V` columns; R rows of C (`ldc` apart) hold `w`.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn tile<const R: usize, const V: usize>(
        k: usize,
        a: *const f32,
        lda: usize,
        b: *const f32,
        ldb: usize,
        c: *mut f32,
        ldc: usize,
        w: usize,
    ) {
        let mut acc = [[vdupq_n_f32(0.0); V]; R];
        for p in 0..k {
            // SAFETY: the caller's contract.
            unsafe {
                let bv: [float32x4_t; V] =
                    std::array::from_fn(|q| vld1q_f32(b.add(p * ldb + 4 * q)));
                for (r, acc_r) in acc.iter_mut().enumerate() {
                    let av = vld1q_dup_f32(a.add(r * lda + p));
                    for (s, &bq) in acc_r.iter_mut().zip(&bv) {
                        *s = vfmaq_f32(*s, av, bq);
                    }
                }
            }
        }
        for (r, acc_r) in acc.iter().enumerate() {
            for (q, &v) in acc_r.iter().enumerate() {
                let at = r * ldc + 4 * q;
                if 4 * q + 4 <= w {
                    // SAFETY: the caller's contract: these 4 columns are
                    // among the `w` stored.
                    unsafe { vst1q_f32(c.add(at), v) };
                } else {
                    let mut lanes = [0.0f32; 4];
                    // SAFETY: `lanes` holds 4 floats.
                    unsafe { vst1q_f32(lanes.as_mut_ptr(), v) };
                    for (l, &x) in lanes.iter().enumerate().take(w.saturating_sub(4 * q)) {
                        // SAFETY: column 4q + l < w.
                        unsafe { *c.add(at + l) = x };
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Every SIMD kernel gives the scalar reference's bits, for shapes
        /// with tails in every direction and padded strides.
        #[test]
        fn simd_matches_scalar(m in 1usize..30, n in 1usize..70, k in 0usize..40, pad in 0usize..3, seed in any::<u64>()) {
            let mut next = crate::xorshift_values(seed | 1);
            let (lda, ldb, ldc) = (k + pad, n + pad, n + 2 * pad);
            let a: Vec<f32> = (0..m * lda).map(|_| next()).collect();
            let b: Vec<f32> = (0..k.max(1) * ldb).map(|_| next()).collect();
            let mut want = vec![7.0f32; m * ldc];
            sgemm_scalar(m, n, k, &a, lda, &b, ldb, &mut want, ldc).unwrap();
            #[cfg(target_arch = "x86_64")]
            for (name, f) in x86::available() {
                let mut got = vec![7.0f32; m * ldc];
                // SAFETY: the kernel's features were detected; shapes as above.
                unsafe { f(m, n, k, a.as_ptr(), lda, b.as_ptr(), ldb, got.as_mut_ptr(), ldc) };
                prop_assert_eq!(&got, &want, "{}", name);
            }
            #[cfg(target_arch = "aarch64")]
            {
                let mut got = vec![7.0f32; m * ldc];
                // SAFETY: NEON is part of every AArch64 CPU; shapes as above.
                unsafe { neon::sgemm_neon(m, n, k, a.as_ptr(), lda, b.as_ptr(), ldb, got.as_mut_ptr(), ldc) };
                prop_assert_eq!(&got, &want, "neon");
            }
            let mut got = vec![7.0f32; m * ldc];
            sgemm(m, n, k, &a, lda, &b, ldb, &mut got, ldc).unwrap();
            prop_assert_eq!(&got, &want);
        }
    }

    /// The reference is the plain product.
    #[test]
    fn scalar_is_the_product() {
        let a = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        let b = [7.0, 8.0, 9.0, 10.0, 11.0, 12.0];
        let mut c = [0.0f32; 4];
        sgemm(2, 2, 3, &a, 3, &b, 2, &mut c, 2).unwrap();
        assert_eq!(c, [58.0, 64.0, 139.0, 154.0]);
    }

    /// Operands shorter than their shapes are an error, not a panic.
    #[test]
    fn bad_shapes_are_errors() {
        let a = [1.0f32; 6];
        let b = [1.0f32; 6];
        let mut c = [0.0f32; 4];
        assert!(sgemm(2, 2, 3, &a[..5], 3, &b, 2, &mut c, 2).is_err());
        assert!(sgemm(2, 2, 3, &a, 3, &b[..5], 2, &mut c, 2).is_err());
        assert!(sgemm(2, 2, 3, &a, 3, &b, 2, &mut c[..3], 2).is_err());
        assert!(sgemm(2, 2, 3, &a, 2, &b, 2, &mut c, 2).is_err());
        assert!(sgemm_scalar(2, 2, 3, &a, 3, &b, 2, &mut c[..3], 2).is_err());
        assert!(sgemm(2, 2, 3, &a, 3, &b, 2, &mut c, 2).is_ok());
    }
}
