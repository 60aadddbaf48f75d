//! The norms: RMSNorm (Gemma's, with its weight as stored, or none) and
//! LayerNorm (the vision and audio towers'), one row at a time or over the
//! rows of a batch in parallel.

use crate::{par_rows, PAR_MIN_ROWS};

/// `x <- x / rms(x) * w`, where GGUF Gemma norm weights already hold `1 + w`.
/// The sum of squares is accumulated in f64, as ggml does, so long rows do
/// not lose precision.
pub fn rms_norm(x: &mut [f32], w: &[f32], eps: f32) {
    let scale = 1.0 / ((sum_squares(x) / x.len() as f64) as f32 + eps).sqrt();
    for (v, &g) in x.iter_mut().zip(w) {
        *v = *v * scale * g;
    }
}

/// `x <- x / rms(x)`: RMSNorm without a weight (Gemma 4's value norm).
pub fn rms_norm_plain(x: &mut [f32], eps: f32) {
    let scale = 1.0 / ((sum_squares(x) / x.len() as f64) as f32 + eps).sqrt();
    x.iter_mut().for_each(|v| *v *= scale);
}

/// The sum of `x`'s squares in f64 (each square exact), in eight partial
/// sums (element `i` into sum `i % 8`) added pairwise at the end: a fixed
/// order, the same on every CPU. One running sum made each add wait on the
/// last (1152 of them for a 1B's row), and a decode step's norms run on one
/// thread while the others wait.
fn sum_squares(x: &[f32]) -> f64 {
    let mut acc = [0.0f64; 8];
    let chunks = x.chunks_exact(8);
    let tail = chunks.remainder();
    for c in chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a += f64::from(v) * f64::from(v);
        }
    }
    for (a, &v) in acc.iter_mut().zip(tail) {
        *a += f64::from(v) * f64::from(v);
    }
    ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]))
}

/// `h = rms_norm(x) * w` row by row: the norm in front of a block. The copy
/// runs in the same parallel pass as the norm: a prefill's rows are
/// megabytes, and one thread copying them would hold the others.
#[track_caller]
pub fn pre_norm(pool: &threads::ThreadPool, x: &[f32], h: &mut [f32], w: &[f32], eps: f32) {
    par_rows(pool, h, w.len(), |i, row| {
        row.copy_from_slice(&x[i * w.len()..(i + 1) * w.len()]);
        rms_norm(row, w, eps)
    });
}

/// `x += rms_norm(o) * w` row by row: Gemma's norm after a block, then the
/// residual add, both in one parallel pass over the rows.
#[track_caller]
pub fn post_norm_add(
    pool: &threads::ThreadPool,
    o: &mut [f32],
    x: &mut [f32],
    w: &[f32],
    eps: f32,
) {
    let n = w.len();
    let norm_add = |o: &mut [f32], x: &mut [f32]| {
        for (o, x) in o.chunks_exact_mut(n).zip(x.chunks_exact_mut(n)) {
            rms_norm(o, w, eps);
            x.iter_mut().zip(o.iter()).for_each(|(xv, &ov)| *xv += ov);
        }
    };
    let rows = o.len() / n.max(1);
    if rows < PAR_MIN_ROWS || pool.threads() == 1 {
        return norm_add(o, x);
    }
    let per = rows.div_ceil(pool.threads());
    // Each task takes its own pair of row runs out of its own slot.
    let pairs: Vec<std::sync::Mutex<(&mut [f32], &mut [f32])>> = o
        .chunks_mut(per * n)
        .zip(x.chunks_mut(per * n))
        .map(std::sync::Mutex::new)
        .collect();
    pool.run(pairs.len(), |t| {
        let mut pair = pairs[t].lock().unwrap_or_else(|p| p.into_inner());
        let (o, x) = &mut *pair;
        norm_add(o, x);
    });
}

/// A row's mean and population variance, in f64 (two passes).
pub(crate) fn mean_var(x: &[f32]) -> (f64, f64) {
    let n = x.len().max(1) as f64;
    let mean = x.iter().map(|&v| f64::from(v)).sum::<f64>() / n;
    let var = x
        .iter()
        .map(|&v| (f64::from(v) - mean) * (f64::from(v) - mean))
        .sum::<f64>()
        / n;
    (mean, var)
}

/// `x <- (x - mean) / sqrt(var + eps) · w (+ b)` over one row (LayerNorm,
/// biased variance), the statistics in f64: a tower's rows are short, and
/// the reference's two-pass f32 variance agrees with this to rounding.
pub fn layer_norm(x: &mut [f32], w: &[f32], b: Option<&[f32]>, eps: f32) {
    let (mean, var) = mean_var(x);
    let inv = (1.0 / (var + f64::from(eps)).sqrt()) as f32;
    let mean = mean as f32;
    match b {
        Some(b) => {
            for ((v, &g), &c) in x.iter_mut().zip(w).zip(b) {
                *v = (*v - mean) * inv * g + c;
            }
        }
        None => {
            for (v, &g) in x.iter_mut().zip(w) {
                *v = (*v - mean) * inv * g;
            }
        }
    }
}

/// `out = layer_norm(x) · w + b` row by row, in parallel.
pub fn layer_norm_rows(
    pool: &threads::ThreadPool,
    x: &[f32],
    out: &mut [f32],
    w: &[f32],
    b: Option<&[f32]>,
    eps: f32,
) {
    let d = w.len();
    par_rows(pool, &mut out[..x.len()], d, |i, row| {
        row.copy_from_slice(&x[i * d..(i + 1) * d]);
        layer_norm(row, w, b, eps)
    });
}

/// `x <- rms_norm(x) · w` (or with no weight) row by row, in parallel.
pub fn rms_norm_rows(
    pool: &threads::ThreadPool,
    x: &mut [f32],
    d: usize,
    w: Option<&[f32]>,
    eps: f32,
) {
    par_rows(pool, x, d, |_, row| match w {
        Some(w) => rms_norm(row, w, eps),
        None => rms_norm_plain(row, eps),
    });
}

/// Group norm over each time step's `width` values (frequency × channel,
/// channel fastest), with mean and variance accumulated over time: step
/// `t` uses the mean of steps `0..=t`, and the sum over those steps of
/// their squared distances from their own running means. Then a weight per
/// channel (Gemma 3n's audio input convolutions).
pub fn cumulative_group_norm(x: &mut [f32], width: usize, channels: usize, w: &[f32], eps: f32) {
    let (mut sum, mut sq, mut count) = (0.0f64, 0.0f64, 0.0f64);
    for row in x.chunks_exact_mut(width) {
        sum += row.iter().map(|&v| f64::from(v)).sum::<f64>();
        count += width as f64;
        let mean = sum / count;
        sq += row
            .iter()
            .map(|&v| (f64::from(v) - mean) * (f64::from(v) - mean))
            .sum::<f64>();
        let inv = 1.0 / ((sq / count) as f32 + eps).sqrt();
        let mean = mean as f32;
        for (i, v) in row.iter_mut().enumerate() {
            *v = (*v - mean) * inv * w[i % channels];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sum_squares_is_close_to_the_running_sum_and_fixed() {
        let mut x = 0x2545_f491_4f6c_dd1d_u64;
        for n in [0usize, 1, 7, 8, 9, 640, 1152, 2561] {
            let v: Vec<f32> = (0..n)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    ((x >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 40.0
                })
                .collect();
            let running: f64 = v.iter().map(|&a| f64::from(a) * f64::from(a)).sum();
            let got = sum_squares(&v);
            assert!(
                (got - running).abs() <= running * 1e-14,
                "n {n}: {got} vs {running}"
            );
            // By hand for the order: lane sums, then the pairwise tree.
            let mut lanes = [0.0f64; 8];
            for (i, &a) in v.iter().enumerate() {
                lanes[i % 8] += f64::from(a) * f64::from(a);
            }
            let want = ((lanes[0] + lanes[4]) + (lanes[2] + lanes[6]))
                + ((lanes[1] + lanes[5]) + (lanes[3] + lanes[7]));
            assert_eq!(got.to_bits(), want.to_bits(), "n {n}");
        }
    }

    #[test]
    fn rms_norm_unit_rows() {
        let mut x = vec![3.0, 4.0];
        rms_norm(&mut x, &[1.0, 2.0], 0.0);
        let r = (12.5f32).sqrt();
        assert!((x[0] - 3.0 / r).abs() < 1e-6 && (x[1] - 8.0 / r).abs() < 1e-6);
    }

    /// LayerNorm centres and scales: mean 0 and variance 1 before the
    /// weight, then the weight and bias per element.
    #[test]
    fn layer_norm_standardises() {
        let x = [1.0f32, 2.0, 3.0, 6.0];
        let (w, b) = ([1.0f32, 2.0, 1.0, 1.0], [0.0f32, 0.0, 0.5, 0.0]);
        let mut y = x;
        layer_norm(&mut y, &w, Some(&b), 0.0);
        let (mean, sd) = (3.0f32, 3.5f32.sqrt());
        for i in 0..4 {
            let want = (x[i] - mean) / sd * w[i] + b[i];
            assert!((y[i] - want).abs() < 1e-6, "{i}: {} vs {want}", y[i]);
        }
        let mut plain = x;
        layer_norm(&mut plain, &w, None, 0.0);
        assert!((plain[2] - (y[2] - 0.5)).abs() < 1e-6);
        let pool = threads::ThreadPool::new(2);
        let rows: Vec<f32> = (0..40 * 4).map(|i| (i % 7) as f32 - 3.0).collect();
        let mut out = vec![0.0f32; rows.len()];
        layer_norm_rows(&pool, &rows, &mut out, &w, Some(&b), 1e-6);
        for (r, o) in rows.chunks_exact(4).zip(out.chunks_exact(4)) {
            let mut want = r.to_vec();
            layer_norm(&mut want, &w, Some(&b), 1e-6);
            assert_eq!(o, &want[..]);
        }
    }
}
