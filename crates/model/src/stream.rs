//! Streaming tensor data into a GGUF file: one tensor at a time, in declaration order,
//! each computed in parallel chunks while the previous one is being written.

use crate::error::{ModelError, Result};
use ferrolm_gguf::{GgmlType, GgufWriter, TensorInfo};
use rayon::prelude::*;
use std::path::Path;
use std::sync::mpsc;

/// Called with the number of bytes of each tensor once it is written.
pub type Progress<'a> = &'a (dyn Fn(u64) + Sync);

/// Produces tensor `i`'s bytes into a buffer of its declared size.
pub(crate) type Fill<'a> = &'a (dyn Fn(usize, &TensorInfo, &mut [u8]) -> Result<()> + Sync);

/// Elements handled by one parallel task. A multiple of every block size, and fixed, so
/// per-chunk random streams do not depend on the thread count.
pub(crate) const CHUNK_ELEMS: usize = 1 << 16;

/// Writes the file `writer` declares. `fill(i, info, out)` produces tensor `i`'s bytes.
///
/// At most three tensors are held at once (one being computed, one queued, one being
/// written), so memory stays bounded by the largest tensors, not the model.
pub(crate) fn write_streaming(
    writer: GgufWriter,
    path: &Path,
    fill: Fill,
    progress: Progress,
) -> Result<()> {
    let infos = writer.tensors().to_vec();
    // Fail before creating the file if some type cannot be written.
    for info in infos.iter().filter(|t| t.ty != GgmlType::F32) {
        ferrolm_quant::codec(info.ty)?;
    }
    let mut data = writer.create(path)?;
    let (tx, rx) = mpsc::sync_channel::<Vec<u8>>(1);
    std::thread::scope(|s| {
        let writer_thread = s.spawn(move || -> Result<()> {
            for buf in rx {
                data.write_tensor(&buf)?;
                progress(buf.len() as u64);
            }
            if data.next_tensor().is_none() {
                data.finish()?;
            }
            // Otherwise the producer failed; dropping `data` removes the partial file.
            Ok(())
        });
        let produced = infos.iter().enumerate().try_for_each(|(i, info)| {
            let mut buf = vec![0u8; info.n_bytes as usize];
            fill(i, info, &mut buf)?;
            // A closed channel means the writer failed; its error is reported below.
            tx.send(buf).or(Ok(()))
        });
        drop(tx);
        let written = writer_thread
            .join()
            .unwrap_or_else(|_| Err(ModelError::Invalid("writer thread panicked".into())));
        produced.and(written)
    })
}

/// Fills `out` (whole blocks of `ty`) in parallel chunks: `gen(chunk, floats)` produces
/// the floats of chunk number `chunk`, which are then encoded as `ty`.
pub(crate) fn encode_chunks(
    ty: GgmlType,
    out: &mut [u8],
    gen: &(dyn Fn(usize, &mut [f32]) -> Result<()> + Sync),
) -> Result<()> {
    let (be, bb) = ty.block_geometry();
    out.par_chunks_mut(CHUNK_ELEMS / be * bb)
        .enumerate()
        .try_for_each_init(Vec::new, |buf: &mut Vec<f32>, (chunk, o)| {
            buf.resize(o.len() / bb * be, 0.0);
            gen(chunk, buf)?;
            encode(ty, buf, o)
        })
}

/// Floats to blocks of `ty`, on the calling thread.
pub(crate) fn encode(ty: GgmlType, x: &[f32], out: &mut [u8]) -> Result<()> {
    if ty == GgmlType::F32 {
        // The common case for sources and references; skip a call per element.
        for (v, o) in x.iter().zip(out.chunks_exact_mut(4)) {
            o.copy_from_slice(&v.to_le_bytes());
        }
        return Ok(());
    }
    let codec = ferrolm_quant::codec(ty)?;
    let (be, bb) = ty.block_geometry();
    for (b, o) in x.chunks_exact(be).zip(out.chunks_exact_mut(bb)) {
        (codec.quantize_block)(b, o);
    }
    Ok(())
}

/// Blocks of `ty` to floats, on the calling thread.
pub(crate) fn decode(ty: GgmlType, src: &[u8], out: &mut [f32]) -> Result<()> {
    if ty == GgmlType::F32 {
        for (o, b) in out.iter_mut().zip(src.chunks_exact(4)) {
            *o = f32::from_le_bytes(b.try_into().expect("4-byte chunk"));
        }
        return Ok(());
    }
    let codec = ferrolm_quant::codec(ty)?;
    let (be, bb) = ty.block_geometry();
    for (b, o) in src.chunks_exact(bb).zip(out.chunks_exact_mut(be)) {
        (codec.dequantize_block)(b, o);
    }
    Ok(())
}
