//! The character classes of the hand-written matchers, taken from the tables the regex engine
//! itself uses (`regex-syntax`), so that both paths agree on `\p{L}`, `\p{N}` and `\s`.

use regex_syntax::hir::{Class, HirKind};
use std::sync::OnceLock;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cat {
    /// `\p{L}`
    Letter,
    /// `\p{N}`
    Number,
    /// `\s` (White_Space)
    Space,
    /// everything else: `[^\s\p{L}\p{N}]`
    Other,
}

struct Table {
    ascii: [Cat; 128],
    /// Sorted, disjoint (first, last, class) ranges; characters in none are `Other`.
    ranges: Vec<(u32, u32, Cat)>,
}

fn class_ranges(pattern: &str) -> Vec<(u32, u32)> {
    let hir = regex_syntax::Parser::new()
        .parse(pattern)
        .expect("valid class");
    match hir.kind() {
        HirKind::Class(Class::Unicode(c)) => c
            .ranges()
            .iter()
            .map(|r| (r.start() as u32, r.end() as u32))
            .collect(),
        other => unreachable!("{pattern} parsed to {other:?}"),
    }
}

fn table() -> &'static Table {
    static TABLE: OnceLock<Table> = OnceLock::new();
    TABLE.get_or_init(|| {
        // The three classes are disjoint: White_Space characters are separators or controls.
        let mut ranges = Vec::new();
        for (pattern, cat) in [
            (r"\p{L}", Cat::Letter),
            (r"\p{N}", Cat::Number),
            (r"\s", Cat::Space),
        ] {
            ranges.extend(class_ranges(pattern).into_iter().map(|(a, b)| (a, b, cat)));
        }
        ranges.sort_unstable_by_key(|r| r.0);
        let mut ascii = [Cat::Other; 128];
        for (c, slot) in ascii.iter_mut().enumerate() {
            *slot = lookup(&ranges, c as u32);
        }
        Table { ascii, ranges }
    })
}

fn lookup(ranges: &[(u32, u32, Cat)], c: u32) -> Cat {
    let i = ranges.partition_point(|r| r.1 < c);
    match ranges.get(i) {
        Some(&(first, _, cat)) if first <= c => cat,
        _ => Cat::Other,
    }
}

pub(crate) fn cat(c: char) -> Cat {
    let t = table();
    match t.ascii.get(c as usize) {
        Some(&cat) => cat,
        None => lookup(&t.ranges, c as u32),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes() {
        for (c, want) in [
            ('a', Cat::Letter),
            ('Z', Cat::Letter),
            ('é', Cat::Letter),
            ('日', Cat::Letter),
            ('7', Cat::Number),
            ('½', Cat::Number),
            ('Ⅻ', Cat::Number),
            (' ', Cat::Space),
            ('\n', Cat::Space),
            ('\u{a0}', Cat::Space),
            ('\u{3000}', Cat::Space),
            ('\u{85}', Cat::Space),
            ('!', Cat::Other),
            ('\u{301}', Cat::Other), // combining accent: a mark, not a letter
            ('🚀', Cat::Other),
            ('\u{1c}', Cat::Other), // not White_Space, unlike Python's str.isspace
        ] {
            assert_eq!(cat(c), want, "{c:?}");
        }
    }
}
