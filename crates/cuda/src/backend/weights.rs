//! Model weights on the device: uploaded once, in the file's block format where a kernel
//! reads it, as f32 otherwise.

use crate::device::CudaDevice;
use crate::ops::{Embed, Mmvq, MoeRouter, QuantMatrix};
use crate::Result as CudaResult;
use cudarc::driver::CudaSlice;
use ferrolm_gguf::GgmlType;
use ferrolm_model::backend::MoeGating;
use ferrolm_model::{ModelError, Result, TensorId, TensorRole};

pub enum CudaWeight {
    /// Norm weights and biases, as f32.
    Vector(CudaSlice<f32>),
    /// An MoE router (`ffn_gate_inp`, f32), with its top-k and gating mode.
    Router(MoeRouter),
    /// A tensor of blocks that run on the CPU (`-ngl`): never uploaded, never used here.
    Absent,
    Matrix {
        /// In a format mmvq/mmq read, or F32 (float files, and formats without an int8
        /// kernel, dequantized at upload).
        mat: QuantMatrix,
        /// An f32 copy for the embedding gather when `mat`'s format has no gather kernel
        /// (only ever made for `token_embd`).
        gather: Option<QuantMatrix>,
    },
}

impl CudaWeight {
    pub fn matrix(&self) -> &QuantMatrix {
        match self {
            CudaWeight::Matrix { mat, .. } => mat,
            _ => panic!("a 1-D weight or a router used as a matrix"),
        }
    }

    pub fn vector(&self) -> &CudaSlice<f32> {
        match self {
            CudaWeight::Vector(v) => v,
            _ => panic!("a matrix used as a 1-D weight"),
        }
    }

    /// The matrix an embedding gather reads.
    pub fn gather_table(&self) -> &QuantMatrix {
        match self {
            CudaWeight::Matrix {
                gather: Some(g), ..
            } => g,
            _ => self.matrix(),
        }
    }
}

/// The format a tensor is held in on the device.
pub fn device_type(ty: GgmlType) -> GgmlType {
    if Mmvq::supports(ty) {
        ty
    } else {
        GgmlType::F32
    }
}

/// Whether tensor `id`, held as `dty`, also needs an f32 copy for the embedding gather.
fn needs_gather_copy(id: TensorId, dty: GgmlType) -> bool {
    id.role == TensorRole::TokenEmbd && !Embed::supports(dty)
}

/// Device bytes tensor `id` of `dims` in `ty` takes (for the fit check before uploading).
pub fn device_bytes(id: TensorId, ty: GgmlType, dims: &[u64]) -> u64 {
    let elems: u64 = dims.iter().product();
    if dims.len() == 1 {
        return elems * 4;
    }
    let dty = device_type(ty);
    let (be, bb) = dty.block_geometry();
    let mut bytes = elems / be as u64 * bb as u64;
    if needs_gather_copy(id, dty) {
        bytes += elems * 4;
    }
    bytes
}

fn dequantize(name: &str, ty: GgmlType, elems: usize, data: &[u8]) -> Result<Vec<f32>> {
    ferrolm_quant::dequantize_to_vec(ty, data, elems).map_err(|e| ModelError::Tensor {
        name: name.to_owned(),
        what: e.to_string(),
    })
}

fn cuda_err(name: &str, e: crate::CudaError) -> ModelError {
    ModelError::Tensor {
        name: name.to_owned(),
        what: format!("uploading to the GPU: {e}"),
    }
}

fn f32_matrix(dev: &CudaDevice, rows: usize, cols: usize, v: &[f32]) -> CudaResult<QuantMatrix> {
    QuantMatrix::upload(dev, GgmlType::F32, rows, cols, bytemuck::cast_slice(v))
}

/// Uploads tensor `id` of the file.
pub fn upload(
    dev: &CudaDevice,
    id: TensorId,
    ty: GgmlType,
    dims: &[u64],
    data: &[u8],
) -> Result<CudaWeight> {
    let name = &id.name();
    let cols = dims[0] as usize;
    let rows = dims[1..].iter().product::<u64>() as usize;
    if dims.len() == 1 {
        let v = dequantize(name, ty, cols, data)?;
        return Ok(CudaWeight::Vector(
            dev.upload(&v).map_err(|e| cuda_err(name, e))?,
        ));
    }
    let dty = device_type(ty);
    let upload = || -> Result<QuantMatrix> {
        if dty == ty {
            QuantMatrix::upload(dev, ty, rows, cols, data).map_err(|e| cuda_err(name, e))
        } else {
            let v = dequantize(name, ty, rows * cols, data)?;
            f32_matrix(dev, rows, cols, &v).map_err(|e| cuda_err(name, e))
        }
    };
    let mat = upload()?;
    let gather = if needs_gather_copy(id, dty) {
        let v = dequantize(name, ty, rows * cols, data)?;
        Some(f32_matrix(dev, rows, cols, &v).map_err(|e| cuda_err(name, e))?)
    } else {
        None
    };
    Ok(CudaWeight::Matrix { mat, gather })
}

/// Uploads an MoE router: `n_used` experts per token, gated as `gating` says (applied by the
/// router's top-k).
pub fn upload_router(
    dev: &CudaDevice,
    id: TensorId,
    ty: GgmlType,
    dims: &[u64],
    data: &[u8],
    n_used: usize,
    gating: MoeGating,
) -> Result<CudaWeight> {
    let name = &id.name();
    let (n_embd, n_expert) = (dims[0] as usize, dims[1..].iter().product::<u64>() as usize);
    let v = dequantize(name, ty, n_embd * n_expert, data)?;
    let renorm = gating == MoeGating::SoftmaxTopKRenorm;
    MoeRouter::upload(dev, &v, n_expert, n_embd, n_used, renorm)
        .map(|r| match gating {
            MoeGating::TopKSoftmax => r.topk_softmax(),
            _ => r,
        })
        .map(CudaWeight::Router)
        .map_err(|e| cuda_err(name, e))
}
