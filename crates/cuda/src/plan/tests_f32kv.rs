//! The plan's answers for an f32 KV cache (`-ctk f32 -ctv f32`, the F32 goldens'): kernels that
//! read f32 elements everywhere (flash-decoding a block per query head, the CPU-order and
//! scalar prefills), never the f16-only ones, and no Q8_0 rounding of the queries.

use super::tests::plan;
use super::*;
use PrefillKernel::{F32Ref, Scalar};

#[test]
fn f32_cache_attention_reads_f32() {
    use crate::ops::ATTN_HEAD_DIMS;
    let f32 = KvFormat::F32;
    let (p, mma, scalar) = (
        plan(&[]),
        plan(&[("FERROLM_ATTN_MMA", "1")]),
        plan(&[("FERROLM_ATTN_MMA", "0")]),
    );
    let decode = Attn::Decode {
        fused_combine: true,
        kernel: DecodeKernel::Split,
    };
    for d in ATTN_HEAD_DIMS {
        // Decode a block per query head at every group size (the grouped kernel reads f16).
        for group in [1, 4, 8] {
            assert_eq!(p.attention(1, f32, group, d), decode, "{d}");
            assert_eq!(p.attention(DECODE_MAX_ROWS, f32, group, d), decode, "{d}");
        }
        // The CPU's f32 order where the f16 cache takes ggml's (under 64 rows) or the CPU's
        // f32 order; the scalar prefill where it would take the tensor cores.
        for n in [
            DECODE_MAX_ROWS + 1,
            GGML_SMALL_ROWS - 1,
            GGML_SMALL_ROWS,
            100,
        ] {
            assert_eq!(p.attention(n, f32, 4, d), Attn::Prefill(F32Ref), "{d} {n}");
        }
        for n in [REF_MAX_ROWS, 2048] {
            assert_eq!(p.attention(n, f32, 4, d), Attn::Prefill(Scalar), "{d} {n}");
        }
        // A forced kernel: the scalar one, which reads f32 (the tensor cores do not).
        for n in [9, 100, 2048] {
            assert_eq!(
                mma.attention(n, f32, 4, d),
                Attn::Prefill(Scalar),
                "{d} {n}"
            );
            assert_eq!(
                scalar.attention(n, f32, 4, d),
                Attn::Prefill(Scalar),
                "{d} {n}"
            );
        }
        assert!(f32.holds(d));
    }
    // Every kernel the plan picks reads the cache; the f16-only ones refuse it.
    for n in [1, 9, 100, 300, 2048] {
        if let Attn::Prefill(k) = p.attention(n, f32, 4, 128) {
            assert!(k.reads(f32), "{n}");
        }
    }
    assert!(!PrefillKernel::Mma.reads(f32) && !PrefillKernel::F16Ref.reads(f32));
    assert!(!F32Ref.reads(KvFormat::Q8_0) && Scalar.reads(KvFormat::Q4_0));
}

/// f32 is neither a block format nor f16: no Hadamard rotation, no Q8_0 queries, no batched
/// rows (attention_rows.cu reads f16).
#[test]
fn f32_cache_is_not_a_block_format() {
    let p = plan(&[]);
    assert!(!KvFormat::F32.is_block() && !KvFormat::F16.is_block());
    assert!(KvFormat::Q8_0.is_block() && KvFormat::Q4_0.is_block());
    assert!(!p.round_query(KvFormat::F32));
    assert!(!p.batched_attention(KvFormat::F32, 9, 3, 64));
    assert_eq!(KvFormat::F32.row_bytes(64), 256);
    assert_eq!(KvFormat::F32.name(), "f32");
}
