//! The GPU's greedy choices (`greedy_rows_f32`) against the host's walk over the same logits:
//! the first index of each row's largest value, NaNs passed over and 0 where a row starts with
//! NaN, with and without banned ids taken as -inf. Rows with ties, NaNs, both zeros and
//! infinities, a vocabulary's width and a short one. Contract: the same ids.

use super::checks::{normal, row};
use super::{Contract, Row};
use anyhow::Result;
use ferrolm_cuda::{CudaDevice, Kernels};
use rand::rngs::StdRng;
use rand::Rng;

/// The host's reference: a walk keeping the best so far, replaced only by a larger value.
fn walk(row: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in row.iter().enumerate() {
        if v > row[best] {
            best = i;
        }
    }
    best as u32
}

pub fn all(dev: &CudaDevice, k: &Kernels, rng: &mut StdRng) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    for (n, width) in [(64, 151_936), (9, 1000)] {
        let mut x = normal(rng, n * width, 2.0);
        // Rows made hard: repeated maxima (ties), NaNs (one row starting with one), ±0 as
        // the maximum, -inf everywhere but NaNs, and the best id banned.
        let specials = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.0, -0.0, 9.0];
        for r in 0..n {
            let row = &mut x[r * width..(r + 1) * width];
            match r % 6 {
                0 => {
                    for _ in 0..50 {
                        row[rng.gen_range(0..width)] = specials[rng.gen_range(0..specials.len())];
                    }
                }
                1 => row[0] = f32::NAN,
                2 => row.iter_mut().for_each(|v| *v = -v.abs() - 1.0),
                3 => {
                    row.iter_mut().for_each(|v| *v = -v.abs() - 1.0);
                    row[width / 2] = -0.0;
                    row[width - 1] = 0.0;
                }
                4 => row.fill(f32::NEG_INFINITY),
                _ => {}
            }
        }
        let banned: Vec<u32> = vec![walk(&x[..width]), 0, width as u32 - 1, width as u32 + 7];
        for ban in [&banned[..0], &banned[..]] {
            let xd = dev.upload(&x)?;
            let bd = dev.upload(&ban.iter().copied().chain([0]).collect::<Vec<u32>>())?;
            let mut picks = dev.upload(&vec![u32::MAX; 2 * n])?;
            k.elementwise
                .greedy_rows(&xd, n, width, &bd, ban.len(), &mut picks)?;
            dev.sync()?;
            let got = dev.download(&picks)?;
            let mut want = Vec::with_capacity(2 * n);
            for r in 0..n {
                let row = &x[r * width..(r + 1) * width];
                let mut lowered = row.to_vec();
                for &b in ban {
                    if let Some(l) = lowered.get_mut(b as usize) {
                        *l = f32::NEG_INFINITY;
                    }
                }
                want.extend([walk(row), walk(&lowered)]);
            }
            let wrong = got.iter().zip(&want).filter(|(g, w)| g != w).count();
            let shape = format!("{n} rows of {width}, {} banned", ban.len());
            rows.push(row(
                "greedy_rows (greedy picks on the GPU)",
                shape,
                "the host's walk",
                (wrong as f64, 0.0, true),
                Contract::Exact,
            ));
        }
    }
    Ok(rows)
}
