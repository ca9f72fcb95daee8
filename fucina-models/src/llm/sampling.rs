//! Next-token sampling: logit bias, repetition / presence / frequency penalties, temperature,
//! top-k, top-p, min-p, then a draw from a counter-based RNG (Philox), so a seed fixes the
//! whole run. A [`LogitProcessor`] (a grammar: [`super::grammar`]) masks the logits last,
//! before temperature and truncation.

use fucina::prelude::FucinaError;
use fucina::rng::{u32_to_open01, Philox};

/// The seam for constrained decoding: something that sees the logits after the bias and
/// the penalties, before temperature and truncation, and follows the chosen tokens.
pub trait LogitProcessor: Send {
    /// Adjusts the logits for the next token (a grammar sets the forbidden ones to -inf).
    fn process(&mut self, logits: &mut [f32]) -> fucina::prelude::Result<()>;
    /// Records the token that was picked.
    fn accept(&mut self, token: u32) -> fucina::prelude::Result<()>;
    /// Whether nothing more may follow (the grammar is complete and cannot go on).
    fn is_done(&self) -> bool;
    /// How many of `tokens`, in order from the current state, could be accepted, without
    /// accepting any: speculative drafts are cut there, so no step verifies a draft the
    /// processor would refuse. The default lets every token through (verification still
    /// applies [`LogitProcessor::process`] to each row).
    fn valid_prefix(&mut self, tokens: &[u32]) -> fucina::prelude::Result<usize> {
        Ok(tokens.len())
    }
}

/// The longest look-back of the repetition penalty.
pub const MAX_REPEAT_LAST_N: usize = 1 << 20;

/// Sampling settings; `temperature == 0` is greedy.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingParams {
    /// Softmax temperature; 0 picks the most likely token.
    pub temperature: f32,
    /// Keep only the `k` most likely tokens (0: all).
    pub top_k: usize,
    /// Keep the smallest set of tokens whose probability reaches `p` (1: all).
    pub top_p: f32,
    /// Drop tokens less likely than `min_p` times the most likely one (0: none).
    pub min_p: f32,
    /// Divide positive logits (multiply negative ones) of tokens already seen by this (1: off).
    pub repetition_penalty: f32,
    /// How many recent tokens the repetition, presence and frequency penalties look at.
    pub repeat_last_n: usize,
    /// Subtracted once from the logit of every token seen in the window (OpenAI's
    /// `presence_penalty`, -2..2; 0: off).
    pub presence_penalty: f32,
    /// Subtracted from a token's logit once per occurrence in the window (OpenAI's
    /// `frequency_penalty`, -2..2; 0: off).
    pub frequency_penalty: f32,
    /// Added to the logits of these tokens before anything else (OpenAI's `logit_bias`,
    /// -100..100 each; -100 in effect bans a token, +100 forces it).
    pub logit_bias: Vec<(u32, f32)>,
    /// RNG seed.
    pub seed: u64,
}

/// Most entries of a logit bias.
pub const MAX_LOGIT_BIAS: usize = 1024;

impl Default for SamplingParams {
    fn default() -> Self {
        SamplingParams {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            repetition_penalty: 1.0,
            repeat_last_n: 64,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            logit_bias: Vec::new(),
            seed: 0,
        }
    }
}

impl SamplingParams {
    /// Checks the ranges, with an error naming the bad setting.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.temperature >= 0.0 && self.temperature.is_finite()) {
            return Err(format!("temperature must be >= 0, got {}", self.temperature));
        }
        if self.repeat_last_n > MAX_REPEAT_LAST_N {
            return Err(format!("repeat_last_n must be at most {MAX_REPEAT_LAST_N}, got {}", self.repeat_last_n));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(format!("top_p must be in (0, 1], got {}", self.top_p));
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return Err(format!("min_p must be in [0, 1], got {}", self.min_p));
        }
        if !(self.repetition_penalty > 0.0 && self.repetition_penalty.is_finite()) {
            return Err(format!("repetition_penalty must be > 0, got {}", self.repetition_penalty));
        }
        for (name, v) in [("presence_penalty", self.presence_penalty), ("frequency_penalty", self.frequency_penalty)] {
            if !(-2.0..=2.0).contains(&v) {
                return Err(format!("{name} must be in [-2, 2], got {v}"));
            }
        }
        if self.logit_bias.len() > MAX_LOGIT_BIAS {
            return Err(format!("logit_bias has {} entries; at most {MAX_LOGIT_BIAS}", self.logit_bias.len()));
        }
        if let Some((t, b)) = self.logit_bias.iter().find(|(_, b)| !(-100.0..=100.0).contains(b)) {
            return Err(format!("logit_bias for token {t} must be in [-100, 100], got {b}"));
        }
        Ok(())
    }
}

/// A fresh seed for a run that did not ask for one: the process's randomly keyed hasher
/// over the clock and a counter, so two requests without a `seed` sample differently
/// (as llama.cpp's default seed does), while an explicit seed still fixes the run.
pub fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
    h.finish()
}

/// A sampler: the settings, the RNG position (one Philox block per draw) and an optional
/// logit processor.
pub struct Sampler {
    params: SamplingParams,
    rng: Philox,
    draws: u64,
    processor: Option<Box<dyn LogitProcessor>>,
}

impl std::fmt::Debug for Sampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sampler")
            .field("params", &self.params)
            .field("draws", &self.draws)
            .field("processor", &self.processor.is_some())
            .finish()
    }
}

impl Sampler {
    /// A sampler at the start of its random stream.
    pub fn new(params: SamplingParams) -> Sampler {
        Sampler { rng: Philox::new(params.seed), params, draws: 0, processor: None }
    }

    /// The same sampler with a logit processor (a grammar) applied to every draw of
    /// [`Sampler::next`].
    #[must_use]
    pub fn with_processor(mut self, p: Box<dyn LogitProcessor>) -> Sampler {
        self.processor = Some(p);
        self
    }

    /// Sets or clears the logit processor (a new answer gets a fresh grammar state).
    pub fn set_processor(&mut self, p: Option<Box<dyn LogitProcessor>>) {
        self.processor = p;
    }

    /// Whether a logit processor is set.
    pub fn has_processor(&self) -> bool {
        self.processor.is_some()
    }

    /// Whether the logit processor says nothing more may follow.
    pub fn is_done(&self) -> bool {
        self.processor.as_ref().is_some_and(|p| p.is_done())
    }

    /// Picks the next token like [`Sampler::sample`], with the logit processor (if any)
    /// applied after the bias and penalties and told the token that was picked.
    pub fn next(&mut self, logits: &[f32], history: &[u32]) -> fucina::prelude::Result<u32> {
        let mut l = self.adjusted(logits, history);
        let Some(mut p) = self.processor.take() else {
            return Ok(self.draw(&l));
        };
        let picked = p.process(&mut l).and_then(|()| {
            let t = self.draw(&l);
            if l[t as usize] == f32::NEG_INFINITY || l[t as usize].is_nan() {
                return Err(FucinaError::InvalidArgument {
                    op: "sampling",
                    msg: "every token the logit processor allows has a NaN logit".into(),
                });
            }
            p.accept(t).map(|()| t)
        });
        self.processor = Some(p);
        picked
    }

    /// The settings.
    pub fn params(&self) -> &SamplingParams {
        &self.params
    }

    /// Picks the next token from `logits` given the tokens so far (for the penalties).
    /// Logit-bias entries for ids outside the vocabulary are ignored here (the server
    /// refuses them before a request is queued).
    pub fn sample(&mut self, logits: &[f32], history: &[u32]) -> u32 {
        let l = self.adjusted(logits, history);
        self.draw(&l)
    }

    /// The logits after the bias and the penalties.
    fn adjusted(&self, logits: &[f32], history: &[u32]) -> Vec<f32> {
        let p = &self.params;
        let mut l = logits.to_vec();
        for &(t, b) in &p.logit_bias {
            if let Some(x) = l.get_mut(t as usize) {
                *x += b;
            }
        }
        if p.presence_penalty != 0.0 || p.frequency_penalty != 0.0 {
            let mut count: std::collections::HashMap<u32, u32> = std::collections::HashMap::new();
            for &t in history.iter().rev().take(p.repeat_last_n) {
                *count.entry(t).or_default() += 1;
            }
            for (t, c) in count {
                if let Some(x) = l.get_mut(t as usize) {
                    *x -= p.presence_penalty + p.frequency_penalty * c as f32;
                }
            }
        }
        if p.repetition_penalty != 1.0 {
            let mut seen = vec![false; l.len()];
            for &t in history.iter().rev().take(p.repeat_last_n) {
                if let Some(s) = seen.get_mut(t as usize) {
                    if !*s {
                        *s = true;
                        let x = &mut l[t as usize];
                        *x = if *x > 0.0 { *x / p.repetition_penalty } else { *x * p.repetition_penalty };
                    }
                }
            }
        }
        l
    }

    /// The candidates a draw picks from and their probabilities (summing to 1): temperature,
    /// top-k, min-p and top-p applied to adjusted logits (-inf entries are dropped unless all
    /// are); most likely first when min-p or top-p cut them, in no set order otherwise.
    /// Temperature 0 is the argmax with probability 1.
    fn distribution(&self, l: &[f32]) -> (Vec<u32>, Vec<f32>) {
        let p = &self.params;
        if p.temperature == 0.0 {
            return (vec![argmax(l)], vec![1.0]);
        }
        // Most likely first, lower id first on ties.
        let order = |a: &u32, b: &u32| l[*b as usize].total_cmp(&l[*a as usize]).then(a.cmp(b));
        let mut idx: Vec<u32> = (0..l.len() as u32).filter(|&i| l[i as usize] > f32::NEG_INFINITY).collect();
        if idx.is_empty() {
            return (vec![argmax(l)], vec![1.0]);
        }
        if p.top_k > 0 && p.top_k < idx.len() {
            idx.select_nth_unstable_by(p.top_k - 1, order);
            idx.truncate(p.top_k);
        }
        let top = idx.iter().map(|&i| l[i as usize]).fold(f32::NEG_INFINITY, f32::max);
        // Each candidate's weight exp((l - top) / T), computed once (by id).
        let mut w = vec![0.0f32; l.len()];
        for &i in &idx {
            w[i as usize] = ((l[i as usize] - top) / p.temperature).exp();
        }
        let weight = |i: u32| w[i as usize];
        // Only min-p and top-p need the candidates in order, and only as far as they keep:
        // without them the draw goes over the candidates as they are (no sort of the whole
        // vocabulary per token).
        if p.min_p > 0.0 || p.top_p < 1.0 {
            let total: f32 = idx.iter().map(|&i| weight(i)).sum();
            // min-p keeps a prefix of the order: the tokens at least min_p times the best.
            if p.min_p > 0.0 {
                idx.retain(|&i| weight(i) >= p.min_p);
            }
            // top-p: the shortest prefix whose share of `total` reaches top_p, found by
            // selecting ever larger prefixes until one holds enough.
            let need = p.top_p * total;
            let n = idx.len();
            let mut m = n.min(64);
            loop {
                if m < n {
                    idx.select_nth_unstable_by(m - 1, order);
                }
                if m == n || idx[..m].iter().map(|&i| weight(i)).sum::<f32>() >= need {
                    idx.truncate(m);
                    idx.sort_by(order);
                    break;
                }
                m = (m * 16).min(n);
            }
            let mut acc = 0.0;
            for (k, &i) in idx.iter().enumerate() {
                acc += weight(i);
                if acc >= need {
                    idx.truncate(k + 1);
                    break;
                }
            }
        }
        let mut probs: Vec<f32> = idx.iter().map(|&i| weight(i)).collect();
        let mass: f32 = probs.iter().sum();
        probs.iter_mut().for_each(|x| *x /= mass);
        (idx, probs)
    }

    /// The next uniform number in (0, 1) of the run's stream.
    fn uniform(&mut self) -> f32 {
        let [r, ..] = self.rng.at(0, self.draws);
        self.draws += 1;
        u32_to_open01(r)
    }

    /// Picks from `idx` by `probs` (whose sum is `mass`), with one uniform number.
    fn pick(&mut self, idx: &[u32], probs: &[f32], mass: f32) -> u32 {
        let u = self.uniform() * mass;
        let mut acc = 0.0;
        for (i, x) in probs.iter().enumerate() {
            acc += x;
            if u < acc {
                return idx[i];
            }
        }
        idx[idx.len() - 1]
    }

    /// One draw from adjusted logits.
    fn draw(&mut self, l: &[f32]) -> u32 {
        if self.params.temperature == 0.0 {
            return argmax(l);
        }
        let (idx, probs) = self.distribution(l);
        self.pick(&idx, &probs, 1.0)
    }

    /// Verifies a drafted token (speculative sampling with a draft that proposes `draft`
    /// with certainty): keeps it with the probability p(`draft`) the sampler gives it here,
    /// otherwise draws from p with `draft` taken out. The token that comes out has exactly
    /// the distribution [`Sampler::next`] draws from, so drafting never changes what is
    /// sampled, only how many steps it takes. The logit processor (a grammar), if any,
    /// masks the row first (a draft it forbids has probability 0) and is told the token that
    /// comes out, as [`Sampler::next`] tells it. Returns the token and whether it is the
    /// draft. (Greedy: the draft is kept if and only if it is the argmax.)
    ///
    /// ```
    /// use fucina_models::llm::sampling::{Sampler, SamplingParams};
    /// let mut s = Sampler::new(SamplingParams::default());
    /// assert_eq!(s.verify_draft(&[0.0, 3.0, 1.0], &[], 1)?, (1, true));
    /// assert_eq!(s.verify_draft(&[0.0, 3.0, 1.0], &[], 2)?, (1, false));
    /// # Ok::<(), fucina::prelude::FucinaError>(())
    /// ```
    pub fn verify_draft(
        &mut self,
        logits: &[f32],
        history: &[u32],
        draft: u32,
    ) -> fucina::prelude::Result<(u32, bool)> {
        let mut l = self.adjusted(logits, history);
        let Some(mut p) = self.processor.take() else {
            return Ok(self.verify_adjusted(&l, draft));
        };
        let verified = p.process(&mut l).and_then(|()| {
            let (t, keep) = self.verify_adjusted(&l, draft);
            if l[t as usize] == f32::NEG_INFINITY || l[t as usize].is_nan() {
                return Err(FucinaError::InvalidArgument {
                    op: "sampling",
                    msg: "every token the logit processor allows has a NaN logit".into(),
                });
            }
            p.accept(t).map(|()| (t, keep))
        });
        self.processor = Some(p);
        verified
    }

    /// How many of `drafts` the logit processor (if any) could accept in order from its
    /// current state, without accepting them.
    pub fn valid_drafts(&mut self, drafts: &[u32]) -> fucina::prelude::Result<usize> {
        match self.processor.as_mut() {
            Some(p) => Ok(p.valid_prefix(drafts)?.min(drafts.len())),
            None => Ok(drafts.len()),
        }
    }

    /// [`Sampler::verify_draft`] on logits already adjusted (and masked).
    fn verify_adjusted(&mut self, l: &[f32], draft: u32) -> (u32, bool) {
        let (idx, probs) = self.distribution(l);
        if self.params.temperature == 0.0 {
            return (idx[0], idx[0] == draft);
        }
        let p_draft = idx.iter().position(|&t| t == draft).map_or(0.0, |i| probs[i]);
        if p_draft > 0.0 && self.uniform() < p_draft {
            return (draft, true);
        }
        // The residual: p without the draft, renormalized.
        let (rest_idx, rest_p): (Vec<u32>, Vec<f32>) = idx.iter().zip(&probs).filter(|(&t, _)| t != draft).unzip();
        if rest_idx.is_empty() {
            return (draft, true);
        }
        let mass = rest_p.iter().sum();
        (self.pick(&rest_idx, &rest_p, mass), false)
    }
}

/// The log-probability of `chosen` under softmax(`logits`) and the `top` most likely ids
/// with theirs (most likely first, lower id first on ties): the model's own distribution,
/// before any bias, penalty, grammar or temperature. Sums in f64.
///
/// ```
/// use fucina_models::llm::sampling::token_logprobs;
/// let (lp, top) = token_logprobs(&[0.0, 2f32.ln(), 0.0], 0, 2);
/// assert!((lp - 0.25f32.ln()).abs() < 1e-6);
/// assert_eq!(top[0].0, 1);
/// assert!((top[0].1 - 0.5f32.ln()).abs() < 1e-6);
/// assert_eq!(top[1].0, 0); // a tie with id 2: the lower id
/// ```
pub fn token_logprobs(logits: &[f32], chosen: u32, top: usize) -> (f32, Vec<(u32, f32)>) {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if !max.is_finite() {
        return (f32::NAN, Vec::new());
    }
    let sum: f64 = logits.iter().map(|&x| f64::from(x - max).exp()).sum();
    let lse = f64::from(max) + sum.ln();
    let lp = |t: u32| logits.get(t as usize).map_or(f32::NEG_INFINITY, |&x| (f64::from(x) - lse) as f32);
    let mut idx: Vec<u32> = (0..logits.len() as u32).collect();
    let order = |a: &u32, b: &u32| logits[*b as usize].total_cmp(&logits[*a as usize]).then(a.cmp(b));
    let top = top.min(idx.len());
    if top > 0 && top < idx.len() {
        idx.select_nth_unstable_by(top - 1, order);
    }
    idx.truncate(top);
    idx.sort_by(order);
    (lp(chosen), idx.into_iter().map(|t| (t, lp(t))).collect())
}

/// Index of the largest value (the first one on ties).
pub fn argmax(v: &[f32]) -> u32 {
    let mut best = 0;
    for (i, x) in v.iter().enumerate() {
        if *x > v[best] {
            best = i;
        }
    }
    best as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logit_bias_and_openai_penalties_move_the_logits_as_documented() {
        // Greedy picks token 0 (logit 3) until a bias or a penalty moves it.
        let logits = [3.0, 2.5, 1.0, 0.0];
        let greedy = |params: SamplingParams, history: &[u32]| Sampler::new(params).sample(&logits, history);
        assert_eq!(greedy(SamplingParams::default(), &[]), 0);
        let bias = |b: Vec<(u32, f32)>| SamplingParams { logit_bias: b, ..SamplingParams::default() };
        assert_eq!(greedy(bias(vec![(3, 100.0)]), &[]), 3);
        assert_eq!(greedy(bias(vec![(0, -100.0)]), &[]), 1);
        assert_eq!(greedy(bias(vec![(99, 100.0)]), &[]), 0, "ids outside the vocabulary are ignored");
        // Presence: 0.6 once for a seen token: 3 - 0.6 = 2.4 < 2.5.
        let presence = SamplingParams { presence_penalty: 0.6, ..SamplingParams::default() };
        assert_eq!(greedy(presence.clone(), &[0]), 1);
        assert_eq!(greedy(presence, &[2, 2, 2]), 0);
        // Frequency: 0.2 per occurrence: two occurrences (0.4) keep token 0, three (0.6) do not.
        let frequency = SamplingParams { frequency_penalty: 0.2, ..SamplingParams::default() };
        assert_eq!(greedy(frequency.clone(), &[0, 0]), 0);
        assert_eq!(greedy(frequency.clone(), &[0, 0, 0]), 1);
        // Only the last repeat_last_n tokens count.
        let window = SamplingParams { repeat_last_n: 2, ..frequency };
        assert_eq!(greedy(window, &[0, 1, 0, 0]), 0);
        // A negative presence penalty rewards repetition: 2.5 + 2 = 4.5 > 3.
        let reward = SamplingParams { presence_penalty: -2.0, ..SamplingParams::default() };
        assert_eq!(greedy(reward, &[1]), 1);
        // The ranges are OpenAI's.
        assert!(SamplingParams { presence_penalty: 2.5, ..SamplingParams::default() }.validate().is_err());
        assert!(SamplingParams { frequency_penalty: -3.0, ..SamplingParams::default() }.validate().is_err());
        assert!(bias(vec![(1, 101.0)]).validate().is_err());
        assert!(bias(vec![(1, f32::NAN)]).validate().is_err());
        assert!(bias((0..MAX_LOGIT_BIAS as u32 + 1).map(|t| (t, 1.0)).collect()).validate().is_err());
    }

    /// The truncations by sorting everything, as the specification of `distribution`.
    fn reference(l: &[f32], p: &SamplingParams) -> Vec<(u32, f32)> {
        let mut idx: Vec<u32> = (0..l.len() as u32).filter(|&i| l[i as usize] > f32::NEG_INFINITY).collect();
        idx.sort_by(|&a, &b| l[b as usize].total_cmp(&l[a as usize]).then(a.cmp(&b)));
        if p.top_k > 0 {
            idx.truncate(p.top_k);
        }
        let top = l[idx[0] as usize];
        let w: Vec<f64> =
            idx.iter().map(|&i| (f64::from(l[i as usize] - top) / f64::from(p.temperature)).exp()).collect();
        let total: f64 = w.iter().sum();
        let keep_min = w.iter().take_while(|&&x| x >= f64::from(p.min_p)).count();
        let mut acc = 0.0;
        let keep_p = w.iter().position(|x| {
            acc += x;
            acc >= f64::from(p.top_p) * total
        });
        let keep = keep_min.min(keep_p.map_or(w.len(), |k| k + 1)).max(1);
        let mass: f64 = w[..keep].iter().sum();
        idx[..keep].iter().zip(&w).map(|(&i, &x)| (i, (x / mass) as f32)).collect()
    }

    #[test]
    fn distribution_matches_the_full_sort() {
        let rng = Philox::new(3);
        for case in 0..60u64 {
            let n = [5usize, 70, 600, 3000][case as usize % 4];
            let l: Vec<f32> = (0..n as u64)
                .map(|j| {
                    let [a, b, ..] = rng.at(case, j);
                    // Some ties and some forbidden tokens.
                    if b % 17 == 0 {
                        f32::NEG_INFINITY
                    } else {
                        (u32_to_open01(a) * 12.0).round() / 2.0
                    }
                })
                .collect();
            let p = SamplingParams {
                temperature: [0.5, 1.0, 1.7][case as usize % 3],
                top_k: [0, 3, 50][case as usize % 5 % 3],
                top_p: [1.0, 0.9, 0.3][case as usize / 3 % 3],
                min_p: [0.0, 0.05, 0.5][case as usize / 9 % 3],
                ..SamplingParams::default()
            };
            let s = Sampler::new(p.clone());
            let (idx, probs) = s.distribution(&l);
            let mut got: Vec<(u32, f32)> = idx.into_iter().zip(probs).collect();
            let mut want = reference(&l, &p);
            got.sort_by_key(|x| x.0);
            want.sort_by_key(|x| x.0);
            assert_eq!(
                got.iter().map(|x| x.0).collect::<Vec<_>>(),
                want.iter().map(|x| x.0).collect::<Vec<_>>(),
                "case {case}: {p:?}"
            );
            for (g, w) in got.iter().zip(&want) {
                assert!((g.1 - w.1).abs() < 1e-5, "case {case}: token {}: {} vs {}", g.0, g.1, w.1);
            }
        }
    }

    #[test]
    fn verified_drafts_keep_the_sampling_distribution() {
        // For drafts inside and outside the candidate set, the token that comes out of
        // verify_draft is distributed as sample() draws: within 4 standard errors per token
        // over 40000 draws (a verification that always kept, or never kept, the draft fails).
        let logits = [2.0, 1.5, 1.0, 0.2, -1.0, -3.0];
        let params = SamplingParams { temperature: 0.9, top_k: 5, seed: 9, ..SamplingParams::default() };
        let n = 40000;
        let want = counts(params.clone(), &logits, n);
        for draft in [0u32, 2, 4, 5] {
            let mut s = Sampler::new(SamplingParams { seed: 10 + u64::from(draft), ..params.clone() });
            let mut got = vec![0usize; logits.len()];
            let mut kept = 0;
            for _ in 0..n {
                let (t, k) = s.verify_draft(&logits, &[], draft).unwrap();
                got[t as usize] += 1;
                kept += usize::from(k);
            }
            for (t, (&g, &w)) in got.iter().zip(&want).enumerate() {
                let p = w as f64 / n as f64;
                let se = (p * (1.0 - p) / n as f64).sqrt().max(1e-4);
                let dev = (g as f64 - w as f64).abs() / n as f64;
                assert!(dev < 4.0 * se * std::f64::consts::SQRT_2, "draft {draft}, token {t}: {g} vs {w}");
            }
            assert_eq!(kept, got[draft as usize], "draft {draft}: kept exactly when the draft came out");
        }
    }

    fn counts(params: SamplingParams, logits: &[f32], n: usize) -> Vec<usize> {
        let mut s = Sampler::new(params);
        let mut c = vec![0; logits.len()];
        for _ in 0..n {
            c[s.sample(logits, &[]) as usize] += 1;
        }
        c
    }

    #[test]
    fn greedy_and_filters() {
        let logits = [1.0f32, 3.0, 2.0, 0.5];
        assert_eq!(Sampler::new(SamplingParams::default()).sample(&logits, &[]), 1);
        // The repetition penalty can move the choice off a seen token.
        let rp = SamplingParams { repetition_penalty: 2.0, ..Default::default() };
        assert_eq!(Sampler::new(rp).sample(&logits, &[1]), 2);
        let t = SamplingParams { temperature: 1.0, seed: 7, ..Default::default() };
        // top-k 2 never picks outside {1, 2}.
        let c = counts(SamplingParams { top_k: 2, ..t.clone() }, &logits, 2000);
        assert_eq!(c[0] + c[3], 0);
        assert!(c[1] > c[2] && c[2] > 0, "{c:?}");
        // top-p small keeps only the best.
        let c = counts(SamplingParams { top_p: 0.1, ..t.clone() }, &logits, 200);
        assert_eq!(c[1], 200);
        // min-p 0.5 keeps tokens within a factor 2 of the best: exp(2-3) = 0.37 < 0.5.
        let c = counts(SamplingParams { min_p: 0.5, ..t.clone() }, &logits, 200);
        assert_eq!(c[1], 200);
        // Plain temperature 1 follows the softmax: p(1) = e^3 / sum = 0.629.
        let c = counts(t.clone(), &logits, 20000);
        let f = c[1] as f64 / 20000.0;
        assert!((f - 0.6285).abs() < 0.02, "{f}");
    }

    #[test]
    fn a_seed_fixes_the_stream() {
        let logits: Vec<f32> = (0..50).map(|i| (i as f32 * 0.37).sin()).collect();
        let p = SamplingParams { temperature: 0.8, seed: 42, ..Default::default() };
        let run = |p: SamplingParams| {
            let mut s = Sampler::new(p);
            (0..32).map(|_| s.sample(&logits, &[])).collect::<Vec<_>>()
        };
        assert_eq!(run(p.clone()), run(p.clone()));
        assert_ne!(run(p.clone()), run(SamplingParams { seed: 43, ..p }));
    }

    #[test]
    fn bad_settings_are_named() {
        let bad = SamplingParams { top_p: 0.0, ..Default::default() };
        assert!(bad.validate().unwrap_err().contains("top_p"));
        let bad = SamplingParams { temperature: -1.0, ..Default::default() };
        assert!(bad.validate().unwrap_err().contains("temperature"));
    }
}
