//! The 32-element formats: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1.

use crate::Codec;

pub(crate) const CODECS: &[Codec] = &[];
