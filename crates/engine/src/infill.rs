//! Fill-in-the-middle prompts for code models (CodeGemma): the code before
//! and after a gap, files of the project for context, and the start of the
//! middle, laid out with the model's FIM tokens as llama.cpp's `/infill`
//! lays them out (`format_prompt_infill`, its repo-level pattern):
//!
//! ```text
//! [FIM_REP]myproject\n [FIM_SEP]name\n text ... [FIM_SEP]filename\n
//! [BOS] [FIM_PRE] prefix middle [FIM_SUF] suffix [FIM_MID]
//! ```
//!
//! The prefix keeps its last tokens and the suffix its first within a
//! batch (three quarters for the prefix, the rest for the suffix; within
//! the context, where a batch is the whole of it), and the project's files
//! their last tokens within what the context has left.

use crate::{Engine, EngineError};

/// One file of the project, given for context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InfillFile {
    /// Its name (`tmp` where a client gives none, as llama.cpp).
    pub filename: String,
    /// Its text.
    pub text: String,
}

/// What fills a gap in code.
#[derive(Debug, Clone, Copy)]
pub struct Infill<'a> {
    /// The code before the gap.
    pub prefix: &'a str,
    /// The code after the gap.
    pub suffix: &'a str,
    /// Files of the project, for context.
    pub extra: &'a [InfillFile],
    /// The start of the middle, already written (llama.cpp's `prompt`):
    /// its control tokens are parsed.
    pub middle: &'a str,
    /// How the prompt is laid out: the settings of llama.cpp's server it
    /// follows.
    pub layout: InfillLayout,
}

/// The settings of llama.cpp's server a fill-in-the-middle prompt's layout
/// follows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InfillLayout {
    /// The suffix part before the prefix part (`--spm-infill`).
    pub suffix_first: bool,
    /// The tokens the server's `-n` reserves for the answer when it fits
    /// the project's files (`None`: its default, -1).
    pub reserve: Option<usize>,
}

impl Engine {
    /// The ids of the fill-in-the-middle prompt `infill`; a model without
    /// the prefix, suffix and middle tokens refuses it.
    pub(crate) fn infill_ids(&self, infill: &Infill<'_>) -> Result<Vec<u32>, EngineError> {
        let tok = self.tokenizer();
        let fim = tok.vocab().fim;
        let (pre, suf, mid) = fim.infill().ok_or_else(|| {
            EngineError::InvalidRequest(
                "this model has no fill-in-the-middle tokens (a code model such as CodeGemma has \
                 <|fim_prefix|>, <|fim_suffix|> and <|fim_middle|>)"
                    .into(),
            )
        })?;
        let plain = |text: &str| tok.encode(text, false, false);
        let mut prefix = plain(infill.prefix);
        let mut suffix = plain(infill.suffix);
        let middle = tok.encode(infill.middle, false, true);
        let extra = self.infill_context(infill.extra);
        let n_ctx = self.n_ctx();
        let n_batch = self.batch_for(n_ctx);
        let mut prefix_take = prefix.len().min(3 * (n_batch / 4));
        let mut suffix_take = suffix
            .len()
            .min((n_batch / 4).saturating_sub(2 + middle.len()));
        // Where the batch is the whole context, llama.cpp's shares leave no
        // room for the FIM tokens and an answer: cut them to what does.
        let fixed = usize::from(tok.add_bos()) + 3 + middle.len() + 1;
        let room = n_ctx.saturating_sub(fixed);
        if prefix_take + suffix_take > room {
            suffix_take = suffix_take.min(room / 4);
            prefix_take = prefix_take.min(room - suffix_take);
        }
        // llama.cpp leaves room for twice its `-n` (-1 by default). A batch
        // of the whole context (the batch is cut to it here, not in
        // llama.cpp's count) leaves none.
        let room = match infill.layout.reserve {
            _ if n_batch >= n_ctx => 0,
            Some(n) => n_ctx.saturating_sub(n_batch + 2 * n),
            None => n_ctx + 2 - n_batch,
        };
        let extra_take = room.min(extra.len());
        prefix.drain(..prefix.len() - prefix_take);
        suffix.truncate(suffix_take);
        let head: Vec<u32> = std::iter::once(pre).chain(prefix).chain(middle).collect();
        let tail: Vec<u32> = std::iter::once(suf).chain(suffix).collect();
        let (first, second) = match infill.layout.suffix_first {
            true => (tail, head),
            false => (head, tail),
        };
        let mut ids = extra[extra.len() - extra_take..].to_vec();
        if tok.add_bos() {
            ids.extend(tok.bos_id());
        }
        ids.extend(first);
        ids.extend(second);
        ids.push(mid);
        Ok(ids)
    }

    /// The project's files as the prompt's context: each after the file
    /// separator and its name (or a snippet marker where the model has no
    /// separator), then the separator and the name of the file the gap is
    /// in.
    fn infill_context(&self, files: &[InfillFile]) -> Vec<u32> {
        let tok = self.tokenizer();
        let fim = tok.vocab().fim;
        let plain = |text: &str| tok.encode(text, false, false);
        let mut out = Vec::new();
        if let Some(rep) = fim.rep {
            out.push(rep);
            out.extend(plain("myproject\n"));
        }
        for f in files {
            match fim.sep {
                Some(sep) => {
                    out.push(sep);
                    out.extend(plain(&format!("{}\n", f.filename)));
                }
                None => out.extend(plain("\n\n--- snippet ---\n\n")),
            }
            out.extend(plain(&f.text));
        }
        if let Some(sep) = fim.sep {
            out.push(sep);
            out.extend(plain("filename\n"));
        }
        out
    }
}
