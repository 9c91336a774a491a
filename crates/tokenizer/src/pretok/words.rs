//! Hand-written matchers for the two pre-tokenizer regexes almost every BPE model uses (GPT-2's,
//! and Llama 3's, of which Qwen 2's differs only in taking one digit at a time).
//!
//! llama.cpp does the same. They are faster than a backtracking engine, and they have no stack
//! to run out of: `fancy-regex` fails on `\s+(?!\S)` over a megabyte-long run of spaces. Each
//! function follows its regex's alternatives in order, with the backtracking worked out by hand;
//! `super::tests` checks them against the regexes.

use super::classes::{cat, Cat};

fn run_end(c: &[char], mut i: usize, class: Cat) -> usize {
    while i < c.len() && cat(c[i]) == class {
        i += 1;
    }
    i
}

fn is(c: &[char], i: usize, class: Cat) -> bool {
    i < c.len() && cat(c[i]) == class
}

/// `\s+(?!\S)|\s+` at a whitespace character: the run, less its last character when that
/// character is followed by a non-space and the run has more than one (the lookahead's
/// backtracking).
fn spaces(c: &[char], i: usize) -> usize {
    let j = run_end(c, i, Cat::Space);
    if j < c.len() && j - i >= 2 {
        j - 1
    } else {
        j
    }
}

/// `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
/// at `c[i]`; returns where the match ends.
pub(crate) fn gpt2(c: &[char], i: usize) -> usize {
    if c[i] == '\'' && i + 1 < c.len() {
        if matches!(c[i + 1], 's' | 't' | 'm' | 'd') {
            return i + 2;
        }
        if i + 2 < c.len() && matches!((c[i + 1], c[i + 2]), ('r', 'e') | ('v', 'e') | ('l', 'l')) {
            return i + 3;
        }
    }
    for class in [Cat::Letter, Cat::Number, Cat::Other] {
        if c[i] == ' ' && is(c, i + 1, class) {
            return run_end(c, i + 1, class);
        }
        if is(c, i, class) {
            return run_end(c, i, class);
        }
    }
    spaces(c, i)
}

/// Llama 3 (`max_digits` 3) and Qwen 2 (1):
/// `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
///  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+` at `c[i]`; returns where it ends.
/// The contractions ignore ASCII case only, as llama.cpp's rewrite `'[sS]|...` does.
pub(crate) fn llama3(c: &[char], i: usize, max_digits: usize) -> usize {
    let n = c.len();
    if c[i] == '\'' && i + 1 < n {
        let a = c[i + 1].to_ascii_lowercase();
        if matches!(a, 's' | 't' | 'm' | 'd') {
            return i + 2;
        }
        if i + 2 < n {
            let b = c[i + 2].to_ascii_lowercase();
            if matches!((a, b), ('r', 'e') | ('v', 'e') | ('l', 'l')) {
                return i + 3;
            }
        }
    }
    // [^\r\n\p{L}\p{N}]?\p{L}+
    if is(c, i, Cat::Letter) {
        return run_end(c, i, Cat::Letter);
    }
    let newline = |k: usize| c[k] == '\r' || c[k] == '\n';
    if !newline(i) && !is(c, i, Cat::Number) && is(c, i + 1, Cat::Letter) {
        return run_end(c, i + 1, Cat::Letter);
    }
    if is(c, i, Cat::Number) {
        return run_end(c, i, Cat::Number).min(i + max_digits);
    }
    //  ?[^\s\p{L}\p{N}]+[\r\n]*
    let other_start = if c[i] == ' ' && is(c, i + 1, Cat::Other) {
        Some(i + 1)
    } else if is(c, i, Cat::Other) {
        Some(i)
    } else {
        None
    };
    if let Some(s) = other_start {
        let mut j = run_end(c, s, Cat::Other);
        while j < n && newline(j) {
            j += 1;
        }
        return j;
    }
    // \s*[\r\n]+ ends after the run's last newline, if it has one.
    let j = run_end(c, i, Cat::Space);
    if let Some(k) = (i..j).rev().find(|&k| newline(k)) {
        return k + 1;
    }
    spaces(c, i)
}
