//! Token texts that llama.cpp (`llama_vocab::impl::load`) recognises as special when the
//! metadata names no id.
//!
//! Where several of a list exist in one vocabulary, llama.cpp takes whichever its hash map
//! yields first; we take the first in list order, which is deterministic and prefers the chat
//! end-of-turn marker (`<|im_end|>` over `<|endoftext|>`).

#[rustfmt::skip]
pub(crate) const EOT_TEXTS: &[&str] = &[
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
    "<EOT>", "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>", "<end_of_utterance>",
];
pub(crate) const EOM_TEXTS: &[&str] = &["<|eom_id|>"];
#[rustfmt::skip]
pub(crate) const FIM_PRE_TEXTS: &[&str] = &[
    "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>",
    "<|code_prefix|>", "<|prefix|>",
];
#[rustfmt::skip]
pub(crate) const FIM_SUF_TEXTS: &[&str] = &[
    "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>",
    "<|code_suffix|>", "<|suffix|>",
];
#[rustfmt::skip]
pub(crate) const FIM_MID_TEXTS: &[&str] = &[
    "<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>",
    "<|code_middle|>", "<|middle|>",
];
pub(crate) const FIM_PAD_TEXTS: &[&str] =
    &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"];
pub(crate) const FIM_REP_TEXTS: &[&str] = &[
    "<|fim_repo|>",
    "<|repo_name|>",
    "<fim-repo>",
    "<REPO>",
    "<reponame>",
];
pub(crate) const FIM_SEP_TEXTS: &[&str] = &["<|file_sep|>"];

/// Every token with one of these texts ends generation.
#[rustfmt::skip]
pub(crate) const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<｜end▁of▁sentence｜>", "[e~[",
];
