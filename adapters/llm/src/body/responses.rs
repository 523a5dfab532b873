//! The Responses API's pieces of a request body, as JSON bytes: a message's items of `input`,
//! and the `tools` array.

use super::chat::{arguments_text, write_json};
use serde::Serialize;
use serde_json::Value;
use terminus_runtime::{Message, Role, ToolSpec};

#[derive(Serialize)]
struct ToolWire<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    name: &'a str,
    description: &'a str,
    parameters: &'a Value,
    /// The Responses API makes function tools strict by default, which refuses any schema that
    /// does not list every property as required: the tools' schemas are sent as they are.
    strict: bool,
}

/// The `tools` array.
pub(crate) fn write_tools(tools: &[ToolSpec], out: &mut Vec<u8>) {
    let wire: Vec<ToolWire<'_>> = tools
        .iter()
        .map(|t| ToolWire {
            kind: "function",
            name: &t.name,
            description: &t.description,
            parameters: &t.parameters,
            strict: false,
        })
        .collect();
    write_json(out, &wire);
}

#[derive(Serialize)]
#[serde(untagged)]
enum ItemWire<'a> {
    /// Typed `message`: OpenAI takes a message item with or without its type, llama.cpp's
    /// server refuses an assistant message without it ("Cannot determine type of 'item'").
    Message {
        #[serde(rename = "type")]
        kind: &'static str,
        role: &'static str,
        content: &'a str,
    },
    Call {
        #[serde(rename = "type")]
        kind: &'static str,
        call_id: &'a str,
        name: &'a str,
        arguments: &'a str,
    },
    Output {
        #[serde(rename = "type")]
        kind: &'static str,
        call_id: &'a str,
        output: &'a str,
    },
}

/// Appends the input items of `m`, each after a comma: a message, or an assistant turn's text
/// (if any) and one `function_call` item per call, or a tool result's `function_call_output`.
pub(crate) fn write_item(m: &Message, out: &mut Vec<u8>) {
    let message = |role| ItemWire::Message {
        kind: "message",
        role,
        content: &m.content,
    };
    match m.role {
        Role::System => push_item(out, &message("system")),
        Role::User => push_item(out, &message("user")),
        Role::Tool => push_item(
            out,
            &ItemWire::Output {
                kind: "function_call_output",
                call_id: m.tool_call_id.as_deref().unwrap_or_default(),
                output: &m.content,
            },
        ),
        Role::Assistant => {
            if !m.content.is_empty() || m.tool_calls.is_empty() {
                push_item(out, &message("assistant"));
            }
            for c in &m.tool_calls {
                push_item(
                    out,
                    &ItemWire::Call {
                        kind: "function_call",
                        call_id: &c.id,
                        name: &c.name,
                        arguments: &arguments_text(&c.arguments),
                    },
                );
            }
        }
    }
}

fn push_item(out: &mut Vec<u8>, item: &ItemWire<'_>) {
    out.push(b',');
    write_json(out, item);
}
