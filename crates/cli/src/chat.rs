//! `hearth chat`: a multi-turn conversation on stdin/stdout.

use crate::chat_session::MediaFiles;
use crate::commands::{load_engine, report_session};
use crate::{ConstraintArgs, ModelArgs, SampleArgs};
use anyhow::{Context, Result};
use engine::{ChatMessage, EngineError, FinishReason, GenerateOptions, GenerationRequest, Sampler};
use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

/// What Ctrl-C does depends on what the program is doing.
const IDLE: u8 = 0;
const GENERATING: u8 = 1;
const CANCEL: u8 = 2;

/// What a chat asks for beyond the model and sampling flags.
pub struct Turns {
    /// System prompt.
    pub system: Option<String>,
    /// Answer this one message and exit.
    pub prompt: Option<String>,
    /// Most tokens per reply.
    pub n_predict: usize,
    /// Thinking on, with an optional budget of thought tokens.
    pub think: Option<Option<usize>>,
    /// Guards to run on each reply.
    pub guard: guard::GuardSet,
    /// Print each reply's guard trace on stderr.
    pub guard_trace: bool,
    /// Image files for the first message.
    pub images: Vec<std::path::PathBuf>,
    /// Audio clips for the first message.
    pub audio: Vec<std::path::PathBuf>,
    /// Keep the conversation in this file (and its prompt state beside
    /// it), resuming it when it exists.
    pub session_file: Option<std::path::PathBuf>,
}

/// Run a chat: one reply for `-p`, else a read-reply loop until end of
/// input.
pub fn run(
    args: &ModelArgs,
    sample: &SampleArgs,
    constraint: &ConstraintArgs,
    mut turns: Turns,
) -> Result<ExitCode> {
    let has_media = !turns.images.is_empty() || !turns.audio.is_empty();
    if has_media && !turns.guard.is_empty() {
        anyhow::bail!("--guard does not take images or audio yet");
    }
    // Clips ride the same path as images: embeddings placed by markers.
    let grammar = constraint.grammar()?;
    let engine = load_engine(args, sample.params())?;
    report_session(&engine);
    if let Some(g) = &grammar {
        // Refuse a bad grammar before the first message, not after it.
        engine.constraint(g)?;
    }
    let prompt = turns.prompt.take();
    let once = prompt.is_some();
    let mut chat = Chat::new(&engine, args, sample, grammar, turns, once)?;
    stop_replies_on_ctrl_c(&chat.state);

    let interactive = !once && std::io::stdin().is_terminal();
    if interactive {
        eprintln!("hearth chat: type a message; /reset clears the conversation, Ctrl-D exits, Ctrl-C stops a reply.");
    }
    let mut input = Input {
        typed: prompt,
        once,
        interactive,
        lines: std::io::stdin().lock().lines(),
    };
    while let Some(user) = input.next_line()? {
        match chat.respond(&user)? {
            Flow::Continue => {}
            Flow::Exit => break,
            Flow::Fail => return Ok(ExitCode::FAILURE),
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Ctrl-C while a reply streams stops that reply; at the prompt it exits.
fn stop_replies_on_ctrl_c(state: &Arc<AtomicU8>) {
    let state = Arc::clone(state);
    let _ = ctrlc::set_handler(move || {
        if state
            .compare_exchange(GENERATING, CANCEL, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            eprintln!();
            std::process::exit(130);
        }
    });
}

/// Where the user's messages come from: the `-p` message alone, or stdin's
/// lines (with a `> ` prompt on a terminal).
struct Input {
    typed: Option<String>,
    once: bool,
    interactive: bool,
    lines: std::io::Lines<std::io::StdinLock<'static>>,
}

impl Input {
    /// The next message, or `None` at the end of input; a line that is not
    /// UTF-8 is skipped with a warning.
    fn next_line(&mut self) -> Result<Option<String>> {
        loop {
            match self.typed.take() {
                Some(p) => return Ok(Some(p)),
                None if self.once => return Ok(None),
                None => {
                    if self.interactive {
                        eprint!("> ");
                    }
                    match self.lines.next() {
                        None => return Ok(None),
                        Some(Err(e)) if e.kind() == std::io::ErrorKind::InvalidData => {
                            eprintln!("error: input is not valid UTF-8; line ignored");
                        }
                        Some(Err(e)) => return Err(e.into()),
                        Some(Ok(l)) => return Ok(Some(l)),
                    }
                }
            }
        }
    }
}

/// What the chat does after a message.
enum Flow {
    /// Read the next message.
    Continue,
    /// The user asked to leave.
    Exit,
    /// A `-p` message failed: exit with failure.
    Fail,
}

/// A conversation in progress: the engine's session, the messages and
/// media so far, and how replies are made.
struct Chat<'e> {
    engine: &'e engine::Engine,
    grammar: Option<engine::Grammar>,
    thinking: Option<engine::Thinking>,
    /// Media given on the command line, not yet sent.
    pending: Media,
    /// Media the conversation has sent.
    conversation: Media,
    session: engine::Session,
    /// With `--guard`: replies come whole, through the guards.
    guarded_model: Option<engine::LocalChat<'e>>,
    guard_cfg: guard::GuardConfig,
    guard_trace: bool,
    sampler: Sampler,
    opts: GenerateOptions,
    messages: Vec<ChatMessage>,
    saved: Option<crate::chat_session::SavedChat>,
    /// What Ctrl-C does: [`IDLE`], [`GENERATING`] or [`CANCEL`].
    state: Arc<AtomicU8>,
    /// A single `-p` message: a failed reply fails the command.
    once: bool,
}

impl<'e> Chat<'e> {
    /// A chat on `engine` as `turns` asks (its `prompt` taken already),
    /// resumed from the session file when that holds one.
    fn new(
        engine: &'e engine::Engine,
        args: &ModelArgs,
        sample: &SampleArgs,
        grammar: Option<engine::Grammar>,
        turns: Turns,
        once: bool,
    ) -> Result<Self> {
        let Turns {
            system,
            prompt: _,
            n_predict,
            think,
            guard,
            guard_trace,
            images,
            audio,
            session_file,
        } = turns;
        let thinking = think.and_then(|budget| engine.thinking(budget));
        if think.is_some() && thinking.is_none() {
            eprintln!("(this model does not think; --think is ignored)");
        }
        // The images go with the first message; the conversation keeps them.
        let pending = Media::read(engine, MediaFiles { images, audio })?;
        let session = engine.session();
        let guarded_model = (!guard.is_empty()).then(|| engine::LocalChat::new(engine));
        let guard_cfg = guard::GuardConfig {
            guards: guard,
            max_tokens: n_predict,
            ..guard::GuardConfig::default()
        };
        let sampler = Sampler::new(engine.options().sampling.clone());
        let opts = GenerateOptions {
            max_tokens: n_predict,
            stop: Vec::new(),
            stop_on_eog: true,
            render_special: false,
            speculation: sample.speculation(engine)?,
        };
        let mut chat = Chat {
            engine,
            grammar,
            thinking,
            pending,
            conversation: Media::default(),
            session,
            guarded_model,
            guard_cfg,
            guard_trace,
            sampler,
            opts,
            messages: system.into_iter().map(ChatMessage::system).collect(),
            saved: None,
            state: Arc::new(AtomicU8::new(IDLE)),
            once,
        };
        if let Some(path) = &session_file {
            chat.resume(path, &args.model)?;
        }
        Ok(chat)
    }

    /// Opens the session file, taking over the conversation it holds.
    fn resume(&mut self, path: &std::path::Path, model: &str) -> Result<()> {
        let (saved, kept) = crate::chat_session::SavedChat::open(path, self.engine, model)?;
        if !kept.messages.is_empty() {
            eprintln!(
                "(resuming {} messages from {})",
                kept.messages.len(),
                path.display()
            );
            self.messages = kept.messages;
            self.conversation = Media::read(self.engine, kept.media)
                .context("cannot read the saved chat's media again")?;
        }
        self.saved = Some(saved);
        Ok(())
    }

    /// Writes the conversation to the session file, when there is one.
    fn save(&self) -> Result<()> {
        if let Some(saved) = &self.saved {
            saved.save(&self.session, &self.messages, &self.conversation.files)?;
        }
        Ok(())
    }

    /// After a failed reply: a `-p` message fails the command; at the
    /// prompt the user may try again.
    fn failed(&self) -> Flow {
        if self.once {
            Flow::Fail
        } else {
            Flow::Continue
        }
    }

    /// Answers one line: a slash command, or a message to reply to.
    fn respond(&mut self, user: &str) -> Result<Flow> {
        let trimmed = user.trim();
        if trimmed.is_empty() {
            return Ok(Flow::Continue);
        }
        if trimmed == "/reset" {
            self.reset()?;
            return Ok(Flow::Continue);
        }
        if trimmed == "/exit" || trimmed == "/quit" {
            return Ok(Flow::Exit);
        }
        self.reply(user)
    }

    /// `/reset`: forgets everything but the system prompt.
    fn reset(&mut self) -> Result<()> {
        self.messages.retain(|m| m.role == "system");
        self.session.reset();
        if !self.conversation.is_empty() {
            eprintln!("(the images and clips were cleared with it)");
            self.conversation = Media::default();
        }
        self.save()?;
        eprintln!("(conversation cleared)");
        Ok(())
    }

    /// Sends `user` (with the media not sent yet) and shows the reply:
    /// whole through the guards, or streamed.
    fn reply(&mut self, user: &str) -> Result<Flow> {
        let added = self.conversation.append(&mut self.pending);
        self.messages
            .push(engine::media_message("user", user, added.0, added.1));
        let Some((ids, placed)) = self.encode(added) else {
            return Ok(self.failed());
        };
        if let Some(model) = self.guarded_model.as_mut() {
            match guarded_reply(model, &self.messages, &self.guard_cfg, self.guard_trace) {
                Ok(text) => self.messages.push(ChatMessage::assistant(text)),
                Err(e) => {
                    self.messages.pop();
                    eprintln!("error: {e}");
                    return Ok(self.failed());
                }
            }
            return Ok(Flow::Continue);
        }
        let result = self.stream(&ids, &placed)?;
        match result {
            Ok(g) => {
                if g.finish == FinishReason::Cancelled {
                    eprintln!("(reply stopped)");
                }
                self.messages
                    .push(ChatMessage::assistant(g.text.trim_end().to_string()));
                self.save()?;
            }
            Err(e @ EngineError::PromptTooLong { .. }) => {
                self.messages.pop();
                eprintln!("error: {e}; use /reset to start over or a larger --ctx");
                return Ok(self.failed());
            }
            Err(e) => return Err(e.into()),
        }
        Ok(Flow::Continue)
    }

    /// The prompt's tokens and media places for the conversation; `None`
    /// (having said why, and taken the message back) when it cannot be
    /// encoded.
    fn encode(&mut self, added: (usize, usize)) -> Option<(Vec<u32>, Vec<engine::PromptMedia>)> {
        let request = engine::PromptRequest::chat_with(
            &self.messages,
            engine::ChatOptions::reply(self.thinking.is_some()),
        )
        .with_media(&self.conversation.images, &self.conversation.clips);
        match self.engine.prompt(&request) {
            Ok(p) => Some((p.ids, p.media)),
            Err(e) => {
                self.messages.pop();
                // Media given with the message stay for the next try.
                self.pending = self.conversation.split_off(added);
                eprintln!("error: {e}");
                None
            }
        }
    }

    /// Generates the reply to `ids`, streaming it to stdout (thoughts
    /// dimmed on a terminal, on stderr otherwise) until it ends or Ctrl-C
    /// stops it.
    fn stream(
        &mut self,
        ids: &[u32],
        placed: &[engine::PromptMedia],
    ) -> Result<Result<engine::Generation, EngineError>> {
        self.state.store(GENERATING, Ordering::SeqCst);
        let stdout = std::io::stdout();
        let mut out = stdout.lock();
        // Each reply is held to the grammar on its own.
        let constraint = match &self.grammar {
            Some(g) => Some(self.engine.constraint(g)?),
            None => None,
        };
        let tty = std::io::stdout().is_terminal();
        let mut in_thought = false;
        let request = GenerationRequest {
            media: placed,
            constraint,
            thinking: self.thinking,
            ..GenerationRequest::new(ids, &self.opts)
        };
        if let Some(saved) = &self.saved {
            saved.resume(&mut self.session, ids, placed);
        }
        let state = &self.state;
        let sampler = &mut self.sampler;
        let session = &mut self.session;
        let begun = session.begin(request, sampler);
        let result = begun.and_then(|decoding| {
            session.run(decoding, sampler, |ev| {
                if !ev.thought.is_empty() {
                    if tty {
                        // Dimmed, on the terminal, before the answer.
                        let _ = write!(out, "\x1b[2m{}", ev.thought).and_then(|_| out.flush());
                        in_thought = true;
                    } else {
                        eprint!("{}", ev.thought);
                    }
                }
                if !ev.text.is_empty() {
                    if in_thought {
                        let _ = write!(out, "\x1b[0m\n\n");
                        in_thought = false;
                    }
                    let _ = out.write_all(ev.text.as_bytes()).and_then(|_| out.flush());
                }
                state.load(Ordering::SeqCst) != CANCEL
            })
        });
        if in_thought {
            let _ = write!(out, "\x1b[0m");
        }
        self.state.store(IDLE, Ordering::SeqCst);
        let _ = writeln!(out);
        Ok(result)
    }
}

/// Pictures and clips as a prompt takes them, with the files they were read
/// from (what a saved chat keeps, to read them again).
#[derive(Default)]
struct Media {
    images: Vec<engine::MediaEmbedding>,
    clips: Vec<engine::MediaEmbedding>,
    files: MediaFiles,
}

impl Media {
    /// Reads and encodes `files` (made absolute, so a chat resumed from
    /// another folder finds them).
    fn read(engine: &engine::Engine, files: MediaFiles) -> Result<Self> {
        let absolute = |list: Vec<PathBuf>| -> Result<Vec<PathBuf>> {
            list.into_iter()
                .map(|p| {
                    std::fs::canonicalize(&p)
                        .with_context(|| format!("cannot read {}", p.display()))
                })
                .collect()
        };
        let files = MediaFiles {
            images: absolute(files.images)?,
            audio: absolute(files.audio)?,
        };
        Ok(Self {
            images: crate::commands::encode_images(engine, &files.images)?,
            clips: crate::commands::encode_audio(engine, &files.audio)?,
            files,
        })
    }

    fn is_empty(&self) -> bool {
        self.images.is_empty() && self.clips.is_empty()
    }

    /// Moves all of `more` after these; how many images and clips moved.
    fn append(&mut self, more: &mut Media) -> (usize, usize) {
        let added = (more.images.len(), more.clips.len());
        self.images.append(&mut more.images);
        self.clips.append(&mut more.clips);
        self.files.images.append(&mut more.files.images);
        self.files.audio.append(&mut more.files.audio);
        added
    }

    /// Takes back the last `images` images and `clips` clips appended.
    fn split_off(&mut self, (images, clips): (usize, usize)) -> Media {
        let at = |len: usize, n: usize| len.saturating_sub(n);
        Media {
            images: self.images.split_off(at(self.images.len(), images)),
            clips: self.clips.split_off(at(self.clips.len(), clips)),
            files: MediaFiles {
                images: self
                    .files
                    .images
                    .split_off(at(self.files.images.len(), images)),
                audio: self
                    .files
                    .audio
                    .split_off(at(self.files.audio.len(), clips)),
            },
        }
    }
}

/// One reply through the guards: shown whole once checked, with the trace
/// on stderr when asked for.
fn guarded_reply(
    model: &mut engine::LocalChat<'_>,
    messages: &[ChatMessage],
    cfg: &guard::GuardConfig,
    trace: bool,
) -> Result<String, EngineError> {
    if std::io::stderr().is_terminal() {
        eprint!("(guarded: {}…)\r", cfg.guards);
    }
    let g = guard::answer(model, messages, cfg)?;
    if std::io::stderr().is_terminal() {
        eprint!("\x1b[2K");
    }
    let text = g.text.trim_end().to_string();
    println!("{text}");
    if trace {
        eprintln!("{}", g.trace.summary());
    }
    Ok(text)
}
