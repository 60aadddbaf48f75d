//! What an update asks of the bot. Updates are parsed one at a time with
//! teloxide's types, so one the bot cannot read (a missing field, a kind it
//! does not know) is skipped alone and the rest of its batch still counts.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use teloxide_core::types::{Update, UpdateKind};

/// An update that needs an answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Incoming {
    /// A text message (a command or something to reply to).
    Text {
        /// The chat it came from.
        chat_id: i64,
        /// Its text.
        text: String,
    },
    /// A photo, with its caption (empty when it has none).
    Photo {
        /// The chat it came from.
        chat_id: i64,
        /// The largest size Telegram offers, to download with `getFile`.
        file_id: String,
        /// The caption.
        caption: String,
    },
    /// A voice note or an audio file.
    Voice {
        /// The chat it came from.
        chat_id: i64,
        /// Its file, to download with `getFile`.
        file_id: String,
        /// What it was, in words ("a voice note"), for a model that does
        /// not hear.
        what: String,
    },
    /// A message the loaded model cannot read (a video, a sticker…).
    Unsupported {
        /// The chat it came from.
        chat_id: i64,
        /// What it was, in words ("a photo").
        what: String,
    },
}

impl Incoming {
    /// The chat the update came from.
    pub fn chat_id(&self) -> i64 {
        match self {
            Incoming::Text { chat_id, .. }
            | Incoming::Photo { chat_id, .. }
            | Incoming::Voice { chat_id, .. }
            | Incoming::Unsupported { chat_id, .. } => *chat_id,
        }
    }
}

/// An update as received: its id (needed to move past it even when the rest
/// is unreadable) and what it asks, if anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    /// Telegram's `update_id`.
    pub update_id: u64,
    /// The work it brings; `None` for updates the bot ignores (edits,
    /// channel posts, unreadable ones).
    pub item: Option<Incoming>,
}

/// Read one update. `None` when it has no usable `update_id` (then there is
/// nothing to acknowledge either).
pub fn parse_update(raw: &Value) -> Option<Received> {
    let update_id = raw.get("update_id")?.as_u64()?;
    // From text, not from the Value: teloxide's update deserializer only
    // reads a message kind from a string source.
    let item = match serde_json::from_str::<Update>(&raw.to_string()) {
        Ok(Update {
            kind: UpdateKind::Message(m),
            ..
        }) => describe(m.chat.id.0, |key| match key {
            "text" => m.text().is_some(),
            "photo" => m.photo().is_some(),
            "voice" => m.voice().is_some(),
            "audio" => m.audio().is_some(),
            "video" => m.video().is_some() || m.video_note().is_some() || m.animation().is_some(),
            "sticker" => m.sticker().is_some(),
            "document" => m.document().is_some(),
            _ => false,
        })
        .map(|item| match item {
            Incoming::Text { chat_id, .. } => Incoming::Text {
                chat_id,
                text: m.text().unwrap_or_default().to_owned(),
            },
            Incoming::Photo { chat_id, .. } => Incoming::Photo {
                chat_id,
                // Telegram lists a photo's sizes smallest first.
                file_id: m
                    .photo()
                    .and_then(<[_]>::last)
                    .map(|p| p.file.id.0.clone())
                    .unwrap_or_default(),
                caption: m.caption().unwrap_or_default().to_owned(),
            },
            Incoming::Voice { chat_id, what, .. } => Incoming::Voice {
                chat_id,
                file_id: m
                    .voice()
                    .map(|v| v.file.id.0.clone())
                    .or_else(|| m.audio().map(|a| a.file.id.0.clone()))
                    .unwrap_or_default(),
                what,
            },
            other => other,
        })
        .filter(|item| {
            !matches!(item, Incoming::Photo { file_id, .. } | Incoming::Voice { file_id, .. } if file_id.is_empty())
        })
        // A message teloxide could not classify comes out `Empty`.
        .or_else(|| raw.get("message").and_then(describe_raw)),
        // teloxide's types are stricter than Telegram is about optional
        // fields (a voice note without `mime_type` comes out as an error
        // kind): read the few fields the bot needs from the raw message.
        Ok(Update {
            kind: UpdateKind::Error(_),
            ..
        })
        | Err(_) => raw.get("message").and_then(describe_raw),
        Ok(_) => None,
    };
    Some(Received { update_id, item })
}

/// A message read field by field: a chat id and a text or a media key.
fn describe_raw(m: &Value) -> Option<Incoming> {
    let chat_id = m.pointer("/chat/id")?.as_i64()?;
    let has = |key: &str| match key {
        "video" => ["video", "video_note", "animation"]
            .iter()
            .any(|k| m.get(k).is_some_and(|v| !v.is_null())),
        "text" => m.get("text").is_some_and(Value::is_string),
        k => m.get(k).is_some_and(|v| !v.is_null()),
    };
    describe(chat_id, has).and_then(|item| match item {
        Incoming::Text { chat_id, .. } => Some(Incoming::Text {
            chat_id,
            text: m["text"].as_str().unwrap_or_default().to_owned(),
        }),
        Incoming::Photo { chat_id, .. } => Some(Incoming::Photo {
            chat_id,
            file_id: m
                .pointer("/photo")
                .and_then(Value::as_array)
                .and_then(|sizes| sizes.last())
                .and_then(|p| p.get("file_id"))
                .and_then(Value::as_str)
                .filter(|id| !id.is_empty())?
                .to_owned(),
            caption: m["caption"].as_str().unwrap_or_default().to_owned(),
        }),
        Incoming::Voice { chat_id, what, .. } => Some(Incoming::Voice {
            chat_id,
            file_id: ["/voice/file_id", "/audio/file_id"]
                .iter()
                .find_map(|p| m.pointer(p).and_then(Value::as_str))
                .filter(|id| !id.is_empty())?
                .to_owned(),
            what,
        }),
        other => Some(other),
    })
}

/// What a message of `chat_id` asks for, given which of its fields are set
/// (`has("text")`, `has("photo")`…); the text, or the photo's file and
/// caption, is filled in by the caller.
fn describe(chat_id: i64, has: impl Fn(&str) -> bool) -> Option<Incoming> {
    if has("text") {
        return Some(Incoming::Text {
            chat_id,
            text: String::new(),
        });
    }
    if has("photo") {
        return Some(Incoming::Photo {
            chat_id,
            file_id: String::new(),
            caption: String::new(),
        });
    }
    for (key, what) in [("voice", "a voice note"), ("audio", "an audio file")] {
        if has(key) {
            return Some(Incoming::Voice {
                chat_id,
                file_id: String::new(),
                what: what.into(),
            });
        }
    }
    let what = [
        ("video", "a video"),
        ("sticker", "a sticker"),
        ("document", "a file"),
    ]
    .into_iter()
    .find(|(k, _)| has(k))?
    .1;
    // Service messages (members joining, pins…) match none: no answer.
    Some(Incoming::Unsupported {
        chat_id,
        what: what.into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn message(update_id: u64, extra: Value) -> Value {
        let mut m = json!({
            "message_id": 1, "date": 1700000000,
            "chat": {"id": 42, "type": "private", "first_name": "Ann"},
            "from": {"id": 42, "is_bot": false, "first_name": "Ann"}
        });
        m.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        json!({"update_id": update_id, "message": m})
    }

    #[test]
    fn text_photo_voice_and_the_unreadable() {
        let t = parse_update(&message(5, json!({"text": "hello"}))).unwrap();
        assert_eq!(
            t.item,
            Some(Incoming::Text {
                chat_id: 42,
                text: "hello".into()
            })
        );
        let size = |id: &str, w: u32| json!({"file_id": id, "file_unique_id": "b", "width": w, "height": w});
        let photo =
            json!({"photo": [size("small", 90), size("big", 800)], "caption": "what's this?"});
        let p = parse_update(&message(6, photo)).unwrap();
        assert_eq!(
            p.item,
            Some(Incoming::Photo {
                chat_id: 42,
                file_id: "big".into(),
                caption: "what's this?".into()
            })
        );
        // No caption, and read field by field when teloxide refuses the
        // message (a size without `file_unique_id`).
        let raw = json!({"photo": [{"file_id": "only", "width": 5, "height": 5}]});
        let p = parse_update(&message(7, raw)).unwrap();
        assert!(
            matches!(p.item, Some(Incoming::Photo { ref file_id, ref caption, .. }) if file_id == "only" && caption.is_empty()),
            "{:?}",
            p.item
        );
        let voice = json!({"voice": {"file_id": "a", "file_unique_id": "b", "duration": 3}});
        let v = parse_update(&message(7, voice)).unwrap();
        assert!(
            matches!(v.item, Some(Incoming::Voice { ref file_id, ref what, .. }) if file_id == "a" && what == "a voice note"),
            "{:?}",
            v.item
        );
        // No mime type: stricter than Telegram, teloxide refuses it; read
        // field by field.
        let bare =
            json!({"update_id": 11, "message": {"chat": {"id": 3}, "voice": {"file_id": "a"}}});
        assert!(matches!(
            parse_update(&bare).unwrap().item,
            Some(Incoming::Voice { chat_id: 3, ref file_id, .. }) if file_id == "a"
        ));
        // An audio file is heard the same way.
        let audio = json!({"audio": {"file_id": "m", "file_unique_id": "u", "duration": 9}});
        assert!(matches!(
            parse_update(&message(9, audio)).unwrap().item,
            Some(Incoming::Voice { ref file_id, ref what, .. }) if file_id == "m" && what == "an audio file"
        ));
        // A message without its chat: skipped, but its id still counts.
        let broken = json!({"update_id": 8, "message": {"message_id": 1, "text": "x"}});
        assert_eq!(
            parse_update(&broken),
            Some(Received {
                update_id: 8,
                item: None
            })
        );
        assert_eq!(parse_update(&json!({"message": {}})), None);
        assert_eq!(parse_update(&json!({"update_id": "nine"})), None);
        let edit =
            json!({"update_id": 10, "edited_message": message(0, json!({"text": "x"}))["message"]});
        assert_eq!(parse_update(&edit).unwrap().item, None);
    }
}
