//! Throughput measurements in llama-bench's terms: `pp N` processes a prompt
//! of N tokens in one batch, `tg N` decodes N tokens one at a time (after
//! `depth` tokens of context), each run from an empty cache.

use crate::{
    BatchDecoder, BatchItem, Decoding, Engine, EngineError, GenerateOptions, Rng, Sampler, Session,
};
use std::time::{Duration, Instant};

/// Where a parallel operation site spent its time (`hearth bench --profile`).
pub use threads::SiteProfile;

/// What one benchmark row measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BenchTest {
    /// Prompt processing of `n` tokens in one batch.
    Prompt(usize),
    /// Generation of `n` tokens one by one.
    Generate(usize),
}

impl BenchTest {
    /// Tokens the test processes.
    pub fn tokens(self) -> usize {
        match self {
            BenchTest::Prompt(n) | BenchTest::Generate(n) => n,
        }
    }

    /// llama-bench's name for the test (`pp512`, `tg128`).
    pub fn name(self) -> String {
        match self {
            BenchTest::Prompt(n) => format!("pp{n}"),
            BenchTest::Generate(n) => format!("tg{n}"),
        }
    }
}

/// Repeated timings of one test.
#[derive(Debug, Clone)]
pub struct BenchResult {
    /// The test.
    pub test: BenchTest,
    /// Context tokens processed before the timed part.
    pub depth: usize,
    /// Kernel threads.
    pub threads: usize,
    /// Tokens per second of each repetition.
    pub samples: Vec<f64>,
    /// How the threads shared the timed runs, when there was more than one.
    pub sync: Option<SyncShare>,
}

/// Where the time of a multi-threaded test went, beyond the kernels: how
/// often the threads met, and how long they waited for each other.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SyncShare {
    /// Parallel operations per token.
    pub ops_per_token: f64,
    /// Share of the wall time the calling thread spent waiting at the end of
    /// operations for the other threads.
    pub caller_wait: f64,
    /// Share of the worker threads' wall time not spent on tasks: waiting
    /// while the caller works alone, for a hand-off, or for the slowest
    /// thread of an operation.
    pub workers_idle: f64,
}

impl SyncShare {
    /// The share of pool counters `d` (the difference of two readings)
    /// over `wall` time, for `tokens` tokens on `threads` threads (`None`
    /// on one thread).
    fn of(d: threads::PoolStats, wall: Duration, tokens: usize, threads: usize) -> Option<Self> {
        if threads < 2 || wall.is_zero() || tokens == 0 {
            return None;
        }
        let wall_s = wall.as_secs_f64();
        let workers = (threads - 1) as f64;
        Some(SyncShare {
            ops_per_token: d.ops as f64 / tokens as f64,
            caller_wait: d.caller_wait.as_secs_f64() / wall_s,
            workers_idle: (1.0 - d.worker_busy.as_secs_f64() / (wall_s * workers)).max(0.0),
        })
    }
}

impl BenchResult {
    /// Mean tokens per second.
    pub fn mean(&self) -> f64 {
        self.samples.iter().sum::<f64>() / self.samples.len().max(1) as f64
    }

    /// Sample standard deviation of tokens per second.
    pub fn sd(&self) -> f64 {
        let n = self.samples.len();
        if n < 2 {
            return 0.0;
        }
        let m = self.mean();
        (self.samples.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / (n - 1) as f64).sqrt()
    }
}

/// Random token ids, as llama-bench feeds: the content does not change the
/// work done.
fn tokens(engine: &Engine, n: usize, seed: u64) -> Vec<u32> {
    let vocab = engine.model().config().vocab as u64;
    let mut rng = Rng::new(seed);
    (0..n).map(|_| (rng.next_u64() % vocab) as u32).collect()
}

impl Engine {
    /// Time `test` `reps` times (after one untimed warm-up run).
    pub fn bench(
        &self,
        test: BenchTest,
        depth: usize,
        reps: usize,
    ) -> Result<BenchResult, EngineError> {
        let n = test.tokens();
        if n == 0 {
            return Err(EngineError::InvalidRequest(
                "a benchmark needs at least one token".into(),
            ));
        }
        let n_ctx = depth + n;
        let mut session = self.session_with_ctx(n_ctx);
        let ctx_ids = tokens(self, depth, 1);
        let ids = tokens(self, n, 2);
        let model = self.model();
        // The timed part's duration and the pool's counters around it alone
        // (the context before it runs on the pool too).
        let mut run = || -> Result<(Duration, threads::PoolStats), EngineError> {
            session.reset();
            if depth > 0 {
                session.feed(&ctx_ids)?;
            }
            let before = model.pool_stats();
            let start = Instant::now();
            match test {
                BenchTest::Prompt(_) => {
                    session.feed_batch(&ids)?;
                }
                BenchTest::Generate(_) => {
                    for &id in &ids {
                        session.feed_batch(&[id])?;
                    }
                }
            }
            let t = start.elapsed();
            Ok((t, model.pool_stats() - before))
        };
        run()?;
        let mut samples = Vec::with_capacity(reps);
        let (mut timed, mut sync) = (Duration::ZERO, None);
        for _ in 0..reps.max(1) {
            let (t, pool) = run()?;
            timed += t;
            let share = SyncShare::of(pool, t, n, model.threads());
            sync = merge(sync, share, timed, t);
            samples.push(n as f64 / t.as_secs_f64().max(1e-9));
        }
        Ok(BenchResult {
            test,
            depth,
            threads: self.model().threads(),
            samples,
            sync,
        })
    }
}

/// `sum`, the time-weighted mean share over `total` time so far, with one
/// more repetition's `share` of `t` added.
fn merge(
    sum: Option<SyncShare>,
    share: Option<SyncShare>,
    total: Duration,
    t: Duration,
) -> Option<SyncShare> {
    let share = share?;
    let Some(prev) = sum else { return Some(share) };
    let w = t.as_secs_f64() / total.as_secs_f64().max(1e-12);
    let mix = |a: f64, b: f64| a * (1.0 - w) + b * w;
    Some(SyncShare {
        ops_per_token: mix(prev.ops_per_token, share.ops_per_token),
        caller_wait: mix(prev.caller_wait, share.caller_wait),
        workers_idle: mix(prev.workers_idle, share.workers_idle),
    })
}

/// The CPU kernel set products run on (`scalar`, `avx2`, `avxvnni`,
/// `avx512`).
pub fn kernel_set() -> &'static str {
    quant::kernel_name()
}

/// The physical cores (`None` where unknown) and the logical CPUs this
/// process may run on.
pub fn core_counts() -> (Option<usize>, usize) {
    threads::core_counts()
}

/// The kernel sets this CPU can run, slowest first.
pub fn kernel_sets() -> Vec<&'static str> {
    quant::kernel_sets()
}

/// Runs the named kernel set for the rest of the process (as `HEARTH_CPU`
/// does); must come before a model is loaded.
pub fn select_kernels(name: &str) -> Result<&'static str, EngineError> {
    quant::select_kernels(name).map_err(|e| EngineError::InvalidOptions(e.to_string()))
}

/// This machine's memory read bandwidth with `threads` threads, in bytes
/// per second: the ceiling on decode, which reads every weight once a token.
pub fn memory_read_bandwidth(threads: usize) -> f64 {
    threads::read_bandwidth(&threads::ThreadPool::new(threads.max(1)), 5)
}

impl Engine {
    /// Bytes of weights one decode step reads (see [`model::Model::decode_bytes`]).
    pub fn decode_bytes(&self) -> u64 {
        self.model().decode_bytes()
    }

    /// Bytes a decode of `n` tokens after `depth` reads per token on
    /// average: the weights and, at a depth, the cached keys and values
    /// attention reads (from the middle position of the run).
    pub fn decode_bytes_at(&self, depth: usize, n: usize) -> u64 {
        self.decode_bytes() + self.model().kv_bytes_read_at(depth + n / 2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statistics() {
        let r = BenchResult {
            test: BenchTest::Prompt(4),
            depth: 0,
            threads: 1,
            samples: vec![1.0, 2.0, 3.0],
            sync: None,
        };
        assert_eq!(r.mean(), 2.0);
        assert!((r.sd() - 1.0).abs() < 1e-12);
        assert_eq!(BenchTest::Generate(128).name(), "tg128");
    }

    #[test]
    fn sync_share_of_pool_counters() {
        let ms = Duration::from_millis;
        let before = threads::PoolStats {
            ops: 10,
            caller_wait: ms(5),
            worker_busy: ms(50),
        };
        let after = threads::PoolStats {
            ops: 410,
            caller_wait: ms(15),
            worker_busy: ms(130),
        };
        // 400 operations over 4 tokens; two workers busy 80 ms of 2 × 100.
        let s = SyncShare::of(after - before, ms(100), 4, 3).unwrap();
        assert_eq!(s.ops_per_token, 100.0);
        assert!((s.caller_wait - 0.1).abs() < 1e-12);
        assert!((s.workers_idle - 0.6).abs() < 1e-12);
        assert_eq!(SyncShare::of(after - before, ms(100), 4, 1), None);
        // Repetitions weigh by their time: 1 s at 0.6 idle and 3 s at 0.2.
        let first = SyncShare {
            workers_idle: 0.6,
            ..s
        };
        let second = SyncShare {
            workers_idle: 0.2,
            ..s
        };
        let m = merge(
            Some(first),
            Some(second),
            Duration::from_secs(4),
            Duration::from_secs(3),
        );
        assert!((m.unwrap().workers_idle - 0.3).abs() < 1e-12);
    }
}

/// Timings of real sampled generation, with or without a constraint.
#[derive(Debug, Clone)]
pub struct SampledBench {
    /// Sequences decoded together in each step.
    pub seqs: usize,
    /// Tokens per second (all sequences together) of each repetition,
    /// counting decode steps only (prompts excluded).
    pub samples: Vec<f64>,
    /// Tokens generated in all repetitions.
    pub tokens: u64,
    /// What the constraints cost, summed over every generation, when there
    /// was one.
    pub constraint: Option<crate::ConstraintStats>,
}

impl SampledBench {
    /// Mean tokens per second.
    pub fn mean(&self) -> f64 {
        self.samples.iter().sum::<f64>() / self.samples.len().max(1) as f64
    }
}

impl Engine {
    /// Generate from `prompt` with sampling, `seqs` sequences at a time in
    /// one batched step, until each repetition has produced `n_gen` tokens
    /// per sequence; a generation that ends sooner (a grammar completes, an
    /// end token) is started over from the cached prompt. With `grammar`
    /// every generation is held to it, so the difference to a run without
    /// is what constrained decoding costs.
    pub fn bench_sampled(
        &self,
        prompt: &[u32],
        n_gen: usize,
        seqs: usize,
        grammar: Option<&crate::Grammar>,
        params: &crate::SamplingParams,
        reps: usize,
    ) -> Result<SampledBench, EngineError> {
        let seqs = seqs.max(1);
        if n_gen == 0 {
            return Err(EngineError::InvalidRequest(
                "a benchmark needs at least one token".into(),
            ));
        }
        let mut sessions: Vec<_> = (0..seqs).map(|_| self.session()).collect();
        let mut decoder = self.batch_decoder(seqs);
        let run = SampledRun {
            engine: self,
            prompt,
            grammar,
            params,
            opts: GenerateOptions {
                max_tokens: n_gen,
                stop: Vec::new(),
                stop_on_eog: true,
                render_special: false,
                speculation: None,
            },
        };
        let mut total = crate::ConstraintStats::default();
        let mut tokens = 0u64;
        let mut samples = Vec::with_capacity(reps);
        // One untimed warm-up repetition, then `reps` timed ones.
        for rep in 0..=reps.max(1) {
            let timed = rep > 0;
            let stats = timed.then_some(&mut total);
            let (produced, time) =
                run.repetition(&mut sessions, &mut decoder, rep, n_gen, stats)?;
            if timed {
                tokens += produced as u64;
                samples.push(produced as f64 / time.as_secs_f64().max(1e-9));
            }
        }
        Ok(SampledBench {
            seqs,
            samples,
            tokens,
            constraint: grammar.map(|_| total),
        })
    }
}

/// What every generation of [`Engine::bench_sampled`] starts from.
struct SampledRun<'a> {
    engine: &'a Engine,
    prompt: &'a [u32],
    grammar: Option<&'a crate::Grammar>,
    params: &'a crate::SamplingParams,
    opts: GenerateOptions,
}

impl SampledRun<'_> {
    /// Begin sequence `i`'s generation on `session`, prefilled, with its
    /// own sampler (the seed moved by `i` and `k`, so no two generations
    /// sample alike) and, with a grammar, its own constraint.
    fn start(
        &self,
        session: &mut Session,
        i: usize,
        k: u64,
    ) -> Result<(Decoding, Sampler), EngineError> {
        let sampler = Sampler::new(crate::SamplingParams {
            seed: self.params.seed.wrapping_add(i as u64 * 7919 + k),
            ..self.params.clone()
        });
        let request = crate::GenerationRequest {
            constraint: self
                .grammar
                .map(|g| self.engine.constraint(g))
                .transpose()?,
            ..crate::GenerationRequest::new(self.prompt, &self.opts)
        };
        let mut d = session.begin(request, &sampler)?;
        session.prefill(&mut d, usize::MAX)?;
        Ok((d, sampler))
    }

    /// Repetition `rep`: decode on every session until `n_gen` tokens per
    /// session have been produced, restarting each generation that ends.
    /// The tokens produced and the time the decode steps took; each
    /// generation's constraint costs are added to `stats` when given.
    fn repetition(
        &self,
        sessions: &mut [Session],
        decoder: &mut BatchDecoder,
        rep: usize,
        n_gen: usize,
        mut stats: Option<&mut crate::ConstraintStats>,
    ) -> Result<(usize, Duration), EngineError> {
        let seqs = sessions.len();
        let mut live: Vec<(Decoding, Sampler)> = Vec::with_capacity(seqs);
        for (i, s) in sessions.iter_mut().enumerate() {
            live.push(self.start(s, i, rep as u64 * 1000)?);
        }
        let mut produced = 0usize;
        let mut restarts = 0u64;
        let mut time = Duration::ZERO;
        while produced < n_gen * seqs {
            let before: usize = live.iter().map(|(d, _)| d.ids().len()).sum();
            time += timed_step(decoder, sessions, &mut live)?;
            let after: usize = live.iter().map(|(d, _)| d.ids().len()).sum();
            produced += after - before;
            for (i, s) in sessions.iter_mut().enumerate() {
                if live[i].0.is_done() {
                    if let Some(total) = stats.as_deref_mut() {
                        if let Some(c) = live[i].0.constraint_stats() {
                            add_stats(total, &c);
                        }
                    }
                    restarts += 1;
                    live[i] = self.start(s, i, rep as u64 * 1000 + restarts)?;
                }
            }
        }
        if let Some(total) = stats {
            for (d, _) in &live {
                if let Some(c) = d.constraint_stats() {
                    add_stats(total, &c);
                }
            }
        }
        Ok((produced, time))
    }
}

/// One batched decode step of every live generation, timed; the first
/// error any of them met.
fn timed_step(
    decoder: &mut BatchDecoder,
    sessions: &mut [Session],
    live: &mut [(Decoding, Sampler)],
) -> Result<Duration, EngineError> {
    let mut items: Vec<BatchItem<'_>> = sessions
        .iter_mut()
        .zip(live.iter_mut())
        .map(|(session, (decoding, sampler))| BatchItem {
            session,
            decoding,
            sampler,
        })
        .collect();
    let mut first_error = None;
    let t0 = Instant::now();
    decoder.step(&mut items, |_, step| {
        if let Err(e) = step {
            first_error.get_or_insert(e);
        }
    });
    let time = t0.elapsed();
    match first_error {
        Some(e) => Err(e),
        None => Ok(time),
    }
}

fn add_stats(total: &mut crate::ConstraintStats, c: &crate::ConstraintStats) {
    total.tokens += c.tokens;
    total.masks += c.masks;
    total.mask_time += c.mask_time;
    total.check_time += c.check_time;
}

mod spec;
pub use spec::{spec_mean, SpecBench};
