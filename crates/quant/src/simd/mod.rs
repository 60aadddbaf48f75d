//! Run-time kernel selection: a table of function pointers chosen once per process.

use crate::QuantError;
use std::sync::OnceLock;

use crate::formats::blocks::{
    BlockQ2K, BlockQ3K, BlockQ4K, BlockQ4_0, BlockQ4_1, BlockQ5K, BlockQ5_0, BlockQ5_1, BlockQ6K,
    BlockQ8K, BlockQ8_0,
};
use crate::formats::float::f32_to_bf16_bits;
use crate::{scalar, vec_dot_type, GgmlType};

#[cfg(target_arch = "aarch64")]
pub(crate) mod neon;
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86;
#[cfg(target_arch = "x86_64")]
mod x86_bf16;
#[cfg(target_arch = "x86_64")]
mod x86_float;
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86_x8;

/// A quantized dot kernel over `nb` blocks.
///
/// Callers must pass slices holding at least `nb` blocks of the weight and activation
/// types, and must only call kernels from a table built by this module, which installs
/// a kernel only after detecting the CPU features it was compiled for.
pub(crate) type DotFn = unsafe fn(w: &[u8], a: &[u8], nb: usize) -> f32;
/// A float-weight dot kernel over `n` elements with activations of type `T`
/// (f32; bf16 bits for BF16 weights) (same contract).
pub(crate) type FloatDotFn<T = f32> = unsafe fn(w: &[u8], x: &[T], n: usize) -> f32;
/// Weight rows a float tile takes at most.
pub(crate) const FLOAT_TILE_WEIGHTS: usize = 3;
/// Activation rows a float tile takes at most.
pub(crate) const FLOAT_TILE_ACTS: usize = 4;
/// Activation rows a BF16 tile of one weight row takes at most: its
/// activation vectors hold twice the elements, so twice the rows' sums fit
/// in the registers.
pub(crate) const BF16_TILE_ACTS: usize = 8;
/// A float tile's results: `[v][r]` for weight row `v` and activation row
/// `r`, zero past the tile's shape.
pub(crate) type FloatTile = [[f32; BF16_TILE_ACTS]; FLOAT_TILE_WEIGHTS];
/// A float-weight tile kernel: `wrows` (up to [`FLOAT_TILE_WEIGHTS`])
/// weight rows of `n` elements, `w_stride` bytes apart in `w`, against
/// `rows` (up to [`FLOAT_TILE_ACTS`]; [`BF16_TILE_ACTS`] for a BF16 tile of
/// one weight row) activation rows that start
/// `stride` elements apart in `x`; each result equals the table's
/// [`FloatDotFn`] to the bit (same contract).
pub(crate) type FloatTileFn<T = f32> = unsafe fn(
    w: &[u8],
    w_stride: usize,
    x: &[T],
    stride: usize,
    n: usize,
    wrows: usize,
    rows: usize,
) -> FloatTile;

/// A tile kernel: one weight row of `nb` blocks against four activation rows
/// that start `stride` bytes apart in `a` (same contract as [`DotFn`]).
/// Where the activations are Q8_0 blocks, `scales` holds the four rows'
/// block scales widened to f32 (`scales[c * nb + i]` for block `i` of row
/// `c`, see [`widen_scales`]), widened once per product rather than once
/// per weight row; the kernels for Q8_K activations (whose scales are f32
/// already) take an empty slice.
pub(crate) type TileFn =
    unsafe fn(w: &[u8], a: &[u8], stride: usize, scales: &[f32], nb: usize) -> [f32; 4];

/// The f16 block scales of `rows` Q8_0 activation rows of `nb` blocks each,
/// `stride` bytes apart in `a`, widened to f32 into `out` (`out[c * nb + i]`
/// for block `i` of row `c`): what [`TileFn`] kernels read for 32-block
/// weights.
pub(crate) fn widen_scales(a: &[u8], stride: usize, rows: usize, nb: usize, out: &mut Vec<f32>) {
    let block = GgmlType::Q8_0.block_bytes();
    out.clear();
    for c in 0..rows {
        let row = &a[c * stride..];
        out.extend((0..nb).map(|i| crate::formats::f16_at(&row[i * block..])));
    }
}

/// A four-by-four tile kernel: four weight rows of `nb` blocks that start
/// `row_bytes` apart in `w`, against four activation rows that start
/// `stride` bytes apart in `a`; `out[c][r]` is activation row `c` times
/// weight row `r`, each the table's one-row kernel result to the bit (same
/// contract as [`DotFn`] for each pair).
pub(crate) type Tile44Fn =
    unsafe fn(w: &[u8], row_bytes: usize, a: &[u8], stride: usize, nb: usize) -> [[f32; 4]; 4];

/// A rows kernel: four weight rows of `nb` blocks that start `row_bytes`
/// apart in `w`, against one activation row (same contract as [`DotFn`] for
/// each row). Each result equals the table's one-row kernel to the bit.
pub(crate) type RowsFn = unsafe fn(w: &[u8], row_bytes: usize, a: &[u8], nb: usize) -> [f32; 4];

/// An interleaved-rows kernel: the eight rows of one group in
/// [`crate::formats::interleave`]'s layout (`nb` group blocks in `w`)
/// against one activation row of `nb` blocks of the type's vec_dot type
/// (Q8_K for Q4_K and Q6_K, Q8_0 for Q5_0 and Q8_0); each result equals the table's one-row
/// kernel to the bit (otherwise the [`DotFn`] contract).
pub(crate) type X8Fn = unsafe fn(w: &[u8], a: &[u8], nb: usize) -> [f32; 8];

/// Rewrites `nb` interleaved group blocks of one type (`src`) as `nb` of
/// another (`dst`) that hold the same values and scales exactly (checked
/// against a scalar reference in `formats::interleave`'s tests); panics
/// where `src` or `dst` is too short.
///
/// # Safety
/// The table's CPU features present.
pub(crate) type WidenX8Fn = unsafe fn(src: &[u8], nb: usize, dst: &mut [u8]);

/// [`X8Fn`] against four activation rows that start `stride` bytes apart in
/// `a`: `out[c]` is activation row `c`'s, each the one-row kernel's to the
/// bit.
pub(crate) type X8TileFn = unsafe fn(w: &[u8], a: &[u8], stride: usize, nb: usize) -> [[f32; 8]; 4];

/// The vector width a kernel set's batched kernels use: the panel GEMM's
/// tile and activation quantizers (see [`crate::gemm`]), the f32 `sgemm` and
/// the f32 vector kernels. Every tier gives the same numbers there, at
/// different speeds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // x86 tiers.
pub(crate) enum GemmTier {
    /// Plain Rust that compilers vectorize (the reference).
    Portable,
    /// 256-bit `vpmaddubsw`/`vpmaddwd`.
    Avx2,
    /// 256-bit `vpdpbusd` for the panel product (AVX-VNNI); everything
    /// else as [`Self::Avx2`].
    AvxVnni,
    /// 512-bit `vpdpbusd`.
    Avx512Vnni,
    /// AMX-INT8 tiles for the panel product (16 activation rows × 16
    /// weight rows an instruction); everything else as [`Self::Avx512Vnni`].
    Amx,
    /// AArch64 NEON: the f32 products (`sgemm`, packed `sgemm`) in NEON,
    /// the panel product's tile portable.
    #[cfg(target_arch = "aarch64")]
    Neon,
    /// AArch64 `sdot` by element for the panel product (the `dotprod`
    /// extension); everything else as [`Self::Neon`].
    #[cfg(target_arch = "aarch64")]
    Dotprod,
}

impl GemmTier {
    /// The tier of the vector kernels (activation quantizers, the register
    /// tile, `sgemm`, the f32 vector kernels): AMX has tiles for the panel
    /// product alone and uses the AVX-512 ones for the rest. (AVX-VNNI has a
    /// register tile of its own and takes the AVX2 kernels for the rest.)
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // x86 tiers.
    pub(crate) fn vector(self) -> GemmTier {
        match self {
            // Tests run the AMX tier on any CPU, its tiles emulated (see
            // `gemm::amx::tile_amx`) and its vector kernels portable.
            #[cfg(test)]
            GemmTier::Amx if !crate::gemm::amx::usable() => GemmTier::Portable,
            GemmTier::Amx => GemmTier::Avx512Vnni,
            t => t,
        }
    }
}

/// One kernel per supported weight type.
#[derive(Clone, Copy)]
pub(crate) struct Kernels {
    pub name: &'static str,
    pub q4_0: DotFn,
    pub q4_1: DotFn,
    pub q5_0: DotFn,
    pub q5_1: DotFn,
    pub q8_0: DotFn,
    pub q2_k: DotFn,
    pub q3_k: DotFn,
    pub q4_k: DotFn,
    pub q5_k: DotFn,
    pub q6_k: DotFn,
    pub q8_k: DotFn,
    pub f32: FloatDotFn,
    pub f16: FloatDotFn,
    /// BF16 weights against bf16 activations ([`crate::scalar::dot_bf16`]).
    pub bf16: FloatDotFn<u16>,
    /// Float tiles (several weight rows by several activation rows) where
    /// a SIMD table has them: F32.
    pub f32_tile: Option<FloatTileFn>,
    /// F16 float tile.
    pub f16_tile: Option<FloatTileFn>,
    /// BF16 float tile.
    pub bf16_tile: Option<FloatTileFn<u16>>,
    /// Four-activation tile kernels where a SIMD table has them.
    pub q8_0_x4: Option<TileFn>,
    /// Q4_0 tile kernel.
    pub q4_0_x4: Option<TileFn>,
    /// Q5_0 tile kernel.
    pub q5_0_x4: Option<TileFn>,
    /// Q4_K tile kernel.
    pub q4_k_x4: Option<TileFn>,
    /// Q5_K tile kernel.
    pub q5_k_x4: Option<TileFn>,
    /// Q6_K tile kernel.
    pub q6_k_x4: Option<TileFn>,
    /// Four-weight-row by four-activation-row tiles where a SIMD table has
    /// them (batched decode).
    pub q8_0_t44: Option<Tile44Fn>,
    /// Q4_0 four-by-four tile.
    pub q4_0_t44: Option<Tile44Fn>,
    /// Q5_0 four-by-four tile.
    pub q5_0_t44: Option<Tile44Fn>,
    /// Four-weight-row decode kernels where a SIMD table has them.
    pub q8_0_r4: Option<RowsFn>,
    /// Q4_0 rows kernel.
    pub q4_0_r4: Option<RowsFn>,
    /// Q5_0 rows kernel.
    pub q5_0_r4: Option<RowsFn>,
    /// Q4_K rows interleaved in groups of eight (see [`X8Fn`]).
    pub q4_k_x8: Option<X8Fn>,
    /// The same against four activation rows (see [`X8TileFn`]).
    pub q4_k_x8x4: Option<X8TileFn>,
    /// Q6_K rows interleaved in groups of eight (see [`X8Fn`]).
    pub q6_k_x8: Option<X8Fn>,
    /// The same against four activation rows (see [`X8TileFn`]).
    pub q6_k_x8x4: Option<X8TileFn>,
    /// Q8_0 rows interleaved in groups of eight (see [`X8Fn`]).
    pub q8_0_x8: Option<X8Fn>,
    /// Q5_0 rows interleaved in groups of eight (see [`X8Fn`]).
    pub q5_0_x8: Option<X8Fn>,
    /// Interleaved Q5_0 group blocks rewritten as Q8_0 ones (see
    /// [`WidenX8Fn`]), so that a batch unpacks the fifth bits once, not
    /// once per activation row.
    pub q5_0_x8_as_q8_0: Option<WidenX8Fn>,
    /// Whether the Q4_0/Q5_0/Q8_0 and Q4_K/Q5_K/Q6_K kernels prefetch the
    /// weights ahead themselves (spread over the row, which keeps more misses in flight
    /// than a burst per row does).
    pub self_prefetch: bool,
    /// The batched (prefill) product's kernels.
    pub gemm: GemmTier,
}

impl Kernels {
    /// The interleaved-rows kernel for weights of type `ty`, one
    /// activation row (see [`X8Fn`]).
    pub(crate) fn x8(&self, ty: GgmlType) -> Option<X8Fn> {
        match ty {
            GgmlType::Q4_K => self.q4_k_x8,
            GgmlType::Q6_K => self.q6_k_x8,
            GgmlType::Q5_0 => self.q5_0_x8,
            GgmlType::Q8_0 => self.q8_0_x8,
            _ => None,
        }
    }

    /// For interleaved weights of type `ty` whose one-row kernel unpacks
    /// more than a batch should repeat: the rewrite into another
    /// interleaved type, and that type (whose [`Self::x8`] kernel then
    /// gives the same bits).
    pub(crate) fn x8_widened(&self, ty: GgmlType) -> Option<(WidenX8Fn, GgmlType)> {
        match ty {
            GgmlType::Q5_0 => Some((self.q5_0_x8_as_q8_0?, GgmlType::Q8_0)),
            _ => None,
        }
    }

    /// The interleaved-rows kernel for weights of type `ty` against four
    /// activation rows (see [`X8TileFn`]).
    pub(crate) fn x8x4(&self, ty: GgmlType) -> Option<X8TileFn> {
        match ty {
            GgmlType::Q4_K => self.q4_k_x8x4,
            GgmlType::Q6_K => self.q6_k_x8x4,
            _ => None,
        }
    }

    /// The quantized kernel for weights of type `ty`.
    pub(crate) fn quant(&self, ty: GgmlType) -> Option<DotFn> {
        Some(match ty {
            GgmlType::Q4_0 => self.q4_0,
            GgmlType::Q4_1 => self.q4_1,
            GgmlType::Q5_0 => self.q5_0,
            GgmlType::Q5_1 => self.q5_1,
            GgmlType::Q8_0 => self.q8_0,
            GgmlType::Q2_K => self.q2_k,
            GgmlType::Q3_K => self.q3_k,
            GgmlType::Q4_K => self.q4_k,
            GgmlType::Q5_K => self.q5_k,
            GgmlType::Q6_K => self.q6_k,
            GgmlType::Q8_K => self.q8_k,
            _ => return None,
        })
    }

    /// Whether the kernel for `ty` prefetches its own weights.
    pub(crate) fn prefetches(&self, ty: GgmlType) -> bool {
        self.self_prefetch
            && matches!(
                ty,
                GgmlType::Q4_0
                    | GgmlType::Q5_0
                    | GgmlType::Q8_0
                    | GgmlType::Q4_K
                    | GgmlType::Q5_K
                    | GgmlType::Q6_K
            )
    }

    /// The four-activation tile kernel for weights of type `ty`, if any.
    pub(crate) fn tile4(&self, ty: GgmlType) -> Option<TileFn> {
        match ty {
            GgmlType::Q8_0 => self.q8_0_x4,
            GgmlType::Q4_0 => self.q4_0_x4,
            GgmlType::Q5_0 => self.q5_0_x4,
            GgmlType::Q4_K => self.q4_k_x4,
            GgmlType::Q5_K => self.q5_k_x4,
            GgmlType::Q6_K => self.q6_k_x4,
            _ => None,
        }
    }

    /// The four-by-four tile kernel for weights of type `ty`, if any.
    pub(crate) fn tile44(&self, ty: GgmlType) -> Option<Tile44Fn> {
        match ty {
            GgmlType::Q8_0 => self.q8_0_t44,
            GgmlType::Q4_0 => self.q4_0_t44,
            GgmlType::Q5_0 => self.q5_0_t44,
            _ => None,
        }
    }

    /// The four-weight-row decode kernel for weights of type `ty`, if any.
    pub(crate) fn rows4(&self, ty: GgmlType) -> Option<RowsFn> {
        match ty {
            GgmlType::Q8_0 => self.q8_0_r4,
            GgmlType::Q4_0 => self.q4_0_r4,
            GgmlType::Q5_0 => self.q5_0_r4,
            _ => None,
        }
    }

    /// The float tile for F32 or F16 weights of type `ty`, if any (BF16
    /// has its own, [`Self::bf16_tile`]).
    pub(crate) fn float_tile(&self, ty: GgmlType) -> Option<FloatTileFn> {
        match ty {
            GgmlType::F32 => self.f32_tile,
            GgmlType::F16 => self.f16_tile,
            _ => None,
        }
    }

    /// Whether this table runs AVX512_BF16's dot (its BF16 tile), which
    /// the BF16 GEMM then uses too.
    pub(crate) fn has_bf16_dot(&self) -> bool {
        cfg!(target_arch = "x86_64") && self.bf16_tile.is_some()
    }

    /// The kernel for F32 or F16 weights of type `ty` against f32
    /// activations (BF16 takes bf16 activations, [`Self::bf16`]).
    pub(crate) fn float(&self, ty: GgmlType) -> Option<FloatDotFn> {
        Some(match ty {
            GgmlType::F32 => self.f32,
            GgmlType::F16 => self.f16,
            _ => return None,
        })
    }
}

static SCALAR: Kernels = Kernels {
    name: "scalar",
    q4_0: scalar::dot::<BlockQ4_0>,
    q4_1: scalar::dot::<BlockQ4_1>,
    q5_0: scalar::dot::<BlockQ5_0>,
    q5_1: scalar::dot::<BlockQ5_1>,
    q8_0: scalar::dot::<BlockQ8_0>,
    q2_k: scalar::dot::<BlockQ2K>,
    q3_k: scalar::dot::<BlockQ3K>,
    q4_k: scalar::dot::<BlockQ4K>,
    q5_k: scalar::dot::<BlockQ5K>,
    q6_k: scalar::dot::<BlockQ6K>,
    q8_k: scalar::dot::<BlockQ8K>,
    f32: scalar::dot_f32,
    f16: scalar::dot_f16,
    bf16: scalar::dot_bf16,
    f32_tile: None,
    f16_tile: None,
    bf16_tile: None,
    q8_0_x4: None,
    q4_0_x4: None,
    q5_0_x4: None,
    q4_k_x4: None,
    q5_k_x4: None,
    q6_k_x4: None,
    q8_0_t44: None,
    q4_0_t44: None,
    q5_0_t44: None,
    q8_0_r4: None,
    q4_0_r4: None,
    q5_0_r4: None,
    q4_k_x8: None,
    q4_k_x8x4: None,
    q6_k_x8: None,
    q6_k_x8x4: None,
    q8_0_x8: None,
    q5_0_x8: None,
    q5_0_x8_as_q8_0: None,
    self_prefetch: false,
    gemm: GemmTier::Portable,
};

/// The scalar reference table.
pub(crate) fn scalar_kernels() -> &'static Kernels {
    &SCALAR
}

/// The table the process runs, chosen once: by [`select`], else by
/// `HEARTH_CPU`, else the fastest this CPU supports.
static BEST: OnceLock<Kernels> = OnceLock::new();

/// Chooses the table named `name` for the rest of the process; an error when
/// this CPU cannot run it or another table is already in use.
pub(crate) fn select(name: &str) -> Result<&'static str, QuantError> {
    let want = name.trim().to_ascii_lowercase();
    let k = available()
        .into_iter()
        .find(|k| k.name == want)
        .ok_or_else(|| QuantError::UnknownKernelSet(want.clone()))?;
    let chosen = BEST.get_or_init(|| *k);
    if chosen.name != k.name {
        return Err(QuantError::KernelSetFixed {
            chosen: chosen.name,
            wanted: want,
        });
    }
    Ok(chosen.name)
}

#[cfg(test)]
thread_local! {
    /// Set while tests run code as the kernel tables' choice runs it.
    static CHOOSING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` as the choice of the kernel tables runs (inside [`best`]'s
/// one-time initialisation, as the AMX self-check does): in tests, a call
/// of [`best`] from `f` panics, where it would deadlock for real; outside
/// tests it just runs `f`.
// Only the x86 AMX check calls it outside tests.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) fn as_if_choosing<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(test)]
    CHOOSING.with(|c| c.set(true));
    let r = f();
    #[cfg(test)]
    CHOOSING.with(|c| c.set(false));
    r
}

/// The table in use (see [`BEST`]).
pub(crate) fn best() -> &'static Kernels {
    #[cfg(test)]
    assert!(
        !CHOOSING.with(|c| c.get()),
        "simd::best() asked for while the kernel tables are being chosen: a deadlock outside tests"
    );
    BEST.get_or_init(|| {
        // HEARTH_CPU=scalar|avx2|avxvnni|avx512|amx (neon|dotprod on AArch64) runs a lower tier on a CPU
        // that has a higher one (to test and measure every tier on one
        // machine); a tier the CPU lacks is refused with a warning.
        if let Ok(want) = std::env::var("HEARTH_CPU") {
            let want = want.trim().to_ascii_lowercase();
            match available().into_iter().find(|k| k.name == want) {
                Some(k) => return *k,
                None => eprintln!(
                    "hearth: HEARTH_CPU={want} is not available on this CPU (available: {}); using the best tier",
                    available().iter().map(|k| k.name).collect::<Vec<_>>().join(", ")
                ),
            }
        }
        #[cfg(target_arch = "x86_64")]
        if let Some(k) = x86::detect() {
            return k;
        }
        #[cfg(target_arch = "aarch64")]
        if let Some(k) = neon::available().pop() {
            return *k;
        }
        SCALAR
    })
}

/// Every table this CPU can run (scalar first), for tests and benchmarks.
pub(crate) fn available() -> Vec<&'static Kernels> {
    #[allow(unused_mut)]
    let mut v = vec![&SCALAR];
    #[cfg(target_arch = "x86_64")]
    v.extend(x86::available());
    #[cfg(target_arch = "aarch64")]
    v.extend(neon::available());
    v
}

/// Blocks in `n` elements of `ty`, when `w` and `a` are long enough.
fn blocks_for(ty: GgmlType, n: usize, w: usize, a: usize) -> Option<usize> {
    let bl = ty.block_len();
    if !n.is_multiple_of(bl) {
        return None;
    }
    let nb = n / bl;
    let at = vec_dot_type(ty);
    (w >= nb.checked_mul(ty.block_bytes())? && a >= nb.checked_mul(at.block_bytes())?).then_some(nb)
}

/// `vec_dot` through table `k`, validating everything first.
pub(crate) fn checked_vec_dot(
    k: &Kernels,
    ty: GgmlType,
    n: usize,
    w: &[u8],
    a: &[u8],
) -> Result<f32, QuantError> {
    if is_float(ty) {
        let need = n.checked_mul(4).ok_or(QuantError::Overflow)?;
        let a = a.get(..need).ok_or(QuantError::BufferTooShort {
            what: "activation",
            need,
            have: a.len(),
        })?;
        let mut buf = [0f32; 64];
        let mut sum = 0.0f32;
        let es = ty.block_bytes();
        let mut w_rest = w;
        for chunk in a.chunks(buf.len() * 4) {
            let m = chunk.len() / 4;
            crate::formats::float::dequant_f32(chunk, &mut buf[..m]);
            let (wc, rest) = w_rest
                .split_at_checked(m * es)
                .ok_or(QuantError::BufferTooShort {
                    what: "weight",
                    need: n * es,
                    have: w.len(),
                })?;
            w_rest = rest;
            sum += checked_vec_dot_f32(k, ty, wc, &buf[..m])?;
        }
        return Ok(sum);
    }
    let f = k.quant(ty).ok_or(QuantError::Unsupported(ty))?;
    let nb = blocks_for(ty, n, w.len(), a.len()).ok_or_else(|| {
        QuantError::Shape(format!(
            "a dot product of {n} {ty} elements over a weight row of {} bytes and an activation row of {} bytes",
            w.len(),
            a.len()
        ))
    })?;
    // SAFETY: `k` comes from this module (kernels installed only after feature
    // detection) and `blocks_for` checked that both slices hold `nb` blocks.
    Ok(unsafe { f(w, a, nb) })
}

/// Float-weight dot through table `k` over `x.len()` elements (BF16
/// weights take the activations rounded to bf16).
pub(crate) fn checked_vec_dot_f32(
    k: &Kernels,
    ty: GgmlType,
    w: &[u8],
    x: &[f32],
) -> Result<f32, QuantError> {
    if !is_float(ty) {
        return Err(QuantError::Unsupported(ty));
    }
    let need = x
        .len()
        .checked_mul(ty.block_bytes())
        .ok_or(QuantError::Overflow)?;
    if w.len() < need {
        return Err(QuantError::BufferTooShort {
            what: "weight",
            need,
            have: w.len(),
        });
    }
    if ty == GgmlType::BF16 {
        let xb: Vec<u16> = x.iter().map(|&v| f32_to_bf16_bits(v)).collect();
        // SAFETY: table from this module; `w` holds `x.len()` elements (checked above).
        return Ok(unsafe { (k.bf16)(w, &xb, xb.len()) });
    }
    let f = k.float(ty).ok_or(QuantError::Unsupported(ty))?;
    // SAFETY: table from this module; `w` holds `x.len()` elements (checked above).
    Ok(unsafe { f(w, x, x.len()) })
}

/// Whether weights of type `ty` are plain floats (F32, F16, BF16), whose
/// products take f32 activations rather than quantized ones.
pub(crate) fn is_float(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every table's four-weight-row decode kernels give each row's one-row
    /// kernel result to the bit, so a decode step's logits do not depend on
    /// whether a row fell in a group of four.
    #[test]
    fn rows_kernels_equal_single_rows_bitwise() {
        let mut x = 0x0bad_cafe_dead_beef_u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((x >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        };
        let mut checked = 0;
        for k in available() {
            for ty in [GgmlType::Q8_0, GgmlType::Q5_0, GgmlType::Q4_0] {
                let Some(rows) = k.rows4(ty) else { continue };
                let single = k.quant(ty).unwrap();
                for nb in [1usize, 2, 3, 7, 8, 9, 16, 17, 20, 33] {
                    let n = nb * 32;
                    let row_bytes = crate::row_size(ty, n).unwrap();
                    let mut w = vec![0u8; 4 * row_bytes];
                    for r in 0..4 {
                        // Rows of very different sizes, so a mixed-up scale shows.
                        let scale = [0.01f32, 1.0, 30.0, 0.3][r];
                        let wf: Vec<f32> = (0..n).map(|_| next() * scale).collect();
                        crate::quantize(ty, &wf, &mut w[r * row_bytes..(r + 1) * row_bytes])
                            .unwrap();
                    }
                    let xf: Vec<f32> = (0..n).map(|_| next() * 3.0).collect();
                    let mut a = vec![0u8; nb * 34];
                    crate::quantize_activation(GgmlType::Q8_0, &xf, &mut a).unwrap();
                    // SAFETY: tables from this module; four rows of `nb` blocks.
                    let got = unsafe { rows(&w, row_bytes, &a, nb) };
                    for (r, g) in got.iter().enumerate() {
                        // SAFETY: as above.
                        let want = unsafe { single(&w[r * row_bytes..], &a, nb) };
                        assert_eq!(
                            g.to_bits(),
                            want.to_bits(),
                            "{} {ty} nb {nb} row {r}",
                            k.name
                        );
                        checked += 1;
                    }
                }
            }
        }
        // Every x86 SIMD table sits on the AVX2 one, which has rows kernels
        // (the AArch64 tables have none yet).
        if cfg!(target_arch = "x86_64") && available().len() > 1 {
            assert!(checked > 0);
        }
    }

    /// Every table's four-by-four tiles give each pair's one-row kernel
    /// result to the bit (batched decode relies on it), on quantized rows of
    /// very different sizes and on raw random bytes (any quant, -128
    /// included, under sane scales), for block counts on both sides of the
    /// eight-block runs.
    #[test]
    fn four_by_four_tiles_equal_single_rows_bitwise() {
        let mut x = 0x5eed_0f44_1234_abcd_u64;
        let mut bits = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut checked = 0;
        for k in available() {
            for ty in [GgmlType::Q8_0, GgmlType::Q5_0, GgmlType::Q4_0] {
                let Some(t44) = k.tile44(ty) else { continue };
                let single = k.quant(ty).unwrap();
                for nb in [1usize, 2, 3, 7, 8, 9, 16, 17, 20, 33] {
                    for raw in [false, true] {
                        let n = nb * 32;
                        let row_bytes = crate::row_size(ty, n).unwrap();
                        // Rows padded apart, as a matrix's rows are not.
                        let rb = row_bytes + 6;
                        let mut w = vec![0u8; 4 * rb];
                        for r in 0..4 {
                            let row = &mut w[r * rb..r * rb + row_bytes];
                            if raw {
                                row.iter_mut().for_each(|b| *b = bits() as u8);
                                for blk in row.chunks_exact_mut(ty.block_bytes()) {
                                    // A sane f16 scale (exponent 10..17).
                                    let h = 0x2800u16 + (bits() as u16 & 0x1fff);
                                    blk[..2].copy_from_slice(&h.to_le_bytes());
                                }
                            } else {
                                let scale = [0.01f32, 1.0, 30.0, 0.3][r];
                                let wf: Vec<f32> = (0..n)
                                    .map(|_| {
                                        ((bits() >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * scale
                                    })
                                    .collect();
                                crate::quantize(ty, &wf, row).unwrap();
                            }
                        }
                        let stride = nb * 34 + 2;
                        let mut a = vec![0u8; 4 * stride];
                        for c in 0..4 {
                            let xf: Vec<f32> = (0..n)
                                .map(|_| ((bits() >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 6.0)
                                .collect();
                            crate::quantize_activation(
                                GgmlType::Q8_0,
                                &xf,
                                &mut a[c * stride..c * stride + nb * 34],
                            )
                            .unwrap();
                        }
                        // SAFETY: tables from this module; four rows of `nb`
                        // blocks on each side.
                        let got = unsafe { t44(&w, rb, &a, stride, nb) };
                        for (c, got) in got.iter().enumerate() {
                            for (r, g) in got.iter().enumerate() {
                                // SAFETY: as above.
                                let want = unsafe { single(&w[r * rb..], &a[c * stride..], nb) };
                                assert_eq!(
                                    g.to_bits(),
                                    want.to_bits(),
                                    "{} {ty} nb {nb} raw {raw} act {c} row {r}",
                                    k.name
                                );
                                checked += 1;
                            }
                        }
                    }
                }
            }
        }
        let avx512 = cfg!(target_arch = "x86_64") && available().iter().any(|k| k.name == "avx512");
        if avx512 {
            assert!(checked > 0);
        }
    }

    /// Every table's four-row tiles give each row's one-row kernel result to
    /// the bit (batched decode relies on it), for odd and even block counts
    /// on both sides of the eight-block runs.
    #[test]
    fn tiles_equal_single_rows_bitwise() {
        let mut x = 0x1234_5678_9abc_def1_u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((x >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        };
        let mut checked = 0;
        for k in available() {
            for ty in [
                GgmlType::Q8_0,
                GgmlType::Q5_0,
                GgmlType::Q4_0,
                GgmlType::Q4_K,
                GgmlType::Q5_K,
                GgmlType::Q6_K,
            ] {
                let Some(tile) = k.tile4(ty) else { continue };
                let single = k.quant(ty).unwrap();
                let at = crate::vec_dot_type(ty);
                for nb in [1usize, 2, 3, 7, 8, 9, 16, 17, 20, 33] {
                    let n = nb * ty.block_len();
                    let wf: Vec<f32> = (0..n).map(|_| next()).collect();
                    let mut w = vec![0u8; crate::row_size(ty, n).unwrap()];
                    crate::quantize(ty, &wf, &mut w).unwrap();
                    // Rows padded apart, as the caller's may be.
                    let stride = nb * at.block_bytes() + 4;
                    let mut a = vec![0u8; 4 * stride];
                    for c in 0..4 {
                        let xf: Vec<f32> = (0..n).map(|_| next() * 3.0).collect();
                        crate::quantize_activation(
                            at,
                            &xf,
                            &mut a[c * stride..(c + 1) * stride - 4],
                        )
                        .unwrap();
                    }
                    let mut scales = Vec::new();
                    if at == GgmlType::Q8_0 {
                        widen_scales(&a, stride, 4, nb, &mut scales);
                    }
                    // SAFETY: tables from this module; the rows hold `nb`
                    // blocks, and `scales` their scales where Q8_0.
                    let got = unsafe { tile(&w, &a, stride, &scales, nb) };
                    for (c, g) in got.iter().enumerate() {
                        // SAFETY: as above.
                        let want = unsafe { single(&w, &a[c * stride..], nb) };
                        assert_eq!(
                            g.to_bits(),
                            want.to_bits(),
                            "{} {ty} nb {nb} row {c}",
                            k.name
                        );
                        checked += 1;
                    }
                }
            }
        }
        // Every x86 SIMD table sits on the AVX2 one, which has tiles.
        if cfg!(target_arch = "x86_64") && available().len() > 1 {
            assert!(checked > 0);
        }
    }

    /// Every table's float tiles give each pair of weight and activation
    /// rows the table's one-row result and the scalar reference's to the
    /// bit, in every shape, at lengths on both sides of the 32- and
    /// 8-element steps, the rows padded apart.
    #[test]
    fn float_tiles_equal_single_rows_bitwise() {
        let mut x = 0x0bad_5eed_1234_5678_u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((x >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
        };
        let mut checked = 0;
        for k in available() {
            for ty in [GgmlType::F32, GgmlType::F16, GgmlType::BF16] {
                if ty == GgmlType::BF16 {
                    if let Some(tile) = k.bf16_tile {
                        let acts = |v: &[f32]| v.iter().map(|&v| f32_to_bf16_bits(v)).collect();
                        checked +=
                            tiles_match(k, ty, tile, k.bf16, acts, BF16_TILE_ACTS, &mut next);
                    }
                } else if let Some(tile) = k.float_tile(ty) {
                    let single = k.float(ty).unwrap();
                    let acts = |v: &[f32]| v.to_vec();
                    checked += tiles_match(k, ty, tile, single, acts, FLOAT_TILE_ACTS, &mut next);
                }
            }
        }
        if cfg!(target_arch = "x86_64") && available().iter().any(|k| k.name == "avx512") {
            assert!(checked > 0);
        }
    }

    /// [`float_tiles_equal_single_rows_bitwise`] for one table and type, the
    /// activations made from f32 by `acts`, up to `one_row_acts` rows
    /// against one weight row; the number of results checked.
    fn tiles_match<T>(
        k: &Kernels,
        ty: GgmlType,
        tile: FloatTileFn<T>,
        single: FloatDotFn<T>,
        acts: impl Fn(&[f32]) -> Vec<T>,
        one_row_acts: usize,
        next: &mut impl FnMut() -> f32,
    ) -> usize {
        let mut checked = 0;
        for n in [
            0usize, 1, 7, 8, 15, 16, 31, 32, 33, 40, 47, 56, 63, 64, 65, 100, 640,
        ] {
            let stride = n + 3;
            // Three weight rows, padded apart.
            let len = n * ty.block_bytes();
            let w_stride = len + 6;
            let mut ws = vec![0u8; FLOAT_TILE_WEIGHTS * w_stride];
            for v in 0..FLOAT_TILE_WEIGHTS {
                let wf: Vec<f32> = (0..n).map(|_| next()).collect();
                crate::quantize(ty, &wf, &mut ws[v * w_stride..v * w_stride + len]).unwrap();
            }
            let most = |v| {
                if v == 1 {
                    one_row_acts
                } else {
                    FLOAT_TILE_ACTS
                }
            };
            for (wrows, rows) in
                (1..=FLOAT_TILE_WEIGHTS).flat_map(|v| (1..=most(v)).map(move |r| (v, r)))
            {
                let xf: Vec<f32> = (0..rows * stride).map(|_| next()).collect();
                let xs = acts(&xf);
                let ws = &ws[..(wrows - 1) * w_stride + len];
                // SAFETY: tables from this module; each weight row holds `n`
                // elements and each of the `rows` activation rows `n`.
                let got = unsafe { tile(ws, w_stride, &xs, stride, n, wrows, rows) };
                for (v, gots) in got.iter().enumerate() {
                    let shape = format!("{} {ty} n {n} tile {wrows}x{rows} w {v}", k.name);
                    if v >= wrows {
                        assert!(gots.iter().all(|&g| g == 0.0), "{shape}");
                        continue;
                    }
                    assert!(gots[rows..].iter().all(|&g| g == 0.0), "{shape}");
                    let wrow = &ws[v * w_stride..v * w_stride + len];
                    for (c, g) in gots.iter().take(rows).enumerate() {
                        // SAFETY: as above.
                        let want = unsafe { single(wrow, &xs[c * stride..c * stride + n], n) };
                        let row = &xf[c * stride..c * stride + n];
                        let reference = scalar::vec_dot_f32(ty, wrow, row).unwrap();
                        assert_eq!(g.to_bits(), want.to_bits(), "{shape} row {c}");
                        assert_eq!(g.to_bits(), reference.to_bits(), "{shape} row {c}");
                        checked += 1;
                    }
                }
            }
        }
        checked
    }

    /// AVX512_BF16's dot is the scalar reference's to the bit on any bits
    /// at all: subnormal, infinite and NaN inputs, products that underflow,
    /// sums that cancel (the reference models the instruction's flushing).
    /// The other tiers match it on values in f32's normal range.
    #[test]
    fn bf16_dot_matches_its_instruction_on_any_bits() {
        let Some(k) = available().into_iter().find(|k| k.bf16_tile.is_some()) else {
            return;
        };
        let mut s = 0x5eed_0bf1_6000_0001_u64;
        let mut next = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        for round in 0..2000 {
            let n = (next() % 200) as usize;
            // Half the rounds any bits; half small exponents, where the
            // products and sums fall below the normal range.
            let bits = |r: u64| -> u16 {
                if round % 2 == 0 {
                    r as u16
                } else {
                    (r as u16 & 0x807f) | (((r >> 16) % 40) as u16) << 7
                }
            };
            let w: Vec<u8> = (0..n).flat_map(|_| bits(next()).to_le_bytes()).collect();
            let x: Vec<u16> = (0..n).map(|_| bits(next())).collect();
            // SAFETY: a table from this module; both rows hold `n` elements.
            let got = unsafe { (k.bf16)(&w, &x, n) };
            let want = scalar::dot_bf16(&w, &x, n);
            assert!(
                got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                "round {round} n {n}: {got:e} vs {want:e}"
            );
        }
    }
}
