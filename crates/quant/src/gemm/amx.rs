//! AMX-INT8 tiles for the panel product, where the CPU has them (Intel
//! Sapphire Rapids and later).
//!
//! One `tdpbssd` multiplies a tile of 16 rows of signed bytes by a tile of
//! signed bytes in the VNNI layout (`K/4` rows, each holding four bytes of
//! each of 16 columns) into 16 × 16 i32 sums: 8192 multiply-adds for a
//! group of 32, where `vpdpbusd` does 64. A block is 32 activation rows by
//! the panel's 32 rows: four accumulator tiles, two activation tiles, two
//! weight tiles, the eight registers there are. The integer sums are the same
//! exact per-group integers the register tiles form, and the float steps
//! after them are the reference's ([`super::tile_scalar`]) in the same order,
//! so AMX changes the speed and never the numbers.
//!
//! The operands fit the tile instruction as they are: the activations'
//! signed bytes ([`Acts::q`], a token's group of `g` bytes per tile row, 16
//! tokens a tile) times the panel's signed values (its layout, four bytes
//! of each of 32 rows per column step, is already the VNNI layout, two
//! tiles of 16 rows each; [`Panel::fill_as`] stores `q` itself), from
//! accumulators set to zero: each group's sums are exactly `sum(q * a)`.
//!
//! The tiles reach the float steps only through memory (a tile store, then
//! vector loads), and the tile registers are not renamed: a tile is loaded
//! again only once the products reading it are done. So the sums alternate
//! between two buffers, and the previous group's float steps for each
//! accumulator are issued between this group's tile operations, a quarter
//! at a time (as llama.cpp's AMX kernels interleave them), where the vector
//! units work while the tile unit does. Issued after all four products
//! instead, and with the groups' accumulators started from a bias loaded
//! from memory, activations shifted to unsigned in a pass of their own and
//! panels packed by the portable packer, the tier was half as fast as the
//! AVX-512 tiles (pp512 of a 1B: 98 against 147 t/s on one thread of a
//! 16-core Xeon).
//!
//! The block kernel is written once over [`Unit`], the few tile operations
//! it needs. The real unit issues the instructions; [`Emulated`] computes
//! their definitions in plain Rust, so the layout and the arithmetic are
//! tested on every machine, and the instructions themselves wherever the CPU
//! has them (and once per process before they are used: [`usable`]).

// Off x86-64 only the emulation (in tests) uses the block kernel.
#![cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]

use super::{fold_at, Acts, Panel, NR, QK};
use crate::formats::kquants::QK_K;

/// How far ahead of a group the activation rows are prefetched (bytes).
const PREFETCH_AHEAD: usize = 128;

/// Activation rows per block (two tiles' rows).
pub(crate) const MA: usize = 32;

/// A block's result: `out[c][r]` for activation row `c0 + c` and panel row `r`.
pub(crate) type Block = [[f32; NR]; MA];

/// The integer sums of one group: `[activation row][panel row]`.
type Sums = [[i32; NR]; MA];

/// A block's working memory, kept across blocks and per thread (16 KiB, of
/// which each block zeroes only `out`), 64-byte aligned: the tile stores'
/// rows then never straddle two cache lines (a misaligned store cost a
/// quarter of a standalone loop's speed).
#[repr(align(64))]
pub(crate) struct Scratch {
    /// The result so far.
    out: Block,
    /// A super-block's sums without the activation scale (Q8_K rows).
    pend: Block,
    /// Two groups' integer sums: the one the tiles store, the one the
    /// float steps read.
    sums: [Sums; 2],
}

impl Scratch {
    /// Zeroed working memory.
    pub(crate) fn new() -> Box<Scratch> {
        Box::new(Scratch {
            out: [[0.0; NR]; MA],
            pend: [[0.0; NR]; MA],
            sums: [[[0; NR]; MA]; 2],
        })
    }
}

/// What one group's float steps multiply by: the panel's scales and
/// minimum terms (where the format has them), the block's activation scales
/// and sums (row `c`'s at `c * d_step` and `c * sum_step`), and where the
/// group stands in its super-block when the activation scale is applied
/// once per super-block (`Some((first, last))`, Q8_K rows, see
/// [`super::tile_scalar`]).
pub(crate) struct GroupScales<'a> {
    scales: &'a [f32; NR],
    mins: Option<&'a [f32; NR]>,
    d: &'a [f32],
    d_step: usize,
    sum: &'a [f32],
    sum_step: usize,
    fold: Option<(bool, bool)>,
}

impl<'a> GroupScales<'a> {
    /// Group `gi`'s, for the block of rows from `c0`; `span` is
    /// [`span`]`(p, a)`, found once per block (a division).
    #[inline(always)]
    fn of(p: &'a Panel, a: &'a Acts, c0: usize, gi: usize, span: usize) -> Self {
        let cols = p.groups * p.g;
        let (d_step, sum_step) = (cols / QK, p.groups);
        GroupScales {
            scales: p.s[gi * NR..(gi + 1) * NR].try_into().expect("NR scales"),
            mins: p
                .min
                .then(|| p.m[gi * NR..(gi + 1) * NR].try_into().expect("NR minimums")),
            d: &a.d[c0 * d_step + gi * p.g / QK..],
            d_step,
            sum: &a.sum[c0 * sum_step + gi..],
            sum_step,
            // `fold_at`, without its divisions: this runs for every group.
            fold: (span > 0).then(|| {
                let j = gi & (span - 1);
                (j == 0, j == span - 1)
            }),
        }
    }
}

/// Groups per super-block where the activation scale is applied once per
/// super-block (a power of two: 8 or 16), else 0.
fn span(p: &Panel, a: &Acts) -> usize {
    let span = fold_at(a, p.g, 0).map_or(0, |_| QK_K / p.g);
    // The group masks below need a power of two (g is 16 or 32).
    assert!(span == 0 || span.is_power_of_two());
    span
}

/// Accumulator `c`'s activation rows among the block's first `m`, and the
/// first of its panel rows.
#[inline(always)]
fn quarter(c: usize, m: usize) -> (std::ops::Range<usize>, usize) {
    let r0 = 16 * (c / 2);
    (r0..(r0 + 16).min(m).max(r0), 16 * (c % 2))
}

/// The tile operations of the block kernel. Accumulator `c` (0..4) holds
/// activation rows `16 * (c / 2)..` by panel rows `16 * (c % 2)..`, from
/// activation tile `c / 2` and weight tile `c % 2`.
pub(crate) trait Unit {
    /// Accumulator `c` ← zeros.
    ///
    /// # Safety
    /// None beyond the previous calls' (kept `unsafe` as the real unit's is).
    unsafe fn zero(&mut self, c: usize);
    /// Activation tile `t` ← 16 rows of `g` signed bytes (16 or 32, as
    /// configured) at `a`, `stride` bytes apart.
    ///
    /// # Safety
    /// Those bytes are readable.
    unsafe fn load_a(&mut self, t: usize, g: usize, a: *const u8, stride: usize);
    /// Weight tile `h` ← `g / 4` rows of 64 signed bytes at `b`, `stride`
    /// apart.
    ///
    /// # Safety
    /// Those bytes are readable.
    unsafe fn load_b(&mut self, h: usize, g: usize, b: *const u8, stride: usize);
    /// Accumulator `c` += its activation tile times its weight tile.
    ///
    /// # Safety
    /// None beyond the previous calls' (kept `unsafe` as the real unit's is).
    unsafe fn dot(&mut self, c: usize);
    /// Accumulator `c`'s 16 rows into its quarter of `out`.
    ///
    /// # Safety
    /// None beyond the previous calls' (kept `unsafe` as the real unit's is).
    unsafe fn store(&mut self, c: usize, out: &mut Sums);
    /// Asks for the cache lines at `p`, `p + stride`, … (`rows` of them)
    /// ahead of their use; nothing where the unit is emulated.
    fn prefetch(&mut self, _p: *const u8, _stride: usize, _rows: usize) {}

    /// One group's float steps for accumulator `c`'s quarter of the first
    /// `m` rows: `out[c][r] += sums[c][r] * (scales[r] * d[c])`, then `-=
    /// mins[r] * sum[c]` where the format has minimum terms, each a fused
    /// multiply-add, as the reference rounds them; with `fold`, the
    /// super-block's sums gather in `pend` without `d`, which its last group
    /// applies (the reference's order).
    fn scale(
        &mut self,
        c: usize,
        acc: (&mut Block, &mut Block),
        sums: &Sums,
        m: usize,
        k: &GroupScales,
    ) {
        scale_portable(c, acc, sums, m, k);
    }
}

/// [`Unit::scale`]'s portable definition (the reference's float steps).
fn scale_portable(
    c: usize,
    (out, pend): (&mut Block, &mut Block),
    sums: &Sums,
    m: usize,
    k: &GroupScales,
) {
    let (rows, h) = quarter(c, m);
    for r in rows {
        let d = k.d[r * k.d_step];
        let sum = k.mins.map(|_| k.sum[r * k.sum_step]);
        let cols = h..h + 16;
        if let Some((first, last)) = k.fold {
            for ((t, &i), &s) in pend[r][cols.clone()]
                .iter_mut()
                .zip(&sums[r][cols.clone()])
                .zip(&k.scales[cols.clone()])
            {
                *t = if first {
                    i as f32 * s
                } else {
                    (i as f32).mul_add(s, *t)
                };
            }
            if let (Some(mins), Some(sum)) = (k.mins, sum) {
                for (t, &mn) in pend[r][cols.clone()].iter_mut().zip(&mins[cols.clone()]) {
                    *t = (-mn).mul_add(sum, *t);
                }
            }
            if last {
                for (o, &t) in out[r][cols.clone()].iter_mut().zip(&pend[r][cols]) {
                    *o = t.mul_add(d, *o);
                }
            }
            continue;
        }
        for ((o, &i), &s) in out[r][cols.clone()]
            .iter_mut()
            .zip(&sums[r][cols.clone()])
            .zip(&k.scales[cols.clone()])
        {
            *o = (i as f32).mul_add(s * d, *o);
        }
        if let (Some(mins), Some(sum)) = (k.mins, sum) {
            for (o, &mn) in out[r][cols.clone()].iter_mut().zip(&mins[cols]) {
                *o = (-mn).mul_add(sum, *o);
            }
        }
    }
}

/// Every activation row `c0..c0 + m` (m ≤ [`MA`]) against every row of
/// the signed panel `p`, through `u` (configured for `p.g`), into
/// `s.out`.
///
/// # Safety
/// What [`check`] asserts holds.
#[inline(always)]
unsafe fn block<U: Unit>(u: &mut U, p: &Panel, a: &Acts, c0: usize, m: usize, s: &mut Scratch) {
    let g = p.g;
    let cols = p.groups * g;
    let Scratch { out, pend, sums } = s;
    let span = span(p, a);
    *out = [[0.0f32; NR]; MA];
    for gi in 0..p.groups {
        let (first, second) = sums.split_at_mut(1);
        let (cur, prev) = if gi % 2 == 0 {
            (&mut first[0], &second[0])
        } else {
            (&mut second[0], &first[0])
        };
        let k = gi
            .checked_sub(1)
            .map(|pg| GroupScales::of(p, a, c0, pg, span));
        // SAFETY: the 32 activation rows' bytes gi*g..(gi+1)*g (whole
        // blocks of rows) and the panel's g/4 column steps of the group lie
        // inside the buffers (asserted by `check`).
        unsafe {
            // Column step k4 = gi*g/4 starts at k4 * NR * 4 bytes.
            let b = p.q.as_ptr().add(gi * g * NR);
            u.load_b(0, g, b, NR * 4);
            u.load_b(1, g, b.add(64), NR * 4);
            let at = a.q.as_ptr().add(c0 * cols + gi * g);
            u.load_a(0, g, at, cols);
            u.load_a(1, g, at.add(16 * cols), cols);
            // The activation rows are 32 streams, more than the hardware
            // prefetchers follow, and a tile load waits for all of its
            // rows: each row's line two ahead is asked for once per line.
            if (gi * g).is_multiple_of(64) {
                u.prefetch(at.wrapping_add(PREFETCH_AHEAD), cols, MA);
            }
            for c in 0..4 {
                u.zero(c);
                // The previous group's float steps for this accumulator,
                // while the tile unit works.
                if let Some(k) = &k {
                    u.scale(c, (&mut *out, &mut *pend), prev, m, k);
                }
                u.dot(c);
                u.store(c, cur);
            }
        }
    }
    if let Some(last) = p.groups.checked_sub(1) {
        let k = GroupScales::of(p, a, c0, last, span);
        for c in 0..4 {
            u.scale(c, (&mut *out, &mut *pend), &sums[last % 2], m, &k);
        }
    }
}

/// Checks what the block kernel reads against the buffers.
fn check(p: &Panel, a: &Acts, c0: usize, m: usize) {
    let cols = p.groups * p.g;
    assert!(p.signed && (p.g == 16 || p.g == 32) && m <= MA);
    assert!(a.cols == cols && a.g == p.g);
    assert!(p.q.len() >= cols * NR);
    assert!(p.s.len() >= p.groups * NR && p.m.len() >= p.groups * NR);
    assert!(a.q.len() >= (c0 + MA) * cols);
    assert!(a.d.len() >= (c0 + m) * cols / QK && a.sum.len() >= (c0 + m) * p.groups);
}

/// The tile instructions' definitions in plain Rust.
#[cfg(test)]
pub(crate) struct Emulated {
    /// The activation tiles: 16 rows of up to 32 signed bytes.
    a: [[[i8; 32]; 16]; 2],
    /// The weight tiles: up to 8 rows of 64 signed bytes.
    b: [[[i8; 64]; 8]; 2],
    /// Bytes per activation row (the configured group length).
    g: usize,
    /// The four accumulators.
    c: [[[i32; 16]; 16]; 4],
    /// Whether the float steps go through the real unit's AVX-512 ones
    /// (so CPUs without AMX test those too).
    avx512_steps: bool,
}

#[cfg(test)]
impl Default for Emulated {
    fn default() -> Self {
        Emulated {
            a: [[[0; 32]; 16]; 2],
            b: [[[0; 64]; 8]; 2],
            g: 0,
            // Not zero: a kernel that forgot to zero an accumulator fails.
            c: [[[0x5555; 16]; 16]; 4],
            avx512_steps: false,
        }
    }
}

#[cfg(test)]
impl Unit for Emulated {
    unsafe fn zero(&mut self, c: usize) {
        self.c[c] = [[0; 16]; 16];
    }

    unsafe fn load_a(&mut self, t: usize, g: usize, a: *const u8, stride: usize) {
        self.g = g;
        for (r, row) in self.a[t].iter_mut().enumerate() {
            for (k, v) in row.iter_mut().enumerate().take(g) {
                // SAFETY: 16 rows of g readable bytes (the caller's contract).
                *v = unsafe { *a.add(r * stride + k) } as i8;
            }
        }
    }

    unsafe fn load_b(&mut self, h: usize, g: usize, b: *const u8, stride: usize) {
        for (r, row) in self.b[h].iter_mut().enumerate().take(g / 4) {
            for (k, v) in row.iter_mut().enumerate() {
                // SAFETY: g/4 rows of 64 readable bytes (the caller's contract).
                *v = unsafe { *b.add(r * stride + k) } as i8;
            }
        }
    }

    unsafe fn dot(&mut self, c: usize) {
        let (a, b) = (&self.a[c / 2], &self.b[c % 2]);
        for (r, acc) in self.c[c].iter_mut().enumerate() {
            for k4 in 0..self.g / 4 {
                for (n, v) in acc.iter_mut().enumerate() {
                    for j in 0..4 {
                        *v += i32::from(a[r][k4 * 4 + j]) * i32::from(b[k4][n * 4 + j]);
                    }
                }
            }
        }
    }

    unsafe fn store(&mut self, c: usize, out: &mut Sums) {
        let (t, h) = (c / 2, c % 2);
        for (o, row) in out[16 * t..16 * t + 16].iter_mut().zip(&self.c[c]) {
            o[16 * h..16 * h + 16].copy_from_slice(row);
        }
    }

    fn scale(
        &mut self,
        c: usize,
        acc: (&mut Block, &mut Block),
        sums: &Sums,
        m: usize,
        k: &GroupScales,
    ) {
        #[cfg(target_arch = "x86_64")]
        if self.avx512_steps && x86::scale_steps(c, (&mut *acc.0, &mut *acc.1), sums, m, k) {
            return;
        }
        scale_portable(c, acc, sums, m, k);
    }
}

/// The block kernel through [`Emulated`] (the AMX tier's definition, and
/// its test on CPUs without AMX).
#[cfg(test)]
pub(crate) fn tile_emulated(p: &Panel, a: &Acts, c0: usize, m: usize) -> Block {
    emulated(Emulated::default(), p, a, c0, m)
}

/// [`block`] through `unit`, into a new result.
#[cfg(test)]
fn emulated(mut unit: Emulated, p: &Panel, a: &Acts, c0: usize, m: usize) -> Block {
    check(p, a, c0, m);
    let mut s = Scratch::new();
    // Not zero: the float steps must not read what they did not write.
    s.pend = [[f32::NAN; NR]; MA];
    // SAFETY: `check` bounds every read.
    unsafe { block(&mut unit, p, a, c0, m, &mut s) };
    s.out
}

/// [`tile_emulated`] with the real unit's AVX-512 float steps, or `None`
/// where the CPU has no AVX-512 (or is not x86-64).
#[cfg(test)]
pub(crate) fn tile_emulated_avx512_steps(
    p: &Panel,
    a: &Acts,
    c0: usize,
    m: usize,
) -> Option<Block> {
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx512f") {
        let unit = Emulated {
            avx512_steps: true,
            ..Emulated::default()
        };
        return Some(emulated(unit, p, a, c0, m));
    }
    let _ = (p, a, c0, m);
    None
}

/// The tile registers of this thread while the value lives, configured
/// for the group length of the panel in hand (configuring costs about as
/// much as a few tile products, so a task configures once per group length
/// for all its blocks).
pub(crate) struct Tiles {
    /// Whether the real registers are in use (else, in tests only, emulated).
    on: bool,
    /// The group length they are configured for (0: not yet).
    g: usize,
    /// The blocks' working memory, this thread's (see [`SCRATCH`]; always
    /// `Some` until dropped).
    scratch: Option<Box<Scratch>>,
    /// Tile state belongs to a thread.
    _thread: std::marker::PhantomData<*const ()>,
}

impl Tiles {
    /// The tile registers, configured at the first block.
    ///
    /// # Panics
    /// Where [`usable`] is false (outside tests, which emulate the tiles).
    pub(crate) fn new() -> Tiles {
        let on = usable();
        #[cfg(not(test))]
        assert!(on, "AMX tiles used where the CPU has none");
        Tiles {
            on,
            g: 0,
            scratch: Some(SCRATCH.take().unwrap_or_else(Scratch::new)),
            _thread: std::marker::PhantomData,
        }
    }

    /// The block kernel on the tiles: rows `c0..c0 + m` of `a` (m ≤ [`MA`],
    /// and `a.q` readable for whole blocks) against the signed panel `p`.
    /// The same numbers as [`super::tile_scalar`] over those rows.
    pub(crate) fn block(&mut self, p: &Panel, a: &Acts, c0: usize, m: usize) -> &Block {
        check(p, a, c0, m);
        // Unused off x86-64 outside tests, where no tiles exist.
        #[cfg_attr(not(any(test, target_arch = "x86_64")), allow(unused_variables))]
        let scratch = self.scratch.get_or_insert_with(Scratch::new);
        #[cfg(test)]
        if !self.on {
            // SAFETY: `check` bounds every read.
            unsafe { block(&mut Emulated::default(), p, a, c0, m, scratch) };
            return &scratch.out;
        }
        #[cfg(target_arch = "x86_64")]
        {
            if self.g != p.g {
                // SAFETY: `usable` found AMX-TILE, granted by the OS (`on`).
                unsafe { x86::configure(p.g) };
                self.g = p.g;
            }
            // SAFETY: configured for this group length just now or before
            // (`usable` also found the epilogue's AVX-512); `check` bounds
            // every read.
            unsafe { x86::tile(p, a, c0, m, scratch) };
            &scratch.out
        }
        #[cfg(not(target_arch = "x86_64"))]
        unreachable!("AMX tiles configured off x86-64")
    }
}

thread_local! {
    /// Each thread's block working memory between its products' tasks, so
    /// that no task allocates it.
    static SCRATCH: std::cell::Cell<Option<Box<Scratch>>> = const { std::cell::Cell::new(None) };
}

impl Drop for Tiles {
    fn drop(&mut self) {
        SCRATCH.set(self.scratch.take());
        #[cfg(target_arch = "x86_64")]
        if self.on && self.g != 0 {
            // SAFETY: configured by `block` on this thread (`Tiles` is not Send).
            unsafe { x86::release() };
        }
    }
}

/// Whether this process can use the AMX tiles: the CPU has AMX-TILE and
/// AMX-INT8 and AVX-512 VNNI, the OS saves their state and grants this
/// process their use, and a block of each group size computes the
/// reference's numbers. Decided once.
pub(crate) fn usable() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static USABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *USABLE.get_or_init(|| crate::simd::as_if_choosing(|| x86::supported() && self_check()))
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Blocks of three weight formats (groups of 32 with and without minimum
/// terms, groups of 16), a whole block and a partial one, on the tiles
/// against the reference; false (and a line on stderr) on any difference.
#[cfg(target_arch = "x86_64")]
fn self_check() -> bool {
    use crate::GgmlType;
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let cols = 512;
    let rows = 2 * MA;
    let xs: Vec<f32> = (0..rows * cols)
        .map(|_| (next() >> 40) as f32 / (1u64 << 24) as f32 * 4.0 - 2.0)
        .collect();
    // (type, block bytes, where its f16 scales sit): random bytes with
    // fixed finite scales.
    let cases = [
        (GgmlType::Q4_K, &[0usize, 2][..]),
        (GgmlType::Q6_K, &[208][..]),
        (GgmlType::Q8_0, &[0][..]),
    ];
    for (ty, scale_at) in cases {
        let bb = ty.block_bytes();
        let per_row = cols / ty.block_len() * bb;
        let mut w = vec![0u8; per_row * NR];
        for v in w.iter_mut() {
            *v = next() as u8;
        }
        for blk in w.chunks_exact_mut(bb) {
            for &s in scale_at {
                blk[s..s + 2].copy_from_slice(&0x2c00u16.to_le_bytes());
            }
        }
        let views: Vec<&[u8]> = w.chunks_exact(per_row).collect();
        let (mut signed, mut plain) = (Panel::default(), Panel::default());
        signed.fill_as(ty, &views, cols, true);
        plain.fill(ty, &views, cols);
        let g = signed.g;
        let mut a = Acts::default();
        let at = crate::vec_dot_type(ty);
        a.fill(
            super::GemmTier::Portable,
            &xs,
            cols,
            at,
            g,
            super::offset(ty),
        );
        let mut scratch = Scratch::new();
        for (c0, m) in [(0, MA), (MA, 5)] {
            check(&signed, &a, c0, m);
            // SAFETY: `supported` found the features and the OS grants the
            // tiles (what `usable` needs before this check); `check` bounds
            // every read; configured just before, released just after.
            unsafe {
                x86::configure(g);
                x86::tile(&signed, &a, c0, m, &mut scratch);
                x86::release();
            }
            let got = &scratch.out;
            for c in (0..m).step_by(super::MR) {
                let n = (m - c).min(super::MR);
                let want = super::tile_scalar(&plain, &a, c0 + c, n);
                if (0..n).any(|j| got[c + j] != want[j]) {
                    eprintln!(
                        "hearth: the AMX tiles disagree with the reference on {ty}; \
                         prefill uses AVX-512 instead"
                    );
                    return false;
                }
            }
        }
    }
    true
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{block, quarter, Acts, Block, GroupScales, Panel, Scratch, Sums, Unit, MA, NR};
    use std::arch::asm;
    use std::arch::x86_64::*;

    /// Tile register slots in the configuration (eight exist; the
    /// layout reserves sixteen).
    const TILE_SLOTS: usize = 16;
    /// Reserved bytes after the palette and start row, so the per-tile
    /// fields start at byte 16.
    const CONFIG_RESERVED: usize = 14;

    /// The tile configuration `ldtilecfg` takes (palette 1).
    #[repr(C, align(64))]
    struct Config {
        palette: u8,
        start_row: u8,
        reserved: [u8; CONFIG_RESERVED],
        /// Bytes per row of each tile register.
        colsb: [u16; TILE_SLOTS],
        /// Rows of each tile register.
        rows: [u8; TILE_SLOTS],
    }

    /// The registers for groups of `G` (32 or 16): tmm0/tmm1 the weight
    /// tiles (G/4 rows of 64 bytes), tmm2/tmm3 the activation tiles (16
    /// rows of G bytes), tmm4..tmm7 the accumulators (16 × 16 i32).
    const fn config<const G: usize>() -> Config {
        let (k, a) = ((G / 4) as u8, G as u16);
        Config {
            palette: 1,
            start_row: 0,
            reserved: [0; CONFIG_RESERVED],
            colsb: [64, 64, a, a, 64, 64, 64, 64, 0, 0, 0, 0, 0, 0, 0, 0],
            rows: [k, k, 16, 16, 16, 16, 16, 16, 0, 0, 0, 0, 0, 0, 0, 0],
        }
    }

    static CONFIG_32: Config = config::<32>();
    static CONFIG_16: Config = config::<16>();

    /// Loads the configuration for groups of `g` (32 or 16) into the tile
    /// registers of this thread.
    ///
    /// # Safety
    /// AMX-TILE present and granted to this process.
    pub(super) unsafe fn configure(g: usize) {
        let cfg: &Config = if g == 16 { &CONFIG_16 } else { &CONFIG_32 };
        // SAFETY: the caller's contract; both are valid palette-1
        // configurations, 64 bytes, 64-aligned.
        unsafe {
            asm!("ldtilecfg [{}]", in(reg) cfg as *const Config, options(nostack, readonly));
        }
    }

    /// Releases the tile registers (their state no longer needs saving).
    ///
    /// # Safety
    /// AMX-TILE present and granted to this process.
    pub(super) unsafe fn release() {
        // SAFETY: the caller's contract.
        unsafe { asm!("tilerelease", options(nostack, nomem)) };
    }

    /// The configured tile registers.
    struct Amx;

    /// `tileloadd` into a register named by a literal, from `$p` with row
    /// stride `$s`.
    macro_rules! load {
        ($tmm:literal, $p:expr, $s:expr) => {
            asm!(concat!("tileloadd ", $tmm, ", [{p} + {s}*1]"), p = in(reg) $p, s = in(reg) $s, options(nostack, readonly))
        };
    }

    impl Unit for Amx {
        #[inline(always)]
        fn prefetch(&mut self, p: *const u8, stride: usize, rows: usize) {
            for r in 0..rows {
                // SAFETY: a prefetch never faults.
                unsafe { _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(r * stride) as *const i8) };
            }
        }

        #[inline(always)]
        unsafe fn zero(&mut self, c: usize) {
            // SAFETY: (every arm) registers configured (the caller's contract).
            unsafe {
                match c {
                    0 => asm!("tilezero tmm4", options(nostack, nomem)),
                    1 => asm!("tilezero tmm5", options(nostack, nomem)),
                    2 => asm!("tilezero tmm6", options(nostack, nomem)),
                    _ => asm!("tilezero tmm7", options(nostack, nomem)),
                }
            }
        }

        #[inline(always)]
        unsafe fn load_a(&mut self, t: usize, _g: usize, a: *const u8, stride: usize) {
            // SAFETY: (both arms) 16 rows of g readable bytes (the caller's
            // contract), g as configured.
            unsafe {
                if t == 0 {
                    load!("tmm2", a, stride);
                } else {
                    load!("tmm3", a, stride);
                }
            }
        }

        #[inline(always)]
        unsafe fn load_b(&mut self, h: usize, _g: usize, b: *const u8, stride: usize) {
            // SAFETY: (both arms) g/4 rows of 64 readable bytes (the
            // caller's contract), g as configured.
            unsafe {
                if h == 0 {
                    load!("tmm0", b, stride);
                } else {
                    load!("tmm1", b, stride);
                }
            }
        }

        #[inline(always)]
        unsafe fn dot(&mut self, c: usize) {
            // SAFETY: (every arm) registers configured and loaded by the
            // calls before.
            unsafe {
                match c {
                    0 => asm!("tdpbssd tmm4, tmm2, tmm0", options(nostack, nomem)),
                    1 => asm!("tdpbssd tmm5, tmm2, tmm1", options(nostack, nomem)),
                    2 => asm!("tdpbssd tmm6, tmm3, tmm0", options(nostack, nomem)),
                    _ => asm!("tdpbssd tmm7, tmm3, tmm1", options(nostack, nomem)),
                }
            }
        }

        #[inline(always)]
        unsafe fn store(&mut self, c: usize, out: &mut Sums) {
            let stride = NR * 4;
            let (t, h) = (c / 2, c % 2);
            // SAFETY: (every arm) 16 rows of 64 bytes from out[16t][16h],
            // NR * 4 bytes apart, all inside `out` ([[i32; NR]; MA]).
            unsafe {
                let p = out.as_mut_ptr().add(16 * t).cast::<i32>().add(16 * h);
                match c {
                    0 => {
                        asm!("tilestored [{p} + {s}*1], tmm4", p = in(reg) p, s = in(reg) stride, options(nostack))
                    }
                    1 => {
                        asm!("tilestored [{p} + {s}*1], tmm5", p = in(reg) p, s = in(reg) stride, options(nostack))
                    }
                    2 => {
                        asm!("tilestored [{p} + {s}*1], tmm6", p = in(reg) p, s = in(reg) stride, options(nostack))
                    }
                    _ => {
                        asm!("tilestored [{p} + {s}*1], tmm7", p = in(reg) p, s = in(reg) stride, options(nostack))
                    }
                }
            }
        }

        #[inline(always)]
        fn scale(
            &mut self,
            c: usize,
            acc: (&mut Block, &mut Block),
            sums: &Sums,
            m: usize,
            k: &GroupScales,
        ) {
            // SAFETY: an `Amx` exists only inside `tile`, whose contract
            // (`usable`) includes AVX-512.
            unsafe { scale_avx512(c, acc, sums, m, k) }
        }
    }

    /// [`Unit::scale`] through the AMX unit's AVX-512 float steps, for the
    /// emulated unit in the tests; false (nothing done) without AVX-512.
    #[cfg(test)]
    pub(super) fn scale_steps(
        c: usize,
        acc: (&mut Block, &mut Block),
        sums: &Sums,
        m: usize,
        k: &GroupScales,
    ) -> bool {
        if !is_x86_feature_detected!("avx512f") {
            return false;
        }
        Amx.scale(c, acc, sums, m, k);
        true
    }

    /// [`Unit::scale`] in AVX-512: one 16-lane vector per row of the
    /// quarter, its activation scale and sum broadcast from memory.
    ///
    /// # Safety
    /// avx512f present.
    #[target_feature(enable = "avx512f")]
    #[inline]
    unsafe fn scale_avx512(
        c: usize,
        (out, pend): (&mut Block, &mut Block),
        sums: &Sums,
        m: usize,
        k: &GroupScales,
    ) {
        let (rows, h) = quarter(c, m);
        // SAFETY: (whole body) `h + 16 <= NR`, so each row of `out`,
        // `pend` and `sums` and the arrays of `k` hold the 16 values read
        // or written from `h`.
        unsafe {
            let s = _mm512_loadu_ps(k.scales.as_ptr().add(h));
            let mv = k.mins.map(|mins| _mm512_loadu_ps(mins.as_ptr().add(h)));
            for r in rows {
                let (o, t) = (out[r].as_mut_ptr().add(h), pend[r].as_mut_ptr().add(h));
                let iv = _mm512_cvtepi32_ps(_mm512_loadu_si512(sums[r].as_ptr().add(h).cast()));
                let d = _mm512_set1_ps(k.d[r * k.d_step]);
                match k.fold {
                    Some((first, last)) => {
                        let mut acc = if first {
                            _mm512_mul_ps(iv, s)
                        } else {
                            _mm512_fmadd_ps(iv, s, _mm512_loadu_ps(t))
                        };
                        if let Some(mv) = mv {
                            acc = _mm512_fnmadd_ps(mv, _mm512_set1_ps(k.sum[r * k.sum_step]), acc);
                        }
                        if last {
                            _mm512_storeu_ps(o, _mm512_fmadd_ps(acc, d, _mm512_loadu_ps(o)));
                        } else {
                            _mm512_storeu_ps(t, acc);
                        }
                    }
                    None => {
                        let mut acc = _mm512_fmadd_ps(iv, _mm512_mul_ps(s, d), _mm512_loadu_ps(o));
                        if let Some(mv) = mv {
                            acc = _mm512_fnmadd_ps(mv, _mm512_set1_ps(k.sum[r * k.sum_step]), acc);
                        }
                        _mm512_storeu_ps(o, acc);
                    }
                }
            }
        }
    }

    const _: () = assert!(MA == 32 && NR == 32);

    /// The block kernel on the tiles, its float steps in AVX-512.
    ///
    /// # Safety
    /// [`super::usable`] holds, [`configure`] ran on this thread for `p.g`, and
    /// [`super::check`] passed for these arguments.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub(super) unsafe fn tile(p: &Panel, a: &Acts, c0: usize, m: usize, s: &mut Scratch) {
        // SAFETY: the caller's contract.
        unsafe { block(&mut Amx, p, a, c0, m, s) }
    }

    /// Whether the CPU has AMX-TILE, AMX-INT8 and AVX-512 (F, BW, VNNI), the
    /// OS saves the tile state, and (on Linux) it grants this process the
    /// tiles.
    pub(super) fn supported() -> bool {
        use std::arch::x86_64::{__cpuid, __cpuid_count};
        let leaf7 = __cpuid_count(7, 0);
        let amx = leaf7.edx >> 24 & 1 == 1 && leaf7.edx >> 25 & 1 == 1;
        let osxsave = __cpuid(1).ecx >> 27 & 1 == 1;
        if !(amx
            && osxsave
            && is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512vnni"))
        {
            return false;
        }
        // SAFETY: OSXSAVE is set, so `xgetbv` exists.
        let xcr0 = unsafe { xcr0() };
        // XTILECFG (bit 17) and XTILEDATA (bit 18) enabled by the OS.
        xcr0 & (3 << 17) == 3 << 17 && request_permission()
    }

    /// XCR0, the state components the OS saves.
    ///
    /// # Safety
    /// The CPU has `xgetbv` (CPUID OSXSAVE).
    #[target_feature(enable = "xsave")]
    unsafe fn xcr0() -> u64 {
        std::arch::x86_64::_xgetbv(0)
    }

    /// Linux hands out the tile state (8 KiB a thread) only on request:
    /// `arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`, for the whole
    /// process. Other systems: not used.
    fn request_permission() -> bool {
        #[cfg(target_os = "linux")]
        {
            const SYS_ARCH_PRCTL: i64 = 158;
            const ARCH_REQ_XCOMP_PERM: u64 = 0x1023;
            const XFEATURE_XTILEDATA: u64 = 18;
            let ret: i64;
            // SAFETY: the arch_prctl system call with two integer arguments;
            // it reads and writes no memory of ours, and the kernel
            // clobbers only rax (the result), rcx and r11.
            unsafe {
                asm!(
                    "syscall",
                    inlateout("rax") SYS_ARCH_PRCTL => ret,
                    in("rdi") ARCH_REQ_XCOMP_PERM,
                    in("rsi") XFEATURE_XTILEDATA,
                    lateout("rcx") _,
                    lateout("r11") _,
                    options(nostack, nomem)
                );
            }
            ret == 0
        }
        #[cfg(not(target_os = "linux"))]
        false
    }
}
