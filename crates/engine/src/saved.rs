//! A session's prompt state taken out of the session ([`SavedPrompt`]) and
//! put back, so a store can keep it after the session has moved on (another
//! conversation in the slot, an unloaded model, a restarted server), and
//! the prefix a prompt can reuse of a held sequence ([`usable_prefix`]),
//! the one rule the session and such a store both follow.

use crate::{EngineError, PromptMedia, Session};
use std::sync::Arc;

/// A media item's place among a sequence's tokens, by the hash of its file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MediaSpan {
    /// Index of its first soft token.
    pub pos: usize,
    /// How many soft tokens it takes.
    pub tokens: usize,
    /// The SHA-256 of the file it came from.
    pub key: [u8; 32],
}

impl MediaSpan {
    /// Index one past its last soft token.
    pub fn end(&self) -> usize {
        self.pos + self.tokens
    }
}

impl PromptMedia {
    /// Where the item lies and which file it is.
    pub fn span(&self) -> MediaSpan {
        MediaSpan {
            pos: self.pos,
            tokens: self.item.tokens,
            key: self.item.key,
        }
    }
}

/// A session's prompt state: the tokens its cache holds, the media among
/// them, and the cache's keys and values as [`model::KvCache::save`]
/// writes them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SavedPrompt {
    /// The tokens in the cache.
    pub tokens: Vec<u32>,
    /// The media among them, in order.
    pub media: Vec<MediaSpan>,
    /// The cache's contents, in parts a store may share with other states.
    pub kv: model::SavedKv,
}

/// A store of prompt states within one namespace (a model, the options
/// that change its numbers, a caller): a session starts from the state that
/// serves the most of its prompt ([`Session::resume_from`]) and leaves its
/// own there when a generation ends ([`Session::leave_in`]). The
/// `prompt_cache` crate's store is one.
pub trait PromptStore: Send + Sync {
    /// The stored state that serves more than `held` tokens of `prompt`
    /// (with `media`) computed with the adapters whose key is `adapters`
    /// ([`nn::Adapters::key`]), with how many it serves.
    fn find(
        &self,
        adapters: &[u8],
        prompt: &[u32],
        media: &[MediaSpan],
        held: usize,
    ) -> Option<(Arc<SavedPrompt>, usize)>;

    /// Keeps `saved`, computed with the adapters whose key is `adapters`,
    /// for later prompts.
    fn keep(&self, adapters: &[u8], saved: SavedPrompt);

    /// A state it found would not load (`why`): the prompt is computed.
    fn unloadable(&self, why: &str);

    /// Waits until the states kept so far are as durable as the store makes
    /// them (before a planned exit).
    fn flush(&self);
}

/// How many leading tokens of `prompt` (with `prompt_media`) a sequence
/// holding `held` (with `held_media`) can serve without computing them:
/// the tokens they share, up to the first media item that differs (the same
/// ids with another picture are not shared), less the prompt's last token
/// (its logits must be computed), and never inside a media item of the
/// prompt (its tokens go in one batch).
pub fn usable_prefix(
    held: &[u32],
    held_media: &[MediaSpan],
    prompt: &[u32],
    prompt_media: &[MediaSpan],
) -> usize {
    let mut shared = held.iter().zip(prompt).take_while(|(a, b)| a == b).count();
    let differs = held_media
        .iter()
        .zip(prompt_media)
        .find(|(a, b)| a != b)
        .map(|(a, b)| a.pos.min(b.pos));
    let unmatched = |m: &[MediaSpan], other: &[MediaSpan]| m.get(other.len()).map(|i| i.pos);
    let first_different = [
        differs,
        unmatched(held_media, prompt_media),
        unmatched(prompt_media, held_media),
    ];
    if let Some(p) = first_different.into_iter().flatten().min() {
        shared = shared.min(p);
    }
    if shared == prompt.len() {
        shared = shared.saturating_sub(1);
    }
    if let Some(i) = prompt_media
        .iter()
        .find(|i| i.pos < shared && shared < i.end())
    {
        shared = i.pos;
    }
    shared
}

impl Session {
    /// The session's prompt state, to put back later with
    /// [`Session::load_prompt`].
    pub fn save_prompt(&self) -> SavedPrompt {
        SavedPrompt {
            tokens: self.tokens.clone(),
            media: self.images.iter().map(PromptMedia::span).collect(),
            kv: self.cache.save(),
        }
    }

    /// How many leading tokens of `prompt` (with `media`) the session could
    /// serve as it is ([`usable_prefix`] of what it holds).
    pub fn reusable(&self, prompt: &[u32], media: &[MediaSpan]) -> usize {
        let held: Vec<MediaSpan> = self.images.iter().map(PromptMedia::span).collect();
        usable_prefix(&self.tokens, &held, prompt, media)
    }

    /// Starts from the state in `store` that serves more of `prompt` (with
    /// `media`) than the session holds, if there is one; returns whether it
    /// did. A state that will not load (its rings cannot rewind that far)
    /// is told to the store and leaves the session empty: the prompt is then
    /// computed whole.
    pub fn resume_from(
        &mut self,
        store: &dyn PromptStore,
        prompt: &[u32],
        media: &[PromptMedia],
    ) -> bool {
        let spans: Vec<MediaSpan> = media.iter().map(PromptMedia::span).collect();
        let held = self.reusable(prompt, &spans);
        let Some((saved, keep)) = store.find(&self.adapters().key(), prompt, &spans, held) else {
            return false;
        };
        match self.load_prompt(&saved, keep, media) {
            Ok(()) => true,
            Err(e) => {
                store.unloadable(&e.to_string());
                false
            }
        }
    }

    /// Leaves the session's state in `store` (nothing when it holds none).
    pub fn leave_in(&self, store: &dyn PromptStore) {
        if !self.tokens.is_empty() {
            store.keep(&self.adapters().key(), self.save_prompt());
        }
    }

    /// Bytes [`Session::save_prompt`] would take.
    pub fn saved_bytes(&self) -> usize {
        self.cache.saved_len() + 4 * self.tokens.len()
    }

    /// Makes the session hold the first `keep` tokens of `saved`, for a
    /// prompt with `media` that shares them ([`usable_prefix`] says how
    /// many). Fails, leaving the session empty, when `saved` is not a state
    /// of this model and cache type, its media do not match `media` within
    /// `keep`, or its cache cannot rewind to `keep`.
    pub fn load_prompt(
        &mut self,
        saved: &SavedPrompt,
        keep: usize,
        media: &[PromptMedia],
    ) -> Result<(), EngineError> {
        self.reset();
        let within = |m: &MediaSpan| m.end() <= keep;
        let held: Vec<MediaSpan> = saved.media.iter().copied().filter(within).collect();
        let wanted: Vec<MediaSpan> = media.iter().map(PromptMedia::span).filter(within).collect();
        if keep > saved.tokens.len() || held != wanted {
            return Err(EngineError::InvalidRequest(
                "a saved prompt does not match this prompt".into(),
            ));
        }
        self.cache
            .load(&saved.kv)
            .map_err(|e| EngineError::InvalidRequest(e.to_string()))?;
        if self.cache.n_past() != saved.tokens.len() || !self.cache.truncate(keep) {
            self.reset();
            return Err(EngineError::InvalidRequest(
                "a saved prompt cannot rewind to the part this prompt shares".into(),
            ));
        }
        self.tokens.extend_from_slice(&saved.tokens[..keep]);
        self.images
            .extend(media.iter().filter(|m| m.end() <= keep).cloned());
        Ok(())
    }
}
