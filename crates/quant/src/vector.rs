//! f32 vector kernels for the parts of the forward pass that stay in f32
//! (attention scores and weighted sums of values), chosen at run time like
//! the quantized kernels.

use std::sync::OnceLock;

pub use crate::sgemm::{sgemm, sgemm_scalar};

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
        match crate::simd::best().gemm {
            crate::simd::GemmTier::Avx512Vnni => {
                return VectorKernels {
                    dot: x86::dot_avx512,
                    axpy: x86::axpy_avx512,
                }
            }
            crate::simd::GemmTier::Avx2 => {
                return VectorKernels {
                    dot: x86::dot_avx2,
                    axpy: x86::axpy_avx2,
                }
            }
            crate::simd::GemmTier::Portable => {}
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

/// The scalar reference for [`dot`]: eight partial sums, like the SIMD lanes.
pub fn scalar_dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0.0f32; 8];
    let mut ca = a.chunks_exact(8);
    let mut cb = b.chunks_exact(8);
    for (x, y) in (&mut ca).zip(&mut cb) {
        for l in 0..8 {
            acc[l] += x[l] * y[l];
        }
    }
    let mut s: f32 = acc.iter().sum();
    for (x, y) in ca.remainder().iter().zip(cb.remainder()) {
        s += x * y;
    }
    s
}

/// The scalar reference for [`axpy`].
pub fn scalar_axpy(y: &mut [f32], alpha: f32, x: &[f32]) {
    for (yv, &xv) in y.iter_mut().zip(x) {
        *yv += alpha * xv;
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
        // SAFETY: installed only after avx512f was detected.
        unsafe { dot_avx512_impl(a, b) }
    }

    pub(super) fn axpy_avx512(y: &mut [f32], alpha: f32, x: &[f32]) {
        // SAFETY: installed only after avx512f was detected.
        unsafe { axpy_avx512_impl(y, alpha, x) }
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn dot_avx2_impl(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        let (pa, pb) = (a.as_ptr(), b.as_ptr());
        let mut acc0 = _mm256_setzero_ps();
        let mut acc1 = _mm256_setzero_ps();
        let mut i = 0;
        while i + 16 <= n {
            // SAFETY: i + 16 <= n, so both 8-lane loads at i and i + 8 are in bounds.
            unsafe {
                acc0 =
                    _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i)), acc0);
                acc1 = _mm256_fmadd_ps(
                    _mm256_loadu_ps(pa.add(i + 8)),
                    _mm256_loadu_ps(pb.add(i + 8)),
                    acc1,
                );
            }
            i += 16;
        }
        let acc = _mm256_add_ps(acc0, acc1);
        let hi = _mm256_extractf128_ps(acc, 1);
        let s = _mm_add_ps(_mm256_castps256_ps128(acc), hi);
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_movehdup_ps(s));
        let mut sum = _mm_cvtss_f32(s);
        for j in i..n {
            sum += a[j] * b[j];
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
            y[j] += alpha * x[j];
        }
    }

    #[target_feature(enable = "avx512f")]
    unsafe fn dot_avx512_impl(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        let (pa, pb) = (a.as_ptr(), b.as_ptr());
        let mut acc0 = _mm512_setzero_ps();
        let mut acc1 = _mm512_setzero_ps();
        let mut i = 0;
        while i + 32 <= n {
            // SAFETY: i + 32 <= n, so both 16-lane loads are in bounds.
            unsafe {
                acc0 =
                    _mm512_fmadd_ps(_mm512_loadu_ps(pa.add(i)), _mm512_loadu_ps(pb.add(i)), acc0);
                acc1 = _mm512_fmadd_ps(
                    _mm512_loadu_ps(pa.add(i + 16)),
                    _mm512_loadu_ps(pb.add(i + 16)),
                    acc1,
                );
            }
            i += 32;
        }
        let mut sum = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
        for j in i..n {
            sum += a[j] * b[j];
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
            y[j] += alpha * x[j];
        }
    }

    /// Every kernel this CPU can run, for the property tests.
    #[cfg(test)]
    pub(super) fn available() -> Vec<(&'static str, super::DotF32, super::AxpyF32)> {
        let mut v: Vec<(&'static str, super::DotF32, super::AxpyF32)> = Vec::new();
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            v.push(("avx2", dot_avx2, axpy_avx2));
        }
        if is_x86_feature_detected!("avx512f") {
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
    #[cfg(not(target_arch = "x86_64"))]
    fn simd() -> Vec<(&'static str, DotF32, AxpyF32)> {
        Vec::new()
    }

    proptest! {
        /// Every SIMD kernel agrees with the scalar reference, at every length
        /// (tails included), within rounding of the summed magnitudes.
        #[test]
        fn simd_matches_scalar(
            a in prop::collection::vec(-100.0f32..100.0, 0..300),
            b in prop::collection::vec(-100.0f32..100.0, 0..300),
            alpha in -4.0f32..4.0,
        ) {
            let want = scalar_dot(&a, &b);
            let mag: f32 = a.iter().zip(&b).map(|(x, y)| (x * y).abs()).sum();
            let mut y_ref = b.clone();
            scalar_axpy(&mut y_ref, alpha, &a);
            for (name, d, ax) in simd() {
                let got = d(&a, &b);
                prop_assert!((got - want).abs() <= 1e-5 * mag + 1e-6, "{name}: {got} vs {want}");
                let mut y = b.clone();
                ax(&mut y, alpha, &a);
                for (g, w) in y.iter().zip(&y_ref) {
                    prop_assert!((g - w).abs() <= 1e-5 * (w.abs() + 1.0), "{name} axpy: {g} vs {w}");
                }
            }
            prop_assert!((dot(&a, &b) - want).abs() <= 1e-5 * mag + 1e-6);
        }
    }
}
