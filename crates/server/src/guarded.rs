//! Guarded chat replies: the guard pipeline runs on a blocking thread and
//! asks the model through the scheduler ([`SchedulerChat`]), so its calls
//! share the slots and the batch with every other request. The finished
//! reply goes out as ordinary scheduler events (the text whole, then the
//! trace, then `Done`), so the JSON and streaming responses need nothing
//! else.

use crate::metrics::Metrics;
use crate::scheduler::{Event, Job, Rejected, Scheduler, Usage};
use engine::{
    ChatMessage, ChatModel, Engine, EngineError, GenerateOptions, ModelCall, ModelReply,
    SamplingParams,
};
use std::time::Instant;
use tokio::sync::mpsc::{self, UnboundedSender};

/// [`ChatModel`] over the server's scheduler.
pub(crate) struct SchedulerChat<'a> {
    /// The engine (templates, tokenizer, grammars).
    pub engine: &'a Engine,
    /// Where jobs go.
    pub scheduler: &'a Scheduler,
    /// The request's sampling settings.
    pub params: SamplingParams,
    /// When the whole request must be over.
    pub deadline: Option<Instant>,
    /// The request's own channel: once its receiver is gone (the client
    /// hung up), no more calls are made and the running one is cancelled.
    pub client: &'a UnboundedSender<Event>,
    /// The caller whose prompt states the calls may reuse.
    pub cache_scope: Option<[u8; 32]>,
    /// The LoRA adapters the calls run with.
    pub adapters: engine::Adapters,
}

impl ChatModel for SchedulerChat<'_> {
    fn reply(&mut self, call: &ModelCall) -> Result<ModelReply, EngineError> {
        if self.client.is_closed() {
            return Err(EngineError::InvalidRequest("the client went away".into()));
        }
        let prompt = self
            .engine
            .prompt(&engine::PromptRequest::chat(&call.messages))?
            .ids;
        let n_ctx = self.engine.n_ctx();
        if prompt.len() >= n_ctx {
            return Err(EngineError::PromptTooLong {
                prompt: prompt.len(),
                n_ctx,
            });
        }
        let prompt_tokens = prompt.len();
        let (tx, rx) = mpsc::unbounded_channel();
        let submitted = Instant::now();
        let job = self.job(call, prompt, tx)?;
        match self.scheduler.submit(job) {
            Ok(()) => {}
            Err(Rejected::QueueFull) => {
                return Err(EngineError::InvalidRequest(
                    "the queue is full; a guard call could not be made".into(),
                ))
            }
            Err(Rejected::ShuttingDown) => {
                return Err(EngineError::InvalidRequest(
                    "the server is shutting down".into(),
                ))
            }
        }
        self.wait(rx, prompt_tokens, submitted)
    }
}

impl SchedulerChat<'_> {
    /// The scheduler job of `call` over `prompt`, its events sent to `events`.
    fn job(
        &self,
        call: &ModelCall,
        prompt: Vec<u32>,
        events: mpsc::UnboundedSender<Event>,
    ) -> Result<Job, EngineError> {
        let constraint = match &call.grammar {
            Some(g) => Some(self.engine.constraint(g)?),
            None => None,
        };
        let room = self.engine.n_ctx() - prompt.len();
        Ok(Job {
            prompt,
            images: Vec::new(),
            params: call.sampling(&self.params),
            opts: GenerateOptions {
                max_tokens: call.max_tokens.min(room),
                stop: Vec::new(),
                stop_on_eog: true,
                render_special: false,
                speculation: None,
            },
            constraint,
            thinking: None,
            events,
            deadline: self.deadline,
            logprobs: None,
            forks: Vec::new(),
            // The guard pipeline's thread holds the model for the whole chat.
            hold: None,
            cache_scope: self.cache_scope,
            adapters: self.adapters.clone(),
        })
    }

    /// The reply a submitted job's events add up to; an error when the
    /// client goes away first (dropping `rx` cancels the job at its next
    /// step).
    fn wait(
        &self,
        mut rx: mpsc::UnboundedReceiver<Event>,
        prompt_tokens: usize,
        submitted: Instant,
    ) -> Result<ModelReply, EngineError> {
        let mut started = None;
        let mut text = String::new();
        loop {
            match rx.blocking_recv() {
                Some(Event::Started) => started = Some(Instant::now()),
                Some(Event::Text(t)) => text.push_str(&t),
                Some(Event::Done(u)) => {
                    let began = started.unwrap_or(submitted);
                    return Ok(ModelReply {
                        text,
                        prompt_tokens,
                        completion_tokens: u.completion_tokens,
                        finish: u.finish,
                        // Queueing counts as prompt time: the caller waited.
                        prompt_ms: (began - submitted).as_millis() as u64,
                        gen_ms: began.elapsed().as_millis() as u64,
                    });
                }
                Some(Event::Failed(err)) => return Err(EngineError::InvalidRequest(err.message)),
                Some(_) => {}
                None => {
                    return Err(EngineError::InvalidRequest(
                        "the generation ended without a result".into(),
                    ))
                }
            }
            if self.client.is_closed() {
                return Err(EngineError::InvalidRequest("the client went away".into()));
            }
        }
    }
}

/// Run the guards for `messages` and send the reply to `client` as
/// scheduler events. Runs on a blocking thread.
pub(crate) fn run(
    chat: &mut SchedulerChat<'_>,
    messages: &[ChatMessage],
    cfg: &guard::GuardConfig,
    metrics: &Metrics,
) {
    let client = chat.client.clone();
    let began = Instant::now();
    match guard::answer(chat, messages, cfg) {
        Ok(g) => {
            metrics.record_guard(&g.trace);
            let _ = client.send(Event::Started);
            let _ = client.send(Event::Text(g.text));
            let trace = serde_json::to_value(&g.trace).unwrap_or(serde_json::Value::Null);
            let _ = client.send(Event::Guard(trace));
            let _ = client.send(Event::Done(Usage {
                finish: g.finish,
                prompt_tokens: g.answer_prompt_tokens + g.trace.extra_prompt_tokens,
                completion_tokens: g.answer_completion_tokens + g.trace.extra_completion_tokens,
                cached_tokens: 0,
                // The guard's several calls are not split into prompt and
                // reply: the whole pipeline counts as generating.
                prompt_time: std::time::Duration::ZERO,
                gen_time: began.elapsed(),
                stop_string: None,
                speculation: None,
            }));
        }
        Err(e) => {
            let _ = client.send(Event::Failed(crate::scheduler::engine_error(&e)));
        }
    }
}
