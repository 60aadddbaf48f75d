//! `hearth chat --session FILE`: a conversation kept across runs. Its
//! messages are in FILE (JSON, replaced whole after each reply), its prompt
//! state in the prompt cache `FILE.states/`, so a resumed conversation's
//! next reply does not compute the conversation again (as llama.cpp's
//! `--prompt-cache`, with the conversation itself kept too).

use anyhow::{bail, Context, Result};
use engine::{ChatMessage, Engine, PromptMedia, PromptStore, Session};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Bytes of prompt states one conversation's folder keeps (a 32k-token
/// state of a 4B model fits).
const STATE_BYTES: u64 = 2 << 30;

/// A conversation kept in a file and its prompt state beside it.
pub struct SavedChat {
    path: PathBuf,
    store: prompt_cache::ScopedCache,
}

/// The file's contents.
#[derive(serde::Serialize, serde::Deserialize)]
struct Kept {
    messages: Vec<ChatMessage>,
}

impl SavedChat {
    /// Opens the conversation in `path` (none yet: a new one) of the model
    /// `model` (its path or alias) that `engine` runs; returns its messages.
    pub fn open(path: &Path, engine: &Engine, model: &str) -> Result<(Self, Vec<ChatMessage>)> {
        let messages = match std::fs::read(path) {
            Ok(bytes) => {
                let kept: Kept = serde_json::from_slice(&bytes)
                    .with_context(|| format!("{} is not a saved chat", path.display()))?;
                kept.messages
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => bail!("cannot read {}: {e}", path.display()),
        };
        let mut states = path.as_os_str().to_owned();
        states.push(".states");
        let cache = prompt_cache::PromptCache::open(&prompt_cache::CacheConfig {
            ram_bytes: STATE_BYTES,
            dir: Some(PathBuf::from(states)),
            disk_bytes: STATE_BYTES,
        })
        .context("cannot open the conversation's prompt states")?;
        let weights = store::resolve(model)?;
        let ns =
            prompt_cache::model_namespace(engine, &weights, engine.options().mmproj.as_deref())?;
        let store = prompt_cache::ScopedCache {
            cache: Arc::new(cache),
            ns,
        };
        Ok((
            Self {
                path: path.to_path_buf(),
                store,
            },
            messages,
        ))
    }

    /// Starts `session` from the conversation's stored state, when it
    /// serves more of `ids` (with `media`) than the session holds (said on
    /// stderr).
    pub fn resume(&self, session: &mut Session, ids: &[u32], media: &[PromptMedia]) {
        if session.resume_from(&self.store, ids, media) {
            eprintln!(
                "({} of {} prompt tokens from the saved state)",
                session.tokens().len(),
                ids.len()
            );
        }
    }

    /// Keeps `messages` in the file and `session`'s state beside it, both
    /// on disk before this returns.
    pub fn save(&self, session: &Session, messages: &[ChatMessage]) -> Result<()> {
        let kept = Kept {
            messages: messages.to_vec(),
        };
        let json = serde_json::to_vec_pretty(&kept)?;
        durable::write_atomic(&self.path, &json)
            .with_context(|| format!("cannot save the chat in {}", self.path.display()))?;
        session.leave_in(&self.store);
        self.store.flush();
        Ok(())
    }
}
