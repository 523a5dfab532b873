//! Held calls through Restate (`docs/approvals.md`, `docs/restate.md`): each call a suspended
//! run waits on is a Restate awakeable, a durable promise, whose id the `run` handler stores in
//! the object's state under `pending:{call_id}`; the shared `approve`, `deny` and `answer`
//! handlers read it and resolve the awakeable with the decision (a [`Decision`] in its journal
//! JSON). The `run` handler awaits the awakeables (Restate suspends the invocation meanwhile),
//! journals the decisions in the run's own journal as `terminus approve | deny | answer` do,
//! and resumes the run from it, so a decision becomes the call's result exactly as on the
//! command line.

use restate_sdk::prelude::*;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use std::sync::Arc;
use std::time::Duration;
use terminus_kernel::{Decision, Entry, Hold, Record, ToolErrorKind, ToolOutcome, recover};
use terminus_runtime::{HeldState, Journal, MemoryStore, held_calls};

use crate::bridge::unix_ms;

/// The state key under which a call waiting for a decision is kept.
fn pending_key(call_id: &str) -> String {
    format!("pending:{call_id}")
}

/// The state key under which a call's decision is kept once the run has it.
fn decided_key(call_id: &str) -> String {
    format!("decided:{call_id}")
}

/// A call waiting for a decision, as the object's state keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Pending {
    /// The awakeable the run waits on.
    awakeable: String,
    /// The tool.
    name: String,
    /// The arguments the model gave.
    arguments: Value,
    /// Why it is held.
    kind: Hold,
}

/// Waits, durably, for a decision on each undecided held call of the suspended `execution`,
/// journals the decisions in `store` and returns how long the run waited (journaled, so a
/// replay computes the same): it does not count against the deadline.
pub(crate) async fn wait(
    ctx: &ObjectContext<'_>,
    store: &MemoryStore,
    execution: &str,
    round: u32,
) -> Result<Duration, HandlerError> {
    let held = held_of(store, execution)
        .await
        .map_err(|e| TerminalError::new_with_code(500, e))?;
    let suspended_at: u64 = ctx
        .run(|| async { Ok(unix_ms()) })
        .name(format!("suspended{round}"))
        .await?;
    let mut waiting = Vec::new();
    for h in held.iter().filter(|h| h.decision.is_none()) {
        let (awakeable, decided) = ctx.awakeable::<Json<Value>>();
        let pending = Pending {
            awakeable,
            name: h.call.name.clone(),
            arguments: h.call.arguments.clone(),
            kind: h.call.kind,
        };
        ctx.clear(&decided_key(&h.call.call_id));
        ctx.set(&pending_key(&h.call.call_id), Json(pending));
        waiting.push((h, decided));
    }
    let mut decisions = Vec::with_capacity(waiting.len());
    for (h, decided) in waiting {
        let Json(value) = decided.await?;
        // The handlers resolve with a decision; anyone resolving the awakeable directly with
        // something else fails the run, naming the call.
        let decision: Decision = serde_json::from_value(value).map_err(|e| {
            TerminalError::new_with_code(
                400,
                format!("the decision on call `{}` is not one: {e}", h.call.call_id),
            )
        })?;
        ctx.clear(&pending_key(&h.call.call_id));
        ctx.set(&decided_key(&h.call.call_id), Json(decision.clone()));
        decisions.push((h, decision));
    }
    let decided_at: u64 = ctx
        .run(|| async { Ok(unix_ms()) })
        .name(format!("decided{round}"))
        .await?;
    let paused = decided_at.saturating_sub(suspended_at);
    // The run's journal measures the suspension from its own clock: the decisions are dated so
    // that it lasted exactly the journaled wait, on every replay.
    let since = store
        .suspension(execution)
        .await
        .map_err(|e| TerminalError::new_with_code(500, e.to_string()))?
        .since_unix_ms
        .unwrap_or(suspended_at);
    for (h, decision) in decisions {
        let record = Arc::new(Record {
            key: h.key,
            entry: Entry::Decided {
                call_id: h.call.call_id.as_str().into(),
                decision,
            },
        });
        store
            .decide(execution, record, since.saturating_add(paused))
            .await
            .map_err(|e| TerminalError::new_with_code(500, e.to_string()))?;
    }
    Ok(Duration::from_millis(paused))
}

/// The held calls of `execution`'s pending tool batch, from its journal in `store`.
async fn held_of(store: &MemoryStore, execution: &str) -> Result<Vec<HeldState>, String> {
    let spec = store
        .spec(execution)
        .await
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("no execution `{execution}` in the run's journal"))?;
    let records = store.records(execution).await.map_err(|e| e.to_string())?;
    let recovery = recover(spec.policy, records.iter().map(|r| Record::clone(r)))
        .map_err(|e| format!("execution {execution}: {e}"))?;
    Ok(held_calls(&recovery))
}

/// What the `approve`, `deny` or `answer` handler decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verb {
    Approve,
    Deny,
    Answer,
}

impl Verb {
    /// The fields a body of this verb may have besides `call_id`.
    fn fields(self) -> &'static [&'static str] {
        match self {
            Verb::Approve => &["arguments"],
            Verb::Deny => &["reason"],
            Verb::Answer => &["result", "error", "message"],
        }
    }
}

/// A bad request body: 400, the message naming the JSON path.
fn invalid(message: String) -> HandlerError {
    TerminalError::new_with_code(400, message).into()
}

/// The call id and the decision a body of `verb` asks for (`docs/restate.md`): `Err` names
/// the JSON path that is wrong.
pub(crate) fn parse(verb: Verb, body: &Value) -> Result<(String, Decision), String> {
    let Some(body) = body.as_object() else {
        return Err("$: a JSON object with `call_id` is needed".to_owned());
    };
    if let Some(field) = body
        .keys()
        .find(|k| *k != "call_id" && !verb.fields().contains(&k.as_str()))
    {
        return Err(format!("$.{field}: not a field of this decision"));
    }
    let call_id = match body.get("call_id") {
        Some(Value::String(id)) if !id.is_empty() => id.clone(),
        Some(_) => return Err("$.call_id: a non-empty string is needed".to_owned()),
        None => return Err("$.call_id: missing".to_owned()),
    };
    let decision = match verb {
        Verb::Approve => match body.get("arguments") {
            None => Decision::Approve,
            Some(arguments) if arguments.is_object() => Decision::Edit {
                arguments: arguments.clone(),
            },
            Some(_) => {
                return Err(
                    "$.arguments: a JSON object is needed (the arguments the call runs with)"
                        .to_owned(),
                );
            }
        },
        Verb::Deny => Decision::Deny {
            reason: optional_text(body, "reason")?,
        },
        Verb::Answer => Decision::Answer {
            outcome: answer(body)?,
        },
    };
    Ok((call_id, decision))
}

/// The text at `$.field`, if there is one.
fn optional_text(body: &Map<String, Value>, field: &str) -> Result<Option<String>, String> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => Ok(Some(text.clone())),
        Some(_) => Err(format!("$.{field}: a string is needed")),
    }
}

/// An answer's outcome: `result` (any JSON), or `error` (a tool error kind) with `message`.
fn answer(body: &Map<String, Value>) -> Result<ToolOutcome, String> {
    match (body.get("result"), body.get("error")) {
        (Some(_), Some(_)) => {
            Err("$.error: an answer has a `result` or an `error`, not both".into())
        }
        (Some(result), None) => {
            if body.contains_key("message") {
                return Err("$.message: goes with `error`, not `result`".to_owned());
            }
            Ok(ToolOutcome::ok(result.clone()))
        }
        (None, Some(kind)) => {
            let kind = serde_json::from_value::<ToolErrorKind>(kind.clone()).map_err(|_| {
                let known: Vec<&str> = ToolErrorKind::ALL.iter().map(|k| k.as_str()).collect();
                format!(
                    "$.error: a tool error kind is needed (one of {})",
                    known.join(", ")
                )
            })?;
            Ok(ToolOutcome::Error {
                kind,
                message: optional_text(body, "message")?.unwrap_or_default(),
            })
        }
        (None, None) => Err("$.result: an answer needs `result`, or `error` and `message`".into()),
    }
}

/// The `approve`, `deny` and `answer` handlers: resolves the awakeable the run waits on for
/// the call the body names with the decision the body asks for.
pub(crate) async fn decide(
    ctx: &SharedObjectContext<'_>,
    verb: Verb,
    body: &Value,
) -> Result<Json<Value>, HandlerError> {
    let (call_id, decision) = parse(verb, body).map_err(invalid)?;
    let answer = |changed: bool| {
        Json(json!({
            "execution": ctx.key(),
            "call_id": call_id,
            "decision": decision.as_str(),
            "changed": changed,
        }))
    };
    if let Some(Json(earlier)) = ctx.get::<Json<Decision>>(&decided_key(&call_id)).await? {
        if earlier == decision {
            return Ok(answer(false));
        }
        return Err(TerminalError::new_with_code(
            409,
            format!(
                "$.call_id: call `{call_id}` was already decided ({}): a decision is final",
                earlier.as_str()
            ),
        )
        .into());
    }
    let Some(Json(pending)) = ctx.get::<Json<Pending>>(&pending_key(&call_id)).await? else {
        let held: Vec<String> = ctx
            .get_keys()
            .await?
            .into_iter()
            .filter_map(|k| k.strip_prefix("pending:").map(str::to_owned))
            .collect();
        return Err(invalid(format!(
            "$.call_id: execution `{}` holds no call `{call_id}` waiting for a decision ({})",
            ctx.key(),
            if held.is_empty() {
                "it holds none".to_owned()
            } else {
                format!("held: {}", held.join(", "))
            }
        )));
    };
    if decision.edited().is_some() && pending.kind == Hold::Elicitation {
        return Err(invalid(format!(
            "$.arguments: call `{call_id}` of `{}` asked a question: its arguments are not \
             edited; use `answer`, or `approve` or `deny` without arguments",
            pending.name
        )));
    }
    if decision.runs() && pending.kind == Hold::Deferred {
        return Err(invalid(format!(
            "$.call_id: call `{call_id}` of `{}` is answered from outside, not approved: use \
             `answer`",
            pending.name
        )));
    }
    let value = serde_json::to_value(&decision)
        .map_err(|e| TerminalError::new_with_code(500, e.to_string()))?;
    ctx.resolve_awakeable(&pending.awakeable, Json(value));
    Ok(answer(true))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_become_the_kernels_decisions() {
        let (id, d) = parse(Verb::Approve, &json!({ "call_id": "deploy-1" })).expect("a decision");
        assert_eq!((id.as_str(), d), ("deploy-1", Decision::Approve));
        let (_, d) = parse(
            Verb::Approve,
            &json!({ "call_id": "deploy-1", "arguments": { "env": "staging" } }),
        )
        .expect("a decision");
        assert_eq!(
            d,
            Decision::Edit {
                arguments: json!({ "env": "staging" })
            }
        );
        let (_, d) =
            parse(Verb::Deny, &json!({ "call_id": "c", "reason": "not now" })).expect("a decision");
        assert_eq!(
            d,
            Decision::Deny {
                reason: Some("not now".into())
            }
        );
        let (_, d) = parse(Verb::Deny, &json!({ "call_id": "c" })).expect("a decision");
        assert_eq!(d, Decision::Deny { reason: None });
        let (_, d) = parse(
            Verb::Answer,
            &json!({ "call_id": "c", "result": {"plan": "x"} }),
        )
        .expect("a decision");
        assert_eq!(
            d,
            Decision::Answer {
                outcome: ToolOutcome::ok(json!({ "plan": "x" }))
            }
        );
        let (_, d) = parse(
            Verb::Answer,
            &json!({ "call_id": "c", "error": "not_found", "message": "no such customer" }),
        )
        .expect("a decision");
        assert_eq!(
            d,
            Decision::Answer {
                outcome: ToolOutcome::Error {
                    kind: ToolErrorKind::NotFound,
                    message: "no such customer".into()
                }
            }
        );
    }

    #[test]
    fn bad_bodies_name_the_json_path() {
        let cases = [
            (Verb::Approve, json!([1]), "$:"),
            (Verb::Approve, json!({}), "$.call_id:"),
            (Verb::Approve, json!({ "call_id": 7 }), "$.call_id:"),
            (Verb::Approve, json!({ "call_id": "" }), "$.call_id:"),
            (
                Verb::Approve,
                json!({ "call_id": "c", "arguments": "env=staging" }),
                "$.arguments:",
            ),
            (
                Verb::Approve,
                json!({ "call_id": "c", "reason": "x" }),
                "$.reason:",
            ),
            (
                Verb::Deny,
                json!({ "call_id": "c", "reason": 3 }),
                "$.reason:",
            ),
            (Verb::Answer, json!({ "call_id": "c" }), "$.result:"),
            (
                Verb::Answer,
                json!({ "call_id": "c", "error": "boom" }),
                "$.error:",
            ),
            (
                Verb::Answer,
                json!({ "call_id": "c", "result": 1, "error": "failed" }),
                "$.error:",
            ),
            (
                Verb::Answer,
                json!({ "call_id": "c", "result": 1, "message": "m" }),
                "$.message:",
            ),
            (
                Verb::Answer,
                json!({ "call_id": "c", "error": "failed", "message": 2 }),
                "$.message:",
            ),
        ];
        for (verb, body, path) in cases {
            let err = parse(verb, &body).expect_err("refused");
            assert!(err.starts_with(path), "{body}: {err}");
        }
    }
}
