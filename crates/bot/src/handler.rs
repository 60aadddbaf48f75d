//! What the bot answers to one message of a chat, given the chat's memory:
//! commands, the model's reply, and the plain lines for what it cannot do.
//! No I/O here but the model call, so every answer is testable.

use crate::brain::Brain;
use crate::command::{parse_command, Command, HELP};
use crate::conversation::{ChatState, Turn};
use crate::incoming::Incoming;
use crate::split::{split_message, MESSAGE_LIMIT};

/// How the bot behaves, the same for every chat.
#[derive(Debug, Clone)]
pub struct Behaviour {
    /// Whether a chat that has not said `/guard` gets the guardrails.
    pub guard_default: bool,
    /// Longest message (in characters) the model is asked about.
    pub max_input_chars: usize,
}

impl Default for Behaviour {
    fn default() -> Self {
        Self {
            guard_default: false,
            max_input_chars: 16_000,
        }
    }
}

/// The answer to one message: the texts to send, and whether the chat's
/// memory changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// Messages to send, each within Telegram's limit.
    pub texts: Vec<String>,
    /// Whether `state` was changed and must be stored.
    pub changed: bool,
}

impl Answer {
    fn say(text: impl Into<String>, changed: bool) -> Self {
        Self {
            texts: split_message(&text.into(), MESSAGE_LIMIT),
            changed,
        }
    }
}

/// What a photo without a caption asks.
pub const PHOTO_PROMPT: &str = "Describe this picture.";

/// Whether the message needs the model (the caller shows "typing…" then).
pub fn needs_model(item: &Incoming) -> bool {
    match item {
        Incoming::Text { text, .. } => parse_command(text).is_none(),
        Incoming::Photo { .. } | Incoming::Voice { .. } => true,
        Incoming::Unsupported { .. } => false,
    }
}

/// Answer `item` for a chat whose memory is `state` (updated in place).
pub fn answer(
    brain: &dyn Brain,
    how: &Behaviour,
    state: &mut ChatState,
    item: &Incoming,
) -> Answer {
    answer_with(brain, how, state, item, None)
}

/// [`answer`], given the file when `item` is a photo or a voice note: its
/// bytes, or why they could not be fetched (`None`: not fetched).
pub fn answer_with(
    brain: &dyn Brain,
    how: &Behaviour,
    state: &mut ChatState,
    item: &Incoming,
    photo: Option<Result<Vec<u8>, String>>,
) -> Answer {
    let cannot = |what: &str| {
        Answer::say(
            format!(
                "I can't read {what}: the loaded model ({}) reads text only. Please write to me instead.",
                brain.name()
            ),
            false,
        )
    };
    let text = match item {
        Incoming::Unsupported { what, .. } => return cannot(what),
        Incoming::Photo { .. } if !brain.reads_images() => return cannot("a photo"),
        Incoming::Photo { caption, .. } => {
            return media_answer(brain, how, state, Media::Photo, caption, photo)
        }
        Incoming::Voice { what, .. } if !brain.hears() => return cannot(what),
        Incoming::Voice { .. } => return media_answer(brain, how, state, Media::Voice, "", photo),
        Incoming::Text { text, .. } => text,
    };
    match parse_command(text) {
        Some(c) => command(brain, how, state, c),
        None => reply(brain, how, state, text),
    }
}

fn command(brain: &dyn Brain, how: &Behaviour, state: &mut ChatState, c: Command) -> Answer {
    match c {
        Command::Start => Answer::say(
            format!(
                "Hi! I'm {}, a small language model running locally with Hearth: what you write here stays on the machine that runs me. Just write to me.\n\n{HELP}",
                brain.name()
            ),
            false,
        ),
        Command::Help => Answer::say(HELP, false),
        Command::Reset => {
            let n = state.turns.len();
            state.turns.clear();
            Answer::say(
                format!("Forgotten ({n} turn{}). Let's start over.", plural(n)),
                true,
            )
        }
        Command::System(prompt) => system_command(how, state, prompt),
        Command::Guard(on) => guard_command(how, state, on),
        Command::Stats => Answer::say(stats_text(brain, how, state), false),
        Command::Unknown(name) => Answer::say(
            format!("I don't know the command /{name}. Try /help."),
            false,
        ),
    }
}

/// `/system TEXT` sets the chat's system prompt (cut to the longest input);
/// `/system` alone clears it.
fn system_command(how: &Behaviour, state: &mut ChatState, prompt: Option<String>) -> Answer {
    match prompt {
        Some(s) => {
            let s: String = s.chars().take(how.max_input_chars).collect();
            state.system = Some(s);
            Answer::say(
                "System prompt set. It applies from your next message.",
                true,
            )
        }
        None => {
            let had = state.system.take().is_some();
            Answer::say(
                if had {
                    "System prompt cleared."
                } else {
                    "There was no system prompt. Set one with /system TEXT."
                },
                had,
            )
        }
    }
}

/// `/guard on|off` turns the chat's guardrails on or off; `/guard` alone
/// says how they are.
fn guard_command(how: &Behaviour, state: &mut ChatState, on: Option<bool>) -> Answer {
    match on {
        Some(on) => {
            state.guard = Some(on);
            Answer::say(
                if on {
                    "Guardrails on: I'll check arithmetic, logic puzzles and stated constraints with tools before answering (slower)."
                } else {
                    "Guardrails off."
                },
                true,
            )
        }
        None => Answer::say(
            format!(
                "Guardrails are {}. Use /guard on or /guard off.",
                if guard_on(how, state) { "on" } else { "off" }
            ),
            false,
        ),
    }
}

/// What `/stats` says: the model, the chat's counters and settings.
fn stats_text(brain: &dyn Brain, how: &Behaviour, state: &ChatState) -> String {
    let s = &state.stats;
    let speed = if s.gen_ms > 0 {
        format!(
            ", {:.1} tokens/s",
            s.completion_tokens as f64 * 1e3 / s.gen_ms as f64
        )
    } else {
        String::new()
    };
    format!(
        "Model: {}\nReplies: {}\nTokens: {} prompt, {} generated{speed}\nTurns remembered: {} (dropped for room: {})\nGuardrails: {} (answers they changed: {})\nSystem prompt: {}",
        brain.name(),
        s.replies,
        s.prompt_tokens,
        s.completion_tokens,
        state.turns.len(),
        s.trimmed_turns,
        if guard_on(how, state) { "on" } else { "off" },
        s.guard_changes,
        if state.system.is_some() { "set" } else { "none" },
    )
}

fn reply(brain: &dyn Brain, how: &Behaviour, state: &mut ChatState, text: &str) -> Answer {
    let chars = text.chars().count();
    if chars > how.max_input_chars {
        return Answer::say(
            format!(
                "That message is too long for me ({chars} characters; I take at most {}). Please shorten it.",
                how.max_input_chars
            ),
            false,
        );
    }
    if text.trim().is_empty() {
        return Answer::say("(That message was empty.)", false);
    }
    let Some((messages, dropped)) =
        state.prompt(&engine::ChatMessage::user(text), |m| brain.fits(m))
    else {
        return Answer::say(
            "That message does not fit my context window, even with the conversation forgotten. Please shorten it.",
            false,
        );
    };
    match brain.reply(&messages, guard_on(how, state)) {
        Ok(r) => {
            count(state, &r);
            if r.text.trim().is_empty() {
                return Answer::say(
                    "(The model gave an empty reply. Try rephrasing, or /reset.)",
                    true,
                );
            }
            state.push(
                dropped,
                Turn {
                    user: text.to_owned(),
                    assistant: r.text.clone(),
                },
            );
            Answer::say(r.text, true)
        }
        Err(e) => Answer::say(format!("Sorry, I could not answer that: {e}"), false),
    }
}

/// A message that brings a file for the model.
#[derive(Clone, Copy)]
enum Media {
    Photo,
    Voice,
}

impl Media {
    /// How the bot names it in replies.
    fn name(self) -> &'static str {
        match self {
            Media::Photo => "photo",
            Media::Voice => "voice note",
        }
    }
}

/// The reply to a photo or a voice note whose file was (or was not)
/// fetched.
fn media_answer(
    brain: &dyn Brain,
    how: &Behaviour,
    state: &mut ChatState,
    media: Media,
    caption: &str,
    file: Option<Result<Vec<u8>, String>>,
) -> Answer {
    let name = media.name();
    match file {
        Some(Ok(bytes)) => media_reply(brain, how, state, media, caption, &bytes),
        Some(Err(e)) => Answer::say(format!("Sorry, I could not fetch that {name}: {e}"), false),
        None => Answer::say(
            format!("Sorry, I could not fetch that {name}. Please send it again."),
            false,
        ),
    }
}

/// The reply to a photo (the caption, or [`PHOTO_PROMPT`], asked about the
/// picture, placed before it as llama.cpp's tools place media) or a voice
/// note (the clip itself is the message). The chat remembers the turn as
/// `[photo] caption` or `[voice note]`: later turns see that one was sent,
/// not its content.
fn media_reply(
    brain: &dyn Brain,
    how: &Behaviour,
    state: &mut ChatState,
    media: Media,
    caption: &str,
    bytes: &[u8],
) -> Answer {
    let chars = caption.chars().count();
    if chars > how.max_input_chars {
        return Answer::say(
            format!(
                "That caption is too long for me ({chars} characters; I take at most {}). Please shorten it.",
                how.max_input_chars
            ),
            false,
        );
    }
    let user = match media {
        Media::Photo if caption.trim().is_empty() => {
            engine::media_message("user", PHOTO_PROMPT, 1, 0)
        }
        Media::Photo => engine::media_message("user", caption, 1, 0),
        Media::Voice => engine::media_message("user", "", 0, 1),
    };
    let fits = |m: &[engine::ChatMessage]| match media {
        Media::Photo => brain.fits_image(m),
        Media::Voice => brain.fits_audio(m),
    };
    let name = media.name();
    let Some((messages, dropped)) = state.prompt(&user, fits) else {
        return Answer::say(
            format!(
                "That {name} does not fit my context window, even with the conversation forgotten."
            ),
            false,
        );
    };
    let reply = match media {
        Media::Photo => brain.reply_image(&messages, bytes),
        Media::Voice => brain.reply_audio(&messages, bytes),
    };
    match reply {
        Ok(r) => {
            count(state, &r);
            if r.text.trim().is_empty() {
                return Answer::say(
                    "(The model gave an empty reply. Try again, or /reset.)",
                    true,
                );
            }
            state.push(
                dropped,
                Turn {
                    user: format!("[{name}] {caption}").trim_end().to_owned(),
                    assistant: r.text.clone(),
                },
            );
            Answer::say(r.text, true)
        }
        Err(e) => Answer::say(format!("Sorry, I could not read that {name}: {e}"), false),
    }
}

/// Add a reply to the chat's `/stats`.
fn count(state: &mut ChatState, r: &crate::brain::BrainReply) {
    let s = &mut state.stats;
    s.replies += 1;
    s.prompt_tokens += r.prompt_tokens as u64;
    s.completion_tokens += r.completion_tokens as u64;
    s.gen_ms += r.ms;
    s.guard_changes += u64::from(r.guard_changed);
}

fn guard_on(how: &Behaviour, state: &ChatState) -> bool {
    state.guard.unwrap_or(how.guard_default)
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::brain::BrainReply;
    use engine::ChatMessage;
    use std::sync::Mutex;

    /// Echoes the conversation's size; fits prompts of at most `room` chars.
    struct Echo {
        room: usize,
        calls: Mutex<Vec<(usize, bool)>>,
    }

    impl Brain for Echo {
        fn reply(&self, m: &[ChatMessage], guard: bool) -> Result<BrainReply, String> {
            self.calls.lock().unwrap().push((m.len(), guard));
            if m.last().unwrap().content == "fail" {
                return Err("the model broke".into());
            }
            Ok(BrainReply {
                text: format!("echo {}", m.last().unwrap().content),
                prompt_tokens: 10,
                completion_tokens: 5,
                ms: 100,
                guard_changed: guard,
            })
        }
        fn fits(&self, m: &[ChatMessage]) -> bool {
            m.iter().map(|m| m.content.len()).sum::<usize>() <= self.room
        }
        fn name(&self) -> String {
            "echo".into()
        }
    }

    fn text(t: &str) -> Incoming {
        Incoming::Text {
            chat_id: 1,
            text: t.into(),
        }
    }

    #[test]
    fn a_conversation_with_commands() {
        let b = Echo {
            room: 1000,
            calls: Mutex::default(),
        };
        let how = Behaviour::default();
        let mut s = ChatState::default();
        let a = answer(&b, &how, &mut s, &text("/start"));
        assert!(a.texts[0].contains("echo") && a.texts[0].contains("/reset"));
        assert_eq!(answer(&b, &how, &mut s, &text("hi")).texts, ["echo hi"]);
        assert_eq!(
            answer(&b, &how, &mut s, &text("again")).texts,
            ["echo again"]
        );
        assert_eq!(b.calls.lock().unwrap().last(), Some(&(3, false)));
        assert!(answer(&b, &how, &mut s, &text("/system Be brief.")).changed);
        assert!(answer(&b, &how, &mut s, &text("/guard on")).changed);
        answer(&b, &how, &mut s, &text("third"));
        assert_eq!(
            b.calls.lock().unwrap().last(),
            Some(&(6, true)),
            "system + 2 turns + new"
        );
        let stats = answer(&b, &how, &mut s, &text("/stats")).texts.concat();
        assert!(stats.contains("Replies: 3") && stats.contains("answers they changed: 1"));
        let r = answer(&b, &how, &mut s, &text("/reset"));
        assert_eq!(r.texts, ["Forgotten (3 turns). Let's start over."]);
        assert!(s.turns.is_empty() && s.system.is_some());
        let before = s.clone();
        let failed = answer(&b, &how, &mut s, &text("fail"));
        assert!(failed.texts[0].contains("the model broke"));
        assert_eq!(s, before, "a failed call changes nothing");
        assert!(answer(&b, &how, &mut s, &text("/nope")).texts[0].contains("/nope"));
        let photo = Incoming::Photo {
            chat_id: 1,
            file_id: "f".into(),
            caption: String::new(),
        };
        let bytes = Some(Ok(vec![1, 2, 3]));
        let a = answer_with(&b, &how, &mut s, &photo, bytes);
        assert!(
            a.texts[0].contains("can't read a photo"),
            "a text-only model"
        );
        let voice = Incoming::Unsupported {
            chat_id: 1,
            what: "a voice note".into(),
        };
        assert!(answer(&b, &how, &mut s, &voice).texts[0].contains("can't read a voice note"));
    }

    /// [`Echo`] that reads images: says how many bytes and what it was asked.
    struct Eyes(Echo);

    impl Brain for Eyes {
        fn reply(&self, m: &[ChatMessage], guard: bool) -> Result<BrainReply, String> {
            self.0.reply(m, guard)
        }
        fn fits(&self, m: &[ChatMessage]) -> bool {
            self.0.fits(m)
        }
        fn name(&self) -> String {
            "eyes".into()
        }
        fn reads_images(&self) -> bool {
            true
        }
        fn reply_image(&self, m: &[ChatMessage], image: &[u8]) -> Result<BrainReply, String> {
            let mut r = self.0.reply(m, false)?;
            r.text = format!("{} bytes, {}", image.len(), r.text);
            Ok(r)
        }
    }

    #[test]
    fn photos_are_asked_about_with_their_caption() {
        let b = Eyes(Echo {
            room: 1000,
            calls: Mutex::default(),
        });
        let how = Behaviour::default();
        let mut s = ChatState::default();
        let photo = |caption: &str| Incoming::Photo {
            chat_id: 1,
            file_id: "f".into(),
            caption: caption.into(),
        };
        assert!(needs_model(&photo("")));
        let a = answer_with(
            &b,
            &how,
            &mut s,
            &photo("What is it?"),
            Some(Ok(vec![0; 7])),
        );
        assert_eq!(a.texts, ["7 bytes, echo <start_of_image>What is it?"]);
        let a = answer_with(&b, &how, &mut s, &photo(""), Some(Ok(vec![0; 2])));
        assert_eq!(
            a.texts,
            [format!("2 bytes, echo <start_of_image>{PHOTO_PROMPT}")]
        );
        // Remembered as text: later turns know a photo was sent.
        assert_eq!(s.turns[0].user, "[photo] What is it?");
        assert_eq!(s.turns[1].user, "[photo]");
        assert_eq!(s.stats.replies, 2);
        let failed = answer_with(&b, &how, &mut s, &photo("x"), Some(Err("HTTP 404".into())));
        assert!(failed.texts[0].contains("could not fetch that photo: HTTP 404"));
        assert!(!failed.changed);
        let long = Behaviour {
            max_input_chars: 3,
            ..Behaviour::default()
        };
        let a = answer_with(&b, &long, &mut s, &photo("long caption"), Some(Ok(vec![0])));
        assert!(a.texts[0].contains("too long"));
    }

    #[test]
    fn long_input_and_a_full_context() {
        let b = Echo {
            room: 40,
            calls: Mutex::default(),
        };
        let how = Behaviour {
            max_input_chars: 30,
            ..Behaviour::default()
        };
        let mut s = ChatState::default();
        for w in ["aaaaaaaaaa", "bbbbbbbbbb", "cccccccccc"] {
            answer(&b, &how, &mut s, &text(w));
        }
        // Each turn is 25 chars: one old turn fits beside a new message, so
        // the third answer drops the first turn.
        assert_eq!(s.turns.len(), 2);
        assert_eq!(s.turns[0].user, "bbbbbbbbbb");
        assert_eq!(s.stats.trimmed_turns, 1);
        let long = answer(&b, &how, &mut s, &text(&"x".repeat(31)));
        assert!(long.texts[0].contains("too long"));
        let calls = b.calls.lock().unwrap().len();
        let wide = Behaviour::default();
        let huge = answer(&b, &wide, &mut s, &text(&"y".repeat(41)));
        assert!(huge.texts[0].contains("does not fit"));
        assert_eq!(
            b.calls.lock().unwrap().len(),
            calls,
            "no model call for either"
        );
    }
}
