//! The 256-element super-block formats: Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K.

use crate::Codec;

pub(crate) const CODECS: &[Codec] = &[];
