//! The draft model of [`super::Speculation::Draft`]: a smaller engine of the
//! target's vocabulary, and the ids its cut-down head guesses among.

use crate::{Engine, EngineError, Session};
use std::sync::Arc;

/// Rows a draft model's sequence computes at a time: its buffers, which a
/// server's slots each keep, hold this many, and a prompt goes in by chunks
/// of it (small enough to keep per slot, large enough that prefill by such
/// chunks stays near full speed: docs/perf/speculation.md, eighth sitting).
const DRAFTER_ROWS: usize = 64;

/// The least probability (among the ids the draft's head keeps) at which a
/// draft model's guess joins the draft, unless the caller says otherwise:
/// llama.cpp's `--draft-p-min`. A round's draft ends at the first guess
/// below it, so fewer guesses are checked only to be thrown away (the
/// choice of 0.5 is measured in docs/perf/speculation.md, eighth sitting).
pub const DEFAULT_DRAFT_P_MIN: f32 = 0.5;

/// A draft model for [`Speculation::Draft`](super::Speculation::Draft): an
/// engine whose vocabulary is the target's (checked by [`DraftModel::new`]).
#[derive(Clone)]
pub struct DraftModel {
    pub(super) engine: Arc<Engine>,
    /// Most tokens drafted at a time.
    pub max_draft: usize,
    /// The least probability of a guess that is drafted (0: every guess).
    pub p_min: f32,
}

impl std::fmt::Debug for DraftModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DraftModel")
            .field("model", &self.engine.model_name())
            .field("max_draft", &self.max_draft)
            .field("p_min", &self.p_min)
            .finish()
    }
}

impl PartialEq for DraftModel {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.engine, &other.engine)
            && self.max_draft == other.max_draft
            && self.p_min.to_bits() == other.p_min.to_bits()
    }
}

impl Eq for DraftModel {}

impl DraftModel {
    /// `draft` as the drafter of `target`: refused unless both have the same
    /// vocabulary, token for token (the draft's ids are the target's).
    pub fn new(draft: Arc<Engine>, target: &Engine, max_draft: usize) -> Result<Self, EngineError> {
        let (a, b) = (draft.tokenizer(), target.tokenizer());
        let mismatch = if a.vocab_size() != b.vocab_size() {
            Some(format!(
                "it has {} tokens and the model {}",
                a.vocab_size(),
                b.vocab_size()
            ))
        } else {
            (0..a.vocab_size() as u32)
                .find(|&id| a.token_text(id) != b.token_text(id))
                .map(|id| {
                    format!(
                        "token {id} is {:?} there and {:?} here",
                        a.token_text(id).unwrap_or(""),
                        b.token_text(id).unwrap_or("")
                    )
                })
        };
        if let Some(why) = mismatch {
            return Err(EngineError::InvalidOptions(format!(
                "the draft model's vocabulary is not the model's: {why}"
            )));
        }
        Ok(Self::unpaired(draft, max_draft))
    }

    /// `draft` as the drafter of targets not known yet (a server's, loaded
    /// on demand): each is paired, and its vocabulary checked, by
    /// [`Speculation::for_target`](super::Speculation::for_target) before
    /// the draft is used with it.
    pub fn unpaired(draft: Arc<Engine>, max_draft: usize) -> Self {
        Self {
            engine: draft,
            max_draft,
            p_min: DEFAULT_DRAFT_P_MIN,
        }
    }

    /// Up to `limit` guesses into `out`, each the best id of `s`'s logits
    /// (then fed to it) while its probability is at least [`Self::p_min`].
    pub(crate) fn guess(
        &self,
        s: &mut Session,
        limit: usize,
        out: &mut Vec<u32>,
    ) -> Result<(), EngineError> {
        for i in 0..limit {
            let logits = s.last_logits()?;
            let id = crate::argmax(logits) as u32;
            if self.p_min > 0.0 {
                // The logits are not needed after this guess.
                nn::softmax(logits);
                if logits[id as usize] < self.p_min {
                    break;
                }
            }
            out.push(id);
            if i + 1 < limit {
                s.feed_batch(&[id])?;
            }
        }
        Ok(())
    }

    /// Bytes this model's sequence for a target of `n_ctx` tokens takes
    /// (its KV cache and buffers), which a session keeps once it has
    /// speculated with it.
    pub fn sequence_bytes(&self, n_ctx: usize) -> usize {
        let (n_ctx, rows) = self.sequence_shape(n_ctx);
        self.engine.model.session_bytes(n_ctx, rows)
    }

    /// The context and buffer rows of this model's sequence for a target of
    /// `n_ctx` tokens.
    fn sequence_shape(&self, n_ctx: usize) -> (usize, usize) {
        let n_ctx = n_ctx.max(1);
        (n_ctx, self.engine.batch_for(n_ctx).min(DRAFTER_ROWS))
    }

    /// This model's sequence for a target of `n_ctx` tokens: the one `held`
    /// when it is that (a session keeps it between generations, so the
    /// turns of a conversation it has seen are not fed to it again), else a
    /// new one, kept there.
    pub(crate) fn drafter<'s>(
        &self,
        held: &'s mut Option<Box<Session>>,
        n_ctx: usize,
    ) -> &'s mut Session {
        let (n_ctx, rows) = self.sequence_shape(n_ctx);
        let fits = |s: &Session| Arc::ptr_eq(&s.model, &self.engine.model) && s.n_ctx() == n_ctx;
        if !held.as_deref().is_some_and(fits) {
            *held = None;
        }
        held.get_or_insert_with(|| Box::new(self.engine.session_of(n_ctx, rows)))
    }
}

/// How many of the first token ids a draft model guesses among, beside
/// every single character ([`RunOptions::draft_vocab`]): the head of a
/// 262,144-token vocabulary is most of a small draft model's step, and
/// Gemma's pieces come roughly in order of frequency, its single characters
/// (the alphabet every text falls back on) at the end.
///
/// [`RunOptions::draft_vocab`]: crate::RunOptions::draft_vocab
pub const DRAFT_HEAD_ROWS: usize = 32768;

/// The ids a draft model guesses among: the first `n`, and every token of
/// one character (a leading word mark aside).
pub(crate) fn draft_vocab(t: &tokenizer::Tokenizer, n: usize) -> Vec<u32> {
    (0..t.vocab_size() as u32)
        .filter(|&id| {
            (id as usize) < n
                || t.token_text(id)
                    .is_some_and(|s| s.trim_start_matches('\u{2581}').chars().count() <= 1)
        })
        .collect()
}
