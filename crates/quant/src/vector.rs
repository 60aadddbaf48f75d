//! f32 vector kernels for the parts of the forward pass that stay in f32
//! (attention scores and weighted sums of values), chosen at run time like
//! the quantized kernels.

use std::sync::OnceLock;

pub use crate::sgemm::{sgemm, sgemm_scalar};
pub use crate::sgemm_packed::{
    sgemm_packed, sgemm_packed_scalar, sgemm_packed_to_panels, sgemm_packed_to_panels_scalar,
    PackedB, PANEL,
};

type DotF32 = fn(&[f32], &[f32]) -> f32;
type AxpyF32 = fn(&mut [f32], f32, &[f32]);

struct VectorKernels {
    dot: DotF32,
    axpy: AxpyF32,
}

/// The kernels of the kernel set in use (`HEARTH_CPU` and
/// [`crate::select_kernels`] included).
fn kernels() -> &'static VectorKernels {
    static K: OnceLock<VectorKernels> = OnceLock::new();
    K.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        match crate::simd::best().gemm.vector() {
            crate::simd::GemmTier::Avx512Vnni => {
                return VectorKernels {
                    dot: x86::dot_avx512,
                    axpy: x86::axpy_avx512,
                }
            }
            crate::simd::GemmTier::Avx2 | crate::simd::GemmTier::AvxVnni => {
                return VectorKernels {
                    dot: x86::dot_avx2,
                    axpy: x86::axpy_avx2,
                }
            }
            crate::simd::GemmTier::Portable | crate::simd::GemmTier::Amx => {}
        }
        #[cfg(target_arch = "aarch64")]
        match crate::simd::best().gemm {
            crate::simd::GemmTier::Neon | crate::simd::GemmTier::Dotprod => {
                return VectorKernels {
                    dot: crate::simd::neon::vector_dot,
                    axpy: crate::simd::neon::vector_axpy,
                }
            }
            _ => {}
        }
        VectorKernels {
            dot: scalar_dot,
            axpy: scalar_axpy,
        }
    })
}

/// `sum(a[i] * b[i])` over the shorter length.
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    (kernels().dot)(a, b)
}

/// `y[i] += alpha * x[i]` over the shorter length.
#[inline]
pub fn axpy(y: &mut [f32], alpha: f32, x: &[f32]) {
    (kernels().axpy)(y, alpha, x)
}

/// The scalar reference for [`dot`], in the canonical order every tier
/// follows ([`crate::scalar`]'s float order: four chains of eight fused
/// lanes, a fixed reduction, a fused tail), so attention gives the same bits
/// on every CPU.
pub fn scalar_dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    crate::scalar::float_dot(n, |i| a[i], |i| b[i])
}

/// The scalar reference for [`axpy`]: one fused multiply-add per element,
/// which is what every SIMD width computes too.
pub fn scalar_axpy(y: &mut [f32], alpha: f32, x: &[f32]) {
    for (yv, &xv) in y.iter_mut().zip(x) {
        *yv = alpha.mul_add(xv, *yv);
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    pub(super) fn dot_avx2(a: &[f32], b: &[f32]) -> f32 {
        // SAFETY: installed only after avx2 and fma were detected.
        unsafe { dot_avx2_impl(a, b) }
    }

    pub(super) fn axpy_avx2(y: &mut [f32], alpha: f32, x: &[f32]) {
        // SAFETY: installed only after avx2 and fma were detected.
        unsafe { axpy_avx2_impl(y, alpha, x) }
    }

    pub(super) fn dot_avx512(a: &[f32], b: &[f32]) -> f32 {
        // SAFETY: installed only for the AVX-512 tier, whose table needs
        // avx512f, avx2 and fma detected.
        unsafe { dot_avx512_impl(a, b) }
    }

    pub(super) fn axpy_avx512(y: &mut [f32], alpha: f32, x: &[f32]) {
        // SAFETY: installed only after avx512f was detected.
        unsafe { axpy_avx512_impl(y, alpha, x) }
    }

    /// The canonical order's eight lanes reduced (see `scalar::hsum8`).
    #[target_feature(enable = "avx2,fma")]
    fn hsum8(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_movehdup_ps(s));
        _mm_cvtss_f32(s)
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn dot_avx2_impl(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        let (pa, pb) = (a.as_ptr(), b.as_ptr());
        let mut acc = [_mm256_setzero_ps(); 4];
        let mut i = 0;
        while i + 8 <= n {
            // SAFETY: i + 8 <= n bounds both 8-lane loads.
            let (x, y) = unsafe { (_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i))) };
            let c = &mut acc[(i / 8) % 4];
            *c = _mm256_fmadd_ps(x, y, *c);
            i += 8;
        }
        let s = _mm256_add_ps(_mm256_add_ps(acc[0], acc[2]), _mm256_add_ps(acc[1], acc[3]));
        let mut sum = hsum8(s);
        for j in i..n {
            sum = a[j].mul_add(b[j], sum);
        }
        sum
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn axpy_avx2_impl(y: &mut [f32], alpha: f32, x: &[f32]) {
        let n = y.len().min(x.len());
        let (py, px) = (y.as_mut_ptr(), x.as_ptr());
        let va = _mm256_set1_ps(alpha);
        let mut i = 0;
        while i + 8 <= n {
            // SAFETY: i + 8 <= n bounds both 8-lane accesses.
            unsafe {
                let v = _mm256_fmadd_ps(va, _mm256_loadu_ps(px.add(i)), _mm256_loadu_ps(py.add(i)));
                _mm256_storeu_ps(py.add(i), v);
            }
            i += 8;
        }
        for j in i..n {
            y[j] = alpha.mul_add(x[j], y[j]);
        }
    }

    /// Two registers hold the canonical order's chains 0|1 and 2|3; the
    /// one or three groups of eight past the last 32 go into their chains'
    /// halves through masks.
    #[target_feature(enable = "avx512f,avx2,fma")]
    unsafe fn dot_avx512_impl(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        let (pa, pb) = (a.as_ptr(), b.as_ptr());
        let mut acc = [_mm512_setzero_ps(); 2];
        let mut i = 0;
        while i + 16 <= n {
            // SAFETY: i + 16 <= n bounds both 16-lane loads.
            let (x, y) = unsafe { (_mm512_loadu_ps(pa.add(i)), _mm512_loadu_ps(pb.add(i))) };
            let c = &mut acc[(i / 16) % 2];
            *c = _mm512_fmadd_ps(x, y, *c);
            i += 16;
        }
        if i + 8 <= n {
            // The low half of the next register: its chain is (i / 8) % 4,
            // which is 0 or 2, the low half of acc[(i / 16) % 2].
            // SAFETY: the mask loads only the 8 lanes below i + 8 <= n.
            let (x, y) = unsafe {
                (
                    _mm512_maskz_loadu_ps(0x00FF, pa.add(i)),
                    _mm512_maskz_loadu_ps(0x00FF, pb.add(i)),
                )
            };
            let c = &mut acc[(i / 16) % 2];
            *c = _mm512_mask3_fmadd_ps(x, y, *c, 0x00FF);
            i += 8;
        }
        let s = _mm512_add_ps(acc[0], acc[1]);
        let lo = _mm512_castps512_ps256(s);
        let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(s)));
        let mut sum = hsum8(_mm256_add_ps(lo, hi));
        for j in i..n {
            sum = a[j].mul_add(b[j], sum);
        }
        sum
    }

    #[target_feature(enable = "avx512f")]
    unsafe fn axpy_avx512_impl(y: &mut [f32], alpha: f32, x: &[f32]) {
        let n = y.len().min(x.len());
        let (py, px) = (y.as_mut_ptr(), x.as_ptr());
        let va = _mm512_set1_ps(alpha);
        let mut i = 0;
        while i + 16 <= n {
            // SAFETY: i + 16 <= n bounds both 16-lane accesses.
            unsafe {
                let v = _mm512_fmadd_ps(va, _mm512_loadu_ps(px.add(i)), _mm512_loadu_ps(py.add(i)));
                _mm512_storeu_ps(py.add(i), v);
            }
            i += 16;
        }
        for j in i..n {
            y[j] = alpha.mul_add(x[j], y[j]);
        }
    }

    /// Every kernel this CPU can run, for the property tests.
    #[cfg(test)]
    pub(super) fn available() -> Vec<(&'static str, super::DotF32, super::AxpyF32)> {
        let mut v: Vec<(&'static str, super::DotF32, super::AxpyF32)> = Vec::new();
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            v.push(("avx2", dot_avx2, axpy_avx2));
        }
        if is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx2") {
            v.push(("avx512", dot_avx512, axpy_avx512));
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[cfg(target_arch = "x86_64")]
    fn simd() -> Vec<(&'static str, DotF32, AxpyF32)> {
        x86::available()
    }
    #[cfg(target_arch = "aarch64")]
    fn simd() -> Vec<(&'static str, DotF32, AxpyF32)> {
        vec![(
            "neon",
            crate::simd::neon::vector_dot,
            crate::simd::neon::vector_axpy,
        )]
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    fn simd() -> Vec<(&'static str, DotF32, AxpyF32)> {
        Vec::new()
    }

    proptest! {
        /// Every SIMD kernel gives the scalar reference's bits, at every
        /// length (tails included).
        #[test]
        fn simd_matches_scalar(
            a in prop::collection::vec(-100.0f32..100.0, 0..300),
            b in prop::collection::vec(-100.0f32..100.0, 0..300),
            alpha in -4.0f32..4.0,
        ) {
            let want = scalar_dot(&a, &b);
            let mut y_ref = b.clone();
            scalar_axpy(&mut y_ref, alpha, &a);
            for (name, d, ax) in simd() {
                let got = d(&a, &b);
                prop_assert_eq!(got.to_bits(), want.to_bits(), "{}: {} vs {}", name, got, want);
                let mut y = b.clone();
                ax(&mut y, alpha, &a);
                for (g, w) in y.iter().zip(&y_ref) {
                    prop_assert_eq!(g.to_bits(), w.to_bits(), "{} axpy: {} vs {}", name, g, w);
                }
            }
            prop_assert_eq!(dot(&a, &b).to_bits(), want.to_bits());
        }
    }
}
