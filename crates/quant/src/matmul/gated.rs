//! A gated MLP's first half: `gate = act(W_gate x, W_up x)` row by row, with
//! `up = W_up x` kept.

use super::acts::{BlockSink, Ready};
use super::plan::{DecodeSplit, PanelFormat, SharedOut, GEMM_MIN_BATCH};
use super::rows::quant_rows;
use super::{Gate, Matrix};
use crate::{simd, QuantError};
use threads::ThreadPool;

/// The gated product (shapes checked, `batch > 0`). For the few rows of a
/// decode step it is one parallel operation in which each task computes
/// the same range of gate and up rows and applies `act` to them at once,
/// so the activation (GeGLU's tanh over thousands of values) is spread over
/// the threads instead of running on one between two products; those tasks
/// also quantize each block of the output for `gate.next` as they complete
/// it. A prefill batch applies `act` after the panel product, row by row,
/// and where `gate.next` takes the panel product the same tasks quantize
/// each row for it. The results are those of the two products followed by
/// `act` on whole rows, to the bit.
#[track_caller]
#[allow(clippy::too_many_arguments)]
pub(super) fn product(
    pool: &ThreadPool,
    [gate_w, up_w]: [&Matrix; 2],
    x: &[f32],
    batch: usize,
    outs: &mut [&mut [f32]],
    scratch: &mut Vec<u8>,
    input: Option<Ready<'_>>,
    gate: Gate<'_>,
) -> Result<(), QuantError> {
    let k = simd::best();
    let integer = |w: &Matrix| k.quantized(w.ty);
    if batch < GEMM_MIN_BATCH && integer(gate_w) && integer(up_w) {
        return fused(
            pool,
            k,
            [gate_w, up_w],
            x,
            batch,
            outs,
            scratch,
            input,
            gate,
        );
    }
    super::products(pool, &[gate_w, up_w], x, batch, outs, scratch, input)?;
    let rows = gate_w.rows;
    let n = batch * rows;
    let [out_gate, out_up] = outs else {
        return Err(two_outputs());
    };
    let Gate { act, next } = gate;
    // A prefill batch whose next product is a panel product: the tasks
    // that apply `act` to a row quantize it for that product at once,
    // from their cache, in the same parallel operation.
    let panel_next = next.and_then(|(w, prepared)| {
        let format = PanelFormat::for_product(k, w, batch)?;
        (w.cols == rows).then_some((format, prepared))
    });
    let (g, u) = (&mut out_gate[..n], &out_up[..n]);
    if let Some((format, prepared)) = panel_next {
        let make = |i: usize, g: &mut [f32]| act(g, &u[i * rows..(i + 1) * rows]);
        prepared.make_panel_rows(pool, format, g, &make);
        return Ok(());
    }
    let rows_of = |g: &mut [f32], u: &[f32]| {
        g.chunks_exact_mut(rows.max(1))
            .zip(u.chunks_exact(rows.max(1)))
            .for_each(|(g, u)| act(g, u));
    };
    if batch < GEMM_MIN_BATCH || rows == 0 {
        rows_of(g, u);
    } else {
        let per = batch.div_ceil(pool.threads());
        pool.for_each_chunk_mut(g, per * rows, |chunk, g| {
            rows_of(g, &u[chunk * per * rows..])
        });
    }
    Ok(())
}

/// The decode step's gated product as one parallel operation (see
/// [`product`]).
#[track_caller]
#[allow(clippy::too_many_arguments)]
fn fused(
    pool: &ThreadPool,
    k: &simd::Kernels,
    ws: [&Matrix; 2],
    x: &[f32],
    batch: usize,
    outs: &mut [&mut [f32]],
    scratch: &mut Vec<u8>,
    input: Option<Ready<'_>>,
    gate: Gate<'_>,
) -> Result<(), QuantError> {
    let rows = ws[0].rows;
    let acts = super::acts::quantize_once(pool, &ws, x, batch, scratch, input.as_ref())?;
    let [out_gate, out_up] = outs else {
        return Err(two_outputs());
    };
    let sh_g = SharedOut::of(out_gate, batch * rows);
    let sh_u = SharedOut::of(out_up, batch * rows);
    let split = DecodeSplit::new(pool.threads(), rows);
    let Gate { act, next } = gate;
    let sink = next.and_then(|(w, prepared)| BlockSink::new(k, w, rows, batch, prepared));
    pool.run(split.parts(), |t| {
        let range = split.range(t);
        if range.is_empty() {
            return;
        }
        quant_rows(k, ws[0], acts[0], batch, range.clone(), &sh_g);
        quant_rows(k, ws[1], acts[1], batch, range.clone(), &sh_u);
        for b in 0..batch {
            let at = b * rows + range.start;
            {
                // SAFETY: rows `range` of every batch row belong to this task
                // alone, and these are the only slices of them alive.
                let (g, u) = unsafe { (sh_g.slice(at, range.len()), sh_u.slice(at, range.len())) };
                act(g, u);
            }
            if let Some(sink) = &sink {
                // SAFETY: this task's values of row b are final and its
                // slices of them gone (above); so are those of every task
                // that counted its part of a block before.
                unsafe { sink.done(k.gemm, &sh_g, rows, b, range.clone()) };
            }
        }
    });
    if let Some(sink) = sink {
        sink.finish();
    }
    Ok(())
}

/// The error of a gated product handed other than two outputs (the shapes
/// are checked before, so it is never returned).
fn two_outputs() -> QuantError {
    QuantError::Shape("a gated product writes two outputs".into())
}
