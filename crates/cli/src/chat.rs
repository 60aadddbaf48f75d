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

/// Run a chat: one reply for `-p`, else a read-reply loop until end of input.
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

#[expect(
    clippy::too_many_lines,
    reason = "longer than a screen; issue 91 splits it"
)]
pub fn run(
    args: &ModelArgs,
    sample: &SampleArgs,
    constraint: &ConstraintArgs,
    turns: Turns,
) -> Result<ExitCode> {
    let Turns {
        system,
        prompt,
        n_predict,
        think,
        guard,
        guard_trace,
        images,
        audio,
        session_file,
    } = turns;
    let has_media = !images.is_empty() || !audio.is_empty();
    if has_media && !guard.is_empty() {
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
    let thinking = think.and_then(|budget| engine.thinking(budget));
    if think.is_some() && thinking.is_none() {
        eprintln!("(this model does not think; --think is ignored)");
    }
    // The images go with the first message; the conversation keeps them.
    let mut pending = Media::read(&engine, MediaFiles { images, audio })?;
    let mut conversation = Media::default();
    let mut session = engine.session();
    let mut guarded_model = (!guard.is_empty()).then(|| engine::LocalChat::new(&engine));
    let guard_cfg = guard::GuardConfig {
        guards: guard,
        max_tokens: n_predict,
        ..guard::GuardConfig::default()
    };
    let mut sampler = Sampler::new(engine.options().sampling.clone());
    let opts = GenerateOptions {
        max_tokens: n_predict,
        stop: Vec::new(),
        stop_on_eog: true,
        render_special: false,
        speculation: sample.speculation(&engine)?,
    };
    let mut messages: Vec<ChatMessage> = system.into_iter().map(ChatMessage::system).collect();
    let saved = match &session_file {
        Some(path) => {
            let (saved, kept) = crate::chat_session::SavedChat::open(path, &engine, &args.model)?;
            if !kept.messages.is_empty() {
                eprintln!(
                    "(resuming {} messages from {})",
                    kept.messages.len(),
                    path.display()
                );
                messages = kept.messages;
                conversation = Media::read(&engine, kept.media)
                    .context("cannot read the saved chat's media again")?;
            }
            Some(saved)
        }
        None => None,
    };

    // Ctrl-C while a reply streams stops that reply; at the prompt it exits.
    let state = Arc::new(AtomicU8::new(IDLE));
    {
        let state = Arc::clone(&state);
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

    let once = prompt.is_some();
    let interactive = !once && std::io::stdin().is_terminal();
    if interactive {
        eprintln!("hearth chat: type a message; /reset clears the conversation, Ctrl-D exits, Ctrl-C stops a reply.");
    }
    let mut typed = prompt;
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    loop {
        let user = match typed.take() {
            Some(p) => p,
            None if once => break,
            None => {
                if interactive {
                    eprint!("> ");
                }
                match lines.next() {
                    None => break,
                    Some(Err(e)) if e.kind() == std::io::ErrorKind::InvalidData => {
                        eprintln!("error: input is not valid UTF-8; line ignored");
                        continue;
                    }
                    Some(Err(e)) => return Err(e.into()),
                    Some(Ok(l)) => l,
                }
            }
        };
        let trimmed = user.trim();
        if trimmed.is_empty() {
            continue;
        }
        if trimmed == "/reset" {
            messages.retain(|m| m.role == "system");
            session.reset();
            if !conversation.is_empty() {
                eprintln!("(the images and clips were cleared with it)");
                conversation = Media::default();
            }
            if let Some(saved) = &saved {
                saved.save(&session, &messages, &conversation.files)?;
            }
            eprintln!("(conversation cleared)");
            continue;
        }
        if trimmed == "/exit" || trimmed == "/quit" {
            break;
        }
        let added = conversation.append(&mut pending);
        messages.push(engine::media_message("user", &user, added.0, added.1));
        let request = engine::PromptRequest::chat_with(
            &messages,
            engine::ChatOptions::reply(thinking.is_some()),
        )
        .with_media(&conversation.images, &conversation.clips);
        let encoded = engine.prompt(&request).map(|p| (p.ids, p.media));
        let (ids, placed) = match encoded {
            Ok(v) => v,
            Err(e) => {
                messages.pop();
                // Media given with the message stay for the next try.
                pending = conversation.split_off(added);
                eprintln!("error: {e}");
                if once {
                    return Ok(ExitCode::FAILURE);
                }
                continue;
            }
        };
        if let Some(model) = guarded_model.as_mut() {
            match guarded_reply(model, &messages, &guard_cfg, guard_trace) {
                Ok(text) => messages.push(ChatMessage::assistant(text)),
                Err(e) => {
                    messages.pop();
                    eprintln!("error: {e}");
                    if once {
                        return Ok(ExitCode::FAILURE);
                    }
                }
            }
            if once {
                break;
            }
            continue;
        }
        state.store(GENERATING, Ordering::SeqCst);
        let stdout = std::io::stdout();
        let mut out = stdout.lock();
        // Each reply is held to the grammar on its own.
        let constraint = match &grammar {
            Some(g) => Some(engine.constraint(g)?),
            None => None,
        };
        let tty = std::io::stdout().is_terminal();
        let mut in_thought = false;
        let request = GenerationRequest {
            media: &placed,
            constraint,
            thinking,
            ..GenerationRequest::new(&ids, &opts)
        };
        if let Some(saved) = &saved {
            saved.resume(&mut session, &ids, &placed);
        }
        let begun = session.begin(request, &sampler);
        let result = begun.and_then(|decoding| {
            session.run(decoding, &mut sampler, |ev| {
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
        state.store(IDLE, Ordering::SeqCst);
        let _ = writeln!(out);
        match result {
            Ok(g) => {
                if g.finish == FinishReason::Cancelled {
                    eprintln!("(reply stopped)");
                }
                messages.push(ChatMessage::assistant(g.text.trim_end().to_string()));
                if let Some(saved) = &saved {
                    saved.save(&session, &messages, &conversation.files)?;
                }
            }
            Err(e @ EngineError::PromptTooLong { .. }) => {
                messages.pop();
                eprintln!("error: {e}; use /reset to start over or a larger --ctx");
                if once {
                    return Ok(ExitCode::FAILURE);
                }
            }
            Err(e) => return Err(e.into()),
        }
        if once {
            break;
        }
    }
    Ok(ExitCode::SUCCESS)
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
