//! Sizes that come from flags (`-c`, `--parallel`) checked against the memory they imply
//! before anything is allocated: the KV caches in RAM (CPU blocks) and in GPU memory (GPU
//! blocks). An error says how much is needed, how much there is, and what would fit.

use crate::model::Model;
use crate::session::EngineError;
use ferrolm_cpu::KvType;

/// RAM the kernel says can be had without swapping (`MemAvailable`); `None` where unknown.
pub fn available_ram() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

fn gib(b: u64) -> String {
    format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64)
}

impl Model<'_> {
    /// Checks that `n_seqs` KV caches of `n_ctx` positions fit in the memory left, before any
    /// is made. The error names what is needed, what is free, and the largest `-c` that fits.
    pub fn check_kv_fits(
        &self,
        n_ctx: usize,
        kv_type: KvType,
        n_seqs: usize,
    ) -> Result<(), EngineError> {
        if n_ctx == 0 || n_seqs == 0 {
            return Err(EngineError::Backend(
                "the context size (-c) and the number of sequences must be at least 1".into(),
            ));
        }
        self.check_kv_type(kv_type)?;
        let (cpu, gpu) = self.kv_bytes_per_position(kv_type)?;
        let seqs = if n_seqs > 1 {
            format!(" x {n_seqs} slots")
        } else {
            String::new()
        };
        let check = |per_pos: u64, free: u64, place: &str| -> Result<(), EngineError> {
            let per_ctx = per_pos.saturating_mul(n_seqs as u64);
            let need = per_ctx.saturating_mul(n_ctx as u64);
            // A tenth of what is free stays for activations, the weights' pages, the rest.
            let usable = free / 10 * 9;
            if per_ctx == 0 || need <= usable {
                return Ok(());
            }
            let fit = usable / per_ctx;
            let advice = if fit == 0 {
                match n_seqs {
                    1 => "not even one position fits".to_owned(),
                    _ => "lower --parallel".to_owned(),
                }
            } else if n_seqs > 1 {
                format!("-c {fit} or fewer slots (--parallel) would fit")
            } else {
                format!("-c {fit} or less would fit")
            };
            Err(EngineError::Backend(format!(
                "a KV cache of {n_ctx} positions{seqs} needs {} of {place}, {} is available; {advice}",
                gib(need),
                gib(free)
            )))
        };
        if let Some(free) = available_ram() {
            check(cpu, free, "RAM")?;
        }
        if let Some((dev, per_pos)) = gpu {
            let (free, _) = dev
                .context()
                .mem_get_info()
                .map_err(|e| EngineError::Backend(format!("CUDA: reading free memory: {e}")))?;
            check(per_pos, free as u64, "GPU memory")?;
        }
        Ok(())
    }
}
