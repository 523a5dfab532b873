//! The interrupts a suspended run finishes with, and the decisions a later `resume` makes of
//! them.

use serde_json::{Value, json};
use terminus_kernel::{Decision, Hold, ToolErrorKind, ToolOutcome};
use terminus_runtime::{HeldState, PendingCall};

use super::input::{ResumeEntry, ResumeStatus};

/// The interrupt a held call is, in `RUN_FINISHED`'s interrupt outcome: its id is the call's,
/// `reason` is `tool_call` (a call waiting for approval or for its answer) or `input_required`
/// (a question the call asked), `responseSchema` says what `resume[].payload` must be, and
/// `metadata.terminus` keeps the kind, the tool and its arguments.
pub(crate) fn interrupt(call: &PendingCall) -> Value {
    let arguments = call.arguments.to_string();
    let (reason, message, schema) = match call.kind {
        Hold::Approval => (
            "tool_call",
            format!("Approve the call of `{}` with {arguments}?", call.name),
            json!({
                "type": "object",
                "properties": {
                    "approved": { "type": "boolean" },
                    "editedArgs": { "type": "object", "description": "Run the call with these arguments instead (a full replacement)." },
                    "reason": { "type": "string", "description": "Why it is denied, for the model." }
                },
                "required": ["approved"]
            }),
        ),
        Hold::Deferred => (
            "tool_call",
            format!("Answer the call of `{}` with {arguments}.", call.name),
            json!({
                "type": "object",
                "properties": {
                    "result": { "description": "The call's output (any JSON)." },
                    "error": {
                        "type": "object",
                        "properties": {
                            "kind": { "type": "string", "enum": ToolErrorKind::ALL.iter().map(|k| k.as_str()).collect::<Vec<_>>() },
                            "message": { "type": "string" }
                        },
                        "required": ["kind", "message"]
                    }
                }
            }),
        ),
        Hold::Elicitation => {
            let (message, schema) = match &call.question {
                Some(q) => (q.message.clone(), q.schema.clone()),
                None => (
                    format!("The call of `{}` asks for an answer.", call.name),
                    json!({ "type": "object" }),
                ),
            };
            ("input_required", message, schema)
        }
    };
    json!({
        "id": call.call_id,
        "reason": reason,
        "message": message,
        "toolCallId": call.call_id,
        "responseSchema": schema,
        "metadata": { "terminus": {
            "kind": call.kind,
            "tool": call.name,
            "arguments": call.arguments,
        } },
    })
}

/// The decision `entry` (the `index`-th of `resume`) makes on the held call `held`; the error
/// names the path at fault.
pub(crate) fn decision(
    entry: &ResumeEntry,
    index: usize,
    held: &HeldState,
) -> Result<Decision, String> {
    let at = format!("$.resume[{index}]");
    if entry.status == ResumeStatus::Cancelled {
        // Abandoned: the call never runs, and the model is told so.
        return Ok(Decision::Deny {
            reason: Some("the person cancelled the decision without answering".to_owned()),
        });
    }
    let Some(payload) = &entry.payload else {
        return Err(format!(
            "{at}.payload: a resolved interrupt needs its payload ({})",
            expected(held.call.kind)
        ));
    };
    let Value::Object(fields) = payload else {
        return Err(format!(
            "{at}.payload: expected an object ({})",
            expected(held.call.kind)
        ));
    };
    match held.call.kind {
        Hold::Approval => {
            let approved = match fields.get("approved") {
                Some(Value::Bool(b)) => *b,
                _ => {
                    return Err(format!(
                        "{at}.payload.approved: expected true or false ({})",
                        expected(Hold::Approval)
                    ));
                }
            };
            if !approved {
                let reason = match fields.get("reason") {
                    None | Some(Value::Null) => None,
                    Some(Value::String(s)) => Some(s.clone()),
                    Some(_) => return Err(format!("{at}.payload.reason: expected a string")),
                };
                return Ok(Decision::Deny { reason });
            }
            match fields.get("editedArgs") {
                None | Some(Value::Null) => Ok(Decision::Approve),
                Some(arguments @ Value::Object(_)) => Ok(Decision::Edit {
                    arguments: arguments.clone(),
                }),
                Some(_) => Err(format!(
                    "{at}.payload.editedArgs: expected an object (the tool's arguments)"
                )),
            }
        }
        Hold::Deferred => match (fields.get("result"), fields.get("error")) {
            (Some(result), None) => Ok(Decision::Answer {
                outcome: ToolOutcome::ok(result.clone()),
            }),
            (None, Some(error)) => {
                let kind = error
                    .get("kind")
                    .cloned()
                    .and_then(|k| serde_json::from_value::<ToolErrorKind>(k).ok())
                    .ok_or_else(|| {
                        let known: Vec<&str> =
                            ToolErrorKind::ALL.iter().map(|k| k.as_str()).collect();
                        format!(
                            "{at}.payload.error.kind: expected one of {}",
                            known.join(", ")
                        )
                    })?;
                let message = error
                    .get("message")
                    .and_then(Value::as_str)
                    .ok_or_else(|| format!("{at}.payload.error.message: expected a string"))?;
                Ok(Decision::Answer {
                    outcome: ToolOutcome::Error {
                        kind,
                        message: message.to_owned(),
                    },
                })
            }
            _ => Err(format!(
                "{at}.payload: expected `result` or `error`, one of them ({})",
                expected(Hold::Deferred)
            )),
        },
        // The form's content, an object.
        Hold::Elicitation => Ok(Decision::Answer {
            outcome: ToolOutcome::ok(payload.clone()),
        }),
    }
}

pub(super) fn expected(kind: Hold) -> &'static str {
    match kind {
        Hold::Approval => {
            "an approval: {\"approved\": true}, {\"approved\": true, \"editedArgs\": {...}} or \
             {\"approved\": false, \"reason\": \"...\"}"
        }
        Hold::Deferred => {
            "an answer: {\"result\": ...} or {\"error\": {\"kind\": \"...\", \"message\": \"...\"}}"
        }
        Hold::Elicitation => "the form's content, an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(kind: Hold) -> HeldState {
        HeldState {
            call: PendingCall {
                call_id: "c1".into(),
                name: "deploy".into(),
                arguments: json!({ "env": "prod" }),
                kind,
                question: None,
            },
            decision: None,
            key: terminus_kernel::Key::decision(3, 1, 0),
        }
    }

    fn entry(status: ResumeStatus, payload: Option<Value>) -> ResumeEntry {
        ResumeEntry {
            interrupt_id: "c1".into(),
            status,
            payload,
            metadata: None,
        }
    }

    #[test]
    fn resume_payloads_become_decisions() {
        let approval = held(Hold::Approval);
        let decide = |status, payload| decision(&entry(status, payload), 0, &approval);
        assert_eq!(
            decide(ResumeStatus::Resolved, Some(json!({ "approved": true }))),
            Ok(Decision::Approve)
        );
        assert_eq!(
            decide(
                ResumeStatus::Resolved,
                Some(json!({ "approved": true, "editedArgs": { "env": "staging" } }))
            ),
            Ok(Decision::Edit {
                arguments: json!({ "env": "staging" })
            })
        );
        assert_eq!(
            decide(
                ResumeStatus::Resolved,
                Some(json!({ "approved": false, "reason": "not on Friday" }))
            ),
            Ok(Decision::Deny {
                reason: Some("not on Friday".into())
            })
        );
        assert!(matches!(
            decide(ResumeStatus::Cancelled, None),
            Ok(Decision::Deny { .. })
        ));
        let e = decide(ResumeStatus::Resolved, Some(json!({ "approved": "yes" })))
            .expect_err("not a boolean");
        assert!(e.starts_with("$.resume[0].payload.approved: "), "{e}");
        let e = decide(ResumeStatus::Resolved, None).expect_err("no payload");
        assert!(e.starts_with("$.resume[0].payload: "), "{e}");

        let deferred = held(Hold::Deferred);
        assert_eq!(
            decision(
                &entry(
                    ResumeStatus::Resolved,
                    Some(json!({ "result": { "ok": 1 } }))
                ),
                2,
                &deferred
            ),
            Ok(Decision::Answer {
                outcome: ToolOutcome::ok(json!({ "ok": 1 }))
            })
        );
        let e = decision(
            &entry(
                ResumeStatus::Resolved,
                Some(json!({ "error": { "kind": "odd", "message": "m" } })),
            ),
            2,
            &deferred,
        )
        .expect_err("unknown kind");
        assert!(e.starts_with("$.resume[2].payload.error.kind: "), "{e}");
    }

    #[test]
    fn an_approval_interrupt_binds_the_call() {
        let value = interrupt(&held(Hold::Approval).call);
        assert_eq!(value["id"], "c1");
        assert_eq!(value["toolCallId"], "c1");
        assert_eq!(value["reason"], "tool_call");
        assert_eq!(value["responseSchema"]["required"], json!(["approved"]));
        assert_eq!(value["metadata"]["terminus"]["kind"], "approval");
    }
}
