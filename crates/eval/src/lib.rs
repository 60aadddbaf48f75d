//! MT-Bench (FastChat's `llm_judge`): the 80 questions and their judge
//! prompts ([`fastchat`], shipped with FastChat's Apache-2.0 licence in
//! `data/`), in FastChat's own file formats so runs, judgments and reports
//! interoperate with its published files; [`report`] computes FastChat's
//! `show_result.py` averages exactly and renders a self-contained HTML page.

#![warn(missing_docs)]

pub mod fastchat;
pub mod report;
