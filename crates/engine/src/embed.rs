//! Text embeddings from an embedding model (EmbeddingGemma): task prompts,
//! tokenizing with the model's markers, the length limit, packing many texts
//! into each forward pass, and Matryoshka truncation.

use crate::{Engine, EngineError};
use std::str::FromStr;

/// EmbeddingGemma's task prompts, from its model card: the text each puts
/// before the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmbedTask {
    /// A search query (`task: search result | query: `).
    Query,
    /// A document to be searched (`title: none | text: `).
    Document,
    /// Classification.
    Classification,
    /// Clustering.
    Clustering,
    /// Semantic similarity.
    Similarity,
    /// Code retrieval.
    Code,
    /// Question answering.
    Qa,
    /// Fact checking.
    Fact,
    /// Summarization (sentence-transformers' `Summarization` prompt).
    Summarization,
}

impl EmbedTask {
    /// The names `--task` takes.
    pub const NAMES: &'static str =
        "query, document, classification, clustering, similarity, code, qa, fact";

    /// The text put before the input.
    pub fn prefix(self) -> &'static str {
        match self {
            EmbedTask::Query => "task: search result | query: ",
            EmbedTask::Document => "title: none | text: ",
            EmbedTask::Classification => "task: classification | query: ",
            EmbedTask::Clustering => "task: clustering | query: ",
            EmbedTask::Similarity => "task: sentence similarity | query: ",
            EmbedTask::Code => "task: code retrieval | query: ",
            EmbedTask::Qa => "task: question answering | query: ",
            EmbedTask::Fact => "task: fact checking | query: ",
            EmbedTask::Summarization => "task: summarization | query: ",
        }
    }
}

impl FromStr for EmbedTask {
    type Err = String;

    /// Our names, and the prompt names of EmbeddingGemma's
    /// `config_sentence_transformers.json` (`prompt_name`), any case.
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "query" | "retrieval-query" | "retrieval" | "reranking" | "bitextmining" => {
                EmbedTask::Query
            }
            "document" | "retrieval-document" => EmbedTask::Document,
            "classification" | "multilabelclassification" => EmbedTask::Classification,
            "clustering" => EmbedTask::Clustering,
            "similarity" | "sts" | "pairclassification" => EmbedTask::Similarity,
            "code" | "instructionretrieval" => EmbedTask::Code,
            "qa" => EmbedTask::Qa,
            "fact" => EmbedTask::Fact,
            "summarization" => EmbedTask::Summarization,
            other => {
                return Err(format!(
                    "unknown task `{other}` (one of: {})",
                    EmbedTask::NAMES
                ))
            }
        })
    }
}

/// How to embed a set of inputs.
#[derive(Debug, Clone, Copy, Default)]
pub struct EmbedOptions {
    /// The task prompt put before each text; raw text when `None`.
    pub task: Option<EmbedTask>,
    /// Keep the first `dim` values and renormalise (Matryoshka); the full
    /// width when `None`.
    pub dim: Option<usize>,
    /// Cut a text longer than the context to fit (its end markers kept)
    /// instead of refusing it.
    pub truncate: bool,
}

/// One input: a text, or token ids given as they are (no prompt, no markers
/// added).
#[derive(Debug, Clone, Copy)]
pub enum EmbedInput<'a> {
    /// A text, tokenized with the model's markers after the task prompt.
    Text(&'a str),
    /// Token ids, embedded as given.
    Tokens(&'a [u32]),
}

/// The embeddings of a set of inputs, in their order.
#[derive(Debug, Clone, Default)]
pub struct Embeddings {
    /// One unit vector per input.
    pub vectors: Vec<Vec<f32>>,
    /// Tokens embedded per input (after any truncation).
    pub tokens: Vec<usize>,
    /// Indices of the inputs that were cut to fit.
    pub truncated: Vec<usize>,
}

impl Engine {
    /// Width of this model's embeddings; `None` for a generative model.
    pub fn embedding_dim(&self) -> Option<usize> {
        self.model.embedding_dim()
    }

    /// `text` as the model embeds it: the task prompt, then the text, between
    /// the tokenizer's markers (EmbeddingGemma's `<bos>` and `<eos>`).
    pub fn embedding_ids(&self, text: &str, task: Option<EmbedTask>) -> Vec<u32> {
        let tok = &self.tokenizer;
        let full = match task {
            Some(t) => format!("{}{text}", t.prefix()),
            None => text.to_string(),
        };
        let mut ids = tok.encode(&full, tok.add_bos(), true);
        if tok.vocab().add_eos {
            ids.extend(tok.eos_id());
        }
        ids
    }

    /// Embed `inputs`: each made ready ([`Self::embedding_input`]), all
    /// embedded together ([`Self::embed_ids`]), each cut to `opts.dim`.
    pub fn embed(
        &self,
        inputs: &[EmbedInput<'_>],
        opts: &EmbedOptions,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<Embeddings, EngineError> {
        let dim = self.embedding_width(opts.dim)?;
        let mut out = Embeddings::default();
        let mut texts = Vec::with_capacity(inputs.len());
        for (i, input) in inputs.iter().enumerate() {
            let (ids, cut) = self.embedding_input(i, input, opts)?;
            if cut {
                out.truncated.push(i);
            }
            out.tokens.push(ids.len());
            texts.push(ids);
        }
        out.vectors = self
            .embed_ids(&texts, progress)?
            .into_iter()
            .map(|v| matryoshka(v, dim))
            .collect();
        Ok(out)
    }

    /// The width `dim` asks for, checked against the model's; the full
    /// width when `None`. A generative model is refused here.
    pub fn embedding_width(&self, dim: Option<usize>) -> Result<usize, EngineError> {
        let full = self.embedding_dim().ok_or_else(|| {
            EngineError::InvalidRequest(model::ModelError::NotEmbedding.to_string())
        })?;
        match dim {
            None => Ok(full),
            Some(d) if (1..=full).contains(&d) => Ok(d),
            Some(d) => Err(EngineError::InvalidRequest(format!(
                "dimensions {d} is outside 1..={full} (EmbeddingGemma is trained for 768, 512, 256 and 128)"
            ))),
        }
    }

    /// The full-width unit vectors of `texts` (token ids as
    /// [`Self::embedding_input`] gives them), packed into as few forward
    /// passes as the batch size allows (a text longer than the batch goes
    /// alone). `progress` hears `(done, total)` after each pass.
    pub fn embed_ids(
        &self,
        texts: &[Vec<u32>],
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<Vec<Vec<f32>>, EngineError> {
        let batch = self.batch_for(self.n_ctx());
        let longest = texts.iter().map(Vec::len).max().unwrap_or(1);
        let mut scratch = self.model.new_scratch(longest, batch.max(longest));
        let adapters = self.adapters_for(None)?;
        let mut vectors = Vec::with_capacity(texts.len());
        let mut start = 0;
        while start < texts.len() {
            let mut end = start + 1;
            let mut rows = texts[start].len();
            while end < texts.len() && rows + texts[end].len() <= batch {
                rows += texts[end].len();
                end += 1;
            }
            let group: Vec<&[u32]> = texts[start..end].iter().map(Vec::as_slice).collect();
            vectors.extend(self.model.embed_texts(&group, &adapters, &mut scratch)?);
            start = end;
            progress(start, texts.len());
        }
        Ok(vectors)
    }

    /// Input `i`'s ids, checked, and whether they were cut: a text longer
    /// than the context is refused unless `opts.truncate` cuts it (the first
    /// ids kept, and the closing `<eos>` where the tokenizer adds one, as
    /// transformers truncates).
    pub fn embedding_input(
        &self,
        i: usize,
        input: &EmbedInput<'_>,
        opts: &EmbedOptions,
    ) -> Result<(Vec<u32>, bool), EngineError> {
        let mut ids = match input {
            EmbedInput::Text("") => {
                return Err(EngineError::InvalidRequest(format!("input {i} is empty")))
            }
            EmbedInput::Text(t) => self.embedding_ids(t, opts.task),
            EmbedInput::Tokens(t) => t.to_vec(),
        };
        let vocab = self.model.config().vocab;
        if let Some(&bad) = ids.iter().find(|&&t| t as usize >= vocab) {
            return Err(EngineError::InvalidRequest(format!(
                "input {i}: token id {bad} is outside the vocabulary of {vocab}"
            )));
        }
        if ids.is_empty() {
            return Err(EngineError::InvalidRequest(format!("input {i} is empty")));
        }
        let limit = self.n_ctx();
        if ids.len() > limit {
            if !opts.truncate {
                return Err(EngineError::InvalidRequest(format!(
                    "input {i} is {} tokens, past the limit of {limit} (truncate to embed its start)",
                    ids.len()
                )));
            }
            let closing = match input {
                EmbedInput::Text(_) if self.tokenizer.vocab().add_eos => self.tokenizer.eos_id(),
                _ => None,
            };
            ids.truncate(limit - usize::from(closing.is_some()));
            ids.extend(closing);
            return Ok((ids, true));
        }
        Ok((ids, false))
    }
}

/// A document's place in a ranking.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ranked {
    /// The document's index among those given.
    pub index: usize,
    /// Its cosine similarity to the query.
    pub score: f32,
}

/// `documents` ranked by the cosine similarity of their embeddings to the
/// query's, best first (ties to the lower index): the retrieval score
/// EmbeddingGemma's model card gives, with the query embedded under the
/// `query` task and the documents under `document`.
pub fn rank(query: &[f32], documents: &[Vec<f32>]) -> Vec<Ranked> {
    let norm = |v: &[f32]| v.iter().map(|&x| f64::from(x).powi(2)).sum::<f64>().sqrt();
    let qn = norm(query);
    let mut ranked: Vec<Ranked> = documents
        .iter()
        .enumerate()
        .map(|(index, d)| {
            let dot: f64 = query
                .iter()
                .zip(d)
                .map(|(&a, &b)| f64::from(a) * f64::from(b))
                .sum();
            let denom = qn * norm(d);
            let score = if denom > 0.0 { dot / denom } else { 0.0 };
            Ranked {
                index,
                score: score as f32,
            }
        })
        .collect();
    ranked.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.index.cmp(&b.index)));
    ranked
}

/// The first `dim` values of a unit vector, renormalised (Matryoshka); the
/// vector as it is at its full width.
pub fn matryoshka(v: Vec<f32>, dim: usize) -> Vec<f32> {
    if dim >= v.len() {
        return v;
    }
    model::unit_vector(&v[..dim])
}
