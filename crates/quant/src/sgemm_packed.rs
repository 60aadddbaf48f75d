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

    /// Shape it `k × n` without clearing what is kept: for a product that
    /// writes every element, padding included.
    pub(crate) fn reshape(&mut self, k: usize, n: usize) {
        self.k = k;
        self.n = n;
        self.data.resize(n.div_ceil(PANEL) * PANEL * k, 0.0);
    }

    /// The panels back to back (see [`Self::panels_mut`]).
    pub fn panels(&self) -> &[f32] {
        &self.data
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

    /// Fill panel `s` from its columns given as rows: `cols` holds
    /// [`PANEL`] rows of [`Self::k`] floats each, row `j` becoming the
    /// panel's column `j` (a weight matrix's rows are the right-hand side's
    /// columns). An 8 × 8 transpose in registers on x86 tiers; the bits are
    /// the copy's on every tier.
    pub(crate) fn fill_panel_from_rows(&mut self, s: usize, cols: &[f32]) {
        self.fill_panel_from_rows_on(crate::simd::best().gemm, s, cols);
    }

    /// [`Self::fill_panel_from_rows`] through the given tier's code.
    pub(crate) fn fill_panel_from_rows_on(
        &mut self,
        tier: crate::simd::GemmTier,
        s: usize,
        cols: &[f32],
    ) {
        let k = self.k;
        let panel = &mut self.data[s * k * PANEL..(s + 1) * k * PANEL];
        let cols = &cols[..PANEL * k];
        #[cfg(target_arch = "x86_64")]
        if tier.vector() != crate::simd::GemmTier::Portable {
            // SAFETY: every x86 tier but the portable one runs on CPUs
            // with AVX2 (AMX's vector tier is AVX-512's); both slices hold
            // PANEL × k floats.
            unsafe { x86::transpose_panel_avx2(cols, k, panel) };
            return;
        }
        let _ = tier;
        transpose_panel(cols, k, 0, panel);
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

/// Steps `p0..` of a panel from its [`PANEL`] columns given as rows of `k`
/// (see [`PackedB::fill_panel_from_rows`]): the reference, and the tail
/// of the vector code.
fn transpose_panel(cols: &[f32], k: usize, p0: usize, panel: &mut [f32]) {
    for (p, dst) in panel.chunks_exact_mut(PANEL).enumerate().skip(p0) {
        for (j, d) in dst.iter_mut().enumerate() {
            *d = cols[j * k + p];
        }
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
    sgemm_packed_on(crate::simd::best().gemm, m, a, lda, b, c, ldc)
}

/// `C = A · B` written packed (`m × b.n()`, so `c.k()` is `m`), ready to be
/// the right-hand side of the next product: attention computes its scores
/// transposed (`K · Qᵀ`) straight into the panels that `Vᵀ · P` reads. The
/// padding columns hold the product with `B`'s zero padding (zero for
/// finite `A`); a product reading `c` never writes them out.
pub fn sgemm_packed_to_panels(
    m: usize,
    a: &[f32],
    lda: usize,
    b: &PackedB,
    c: &mut PackedB,
) -> Result<(), QuantError> {
    sgemm_packed_to_panels_on(crate::simd::best().gemm, m, a, lda, b, c)
}

/// Where C's elements go: row `i`, column `j` at
/// `i * ldc + (j / PANEL) * panel + j % PANEL`; `whole` writes every
/// column of the last panel (packed C) instead of the first `n`.
#[derive(Clone, Copy)]
struct Layout {
    ldc: usize,
    panel: usize,
    whole: bool,
}

/// [`sgemm_packed`] through the kernel of the given tier (the tests and
/// benchmarks run each tier on one machine this way).
pub(crate) fn sgemm_packed_on(
    tier: crate::simd::GemmTier,
    m: usize,
    a: &[f32],
    lda: usize,
    b: &PackedB,
    c: &mut [f32],
    ldc: usize,
) -> Result<(), QuantError> {
    check(m, a, lda, b, c, ldc)?;
    let layout = Layout {
        ldc,
        panel: PANEL,
        whole: false,
    };
    // SAFETY: `check` bounds every read of A and write of C.
    unsafe { run(tier, m, a.as_ptr(), lda, b, c.as_mut_ptr(), layout) };
    Ok(())
}

/// [`sgemm_packed_to_panels`] through the kernel of the given tier.
pub(crate) fn sgemm_packed_to_panels_on(
    tier: crate::simd::GemmTier,
    m: usize,
    a: &[f32],
    lda: usize,
    b: &PackedB,
    c: &mut PackedB,
) -> Result<(), QuantError> {
    check_a(m, a, lda, b)?;
    c.reshape(m, b.n);
    let layout = Layout {
        ldc: PANEL,
        panel: m * PANEL,
        whole: true,
    };
    // SAFETY: `check_a` bounds every read of A; `c` holds `m` rows of
    // every panel of `b.n` columns.
    unsafe { run(tier, m, a.as_ptr(), lda, b, c.data.as_mut_ptr(), layout) };
    Ok(())
}

/// # Safety
/// A holds `m` rows of `b.k` floats `lda` apart; C holds every element
/// `layout` places (the first `b.n` columns of each row, or every column of
/// every panel when `layout.whole`).
unsafe fn run(
    tier: crate::simd::GemmTier,
    m: usize,
    a: *const f32,
    lda: usize,
    b: &PackedB,
    c: *mut f32,
    layout: Layout,
) {
    if m == 0 || b.n == 0 {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    match tier.vector() {
        crate::simd::GemmTier::Avx512Vnni => {
            // SAFETY: the AVX-512 tiers are chosen only on CPUs with
            // AVX-512 F; the caller bounds the operands.
            unsafe { x86::packed_avx512(m, a, lda, b, c, layout) };
            return;
        }
        crate::simd::GemmTier::Avx2 | crate::simd::GemmTier::AvxVnni => {
            // SAFETY: these tiers are chosen only on CPUs with AVX2 and
            // FMA; the caller bounds the operands.
            unsafe { x86::packed_avx2(m, a, lda, b, c, layout) };
            return;
        }
        crate::simd::GemmTier::Portable | crate::simd::GemmTier::Amx => {}
    }
    #[cfg(target_arch = "aarch64")]
    match tier {
        crate::simd::GemmTier::Neon | crate::simd::GemmTier::Dotprod => {
            // SAFETY: NEON is part of every AArch64 CPU; the caller bounds
            // the operands.
            unsafe { neon::packed_neon(m, a, lda, b, c, layout) };
            return;
        }
        _ => {}
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = tier;
    // SAFETY: the caller bounds the operands.
    unsafe { reference(m, a, lda, b, c, layout) }
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
    let layout = Layout {
        ldc,
        panel: PANEL,
        whole: false,
    };
    // SAFETY: `check` bounds every read of A and write of C.
    unsafe { reference(m, a.as_ptr(), lda, b, c.as_mut_ptr(), layout) };
    Ok(())
}

/// The scalar reference of [`sgemm_packed_to_panels`].
pub fn sgemm_packed_to_panels_scalar(
    m: usize,
    a: &[f32],
    lda: usize,
    b: &PackedB,
    c: &mut PackedB,
) -> Result<(), QuantError> {
    sgemm_packed_to_panels_on(crate::simd::GemmTier::Portable, m, a, lda, b, c)
}

/// # Safety
/// As [`run`].
unsafe fn reference(m: usize, a: *const f32, lda: usize, b: &PackedB, c: *mut f32, layout: Layout) {
    let (k, n) = (b.k, b.n);
    let cols = if layout.whole {
        n.div_ceil(PANEL) * PANEL
    } else {
        n
    };
    for i in 0..m {
        for j in 0..cols {
            let panel = &b.data[(j / PANEL) * k * PANEL..];
            let mut acc = 0.0f32;
            for p in 0..k {
                // SAFETY: row i of A holds k floats.
                let x = unsafe { *a.add(i * lda + p) };
                acc = x.mul_add(panel[p * PANEL + j % PANEL], acc);
            }
            // SAFETY: the caller's layout places (i, j) inside C.
            unsafe { *c.add(i * layout.ldc + (j / PANEL) * layout.panel + j % PANEL) = acc };
        }
    }
}

/// Checks A's rows against `b`'s sum length.
fn check_a(m: usize, a: &[f32], lda: usize, b: &PackedB) -> Result<(), QuantError> {
    if lda < b.k {
        return Err(QuantError::Shape(format!(
            "packed sgemm: a row stride is shorter than its row (lda {lda} < k {})",
            b.k
        )));
    }
    if b.k == 0 {
        return Ok(());
    }
    crate::sgemm::rows_fit("packed sgemm A", m, lda, b.k, a.len())
}

/// Checks A's rows and a row-major C (`ldc` apart) against the shapes.
fn check(
    m: usize,
    a: &[f32],
    lda: usize,
    b: &PackedB,
    c: &[f32],
    ldc: usize,
) -> Result<(), QuantError> {
    check_a(m, a, lda, b)?;
    if ldc < b.n {
        return Err(QuantError::Shape(format!(
            "packed sgemm: C's row stride is shorter than its row (ldc {ldc} < n {})",
            b.n
        )));
    }
    if b.n == 0 {
        return Ok(());
    }
    crate::sgemm::rows_fit("packed sgemm C", m, ldc, b.n, c.len())
}

#[cfg(target_arch = "aarch64")]
mod neon {
    use super::{Layout, PackedB, PANEL};
    use crate::sgemm::neon::{tile, MR};

    /// [`super::run`] on NEON: each panel (16 columns, read whole: the
    /// last is zero-padded) against tiles of up to 6 rows of A, through
    /// the strided product's tile, so the sums are the reference's.
    ///
    /// # Safety
    /// The pointers hold the shapes (see `super::run`).
    pub(super) unsafe fn packed_neon(
        m: usize,
        a: *const f32,
        lda: usize,
        b: &PackedB,
        c: *mut f32,
        layout: Layout,
    ) {
        let (k, n) = (b.k, b.n);
        let ldc = layout.ldc;
        for s in 0..n.div_ceil(PANEL) {
            let w = if layout.whole {
                PANEL
            } else {
                (n - s * PANEL).min(PANEL)
            };
            let bp = b.data[s * k * PANEL..].as_ptr();
            let mut i = 0;
            while i < m {
                let rows = (m - i).min(MR);
                // SAFETY: rows i..i+rows of A and C, panel s of B (whole,
                // padded) and the w columns of C's panel s are inside the
                // shapes.
                unsafe {
                    let (ap, cp) = (a.add(i * lda), c.add(i * ldc + s * layout.panel));
                    match rows {
                        6 => tile::<6, 4>(k, ap, lda, bp, PANEL, cp, ldc, w),
                        5 => tile::<5, 4>(k, ap, lda, bp, PANEL, cp, ldc, w),
                        4 => tile::<4, 4>(k, ap, lda, bp, PANEL, cp, ldc, w),
                        3 => tile::<3, 4>(k, ap, lda, bp, PANEL, cp, ldc, w),
                        2 => tile::<2, 4>(k, ap, lda, bp, PANEL, cp, ldc, w),
                        _ => tile::<1, 4>(k, ap, lda, bp, PANEL, cp, ldc, w),
                    }
                }
                i += rows;
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{Layout, PackedB, PANEL};
    use crate::sgemm::x86::tile256;
    use std::arch::x86_64::*;

    /// Rows of A per tile: 6 rows × 2 registers of accumulators.
    const MR: usize = 6;

    /// # Safety
    /// avx2 and fma present; the pointers hold the shapes (see `super::run`).
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn packed_avx2(
        m: usize,
        a: *const f32,
        lda: usize,
        b: &PackedB,
        c: *mut f32,
        layout: Layout,
    ) {
        let (k, n) = (b.k, b.n);
        let lane = |w: usize, base: usize| -> __m256i {
            let v: [i32; 8] = std::array::from_fn(|l| if base + l < w { -1 } else { 0 });
            // SAFETY: reading eight i32 from a local array.
            unsafe { _mm256_loadu_si256(v.as_ptr() as *const _) }
        };
        let ldc = layout.ldc;
        for s in 0..n.div_ceil(PANEL) {
            let w = if layout.whole {
                PANEL
            } else {
                (n - s * PANEL).min(PANEL)
            };
            let (m0, m1) = (lane(w, 0), lane(w, 8));
            let bp = b.data[s * k * PANEL..].as_ptr();
            let mut i = 0;
            while i < m {
                let rows = (m - i).min(MR);
                // SAFETY: rows i..i+rows of A and C, panel s of B (whole,
                // padded) and the w columns of C's panel s are inside the
                // shapes.
                unsafe {
                    let (ap, cp) = (a.add(i * lda), c.add(i * ldc + s * layout.panel));
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

    /// [`super::transpose_panel`] eight steps at a time: two 8 × 8
    /// transposes (columns 0..8 and 8..16) per eight steps.
    ///
    /// # Safety
    /// avx2 present; `cols` and `panel` hold `PANEL * k` floats.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn transpose_panel_avx2(cols: &[f32], k: usize, panel: &mut [f32]) {
        assert!(cols.len() >= PANEL * k && panel.len() >= PANEL * k);
        let (src, dst) = (cols.as_ptr(), panel.as_mut_ptr());
        let mut p = 0;
        while p + 8 <= k {
            for half in 0..2 {
                // SAFETY: columns 8 * half..8 * half + 8, steps p..p + 8,
                // inside `cols` (asserted).
                let r: [__m256; 8] = std::array::from_fn(|j| unsafe {
                    _mm256_loadu_ps(src.add((8 * half + j) * k + p))
                });
                let t: [__m256; 8] = std::array::from_fn(|i| {
                    let (a, b) = (r[2 * (i / 2)], r[2 * (i / 2) + 1]);
                    if i % 2 == 0 {
                        _mm256_unpacklo_ps(a, b)
                    } else {
                        _mm256_unpackhi_ps(a, b)
                    }
                });
                // u[i] (u[4 + i]) holds columns 0..4 (4..8) of steps i
                // and i + 4, in its two halves.
                let u: [__m256; 8] = std::array::from_fn(|i| {
                    let base = 4 * (i / 4);
                    let (lo, hi) = (t[base + (i % 4) / 2], t[base + 2 + (i % 4) / 2]);
                    if i % 2 == 0 {
                        _mm256_shuffle_ps::<0x44>(lo, hi)
                    } else {
                        _mm256_shuffle_ps::<0xEE>(lo, hi)
                    }
                });
                for i in 0..8 {
                    let (a, b) = (u[i % 4], u[4 + i % 4]);
                    let v = if i < 4 {
                        _mm256_permute2f128_ps::<0x20>(a, b)
                    } else {
                        _mm256_permute2f128_ps::<0x31>(a, b)
                    };
                    // SAFETY: step p + i, columns 8 * half.., inside `panel`.
                    unsafe { _mm256_storeu_ps(dst.add((p + i) * PANEL + 8 * half), v) };
                }
            }
            p += 8;
        }
        super::transpose_panel(cols, k, p, panel);
    }

    /// Rows of A per AVX-512 tile: 12 rows × 2 panels is 24 accumulators,
    /// enough independent sums to keep both FMA ports busy, with 14 loads
    /// (two panel rows, twelve broadcasts) per 24 multiply-adds (8 rows
    /// measured 5-7% slower at attention's shapes).
    const MR512: usize = 12;

    /// Steps of the sum per pass: a tile's rows of A (12 KiB) stay in L1
    /// while it sweeps the block's panels, however long the sum
    /// (attention's `P·V` sums over thousands of keys). Later passes start
    /// from the partial sums in C; the fused multiply-adds run in the same
    /// order, so the bits are the unblocked sum's.
    const KC: usize = 256;

    /// Panels per block: a pass over a block reads at most 32 × 256 × 16
    /// floats of B (512 KiB, in L2) for every tile of A rows.
    const NC: usize = 32;

    /// # Safety
    /// avx512f present; the pointers hold the shapes (see `super::run`).
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn packed_avx512(
        m: usize,
        a: *const f32,
        lda: usize,
        b: &PackedB,
        c: *mut f32,
        layout: Layout,
    ) {
        let (k, n) = (b.k, b.n);
        let panels = n.div_ceil(PANEL);
        let mask = |s: usize| -> __mmask16 {
            let w = (n - s * PANEL).min(PANEL);
            if w == PANEL || layout.whole {
                0xffff
            } else {
                (1u16 << w) - 1
            }
        };
        let (ldc, cpanel) = (layout.ldc, layout.panel);
        for s0 in (0..panels).step_by(NC) {
            let s1 = (s0 + NC).min(panels);
            let mut p0 = 0;
            loop {
                let kc = (k - p0).min(KC);
                let resume = p0 > 0;
                let mut i = 0;
                while i < m {
                    let rows = (m - i).min(MR512);
                    let mut s = s0;
                    while s < s1 {
                        let two = s1 - s >= 2;
                        let (m0, m1) = (mask(s), if two { mask(s + 1) } else { 0 });
                        let bp = b.data[s * k * PANEL + p0 * PANEL..].as_ptr();
                        // SAFETY: rows i..i+rows of A (columns p0..p0+kc)
                        // and C, panels s and s+1 of B (whole, padded; the
                        // second only when `two`), and C's columns under
                        // the masks are inside the shapes.
                        unsafe {
                            let (ap, cp) = (a.add(i * lda + p0), c.add(i * ldc + s * cpanel));
                            macro_rules! go {
                                ($($r:literal),*) => {
                                    match (rows, two) {
                                        $(($r, true) => tile512::<$r, 2>(kc, k * PANEL, ap, lda, bp, cp, ldc, cpanel, m0, m1, resume),
                                          ($r, false) => tile512::<$r, 1>(kc, k * PANEL, ap, lda, bp, cp, ldc, cpanel, m0, m1, resume),)*
                                        _ => {}
                                    }
                                };
                            }
                            go!(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12);
                        }
                        s += if two { 2 } else { 1 };
                    }
                    i += rows;
                }
                p0 += kc;
                if p0 >= k {
                    break;
                }
            }
        }
    }

    /// `R` rows of A against `P` adjacent panels of B (`panel` floats
    /// apart; C's are `cpanel` apart), `kc` steps of the sum; starting from
    /// C when `resume`, else zero.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn tile512<const R: usize, const P: usize>(
        kc: usize,
        panel: usize,
        a: *const f32,
        lda: usize,
        b: *const f32,
        c: *mut f32,
        ldc: usize,
        cpanel: usize,
        m0: __mmask16,
        m1: __mmask16,
        resume: bool,
    ) {
        let masks = [m0, m1];
        let mut acc = [[_mm512_setzero_ps(); P]; R];
        if resume {
            for (r, row) in acc.iter_mut().enumerate() {
                for (q, v) in row.iter_mut().enumerate() {
                    // SAFETY: C's row r, panel q's columns under its mask.
                    *v = unsafe { _mm512_maskz_loadu_ps(masks[q], c.add(r * ldc + q * cpanel)) };
                }
            }
        }
        for p in 0..kc {
            // SAFETY: step p of each panel (whole, padded) and element p
            // of each of the R rows of A are inside the shapes.
            unsafe {
                let bv: [__m512; P] =
                    std::array::from_fn(|q| _mm512_loadu_ps(b.add(q * panel + p * PANEL)));
                for (r, row) in acc.iter_mut().enumerate() {
                    let av = _mm512_set1_ps(*a.add(r * lda + p));
                    for (v, &bq) in row.iter_mut().zip(&bv) {
                        *v = _mm512_fmadd_ps(av, bq, *v);
                    }
                }
            }
        }
        for (r, row) in acc.iter().enumerate() {
            for (q, &v) in row.iter().enumerate() {
                // SAFETY: C's row r, panel q's columns under its mask
                // (plain stores for whole panels).
                unsafe {
                    let dst = c.add(r * ldc + q * cpanel);
                    if masks[q] == 0xffff {
                        _mm512_storeu_ps(dst, v);
                    } else {
                        _mm512_mask_storeu_ps(dst, masks[q], v);
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
        /// The kernel in use gives the scalar reference's bits and the
        /// strided product's values, for shapes with tails everywhere.
        #[test]
        fn packed_matches_scalar(m in 1usize..20, n in 1usize..50, k in 0usize..40, pad in 0usize..3, seed in any::<u64>()) {
            let mut next = crate::xorshift_values(seed | 1);
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
            for set in crate::simd::available() {
                let mut got = vec![7.0f32; m * ldc];
                sgemm_packed_on(set.gemm, m, &a, lda, &packed, &mut got, ldc).unwrap();
                prop_assert_eq!(&got, &want, "kernel set {}", set.name);
            }
            let mut strided = vec![7.0f32; m * ldc];
            crate::sgemm::sgemm_scalar(m, n, k, &a, lda, &b, ldb, &mut strided, ldc).unwrap();
            prop_assert_eq!(&strided, &want);
            // Written packed: the same values where row-major C has them,
            // zeros in the padding, the same bits on every tier.
            let mut panels = PackedB::new();
            panels.pack(3, 5, &[9.0; 15], 5).unwrap();
            sgemm_packed_to_panels_scalar(m, &a, lda, &packed, &mut panels).unwrap();
            prop_assert_eq!((panels.k(), panels.n()), (m, n));
            for i in 0..m {
                for j in 0..n.div_ceil(PANEL) * PANEL {
                    let at = panels.panels()[(j / PANEL) * m * PANEL + i * PANEL + j % PANEL];
                    let expect = if j < n { want[i * ldc + j] } else { 0.0 };
                    prop_assert_eq!(at.to_bits(), expect.to_bits(), "({}, {})", i, j);
                }
            }
            for set in crate::simd::available() {
                let mut got = PackedB::new();
                got.pack(2, 40, &[5.0; 80], 40).unwrap();
                sgemm_packed_to_panels_on(set.gemm, m, &a, lda, &packed, &mut got).unwrap();
                prop_assert_eq!(got.panels(), panels.panels(), "kernel set {}", set.name);
            }
        }
    }

    proptest! {
        /// A panel filled from its columns given as rows holds, on every
        /// tier, exactly what the element-by-element copy puts there, for
        /// sums of any length (the eight-step blocks and their tails).
        #[test]
        fn panels_from_rows_match_the_copy(k in 0usize..70, panels in 1usize..3, seed in any::<u64>()) {
            let mut next = crate::xorshift_values(seed | 1);
            let n = panels * PANEL - 3;
            let mut want = PackedB::new();
            want.reshape(k, n);
            let cols: Vec<Vec<f32>> = (0..panels)
                .map(|_| (0..PANEL * k).map(|_| next()).collect())
                .collect();
            for (s, c) in cols.iter().enumerate() {
                let at = s * k * PANEL;
                super::transpose_panel(c, k, 0, &mut want.data[at..at + k * PANEL]);
                for p in 0..k {
                    for j in 0..PANEL {
                        prop_assert_eq!(want.data[at + p * PANEL + j].to_bits(), c[j * k + p].to_bits());
                    }
                }
            }
            for set in crate::simd::available() {
                let mut got = PackedB::new();
                got.reshape(k, n);
                got.data.fill(f32::NAN);
                for (s, c) in cols.iter().enumerate() {
                    got.fill_panel_from_rows_on(set.gemm, s, c);
                }
                let same = got.data.iter().zip(&want.data).all(|(a, b)| a.to_bits() == b.to_bits());
                prop_assert!(same, "kernel set {}", set.name);
            }
        }
    }

    /// Sums longer than the AVX-512 kernel's pass resume from C with the
    /// same bits, on every tier this CPU runs, panel tails and several
    /// panel blocks included, row-major and packed.
    #[test]
    fn long_sums_match_scalar_on_every_tier() {
        for &(m, n, k) in &[
            (13, 72, 600),
            (9, 40, 257),
            (64, 33, 512),
            (3, 16, 1000),
            (40, 1100, 300),
        ] {
            let (lda, ldc) = (k + 1, n + 3);
            let mut next = crate::xorshift_values(0x9e37_79b9_7f4a_7c15u64 ^ (m * n * k) as u64);
            let a: Vec<f32> = (0..m * lda).map(|_| next()).collect();
            let b: Vec<f32> = (0..k * n).map(|_| next()).collect();
            let mut packed = PackedB::new();
            packed.pack(k, n, &b, n).unwrap();
            let mut want = vec![7.0f32; m * ldc];
            sgemm_packed_scalar(m, &a, lda, &packed, &mut want, ldc).unwrap();
            let mut panels = PackedB::new();
            sgemm_packed_to_panels_scalar(m, &a, lda, &packed, &mut panels).unwrap();
            for set in crate::simd::available() {
                let mut got = vec![7.0f32; m * ldc];
                sgemm_packed_on(set.gemm, m, &a, lda, &packed, &mut got, ldc).unwrap();
                assert_eq!(got, want, "kernel set {} at {m}x{n}x{k}", set.name);
                let mut got = PackedB::new();
                sgemm_packed_to_panels_on(set.gemm, m, &a, lda, &packed, &mut got).unwrap();
                assert_eq!(got.panels(), panels.panels(), "kernel set {}", set.name);
            }
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
