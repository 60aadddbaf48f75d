//! What speculative decoding buys on one prompt: greedy generation without
//! and with a drafter, alternated run by run, each from an empty cache.

use crate::{
    Engine, EngineError, GenerateOptions, Generation, Sampler, SamplingParams, SpecStats,
    Speculation,
};

/// Decode speed of one prompt without and with speculation.
#[derive(Debug, Clone)]
pub struct SpecBench {
    /// Tokens per second of each timed run without speculation.
    pub plain: Vec<f64>,
    /// Tokens per second of each timed run with it.
    pub speculative: Vec<f64>,
    /// Tokens each run generated.
    pub tokens: usize,
    /// What the drafter did over the timed runs.
    pub stats: SpecStats,
    /// Whether every speculative run produced the plain run's tokens.
    pub same: bool,
}

impl SpecBench {
    /// Mean speculative speed over mean plain speed.
    pub fn speedup(&self) -> f64 {
        spec_mean(&self.speculative) / spec_mean(&self.plain).max(1e-12)
    }
}

/// The mean of `v` (0 when empty).
pub fn spec_mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

impl Engine {
    /// Generate up to `n_gen` tokens greedily from `prompt`, alternating a
    /// run without speculation and one with `speculation`, `reps` timed
    /// pairs after one untimed pair. Only decoding is timed (the prompt's
    /// prefill is not), and the tokens of each pair are compared.
    pub fn bench_speculation(
        &self,
        prompt: &[u32],
        n_gen: usize,
        speculation: &Speculation,
        reps: usize,
    ) -> Result<SpecBench, EngineError> {
        let mut out = SpecBench {
            plain: Vec::new(),
            speculative: Vec::new(),
            tokens: 0,
            stats: SpecStats::default(),
            same: true,
        };
        for rep in 0..=reps.max(1) {
            let plain = self.greedy(prompt, n_gen, None)?;
            let fast = self.greedy(prompt, n_gen, Some(speculation.clone()))?;
            out.same &= fast.ids == plain.ids;
            if rep == 0 {
                continue;
            }
            out.tokens = plain.ids.len();
            out.plain.push(plain.gen_tokens_per_s());
            out.speculative.push(fast.gen_tokens_per_s());
            if let Some(s) = fast.speculation {
                out.stats.rounds += s.rounds;
                out.stats.drafted += s.drafted;
                out.stats.accepted += s.accepted;
            }
        }
        Ok(out)
    }

    fn greedy(
        &self,
        prompt: &[u32],
        n_gen: usize,
        speculation: Option<Speculation>,
    ) -> Result<Generation, EngineError> {
        let opts = GenerateOptions {
            max_tokens: n_gen,
            stop: Vec::new(),
            stop_on_eog: true,
            render_special: false,
            speculation,
        };
        let mut sampler = Sampler::new(SamplingParams {
            temperature: 0.0,
            ..SamplingParams::default()
        });
        let mut session = self.session();
        let decoding = session.begin(crate::GenerationRequest::new(prompt, &opts), &sampler)?;
        session.run(decoding, &mut sampler, |_| true)
    }
}
