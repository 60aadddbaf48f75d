//! Guardrails: deterministic tools that check and repair what a small model
//! says. Nothing a model writes is ever run by a general interpreter: its
//! programs are in small languages we parse and evaluate ourselves.
//!
//! [`pipeline`] runs the guards between the user and the model; the tools
//! are [`calc`] (the exact calculator) and [`claims`] (arithmetic in free
//! text), [`logic`] (the constraint solver), [`verify`] (stated
//! requirements), and the passes [`clean`], [`persona`] and [`qualifiers`];
//! [`route`] decides which apply. [`scripted`] is a fake model for tests.

pub mod calc;
pub mod claims;
pub mod clean;
pub mod ground;
pub mod logic;
pub mod persona;
pub mod pipeline;
pub mod qualifiers;
pub mod route;
pub mod scripted;
pub mod verify;

pub use pipeline::{answer, GuardConfig, GuardKind, GuardSet, Guarded, Outcome, Trace};
pub use scripted::ScriptedModel;
