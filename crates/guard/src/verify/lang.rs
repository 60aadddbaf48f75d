//! The response language, by `whatlang` (trigrams and scripts, pure Rust)
//! where upstream uses Python's langdetect. Codes are ISO 639-1, as in
//! IFEval's kwargs. Like upstream, a text whose language cannot be detected
//! at all (no letters) counts as following the instruction.

use whatlang::Lang;

/// ISO 639-1 code of a `whatlang` language; `None` for the few with no
/// two-letter code.
fn iso639_1(lang: Lang) -> Option<&'static str> {
    Some(match lang {
        Lang::Epo => "eo",
        Lang::Eng => "en",
        Lang::Rus => "ru",
        Lang::Cmn => "zh",
        Lang::Spa => "es",
        Lang::Por => "pt",
        Lang::Ita => "it",
        Lang::Ben => "bn",
        Lang::Fra => "fr",
        Lang::Deu => "de",
        Lang::Ukr => "uk",
        Lang::Kat => "ka",
        Lang::Ara => "ar",
        Lang::Hin => "hi",
        Lang::Jpn => "ja",
        Lang::Heb => "he",
        Lang::Yid => "yi",
        Lang::Pol => "pl",
        Lang::Amh => "am",
        Lang::Jav => "jv",
        Lang::Kor => "ko",
        Lang::Nob => "no",
        Lang::Dan => "da",
        Lang::Swe => "sv",
        Lang::Fin => "fi",
        Lang::Tur => "tr",
        Lang::Nld => "nl",
        Lang::Hun => "hu",
        Lang::Ces => "cs",
        Lang::Ell => "el",
        Lang::Bul => "bg",
        Lang::Bel => "be",
        Lang::Mar => "mr",
        Lang::Kan => "kn",
        Lang::Ron => "ro",
        Lang::Slv => "sl",
        Lang::Hrv => "hr",
        Lang::Srp => "sr",
        Lang::Mkd => "mk",
        Lang::Lit => "lt",
        Lang::Lav => "lv",
        Lang::Est => "et",
        Lang::Tam => "ta",
        Lang::Vie => "vi",
        Lang::Urd => "ur",
        Lang::Tha => "th",
        Lang::Guj => "gu",
        Lang::Uzb => "uz",
        Lang::Pan => "pa",
        Lang::Aze => "az",
        Lang::Ind => "id",
        Lang::Tel => "te",
        Lang::Pes => "fa",
        Lang::Mal => "ml",
        Lang::Ori => "or",
        Lang::Mya => "my",
        Lang::Nep => "ne",
        Lang::Sin => "si",
        Lang::Khm => "km",
        Lang::Tuk => "tk",
        Lang::Aka => "ak",
        Lang::Zul => "zu",
        Lang::Sna => "sn",
        Lang::Afr => "af",
        Lang::Lat => "la",
        Lang::Slk => "sk",
        Lang::Cat => "ca",
        Lang::Tgl => "tl",
        Lang::Hye => "hy",
        #[allow(unreachable_patterns)]
        _ => return None,
    })
}

/// Every ISO 639-1 code [`detect`] can return.
fn detectable(code: &str) -> bool {
    Lang::all().iter().any(|&l| iso639_1(l) == Some(code))
}

/// The most likely language of `text` as an ISO 639-1 code, or `None` when
/// the text has nothing to go on.
pub fn detect(text: &str) -> Option<&'static str> {
    detect_info(text).and_then(|info| iso639_1(info.lang()))
}

/// How much of a text language detection reads.
pub const MAX_SAMPLE_BYTES: usize = 64 * 1024;

fn detect_info(text: &str) -> Option<whatlang::Info> {
    // A sample of this size settles the language; reading megabytes would
    // only cost time.
    let mut end = text.len().min(MAX_SAMPLE_BYTES);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    // Trigram statistics are about letters: lowercase first so that an
    // all-capitals response is recognised as readily as any other.
    whatlang::detect(&text[..end].to_lowercase())
}

/// Languages written in the Latin script, for short texts whose trigrams
/// cannot tell them apart.
const LATIN_SCRIPT: &[&str] = &[
    "en", "es", "pt", "fr", "de", "it", "pl", "vi", "fi", "sw", "nl", "sv", "da", "no", "tr", "cs",
    "hu", "ro", "id", "ca", "la", "et", "lv", "lt", "sl", "sk", "hr", "af", "tl", "eo",
];

/// Whether `text` is in the language `code` (ISO 639-1). Undetectable text
/// counts as in it, as upstream; so does a short text whose detection is
/// unreliable but whose script is the language's (a three-line poem, a list
/// of names), where langdetect usually gets it right and trigrams do not;
/// and text in a language `whatlang` does not know (such as Swahili)
/// unless it is detected as English.
pub fn is_language(text: &str, code: &str) -> bool {
    let code = code.trim().to_lowercase();
    // langdetect says zh-cn / zh-tw; IFEval's list has no Chinese, but a
    // caller may ask for either.
    let code = code.split('-').next().unwrap_or("").to_string();
    let Some(info) = detect_info(text) else {
        return true;
    };
    let found = iso639_1(info.lang());
    if found == Some(code.as_str()) {
        return true;
    }
    if !info.is_reliable()
        && info.script() == whatlang::Script::Latin
        && LATIN_SCRIPT.contains(&code.as_str())
    {
        return true;
    }
    !detectable(&code) && found != Some("en")
}

/// English language names, as IFEval's prompts spell them, to ISO 639-1.
pub const LANGUAGE_NAMES: &[(&str, &str)] = &[
    ("english", "en"),
    ("spanish", "es"),
    ("portuguese", "pt"),
    ("arabic", "ar"),
    ("hindi", "hi"),
    ("french", "fr"),
    ("russian", "ru"),
    ("german", "de"),
    ("japanese", "ja"),
    ("italian", "it"),
    ("bengali", "bn"),
    ("bangla", "bn"),
    ("ukrainian", "uk"),
    ("thai", "th"),
    ("urdu", "ur"),
    ("tamil", "ta"),
    ("telugu", "te"),
    ("bulgarian", "bg"),
    ("korean", "ko"),
    ("polish", "pl"),
    ("hebrew", "he"),
    ("persian", "fa"),
    ("farsi", "fa"),
    ("vietnamese", "vi"),
    ("nepali", "ne"),
    ("swahili", "sw"),
    ("kannada", "kn"),
    ("marathi", "mr"),
    ("gujarati", "gu"),
    ("punjabi", "pa"),
    ("malayalam", "ml"),
    ("finnish", "fi"),
    ("chinese", "zh"),
    ("mandarin", "zh"),
    ("dutch", "nl"),
    ("swedish", "sv"),
    ("danish", "da"),
    ("norwegian", "no"),
    ("turkish", "tr"),
    ("greek", "el"),
    ("czech", "cs"),
    ("hungarian", "hu"),
    ("romanian", "ro"),
    ("indonesian", "id"),
    ("latin", "la"),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_common_languages() {
        assert_eq!(
            detect("The quick brown fox jumps over the lazy dog and runs away."),
            Some("en")
        );
        assert_eq!(
            detect("यह एक हिंदी वाक्य है और यह काफी लंबा है ताकि पहचान हो सके।"),
            Some("hi")
        );
        assert!(is_language("12345 !!!", "fr"));
        assert!(!is_language(
            "This is plainly an English sentence about cats and dogs.",
            "de"
        ));
    }
}
