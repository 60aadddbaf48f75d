//! Turning logits into the next token, in llama.cpp's order: logit bias,
//! repetition penalties, DRY, top-nσ, top-k, top-p, min-p, XTC,
//! temperature and a seeded draw.

mod dry;

pub use dry::{Dry, SequenceBreakers, DEFAULT_SEQUENCE_BREAKERS, MAX_BREAKERS, MAX_BREAKER_BYTES};

/// Sampling settings. `temperature <= 0` means greedy.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingParams {
    /// Softmax temperature; 0 or below picks the most likely token.
    pub temperature: f32,
    /// Keep only the `top_k` most likely tokens (0 = off).
    pub top_k: usize,
    /// Keep the smallest set whose probability reaches `top_p` (1 = off).
    pub top_p: f32,
    /// Drop tokens less likely than `min_p` times the most likely (0 = off).
    pub min_p: f32,
    /// Divide positive (multiply negative) logits of recent tokens (1 = off).
    pub repeat_penalty: f32,
    /// How many recent tokens the penalties look at.
    pub repeat_last_n: usize,
    /// OpenAI-style: subtract `count * frequency_penalty` from a seen token.
    pub frequency_penalty: f32,
    /// OpenAI-style: subtract `presence_penalty` from any seen token.
    pub presence_penalty: f32,
    /// Seed for the draw; the same seed gives the same output.
    pub seed: u64,
    /// Added to the logit of a token before anything else (OpenAI's
    /// `logit_bias`: -100 bans a token, 100 all but forces it).
    pub logit_bias: Vec<(u32, f32)>,
    /// DRY, the penalty on extending a repeated sequence (off by default).
    pub dry: Dry,
    /// XTC ("exclude top choices"): with this probability per token, every
    /// token at least `xtc_threshold` likely but the least likely of them
    /// is removed (0 = off).
    pub xtc_probability: f32,
    /// XTC's probability threshold (above 0.5 = off).
    pub xtc_threshold: f32,
    /// Top-nσ: drop tokens whose logit is more than this many standard
    /// deviations (of all logits) below the best (0 or below = off).
    pub top_n_sigma: f32,
}

impl Default for SamplingParams {
    fn default() -> Self {
        Self {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
            frequency_penalty: 0.0,
            presence_penalty: 0.0,
            seed: 0,
            logit_bias: Vec::new(),
            dry: Dry::default(),
            xtc_probability: 0.0,
            xtc_threshold: 0.1,
            top_n_sigma: -1.0,
        }
    }
}

impl SamplingParams {
    /// Greedy decoding: always the most likely token.
    pub fn greedy() -> Self {
        Self {
            temperature: 0.0,
            ..Self::default()
        }
    }

    /// Check the settings, naming the first bad one.
    pub fn validate(&self) -> Result<(), String> {
        let finite = |v: f32, name: &str| {
            if v.is_finite() {
                Ok(())
            } else {
                Err(format!("{name} must be a finite number"))
            }
        };
        finite(self.temperature, "temperature")?;
        finite(self.top_p, "top_p")?;
        finite(self.min_p, "min_p")?;
        finite(self.repeat_penalty, "repeat_penalty")?;
        finite(self.frequency_penalty, "frequency_penalty")?;
        finite(self.presence_penalty, "presence_penalty")?;
        finite(self.dry.multiplier, "dry_multiplier")?;
        finite(self.dry.base, "dry_base")?;
        finite(self.xtc_probability, "xtc_probability")?;
        finite(self.xtc_threshold, "xtc_threshold")?;
        finite(self.top_n_sigma, "top_n_sigma")?;
        if self.dry.multiplier < 0.0 {
            return Err("dry_multiplier must not be negative".into());
        }
        if self.dry.sequence_breakers.len() > MAX_BREAKERS {
            return Err(format!(
                "dry_sequence_breakers holds {} strings; at most {MAX_BREAKERS} are taken",
                self.dry.sequence_breakers.len()
            ));
        }
        if !(0.0..=1.0).contains(&self.xtc_probability) {
            return Err("xtc_probability must be between 0 and 1".into());
        }
        if self.temperature < 0.0 {
            return Err("temperature must not be negative".into());
        }
        if !(0.0..=1.0).contains(&self.top_p) {
            return Err("top_p must be between 0 and 1".into());
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return Err("min_p must be between 0 and 1".into());
        }
        if self.repeat_penalty <= 0.0 {
            return Err("repeat_penalty must be positive".into());
        }
        if let Some((id, b)) = self
            .logit_bias
            .iter()
            .find(|(_, b)| !(-100.0..=100.0).contains(b))
        {
            return Err(format!(
                "logit_bias of token {id} is {b}; biases go from -100 to 100"
            ));
        }
        Ok(())
    }
}

/// A small, fast, seedable generator (xoshiro256**), written out so that a
/// seed gives the same tokens whatever crate versions are in the build.
#[derive(Debug, Clone)]
pub struct Rng {
    s: [u64; 4],
}

impl Rng {
    /// A generator whose state is expanded from `seed` with SplitMix64.
    pub fn new(seed: u64) -> Self {
        let mut z = seed;
        let mut next = || {
            z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut x = z;
            x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            x ^ (x >> 31)
        };
        Self {
            s: [next(), next(), next(), next()],
        }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let result = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        result
    }

    /// A uniform draw in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The index of the largest value; ties go to the lower index, as llama.cpp's
/// greedy sampler does.
pub fn argmax(logits: &[f32]) -> usize {
    // Chunk by chunk: a chunk's maximum is a branch-free reduction the
    // compiler vectorizes, and only a chunk that beats the best so far is
    // searched for its first maximum. Element by element, a 262144-entry
    // vocabulary took about as long as a decode step's serial work.
    let (mut best, mut best_v) = (0, f32::NEG_INFINITY);
    for (c, chunk) in logits.chunks(SCAN_CHUNK).enumerate() {
        // NaN never wins a `>`, as in the one-element loop this replaces.
        let top = chunk
            .iter()
            .fold(f32::NEG_INFINITY, |m, &v| if v > m { v } else { m });
        if top > best_v {
            if let Some(j) = chunk.iter().position(|&v| v == top) {
                best = c * SCAN_CHUNK + j;
                best_v = top;
            }
        }
    }
    best
}

/// Logits per chunk of the vectorized scans in [`argmax`] and [`top_k_sorted`].
const SCAN_CHUNK: usize = 64;

/// Samples tokens with one set of parameters; keeps its own buffers so a
/// generation loop allocates nothing after the first token.
#[derive(Debug, Clone)]
pub struct Sampler {
    params: SamplingParams,
    rng: Rng,
    /// XTC's own draws, so that turning it on leaves the token draws'
    /// sequence as it was (llama.cpp also gives XTC its own generator).
    xtc_rng: Rng,
    candidates: Vec<(u32, f32)>,
    probs: Vec<f64>,
    counts: std::collections::HashMap<u32, u32>,
    dry: dry::Scratch,
}

impl Sampler {
    /// A sampler seeded from `params.seed`.
    pub fn new(params: SamplingParams) -> Self {
        Self {
            rng: Rng::new(params.seed),
            xtc_rng: Rng::new(params.seed ^ XTC_SEED),
            params,
            candidates: Vec::new(),
            probs: Vec::new(),
            counts: std::collections::HashMap::new(),
            dry: dry::Scratch::default(),
        }
    }

    /// The parameters.
    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// Pick the next token from `logits`, given the tokens so far (for the
    /// penalties). `logits` is modified by the penalties.
    pub fn sample(&mut self, logits: &mut [f32], history: &[u32]) -> u32 {
        self.prepare(logits, history);
        self.pick(logits)
    }

    /// The first half of [`Sampler::sample`]: add the biases and apply the
    /// penalties and DRY to `logits`, in place.
    pub fn prepare(&mut self, logits: &mut [f32], history: &[u32]) {
        for &(id, bias) in &self.params.logit_bias {
            if let Some(l) = logits.get_mut(id as usize) {
                *l += bias;
            }
        }
        self.apply_penalties(logits, history);
        dry::apply(&self.params.dry, logits, history, &mut self.dry);
    }

    /// The second half of [`Sampler::sample`]: draw from prepared logits,
    /// leaving them as they are, so a constraint can mask them and draw
    /// again when the first draw is not allowed.
    pub fn pick(&mut self, logits: &[f32]) -> u32 {
        let p = &self.params;
        let xtc = p.xtc_probability > 0.0 && p.xtc_threshold <= 0.5;
        if p.top_k == 1 || (p.temperature <= 0.0 && !xtc) {
            return argmax(logits) as u32;
        }
        let c = &mut self.candidates;
        let by_logit = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        if p.top_k > 0 && p.top_k < logits.len() {
            top_k_sorted(logits, p.top_k, c);
        } else {
            c.clear();
            c.extend(logits.iter().enumerate().map(|(i, &l)| (i as u32, l)));
            c.retain(|(_, l)| l.is_finite());
            c.sort_unstable_by(by_logit);
        }
        if p.top_n_sigma > 0.0 && logits.len() > 1 {
            let floor = sigma_floor(logits, p.top_n_sigma);
            c.retain(|&(_, l)| l >= floor);
        }
        if c.is_empty() {
            return argmax(logits) as u32;
        }
        // Probabilities at temperature 1 decide the truncation, as in
        // llama.cpp's default chain (top-k, top-p, min-p, then temperature).
        let max = c[0].1;
        let probs = &mut self.probs;
        probs.clear();
        probs.extend(c.iter().map(|&(_, l)| ((l - max) as f64).exp()));
        let total: f64 = probs.iter().sum();
        probs.iter_mut().for_each(|v| *v /= total);
        let mut keep = c.len();
        if p.top_p < 1.0 {
            let mut acc = 0.0;
            for (i, &pr) in probs.iter().enumerate() {
                acc += pr;
                if acc >= p.top_p as f64 {
                    keep = i + 1;
                    break;
                }
            }
        }
        if p.min_p > 0.0 {
            let floor = probs[0] * p.min_p as f64;
            keep = keep.min(probs.iter().take_while(|&&pr| pr >= floor).count().max(1));
        }
        c.truncate(keep.max(1));
        if xtc && c.len() >= 2 && self.xtc_rng.next_f64() as f32 <= p.xtc_probability {
            exclude_top_choices(c, p.xtc_threshold);
        }
        let t = p.temperature;
        if t <= 0.0 {
            return c[0].0;
        }
        let max = c[0].1;
        probs.clear();
        probs.extend(c.iter().map(|&(_, l)| (((l - max) / t) as f64).exp()));
        let sum: f64 = probs.iter().sum();
        let mut r = self.rng.next_f64() * sum;
        for (i, w) in probs.iter().enumerate() {
            r -= w;
            if r < 0.0 {
                return c[i].0;
            }
        }
        c[c.len() - 1].0
    }

    fn apply_penalties(&mut self, logits: &mut [f32], history: &[u32]) {
        let p = &self.params;
        if p.repeat_penalty == 1.0 && p.frequency_penalty == 0.0 && p.presence_penalty == 0.0 {
            return;
        }
        let recent = &history[history.len().saturating_sub(p.repeat_last_n)..];
        self.counts.clear();
        for &t in recent {
            *self.counts.entry(t).or_insert(0) += 1;
        }
        for (&t, &n) in &self.counts {
            let Some(l) = logits.get_mut(t as usize) else {
                continue;
            };
            if p.repeat_penalty != 1.0 {
                *l = if *l > 0.0 {
                    *l / p.repeat_penalty
                } else {
                    *l * p.repeat_penalty
                };
            }
            *l -= n as f32 * p.frequency_penalty + p.presence_penalty;
        }
    }
}

/// Seeds XTC's generator apart from the token draws'.
const XTC_SEED: u64 = 0x5854_435f_5854_4321;

/// Top-nσ's floor: the best logit less `n` standard deviations of all
/// finite ones, summed in order in f32 as llama.cpp sums them (its squares
/// in double), so the same tokens fall on each side.
fn sigma_floor(logits: &[f32], n: f32) -> f32 {
    let (mut max, mut sum, mut count) = (logits[0], 0.0f32, 0usize);
    for &l in logits.iter().filter(|&&l| l != f32::NEG_INFINITY) {
        max = max.max(l);
        sum += l;
        count += 1;
    }
    let mean = if count > 0 { sum / count as f32 } else { 0.0 };
    let mut acc = 0.0f32;
    for &l in logits.iter().filter(|&&l| l != f32::NEG_INFINITY) {
        acc = (f64::from(acc) + f64::from(l - mean).powi(2)) as f32;
    }
    let std = if count > 0 {
        (acc / count as f32).sqrt()
    } else {
        0.0
    };
    max - n * std
}

/// XTC on candidates sorted best first: of the leading run at least
/// `threshold` likely (probabilities renormalized over the candidates, in
/// f32 as llama.cpp computes them), all but the last are removed.
fn exclude_top_choices(c: &mut Vec<(u32, f32)>, threshold: f32) {
    let max = c[0].1;
    let weight = |&(_, l): &(u32, f32)| (l - max).exp();
    let sum = c.iter().map(weight).fold(0.0f32, |s, w| s + w);
    let above = c
        .iter()
        .take_while(|&e| weight(e) / sum >= threshold)
        .count();
    if above > 1 {
        c.drain(..above - 1);
    }
}

/// The `k` best finite logits as `(id, logit)`, best first, ties to the
/// lower id: the same list as sorting every candidate, in one pass that
/// keeps a sorted list of `k`. A vocabulary of 262144 made the full
/// selection a visible share of a batched decode step, which samples every
/// sequence in turn.
fn top_k_sorted(logits: &[f32], k: usize, out: &mut Vec<(u32, f32)>) {
    out.clear();
    if k == 0 {
        return;
    }
    for (c, chunk) in logits.chunks(SCAN_CHUNK).enumerate() {
        // Once the list is full, a chunk with nothing at or above its last
        // entry changes nothing: one vectorized compare skips it (`>=`, so
        // that a +0.0 against a kept -0.0 still gets the exact comparison
        // below; NaN compares false and is skipped either way).
        if out.len() == k {
            let floor = out[k - 1].1;
            if !chunk.iter().fold(false, |any, &l| any | (l >= floor)) {
                continue;
            }
        }
        for (j, &l) in chunk.iter().enumerate() {
            if !l.is_finite() {
                continue;
            }
            if out.len() == k {
                // Ids come in increasing order, so an equal logit loses to the
                // one already kept.
                if l.total_cmp(&out[k - 1].1).is_le() {
                    continue;
                }
                out.pop();
            }
            let at = out.partition_point(|&(_, kept)| kept.total_cmp(&l).is_ge());
            out.insert(at, ((c * SCAN_CHUNK + j) as u32, l));
        }
    }
}

#[cfg(test)]
mod tests;
