//! `kernels/embed.cu`: token embedding rows gathered from a ggml-format table, as f32.

use super::launch::Launcher;
use super::{int, stride_blocks, QuantMatrix};
use crate::device::CudaDevice;
use crate::error::{CudaError, DriverContext, Result};
use crate::kernels::EMBED;
use cudarc::driver::{CudaFunction, CudaSlice, LaunchConfig};
use ferrolm_gguf::GgmlType;

const THREADS: u32 = 256;

pub struct Embed {
    launch: Launcher,
    fns: Vec<(GgmlType, CudaFunction)>,
}

impl Embed {
    pub fn load(dev: &CudaDevice, launch: &Launcher) -> Result<Self> {
        // Table formats with a gather kernel (entry points `embed_<suffix>`).
        let fns = super::formats::with(|f| f.embed)
            .map(|ty| {
                let name = super::kernel_suffix(ty);
                Ok((ty, dev.function(&EMBED, &format!("embed_{name}"))?))
            })
            .collect::<Result<_>>()?;
        Ok(Self {
            launch: launch.clone(),
            fns,
        })
    }

    pub fn supports(ty: GgmlType) -> bool {
        super::formats::has(ty, |f| f.embed)
    }

    /// `out[t] = dequantize(table[ids[t]])`: `ids.len()` rows of `table.cols` floats. Ids are
    /// read on the device and must be below `table.rows` (the caller's: a tokenizer's ids).
    pub fn gather(
        &self,
        table: &QuantMatrix,
        ids: &CudaSlice<u32>,
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        let f = self
            .fns
            .iter()
            .find(|(t, _)| *t == table.ty)
            .map(|(_, f)| f)
            .ok_or_else(|| {
                CudaError::Invalid(format!("embed: no gather kernel for {}", table.ty))
            })?;
        let total = ids.len() * table.cols;
        assert!(out.len() >= total, "embed: out too small");
        let (n, cols) = (int(ids.len(), "embed rows"), int(table.cols, "embed cols"));
        let _ = int(total, "embed elements");
        let mut b = self.launch.builder(f);
        b.arg(&table.data).arg(ids).arg(out).arg(&n).arg(&cols);
        let cfg = LaunchConfig {
            grid_dim: (stride_blocks(total, THREADS), 1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: embed_*(table, ids, out, n, cols): whole rows of cols elements (checked at
        // upload), n ids below table.rows, n * cols floats out.
        unsafe { b.launch(cfg) }.during(format!("launching embed for {}", table.ty))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        for ty in [
            GgmlType::F32,
            GgmlType::F16,
            GgmlType::Q8_0,
            GgmlType::Q4K,
            GgmlType::Q6K,
        ] {
            assert!(Embed::supports(ty), "{ty}");
        }
        assert!(!Embed::supports(GgmlType::Q5K));
    }
}
