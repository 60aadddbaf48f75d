//! OpenAI's response bodies: the whole answer, the streamed chunks, tool
//! calls and log-probabilities.

use crate::api;
use crate::new_id;
use crate::reply::{Ended, TokenLp, Whole};
use crate::scheduler::Usage;
use engine::tools::ToolCall;
use serde_json::{json, Value};

/// Which endpoint a generation came from (shapes the response).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Chat,
    Completion,
}

/// What every response of one request shares.
pub(super) struct Meta {
    pub id: String,
    pub created: u64,
    pub model: String,
    pub kind: Kind,
    /// Turns dropped to fit the context (told in `usage`).
    pub dropped_turns: usize,
    /// Whether log-probabilities were asked for.
    pub logprobs: bool,
}

/// OpenAI's `finish_reason`.
pub(super) fn finish_reason(ended: Ended) -> &'static str {
    match ended {
        Ended::Stop => "stop",
        Ended::Length => "length",
        Ended::ToolCalls => "tool_calls",
    }
}

/// OpenAI's `tool_calls` entry for `call`.
fn tool_call_json(call: &ToolCall) -> Value {
    json!({
        "id": new_id("call"),
        "type": "function",
        "function": {
            "name": call.name,
            "arguments": call.arguments.to_string(),
        },
    })
}

impl Meta {
    /// `usage` over all choices (the prompt counted once), with Hearth's
    /// `dropped_turns` when the chat was truncated.
    pub(super) fn usage_json(&self, usages: &[Usage]) -> Value {
        let first = usages.first();
        let prompt = first.map_or(0, |u| u.prompt_tokens);
        let cached = first.map_or(0, |u| u.cached_tokens);
        let completion = usages.iter().map(|u| u.completion_tokens).sum();
        let mut v = api::usage_json(prompt, completion, cached);
        if self.dropped_turns > 0 {
            v["dropped_turns"] = json!(self.dropped_turns);
        }
        v
    }

    /// The one-body answer, a choice per reply.
    pub(super) fn whole(&self, all: Vec<(Whole, Ended, Usage)>) -> Value {
        let mut choices = Vec::with_capacity(all.len());
        let mut usages = Vec::with_capacity(all.len());
        let mut guard = None;
        for (i, (whole, ended, usage)) in all.into_iter().enumerate() {
            choices.push(self.choice(i, &whole, ended));
            guard = guard.or(whole.guard);
            usages.push(usage);
        }
        let mut body = json!({
            "id": self.id,
            "object": if self.kind == Kind::Chat { "chat.completion" } else { "text_completion" },
            "created": self.created,
            "model": self.model,
            "system_fingerprint": null,
            "choices": choices,
            "usage": self.usage_json(&usages),
            "timings": timings_json(&usages),
        });
        if let Some(trace) = guard {
            // Hearth's extension: what the guardrails did.
            body["guard"] = trace;
        }
        body
    }

    fn choice(&self, index: usize, whole: &Whole, ended: Ended) -> Value {
        let mut choice = match self.kind {
            Kind::Chat => {
                let mut message = json!({"role": "assistant", "content": whole.text});
                if !whole.calls.is_empty() {
                    let calls: Vec<Value> = whole.calls.iter().map(tool_call_json).collect();
                    message["content"] = Value::Null;
                    message["tool_calls"] = json!(calls);
                }
                if !whole.thought.is_empty() {
                    // The convention llama.cpp and DeepSeek's clients read.
                    message["reasoning_content"] = json!(whole.thought);
                }
                json!({ "message": message })
            }
            Kind::Completion => json!({ "text": whole.text }),
        };
        choice["index"] = json!(index);
        choice["logprobs"] = self.logprobs_json(&whole.logprobs, 0);
        choice["finish_reason"] = json!(finish_reason(ended));
        choice
    }

    /// One streamed chunk of choice `index`, with `delta` (chat) or `text`
    /// (completions).
    pub(super) fn chunk(
        &self,
        index: usize,
        content: Option<&str>,
        role: bool,
        finish: Option<&str>,
    ) -> Value {
        let (object, mut choice) = match self.kind {
            Kind::Chat => {
                let mut delta = serde_json::Map::new();
                if role {
                    delta.insert("role".into(), json!("assistant"));
                }
                if let Some(c) = content {
                    delta.insert("content".into(), json!(c));
                }
                ("chat.completion.chunk", json!({"delta": delta}))
            }
            Kind::Completion => ("text_completion", json!({"text": content.unwrap_or("")})),
        };
        choice["index"] = json!(index);
        choice["logprobs"] = Value::Null;
        choice["finish_reason"] = json!(finish);
        json!({
            "id": self.id,
            "object": object,
            "created": self.created,
            "model": self.model,
            "system_fingerprint": null,
            "choices": [choice],
        })
    }

    /// `logprobs` of a choice for `lps` (`null` when none were asked
    /// for); `offset` is where the first token's text begins in the reply.
    pub(super) fn logprobs_json(&self, lps: &[TokenLp], offset: usize) -> Value {
        if !self.logprobs {
            return Value::Null;
        }
        if self.kind == Kind::Chat {
            let content: Vec<Value> = lps.iter().map(TokenLp::json).collect();
            return json!({ "content": content, "refusal": null });
        }
        let mut at = offset;
        let offsets: Vec<usize> = lps
            .iter()
            .map(|l| {
                let here = at;
                at += l.token.text.len();
                here
            })
            .collect();
        let tops: Vec<serde_json::Map<String, Value>> = lps
            .iter()
            .map(|l| {
                l.top
                    .iter()
                    .map(|(t, lp)| (t.text.clone(), json!(lp)))
                    .collect()
            })
            .collect();
        json!({
            "tokens": lps.iter().map(|l| &l.token.text).collect::<Vec<_>>(),
            "token_logprobs": lps.iter().map(|l| l.logprob).collect::<Vec<_>>(),
            "top_logprobs": tops,
            "text_offset": offsets,
        })
    }

    /// A chat chunk of choice `index` where call `call` to `name` begins.
    pub(super) fn call_begin_chunk(
        &self,
        index: usize,
        call: usize,
        name: &str,
        role: bool,
    ) -> Value {
        let mut chunk = self.chunk(index, None, role, None);
        let delta = &mut chunk["choices"][0]["delta"];
        delta["tool_calls"] = json!([{
            "index": call,
            "id": new_id("call"),
            "type": "function",
            "function": {"name": name, "arguments": ""},
        }]);
        if role {
            delta["content"] = Value::Null;
        }
        chunk
    }

    /// A chat chunk of choice `index` with more of call `call`'s arguments.
    pub(super) fn call_args_chunk(&self, index: usize, call: usize, fragment: &str) -> Value {
        let mut chunk = self.chunk(index, None, false, None);
        chunk["choices"][0]["delta"]["tool_calls"] =
            json!([{"index": call, "function": {"arguments": fragment}}]);
        chunk
    }

    pub(super) fn usage_chunk(&self, usage: Value) -> Value {
        json!({
            "id": self.id,
            "object": if self.kind == Kind::Chat { "chat.completion.chunk" } else { "text_completion" },
            "created": self.created,
            "model": self.model,
            "system_fingerprint": null,
            "choices": [],
            "usage": usage,
        })
    }
}

/// llama.cpp server's `timings` of the first choice: prompt and generation
/// tokens, milliseconds and tokens per second.
pub(super) fn timings_json(usages: &[Usage]) -> Value {
    let Some(u) = usages.first() else {
        return Value::Null;
    };
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
    let rate = |n: usize, d: std::time::Duration| {
        if d.is_zero() {
            0.0
        } else {
            n as f64 / d.as_secs_f64()
        }
    };
    let evaluated = u.prompt_tokens - u.cached_tokens.min(u.prompt_tokens);
    let mut t = json!({
        "cache_n": u.cached_tokens,
        "prompt_n": evaluated,
        "prompt_ms": ms(u.prompt_time),
        "prompt_per_second": rate(evaluated, u.prompt_time),
        "predicted_n": u.completion_tokens,
        "predicted_ms": ms(u.gen_time),
        "predicted_per_second": rate(u.completion_tokens, u.gen_time),
    });
    // As llama.cpp's server, when speculation was on.
    if let Some(s) = u.speculation {
        t["draft_n"] = json!(s.drafted);
        t["draft_n_accepted"] = json!(s.accepted);
    }
    t
}
