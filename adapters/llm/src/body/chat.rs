//! Chat Completions' pieces of a request body, as JSON bytes: a message of `messages`, and the
//! `tools` array (with [`write_json`] and [`arguments_text`], which the Responses pieces use
//! too).

use serde::Serialize;
use serde_json::Value;
use terminus_runtime::{Message, Role, ToolSpec};

#[derive(Serialize)]
struct ToolWire<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: FunctionSpecWire<'a>,
}

#[derive(Serialize)]
struct FunctionSpecWire<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a Value,
}

/// The `tools` array.
pub(crate) fn write_tools(tools: &[ToolSpec], out: &mut Vec<u8>) {
    let wire: Vec<ToolWire<'_>> = tools
        .iter()
        .map(|t| ToolWire {
            kind: "function",
            function: FunctionSpecWire {
                name: &t.name,
                description: &t.description,
                parameters: &t.parameters,
            },
        })
        .collect();
    write_json(out, &wire);
}

#[derive(Serialize)]
struct MessageOut<'a> {
    role: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<&'a str>,
    /// `null` for an assistant turn that is only tool calls.
    content: Option<&'a str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<CallOut<'a>>,
}

#[derive(Serialize)]
struct CallOut<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: FunctionOut<'a>,
}

#[derive(Serialize)]
struct FunctionOut<'a> {
    name: &'a str,
    arguments: String,
}

/// Appends the message `m`, after a comma.
pub(crate) fn write_message(m: &Message, out: &mut Vec<u8>) {
    let mut wire = MessageOut {
        role: "user",
        tool_call_id: None,
        content: Some(&m.content),
        tool_calls: Vec::new(),
    };
    match m.role {
        Role::System => wire.role = "system",
        Role::User => {}
        Role::Tool => {
            wire.role = "tool";
            wire.tool_call_id = Some(m.tool_call_id.as_deref().unwrap_or_default());
        }
        Role::Assistant => {
            wire.role = "assistant";
            if !m.tool_calls.is_empty() && m.content.is_empty() {
                wire.content = None;
            }
            wire.tool_calls = m
                .tool_calls
                .iter()
                .map(|c| CallOut {
                    id: &c.id,
                    kind: "function",
                    function: FunctionOut {
                        name: &c.name,
                        arguments: arguments_text(&c.arguments),
                    },
                })
                .collect();
        }
    }
    out.push(b',');
    write_json(out, &wire);
}

/// Appends `value` as JSON. Writing into a `Vec` fails only for a value that cannot be JSON (a
/// map with non-string keys), which nothing written here is.
pub(crate) fn write_json<T: Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) {
    let _ = serde_json::to_writer(&mut *out, value);
}

/// Arguments as the wire carries them: a JSON text. Arguments the model sent broken (kept as a
/// JSON string by [`reply::arguments`](crate::reply::arguments)) go back as the model wrote them.
pub(crate) fn arguments_text(arguments: &Value) -> String {
    match arguments {
        Value::String(raw) => raw.clone(),
        other => other.to_string(),
    }
}
