//! MT-Bench (FastChat's `llm_judge`): the 80 questions and their judge
//! prompts ([`fastchat`], shipped with FastChat's Apache-2.0 licence in
//! `data/`), in FastChat's own file formats so runs, judgments and reports
//! interoperate with its published files. [`run`] answers them (raw or
//! guarded) onto an append-only tape, [`judge`] grades answers through any
//! OpenAI-compatible endpoint, [`report`] computes FastChat's
//! `show_result.py` averages exactly and renders a self-contained HTML page,
//! and [`grade`] serves a page for blind human grading.

#![warn(missing_docs)]

pub mod fastchat;
pub mod grade;
pub mod judge;
pub mod report;
pub mod run;
