//! MT-Bench (FastChat's `llm_judge`): the 80 questions and their judge
//! prompts ([`fastchat`], shipped with FastChat's Apache-2.0 licence in
//! `data/`), in FastChat's own file formats so runs, judgments and reports
//! interoperate with its published files; [`grade`] is the blind human
//! grading page (`hearth eval grade`), which writes FastChat judgments.

pub mod fastchat;
pub mod grade;
