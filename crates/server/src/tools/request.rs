//! `tools`, `tool_choice` and `parallel_tool_calls` of a chat request, checked field by
//! field: a mistake is a 400 whose `param` is the path of the field (`tools[1].function.name`).

use crate::error::ApiError;
use serde_json::{json, Value};

/// One function tool.
#[derive(Clone, Debug, PartialEq)]
pub struct Tool {
    pub name: String,
    /// The arguments' JSON schema (`{"type": "object", "properties": {}}` when not given).
    pub parameters: Value,
    /// `strict`: every schema keyword must be enforced when the call is forced.
    pub strict: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolChoice {
    /// The model answers in text; the tools are not shown to it.
    None,
    /// The model may call tools or answer in text.
    Auto,
    /// The model must call one (or, with parallel calls, several) of the tools.
    Required,
    /// The model must call this function.
    Function(String),
}

#[derive(Clone, Debug)]
pub struct ToolRequest {
    pub tools: Vec<Tool>,
    /// The tools as the client sent them: what the chat template renders.
    pub raw: Vec<Value>,
    pub choice: ToolChoice,
    /// `parallel_tool_calls` (default true): more than one call per reply.
    pub parallel: bool,
}

impl ToolRequest {
    /// The model is shown the tools and its reply is read for calls.
    pub fn active(&self) -> bool {
        self.choice != ToolChoice::None
    }

    /// The tools a forced call may use: all for `required`, the named one, or none.
    pub fn forced(&self) -> Option<Vec<&Tool>> {
        match &self.choice {
            ToolChoice::Required => Some(self.tools.iter().collect()),
            ToolChoice::Function(name) => {
                Some(self.tools.iter().filter(|t| &t.name == name).collect())
            }
            ToolChoice::None | ToolChoice::Auto => None,
        }
    }
}

fn invalid(param: &str, message: impl Into<String>) -> ApiError {
    ApiError::invalid(param, message)
}

/// Reads the three fields (`None` values are absent fields). `None` without `tools`.
pub fn parse(
    tools: Option<&Value>,
    choice: Option<&Value>,
    parallel: Option<bool>,
) -> Result<Option<ToolRequest>, ApiError> {
    let Some(tools) = tools else {
        return match choice.map(parse_choice) {
            None | Some(Ok(ToolChoice::None | ToolChoice::Auto)) => Ok(None),
            Some(Err(e)) => Err(e),
            Some(Ok(_)) => Err(invalid(
                "tool_choice",
                "'tool_choice' requires 'tools': there is no tool to call",
            )),
        };
    };
    let Value::Array(list) = tools else {
        return Err(invalid(
            "tools",
            "'tools' must be an array of function tools",
        ));
    };
    if list.is_empty() {
        return Err(invalid(
            "tools",
            "'tools' must not be empty; leave it out instead",
        ));
    }
    let mut parsed: Vec<Tool> = Vec::with_capacity(list.len());
    for (i, t) in list.iter().enumerate() {
        let tool = parse_tool(i, t)?;
        if parsed.iter().any(|p| p.name == tool.name) {
            return Err(invalid(
                &format!("tools[{i}].function.name"),
                format!("two tools are named '{}'", tool.name),
            ));
        }
        parsed.push(tool);
    }
    let choice = choice
        .map(parse_choice)
        .transpose()?
        .unwrap_or(ToolChoice::Auto);
    if let ToolChoice::Function(name) = &choice {
        if !parsed.iter().any(|t| &t.name == name) {
            let names: Vec<&str> = parsed.iter().map(|t| t.name.as_str()).collect();
            return Err(invalid(
                "tool_choice",
                format!(
                    "'tool_choice' names the function '{name}', which is not in 'tools' ({})",
                    names.join(", ")
                ),
            ));
        }
    }
    Ok(Some(ToolRequest {
        tools: parsed,
        raw: list.clone(),
        choice,
        parallel: parallel.unwrap_or(true),
    }))
}

fn parse_tool(i: usize, t: &Value) -> Result<Tool, ApiError> {
    let at = |k: &str| format!("tools[{i}]{k}");
    let Value::Object(t) = t else {
        return Err(invalid(&at(""), format!("{} must be an object", at(""))));
    };
    match t.get("type") {
        Some(Value::String(s)) if s == "function" => {}
        _ => {
            return Err(invalid(
                &at(".type"),
                format!("{} must be \"function\" (the only tool type)", at(".type")),
            ))
        }
    }
    let Some(Value::Object(f)) = t.get("function") else {
        return Err(invalid(
            &at(".function"),
            format!(
                "{} must be an object with 'name' and 'parameters'",
                at(".function")
            ),
        ));
    };
    let name = match f.get("name") {
        Some(Value::String(n)) if valid_name(n) => n.clone(),
        Some(Value::String(n)) => {
            return Err(invalid(
                &at(".function.name"),
                format!(
                    "{} '{n}' must be 1 to 64 letters, digits, '_' or '-'",
                    at(".function.name")
                ),
            ))
        }
        Some(_) => {
            return Err(invalid(
                &at(".function.name"),
                format!("{} must be a string", at(".function.name")),
            ))
        }
        None => {
            return Err(invalid(
                &at(".function.name"),
                format!("missing required field {}", at(".function.name")),
            ))
        }
    };
    if f.get("description")
        .is_some_and(|d| !d.is_string() && !d.is_null())
    {
        return Err(invalid(
            &at(".function.description"),
            format!("{} must be a string", at(".function.description")),
        ));
    }
    let strict = match f.get("strict") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            return Err(invalid(
                &at(".function.strict"),
                format!("{} must be true or false", at(".function.strict")),
            ))
        }
    };
    let parameters = match f.get("parameters") {
        None | Some(Value::Null) => json!({"type": "object", "properties": {}}),
        Some(p @ Value::Object(o)) if o.get("type").is_none_or(|ty| ty == "object") => p.clone(),
        Some(_) => {
            return Err(invalid(
                &at(".function.parameters"),
                format!(
                    "{} must be a JSON schema of an object ({{\"type\": \"object\", \
                     \"properties\": {{...}}}})",
                    at(".function.parameters")
                ),
            ))
        }
    };
    Ok(Tool {
        name,
        parameters,
        strict,
    })
}

/// OpenAI's rule for function names.
fn valid_name(n: &str) -> bool {
    (1..=64).contains(&n.len())
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn parse_choice(v: &Value) -> Result<ToolChoice, ApiError> {
    let bad = || {
        invalid(
            "tool_choice",
            "'tool_choice' must be \"none\", \"auto\", \"required\" or \
             {\"type\": \"function\", \"function\": {\"name\": ...}}",
        )
    };
    match v {
        Value::String(s) => match s.as_str() {
            "none" => Ok(ToolChoice::None),
            "auto" => Ok(ToolChoice::Auto),
            "required" => Ok(ToolChoice::Required),
            _ => Err(bad()),
        },
        Value::Object(o) if o.get("type").and_then(Value::as_str) == Some("function") => o
            .get("function")
            .and_then(|f| f.get("name"))
            .and_then(Value::as_str)
            .map(|n| ToolChoice::Function(n.to_owned()))
            .ok_or_else(bad),
        _ => Err(bad()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(t: Value, choice: Option<Value>) -> String {
        let e = parse(Some(&t), choice.as_ref(), None).unwrap_err();
        assert_eq!(e.status.as_u16(), 400);
        e.param.unwrap()
    }

    #[test]
    fn each_mistake_names_its_field() {
        let good = json!({"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}});
        assert_eq!(err(json!({}), None), "tools");
        assert_eq!(err(json!([]), None), "tools");
        assert_eq!(err(json!([good, 3]), None), "tools[1]");
        assert_eq!(
            err(json!([{"type": "code", "function": {}}]), None),
            "tools[0].type"
        );
        assert_eq!(
            err(json!([{"type": "function"}]), None),
            "tools[0].function"
        );
        assert_eq!(
            err(
                json!([{"type": "function", "function": {"parameters": {}}}]),
                None
            ),
            "tools[0].function.name"
        );
        assert_eq!(
            err(
                json!([{"type": "function", "function": {"name": "a b"}}]),
                None
            ),
            "tools[0].function.name"
        );
        assert_eq!(err(json!([good, good]), None), "tools[1].function.name");
        for p in [json!([1]), json!("x"), json!({"type": "string"})] {
            assert_eq!(
                err(
                    json!([{"type": "function", "function": {"name": "f", "parameters": p}}]),
                    None
                ),
                "tools[0].function.parameters"
            );
        }
        let named = |n: &str| json!({"type": "function", "function": {"name": n}});
        assert_eq!(err(json!([good]), Some(named("g"))), "tool_choice");
        assert_eq!(err(json!([good]), Some(json!("always"))), "tool_choice");
        let e = parse(None, Some(&json!("required")), None).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("tool_choice"));
    }

    #[test]
    fn choices_and_defaults() {
        let t =
            json!([{"type": "function", "function": {"name": "get_weather", "description": "d"}}]);
        let r = parse(Some(&t), None, None).unwrap().unwrap();
        assert_eq!(r.choice, ToolChoice::Auto);
        assert!(r.parallel && r.active() && r.forced().is_none());
        assert_eq!(
            r.tools[0].parameters,
            json!({"type": "object", "properties": {}})
        );
        let named = json!({"type": "function", "function": {"name": "get_weather"}});
        let r = parse(Some(&t), Some(&named), Some(false)).unwrap().unwrap();
        assert_eq!(r.choice, ToolChoice::Function("get_weather".into()));
        assert_eq!(r.forced().unwrap().len(), 1);
        assert!(!r.parallel);
        let r = parse(Some(&t), Some(&json!("none")), None)
            .unwrap()
            .unwrap();
        assert!(!r.active());
        assert!(parse(None, Some(&json!("auto")), None).unwrap().is_none());
    }
}
