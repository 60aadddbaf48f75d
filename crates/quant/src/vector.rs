//! f32 vector kernels for the parts of the forward pass that stay in f32
//! (attention scores and weighted sums of values), chosen at run time like
//! the quantized kernels.

use half::f16;
use half::slice::HalfFloatSliceExt;
use std::cell::RefCell;
use std::sync::OnceLock;

#[cfg(target_arch = "x86_64")]
mod rows_avx2;

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
    /// Which kernels [`dot_rows`] and [`axpy_rows`] take.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    fused: Fused,
}

/// The several-row kernels of a kernel set: each key or value row loaded
/// once for all the heads that share it.
#[derive(Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // x86 variants.
enum Fused {
    /// Row by row, widened into a buffer (scalar, NEON).
    None,
    /// [`rows_avx2`]'s (avx2, fma and f16c).
    Avx2,
    /// The AVX-512 kernels (avx512f).
    Avx512,
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
                    fused: Fused::Avx512,
                }
            }
            crate::simd::GemmTier::Avx2 | crate::simd::GemmTier::AvxVnni => {
                return VectorKernels {
                    dot: x86::dot_avx2,
                    axpy: x86::axpy_avx2,
                    fused: Fused::Avx2,
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
                    fused: Fused::None,
                }
            }
            _ => {}
        }
        VectorKernels {
            dot: scalar_dot,
            axpy: scalar_axpy,
            fused: Fused::None,
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

/// Rows of keys or values as a cache keeps them: f32, f16 (half the
/// bytes), or Q8_0 blocks (34 bytes for 32 elements). Every f16 and every
/// Q8_0 value is exactly an f32, so a kernel that widens them gives the bits
/// of the f32 kernel on the widened rows.
#[derive(Debug, Clone, Copy)]
pub enum Rows<'a> {
    /// Full-precision rows.
    F32(&'a [f32]),
    /// Half-precision rows.
    F16(&'a [f16]),
    /// Q8_0 blocks (an f16 scale and 32 signed bytes each, as GGUF's
    /// Q8_0); element offsets and row widths are whole blocks.
    Q8_0(&'a [u8]),
}

/// Elements in a Q8_0 block.
pub const Q8_0_BLOCK: usize = 32;
/// Bytes of a Q8_0 block.
pub const Q8_0_BLOCK_BYTES: usize = 34;

/// Bytes of `elements` (whole blocks) stored as Q8_0.
pub fn q8_0_bytes(elements: usize) -> usize {
    elements / Q8_0_BLOCK * Q8_0_BLOCK_BYTES
}

/// The Q8_0 bytes of elements `from..from + n` of `blocks`.
///
/// # Panics
/// If `from` or `n` is not whole blocks, or the range is past the end.
fn q8_0_span(blocks: &[u8], from: usize, n: usize) -> &[u8] {
    assert!(
        from.is_multiple_of(Q8_0_BLOCK) && n.is_multiple_of(Q8_0_BLOCK),
        "Q8_0 rows are read in whole blocks ({from} + {n})"
    );
    &blocks[q8_0_bytes(from)..q8_0_bytes(from + n)]
}

impl<'a> Rows<'a> {
    /// Elements held.
    pub fn len(&self) -> usize {
        match self {
            Rows::F32(r) => r.len(),
            Rows::F16(r) => r.len(),
            Rows::Q8_0(r) => r.len() / Q8_0_BLOCK_BYTES * Q8_0_BLOCK,
        }
    }

    /// Whether no element is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Elements `from..` (the rows from one on).
    ///
    /// # Panics
    /// If `from` is past the end (or, for Q8_0, not on a block).
    pub fn from(self, from: usize) -> Rows<'a> {
        match self {
            Rows::F32(r) => Rows::F32(&r[from..]),
            Rows::F16(r) => Rows::F16(&r[from..]),
            Rows::Q8_0(r) => {
                assert!(
                    from.is_multiple_of(Q8_0_BLOCK),
                    "Q8_0 rows start on a block ({from})"
                );
                Rows::Q8_0(&r[q8_0_bytes(from)..])
            }
        }
    }

    /// Elements `from..from + dst.len()`, widened to f32 into `dst`.
    ///
    /// # Panics
    /// If the range is past the end (or, for Q8_0, not whole blocks).
    pub fn copy_to(&self, from: usize, dst: &mut [f32]) {
        match self {
            Rows::F32(r) => dst.copy_from_slice(&r[from..from + dst.len()]),
            Rows::F16(r) => r[from..from + dst.len()].convert_to_f32_slice(dst),
            Rows::Q8_0(r) => dequantize_q8_0(q8_0_span(r, from, dst.len()), dst),
        }
    }
}

/// Q8_0 `blocks` widened into `dst` (as long as they hold): each value its
/// block's scale times its byte, exactly.
fn dequantize_q8_0(blocks: &[u8], dst: &mut [f32]) {
    for (b, y) in blocks
        .chunks_exact(Q8_0_BLOCK_BYTES)
        .zip(dst.chunks_exact_mut(Q8_0_BLOCK))
    {
        let d = f16::from_le_bytes([b[0], b[1]]).to_f32();
        for (y, &q) in y.iter_mut().zip(&b[2..]) {
            *y = f32::from(q as i8) * d;
        }
    }
}

/// Stores `src` (whole blocks) as Q8_0 into `dst` ([`q8_0_bytes`] of it),
/// as llama.cpp's x86 build quantizes its Q8_0 cache (and activations):
/// per block, the scale `max |x| / 127` as f16 and each value times
/// `127 / max |x|`, rounded half to even, through the CPU's vector
/// quantizer (the same bytes on every tier).
///
/// # Panics
/// If `src` is not whole blocks or `dst` is not its size.
pub fn store_q8_0(src: &[f32], dst: &mut [u8]) {
    assert!(src.len().is_multiple_of(Q8_0_BLOCK) && dst.len() == q8_0_bytes(src.len()));
    crate::gemm::quantize_act_row(crate::simd::best().gemm, crate::GgmlType::Q8_0, src, dst)
        .expect("whole Q8_0 blocks, checked above");
}

/// Rounds every element to what a Q8_0 cache hands back for it (see
/// [`store_q8_0`]), in place, so a batch that attends to its own keys
/// before they are cached sees the values every later step reads.
///
/// # Panics
/// If `xs` is not whole blocks.
pub fn round_to_q8_0(xs: &mut [f32]) {
    assert!(
        xs.len().is_multiple_of(Q8_0_BLOCK),
        "Q8_0 rounds whole blocks"
    );
    let mut block = [0u8; Q8_0_BLOCK_BYTES];
    for chunk in xs.chunks_exact_mut(Q8_0_BLOCK) {
        store_q8_0(chunk, &mut block);
        dequantize_q8_0(&block, chunk);
    }
}

/// Rounds every element to the nearest f16 (ties to even), in place: what an
/// f16 cache will hand back for it, so a batch that attends to its own keys
/// before they are cached sees the values every later step reads.
pub fn round_to_f16(xs: &mut [f32]) {
    let mut half = [f16::ZERO; 64];
    for chunk in xs.chunks_mut(64) {
        let h = &mut half[..chunk.len()];
        h.convert_from_f32_slice(chunk);
        h.convert_to_f32_slice(chunk);
    }
}

/// Stores `src` as f16 (ties to even) into `dst`.
///
/// # Panics
/// If the lengths differ.
pub fn store_f16(src: &[f32], dst: &mut [f16]) {
    dst.convert_from_f32_slice(src);
}

thread_local! {
    /// One row widened from f16, for the kernels without an f16 load.
    static WIDE_ROW: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// `f` over row `j` (`width` elements from `j * stride`) of `rows` as f32:
/// the row itself, or its f16 or Q8_0 widened into a per-thread buffer.
fn with_row<R>(
    rows: Rows<'_>,
    j: usize,
    stride: usize,
    width: usize,
    f: impl FnOnce(&[f32]) -> R,
) -> R {
    match rows {
        Rows::F32(r) => f(&r[j * stride..j * stride + width]),
        Rows::F16(r) => WIDE_ROW.with(|buf| {
            let mut buf = buf.borrow_mut();
            buf.resize(width, 0.0);
            r[j * stride..j * stride + width].convert_to_f32_slice(&mut buf);
            f(&buf)
        }),
        Rows::Q8_0(r) => WIDE_ROW.with(|buf| {
            let mut buf = buf.borrow_mut();
            buf.resize(width, 0.0);
            dequantize_q8_0(q8_0_span(r, j * stride, width), &mut buf);
            f(&buf)
        }),
    }
}

/// Scores of `heads` query vectors (`q`, one after another, each
/// `q.len() / heads` long) against `n` keys that start `stride` elements
/// apart in `keys`: `out[g * out_stride + j] = dot(q_g, key_j)`, each with
/// [`dot`]'s bits (of the key widened to f32). The AVX2 and AVX-512
/// kernels load each key once for all the heads (a decode step's query
/// heads that share a KV head).
///
/// # Panics
/// If `keys` or `out` is too short for the shapes.
pub fn dot_rows(
    q: &[f32],
    heads: usize,
    keys: Rows<'_>,
    stride: usize,
    n: usize,
    out: &mut [f32],
    out_stride: usize,
) {
    let hd = rows_width(q.len(), heads, keys.len(), stride, n, out.len(), out_stride);
    if hd == 0 {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if kernels().fused == Fused::Avx2 && hd.is_multiple_of(32) {
        // SAFETY: (each call) the AVX2 kernels are installed only after
        // avx2, fma and f16c were detected; the asserts bound every key and
        // score, and Q8_0 offsets are whole blocks (`hd`, `stride` are).
        match keys {
            Rows::F32(k) => {
                // SAFETY: as said above the match, for this arm's rows.
                return unsafe { rows_avx2::dot_rows(q, heads, hd, k, stride, n, out, out_stride) };
            }
            Rows::F16(k) => {
                // SAFETY: as said above the match, for this arm's rows.
                return unsafe { rows_avx2::dot_rows(q, heads, hd, k, stride, n, out, out_stride) };
            }
            Rows::Q8_0(k) if stride.is_multiple_of(Q8_0_BLOCK) => {
                // SAFETY: as said above the match, for this arm's rows.
                return unsafe { rows_avx2::dot_rows(q, heads, hd, k, stride, n, out, out_stride) };
            }
            Rows::Q8_0(_) => {}
        }
    }
    #[cfg(target_arch = "x86_64")]
    if kernels().fused == Fused::Avx512 && hd.is_multiple_of(32) {
        // SAFETY: (both calls) the AVX-512 kernels are installed only after
        // avx512f was detected; the asserts bound every key and score.
        match keys {
            Rows::F32(k) => {
                // SAFETY: as said above the match, for this arm's rows.
                return unsafe {
                    x86::dot_rows_avx512(q, heads, hd, k, stride, n, out, out_stride)
                };
            }
            Rows::F16(k) => {
                // SAFETY: as said above the match, for this arm's rows.
                return unsafe {
                    x86::dot_rows_avx512(q, heads, hd, k, stride, n, out, out_stride)
                };
            }
            // Element offsets are whole blocks: `hd` and `stride` are
            // (`rows_width` checked the span in elements).
            Rows::Q8_0(k) if stride.is_multiple_of(Q8_0_BLOCK) => {
                // SAFETY: as said above the match, for this arm's rows.
                return unsafe {
                    x86::dot_rows_avx512(q, heads, hd, k, stride, n, out, out_stride)
                };
            }
            // Widened row by row below.
            Rows::Q8_0(_) => {}
        }
    }
    for j in 0..n {
        with_row(keys, j, stride, hd, |k| {
            for (g, qg) in q.chunks_exact(hd).enumerate() {
                out[g * out_stride + j] = dot(qg, k);
            }
        });
    }
}

/// Weighted sums of `n` value rows that start `stride` elements apart in
/// `vals`, added into `heads` outputs (`o`, one after another, each
/// `o.len() / heads` long): `o_g += p[g * p_stride + j] * value_j` for `j`
/// in order, each step [`axpy`]'s fused multiply-add, so the bits are those
/// of `n` calls of [`axpy`] per head (of the rows widened to f32). The
/// AVX2 and AVX-512 kernels keep a slice of every head's output in
/// registers across the rows and read each row once for all the heads
/// (the `axpy` loop loaded and stored the output for every row and head).
///
/// # Panics
/// If `vals` or `p` is too short for the shapes.
pub fn axpy_rows(
    o: &mut [f32],
    heads: usize,
    p: &[f32],
    p_stride: usize,
    vals: Rows<'_>,
    stride: usize,
    n: usize,
) {
    let width = rows_width(o.len(), heads, vals.len(), stride, n, p.len(), p_stride);
    if width == 0 {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if kernels().fused == Fused::Avx2 && width.is_multiple_of(8) {
        // SAFETY: (each call) as in `dot_rows`; Q8_0 loads start on a
        // quarter block (`width` and `stride` whole blocks, steps of 8).
        match vals {
            Rows::F32(v) => {
                // SAFETY: as said above the match, for this arm's rows.
                return unsafe { rows_avx2::axpy_rows(o, heads, width, p, p_stride, v, stride, n) };
            }
            Rows::F16(v) => {
                // SAFETY: as said above the match, for this arm's rows.
                return unsafe { rows_avx2::axpy_rows(o, heads, width, p, p_stride, v, stride, n) };
            }
            Rows::Q8_0(v)
                if width.is_multiple_of(Q8_0_BLOCK) && stride.is_multiple_of(Q8_0_BLOCK) =>
            {
                // SAFETY: as said above the match, for this arm's rows.
                return unsafe { rows_avx2::axpy_rows(o, heads, width, p, p_stride, v, stride, n) };
            }
            Rows::Q8_0(_) => {}
        }
    }
    #[cfg(target_arch = "x86_64")]
    if kernels().fused == Fused::Avx512 && width.is_multiple_of(16) {
        // SAFETY: (both calls) as in `dot_rows`; the asserts bound every
        // row and weight.
        match vals {
            Rows::F32(v) => {
                // SAFETY: as said above the match, for this arm's rows.
                return unsafe {
                    x86::axpy_rows_avx512(o, heads, width, p, p_stride, v, stride, n)
                };
            }
            Rows::F16(v) => {
                // SAFETY: as said above the match, for this arm's rows.
                return unsafe {
                    x86::axpy_rows_avx512(o, heads, width, p, p_stride, v, stride, n)
                };
            }
            // Loads start on half blocks: `width` and `stride` are whole
            // blocks and the kernel steps by 16.
            Rows::Q8_0(v)
                if width.is_multiple_of(Q8_0_BLOCK) && stride.is_multiple_of(Q8_0_BLOCK) =>
            {
                // SAFETY: as said above the match, for this arm's rows.
                return unsafe {
                    x86::axpy_rows_avx512(o, heads, width, p, p_stride, v, stride, n)
                };
            }
            // Widened row by row below.
            Rows::Q8_0(_) => {}
        }
    }
    for j in 0..n {
        with_row(vals, j, stride, width, |v| {
            for (g, og) in o.chunks_exact_mut(width).enumerate() {
                axpy(og, p[g * p_stride + j], v);
            }
        });
    }
}

/// The width of each of `heads` vectors that fill `per_heads` floats, for
/// [`dot_rows`] and [`axpy_rows`]; 0 where there is nothing to do.
///
/// # Panics
/// If `rows` elements do not hold `n` rows of that width `stride` apart, or
/// `per_key` floats (scores or weights) do not hold `heads` rows of `n`
/// `key_stride` apart.
fn rows_width(
    per_heads: usize,
    heads: usize,
    rows: usize,
    stride: usize,
    n: usize,
    per_key: usize,
    key_stride: usize,
) -> usize {
    let width = per_heads.checked_div(heads).unwrap_or(0);
    if n == 0 || width == 0 {
        return 0;
    }
    assert!(rows >= (n - 1) * stride + width && stride >= width);
    assert!(per_key >= (heads - 1) * key_stride + n && key_stride >= n);
    width
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
    use crate::simd::x86::hsum_ps as hsum8;
    use half::f16;
    use std::arch::x86_64::*;

    /// An element type the fused kernels load 16 at a time, widened to f32.
    pub(super) trait Lanes: Copy {
        /// Sixteen elements from element `at` of the rows that start at
        /// `p`, as f32.
        ///
        /// # Safety
        /// avx512f present; elements `at..at + 16` readable from `p`.
        unsafe fn load16(p: *const Self, at: usize) -> __m512;
    }

    impl Lanes for f32 {
        #[inline]
        #[target_feature(enable = "avx512f")]
        unsafe fn load16(p: *const f32, at: usize) -> __m512 {
            // SAFETY: the caller's contract.
            unsafe { _mm512_loadu_ps(p.add(at)) }
        }
    }

    impl Lanes for f16 {
        #[inline]
        #[target_feature(enable = "avx512f")]
        unsafe fn load16(p: *const f16, at: usize) -> __m512 {
            // SAFETY: the caller's contract (16 halves are 32 bytes); f16 is
            // a plain 16-bit pattern, which `vcvtph2ps` widens exactly.
            unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(p.add(at).cast())) }
        }
    }

    /// Bytes here are Q8_0 blocks ([`super::Rows::Q8_0`]): element `at` (a
    /// multiple of 16) is in block `at / 32`, whose f16 scale comes first.
    impl Lanes for u8 {
        #[inline]
        #[target_feature(enable = "avx512f")]
        unsafe fn load16(p: *const u8, at: usize) -> __m512 {
            debug_assert!(at.is_multiple_of(16));
            // SAFETY: the caller's contract: the block holding elements
            // `at..at + 16` is readable (its scale, then 32 bytes).
            unsafe {
                let block = p.add(at / super::Q8_0_BLOCK * super::Q8_0_BLOCK_BYTES);
                let d = _mm512_cvtph_ps(_mm256_set1_epi16(block.cast::<i16>().read_unaligned()));
                let q = _mm_loadu_si128(block.add(2 + at % super::Q8_0_BLOCK).cast());
                // Each byte times the scale: 7 by 11 significant bits, so
                // exact, as the scalar widening is.
                _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)), d)
            }
        }
    }

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

    /// [`super::dot_rows`] for head widths that are a multiple of 32: up to
    /// four heads at a time, each key chunk loaded once for them, each head
    /// in [`dot_avx512_impl`]'s two chains and reduction.
    ///
    /// # Safety
    /// avx512f present; `q` holds `heads * hd` floats, `keys` `n` rows of
    /// `hd` `stride` apart, `out` `heads` rows of `n` `out_stride` apart.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx512f,avx2,fma")]
    pub(super) unsafe fn dot_rows_avx512<T: Lanes>(
        q: &[f32],
        heads: usize,
        hd: usize,
        keys: &[T],
        stride: usize,
        n: usize,
        out: &mut [f32],
        out_stride: usize,
    ) {
        let mut g0 = 0;
        while g0 < heads {
            let h = (heads - g0).min(4);
            // SAFETY: the caller's shapes, heads g0..g0 + h.
            unsafe {
                match h {
                    4 => dot_rows_h::<T, 4>(q, g0, hd, keys, stride, n, out, out_stride),
                    3 => dot_rows_h::<T, 3>(q, g0, hd, keys, stride, n, out, out_stride),
                    2 => dot_rows_h::<T, 2>(q, g0, hd, keys, stride, n, out, out_stride),
                    _ => dot_rows_h::<T, 1>(q, g0, hd, keys, stride, n, out, out_stride),
                }
            }
            g0 += h;
        }
    }

    /// Heads `g0..g0 + H` of [`dot_rows_avx512`].
    #[allow(clippy::too_many_arguments)]
    #[inline]
    #[target_feature(enable = "avx512f,avx2,fma")]
    unsafe fn dot_rows_h<T: Lanes, const H: usize>(
        q: &[f32],
        g0: usize,
        hd: usize,
        keys: &[T],
        stride: usize,
        n: usize,
        out: &mut [f32],
        out_stride: usize,
    ) {
        let (qp, kp, op) = (q.as_ptr(), keys.as_ptr(), out.as_mut_ptr());
        for j in 0..n {
            let mut acc = [[_mm512_setzero_ps(); 2]; H];
            // SAFETY: key j's `hd` floats and each head's are inside the
            // shapes (the caller's contract).
            unsafe {
                let k = j * stride;
                let mut i = 0;
                while i < hd {
                    let (k0, k1) = (T::load16(kp, k + i), T::load16(kp, k + i + 16));
                    for (g, a) in acc.iter_mut().enumerate() {
                        let qg = qp.add((g0 + g) * hd + i);
                        a[0] = _mm512_fmadd_ps(_mm512_loadu_ps(qg), k0, a[0]);
                        a[1] = _mm512_fmadd_ps(_mm512_loadu_ps(qg.add(16)), k1, a[1]);
                    }
                    i += 32;
                }
                for (g, a) in acc.iter().enumerate() {
                    let s = _mm512_add_ps(a[0], a[1]);
                    let lo = _mm512_castps512_ps256(s);
                    let hi = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(s)));
                    *op.add((g0 + g) * out_stride + j) = hsum8(_mm256_add_ps(lo, hi));
                }
            }
        }
    }

    /// [`super::axpy_rows`] for output widths that are a multiple of 16:
    /// up to four heads by four vectors of 16 in registers across the rows.
    ///
    /// # Safety
    /// avx512f present; `o` holds `heads * width` floats, `vals` `n` rows of
    /// `width` `stride` apart, `p` `heads` rows of `n` `p_stride` apart.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn axpy_rows_avx512<T: Lanes>(
        o: &mut [f32],
        heads: usize,
        width: usize,
        p: &[f32],
        p_stride: usize,
        vals: &[T],
        stride: usize,
        n: usize,
    ) {
        let mut g0 = 0;
        while g0 < heads {
            let h = (heads - g0).min(4);
            let mut d0 = 0;
            while d0 < width {
                let v = ((width - d0) / 16).min(4);
                // SAFETY: the caller's shapes, heads g0..g0 + h and the
                // columns d0..d0 + 16v of each.
                unsafe {
                    macro_rules! go {
                        ($($hh:literal),*) => {
                            match (h, v) {
                                $( ($hh, 4) => axpy_rows_hv::<T, $hh, 4>(o, g0, d0, width, p, p_stride, vals, stride, n),
                                   ($hh, 3) => axpy_rows_hv::<T, $hh, 3>(o, g0, d0, width, p, p_stride, vals, stride, n),
                                   ($hh, 2) => axpy_rows_hv::<T, $hh, 2>(o, g0, d0, width, p, p_stride, vals, stride, n),
                                   ($hh, _) => axpy_rows_hv::<T, $hh, 1>(o, g0, d0, width, p, p_stride, vals, stride, n), )*
                                _ => {}
                            }
                        };
                    }
                    go!(1, 2, 3, 4);
                }
                d0 += 16 * v;
            }
            g0 += h;
        }
    }

    /// Heads `g0..g0 + H`, columns `d0..d0 + 16 V` of [`axpy_rows_avx512`].
    #[allow(clippy::too_many_arguments)]
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn axpy_rows_hv<T: Lanes, const H: usize, const V: usize>(
        o: &mut [f32],
        g0: usize,
        d0: usize,
        width: usize,
        p: &[f32],
        p_stride: usize,
        vals: &[T],
        stride: usize,
        n: usize,
    ) {
        let (op, pp, vp) = (o.as_mut_ptr(), p.as_ptr(), vals.as_ptr());
        // SAFETY: every access is inside the caller's shapes (heads
        // g0..g0 + H, columns d0..d0 + 16V, rows 0..n).
        unsafe {
            let mut acc = [[_mm512_setzero_ps(); V]; H];
            for (g, a) in acc.iter_mut().enumerate() {
                for (c, x) in a.iter_mut().enumerate() {
                    *x = _mm512_loadu_ps(op.add((g0 + g) * width + d0 + 16 * c));
                }
            }
            for j in 0..n {
                let row = j * stride + d0;
                let v: [__m512; V] = std::array::from_fn(|c| T::load16(vp, row + 16 * c));
                for (g, a) in acc.iter_mut().enumerate() {
                    let w = _mm512_set1_ps(*pp.add((g0 + g) * p_stride + j));
                    for (x, &vc) in a.iter_mut().zip(&v) {
                        *x = _mm512_fmadd_ps(w, vc, *x);
                    }
                }
            }
            for (g, a) in acc.iter().enumerate() {
                for (c, &x) in a.iter().enumerate() {
                    _mm512_storeu_ps(op.add((g0 + g) * width + d0 + 16 * c), x);
                }
            }
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

    /// `dot_rows` and `axpy_rows` over `rows` (`n` rows `stride` apart,
    /// `heads` heads of `q`) give the scalar kernels' bits on `widened`,
    /// the same rows as f32; `val` makes the weights and the starting sums.
    #[allow(clippy::too_many_arguments)]
    fn rows_match_widened(
        form: &str,
        q: &[f32],
        heads: usize,
        rows: Rows<'_>,
        widened: &[f32],
        stride: usize,
        n: usize,
        gap: usize,
        val: impl Fn(usize) -> f32,
    ) -> Result<(), TestCaseError> {
        let wide = q.len() / heads;
        let out_stride = n + gap;
        let mut got = vec![f32::NAN; heads * out_stride];
        dot_rows(q, heads, rows, stride, n, &mut got, out_stride);
        for g in 0..heads {
            for j in 0..n {
                let want = scalar_dot(
                    &q[g * wide..(g + 1) * wide],
                    &widened[j * stride..j * stride + wide],
                );
                let v = got[g * out_stride + j];
                prop_assert_eq!(
                    v.to_bits(),
                    want.to_bits(),
                    "{} dot head {} key {}",
                    form,
                    g,
                    j
                );
            }
        }
        let p: Vec<f32> = (0..heads * out_stride)
            .map(|i| val(i + 200_000) / 10.0)
            .collect();
        let start: Vec<f32> = (0..heads * wide).map(|i| val(i + 300_000)).collect();
        let mut want = start.clone();
        for j in 0..n {
            for g in 0..heads {
                scalar_axpy(
                    &mut want[g * wide..(g + 1) * wide],
                    p[g * out_stride + j],
                    &widened[j * stride..j * stride + wide],
                );
            }
        }
        let mut got = start;
        axpy_rows(&mut got, heads, &p, out_stride, rows, stride, n);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            prop_assert_eq!(g.to_bits(), w.to_bits(), "{} axpy element {}", form, i);
        }
        Ok(())
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

        /// The several-row kernels give the bits of one `dot` or `axpy`
        /// per row and head (widths that take the fused kernels and widths
        /// that do not, one to six heads, rows apart by more than a width).
        #[test]
        fn rows_kernels_are_dots_and_axpys(
            heads in 1usize..7,
            wide in prop_oneof![Just(32usize), Just(64), Just(256), Just(48), Just(20)],
            n in 1usize..40,
            gap in 0usize..5,
            seed in any::<u64>(),
        ) {
            let stride = wide + gap;
            let val = |i: usize| {
                let h = (i as u64 ^ seed).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40;
                (h % 2001) as f32 / 100.0 - 10.0
            };
            let q: Vec<f32> = (0..heads * wide).map(val).collect();
            let keys: Vec<f32> = (0..n * stride).map(|i| val(i + 100_000)).collect();
            // The same rows in f16, and those widened: an f16 kernel must
            // give the f32 kernel's bits on the widened rows.
            let halves: Vec<f16> = keys.iter().map(|&x| f16::from_f32(x * 1.37)).collect();
            let widened: Vec<f32> = halves.iter().map(|h| h.to_f32()).collect();
            for (form, rows, keys) in [("f32", Rows::F32(&keys), &keys), ("f16", Rows::F16(&halves), &widened)] {
                rows_match_widened(form, &q, heads, rows, keys, stride, n, gap, val)?;
            }
        }

        /// Q8_0 rows: the row kernels give the f32 kernels' bits on the
        /// widened rows, rounding gives what storing and widening give,
        /// and a value comes back within half a step of its block's scale
        /// (plus what rounding the scale to f16 moves the largest one).
        #[test]
        fn q8_0_rows_are_their_widened_values(
            heads in 1usize..5,
            blocks in 1usize..9,
            gap in 0usize..3,
            n in 1usize..20,
            seed in any::<u64>(),
        ) {
            let wide = blocks * Q8_0_BLOCK;
            let stride = wide + gap * Q8_0_BLOCK;
            let val = |i: usize| {
                let h = (i as u64 ^ seed).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40;
                (h % 2001) as f32 / 100.0 - 10.0
            };
            let q: Vec<f32> = (0..heads * wide).map(val).collect();
            let keys: Vec<f32> = (0..n * stride).map(|i| val(i + 100_000) * 1.37).collect();
            let mut stored = vec![0u8; q8_0_bytes(keys.len())];
            store_q8_0(&keys, &mut stored);
            let mut widened = vec![0.0; keys.len()];
            Rows::Q8_0(&stored).copy_to(0, &mut widened);
            let mut rounded = keys.clone();
            round_to_q8_0(&mut rounded);
            prop_assert_eq!(&rounded, &widened);
            for (b, (x, w)) in keys.chunks(32).zip(widened.chunks(32)).enumerate() {
                let step = x.iter().fold(0.0f32, |m, v| m.max(v.abs())) / 127.0;
                for (x, w) in x.iter().zip(w) {
                    prop_assert!((x - w).abs() <= step * (0.5 + 127.0 / 2048.0) + 1e-6, "block {}: {} -> {}", b, x, w);
                }
            }
            let rows = Rows::Q8_0(&stored);
            rows_match_widened("q8_0", &q, heads, rows, &widened, stride, n, gap, val)?;
            // A view from a later row reads the same elements.
            let mut tail = vec![0.0; wide];
            rows.from(stride * (n - 1)).copy_to(0, &mut tail);
            prop_assert_eq!(&tail[..], &widened[(n - 1) * stride..(n - 1) * stride + wide]);
        }

        /// Rounding to f16 gives what an f16 stores and widens back, and
        /// storing gives the same halves as one conversion per element.
        #[test]
        fn f16_rounding_is_the_conversion(xs in prop::collection::vec(-70000.0f32..70000.0, 0..200)) {
            let mut rounded = xs.clone();
            round_to_f16(&mut rounded);
            let mut stored = vec![f16::ZERO; xs.len()];
            store_f16(&xs, &mut stored);
            for ((x, r), s) in xs.iter().zip(&rounded).zip(&stored) {
                let want = f16::from_f32(*x);
                prop_assert_eq!(r.to_bits(), want.to_f32().to_bits(), "{}", x);
                prop_assert_eq!(s.to_bits(), want.to_bits(), "{}", x);
            }
            let mut back = vec![0.0; xs.len()];
            Rows::F16(&stored).copy_to(0, &mut back);
            prop_assert_eq!(back, rounded);
        }
    }
}
