//! The `tokenizer.*` metadata of a checkpoint: SentencePiece `tokenizer.model`
//! for Gemma 2 and 3 (`tokenizer.ggml.model = llama`), the BPE of
//! `tokenizer.json` for Gemma 4 (`tokenizer.ggml.model = gemma4`).

use crate::{read_json, read_json_if_present, spm, Family, HfError};
use gguf::{GgufWriter, MetaArray, MetaValue};
use serde_json::Value;
use std::path::Path;

/// GGUF token types (shared with SentencePiece's enum).
const NORMAL: i32 = 1;
const UNKNOWN: i32 = 2;
const CONTROL: i32 = 3;
const USER_DEFINED: i32 = 4;
/// SentencePiece's type for unused pieces.
const UNUSED: i32 = 5;
const BYTE: i32 = 6;

struct Vocab {
    tokens: Vec<String>,
    scores: Vec<f32>,
    types: Vec<i32>,
    merges: Option<Vec<String>>,
}

/// Gemma 1's `<end_of_turn>` id, as llama.cpp's converter fixes it.
const GEMMA1_EOT: u32 = 107;

pub(crate) fn write_tokenizer(
    w: &mut GgufWriter,
    dir: &Path,
    family: Family,
    config: &Value,
) -> Result<(), HfError> {
    let (model, vocab) = match family {
        Family::Gemma4 => ("gemma4", from_tokenizer_json(&dir.join("tokenizer.json"))?),
        _ => ("llama", sentencepiece_vocab(dir, config)?),
    };
    let find = |text: &str| vocab.tokens.iter().position(|t| t == text);
    let id_of = |key: &str, fallback: &str| -> Option<u32> {
        let from_config = config.get(key).and_then(|v| match v {
            Value::Array(a) => a.first().and_then(Value::as_u64),
            v => v.as_u64(),
        });
        from_config
            .or_else(|| find(fallback).map(|i| i as u64))
            .and_then(|i| u32::try_from(i).ok())
            .filter(|&i| (i as usize) < vocab.tokens.len())
    };
    w.set("tokenizer.ggml.model", MetaValue::String(model.into()));
    if model == "llama" {
        w.set("tokenizer.ggml.pre", MetaValue::String("default".into()));
    }
    w.set(
        "tokenizer.ggml.tokens",
        MetaValue::Array(MetaArray::String(vocab.tokens.iter().collect())),
    );
    w.set(
        "tokenizer.ggml.scores",
        MetaValue::Array(MetaArray::F32(vocab.scores)),
    );
    w.set(
        "tokenizer.ggml.token_type",
        MetaValue::Array(MetaArray::I32(vocab.types)),
    );
    if let Some(m) = vocab.merges {
        w.set(
            "tokenizer.ggml.merges",
            MetaValue::Array(MetaArray::String(m.into())),
        );
    }
    for (key, cfg_key, text) in [
        ("tokenizer.ggml.bos_token_id", "bos_token_id", "<bos>"),
        ("tokenizer.ggml.eos_token_id", "eos_token_id", "<eos>"),
        ("tokenizer.ggml.unknown_token_id", "unk_token_id", "<unk>"),
        ("tokenizer.ggml.padding_token_id", "pad_token_id", "<pad>"),
    ] {
        if let Some(id) = id_of(cfg_key, text) {
            w.set(key, MetaValue::U32(id));
        }
    }
    w.set("tokenizer.ggml.add_bos_token", MetaValue::Bool(true));
    // Written only when the tokenizer says, as llama.cpp's converter does.
    if let Some(flag) = adds_eos(dir)? {
        w.set("tokenizer.ggml.add_eos_token", MetaValue::Bool(flag));
    }
    // llama.cpp's converter names Gemma 1's (CodeGemma's) `<end_of_turn>`
    // by its id, whatever the vocabulary holds there.
    if family == Family::Gemma && vocab.tokens.len() > GEMMA1_EOT as usize {
        w.set("tokenizer.ggml.eot_token_id", MetaValue::U32(GEMMA1_EOT));
    }
    w.set("tokenizer.ggml.add_sep_token", MetaValue::Bool(false));
    w.set("tokenizer.ggml.add_space_prefix", MetaValue::Bool(false));
    if let Some(t) = chat_template(dir)? {
        w.set("tokenizer.chat_template", MetaValue::String(t));
    }
    Ok(())
}

/// Whether the tokenizer says it puts EOS after a text (EmbeddingGemma's
/// does): `add_eos_token` in `tokenizer_config.json`, else `true` where an
/// `<eos>` closes the single-text template of `tokenizer.json`'s
/// post-processor (transformers 5 writes only that); `None` where it says
/// nothing.
fn adds_eos(dir: &Path) -> Result<Option<bool>, HfError> {
    let config = read_json_if_present(&dir.join("tokenizer_config.json"))?;
    if let Some(flag) = config.and_then(|c| c.get("add_eos_token").and_then(Value::as_bool)) {
        return Ok(Some(flag));
    }
    let Some(json) = read_json_if_present(&dir.join("tokenizer.json"))? else {
        return Ok(None);
    };
    let single = json
        .pointer("/post_processor/single")
        .and_then(Value::as_array);
    let last = single.and_then(|s| s.last());
    let id = last
        .and_then(|t| t.pointer("/SpecialToken/id"))
        .and_then(Value::as_str);
    Ok((id == Some("<eos>")).then_some(true))
}

/// The chat template from `chat_template.jinja` or `tokenizer_config.json`.
fn chat_template(dir: &Path) -> Result<Option<String>, HfError> {
    let jinja = dir.join("chat_template.jinja");
    if jinja.is_file() {
        return std::fs::read_to_string(&jinja)
            .map(Some)
            .map_err(|source| HfError::Io {
                path: jinja,
                source,
            });
    }
    let cfg = dir.join("tokenizer_config.json");
    if !cfg.is_file() {
        return Ok(None);
    }
    Ok(read_json(&cfg)?
        .get("chat_template")
        .and_then(Value::as_str)
        .map(str::to_string))
}

fn from_sentencepiece(path: &Path) -> Result<Vocab, HfError> {
    let bytes = std::fs::read(path).map_err(|source| HfError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let pieces = spm::parse_model(&bytes)
        .map_err(|e| HfError::Tokenizer(format!("{}: {e}", path.display())))?;
    Ok(Vocab {
        tokens: pieces.iter().map(|p| p.text.clone()).collect(),
        scores: pieces.iter().map(|p| p.score).collect(),
        types: pieces.iter().map(|p| p.kind).collect(),
        merges: None,
    })
}

/// Gemma 2, 3 and 3n: the SentencePiece pieces (`tokenizer.model`, or the
/// vocabulary of `tokenizer.json` when a transformers 5 save left only
/// that), padded to the config's `vocab_size` with `[PAD<id>]`, then the
/// tokens a checkpoint adds past or over the pieces.
fn sentencepiece_vocab(dir: &Path, config: &Value) -> Result<Vocab, HfError> {
    let model_path = dir.join("tokenizer.model");
    let json_path = dir.join("tokenizer.json");
    let mut v = if model_path.is_file() {
        from_sentencepiece(&model_path)?
    } else if json_path.is_file() {
        spm_from_tokenizer_json(&json_path)?
    } else {
        return Err(HfError::Tokenizer(format!(
            "neither {} nor {} is there (Gemma 2 and 3 checkpoints need one of them)",
            model_path.display(),
            json_path.display()
        )));
    };
    let text = config.get("text_config").unwrap_or(config);
    let size = text
        .get("vocab_size")
        .or_else(|| config.get("vocab_size"))
        .and_then(Value::as_u64);
    let added = added_tokens(dir, &v.tokens)?;
    let end = match size {
        Some(s) => usize::try_from(s).unwrap_or(usize::MAX).max(v.tokens.len()),
        // No size given: the vocabulary ends at the last added token.
        None => added
            .iter()
            .map(|a| a.id.saturating_add(1))
            .max()
            .unwrap_or(0)
            .max(v.tokens.len()),
    };
    if end > 4_000_000 {
        return Err(HfError::Tokenizer(format!(
            "implausible vocabulary of {end}"
        )));
    }
    for i in v.tokens.len()..end {
        v.tokens.push(format!("[PAD{i}]"));
        v.scores.push(-10000.0);
        v.types.push(UNUSED);
    }
    // As llama.cpp's converter: an added token past `vocab_size` has no
    // embedding row, so it is left out; a special one (or one that looks
    // special) is a control token, any other user-defined, with its
    // SentencePiece spaces written as spaces.
    for a in added.into_iter().filter(|a| a.id < end) {
        let control = a.special || looks_special(&a.text);
        v.tokens[a.id] = if control {
            a.text
        } else {
            a.text.replace('\u{2581}', " ")
        };
        v.types[a.id] = if control { CONTROL } else { USER_DEFINED };
        v.scores[a.id] = -1000.0;
    }
    Ok(v)
}

/// One token a checkpoint adds to its tokenizer.
struct AddedToken {
    id: usize,
    text: String,
    special: bool,
}

impl AddedToken {
    /// An entry of `added_tokens` or `added_tokens_decoder`.
    fn from_entry(id: Option<u64>, entry: &Value) -> Option<Self> {
        Some(Self {
            id: usize::try_from(id?).ok()?,
            text: entry.get("content")?.as_str()?.to_string(),
            special: entry
                .get("special")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        })
    }
}

/// The added tokens of every file that lists them, in the order their
/// writers give them precedence (a later file's entry wins): transformers
/// 5's `tokenizer.json` `added_tokens`, the older `added_tokens.json`, and
/// `tokenizer_config.json`'s `added_tokens_decoder` (llama.cpp's order).
/// `tokenizer.json` restates the SentencePiece model's own control pieces
/// (`<pad>`, `<unk>`, ...) as added tokens; those keep their pieces' kinds,
/// as llama.cpp, which reads only the other two files, keeps them.
fn added_tokens(dir: &Path, pieces: &[String]) -> Result<Vec<AddedToken>, HfError> {
    let mut out = Vec::new();
    if let Some(json) = read_json_if_present(&dir.join("tokenizer.json"))? {
        let entries = json.get("added_tokens").and_then(Value::as_array);
        out.extend(
            entries
                .into_iter()
                .flatten()
                .filter_map(|a| AddedToken::from_entry(a.get("id")?.as_u64(), a))
                .filter(|a| pieces.get(a.id) != Some(&a.text)),
        );
    }
    if let Some(json) = read_json_if_present(&dir.join("added_tokens.json"))? {
        for (text, id) in json.as_object().into_iter().flatten() {
            if let Some(id) = id.as_u64().and_then(|i| usize::try_from(i).ok()) {
                out.push(AddedToken {
                    id,
                    text: text.clone(),
                    special: false,
                });
            }
        }
    }
    if let Some(json) = read_json_if_present(&dir.join("tokenizer_config.json"))? {
        let entries = json.get("added_tokens_decoder").and_then(Value::as_object);
        out.extend(
            entries
                .into_iter()
                .flatten()
                .filter_map(|(id, a)| AddedToken::from_entry(id.parse().ok(), a)),
        );
    }
    Ok(out)
}

/// Added tokens that some checkpoints forget to mark special, as llama.cpp
/// recognises them.
fn looks_special(text: &str) -> bool {
    matches!(text, "<pad>" | "<mask>" | "<2mass>" | "[@BOS@]")
        || (text.starts_with("<|") && text.ends_with("|>"))
        || (text.starts_with("<\u{ff5c}") && text.ends_with("\u{ff5c}>"))
        || (text.starts_with("<unused") && text.ends_with('>'))
}

/// The SentencePiece vocabulary of a Gemma `tokenizer.json` (the BPE with
/// byte fallback that transformers converts `tokenizer.model` into). Its
/// merges follow the pieces' ids, so a score of minus the id gives
/// SentencePiece's merge order.
fn spm_from_tokenizer_json(path: &Path) -> Result<Vocab, HfError> {
    let mut v = from_tokenizer_json(path)?;
    v.merges = None;
    for (i, (score, ty)) in v.scores.iter_mut().zip(&v.types).enumerate() {
        *score = if *ty == NORMAL { -(i as f32) } else { 0.0 };
    }
    Ok(v)
}

fn is_byte_token(t: &str) -> bool {
    t.len() == 6
        && t.starts_with("<0x")
        && t.ends_with('>')
        && t[3..5].bytes().all(|b| b.is_ascii_hexdigit())
}

/// A `tokenizers` BPE vocabulary: ids from `model.vocab` and `added_tokens`,
/// merges as "left right" strings, special added tokens as control tokens.
fn from_tokenizer_json(path: &Path) -> Result<Vocab, HfError> {
    let v = read_json(path)?;
    let bad = |m: &str| HfError::Tokenizer(format!("{}: {m}", path.display()));
    let model = v.get("model").ok_or_else(|| bad("no `model`"))?;
    if model.get("type").and_then(Value::as_str) != Some("BPE") {
        return Err(bad("only BPE tokenizer.json files are supported"));
    }
    let mut entries = vocab_entries(model).map_err(bad)?;
    let special = add_added_tokens(&v, &mut entries).map_err(bad)?;
    let tokens = tokens_by_id(entries).map_err(bad)?;
    let unk = model.get("unk_token").and_then(Value::as_str);
    let types = token_types(&tokens, &special, unk);
    let merges = bpe_merges(model).map_err(bad)?;
    // llama.cpp's converter gives BPE vocabularies no scores; merges rank.
    Ok(Vocab {
        scores: vec![-1000.0; tokens.len()],
        tokens,
        types,
        merges: Some(merges),
    })
}

/// The (id, text) pairs of `model.vocab`.
fn vocab_entries(model: &Value) -> Result<Vec<(usize, String)>, &'static str> {
    let vocab = model
        .get("vocab")
        .and_then(Value::as_object)
        .ok_or("no `model.vocab`")?;
    vocab
        .iter()
        .map(|(t, id)| {
            id.as_u64()
                .and_then(|i| usize::try_from(i).ok())
                .map(|i| (i, t.clone()))
                .ok_or("a vocabulary id is not an integer")
        })
        .collect()
}

/// Add the `added_tokens` whose ids `model.vocab` lacks to `entries`; every
/// added token's id with whether it is special.
fn add_added_tokens(
    v: &Value,
    entries: &mut Vec<(usize, String)>,
) -> Result<Vec<(usize, bool)>, &'static str> {
    let mut special = Vec::new();
    for a in v
        .get("added_tokens")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let (Some(id), Some(text)) = (
            a.get("id").and_then(Value::as_u64),
            a.get("content").and_then(Value::as_str),
        ) else {
            return Err("an added token lacks `id` or `content`");
        };
        let id = usize::try_from(id).map_err(|_| "added token id too large")?;
        let is_special = a.get("special").and_then(Value::as_bool).unwrap_or(false);
        special.push((id, is_special));
        if !entries.iter().any(|(i, _)| *i == id) {
            entries.push((id, text.to_string()));
        }
    }
    Ok(special)
}

/// The tokens in id order, the ids no entry names filled with `[PAD<id>]`.
fn tokens_by_id(entries: Vec<(usize, String)>) -> Result<Vec<String>, &'static str> {
    let n = entries.iter().map(|(i, _)| i + 1).max().unwrap_or(0);
    if n == 0 || n > 4_000_000 {
        return Err("empty or implausibly large vocabulary");
    }
    let mut tokens = vec![None; n];
    for (i, t) in entries {
        tokens[i] = Some(t);
    }
    Ok(tokens
        .into_iter()
        .enumerate()
        .map(|(i, t)| t.unwrap_or_else(|| format!("[PAD{i}]")))
        .collect())
}

/// Each token's type: added tokens control (special) or user-defined, then
/// the unknown token, byte tokens and the rest normal.
fn token_types(tokens: &[String], special: &[(usize, bool)], unk: Option<&str>) -> Vec<i32> {
    tokens
        .iter()
        .enumerate()
        .map(|(i, t)| match special.iter().find(|(id, _)| *id == i) {
            Some((_, true)) => CONTROL,
            Some((_, false)) => USER_DEFINED,
            None if Some(t.as_str()) == unk => UNKNOWN,
            None if is_byte_token(t) => BYTE,
            None => NORMAL,
        })
        .collect()
}

/// `model.merges` as "left right" strings, whether the file writes each as
/// such a string or as a pair.
fn bpe_merges(model: &Value) -> Result<Vec<String>, &'static str> {
    model
        .get("merges")
        .and_then(Value::as_array)
        .ok_or("no `model.merges`")?
        .iter()
        .map(|m| match m {
            Value::String(s) => Ok(s.clone()),
            Value::Array(pair) => match (
                pair.first().and_then(Value::as_str),
                pair.get(1).and_then(Value::as_str),
            ) {
                (Some(a), Some(b)) if pair.len() == 2 => Ok(format!("{a} {b}")),
                _ => Err("a merge is not a pair of strings"),
            },
            _ => Err("a merge is neither a string nor a pair"),
        })
        .collect()
}
