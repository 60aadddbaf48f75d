//! A per-chat rate limit: at most `max` messages in any `window`. Past it,
//! a chat gets one notice per window and no generation; the limit lives in
//! memory (a restart forgives).

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// What to do with a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Within the limit.
    Allow,
    /// Over it: tell the chat once.
    Notify,
    /// Over it, already told.
    Drop,
}

/// Recent message times of each chat.
#[derive(Debug)]
pub struct RateLimiter {
    max: usize,
    window: Duration,
    chats: HashMap<i64, Recent>,
}

#[derive(Debug, Default)]
struct Recent {
    times: VecDeque<Instant>,
    notified: Option<Instant>,
}

impl RateLimiter {
    /// At most `max` messages per `window` per chat (`max` 0: no limit).
    pub fn new(max: usize, window: Duration) -> Self {
        Self {
            max,
            window,
            chats: HashMap::new(),
        }
    }

    /// Count a message of `chat` arriving at `now`.
    pub fn check(&mut self, chat: i64, now: Instant) -> Verdict {
        if self.max == 0 {
            return Verdict::Allow;
        }
        // Forget chats that have been quiet a whole window, so the map
        // does not grow with every chat ever seen.
        if self.chats.len() > 10_000 {
            let window = self.window;
            self.chats.retain(|_, r| {
                r.times
                    .back()
                    .is_some_and(|&t| now.saturating_duration_since(t) < window)
            });
        }
        let r = self.chats.entry(chat).or_default();
        while r
            .times
            .front()
            .is_some_and(|&t| now.saturating_duration_since(t) >= self.window)
        {
            r.times.pop_front();
        }
        if r.times.len() < self.max {
            r.times.push_back(now);
            return Verdict::Allow;
        }
        match r.notified {
            Some(t) if now.saturating_duration_since(t) < self.window => Verdict::Drop,
            _ => {
                r.notified = Some(now);
                Verdict::Notify
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_past_the_limit_is_told_once_then_the_window_reopens() {
        let mut l = RateLimiter::new(3, Duration::from_secs(60));
        let t0 = Instant::now();
        let v: Vec<_> = (0..6)
            .map(|i| l.check(1, t0 + Duration::from_millis(i)))
            .collect();
        use Verdict::*;
        assert_eq!(v, [Allow, Allow, Allow, Notify, Drop, Drop]);
        assert_eq!(l.check(2, t0), Allow, "another chat has its own budget");
        assert_eq!(l.check(1, t0 + Duration::from_secs(61)), Allow);
        assert_eq!(RateLimiter::new(0, Duration::ZERO).check(1, t0), Allow);
    }
}
