//! Fuzz the Telegram update parser: the input is an update's JSON as long
//! polling or the webhook receives it, read as the webhook reads a body
//! (`serde_json::from_slice`) and parsed with
//! `hearth_bot::incoming::parse_update` (teloxide's types, then the raw
//! fallback); a text message's text goes through `parse_command`.
//!
//! Invariants: no panic; a parsed update keeps the raw `update_id`; the
//! work item round-trips through its stored (serde) form, as the inbox
//! keeps it.

#![no_main]

use hearth_bot::command::parse_command;
use hearth_bot::incoming::{parse_update, Incoming};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(raw) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let Some(received) = parse_update(&raw) else {
        return;
    };
    assert_eq!(Some(received.update_id), raw["update_id"].as_u64());
    let Some(item) = received.item else {
        return;
    };
    let stored = serde_json::to_string(&item).expect("an item serialises");
    let back: Incoming = serde_json::from_str(&stored).expect("a stored item reads back");
    assert_eq!(back, item);
    if let Incoming::Text { text, .. } = &item {
        let _ = parse_command(text);
    }
});
