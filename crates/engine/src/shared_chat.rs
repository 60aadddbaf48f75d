//! [`SharedChat`]: one model shared by many callers on their own threads
//! (the MT-Bench runner's workers, each walking its questions' turns and
//! guard calls in order). A decoding thread owns `slots` sessions and
//! advances every active call a token per step in one batched forward
//! ([`crate::BatchDecoder`]), so the weights are read once per step however
//! many calls run; a caller simply blocks in [`ChatModel::reply`].

use crate::chat_model::{call_options, reply_of};
use crate::{
    BatchItem, ChatModel, Decoding, Engine, EngineError, GenerationRequest, ModelCall, ModelReply,
    PromptStore, Sampler, Session,
};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;

/// A call waiting for a slot, with where its reply goes.
struct Pending {
    call: ModelCall,
    reply: Sender<Result<ModelReply, EngineError>>,
}

/// A call in a slot.
struct Active {
    decoding: Decoding,
    sampler: Sampler,
    prompt_tokens: usize,
    reply: Sender<Result<ModelReply, EngineError>>,
}

/// A handle to the shared model; clone one per caller thread.
#[derive(Clone)]
pub struct SharedChat {
    tx: Sender<Pending>,
}

impl std::fmt::Debug for SharedChat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SharedChat")
    }
}

impl SharedChat {
    /// Start the decoding thread with `slots` sessions of `engine`; with a
    /// `store`, each call starts from the stored state that serves the most
    /// of its prompt, and leaves its own there when it ends (so a
    /// conversation whose slot another took, or a restarted process, does
    /// not compute its prompt again). It ends when every handle is dropped
    /// and its calls are done.
    pub fn start(
        engine: Arc<Engine>,
        slots: usize,
        store: Option<Arc<dyn PromptStore>>,
    ) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::channel();
        std::thread::Builder::new()
            .name("hearth-shared-chat".into())
            .spawn(move || decode_loop(&engine, slots.max(1), store.as_deref(), &rx))?;
        Ok(Self { tx })
    }
}

impl ChatModel for SharedChat {
    fn reply(&mut self, call: &ModelCall) -> Result<ModelReply, EngineError> {
        let (reply, rx) = mpsc::channel();
        let gone = || EngineError::InvalidRequest("the decoding thread has stopped".into());
        self.tx
            .send(Pending {
                call: call.clone(),
                reply,
            })
            .map_err(|_| gone())?;
        rx.recv().map_err(|_| gone())?
    }
}

/// Start `p` in `session` (from the `store`'s state for its prompt, when
/// one serves more than the session holds): template, grammar, prefill. An
/// error goes back to the caller and leaves the slot free.
fn admit(
    engine: &Engine,
    session: &mut Session,
    store: Option<&dyn PromptStore>,
    p: Pending,
) -> Option<Active> {
    let started = (|| {
        let crate::Prompt {
            ids: prompt,
            media: images,
        } = engine.prompt(
            &crate::PromptRequest::chat(&p.call.messages).with_media(&p.call.images, &p.call.audio),
        )?;
        let constraint = match &p.call.grammar {
            Some(g) => Some(engine.constraint(g)?),
            None => None,
        };
        if let Some(store) = store {
            session.resume_from(store, &prompt, &images);
        }
        let sampler = Sampler::new(p.call.sampling(&engine.options().sampling));
        let opts = call_options(&p.call);
        let request = GenerationRequest {
            media: &images,
            constraint,
            ..GenerationRequest::new(&prompt, &opts)
        };
        let mut decoding = session.begin(request, &sampler)?;
        session.prefill(&mut decoding, usize::MAX)?;
        Ok::<_, EngineError>((decoding, sampler, prompt.len()))
    })();
    match started {
        Ok((decoding, sampler, prompt_tokens)) => Some(Active {
            decoding,
            sampler,
            prompt_tokens,
            reply: p.reply,
        }),
        Err(e) => {
            let _ = p.reply.send(Err(e));
            None
        }
    }
}

fn decode_loop(engine: &Engine, n: usize, store: Option<&dyn PromptStore>, rx: &Receiver<Pending>) {
    let mut sessions: Vec<Session> = (0..n).map(|_| engine.session()).collect();
    let mut active: Vec<Option<Active>> = (0..n).map(|_| None).collect();
    let mut decoder = engine.batch_decoder(n);
    let mut open = true;
    loop {
        // Fill free slots: wait for work only when nothing runs.
        for i in 0..n {
            if active[i].is_some() || !open {
                continue;
            }
            let busy = active.iter().any(Option::is_some);
            let next = if busy {
                match rx.try_recv() {
                    Ok(p) => Some(p),
                    Err(mpsc::TryRecvError::Empty) => None,
                    Err(mpsc::TryRecvError::Disconnected) => {
                        open = false;
                        None
                    }
                }
            } else {
                match rx.recv() {
                    Ok(p) => Some(p),
                    Err(_) => {
                        open = false;
                        None
                    }
                }
            };
            if let Some(p) = next {
                active[i] = admit(engine, &mut sessions[i], store, p);
            }
        }
        if !open && active.iter().all(Option::is_none) {
            return;
        }
        let slots: Vec<usize> = (0..n).filter(|&i| active[i].is_some()).collect();
        if slots.is_empty() {
            continue;
        }
        let mut finished = vec![false; n];
        let mut failed: Vec<(usize, EngineError)> = Vec::new();
        {
            let mut items: Vec<BatchItem<'_>> = Vec::with_capacity(slots.len());
            for (session, slot) in sessions.iter_mut().zip(active.iter_mut()) {
                if let Some(a) = slot.as_mut() {
                    items.push(BatchItem {
                        session,
                        decoding: &mut a.decoding,
                        sampler: &mut a.sampler,
                    });
                }
            }
            decoder.step(&mut items, |k, step| match step {
                Ok(s) if s.finish.is_some() => finished[slots[k]] = true,
                Ok(_) => {}
                Err(e) => failed.push((slots[k], e)),
            });
        }
        for (i, e) in failed {
            if let Some(a) = active[i].take() {
                let _ = a.reply.send(Err(e));
            }
        }
        for (i, done) in finished.into_iter().enumerate() {
            if done {
                if let Some(a) = active[i].take() {
                    let g = a.decoding.into_generation();
                    let _ = a.reply.send(Ok(reply_of(g, a.prompt_tokens)));
                    if let Some(store) = store {
                        sessions[i].leave_in(store);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ChatMessage, LocalChat, RunOptions};

    const TINY: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/fixtures/tiny/gemma3/model-f32.gguf"
    );

    /// Greedy calls from several threads through the shared model give the
    /// text each gets alone.
    #[test]
    fn shared_calls_match_calls_alone() {
        let engine = Arc::new(
            Engine::load(
                TINY,
                &RunOptions {
                    threads: Some(1),
                    ctx: Some(256),
                    ..Default::default()
                },
            )
            .unwrap(),
        );
        let prompts = ["hello", "the cat sat", "one two three four", "x"];
        let mut alone = LocalChat::new(&engine);
        let call = |p: &str, n: usize| {
            let mut c = ModelCall::new(vec![ChatMessage::user(p)], n);
            c.greedy = true;
            c
        };
        let want: Vec<String> = prompts
            .iter()
            .enumerate()
            .map(|(i, p)| alone.reply(&call(p, 8 + 3 * i)).unwrap().text)
            .collect();
        let shared = SharedChat::start(Arc::clone(&engine), 3, None).unwrap();
        let handles: Vec<_> = prompts
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let mut m = shared.clone();
                let c = call(p, 8 + 3 * i);
                std::thread::spawn(move || m.reply(&c).unwrap().text)
            })
            .collect();
        let got: Vec<String> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        assert_eq!(got, want);
    }
}
