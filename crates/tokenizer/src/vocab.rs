//! The vocabulary read from GGUF metadata: token texts, scores and attributes, the special ids,
//! and the rules by which llama.cpp derives end-of-generation tokens from token texts.

use crate::error::{Result, TokenizerError};
use crate::known::*;
use ferrolm_gguf::{GgufFile, Value};
use std::collections::{BTreeSet, HashMap};

/// Token attribute bits, as llama.cpp's `llama_token_attr`.
pub(crate) mod attr {
    pub const UNKNOWN: u16 = 1 << 0;
    pub const UNUSED: u16 = 1 << 1;
    pub const NORMAL: u16 = 1 << 2;
    pub const CONTROL: u16 = 1 << 3;
    pub const USER_DEFINED: u16 = 1 << 4;
    pub const BYTE: u16 = 1 << 5;
    pub const LSTRIP: u16 = 1 << 7;
    pub const RSTRIP: u16 = 1 << 8;

    /// From a `tokenizer.ggml.token_type` value (llama.cpp's `llama_token_type`).
    pub fn from_type(t: i128) -> u16 {
        match t {
            1 => NORMAL,
            2 => UNKNOWN,
            3 => CONTROL,
            4 => USER_DEFINED,
            5 => UNUSED,
            6 => BYTE,
            _ => 0, // UNDEFINED and anything newer: rendered as nothing, like llama.cpp
        }
    }
}

/// The special token ids a model declares or that are detected from token texts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpecialTokens {
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub eot: Option<u32>,
    pub eom: Option<u32>,
    pub unk: Option<u32>,
    pub sep: Option<u32>,
    pub pad: Option<u32>,
    pub mask: Option<u32>,
    pub fim_pre: Option<u32>,
    pub fim_suf: Option<u32>,
    pub fim_mid: Option<u32>,
    pub fim_pad: Option<u32>,
    pub fim_rep: Option<u32>,
    pub fim_sep: Option<u32>,
}

pub(crate) struct Vocab {
    pub tokens: Vec<String>,
    pub scores: Vec<f32>,
    pub attrs: Vec<u16>,
    pub index: HashMap<String, u32>,
    pub special: SpecialTokens,
    pub eog: BTreeSet<u32>,
    /// Tokens that `tokenizer_st_partition` looks for in text: control, user-defined and
    /// unknown tokens, longest first.
    pub special_cache: Vec<u32>,
}

/// Reads an optional key, treating a missing key as `None` and a wrong type as an error.
fn opt<'a>(f: &'a GgufFile, key: &str) -> Option<&'a Value> {
    f.get(key)
}

fn opt_bool(f: &GgufFile, key: &str) -> Result<Option<bool>> {
    opt(f, key)
        .map(|_| f.get_bool(key))
        .transpose()
        .map_err(Into::into)
}

fn opt_id(f: &GgufFile, key: &str) -> Result<Option<u64>> {
    opt(f, key)
        .map(|_| f.get_u64(key))
        .transpose()
        .map_err(Into::into)
}

fn bad(key: &str, what: String) -> TokenizerError {
    TokenizerError::Metadata {
        key: key.to_owned(),
        what,
    }
}

/// A per-token numeric array, checked to cover every token.
fn per_token<T>(
    f: &GgufFile,
    key: &str,
    n: usize,
    conv: impl Fn(&Value) -> Option<T>,
) -> Result<Option<Vec<T>>> {
    if opt(f, key).is_none() {
        return Ok(None);
    }
    let items = f.get_array(key)?;
    if items.len() < n {
        return Err(bad(key, format!("{} entries for {n} tokens", items.len())));
    }
    let out = items[..n]
        .iter()
        .map(|v| conv(v).ok_or_else(|| bad(key, format!("unexpected element {v}"))))
        .collect::<Result<Vec<T>>>()?;
    Ok(Some(out))
}

/// Which family of defaults applies (llama.cpp's per-model-type defaults).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Family {
    Spm,
    Bpe,
}

/// Flags that depend on the family and the pre-tokenizer, before metadata overrides them.
pub(crate) struct Defaults {
    pub add_bos: bool,
    pub no_bos: bool,
}

pub(crate) struct Loaded {
    pub vocab: Vocab,
    pub add_bos: bool,
    pub add_eos: bool,
    pub add_space_prefix: bool,
}

pub(crate) fn load(f: &GgufFile, family: Family, defaults: Defaults) -> Result<Loaded> {
    let texts = f.get_str_array("tokenizer.ggml.tokens")?;
    let n = texts.len();
    let scores = per_token(f, "tokenizer.ggml.scores", n, |v| {
        v.as_f64().map(|x| x as f32)
    })?
    .unwrap_or_else(|| vec![0.0; n]);
    let attrs = per_token(f, "tokenizer.ggml.token_type", n, |v| {
        v.as_int().map(attr::from_type)
    })?
    .unwrap_or_else(|| vec![attr::NORMAL; n]);

    let mut tokens = Vec::with_capacity(n);
    let mut index = HashMap::with_capacity(n);
    for (i, t) in texts.into_iter().enumerate() {
        // llama.cpp renames empty tokens so that every text is unique and non-empty.
        let t = if t.is_empty() {
            format!("[EMPTY_{i}]")
        } else {
            t.to_owned()
        };
        if let Some(prev) = index.insert(t.clone(), i as u32) {
            return Err(bad(
                "tokenizer.ggml.tokens",
                format!("duplicate token {t:?} at ids {prev} and {i}"),
            ));
        }
        tokens.push(t);
    }
    let mut vocab = Vocab {
        tokens,
        scores,
        attrs,
        index,
        special: SpecialTokens::default(),
        eog: BTreeSet::new(),
        special_cache: Vec::new(),
    };

    let in_range = |id: u32| ((id as usize) < n).then_some(id);
    let mut s = match family {
        Family::Spm => SpecialTokens {
            bos: in_range(1),
            eos: in_range(2),
            unk: in_range(0),
            ..Default::default()
        },
        Family::Bpe => SpecialTokens {
            bos: in_range(11),
            eos: in_range(11),
            ..Default::default()
        },
    };
    if defaults.no_bos {
        s.bos = None;
    }
    // An out-of-range id keeps the default, as llama.cpp does (it only warns). The deprecated
    // FIM keys come last and win, as in llama.cpp's list.
    let id = |key: &str| -> Result<Option<u32>> {
        let v = opt_id(f, &format!("tokenizer.ggml.{key}"))?;
        Ok(v.filter(|&i| i < n as u64).map(|i| i as u32))
    };
    macro_rules! read {
        ($($slot:ident: $key:literal),* $(,)?) => {$(
            if let Some(v) = id($key)? {
                s.$slot = Some(v);
            }
        )*};
    }
    read!(
        bos: "bos_token_id",
        eos: "eos_token_id",
        eot: "eot_token_id",
        eom: "eom_token_id",
        unk: "unknown_token_id",
        sep: "seperator_token_id", // sic: the key GGUF writers use
        pad: "padding_token_id",
        mask: "mask_token_id",
        fim_pre: "fim_pre_token_id",
        fim_suf: "fim_suf_token_id",
        fim_mid: "fim_mid_token_id",
        fim_pad: "fim_pad_token_id",
        fim_rep: "fim_rep_token_id",
        fim_sep: "fim_sep_token_id",
        fim_pre: "prefix_token_id",
        fim_suf: "suffix_token_id",
        fim_mid: "middle_token_id",
    );

    let add_bos = opt_bool(f, "tokenizer.ggml.add_bos_token")?.unwrap_or(defaults.add_bos);
    let add_eos = opt_bool(f, "tokenizer.ggml.add_eos_token")?.unwrap_or(false);
    let add_space_prefix =
        opt_bool(f, "tokenizer.ggml.add_space_prefix")?.unwrap_or(family == Family::Spm);
    if add_bos && s.bos.is_none() {
        return Err(bad(
            "tokenizer.ggml.add_bos_token",
            "is true, but tokenizer.ggml.bos_token_id is not set".into(),
        ));
    }
    if add_eos && s.eos.is_none() {
        return Err(bad(
            "tokenizer.ggml.add_eos_token",
            "is true, but tokenizer.ggml.eos_token_id is not set".into(),
        ));
    }

    vocab.detect_specials(&mut s);
    vocab.collect_eog(&s);
    vocab.special = s;
    vocab.build_special_cache();
    let name = f
        .get("general.name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_lowercase();
    if name.contains("phi-3") || name.contains("phi3") {
        vocab.phi3_rstrip();
    }
    Ok(Loaded {
        vocab,
        add_bos,
        add_eos,
        add_space_prefix,
    })
}

impl Vocab {
    /// The vocabulary of a `no_vocab` model.
    pub fn empty() -> Self {
        Self {
            tokens: Vec::new(),
            scores: Vec::new(),
            attrs: Vec::new(),
            index: HashMap::new(),
            special: SpecialTokens::default(),
            eog: BTreeSet::new(),
            special_cache: Vec::new(),
        }
    }

    pub fn id(&self, text: &str) -> Option<u32> {
        self.index.get(text).copied()
    }

    pub fn attr(&self, id: u32) -> u16 {
        self.attrs[id as usize]
    }

    fn force_control(&mut self, id: u32) {
        self.attrs[id as usize] |= attr::CONTROL;
    }

    /// Fills unset EOT/EOM/FIM ids from well-known token texts, marking them as control tokens.
    fn detect_specials(&mut self, s: &mut SpecialTokens) {
        for (slot, texts) in [
            (&mut s.eot, EOT_TEXTS),
            (&mut s.eom, EOM_TEXTS),
            (&mut s.fim_pre, FIM_PRE_TEXTS),
            (&mut s.fim_suf, FIM_SUF_TEXTS),
            (&mut s.fim_mid, FIM_MID_TEXTS),
            (&mut s.fim_pad, FIM_PAD_TEXTS),
            (&mut s.fim_rep, FIM_REP_TEXTS),
            (&mut s.fim_sep, FIM_SEP_TEXTS),
        ] {
            if slot.is_none() {
                if let Some(id) = texts.iter().find_map(|t| self.id(t)) {
                    *slot = Some(id);
                    self.force_control(id);
                }
            }
        }
    }

    fn collect_eog(&mut self, s: &SpecialTokens) {
        let mut eog: BTreeSet<u32> = [s.fim_pad, s.fim_rep, s.fim_sep]
            .into_iter()
            .flatten()
            .collect();
        for t in EOG_TEXTS {
            if let Some(id) = self.id(t) {
                eog.insert(id);
                self.force_control(id);
            }
        }
        // gpt-oss renders these structural tokens even when special tokens are hidden.
        for t in ["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"] {
            if let Some(id) = self.id(t) {
                self.attrs[id as usize] = attr::USER_DEFINED;
            }
        }
        eog.extend([s.eos, s.eot, s.eom].into_iter().flatten());
        let id = |t: &str| self.id(t).filter(|id| eog.contains(id));
        let (end, ret, call, calls, flush) = (
            id("<|end|>"),
            id("<|return|>"),
            id("<|call|>"),
            id("<|calls|>"),
            id("<|flush|>"),
        );
        let (tool_response, eos_s) = (id("<|tool_response>"), id("</s>"));
        // Harmony-style vocabularies end a message with `<|end|>` but keep generating.
        if let Some(end) = end {
            if (ret.is_some() && call.is_some()) || (calls.is_some() && flush.is_some()) {
                eog.remove(&end);
                self.attrs[end as usize] = attr::USER_DEFINED;
            }
        }
        // Gemma 4 uses `</s>` as ordinary text.
        if let (Some(_), Some(s)) = (tool_response, eos_s) {
            eog.remove(&s);
            self.attrs[s as usize] = attr::NORMAL;
        }
        self.eog = eog;
    }

    fn build_special_cache(&mut self) {
        let mask = attr::CONTROL | attr::USER_DEFINED | attr::UNKNOWN;
        let mut ids: Vec<u32> = (0..self.tokens.len() as u32)
            .filter(|&id| self.attr(id) & mask != 0)
            .collect();
        // Longest first, so that a token containing another wins; ties by id (llama.cpp's sort
        // is unstable there).
        ids.sort_by_key(|&id| std::cmp::Reverse(self.tokens[id as usize].len()));
        self.special_cache = ids;
    }

    /// Phi-3's special tokens swallow the whitespace after them (llama.cpp sets this by name).
    fn phi3_rstrip(&mut self) {
        for &id in &self.special_cache {
            self.attrs[id as usize] |= attr::RSTRIP;
        }
        if let Some(id) = self.id("</s>") {
            self.attrs[id as usize] |= attr::RSTRIP;
        }
        for t in ["<unk>", "<s>", "<|endoftext|>"] {
            if let Some(id) = self.id(t) {
                self.attrs[id as usize] &= !attr::RSTRIP;
            }
        }
    }
}
