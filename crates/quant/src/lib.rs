//! Tensor block formats, quantize/dequantize, and dot/matmul kernels with run-time
//! SIMD dispatch; they run on the [`threads`] pool.
//!
//! Block layouts are byte-exact ggml/llama.cpp layouts, so weights are used straight
//! from the GGUF mmap. Every format has a scalar reference kernel ([`scalar`]) that
//! the SIMD kernels are tested against.

pub mod activation;
mod bf16_gemm;
mod error;
mod float_gemm;
mod formats;
mod gemm;
mod matmul;
pub mod scalar;
mod sgemm;
mod sgemm_packed;
mod simd;
pub mod vector;

/// A xorshift stream of floats in [-1, 1) from the nonzero state `x`, for
/// the unit tests' operands.
#[cfg(test)]
pub(crate) fn xorshift_values(mut x: u64) -> impl FnMut() -> f32 {
    move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
}

pub use error::QuantError;
pub use gguf::GgmlType;
pub use matmul::{matmul, Gate, Matrix, PreparedActs, Product, ROW_BATCH_MAX};

use formats::blocks::{
    BlockIQ1M, BlockIQ1S, BlockIQ2S, BlockIQ2XS, BlockIQ2XXS, BlockIQ3S, BlockIQ3XXS, BlockIQ4NL,
    BlockIQ4XS, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ4_0, BlockQ4_1, BlockQ5K, BlockQ5_0, BlockQ5_1,
    BlockQ6K, BlockQ8K, BlockQ8_0, BlockQ8_1,
};
use formats::{float, iquants, kquantize, kquants, legacy};

/// Whether this crate can dequantize and multiply weights of this type.
pub fn is_supported(ty: GgmlType) -> bool {
    use GgmlType::*;
    matches!(
        ty,
        F32 | F16
            | BF16
            | Q4_0
            | Q4_1
            | Q5_0
            | Q5_1
            | Q8_0
            | Q2_K
            | Q3_K
            | Q4_K
            | Q5_K
            | Q6_K
            | Q8_K
            | IQ4_NL
            | IQ4_XS
            | IQ2_XXS
            | IQ2_XS
            | IQ2_S
            | IQ3_XXS
            | IQ3_S
            | IQ1_S
            | IQ1_M
    )
}

/// The activation format multiplied against weights of type `ty`, as in llama.cpp:
/// Q4_0/Q5_0/Q8_0/IQ4_NL → Q8_0, Q4_1/Q5_1 → Q8_1, K-quants and the other IQ
/// types → Q8_K, everything else → F32.
pub fn vec_dot_type(ty: GgmlType) -> GgmlType {
    use GgmlType::*;
    match ty {
        Q4_0 | Q5_0 | Q8_0 | IQ4_NL => Q8_0,
        Q4_1 | Q5_1 => Q8_1,
        Q2_K | Q3_K | Q4_K | Q5_K | Q6_K | Q8_K | IQ4_XS => Q8_K,
        IQ2_XXS | IQ2_XS | IQ2_S | IQ3_XXS | IQ3_S | IQ1_S | IQ1_M => Q8_K,
        _ => F32,
    }
}

/// Blocks making up `n` elements of `ty`, or the error saying why not.
fn blocks(ty: GgmlType, n: usize) -> Result<usize, QuantError> {
    let block = ty.block_len();
    if !n.is_multiple_of(block) {
        return Err(QuantError::NotBlockMultiple { ty, len: n, block });
    }
    Ok(n / block)
}

/// Bytes taken by `n` elements of `ty`.
pub fn row_size(ty: GgmlType, n: usize) -> Result<usize, QuantError> {
    blocks(ty, n)?
        .checked_mul(ty.block_bytes())
        .ok_or(QuantError::Overflow)
}

/// Whether the kernels in use read `ty` faster from the decode layout
/// [`interleave`] makes (Q4_K, Q6_K, Q5_0 and Q8_0 on x86-64 with AVX2), so a loader
/// gains by making it.
pub fn interleaves(ty: GgmlType) -> bool {
    simd::best().interleaves(ty)
}

/// `rows` rows of `cols` weights of `ty` (`data`, row after row)
/// rearranged into the decode layout that [`Matrix::interleaved`] reads:
/// groups of eight rows, each group's blocks side by side (see
/// `formats/interleave.rs`). `None` where it does not apply: a type without
/// the layout, or rows not a whole number of groups. Its size is the
/// input's. Large matrices are shared out over the default threads, and
/// `consumed` is given each stretch of `data` (about a MiB) once it has
/// been read, so a loader can drop the file's pages as it goes and never
/// hold both copies whole.
pub fn interleave(
    ty: GgmlType,
    rows: usize,
    cols: usize,
    data: &[u8],
    consumed: impl Fn(&[u8]) + Sync,
) -> Result<Option<Vec<u8>>, QuantError> {
    use formats::interleave::{interleave_group, supports, GROUP_ROWS};
    // An empty matrix (no rows or no columns) has nothing to rearrange.
    if !supports(ty) || !rows.is_multiple_of(GROUP_ROWS) || data.is_empty() {
        return Ok(None);
    }
    let m = Matrix::new(ty, rows, cols, data)?;
    let (gb, nb) = (GROUP_ROWS * m.row_bytes(), cols / ty.block_len());
    let mut out = vec![0u8; data.len()];
    // Stretches of whole groups, about a MiB each; threads take turns.
    let per = ((1 << 20) / gb.max(1)).max(1) * gb;
    let workers = threads::default_threads().clamp(1, data.len().div_ceil(per));
    let consumed = &consumed;
    std::thread::scope(|s| {
        let mut parts: Vec<Vec<(usize, &mut [u8])>> = (0..workers).map(|_| Vec::new()).collect();
        for (i, part) in out.chunks_mut(per).enumerate() {
            parts[i % workers].push((i * per, part));
        }
        for mine in parts {
            s.spawn(move || {
                for (at, part) in mine {
                    for (k, dst) in part.chunks_exact_mut(gb).enumerate() {
                        let first = at / gb * GROUP_ROWS + k * GROUP_ROWS;
                        interleave_group(ty, std::array::from_fn(|r| m.row(first + r)), nb, dst);
                    }
                    consumed(&data[at..at + part.len()]);
                }
            });
        }
    });
    Ok(Some(out))
}

/// Dequantize `dst.len()` elements from `src` (a whole number of blocks).
pub fn dequantize(ty: GgmlType, src: &[u8], dst: &mut [f32]) -> Result<(), QuantError> {
    dequantize_with(simd::best(), ty, src, dst)
}

/// [`dequantize`] on the kernels of table `k` (every table gives the same bits).
fn dequantize_with(
    k: &simd::Kernels,
    ty: GgmlType,
    src: &[u8],
    dst: &mut [f32],
) -> Result<(), QuantError> {
    use GgmlType::*;
    let tier = k.gemm;
    let need = row_size(ty, dst.len())?;
    if !is_supported(ty) && ty != Q8_1 {
        return Err(QuantError::Unsupported(ty));
    }
    let src = src.get(..need).ok_or(QuantError::BufferTooShort {
        what: "source",
        need,
        have: src.len(),
    })?;
    match ty {
        F32 => float::dequant_f32(src, dst),
        F16 => float::dequant_f16(src, dst),
        BF16 => float::dequant_bf16(src, dst),
        Q4_0 => simd::dequantize_row_on::<BlockQ4_0>(tier, src, dst),
        Q4_1 => simd::dequantize_row_on::<BlockQ4_1>(tier, src, dst),
        Q5_0 => simd::dequantize_row_on::<BlockQ5_0>(tier, src, dst),
        Q5_1 => simd::dequantize_row_on::<BlockQ5_1>(tier, src, dst),
        Q8_0 => simd::dequantize_row_on::<BlockQ8_0>(tier, src, dst),
        Q8_1 => simd::dequantize_row_on::<BlockQ8_1>(tier, src, dst),
        Q2_K => simd::dequantize_row_on::<BlockQ2K>(tier, src, dst),
        Q3_K => simd::dequantize_row_on::<BlockQ3K>(tier, src, dst),
        Q4_K => simd::dequantize_row_on::<BlockQ4K>(tier, src, dst),
        Q5_K => simd::dequantize_row_on::<BlockQ5K>(tier, src, dst),
        Q6_K => simd::dequantize_row_on::<BlockQ6K>(tier, src, dst),
        Q8_K => simd::dequantize_row_on::<BlockQ8K>(tier, src, dst),
        IQ4_NL => simd::dequantize_row_on::<BlockIQ4NL>(tier, src, dst),
        IQ4_XS => simd::dequantize_row_on::<BlockIQ4XS>(tier, src, dst),
        IQ2_XXS => simd::dequantize_row_on::<BlockIQ2XXS>(tier, src, dst),
        IQ2_XS => simd::dequantize_row_on::<BlockIQ2XS>(tier, src, dst),
        IQ2_S => simd::dequantize_row_on::<BlockIQ2S>(tier, src, dst),
        IQ3_XXS => simd::dequantize_row_on::<BlockIQ3XXS>(tier, src, dst),
        IQ3_S => simd::dequantize_row_on::<BlockIQ3S>(tier, src, dst),
        IQ1_S => simd::dequantize_row_on::<BlockIQ1S>(tier, src, dst),
        IQ1_M => simd::dequantize_row_on::<BlockIQ1M>(tier, src, dst),
        _ => return Err(QuantError::Unsupported(ty)),
    }
    Ok(())
}

/// Whether [`quantize`] can produce this type.
pub fn can_quantize(ty: GgmlType) -> bool {
    use GgmlType::*;
    matches!(
        ty,
        F32 | F16
            | BF16
            | Q4_0
            | Q4_1
            | Q5_0
            | Q5_1
            | Q8_0
            | Q8_1
            | Q2_K
            | Q3_K
            | Q4_K
            | Q5_K
            | Q6_K
            | Q8_K
            | IQ4_NL
            | IQ4_XS
    )
}

/// Checks sizes for a quantizer and returns the destination prefix to fill.
fn quant_dst(ty: GgmlType, n: usize, dst: &mut [u8]) -> Result<&mut [u8], QuantError> {
    let need = row_size(ty, n)?;
    let have = dst.len();
    dst.get_mut(..need).ok_or(QuantError::BufferTooShort {
        what: "destination",
        need,
        have,
    })
}

/// Quantize f32 values into `ty` blocks with llama.cpp's reference quantizers (the
/// bytes `llama-quantize` and gguf-py write). Needs `src.len()` to be whole blocks.
pub fn quantize(ty: GgmlType, src: &[f32], dst: &mut [u8]) -> Result<(), QuantError> {
    use GgmlType::*;
    if !can_quantize(ty) {
        return Err(QuantError::Unsupported(ty));
    }
    let dst = quant_dst(ty, src.len(), dst)?;
    match ty {
        F32 => float::quant_f32(src, dst),
        F16 => float::quant_f16(src, dst),
        BF16 => float::quant_bf16(src, dst),
        Q4_0 => legacy::quant_q4_0(src, dst),
        Q4_1 => legacy::quant_q4_1(src, dst),
        Q5_0 => legacy::quant_q5_0(src, dst),
        Q5_1 => legacy::quant_q5_1(src, dst),
        Q8_0 => legacy::quant_q8_0_ref(src, dst),
        Q8_1 => legacy::quant_q8_1_act(src, dst),
        Q2_K => kquantize::quant_q2_k(src, dst),
        Q3_K => kquantize::quant_q3_k(src, dst),
        Q4_K => kquantize::quant_q4_k(src, dst),
        Q5_K => kquantize::quant_q5_k(src, dst),
        Q6_K => kquantize::quant_q6_k(src, dst),
        Q8_K => kquants::quant_q8_k(src, dst),
        IQ4_NL => iquants::quant_iq4_nl(src, dst),
        IQ4_XS => iquants::quant_iq4_xs(src, dst),
        _ => return Err(QuantError::Unsupported(ty)),
    }
    Ok(())
}

/// Quantize activations into a [`vec_dot_type`] the way llama.cpp's x86 build does at
/// run time (for Q8_0/Q8_1: id = 127/amax, round half to even), so logits track it.
pub fn quantize_activation(ty: GgmlType, src: &[f32], dst: &mut [u8]) -> Result<(), QuantError> {
    match ty {
        GgmlType::Q8_0 => {
            let dst = quant_dst(ty, src.len(), dst)?;
            legacy::quant_q8_0_act(src, dst);
            Ok(())
        }
        GgmlType::Q8_1 | GgmlType::Q8_K | GgmlType::F32 => quantize(ty, src, dst),
        _ => Err(QuantError::Unsupported(ty)),
    }
}

/// Dot product of one weight row (type `ty`, `n` elements) with one activation row
/// already in [`vec_dot_type`]`(ty)`, through the best SIMD kernel for this CPU.
///
/// An error when the type is unsupported or either buffer is too short; it
/// never reads out of bounds.
pub fn vec_dot(ty: GgmlType, n: usize, w: &[u8], a: &[u8]) -> Result<f32, QuantError> {
    simd::checked_vec_dot(simd::best(), ty, n, w, a)
}

/// Dot product of a float weight row (F32, F16 or BF16) with `x.len()` f32 values,
/// through the best SIMD kernel; an error on a non-float type or short row.
pub fn vec_dot_f32(ty: GgmlType, w: &[u8], x: &[f32]) -> Result<f32, QuantError> {
    simd::checked_vec_dot_f32(simd::best(), ty, w, x)
}

/// Name of the kernel set in use (`scalar`, `avx2`, `avxvnni`, `avx512`).
pub fn kernel_name() -> &'static str {
    simd::best().name
}

/// Names of the kernel sets this CPU can run, slowest first.
pub fn kernel_sets() -> Vec<&'static str> {
    simd::available().iter().map(|k| k.name).collect()
}

/// Runs the named kernel set (one of [`kernel_sets`]) for the rest of the
/// process, as `HEARTH_CPU` does: a lower tier on a CPU that has a higher
/// one, to test and measure every tier on one machine. Must come before the
/// first product; an error when the CPU lacks the set or another is in use.
pub fn select_kernels(name: &str) -> Result<&'static str, QuantError> {
    simd::select(name)
}

/// Test and benchmark hooks: every kernel table this CPU can run.
#[doc(hidden)]
pub mod testing {
    use crate::formats::blocks::{blocks, BlockFormat, WeightFormat};
    use crate::{simd, GgmlType, QuantError};

    /// `blocks` blocks of the lattice format `ty` (IQ2, IQ3 or IQ1 but
    /// IQ4) of random bits from `next` but for a finite super-block scale
    /// of at most `scale` in magnitude, which no quantizer here writes; an
    /// error for any other type.
    pub fn random_lattice_blocks(
        ty: GgmlType,
        blocks: usize,
        scale: f32,
        mut next: impl FnMut() -> u64,
    ) -> Result<Vec<u8>, QuantError> {
        use crate::formats::lattice;
        if !lattice::is_lattice(ty) {
            return Err(QuantError::Unsupported(ty));
        }
        let bb = ty.block_bytes();
        let mut out: Vec<u8> = (0..blocks * bb).map(|_| next() as u8).collect();
        for block in out.chunks_exact_mut(bb) {
            let unit = (next() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0;
            lattice::set_scale(ty, block, unit * scale);
        }
        Ok(out)
    }

    /// Names of the kernel tables this CPU can run, scalar first.
    pub fn kernel_sets() -> Vec<&'static str> {
        crate::kernel_sets()
    }

    fn table(set: &str) -> Result<&'static crate::simd::Kernels, QuantError> {
        crate::simd::available()
            .into_iter()
            .find(|k| k.name == set)
            .ok_or_else(|| QuantError::UnknownKernelSet(set.to_string()))
    }

    /// [`crate::vector::sgemm_packed`] through the named kernel table's
    /// tier, to time each tier's f32 panel product on one machine.
    pub fn sgemm_packed_with(
        set: &str,
        m: usize,
        a: &[f32],
        lda: usize,
        b: &crate::vector::PackedB,
        c: &mut [f32],
        ldc: usize,
    ) -> Result<(), QuantError> {
        crate::sgemm_packed::sgemm_packed_on(table(set)?.gemm, m, a, lda, b, c, ldc)
    }

    /// `vec_dot` through the named kernel table.
    pub fn vec_dot_with(
        set: &str,
        ty: GgmlType,
        n: usize,
        w: &[u8],
        a: &[u8],
    ) -> Result<f32, QuantError> {
        crate::simd::checked_vec_dot(table(set)?, ty, n, w, a)
    }

    /// One weight panel and a batch of activation rows, to time the prefill
    /// tile kernel of each kernel set alone.
    pub struct TileBench {
        panel: crate::gemm::Panel,
        acts: crate::gemm::Acts,
        rows: usize,
    }

    impl TileBench {
        /// A panel of `ty` weights (32 rows of `cols`, quantized from
        /// `weights`, which holds 32 × `cols` values) and `x.len() / cols`
        /// activation rows.
        pub fn new(
            ty: GgmlType,
            cols: usize,
            weights: &[f32],
            x: &[f32],
        ) -> Result<Self, QuantError> {
            use crate::gemm::{group_len, Acts, Panel, NR};
            let g = group_len(ty).ok_or(QuantError::Unsupported(ty))?;
            let rb = crate::row_size(ty, cols)?;
            let need = NR.checked_mul(cols).ok_or(QuantError::Overflow)?;
            let weights = weights.get(..need).ok_or(QuantError::BufferTooShort {
                what: "weights",
                need,
                have: weights.len(),
            })?;
            let mut w = vec![0u8; rb * NR];
            crate::quantize(ty, weights, &mut w)?;
            let views: Vec<&[u8]> = w.chunks_exact(rb.max(1)).collect();
            let mut panel = Panel::default();
            panel.fill(ty, &views, cols);
            let mut acts = Acts::default();
            let tier = crate::simd::GemmTier::Portable;
            acts.fill(
                tier,
                x,
                cols,
                crate::vec_dot_type(ty),
                g,
                crate::gemm::offset(ty),
            );
            let rows = x.len().checked_div(cols).unwrap_or(0);
            Ok(TileBench { panel, acts, rows })
        }

        /// Every activation row against the panel through the named kernel
        /// set's tile; returns the sum of the results.
        pub fn run(&self, set: &str) -> Result<f32, QuantError> {
            let tier = table(set)?.gemm;
            let mut s = 0.0;
            let step = crate::gemm::tile_rows(tier);
            for c in (0..self.rows).step_by(step) {
                let m = (self.rows - c).min(step);
                let t = crate::gemm::tile(tier, &self.panel, &self.acts, c, m);
                s += t[0][0] + t[m - 1][crate::gemm::NR - 1];
            }
            Ok(s)
        }
    }

    /// Quantizes the rows of `x` (`cols` wide) for a panel product of `ty`
    /// weights, as the product does before its tiles, through the named
    /// kernel set's tier, on this thread, into `acts`' reused buffers;
    /// returns a byte of the last row so the work cannot be skipped.
    pub fn panel_acts_with(
        set: &str,
        ty: GgmlType,
        x: &[f32],
        cols: usize,
        acts: &mut PanelActs,
    ) -> Result<u8, QuantError> {
        let tier = table(set)?.gemm;
        let g = crate::gemm::group_len(ty).ok_or(QuantError::Unsupported(ty))?;
        let at = crate::vec_dot_type(ty);
        if cols == 0 || !cols.is_multiple_of(at.block_len()) {
            return Err(QuantError::NotBlockMultiple {
                ty: at,
                len: cols,
                block: at.block_len(),
            });
        }
        let acts = &mut acts.0;
        acts.fill(tier, x, cols, at, g, crate::gemm::offset(ty));
        Ok(acts.q[(x.len() / cols * cols).saturating_sub(1)])
    }

    /// The reusable buffers of [`panel_acts_with`].
    #[derive(Default)]
    pub struct PanelActs(crate::gemm::Acts);

    /// Packs every 32-row panel of `w` in turn, as a prefill product does
    /// before its tiles (with the packer of the kernels in use), into one
    /// reused panel; returns a byte of the last
    /// panel so the work cannot be skipped. Times packing alone.
    pub fn pack_panels(w: &crate::Matrix) -> Result<u8, QuantError> {
        use crate::gemm::{group_len, Panel, NR};
        group_len(w.ty()).ok_or(QuantError::Unsupported(w.ty()))?;
        let mut panel = Panel::default();
        for r0 in (0..w.rows()).step_by(NR) {
            let views: Vec<&[u8]> = (r0..(r0 + NR).min(w.rows())).map(|r| w.row(r)).collect();
            panel.fill_on(crate::simd::best().gemm, w.ty(), &views, w.cols(), false);
        }
        Ok(panel.q.first().copied().unwrap_or(0))
    }

    /// A decode product's rows, one thread: every row of `w` against one
    /// activation row through the named kernel set, four rows per call where
    /// `four` asks for it and the set has a rows kernel for `ty` (else one by
    /// one). Returns whether the four-row kernel ran, to time the two ways
    /// side by side.
    pub fn decode_rows_with(
        set: &str,
        w: &crate::Matrix,
        a: &[u8],
        out: &mut [f32],
        four: bool,
    ) -> Result<bool, QuantError> {
        /// The rows, for one format.
        struct Rows<'a> {
            w: &'a crate::Matrix<'a>,
            a: &'a [u8],
            out: &'a mut [f32],
            four: bool,
        }
        impl simd::ForFormat for Rows<'_> {
            type Out = Result<bool, QuantError>;
            fn run<W: WeightFormat>(
                self,
                _: &simd::Kernels,
                f: &simd::FormatKernels<W>,
            ) -> Self::Out {
                let nb = self.w.cols() / W::VALUES;
                let (w, a) = (blocks::<W>(self.w.data()), blocks::<simd::Acts<W>>(self.a));
                if a.len() < nb || self.out.len() < self.w.rows() {
                    return Err(QuantError::BufferTooShort {
                        what: "activation or output",
                        need: nb * <simd::Acts<W>>::BYTES,
                        have: self.a.len().min(self.out.len()),
                    });
                }
                let a = &a[..nb];
                let mut r = 0;
                let rows4 = f.rows4.filter(|_| self.four);
                if let Some(rows4) = rows4 {
                    while r + 4 <= self.w.rows() {
                        // SAFETY: a table from this module.
                        let v = unsafe { rows4(&w[r * nb..(r + 4) * nb], nb, a) };
                        self.out[r..r + 4].copy_from_slice(&v);
                        r += 4;
                    }
                }
                for r in r..self.w.rows() {
                    // SAFETY: a table from this module.
                    self.out[r] = unsafe { (f.dot)(&w[r * nb..(r + 1) * nb], a) };
                }
                Ok(rows4.is_some())
            }
        }
        let rows = Rows { w, a, out, four };
        table(set)?
            .with_format(w.ty(), rows)
            .unwrap_or(Err(QuantError::Unsupported(w.ty())))
    }

    /// Every group of the interleaved matrix `w` against `batch`
    /// activation rows of its vec_dot type (`a`, one after another) through
    /// the named table's interleaved kernels, four activation rows at a
    /// time where the table has a four-row one, into `out` (`batch` rows of
    /// `w.rows()` results). `Ok(false)`, with nothing computed, where the
    /// table has none.
    pub fn interleaved_rows_with(
        set: &str,
        w: &crate::Matrix,
        a: &[u8],
        batch: usize,
        out: &mut [f32],
    ) -> Result<bool, QuantError> {
        /// The groups, for one format.
        struct Groups<'a> {
            w: &'a crate::Matrix<'a>,
            a: &'a [u8],
            batch: usize,
            out: &'a mut [f32],
        }
        impl simd::ForFormat for Groups<'_> {
            type Out = Result<bool, QuantError>;
            fn run<W: WeightFormat>(
                self,
                _: &simd::Kernels,
                f: &simd::FormatKernels<W>,
            ) -> Self::Out {
                use crate::formats::interleave::{Interleaved, GROUP_ROWS};
                let Some(one) = f.x8 else {
                    return Ok(false);
                };
                let (rows, nb, batch) = (self.w.rows(), self.w.cols() / W::VALUES, self.batch);
                let a = blocks::<simd::Acts<W>>(self.a);
                if !self.w.is_interleaved() || a.len() < batch * nb || self.out.len() < batch * rows
                {
                    return Err(QuantError::Shape(format!(
                        "an interleaved matrix, {batch} rows of {nb} activation blocks and {} outputs",
                        batch * rows
                    )));
                }
                for g in 0..rows / GROUP_ROWS {
                    let group = blocks::<Interleaved<W>>(self.w.group(g));
                    let at = |b: usize| b * rows + g * GROUP_ROWS;
                    let mut b = 0;
                    while let Some(four) = f.x8x4.filter(|_| b + 4 <= batch) {
                        // SAFETY: a table from this module.
                        let v = unsafe { four(group, &a[b * nb..(b + 4) * nb], nb) };
                        for (c, v) in v.iter().enumerate() {
                            self.out[at(b + c)..at(b + c) + GROUP_ROWS].copy_from_slice(v);
                        }
                        b += 4;
                    }
                    for b in b..batch {
                        // SAFETY: a table from this module.
                        let v = unsafe { one(group, &a[b * nb..(b + 1) * nb]) };
                        self.out[at(b)..at(b) + GROUP_ROWS].copy_from_slice(&v);
                    }
                }
                Ok(true)
            }
        }
        let groups = Groups { w, a, batch, out };
        table(set)?.with_format(w.ty(), groups).unwrap_or(Ok(false))
    }

    /// [`crate::dequantize`] through the named kernel table.
    pub fn dequantize_with(
        set: &str,
        ty: GgmlType,
        src: &[u8],
        dst: &mut [f32],
    ) -> Result<(), QuantError> {
        crate::dequantize_with(table(set)?, ty, src, dst)
    }

    /// `vec_dot_f32` through the named kernel table.
    pub fn vec_dot_f32_with(
        set: &str,
        ty: GgmlType,
        w: &[u8],
        x: &[f32],
    ) -> Result<f32, QuantError> {
        crate::simd::checked_vec_dot_f32(table(set)?, ty, w, x)
    }
}
