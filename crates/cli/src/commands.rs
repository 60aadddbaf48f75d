//! The one-shot commands: wiring between flags, the engine and stdout.

use crate::{ModelArgs, SampleArgs};
use anyhow::{bail, Context, Result};
use engine::{Engine, EngineOptions, GenerateOptions, Sampler, SamplingParams};
use std::io::{Read, Write};
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

/// Resolve the model spec and load it.
pub fn load_engine(args: &ModelArgs) -> Result<Engine> {
    let path = store::resolve(&args.model)?;
    let threads = args
        .threads
        .unwrap_or_else(|| EngineOptions::default().threads);
    if threads == 0 {
        bail!("--threads must be at least 1");
    }
    let opts = EngineOptions {
        threads,
        precision: if args.precise {
            engine::Precision::Exact
        } else {
            engine::Precision::Quantized
        },
    };
    let Some(name) = &args.quant else {
        return Engine::load(&path, &opts)
            .with_context(|| format!("cannot load {}", path.display()));
    };
    let ftype = convert::FileType::from_name(name).with_context(|| {
        format!(
            "unknown --quant type `{name}` (known: {})",
            convert::FileType::names()
        )
    })?;
    let file =
        model::open_model_file(&path).with_context(|| format!("cannot load {}", path.display()))?;
    let quantized = convert::quantize_gguf(&file, ftype)
        .with_context(|| format!("cannot quantize {} to {name}", path.display()))?;
    let file = gguf::GgufFile::from_bytes(quantized.to_bytes())?;
    Engine::from_file(std::sync::Arc::new(file), &opts)
        .with_context(|| format!("cannot load {} as {name}", path.display()))
}

/// Sampling parameters from flags; without `--seed` the clock seeds.
pub fn sampling(args: &SampleArgs) -> SamplingParams {
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    });
    SamplingParams {
        temperature: args.temp,
        top_k: args.top_k,
        top_p: args.top_p,
        min_p: args.min_p,
        repeat_penalty: args.repeat_penalty,
        repeat_last_n: args.repeat_last_n,
        seed,
        ..SamplingParams::default()
    }
}

/// Print the session's memory, computed before it is allocated.
pub fn report_session(engine: &Engine, ctx: usize) {
    let n_ctx = if ctx == 0 { engine.default_ctx() } else { ctx };
    let cfg = engine.model().config();
    let kv = engine.kv_bytes(n_ctx);
    let total = engine.session_bytes(n_ctx);
    eprintln!(
        "hearth: {} layers, {} threads, ctx {n_ctx}: session memory {:.1} MiB (KV cache {:.1} MiB, buffers {:.1} MiB); weights {:.1} MiB mapped; loaded in {:.0} ms",
        cfg.n_layers,
        engine.model().threads(),
        mib(total),
        mib(kv),
        mib(total - kv),
        mib(engine.model().weight_bytes() as usize),
        engine.load_time().as_secs_f64() * 1e3
    );
}

fn mib(b: usize) -> f64 {
    b as f64 / (1024.0 * 1024.0)
}

/// `hearth complete`.
pub fn complete(
    args: &ModelArgs,
    sample: &SampleArgs,
    ctx: usize,
    source: PromptSource,
    n_predict: usize,
    json: bool,
    ignore_eos: bool,
) -> Result<ExitCode> {
    let prompt = source.read()?;
    let engine = load_engine(args)?;
    report_session(&engine, ctx);
    let tok = engine.tokenizer();
    let ids = tok.encode(&prompt, tok.add_bos(), true);
    let mut session = engine.session(ctx);
    let mut sampler = Sampler::new(sampling(sample));
    let opts = GenerateOptions {
        max_tokens: n_predict,
        stop: Vec::new(),
        stop_on_eog: !ignore_eos,
        render_special: true,
    };
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let mut write_failed = None;
    let generation = session.generate(&ids, &mut sampler, &opts, |ev| {
        if !json && !ev.text.is_empty() {
            if let Err(e) = out.write_all(ev.text.as_bytes()).and_then(|_| out.flush()) {
                // A closed pipe (`| head`) ends generation quietly.
                write_failed = Some(e);
                return false;
            }
        }
        true
    })?;
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
    Ok(ExitCode::SUCCESS)
}

/// `hearth tokenize`.
pub fn tokenize(args: &ModelArgs, add_bos: bool, special: bool, text: &str) -> Result<ExitCode> {
    let path = store::resolve(&args.model)?;
    let file =
        gguf::GgufFile::open(&path).with_context(|| format!("cannot load {}", path.display()))?;
    let tok = engine::Tokenizer::from_gguf(&file)?;
    let ids = tok.encode(text, add_bos && tok.add_bos(), special);
    println!("{}", serde_json::to_string(&ids)?);
    Ok(ExitCode::SUCCESS)
}

/// `hearth logits`.
pub fn logits(args: &ModelArgs, ids: &[u32], top: usize, full: bool) -> Result<ExitCode> {
    let engine = load_engine(args)?;
    let mut session = engine.session(ids.len().max(1));
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut io_err = None;
    session.score(ids, |pos, row| {
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
    let engine = load_engine(args)?;
    let tok = engine.tokenizer();
    let ids = tok.encode(&text, true, true);
    eprintln!(
        "hearth: {} tokens, {} chunks of {chunk}",
        ids.len(),
        ids.len() / chunk.max(1)
    );
    let mut session = engine.session(chunk);
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
    let file =
        gguf::GgufFile::open(&path).with_context(|| format!("cannot load {}", path.display()))?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    writeln!(
        out,
        "{}: GGUF v{}, {} metadata entries, {} tensors, {} bytes, alignment {}",
        path.display(),
        file.version(),
        file.metadata().len(),
        file.tensors().len(),
        file.file_len(),
        file.alignment()
    )?;
    writeln!(out, "\nmetadata:")?;
    for (k, v) in file.metadata() {
        match v {
            gguf::MetaValue::Array(a) if full => writeln!(out, "  {k} = {a:?}")?,
            _ => writeln!(out, "  {k} = {v}")?,
        }
    }
    writeln!(out, "\ntensors:")?;
    writeln!(
        out,
        "  {:<40} {:<6} {:<22} {:>12}",
        "name", "type", "shape", "bytes"
    )?;
    for t in file.tensors() {
        let shape = format!("{:?}", t.dims);
        writeln!(
            out,
            "  {:<40} {:<6} {:<22} {:>12}",
            t.name,
            t.ty.name(),
            shape,
            t.n_bytes
        )?;
    }
    let total: u64 = file.tensors().iter().map(|t| t.n_bytes).sum();
    writeln!(out, "  total tensor bytes: {total}")?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// `hearth pull`.
pub fn pull(spec: &str, quiet: bool) -> Result<ExitCode> {
    let opts = store::PullOptions {
        progress: !quiet,
        ..Default::default()
    };
    let path = store::pull(spec, &opts)?;
    println!("{}", path.display());
    Ok(ExitCode::SUCCESS)
}
