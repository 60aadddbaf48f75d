//! A checkpoint's processor settings, read from whichever file it has, with
//! transformers' precedence: the image processor (and the audio feature
//! extractor) nested in `processor_config.json` as transformers 5 saves it,
//! else the flat `preprocessor_config.json` of older saves; the processor's
//! own settings (`image_seq_length`, `audio_seq_length`) at the top of
//! `processor_config.json`.

use crate::{read_json_if_present, HfError};
use serde_json::Value;
use std::path::Path;

/// The processor files of one checkpoint directory.
pub(crate) struct Processor {
    /// `processor_config.json`, when present.
    nested: Option<Value>,
    /// `preprocessor_config.json`, when present.
    flat: Option<Value>,
}

impl Processor {
    /// Reads both files; a file that is there but not JSON is an error.
    pub(crate) fn open(dir: &Path) -> Result<Self, HfError> {
        Ok(Self {
            nested: read_json_if_present(&dir.join("processor_config.json"))?,
            flat: read_json_if_present(&dir.join("preprocessor_config.json"))?,
        })
    }

    /// The image processor's settings: nested first, then the flat file.
    pub(crate) fn image(&self) -> Option<&Value> {
        self.sub("image_processor")
    }

    /// The audio feature extractor's settings: nested first, then the flat
    /// file.
    pub(crate) fn feature_extractor(&self) -> Option<&Value> {
        self.sub("feature_extractor")
    }

    /// A setting of the processor itself (`processor_config.json`'s top).
    pub(crate) fn own(&self, key: &str) -> Option<&Value> {
        self.nested.as_ref()?.get(key)
    }

    fn sub(&self, key: &str) -> Option<&Value> {
        self.nested
            .as_ref()
            .and_then(|n| n.get(key))
            .or(self.flat.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir_with(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in files {
            std::fs::write(dir.path().join(name), text).unwrap();
        }
        dir
    }

    #[test]
    fn nested_settings_win_over_the_flat_file() {
        let dir = dir_with(&[
            (
                "processor_config.json",
                r#"{"image_processor": {"max_soft_tokens": 70}, "image_seq_length": 280}"#,
            ),
            ("preprocessor_config.json", r#"{"max_soft_tokens": 280}"#),
        ]);
        let p = Processor::open(dir.path()).unwrap();
        assert_eq!(p.image().unwrap()["max_soft_tokens"], 70);
        assert_eq!(p.own("image_seq_length").unwrap(), 280);
    }

    #[test]
    fn the_flat_file_serves_when_nothing_is_nested() {
        let dir = dir_with(&[
            ("processor_config.json", r#"{"audio_seq_length": 750}"#),
            (
                "preprocessor_config.json",
                r#"{"max_soft_tokens": 140, "feature_size": 128}"#,
            ),
        ]);
        let p = Processor::open(dir.path()).unwrap();
        assert_eq!(p.image().unwrap()["max_soft_tokens"], 140);
        assert_eq!(p.feature_extractor().unwrap()["feature_size"], 128);
        let none = tempfile::tempdir().unwrap();
        let p = Processor::open(none.path()).unwrap();
        assert!(p.image().is_none() && p.own("image_seq_length").is_none());
    }

    #[test]
    fn a_broken_file_is_an_error() {
        let dir = dir_with(&[("processor_config.json", "{not json")]);
        assert!(Processor::open(dir.path()).is_err());
    }
}
