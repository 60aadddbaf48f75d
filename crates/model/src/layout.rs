//! The decode layout made at load: the layers' Q4_K matrices rearranged
//! into rows interleaved by eight ([`quant::interleave`]), which the x86
//! decode kernels read as one stream with a fraction of the work per block.
//! The products keep their bits, so nothing downstream can tell.
//! `HEARTH_INTERLEAVE=0` keeps the file's layout (to measure the two side by
//! side).

use crate::weights::{LayerWeights, Linear, Weights};
use crate::ModelError;
use gguf::GgufFile;

/// Whether loads make the decode layout (`HEARTH_INTERLEAVE=0` says no).
pub(crate) fn enabled() -> bool {
    std::env::var("HEARTH_INTERLEAVE")
        .ok()
        .is_none_or(|v| v != "0")
}

/// Rearranges every layer matrix the decode kernels read faster
/// interleaved; returns the bytes rearranged. The embeddings and the output
/// head stay as they are: rows of them are looked up one by one.
pub(crate) fn interleave(weights: &mut Weights, file: &GgufFile) -> Result<usize, ModelError> {
    let mut linears: Vec<&mut Linear> = weights.layers.iter_mut().flat_map(layer_linears).collect();
    let per = linears
        .len()
        .div_ceil(quant::default_threads().max(1))
        .max(1);
    // Each thread rearranges its share of the matrices.
    std::thread::scope(|s| {
        let jobs: Vec<_> = linears
            .chunks_mut(per)
            .map(|part| s.spawn(move || part.iter_mut().map(|l| l.interleave(file)).sum()))
            .collect();
        jobs.into_iter()
            .map(|j| j.join().unwrap_or(Ok(0)))
            .sum::<Result<usize, ModelError>>()
    })
}

/// The matrices of one layer that a decode step multiplies by.
fn layer_linears(l: &mut LayerWeights) -> impl Iterator<Item = &mut Linear> {
    let per_layer = l.per_layer.as_mut().map(|p| [&mut p.gate, &mut p.proj]);
    let laurel = l.laurel.as_mut().map(|p| [&mut p.left, &mut p.right]);
    [Some(&mut l.q), l.k.as_mut(), l.v.as_mut(), Some(&mut l.o)]
        .into_iter()
        .flatten()
        .chain([&mut l.gate, &mut l.up, &mut l.down])
        .chain(per_layer.into_iter().flatten())
        .chain(laurel.into_iter().flatten())
}
