//! Long replies split into messages Telegram accepts: at most 4,096
//! characters each, counted as Telegram counts them (UTF-16 code units), cut
//! at the last paragraph break that fits, else a line break, else a
//! sentence end, else a space, and only as a last resort inside a word
//! (never inside a character).

/// Telegram's limit on a message's text, in UTF-16 code units.
pub const MESSAGE_LIMIT: usize = 4096;

/// `text` as messages of at most `limit` UTF-16 code units, none empty.
pub fn split_message(text: &str, limit: usize) -> Vec<String> {
    let limit = limit.max(2);
    let mut out = Vec::new();
    let mut rest = text.trim();
    while !rest.is_empty() {
        if utf16_len(rest) <= limit {
            out.push(rest.to_owned());
            break;
        }
        // The longest prefix within the limit (byte index, at a char boundary).
        let mut units = 0;
        let mut end = 0;
        for (i, c) in rest.char_indices() {
            if units + c.len_utf16() > limit {
                break;
            }
            units += c.len_utf16();
            end = i + c.len_utf8();
        }
        let window = &rest[..end];
        let cut = best_cut(window).unwrap_or(end);
        let (head, tail) = rest.split_at(cut);
        let head = head.trim_end();
        if !head.is_empty() {
            out.push(head.to_owned());
        }
        rest = tail.trim_start();
    }
    out
}

/// Where to cut `window` (a byte index after the break), preferring the
/// strongest break in its second half so that no message is tiny.
fn best_cut(window: &str) -> Option<usize> {
    let half = window.len() / 2;
    let after = |pat: &str| {
        window
            .rfind(pat)
            .map(|i| i + pat.len())
            .filter(|&i| i > half)
    };
    after("\n\n")
        .or_else(|| after("\n"))
        .or_else(|| after(". "))
        .or_else(|| after("! "))
        .or_else(|| after("? "))
        .or_else(|| after(" "))
}

/// Length in UTF-16 code units.
fn utf16_len(s: &str) -> usize {
    s.chars().map(char::len_utf16).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn paragraphs_are_kept_whole() {
        let p = "word ".repeat(300); // 1500 chars
        let text = format!("{p}\n\n{p}\n\n{p}\n\n{p}");
        let parts = split_message(&text, MESSAGE_LIMIT);
        assert_eq!(parts.len(), 2);
        assert!(parts.iter().all(|m| utf16_len(m) <= MESSAGE_LIMIT));
        assert!(parts[0].ends_with("word"), "cut at a paragraph break");
        assert_eq!(parts[0].matches("\n\n").count(), 1);
    }

    #[test]
    fn no_break_at_all_still_fits_and_emoji_stay_whole() {
        let text = "😀".repeat(5000); // 2 UTF-16 units each
        let parts = split_message(&text, MESSAGE_LIMIT);
        assert_eq!(parts.len(), 3);
        assert_eq!(parts.concat(), text);
        assert!(parts.iter().all(|m| utf16_len(m) <= MESSAGE_LIMIT));
        assert!(split_message("  \n ", MESSAGE_LIMIT).is_empty());
        assert_eq!(split_message("short", MESSAGE_LIMIT), vec!["short"]);
    }

    proptest! {
        #[test]
        fn parts_fit_and_keep_every_word(words in proptest::collection::vec("[a-zé😀]{1,12}", 0..400), seps in proptest::collection::vec(0usize..4, 400), limit in 8usize..200) {
            let mut text = String::new();
            for (w, s) in words.iter().zip(&seps) {
                text.push_str(w);
                text.push_str([" ", "\n", "\n\n", ". "][*s]);
            }
            let parts = split_message(&text, limit);
            for p in &parts {
                prop_assert!(utf16_len(p) <= limit);
                prop_assert!(!p.trim().is_empty());
            }
            let squash = |s: &str| s.chars().filter(|c| !c.is_whitespace()).collect::<String>();
            prop_assert_eq!(squash(&parts.concat()), squash(&text));
        }
    }
}
