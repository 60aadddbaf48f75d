//! Run-time kernel selection: a table of kernel sets, one per weight format,
//! chosen once per process.
//!
//! Every kernel takes its weights and activations as typed blocks
//! (`&[BlockQ4K]` against `&[BlockQ8K]`, eight interleaved rows as
//! [`Interleaved`] blocks, float weights as their little-endian elements)
//! and takes its block count from those slices. A multi-row kernel checks
//! once that its rows fit ([`check_rows`]), so the raw reads inside every
//! kernel stay in bounds whatever a caller passes: what makes a kernel
//! `unsafe` to call is only the CPU features it was compiled for, which a
//! table built here installs only after detecting them.

use crate::QuantError;
use std::borrow::Cow;
use std::sync::OnceLock;

use crate::formats::blocks::{
    blocks, Bf16Le, BlockFormat, BlockIQ1M, BlockIQ1S, BlockIQ2S, BlockIQ2XS, BlockIQ2XXS,
    BlockIQ3S, BlockIQ3XXS, BlockIQ4NL, BlockIQ4XS, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ4_0,
    BlockQ4_1, BlockQ5K, BlockQ5_0, BlockQ5_1, BlockQ6K, BlockQ8K, BlockQ8_0, F16Le, F32Le,
    WeightFormat,
};
use crate::formats::float::f32_to_bf16_bits;
pub(crate) use crate::formats::interleave::Interleaved;
use crate::{scalar, GgmlType};

#[cfg(target_arch = "aarch64")]
pub(crate) mod neon;
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86;
#[cfg(target_arch = "x86_64")]
mod x86_bf16;
#[cfg(target_arch = "x86_64")]
mod x86_dequant;
#[cfg(target_arch = "x86_64")]
mod x86_float;
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86_x8;

/// The activation blocks weights of format `W` are multiplied with.
pub(crate) type Acts<W> = <W as WeightFormat>::Acts;

/// `Σ w·a` over the blocks of one weight row and one activation row (as
/// many as the shorter holds).
pub(crate) type DotFn<W> = unsafe fn(w: &[W], a: &[Acts<W>]) -> f32;

/// A float-weight dot over as many elements as the shorter of `w` and `x`
/// holds, the weights stored as `E` (f32, f16 or bf16), the activations
/// `T` (f32; bf16 bits for BF16 weights).
pub(crate) type FloatDotFn<E, T = f32> = unsafe fn(w: &[E], x: &[T]) -> f32;
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
/// A float-weight tile: `wrows` (up to [`FLOAT_TILE_WEIGHTS`]) weight rows
/// of `n` elements, `w_stride` elements apart in `w`, against `rows` (up to
/// [`FLOAT_TILE_ACTS`]; [`BF16_TILE_ACTS`] for a BF16 tile of one weight
/// row) activation rows that start `stride` elements apart in `x`; each
/// result equals the set's [`FloatDotFn`] to the bit. Rows that run past
/// the slices are cut short where they end.
pub(crate) type FloatTileFn<E, T = f32> = unsafe fn(
    w: &[E],
    w_stride: usize,
    x: &[T],
    stride: usize,
    n: usize,
    wrows: usize,
    rows: usize,
) -> FloatTile;

/// One weight row (all of `w`) against four activation rows of as many
/// blocks that start `stride` blocks apart in `a`. Where the activations
/// are Q8_0 blocks, `scales` holds the four rows' block scales widened to
/// f32 (`scales[c * nb + i]` for block `i` of row `c`, see
/// [`widen_scales`]), widened once per product rather than once per weight
/// row; the kernels for Q8_K activations (whose scales are f32 already)
/// take an empty slice. Each result equals the set's [`DotFn`] to the bit.
/// Panics where the rows do not fit.
pub(crate) type TileFn<W> =
    unsafe fn(w: &[W], a: &[Acts<W>], stride: usize, scales: &[f32]) -> [f32; 4];

/// The f16 block scales of `rows` Q8_0 activation rows of `nb` blocks each,
/// `stride` blocks apart in `a`, widened to f32 into `out` (`out[c * nb +
/// i]` for block `i` of row `c`): what [`TileFn`] kernels read for 32-block
/// weights.
pub(crate) fn widen_scales(
    a: &[BlockQ8_0],
    stride: usize,
    rows: usize,
    nb: usize,
    out: &mut Vec<f32>,
) {
    out.clear();
    for c in 0..rows {
        out.extend(a[c * stride..c * stride + nb].iter().map(|b| b.d.get()));
    }
}

/// Four weight rows of `nb` blocks that start `w_stride` blocks apart in
/// `w`, against four activation rows that start `stride` blocks apart in
/// `a`; `out[c][r]` is activation row `c` times weight row `r`, each the
/// set's [`DotFn`] result to the bit. Panics where the rows do not fit.
pub(crate) type Tile44Fn<W> =
    unsafe fn(w: &[W], w_stride: usize, a: &[Acts<W>], stride: usize, nb: usize) -> [[f32; 4]; 4];

/// Four weight rows of `a.len()` blocks that start `w_stride` blocks apart
/// in `w`, against one activation row (`a`); each result equals the set's
/// [`DotFn`] to the bit. Panics where the rows do not fit.
pub(crate) type RowsFn<W> = unsafe fn(w: &[W], w_stride: usize, a: &[Acts<W>]) -> [f32; 4];

/// The eight rows of one group in [`crate::formats::interleave`]'s layout
/// against one activation row (as many blocks as the shorter holds); each
/// result equals the set's [`DotFn`] to the bit.
pub(crate) type X8Fn<W> = unsafe fn(w: &[Interleaved<W>], a: &[Acts<W>]) -> [f32; 8];

/// [`X8Fn`] against four activation rows of `w.len()` blocks that start
/// `stride` blocks apart in `a`: `out[c]` is activation row `c`'s, each the
/// one-row kernel's to the bit. Panics where the rows do not fit.
pub(crate) type X8TileFn<W> =
    unsafe fn(w: &[Interleaved<W>], a: &[Acts<W>], stride: usize) -> [[f32; 8]; 4];

/// Rewrites interleaved group blocks of one format (`src`) as Q8_0 ones
/// (`dst`, as many) that hold the same values and scales exactly (checked
/// against a scalar reference in `formats::interleave`'s tests), so that a
/// batch unpacks the format once rather than once per activation row.
/// Panics where `dst` is shorter than `src`.
pub(crate) type WidenX8Fn<W> =
    unsafe fn(src: &[Interleaved<W>], dst: &mut [Interleaved<BlockQ8_0>]);

/// Panics unless `rows` rows of `nb` items that start `stride` items apart
/// lie inside a slice of `len`: the one bounds check of a multi-row
/// kernel, which its raw reads then rely on.
#[inline(always)]
#[track_caller]
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // x86's multi-row kernels.
pub(crate) fn check_rows(len: usize, rows: usize, stride: usize, nb: usize) {
    let end = rows
        .checked_sub(1)
        .and_then(|last| stride.checked_mul(last))
        .and_then(|start| start.checked_add(nb));
    assert!(
        end.is_some_and(|end| end <= len),
        "{rows} rows of {nb} items {stride} apart do not fit in {len}"
    );
}

/// Activation blocks `a` as Q8_0 blocks, where that is what they are
/// (the widened scales and the Q8_0 rewrite read them so); `None` for
/// another format.
pub(crate) fn as_q8_0<A: BlockFormat>(a: &[A]) -> Option<&[BlockQ8_0]> {
    (A::TYPE == GgmlType::Q8_0).then(|| bytemuck::cast_slice(a))
}

/// Blocks as the bytes they are stored in, for the kernels that read a
/// block's fields at byte offsets.
#[inline(always)]
pub(crate) fn raw<B: bytemuck::Pod>(b: &[B]) -> &[u8] {
    bytemuck::cast_slice(b)
}

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

/// The kernels for weights stored as blocks of `W`, on one tier: the dot
/// every product can fall back on, and the batched shapes where the tier
/// has them.
pub(crate) struct FormatKernels<W: WeightFormat> {
    /// One weight row against one activation row.
    pub dot: DotFn<W>,
    /// One weight row against four activation rows.
    pub tile4: Option<TileFn<W>>,
    /// Four weight rows against four activation rows (batched decode).
    pub tile44: Option<Tile44Fn<W>>,
    /// Four weight rows against one activation row (decode).
    pub rows4: Option<RowsFn<W>>,
    /// Eight interleaved rows against one activation row.
    pub x8: Option<X8Fn<W>>,
    /// Eight interleaved rows against four activation rows.
    pub x8x4: Option<X8TileFn<W>>,
    /// Interleaved groups rewritten as Q8_0 ones, whose [`Self::x8`]
    /// kernels a batch then runs (the same sums, the format unpacked once).
    pub x8_as_q8_0: Option<WidenX8Fn<W>>,
    /// Whether the kernels prefetch the weights ahead themselves (spread
    /// over the row, which keeps more misses in flight than a burst per
    /// row does).
    pub prefetches: bool,
}

impl<W: WeightFormat> FormatKernels<W> {
    /// A set of one dot kernel and no batched shapes.
    pub(crate) const fn dot(dot: DotFn<W>) -> Self {
        FormatKernels {
            dot,
            tile4: None,
            tile44: None,
            rows4: None,
            x8: None,
            x8x4: None,
            x8_as_q8_0: None,
            prefetches: false,
        }
    }
}

// Function pointers are Copy whatever `W` is; a derive would ask `W: Copy`.
impl<W: WeightFormat> Clone for FormatKernels<W> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<W: WeightFormat> Copy for FormatKernels<W> {}

/// The kernels for float weights stored as `E`, against activations `T`.
pub(crate) struct FloatKernels<E: 'static, T: 'static = f32> {
    /// One weight row against one activation row.
    pub dot: FloatDotFn<E, T>,
    /// Several weight rows against several activation rows, where the
    /// tier has it.
    pub tile: Option<FloatTileFn<E, T>>,
}

impl<E, T> FloatKernels<E, T> {
    /// A set of one dot kernel and no tile.
    pub(crate) const fn dot(dot: FloatDotFn<E, T>) -> Self {
        FloatKernels { dot, tile: None }
    }
}

impl<E, T> Clone for FloatKernels<E, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<E, T> Copy for FloatKernels<E, T> {}

/// The lattice formats' kernels, one dot each (the reference compiled for
/// the tier, see [`lattice_kernels`]).
#[derive(Clone, Copy)]
pub(crate) struct LatticeKernels {
    pub iq2_xxs: FormatKernels<BlockIQ2XXS>,
    pub iq2_xs: FormatKernels<BlockIQ2XS>,
    pub iq2_s: FormatKernels<BlockIQ2S>,
    pub iq3_xxs: FormatKernels<BlockIQ3XXS>,
    pub iq3_s: FormatKernels<BlockIQ3S>,
    pub iq1_s: FormatKernels<BlockIQ1S>,
    pub iq1_m: FormatKernels<BlockIQ1M>,
}

/// A [`LatticeKernels`] whose dots are the generic `dot` taken at each
/// lattice format.
macro_rules! lattice_kernels {
    ($($dot:ident)::+) => {
        $crate::simd::LatticeKernels {
            iq2_xxs: $crate::simd::FormatKernels::dot($($dot)::+::<$crate::formats::blocks::BlockIQ2XXS>),
            iq2_xs: $crate::simd::FormatKernels::dot($($dot)::+::<$crate::formats::blocks::BlockIQ2XS>),
            iq2_s: $crate::simd::FormatKernels::dot($($dot)::+::<$crate::formats::blocks::BlockIQ2S>),
            iq3_xxs: $crate::simd::FormatKernels::dot($($dot)::+::<$crate::formats::blocks::BlockIQ3XXS>),
            iq3_s: $crate::simd::FormatKernels::dot($($dot)::+::<$crate::formats::blocks::BlockIQ3S>),
            iq1_s: $crate::simd::FormatKernels::dot($($dot)::+::<$crate::formats::blocks::BlockIQ1S>),
            iq1_m: $crate::simd::FormatKernels::dot($($dot)::+::<$crate::formats::blocks::BlockIQ1M>),
        }
    };
}
pub(crate) use lattice_kernels;

/// One tier's kernels: a set per weight format.
#[derive(Clone, Copy)]
pub(crate) struct Kernels {
    pub name: &'static str,
    pub q4_0: FormatKernels<BlockQ4_0>,
    pub q4_1: FormatKernels<BlockQ4_1>,
    pub q5_0: FormatKernels<BlockQ5_0>,
    pub q5_1: FormatKernels<BlockQ5_1>,
    pub q8_0: FormatKernels<BlockQ8_0>,
    pub q2_k: FormatKernels<BlockQ2K>,
    pub q3_k: FormatKernels<BlockQ3K>,
    pub q4_k: FormatKernels<BlockQ4K>,
    pub q5_k: FormatKernels<BlockQ5K>,
    pub q6_k: FormatKernels<BlockQ6K>,
    pub q8_k: FormatKernels<BlockQ8K>,
    pub iq4_nl: FormatKernels<BlockIQ4NL>,
    pub iq4_xs: FormatKernels<BlockIQ4XS>,
    /// The lattice formats (`formats::lattice`).
    pub lattice: LatticeKernels,
    pub f32: FloatKernels<F32Le>,
    pub f16: FloatKernels<F16Le>,
    /// BF16 weights against bf16 activations ([`crate::scalar::dot_bf16`]).
    pub bf16: FloatKernels<Bf16Le, u16>,
    /// The batched (prefill) product's kernels.
    pub gemm: GemmTier,
}

/// Work over one quantized weight format, generic in its blocks: what
/// [`Kernels::with_format`] runs with the format's kernel set.
pub(crate) trait ForFormat {
    /// What the work gives.
    type Out;
    /// The work, with the whole table (`k`) and the format's set (`f`).
    fn run<W: WeightFormat>(self, k: &Kernels, f: &FormatKernels<W>) -> Self::Out;
}

/// f32 activations as a float format's kernels take them: the same slice
/// for F32 and F16 weights, rounded to bf16 (a new buffer) for BF16.
pub(crate) type FloatActs<T> = for<'a> fn(&'a [f32]) -> Cow<'a, [T]>;

/// Work over one float weight format ([`Kernels::with_float`]).
pub(crate) trait ForFloat {
    /// What the work gives.
    type Out;
    /// The work with the format's set: weights stored as `E` against
    /// activations `T`, made from f32 by `acts`.
    fn run<E: bytemuck::Pod, T: Copy + Send + Sync>(
        self,
        f: &FloatKernels<E, T>,
        acts: FloatActs<T>,
    ) -> Self::Out;
}

impl Kernels {
    /// Runs `work` with the kernel set of quantized format `ty`; `None` for
    /// a type that is not a quantized weight format.
    pub(crate) fn with_format<F: ForFormat>(&self, ty: GgmlType, work: F) -> Option<F::Out> {
        Some(match ty {
            GgmlType::Q4_0 => work.run(self, &self.q4_0),
            GgmlType::Q4_1 => work.run(self, &self.q4_1),
            GgmlType::Q5_0 => work.run(self, &self.q5_0),
            GgmlType::Q5_1 => work.run(self, &self.q5_1),
            GgmlType::Q8_0 => work.run(self, &self.q8_0),
            GgmlType::Q2_K => work.run(self, &self.q2_k),
            GgmlType::Q3_K => work.run(self, &self.q3_k),
            GgmlType::Q4_K => work.run(self, &self.q4_k),
            GgmlType::Q5_K => work.run(self, &self.q5_k),
            GgmlType::Q6_K => work.run(self, &self.q6_k),
            GgmlType::Q8_K => work.run(self, &self.q8_k),
            GgmlType::IQ4_NL => work.run(self, &self.iq4_nl),
            GgmlType::IQ4_XS => work.run(self, &self.iq4_xs),
            GgmlType::IQ2_XXS => work.run(self, &self.lattice.iq2_xxs),
            GgmlType::IQ2_XS => work.run(self, &self.lattice.iq2_xs),
            GgmlType::IQ2_S => work.run(self, &self.lattice.iq2_s),
            GgmlType::IQ3_XXS => work.run(self, &self.lattice.iq3_xxs),
            GgmlType::IQ3_S => work.run(self, &self.lattice.iq3_s),
            GgmlType::IQ1_S => work.run(self, &self.lattice.iq1_s),
            GgmlType::IQ1_M => work.run(self, &self.lattice.iq1_m),
            _ => return None,
        })
    }

    /// Runs `work` with the kernel set of float format `ty`; `None` for a
    /// type that is not F32, F16 or BF16.
    pub(crate) fn with_float<F: ForFloat>(&self, ty: GgmlType, work: F) -> Option<F::Out> {
        Some(match ty {
            GgmlType::F32 => work.run(&self.f32, |x| Cow::Borrowed(x)),
            GgmlType::F16 => work.run(&self.f16, |x| Cow::Borrowed(x)),
            GgmlType::BF16 => work.run(&self.bf16, |x| {
                Cow::Owned(x.iter().map(|&v| f32_to_bf16_bits(v)).collect())
            }),
            _ => return None,
        })
    }

    /// Whether `ty` is a quantized weight format, which every table has a
    /// kernel set for.
    pub(crate) fn quantized(&self, ty: GgmlType) -> bool {
        struct Has;
        impl ForFormat for Has {
            type Out = ();
            fn run<W: WeightFormat>(self, _: &Kernels, _: &FormatKernels<W>) {}
        }
        self.with_format(ty, Has).is_some()
    }

    /// Whether the interleaved layout of `ty` has kernels in this table.
    pub(crate) fn interleaves(&self, ty: GgmlType) -> bool {
        struct HasX8;
        impl ForFormat for HasX8 {
            type Out = bool;
            fn run<W: WeightFormat>(self, _: &Kernels, f: &FormatKernels<W>) -> bool {
                f.x8.is_some()
            }
        }
        self.with_format(ty, HasX8) == Some(true)
    }

    /// Whether this table runs AVX512_BF16's dot (its BF16 tile), which
    /// the BF16 GEMM then uses too.
    pub(crate) fn has_bf16_dot(&self) -> bool {
        cfg!(target_arch = "x86_64") && self.bf16.tile.is_some()
    }
}

static SCALAR: Kernels = Kernels {
    name: "scalar",
    q4_0: FormatKernels::dot(scalar::dot::<BlockQ4_0>),
    q4_1: FormatKernels::dot(scalar::dot::<BlockQ4_1>),
    q5_0: FormatKernels::dot(scalar::dot::<BlockQ5_0>),
    q5_1: FormatKernels::dot(scalar::dot::<BlockQ5_1>),
    q8_0: FormatKernels::dot(scalar::dot::<BlockQ8_0>),
    q2_k: FormatKernels::dot(scalar::dot::<BlockQ2K>),
    q3_k: FormatKernels::dot(scalar::dot::<BlockQ3K>),
    q4_k: FormatKernels::dot(scalar::dot::<BlockQ4K>),
    q5_k: FormatKernels::dot(scalar::dot::<BlockQ5K>),
    q6_k: FormatKernels::dot(scalar::dot::<BlockQ6K>),
    q8_k: FormatKernels::dot(scalar::dot::<BlockQ8K>),
    iq4_nl: FormatKernels::dot(scalar::dot::<BlockIQ4NL>),
    iq4_xs: FormatKernels::dot(scalar::dot::<BlockIQ4XS>),
    lattice: lattice_kernels!(scalar::dot),
    f32: FloatKernels::dot(scalar::dot_f32),
    f16: FloatKernels::dot(scalar::dot_f16),
    bf16: FloatKernels::dot(scalar::dot_bf16),
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

/// Whole blocks of `B` from `src` dequantized into `dst` on `tier`'s
/// vectors: the portable code's bits on every tier.
pub(crate) fn dequantize_row_on<B: BlockFormat>(tier: GemmTier, src: &[u8], dst: &mut [f32]) {
    match tier.vector() {
        // SAFETY: a table of these tiers is installed only after its CPU
        // features were detected (`x86::available`).
        #[cfg(target_arch = "x86_64")]
        GemmTier::Avx512Vnni => unsafe { x86_dequant::dequantize_row_avx512::<B>(src, dst) },
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        GemmTier::Avx2 | GemmTier::AvxVnni => unsafe {
            x86_dequant::dequantize_row_avx2::<B>(src, dst)
        },
        _ => crate::formats::blocks::dequantize_row::<B>(src, dst),
    }
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
    let bl = ty.block_len();
    let shape = || {
        QuantError::Shape(format!(
            "a dot product of {n} {ty} elements over a weight row of {} bytes and an activation row of {} bytes",
            w.len(),
            a.len()
        ))
    };
    if bl == 0 || !n.is_multiple_of(bl) {
        return Err(shape());
    }
    /// One dot of `nb` blocks, or `None` where a row is short.
    struct Dot<'a> {
        nb: usize,
        w: &'a [u8],
        a: &'a [u8],
    }
    impl ForFormat for Dot<'_> {
        type Out = Option<f32>;
        fn run<W: WeightFormat>(self, _: &Kernels, f: &FormatKernels<W>) -> Option<f32> {
            let w = blocks::<W>(self.w).get(..self.nb)?;
            let a = blocks::<Acts<W>>(self.a).get(..self.nb)?;
            // SAFETY: a table from this module (kernels installed only after
            // feature detection).
            Some(unsafe { (f.dot)(w, a) })
        }
    }
    k.with_format(ty, Dot { nb: n / bl, w, a })
        .ok_or(QuantError::Unsupported(ty))?
        .ok_or_else(shape)
}

/// Float-weight dot through table `k` over `x.len()` elements (BF16
/// weights take the activations rounded to bf16).
pub(crate) fn checked_vec_dot_f32(
    k: &Kernels,
    ty: GgmlType,
    w: &[u8],
    x: &[f32],
) -> Result<f32, QuantError> {
    let need = x
        .len()
        .checked_mul(ty.block_bytes())
        .ok_or(QuantError::Overflow)?;
    if is_float(ty) && w.len() < need {
        return Err(QuantError::BufferTooShort {
            what: "weight",
            need,
            have: w.len(),
        });
    }
    /// One float dot over `x`'s elements.
    struct Dot<'a> {
        w: &'a [u8],
        x: &'a [f32],
    }
    impl ForFloat for Dot<'_> {
        type Out = f32;
        fn run<E: bytemuck::Pod, T: Copy + Send + Sync>(
            self,
            f: &FloatKernels<E, T>,
            acts: FloatActs<T>,
        ) -> f32 {
            let xs = acts(self.x);
            let w: &[E] = bytemuck::cast_slice(&self.w[..self.x.len() * size_of::<E>()]);
            // SAFETY: a table from this module.
            unsafe { (f.dot)(w, &xs) }
        }
    }
    k.with_float(ty, Dot { w, x })
        .ok_or(QuantError::Unsupported(ty))
}

/// Whether weights of type `ty` are plain floats (F32, F16, BF16), whose
/// products take f32 activations rather than quantized ones.
pub(crate) fn is_float(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytemuck::Zeroable;

    /// A xorshift stream of bits, for test data.
    fn bits(seed: u64) -> impl FnMut() -> u64 {
        let mut x = seed;
        move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        }
    }

    /// A float in `[-scale, scale)` from the stream.
    fn unit(bits: &mut impl FnMut() -> u64, scale: f32) -> f32 {
        ((bits() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
    }

    /// `rows` rows of `nb` blocks of `B`, `stride` blocks apart (padding
    /// zero), each quantized from random values of its own scale in
    /// `scales` (cycled): as weights, or as activations where `B` is an
    /// activation format.
    fn quantized_rows<B: BlockFormat>(
        rows: usize,
        nb: usize,
        stride: usize,
        scales: &[f32],
        bits: &mut impl FnMut() -> u64,
    ) -> Vec<B> {
        let mut out = vec![B::zeroed(); (rows - 1) * stride + nb];
        for r in 0..rows {
            let xs: Vec<f32> = (0..nb * B::VALUES)
                .map(|_| unit(bits, scales[r % scales.len()]))
                .collect();
            let row = bytemuck::cast_slice_mut(&mut out[r * stride..r * stride + nb]);
            crate::quantize(B::TYPE, &xs, row)
                .or_else(|_| crate::quantize_activation(B::TYPE, &xs, row))
                .unwrap();
        }
        out
    }

    /// Block counts on both sides of the kernels' eight-block runs.
    const BLOCK_COUNTS: [usize; 10] = [1, 2, 3, 7, 8, 9, 16, 17, 20, 33];

    /// Every table's four-weight-row decode kernels give each row's one-row
    /// kernel result to the bit, so a decode step's logits do not depend on
    /// whether a row fell in a group of four.
    #[test]
    fn rows_kernels_equal_single_rows_bitwise() {
        fn check<W: WeightFormat>(k: &Kernels, f: &FormatKernels<W>) -> usize {
            let Some(rows4) = f.rows4 else { return 0 };
            let mut bits = bits(0x0bad_cafe_dead_beef);
            let mut checked = 0;
            for nb in BLOCK_COUNTS {
                // Rows of very different sizes, so a mixed-up scale shows.
                let w = quantized_rows::<W>(4, nb, nb, &[0.01, 1.0, 30.0, 0.3], &mut bits);
                let a = quantized_rows::<Acts<W>>(1, nb, nb, &[3.0], &mut bits);
                // SAFETY: tables from this module.
                let got = unsafe { rows4(&w, nb, &a) };
                for (r, g) in got.iter().enumerate() {
                    // SAFETY: as above.
                    let want = unsafe { (f.dot)(&w[r * nb..(r + 1) * nb], &a) };
                    let what = format!("{} {} nb {nb} row {r}", k.name, W::TYPE);
                    assert_eq!(g.to_bits(), want.to_bits(), "{what}");
                    checked += 1;
                }
            }
            checked
        }
        let mut checked = 0;
        for k in available() {
            checked += check(k, &k.q8_0) + check(k, &k.q5_0) + check(k, &k.q4_0);
            checked += check(k, &k.iq4_nl);
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
    /// eight-block runs, the rows a block apart.
    #[test]
    fn four_by_four_tiles_equal_single_rows_bitwise() {
        fn check<W: WeightFormat>(k: &Kernels, f: &FormatKernels<W>) -> usize {
            let Some(t44) = f.tile44 else { return 0 };
            let mut bits = bits(0x5eed_0f44_1234_abcd);
            let mut checked = 0;
            for nb in BLOCK_COUNTS {
                for raw_bytes in [false, true] {
                    let stride = nb + 1;
                    let mut w =
                        quantized_rows::<W>(4, nb, stride, &[0.01, 1.0, 30.0, 0.3], &mut bits);
                    if raw_bytes {
                        for blk in w.iter_mut() {
                            let bytes = bytemuck::bytes_of_mut(blk);
                            bytes.iter_mut().for_each(|b| *b = bits() as u8);
                            // A sane f16 scale (exponent 10..17).
                            let h = 0x2800u16 + (bits() as u16 & 0x1fff);
                            bytes[..2].copy_from_slice(&h.to_le_bytes());
                        }
                    }
                    let a = quantized_rows::<Acts<W>>(4, nb, stride, &[3.0], &mut bits);
                    // SAFETY: tables from this module.
                    let got = unsafe { t44(&w, stride, &a, stride, nb) };
                    for (c, got) in got.iter().enumerate() {
                        for (r, g) in got.iter().enumerate() {
                            let (wr, ar) =
                                (r * stride..r * stride + nb, c * stride..c * stride + nb);
                            // SAFETY: as above.
                            let want = unsafe { (f.dot)(&w[wr], &a[ar]) };
                            let what = format!(
                                "{} {} nb {nb} raw {raw_bytes} act {c} row {r}",
                                k.name,
                                W::TYPE
                            );
                            assert_eq!(g.to_bits(), want.to_bits(), "{what}");
                            checked += 1;
                        }
                    }
                }
            }
            checked
        }
        let mut checked = 0;
        for k in available() {
            checked += check(k, &k.q8_0) + check(k, &k.q5_0) + check(k, &k.q4_0);
            checked += check(k, &k.iq4_nl);
        }
        let avx512 = cfg!(target_arch = "x86_64") && available().iter().any(|k| k.name == "avx512");
        if avx512 {
            assert!(checked > 0);
        }
    }

    /// Every table's four-row tiles give each row's one-row kernel result to
    /// the bit (batched decode relies on it), for odd and even block counts
    /// on both sides of the eight-block runs, the activation rows a block
    /// apart.
    #[test]
    fn tiles_equal_single_rows_bitwise() {
        fn check<W: WeightFormat>(k: &Kernels, f: &FormatKernels<W>) -> usize {
            let Some(tile) = f.tile4 else { return 0 };
            let mut bits = bits(0x1234_5678_9abc_def1);
            let mut checked = 0;
            for nb in BLOCK_COUNTS {
                let w = quantized_rows::<W>(1, nb, nb, &[1.0], &mut bits);
                let stride = nb + 1;
                let a = quantized_rows::<Acts<W>>(4, nb, stride, &[3.0], &mut bits);
                let mut scales = Vec::new();
                if let Some(q8) = as_q8_0(&a) {
                    widen_scales(q8, stride, 4, nb, &mut scales);
                }
                // SAFETY: tables from this module.
                let got = unsafe { tile(&w, &a, stride, &scales) };
                for (c, g) in got.iter().enumerate() {
                    // SAFETY: as above.
                    let want = unsafe { (f.dot)(&w, &a[c * stride..c * stride + nb]) };
                    let what = format!("{} {} nb {nb} row {c}", k.name, W::TYPE);
                    assert_eq!(g.to_bits(), want.to_bits(), "{what}");
                    checked += 1;
                }
            }
            checked
        }
        let mut checked = 0;
        for k in available() {
            checked += check(k, &k.q8_0) + check(k, &k.q5_0) + check(k, &k.q4_0);
            checked += check(k, &k.q4_k) + check(k, &k.q5_k) + check(k, &k.q6_k);
            checked += check(k, &k.iq4_nl) + check(k, &k.iq4_xs);
        }
        // Every x86 SIMD table sits on the AVX2 one, which has tiles.
        if cfg!(target_arch = "x86_64") && available().len() > 1 {
            assert!(checked > 0);
        }
    }

    /// A multi-row kernel refuses rows that do not fit rather than reading
    /// past its slices.
    #[test]
    fn rows_that_do_not_fit_panic() {
        let fits = |len, rows, stride, nb| {
            std::panic::catch_unwind(|| check_rows(len, rows, stride, nb)).is_ok()
        };
        assert!(fits(10, 4, 3, 1));
        assert!(!fits(10, 4, 3, 2));
        assert!(!fits(10, 4, usize::MAX / 2, 1));
        assert!(!fits(10, 0, 1, 1));
        for k in available() {
            if let Some(rows4) = k.q8_0.rows4 {
                let w = vec![BlockQ8_0::zeroed(); 7];
                let a = vec![BlockQ8_0::zeroed(); 2];
                // SAFETY: a table from this module.
                let short = std::panic::catch_unwind(|| unsafe { rows4(&w, 2, &a) });
                assert!(short.is_err(), "{}", k.name);
            }
        }
    }

    /// Every table's float tiles give each pair of weight and activation
    /// rows the table's one-row result and the scalar reference's to the
    /// bit, in every shape, at lengths on both sides of the 32- and
    /// 8-element steps, the rows padded apart.
    #[test]
    fn float_tiles_equal_single_rows_bitwise() {
        /// The check for one table and float format.
        struct Tiles<'a>(&'a Kernels, &'a mut usize);
        impl ForFloat for Tiles<'_> {
            type Out = ();
            fn run<E: bytemuck::Pod, T: Copy + Send + Sync>(
                self,
                f: &FloatKernels<E, T>,
                acts: FloatActs<T>,
            ) {
                if let Some(tile) = f.tile {
                    // BF16 tiles take twice the activation rows against one weight row.
                    let one_row = if size_of::<T>() == 2 {
                        BF16_TILE_ACTS
                    } else {
                        FLOAT_TILE_ACTS
                    };
                    *self.1 += tiles_match(self.0, tile, f.dot, acts, one_row);
                }
            }
        }
        let mut checked = 0;
        for k in available() {
            for ty in [GgmlType::F32, GgmlType::F16, GgmlType::BF16] {
                k.with_float(ty, Tiles(k, &mut checked));
            }
        }
        if cfg!(target_arch = "x86_64") && available().iter().any(|k| k.name == "avx512") {
            assert!(checked > 0);
        }
    }

    /// [`float_tiles_equal_single_rows_bitwise`] for one table and format
    /// (weights stored as `E`), the activations made from f32 by `acts`, up
    /// to `one_row_acts` rows against one weight row; the number of results
    /// checked.
    fn tiles_match<E: bytemuck::Pod, T: Copy>(
        k: &Kernels,
        tile: FloatTileFn<E, T>,
        single: FloatDotFn<E, T>,
        acts: FloatActs<T>,
        one_row_acts: usize,
    ) -> usize {
        let ty = match size_of::<E>() {
            4 => GgmlType::F32,
            _ if size_of::<T>() == 2 => GgmlType::BF16,
            _ => GgmlType::F16,
        };
        let mut bits = bits(0x0bad_5eed_1234_5678);
        let mut checked = 0;
        for n in [
            0usize, 1, 7, 8, 15, 16, 31, 32, 33, 40, 47, 56, 63, 64, 65, 100, 640,
        ] {
            let stride = n + 3;
            // Three weight rows, padded apart.
            let w_stride = n + 3;
            let mut ws = vec![E::zeroed(); FLOAT_TILE_WEIGHTS * w_stride];
            for v in 0..FLOAT_TILE_WEIGHTS {
                let wf: Vec<f32> = (0..n).map(|_| unit(&mut bits, 2.0)).collect();
                let row = &mut ws[v * w_stride..v * w_stride + n];
                crate::quantize(ty, &wf, bytemuck::cast_slice_mut(row)).unwrap();
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
                let xf: Vec<f32> = (0..rows * stride).map(|_| unit(&mut bits, 2.0)).collect();
                let xs = acts(&xf);
                let ws = &ws[..(wrows - 1) * w_stride + n];
                // SAFETY: tables from this module.
                let got = unsafe { tile(ws, w_stride, &xs, stride, n, wrows, rows) };
                for (v, gots) in got.iter().enumerate() {
                    let shape = format!("{} {ty} n {n} tile {wrows}x{rows} w {v}", k.name);
                    if v >= wrows {
                        assert!(gots.iter().all(|&g| g == 0.0), "{shape}");
                        continue;
                    }
                    assert!(gots[rows..].iter().all(|&g| g == 0.0), "{shape}");
                    let wrow = &ws[v * w_stride..v * w_stride + n];
                    for (c, g) in gots.iter().take(rows).enumerate() {
                        // SAFETY: as above.
                        let want = unsafe { single(wrow, &xs[c * stride..c * stride + n]) };
                        let row = &xf[c * stride..c * stride + n];
                        let wbytes = bytemuck::cast_slice(wrow);
                        let reference = scalar::vec_dot_f32(ty, wbytes, row).unwrap();
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
        let Some(k) = available().into_iter().find(|k| k.bf16.tile.is_some()) else {
            return;
        };
        let mut next = bits(0x5eed_0bf1_6000_0001);
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
            let w: Vec<Bf16Le> = (0..n).map(|_| Bf16Le(bits(next()).to_le_bytes())).collect();
            let x: Vec<u16> = (0..n).map(|_| bits(next())).collect();
            // SAFETY: a table from this module.
            let got = unsafe { (k.bf16.dot)(&w, &x) };
            let want = scalar::dot_bf16(&w, &x);
            assert!(
                got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                "round {round} n {n}: {got:e} vs {want:e}"
            );
        }
    }
}
