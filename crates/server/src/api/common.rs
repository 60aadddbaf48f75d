//! The fields every generating body shares: sampling, limits, stop
//! strings, the one grammar, thinking, log-probabilities and `n`.

use super::speculative::SpeculativeFields;
use super::{Input, Request};
use crate::error::ApiError;
use engine::{Grammar, SamplingParams};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Most stop strings a request may give.
const MAX_STOPS: usize = 16;

/// Longest stop string, in bytes. The matcher looks for each stop in the
/// text's tail as long as the stop at every token, so this bounds its cost
/// per token (16 KiB at most).
const MAX_STOP_BYTES: usize = 1024;

/// `stop`: one string or a list.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Stop {
    One(String),
    Many(Vec<String>),
}

/// `stream_options`.
#[derive(Debug, Default, Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: Option<bool>,
}

/// The sampling and limit fields both endpoints share.
#[derive(Debug, Default, Deserialize)]
pub(super) struct Common {
    model: Option<String>,
    stream: Option<bool>,
    stream_options: Option<StreamOptions>,
    temperature: Option<f32>,
    top_p: Option<f32>,
    max_tokens: Option<i64>,
    max_completion_tokens: Option<i64>,
    stop: Option<Stop>,
    seed: Option<i64>,
    frequency_penalty: Option<f32>,
    presence_penalty: Option<f32>,
    n: Option<i64>,
    /// Chat: `true` to return each token's log-probability; legacy
    /// completions: how many alternatives to return with each.
    logprobs: Option<Value>,
    /// Chat: how many alternatives with each token (0 to 20).
    top_logprobs: Option<i64>,
    // Extensions that llama.cpp's server also takes.
    top_k: Option<i64>,
    min_p: Option<f32>,
    repeat_penalty: Option<f32>,
    /// How many recent tokens the repeat penalty looks at.
    repeat_last_n: Option<i64>,
    /// Token id (as a string) to a bias from -100 to 100.
    logit_bias: Option<std::collections::BTreeMap<String, f32>>,
    /// llama.cpp's DRY, XTC and top-nσ.
    #[serde(flatten)]
    samplers: LlamaSamplers,
    /// OpenAI: `{"type": "text" | "json_object" | "json_schema", ...}`.
    response_format: Option<Value>,
    /// llama.cpp's extension: a GBNF grammar.
    grammar: Option<String>,
    /// llama.cpp's extension: a JSON Schema.
    json_schema: Option<Value>,
    /// Hearth's extension: a regular expression.
    regex: Option<String>,
    /// Hearth's extension: a grammar in llguidance's Lark syntax.
    lark_grammar: Option<String>,
    /// vLLM's and llama.cpp's way to set template switches;
    /// `enable_thinking` turns thinking on or off.
    chat_template_kwargs: Option<Value>,
    /// Ollama's thinking switch.
    think: Option<bool>,
    /// OpenAI's reasoning effort: `none` turns thinking off, any other
    /// level on.
    reasoning_effort: Option<String>,
    /// Most thought tokens before the thought channel is closed.
    thinking_budget: Option<i64>,
    /// llama.cpp's server: `speculative.n_max` and `speculative.p_min`.
    #[serde(flatten)]
    speculative: SpeculativeFields,
    /// llama.cpp's server: `[{"id": 0, "scale": 0.5}, ...]`, the LoRA
    /// adapters this request runs with.
    lora: Option<Vec<LoraEntry>>,
}

/// One adapter of a `lora` list (a request's, or `POST /lora-adapters`'
/// body).
#[derive(Debug, Deserialize)]
pub(crate) struct LoraEntry {
    id: i64,
    scale: f32,
}

/// A `lora` list as `(id, scale)` pairs: ids are the server's adapters'
/// (checked against them when the model is known); `field` names it in
/// the error.
pub(crate) fn lora_pairs(
    list: &[LoraEntry],
    field: &'static str,
) -> Result<Vec<(usize, f32)>, ApiError> {
    list.iter()
        .map(|e| match usize::try_from(e.id) {
            Ok(id) if e.scale.is_finite() => Ok((id, e.scale)),
            _ => Err(ApiError::bad_param(
                field,
                "Each `lora` entry is `{\"id\": <adapter id>, \"scale\": <number>}`.",
            )),
        })
        .collect()
}

/// `prompt` of the legacy completions endpoint.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Prompt {
    Text(String),
    Texts(Vec<String>),
    Ids(Vec<u32>),
}

#[derive(Debug, Deserialize)]
pub(super) struct CompletionBody {
    prompt: Prompt,
    /// OpenAI's insertion: the text after the gap the completion fills
    /// (a code model's fill-in-the-middle prompt).
    suffix: Option<String>,
    #[serde(flatten)]
    common: Common,
}

/// llama.cpp's `/completion` body: one prompt (text or token ids), its
/// `n_predict`, whether to answer with the generated ids, and the sampling
/// fields.
#[derive(Debug, Deserialize)]
pub(super) struct NativeCompletionBody {
    prompt: Prompt,
    /// llama.cpp's name for the most tokens (-1: no limit).
    n_predict: Option<i64>,
    /// Answer with the generated token ids too (`tokens`).
    #[serde(default)]
    return_tokens: bool,
    /// How many of the likeliest tokens to give beside each sampled one
    /// (`completion_probabilities`; 0: none).
    #[serde(default)]
    n_probs: i64,
    #[serde(flatten)]
    common: Common,
}

/// A `/completion` body as a request (no limit unless it sets one, as
/// llama.cpp's server), and what its answer carries beside the text; the
/// ids and probabilities come with each token's log-probability.
pub(super) fn native_completion_request(
    mut b: NativeCompletionBody,
    defaults: &SamplingParams,
) -> Result<(Request, super::NativeExtras), ApiError> {
    if b.common.max_tokens.is_none() {
        b.common.max_tokens = b.n_predict.filter(|n| *n >= 0);
    }
    let top = match usize::try_from(b.n_probs) {
        Ok(n) if n <= MAX_TOP_LOGPROBS => n,
        _ => {
            return Err(ApiError::bad_param(
                "n_probs",
                format!(
                    "`n_probs` must be between 0 and {MAX_TOP_LOGPROBS}, got {}.",
                    b.n_probs
                ),
            ))
        }
    };
    let mut req = common(b.common, plain_prompt(b.prompt)?, None, defaults)?;
    let extras = super::NativeExtras {
        ids: b.return_tokens,
        probs: top > 0,
    };
    if extras.probs {
        req.logprobs = Some(top);
    } else if extras.ids {
        req.logprobs = req.logprobs.or(Some(0));
    }
    Ok((req, extras))
}

/// llama.cpp's `/infill` body: the code around the gap, the project's
/// files, the start of the middle, and `/completion`'s other fields.
#[derive(Debug, Deserialize)]
pub(super) struct InfillBody {
    input_prefix: String,
    input_suffix: String,
    #[serde(default)]
    input_extra: Vec<ExtraFile>,
    prompt: Option<String>,
    /// llama.cpp's name for the most tokens (-1: no limit).
    n_predict: Option<i64>,
    #[serde(flatten)]
    common: Common,
}

/// One file of `input_extra`.
#[derive(Debug, Deserialize)]
struct ExtraFile {
    text: String,
    filename: Option<String>,
}

/// An `/infill` body as a request (no limit unless it sets one, as
/// llama.cpp's server).
pub(super) fn infill_request(
    mut b: InfillBody,
    defaults: &SamplingParams,
) -> Result<Request, ApiError> {
    if b.common.max_tokens.is_none() {
        b.common.max_tokens = b.n_predict.filter(|n| *n >= 0);
    }
    let input = Input::Infill(super::InfillInput {
        prefix: b.input_prefix,
        suffix: b.input_suffix,
        extra: b
            .input_extra
            .into_iter()
            .map(|f| engine::InfillFile {
                filename: f.filename.unwrap_or_else(|| "tmp".into()),
                text: f.text,
            })
            .collect(),
        middle: b.prompt.unwrap_or_default(),
    });
    common(b.common, input, None, defaults)
}

/// The one grammar a request asks for through `response_format`, `grammar`,
/// `json_schema`, `regex` or `lark_grammar`.
fn parse_grammar(c: &mut Common) -> Result<Option<(Grammar, &'static str)>, ApiError> {
    let mut found: Vec<(Grammar, &'static str)> = Vec::new();
    if let Some(rf) = c.response_format.take() {
        let kind = rf.get("type").and_then(Value::as_str).unwrap_or("");
        match kind {
            "text" => {}
            "json_object" => found.push((Grammar::JsonObject, "response_format")),
            "json_schema" => {
                let Some(js) = rf.get("json_schema") else {
                    return Err(ApiError::bad_param(
                        "response_format",
                        "`response_format` of type `json_schema` needs a `json_schema` object with a `schema`.",
                    ));
                };
                let Some(schema) = js.get("schema") else {
                    return Err(ApiError::bad_param(
                        "response_format.json_schema.schema",
                        "`response_format.json_schema` needs a `schema`.",
                    ));
                };
                found.push((Grammar::JsonSchema(schema.clone()), "response_format"));
            }
            other => {
                return Err(ApiError::bad_param(
                    "response_format.type",
                    format!(
                    "Unknown response_format type `{other}`; use text, json_object or json_schema."
                ),
                ))
            }
        }
    }
    if let Some(g) = c.grammar.take() {
        found.push((Grammar::Gbnf(g), "grammar"));
    }
    if let Some(s) = c.json_schema.take() {
        found.push((Grammar::JsonSchema(s), "json_schema"));
    }
    if let Some(r) = c.regex.take() {
        found.push((Grammar::Regex(r), "regex"));
    }
    if let Some(l) = c.lark_grammar.take() {
        found.push((Grammar::Lark(l), "lark_grammar"));
    }
    if found.len() > 1 {
        let names: Vec<&str> = found.iter().map(|(_, f)| *f).collect();
        return Err(ApiError::bad_param(
            found[1].1,
            format!("Give one constraint, not several: {}.", names.join(", ")),
        ));
    }
    Ok(found.pop())
}

pub(super) fn completion_request(
    b: CompletionBody,
    default_max: Option<usize>,
    defaults: &SamplingParams,
) -> Result<Request, ApiError> {
    let input = match (b.prompt, b.suffix) {
        (Prompt::Text(prefix), Some(suffix)) => Input::Infill(super::InfillInput {
            prefix,
            suffix,
            ..Default::default()
        }),
        (_, Some(_)) => {
            return Err(ApiError::bad_param(
                "suffix",
                "`suffix` fills a gap after a `prompt` that is one text.",
            ))
        }
        (prompt, None) => plain_prompt(prompt)?,
    };
    common(b.common, input, default_max, defaults)
}

/// A completion's `prompt` without a suffix.
fn plain_prompt(prompt: Prompt) -> Result<Input, ApiError> {
    Ok(match prompt {
        Prompt::Text(t) => Input::Text(t),
        Prompt::Texts(mut ts) if ts.len() == 1 => Input::Text(ts.remove(0)),
        Prompt::Texts(_) => {
            return Err(ApiError::bad_param(
                "prompt",
                "Only one prompt per request is supported.",
            ))
        }
        Prompt::Ids(ids) => Input::Ids(ids),
    })
}

pub(super) fn common(
    mut c: Common,
    input: Input,
    default_max: Option<usize>,
    defaults: &SamplingParams,
) -> Result<Request, ApiError> {
    let grammar = parse_grammar(&mut c)?;
    let logprobs = parse_logprobs(c.logprobs.take(), c.top_logprobs)?;
    let (thinking, thinking_budget) = thinking(&c)?;
    let n = match c.n {
        None => 1,
        Some(n @ 1..=MAX_CHOICES) => n as usize,
        Some(n) => {
            return Err(ApiError::bad_param(
                "n",
                format!("`n` must be between 1 and {MAX_CHOICES}, got {n}."),
            ))
        }
    };
    let max_tokens = max_tokens(&c, default_max)?;
    let stop = stops(c.stop.take())?;
    let params = sampling(&c, defaults)?;
    let speculation = c.speculative.choice()?;
    let lora = c
        .lora
        .as_deref()
        .map(|l| lora_pairs(l, "lora"))
        .transpose()?;
    Ok(Request {
        speculation,
        lora,
        seed_given: c.seed.is_some(),
        model: c.model,
        stream: c.stream.unwrap_or(false),
        include_usage: c
            .stream_options
            .and_then(|o| o.include_usage)
            .unwrap_or(false),
        input,
        params,
        max_tokens,
        stop,
        grammar,
        tools: None,
        thinking,
        thinking_budget,
        guard: None,
        images: Vec::new(),
        audio: Vec::new(),
        logprobs,
        n,
    })
}

/// Whether to think, and the thought's budget: Ollama's `think`, vLLM's
/// `chat_template_kwargs.enable_thinking` or OpenAI's `reasoning_effort`;
/// off unless asked for, as in the Gemma 4 template.
fn thinking(c: &Common) -> Result<(bool, Option<usize>), ApiError> {
    let kw_thinking = match c
        .chat_template_kwargs
        .as_ref()
        .map(|k| k.get("enable_thinking"))
    {
        Some(Some(Value::Bool(b))) => Some(*b),
        Some(Some(other)) => {
            return Err(ApiError::bad_param(
                "chat_template_kwargs.enable_thinking",
                format!("`enable_thinking` is true or false, not {other}."),
            ))
        }
        _ => None,
    };
    let effort_thinking = match c.reasoning_effort.as_deref() {
        None => None,
        Some("none") => Some(false),
        Some("minimal" | "low" | "medium" | "high") => Some(true),
        Some(other) => {
            return Err(ApiError::bad_param(
                "reasoning_effort",
                format!(
                    "Unknown reasoning_effort `{other}`; use none, minimal, low, medium or high."
                ),
            ))
        }
    };
    let budget = match c.thinking_budget {
        None => None,
        Some(b) if b < 0 => {
            return Err(ApiError::bad_param(
                "thinking_budget",
                "`thinking_budget` must not be negative.",
            ))
        }
        Some(b) => Some(usize::try_from(b).unwrap_or(usize::MAX)),
    };
    let on = c.think.or(kw_thinking).or(effort_thinking).unwrap_or(false);
    Ok((on, budget))
}

/// `max_completion_tokens`, else `max_tokens`, else `default_max`.
fn max_tokens(c: &Common, default_max: Option<usize>) -> Result<Option<usize>, ApiError> {
    let max = match (c.max_completion_tokens, c.max_tokens) {
        (Some(m), _) => Some(("max_completion_tokens", m)),
        (None, Some(m)) => Some(("max_tokens", m)),
        (None, None) => None,
    };
    match max {
        Some((name, m)) if m < 1 => Err(ApiError::bad_param(
            name,
            format!("`{name}` must be at least 1."),
        )),
        Some((_, m)) => Ok(Some(usize::try_from(m).unwrap_or(usize::MAX))),
        None => Ok(default_max),
    }
}

/// `stop`: at most [`MAX_STOPS`] of at most [`MAX_STOP_BYTES`], none
/// empty.
fn stops(stop: Option<Stop>) -> Result<Vec<String>, ApiError> {
    let stop = match stop {
        None => Vec::new(),
        Some(Stop::One(s)) => vec![s],
        Some(Stop::Many(v)) => v,
    };
    if stop.len() > MAX_STOPS {
        return Err(ApiError::bad_param(
            "stop",
            format!("At most {MAX_STOPS} stop strings are supported."),
        ));
    }
    if stop.iter().any(String::is_empty) {
        return Err(ApiError::bad_param(
            "stop",
            "Stop strings must not be empty.",
        ));
    }
    if let Some(long) = stop.iter().find(|s| s.len() > MAX_STOP_BYTES) {
        return Err(ApiError::bad_param(
            "stop",
            format!(
                "A stop string is {} bytes; at most {MAX_STOP_BYTES} are supported.",
                long.len()
            ),
        ));
    }
    Ok(stop)
}

/// The sampling settings: the request's, else the server's `defaults`.
fn sampling(c: &Common, defaults: &SamplingParams) -> Result<SamplingParams, ApiError> {
    let mut logit_bias = Vec::new();
    for (key, &bias) in c.logit_bias.iter().flatten() {
        let id = key.trim().parse::<u32>().map_err(|_| {
            ApiError::bad_param(
                "logit_bias",
                format!("`logit_bias` keys are token ids; `{key}` is not one."),
            )
        })?;
        logit_bias.push((id, bias));
    }
    let defaults = defaults.clone();
    let mut params = SamplingParams {
        temperature: c.temperature.unwrap_or(defaults.temperature),
        top_p: c.top_p.unwrap_or(defaults.top_p),
        min_p: c.min_p.unwrap_or(defaults.min_p),
        repeat_penalty: c.repeat_penalty.unwrap_or(defaults.repeat_penalty),
        frequency_penalty: c.frequency_penalty.unwrap_or(defaults.frequency_penalty),
        presence_penalty: c.presence_penalty.unwrap_or(defaults.presence_penalty),
        seed: c.seed.map(|s| s as u64).unwrap_or_else(fresh_seed),
        logit_bias,
        ..defaults
    };
    if let Some(n) = c.repeat_last_n {
        // llama.cpp and Ollama: -1 means the whole context.
        params.repeat_last_n = match n {
            -1 => usize::MAX,
            n if n < 0 => {
                return Err(ApiError::bad_param(
                    "repeat_last_n",
                    "`repeat_last_n` is -1 (the whole context) or at least 0.",
                ))
            }
            n => usize::try_from(n).unwrap_or(usize::MAX),
        };
    }
    let x = &c.samplers;
    dry_settings(x, &mut params.dry)?;
    params.xtc_probability = x.xtc_probability.unwrap_or(params.xtc_probability);
    params.xtc_threshold = x.xtc_threshold.unwrap_or(params.xtc_threshold);
    params.top_n_sigma = x.top_n_sigma.unwrap_or(params.top_n_sigma);
    if let Some(k) = c.top_k {
        if k < 0 {
            return Err(ApiError::bad_param(
                "top_k",
                "`top_k` must not be negative.",
            ));
        }
        params.top_k = usize::try_from(k).unwrap_or(usize::MAX);
    }
    check_ranges(c, &params)?;
    Ok(params)
}

/// llama.cpp's samplers beyond OpenAI's, under llama.cpp's names: fields
/// of chat and legacy completions, and of Ollama's `options`.
#[derive(Debug, Default, Deserialize, Serialize)]
pub(crate) struct LlamaSamplers {
    #[serde(skip_serializing_if = "Option::is_none")]
    dry_multiplier: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dry_base: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dry_allowed_length: Option<i64>,
    /// -1 means the whole context, 0 turns DRY off.
    #[serde(skip_serializing_if = "Option::is_none")]
    dry_penalty_last_n: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dry_sequence_breakers: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    xtc_probability: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    xtc_threshold: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_n_sigma: Option<f32>,
}

/// The request's DRY fields over the server's defaults in `dry`.
fn dry_settings(c: &LlamaSamplers, dry: &mut engine::Dry) -> Result<(), ApiError> {
    dry.multiplier = c.dry_multiplier.unwrap_or(dry.multiplier);
    dry.base = c.dry_base.unwrap_or(dry.base);
    if let Some(n) = c.dry_allowed_length {
        dry.allowed_length = usize::try_from(n).map_err(|_| {
            ApiError::bad_param(
                "dry_allowed_length",
                "`dry_allowed_length` must not be negative.",
            )
        })?;
    }
    if let Some(n) = c.dry_penalty_last_n {
        // llama.cpp: -1 means the whole context.
        dry.penalty_last_n = match n {
            -1 => usize::MAX,
            n => usize::try_from(n).map_err(|_| {
                ApiError::bad_param(
                    "dry_penalty_last_n",
                    "`dry_penalty_last_n` is -1 (the whole context) or at least 0.",
                )
            })?,
        };
    }
    if let Some(breakers) = &c.dry_sequence_breakers {
        if breakers.is_empty() {
            return Err(ApiError::bad_param(
                "dry_sequence_breakers",
                "`dry_sequence_breakers` must be a non-empty array of strings.",
            ));
        }
        dry.sequence_breakers.clone_from(breakers);
    }
    Ok(())
}

/// OpenAI's ranges for temperature and the penalties, then the sampler's.
fn check_ranges(c: &Common, params: &SamplingParams) -> Result<(), ApiError> {
    if let Some(t) = c.temperature {
        if !(0.0..=2.0).contains(&t) {
            return Err(ApiError::bad_param(
                "temperature",
                format!("`temperature` must be between 0 and 2, got {t}."),
            ));
        }
    }
    for (name, v) in [
        ("frequency_penalty", params.frequency_penalty),
        ("presence_penalty", params.presence_penalty),
    ] {
        if !(-2.0..=2.0).contains(&v) {
            return Err(ApiError::bad_param(
                name,
                format!("`{name}` must be between -2 and 2, got {v}."),
            ));
        }
    }
    params.validate().map_err(|e| {
        let param = e.split_whitespace().next().unwrap_or("").to_string();
        ApiError::bad_param(&param, format!("Invalid sampling parameter: {e}."))
    })
}

/// Most choices one request may ask for (OpenAI's limit).
pub const MAX_CHOICES: i64 = 128;

/// Most alternatives a token's log-probability may come with (OpenAI's
/// limit).
pub const MAX_TOP_LOGPROBS: usize = 20;

/// `logprobs` (a switch for chats, a count for legacy completions) and
/// `top_logprobs` as the number of alternatives, `None` when off.
fn parse_logprobs(logprobs: Option<Value>, top: Option<i64>) -> Result<Option<usize>, ApiError> {
    let in_range = |name: &str, n: i64| match usize::try_from(n) {
        Ok(n) if n <= MAX_TOP_LOGPROBS => Ok(n),
        _ => Err(ApiError::bad_param(
            name,
            format!("`{name}` must be between 0 and {MAX_TOP_LOGPROBS}, got {n}."),
        )),
    };
    let top = top.map(|n| in_range("top_logprobs", n)).transpose()?;
    match logprobs {
        None | Some(Value::Null) | Some(Value::Bool(false)) => match top {
            Some(_) => Err(ApiError::bad_param(
                "top_logprobs",
                "`top_logprobs` needs `logprobs` set to true.",
            )),
            None => Ok(None),
        },
        Some(Value::Bool(true)) => Ok(Some(top.unwrap_or(0))),
        Some(Value::Number(n)) => match n.as_i64() {
            Some(n) => in_range("logprobs", n).map(Some),
            None => Err(ApiError::bad_param(
                "logprobs",
                "`logprobs` must be an integer.",
            )),
        },
        Some(other) => Err(ApiError::bad_param(
            "logprobs",
            format!("`logprobs` is true or false (chat) or a count (completions), not {other}."),
        )),
    }
}

/// A seed for requests that give none: differs from call to call.
fn fresh_seed() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    nanos
        ^ COUNTER
            .fetch_add(1, Ordering::Relaxed)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
}
