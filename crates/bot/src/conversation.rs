//! One chat's memory: its system prompt, its guard switch, its turns and its
//! counters, and the prompt built from them, trimmed from the oldest turns
//! when it would not fit the model's context.

use engine::ChatMessage;
use serde::{Deserialize, Serialize};

/// A user message and the reply it got.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Turn {
    /// What the user said.
    pub user: String,
    /// What the bot answered.
    pub assistant: String,
}

/// Counters shown by `/stats`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatStats {
    /// Messages answered by the model.
    pub replies: u64,
    /// Prompt tokens over all replies.
    pub prompt_tokens: u64,
    /// Generated tokens over all replies.
    pub completion_tokens: u64,
    /// Milliseconds spent generating.
    pub gen_ms: u64,
    /// Turns dropped from memory because the context was full.
    pub trimmed_turns: u64,
    /// Replies the guardrails changed.
    pub guard_changes: u64,
}

/// Everything the bot remembers about one chat.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatState {
    /// The system prompt set with `/system`.
    pub system: Option<String>,
    /// `/guard on|off`; `None` follows the bot's default.
    pub guard: Option<bool>,
    /// The conversation, oldest first.
    pub turns: Vec<Turn>,
    /// Counters.
    #[serde(default)]
    pub stats: ChatStats,
}

impl ChatState {
    /// The messages of a prompt that answers `user` after keeping the
    /// newest `keep` turns.
    fn messages(&self, keep: usize, user: &ChatMessage) -> Vec<ChatMessage> {
        let mut m = Vec::with_capacity(2 * keep + 2);
        if let Some(s) = &self.system {
            m.push(ChatMessage::new("system", s.clone()));
        }
        for t in &self.turns[self.turns.len() - keep..] {
            m.push(ChatMessage::new("user", t.user.clone()));
            m.push(ChatMessage::new("assistant", t.assistant.clone()));
        }
        m.push(user.clone());
        m
    }

    /// The prompt for `user`, with as many of the newest turns as `fits`
    /// accepts, and how many older turns had to go. `None` when not even the
    /// system prompt and the new message fit.
    pub fn prompt(
        &self,
        user: &ChatMessage,
        fits: impl Fn(&[ChatMessage]) -> bool,
    ) -> Option<(Vec<ChatMessage>, usize)> {
        let n = self.turns.len();
        if fits(&self.messages(n, user)) {
            return Some((self.messages(n, user), 0));
        }
        if !fits(&self.messages(0, user)) {
            return None;
        }
        // The most turns that fit: fitting only gets harder with more turns.
        let (mut lo, mut hi) = (0, n);
        while lo + 1 < hi {
            let mid = (lo + hi) / 2;
            if fits(&self.messages(mid, user)) {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        Some((self.messages(lo, user), n - lo))
    }

    /// Remember a finished turn, forgetting `dropped` old turns the prompt
    /// had no room for (they would not fit the next prompt either).
    pub fn push(&mut self, dropped: usize, turn: Turn) {
        let dropped = dropped.min(self.turns.len());
        self.turns.drain(..dropped);
        self.stats.trimmed_turns += dropped as u64;
        self.turns.push(turn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chat(n: usize) -> ChatState {
        ChatState {
            system: Some("sys".into()),
            turns: (0..n)
                .map(|i| Turn {
                    user: format!("u{i}"),
                    assistant: format!("a{i}"),
                })
                .collect(),
            ..ChatState::default()
        }
    }

    fn chars(m: &[ChatMessage]) -> usize {
        m.iter().map(|m| m.content.len()).sum()
    }

    #[test]
    fn everything_fits_or_the_oldest_turns_go() {
        let c = chat(10);
        let (all, dropped) = c.prompt(&ChatMessage::user("new"), |_| true).unwrap();
        assert_eq!((all.len(), dropped), (22, 0));
        assert_eq!(all[0].role, "system");
        assert_eq!(all[1].content, "u0");
        // "sys" + "new" = 6, each turn 4 more: room for three turns.
        let (some, dropped) = c
            .prompt(&ChatMessage::user("new"), |m| chars(m) <= 6 + 12 + 3)
            .unwrap();
        assert_eq!(dropped, 7);
        assert_eq!(some[1].content, "u7");
        assert_eq!(some.last().unwrap().content, "new");
        assert!(c
            .prompt(&ChatMessage::user("new"), |m| chars(m) < 6)
            .is_none());
    }

    #[test]
    fn pushing_forgets_what_did_not_fit() {
        let mut c = chat(5);
        c.push(
            3,
            Turn {
                user: "x".into(),
                assistant: "y".into(),
            },
        );
        assert_eq!(c.turns.len(), 3);
        assert_eq!(c.turns[0].user, "u3");
        assert_eq!(c.stats.trimmed_turns, 3);
        c.push(
            99,
            Turn {
                user: "p".into(),
                assistant: "q".into(),
            },
        );
        assert_eq!(c.turns.len(), 1);
    }
}
