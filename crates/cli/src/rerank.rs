//! `hearth rerank`: documents ranked against a query by an embedding model
//! (the cosine of the query's and each document's embedding under their
//! task prompts), as JSON lines, best first.

use crate::commands::load_engine;
use crate::embed::read_lines;
use crate::ModelArgs;
use anyhow::{bail, Result};
use engine::{EmbedInput, EmbedOptions, EmbedTask};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

/// Flags of `hearth rerank`.
#[derive(clap::Args, Debug)]
pub struct RerankArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The query.
    #[arg(short, long)]
    pub query: String,
    /// Documents to rank (else `-f FILE`, else stdin, one document per line).
    pub documents: Vec<String>,
    /// A file with one document per line (blank lines are skipped; `index`
    /// counts the documents).
    #[arg(short, long, value_name = "FILE", conflicts_with = "documents")]
    pub file: Option<PathBuf>,
    /// Print only the best N.
    #[arg(long, value_name = "N")]
    pub top_n: Option<usize>,
    /// Compare embeddings at their first N values (Matryoshka).
    #[arg(long, value_name = "N")]
    pub dim: Option<usize>,
}

/// Rank the documents and print `{"index","score","document"}` lines.
pub fn run(args: &RerankArgs) -> Result<ExitCode> {
    let docs = match args.documents.is_empty() {
        false => args.documents.clone(),
        true => read_lines(args.file.as_deref())?,
    };
    if docs.is_empty() {
        bail!("no documents to rank (give them as arguments, with -f FILE, or on stdin)");
    }
    let engine = load_engine(&args.model, engine::SamplingParams::default())?;
    let opts = |task| EmbedOptions {
        task: Some(task),
        dim: args.dim,
        truncate: true,
    };
    let start = Instant::now();
    let query = engine.embed(
        &[EmbedInput::Text(&args.query)],
        &opts(EmbedTask::Query),
        &mut |_, _| {},
    )?;
    let inputs: Vec<EmbedInput<'_>> = docs.iter().map(|t| EmbedInput::Text(t)).collect();
    let embedded = engine.embed(&inputs, &opts(EmbedTask::Document), &mut |_, _| {})?;
    let ranked = engine::rank(&query.vectors[0], &embedded.vectors);
    let secs = start.elapsed().as_secs_f64();
    for &i in &embedded.truncated {
        eprintln!(
            "hearth: document {i} was cut to the context of {} tokens",
            engine.n_ctx()
        );
    }
    eprintln!(
        "hearth: {} documents ranked in {secs:.2} s ({:.1} documents/s)",
        docs.len(),
        docs.len() as f64 / secs
    );
    for r in ranked.iter().take(args.top_n.unwrap_or(docs.len())) {
        let line =
            serde_json::json!({"index": r.index, "score": r.score, "document": docs[r.index]});
        println!("{line}");
    }
    Ok(ExitCode::SUCCESS)
}
