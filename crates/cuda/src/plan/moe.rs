//! The plan's answers for MoE layers: the expert path of a ubatch (decode kernels, tensor-core
//! mat-vec, grouped int8 or f16 GEMMs), the router's kernel and its fusions.

use super::*;

impl Plan {
    /// Whether the experts of `s` take the f16 warpgroup-MMA GEMMs (`FERROLM_GEMM_F16`,
    /// Hopper): as [`Plan::f16_gemm`] for each of gate, up and down, with at least
    /// [`F16_EXPERTS_MIN_PAIRS`] pairs an expert on average ([`F16_UNPACKED_EXPERTS_MIN_PAIRS`]
    /// where gate and up are unpacked; `FERROLM_F16_EXPERTS_PAIRS`), and within the grouped
    /// scratch's pairs and widths. gpt-oss's biases and swiglu_oai go in the SwiGLU and
    /// unsort kernels around the GEMMs.
    pub fn f16_experts(&self, s: &MoeShape) -> bool {
        // FERROLM_MOE_GROUPED=0 (the per-expert launches, for bisecting) stays on the int8 GEMM.
        self.switches.moe_grouped
            && !s.is_float()
            && s.tokens * s.n_used >= self.f16_experts_min_pairs(s) * s.n_expert
            && s.tokens * s.n_used <= crate::ops::MOE_MAX_PAIRS
            // Its index and combine are the grouped GEMM's, whose scratch wants these widths.
            && MoeGemm::supports_widths(s.gate, s.down, s.n_embd, s.n_ff)
            && self.f16_gemm(s.gate, s.n_ff, s.n_embd, s.tokens)
            && self.f16_gemm(s.up, s.n_ff, s.n_embd, s.tokens)
            && self.f16_gemm(s.down, s.n_embd, s.n_ff, s.tokens)
    }

    /// Whether the f16 experts' GEMM unpacks `ty` weights itself ([`GemmWgmma::unpacks`]:
    /// Q4_K) rather than multiplying an f16 copy expanded first (`FERROLM_GEMM_F16_UNPACK`):
    /// the same bits, without a pass over every expert's weights into memory and back. Dense
    /// products are always expanded: each of their token tiles would unpack the weight again,
    /// which on the H200 (docs/perf.md, session 19) made Qwen3-30B-A3B's attention products
    /// 1.45× slower than expanding once at 2,048 tokens and 1.56× at 512.
    pub fn f16_unpack(&self, ty: GgmlType) -> bool {
        self.switches.gemm_f16_unpack && GemmWgmma::unpacks(ty)
    }

    /// Whether the f16 experts' GEMMs unpack gate and up (both), and down, themselves
    /// ([`Plan::f16_unpack`]).
    pub fn f16_experts_unpack(&self, x: &crate::ops::MoeExperts) -> [bool; 2] {
        [
            self.f16_unpack(x.gate.ty) && self.f16_unpack(x.up.ty),
            self.f16_unpack(x.down.ty),
        ]
    }

    /// The fewest pairs an expert, on average, for the f16 experts' GEMMs: fewer where gate
    /// and up are unpacked in the GEMM (no expansion to repay), unless
    /// `FERROLM_F16_EXPERTS_PAIRS` says.
    fn f16_experts_min_pairs(&self, s: &MoeShape) -> usize {
        let unpacked = self.f16_unpack(s.gate) && self.f16_unpack(s.up);
        self.switches.f16_experts_pairs.unwrap_or(if unpacked {
            F16_UNPACKED_EXPERTS_MIN_PAIRS
        } else {
            F16_EXPERTS_MIN_PAIRS
        })
    }

    /// The order of the expert GEMMs of an `n`-token ubatch: the CPU's expert matmuls take
    /// blocks.
    pub fn expert_order(&self, ty: GgmlType, cols: usize, n: usize) -> MmqOrder {
        if self.integer_scales(ty, cols, n) {
            MmqOrder::Blocks
        } else {
            MmqOrder::Subs
        }
    }

    /// The MoE FFN of a ubatch: the decode kernels for a few tokens of int8 experts they
    /// take, and in slices for more tokens of int8 experts whose widths the GEMM does not
    /// take; the expert GEMMs otherwise (float experts: their f32 kernels, any token count).
    pub fn moe(&self, s: &MoeShape) -> MoePath {
        if self.f16_experts(s) {
            return MoePath::F16;
        }
        let decode = !s.is_float() && MoeDecodeWork::supports(s.n_used, s.n_ff);
        let gemm = self.expert_gemm(s);
        if matches!(
            gemm,
            ExpertGemm::Int8 {
                matvec_mma: Some(_),
                ..
            }
        ) {
            MoePath::Gemm(gemm)
        } else if decode && s.tokens <= MOE_DECODE_MAX_TOKENS {
            MoePath::MatVec(self.expert_matvec(s))
        } else if decode && !MoeGemm::supports_widths(s.gate, s.down, s.n_embd, s.n_ff) {
            MoePath::MatVecSlices(self.expert_matvec(s))
        } else {
            MoePath::Gemm(gemm)
        }
    }

    /// How the decode kernels run `s` (fused where gate and up share a format).
    pub fn expert_matvec(&self, s: &MoeShape) -> ExpertMatVec {
        ExpertMatVec {
            fused: self.switches.moe_fused && s.gate == s.up,
            wide: self.switches.mmvq_wide,
            x_quant: self.act_quant(s.gate, s.n_embd),
            h_quant: self.act_quant(s.down, s.n_ff),
            gate_up_warps: self.moe_gate_up_warps(s.tokens),
            down_prefetch: self.switches.moe_down_prefetch && self.device.cc.0 >= 9,
            h_in_gate_up: self.switches.moe_h_in_gate_up,
            rows_l1: self.switches.moe_rows_l1,
            tight_gate_up: self.switches.moe_tight & 1 != 0,
            tight_down: self.switches.moe_tight & 2 != 0,
            down_early: self.switches.moe_down_early,
            bulk_l2: self.switches.moe_bulk_l2 && self.device.cc.0 >= 9,
            down_direct: self.switches.moe_down_direct,
            gate_up_direct: self.switches.moe_gate_up_direct,
            lean: self.switches.moe_lean,
        }
    }

    /// Warps a block of the fused gate/up kernel for `tokens` tokens
    /// ([`MOE_GATE_UP_WARPS_ONE`] at one, the kernel's most otherwise;
    /// `FERROLM_MOE_GATE_UP_WARPS` sets it).
    pub fn moe_gate_up_warps(&self, tokens: usize) -> u32 {
        match self.switches.moe_gate_up_warps {
            Some(w) => w as u32,
            None if tokens == 1 => MOE_GATE_UP_WARPS_ONE,
            None => MOE_DECODE_WARPS,
        }
    }

    /// How the expert GEMMs run `s`.
    pub fn expert_gemm(&self, s: &MoeShape) -> ExpertGemm {
        if s.is_float() {
            return ExpertGemm::Float;
        }
        let (gate_up, down) = (
            self.expert_order(s.gate, s.n_embd, s.tokens),
            self.expert_order(s.down, s.n_ff, s.tokens),
        );
        let subs = gate_up == MmqOrder::Subs && down == MmqOrder::Subs;
        ExpertGemm::Int8 {
            grouped: self.switches.moe_grouped,
            x_quant: self.act_quant(s.gate, s.n_embd),
            h_quant: self.act_quant(s.down, s.n_ff),
            gate_up,
            down,
            matvec_mma: if subs { self.expert_mma_tiles(s) } else { None },
            index_one_block: self.moe_step_fuse()
                && s.tokens * s.n_used <= MOE_INDEX_ONE_BLOCK_PAIRS
                && s.n_expert <= MOE_INDEX_ONE_BLOCK_EXPERTS,
        }
    }

    /// Whether the MoE launch cuts of a batched step ([`ExpertGemm::Int8`]'s `index_one_block`,
    /// and the experts' x from the norm's blocks) are taken: decode fusions
    /// (`FERROLM_CUDA_FUSE`) with a switch of their own (`FERROLM_MOE_STEP_FUSE`), the same
    /// bytes either way.
    pub fn moe_step_fuse(&self) -> bool {
        self.switches.fuse && self.switches.moe_step_fuse
    }

    /// Whether a ubatch's experts take the tensor-core mat-vec (`FERROLM_MOE_MMA`), and if so
    /// its column tiles of 8 pairs a pass: passes of several sequences only (its contract is
    /// the tensor-core one), 2 tokens or more, both formats in the kernel
    /// ([`MmvqMma::supports`]), at most [`MOE_MMA_MAX_PAIRS`] pairs an expert on average
    /// unless `FERROLM_MOE_MMA_PAIRS` says otherwise (the GEMM tiles above). One column tile a
    /// pass, unless `FERROLM_MOE_MMA_TILES` says: an expert's pairs past the tiles take another
    /// pass over its weights.
    pub fn expert_mma_tiles(&self, s: &MoeShape) -> Option<usize> {
        let pairs = s.tokens * s.n_used;
        let take = self.sequence_batches
            && self.switches.moe_mma
            && s.tokens >= 2
            && s.gate == s.up
            && pairs <= self.switches.moe_mma_pairs.unwrap_or(MOE_MMA_MAX_PAIRS) * s.n_expert
            && MmvqMma::supports(s.gate, s.n_embd)
            && MmvqMma::supports(s.down, s.n_ff);
        take.then(|| self.switches.moe_mma_tiles.unwrap_or(1))
    }

    /// The router logits of `n` tokens of `n_embd`: the mat-vec kernel for a few tokens of
    /// rows it can stage in shared memory, with 16-byte loads (and the top-k in the same launch
    /// among the decode fusions); the f32 GEMM otherwise. Both give the CPU's bits.
    pub fn router_logits(&self, n: usize, n_embd: usize) -> RouterLogits {
        let stages = n_embd.is_multiple_of(4) && n_embd <= ROUTER_SMALL_MAX_EMBD;
        if n <= ROUTER_SMALL_N && stages && self.switches.fuse {
            RouterLogits::MatVecTopk
        } else if n <= ROUTER_SMALL_N && stages {
            RouterLogits::MatVec
        } else {
            RouterLogits::Gemm {
                token_warps: self.gemm_f32_token_warps(n),
            }
        }
    }

    /// Whether the norm before an MoE FFN of `n` tokens of `n_embd` runs in the router's
    /// launch (`add_rms_norm_route_small`, the same bits as the fused norm and then
    /// `moe_route_small`): where both of those would run, the norm's block is one the
    /// router's blocks can take, and the tokens are at most [`NORM_ROUTE_MAX_ROWS`] (every
    /// block of that launch takes every row's norm, one row after another).
    pub fn norm_route(&self, n: usize, n_embd: usize) -> bool {
        self.switches.norm_route
            && n <= self.switches.norm_route_rows.unwrap_or(NORM_ROUTE_MAX_ROWS)
            && self.fused_norm(n_embd)
            && self.router_logits(n, n_embd) == RouterLogits::MatVecTopk
    }

    /// Whether that launch takes one token's top-k by its last block's threads together
    /// (`topk_token_block`) rather than by one warp: the same bits.
    pub fn route_topk_block(&self) -> bool {
        self.switches.route_topk_block
    }

    /// Whether that launch's last block writes one token's residual x + add back from the
    /// sums its blocks kept in shared memory at the norm: the same bits.
    pub fn route_keep_sums(&self) -> bool {
        self.switches.route_keep_sums
    }

    /// Whether that launch's blocks write the norm's outputs a share each, after their counts,
    /// where block 0 wrote them all before its own: the same bits.
    pub fn route_spread_out(&self) -> bool {
        self.switches.route_spread_out
    }

    /// The blocks of the one cluster that launch takes (`add_rms_norm_route_cluster`, the same
    /// bits) for `n` tokens of `n_embd` and `n_expert` experts, where [`Self::norm_route`] runs:
    /// on sm_90 and later, with the switch on, where a block's share of the router's rows and
    /// the tokens' normed rows fit its shared memory. `None`: a block an expert.
    pub fn norm_route_cluster(&self, n: usize, n_embd: usize, n_expert: usize) -> Option<u32> {
        if !self.switches.norm_route_cluster || self.device.cc.0 < 9 || n_expert == 0 {
            return None;
        }
        let per = n_expert.div_ceil(ROUTE_CLUSTER_BLOCKS);
        let blocks = n_expert.div_ceil(per);
        ((per + n) * n_embd * 4 <= ROUTE_CLUSTER_STAGE_BYTES).then_some(blocks as u32)
    }
}
