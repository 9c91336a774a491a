//! Plain float formats: F32, F16, BF16.

use crate::Codec;

pub(crate) const CODECS: &[Codec] = &[];
