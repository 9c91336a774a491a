//! The `tojson` filter as Hugging Face defines it for chat templates: Python's
//! `json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)`.
//! MiniJinja's own `tojson` escapes `<`, `>`, `&` and `'` for HTML and spaces differently.

use minijinja::value::{Kwargs, ValueKind};
use minijinja::{Error, ErrorKind, Value};
use std::fmt::Write as _;

struct Style {
    ensure_ascii: bool,
    indent: Option<String>,
    item_sep: String,
    key_sep: String,
    sort_keys: bool,
}

fn invalid(msg: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidOperation, msg.into())
}

/// `value | tojson(ensure_ascii=False, indent=None, separators=None, sort_keys=False)`
pub(crate) fn tojson(value: &Value, kwargs: Kwargs) -> Result<String, Error> {
    let ensure_ascii: Option<bool> = kwargs.get("ensure_ascii")?;
    let indent: Option<Value> = kwargs.get("indent")?;
    let separators: Option<Value> = kwargs.get("separators")?;
    let sort_keys: Option<bool> = kwargs.get("sort_keys")?;
    kwargs.assert_all_used()?;
    // Python: an int indents by that many spaces, a string by itself, None not at all.
    let indent = match indent {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) => match v.as_str() {
            Some(s) => Some(s.to_owned()),
            None => Some(" ".repeat(usize::try_from(v)?)),
        },
    };
    let (item_sep, key_sep) = match separators.filter(|s| !s.is_none()) {
        Some(s) => {
            let part = |i| -> Result<String, Error> {
                Ok(s.get_item_by_index(i)?
                    .as_str()
                    .ok_or_else(|| invalid("tojson: separators must be two strings"))?
                    .to_owned())
            };
            (part(0)?, part(1)?)
        }
        // With an indent Python drops the space after the comma (the newline replaces it).
        None if indent.is_some() => (",".into(), ": ".into()),
        None => (", ".into(), ": ".into()),
    };
    let style = Style {
        ensure_ascii: ensure_ascii.unwrap_or(false),
        indent,
        item_sep,
        key_sep,
        sort_keys: sort_keys.unwrap_or(false),
    };
    let mut out = String::new();
    write_value(&mut out, value, &style, 0)?;
    Ok(out)
}

fn newline(out: &mut String, style: &Style, depth: usize) {
    if let Some(ind) = &style.indent {
        out.push('\n');
        for _ in 0..depth {
            out.push_str(ind);
        }
    }
}

fn write_value(out: &mut String, v: &Value, style: &Style, depth: usize) -> Result<(), Error> {
    match v.kind() {
        ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        ValueKind::Number => write_number(out, v)?,
        ValueKind::String => write_str(out, v.as_str().unwrap_or_default(), style),
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = v.try_iter()?.collect();
            write_container(out, style, depth, '[', ']', &items, |out, item| {
                write_value(out, item, style, depth + 1)
            })?;
        }
        ValueKind::Map => {
            let mut keys: Vec<Value> = v.try_iter()?.collect();
            if style.sort_keys {
                keys.sort_by_key(key_text);
            }
            write_container(out, style, depth, '{', '}', &keys, |out, k| {
                write_str(out, &key_text(k), style);
                out.push_str(&style.key_sep);
                write_value(out, &v.get_item(k)?, style, depth + 1)
            })?;
        }
        kind => {
            return Err(invalid(format!(
                "Object of type {kind} is not JSON serializable"
            )))
        }
    }
    Ok(())
}

fn write_container(
    out: &mut String,
    style: &Style,
    depth: usize,
    open: char,
    close: char,
    items: &[Value],
    mut each: impl FnMut(&mut String, &Value) -> Result<(), Error>,
) -> Result<(), Error> {
    out.push(open);
    if !items.is_empty() {
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                out.push_str(&style.item_sep);
            }
            newline(out, style, depth + 1);
            each(out, item)?;
        }
        newline(out, style, depth);
    }
    out.push(close);
    Ok(())
}

/// Python converts non-string keys with `str()`, e.g. `1` → `"1"`, `True` → `"true"`.
fn key_text(k: &Value) -> String {
    match k.kind() {
        ValueKind::String => k.as_str().unwrap_or_default().to_owned(),
        ValueKind::Bool => (if k.is_true() { "true" } else { "false" }).into(),
        ValueKind::None => "null".into(),
        _ => k.to_string(),
    }
}

fn write_number(out: &mut String, v: &Value) -> Result<(), Error> {
    if v.is_integer() {
        let _ = write!(out, "{v}");
        return Ok(());
    }
    let f = f64::try_from(v.clone())?;
    if f.is_nan() {
        out.push_str("NaN");
    } else if f.is_infinite() {
        out.push_str(if f > 0.0 { "Infinity" } else { "-Infinity" });
    } else if f.fract() == 0.0 && f.abs() < 1e16 {
        let _ = write!(out, "{f:.1}"); // Python's repr keeps the `.0`
    } else {
        let _ = write!(out, "{f}");
    }
    Ok(())
}

fn write_str(out: &mut String, s: &str, style: &Style) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || (style.ensure_ascii && !(' '..='~').contains(&c)) => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}
