//! The L2 prefetch beside a captured step (`l2_ahead`, on its own stream), in both forms: the
//! bytes it asks for unchanged, and its count's bookkeeping. Where every group's router launch
//! has counted, the step's base moves on by the groups; where a wait runs out (a launch that
//! never counts), to where the count stands; the blocks' tally is back at zero. Contract: the
//! same words.

use super::checks::row;
use super::{Contract, Row};
use anyhow::Result;
use ferrolm_cuda::ops::{span_of, L2AheadForm, L2AheadHow, L2AheadTable};
use ferrolm_cuda::{CudaDevice, Kernels};
use rand::rngs::StdRng;
use rand::Rng;

pub fn all(dev: &CudaDevice, k: &Kernels, rng: &mut StdRng) -> Result<Vec<Row>> {
    // An odd length, so that the last bulk request is cut short of a 16-byte multiple.
    let data: Vec<u8> = (0..(3 << 20) + 1001).map(|_| rng.gen()).collect();
    let buf = dev.upload(&data)?;
    let (addr, len) = span_of(&buf, dev.stream());
    let mut rows = Vec::new();
    for form in [L2AheadForm::Lines, L2AheadForm::Bulk, L2AheadForm::Dry] {
        let how = L2AheadHow { form, blocks: 32 };
        // (the count, the step's base, groups, the base it should leave): every wait met;
        // the second of three waits running out.
        for (count, base, n_groups, want) in [(7u32, 4u32, 3u64, 7u32), (5, 4, 3, 5)] {
            // Group g: the g-th third of the buffer, from a 256-byte boundary, and the whole.
            let third = len / n_groups / 256 * 256;
            let groups: Vec<Vec<(u64, u64)>> = (0..n_groups)
                .map(|g| vec![(addr + g * third, third), (addr, len)])
                .collect();
            let table = L2AheadTable::new(dev, &groups)?;
            let mut state = dev.upload(&[count, base, 0u32])?;
            dev.sync()?;
            k.l2_ahead.launch(&table, &mut state, how)?;
            k.l2_ahead.stream().synchronize()?;
            let words = dev.download(&state)?;
            let same_bytes = dev.download(&buf)? == data;
            let wrong = usize::from(words != [count, want, 0]) + usize::from(!same_bytes);
            rows.push(row(
                "l2_ahead (L2 prefetch beside the step)",
                format!("{form:?}, count {count} from {base}, {n_groups} groups: {words:?}"),
                "the words it should leave",
                (wrong as f64, 0.0, true),
                Contract::Exact,
            ));
        }
    }
    Ok(rows)
}
