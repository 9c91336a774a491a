//! A JSON reader that also reads a prefix of a document: the model's reply while it is still
//! being generated. Each value keeps its byte range in the text, so a call's arguments are
//! the model's own text (streamed fragments then add up to the final string).

use std::ops::Range;

#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    /// Entries whose key is complete and whose value has begun.
    Object(Vec<(String, Value)>),
    Array(Vec<Value>),
    /// The decoded text so far (whole characters and escapes only).
    String(String),
    /// A number, `true`, `false` or `null`, as written.
    Scalar,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Value {
    pub node: Node,
    /// Where it is in the text: to its end, or to the end of the text when not `complete`.
    pub span: Range<usize>,
    /// Closed (a scalar: followed by something that ends it).
    pub complete: bool,
}

impl Value {
    pub fn get(&self, key: &str) -> Option<&Value> {
        match &self.node {
            Node::Object(entries) => entries.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match &self.node {
            Node::String(s) => Some(s),
            _ => None,
        }
    }
}

/// Reads one value at the start of `text` (after whitespace). `None` when the text is not
/// JSON so far (or is only whitespace); else the value, complete or cut off by the end of the
/// text, and where its text ends.
pub fn parse_prefix(text: &str) -> Option<Value> {
    let mut p = Reader {
        s: text.as_bytes(),
        text,
        i: 0,
    };
    p.ws();
    p.value().ok()
}

/// `Err(())`: not JSON. A cut-off value is `Ok` with `complete: false`.
struct Reader<'a> {
    s: &'a [u8],
    text: &'a str,
    i: usize,
}

impl Reader<'_> {
    fn ws(&mut self) {
        while self.i < self.s.len() && matches!(self.s[self.i], b' ' | b'\t' | b'\n' | b'\r') {
            self.i += 1;
        }
    }

    fn at_end(&self) -> bool {
        self.i >= self.s.len()
    }

    fn cut(&self, start: usize, node: Node) -> Result<Value, ()> {
        Ok(Value {
            node,
            span: start..self.s.len(),
            complete: false,
        })
    }

    fn done(&self, start: usize, node: Node) -> Result<Value, ()> {
        Ok(Value {
            node,
            span: start..self.i,
            complete: true,
        })
    }

    fn value(&mut self) -> Result<Value, ()> {
        let start = self.i;
        match self.s.get(self.i).ok_or(())? {
            b'{' => self.object(),
            b'[' => self.array(),
            b'"' => {
                let (s, complete) = self.string()?;
                if complete {
                    self.done(start, Node::String(s))
                } else {
                    self.cut(start, Node::String(s))
                }
            }
            b'-' | b'0'..=b'9' | b't' | b'f' | b'n' => self.scalar(),
            _ => Err(()),
        }
    }

    fn scalar(&mut self) -> Result<Value, ()> {
        let start = self.i;
        while self.i < self.s.len()
            && matches!(self.s[self.i], b'-' | b'+' | b'.' | b'0'..=b'9' | b'a'..=b'z' | b'E')
        {
            self.i += 1;
        }
        let word = &self.text[start..self.i];
        let literal = ["true", "false", "null"];
        if self.at_end() {
            // It may go on: a prefix of a literal or any number so far.
            let ok = literal.iter().any(|l| l.starts_with(word))
                || word.bytes().all(|b| !b.is_ascii_lowercase() || b == b'e');
            return if ok {
                self.cut(start, Node::Scalar)
            } else {
                Err(())
            };
        }
        let number = serde_json::from_str::<serde_json::Number>(word).is_ok();
        if literal.contains(&word) || number {
            self.done(start, Node::Scalar)
        } else {
            Err(())
        }
    }

    /// The decoded string (without an escape cut in half) and whether it closed.
    fn string(&mut self) -> Result<(String, bool), ()> {
        self.i += 1; // the opening quote
        let mut out = String::new();
        loop {
            let Some(c) = self.text[self.i..].chars().next() else {
                return Ok((out, false));
            };
            match c {
                '"' => {
                    self.i += 1;
                    return Ok((out, true));
                }
                '\\' => {
                    let esc = &self.text[self.i..];
                    let len = if esc.as_bytes().get(1) == Some(&b'u') {
                        6
                    } else {
                        2
                    };
                    if esc.len() < len {
                        self.i = self.s.len();
                        return Ok((out, false));
                    }
                    let quoted = format!("\"{}\"", &esc[..len]);
                    match serde_json::from_str::<String>(&quoted) {
                        Ok(s) => out.push_str(&s),
                        // A lone surrogate half: its pair may follow; keep it out of the text.
                        Err(_) if esc.as_bytes()[1] == b'u' => {}
                        Err(_) => return Err(()),
                    }
                    self.i += len;
                }
                c if (c as u32) < 0x20 => return Err(()),
                c => {
                    out.push(c);
                    self.i += c.len_utf8();
                }
            }
        }
    }

    fn object(&mut self) -> Result<Value, ()> {
        let start = self.i;
        self.i += 1;
        let mut entries = Vec::new();
        loop {
            self.ws();
            if self.at_end() {
                return self.cut(start, Node::Object(entries));
            }
            if self.s[self.i] == b'}' && entries.is_empty() {
                self.i += 1;
                return self.done(start, Node::Object(entries));
            }
            if self.s[self.i] != b'"' {
                return Err(());
            }
            let (key, closed) = self.string()?;
            self.ws();
            if !closed || self.at_end() {
                return self.cut(start, Node::Object(entries));
            }
            if self.s[self.i] != b':' {
                return Err(());
            }
            self.i += 1;
            self.ws();
            if self.at_end() {
                return self.cut(start, Node::Object(entries));
            }
            let v = self.value()?;
            let complete = v.complete;
            entries.push((key, v));
            if !complete {
                return self.cut(start, Node::Object(entries));
            }
            self.ws();
            match self.s.get(self.i) {
                None => return self.cut(start, Node::Object(entries)),
                Some(b',') => self.i += 1,
                Some(b'}') => {
                    self.i += 1;
                    return self.done(start, Node::Object(entries));
                }
                Some(_) => return Err(()),
            }
        }
    }

    fn array(&mut self) -> Result<Value, ()> {
        let start = self.i;
        self.i += 1;
        let mut items = Vec::new();
        loop {
            self.ws();
            if self.at_end() {
                return self.cut(start, Node::Array(items));
            }
            if self.s[self.i] == b']' && items.is_empty() {
                self.i += 1;
                return self.done(start, Node::Array(items));
            }
            let v = self.value()?;
            let complete = v.complete;
            items.push(v);
            if !complete {
                return self.cut(start, Node::Array(items));
            }
            self.ws();
            match self.s.get(self.i) {
                None => return self.cut(start, Node::Array(items)),
                Some(b',') => self.i += 1,
                Some(b']') => {
                    self.i += 1;
                    return self.done(start, Node::Array(items));
                }
                Some(_) => return Err(()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn complete_documents_read_with_their_spans() {
        let t = r#"  {"name": "f", "arguments": {"a": [1, -2.5e3, true, null], "b": "x\"\u00e9"}} tail"#;
        let v = parse_prefix(t).unwrap();
        assert!(v.complete);
        assert_eq!(&t[v.span.clone()], t.trim_start().trim_end_matches(" tail"));
        assert_eq!(v.get("name").unwrap().as_str(), Some("f"));
        let args = v.get("arguments").unwrap();
        assert_eq!(
            &t[args.span.clone()],
            r#"{"a": [1, -2.5e3, true, null], "b": "x\"\u00e9"}"#
        );
        assert_eq!(args.get("b").unwrap().as_str(), Some("x\"é"));
    }

    #[test]
    fn every_prefix_reads_and_spans_only_grow() {
        let t = r#"{"tool_calls": [{"name": "add", "arguments": {"a": 12, "s": "h\u00e9\n"}}, {"name": "b"}]}"#;
        let mut last_args = String::new();
        for end in 1..=t.len() {
            let v = parse_prefix(&t[..end]).unwrap_or_else(|| panic!("prefix {:?}", &t[..end]));
            assert_eq!(v.complete, end == t.len());
            let args = v
                .get("tool_calls")
                .and_then(|c| match &c.node {
                    Node::Array(items) => items.first(),
                    _ => None,
                })
                .and_then(|c| c.get("arguments"));
            if let Some(a) = args {
                let now = &t[a.span.clone()];
                assert!(now.starts_with(&last_args), "{now} after {last_args}");
                last_args = now.to_owned();
            }
        }
        assert_eq!(last_args, r#"{"a": 12, "s": "h\u00e9\n"}"#);
    }

    #[test]
    fn text_that_is_not_json_is_refused() {
        for t in [
            "hello",
            "{name: 1}",
            "{\"a\" 1}",
            "[1 2]",
            "{\"a\": tru}",
            "{\"a\": 1x}",
        ] {
            assert_eq!(parse_prefix(t), None, "{t}");
        }
        assert_eq!(parse_prefix("   "), None);
    }
}
