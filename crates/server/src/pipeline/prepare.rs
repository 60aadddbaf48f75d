//! A parsed request made ready for the scheduler: templated and tokenized,
//! its images and clips encoded, its grammar compiled.

use crate::api::{self, Input, Request};
use crate::budget::{check_tokenize, GRAMMAR_MEMORY, TOKENIZE_BYTES_PER_BYTE};
use crate::error::ApiError;
use crate::media;
use crate::truncate::{self, Overflow};
use crate::{AppState, ServerConfig};
use engine::tools::{self, ToolFormat};
use engine::{ChatOptions, Engine, EngineError, Grammar, PromptRequest};
use serde_json::Value;
use std::sync::Arc;

/// A request made ready for the scheduler.
pub(super) struct Prepared {
    pub(super) req: Request,
    pub(super) prompt: Vec<u32>,
    /// Turns dropped to fit the context.
    pub(super) dropped: usize,
    pub(super) images: Vec<engine::PromptMedia>,
    /// One compiled grammar per choice, when there is a grammar.
    pub(super) constraints: Vec<engine::Constraint>,
    pub(super) thinking: Option<engine::Thinking>,
}

/// Template and tokenize `req` (its images and clips encoded), and, with
/// `compile`, compile its grammar.
fn prepare(
    engine: &Engine,
    req: Request,
    config: &ServerConfig,
    compile: bool,
) -> Result<Prepared, ApiError> {
    let (req, declarations) = for_this_model(engine, req)?;
    // A model that does not think ignores the switch.
    let thinking = match (&req.input, req.thinking) {
        (Input::Chat(_), true) => engine.thinking(req.thinking_budget),
        _ => None,
    };
    let options = ChatOptions {
        tools: &declarations,
        ..ChatOptions::reply(thinking.is_some())
    };
    let media = !req.images.is_empty() || !req.audio.is_empty();
    let mut dropped = 0;
    let (prompt, images) = match &req.input {
        // Turns with images or clips are not dropped: their media would
        // have to go too.
        Input::Chat(messages) if !media && config.context_overflow == Overflow::Truncate => {
            let n_ctx = engine.n_ctx();
            let room = req.max_tokens.unwrap_or(n_ctx / 8).min(n_ctx / 4).max(1);
            let fitted = truncate::fit(messages, n_ctx, room, |m| {
                tokenize_chat(engine, m, &options)
            })?;
            dropped = fitted.dropped;
            (fitted.ids, Vec::new())
        }
        _ if !media => (
            tokenize(engine, &req.input, &options, config.infill_layout)?,
            Vec::new(),
        ),
        _ => media_prompt(engine, &req, config, &options)?,
    };
    // Compiled once: each further choice gets a copy, not a compile.
    let constraints = match &req.grammar {
        Some((grammar, field)) if compile => {
            let first = engine
                .constraint(grammar)
                .map_err(|e| grammar_error(field, e))?;
            let mut all: Vec<_> = (1..req.n).map(|_| first.fork()).collect();
            all.insert(0, first);
            all
        }
        _ => Vec::new(),
    };
    Ok(Prepared {
        req,
        prompt,
        dropped,
        images,
        constraints,
        thinking,
    })
}

/// `req` as this model reads it: DRY's sequence breakers as its tokens, the
/// conversation's tool calls and results in the model's format (written out in the JSON convention, or left for a
/// template that writes calls itself, which then also declares the tools:
/// the declarations returned), and the reply's grammar for that format.
pub(crate) fn for_this_model(
    engine: &Engine,
    mut req: Request,
) -> Result<(Request, Vec<Value>), ApiError> {
    engine.bind_dry(&mut req.params.dry);
    let format = engine.tool_format();
    if let Some(mode) = &mut req.tools {
        mode.format = format;
    }
    if let (ToolFormat::Json, Input::Chat(messages)) = (format, &mut req.input) {
        let json_answer = matches!(
            req.grammar,
            Some((Grammar::JsonSchema(_) | Grammar::JsonObject, _))
        );
        *messages = tools::json_conversation(messages, req.tools.as_ref(), json_answer);
    }
    let mut declarations = Vec::new();
    if let Some(mode) = &req.tools {
        req.grammar = api::reply_grammar(mode, req.grammar.take())?;
        declarations = mode.declarations();
    }
    Ok((req, declarations))
}

/// [`prepare`] on the prep pool: templating, tokenizing, encoding images
/// and compiling a grammar can take a while. The prompt's text is checked
/// against the request's memory budget before it is tokenized.
pub(super) async fn prepare_off_thread(
    st: &AppState,
    engine: Arc<Engine>,
    req: Request,
    compile: bool,
) -> Result<Prepared, ApiError> {
    let limits = &st.config.limits;
    check_media_counts(limits, &req)?;
    check_tokenize(input_bytes(&req), limits.request_memory)?;
    let memory = prepare_memory(&req, compile, limits.request_memory);
    let config = Arc::clone(&st.config);
    st.work
        .run(memory, move || prepare(&engine, req, &config, compile))
        .await?
}

/// What preparing `req` may take, for the prep pool: tokenizing its text,
/// decoding its media (one picture or clip at a time, each priced from its
/// header, a file not yet read at the request's budget) and compiling its
/// grammar.
fn prepare_memory(req: &Request, compile: bool, budget: usize) -> u64 {
    let tokenize = input_bytes(req) as u64 * TOKENIZE_BYTES_PER_BYTE;
    let pictures = req.images.iter().map(|image| match image {
        // One that cannot be priced fails its decode at once.
        media::ImageSource::Data(bytes) => ::media::Picture::decode_memory_of(bytes).unwrap_or(0),
        media::ImageSource::File(_) => budget as u64,
    });
    let clips = req
        .audio
        .iter()
        .map(|clip| ::media::Clip::decode_memory_bound(clip.len()));
    let media = pictures.chain(clips).max().unwrap_or(0).min(budget as u64);
    let grammar = if compile && (req.grammar.is_some() || req.tools.is_some()) {
        GRAMMAR_MEMORY
    } else {
        0
    };
    tokenize + media + grammar
}

/// The bytes of text a request's prompt holds (what its template adds is
/// small beside a prompt that could pass the budget).
fn input_bytes(req: &Request) -> usize {
    match &req.input {
        Input::Chat(messages) => messages.iter().map(message_bytes).sum(),
        Input::Text(text) => text.len(),
        Input::Ids(_) => 0,
        Input::Infill(infill) => infill.bytes(),
    }
}

/// The bytes of text a message holds: its role and content, and its calls
/// and result fields, which a template writes too.
pub(crate) fn message_bytes(m: &engine::ChatMessage) -> usize {
    let calls: usize = m.tool_calls.iter().map(|c| c.to_string().len()).sum();
    let ids =
        m.tool_call_id.as_ref().map_or(0, String::len) + m.name.as_ref().map_or(0, String::len);
    m.role.len() + m.content.len() + calls + ids
}

/// More images or clips than `--max-images` / `--max-clips` is a 400 that
/// names the limit.
fn check_media_counts(limits: &crate::Limits, req: &Request) -> Result<(), ApiError> {
    for (n, max, what, flag) in [
        (req.images.len(), limits.images, "images", "--max-images"),
        (req.audio.len(), limits.clips, "audio clips", "--max-clips"),
    ] {
        if n > max {
            return Err(ApiError::bad_param(
                "messages",
                format!(
                    "The request carries {n} {what}; this server takes at most {max} ({flag})."
                ),
            ));
        }
    }
    Ok(())
}

/// A grammar that does not compile, or is past a limit, is the client's
/// fault: 400, naming the field it came from and the problem (and for the
/// byte limit, the flag that raises it). A compiler that failed is ours:
/// 500.
fn grammar_error(field: &str, e: EngineError) -> ApiError {
    let message = match e {
        EngineError::InvalidGrammar(msg) => format!("`{field}` cannot be used: invalid {msg}"),
        EngineError::GrammarTooLarge(msg) => format!(
            "`{field}` cannot be used: {msg} (start the server with a larger --max-grammar-bytes to allow it)"
        ),
        other => return ApiError::internal(other.to_string()),
    };
    ApiError {
        code: Some("invalid_grammar"),
        ..ApiError::bad_param(field, message)
    }
}

/// The ids of a chat with images and audio clips, each read, decoded and
/// encoded (or taken from the cache): a bad image or clip, or media for a
/// model without the tower for it, is the client's error.
fn media_prompt(
    engine: &Engine,
    req: &Request,
    config: &ServerConfig,
    options: &ChatOptions<'_>,
) -> Result<(Vec<u32>, Vec<engine::PromptMedia>), ApiError> {
    let Input::Chat(messages) = &req.input else {
        return Err(ApiError::bad_param(
            "prompt",
            "Images and audio are read in chats only.",
        ));
    };
    let mut images = Vec::with_capacity(req.images.len());
    for (i, source) in req.images.iter().enumerate() {
        let field = format!("image {}", i + 1);
        let bytes = image_bytes(source, &field, config)?;
        let e = engine
            .encode_image(&bytes)
            .map_err(|e| media::refusal(&field, e))?;
        images.push(e);
    }
    let clips = req
        .audio
        .iter()
        .enumerate()
        .map(|(i, bytes)| {
            engine
                .encode_audio(bytes)
                .map_err(|e| media::refusal(&format!("audio clip {}", i + 1), e))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let request = PromptRequest::chat_with(messages, *options).with_media(&images, &clips);
    engine
        .prompt(&request)
        .map(|p| (p.ids, p.media))
        .map_err(|e| ApiError::bad_param("messages", format!("{e}.")))
}

/// The file bytes of image `field`: inline, or read from a local file when
/// the server allows it (never more than the body limit).
fn image_bytes<'a>(
    source: &'a api::ImageSource,
    field: &str,
    config: &ServerConfig,
) -> Result<std::borrow::Cow<'a, [u8]>, ApiError> {
    match source {
        api::ImageSource::Data(b) => Ok(std::borrow::Cow::Borrowed(b.as_slice())),
        api::ImageSource::File(_) if !config.allow_file_images => Err(ApiError::bad_param(
            "messages",
            "File URLs are off on this server (start it with --allow-file-images); send the image as a data URL.",
        )),
        // The error names the image, not its path: a message never
        // echoes a file path.
        api::ImageSource::File(path) => media::read_image_file(path, config.limits.body_bytes)
            .map(std::borrow::Cow::Owned)
            .map_err(|e| {
                ApiError::bad_param("messages", format!("Cannot read the file of {field}: {e}."))
            }),
    }
}

fn tokenize_chat(
    engine: &Engine,
    messages: &[engine::ChatMessage],
    options: &ChatOptions<'_>,
) -> Result<Vec<u32>, ApiError> {
    engine
        .prompt(&PromptRequest::chat_with(messages, *options))
        .map(|p| p.ids)
        .map_err(|e| {
            ApiError::bad_param("messages", format!("Cannot apply the chat template: {e}"))
        })
}

fn tokenize(
    engine: &Engine,
    input: &Input,
    options: &ChatOptions<'_>,
    layout: engine::InfillLayout,
) -> Result<Vec<u32>, ApiError> {
    match input {
        Input::Chat(messages) => tokenize_chat(engine, messages, options),
        Input::Text(text) => {
            let tok = engine.tokenizer();
            Ok(tok.encode(text, tok.add_bos(), true))
        }
        Input::Infill(i) => {
            let infill = engine::Infill {
                prefix: &i.prefix,
                suffix: &i.suffix,
                extra: &i.extra,
                middle: &i.middle,
                layout,
            };
            let request = engine::PromptRequest {
                input: engine::PromptInput::Infill(infill),
                images: &[],
                clips: &[],
            };
            engine
                .prompt(&request)
                .map(|p| p.ids)
                .map_err(|e| ApiError::bad_param("input_prefix", format!("{e}.")))
        }
        Input::Ids(ids) => {
            let vocab = engine.model().config().vocab;
            if let Some(bad) = ids.iter().find(|&&id| id as usize >= vocab) {
                return Err(ApiError::bad_param(
                    "prompt",
                    format!("Token id {bad} is out of the vocabulary of {vocab}."),
                ));
            }
            Ok(ids.clone())
        }
    }
}
