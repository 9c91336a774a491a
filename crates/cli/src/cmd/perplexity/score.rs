//! The arithmetic of llama-perplexity: one token's negative log-likelihood, and the running
//! sums that give the perplexity and its error. In f64, as llama.cpp sums them.

/// `-log p(token)` under the softmax of `row`, as llama.cpp's `log_softmax`: the maximum and
/// the exponentials in f32, their sum and the logarithm in f64.
pub fn nll(row: &[f32], token: u32) -> f64 {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum_exp: f64 = row.iter().map(|&x| f64::from((x - max).exp())).sum();
    sum_exp.ln() - f64::from(row[token as usize] - max)
}

/// Sums of the scored tokens' negative log-likelihoods and of their squares.
#[derive(Default, Debug)]
pub struct NllSums {
    sum: f64,
    sum2: f64,
    count: usize,
}

impl NllSums {
    pub fn add(&mut self, nll: f64) {
        self.sum += nll;
        self.sum2 += nll * nll;
        self.count += 1;
    }

    /// e to the mean negative log-likelihood.
    pub fn ppl(&self) -> f64 {
        (self.sum / self.count as f64).exp()
    }

    /// llama-perplexity's error on the final estimate: the standard error of the mean
    /// log-likelihood carried through the exponential (`ppl * sqrt(var / (n - 1))`). None
    /// where it has no value (fewer than two tokens, or no spread at all).
    pub fn error(&self) -> Option<f64> {
        let n = self.count as f64;
        let mean = self.sum / n;
        let var = self.sum2 / n - mean * mean;
        (self.count > 1 && var > 0.0).then(|| (var / (n - 1.0)).sqrt() * self.ppl())
    }
}

#[cfg(test)]
mod tests {
    use super::{nll, NllSums};

    #[test]
    fn uniform_logits_score_the_vocabulary_size() {
        let row = [0.5f32; 8];
        assert!((nll(&row, 3) - 8f64.ln()).abs() < 1e-12);
    }

    #[test]
    fn nll_is_log_softmax() {
        let row = [1.0f32, 2.0, 3.0, -1.0];
        let z: f64 = row.iter().map(|&x| f64::from(x).exp()).sum();
        for t in 0..4 {
            let want = -(f64::from(row[t]).exp() / z).ln();
            assert!((nll(&row, t as u32) - want).abs() < 1e-6, "token {t}");
        }
        // Shifting every logit changes nothing.
        let shifted: Vec<f32> = row.iter().map(|x| x + 100.0).collect();
        assert!((nll(&shifted, 2) - nll(&row, 2)).abs() < 1e-5);
    }

    #[test]
    fn ppl_and_error_as_llama_cpp_computes_them() {
        let mut s = NllSums::default();
        for v in [1.0, 2.0, 3.0, 2.0] {
            s.add(v);
        }
        let ppl = 2f64.exp();
        assert!((s.ppl() - ppl).abs() < 1e-12);
        // mean 2, E[x^2] = 4.5, variance 0.5 over n = 4: sqrt(0.5 / 3) * ppl.
        assert!((s.error().unwrap() - (0.5f64 / 3.0).sqrt() * ppl).abs() < 1e-12);
    }

    #[test]
    fn no_error_without_spread() {
        let mut s = NllSums::default();
        s.add(1.5);
        assert_eq!(s.error(), None);
        s.add(1.5);
        assert_eq!(s.error(), None);
    }
}
