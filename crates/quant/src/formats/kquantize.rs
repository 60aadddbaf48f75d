//! Reference quantizers for the K formats Q2_K, Q3_K, Q4_K, Q5_K and Q6_K: the
//! algorithms llama.cpp runs when it has no importance matrix, so the bytes are the
//! ones `llama-quantize` writes.
//!
//! Float expressions keep ggml's operand order (`(w*l)*x`, not `w*(l*x)`), every
//! running sum adds in ggml's element order, and nothing is fused: a change in
//! the last bit of one sub-block scale can pick a different grid and change
//! every quant of the sub-block. Speed comes only from what keeps the bits:
//! branch-free rounding, independent candidates summed side by side, and
//! stopping an error sum once it cannot win.

use super::blocks::{
    blocks_mut, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ5K, BlockQ6K, F16Le, K_SCALE_BYTES,
};
use super::kquants::QK_K;
use super::{nearest_int, GROUP_MAX_EPS};
use bytemuck::Zeroable;

/// The head Q4_K and Q5_K share: the super-block's scale and minimum and
/// the packed 6-bit scales and mins of its sub-blocks.
struct KHead<'b> {
    d: &'b mut F16Le,
    dmin: &'b mut F16Le,
    scales: &'b mut [u8; K_SCALE_BYTES],
}

/// `nearest_int(v).clamp(lo, hi)` without a branch, so loops over it vectorize:
/// clamping to `[lo - 1, hi + 1]` first keeps the magic-number rounding exact
/// and gives the same result for every finite `v` (a NaN lands on `lo`).
#[inline(always)]
fn round_clamped(v: f32, lo: i32, hi: i32) -> i32 {
    let v = v.max(lo as f32 - 1.0).min(hi as f32 + 1.0);
    (((v + 12_582_912.0).to_bits() & 0x007f_ffff) as i32 - 0x0040_0000).clamp(lo, hi)
}

/// A weighted least-squares fit of `x ≈ scale * L - min` with `L` in `0..=nmax`,
/// searching `nstep + 1` grid densities around `nmax / (max - min)` (ggml's
/// `make_qkx2_quants`). Returns `(scale, min)` with `min >= 0` and fills `l`.
///
/// The sums run in ggml's order (so every bit matches); only the rounding
/// loops, which have no carried state, are free to vectorize.
#[allow(clippy::too_many_arguments)]
fn fit_scale_min<const N: usize>(
    nmax: i32,
    x: &[f32; N],
    weights: &[f32; N],
    l: &mut [u8; N],
    rmin: f32,
    rdelta: f32,
    nstep: i32,
    use_mad: bool,
) -> (f32, f32) {
    let mut min = x[0];
    let mut max = x[0];
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..N {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        let w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        l.fill(0);
        return (0.0, -min);
    }
    let nmax_f = nmax as f32;
    let err = |d: f32| if use_mad { d.abs() } else { d * d };
    let quants = |iscale: f32, min: f32| {
        let mut q = [0f32; N];
        for i in 0..N {
            q[i] = round_clamped(iscale * (x[i] - min), 0, nmax) as f32;
        }
        q
    };
    let iscale = nmax_f / (max - min);
    let mut scale = 1.0 / iscale;
    let q = quants(iscale, min);
    let mut best_error = 0.0f32;
    for i in 0..N {
        let diff = scale * q[i] + min - x[i];
        best_error += weights[i] * err(diff);
    }
    let mut best_q = q;
    for is in 0..=nstep {
        let iscale = (rmin + rdelta * is as f32 + nmax_f) / (max - min);
        let q = quants(iscale, min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0.0f32, 0.0f32, 0.0f32);
        for i in 0..N {
            let wq = weights[i] * q[i];
            sum_l += wq;
            sum_l2 += wq * q[i];
            sum_xl += wq * x[i];
        }
        let det = sum_w * sum_l2 - sum_l * sum_l;
        if det > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            // Every term is >= 0 (or NaN) and adding one never lowers a
            // rounded sum, so once the partial error reaches the best the
            // candidate has lost: stopping there changes no outcome.
            let mut cur_error = 0.0f32;
            let mut better = true;
            for i in 0..N {
                let diff = this_scale * q[i] + this_min - x[i];
                cur_error += weights[i] * err(diff);
                better = cur_error < best_error;
                if !better {
                    break;
                }
            }
            if better {
                best_q = q;
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    for (l, q) in l.iter_mut().zip(best_q) {
        *l = q as u8;
    }
    (scale, -min)
}

/// Grid densities [`fit_symmetric`] tries: `nmax / amax`, then 18 around it.
const SYM_GRIDS: usize = 19;

/// A symmetric fit `x ≈ scale * (L - nmax)` weighted by `x²`, trying 18 grid
/// densities around `nmax / amax` (ggml's `make_qx_quants` with rmse_type 1 and no
/// importance weights). `l` receives the biased quants `0..2*nmax`.
///
/// The candidates do not depend on each other, so their sums are accumulated
/// side by side (each in ggml's element order, so every bit matches) and the
/// winner is then picked in ggml's order.
fn fit_symmetric<const N: usize>(nmax: i32, x: &[f32; N], l: &mut [i8; N]) -> f32 {
    let (amax, max) = super::signed_amax(x);
    if amax < GROUP_MAX_EPS {
        l.fill(0);
        return 0.0;
    }
    let nmax_f = nmax as f32;
    let mut iscales = [-nmax_f / max; SYM_GRIDS];
    for (k, is) in (-9..=9).filter(|&is| is != 0).enumerate() {
        iscales[k + 1] = -(nmax_f + 0.1 * is as f32) / max;
    }
    let mut q = [[0f32; SYM_GRIDS]; N];
    for (qi, &xi) in q.iter_mut().zip(x) {
        for (qp, &iscale) in qi.iter_mut().zip(&iscales) {
            *qp = round_clamped(iscale * xi, -nmax, nmax - 1) as f32;
        }
    }
    let (mut sumlx, mut suml2) = ([0f32; SYM_GRIDS], [0f32; SYM_GRIDS]);
    for (qi, &xi) in q.iter().zip(x) {
        let w = xi * xi;
        let wx = w * xi;
        for p in 0..SYM_GRIDS {
            sumlx[p] += wx * qi[p];
            suml2[p] += w * qi[p] * qi[p];
        }
    }
    let mut best_p = 0;
    let mut scale = if suml2[0] != 0.0 {
        sumlx[0] / suml2[0]
    } else {
        0.0
    };
    let mut best = scale * sumlx[0];
    for p in 1..SYM_GRIDS {
        if suml2[p] > 0.0 && sumlx[p] * sumlx[p] > best * suml2[p] {
            best_p = p;
            scale = sumlx[p] / suml2[p];
            best = scale * sumlx[p];
        }
    }
    for (l, qi) in l.iter_mut().zip(&q) {
        *l = (qi[best_p] as i32 + nmax) as i8;
    }
    scale
}

/// A symmetric fit for Q3_K (ggml's `make_q3_quants` with its rmse refinement):
/// start from the `nmax / amax` grid, then move single quants while that lowers
/// the `x²`-weighted error. `l` receives the biased quants `0..2*nmax`.
fn fit_q3(nmax: i32, x: &[f32], l: &mut [i8]) -> f32 {
    let n = x.len();
    let (amax, max) = super::signed_amax(x);
    if amax < GROUP_MAX_EPS {
        l[..n].fill(0);
        return 0.0;
    }
    let iscale = -(nmax as f32) / max;
    let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
    for i in 0..n {
        let q = nearest_int(iscale * x[i]).clamp(-nmax, nmax - 1);
        l[i] = q as i8;
        let w = x[i] * x[i];
        sumlx += w * x[i] * q as f32;
        suml2 += w * q as f32 * q as f32;
    }
    for _ in 0..5 {
        let mut changed = false;
        for i in 0..n {
            let w = x[i] * x[i];
            let old = l[i] as f32;
            let mut slx = sumlx - w * x[i] * old;
            if slx > 0.0 {
                let mut sl2 = suml2 - w * old * old;
                let new_l = nearest_int(x[i] * sl2 / slx).clamp(-nmax, nmax - 1);
                if new_l != l[i] as i32 {
                    let q = new_l as f32;
                    slx += w * x[i] * q;
                    sl2 += w * q * q;
                    if sl2 > 0.0 && slx * slx * suml2 > sumlx * sumlx * sl2 {
                        l[i] = new_l as i8;
                        sumlx = slx;
                        suml2 = sl2;
                        changed = true;
                    }
                }
            }
        }
        if !changed {
            break;
        }
    }
    for q in l[..n].iter_mut() {
        *q += nmax as i8;
    }
    if suml2 > 0.0 {
        sumlx / suml2
    } else {
        0.0
    }
}

/// Packs 2-bit quants as Q2_K/Q3_K store them: byte `32*h + i` of a 128-value half
/// `h` holds values `i`, `i+32`, `i+64` and `i+96` in bits 0-1, 2-3, 4-5 and 6-7.
fn pack_2bit(l: &[u8; QK_K], qs: &mut [u8]) {
    for h in 0..2 {
        let (l, q) = (&l[128 * h..128 * h + 128], &mut qs[32 * h..32 * h + 32]);
        for i in 0..32 {
            q[i] = l[i] | (l[i + 32] << 2) | (l[i + 64] << 4) | (l[i + 96] << 6);
        }
    }
}

/// `quantize_row_q2_K_ref`: per 16 values an absolute-error fit of 2-bit quants
/// with a min, then both the 16 scales and the 16 mins as 4-bit fractions of
/// their maxima.
pub(crate) fn quant_q2_k(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK_K).zip(blocks_mut::<BlockQ2K>(dst)) {
        let mut l = [0u8; QK_K];
        let mut weights = [0f32; 16];
        let mut scales = [0f32; 16];
        let mut mins = [0f32; 16];
        let (mut max_scale, mut max_min) = (0.0f32, 0.0f32);
        let xs16 = x.as_chunks::<16>().0;
        let ls16 = l.as_chunks_mut::<16>().0;
        for (j, (xs, ls)) in xs16.iter().zip(ls16.iter_mut()).enumerate() {
            for (w, v) in weights.iter_mut().zip(xs) {
                *w = v.abs();
            }
            (scales[j], mins[j]) = fit_scale_min(3, xs, &weights, ls, -0.5, 0.1, 15, true);
            max_scale = keep_max(max_scale, scales[j]);
            max_min = keep_max(max_min, mins[j]);
        }
        let mut sc = [0u8; 16];
        if max_scale > 0.0 {
            let iscale = 15.0 / max_scale;
            for j in 0..16 {
                sc[j] = nearest_int(iscale * scales[j]) as u8;
            }
            b.d.set(max_scale / 15.0);
        } else {
            b.d.set(0.0);
        }
        if max_min > 0.0 {
            let iscale = 15.0 / max_min;
            for j in 0..16 {
                sc[j] |= (nearest_int(iscale * mins[j]) << 4) as u8;
            }
            b.dmin.set(max_min / 15.0);
        } else {
            b.dmin.set(0.0);
        }
        let (d_all, m_all) = (b.d.get(), b.dmin.get());
        for j in 0..16 {
            let d = d_all * (sc[j] & 0x0F) as f32;
            if d == 0.0 {
                continue;
            }
            let dm = m_all * (sc[j] >> 4) as f32;
            for i in 16 * j..16 * j + 16 {
                l[i] = round_clamped((x[i] + dm) / d, 0, 3) as u8;
            }
        }
        b.scales = sc;
        pack_2bit(&l, &mut b.qs);
    }
}

/// `quantize_row_q3_K_ref`: per 16 values a symmetric 3-bit fit, the 16 scales as
/// signed 6-bit fractions of the largest, then re-quantization against the
/// stored scales; the third bit of each quant goes to `hmask`.
pub(crate) fn quant_q3_k(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK_K).zip(blocks_mut::<BlockQ3K>(dst)) {
        let mut l = [0i8; QK_K];
        let mut scales = [0f32; 16];
        let (mut amax, mut max_scale) = (0.0f32, 0.0f32);
        for j in 0..16 {
            scales[j] = fit_q3(4, &x[16 * j..16 * j + 16], &mut l[16 * j..16 * j + 16]);
            if scales[j].abs() > amax {
                amax = scales[j].abs();
                max_scale = scales[j];
            }
        }
        let mut s = [0u8; K_SCALE_BYTES];
        if max_scale != 0.0 {
            let iscale = -32.0 / max_scale;
            for j in 0..16 {
                // ggml stores the rounded value in an int8 before clamping.
                let q = (nearest_int(iscale * scales[j]) as i8).clamp(-32, 31) as i32 + 32;
                let q = q as u8;
                if j < 8 {
                    s[j] = q & 0x0F;
                } else {
                    s[j - 8] |= (q & 0x0F) << 4;
                }
                s[8 + j % 4] |= (q >> 4) << (2 * (j / 4));
            }
            b.d.set(1.0 / iscale);
        } else {
            b.d.set(0.0);
        }
        let d_all = b.d.get();
        for j in 0..16 {
            let low = if j < 8 { s[j] & 0x0F } else { s[j - 8] >> 4 };
            let high = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
            let sc = (low | (high << 4)) as i32 - 32;
            let d = d_all * sc as f32;
            if d == 0.0 {
                continue;
            }
            for i in 16 * j..16 * j + 16 {
                l[i] = (round_clamped(x[i] / d, -4, 3) + 4) as i8;
            }
        }
        let hmask = &mut b.hmask;
        hmask.fill(0);
        let mut low = [0u8; QK_K];
        for (j, (&q, lo)) in l.iter().zip(low.iter_mut()).enumerate() {
            let mut q = q as u8;
            if q > 3 {
                hmask[j % 32] |= 1 << (j / 32);
                q -= 4;
            }
            *lo = q;
        }
        pack_2bit(&low, &mut b.qs);
        b.scales = s;
    }
}

/// The per-32 weights of Q4_K/Q5_K: the sub-block's RMS plus each |x|.
fn rms_weights(x: &[f32], weights: &mut [f32; 32]) {
    let mut sum_x2 = 0.0f32;
    for &v in x {
        sum_x2 += v * v;
    }
    let av_x = (sum_x2 / 32.0).sqrt();
    for (w, v) in weights.iter_mut().zip(x) {
        *w = av_x + v.abs();
    }
}

/// The shared front half of Q4_K and Q5_K: fits 8 sub-blocks of 32 with
/// `nmax` levels, writes the block's head (`d`, `dmin` and the 12 packed
/// 6-bit scales/mins), and returns the quants re-fitted to the stored scales.
fn scale_min_blocks(x: &[f32], head: KHead<'_>, nmax: i32, rmin: f32, nstep: i32) -> [u8; QK_K] {
    let mut l = [0u8; QK_K];
    let mut weights = [0f32; 32];
    let mut scales = [0f32; 8];
    let mut mins = [0f32; 8];
    let (mut max_scale, mut max_min) = (0.0f32, 0.0f32);
    let xs32 = x.as_chunks::<32>().0;
    let ls32 = l.as_chunks_mut::<32>().0;
    for (j, (xs, ls)) in xs32.iter().zip(ls32.iter_mut()).enumerate() {
        rms_weights(xs, &mut weights);
        (scales[j], mins[j]) = fit_scale_min(nmax, xs, &weights, ls, rmin, 0.1, nstep, false);
        max_scale = keep_max(max_scale, scales[j]);
        max_min = keep_max(max_min, mins[j]);
    }
    let inv_scale = if max_scale > 0.0 {
        63.0 / max_scale
    } else {
        0.0
    };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let KHead { d, dmin, scales: s } = head;
    s.fill(0);
    for j in 0..8 {
        let ls = (nearest_int(inv_scale * scales[j]) as u8).min(63);
        let lm = (nearest_int(inv_min * mins[j]) as u8).min(63);
        if j < 4 {
            s[j] = ls;
            s[j + 4] = lm;
        } else {
            s[j + 4] = (ls & 0x0F) | ((lm & 0x0F) << 4);
            s[j - 4] |= (ls >> 4) << 6;
            s[j] |= (lm >> 4) << 6;
        }
    }
    d.set(max_scale / 63.0);
    dmin.set(max_min / 63.0);
    let (d_all, m_all) = (d.get(), dmin.get());
    let (sc, m) = super::kquants::scales_mins_k4(s);
    for j in 0..8 {
        let d = d_all * sc[j] as f32;
        if d == 0.0 {
            continue;
        }
        let dm = m_all * m[j] as f32;
        for i in 32 * j..32 * j + 32 {
            l[i] = round_clamped((x[i] + dm) / d, 0, nmax) as u8;
        }
    }
    l
}

/// `quantize_row_q4_K_ref`: 8 sub-blocks of 32 fitted with 4-bit quants and a
/// min, then scales and mins as 6-bit fractions of their maxima.
pub(crate) fn quant_q4_k(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK_K).zip(blocks_mut::<BlockQ4K>(dst)) {
        let head = KHead {
            d: &mut b.d,
            dmin: &mut b.dmin,
            scales: &mut b.scales,
        };
        let l = scale_min_blocks(x, head, 15, -1.0, 20);
        let qs = &mut b.qs;
        for j in 0..4 {
            for i in 0..32 {
                qs[32 * j + i] = l[64 * j + i] | (l[64 * j + 32 + i] << 4);
            }
        }
    }
}

/// `quantize_row_q5_K_ref`: as Q4_K with 5-bit quants, the fifth bits in `qh`.
pub(crate) fn quant_q5_k(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK_K).zip(blocks_mut::<BlockQ5K>(dst)) {
        let head = KHead {
            d: &mut b.d,
            dmin: &mut b.dmin,
            scales: &mut b.scales,
        };
        let l = scale_min_blocks(x, head, 31, -0.5, 15);
        let (qh, qs) = (&mut b.qh, &mut b.qs);
        qh.fill(0);
        for j in 0..4 {
            for i in 0..32 {
                let (lo, hi) = (l[64 * j + i], l[64 * j + 32 + i]);
                qh[i] |= ((lo >> 4) << (2 * j)) | ((hi >> 4) << (2 * j + 1));
                qs[32 * j + i] = (lo & 0x0F) | ((hi & 0x0F) << 4);
            }
        }
    }
}

/// `quantize_row_q6_K_ref`: per 16 values a symmetric 6-bit fit, the 16 scales
/// as int8 fractions of the largest (-128 maps to it), then re-quantization
/// against the stored scales.
pub(crate) fn quant_q6_k(src: &[f32], dst: &mut [u8]) {
    for (x, b) in src.chunks_exact(QK_K).zip(blocks_mut::<BlockQ6K>(dst)) {
        let mut l = [0i8; QK_K];
        let mut scales = [0f32; 16];
        let (mut max_abs, mut max_scale) = (0.0f32, 0.0f32);
        let xs16 = x.as_chunks::<16>().0;
        let ls16 = l.as_chunks_mut::<16>().0;
        for (j, (xs, ls)) in xs16.iter().zip(ls16.iter_mut()).enumerate() {
            scales[j] = fit_symmetric(32, xs, ls);
            if scales[j].abs() > max_abs {
                max_abs = scales[j].abs();
                max_scale = scales[j];
            }
        }
        if max_abs < GROUP_MAX_EPS {
            *b = BlockQ6K::zeroed();
            continue;
        }
        let iscale = -128.0 / max_scale;
        b.d.set(1.0 / iscale);
        let d_all = b.d.get();
        for j in 0..16 {
            let sc = nearest_int(iscale * scales[j]).min(127) as i8;
            b.scales[j] = sc;
            let d = d_all * sc as f32;
            if d == 0.0 {
                continue;
            }
            for i in 16 * j..16 * j + 16 {
                l[i] = (round_clamped(x[i] / d, -32, 31) + 32) as i8;
            }
        }
        for h in 0..2 {
            let l = &l[128 * h..128 * h + 128];
            let (ql, qh) = (
                &mut b.ql[64 * h..64 * h + 64],
                &mut b.qh[32 * h..32 * h + 32],
            );
            for i in 0..32 {
                let q = [
                    l[i] as u8,
                    l[i + 32] as u8,
                    l[i + 64] as u8,
                    l[i + 96] as u8,
                ];
                ql[i] = (q[0] & 0x0F) | ((q[2] & 0x0F) << 4);
                ql[32 + i] = (q[1] & 0x0F) | ((q[3] & 0x0F) << 4);
                qh[i] = (q[0] >> 4) | ((q[1] >> 4) << 2) | ((q[2] >> 4) << 4) | ((q[3] >> 4) << 6);
            }
        }
    }
}

/// ggml's `if (v > max) max = v;`: unlike `f32::max`, a NaN never replaces `cur`.
#[inline(always)]
fn keep_max(cur: f32, v: f32) -> f32 {
    if v > cur {
        v
    } else {
        cur
    }
}
