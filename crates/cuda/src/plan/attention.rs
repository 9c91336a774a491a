//! The plan's answers for attention: the kernel of a ubatch, the decode splits of a sequence
//! and of a batched step's rows, and the paged cache's block size.

use super::*;

impl Plan {
    /// Attention of a ubatch of `rows` query rows over a cache of `kv`: flash-decoding up to
    /// [`DECODE_MAX_ROWS`], a prefill kernel above; over a block cache (`-ctk q8_0`) the
    /// scalar prefill, the one that reads its blocks (dequantized per element, f32 after); over
    /// an f32 cache see [`Plan::prefill_kernel_f32`].
    ///
    /// Decode by KV group (`group` query heads a KV head) where an f16 cache and the group size
    /// have a kernel, unless `FERROLM_ATTN_GROUPED=0`; on the tensor cores where
    /// the shape has them, unless `FERROLM_ATTN_TC=0`. Every head size of `ATTN_HEAD_DIMS` has
    /// every other decode kernel; for prefill see [`Plan::prefill_kernel`].
    pub fn attention(&self, rows: usize, kv: KvFormat, group: usize, head_dim: usize) -> Attn {
        if rows <= DECODE_MAX_ROWS {
            let grouped =
                self.switches.attn_grouped && kv == KvFormat::F16 && ATTN_GROUPS.contains(&group);
            let kernel = if grouped && self.attn_tensor_cores(group, head_dim) {
                DecodeKernel::GroupTensorCores
            } else {
                DecodeKernel::from_grouped(grouped)
            };
            Attn::Decode {
                fused_combine: self.switches.fuse,
                kernel,
            }
        } else if kv.is_block() {
            Attn::Prefill(PrefillKernel::Scalar)
        } else if kv == KvFormat::F32 {
            Attn::Prefill(self.prefill_kernel_f32(rows))
        } else {
            Attn::Prefill(self.prefill_kernel(rows, head_dim))
        }
    }

    /// Queries rounded through Q8_0 before attention over a quantized cache, as the CPU (and
    /// llama.cpp) quantizes them for its integer dots with q8_0/q4_0 keys; not under
    /// `FERROLM_ATTN=f32`, which on the CPU too keeps them f32.
    pub fn round_query(&self, kv: KvFormat) -> bool {
        kv.is_block() && self.switches.attn_ggml_small
    }

    /// The prefill kernel over an f32 cache (`-ctk f32`, the CPU's f32 path at every size):
    /// the CPU's f32 order below [`REF_MAX_ROWS`], the scalar prefill from there or when
    /// `FERROLM_ATTN_MMA` forces a kernel (the tensor-core and ggml-order kernels read f16
    /// only). Both are f32 throughout; only the order of the sums differs.
    pub fn prefill_kernel_f32(&self, n_q: usize) -> PrefillKernel {
        if self.switches.attn_mma.is_none() && n_q < REF_MAX_ROWS {
            PrefillKernel::F32Ref
        } else {
            PrefillKernel::Scalar
        }
    }

    /// The prefill kernel for `n_q` query rows of heads of `head_dim` unless `FERROLM_ATTN_MMA`
    /// forces one: below [`GGML_SMALL_ROWS`], ggml's arithmetic unless `FERROLM_ATTN=f32`; then
    /// the CPU's f32 arithmetic below [`REF_MAX_ROWS`]; the tensor-core kernel from there. Heads
    /// the tensor-core kernel does not take (192, 256, past [`MMA_HEAD_DIMS`]: its Q fragments
    /// and O accumulator would not fit a thread's registers) run the scalar prefill wherever it
    /// would have run, forced or not: the same f32 formula as the reference paths.
    pub fn prefill_kernel(&self, n_q: usize, head_dim: usize) -> PrefillKernel {
        let kernel = match self.switches.attn_mma {
            Some(true) => PrefillKernel::Mma,
            Some(false) => PrefillKernel::Scalar,
            None if n_q >= REF_MAX_ROWS => PrefillKernel::Mma,
            None if n_q < GGML_SMALL_ROWS && self.switches.attn_ggml_small => PrefillKernel::F16Ref,
            None => PrefillKernel::F32Ref,
        };
        if kernel == PrefillKernel::Mma && !MMA_HEAD_DIMS.contains(&head_dim) {
            PrefillKernel::Scalar
        } else {
            kernel
        }
    }

    /// Whether the decode rows of several sequences (each at most [`DECODE_MAX_ROWS`] rows)
    /// take one attention launch per layer, each row reading its own sequence's cache
    /// (`attn_decode_rows_*`): f16 caches, head sizes and group sizes it has instances for,
    /// unless `FERROLM_ATTN_BATCHED=0`. Sequences of more rows keep their prefill kernels.
    pub fn batched_attention(
        &self,
        kv: KvFormat,
        n_head: usize,
        n_kv_head: usize,
        head_dim: usize,
    ) -> bool {
        self.switches.attn_batched
            && kv == KvFormat::F16
            && AttentionRows::supports(n_head, n_kv_head, head_dim)
    }

    /// Whether decode by KV group (one sequence's or a batch's rows) takes the tensor-core
    /// kernels (unless `FERROLM_ATTN_TC=0`): `group` query heads
    /// a KV head of `head_dim` that they have ([`DecodeKernel::has_tensor_cores`]). Contract:
    /// the group kernels' formula with q and the weights carried as two f16 terms each, within
    /// `cuda-parity`'s f32 attention bound.
    pub fn attn_tensor_cores(&self, group: usize, head_dim: usize) -> bool {
        self.switches.attn_tc && DecodeKernel::has_tensor_cores(group, head_dim)
    }

    /// Splits of one row of the batched decode attention with `n_keys` keys: one a
    /// [`ROWS_SPLIT_KEYS`] keys, at most `cap` (its sequence's partials). From the row's own key
    /// count only, so that a row's bits never depend on what else shares its batch; a batch of
    /// many rows fills the GPU with rows rather than with splits.
    pub fn rows_splits(&self, n_keys: usize, cap: usize) -> usize {
        let keys = self.switches.rows_split_keys.unwrap_or(ROWS_SPLIT_KEYS);
        n_keys.div_ceil(keys).clamp(1, cap.max(1))
    }

    /// Positions a block of the paged KV cache of a sequence of up to `n_ctx` positions
    /// (`FERROLM_KV_BLOCK`, else [`KV_BLOCK`]), a power of two; never more than `n_ctx`
    /// rounded up to one (at least 16), so that a block as large as any context makes one
    /// block a sequence.
    pub fn kv_block(&self, n_ctx: usize) -> usize {
        let most = n_ctx.next_power_of_two().max(16);
        self.switches.kv_block.unwrap_or(KV_BLOCK).min(most)
    }

    /// Whether sequences may share one pool of KV blocks (`FERROLM_KV_POOL`).
    pub fn kv_pool(&self) -> bool {
        self.switches.kv_pool
    }

    /// Flash-decoding splits for a cache of `n_ctx` positions and `n_kv_head` KV heads (a block
    /// per split and KV head, or query head): about [`DECODE_BLOCKS_PER_SM`] blocks an SM, but no
    /// split under [`DECODE_MIN_SPLIT_KEYS`] keys at full context, except that a short context
    /// still takes up to [`DECODE_SHORT_SPLITS`] splits of [`DECODE_SHORT_SPLIT_KEYS`] or more;
    /// at most [`ATTN_MAX_SPLITS`].
    /// `FERROLM_ATTN_SPLIT_KEYS` fixes the keys a split instead. At 16k keys on the H200 the
    /// best fixed choice was 256 keys for 8 KV heads and 512 for 16: 512 blocks either way
    /// (docs/perf.md, "Issue 15, step 3").
    pub fn decode_splits(&self, n_ctx: usize, n_kv_head: usize) -> usize {
        let splits = match self.switches.attn_split_keys {
            Some(keys) => n_ctx.div_ceil(keys),
            None => n_ctx
                .div_ceil(DECODE_MIN_SPLIT_KEYS)
                .max(
                    n_ctx
                        .div_ceil(DECODE_SHORT_SPLIT_KEYS)
                        .min(DECODE_SHORT_SPLITS),
                )
                .min((DECODE_BLOCKS_PER_SM * self.device.sms).div_ceil(n_kv_head.max(1))),
        };
        splits.clamp(1, ATTN_MAX_SPLITS)
    }

    /// Whether decode attention's splits are combined in the walk's launch, by a KV group's
    /// last block ([`Attn::Decode`]'s `fused_combine` must allow it too), rather than in a
    /// launch of their own (`attn_decode_combine`, a block a query head): only under
    /// `FERROLM_ATTN_COMBINE_WALK=1`. In the walk a group's last block combines while the
    /// other SMs idle: at 66 splits (qwen3-8b at 16,384 keys, H100, session 31, ncu) the walk
    /// took 56.0 µs with the one-head-at-a-time combine, 35.4 without it, the own launch 8.3;
    /// with the heads side by side (`combine_heads_wide`) the two were level in a token, and
    /// at tg128 the own launch won (qwen3-30b-a3b +1.5-2%, olmoe-1b-7b +1%). The same bits
    /// either way.
    pub fn combine_in_walk(&self) -> bool {
        self.switches.attn_combine_walk
    }

    /// Whether decode attention's own combine launch writes its output quantized as Q8_K as
    /// well (for the product after it, whose quantize launch it saves: the same codes), where
    /// that product takes Q8_K and the head size has the kernel; off under
    /// `FERROLM_ATTN_COMBINE_Q8K=0`.
    pub fn combine_quantizes(&self) -> bool {
        self.switches.attn_combine_q8k
    }

    /// Flash-decoding splits of a layer whose cache's work holds `cap` ([`Self::decode_splits`]
    /// of its context): a sliding window's keys are split as a context of the window's length
    /// would be (so that a window of 512 at a 32k context is not cut into slivers of a few keys
    /// whose combine costs more than the walk), never more than `cap`; without a window, `cap`.
    pub fn window_splits(&self, cap: usize, window: Option<usize>, n_kv_head: usize) -> usize {
        match window {
            Some(w) => self.decode_splits(w, n_kv_head).min(cap).max(1),
            None => cap,
        }
    }
}
