//! The draft model of [`super::Speculation::Draft`]: a smaller engine of the
//! target's vocabulary, and the ids its cut-down head guesses among.

use crate::{Engine, EngineError};
use std::sync::Arc;

/// A draft model for [`Speculation::Draft`](super::Speculation::Draft): an
/// engine whose vocabulary is the target's (checked by [`DraftModel::new`]).
#[derive(Clone)]
pub struct DraftModel {
    pub(super) engine: Arc<Engine>,
    /// Most tokens drafted at a time.
    pub max_draft: usize,
}

impl std::fmt::Debug for DraftModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DraftModel")
            .field("model", &self.engine.model_name())
            .field("max_draft", &self.max_draft)
            .finish()
    }
}

impl PartialEq for DraftModel {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.engine, &other.engine) && self.max_draft == other.max_draft
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
        }
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
