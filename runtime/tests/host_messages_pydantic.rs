//! Pydantic AI's messages as the host core reads them (`terminus_runtime::host::messages`): a
//! tool answer's class from its `outcome` (or the class a tool marked in its `metadata`), and
//! thinking parts.

use serde_json::{Value, json};
use terminus_kernel::ToolErrorKind;
use terminus_runtime::host::messages::{last_results, reply_of};

fn answer(part: Value) -> Option<ToolErrorKind> {
    let request = json!({"kind": "request", "parts": [part]});
    let found = last_results(&[request]);
    assert_eq!(found.len(), 1);
    found[0].error
}

fn returned(outcome: &str, cause: Option<&str>) -> Value {
    let retry = cause.map(|c| json!({"cause": c, "attempt": 1, "max_retries": 3}));
    json!({"part_kind": "tool-return", "tool_call_id": "c1", "tool_name": "ls",
           "content": "x", "outcome": outcome, "retry": retry})
}

#[test]
fn a_tool_returns_outcome_gives_its_class() {
    let cases = [
        ("success", None, None),
        ("denied", None, Some(ToolErrorKind::PermissionDenied)),
        ("failed", None, Some(ToolErrorKind::Failed)),
        ("retried", Some("model_retry"), Some(ToolErrorKind::Failed)),
        (
            "retried",
            Some("validation_error"),
            Some(ToolErrorKind::InvalidArguments),
        ),
        (
            "retried",
            Some("unknown_tool"),
            Some(ToolErrorKind::NotFound),
        ),
        (
            "retried",
            Some("unavailable_tool"),
            Some(ToolErrorKind::NotFound),
        ),
    ];
    for (outcome, cause, kind) in cases {
        assert_eq!(
            answer(returned(outcome, cause)),
            kind,
            "{outcome} {cause:?}"
        );
    }
    // No outcome (an older Pydantic AI): a success.
    let plain = json!({"part_kind": "tool-return", "tool_call_id": "c1", "content": "x"});
    assert_eq!(answer(plain), None);
}

#[test]
fn a_class_the_tool_marked_wins_over_the_outcome() {
    let mut part = returned("success", None);
    part["metadata"] = json!({"terminus_error": "timeout"});
    assert_eq!(answer(part), Some(ToolErrorKind::Timeout));
}

#[test]
fn a_retry_prompt_is_invalid_arguments_for_validation_errors_else_failed() {
    let validation = json!({"part_kind": "retry-prompt", "tool_call_id": "c1",
                            "content": [{"type": "missing", "loc": ["x"], "msg": "Field required"}]});
    assert_eq!(answer(validation), Some(ToolErrorKind::InvalidArguments));
    let retry = json!({"part_kind": "retry-prompt", "tool_call_id": "c1", "content": "boom"});
    assert_eq!(answer(retry), Some(ToolErrorKind::Failed));
}

#[test]
fn a_thinking_part_is_reasoning_when_it_has_content() {
    let reply = |thinking: &str| {
        let message = json!({"kind": "response", "parts": [
            {"part_kind": "thinking", "content": thinking},
            {"part_kind": "text", "content": "Done."}]});
        reply_of(&message, "message")
            .expect("a reply")
            .turn
            .reasoning
    };
    assert_eq!(reply("Let me see."), Some(true));
    assert_eq!(reply(""), None);
}
