//! The x86 tile kernels and activation quantizers: AVX-512 VNNI and AVX2.

#![allow(clippy::incompatible_msrv)] // AVX-512 intrinsics: stable since 1.89, checked at run time.

use super::{Acts, Panel, RowsFrom, Tile, MR, NR, QK};
use crate::formats::blocks::{BlockQ8K, BlockQ8_0};
use crate::formats::kquants::QK_K;
use std::arch::x86_64::*;

/// # Safety
/// avx512f/bw/vnni present; `p` and `a` hold what [`super::tile`] asserts.
pub(super) unsafe fn tile_avx512(p: &Panel, a: &Acts, c0: usize, m: usize) -> Tile {
    macro_rules! pick {
        ($g:literal, $f:literal) => {
            match (m, p.min) {
                (6, false) => tile_six::<$g, false, $f>(p, a, c0),
                (5, false) => tile_m::<5, $g, false, $f>(p, a, c0),
                (4, false) => tile_m::<4, $g, false, $f>(p, a, c0),
                (3, false) => tile_m::<3, $g, false, $f>(p, a, c0),
                (2, false) => tile_m::<2, $g, false, $f>(p, a, c0),
                (1, false) => tile_m::<1, $g, false, $f>(p, a, c0),
                (6, true) => tile_six::<$g, true, $f>(p, a, c0),
                (5, true) => tile_m::<5, $g, true, $f>(p, a, c0),
                (4, true) => tile_m::<4, $g, true, $f>(p, a, c0),
                (3, true) => tile_m::<3, $g, true, $f>(p, a, c0),
                (2, true) => tile_m::<2, $g, true, $f>(p, a, c0),
                (1, true) => tile_m::<1, $g, true, $f>(p, a, c0),
                _ => [[0.0; NR]; MR],
            }
        };
    }
    const _: () = assert!(MR == 6 && NR == 32);
    // SAFETY: the caller's contract, passed on.
    unsafe {
        match (p.g, a.fold) {
            (16, false) => pick!(16, false),
            (16, true) => pick!(16, true),
            (_, false) => pick!(32, false),
            (_, true) => pick!(32, true),
        }
    }
}

/// `legacy::quant_q8_0_act` for one block of 32, the same bytes: scale
/// amax/127 (as f16), values round-half-even of `v * 127/amax`.
///
/// # Safety
/// avx512f and avx512bw present; `x` holds 32 values, `block` 34 bytes.
#[target_feature(enable = "avx512f,avx512bw")]
pub(super) unsafe fn quant_q8_0_avx512(x: &[f32], block: &mut BlockQ8_0) {
    assert!(x.len() >= 32);
    // SAFETY: 32 values, as asserted.
    let (v0, v1) = unsafe {
        (
            _mm512_loadu_ps(x.as_ptr()),
            _mm512_loadu_ps(x.as_ptr().add(16)),
        )
    };
    let amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
    let d = amax / 127.0;
    let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
    let idv = _mm512_set1_ps(id);
    let lo = _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v0, idv)));
    let hi = _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v1, idv)));
    block.d.set(d);
    // SAFETY: the block's 32 values, 16 bytes each store.
    unsafe {
        _mm_storeu_si128(block.qs.as_mut_ptr() as *mut _, lo);
        _mm_storeu_si128(block.qs.as_mut_ptr().add(16) as *mut _, hi);
    }
}

/// Reduces each of 16 vectors to one lane: lane `b` of the result is
/// `$op` over every lane of `$v[b]`. A tree of shuffles that halves the
/// vectors at each level (four levels, 15 `$op`s and 30 shuffles for all
/// 16) in place of 16 horizontal reductions of about eight steps each.
/// `$op` must be associative and commutative (max, add) on `__m512`s.
/// A macro, with plain loops: a closure or a function without the
/// caller's vector features could be compiled out of line, its
/// intrinsics calls.
macro_rules! reduce_lanes16 {
    ($v:expr, $op:expr) => {{
        let v: &[__m512; 16] = $v;
        // The tree leaves vector `i` in lane 4 * (i % 4) + i / 4 (a 4 × 4
        // transpose); feeding it v[4 * (i % 4) + i / 4] at `i` undoes that.
        let mut r = [_mm512_setzero_ps(); 8];
        for i in 0..8 {
            let (a, b) = (
                v[4 * ((2 * i) % 4) + (2 * i) / 4],
                v[4 * ((2 * i + 1) % 4) + (2 * i + 1) / 4],
            );
            r[i] = $op(
                _mm512_shuffle_f32x4::<0x44>(a, b),
                _mm512_shuffle_f32x4::<0xEE>(a, b),
            );
        }
        let mut s = [_mm512_setzero_ps(); 4];
        for i in 0..4 {
            let (a, b) = (r[2 * i], r[2 * i + 1]);
            s[i] = $op(
                _mm512_shuffle_f32x4::<0x88>(a, b),
                _mm512_shuffle_f32x4::<0xDD>(a, b),
            );
        }
        let mut u = [_mm512_setzero_ps(); 2];
        for i in 0..2 {
            let (a, b) = (s[2 * i], s[2 * i + 1]);
            u[i] = $op(
                _mm512_shuffle_ps::<0x44>(a, b),
                _mm512_shuffle_ps::<0xEE>(a, b),
            );
        }
        $op(
            _mm512_shuffle_ps::<0x88>(u[0], u[1]),
            _mm512_shuffle_ps::<0xDD>(u[0], u[1]),
        )
    }};
}

/// Adds two vectors of i32 held as `__m512` (for `reduce_lanes16`).
#[inline]
#[target_feature(enable = "avx512f")]
fn add_epi32_ps(a: __m512, b: __m512) -> __m512 {
    _mm512_castsi512_ps(_mm512_add_epi32(
        _mm512_castps_si512(a),
        _mm512_castps_si512(b),
    ))
}

/// The sums of each of 16 vectors of i32 (see `reduce_lanes16`).
#[inline]
#[target_feature(enable = "avx512f")]
fn sum_lanes16_epi32(v: &[__m512i; 16]) -> __m512i {
    let mut f = [_mm512_setzero_ps(); 16];
    for i in 0..16 {
        f[i] = _mm512_castsi512_ps(v[i]);
    }
    _mm512_castps_si512(reduce_lanes16!(&f, add_epi32_ps))
}

/// [`Acts::fill_row`] for Q8_0 rows against groups of 32: the same bytes
/// as quantizing each block of 32 with [`quant_q8_0_avx512`] and splitting
/// it, written straight into the row's buffers. Sixteen blocks at a time,
/// so their maxima, scales and sums are found by one reduction tree each
/// (`reduce_lanes16`) and converted to f16 and back in one vector.
///
/// # Safety
/// avx512f and avx512bw present; `x` holds a whole number of blocks, and
/// `q`, `d`, `sum` and `base` have room for its values and blocks.
#[target_feature(enable = "avx512f,avx512bw,f16c")]
pub(super) unsafe fn fill_row_q8_0_avx512(
    x: &[f32],
    q: &mut [u8],
    d: &mut [f32],
    sum: &mut [f32],
    base: &mut [i32],
    off: i32,
) {
    let blocks = x.len() / QK;
    assert!(q.len() >= blocks * QK && d.len() >= blocks);
    assert!(sum.len() >= blocks && base.len() >= blocks);
    let (xp, qp) = (x.as_ptr(), q.as_mut_ptr());
    let neg_off = _mm512_set1_epi32(-off);
    let mut b0 = 0;
    while b0 < blocks {
        let n = (blocks - b0).min(16);
        let mut m = [_mm512_setzero_ps(); 16];
        for (b, m) in m.iter_mut().enumerate().take(n) {
            // SAFETY: block b0 + b lies inside `x` (b0 + b < blocks).
            let (v0, v1) = unsafe {
                let p = xp.add((b0 + b) * QK);
                (_mm512_loadu_ps(p), _mm512_loadu_ps(p.add(16)))
            };
            *m = _mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1));
        }
        let amax = reduce_lanes16!(&m, _mm512_max_ps);
        let scale = _mm512_div_ps(amax, _mm512_set1_ps(127.0));
        let nonzero = _mm512_cmp_ps_mask::<_CMP_NEQ_OQ>(amax, _mm512_setzero_ps());
        let inv = _mm512_maskz_div_ps(nonzero, _mm512_set1_ps(127.0), amax);
        // The f16 scale as the block stores it, widened back.
        let half = _mm512_cvtph_ps(_mm512_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(scale));
        let mut invs = [0f32; 16];
        // SAFETY: 16 lanes into 16 floats.
        unsafe { _mm512_storeu_ps(invs.as_mut_ptr(), inv) };
        let mut sums = [_mm512_setzero_si512(); 16];
        for (b, s) in sums.iter_mut().enumerate().take(n) {
            let iv = _mm512_set1_ps(invs[b]);
            // SAFETY: block b0 + b lies inside `x`, and its 32 bytes
            // inside `q` (asserted above).
            unsafe {
                let p = xp.add((b0 + b) * QK);
                let q0 = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(p), iv));
                let q1 = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(p.add(16)), iv));
                let out = qp.add((b0 + b) * QK);
                _mm_storeu_si128(out as *mut _, _mm512_cvtsepi32_epi8(q0));
                _mm_storeu_si128(out.add(16) as *mut _, _mm512_cvtsepi32_epi8(q1));
                *s = _mm512_add_epi32(q0, q1);
            }
        }
        let s = sum_lanes16_epi32(&sums);
        let keep: __mmask16 = if n == 16 { !0 } else { (1 << n) - 1 };
        // SAFETY: lanes below n, blocks b0..b0 + n of each buffer (asserted
        // above).
        unsafe {
            _mm512_mask_storeu_ps(d.as_mut_ptr().add(b0), keep, half);
            let scaled = _mm512_mul_ps(half, _mm512_cvtepi32_ps(s));
            _mm512_mask_storeu_ps(sum.as_mut_ptr().add(b0), keep, scaled);
            let start = _mm512_mullo_epi32(neg_off, s);
            _mm512_mask_storeu_epi32(base.as_mut_ptr().add(b0), keep, start);
        }
        b0 += n;
    }
}

/// The super-blocks and groups per super-block of a Q8_K row `x` against
/// groups of `g`, once the row's buffers are checked to hold them (the
/// Q8_K row fillers' contract; panics otherwise, before any memory access).
fn q8_k_row_shape(
    x: &[f32],
    q: &[u8],
    d: &[f32],
    sum: &[f32],
    base: &[i32],
    g: usize,
) -> (usize, usize) {
    let supers = x.len() / QK_K;
    assert!(g == 16 || g == 32);
    let groups = QK_K / g;
    assert!(q.len() >= supers * QK_K && d.len() >= supers * (QK_K / QK));
    assert!(sum.len() >= supers * groups && base.len() >= supers * groups);
    (supers, groups)
}

/// Super-block `sb` of a Q8_K row that is all zeros: zero values, scales,
/// sums and starting integers, as the portable path stores them.
fn zero_super_block(
    q: &mut [u8],
    d: &mut [f32],
    sum: &mut [f32],
    base: &mut [i32],
    sb: usize,
    groups: usize,
) {
    let (ds, ss) = (sb * (QK_K / QK), sb * groups);
    q[sb * QK_K..(sb + 1) * QK_K].fill(0);
    d[ds..ds + QK_K / QK].fill(0.0);
    sum[ss..ss + groups].fill(0.0);
    base[ss..ss + groups].fill(0);
}

/// [`Acts::fill_row`] for Q8_K rows against groups of `g` (16 or 32): the
/// same bytes as [`quant_q8_k_avx512`] and splitting its block, written
/// straight into the row's buffers, the sums of each super-block's
/// sixteen 16-value vectors found by one reduction tree.
///
/// # Safety
/// avx512f and avx512bw present; `x` holds a whole number of
/// super-blocks, `g` is 16 or 32, and `q`, `d`, `sum` and `base` have room
/// for its values, blocks of 32 and groups.
#[target_feature(enable = "avx512f,avx512bw")]
pub(super) unsafe fn fill_row_q8_k_avx512(
    x: &[f32],
    q: &mut [u8],
    d: &mut [f32],
    sum: &mut [f32],
    base: &mut [i32],
    g: usize,
    off: i32,
) {
    let (supers, groups) = q8_k_row_shape(x, q, d, sum, base, g);
    let neg_off = _mm512_set1_epi32(-off);
    // Even and odd lanes, to add the sums of 16 pairwise into sums of 32.
    let even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 0, 0, 0, 0, 0, 0, 0, 0);
    let odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 0, 0, 0, 0, 0, 0, 0, 0);
    for sb in 0..supers {
        let x = &x[sb * QK_K..(sb + 1) * QK_K];
        let mut v = [_mm512_setzero_ps(); 16];
        let mut vmax = _mm512_setzero_ps();
        for (i, v) in v.iter_mut().enumerate() {
            // SAFETY: 256 values in this super-block.
            *v = unsafe { _mm512_loadu_ps(x.as_ptr().add(16 * i)) };
            vmax = _mm512_max_ps(vmax, _mm512_abs_ps(*v));
        }
        let amax = _mm512_reduce_max_ps(vmax);
        let (ds, ss) = (sb * (QK_K / QK), sb * groups);
        if amax == 0.0 {
            zero_super_block(q, d, sum, base, sb, groups);
            continue;
        }
        // The first value whose |x| equals the maximum, as the scalar
        // loop finds it (see `quant_q8_k_avx512`).
        let am = _mm512_set1_ps(amax);
        let mut max = amax;
        for (i, &v) in v.iter().enumerate() {
            let m = _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(_mm512_abs_ps(v), am);
            if m != 0 {
                max = x[16 * i + m.trailing_zeros() as usize];
                break;
            }
        }
        let iscale = -127.0 / max;
        let sv = _mm512_set1_ps(iscale);
        let top = _mm512_set1_epi32(127);
        let mut qs = [_mm512_setzero_si512(); 16];
        for (i, (&v, qv)) in v.iter().zip(qs.iter_mut()).enumerate() {
            // -127/max * v lies in -127..=127 (within rounding), so each
            // byte is its i32 and the group's sum is theirs.
            *qv = _mm512_min_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(v, sv)), top);
            // SAFETY: bytes 16i..16i + 16 of this super-block in `q`
            // (asserted above).
            unsafe {
                _mm_storeu_si128(
                    q.as_mut_ptr().add(sb * QK_K + 16 * i) as *mut _,
                    _mm512_cvtsepi32_epi8(*qv),
                )
            };
        }
        d[ds..ds + QK_K / QK].fill(1.0 / iscale);
        let s16 = sum_lanes16_epi32(&qs);
        let (s, keep): (__m512i, __mmask16) = if g == 16 {
            (s16, !0)
        } else {
            let pairs = _mm512_add_epi32(
                _mm512_permutexvar_epi32(even, s16),
                _mm512_permutexvar_epi32(odd, s16),
            );
            (pairs, 0xff)
        };
        // SAFETY: `groups` lanes, this super-block's groups (asserted
        // above).
        unsafe {
            _mm512_mask_storeu_ps(sum.as_mut_ptr().add(ss), keep, _mm512_cvtepi32_ps(s));
            let start = _mm512_mullo_epi32(neg_off, s);
            _mm512_mask_storeu_epi32(base.as_mut_ptr().add(ss), keep, start);
        }
    }
}

/// `kquants::quant_q8_k` for one super-block of 256, the same bytes
/// (scale, values and the i16 sums of each 16 values the decode kernels
/// read).
///
/// In a decode step this runs on one thread between two parallel products,
/// so it is written for latency: the signed maximum is found with vector
/// compares and the group sums come from the same pass as the values (a
/// scalar search and a second pass over the bytes had held the other
/// threads of a 1B's decode step 1–2 µs a layer longer before the FFN down
/// product, `hearth bench --profile`).
///
/// # Safety
/// avx512f and avx512bw present; `x` holds 256 values.
#[target_feature(enable = "avx512f,avx512bw")]
pub(super) unsafe fn quant_q8_k_avx512(x: &[f32], block: &mut BlockQ8K) {
    assert!(x.len() >= 256);
    // Plain loops here, no closures: a closure can be compiled out of line,
    // without this function's vector features.
    let mut v = [_mm512_setzero_ps(); 16];
    let mut vmax = _mm512_setzero_ps();
    for (i, v) in v.iter_mut().enumerate() {
        // SAFETY: 256 values, as asserted.
        *v = unsafe { _mm512_loadu_ps(x.as_ptr().add(16 * i)) };
        vmax = _mm512_max_ps(vmax, _mm512_abs_ps(*v));
    }
    let amax = _mm512_reduce_max_ps(vmax);
    if amax == 0.0 {
        *block = bytemuck::Zeroable::zeroed();
        return;
    }
    // The first value whose |x| equals the maximum, as the scalar loop
    // finds it (compared as `==`: never a NaN).
    let am = _mm512_set1_ps(amax);
    let mut max = amax;
    for (i, &v) in v.iter().enumerate() {
        let m = _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(_mm512_abs_ps(v), am);
        if m != 0 {
            max = x[16 * i + m.trailing_zeros() as usize];
            break;
        }
    }
    let iscale = -127.0 / max;
    let sv = _mm512_set1_ps(iscale);
    let top = _mm512_set1_epi32(127);
    for (i, &v) in v.iter().enumerate() {
        // -127/max * v lies in -127..=127 (within rounding), so each byte
        // is its i32 and the group's sum is theirs.
        let q = _mm512_min_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(v, sv)), top);
        // SAFETY: values 16i .. 16i + 16 of the block's 256.
        unsafe {
            _mm_storeu_si128(
                block.qs.as_mut_ptr().add(16 * i) as *mut _,
                _mm512_cvtsepi32_epi8(q),
            )
        };
        block.bsums[i].set(_mm512_reduce_add_epi32(q) as i16);
    }
    block.d.set(1.0 / iscale);
}

#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn tile_m<const M: usize, const G: usize, const MIN: bool, const FOLD: bool>(
    p: &Panel,
    a: &Acts,
    c0: usize,
) -> Tile {
    let cols = p.groups * G;
    let pq = p.q.as_ptr();
    let RowsFrom {
        aq,
        ad,
        asum,
        abase,
    } = a.rows_from(c0);
    let mut facc = [[_mm512_setzero_ps(); 2]; M];
    let mut pend = [[_mm512_setzero_ps(); 2]; M];
    for g in 0..p.groups {
        // SAFETY: (whole body) group g's panel entries and each activation
        // row's elements g*G..(g+1)*G lie inside the buffers (asserted by
        // `super::tile`).
        unsafe {
            let mut iacc: [[__m512i; 2]; M] =
                std::array::from_fn(|c| [_mm512_set1_epi32(*abase.add(c * p.groups + g)); 2]);
            for kq in 0..G / 4 {
                let k4 = g * (G / 4) + kq;
                let w0 = _mm512_loadu_si512(pq.add(k4 * NR * 4) as *const _);
                let w1 = _mm512_loadu_si512(pq.add(k4 * NR * 4 + 64) as *const _);
                for (c, acc) in iacc.iter_mut().enumerate() {
                    let quad = (aq.add(c * cols + k4 * 4) as *const i32).read_unaligned();
                    let av = _mm512_set1_epi32(quad);
                    acc[0] = _mm512_dpbusd_epi32(acc[0], w0, av);
                    acc[1] = _mm512_dpbusd_epi32(acc[1], w1, av);
                }
            }
            float_steps::<M, G, MIN, FOLD>(&iacc, &mut facc, &mut pend, p, ad, asum, g);
        }
    }
    tile_of(&facc)
}

/// Group `g`'s float steps for `M` activation rows, the ones every tier
/// takes in this order: each row's i32 sums times the panel's scales times
/// the row's activation scale, added into `facc`, less the minimum terms.
/// With `FOLD` (Q8_K rows, see [`super::tile_scalar`]) the sums of a
/// super-block's groups gather in `pend` without the activation
/// scale, which its last group applies. The four- and six-row AVX-512
/// tiles share them.
///
/// # Safety
/// avx512f present; `ad` and `asum` point at the first of the `M` rows'
/// scales and group sums, for a panel of `p.groups` groups of `G` (as
/// [`super::tile`] asserts), and `g < p.groups`.
#[inline]
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
unsafe fn float_steps<const M: usize, const G: usize, const MIN: bool, const FOLD: bool>(
    iacc: &[[__m512i; 2]; M],
    facc: &mut [[__m512; 2]; M],
    pend: &mut [[__m512; 2]; M],
    p: &Panel,
    ad: *const f32,
    asum: *const f32,
    g: usize,
) {
    let cols = p.groups * G;
    let (ps, pm) = (p.s.as_ptr(), p.m.as_ptr());
    // SAFETY: the caller's contract bounds every read.
    unsafe {
        let s0 = _mm512_loadu_ps(ps.add(g * NR));
        let s1 = _mm512_loadu_ps(ps.add(g * NR + 16));
        if FOLD {
            let first = g.is_multiple_of(QK_K / G);
            for (t, i) in pend.iter_mut().zip(iacc) {
                let (i0, i1) = (_mm512_cvtepi32_ps(i[0]), _mm512_cvtepi32_ps(i[1]));
                if first {
                    t[0] = _mm512_mul_ps(i0, s0);
                    t[1] = _mm512_mul_ps(i1, s1);
                } else {
                    t[0] = _mm512_fmadd_ps(i0, s0, t[0]);
                    t[1] = _mm512_fmadd_ps(i1, s1, t[1]);
                }
            }
        } else {
            for (c, (f, i)) in facc.iter_mut().zip(iacc).enumerate() {
                let d = _mm512_set1_ps(*ad.add(c * (cols / QK) + g * G / QK));
                f[0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i[0]), _mm512_mul_ps(s0, d), f[0]);
                f[1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i[1]), _mm512_mul_ps(s1, d), f[1]);
            }
        }
        if MIN {
            // The minimum terms go where the group's sums went.
            let sums = if FOLD { &mut *pend } else { &mut *facc };
            let m0 = _mm512_loadu_ps(pm.add(g * NR));
            let m1 = _mm512_loadu_ps(pm.add(g * NR + 16));
            for (c, f) in sums.iter_mut().enumerate() {
                let sum = _mm512_set1_ps(*asum.add(c * p.groups + g));
                f[0] = _mm512_fnmadd_ps(m0, sum, f[0]);
                f[1] = _mm512_fnmadd_ps(m1, sum, f[1]);
            }
        }
        if FOLD && g % (QK_K / G) == QK_K / G - 1 {
            // The float sums, touched once per super-block, stay in memory
            // (volatile): in registers beside the pending sums and the
            // running integer sums they would spill anyway.
            for (c, (f, t)) in facc.iter_mut().zip(pend.iter()).enumerate() {
                let d = _mm512_set1_ps(*ad.add(c * (cols / QK) + g * G / QK));
                for (f, &t) in f.iter_mut().zip(t) {
                    let f = std::ptr::addr_of_mut!(*f);
                    f.write_volatile(_mm512_fmadd_ps(t, d, f.read_volatile()));
                }
            }
        }
    }
}

/// The float sums of `M` rows as a [`Tile`] (rows past `M` zero).
#[inline]
#[target_feature(enable = "avx512f")]
fn tile_of<const M: usize>(facc: &[[__m512; 2]; M]) -> Tile {
    let mut out = [[0.0f32; NR]; MR];
    for (o, acc) in out.iter_mut().zip(facc) {
        // SAFETY: `o` holds NR = 32 floats.
        unsafe {
            _mm512_storeu_ps(o.as_mut_ptr(), acc[0]);
            _mm512_storeu_ps(o.as_mut_ptr().add(16), acc[1]);
        }
    }
    out
}

/// One group's integer sums of six activation rows against the panel's 32
/// rows (twelve running sums), in assembly: each `vpdpbusd` takes its
/// activation quad as an embedded broadcast from memory, so twelve sums and
/// two weight vectors are all the vector registers it needs. Written with
/// intrinsics, the compiler hoisted the broadcasts of a whole group into
/// registers and spilled them, and six rows were slower than four.
macro_rules! six_rows_step {
    ($d:literal, $w:literal) => {
        concat!(
            "vmovdqu64 {w0}, zmmword ptr [{pw} + ",
            $w,
            "]\n",
            "vmovdqu64 {w1}, zmmword ptr [{pw} + ",
            $w,
            " + 64]\n",
            "vpdpbusd {c00}, {w0}, dword ptr [{a0} + ",
            $d,
            "]{{1to16}}\n",
            "vpdpbusd {c01}, {w1}, dword ptr [{a0} + ",
            $d,
            "]{{1to16}}\n",
            "vpdpbusd {c10}, {w0}, dword ptr [{a1} + ",
            $d,
            "]{{1to16}}\n",
            "vpdpbusd {c11}, {w1}, dword ptr [{a1} + ",
            $d,
            "]{{1to16}}\n",
            "vpdpbusd {c20}, {w0}, dword ptr [{a2} + ",
            $d,
            "]{{1to16}}\n",
            "vpdpbusd {c21}, {w1}, dword ptr [{a2} + ",
            $d,
            "]{{1to16}}\n",
            "vpdpbusd {c30}, {w0}, dword ptr [{a3} + ",
            $d,
            "]{{1to16}}\n",
            "vpdpbusd {c31}, {w1}, dword ptr [{a3} + ",
            $d,
            "]{{1to16}}\n",
            "vpdpbusd {c40}, {w0}, dword ptr [{a4} + ",
            $d,
            "]{{1to16}}\n",
            "vpdpbusd {c41}, {w1}, dword ptr [{a4} + ",
            $d,
            "]{{1to16}}\n",
            "vpdpbusd {c50}, {w0}, dword ptr [{a5} + ",
            $d,
            "]{{1to16}}\n",
            "vpdpbusd {c51}, {w1}, dword ptr [{a5} + ",
            $d,
            "]{{1to16}}\n",
        )
    };
}

/// [`tile_m`] for six activation rows: the same sums and float steps, the
/// integer part in [`six_rows_step`]s.
///
/// Why six: four rows keep eight `vpdpbusd` sums running, and its latency
/// lets eight chains issue about 3.8 G of them a second on the 2-core Xeon
/// VM (Emerald Rapids) where two ports could take 5.4 G; twelve chains
/// reach about 5.1 G (a C loop of independent chains). Each step also
/// loads the two weight vectors once for six rows instead of four, and
/// the broadcasts ride inside the `vpdpbusd`s. Criterion `gemm_tile_2048`,
/// one core, two alternated runs: Q5_0 223–225 → 231–233, Q4_K 186–189 →
/// 206–215, Q6_K 175–188 → 186–193 G multiply-adds/s; whole 512-row
/// products (`prefill_512`, packing included) gain 3–8%. The float steps
/// (three operations per group and vector on the same two ports, two
/// against Q8_K rows) are what bounds it now.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn tile_six<const G: usize, const MIN: bool, const FOLD: bool>(
    p: &Panel,
    a: &Acts,
    c0: usize,
) -> Tile {
    const M: usize = 6;
    let cols = p.groups * G;
    let pq = p.q.as_ptr();
    let RowsFrom {
        aq,
        ad,
        asum,
        abase,
    } = a.rows_from(c0);
    let mut facc = [[_mm512_setzero_ps(); 2]; M];
    let mut pend = [[_mm512_setzero_ps(); 2]; M];
    for g in 0..p.groups {
        // SAFETY: (whole body) group g's panel entries (G/4 steps of 128
        // bytes from `pw`) and each activation row's elements g*G..(g+1)*G
        // (from `row(c)`) lie inside the buffers (asserted by
        // `super::tile`); the assembly reads only those and writes only its
        // register operands.
        unsafe {
            let mut c: [[__m512i; 2]; M] =
                std::array::from_fn(|c| [_mm512_set1_epi32(*abase.add(c * p.groups + g)); 2]);
            let pw = pq.add(g * (G / 4) * NR * 4);
            let row = |r: usize| aq.add(r * cols + g * G);
            macro_rules! group {
                ($($d:literal $w:literal),*) => {
                    std::arch::asm!(
                        $(six_rows_step!($d, $w),)*
                        pw = in(reg) pw,
                        a0 = in(reg) row(0), a1 = in(reg) row(1), a2 = in(reg) row(2),
                        a3 = in(reg) row(3), a4 = in(reg) row(4), a5 = in(reg) row(5),
                        w0 = out(zmm_reg) _, w1 = out(zmm_reg) _,
                        c00 = inout(zmm_reg) c[0][0], c01 = inout(zmm_reg) c[0][1],
                        c10 = inout(zmm_reg) c[1][0], c11 = inout(zmm_reg) c[1][1],
                        c20 = inout(zmm_reg) c[2][0], c21 = inout(zmm_reg) c[2][1],
                        c30 = inout(zmm_reg) c[3][0], c31 = inout(zmm_reg) c[3][1],
                        c40 = inout(zmm_reg) c[4][0], c41 = inout(zmm_reg) c[4][1],
                        c50 = inout(zmm_reg) c[5][0], c51 = inout(zmm_reg) c[5][1],
                        options(nostack, preserves_flags, readonly),
                    )
                };
            }
            if G == 16 {
                group!(0 0, 4 128, 8 256, 12 384);
            } else {
                group!(0 0, 4 128, 8 256, 12 384, 16 512, 20 640, 24 768, 28 896);
            }
            float_steps::<M, G, MIN, FOLD>(&c, &mut facc, &mut pend, p, ad, asum, g);
        }
    }
    tile_of(&facc)
}

/// The AVX2 tile: the AVX-512 one's sums and rounding with 8-lane vectors.
/// `vpmaddubsw` (u8 × i8 pairs into i16) and `vpmaddwd` (i16 pairs into
/// i32) stand in for `vpdpbusd`; the i16 products of [`Panel::run`] column
/// steps add up before one widening, which saves most of the `vpmaddwd`s.
///
/// The panel is swept 16 rows (two vectors) at a time against all the
/// tile's activation rows ([`tile_avx2_wide`]). Zen 3 issues two
/// `vpmaddubsw` a cycle but only four vector operations of any kind, and
/// each product also needs an add and its share of a broadcast activation
/// and of the float steps: with two weight vectors per broadcast, those are
/// shared by twice the products of a one-vector sweep (criterion
/// `gemm_tile_2048`, one Zen 3 core: Q4_K 63 → 84, Q5_0 65 → 84, Q6_K
/// 61 → 74, Q8_0 30 → 60 G multiply-adds/s).
///
/// # Safety
/// avx2 and fma present; `p` and `a` hold what [`super::tile`] asserts,
/// with `m <= ROWS4` (more rows are [`super::tile`]'s to split).
pub(super) unsafe fn tile_avx2(p: &Panel, a: &Acts, c0: usize, m: usize) -> Tile {
    macro_rules! wide {
        ($g:literal, $min:literal, $run:literal) => {{
            let mut out = AlignedTile([[0.0f32; NR]; MR]);
            let mut pend = AlignedTile([[0.0f32; NR]; MR]);
            let (o, t) = (&mut out, &mut pend);
            for h in 0..NR / 16 {
                match (m, a.fold) {
                    (4, false) => tile_avx2_wide::<4, $g, $min, $run, false>(p, a, c0, h, o, t),
                    (3, false) => tile_avx2_wide::<3, $g, $min, $run, false>(p, a, c0, h, o, t),
                    (2, false) => tile_avx2_wide::<2, $g, $min, $run, false>(p, a, c0, h, o, t),
                    (1, false) => tile_avx2_wide::<1, $g, $min, $run, false>(p, a, c0, h, o, t),
                    (4, true) => tile_avx2_wide::<4, $g, $min, $run, true>(p, a, c0, h, o, t),
                    (3, true) => tile_avx2_wide::<3, $g, $min, $run, true>(p, a, c0, h, o, t),
                    (2, true) => tile_avx2_wide::<2, $g, $min, $run, true>(p, a, c0, h, o, t),
                    (1, true) => tile_avx2_wide::<1, $g, $min, $run, true>(p, a, c0, h, o, t),
                    _ => {}
                }
            }
            out.0
        }};
    }
    const _: () = assert!(MR >= 4 && NR.is_multiple_of(16));
    if p.min && p.off != 0 {
        // No format packs so (see `unsigned_range`); the kernels below
        // start minimum-term sums at zero.
        return super::tile_scalar(p, a, c0, m);
    }
    // SAFETY: the caller's contract, passed on (`m <= ROWS4`).
    unsafe {
        match (p.g, p.min, p.run) {
            (16, false, 4) => wide!(16, false, 4), // Q3_K
            (16, true, 4) => wide!(16, true, 4),   // Q2_K
            (16, false, 2) => wide!(16, false, 2), // Q6_K
            (16, false, 1) => wide!(16, false, 1), // IQ2_XS, IQ2_S
            (32, false, 1) => wide!(32, false, 1), // IQ2_XXS, IQ3_XXS
            (32, false, 8) => wide!(32, false, 8), // Q4_0
            (32, true, 8) => wide!(32, true, 8),   // Q4_1, Q4_K
            (32, false, 4) => wide!(32, false, 4), // Q5_0
            (32, true, 4) => wide!(32, true, 4),   // Q5_1, Q5_K
            (32, false, 0) => wide!(32, false, 0), // Q8_0
            // No format packs to another shape (`avx2_has_kernel` lists
            // these, and a test holds every format to it); the reference
            // covers anything else.
            _ => super::tile_scalar(p, a, c0, m),
        }
    }
}

/// Whether [`tile_avx2`] has a kernel for `p`'s group length, minimum term
/// and 16-bit run (the shapes the formats pack to), rather than handing it
/// to the reference: the dispatch's arms, for the test that holds every
/// format to them.
#[cfg(test)]
pub(super) fn avx2_has_kernel(p: &Panel) -> bool {
    matches!(
        (p.g, p.min, p.run),
        (16, false, 4)
            | (16, true, 4)
            | (16, false, 2)
            | (16, false, 1)
            | (32, false, 1)
            | (32, false, 8)
            | (32, true, 8)
            | (32, false, 4)
            | (32, true, 4)
            | (32, false, 0)
    )
}

/// A [`Tile`] on a 32-byte boundary, so its vectors load and store aligned.
#[repr(C, align(32))]
struct AlignedTile(Tile);

/// Panel rows `16h..16h + 16` against activation rows `c0..c0 + MA`, added
/// into `out[..MA]`: groups of `G`, minimum terms when `MIN`, `RUN` column
/// steps added in 16 bits before widening (0: the Q8_0 route).
///
/// With values `u ≤ umax` against activations |a| ≤ 127, a step's
/// `vpmaddubsw` pair sum is at most `2 * 127 * umax`, and [`Panel::run`]
/// steps of them stay below 2^15. Q8_0's bytes (up to 255) could saturate a
/// single step, so that route takes the signed value `w = u - 128` and
/// multiplies `|w|` by `a` with `w`'s sign (at most 2 * 128 * 127 < 2^15),
/// starting from zero instead of the offset's correction.
///
/// Up to sixteen running sums and two weight vectors fill the registers, so
/// the float accumulators live in `out` (L1: a load and a store per group,
/// against 8 × `G` / 4 products), as do a super-block's pending sums
/// (`pend`, see [`float_steps_in_l1`]), and a group's earlier runs wait in
/// memory while its last one adds up.
///
/// # Safety
/// avx2 and fma present; `p` and `a` as [`super::tile`] asserts for
/// `MA <= m` rows; `16h + 16 <= NR`.
#[target_feature(enable = "avx2,fma")]
unsafe fn tile_avx2_wide<
    const MA: usize,
    const G: usize,
    const MIN: bool,
    const RUN: usize,
    const FOLD: bool,
>(
    p: &Panel,
    a: &Acts,
    c0: usize,
    h: usize,
    out: &mut AlignedTile,
    pend: &mut AlignedTile,
) {
    const { assert!(RUN == 0 || (G / 4).is_multiple_of(RUN)) };
    let pe = pend.0.as_mut_ptr() as *mut f32;
    let cols = p.groups * G;
    let pq = p.q.as_ptr();
    let RowsFrom {
        aq,
        ad,
        asum,
        abase,
    } = a.rows_from(c0);
    let ones = _mm256_set1_epi16(1);
    let o = out.0.as_mut_ptr() as *mut f32;
    let mut part = [[_mm256_setzero_si256(); 2]; MA];
    for g in 0..p.groups {
        // SAFETY: (whole body) group g's panel entries for rows
        // 16h..16h + 16 and each activation row's elements g*G..(g+1)*G lie
        // inside the buffers (asserted by `super::tile`); `out` has MR rows
        // of NR floats, 32-byte aligned (NR * 4 and 32 are multiples of
        // 32), and 16h + 16 <= NR. The volatile accesses keep the float
        // accumulators in memory: promoted to registers they would spill.
        unsafe {
            let quad = |r: usize, k4: usize| -> __m256i {
                _mm256_set1_epi32((aq.add(r * cols + k4 * 4) as *const i32).read_unaligned())
            };
            let wat = |k4: usize, v: usize| -> __m256i {
                _mm256_loadu_si256(pq.add(k4 * NR * 4 + h * 64 + v * 32) as *const _)
            };
            let mut iacc = [[_mm256_setzero_si256(); 2]; MA];
            if RUN == 0 {
                iacc = q8_0_group_sums::<MA, G>(pq, aq, cols, g, h);
            } else {
                // A group's steps in runs of RUN; all but the last run's
                // i32 sums wait in `part` (memory, so that they do not take
                // the registers the running i16 sums need).
                let runs = (G / 4).div_ceil(RUN.max(1));
                for run in 0..runs {
                    let mut t = [[_mm256_setzero_si256(); 2]; MA];
                    for j in 0..RUN {
                        let k4 = g * (G / 4) + run * RUN + j;
                        let w = [wat(k4, 0), wat(k4, 1)];
                        for (r, t) in t.iter_mut().enumerate() {
                            let q = quad(r, k4);
                            for v in 0..2 {
                                t[v] = _mm256_add_epi16(t[v], _mm256_maddubs_epi16(w[v], q));
                            }
                        }
                    }
                    for (r, (acc, t)) in iacc.iter_mut().zip(t).enumerate() {
                        for v in 0..2 {
                            let wide = _mm256_madd_epi16(t[v], ones);
                            // The formats with minimum terms have offset 0
                            // (`tile_avx2` checks), so their sums start at
                            // zero: one add fewer per sum and group.
                            let x = if run == 0 && MIN {
                                wide
                            } else if run == 0 {
                                _mm256_add_epi32(
                                    wide,
                                    _mm256_set1_epi32(*abase.add(r * p.groups + g)),
                                )
                            } else {
                                _mm256_add_epi32(
                                    wide,
                                    std::ptr::addr_of!(part[r][v]).read_volatile(),
                                )
                            };
                            if run + 1 == runs {
                                acc[v] = x;
                            } else {
                                std::ptr::addr_of_mut!(part[r][v]).write_volatile(x);
                            }
                        }
                    }
                }
            }
            if FOLD {
                fold_steps_in_l1::<MA, G, MIN>(&iacc, p, (ad, asum), g, h, (o, pe));
            } else {
                float_steps_in_l1::<MA, G, MIN>(&iacc, p, (ad, asum), g, h, o);
            }
        }
    }
}

/// Group `g`'s i32 sums of panel rows `16h..16h + 16` (two vectors)
/// against `MA` activation rows `cols` apart on [`tile_avx2_wide`]'s Q8_0
/// route: each step's signed weights `w = u - 128`, `|w|` multiplied by
/// the activations with `w`'s sign and widened at once, from zero.
///
/// # Safety
/// avx2 and fma present; the pointers hold group `g` of a panel and of
/// `MA` activation rows (as [`super::tile`] asserts), and `16h + 16 <= NR`.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn q8_0_group_sums<const MA: usize, const G: usize>(
    pq: *const u8,
    aq: *const u8,
    cols: usize,
    g: usize,
    h: usize,
) -> [[__m256i; 2]; MA] {
    let ones = _mm256_set1_epi16(1);
    let flip = _mm256_set1_epi8(-128i8);
    // SAFETY: the caller's contract bounds every read.
    unsafe {
        let quad = |r: usize, k4: usize| -> __m256i {
            _mm256_set1_epi32((aq.add(r * cols + k4 * 4) as *const i32).read_unaligned())
        };
        let wat = |k4: usize, v: usize| -> __m256i {
            _mm256_loadu_si256(pq.add(k4 * NR * 4 + h * 64 + v * 32) as *const _)
        };
        let mut iacc = [[_mm256_setzero_si256(); 2]; MA];
        for kq in 0..G / 4 {
            let k4 = g * (G / 4) + kq;
            let w = [
                _mm256_xor_si256(wat(k4, 0), flip),
                _mm256_xor_si256(wat(k4, 1), flip),
            ];
            let wabs = [_mm256_abs_epi8(w[0]), _mm256_abs_epi8(w[1])];
            for (r, acc) in iacc.iter_mut().enumerate() {
                let q = quad(r, k4);
                for v in 0..2 {
                    let t = _mm256_maddubs_epi16(wabs[v], _mm256_sign_epi8(q, w[v]));
                    acc[v] = _mm256_add_epi32(acc[v], _mm256_madd_epi16(t, ones));
                }
            }
        }
        iacc
    }
}

/// The AVX-VNNI tile (Intel Alder Lake and later client cores, AMD Zen 5):
/// [`tile_avx2`]'s sweep of 16 panel rows against all the activation rows,
/// with 256-bit `vpdpbusd` adding four u8 × i8 products straight into i32
/// lanes. No 16-bit stage means no runs and no saturation to avoid, so every
/// format, Q8_0 included, takes the one route the AVX-512 tile takes: each
/// group's sums start from the offset's correction and add up in i32. The
/// integers are exact, so the float steps (the reference's) give the same
/// bits as every other tier.
///
/// # Safety
/// avx2, fma and avxvnni present; `p` and `a` hold what [`super::tile`]
/// asserts, with `m <= ROWS4` (more rows are [`super::tile`]'s to split).
pub(super) unsafe fn tile_avxvnni(p: &Panel, a: &Acts, c0: usize, m: usize) -> Tile {
    macro_rules! wide {
        ($g:literal, $min:literal) => {{
            let mut out = AlignedTile([[0.0f32; NR]; MR]);
            let mut pend = AlignedTile([[0.0f32; NR]; MR]);
            let (o, t) = (&mut out, &mut pend);
            for h in 0..NR / 16 {
                match (m, a.fold) {
                    (4, false) => tile_avxvnni_wide::<4, $g, $min, false>(p, a, c0, h, o, t),
                    (3, false) => tile_avxvnni_wide::<3, $g, $min, false>(p, a, c0, h, o, t),
                    (2, false) => tile_avxvnni_wide::<2, $g, $min, false>(p, a, c0, h, o, t),
                    (1, false) => tile_avxvnni_wide::<1, $g, $min, false>(p, a, c0, h, o, t),
                    (4, true) => tile_avxvnni_wide::<4, $g, $min, true>(p, a, c0, h, o, t),
                    (3, true) => tile_avxvnni_wide::<3, $g, $min, true>(p, a, c0, h, o, t),
                    (2, true) => tile_avxvnni_wide::<2, $g, $min, true>(p, a, c0, h, o, t),
                    (1, true) => tile_avxvnni_wide::<1, $g, $min, true>(p, a, c0, h, o, t),
                    _ => {}
                }
            }
            out.0
        }};
    }
    macro_rules! pairs {
        ($g:literal, $min:literal) => {{
            let mut out = AlignedTile([[0.0f32; NR]; MR]);
            for h in 0..NR / 16 {
                for r in (0..m).step_by(2) {
                    if m - r >= 2 {
                        tile_avxvnni_pair::<2, $g, $min>(p, a, c0, r, h, &mut out);
                    } else {
                        tile_avxvnni_pair::<1, $g, $min>(p, a, c0, r, h, &mut out);
                    }
                }
            }
            out.0
        }};
    }
    // SAFETY: the caller's contract, passed on (`m <= ROWS4`).
    unsafe {
        match (p.g, p.min) {
            // Groups of 16 take their float steps twice as often, and the
            // float sums pay for registers there (criterion
            // `gemm_tile_2048`, one Xeon core forced to this tier: Q6_K 78
            // G multiply-adds/s in the four-row sweep, 91 in pairs; Q5_0,
            // Q8_0 and Q4_K 128, 127, 118 against 110, 117, 75).
            (16, false) => pairs!(16, false),
            (16, true) => pairs!(16, true),
            (32, false) => wide!(32, false),
            (32, true) => wide!(32, true),
            _ => super::tile_scalar(p, a, c0, m),
        }
    }
}

/// Group `g`'s i32 sums of panel rows `16h..16h + 16` (two vectors)
/// against `MA` activation rows `cols` apart, each starting from the row's
/// offset correction in `abase`: the integer part both AVX-VNNI sweeps share.
///
/// # Safety
/// avx2 and avxvnni present; the pointers hold group `g` of a panel of
/// `groups` groups of `G` and of `MA` activation rows (as [`super::tile`]
/// asserts), and `16h + 16 <= NR`.
#[inline]
#[target_feature(enable = "avx2,avxvnni")]
unsafe fn vnni_group_sums<const MA: usize, const G: usize>(
    pq: *const u8,
    aq: *const u8,
    abase: *const i32,
    cols: usize,
    groups: usize,
    g: usize,
    h: usize,
) -> [[__m256i; 2]; MA] {
    // SAFETY: the caller's contract bounds every read.
    unsafe {
        let mut iacc: [[__m256i; 2]; MA] =
            std::array::from_fn(|r| [_mm256_set1_epi32(*abase.add(r * groups + g)); 2]);
        for kq in 0..G / 4 {
            let k4 = g * (G / 4) + kq;
            let w0 = _mm256_loadu_si256(pq.add(k4 * NR * 4 + h * 64) as *const _);
            let w1 = _mm256_loadu_si256(pq.add(k4 * NR * 4 + h * 64 + 32) as *const _);
            for (r, acc) in iacc.iter_mut().enumerate() {
                let quad = (aq.add(r * cols + k4 * 4) as *const i32).read_unaligned();
                let av = _mm256_set1_epi32(quad);
                acc[0] = _mm256_dpbusd_avx_epi32(acc[0], w0, av);
                acc[1] = _mm256_dpbusd_avx_epi32(acc[1], w1, av);
            }
        }
        iacc
    }
}

/// Panel rows `16h..16h + 16` against activation rows `c0..c0 + MA` through
/// `vpdpbusd`, added into `out[..MA]` (see [`tile_avx2_wide`] for why the
/// float accumulators live in `out` and `pend`: eight i32 sums, two weight
/// vectors and a broadcast leave no room for them).
///
/// # Safety
/// avx2, fma and avxvnni present; `p` and `a` as [`super::tile`] asserts
/// for `MA <= m` rows; `16h + 16 <= NR`.
#[target_feature(enable = "avx2,fma,avxvnni")]
unsafe fn tile_avxvnni_wide<const MA: usize, const G: usize, const MIN: bool, const FOLD: bool>(
    p: &Panel,
    a: &Acts,
    c0: usize,
    h: usize,
    out: &mut AlignedTile,
    pend: &mut AlignedTile,
) {
    let cols = p.groups * G;
    let pq = p.q.as_ptr();
    let RowsFrom {
        aq,
        ad,
        asum,
        abase,
    } = a.rows_from(c0);
    let o = out.0.as_mut_ptr() as *mut f32;
    let pe = pend.0.as_mut_ptr() as *mut f32;
    for g in 0..p.groups {
        // SAFETY: (whole body) as in `tile_avx2_wide`: group g's panel
        // entries for rows 16h..16h + 16 and each activation row's elements
        // g*G..(g+1)*G lie inside the buffers (asserted by `super::tile`);
        // `out` has MR rows of NR floats, 32-byte aligned, 16h + 16 <= NR.
        unsafe {
            let iacc = vnni_group_sums::<MA, G>(pq, aq, abase, cols, p.groups, g, h);
            if FOLD {
                fold_steps_in_l1::<MA, G, MIN>(&iacc, p, (ad, asum), g, h, (o, pe));
            } else {
                float_steps_in_l1::<MA, G, MIN>(&iacc, p, (ad, asum), g, h, o);
            }
        }
    }
}

/// Panel rows `16h..16h + 16` against activation rows `c0 + r0..c0 + r0 +
/// MA` (`MA` ≤ 2) through `vpdpbusd`, written to `out[r0..r0 + MA]`: four
/// i32 sums, two weight vectors and a broadcast leave room for the float
/// sums in registers, which pays where groups are short (16) and the float
/// steps come often; the panel is read once per two activation rows.
///
/// # Safety
/// avx2, fma and avxvnni present; `p` and `a` as [`super::tile`] asserts
/// for `r0 + MA <= m` rows; `16h + 16 <= NR`.
#[target_feature(enable = "avx2,fma,avxvnni")]
unsafe fn tile_avxvnni_pair<const MA: usize, const G: usize, const MIN: bool>(
    p: &Panel,
    a: &Acts,
    c0: usize,
    r0: usize,
    h: usize,
    out: &mut AlignedTile,
) {
    let c0 = c0 + r0;
    let cols = p.groups * G;
    let pq = p.q.as_ptr();
    let (ps, pm) = (p.s.as_ptr(), p.m.as_ptr());
    let RowsFrom {
        aq,
        ad,
        asum,
        abase,
    } = a.rows_from(c0);
    let mut facc = [[_mm256_setzero_ps(); 2]; MA];
    // A super-block's sums without the activation scale (Q8_K rows, see
    // `super::tile_scalar`).
    let mut pend = [[_mm256_setzero_ps(); 2]; MA];
    let fold = a.fold;
    for g in 0..p.groups {
        // SAFETY: as in `tile_avxvnni_wide`, for rows c0..c0 + MA.
        unsafe {
            let iacc = vnni_group_sums::<MA, G>(pq, aq, abase, cols, p.groups, g, h);
            if fold {
                let (first, last) = (g.is_multiple_of(QK_K / G), g % (QK_K / G) == QK_K / G - 1);
                for (r, ((iacc, f), t)) in iacc.iter().zip(&mut facc).zip(&mut pend).enumerate() {
                    let sum = _mm256_set1_ps(*asum.add(r * p.groups + g));
                    for v in 0..2 {
                        let s = _mm256_loadu_ps(ps.add(g * NR + h * 16 + v * 8));
                        let i = _mm256_cvtepi32_ps(iacc[v]);
                        t[v] = if first {
                            _mm256_mul_ps(i, s)
                        } else {
                            _mm256_fmadd_ps(i, s, t[v])
                        };
                        if MIN {
                            let mn = _mm256_loadu_ps(pm.add(g * NR + h * 16 + v * 8));
                            t[v] = _mm256_fnmadd_ps(mn, sum, t[v]);
                        }
                        if last {
                            let d = _mm256_set1_ps(*ad.add(r * (cols / QK) + g * G / QK));
                            f[v] = _mm256_fmadd_ps(t[v], d, f[v]);
                        }
                    }
                }
                continue;
            }
            for (r, (iacc, f)) in iacc.iter().zip(facc.iter_mut()).enumerate() {
                let d = _mm256_set1_ps(*ad.add(r * (cols / QK) + g * G / QK));
                let sum = _mm256_set1_ps(*asum.add(r * p.groups + g));
                for v in 0..2 {
                    let s = _mm256_loadu_ps(ps.add(g * NR + h * 16 + v * 8));
                    f[v] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(iacc[v]), _mm256_mul_ps(s, d), f[v]);
                    if MIN {
                        let mn = _mm256_loadu_ps(pm.add(g * NR + h * 16 + v * 8));
                        f[v] = _mm256_fnmadd_ps(mn, sum, f[v]);
                    }
                }
            }
        }
    }
    for (row, f) in out.0[r0..r0 + MA].iter_mut().zip(&facc) {
        // SAFETY: 16h + 16 <= NR floats in the row.
        unsafe {
            _mm256_storeu_ps(row.as_mut_ptr().add(h * 16), f[0]);
            _mm256_storeu_ps(row.as_mut_ptr().add(h * 16 + 8), f[1]);
        }
    }
}

/// Adds group `g`'s integer sums of panel rows `16h..16h + 16` into the
/// float tile `o` (the reference's steps: the sum times weight scale times
/// activation scale, less minimum times activation sum when `MIN`), through
/// volatile loads and stores that keep the float sums in L1 (see
/// [`tile_avx2_wide`]); [`fold_steps_in_l1`] is its Q8_K form.
///
/// # Safety
/// avx2 and fma present; `ad` and `asum` point at the tile's first
/// activation row's scales and group sums (as [`super::tile`] asserts for
/// `MA` rows); `o` and `pe` at aligned tiles of MR rows of NR floats;
/// `16h + 16 <= NR`.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn float_steps_in_l1<const MA: usize, const G: usize, const MIN: bool>(
    iacc: &[[__m256i; 2]; MA],
    p: &Panel,
    (ad, asum): (*const f32, *const f32),
    g: usize,
    h: usize,
    o: *mut f32,
) {
    let cols = p.groups * G;
    let (ps, pm) = (p.s.as_ptr(), p.m.as_ptr());
    // SAFETY: the caller's contract bounds every access.
    unsafe {
        for (r, iacc) in iacc.iter().enumerate() {
            let d = _mm256_set1_ps(*ad.add(r * (cols / QK) + g * G / QK));
            let sum = _mm256_set1_ps(*asum.add(r * p.groups + g));
            for (v, &i) in iacc.iter().enumerate() {
                let at = o.add(r * NR + h * 16 + v * 8) as *mut __m256;
                let s = _mm256_loadu_ps(ps.add(g * NR + h * 16 + v * 8));
                let mut f = at.read_volatile();
                f = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i), _mm256_mul_ps(s, d), f);
                if MIN {
                    let mn = _mm256_loadu_ps(pm.add(g * NR + h * 16 + v * 8));
                    f = _mm256_fnmadd_ps(mn, sum, f);
                }
                at.write_volatile(f);
            }
        }
    }
}

/// [`float_steps_in_l1`] for Q8_K rows (see [`super::tile_scalar`]): a
/// super-block's sums gather in the tile `pe` without the activation
/// scale, which its last group applies into `o`. Always inlined: called,
/// it cost the AVX2 tile 17%.
///
/// # Safety
/// As [`float_steps_in_l1`]. It has no `target_feature` of its own (which
/// would rule out `inline(always)`): inlined into its AVX2 callers, its
/// intrinsics take theirs.
#[inline(always)]
unsafe fn fold_steps_in_l1<const MA: usize, const G: usize, const MIN: bool>(
    iacc: &[[__m256i; 2]; MA],
    p: &Panel,
    (ad, asum): (*const f32, *const f32),
    g: usize,
    h: usize,
    (o, pe): (*mut f32, *mut f32),
) {
    let cols = p.groups * G;
    let (ps, pm) = (p.s.as_ptr(), p.m.as_ptr());
    // SAFETY: the caller's contract bounds every access.
    unsafe {
        let (first, last) = (g.is_multiple_of(QK_K / G), g % (QK_K / G) == QK_K / G - 1);
        for (r, iacc) in iacc.iter().enumerate() {
            let sum = _mm256_set1_ps(*asum.add(r * p.groups + g));
            for (v, &i) in iacc.iter().enumerate() {
                let at = r * NR + h * 16 + v * 8;
                let s = _mm256_loadu_ps(ps.add(g * NR + h * 16 + v * 8));
                let i = _mm256_cvtepi32_ps(i);
                let mut t = if first {
                    _mm256_mul_ps(i, s)
                } else {
                    _mm256_fmadd_ps(i, s, (pe.add(at) as *mut __m256).read_volatile())
                };
                if MIN {
                    let mn = _mm256_loadu_ps(pm.add(g * NR + h * 16 + v * 8));
                    t = _mm256_fnmadd_ps(mn, sum, t);
                }
                if last {
                    let d = _mm256_set1_ps(*ad.add(r * (cols / QK) + g * G / QK));
                    let f = o.add(at) as *mut __m256;
                    f.write_volatile(_mm256_fmadd_ps(t, d, f.read_volatile()));
                } else {
                    (pe.add(at) as *mut __m256).write_volatile(t);
                }
            }
        }
    }
}

/// The largest |x| of 8-lane `v`, in every lane.
#[inline]
#[target_feature(enable = "avx2")]
fn abs_max8(v: __m256) -> f32 {
    let m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    let m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
    _mm_cvtss_f32(m)
}

/// |v| lane by lane (clears the sign bit).
#[inline]
#[target_feature(enable = "avx2")]
fn abs8(v: __m256) -> __m256 {
    _mm256_andnot_ps(_mm256_set1_ps(-0.0), v)
}

/// Rounds 32 floats (four vectors) half to even and packs them, in order,
/// into 32 signed bytes with saturation.
#[inline]
#[target_feature(enable = "avx2")]
fn pack32(v: [__m256; 4]) -> __m256i {
    let i = v.map(|x| _mm256_cvtps_epi32(x));
    // packs work within 128-bit halves; the permute puts the dwords back
    // in element order.
    let w01 = _mm256_packs_epi32(i[0], i[1]);
    let w23 = _mm256_packs_epi32(i[2], i[3]);
    let b = _mm256_packs_epi16(w01, w23);
    _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7))
}

/// Reduces each of 8 vectors to one lane: lane `b` of the result is `$op`
/// over every lane of `$v[b]`, by a tree of shuffles (three levels, 7
/// `$op`s) in place of 8 horizontal reductions. `$op` must be associative
/// and commutative (max, add) on `__m256`s. A macro with plain loops, for
/// the reason `reduce_lanes16` is one.
macro_rules! reduce_lanes8 {
    ($v:expr, $op:expr) => {{
        let v: &[__m256; 8] = $v;
        // The tree leaves vector `i` in lane 4 * (i % 2) + i / 2; feeding
        // it v[4 * (i % 2) + i / 2] at `i` undoes that.
        let mut r = [_mm256_setzero_ps(); 4];
        for i in 0..4 {
            let (a, b) = (v[i], v[4 + i]);
            r[i] = $op(
                _mm256_permute2f128_ps::<0x20>(a, b),
                _mm256_permute2f128_ps::<0x31>(a, b),
            );
        }
        let mut u = [_mm256_setzero_ps(); 2];
        for i in 0..2 {
            let (a, b) = (r[2 * i], r[2 * i + 1]);
            u[i] = $op(
                _mm256_shuffle_ps::<0x44>(a, b),
                _mm256_shuffle_ps::<0xEE>(a, b),
            );
        }
        $op(
            _mm256_shuffle_ps::<0x88>(u[0], u[1]),
            _mm256_shuffle_ps::<0xDD>(u[0], u[1]),
        )
    }};
}

/// Adds two vectors of i32 held as `__m256` (for `reduce_lanes8`).
#[inline]
#[target_feature(enable = "avx2")]
fn add_epi32_ps8(a: __m256, b: __m256) -> __m256 {
    _mm256_castsi256_ps(_mm256_add_epi32(
        _mm256_castps_si256(a),
        _mm256_castps_si256(b),
    ))
}

/// The sums of 32 signed bytes by four: lane `k` holds bytes `4k..4k + 4`.
#[inline]
#[target_feature(enable = "avx2")]
fn byte_quads(b: __m256i) -> __m256i {
    _mm256_madd_epi16(
        _mm256_maddubs_epi16(_mm256_set1_epi8(1), b),
        _mm256_set1_epi16(1),
    )
}

/// [`Acts::fill_row`] for Q8_0 rows against groups of 32 on AVX2: the
/// same bytes as quantizing each block of 32 with [`quant_q8_0_avx2`] and
/// splitting it, written straight into the row's buffers, eight blocks at
/// a time (their maxima and sums by one reduction tree each,
/// `reduce_lanes8`; their scales to f16 and back in one vector).
///
/// # Safety
/// avx2 and f16c present; `x` holds a whole number of blocks, and `q`,
/// `d`, `sum` and `base` have room for its values and blocks.
#[target_feature(enable = "avx2,f16c")]
pub(super) unsafe fn fill_row_q8_0_avx2(
    x: &[f32],
    q: &mut [u8],
    d: &mut [f32],
    sum: &mut [f32],
    base: &mut [i32],
    off: i32,
) {
    let blocks = x.len() / QK;
    assert!(q.len() >= blocks * QK && d.len() >= blocks);
    assert!(sum.len() >= blocks && base.len() >= blocks);
    let (xp, qp) = (x.as_ptr(), q.as_mut_ptr());
    let neg_off = _mm256_set1_epi32(-off);
    let mut b0 = 0;
    while b0 < blocks {
        let n = (blocks - b0).min(8);
        let mut m = [_mm256_setzero_ps(); 8];
        for (b, m) in m.iter_mut().enumerate().take(n) {
            // SAFETY: block b0 + b lies inside `x` (b0 + b < blocks).
            let v = unsafe {
                let p = xp.add((b0 + b) * QK);
                [
                    _mm256_loadu_ps(p),
                    _mm256_loadu_ps(p.add(8)),
                    _mm256_loadu_ps(p.add(16)),
                    _mm256_loadu_ps(p.add(24)),
                ]
            };
            *m = _mm256_max_ps(
                _mm256_max_ps(abs8(v[0]), abs8(v[1])),
                _mm256_max_ps(abs8(v[2]), abs8(v[3])),
            );
        }
        let amax = reduce_lanes8!(&m, _mm256_max_ps);
        let scale = _mm256_div_ps(amax, _mm256_set1_ps(127.0));
        let nonzero = _mm256_cmp_ps::<_CMP_NEQ_OQ>(amax, _mm256_setzero_ps());
        let inv = _mm256_and_ps(_mm256_div_ps(_mm256_set1_ps(127.0), amax), nonzero);
        // The f16 scale as the block stores it, widened back.
        let half = _mm256_cvtph_ps(_mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(scale));
        let mut invs = [0f32; 8];
        // SAFETY: 8 lanes into 8 floats.
        unsafe { _mm256_storeu_ps(invs.as_mut_ptr(), inv) };
        let mut quads = [_mm256_setzero_ps(); 8];
        for (b, s) in quads.iter_mut().enumerate().take(n) {
            let iv = _mm256_set1_ps(invs[b]);
            // SAFETY: block b0 + b lies inside `x`, and its 32 bytes
            // inside `q` (asserted above).
            unsafe {
                let p = xp.add((b0 + b) * QK);
                let v = [
                    _mm256_mul_ps(_mm256_loadu_ps(p), iv),
                    _mm256_mul_ps(_mm256_loadu_ps(p.add(8)), iv),
                    _mm256_mul_ps(_mm256_loadu_ps(p.add(16)), iv),
                    _mm256_mul_ps(_mm256_loadu_ps(p.add(24)), iv),
                ];
                let bytes = pack32(v);
                _mm256_storeu_si256(qp.add((b0 + b) * QK) as *mut _, bytes);
                *s = _mm256_castsi256_ps(byte_quads(bytes));
            }
        }
        let s = _mm256_castps_si256(reduce_lanes8!(&quads, add_epi32_ps8));
        let (mut dv, mut sv, mut bv) = ([0f32; 8], [0f32; 8], [0i32; 8]);
        // SAFETY: 8 lanes into arrays of 8.
        unsafe {
            _mm256_storeu_ps(dv.as_mut_ptr(), half);
            let scaled = _mm256_mul_ps(half, _mm256_cvtepi32_ps(s));
            _mm256_storeu_ps(sv.as_mut_ptr(), scaled);
            let start = _mm256_mullo_epi32(neg_off, s);
            _mm256_storeu_si256(bv.as_mut_ptr() as *mut _, start);
        }
        d[b0..b0 + n].copy_from_slice(&dv[..n]);
        sum[b0..b0 + n].copy_from_slice(&sv[..n]);
        base[b0..b0 + n].copy_from_slice(&bv[..n]);
        b0 += n;
    }
}

/// [`Acts::fill_row`] for Q8_K rows against groups of `g` (16 or 32) on
/// AVX2: the same bytes as [`quant_q8_k_avx2`] and splitting its block,
/// written straight into the row's buffers; each super-block's group sums
/// come from its bytes by horizontal adds across the eight 32-byte runs.
///
/// # Safety
/// avx2 present; `x` holds a whole number of super-blocks, `g` is 16 or
/// 32, and `q`, `d`, `sum` and `base` have room for its values, blocks of
/// 32 and groups.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn fill_row_q8_k_avx2(
    x: &[f32],
    q: &mut [u8],
    d: &mut [f32],
    sum: &mut [f32],
    base: &mut [i32],
    g: usize,
    off: i32,
) {
    let (supers, groups) = q8_k_row_shape(x, q, d, sum, base, g);
    // `hadd` leaves the halves' sums of four runs as 0, 2, 4, 6 | 1, 3, 5, 7.
    let order16 = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    // ... and the runs' sums of eight, two vectors of those, as
    // 0, 1, 4, 5 | 2, 3, 6, 7.
    let order32 = _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7);
    for sb in 0..supers {
        let x = &x[sb * QK_K..(sb + 1) * QK_K];
        let mut vmax = _mm256_setzero_ps();
        for i in 0..32 {
            // SAFETY: 256 values in this super-block.
            let v = unsafe { _mm256_loadu_ps(x.as_ptr().add(8 * i)) };
            vmax = _mm256_max_ps(vmax, abs8(v));
        }
        let amax = abs_max8(vmax);
        let (ds, ss) = (sb * (QK_K / QK), sb * groups);
        if amax == 0.0 {
            zero_super_block(q, d, sum, base, sb, groups);
            continue;
        }
        // The first value whose |x| equals the maximum (see the AVX-512
        // form).
        let am = _mm256_set1_ps(amax);
        let mut max = amax;
        for i in 0..32 {
            // SAFETY: 256 values in this super-block.
            let v = unsafe { _mm256_loadu_ps(x.as_ptr().add(8 * i)) };
            let m = _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_EQ_OQ>(abs8(v), am));
            if m != 0 {
                max = x[8 * i + m.trailing_zeros() as usize];
                break;
            }
        }
        let iscale = -127.0 / max;
        let sv = _mm256_set1_ps(iscale);
        let mut runs = [_mm256_setzero_si256(); 8];
        for (i, run) in runs.iter_mut().enumerate() {
            // SAFETY: 256 values in, bytes 32i..32i + 32 of this
            // super-block out (asserted above).
            unsafe {
                let p = x.as_ptr().add(32 * i);
                let v = [
                    _mm256_mul_ps(_mm256_loadu_ps(p), sv),
                    _mm256_mul_ps(_mm256_loadu_ps(p.add(8)), sv),
                    _mm256_mul_ps(_mm256_loadu_ps(p.add(16)), sv),
                    _mm256_mul_ps(_mm256_loadu_ps(p.add(24)), sv),
                ];
                // The scalar code clamps at 127 only: -127/max * v lies in
                // -127..=127 (within rounding), so packing's saturation at
                // 127 is the same clamp and -128 never arises.
                let bytes = pack32(v);
                _mm256_storeu_si256(q.as_mut_ptr().add(sb * QK_K + 32 * i) as *mut _, bytes);
                *run = byte_quads(bytes);
            }
        }
        d[ds..ds + QK_K / QK].fill(1.0 / iscale);
        // Sums of 16: groups 0..8 from runs 0..4, 8..16 from runs 4..8.
        let (lo, hi) = (
            run_halves(&runs[..4], order16),
            run_halves(&runs[4..], order16),
        );
        let mut out = [[0i32; 8]; 2];
        let n = if g == 16 {
            // SAFETY: two vectors into two arrays of 8.
            unsafe {
                _mm256_storeu_si256(out[0].as_mut_ptr() as *mut _, lo);
                _mm256_storeu_si256(out[1].as_mut_ptr() as *mut _, hi);
            }
            16
        } else {
            let s32 = _mm256_permutevar8x32_epi32(_mm256_hadd_epi32(lo, hi), order32);
            // SAFETY: one vector into an array of 8.
            unsafe { _mm256_storeu_si256(out[0].as_mut_ptr() as *mut _, s32) };
            8
        };
        for (k, &s) in out.iter().flatten().take(n).enumerate() {
            sum[ss + k] = s as f32;
            base[ss + k] = -off * s;
        }
    }
}

/// The sums of each 16-byte half of four runs' byte quads ([`byte_quads`])
/// in order: run 0's halves, run 1's, and so on (`order` undoes `hadd`'s).
#[inline]
#[target_feature(enable = "avx2")]
fn run_halves(r: &[__m256i], order: __m256i) -> __m256i {
    let h = _mm256_hadd_epi32(_mm256_hadd_epi32(r[0], r[1]), _mm256_hadd_epi32(r[2], r[3]));
    _mm256_permutevar8x32_epi32(h, order)
}

/// `legacy::quant_q8_0_act` for one block of 32, the same bytes: scale
/// amax/127 (as f16), values round-half-even of `v * 127/amax`.
///
/// # Safety
/// avx2 present; `x` holds 32 values.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn quant_q8_0_avx2(x: &[f32], block: &mut BlockQ8_0) {
    assert!(x.len() >= 32);
    // SAFETY: 32 values, as asserted.
    let v: [__m256; 4] = std::array::from_fn(|i| unsafe { _mm256_loadu_ps(x.as_ptr().add(8 * i)) });
    let m = _mm256_max_ps(
        _mm256_max_ps(abs8(v[0]), abs8(v[1])),
        _mm256_max_ps(abs8(v[2]), abs8(v[3])),
    );
    let amax = abs_max8(m);
    let d = amax / 127.0;
    let id = if amax != 0.0 { 127.0 / amax } else { 0.0 };
    let idv = _mm256_set1_ps(id);
    let q = pack32(v.map(|x| _mm256_mul_ps(x, idv)));
    block.d.set(d);
    // SAFETY: the block's 32 values.
    unsafe { _mm256_storeu_si256(block.qs.as_mut_ptr() as *mut _, q) };
}

/// `kquants::quant_q8_k` for one super-block of 256, the same bytes
/// (scale, values; the i16 group sums are not written).
///
/// # Safety
/// avx2 present; `x` holds 256 values.
#[target_feature(enable = "avx2")]
pub(super) unsafe fn quant_q8_k_avx2(x: &[f32], block: &mut BlockQ8K) {
    assert!(x.len() >= 256);
    let mut vmax = _mm256_setzero_ps();
    for i in 0..32 {
        // SAFETY: 256 values, as asserted.
        let v = unsafe { _mm256_loadu_ps(x.as_ptr().add(8 * i)) };
        vmax = _mm256_max_ps(vmax, abs8(v));
    }
    let amax = abs_max8(vmax);
    if amax == 0.0 {
        *block = bytemuck::Zeroable::zeroed();
        return;
    }
    // The first value whose |x| equals the maximum (see the AVX-512 form).
    let am = _mm256_set1_ps(amax);
    let mut max = amax;
    for i in 0..32 {
        // SAFETY: 256 values, as asserted.
        let v = unsafe { _mm256_loadu_ps(x.as_ptr().add(8 * i)) };
        let m = _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_EQ_OQ>(abs8(v), am));
        if m != 0 {
            max = x[8 * i + m.trailing_zeros() as usize];
            break;
        }
    }
    let iscale = -127.0 / max;
    let sv = _mm256_set1_ps(iscale);
    let ones = _mm256_set1_epi8(1);
    for i in 0..8 {
        // SAFETY: 256 values in, the block's 256 values out.
        unsafe {
            let mut v = [_mm256_setzero_ps(); 4];
            for (j, v) in v.iter_mut().enumerate() {
                *v = _mm256_mul_ps(_mm256_loadu_ps(x.as_ptr().add(32 * i + 8 * j)), sv);
            }
            // The scalar code clamps at 127 only: -127/max * v lies in
            // -127..=127 (within rounding), so packing's saturation at 127
            // is the same clamp and -128 never arises.
            let b = pack32(v);
            _mm256_storeu_si256(block.qs.as_mut_ptr().add(32 * i) as *mut _, b);
            // The two groups of 16: byte pairs, then quads, then each half.
            let quads = _mm256_madd_epi16(_mm256_maddubs_epi16(ones, b), _mm256_set1_epi16(1));
            let halves = [
                _mm256_castsi256_si128(quads),
                _mm256_extracti128_si256::<1>(quads),
            ];
            for (h, &half) in halves.iter().enumerate() {
                let t = _mm_add_epi32(half, _mm_unpackhi_epi64(half, half));
                let t = _mm_add_epi32(t, _mm_shuffle_epi32::<1>(t));
                block.bsums[2 * i + h].set(_mm_cvtsi128_si32(t) as i16);
            }
        }
    }
    block.d.set(1.0 / iscale);
}
