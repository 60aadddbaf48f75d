//! The `tokenizer.*` metadata of a checkpoint: SentencePiece `tokenizer.model`
//! for Gemma 2 and 3 (`tokenizer.ggml.model = llama`), the BPE of
//! `tokenizer.json` for Gemma 4 (`tokenizer.ggml.model = gemma4`).

use crate::{read_json, spm, Family, HfError};
use gguf::{GgufWriter, MetaArray, MetaValue};
use serde_json::Value;
use std::path::Path;

/// GGUF token types (shared with SentencePiece's enum).
const NORMAL: i32 = 1;
const UNKNOWN: i32 = 2;
const CONTROL: i32 = 3;
const USER_DEFINED: i32 = 4;
const BYTE: i32 = 6;

struct Vocab {
    tokens: Vec<String>,
    scores: Vec<f32>,
    types: Vec<i32>,
    merges: Option<Vec<String>>,
}

pub(crate) fn write_tokenizer(
    w: &mut GgufWriter,
    dir: &Path,
    family: Family,
    config: &Value,
) -> Result<(), HfError> {
    let json_path = dir.join("tokenizer.json");
    let model_path = dir.join("tokenizer.model");
    let (model, vocab) = match family {
        Family::Gemma4 => ("gemma4", from_tokenizer_json(&json_path)?),
        Family::Gemma3n if model_path.is_file() => {
            let mut v = from_sentencepiece(&model_path)?;
            let text = config.get("text_config").unwrap_or(config);
            let size = text.get("vocab_size").and_then(Value::as_u64);
            extend_to_vocab(&mut v, &json_path, size)?;
            ("llama", v)
        }
        _ if model_path.is_file() => ("llama", from_sentencepiece(&model_path)?),
        _ => {
            return Err(HfError::Tokenizer(format!(
                "{} is missing (Gemma 2 and 3 checkpoints need the SentencePiece model)",
                model_path.display()
            )))
        }
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
        MetaValue::Array(MetaArray::String(vocab.tokens.clone())),
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
            MetaValue::Array(MetaArray::String(m)),
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
    w.set("tokenizer.ggml.add_sep_token", MetaValue::Bool(false));
    w.set("tokenizer.ggml.add_space_prefix", MetaValue::Bool(false));
    if let Some(t) = chat_template(dir)? {
        w.set("tokenizer.chat_template", MetaValue::String(t));
    }
    Ok(())
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

/// Gemma 3n's vocabulary is larger than its SentencePiece model: the media
/// tokens past it come from `tokenizer.json`'s added tokens, and any id
/// still unnamed becomes `[PAD<id>]`, as llama.cpp's converter names it.
fn extend_to_vocab(v: &mut Vocab, json_path: &Path, size: Option<u64>) -> Result<(), HfError> {
    /// SentencePiece's type for unused pieces.
    const UNUSED: i32 = 5;
    let mut added: Vec<(usize, String, bool)> = Vec::new();
    if json_path.is_file() {
        let json = read_json(json_path)?;
        for a in json
            .get("added_tokens")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let (Some(id), Some(text)) = (
                a.get("id").and_then(Value::as_u64),
                a.get("content").and_then(Value::as_str),
            ) {
                let special = a.get("special").and_then(Value::as_bool).unwrap_or(false);
                added.push((id as usize, text.to_string(), special));
            }
        }
    }
    let base = v.tokens.len();
    let end = added
        .iter()
        .map(|a| a.0 + 1)
        .chain(size.map(|s| s as usize))
        .max()
        .unwrap_or(base)
        .max(base);
    if end > 4_000_000 {
        return Err(HfError::Tokenizer(format!(
            "implausible vocabulary of {end}"
        )));
    }
    for i in base..end {
        v.tokens.push(format!("[PAD{i}]"));
        v.scores.push(-1000.0);
        v.types.push(UNUSED);
    }
    for (id, text, special) in added.into_iter().filter(|a| a.0 >= base) {
        v.tokens[id] = text;
        v.types[id] = if special { CONTROL } else { USER_DEFINED };
    }
    Ok(())
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
    let vocab = model
        .get("vocab")
        .and_then(Value::as_object)
        .ok_or_else(|| bad("no `model.vocab`"))?;
    let mut entries: Vec<(usize, String)> = vocab
        .iter()
        .map(|(t, id)| {
            id.as_u64()
                .and_then(|i| usize::try_from(i).ok())
                .map(|i| (i, t.clone()))
                .ok_or_else(|| bad("a vocabulary id is not an integer"))
        })
        .collect::<Result<_, _>>()?;
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
            return Err(bad("an added token lacks `id` or `content`"));
        };
        let id = usize::try_from(id).map_err(|_| bad("added token id too large"))?;
        let is_special = a.get("special").and_then(Value::as_bool).unwrap_or(false);
        special.push((id, is_special));
        if !entries.iter().any(|(i, _)| *i == id) {
            entries.push((id, text.to_string()));
        }
    }
    let n = entries.iter().map(|(i, _)| i + 1).max().unwrap_or(0);
    if n == 0 || n > 4_000_000 {
        return Err(bad("empty or implausibly large vocabulary"));
    }
    let mut tokens = vec![None; n];
    for (i, t) in entries {
        tokens[i] = Some(t);
    }
    let unk = model.get("unk_token").and_then(Value::as_str);
    let tokens: Vec<String> = tokens
        .into_iter()
        .enumerate()
        .map(|(i, t)| t.unwrap_or_else(|| format!("[PAD{i}]")))
        .collect();
    let types: Vec<i32> = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| match special.iter().find(|(id, _)| *id == i) {
            Some((_, true)) => CONTROL,
            Some((_, false)) => USER_DEFINED,
            None if Some(t.as_str()) == unk => UNKNOWN,
            None if is_byte_token(t) => BYTE,
            None => NORMAL,
        })
        .collect();
    let merges = model
        .get("merges")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("no `model.merges`"))?
        .iter()
        .map(|m| match m {
            Value::String(s) => Ok(s.clone()),
            Value::Array(pair) => match (
                pair.first().and_then(Value::as_str),
                pair.get(1).and_then(Value::as_str),
            ) {
                (Some(a), Some(b)) if pair.len() == 2 => Ok(format!("{a} {b}")),
                _ => Err(bad("a merge is not a pair of strings")),
            },
            _ => Err(bad("a merge is neither a string nor a pair")),
        })
        .collect::<Result<Vec<_>, _>>()?;
    // llama.cpp's converter gives BPE vocabularies no scores; merges rank.
    Ok(Vocab {
        scores: vec![-1000.0; tokens.len()],
        tokens,
        types,
        merges: Some(merges),
    })
}
