//! `hearth embed`: texts in (arguments, a file or stdin), one vector per
//! text out, as JSON lines or a NumPy array.

use crate::commands::load_engine;
use crate::ModelArgs;
use anyhow::{bail, Context, Result};
use engine::{EmbedInput, EmbedOptions, EmbedTask};
use std::io::{BufWriter, Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

/// Flags of `hearth embed`.
#[derive(clap::Args, Debug)]
pub struct EmbedArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Texts to embed (else `-f FILE`, else stdin, one text per line).
    pub texts: Vec<String>,
    /// A file with one text per line (blank lines are skipped; `index`
    /// counts the texts).
    #[arg(short, long, value_name = "FILE", conflicts_with = "texts")]
    pub file: Option<PathBuf>,
    /// The model card's task prompt before each text: query, document,
    /// classification, clustering, similarity, code, qa or fact (default:
    /// the raw text).
    #[arg(long)]
    pub task: Option<EmbedTask>,
    /// Keep the first N values and renormalise (EmbeddingGemma: 768, 512,
    /// 256 or 128).
    #[arg(long, value_name = "N")]
    pub dim: Option<usize>,
    /// Cut texts longer than the context (their start kept) instead of
    /// refusing them; each cut is said on stderr.
    #[arg(long)]
    pub truncate: bool,
    /// Output: jsonl (`{"index","embedding"}` per line) or npy (one float32
    /// array of texts × dimensions).
    #[arg(long, default_value = "jsonl", value_parser = ["jsonl", "npy"])]
    pub format: String,
    /// Write to FILE instead of stdout.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

/// Embed the texts and write their vectors.
pub fn run(args: &EmbedArgs) -> Result<ExitCode> {
    if args.format == "npy"
        && args.output.is_none()
        && std::io::IsTerminal::is_terminal(&std::io::stdout())
    {
        bail!("--format npy is binary: give -o FILE or redirect stdout");
    }
    let texts = read_texts(args)?;
    if texts.is_empty() {
        bail!("no texts to embed (give them as arguments, with -f FILE, or on stdin)");
    }
    let engine = load_engine(&args.model, engine::SamplingParams::default())?;
    let opts = EmbedOptions {
        task: args.task,
        dim: args.dim,
        truncate: args.truncate,
    };
    let inputs: Vec<EmbedInput<'_>> = texts.iter().map(|t| EmbedInput::Text(t)).collect();
    let start = Instant::now();
    let show = texts.len() >= 64;
    let out = engine.embed(&inputs, &opts, &mut |done, total| {
        if show {
            eprint!("\rhearth: embedded {done}/{total} texts");
        }
    })?;
    if show {
        eprintln!();
    }
    let secs = start.elapsed().as_secs_f64();
    for &i in &out.truncated {
        eprintln!(
            "hearth: text {i} was cut to the context of {} tokens (--truncate)",
            engine.n_ctx()
        );
    }
    let tokens: usize = out.tokens.iter().sum();
    eprintln!(
        "hearth: {} texts, {tokens} tokens in {:.2} s ({:.1} texts/s, {:.0} tokens/s), {} dimensions",
        texts.len(),
        secs,
        texts.len() as f64 / secs,
        tokens as f64 / secs,
        out.vectors.first().map_or(0, Vec::len)
    );
    write_vectors(args, &out.vectors)?;
    Ok(ExitCode::SUCCESS)
}

/// The texts from the arguments, the file or stdin.
fn read_texts(args: &EmbedArgs) -> Result<Vec<String>> {
    if !args.texts.is_empty() {
        return Ok(args.texts.clone());
    }
    read_lines(args.file.as_deref())
}

/// The non-blank lines of `file`, or of stdin.
pub(crate) fn read_lines(file: Option<&std::path::Path>) -> Result<Vec<String>> {
    let mut bytes = Vec::new();
    match file {
        Some(path) => {
            bytes =
                std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?
        }
        None => {
            std::io::stdin()
                .read_to_end(&mut bytes)
                .context("cannot read stdin")?;
        }
    }
    let text = String::from_utf8(bytes).map_err(|e| {
        anyhow::anyhow!(
            "the input is not valid UTF-8 (invalid byte sequence at byte {})",
            e.utf8_error().valid_up_to()
        )
    })?;
    Ok(text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect())
}

fn write_vectors(args: &EmbedArgs, vectors: &[Vec<f32>]) -> Result<()> {
    let Some(p) = &args.output else {
        let mut w = BufWriter::new(std::io::stdout().lock());
        write_body(&mut w, args, vectors)?;
        w.flush()?;
        return Ok(());
    };
    // A file is written whole or not at all: a temporary name beside it,
    // fsynced, then renamed over it.
    let mut pending = durable::PendingFile::create_saying(p, |left| eprintln!("{left}"))
        .with_context(|| format!("cannot write {}", p.display()))?;
    let mut w = BufWriter::new(&mut pending);
    write_body(&mut w, args, vectors)
        .and_then(|()| w.flush().map_err(Into::into))
        .with_context(|| format!("cannot write {}", p.display()))?;
    drop(w);
    pending
        .commit()
        .with_context(|| format!("cannot write {}", p.display()))?;
    Ok(())
}

fn write_body(w: &mut impl Write, args: &EmbedArgs, vectors: &[Vec<f32>]) -> Result<()> {
    if args.format == "npy" {
        write_npy(w, vectors)?;
    } else {
        for (index, embedding) in vectors.iter().enumerate() {
            // Each value's shortest f32 form (JSON through f64 prints 17 digits).
            let values: Vec<String> = embedding.iter().map(f32::to_string).collect();
            writeln!(
                w,
                "{{\"index\":{index},\"embedding\":[{}]}}",
                values.join(",")
            )?;
        }
    }
    Ok(())
}

/// `vectors` as a NumPy `.npy` file (format 1.0, little-endian float32,
/// C order).
pub(crate) fn write_npy(w: &mut impl Write, vectors: &[Vec<f32>]) -> std::io::Result<()> {
    let cols = vectors.first().map_or(0, Vec::len);
    let dict = format!(
        "{{'descr': '<f4', 'fortran_order': False, 'shape': ({}, {cols}), }}",
        vectors.len()
    );
    // Magic, version, header length, then the header padded with spaces to a
    // multiple of 64 bytes and ended by a newline.
    let unpadded = 10 + dict.len() + 1;
    let pad = unpadded.next_multiple_of(64) - unpadded;
    let header_len = (dict.len() + pad + 1) as u16;
    w.write_all(b"\x93NUMPY\x01\x00")?;
    w.write_all(&header_len.to_le_bytes())?;
    w.write_all(dict.as_bytes())?;
    w.write_all(&vec![b' '; pad])?;
    w.write_all(b"\n")?;
    for v in vectors {
        for x in v {
            w.write_all(&x.to_le_bytes())?;
        }
    }
    Ok(())
}
