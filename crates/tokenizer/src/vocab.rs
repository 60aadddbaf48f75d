//! The vocabulary as stored in GGUF metadata, independent of any algorithm.

use crate::TokenizerError;
use gguf::StrArray;

/// What a vocabulary entry is, as in `tokenizer.ggml.token_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum TokenType {
    /// Type 0 or any value outside the specification; decodes to nothing.
    Undefined = 0,
    /// Type 1: an ordinary piece (U+2581 stands for a space).
    Normal = 1,
    /// Type 2: the unknown token.
    Unknown = 2,
    /// Type 3: a control token such as `<bos>` or `<start_of_turn>`.
    Control = 3,
    /// Type 4: a user-defined token, always matched as a whole in text.
    UserDefined = 4,
    /// Type 5: a reserved, unused entry.
    Unused = 5,
    /// Type 6: a byte-fallback token `<0xNN>`.
    Byte = 6,
}

impl TokenType {
    /// The type for a GGUF `token_type` value; unknown values map to `Undefined`.
    pub fn from_i32(v: i32) -> Self {
        match v {
            1 => Self::Normal,
            2 => Self::Unknown,
            3 => Self::Control,
            4 => Self::UserDefined,
            5 => Self::Unused,
            6 => Self::Byte,
            _ => Self::Undefined,
        }
    }

    /// Whether text may contain this token verbatim and have it matched as one id
    /// (llama.cpp's special-token partition covers control, user-defined, unknown).
    pub fn is_special(self) -> bool {
        matches!(self, Self::Control | Self::UserDefined | Self::Unknown)
    }
}

/// The algorithm that splits text into tokens, as named by
/// `tokenizer.ggml.model`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TokenizerModel {
    /// `llama`: SentencePiece, merging the highest-scoring pair first.
    #[default]
    Llama,
    /// `gemma4`: BPE over SentencePiece-style pieces (U+2581 for spaces),
    /// merging by rank from `tokenizer.ggml.merges`.
    Gemma4,
}

impl TokenizerModel {
    /// The `tokenizer.ggml.model` value for this algorithm.
    pub fn gguf_name(self) -> &'static str {
        match self {
            Self::Llama => "llama",
            Self::Gemma4 => "gemma4",
        }
    }

    /// The algorithm a `tokenizer.ggml.model` value names, if supported.
    pub fn from_gguf_name(name: &str) -> Option<Self> {
        match name {
            "llama" => Some(Self::Llama),
            "gemma4" => Some(Self::Gemma4),
            _ => None,
        }
    }
}

/// A code model's fill-in-the-middle tokens (CodeGemma's `<|fim_prefix|>`,
/// `<|fim_suffix|>`, `<|fim_middle|>`, `<|file_separator|>`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FimTokens {
    /// Before the code ahead of the gap.
    pub pre: Option<u32>,
    /// Before the code after the gap.
    pub suf: Option<u32>,
    /// Where the middle is written.
    pub mid: Option<u32>,
    /// Before a repository's name.
    pub rep: Option<u32>,
    /// Before each file of the context.
    pub sep: Option<u32>,
}

impl FimTokens {
    /// The prefix, suffix and middle tokens, when the model has all three.
    pub fn infill(&self) -> Option<(u32, u32, u32)> {
        Some((self.pre?, self.suf?, self.mid?))
    }
}

/// The texts llama.cpp takes for each fill-in-the-middle token when a file
/// names none (`llama_vocab::impl::load`).
const FIM_TEXTS: [(&str, &[&str]); 5] = [
    (
        "pre",
        &[
            "<|fim_prefix|>",
            "<fim-prefix>",
            "<fim_prefix>",
            "<｜fim▁begin｜>",
            "<PRE>",
            "▁<PRE>",
            "<|code_prefix|>",
            "<|prefix|>",
        ],
    ),
    (
        "suf",
        &[
            "<|fim_suffix|>",
            "<fim-suffix>",
            "<fim_suffix>",
            "<｜fim▁hole｜>",
            "<SUF>",
            "▁<SUF>",
            "<|code_suffix|>",
            "<|suffix|>",
        ],
    ),
    (
        "mid",
        &[
            "<|fim_middle|>",
            "<fim-middle>",
            "<fim_middle>",
            "<｜fim▁end｜>",
            "<MID>",
            "▁<MID>",
            "<|code_middle|>",
            "<|middle|>",
        ],
    ),
    (
        "rep",
        &[
            "<|fim_repo|>",
            "<|repo_name|>",
            "<fim-repo>",
            "<REPO>",
            "<reponame>",
        ],
    ),
    ("sep", &["<|file_sep|>"]),
];

/// Refuses more `what` than a `u32` id (with a flag bit) can name.
fn check_count(n: usize, what: &str) -> Result<(), TokenizerError> {
    if n > u32::MAX as usize / 2 {
        return Err(TokenizerError::InvalidVocab(format!(
            "{n} {what} is too many"
        )));
    }
    Ok(())
}

/// A tokenizer vocabulary: token texts, scores, types and the special ids.
///
/// Token texts (and BPE merges) are held as the GGUF reader's packed
/// arrays: a 262 144-entry vocabulary is two allocations, not one per token
/// (cold start is a product feature).
#[derive(Debug, Clone)]
pub struct Vocab {
    tokens: StrArray,
    /// BPE merges in rank order, each "LEFT RIGHT" (Gemma 4 only).
    merges: StrArray,
    scores: Vec<f32>,
    types: Vec<TokenType>,
    /// Beginning-of-sequence id (`tokenizer.ggml.bos_token_id`).
    pub bos_id: Option<u32>,
    /// End-of-sequence id (`tokenizer.ggml.eos_token_id`).
    pub eos_id: Option<u32>,
    /// Unknown-token id (`tokenizer.ggml.unknown_token_id`).
    pub unk_id: Option<u32>,
    /// Padding id (`tokenizer.ggml.padding_token_id`).
    pub pad_id: Option<u32>,
    /// End-of-turn id (`tokenizer.ggml.eot_token_id`), if the file names one.
    pub eot_id: Option<u32>,
    /// The fill-in-the-middle tokens, where the model has them.
    pub fim: FimTokens,
    /// Whether the model wants BOS in front of a prompt (`add_bos_token`).
    pub add_bos: bool,
    /// Whether the model wants EOS after a prompt (`add_eos_token`).
    pub add_eos: bool,
    /// Whether text gets a leading space before SentencePiece (`add_space_prefix`).
    pub add_space_prefix: bool,
    /// The Jinja chat template (`tokenizer.chat_template`), if any.
    pub chat_template: Option<String>,
    /// Which algorithm encodes text with this vocabulary (`tokenizer.ggml.model`).
    pub model: TokenizerModel,
}

impl Vocab {
    /// A vocabulary from token texts with optional scores and types (missing
    /// scores are 0, missing types are `Normal`, as llama.cpp assumes).
    ///
    /// Special ids are unset and flags take SentencePiece defaults; set the
    /// public fields afterwards.
    pub fn new(
        tokens: StrArray,
        scores: Option<&[f32]>,
        types: Option<&[i32]>,
    ) -> Result<Self, TokenizerError> {
        let n = tokens.len();
        if n == 0 {
            return Err(TokenizerError::InvalidVocab(
                "the vocabulary is empty".into(),
            ));
        }
        if let Some(s) = scores {
            if s.len() != n {
                return Err(TokenizerError::InvalidVocab(format!(
                    "{} scores for {n} tokens",
                    s.len()
                )));
            }
        }
        if let Some(t) = types {
            if t.len() != n {
                return Err(TokenizerError::InvalidVocab(format!(
                    "{} token types for {n} tokens",
                    t.len()
                )));
            }
        }
        check_count(n, "tokens")?;
        // NaN scores would make the merge order ill-defined; treat them as
        // "never preferred" so the priority queue stays a total order.
        let scores = match scores {
            Some(s) => s
                .iter()
                .map(|&x| if x.is_nan() { f32::MIN } else { x })
                .collect(),
            None => vec![0.0; n],
        };
        let types = match types {
            Some(t) => t.iter().map(|&x| TokenType::from_i32(x)).collect(),
            None => vec![TokenType::Normal; n],
        };
        Ok(Self {
            tokens,
            merges: StrArray::default(),
            scores,
            types,
            bos_id: None,
            eos_id: None,
            unk_id: None,
            pad_id: None,
            eot_id: None,
            fim: FimTokens::default(),
            add_bos: true,
            add_eos: false,
            add_space_prefix: true,
            chat_template: None,
            model: TokenizerModel::Llama,
        })
    }

    /// Set the BPE merges, highest priority first, each two token texts
    /// separated by a space ("▁ t"). Only [`TokenizerModel::Gemma4`] uses
    /// them; [`crate::Tokenizer::new`] checks that they name real tokens.
    pub fn set_merges(&mut self, merges: StrArray) -> Result<(), TokenizerError> {
        check_count(merges.len(), "merges")?;
        self.merges = merges;
        Ok(())
    }

    /// Number of BPE merges.
    pub fn n_merges(&self) -> usize {
        self.merges.len()
    }

    /// The merge of rank `rank` as stored ("LEFT RIGHT"), `None` past the end.
    pub fn merge(&self, rank: usize) -> Option<&str> {
        self.merges.get(rank)
    }

    /// Read the vocabulary of a `tokenizer.ggml.model = llama` (SentencePiece)
    /// or `gemma4` (BPE with merges) file.
    pub fn from_gguf(file: &gguf::GgufFile) -> Result<Self, TokenizerError> {
        const MODEL: &str = "tokenizer.ggml.model";
        const TOKENS: &str = "tokenizer.ggml.tokens";
        const SCORES: &str = "tokenizer.ggml.scores";
        const TYPES: &str = "tokenizer.ggml.token_type";
        const MERGES: &str = "tokenizer.ggml.merges";

        let model_name = match file.get(MODEL) {
            None => return Err(TokenizerError::MissingKey(MODEL.into())),
            Some(v) => v.as_str().ok_or_else(|| invalid(MODEL, "not a string"))?,
        };
        let model = TokenizerModel::from_gguf_name(model_name)
            .ok_or_else(|| TokenizerError::UnsupportedModel(model_name.to_string()))?;
        let tokens = match file.get(TOKENS) {
            None => return Err(TokenizerError::MissingKey(TOKENS.into())),
            Some(_) => file
                .get_str_array(TOKENS)
                .ok_or_else(|| invalid(TOKENS, "not a string array"))?,
        };
        let scores = match file.get(SCORES) {
            None => None,
            Some(_) => Some(
                file.get_f32_array(SCORES)
                    .ok_or_else(|| invalid(SCORES, "not an f32 array"))?,
            ),
        };
        // Converters write i32, but accept any integer array rather than
        // refusing a file over the width of a small enum.
        let types_owned;
        let types = match file.get(TYPES) {
            None => None,
            Some(v) => match file.get_i32_array(TYPES) {
                Some(t) => Some(t),
                None => {
                    let wide = v
                        .as_array()
                        .and_then(|a| a.to_i64_vec())
                        .ok_or_else(|| invalid(TYPES, "not an integer array"))?;
                    types_owned = wide
                        .into_iter()
                        .map(|x| i32::try_from(x).unwrap_or(0))
                        .collect::<Vec<i32>>();
                    Some(&types_owned[..])
                }
            },
        };
        let mut vocab = Self::new(tokens.clone(), scores, types).map_err(|e| match e {
            TokenizerError::InvalidVocab(m) => invalid(TOKENS, &m),
            other => other,
        })?;
        vocab.model = model;
        if model == TokenizerModel::Gemma4 {
            // Without merges BPE would silently degrade to characters and
            // bytes, so a missing key is an error as in llama.cpp.
            let merges = match file.get(MERGES) {
                None => return Err(TokenizerError::MissingKey(MERGES.into())),
                Some(_) => file
                    .get_str_array(MERGES)
                    .ok_or_else(|| invalid(MERGES, "not a string array"))?,
            };
            vocab.set_merges(merges.clone()).map_err(|e| match e {
                TokenizerError::InvalidVocab(m) => invalid(MERGES, &m),
                other => other,
            })?;
        }
        vocab.read_settings(file)?;
        Ok(vocab)
    }

    /// The special ids, the BOS/EOS/space flags and the chat template of
    /// `file` (its tokens and model already read).
    fn read_settings(&mut self, file: &gguf::GgufFile) -> Result<(), TokenizerError> {
        let n = self.len() as u64;
        let id = |key: &str| -> Result<Option<u32>, TokenizerError> {
            match file.get(key) {
                None => Ok(None),
                Some(v) => {
                    // Some converters write -1 (as a signed type) for "none".
                    if v.as_i64().is_some_and(|x| x < 0) {
                        return Ok(None);
                    }
                    let x = v.as_u64().ok_or_else(|| invalid(key, "not an integer"))?;
                    if x >= n {
                        return Err(invalid(key, &format!("id {x} >= vocabulary size {n}")));
                    }
                    Ok(Some(x as u32))
                }
            }
        };
        self.bos_id = id("tokenizer.ggml.bos_token_id")?;
        self.eos_id = id("tokenizer.ggml.eos_token_id")?;
        self.unk_id = id("tokenizer.ggml.unknown_token_id")?;
        self.pad_id = id("tokenizer.ggml.padding_token_id")?;
        self.eot_id = id("tokenizer.ggml.eot_token_id")?;
        let either = |key: &str, old: &str| Ok::<_, TokenizerError>(id(key)?.or(id(old)?));
        self.fim = FimTokens {
            pre: either(
                "tokenizer.ggml.fim_pre_token_id",
                "tokenizer.ggml.prefix_token_id",
            )?,
            suf: either(
                "tokenizer.ggml.fim_suf_token_id",
                "tokenizer.ggml.suffix_token_id",
            )?,
            mid: either(
                "tokenizer.ggml.fim_mid_token_id",
                "tokenizer.ggml.middle_token_id",
            )?,
            rep: id("tokenizer.ggml.fim_rep_token_id")?,
            sep: id("tokenizer.ggml.fim_sep_token_id")?,
        };
        let eog_looking = self.find_fim_tokens();
        self.control_looking_as_control(eog_looking);
        let flag = |key: &str, default: bool| -> Result<bool, TokenizerError> {
            match file.get(key) {
                None => Ok(default),
                Some(v) => v.as_bool().ok_or_else(|| invalid(key, "not a bool")),
            }
        };
        self.add_bos = flag("tokenizer.ggml.add_bos_token", true)?;
        self.add_eos = flag("tokenizer.ggml.add_eos_token", false)?;
        // BPE vocabularies default to no prefix space (llama.cpp's choice);
        // the flag then only affects decode, as there.
        let space_default = self.model == TokenizerModel::Llama;
        self.add_space_prefix = flag("tokenizer.ggml.add_space_prefix", space_default)?;
        self.chat_template = match file.get("tokenizer.chat_template") {
            None => None,
            Some(v) => Some(
                v.as_str()
                    .ok_or_else(|| invalid("tokenizer.chat_template", "not a string"))?
                    .to_string(),
            ),
        };
        Ok(())
    }

    /// The fill-in-the-middle tokens a file does not name, found by their
    /// texts as llama.cpp finds them (the first such token of each kind);
    /// returns, found in the same pass, the tokens whose text is an
    /// end-of-generation text.
    fn find_fim_tokens(&mut self) -> Vec<u32> {
        let mut found: [Option<u32>; 5] = [None; 5];
        let mut eog = Vec::new();
        for i in 0..self.len() {
            let Some(t) = self.tokens.get(i) else {
                continue;
            };
            // Every candidate starts with `<` or `▁<`: most tokens are
            // passed over at their first byte.
            if !(t.starts_with('<') || t.starts_with("▁<")) {
                continue;
            }
            for (k, (_, texts)) in FIM_TEXTS.iter().enumerate() {
                if found[k].is_none() && texts.contains(&t) {
                    found[k] = Some(i as u32);
                }
            }
            if crate::EOG_TEXTS.contains(&t) {
                eog.push(i as u32);
            }
        }
        let f = &mut self.fim;
        for (slot, id) in [&mut f.pre, &mut f.suf, &mut f.mid, &mut f.rep, &mut f.sep]
            .into_iter()
            .zip(found)
        {
            *slot = slot.or(id);
        }
        eog
    }

    /// Makes the fill-in-the-middle tokens and the end-of-generation
    /// texts control tokens, whatever type the file gives them, as
    /// llama.cpp's loader does ("control-looking token ... will be
    /// overridden"): text then spells them out unless control tokens are
    /// parsed. Gemma 4's vocabulary, whose types llama.cpp's exceptions
    /// keep, is left as it is.
    fn control_looking_as_control(&mut self, eog_looking: Vec<u32>) {
        if self.model == TokenizerModel::Gemma4 {
            return;
        }
        let f = self.fim;
        let fim = [f.pre, f.suf, f.mid, f.rep, f.sep].into_iter().flatten();
        for id in fim.chain(eog_looking) {
            if let Some(t) = self.types.get_mut(id as usize) {
                if matches!(
                    t,
                    TokenType::Normal | TokenType::UserDefined | TokenType::Undefined
                ) {
                    *t = TokenType::Control;
                }
            }
        }
    }

    /// Number of tokens.
    pub fn len(&self) -> usize {
        self.types.len()
    }

    /// Whether the vocabulary is empty (never true for a constructed one).
    pub fn is_empty(&self) -> bool {
        self.types.is_empty()
    }

    /// The text of a token, `None` for an id outside the vocabulary.
    pub fn text(&self, id: u32) -> Option<&str> {
        self.tokens.get(id as usize)
    }

    /// The merge score of a token, `None` for an id outside the vocabulary.
    pub fn score(&self, id: u32) -> Option<f32> {
        self.scores.get(id as usize).copied()
    }

    /// The type of a token, `None` for an id outside the vocabulary.
    pub fn token_type(&self, id: u32) -> Option<TokenType> {
        self.types.get(id as usize).copied()
    }
}

fn invalid(key: &str, reason: &str) -> TokenizerError {
    TokenizerError::InvalidKey {
        key: key.to_string(),
        reason: reason.to_string(),
    }
}
