//! `hearth chat --session FILE`: a conversation kept across runs. Its
//! messages are in FILE (JSON, replaced whole after each reply), its prompt
//! state in the prompt cache `FILE.states/`, so a resumed conversation's
//! next reply does not compute the conversation again (as llama.cpp's
//! `--prompt-cache`, with the conversation itself kept too). Its pictures
//! and clips are kept as the files they were read from, read again on
//! resume.

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

/// The files of a conversation's pictures and clips, in the order its
/// messages take them (absolute paths).
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct MediaFiles {
    /// Pictures.
    #[serde(default)]
    pub images: Vec<PathBuf>,
    /// Audio clips.
    #[serde(default)]
    pub audio: Vec<PathBuf>,
}

/// A saved conversation: its messages and its media's files.
#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Kept {
    /// The messages.
    pub messages: Vec<ChatMessage>,
    /// The files its messages' media were read from.
    #[serde(default)]
    pub media: MediaFiles,
    /// Each message's media markers, as byte ranges of its content (a
    /// message's text alone never makes one).
    #[serde(default)]
    markers: Vec<Vec<[usize; 2]>>,
}

impl Kept {
    /// `messages` and their `media` files, with each message's markers.
    fn of(messages: &[ChatMessage], media: &MediaFiles) -> Self {
        let markers = messages
            .iter()
            .map(|m| m.media().iter().map(|r| [r.start, r.end]).collect())
            .collect();
        Self {
            messages: messages.to_vec(),
            media: media.clone(),
            markers,
        }
    }

    /// The messages with their markers placed again; `None` when a range
    /// does not fit its message (in order, within its text, on character
    /// boundaries).
    fn placed(mut self) -> Option<Self> {
        for (m, ranges) in self.messages.iter_mut().zip(&self.markers) {
            let mut placed = ChatMessage::new(m.role.clone(), "");
            let mut at = 0;
            for &[start, end] in ranges {
                let fits = at <= start
                    && start < end
                    && m.content.is_char_boundary(start)
                    && m.content.get(start..end).is_some();
                if !fits {
                    return None;
                }
                placed.content.push_str(&m.content[at..start]);
                placed.push_media(&m.content[start..end]);
                at = end;
            }
            placed.content.push_str(&m.content[at..]);
            placed.tool_calls = std::mem::take(&mut m.tool_calls);
            placed.tool_call_id = m.tool_call_id.take();
            placed.name = m.name.take();
            *m = placed;
        }
        Some(self)
    }
}

impl SavedChat {
    /// Opens the conversation in `path` (none yet: a new one) of the model
    /// `model` (its path or alias) that `engine` runs; returns what it kept.
    pub fn open(path: &Path, engine: &Engine, model: &str) -> Result<(Self, Kept)> {
        let kept = match std::fs::read(path) {
            Ok(bytes) => serde_json::from_slice::<Kept>(&bytes)
                .ok()
                .and_then(Kept::placed)
                .with_context(|| format!("{} is not a saved chat", path.display()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Kept::default(),
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
            kept,
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

    /// Keeps `messages` and their `media` files in the file and
    /// `session`'s state beside it, all on disk before this returns.
    pub fn save(
        &self,
        session: &Session,
        messages: &[ChatMessage],
        media: &MediaFiles,
    ) -> Result<()> {
        let kept = Kept::of(messages, media);
        let json = serde_json::to_vec_pretty(&kept)?;
        durable::write_atomic(&self.path, &json)
            .with_context(|| format!("cannot save the chat in {}", self.path.display()))?;
        session.leave_in(&self.store);
        self.store.flush();
        Ok(())
    }
}
