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
use nn::{Linear, Weight};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// Whether loads make the decode layout (`HEARTH_INTERLEAVE=0` says no).
pub(crate) fn enabled() -> bool {
    std::env::var("HEARTH_INTERLEAVE")
        .ok()
        .is_none_or(|v| v != "0")
}

/// The nice value of the thread that makes the layout after a load: below
/// the threads that answer, so the first prompt is not slowed much by it.
const BACKGROUND_NICE: i32 = 19;

/// The matrices a decode step multiplies by that the kernels in use read
/// faster interleaved: the layers', and the head where `with_head` (a model
/// that pools its states into an embedding never multiplies by it). Tied
/// token embeddings are made the head's clone first, so they share its
/// layout (a lookup copies its row's group out). Untied embeddings and the
/// per-layer tables stay as they are: rows of them are only looked up.
fn to_interleave(weights: &mut Weights, with_head: bool) -> Vec<Weight> {
    if weights
        .output
        .weight
        .same_tensor(&weights.token_embd.weight)
    {
        weights.token_embd = weights.output.clone();
    }
    let mut all: Vec<Weight> = weights
        .layers
        .iter_mut()
        .flat_map(layer_linears)
        .map(|l| l.weight.clone())
        .collect();
    if with_head {
        all.push(weights.output.weight.clone());
    }
    all
}

/// Rearranges every matrix [`to_interleave`] names before returning; the
/// bytes rearranged.
pub(crate) fn interleave(
    weights: &mut Weights,
    file: &GgufFile,
    with_head: bool,
) -> Result<usize, ModelError> {
    let mut all = to_interleave(weights, with_head);
    let head = match with_head {
        true => all.pop(),
        false => None,
    };
    let per = all.len().div_ceil(threads::default_threads().max(1)).max(1);
    // Each thread rearranges its share of the layers' matrices.
    let layers = std::thread::scope(|s| {
        let jobs: Vec<_> = all
            .chunks(per)
            .map(|part| {
                s.spawn(move || {
                    part.iter()
                        .map(|w| w.interleave(file, true).map_err(ModelError::from))
                        .sum()
                })
            })
            .collect();
        jobs.into_iter()
            .map(|j| j.join().unwrap_or(Ok(0)))
            .sum::<Result<usize, ModelError>>()
    })?;
    // The head is shared out over the threads by `quant::interleave` itself.
    let head = match head {
        Some(w) => w.interleave(file, true)?,
        None => 0,
    };
    Ok(layers + head)
}

/// The decode layout being made after a load, by a thread of its own;
/// stopped (between two matrices) and waited for when dropped.
pub(crate) struct Background {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Background {
    /// Whether the thread is still making it.
    pub(crate) fn pending(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Starts making the layout of every matrix [`to_interleave`] names on a
/// thread below the others' priority, head first (the largest, read by
/// every step). Until a matrix's layout is made its products read the
/// file's, with the same results. `None` when no thread can be started:
/// the file's layout then serves throughout.
pub(crate) fn interleave_later(
    weights: &mut Weights,
    file: &Arc<GgufFile>,
    with_head: bool,
) -> Option<Background> {
    let mut all = to_interleave(weights, with_head);
    all.reverse();
    let stop = Arc::new(AtomicBool::new(false));
    let (file, halt) = (Arc::clone(file), Arc::clone(&stop));
    let thread = std::thread::Builder::new()
        .name("hearth-layout".into())
        .spawn(move || {
            // On Linux a nice value is the thread's own (and the threads
            // `quant::interleave` starts inherit it).
            #[cfg(target_os = "linux")]
            let _ = rustix::process::setpriority_process(
                Some(rustix::thread::gettid()),
                BACKGROUND_NICE,
            );
            for w in &all {
                if halt.load(Ordering::Relaxed) {
                    return;
                }
                // A matrix that cannot be rearranged keeps the file's
                // layout, which is as exact. Its file pages stay while it
                // is rearranged (products may read them meanwhile: given
                // back as they are read, they would be faulted in again),
                // and go once its layout is set: nothing reads them then.
                let _ = w.interleave(&file, false);
                w.give_back(&file);
            }
        })
        .ok()?;
    Some(Background {
        stop,
        thread: Some(thread),
    })
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
