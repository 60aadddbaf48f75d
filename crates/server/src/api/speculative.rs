//! llama.cpp's per-request speculation fields, `speculative.n_max` and
//! `speculative.p_min`, and what they make of the server's speculation.

use crate::error::ApiError;
use engine::{NgramOptions, Speculation};
use serde::Deserialize;

/// The speculation fields of a generating body, as llama.cpp's server
/// names them.
#[derive(Debug, Default, Deserialize)]
pub(super) struct SpeculativeFields {
    /// Most tokens drafted at a time (0 turns speculation off).
    #[serde(rename = "speculative.n_max")]
    n_max: Option<i64>,
    /// The least probability of a draft model's guess.
    #[serde(rename = "speculative.p_min")]
    p_min: Option<f64>,
}

/// What a request chose of speculation; `None` leaves the server's choice.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SpeculationChoice {
    /// Most tokens drafted at a time (0: no speculation).
    pub max_draft: Option<usize>,
    /// The least probability at which a draft model's guess joins the
    /// draft (n-gram drafting has no probabilities and ignores it).
    pub p_min: Option<f32>,
}

impl SpeculativeFields {
    /// The choice, or a 400 naming the field out of range.
    pub(super) fn choice(&self) -> Result<SpeculationChoice, ApiError> {
        let max_draft = match self.n_max {
            None => None,
            Some(n) if (0..=engine::MAX_DRAFT as i64).contains(&n) => Some(n as usize),
            Some(n) => {
                return Err(ApiError::bad_param(
                    "speculative.n_max",
                    format!(
                        "`speculative.n_max` is between 0 (off) and {}, got {n}.",
                        engine::MAX_DRAFT
                    ),
                ))
            }
        };
        let p_min = match self.p_min {
            None => None,
            Some(p) if (0.0..=1.0).contains(&p) => Some(p as f32),
            Some(p) => {
                return Err(ApiError::bad_param(
                    "speculative.p_min",
                    format!("`speculative.p_min` is a probability from 0 to 1, got {p}."),
                ))
            }
        };
        Ok(SpeculationChoice { max_draft, p_min })
    }
}

impl SpeculationChoice {
    /// The speculation of a request: the server's `default` with what the
    /// request gave. A length of 0 turns it off; a length given to a server
    /// without speculation drafts by n-gram lookup; a least probability
    /// alone does not turn speculation on.
    pub fn apply(&self, default: Option<&Speculation>) -> Option<Speculation> {
        let spec = match (default, self.max_draft) {
            (_, Some(0)) | (None, None) => return None,
            (Some(s), None) => s.clone(),
            (Some(s), Some(n)) => s.with_max_draft(n),
            (None, Some(n)) => Speculation::Ngram(NgramOptions {
                max_draft: n,
                ..NgramOptions::default()
            }),
        };
        Some(match self.p_min {
            Some(p) => spec.with_p_min(p),
            None => spec,
        })
    }
}
