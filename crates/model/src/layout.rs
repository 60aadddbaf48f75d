//! The decode layout made at load: the layers' matrices and the output head
//! rearranged into rows interleaved by eight ([`quant::interleave`]) where
//! their type has the layout (Q4_K, Q6_K, Q5_0, Q8_0), which the x86 decode kernels
//! read as one stream with a fraction of the work per block. The products
//! keep their bits, so nothing downstream can tell.
//! `HEARTH_INTERLEAVE=0` keeps the file's layout (to measure the two side by
//! side).

use crate::weights::{DecoderLayer, Weights};
use crate::ModelError;
use gguf::GgufFile;
use nn::Linear;

/// Whether loads make the decode layout (`HEARTH_INTERLEAVE=0` says no).
pub(crate) fn enabled() -> bool {
    std::env::var("HEARTH_INTERLEAVE")
        .ok()
        .is_none_or(|v| v != "0")
}

/// Rearranges every matrix a decode step multiplies by that the kernels in
/// use read faster interleaved; returns the bytes rearranged. The head is
/// one of them where `with_head` (a model that pools its states into an
/// embedding never multiplies by it); tied token embeddings then share its
/// layout (a lookup copies its row's group out). Untied embeddings and the
/// per-layer tables stay as they are: rows of them are only looked up.
pub(crate) fn interleave(
    weights: &mut Weights,
    file: &GgufFile,
    with_head: bool,
) -> Result<usize, ModelError> {
    let tied = weights
        .output
        .weight
        .same_tensor(&weights.token_embd.weight);
    let mut linears: Vec<&mut Linear> = weights.layers.iter_mut().flat_map(layer_linears).collect();
    let per = linears
        .len()
        .div_ceil(threads::default_threads().max(1))
        .max(1);
    // Each thread rearranges its share of the matrices.
    let layers = std::thread::scope(|s| {
        let jobs: Vec<_> = linears
            .chunks_mut(per)
            .map(|part| {
                s.spawn(move || {
                    part.iter_mut()
                        .map(|l| l.weight.interleave(file).map_err(ModelError::from))
                        .sum()
                })
            })
            .collect();
        jobs.into_iter()
            .map(|j| j.join().unwrap_or(Ok(0)))
            .sum::<Result<usize, ModelError>>()
    })?;
    // The head is shared out over the threads by `quant::interleave` itself.
    let head = match with_head {
        true => weights.output.weight.interleave(file)?,
        false => 0,
    };
    if tied {
        weights.token_embd = weights.output.clone();
    }
    Ok(layers + head)
}

/// The matrices of one layer that a decode step multiplies by.
fn layer_linears(l: &mut DecoderLayer) -> impl Iterator<Item = &mut Linear> {
    let per_layer = l.per_layer.as_mut().map(|p| [&mut p.gate, &mut p.proj]);
    let laurel = l.laurel.as_mut().map(|p| [&mut p.left, &mut p.right]);
    let (a, m) = (&mut l.attention, &mut l.mlp);
    [Some(&mut a.q), a.k.as_mut(), a.v.as_mut(), Some(&mut a.o)]
        .into_iter()
        .flatten()
        .chain([&mut m.gate, &mut m.up, &mut m.down])
        .chain(per_layer.into_iter().flatten())
        .chain(laurel.into_iter().flatten())
}
