#!/bin/bash
# What each kernel costs qwen3-8b's chain (tools/device/chain_costs.sh): one sequence's tg128,
# then a step of 64 sequences (S_TG, issue 16's bar). Writes under $OUT. Usage, from the repo
# root, .device-carry/ from tools/device/pack.sh: [BATCH_ONLY=1] bash tools/device/chain_q8b.sh
[ -n "$BATCH_ONLY" ] || MODELS=qwen3-8b SKIPS="add_rms_norm_q8_1 mmvq_wide_triple qk_norm_rope kv_store attn_decode
mmvq_wide_glu quantize_q8_k mmvq_wide_q" bash tools/device/chain_costs.sh
MODELS=qwen3-8b BATCH=64 SKIPS="add_rms_norm rope,qk_norm_rope kv_store attn_decode_rows matvec_f16_q4_k
matvec_f16_q6_k gemm_wgmma swiglu round_f16 mmvq quantize" bash tools/device/chain_costs.sh
