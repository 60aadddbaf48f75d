//! The one-shot commands: wiring between flags, the engine and stdout.

use crate::{ConstraintArgs, MediaArgs, ModelArgs, SampleArgs};
use anyhow::{bail, Context, Result};
use engine::{
    Engine, GenerateOptions, GenerationRequest, MediaEmbedding, PromptMedia, Sampler,
    SamplingParams,
};
use std::io::{BufRead, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Where `complete` reads its prompt.
pub enum PromptSource {
    /// Given on the command line.
    Arg(String),
    /// A file.
    File(PathBuf),
    /// Standard input.
    Stdin,
}

impl PromptSource {
    /// From the `-p` and `-f` flags.
    pub fn new(prompt: Option<String>, file: Option<PathBuf>) -> Self {
        match (prompt, file) {
            (Some(p), _) => Self::Arg(p),
            (None, Some(f)) => Self::File(f),
            (None, None) => Self::Stdin,
        }
    }

    fn read(self) -> Result<String> {
        match self {
            Self::Arg(p) => Ok(p),
            Self::File(f) => read_text_file(&f),
            Self::Stdin => {
                let mut bytes = Vec::new();
                std::io::stdin()
                    .read_to_end(&mut bytes)
                    .context("cannot read the prompt from stdin")?;
                utf8(bytes, "stdin")
            }
        }
    }
}

fn utf8(bytes: Vec<u8>, what: &str) -> Result<String> {
    String::from_utf8(bytes).map_err(|e| {
        anyhow::anyhow!(
            "{what} is not valid UTF-8 (invalid byte sequence at byte {})",
            e.utf8_error().valid_up_to()
        )
    })
}

fn read_text_file(path: &Path) -> Result<String> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    utf8(bytes, &path.display().to_string())
}

/// Resolve the model spec and load it through the engine's one loader.
pub fn load_engine(args: &ModelArgs, sampling: SamplingParams) -> Result<Engine> {
    let path = store::resolve(&args.model)?;
    let opts = args.resolved_options(sampling)?;
    Engine::load(&path, &opts).with_context(|| format!("cannot load {}", path.display()))
}

/// Print the session's memory, computed before it is allocated.
pub fn report_session(engine: &Engine) {
    let cfg = engine.model().config();
    let kv = engine.kv_bytes();
    let total = engine.session_bytes();
    eprintln!(
        "hearth: {} layers, {} threads, ctx {}: session memory {:.1} MiB (KV cache {:.1} MiB {}, buffers {:.1} MiB); weights {:.1} MiB mapped; loaded in {:.0} ms",
        cfg.n_layers,
        engine.model().threads(),
        engine.n_ctx(),
        mib(total),
        mib(kv),
        engine.model().kv_type().name(),
        mib(total - kv),
        mib(engine.model().weight_bytes() as usize),
        engine.load_time().as_secs_f64() * 1e3
    );
    if let Some(why) = engine.template().refused() {
        eprintln!("hearth: the model's chat template is not used ({why}); chatting in the built-in Gemma format");
    }
    for adapter in engine.lora_adapters() {
        eprintln!("hearth: {adapter}");
    }
    if let Some(img) = engine.image_settings() {
        let size = match img["image_size"].as_u64() {
            Some(s) => format!("{s}x{s} px"),
            None => "the picture's own size".into(),
        };
        let three = |v: &serde_json::Value| {
            let parts: Vec<String> = v
                .as_array()
                .into_iter()
                .flatten()
                .map(|x| format!("{:.4}", x.as_f64().unwrap_or(f64::NAN)))
                .collect();
            parts.join("/")
        };
        eprintln!(
            "hearth: images: up to {} tokens each, {size}, patches of {} px, mean {}, std {}",
            img["max_tokens_per_image"],
            img["patch_size"],
            three(&img["mean"]),
            three(&img["std"])
        );
    }
    if let Some(n) = engine.audio_tokens() {
        eprintln!("hearth: audio: up to {n} tokens a clip");
    }
}

fn mib(b: usize) -> f64 {
    b as f64 / (1024.0 * 1024.0)
}

/// Encode image files for a prompt, each timed on stderr (a cached one
/// costs nothing).
pub fn encode_images(engine: &Engine, files: &[PathBuf]) -> Result<Vec<MediaEmbedding>> {
    encode_files(files, "image", |bytes| engine.encode_image(bytes))
}

/// Encode audio clips for a prompt, each timed on stderr.
pub fn encode_audio(engine: &Engine, files: &[PathBuf]) -> Result<Vec<MediaEmbedding>> {
    encode_files(files, "audio", |bytes| engine.encode_audio(bytes))
}

/// Read and encode each of `files` (a `kind` of media), reporting each.
fn encode_files(
    files: &[PathBuf],
    kind: &str,
    encode: impl Fn(&[u8]) -> Result<MediaEmbedding, engine::EngineError>,
) -> Result<Vec<MediaEmbedding>> {
    files
        .iter()
        .map(|f| {
            let bytes = std::fs::read(f).with_context(|| format!("cannot read {}", f.display()))?;
            let e = encode(&bytes).with_context(|| format!("{}", f.display()))?;
            eprintln!(
                "hearth: {kind} {}: {} tokens, encoded in {:.2} s{}",
                f.display(),
                e.tokens,
                e.time.as_secs_f64(),
                if e.cached { " (cached)" } else { "" }
            );
            Ok(e)
        })
        .collect()
}

/// A prompt's images and audio clips, encoded (Gemma 4 takes both in one
/// prompt).
pub struct Media {
    /// Encoded images.
    pub images: Vec<MediaEmbedding>,
    /// Encoded clips.
    pub clips: Vec<MediaEmbedding>,
}

impl Media {
    /// Encode `images` and `audio` for `engine`.
    pub fn encode(engine: &Engine, images: &[PathBuf], audio: &[PathBuf]) -> Result<Self> {
        Ok(Self {
            images: encode_images(engine, images)?,
            clips: encode_audio(engine, audio)?,
        })
    }

    fn is_empty(&self) -> bool {
        self.images.is_empty() && self.clips.is_empty()
    }
}

/// The ids of a raw prompt with its images or clips (placed by markers,
/// else first).
fn prompt_ids(
    engine: &Engine,
    prompt: &str,
    media: &Media,
) -> Result<(Vec<u32>, Vec<PromptMedia>)> {
    let tok = engine.tokenizer();
    if media.is_empty() {
        return Ok((tok.encode(prompt, tok.add_bos(), true), Vec::new()));
    }
    // Unplaced media go first: images, then clips, then the text.
    let text = engine::place_images(
        &engine::place_audio(prompt, media.clips.len()),
        media.images.len(),
    );
    let request =
        engine::PromptRequest::text(&text, tok.add_bos()).with_media(&media.images, &media.clips);
    let prompt = engine.prompt(&request)?;
    Ok((prompt.ids, prompt.media))
}

/// `complete`'s output options.
pub struct CompleteOptions {
    /// Tokens to generate.
    pub n_predict: usize,
    /// One JSON object at the end instead of streamed text.
    pub json: bool,
    /// Keep going past end-of-generation tokens.
    pub ignore_eos: bool,
}

/// `hearth complete`.
pub fn complete(
    args: &ModelArgs,
    sample: &SampleArgs,
    constraint: &ConstraintArgs,
    source: PromptSource,
    images: &MediaArgs,
    out_opts: CompleteOptions,
) -> Result<ExitCode> {
    let CompleteOptions {
        n_predict,
        json,
        ignore_eos,
    } = out_opts;
    let prompt = source.read()?;
    let grammar = constraint.grammar()?;
    let engine = load_engine(args, sample.params())?;
    report_session(&engine);
    let constraint = grammar.map(|g| engine.constraint(&g)).transpose()?;
    let media = Media::encode(&engine, &images.images, &images.audio)?;
    let (ids, placed) = prompt_ids(&engine, &prompt, &media)?;
    let mut session = engine.session();
    let mut sampler = Sampler::new(engine.options().sampling.clone());
    let opts = GenerateOptions {
        max_tokens: n_predict,
        stop: Vec::new(),
        stop_on_eog: !ignore_eos,
        render_special: true,
        speculation: sample.speculation(&engine)?,
    };
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let request = GenerationRequest {
        media: &placed,
        constraint,
        ..GenerationRequest::new(&ids, &opts)
    };
    let (generation, write_failed) =
        generate_streaming(&mut session, &mut sampler, request, &mut out, !json)?;
    if let Some(e) = write_failed {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            return Err(e).context("cannot write to stdout");
        }
        return Ok(ExitCode::SUCCESS);
    }
    if json {
        let v = serde_json::json!({
            "prompt_ids": ids,
            "generated_ids": generation.ids,
            "text": generation.text,
        });
        writeln!(out, "{v}")?;
    } else {
        writeln!(out)?;
    }
    report_generation(&generation);
    Ok(ExitCode::SUCCESS)
}

/// Generates `request` to its end, writing the text to `out` as it comes
/// when `stream` is set. A write that fails stops the generation; its error
/// comes back beside what was generated.
fn generate_streaming(
    session: &mut engine::Session,
    sampler: &mut Sampler,
    request: GenerationRequest<'_>,
    out: &mut impl Write,
    stream: bool,
) -> Result<(engine::Generation, Option<std::io::Error>)> {
    let mut write_failed = None;
    let decoding = session.begin(request, sampler)?;
    let generation = session.run(decoding, sampler, |ev| {
        if stream && !ev.text.is_empty() {
            if let Err(e) = out.write_all(ev.text.as_bytes()).and_then(|_| out.flush()) {
                // A closed pipe (`| head`) ends generation quietly.
                write_failed = Some(e);
                return false;
            }
        }
        true
    })?;
    Ok((generation, write_failed))
}

/// The generation's timings on stderr, and the constraint's and the
/// speculation's when they were used.
fn report_generation(generation: &engine::Generation) {
    eprintln!(
        "hearth: prompt {} tokens in {:.0} ms ({:.1} t/s), generated {} tokens in {:.0} ms ({:.1} t/s), stop: {:?}",
        generation.prompt_tokens_evaluated,
        generation.prompt_time.as_secs_f64() * 1e3,
        generation.prompt_tokens_per_s(),
        generation.ids.len(),
        generation.gen_time.as_secs_f64() * 1e3,
        generation.gen_tokens_per_s(),
        generation.finish
    );
    if let Some(c) = &generation.constraint {
        eprintln!(
            "hearth: constraint: {} masks in {:.1} ms, {:.0} µs per token",
            c.masks,
            c.mask_time.as_secs_f64() * 1e3,
            c.per_token().as_secs_f64() * 1e6
        );
    }
    if let Some(s) = &generation.speculation {
        eprintln!(
            "hearth: speculation: {} of {} drafted tokens kept ({:.0}%) in {} rounds",
            s.accepted,
            s.drafted,
            100.0 * s.acceptance(),
            s.rounds
        );
    }
}

/// `hearth tokenize`.
pub fn tokenize(args: &ModelArgs, add_bos: bool, special: bool, text: &str) -> Result<ExitCode> {
    let path = store::resolve(&args.model)?;
    let tok =
        engine::load_tokenizer(&path).with_context(|| format!("cannot load {}", path.display()))?;
    let ids = tok.encode(text, add_bos && tok.add_bos(), special);
    println!("{}", serde_json::to_string(&ids)?);
    Ok(ExitCode::SUCCESS)
}

/// What `hearth logits` scores.
pub struct LogitsInput {
    /// Token ids (when no prompt is given).
    pub ids: Vec<u32>,
    /// A prompt to tokenize instead.
    pub prompt: Option<String>,
    /// Image files the prompt places.
    pub images: Vec<PathBuf>,
    /// Audio clips the prompt places.
    pub audio: Vec<PathBuf>,
    /// Print the images' (or clips') embeddings instead of logits.
    pub embeddings: bool,
}

/// `hearth logits`.
pub fn logits(args: &ModelArgs, input: LogitsInput, top: usize, full: bool) -> Result<ExitCode> {
    let engine = load_engine(args, SamplingParams::default())?;
    report_session(&engine);
    let media = Media::encode(&engine, &input.images, &input.audio)?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    if input.embeddings && media.is_empty() {
        bail!("--embeddings needs --image or --audio files");
    }
    if input.embeddings {
        let width = engine.model().config().hidden;
        let files = input
            .images
            .iter()
            .zip(&media.images)
            .map(|(f, e)| ("image", f, e))
            .chain(
                input
                    .audio
                    .iter()
                    .zip(&media.clips)
                    .map(|(f, e)| ("audio", f, e)),
            );
        for (kind, file, p) in files {
            let rows: Vec<&[f32]> = p.rows.chunks_exact(width).collect();
            let v = serde_json::json!({kind: file.display().to_string(), "tokens": p.tokens, "width": width, "embeddings": rows});
            writeln!(out, "{v}").context("cannot write to stdout")?;
        }
        out.flush()?;
        return Ok(ExitCode::SUCCESS);
    }
    let (ids, placed) = match &input.prompt {
        Some(p) => prompt_ids(&engine, p, &media)?,
        None if media.is_empty() => (input.ids, Vec::new()),
        None => bail!("--image and --audio need a --prompt that places them"),
    };
    // The context is the sequence scored.
    let mut session = engine.session_with_ctx(ids.len().max(1));
    let mut io_err = None;
    session.score_images(&ids, &placed, |pos, row| {
        let lse = engine::logsumexp(row);
        let v = if full {
            serde_json::json!({"pos": pos, "id": ids[pos], "logsumexp": lse, "logits": row})
        } else {
            let t: Vec<(u32, f32)> = engine::top_k(row, top);
            serde_json::json!({"pos": pos, "id": ids[pos], "logsumexp": lse, "top": t})
        };
        if io_err.is_none() {
            io_err = writeln!(out, "{v}").err();
        }
    })?;
    if let Some(e) = io_err {
        return Err(e).context("cannot write to stdout");
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// `hearth perplexity`.
pub fn perplexity(args: &ModelArgs, file: &Path, chunk: usize) -> Result<ExitCode> {
    let text = read_text_file(file)?;
    if chunk == 0 {
        bail!("--chunk must be at least 1");
    }
    let engine = load_engine(args, SamplingParams::default())?;
    let tok = engine.tokenizer();
    let ids = tok.encode(&text, true, true);
    eprintln!(
        "hearth: {} tokens, {} chunks of {chunk}",
        ids.len(),
        ids.len() / chunk.max(1)
    );
    // Each chunk is one context.
    let mut session = engine.session_with_ctx(chunk);
    let start = std::time::Instant::now();
    let report = session.perplexity(&ids, chunk, tok.bos_id(), |c, ppl| {
        eprint!("[{}]{ppl:.4},", c + 1);
    })?;
    eprintln!();
    println!("PPL = {:.4} +/- {:.5}", report.ppl, report.stderr);
    eprintln!(
        "hearth: {} tokens scored in {:.1} s",
        report.scored,
        start.elapsed().as_secs_f64()
    );
    Ok(ExitCode::SUCCESS)
}

/// `hearth inspect`.
pub fn inspect(spec: &str, full: bool) -> Result<ExitCode> {
    let path = store::resolve(spec)?;
    let file = engine::inspect(&path).with_context(|| format!("cannot load {}", path.display()))?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    writeln!(
        out,
        "{}: GGUF v{}, {} metadata entries, {} tensors, {} bytes, alignment {}",
        path.display(),
        file.version,
        file.metadata.len(),
        file.tensors.len(),
        file.file_len,
        file.alignment
    )?;
    writeln!(out, "\nmetadata:")?;
    for m in &file.metadata {
        match &m.full {
            Some(all) if full => writeln!(out, "  {} = {all}", m.key)?,
            _ => writeln!(out, "  {} = {}", m.key, m.value)?,
        }
    }
    writeln!(out, "\ntensors:")?;
    writeln!(
        out,
        "  {:<40} {:<6} {:<22} {:>12}",
        "name", "type", "shape", "bytes"
    )?;
    for t in &file.tensors {
        let shape = format!("{:?}", t.dims);
        writeln!(
            out,
            "  {:<40} {:<6} {:<22} {:>12}",
            t.name, t.ty, shape, t.bytes
        )?;
    }
    let total: u64 = file.tensors.iter().map(|t| t.bytes).sum();
    writeln!(out, "  total tensor bytes: {total}")?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// `hearth pull`.
pub fn pull(spec: &str, quiet: bool) -> Result<ExitCode> {
    let opts = store::PullOptions {
        progress: !quiet,
        // What an interrupted earlier pull left and what this one does about it is said
        // even with --quiet.
        notice: Some(store::Notice(std::sync::Arc::new(|line: &str| {
            eprintln!("hearth pull: {line}")
        }))),
        ..Default::default()
    };
    let path = store::pull(spec, &opts)?;
    println!("{}", path.display());
    Ok(ExitCode::SUCCESS)
}

/// `hearth calc`: each expression's exact value on its own line (from the
/// arguments, or one a line from stdin); exit 1 when any was bad.
pub fn calc(exprs: &[String]) -> Result<ExitCode> {
    let mut ok = true;
    let mut out = std::io::stdout().lock();
    let mut one = |src: &str, out: &mut std::io::StdoutLock<'_>| -> Result<()> {
        match guard::calc::eval(src) {
            Ok(v) => writeln!(out, "{v}")?,
            Err(e) => {
                ok = false;
                writeln!(out, "error: {e}")?;
            }
        }
        Ok(())
    };
    if exprs.is_empty() {
        for line in std::io::stdin().lock().lines() {
            let line = line.context("cannot read stdin")?;
            if line.trim().is_empty() {
                continue;
            }
            one(&line, &mut out)?;
        }
    } else {
        for e in exprs {
            one(e, &mut out)?;
        }
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Print the solution of a z3py-subset program as JSON.
pub fn solve(file: &std::path::Path, timeout_ms: Option<u64>) -> Result<ExitCode> {
    let src = if file.as_os_str() == "-" {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin().lock(), &mut s)
            .context("cannot read the program from stdin (is it UTF-8?)")?;
        s
    } else {
        std::fs::read_to_string(file)
            .with_context(|| format!("cannot read {} (is it UTF-8 text?)", file.display()))?
    };
    let mut limits = guard::logic::Limits::default();
    if let Some(ms) = timeout_ms {
        limits.time_budget = std::time::Duration::from_millis(ms.max(1));
    }
    let solution = guard::logic::solve(&src, &limits)?;
    println!("{}", serde_json::to_string(&solution)?);
    Ok(ExitCode::SUCCESS)
}

/// `hearth check ifeval`'s arguments.
#[derive(clap::Args, Debug)]
pub struct IfevalArgs {
    /// IFEval input rows (JSON lines: key, prompt, instruction_id_list, kwargs).
    #[arg(long)]
    input: std::path::PathBuf,
    /// Responses (JSON lines: prompt, response), matched to inputs by prompt.
    #[arg(long)]
    responses: std::path::PathBuf,
    /// Where to write eval_results_strict.jsonl and eval_results_loose.jsonl.
    #[arg(long, default_value = ".")]
    output: std::path::PathBuf,
    /// Ignore the given instruction ids: extract the requirements from each
    /// prompt's text and check those (rows gain extracted_instruction_id_list
    /// and extracted_kwargs).
    #[arg(long)]
    extract: bool,
}

/// Check responses as the official IFEval checker does and write its files.
pub fn check_ifeval(args: &IfevalArgs) -> Result<ExitCode> {
    use guard::verify::rows::{self, InputRow, Mode, ResponseRow, Summary};
    let read = |p: &std::path::Path| {
        std::fs::read_to_string(p).with_context(|| format!("cannot read {}", p.display()))
    };
    let inputs: Vec<InputRow> = rows::parse_jsonl(&read(&args.input)?)
        .with_context(|| format!("in {}", args.input.display()))?;
    let responses: Vec<ResponseRow> = rows::parse_jsonl(&read(&args.responses)?)
        .with_context(|| format!("in {}", args.responses.display()))?;
    std::fs::create_dir_all(&args.output)
        .with_context(|| format!("cannot create {}", args.output.display()))?;
    for (mode, name) in [
        (Mode::Strict, "eval_results_strict.jsonl"),
        (Mode::Loose, "eval_results_loose.jsonl"),
    ] {
        let out = rows::evaluate(&inputs, &responses, mode, args.extract)?;
        let path = args.output.join(name);
        durable::write_atomic_saying(&path, rows::to_jsonl(&out).as_bytes(), |left| {
            eprintln!("{left}")
        })
        .with_context(|| format!("cannot write {}", path.display()))?;
        let s = Summary::of(&out);
        println!(
            "{name}: prompt-level {:.4}, instruction-level {:.4} ({} prompts)",
            s.prompt_accuracy(),
            s.instruction_accuracy(),
            out.len()
        );
    }
    Ok(ExitCode::SUCCESS)
}
