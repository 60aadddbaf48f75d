//! The embedding scheduler: one OS thread takes every embedding request
//! waiting and runs all their texts as one packed job
//! ([`engine::Engine::embed_ids`]), so concurrent requests share forward
//! passes, then hands each request its vectors. A bounded queue holds the
//! requests waiting.

use crate::metrics::Metrics;
use crate::scheduler::Rejected;
use engine::Engine;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use tokio::sync::oneshot;

/// Tokens one packed job takes from the queue at most (a request is never
/// split, so one larger request still goes whole).
const JOB_TOKENS: usize = 32_768;

/// One request's texts, ready to embed, and where its vectors go (full
/// width, in order; or why they could not be made).
pub(crate) struct EmbedJob {
    pub texts: Vec<Vec<u32>>,
    pub reply: oneshot::Sender<Result<Vec<Vec<f32>>, String>>,
}

/// The handle the HTTP side queues embedding requests on.
pub(crate) struct Batcher {
    queue: SyncSender<EmbedJob>,
}

impl Batcher {
    /// Start the thread, with room for `capacity` waiting requests.
    pub(crate) fn start(
        engine: Arc<Engine>,
        capacity: usize,
        metrics: Arc<Metrics>,
    ) -> std::io::Result<Self> {
        let (queue, jobs) = sync_channel(capacity.max(1));
        std::thread::Builder::new()
            .name("hearth-embed".into())
            .spawn(move || run(&engine, &jobs, &metrics))?;
        Ok(Self { queue })
    }

    /// Queue a request, or say why not.
    pub(crate) fn submit(&self, job: EmbedJob) -> Result<(), Rejected> {
        self.queue.try_send(job).map_err(|e| match e {
            TrySendError::Full(_) => Rejected::QueueFull,
            TrySendError::Disconnected(_) => Rejected::ShuttingDown,
        })
    }
}

/// Until every sender is gone: take the requests waiting, embed them
/// together, answer each.
fn run(engine: &Engine, jobs: &Receiver<EmbedJob>, metrics: &Metrics) {
    while let Ok(first) = jobs.recv() {
        let mut tokens = count(&first);
        let mut batch = vec![first];
        while tokens < JOB_TOKENS {
            match jobs.try_recv() {
                Ok(job) => {
                    tokens += count(&job);
                    batch.push(job);
                }
                Err(_) => break,
            }
        }
        // Requests whose client left are not worked on.
        batch.retain(|j| !j.reply.is_closed());
        let sizes: Vec<usize> = batch.iter().map(|j| j.texts.len()).collect();
        let texts: Vec<Vec<u32>> = batch
            .iter_mut()
            .flat_map(|j| std::mem::take(&mut j.texts))
            .collect();
        if texts.is_empty() {
            continue;
        }
        let result = catch_unwind(AssertUnwindSafe(|| {
            engine.embed_ids(&texts, &mut |_, _| {})
        }));
        let mut vectors = match result {
            Ok(Ok(v)) => v.into_iter(),
            Ok(Err(e)) => {
                fail_all(batch, &e.to_string());
                continue;
            }
            Err(_) => {
                metrics.panics.fetch_add(1, Ordering::Relaxed);
                fail_all(batch, "internal error while embedding");
                continue;
            }
        };
        for (job, n) in batch.into_iter().zip(sizes) {
            let _ = job.reply.send(Ok(vectors.by_ref().take(n).collect()));
        }
    }
}

/// Tokens of a request's texts.
fn count(job: &EmbedJob) -> usize {
    job.texts.iter().map(Vec::len).sum()
}

fn fail_all(batch: Vec<EmbedJob>, why: &str) {
    for job in batch {
        let _ = job.reply.send(Err(why.to_string()));
    }
}
