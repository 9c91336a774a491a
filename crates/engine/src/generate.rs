//! The generation loop: prefill the prompt, then sample, stream and stop.
//!
//! With a grammar, each sampled token is committed to the sequence's matcher at once and the
//! next token's mask is computed on a helper thread while the forward pass for this token
//! runs ([`overlap`]), so constrained decoding adds little to a step.

use crate::constraint::{overlap, ConstraintError, Grammar, TokenMask, TokenMatcher};
use crate::sampler::Sampler;
use crate::session::{EngineError, Logits, Session};
use ferrolm_tokenizer::Tokenizer;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

#[derive(Clone, Debug, Default)]
pub struct GenerateParams {
    /// Most tokens to generate.
    pub n_predict: usize,
    /// Generation ends when the text contains any of these; the stop string is not emitted.
    pub stop: Vec<String>,
    /// When set (e.g. by a Ctrl-C handler), generation ends before the next token is sampled.
    /// Checked once per token, not during the prompt's prefill.
    pub cancel: Option<Arc<AtomicBool>>,
    /// Structured output: every token is chosen within this grammar, and generation ends
    /// (as [`StopReason::Eog`]) when the grammar is complete.
    pub grammar: Option<Grammar>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// An end-of-generation token (EOS, EOT, ...).
    Eog,
    StopString,
    Length,
    ContextFull,
    /// [`GenerateParams::cancel`] was set.
    Cancelled,
}

#[derive(Clone, Debug)]
pub struct GenerateStats {
    pub n_prompt: usize,
    pub n_gen: usize,
    pub prompt_secs: f64,
    pub gen_secs: f64,
    pub stop: StopReason,
    pub tokens: Vec<u32>,
    /// With a grammar: time spent computing masks (on the helper thread), and how long the
    /// loop waited for a mask after its forward pass had finished (the part not hidden).
    pub mask_secs: f64,
    pub mask_wait_secs: f64,
}

impl GenerateStats {
    pub fn prompt_tps(&self) -> f64 {
        self.n_prompt as f64 / self.prompt_secs.max(1e-9)
    }
    pub fn gen_tps(&self) -> f64 {
        self.n_gen as f64 / self.gen_secs.max(1e-9)
    }
}

/// Feeds `prompt` after whatever `session` already holds, then generates. Text goes to `emit`
/// as soon as it is complete UTF-8 and cannot be the start of a stop string.
pub fn generate(
    session: &mut Session,
    sampler: &mut Sampler,
    tok: &Tokenizer,
    prompt: &[u32],
    params: &GenerateParams,
    mut emit: impl FnMut(&str),
) -> Result<GenerateStats, EngineError> {
    if prompt.is_empty() {
        // The last prompt position's logits are where the first token comes from.
        return Err(EngineError::EmptyPrompt);
    }
    if session.n_past() + prompt.len() > session.n_ctx() {
        return Err(EngineError::ContextFull {
            need: session.n_past() + prompt.len(),
            n_ctx: session.n_ctx(),
        });
    }
    let t0 = Instant::now();
    let mut matcher = params.grammar.as_ref().map(Grammar::matcher);
    // The first mask is computed during the prefill.
    let mut timing = MaskTiming::default();
    let (logits, mask) = eval_beside(session, prompt, matcher.as_mut(), &mut timing);
    let mut logits = logits?;
    let mut mask: Option<TokenMask> = mask?;
    let prompt_secs = t0.elapsed().as_secs_f64();
    sampler.accept(prompt);

    let t1 = Instant::now();
    let mut decoder = tok.stream_decoder();
    let mut pending = String::new();
    let mut tokens = Vec::new();
    let mut stop = StopReason::Length;
    let cancelled = || {
        params
            .cancel
            .as_ref()
            .is_some_and(|c| c.load(Ordering::Relaxed))
    };
    while tokens.len() < params.n_predict {
        if cancelled() {
            stop = StopReason::Cancelled;
            break;
        }
        let next = sampler.sample_masked(&logits, mask.as_ref());
        if tok.is_eog(next) {
            stop = StopReason::Eog;
            break;
        }
        tokens.push(next);
        if let Some(m) = matcher.as_mut() {
            m.accept(next)?;
        }
        let complete = matcher.as_ref().is_some_and(|m| m.is_finished());
        pending.push_str(
            &decoder
                .push(next)
                .map_err(|e| EngineError::Decode(e.to_string()))?,
        );
        if let Some(at) = params
            .stop
            .iter()
            .filter_map(|s| pending.find(s.as_str()))
            .min()
        {
            emit(&pending[..at]);
            pending.clear();
            stop = StopReason::StopString;
            break;
        }
        let keep = held_back(&pending, &params.stop);
        let ready = pending.len() - keep;
        if ready > 0 {
            emit(&pending[..ready]);
            pending.drain(..ready);
        }
        if complete {
            stop = StopReason::Eog;
            break;
        }
        if tokens.len() == params.n_predict {
            break;
        }
        if session.n_past() >= session.n_ctx() {
            stop = StopReason::ContextFull;
            break;
        }
        let (l, m) = eval_beside(session, &[next], matcher.as_mut(), &mut timing);
        logits = l?;
        mask = m?;
    }
    if stop != StopReason::StopString {
        pending.push_str(&decoder.finish());
        emit(&pending);
    }
    Ok(GenerateStats {
        n_prompt: prompt.len(),
        n_gen: tokens.len(),
        prompt_secs,
        gen_secs: t1.elapsed().as_secs_f64(),
        stop,
        tokens,
        mask_secs: timing.compute,
        mask_wait_secs: timing.wait,
    })
}

#[derive(Default)]
struct MaskTiming {
    compute: f64,
    wait: f64,
}

/// Evaluates `tokens` for the last position's logits; with a matcher, its next mask is
/// computed on a helper thread meanwhile.
#[allow(clippy::type_complexity)]
fn eval_beside(
    session: &mut Session,
    tokens: &[u32],
    matcher: Option<&mut TokenMatcher>,
    timing: &mut MaskTiming,
) -> (
    Result<Vec<f32>, EngineError>,
    Result<Option<TokenMask>, ConstraintError>,
) {
    let Some(m) = matcher else {
        return (session.eval(tokens, Logits::Last), Ok(None));
    };
    let ((logits, evaluated), (mask, compute)) = overlap(
        || (session.eval(tokens, Logits::Last), Instant::now()),
        || {
            let t = Instant::now();
            (m.compute_mask(), t.elapsed().as_secs_f64())
        },
    );
    timing.compute += compute;
    timing.wait += evaluated.elapsed().as_secs_f64();
    (logits, mask.map(Some))
}

/// Bytes at the end of `text` that could still grow into a stop string: a streaming caller
/// emits all but these.
pub fn held_back(text: &str, stops: &[String]) -> usize {
    let mut keep = 0;
    for s in stops {
        for len in (1..s.len().min(text.len() + 1)).rev() {
            if text.is_char_boundary(text.len() - len) && s.starts_with(&text[text.len() - len..]) {
                keep = keep.max(len);
                break;
            }
        }
    }
    keep
}

#[cfg(test)]
mod tests {
    use super::held_back;

    #[test]
    fn holds_back_only_possible_stop_prefixes() {
        let stops = vec!["</s>".to_string(), "User:".to_string()];
        assert_eq!(held_back("hello </", &stops), 2);
        assert_eq!(held_back("hello Us", &stops), 2);
        assert_eq!(held_back("hello", &stops), 0);
        assert_eq!(held_back("é<", &stops), 1);
    }
}
