//! `hearth telegram`: the model as a Telegram bot. Long polling or a
//! webhook; each chat's memory, the updates not yet answered and the
//! replies not yet delivered kept in an embedded database, so a restart
//! loses nothing; an allowlist, a per-chat rate limit, and several chats
//! answered at once through the batched engine.

pub mod api;
pub mod brain;
pub mod command;
pub mod conversation;
pub mod fake;
pub mod handler;
pub mod incoming;
pub mod limit;
pub mod service;
pub mod split;
pub mod store;
pub mod webhook;

pub use brain::{Brain, BrainReply, EngineBrain};
pub use handler::Behaviour;
pub use service::{run, run_until_signal, Backoff, BotConfig, BotError, Mode};
