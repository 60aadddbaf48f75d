//! Reranking: Jina's and Cohere's `/v1/rerank` (and Cohere's `/v2/rerank`),
//! with llama.cpp's names for it (`/rerank`, `/reranking`,
//! `/v1/reranking`). The documents are scored by the embedding model: the
//! cosine of the query's embedding (under the `query` task prompt) and each
//! document's (under `document`), as EmbeddingGemma's model card has it
//! for retrieval. The documents go to the batcher as one job.

use super::{embed, EmbedRequest, Input};
use crate::body::read_json;
use crate::error::{ApiError, Dialect};
use crate::{api, AppState};
use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use engine::{EmbedOptions, EmbedTask};
use serde::Deserialize;
use serde_json::{json, Value};

/// The body the three shapes share; Cohere's other fields are accepted
/// and ignored.
#[derive(Deserialize)]
struct RerankBody {
    model: Option<String>,
    query: Option<Value>,
    documents: Option<Vec<Value>>,
    top_n: Option<i64>,
    return_documents: Option<bool>,
    /// Cut documents longer than the context instead of refusing them (on
    /// unless turned off: a long document is ranked by its start).
    truncate: Option<bool>,
    /// Matryoshka width the similarity is taken at.
    dimensions: Option<usize>,
}

/// `POST /v1/rerank` and its other names.
pub(crate) async fn rerank(State(st): State<AppState>, headers: HeaderMap, body: Body) -> Response {
    rerank_inner(&st, &headers, body)
        .await
        .unwrap_or_else(|e| e.respond(Dialect::OpenAi))
}

async fn rerank_inner(
    st: &AppState,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let b: RerankBody = read_json(st, headers, body, api::parse_json).await?;
    let query = match b.query {
        Some(Value::String(q)) if !q.is_empty() => q,
        _ => {
            return Err(ApiError::bad_param(
                "query",
                "`query` must be a non-empty string.",
            ))
        }
    };
    let texts = documents(b.documents)?;
    let top_n = match b.top_n {
        None => texts.len(),
        Some(n) if n >= 1 => usize::try_from(n).unwrap_or(usize::MAX).min(texts.len()),
        Some(_) => return Err(ApiError::bad_param("top_n", "`top_n` must be at least 1.")),
    };
    let opts = |task| EmbedOptions {
        task: Some(task),
        dim: b.dimensions,
        truncate: b.truncate.unwrap_or(true),
    };
    let asked = |inputs, task| EmbedRequest {
        model: b.model.clone(),
        inputs,
        opts: opts(task),
    };
    let docs = asked(
        texts.iter().cloned().map(Input::Text).collect(),
        EmbedTask::Document,
    );
    let (q, d) = tokio::try_join!(
        embed(st, asked(vec![Input::Text(query)], EmbedTask::Query)),
        embed(st, docs)
    )?;
    let ranked = engine::rank(&q.vectors[0], &d.vectors);
    let results: Vec<Value> = ranked
        .iter()
        .take(top_n)
        .map(|r| {
            let mut item = json!({"index": r.index, "relevance_score": r.score});
            if b.return_documents.unwrap_or(false) {
                item["document"] = json!({"text": texts[r.index]});
            }
            item
        })
        .collect();
    let tokens = q.tokens + d.tokens;
    let mut body = json!({
        "id": crate::new_id("rerank"),
        "object": "list",
        "model": d.model,
        "results": results,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        "meta": {"billed_units": {"search_units": 1}},
    });
    if !d.truncated.is_empty() {
        body["truncated"] = json!(d.truncated);
    }
    Ok(Json(body).into_response())
}

/// The documents as text: strings, or objects with a `text` (Jina's and
/// Cohere's other form).
fn documents(docs: Option<Vec<Value>>) -> Result<Vec<String>, ApiError> {
    let bad = || {
        ApiError::bad_param(
            "documents",
            "`documents` must be a non-empty array of strings (or of objects with a `text`).",
        )
    };
    let docs = docs.filter(|d| !d.is_empty()).ok_or_else(bad)?;
    docs.into_iter()
        .map(|d| match d {
            Value::String(s) => Ok(s),
            Value::Object(mut o) => match o.remove("text") {
                Some(Value::String(s)) => Ok(s),
                _ => Err(bad()),
            },
            _ => Err(bad()),
        })
        .collect()
}
