//! Counters, gauges and histograms for `/metrics`, in Prometheus' text format.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

/// Request-scale bounds (seconds).
const SECONDS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// Step-scale bounds (seconds): a GPU decode step takes a few milliseconds.
const STEP_SECONDS: &[f64] = &[
    0.001, 0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.03, 0.05, 0.1, 0.25, 1.0,
];

/// A histogram with fixed bucket bounds (upper, inclusive) and an implicit `+Inf`.
pub struct Histogram {
    bounds: &'static [f64],
    counts: Vec<AtomicU64>,
    count: AtomicU64,
    /// In microseconds, so it fits an atomic integer.
    sum_us: AtomicU64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Self {
        Self {
            bounds,
            counts: bounds.iter().map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU64::new(0),
            sum_us: AtomicU64::new(0),
        }
    }

    pub fn observe(&self, seconds: f64) {
        if let Some(b) = self.bounds.iter().position(|&le| seconds <= le) {
            self.counts[b].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_us
            .fetch_add((seconds * 1e6) as u64, Ordering::Relaxed);
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        self.render_series(out, name, "");
    }

    /// The histogram's lines without the HELP/TYPE header; `label` (`kind="decode"`) goes
    /// into every line's labels.
    fn render_series(&self, out: &mut String, name: &str, label: &str) {
        let (sep, braces) = if label.is_empty() {
            ("", String::new())
        } else {
            (",", format!("{{{label}}}"))
        };
        let mut cum = 0;
        for (le, c) in self.bounds.iter().zip(&self.counts) {
            cum += c.load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}_bucket{{{label}{sep}le=\"{le}\"}} {cum}");
        }
        let count = self.count.load(Ordering::Relaxed);
        let sum = self.sum_us.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "{name}_bucket{{{label}{sep}le=\"+Inf\"}} {count}");
        let _ = writeln!(
            out,
            "{name}_sum{braces} {sum}\n{name}_count{braces} {count}"
        );
    }
}

pub struct Metrics {
    pub slots_total: usize,
    pub slots_active: AtomicUsize,
    pub queue_depth: AtomicUsize,
    /// The GPU's KV pool (0 where caches are not paged), and its blocks no sequence holds
    /// (as of the last admission).
    pub kv_blocks_total: AtomicUsize,
    pub kv_blocks_free: AtomicUsize,
    pub prompt_tokens: AtomicUsize,
    /// Prompt tokens run through the model (prefill work).
    pub prompt_tokens_computed: AtomicUsize,
    /// Prompt tokens whose cache entries were reused instead ([`crate::prefix`]).
    pub prompt_tokens_cached: AtomicUsize,
    pub generated_tokens: AtomicUsize,
    /// Requests whose client went away before they finished.
    pub cancelled: AtomicUsize,
    /// Forward passes the scheduler ran.
    pub steps: AtomicU64,
    /// Token rows of those passes (decode tokens and prompt chunks): over `steps`, the mean
    /// batch.
    pub step_rows: AtomicUsize,
    /// A scheduler step: planning, the forward pass, sampling and streaming.
    pub step_seconds: Histogram,
    /// The forward pass of a step (logits on the host included) whose rows are all decode
    /// tokens: the steps a GPU replays as graphs.
    pub forward_decode_seconds: Histogram,
    /// The forward pass of a step with prompt rows too.
    pub forward_mixed_seconds: Histogram,
    /// A step's sampling: every sequence's next token chosen, its text decoded and sent.
    pub sample_seconds: Histogram,
    /// Finished HTTP requests by endpoint and status code.
    requests: Mutex<BTreeMap<(String, u16), u64>>,
    pub request_seconds: Histogram,
    pub first_token_seconds: Histogram,
    pub queue_seconds: Histogram,
}

impl Metrics {
    pub fn new(slots: usize) -> Self {
        Self {
            slots_total: slots,
            slots_active: AtomicUsize::new(0),
            queue_depth: AtomicUsize::new(0),
            kv_blocks_total: AtomicUsize::new(0),
            kv_blocks_free: AtomicUsize::new(0),
            prompt_tokens: AtomicUsize::new(0),
            prompt_tokens_computed: AtomicUsize::new(0),
            prompt_tokens_cached: AtomicUsize::new(0),
            generated_tokens: AtomicUsize::new(0),
            cancelled: AtomicUsize::new(0),
            steps: AtomicU64::new(0),
            step_rows: AtomicUsize::new(0),
            step_seconds: Histogram::new(STEP_SECONDS),
            forward_decode_seconds: Histogram::new(STEP_SECONDS),
            forward_mixed_seconds: Histogram::new(STEP_SECONDS),
            sample_seconds: Histogram::new(STEP_SECONDS),
            requests: Mutex::new(BTreeMap::new()),
            request_seconds: Histogram::new(SECONDS),
            first_token_seconds: Histogram::new(SECONDS),
            queue_seconds: Histogram::new(SECONDS),
        }
    }

    pub fn count_request(&self, endpoint: &str, status: u16) {
        let mut map = self.requests.lock().unwrap_or_else(|e| e.into_inner());
        *map.entry((endpoint.to_owned(), status)).or_default() += 1;
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# HELP ferrolm_requests_total HTTP requests answered, by endpoint and status code.\n\
             # TYPE ferrolm_requests_total counter"
        );
        let map = self.requests.lock().unwrap_or_else(|e| e.into_inner());
        for ((endpoint, code), n) in map.iter() {
            let _ = writeln!(
                out,
                "ferrolm_requests_total{{endpoint=\"{endpoint}\",code=\"{code}\"}} {n}"
            );
        }
        drop(map);
        let load = |a: &AtomicUsize| a.load(Ordering::Relaxed);
        let simple: [(&str, &str, &str, String); 12] = [
            (
                "ferrolm_prompt_tokens_total",
                "counter",
                "Prompt tokens of finished requests.",
                load(&self.prompt_tokens).to_string(),
            ),
            (
                "ferrolm_prompt_tokens_computed_total",
                "counter",
                "Prompt tokens run through the model (prefill work).",
                load(&self.prompt_tokens_computed).to_string(),
            ),
            (
                "ferrolm_prompt_tokens_cached_total",
                "counter",
                "Prompt tokens reused from a cached prefix instead of computed.",
                load(&self.prompt_tokens_cached).to_string(),
            ),
            (
                "ferrolm_generated_tokens_total",
                "counter",
                "Tokens generated.",
                load(&self.generated_tokens).to_string(),
            ),
            (
                "ferrolm_requests_cancelled_total",
                "counter",
                "Requests dropped because the client went away.",
                load(&self.cancelled).to_string(),
            ),
            (
                "ferrolm_batch_steps_total",
                "counter",
                "Batched forward passes run.",
                self.steps.load(Ordering::Relaxed).to_string(),
            ),
            (
                "ferrolm_batch_step_rows_total",
                "counter",
                "Token rows of the batched forward passes (decode tokens and prompt chunks).",
                load(&self.step_rows).to_string(),
            ),
            (
                "ferrolm_queue_depth",
                "gauge",
                "Requests waiting for a slot.",
                load(&self.queue_depth).to_string(),
            ),
            (
                "ferrolm_slots_active",
                "gauge",
                "KV slots holding a sequence.",
                load(&self.slots_active).to_string(),
            ),
            (
                "ferrolm_slots_total",
                "gauge",
                "KV slots (--parallel).",
                self.slots_total.to_string(),
            ),
            (
                "ferrolm_kv_blocks_total",
                "gauge",
                "Blocks of the GPU's paged KV cache (0: not paged).",
                load(&self.kv_blocks_total).to_string(),
            ),
            (
                "ferrolm_kv_blocks_free",
                "gauge",
                "KV blocks no sequence holds, at the last admission.",
                load(&self.kv_blocks_free).to_string(),
            ),
        ];
        for (name, ty, help, value) in simple {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {ty}\n{name} {value}"
            );
        }
        self.request_seconds.render(
            &mut out,
            "ferrolm_request_duration_seconds",
            "Time from a generation request's arrival to its last byte being queued.",
        );
        self.first_token_seconds.render(
            &mut out,
            "ferrolm_time_to_first_token_seconds",
            "Time from queueing to the first sampled token.",
        );
        self.queue_seconds.render(
            &mut out,
            "ferrolm_queue_wait_seconds",
            "Time requests waited for a slot (on a GPU, and for their KV blocks).",
        );
        self.step_seconds.render(
            &mut out,
            "ferrolm_batch_step_seconds",
            "A scheduler step: planning, the forward pass, sampling and streaming.",
        );
        self.sample_seconds.render(
            &mut out,
            "ferrolm_batch_sample_seconds",
            "A scheduler step's sampling: every sequence's next token chosen and streamed.",
        );
        let name = "ferrolm_batch_forward_seconds";
        let _ = writeln!(
            out,
            "# HELP {name} The forward pass of a scheduler step, its logits on the host; \
             kind=\"decode\" when every row is a decode token, \"mixed\" with prompt rows.\n\
             # TYPE {name} histogram"
        );
        let decode = &self.forward_decode_seconds;
        decode.render_series(&mut out, name, "kind=\"decode\"");
        let mixed = &self.forward_mixed_seconds;
        mixed.render_series(&mut out, name, "kind=\"mixed\"");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_cumulative_buckets_and_labels() {
        let m = Metrics::new(4);
        m.request_seconds.observe(0.02);
        m.request_seconds.observe(3.0);
        m.count_request("/v1/completions", 200);
        m.count_request("/v1/completions", 200);
        m.step_seconds.observe(0.003);
        m.forward_mixed_seconds.observe(0.02);
        m.sample_seconds.observe(0.001);
        let text = m.render();
        assert!(
            text.contains("ferrolm_requests_total{endpoint=\"/v1/completions\",code=\"200\"} 2")
        );
        assert!(text.contains("ferrolm_request_duration_seconds_bucket{le=\"0.025\"} 1"));
        assert!(text.contains("ferrolm_request_duration_seconds_bucket{le=\"5\"} 2"));
        assert!(text.contains("ferrolm_request_duration_seconds_count 2"));
        assert!(text.contains("ferrolm_slots_total 4"));
        // Step histograms have their own, millisecond bounds.
        assert!(text.contains("ferrolm_batch_step_seconds_bucket{le=\"0.002\"} 0"));
        assert!(text.contains("ferrolm_batch_step_seconds_bucket{le=\"0.004\"} 1"));
        assert!(text.contains("ferrolm_batch_sample_seconds_bucket{le=\"0.002\"} 1"));
        assert!(text.contains("ferrolm_batch_forward_seconds_bucket{kind=\"mixed\",le=\"0.02\"} 1"));
        assert!(text.contains("ferrolm_batch_forward_seconds_count{kind=\"decode\"} 0"));
    }
}
