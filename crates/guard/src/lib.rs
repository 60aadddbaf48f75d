//! Guardrails: deterministic tools that check and repair what a small model
//! says. Nothing a model writes is ever run by a general interpreter: its
//! programs are in small languages we parse and evaluate ourselves.
//!
//! So far: [`calc`], the exact calculator; [`verify`], the constraint
//! verifier (IFEval-compatible instruction checks, extraction of
//! instructions from prompts, and safe repairs).

pub mod calc;
pub mod verify;
