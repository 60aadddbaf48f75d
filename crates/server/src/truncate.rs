//! Chats that outgrow the context (`--context-overflow truncate`): keep the
//! system prompt and the latest turns, drop whole turns from the oldest.
//!
//! The turns dropped are chosen so that the next requests of the same chat
//! drop the same ones: the dropped history grows in steps of half the
//! context (llama.cpp's context shift also discards half), not a turn at a
//! time, so the prompt's beginning stays the same for several requests and
//! a slot's cache of it is reused.

use crate::error::ApiError;
use engine::ChatMessage;

/// What a chat endpoint does when the conversation does not fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overflow {
    /// Drop the oldest turns (the default for chats).
    Truncate,
    /// Answer 400 naming both sizes.
    Error,
}

/// A prompt that fits, and how many turns were dropped for it.
pub(crate) struct Fitted {
    /// The prompt's ids.
    pub ids: Vec<u32>,
    /// Turns dropped from the oldest.
    pub dropped: usize,
}

/// Where each turn begins: a user message after the leading system ones.
fn turn_starts(messages: &[ChatMessage]) -> Vec<usize> {
    let first = messages
        .iter()
        .position(|m| m.role != "system")
        .unwrap_or(messages.len());
    let mut starts: Vec<usize> = (first..messages.len())
        .filter(|&i| i == first || messages[i].role == "user")
        .collect();
    starts.dedup();
    starts
}

/// Fit `messages` in `n_ctx` tokens with `room` left for the reply, by
/// encoding them with `encode` and dropping the oldest turns when needed.
/// A chat whose last turn alone does not fit is an error giving both sizes.
pub(crate) fn fit(
    messages: &[ChatMessage],
    n_ctx: usize,
    room: usize,
    mut encode: impl FnMut(&[ChatMessage]) -> Result<Vec<u32>, ApiError>,
) -> Result<Fitted, ApiError> {
    let full = encode(messages)?;
    if full.len() + room <= n_ctx {
        return Ok(Fitted {
            ids: full,
            dropped: 0,
        });
    }
    let starts = turn_starts(messages);
    let system = &messages[..starts.first().copied().unwrap_or(messages.len())];
    // The prompt with the first `k` turns dropped; its length falls as `k`
    // grows, so both searches below halve their range each step.
    let mut kept = |k: usize| -> Result<Vec<u32>, ApiError> {
        let start = starts[k];
        let kept: Vec<ChatMessage> = system.iter().chain(&messages[start..]).cloned().collect();
        encode(&kept)
    };
    let last = starts.len().saturating_sub(1);
    let fits = |ids: &[u32]| ids.len() + room <= n_ctx;
    let alone = kept(last)?;
    if last == 0 || !fits(&alone) {
        return Err(ApiError {
            code: Some("context_length_exceeded"),
            ..ApiError::bad_param(
                "messages",
                format!(
                    "The latest turn alone is {} tokens (with the system prompt and {room} tokens for the reply) but the context is {n_ctx} tokens. Shorten it or start the server with a larger --ctx.",
                    alone.len()
                ),
            )
        });
    }
    // The fewest turns whose removal fits...
    let first = first_k(1, last, |k| Ok(fits(&kept(k)?)))?;
    // ...then more, up to the next whole step of dropped tokens.
    let step = (n_ctx / 2).max(1);
    let dropped_at = |ids: &[u32]| full.len().saturating_sub(ids.len());
    let goal = dropped_at(&kept(first)?).div_ceil(step) * step;
    let k = first_k(first, last, |k| Ok(dropped_at(&kept(k)?) >= goal))?;
    Ok(Fitted {
        ids: kept(k)?,
        dropped: k,
    })
}

/// The least `k` in `lo..=hi` for which `holds` (which, once true, stays
/// true as `k` grows), or `hi`.
fn first_k(
    mut lo: usize,
    mut hi: usize,
    mut holds: impl FnMut(usize) -> Result<bool, ApiError>,
) -> Result<usize, ApiError> {
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if holds(mid)? {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    Ok(hi)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One token per character, the roles included.
    fn encode(m: &[ChatMessage]) -> Result<Vec<u32>, ApiError> {
        Ok(vec![0; m.iter().map(|m| m.content.len() + 1).sum()])
    }

    fn chat(turns: usize) -> Vec<ChatMessage> {
        let mut m = vec![ChatMessage::new("system", "s".repeat(9))];
        for i in 0..turns {
            m.push(ChatMessage::new("user", format!("{i:>9}")));
            m.push(ChatMessage::new("assistant", "a".repeat(19)));
        }
        m
    }

    #[test]
    fn short_chats_are_untouched_and_long_ones_keep_system_and_latest() {
        let f = fit(&chat(2), 100, 10, encode).unwrap();
        assert_eq!((f.dropped, f.ids.len()), (0, 70));
        // 12 turns: 10 + 12 * 30 tokens in 100 with 10 to spare.
        let f = fit(&chat(12), 100, 10, encode).unwrap();
        assert!(f.ids.len() + 10 <= 100, "{}", f.ids.len());
        assert!(f.dropped >= 10, "{}", f.dropped);
    }

    #[test]
    fn the_same_turns_are_dropped_as_the_chat_grows() {
        // As turns are added, the number dropped moves in steps, so the
        // kept prompt begins with the same turn for several requests.
        let dropped: Vec<usize> = (3..=20)
            .map(|t| fit(&chat(t), 200, 20, encode).unwrap().dropped)
            .collect();
        let changes = dropped.windows(2).filter(|w| w[0] != w[1]).count();
        assert!(changes < dropped.len() / 2, "{dropped:?}");
        assert!(dropped.windows(2).all(|w| w[0] <= w[1]), "{dropped:?}");
    }

    #[test]
    fn a_last_turn_too_long_is_an_error_with_both_sizes() {
        let mut m = chat(3);
        m.push(ChatMessage::new("user", "x".repeat(500)));
        let e = fit(&m, 100, 10, encode).err().unwrap();
        assert!(
            e.message.contains("100 tokens") && e.message.contains("511"),
            "{}",
            e.message
        );
    }
}
