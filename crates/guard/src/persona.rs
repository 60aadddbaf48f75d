//! The persona pass: in a role-play ("Imagine yourself as a doctor…"), a
//! small model steps out of the role ("I am an AI, not a licensed medical
//! professional"). The pass finds the role in the conversation and such
//! identity leaks in the answer; the pipeline then regenerates once with the
//! role re-anchored, and as a last resort drops the leaking sentences.

use engine::ChatMessage;
use regex::Regex;
use std::sync::LazyLock;

/// How a conversation asks for a role.
static ROLE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)\b(?:imagine\s+(?:yourself\s+as|you\s+are)|pretend\s+(?:to\s+be|you\s+are)|act\s+as|role-?play\s+as|suppose\s+you\s+are|you\s+are\s+now|you\s+are|as)\s+(?:a|an|the)\s+(?P<role>[a-z][a-z-]*(?:\s+(?:and\s+)?[a-z][a-z-]*){0,3})",
    )
    .expect("the role pattern is valid")
});

/// Words that end a role's name (`a doctor tasked with…` is `doctor`).
const ROLE_STOP: &[&str] = &[
    "tasked",
    "who",
    "that",
    "with",
    "for",
    "in",
    "at",
    "on",
    "from",
    "to",
    "whose",
    "which",
    "named",
    "called",
    "working",
    "specializing",
    "specialising",
    "by",
    "of",
    "you",
    "your",
    "is",
    "will",
    "should",
    "must",
    "can",
    "has",
    "have",
];

/// Phrases in which a model says what it is rather than who it plays.
static LEAK: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?ix)
        \bI(?:'m|\s+am)\s+(?:just\s+|only\s+|merely\s+)?(?:an?\s+)?(?:AI|artificial\s+intelligence|(?:large\s+)?language\s+model|LLM|chatbot|virtual\s+assistant|computer\s+program|AI\s+(?:assistant|model|language\s+model))\b
      | \bas\s+an?\s+(?:AI|artificial\s+intelligence|(?:large\s+)?language\s+model|AI\s+(?:assistant|model|language\s+model))\b
      | \bI(?:'m|\s+am)\s+not\s+(?:a\s+|an\s+)?(?:real|licensed|qualified|certified|actual|human|medical|practicing|practising)\s+(?:[a-z]+\s+){0,2}(?:doctor|physician|professional|lawyer|attorney|therapist|advisor|adviser|expert|person|human)\b
      | \bI\s+(?:cannot|can't|am\s+unable\s+to|am\s+not\s+able\s+to)\s+(?:provide|give|offer)\s+(?:professional\s+)?(?:medical|legal|financial)\s+advice\b
      | \bI\s+(?:don't|do\s+not)\s+have\s+(?:personal\s+)?(?:feelings|emotions|opinions|a\s+body|personal\s+experiences)\b
      | \bmy\s+(?:training\s+data|knowledge\s+cutoff)\b",
    )
    .expect("the leak pattern is valid")
});

/// The role the conversation asks the model to play, if any: from the
/// system prompt first, then the first user turn.
pub fn role(messages: &[ChatMessage]) -> Option<String> {
    let ordered = messages
        .iter()
        .filter(|m| m.role == "system")
        .chain(messages.iter().filter(|m| m.role == "user"));
    for m in ordered {
        for c in ROLE.captures_iter(&m.content) {
            let Some(r) = c.name("role") else { continue };
            // `as a result` / `you are a fan of` are not roles: the role
            // must come from the strong phrases, or from `as a` in a system
            // prompt.
            let lead = c.get(0).map_or("", |m| m.as_str()).to_ascii_lowercase();
            let weak = lead.starts_with("as ") || lead.starts_with("you are a");
            if weak && m.role != "system" {
                continue;
            }
            let words: Vec<&str> = r
                .as_str()
                .split_whitespace()
                .take_while(|w| !ROLE_STOP.contains(&w.to_ascii_lowercase().as_str()))
                .collect();
            if !words.is_empty() {
                return Some(words.join(" "));
            }
        }
    }
    None
}

/// The identity-leak phrases in `answer`.
pub fn leaks(answer: &str) -> Vec<String> {
    LEAK.find_iter(answer)
        .map(|m| m.as_str().to_string())
        .collect()
}

/// The system note that re-anchors the role for a regeneration.
pub fn anchor(role: &str) -> String {
    format!(
        "You are {article} {role}. Stay in this role for the whole conversation: answer as {article} {role} would, in the first person, with the knowledge and voice of one. Never say that you are an AI, a language model or a program, and never step out of the role.",
        article = article(role)
    )
}

fn article(word: &str) -> &'static str {
    match word.chars().next().map(|c| c.to_ascii_lowercase()) {
        Some('a' | 'e' | 'i' | 'o' | 'u') => "an",
        _ => "a",
    }
}

/// `answer` without the sentences that leak, when something is left.
pub fn drop_leaks(answer: &str) -> Option<String> {
    let mut out = String::new();
    let mut dropped = false;
    for para in answer.split("\n\n") {
        let mut kept = Vec::new();
        for sentence in split_keep(para) {
            if LEAK.is_match(sentence) {
                dropped = true;
            } else {
                kept.push(sentence);
            }
        }
        let p = kept.concat().trim().to_string();
        if !p.is_empty() {
            if !out.is_empty() {
                out.push_str("\n\n");
            }
            out.push_str(&p);
        }
    }
    (dropped && !out.trim().is_empty()).then_some(out)
}

/// Sentences of `text`, each with its trailing punctuation and space.
fn split_keep(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let b = text.as_bytes();
    for i in 0..b.len() {
        if matches!(b[i], b'.' | b'!' | b'?')
            && b.get(i + 1).is_none_or(|c| c.is_ascii_whitespace())
        {
            let end = (i + 2).min(b.len());
            out.push(&text[start..end]);
            start = end;
        }
    }
    if start < text.len() {
        out.push(&text[start..]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_role() {
        let q93 = "Imagine yourself as a doctor tasked with devising innovative remedies for various ailments and maladies.";
        assert_eq!(role(&[ChatMessage::user(q93)]).as_deref(), Some("doctor"));
        let q99 = "Suppose you are a mathematician and poet. You always write your proofs as short poets.";
        assert_eq!(
            role(&[ChatMessage::user(q99)]).as_deref(),
            Some("mathematician and poet")
        );
        let sys = ChatMessage::system("You are a pirate captain. Speak like one.");
        assert_eq!(
            role(&[sys, ChatMessage::user("hi")]).as_deref(),
            Some("pirate captain")
        );
        assert_eq!(role(&[ChatMessage::user("What is 2+2?")]), None);
        assert_eq!(
            role(&[ChatMessage::user("As a result, the sky is blue. Why?")]),
            None
        );
    }

    #[test]
    fn finds_and_drops_leaks() {
        let a = "I am an AI, not a licensed medical professional. For abdominal pain, rest and hydrate. See a physician if it persists.";
        assert_eq!(leaks(a).len(), 1);
        assert_eq!(
            drop_leaks(a).as_deref(),
            Some("For abdominal pain, rest and hydrate. See a physician if it persists.")
        );
        assert!(leaks("As your doctor, I recommend rest.").is_empty());
        assert!(!leaks("As an AI language model, I can't diagnose.").is_empty());
        assert_eq!(drop_leaks("I am an AI."), None);
    }
}
