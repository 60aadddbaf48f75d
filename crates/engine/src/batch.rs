//! Decoding several sessions in one forward step.
//!
//! A decode step of a small model is dominated by reading every weight once
//! (the output head of Gemma 3 270M alone is 178 MB), so stepping N sessions
//! one after the other reads the weights N times. [`BatchDecoder::step`] feeds
//! the token each session sampled last in one [`Model::forward_multi`] and
//! computes all their logits in one product with the head, then samples each
//! with its own sampler: N tokens for about the cost of one.

use crate::{Decoding, Engine, EngineError, Sampler, Session, Step};
use model::{Model, ModelError, Scratch, SeqInput};
use std::sync::Arc;

/// Buffers for stepping up to `max_seqs` sessions together.
pub struct BatchDecoder {
    model: Arc<Model>,
    scratch: Scratch,
    n_ctx: usize,
}

impl std::fmt::Debug for BatchDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchDecoder")
            .field("max_seqs", &self.scratch.max_batch())
            .field("n_ctx", &self.n_ctx)
            .finish()
    }
}

/// One session's part in a [`BatchDecoder::step`].
pub struct BatchItem<'a> {
    /// The session that holds the sequence's cache.
    pub session: &'a mut Session,
    /// Its generation, prefilled.
    pub decoding: &'a mut Decoding,
    /// Its own sampler (seed and settings stay per request).
    pub sampler: &'a mut Sampler,
}

impl Engine {
    /// A decoder that steps up to `max_seqs` sessions of this engine (of
    /// its context) in one forward.
    pub fn batch_decoder(&self, max_seqs: usize) -> BatchDecoder {
        let n_ctx = self.n_ctx();
        BatchDecoder {
            model: Arc::clone(&self.model),
            scratch: self.model.new_scratch(n_ctx, max_seqs.max(1)),
            n_ctx,
        }
    }

    /// Bytes a [`BatchDecoder`] for `max_seqs` sessions takes, their logits
    /// included.
    pub fn batch_decoder_bytes(&self, max_seqs: usize) -> usize {
        let n_ctx = self.n_ctx();
        let cfg = self.model.config();
        let max_seqs = max_seqs.max(1);
        model::Scratch::bytes_for(cfg, n_ctx, max_seqs, self.model.threads())
            + (max_seqs - 1) * cfg.vocab * std::mem::size_of::<f32>()
    }
}

impl BatchDecoder {
    /// Advance every item by one token, as [`Session::step`] would: feed
    /// the token each sampled last, then sample its next one and apply its
    /// stop conditions. The fed tokens of all items go through one forward
    /// step (a few, when there are more items than `max_seqs`), and the
    /// logits of all items, those just prefilled included, come from one
    /// product with the output head.
    ///
    /// `on_step(i, step)` gets item `i`'s outcome, once per item. A failed
    /// forward clears the sessions it touched, as [`Session::step`] does.
    pub fn step(
        &mut self,
        items: &mut [BatchItem<'_>],
        mut on_step: impl FnMut(usize, Result<Step<'_>, EngineError>),
    ) {
        // (item, token) of the items whose last sample goes into the batch.
        let mut feed: Vec<(usize, u32)> = Vec::with_capacity(items.len());
        // Items just prefilled: their last prompt row waits in their own
        // scratch, ready for the head.
        let mut fresh: Vec<usize> = Vec::new();
        for (i, it) in items.iter_mut().enumerate() {
            let d = &mut *it.decoding;
            let ours = it.session.runs(&self.model)
                && it.session.n_ctx() <= self.n_ctx
                && d.prefill_done()
                && !d.speculates();
            if !ours {
                // Not something this decoder's buffers fit, or a speculating
                // generation (its own verifying batch): step it alone.
                on_step(i, it.session.step(d, it.sampler));
                continue;
            }
            let room = it.session.has_room();
            match d.take_pending() {
                Some(id) if room => feed.push((i, id)),
                None if !d.is_done() && room && it.session.last_hidden().is_some() => fresh.push(i),
                // Ended, or full (sampling ends it with `Length`).
                _ => on_step(i, it.session.sample_from(d, it.sampler, None)),
            }
        }
        let mut groups: Vec<&[(usize, u32)]> = feed.chunks(self.scratch.max_batch()).collect();
        if groups.is_empty() && !fresh.is_empty() {
            groups.push(&[]);
        }
        for (g, group) in groups.into_iter().enumerate() {
            // The fresh items ride with the first group.
            let fresh: &[usize] = if g == 0 { &fresh } else { &[] };
            if !group.is_empty() {
                if let Err(e) = self.forward(items, group) {
                    // The caches may hold part of the step: start them over.
                    for &(i, _) in group {
                        items[i].session.reset();
                        on_step(i, Err(batch_error(&e)));
                    }
                    for &i in fresh {
                        let it = &mut items[i];
                        on_step(i, it.session.sample_from(it.decoding, it.sampler, None));
                    }
                    continue;
                }
                for &(i, id) in group {
                    items[i].session.fed(id);
                }
            }
            let logits = {
                let extra: Vec<&[f32]> = fresh
                    .iter()
                    .filter_map(|&i| items[i].session.last_hidden())
                    .collect();
                if extra.len() != fresh.len() {
                    Err(ModelError::BadBatch("a prefilled row is missing".into()))
                } else if group.is_empty() {
                    self.model
                        .head_logits(&mut self.scratch, model::BatchRows::None, &extra)
                } else {
                    self.model.head_logits(
                        &mut self.scratch,
                        model::BatchRows::LastOfEachSequence,
                        &extra,
                    )
                }
            };
            let vocab = self.model.config().vocab;
            let order = group.iter().map(|&(i, _)| i).chain(fresh.iter().copied());
            match logits {
                Ok(logits) => {
                    for (i, row) in order.zip(logits.chunks_exact_mut(vocab)) {
                        let it = &mut items[i];
                        on_step(
                            i,
                            it.session.sample_from(it.decoding, it.sampler, Some(row)),
                        );
                    }
                }
                Err(e) => {
                    for i in order {
                        on_step(i, Err(batch_error(&e)));
                    }
                }
            }
        }
    }

    /// One forward step over the tokens of `group`, each into its item's
    /// cache.
    fn forward(
        &mut self,
        items: &mut [BatchItem<'_>],
        group: &[(usize, u32)],
    ) -> Result<(), ModelError> {
        let ids: Vec<[u32; 1]> = group.iter().map(|&(_, id)| [id]).collect();
        let mut inputs: Vec<SeqInput<'_>> = Vec::with_capacity(group.len());
        let mut next = group.iter().zip(&ids).peekable();
        for (i, it) in items.iter_mut().enumerate() {
            if let Some((_, tokens)) = next.next_if(|((j, _), _)| *j == i) {
                inputs.push(it.session.batch_input(tokens));
            }
        }
        self.model.forward_multi(&mut inputs, &mut self.scratch)
    }
}

/// The error every item of a failed batch gets (model errors are not Clone).
fn batch_error(e: &ModelError) -> EngineError {
    EngineError::Model(ModelError::BadBatch(format!(
        "the batched step failed: {e}"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{FinishReason, Generation};
    use crate::{GenerateOptions, GenerationRequest, RunOptions, SamplingParams};

    const TINY: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/fixtures/tiny/gemma3/model-f32.gguf"
    );

    fn opts(max_tokens: usize, stop: &[&str]) -> GenerateOptions {
        GenerateOptions {
            max_tokens,
            stop: stop.iter().map(|s| s.to_string()).collect(),
            stop_on_eog: true,
            render_special: false,
            speculation: None,
        }
    }

    struct Req {
        prompt: &'static str,
        params: SamplingParams,
        opts: GenerateOptions,
        /// The batched step at which it joins.
        join: usize,
    }

    /// Seeded sampling, greedy, a stop string and different lengths, two
    /// of them joining late.
    fn mixed_requests() -> [Req; 4] {
        let seeded = |seed| SamplingParams {
            seed,
            ..SamplingParams::default()
        };
        [
            Req {
                prompt: "Once upon a time there was a little fox who lived",
                params: seeded(1),
                opts: opts(40, &[]),
                join: 0,
            },
            Req {
                prompt: "Hello",
                params: SamplingParams::greedy(),
                opts: opts(25, &[]),
                join: 0,
            },
            Req {
                prompt: "The sky is",
                params: seeded(7),
                opts: opts(30, &["e"]),
                join: 3,
            },
            Req {
                prompt: "1 2 3 4 5 6 7 8 9 10 11 12",
                params: seeded(9),
                opts: opts(12, &[]),
                join: 5,
            },
        ]
    }

    /// What `Session::run` gives the request alone.
    fn generate_alone(engine: &Engine, r: &Req) -> Generation {
        let ids = engine.tokenizer().encode(r.prompt, true, true);
        let mut s = engine.session();
        let mut sampler = Sampler::new(r.params.clone());
        let d = s
            .begin(GenerationRequest::new(&ids, &r.opts), &sampler)
            .unwrap();
        s.run(d, &mut sampler, |_| true).unwrap()
    }

    /// The requests' sessions stepped together, and what the steps handed
    /// out to each.
    struct Batch {
        sessions: Vec<Session>,
        samplers: Vec<Sampler>,
        /// Each request's generation, from the step it joins at.
        decodings: Vec<Option<Decoding>>,
        texts: Vec<String>,
        finishes: Vec<Option<FinishReason>>,
    }

    impl Batch {
        fn new(engine: &Engine, reqs: &[Req]) -> Self {
            Self {
                sessions: reqs.iter().map(|_| engine.session()).collect(),
                samplers: reqs
                    .iter()
                    .map(|r| Sampler::new(r.params.clone()))
                    .collect(),
                decodings: reqs.iter().map(|_| None).collect(),
                texts: vec![String::new(); reqs.len()],
                finishes: vec![None; reqs.len()],
            }
        }

        /// Begins and prefills the requests that join at `step`.
        fn join(&mut self, engine: &Engine, reqs: &[Req], step: usize) {
            for (j, r) in reqs.iter().enumerate() {
                if r.join == step {
                    let ids = engine.tokenizer().encode(r.prompt, true, true);
                    let request = GenerationRequest::new(&ids, &r.opts);
                    let mut d = self.sessions[j].begin(request, &self.samplers[j]).unwrap();
                    assert!(self.sessions[j].prefill(&mut d, usize::MAX).unwrap());
                    self.decodings[j] = Some(d);
                }
            }
        }

        /// Steps every unfinished generation once with `decoder`, keeping
        /// what each step hands out. False, and no step, once none is left
        /// after the late joiners' steps.
        fn step(&mut self, decoder: &mut BatchDecoder, step: usize) -> bool {
            let Self {
                sessions,
                samplers,
                decodings,
                texts,
                finishes,
            } = self;
            let mut which = Vec::new();
            let mut items = Vec::new();
            for (j, ((session, d), sampler)) in sessions
                .iter_mut()
                .zip(decodings.iter_mut())
                .zip(samplers.iter_mut())
                .enumerate()
            {
                if let Some(decoding) = d.as_mut().filter(|d| !d.is_done()) {
                    which.push(j);
                    items.push(BatchItem {
                        session,
                        decoding,
                        sampler,
                    });
                }
            }
            if items.is_empty() && step > 5 {
                return false;
            }
            decoder.step(&mut items, |i, step| {
                let step = step.unwrap();
                texts[which[i]].push_str(step.text);
                if step.finish.is_some() {
                    finishes[which[i]] = step.finish;
                }
            });
            true
        }
    }

    /// Several requests (seeded sampling, greedy, a stop string, different
    /// lengths, late joiners) stepped together give exactly the text, ids
    /// and finish each gets alone from `Session::run`.
    #[test]
    fn batched_steps_match_generate() {
        let n_ctx = 128;
        let engine = Engine::load(
            TINY,
            &RunOptions {
                threads: Some(2),
                ctx: Some(n_ctx),
                ..Default::default()
            },
        )
        .unwrap();
        let reqs = mixed_requests();
        let want: Vec<_> = reqs.iter().map(|r| generate_alone(&engine, r)).collect();

        // Fewer rows than requests: the step splits into two forwards.
        let mut decoder = engine.batch_decoder(3);
        let mut batch = Batch::new(&engine, &reqs);
        for step in 0..200 {
            batch.join(&engine, &reqs, step);
            if !batch.step(&mut decoder, step) {
                break;
            }
        }
        for (j, w) in want.iter().enumerate() {
            let d = batch.decodings[j].take().unwrap();
            assert_eq!(batch.texts[j], w.text, "request {j}");
            assert_eq!(batch.finishes[j], Some(w.finish), "request {j}");
            let g = d.into_generation();
            assert_eq!(g.ids, w.ids, "request {j}");
            assert_eq!(g.text, w.text, "request {j}");
        }
        // The stop string cut one of them short.
        assert_eq!(want[2].finish, FinishReason::Stop);
    }

    #[test]
    fn a_time_limit_ends_with_length_and_hands_out_the_held_text() {
        let engine = Engine::load(
            TINY,
            &RunOptions {
                threads: Some(1),
                ctx: Some(64),
                ..Default::default()
            },
        )
        .unwrap();
        let mut s = engine.session();
        let sampler = Sampler::new(SamplingParams::greedy());
        let ids = engine.tokenizer().encode("Hello", true, true);
        // A stop string no text contains holds back its length - 1 bytes.
        let opts = opts(50, &["\u{1}\u{1}\u{1}\u{1}"]);
        let mut d = s
            .begin(GenerationRequest::new(&ids, &opts), &sampler)
            .unwrap();
        let mut sampler = sampler;
        let mut shown = String::new();
        for _ in 0..5 {
            shown.push_str(s.step(&mut d, &mut sampler).unwrap().text);
        }
        let step = d.end_with_length();
        assert_eq!(step.finish, Some(FinishReason::Length));
        shown.push_str(step.text);
        assert_eq!(d.end_with_length().text, "");
        let g = d.into_generation();
        assert_eq!(g.ids.len(), 5);
        assert_eq!(shown, g.text);
        assert_eq!(g.finish, FinishReason::Length);
    }
}
