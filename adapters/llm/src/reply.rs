//! What both providers' replies become: a kernel [`ModelTurn`] plus what the wire said that the
//! kernel does not need (the provider's own finish reason, the reply id).

use serde_json::Value;
use terminus_kernel::{ModelTurn, ToolCall};

/// The request options that are not in the [`terminus_runtime::ModelRequest`], for either
/// provider's request body.
#[derive(Debug, Clone, Copy)]
pub struct Options<'a> {
    /// The model name.
    pub model: &'a str,
    /// `max_tokens`.
    pub max_output_tokens: Option<u32>,
    /// Stream the reply.
    pub stream: bool,
    /// The sampling temperature; `None`: the server's own.
    pub temperature: Option<f64>,
    /// The sampling seed (Chat Completions only); `None`: not sent.
    pub seed: Option<u64>,
}

/// One reply of a provider.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Reply {
    /// The turn the kernel gets.
    pub turn: ModelTurn,
    /// The provider's finish reason as sent (`stop`, `length`, `end_turn`, `refusal`, or any
    /// value this adapter does not know), before it was mapped onto the kernel's
    /// [`terminus_kernel::Finish`] classes.
    pub finish_reason: Option<String>,
    /// The provider's id of the reply (`chatcmpl-…`, `msg_…`).
    pub id: Option<String>,
    /// The model that answered, as the provider names it (`gpt-4.1-mini-2025-04-14`).
    pub model: Option<String>,
}

impl Reply {
    /// A streamed reply cut where its text began to repeat itself (see
    /// [`terminus_kernel::repetition`]): the text up to the window's first occurrence, finish
    /// `repetition`, usage unknown (the provider reports it at the end, which never came).
    pub fn repetitive(text: &str, repeated: terminus_kernel::repetition::Repeated) -> Reply {
        Reply {
            turn: ModelTurn {
                text: text[..repeated.cut(text)].to_owned(),
                finish: terminus_kernel::Finish::Repetition,
                ..ModelTurn::default()
            },
            finish_reason: Some(format!(
                "repetition: a {}-byte window {} times in a row",
                repeated.window, repeated.times
            )),
            id: None,
            model: None,
        }
    }
}

/// The model's `needs_more_work` opinion (`docs/design.md`, rule 2): a reply whose content is one
/// JSON object (bare, or in a ```` ```json ```` fence) with a boolean `needs_more_work` gives it; a
/// JSON reply without the field, or with `null`, is treated like text without it.
pub fn needs_more_work(text: &str) -> Option<bool> {
    let mut body = text.trim();
    if let Some(fenced) = body.strip_prefix("```") {
        let fenced = fenced.strip_prefix("json").unwrap_or(fenced);
        body = fenced.strip_suffix("```")?.trim();
    }
    if !body.starts_with('{') {
        return None;
    }
    match serde_json::from_str::<Value>(body).ok()? {
        Value::Object(map) => map.get("needs_more_work").and_then(Value::as_bool),
        _ => None,
    }
}

/// Tool-call arguments as the wire gave them (a JSON text): empty means no arguments (`{}`);
/// text that is not JSON is kept as a JSON string, which the runtime answers with an
/// `invalid_arguments` error the model sees instead of calling the tool (arguments must be an
/// object).
pub fn arguments(raw: &str) -> Value {
    if raw.trim().is_empty() {
        return Value::Object(serde_json::Map::new());
    }
    serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_owned()))
}

/// A tool call with its arguments parsed by [`arguments`].
pub(crate) fn call(id: String, name: String, raw_arguments: &str) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: name.into(),
        arguments: arguments(raw_arguments).into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn needs_more_work_is_tri_state_in_json_and_absent_in_text() {
        assert_eq!(
            needs_more_work(r#"{"needs_more_work": true, "content": "x"}"#),
            Some(true)
        );
        assert_eq!(
            needs_more_work("```json\n{\"needs_more_work\": false}\n```"),
            Some(false)
        );
        assert_eq!(needs_more_work(r#"{"needs_more_work": null}"#), None);
        assert_eq!(needs_more_work(r#"{"answer": "done"}"#), None);
        assert_eq!(needs_more_work("needs_more_work: false"), None);
        assert_eq!(needs_more_work("{not json"), None);
    }

    #[test]
    fn arguments_empty_valid_and_broken() {
        assert_eq!(arguments(""), json!({}));
        assert_eq!(arguments(r#"{"path":"a"}"#), json!({"path": "a"}));
        assert_eq!(arguments(r#"{"path": "a"#), json!(r#"{"path": "a"#));
    }
}
