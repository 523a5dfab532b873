//! The request: a `RunAgentInput`, read with every problem naming its JSON path, and what a
//! `resume` entry says.

use serde::Deserialize;
use serde_json::{Map, Value};
use terminus_runtime::json_path::{self, JsonError};

/// A `RunAgentInput`, as read: what `terminus serve` uses of it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RunInput {
    /// The thread: the execution id in the journal.
    pub(crate) thread_id: String,
    /// This run (one request).
    pub(crate) run_id: String,
    /// The run this one branches from, echoed in `RUN_STARTED`.
    pub(crate) parent_run_id: Option<String>,
    /// The task: the text of the last user message, then the `context` entries; `None` when
    /// there is no user message.
    pub(crate) task: Option<String>,
    /// Answers to the interrupts of the run this one continues.
    pub(crate) resume: Vec<ResumeEntry>,
}

/// An answer to one interrupt.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ResumeEntry {
    /// The interrupt's id: a held call's id.
    pub(crate) interrupt_id: String,
    /// `resolved` (the person answered) or `cancelled` (they abandoned it).
    pub(crate) status: ResumeStatus,
    /// The answer (`resolved` only).
    #[serde(default)]
    pub(crate) payload: Option<Value>,
    /// Envelope data about the answer; not read.
    #[serde(default)]
    #[allow(dead_code)]
    pub(crate) metadata: Option<Map<String, Value>>,
}

/// Whether a person answered an interrupt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ResumeStatus {
    /// Answered: the payload is the answer.
    Resolved,
    /// Abandoned without an answer.
    Cancelled,
}

/// The wire form of `RunAgentInput`: unknown fields are ignored (AG-UI adds fields over time),
/// known ones are typed.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Wire {
    pub(super) thread_id: String,
    pub(super) run_id: String,
    #[serde(default)]
    pub(super) parent_run_id: Option<String>,
    pub(super) messages: Vec<Message>,
    #[serde(default)]
    pub(super) tools: Vec<Value>,
    #[serde(default)]
    pub(super) context: Vec<Context>,
    #[serde(default)]
    pub(super) forwarded_props: Option<Value>,
    #[serde(default)]
    pub(super) resume: Option<Vec<ResumeEntry>>,
}

#[derive(Debug, Deserialize)]
pub(super) struct Message {
    pub(super) role: String,
    #[serde(default)]
    pub(super) content: Option<Value>,
}

#[derive(Debug, Deserialize)]
pub(super) struct Context {
    pub(super) description: String,
    pub(super) value: String,
}

/// Keys of `forwardedProps` that would choose what runs: refused, since the endpoint runs only
/// the configs it was started with.
pub(super) const REFUSED_PROPS: &[&str] =
    &["agent", "config", "model", "mcp", "policy", "system_prompt"];

/// Reads a request body as a `RunAgentInput`; the error names the JSON path at fault.
pub(crate) fn parse_input(body: &[u8]) -> Result<RunInput, JsonError> {
    let problem = |path: String, problem: String| JsonError {
        path,
        problem,
        position: None,
    };
    let text = std::str::from_utf8(body)
        .map_err(|e| problem("$".into(), format!("the body is not UTF-8: {e}")))?;
    let wire: Wire = json_path::read(text)?;
    if !wire.tools.is_empty() {
        return Err(problem(
            "$.tools".into(),
            "frontend tools are not served: the agent's tools are those of its config".into(),
        ));
    }
    if let Some(Value::Object(props)) = &wire.forwarded_props
        && let Some(key) = REFUSED_PROPS.iter().find(|k| props.contains_key(**k))
    {
        let kind = if *key == "agent" && props.get("agent").is_some_and(Value::is_object) {
            "an inline agent config is refused"
        } else {
            "refused"
        };
        return Err(problem(
            format!("$.forwardedProps.{key}"),
            format!(
                "{kind}: this endpoint runs only the configs it was started with, as they are \
                 (POST /agents/NAME names one)"
            ),
        ));
    }
    let mut task = None;
    for (i, message) in wire.messages.iter().enumerate().rev() {
        if message.role == "user" {
            task = Some(
                text_of(message.content.as_ref())
                    .map_err(|(below, e)| problem(format!("$.messages[{i}].content{below}"), e))?,
            );
            break;
        }
    }
    let task = task.map(|mut task| {
        if !wire.context.is_empty() {
            task.push_str("\n\nContext:");
            for c in &wire.context {
                task.push_str(&format!("\n- {}: {}", c.description, c.value));
            }
        }
        task
    });
    Ok(RunInput {
        thread_id: wire.thread_id,
        run_id: wire.run_id,
        parent_run_id: wire.parent_run_id,
        task,
        resume: wire.resume.unwrap_or_default(),
    })
}

/// A user message's text: a string, or the text parts of a list of parts. The error is the
/// path below the content at fault (`[2].text`, or empty) and the problem.
pub(super) fn text_of(content: Option<&Value>) -> Result<String, (String, String)> {
    let none = || {
        (
            String::new(),
            "the task is the last user message's text: a non-empty string or text parts".to_owned(),
        )
    };
    match content {
        Some(Value::String(s)) if !s.trim().is_empty() => Ok(s.clone()),
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            for (i, part) in parts.iter().enumerate() {
                if part.get("type").and_then(Value::as_str) == Some("text") {
                    let Some(piece) = part.get("text").and_then(Value::as_str) else {
                        return Err((
                            format!("[{i}].text"),
                            "a text part needs its text, a string".to_owned(),
                        ));
                    };
                    text.push_str(piece);
                }
            }
            if text.trim().is_empty() {
                Err(none())
            } else {
                Ok(text)
            }
        }
        _ => Err(none()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_input_names_the_path() {
        let bad = |body: &str| parse_input(body.as_bytes()).expect_err(body).path;
        assert_eq!(bad("{"), "$");
        assert_eq!(bad(r#"{"runId": "r", "messages": []}"#), "$");
        assert_eq!(
            bad(r#"{"threadId": 1, "runId": "r", "messages": []}"#),
            "$.threadId"
        );
        assert_eq!(
            bad(r#"{"threadId": "t", "runId": "r", "messages": [{"content": "x"}]}"#),
            "$.messages[0]"
        );
        assert_eq!(
            bad(r#"{"threadId": "t", "runId": "r", "messages": [{"role": "user", "content": 3}]}"#),
            "$.messages[0].content"
        );
        assert_eq!(
            bad(
                r#"{"threadId": "t", "runId": "r", "messages": [], "resume": [{"interruptId": "c", "status": "maybe"}]}"#
            ),
            "$.resume[0].status"
        );
        assert_eq!(
            bad(
                r#"{"threadId": "t", "runId": "r", "messages": [], "forwardedProps": {"agent": {"model": {}}}}"#
            ),
            "$.forwardedProps.agent"
        );
        assert_eq!(
            bad(r#"{"threadId": "t", "runId": "r", "messages": [], "tools": [{"name": "x"}]}"#),
            "$.tools"
        );
    }

    #[test]
    fn the_task_is_the_last_user_message_with_the_context() {
        let input = parse_input(
            br#"{"threadId": "t", "runId": "r", "state": {}, "tools": [], "forwardedProps": {},
                 "messages": [{"id": "1", "role": "user", "content": "first"},
                              {"id": "2", "role": "assistant", "content": "ok"},
                              {"id": "3", "role": "user", "content": [{"type": "text", "text": "write "}, {"type": "text", "text": "the plan"}]}],
                 "context": [{"description": "repo", "value": "terminus"}]}"#,
        )
        .expect("valid");
        assert_eq!(
            input.task.as_deref(),
            Some("write the plan\n\nContext:\n- repo: terminus")
        );
        assert_eq!(
            (input.thread_id.as_str(), input.run_id.as_str()),
            ("t", "r")
        );
        let none =
            parse_input(br#"{"threadId": "t", "runId": "r", "messages": []}"#).expect("valid");
        assert_eq!(none.task, None);
    }
}
