//! Choosing the next token from logits.
//!
//! The chain follows llama.cpp's default order: repetition penalty, top-k, top-p, min-p,
//! temperature, then a seeded draw. Temperature 0 means greedy. A grammar's [`TokenMask`]
//! (structured output) comes first: disallowed tokens get -inf, so no mode can pick them.

use crate::constraint::TokenMask;
use ferrolm_model::GreedyPick;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

#[derive(Clone, Debug)]
pub struct SamplerConfig {
    pub temperature: f32,
    /// 0 disables.
    pub top_k: usize,
    /// 1.0 disables.
    pub top_p: f32,
    /// 0.0 disables.
    pub min_p: f32,
    /// 1.0 disables.
    pub repeat_penalty: f32,
    /// How many recent tokens the repetition penalty looks at.
    pub repeat_last_n: usize,
    pub seed: u64,
}

impl Default for SamplerConfig {
    /// llama.cpp's defaults.
    fn default() -> Self {
        Self {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
            seed: 0xF0F0_1234,
        }
    }
}

impl SamplerConfig {
    pub fn greedy() -> Self {
        Self {
            temperature: 0.0,
            ..Self::default()
        }
    }
}

pub struct Sampler {
    cfg: SamplerConfig,
    rng: StdRng,
    history: Vec<u32>,
}

/// The first index of the largest value (NaNs passed over, unless the first is one: then 0),
/// as a walk keeping the best so far would find it. In two passes the compiler vectorizes,
/// the maximum over eight lanes, then the first index holding it: a server samples a
/// vocabulary's worth of logits for every sequence of every step.
pub fn argmax(logits: &[f32]) -> u32 {
    const LANES: usize = 8;
    let Some(&first) = logits.first() else {
        return 0;
    };
    if first.is_nan() {
        return 0;
    }
    // `if v > m { v } else { m }`: NaN never replaces, and ±0 keep the first seen, as the walk.
    let keep_greater = |m: f32, v: f32| if v > m { v } else { m };
    let mut lanes = [first; LANES];
    let chunks = logits.chunks_exact(LANES);
    let tail = chunks.remainder();
    for c in chunks {
        for (l, &v) in lanes.iter_mut().zip(c) {
            *l = keep_greater(*l, v);
        }
    }
    let max = tail
        .iter()
        .chain(&lanes)
        .fold(first, |m, &v| keep_greater(m, v));
    // The first index holding the maximum (-0 == +0: the first of either, as the walk).
    let chunk = logits
        .chunks(LANES)
        .position(|c| c.iter().fold(false, |hit, &v| hit | (v == max)))
        .expect("the maximum is one of the values");
    let at = logits[chunk * LANES..].iter().position(|&v| v == max);
    (chunk * LANES + at.expect("in this chunk")) as u32
}

/// A logit row's greedy choices ([`GreedyPick`]) on the host: what a runner that picks on its
/// device must return for the same row.
pub fn greedy_pick(row: &[f32], banned: &[u32]) -> GreedyPick {
    let best = argmax(row);
    // Lowering other ids to -inf leaves `best` the first largest (the NaN-first rule included:
    // a row starting with NaN picks 0 either way unless 0 itself is banned).
    let allowed = if banned.contains(&best) {
        let mut row = row.to_vec();
        for &b in banned {
            if let Some(l) = row.get_mut(b as usize) {
                *l = f32::NEG_INFINITY;
            }
        }
        argmax(&row)
    } else {
        best
    };
    GreedyPick { best, allowed }
}

impl Sampler {
    pub fn new(cfg: SamplerConfig) -> Self {
        let rng = StdRng::seed_from_u64(cfg.seed);
        Self {
            cfg,
            rng,
            history: Vec::new(),
        }
    }

    /// Records tokens (the prompt, say) for the repetition penalty without sampling.
    pub fn accept(&mut self, tokens: &[u32]) {
        self.history.extend_from_slice(tokens);
    }

    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        self.sample_masked(logits, None)
    }

    /// As [`Self::sample`], choosing only among the tokens `mask` allows.
    pub fn sample_masked(&mut self, logits: &[f32], mask: Option<&TokenMask>) -> u32 {
        self.sample_in_place(&mut logits.to_vec(), mask)
    }

    /// Whether this sampler's choice is the argmax of the logits as given (temperature 0, no
    /// repetition penalty): [`greedy_pick`]'s, then recorded with [`Self::accept`].
    pub fn plain_greedy(&self) -> bool {
        self.cfg.temperature <= 0.0 && self.cfg.repeat_penalty == 1.0
    }

    /// As [`Self::sample_masked`] without a copy: the repetition penalty and the mask are
    /// applied to `logits` itself, which the caller no longer needs as they were.
    pub fn sample_in_place(&mut self, logits: &mut [f32], mask: Option<&TokenMask>) -> u32 {
        let token = self.choose(logits, mask);
        self.history.push(token);
        token
    }

    fn choose(&mut self, logits: &mut [f32], mask: Option<&TokenMask>) -> u32 {
        self.apply_repeat_penalty(logits);
        if let Some(mask) = mask {
            mask.apply(logits);
        }
        if self.cfg.temperature <= 0.0 {
            return argmax(logits);
        }
        // Candidates sorted by logit, best first; masked-out tokens are no candidates.
        let mut cand: Vec<(u32, f32)> = logits
            .iter()
            .enumerate()
            .filter(|(_, &l)| mask.is_none() || l > f32::NEG_INFINITY)
            .map(|(i, &l)| (i as u32, l))
            .collect();
        if cand.is_empty() {
            // A mask that allows nothing (never from llguidance): fall back to the argmax.
            return argmax(logits);
        }
        let k = if self.cfg.top_k == 0 {
            cand.len()
        } else {
            self.cfg.top_k.min(cand.len())
        };
        if k < cand.len() {
            cand.select_nth_unstable_by(k - 1, |a, b| b.1.total_cmp(&a.1));
            cand.truncate(k);
        }
        cand.sort_by(|a, b| b.1.total_cmp(&a.1));

        let probs = softmax(&cand);
        if self.cfg.top_p < 1.0 {
            let mut cum = 0.0;
            let keep = probs
                .iter()
                .position(|&p| {
                    cum += p;
                    cum >= self.cfg.top_p
                })
                .map_or(cand.len(), |i| i + 1);
            cand.truncate(keep);
        }
        if self.cfg.min_p > 0.0 {
            // Relative to the best candidate: logit - max >= ln(min_p).
            let floor = cand[0].1 + self.cfg.min_p.ln();
            let keep = cand.iter().take_while(|c| c.1 >= floor).count().max(1);
            cand.truncate(keep);
        }
        for c in &mut cand {
            c.1 /= self.cfg.temperature;
        }
        let probs = softmax(&cand);
        let mut r: f32 = self.rng.gen();
        for (c, p) in cand.iter().zip(&probs) {
            if r < *p {
                return c.0;
            }
            r -= p;
        }
        cand.last().expect("at least one candidate").0
    }

    /// llama.cpp's rule: a recently seen token's positive logit is divided by the penalty,
    /// a negative one multiplied, so the penalty always lowers it.
    fn apply_repeat_penalty(&self, logits: &mut [f32]) {
        if self.cfg.repeat_penalty == 1.0 {
            return;
        }
        let start = self.history.len().saturating_sub(self.cfg.repeat_last_n);
        let mut seen = std::collections::HashSet::new();
        for &t in &self.history[start..] {
            if seen.insert(t) {
                if let Some(l) = logits.get_mut(t as usize) {
                    *l = if *l > 0.0 {
                        *l / self.cfg.repeat_penalty
                    } else {
                        *l * self.cfg.repeat_penalty
                    };
                }
            }
        }
    }
}

fn softmax(cand: &[(u32, f32)]) -> Vec<f32> {
    let max = cand.iter().map(|c| c.1).fold(f32::NEG_INFINITY, f32::max);
    let exps: Vec<f32> = cand.iter().map(|c| (c.1 - max).exp()).collect();
    let sum: f32 = exps.iter().sum();
    exps.into_iter().map(|e| e / sum).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn logits() -> Vec<f32> {
        vec![1.0, 3.0, 2.5, -1.0, 0.0, 2.9]
    }

    #[test]
    fn greedy_is_argmax() {
        let mut s = Sampler::new(SamplerConfig::greedy());
        assert_eq!(s.sample(&logits()), 1);
    }

    /// The walk the vectorized [`argmax`] must agree with: the best so far replaced only by
    /// a larger value.
    fn walk_argmax(logits: &[f32]) -> u32 {
        let mut best = 0;
        for (i, &v) in logits.iter().enumerate() {
            if v > logits[best] {
                best = i;
            }
        }
        best as u32
    }

    #[test]
    fn argmax_agrees_with_the_walk_on_ties_nans_zeros_and_tails() {
        let mut rng = StdRng::seed_from_u64(5);
        // Few distinct values, so ties are common; NaN, infinities and both zeros among them.
        let values = [
            -1.0,
            0.0,
            -0.0,
            1.0,
            2.0,
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
        ];
        for len in 0..70 {
            for _ in 0..200 {
                let v: Vec<f32> = (0..len)
                    .map(|_| values[rng.gen_range(0..values.len())])
                    .collect();
                assert_eq!(argmax(&v), walk_argmax(&v), "{v:?}");
            }
        }
        let big: Vec<f32> = (0..151_936)
            .map(|i| ((i * 7919) % 100_003) as f32)
            .collect();
        assert_eq!(argmax(&big), walk_argmax(&big));
    }

    #[test]
    fn greedy_pick_is_the_argmax_before_and_after_the_bans() {
        let mut rng = StdRng::seed_from_u64(9);
        let values = [-1.0, 0.0, 1.0, 2.0, f32::NAN, f32::NEG_INFINITY];
        for len in 1..24 {
            for _ in 0..300 {
                let row: Vec<f32> = (0..len)
                    .map(|_| values[rng.gen_range(0..values.len())])
                    .collect();
                let banned: Vec<u32> = (0..rng.gen_range(0..4))
                    .map(|_| rng.gen_range(0..len as u32 + 2))
                    .collect();
                let mut lowered = row.clone();
                for &b in &banned {
                    if let Some(l) = lowered.get_mut(b as usize) {
                        *l = f32::NEG_INFINITY;
                    }
                }
                let pick = greedy_pick(&row, &banned);
                assert_eq!(pick.best, walk_argmax(&row), "{row:?}");
                assert_eq!(pick.allowed, walk_argmax(&lowered), "{row:?} {banned:?}");
            }
        }
    }

    #[test]
    fn greedy_pick_is_what_plain_greedy_sampling_chooses() {
        let mut picked = Sampler::new(SamplerConfig::greedy());
        let mut copying = Sampler::new(SamplerConfig::greedy());
        assert!(picked.plain_greedy());
        // No ban: the argmax, recorded in the history as sampling records it.
        let pick = greedy_pick(&logits(), &[]);
        assert_eq!((pick.best, pick.allowed), (1, 1));
        picked.accept(&[pick.best]);
        assert_eq!(copying.sample_in_place(&mut logits(), None), 1);
        assert_eq!(picked.history, copying.history);
        // The choice banned: the copying path's choice after the ban.
        let pick = greedy_pick(&logits(), &[4, 1]);
        let mut lowered = logits();
        lowered[1] = f32::NEG_INFINITY;
        lowered[4] = f32::NEG_INFINITY;
        assert_eq!(pick.best, 1);
        assert_eq!(pick.allowed, copying.sample_in_place(&mut lowered, None));
        assert_eq!(pick.allowed, 5);
        // A ban elsewhere does not matter.
        assert_eq!(greedy_pick(&logits(), &[5]).allowed, 1);
        // The sampler would change the logits: not plain greedy.
        let penalty = SamplerConfig {
            repeat_penalty: 1.1,
            ..SamplerConfig::greedy()
        };
        for cfg in [penalty, SamplerConfig::default()] {
            assert!(!Sampler::new(cfg).plain_greedy());
        }
    }

    #[test]
    fn top_k_one_is_greedy_at_any_temperature() {
        let mut s = Sampler::new(SamplerConfig {
            temperature: 5.0,
            top_k: 1,
            ..SamplerConfig::default()
        });
        for _ in 0..20 {
            assert_eq!(s.sample(&logits()), 1);
        }
    }

    #[test]
    fn seed_makes_draws_reproducible_and_filters_hold() {
        let cfg = SamplerConfig {
            temperature: 1.5,
            top_k: 3,
            top_p: 1.0,
            min_p: 0.0,
            ..SamplerConfig::default()
        };
        let draw = |cfg: &SamplerConfig| {
            let mut s = Sampler::new(cfg.clone());
            (0..200).map(|_| s.sample(&logits())).collect::<Vec<_>>()
        };
        let a = draw(&cfg);
        assert_eq!(a, draw(&cfg));
        // Only the top 3 (ids 1, 5, 2) can appear, and all of them do at this temperature.
        for id in [1, 2, 5] {
            assert!(a.contains(&id));
        }
        assert!(a.iter().all(|t| [1, 2, 5].contains(t)));
        let other = draw(&SamplerConfig { seed: 7, ..cfg });
        assert_ne!(a, other);
    }

    #[test]
    fn min_p_and_top_p_cut_the_tail() {
        // min_p 0.5: keep logits within ln(0.5) ≈ -0.69 of the best: ids 1 (3.0), 5 (2.9), 2 (2.5).
        let mut s = Sampler::new(SamplerConfig {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.5,
            ..SamplerConfig::default()
        });
        let draws: Vec<u32> = (0..300).map(|_| s.sample(&logits())).collect();
        assert!(draws.iter().all(|t| [1, 2, 5].contains(t)));
        // A tiny top_p keeps only the best.
        let mut s = Sampler::new(SamplerConfig {
            temperature: 1.0,
            top_k: 0,
            top_p: 0.01,
            min_p: 0.0,
            ..SamplerConfig::default()
        });
        assert!((0..50).all(|_| s.sample(&logits()) == 1));
    }

    #[test]
    fn repetition_penalty_demotes_seen_tokens() {
        let mut s = Sampler::new(SamplerConfig {
            repeat_penalty: 1.5,
            ..SamplerConfig::greedy()
        });
        s.accept(&[1]);
        // 3.0 / 1.5 = 2.0 < 2.9, so id 5 wins.
        assert_eq!(s.sample(&logits()), 5);
    }
}
