//! Tool calls: the request's `tools`, `tool_choice` and `parallel_tool_calls` ([`request`]),
//! the model's reply read back into OpenAI `tool_calls` ([`parse`]), and the constraint
//! that makes a forced call valid ([`constrain`]).

pub mod constrain;
mod json;
pub mod parse;
pub mod request;

pub use request::{Tool, ToolChoice, ToolRequest};
