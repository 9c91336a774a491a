//! llama.cpp's GBNF grammars, rewritten into llguidance's Lark dialect.
//!
//! GBNF: `name ::= alternatives` rules, `root` the start; terminals are `"strings"`,
//! `[character classes]` (with `^` and ranges) and `.`; `( )` groups; `* + ?` and `{m}`,
//! `{m,}`, `{m,n}` repetitions; `#` comments. A rule may span lines (it ends where the next
//! `name ::=` begins, a little more lenient than llama.cpp, which wants `|` continuations
//! inside parentheses).
//!
//! Each string becomes a Lark string, each class or `.` a one-character regex, rules become
//! `g_<name>` rules and `start: g_root`. llguidance splits text into lexemes before parsing,
//! so a grammar whose terminals overlap in ways only a character-level parser can resolve
//! may accept less than it does under llama.cpp.

use std::collections::HashMap;

/// Converts a GBNF grammar to llguidance Lark; the error names what is wrong and where.
pub fn gbnf_to_lark(src: &str) -> Result<String, String> {
    let mut p = Parser {
        s: src.as_bytes(),
        src,
        pos: 0,
        refs: Vec::new(),
    };
    let mut rules: Vec<(String, String)> = Vec::new();
    p.skip_space();
    while p.pos < p.s.len() {
        let at = p.pos;
        let name = p.name().ok_or_else(|| p.err("expected a rule name"))?;
        p.skip_space();
        if !p.eat("::=") {
            return Err(p.err(&format!("expected '::=' after rule name '{name}'")));
        }
        let body = p.alternates()?;
        if rules.iter().any(|(n, _)| *n == name) {
            return Err(format!("rule '{name}' is defined twice (at byte {at})"));
        }
        let body = body.ok_or(format!("rule '{name}' matches only the empty string"))?;
        rules.push((name, body));
        p.skip_space();
    }
    if !rules.iter().any(|(n, _)| n == "root") {
        return Err("the grammar has no 'root' rule".into());
    }
    if let Some(r) = p.refs.iter().find(|r| !rules.iter().any(|(n, _)| n == *r)) {
        return Err(format!("rule '{r}' is used but never defined"));
    }
    let names = lark_names(rules.iter().map(|(n, _)| n.as_str()));
    let mut out = format!("start: {}\n", names["root"]);
    for (name, body) in &rules {
        // Rule references were written as `\u{1}name\u{1}`: now that every name is known.
        let body = body
            .split('\u{1}')
            .enumerate()
            .map(|(i, part)| {
                if i % 2 == 1 {
                    names[part].as_str()
                } else {
                    part
                }
            })
            .collect::<String>();
        out.push_str(&format!("{}: {body}\n", names[name.as_str()]));
    }
    Ok(out)
}

/// Lark rule names (lowercase, `_` for anything else, `g_` in front so none starts with `_`
/// or clashes with `start`), kept distinct.
fn lark_names<'a>(names: impl Iterator<Item = &'a str>) -> HashMap<String, String> {
    let mut out = HashMap::new();
    let mut taken = std::collections::HashSet::new();
    for n in names {
        let base: String = n
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '_'
                }
            })
            .collect();
        let mut name = format!("g_{base}");
        let mut k = 1;
        while !taken.insert(name.clone()) {
            k += 1;
            name = format!("g_{base}_{k}");
        }
        out.insert(n.to_owned(), name);
    }
    out
}

struct Parser<'a> {
    s: &'a [u8],
    src: &'a str,
    pos: usize,
    /// Rules referenced, to check they exist.
    refs: Vec<String>,
}

impl Parser<'_> {
    fn err(&self, what: &str) -> String {
        let line = self.src[..self.pos.min(self.src.len())]
            .matches('\n')
            .count()
            + 1;
        format!("{what} (line {line})")
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.pos).copied()
    }

    fn eat(&mut self, lit: &str) -> bool {
        if self.s[self.pos..].starts_with(lit.as_bytes()) {
            self.pos += lit.len();
            true
        } else {
            false
        }
    }

    fn skip_space(&mut self) {
        while let Some(c) = self.peek() {
            if c == b'#' {
                while self.peek().is_some_and(|c| c != b'\n') {
                    self.pos += 1;
                }
            } else if c.is_ascii_whitespace() {
                self.pos += 1;
            } else {
                break;
            }
        }
    }

    fn name(&mut self) -> Option<String> {
        let start = self.pos;
        while self
            .peek()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
        {
            self.pos += 1;
        }
        (self.pos > start).then(|| self.src[start..self.pos].to_owned())
    }

    /// A rule name followed by `::=`: the next rule starts here.
    fn at_rule_start(&mut self) -> bool {
        let save = self.pos;
        let yes = self.name().is_some() && {
            self.skip_space();
            self.eat("::=")
        };
        self.pos = save;
        yes
    }

    /// `seq | seq | ...`; `None` when it can only match the empty string.
    fn alternates(&mut self) -> Result<Option<String>, String> {
        let mut alts = Vec::new();
        let mut empty = false;
        loop {
            match self.sequence()? {
                Some(s) => alts.push(s),
                None => empty = true,
            }
            self.skip_space();
            if !self.eat("|") {
                break;
            }
        }
        Ok(match (alts.is_empty(), empty) {
            (true, _) => None,
            (false, false) => Some(alts.join(" | ")),
            (false, true) => Some(format!("({})?", alts.join(" | "))),
        })
    }

    fn sequence(&mut self) -> Result<Option<String>, String> {
        let mut items = Vec::new();
        loop {
            self.skip_space();
            match self.peek() {
                None | Some(b'|') | Some(b')') => break,
                _ if self.at_rule_start() => break,
                _ => {}
            }
            if let Some(item) = self.item()? {
                items.push(item);
            }
        }
        Ok((!items.is_empty()).then(|| items.join(" ")))
    }

    /// One primary with its repetition; `None` when it matches only the empty string.
    fn item(&mut self) -> Result<Option<String>, String> {
        let primary = self.primary()?;
        let rep = match self.peek() {
            Some(c @ (b'*' | b'+' | b'?')) => {
                self.pos += 1;
                (c as char).to_string()
            }
            Some(b'{') => self.braces()?,
            _ => String::new(),
        };
        Ok(match primary {
            Some(p) if rep != "{0}" => Some(format!("{p}{rep}")),
            _ => None,
        })
    }

    /// `{m}`, `{m,}`, `{m,n}`, as Lark writes them (`{0}` for "none": dropped by the caller).
    fn braces(&mut self) -> Result<String, String> {
        let start = self.pos;
        let end = self.src[start..]
            .find('}')
            .ok_or_else(|| self.err("unclosed '{'"))?;
        let inner: String = self.src[start + 1..start + end]
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect();
        self.pos = start + end + 1;
        let num = |s: &str| {
            s.parse::<u32>()
                .map_err(|_| self.err("bad repetition count"))
        };
        let (lo, hi) = match inner.split_once(',') {
            None => (num(&inner)?, Some(num(&inner)?)),
            Some((a, "")) => (num(a)?, None),
            Some((a, b)) => (num(a)?, Some(num(b)?)),
        };
        Ok(match hi {
            Some(0) => "{0}".into(),
            Some(h) if h < lo => return Err(self.err("repetition {m,n} with n < m")),
            Some(h) => format!("{{{lo},{h}}}"),
            None => format!("{{{lo},}}"),
        })
    }

    fn primary(&mut self) -> Result<Option<String>, String> {
        match self.peek() {
            Some(b'"') => {
                self.pos += 1;
                let mut text = String::new();
                loop {
                    match self.peek() {
                        None => return Err(self.err("unterminated string")),
                        Some(b'"') => {
                            self.pos += 1;
                            break;
                        }
                        _ => text.push(self.char()?),
                    }
                }
                Ok((!text.is_empty()).then(|| lark_string(&text)))
            }
            Some(b'[') => {
                self.pos += 1;
                let negated = self.eat("^");
                let mut class = String::new();
                loop {
                    match self.peek() {
                        None => return Err(self.err("unterminated character class")),
                        Some(b']') => {
                            self.pos += 1;
                            break;
                        }
                        _ => {
                            let lo = self.char()?;
                            class.push_str(&regex_char(lo));
                            if self.peek() == Some(b'-') && self.s.get(self.pos + 1) != Some(&b']')
                            {
                                self.pos += 1;
                                let hi = self.char()?;
                                if hi < lo {
                                    return Err(self.err("character range out of order"));
                                }
                                class.push('-');
                                class.push_str(&regex_char(hi));
                            }
                        }
                    }
                }
                if class.is_empty() && !negated {
                    return Err(self.err("empty character class"));
                }
                let neg = if negated { "^" } else { "" };
                Ok(Some(format!("/[{neg}{class}]/")))
            }
            Some(b'.') => {
                self.pos += 1;
                Ok(Some("/(?s:.)/".into()))
            }
            Some(b'(') => {
                self.pos += 1;
                let inner = self.alternates()?;
                self.skip_space();
                if !self.eat(")") {
                    return Err(self.err("expected ')'"));
                }
                Ok(inner.map(|i| format!("({i})")))
            }
            Some(c) if c.is_ascii_alphanumeric() || c == b'-' || c == b'_' => {
                let name = self.name().unwrap_or_default();
                self.refs.push(name.clone());
                Ok(Some(format!("\u{1}{name}\u{1}")))
            }
            Some(_) => {
                let c = self.src[self.pos..].chars().next().unwrap_or('?');
                Err(self.err(&format!("unexpected '{c}'")))
            }
            None => Err(self.err("unexpected end")),
        }
    }

    /// One character of a string or class, escapes decoded.
    fn char(&mut self) -> Result<char, String> {
        let c = self.src[self.pos..]
            .chars()
            .next()
            .ok_or_else(|| self.err("unexpected end"))?;
        self.pos += c.len_utf8();
        if c != '\\' {
            return Ok(c);
        }
        let e = self.peek().ok_or_else(|| self.err("unfinished escape"))?;
        self.pos += 1;
        let hex = |p: &mut Self, n: usize| {
            let digits = p.src.get(p.pos..p.pos + n).unwrap_or("");
            let v = u32::from_str_radix(digits, 16)
                .ok()
                .filter(|_| digits.len() == n)
                .and_then(char::from_u32)
                .ok_or_else(|| p.err("bad hex escape"))?;
            p.pos += n;
            Ok(v)
        };
        match e {
            b'n' => Ok('\n'),
            b'r' => Ok('\r'),
            b't' => Ok('\t'),
            b'x' => hex(self, 2),
            b'u' => hex(self, 4),
            b'U' => hex(self, 8),
            b'\\' | b'"' | b'[' | b']' | b'-' | b'^' => Ok(e as char),
            _ => Err(self.err(&format!("unknown escape '\\{}'", e as char))),
        }
    }
}

fn lark_string(text: &str) -> String {
    serde_json::to_string(text).expect("a string serializes")
}

/// A character inside a regex class: letters and digits as they are, anything else by code.
fn regex_char(c: char) -> String {
    if c.is_ascii_alphanumeric() {
        c.to_string()
    } else {
        format!("\\x{{{:X}}}", c as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::gbnf_to_lark;

    #[test]
    fn converts_the_constructs() {
        let g = r#"
            # a comment
            root ::= greeting ("," ws name)? "!"{1,3}
            greeting ::= "hi" | "hello"
            name ::= [A-Z] [a-z-]* | "\u00e9t\xE9"
            ws ::= [ \t]+ | .
        "#;
        let lark = gbnf_to_lark(g).unwrap();
        assert_eq!(
            lark,
            "start: g_root\n\
             g_root: g_greeting (\",\" g_ws g_name)? \"!\"{1,3}\n\
             g_greeting: \"hi\" | \"hello\"\n\
             g_name: /[A-Z]/ /[a-z\\x{2D}]/* | \"été\"\n\
             g_ws: /[\\x{20}\\x{9}]/+ | /(?s:.)/\n"
        );
    }

    #[test]
    fn mistakes_are_named() {
        for (g, what) in [
            ("x ::= \"a\"", "no 'root'"),
            ("root ::= other", "'other' is used"),
            ("root ::= \"a", "unterminated string"),
            ("root ::= [a-", "end"),
            ("root := \"a\"", "'::='"),
            ("root ::= \"a\"{3,1}", "n < m"),
        ] {
            let e = gbnf_to_lark(g).unwrap_err();
            assert!(e.contains(what), "{g}: {e}");
        }
    }
}
