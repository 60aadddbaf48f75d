//! Guardrails: deterministic tools that check and repair what a small model
//! says. Nothing a model writes is ever run by a general interpreter: its
//! programs are in small languages we parse and evaluate ourselves.
//!
//! So far: [`calc`], the exact calculator; [`logic`], the constraint
//! solver; [`verify`], the constraint verifier.

pub mod calc;
pub mod logic;
pub mod verify;
