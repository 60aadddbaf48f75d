//! One generation's grammar state: the mask it applies to the logits, the
//! tokens it accepts, and what that cost.

use super::*;

/// What a constraint cost so far.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ConstraintStats {
    /// Tokens accepted into the parser.
    pub tokens: u64,
    /// Full masks computed (draws the parser refused, plus the first).
    pub masks: u64,
    /// Time spent computing full masks.
    pub mask_time: Duration,
    /// Time spent checking drawn tokens and advancing the parser.
    pub check_time: Duration,
}

impl ConstraintStats {
    /// Mean constraint time per generated token (masks and checks).
    pub fn per_token(&self) -> Duration {
        let total = self.mask_time + self.check_time;
        if self.tokens == 0 {
            total
        } else {
            total / self.tokens.min(u32::MAX as u64) as u32
        }
    }
}

/// One generation's grammar state.
pub struct Constraint {
    pub(super) matcher: Matcher,
    pub(super) eog: Arc<[u32]>,
    pub(super) digits: Arc<[DigitInfo]>,
    /// [`MAX_DIGIT_RUN`] for JSON and Lark grammars; none for regular
    /// expressions and GBNF, which say exactly what they want.
    pub(super) digit_cap: Option<usize>,
    /// Digits the output ends with now.
    pub(super) digit_run: usize,
    /// The mask for the first token, computed while compiling (to refuse a
    /// grammar that matches nothing) and used once.
    pub(super) first_mask: Option<toktrie::SimpleVob>,
    pub(super) stats: ConstraintStats,
}

impl std::fmt::Debug for Constraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Constraint")
            .field("stopped", &self.matcher.is_stopped())
            .field("stats", &self.stats)
            .finish()
    }
}

impl Constraint {
    /// What it cost so far.
    pub fn stats(&self) -> ConstraintStats {
        self.stats
    }

    /// An independent copy of this constraint in its present state (with
    /// its lexer caches), for another choice of the same request: cheaper
    /// than compiling the grammar again.
    pub fn fork(&self) -> Constraint {
        Constraint {
            matcher: self.matcher.deep_clone(),
            eog: Arc::clone(&self.eog),
            digits: Arc::clone(&self.digits),
            digit_cap: self.digit_cap,
            digit_run: self.digit_run,
            first_mask: self.first_mask.clone(),
            stats: ConstraintStats::default(),
        }
    }

    /// Whether the grammar is complete and allows nothing more: the
    /// generation ends here.
    pub fn is_done(&self) -> bool {
        self.matcher.is_stopped()
    }

    /// Whether the output so far is a complete match (ending now is allowed).
    pub fn is_accepting(&mut self) -> bool {
        self.matcher.is_accepting().unwrap_or(false)
    }

    fn error(&self, what: &str) -> EngineError {
        let detail = self
            .matcher
            .get_error()
            .map(|e| clean_error(&e))
            .unwrap_or_else(|| "no detail".into());
        // llguidance says "max is N" for its row limit and names fuel for
        // the lexer's and a mask's work.
        if detail.contains("max is") || detail.contains("fuel") {
            return EngineError::GrammarLimit(detail);
        }
        EngineError::Constraint(format!("{what}: {detail}"))
    }

    fn at_digit_cap(&self) -> bool {
        self.digit_cap.is_some_and(|cap| self.digit_run >= cap)
    }

    fn is_eog(&self, id: u32) -> bool {
        self.eog.contains(&id)
    }

    /// Whether `id` may come next.
    fn allows(&mut self, id: u32) -> bool {
        if self.is_eog(id) {
            return self.is_accepting();
        }
        matches!(self.matcher.validate_tokens(&[id]), Ok(1))
    }

    /// Set every logit the grammar does not allow to minus infinity; the
    /// end-of-generation tokens are allowed exactly when the grammar may end.
    /// Returns whether any token is allowed.
    fn restrict(&mut self, logits: &mut [f32]) -> Result<bool, EngineError> {
        let t0 = Instant::now();
        let mask = match self.first_mask.take() {
            Some(m) => m,
            None => self
                .matcher
                .compute_mask()
                .map_err(|_| self.error("computing the token mask failed"))?,
        };
        let accepting = self.is_accepting();
        let allowed = |id: usize| {
            if self.eog.contains(&(id as u32)) {
                accepting
            } else {
                mask.is_allowed(id as u32)
            }
        };
        // At the digit cap, refuse tokens that lengthen the run, unless the
        // grammar allows nothing else (it then needs the digits).
        let cap_digits = self.at_digit_cap()
            && (0..logits.len())
                .any(|id| allowed(id) && !self.digits.get(id).is_some_and(|d| d.leads));
        let mut any = false;
        for (id, l) in logits.iter_mut().enumerate() {
            let ok = allowed(id) && !(cap_digits && self.digits.get(id).is_some_and(|d| d.leads));
            if ok {
                any |= !l.is_nan() && *l != f32::NEG_INFINITY;
            } else {
                *l = f32::NEG_INFINITY;
            }
        }
        self.stats.masks += 1;
        self.stats.mask_time += t0.elapsed();
        Ok(any)
    }

    /// Draw the next token with `sampler` from `logits` (already prepared:
    /// biases and penalties applied) among the tokens the grammar allows,
    /// and advance the grammar past it (an end-of-generation token is not
    /// fed to the grammar: it ends the generation).
    pub(crate) fn sample(
        &mut self,
        sampler: &mut Sampler,
        logits: &mut [f32],
    ) -> Result<u32, EngineError> {
        let mut t0 = Instant::now();
        let first = if self.first_mask.is_none() {
            let id = sampler.pick(logits);
            // The draw itself is sampling's cost, paid unconstrained too.
            t0 = Instant::now();
            let lengthens =
                self.at_digit_cap() && self.digits.get(id as usize).is_some_and(|d| d.leads);
            (!lengthens && self.allows(id)).then_some(id)
        } else {
            None
        };
        self.stats.check_time += t0.elapsed();
        let id = match first {
            Some(id) => id,
            None => {
                if !self.restrict(logits)? {
                    return Err(self.error("the grammar allows no token the model can produce"));
                }
                sampler.pick(logits)
            }
        };
        let t1 = Instant::now();
        if !self.is_eog(id) {
            self.matcher
                .consume_token(id)
                .map_err(|_| self.error("the grammar refused a token its mask allowed"))?;
            let d = self.digits.get(id as usize).copied().unwrap_or_default();
            self.digit_run = if d.all {
                self.digit_run + d.trailing as usize
            } else {
                d.trailing as usize
            };
        }
        self.stats.tokens += 1;
        self.stats.check_time += t1.elapsed();
        Ok(id)
    }
}
