//! The weight formats the kernels take, and which kernels each has: the one table that every
//! launcher's `supports` and every loader's list of entry points reads. A new format, or a new
//! kernel for one, is a row (or a field) here plus its instances in `kernels/*.cu`; a test
//! checks the two against each other, both ways.
//!
//! | format | mat-vec | wide | MMA mat-vec | GEMM | blocks | CUDA-core GEMM | f16 GEMM | experts | narrow | embed | float |
//! |---|---|---|---|---|---|---|---|---|---|---|---|
//! | F32 | | | | | | | | | | ✓ | ✓ |
//! | F16 | | | | | | | | | | ✓ | |
//! | Q4_0 | ✓ | | | ✓ | | `mmq_q4_0_chain` | ✓ | ✓ | | | |
//! | Q4_1 | ✓ | | | ✓ | | `mmq_q4_1_chain` | ✓ | ✓ | | | |
//! | Q5_0 | ✓ | | | ✓ | | `mmq_q5_0_lanes` | | ✓ | | | |
//! | Q5_1 | ✓ | | | ✓ | | `mmq_q5_1_chain` | | ✓ | | | |
//! | Q8_0 | ✓ | ✓ | | ✓ | | `mmq_q8_0_lanes` | ✓ | ✓ | | ✓ | |
//! | Q4_K | ✓ | ✓ | ✓ | ✓ | ✓ | | ✓ | ✓ | ✓ | ✓ | |
//! | Q5_K | ✓ | | | ✓ | | | | ✓ | | | |
//! | Q6_K | ✓ | | ✓ | ✓ | | | ✓ | ✓ | ✓ | ✓ | |
//! | MXFP4 | ✓ | | | ✓ | | `mmq_mxfp4_chain` | ✓ | ✓ | ✓ | | |
//!
//! Weights of a format without a mat-vec are held on the device as F32 (dequantized at
//! upload, `backend::weights`), so F16, BF16 and the other ggml formats run as floats.

use ferrolm_gguf::GgmlType;

/// What `kernels/*.cu` instantiate for one weight format. Entry points are named with the
/// format's suffix `<s>` (`super::kernel_suffix`: `q4_k`, `f16`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Format {
    pub ty: GgmlType,
    /// Int8 mat-vec, `mmvq.cu`: `mmvq_<s>_n<1..=8>`, `mmvq_pair_<s>`, `mmvq_glu_<s>`. The
    /// device holds weights in exactly these formats.
    pub matvec: bool,
    /// The mat-vec's wide walk (a warp per row), `mmvq.cu`: `mmvq_wide_<s>_n<1..=8>`,
    /// `mmvq_wide_{pair,glu}_<s>`.
    pub matvec_wide: bool,
    /// The mat-vec on the tensor cores for the steps of a batched decode (2-64 rows),
    /// `mmvq_mma.cu`: `mmvq_mma_<s>_m<MT>_t<NT>` (`MMA_MV_FORMAT`); and its staged form for
    /// 17-64 rows, `mmvq_staged.cu`: `mmvq_staged_<s>_subs_t<NT>` (`STG_FORMAT`).
    pub matvec_mma: bool,
    /// Int8 tensor-core GEMM, `mmq.cu`: `mmq_<s>_<tile>` for every tile of `MMQ_TILES`, rows
    /// of a multiple of `MMQ_BK`.
    pub gemm: bool,
    /// The GEMM's integer-scale block order (`MmqOrder::Blocks`), `mmq.cu`: `mmq_<s>_blocks`;
    /// and the staged mat-vec's, `mmvq_staged.cu`: `mmvq_staged_<s>_blocks_t<NT>`
    /// (`STG_BLOCKS_FORMAT`).
    pub gemm_blocks: bool,
    /// A CUDA-core GEMM in the CPU's arithmetic (`mmq.cu`'s `mmq_small`), by entry point: rows
    /// of any multiple of 32, and short ubatches of the `lanes` formats.
    pub small_gemm: Option<&'static str>,
    /// The CPU sums this format in eight f32 lanes (`ferrolm_cpu::matmul`'s `Format::LANES`:
    /// Q8_0, Q5_0), which the tensor-core tiles do not: its `small_gemm` (`mmq_<s>_lanes`)
    /// does, and takes its short ubatches too (the plan's `lanes`).
    pub lanes: bool,
    /// Expanded to f16 for the Hopper GEMM of long ubatches, `gemm_wgmma.cu`:
    /// `dequant_f16_<s>`.
    pub gemm_f16: bool,
    /// Int8 MoE expert kernels: the grouped GEMM (`moe_gemm.cu`: `moe_gate_up_<s>`,
    /// `moe_down_<s>`) and decode (`moe_decode.cu`: `moe_{gate_up,down}_<s>_n<1..=8>`,
    /// `moe_slot_matvec_<s>`).
    pub experts: bool,
    /// The expert decode kernels' narrow walk beside their default wide one
    /// (`FERROLM_MMVQ_WIDE=0`), `moe_decode.cu`: `moe_*_narrow_<s>[_n<1..=8>]`.
    pub experts_narrow: bool,
    /// Embedding gather, `embed.cu`: `embed_<s>`.
    pub embed: bool,
    /// Multiplied in f32: dense weights by `gemm_f32.cu`, experts by `moe_gemm.cu`'s
    /// `moe_f32_gate_up` and `moe_f32_down`.
    pub float: bool,
}

impl Format {
    /// A format with no kernel; the rows below set what they have.
    const NONE: Format = Format {
        ty: GgmlType::F32,
        matvec: false,
        matvec_wide: false,
        matvec_mma: false,
        gemm: false,
        gemm_blocks: false,
        small_gemm: None,
        lanes: false,
        gemm_f16: false,
        experts: false,
        experts_narrow: false,
        embed: false,
        float: false,
    };

    /// The int8 kernels every block format has: mat-vec, tensor-core GEMM, experts.
    const fn int8(ty: GgmlType) -> Format {
        Format {
            ty,
            matvec: true,
            gemm: true,
            experts: true,
            ..Format::NONE
        }
    }
}

/// Every format a kernel takes, in ggml type order.
pub const FORMATS: [Format; 11] = [
    Format {
        ty: GgmlType::F32,
        embed: true,
        float: true,
        ..Format::NONE
    },
    Format {
        ty: GgmlType::F16,
        embed: true,
        ..Format::NONE
    },
    Format {
        small_gemm: Some("mmq_q4_0_chain"),
        gemm_f16: true,
        ..Format::int8(GgmlType::Q4_0)
    },
    Format {
        small_gemm: Some("mmq_q4_1_chain"),
        gemm_f16: true,
        ..Format::int8(GgmlType::Q4_1)
    },
    Format {
        small_gemm: Some("mmq_q5_0_lanes"),
        lanes: true,
        ..Format::int8(GgmlType::Q5_0)
    },
    Format {
        small_gemm: Some("mmq_q5_1_chain"),
        ..Format::int8(GgmlType::Q5_1)
    },
    Format {
        small_gemm: Some("mmq_q8_0_lanes"),
        matvec_wide: true,
        lanes: true,
        gemm_f16: true,
        embed: true,
        ..Format::int8(GgmlType::Q8_0)
    },
    Format {
        matvec_wide: true,
        matvec_mma: true,
        gemm_blocks: true,
        gemm_f16: true,
        experts_narrow: true,
        embed: true,
        ..Format::int8(GgmlType::Q4K)
    },
    Format::int8(GgmlType::Q5K),
    Format {
        matvec_mma: true,
        gemm_f16: true,
        experts_narrow: true,
        embed: true,
        ..Format::int8(GgmlType::Q6K)
    },
    // gpt-oss's experts; the CPU sums its blocks in a per-block chain, as Q4_0's.
    Format {
        small_gemm: Some("mmq_mxfp4_chain"),
        gemm_f16: true,
        experts_narrow: true,
        ..Format::int8(GgmlType::Mxfp4)
    },
];

/// Whether `ty` is in the table with `has` true.
pub fn has(ty: GgmlType, has: impl Fn(&Format) -> bool) -> bool {
    FORMATS.iter().any(|f| f.ty == ty && has(f))
}

/// The formats with `has` true, in table order.
pub fn with(has: impl Fn(&Format) -> bool) -> impl Iterator<Item = GgmlType> {
    FORMATS.into_iter().filter(move |f| has(f)).map(|f| f.ty)
}

/// The formats with a CUDA-core GEMM, with its entry point.
pub fn small_gemms() -> impl Iterator<Item = (GgmlType, &'static str)> {
    FORMATS
        .into_iter()
        .filter_map(|f| f.small_gemm.map(|name| (f.ty, name)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::{
        KernelFile, EMBED, GEMM_WGMMA, MMQ, MMVQ, MMVQ_MMA, MMVQ_STAGED, MOE_DECODE, MOE_GEMM,
    };
    use crate::ops::kernel_suffix;
    use std::collections::BTreeSet;

    /// The first arguments of the lines `MACRO(first, GGML_TYPE_<T>...` of `file`, each
    /// checked to name its type's suffix (after `narrow_`, moe_decode.cu's variants).
    fn instances(file: &KernelFile, macro_name: &str) -> BTreeSet<String> {
        let open = format!("{macro_name}(");
        file.source
            .lines()
            .filter_map(|l| l.strip_prefix(&open))
            .map(|args| {
                let mut args = args.split(',').map(str::trim);
                let (name, ty) = (args.next().unwrap(), args.next().unwrap());
                let suffix = name.strip_prefix("narrow_").unwrap_or(name);
                let want = format!("GGML_TYPE_{}", suffix.to_ascii_uppercase());
                assert_eq!(
                    ty.trim_end_matches(')'),
                    want,
                    "{} {macro_name}({name}",
                    file.name
                );
                name.to_owned()
            })
            .collect()
    }

    fn suffixes(has: impl Fn(&Format) -> bool) -> BTreeSet<String> {
        with(has).map(kernel_suffix).collect()
    }

    /// Each claim of the table has its instance in the kernel sources, and each instance
    /// there is claimed: the table is the whole truth about which entry points exist.
    #[test]
    fn table_matches_the_kernel_instances() {
        for (file, macro_name, has) in [
            (
                &MMVQ,
                "MMVQ_FORMAT",
                (|f: &Format| f.matvec) as fn(&Format) -> bool,
            ),
            (&MMVQ, "MMVQ_PAIR_ENTRIES", |f| f.matvec),
            (&MMVQ, "MMVQ_WIDE_FORMAT", |f| f.matvec_wide),
            (&MMVQ_MMA, "MMA_MV_FORMAT", |f| f.matvec_mma),
            (&MMVQ_STAGED, "STG_FORMAT", |f| f.matvec_mma),
            (&MMVQ_STAGED, "STG_BLOCKS_FORMAT", |f| f.gemm_blocks),
            (&MMQ, "MMQ_FORMAT", |f| f.gemm),
            (&MMQ, "MMQ_BLOCKS_ENTRY", |f| f.gemm_blocks),
            (&MOE_GEMM, "MOE_ENTRIES", |f| f.experts),
            (&MOE_DECODE, "MOE_FORMAT", |f| f.experts),
            (&EMBED, "EMBED_INSTANCE", |f| f.embed),
            (&GEMM_WGMMA, "DEQUANT_F16_INSTANCE", |f| f.gemm_f16),
        ] {
            let found: BTreeSet<String> = instances(file, macro_name)
                .into_iter()
                .filter(|n| !n.starts_with("narrow_"))
                .collect();
            assert_eq!(found, suffixes(has), "{} {macro_name}", file.name);
        }
        // moe_decode.cu's narrow walks (FERROLM_MMVQ_WIDE=0).
        let narrow: BTreeSet<String> = instances(&MOE_DECODE, "MOE_FORMAT")
            .iter()
            .filter_map(|n| n.strip_prefix("narrow_").map(str::to_owned))
            .collect();
        assert_eq!(narrow, suffixes(|f| f.experts_narrow));
        // The CUDA-core GEMMs by entry point and type.
        let small: BTreeSet<String> = MMQ
            .source
            .lines()
            .filter_map(|l| l.strip_prefix("MMQ_SMALL_ENTRY("))
            .map(|args| args.trim_end_matches(')').replace(' ', ""))
            .collect();
        let want: BTreeSet<String> = small_gemms()
            .map(|(ty, name)| format!("{name},GGML_TYPE_{}", ty.name().to_ascii_uppercase()))
            .collect();
        assert_eq!(small, want);
        // The float kernels take F32 only.
        assert_eq!(with(|f| f.float).collect::<Vec<_>>(), [GgmlType::F32]);
        for name in ["moe_f32_gate_up(", "moe_f32_down("] {
            assert!(MOE_GEMM.source.contains(name), "{name}");
        }
    }

    /// What the families build on: a GEMM and the experts only where a mat-vec holds the
    /// weights, the extra entry points only beside the main ones, one row a format.
    #[test]
    fn rows_are_consistent() {
        let types: BTreeSet<_> = FORMATS.iter().map(|f| f.ty as u32).collect();
        assert_eq!(types.len(), FORMATS.len(), "a format twice");
        for f in FORMATS {
            assert!(!f.gemm || f.matvec, "{}", f.ty);
            assert!(!f.experts || f.matvec, "{}", f.ty);
            assert!(!f.experts_narrow || f.experts, "{}", f.ty);
            assert!(!f.matvec_wide || f.matvec, "{}", f.ty);
            assert!(!f.matvec_mma || f.matvec, "{}", f.ty);
            assert!(!f.gemm_blocks || f.gemm, "{}", f.ty);
            assert!(f.small_gemm.is_none() || f.gemm, "{}", f.ty);
            // The eight-lane formats' CUDA-core kernels are the lane kernels.
            let lanes_kernel = f.small_gemm.is_some_and(|n| n.ends_with("_lanes"));
            assert_eq!(f.lanes, lanes_kernel, "{}", f.ty);
            assert!(!(f.float && f.matvec), "{}", f.ty);
            assert!(!f.gemm_f16 || f.gemm, "{}", f.ty);
        }
        assert!(has(GgmlType::Q4K, |f| f.matvec_wide));
        assert!(!has(GgmlType::Bf16, |f| f.embed || f.matvec || f.float));
    }
}
