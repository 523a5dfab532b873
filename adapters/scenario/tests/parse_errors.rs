//! Every invalid scenario is refused with the JSON path at fault and the problem.

use terminus_scenario::{Scenario, ScenarioError};

/// A valid scenario with `patch` merged in at the top level (`null` removes a field).
fn with(patch: serde_json::Value) -> String {
    let mut base = serde_json::json!({
        "name": "t",
        "task": "Do it",
        "policy": { "verify_completion": true },
        "model": { "turns": [ { "text": "Done." } ] },
        "tools": { "read_file": { "results": [ { "ok": "x" } ] } },
        "verifier": { "verdicts": [ { "complete": true } ] }
    });
    if let (Some(base), Some(patch)) = (base.as_object_mut(), patch.as_object()) {
        for (k, v) in patch {
            if v.is_null() {
                base.remove(k);
            } else {
                base.insert(k.clone(), v.clone());
            }
        }
    }
    base.to_string()
}

fn error(json: &str) -> ScenarioError {
    match Scenario::parse(json) {
        Ok(s) => panic!("accepted an invalid scenario: {s:?}"),
        Err(e) => e,
    }
}

#[track_caller]
fn refused(json: &str, path: &str, problem: &str) {
    let e = error(json);
    assert_eq!(e.path, path, "wrong path for {e}");
    assert!(
        e.problem.contains(problem),
        "{e:?} does not say {problem:?}"
    );
    let shown = e.to_string();
    assert!(shown.starts_with(&format!("{path}: ")), "{shown}");
}

#[test]
fn the_base_scenario_is_valid() {
    let s = Scenario::parse(&with(serde_json::json!({}))).expect("valid");
    assert_eq!(s.name(), "t");
    assert_eq!(s.task(), "Do it");
    assert!(s.policy().verify_completion);
}

#[test]
fn unknown_fields_are_named_with_their_path() {
    let turns = serde_json::json!({ "model": { "turns": [
        { "text": "a" }, { "text": "b" }, { "txt": "c" } ] } });
    refused(
        &with(turns),
        "$.model.turns[2].txt",
        "unknown field `txt`, expected one of `text`",
    );
    refused(
        &with(serde_json::json!({ "polcy": {} })),
        "$.polcy",
        "unknown field `polcy`",
    );
    refused(
        &with(serde_json::json!({ "policy": { "max_stepz": 3 } })),
        "$.policy.max_stepz",
        "unknown field `max_stepz`",
    );
    refused(
        &with(serde_json::json!({ "tools": { "a.b": { "results": [ { "okk": 1 } ] } } })),
        "$.tools[\"a.b\"].results[0].okk",
        "unknown field `okk`",
    );
    refused(
        &with(serde_json::json!({ "model": { "turns": [
            { "tool_calls": [ { "name": "x", "args": {} } ] } ] } })),
        "$.model.turns[0].tool_calls[0].args",
        "unknown field `args`",
    );
}

#[test]
fn wrong_types_and_unknown_values_are_named_with_their_path() {
    refused(
        &with(serde_json::json!({ "policy": { "max_steps": "many" } })),
        "$.policy.max_steps",
        "invalid type: string \"many\", expected u32",
    );
    refused(
        &with(serde_json::json!({ "model": { "turns": [ { "error": "overloaded" } ] } })),
        "$.model.turns[0].error",
        "unknown variant `overloaded`, expected one of `rate_limited`",
    );
    refused(
        &with(serde_json::json!({ "tools": { "t": { "results": [ { "error": "boom" } ] } } })),
        "$.tools.t.results[0].error",
        "unknown variant `boom`, expected one of `permission_denied`",
    );
    refused(
        &with(
            serde_json::json!({ "model": { "turns": [ { "text": "a" } ], "repeat": "forever" } }),
        ),
        "$.model.repeat",
        "unknown variant `forever`, expected one of `none`, `last`, `cycle`",
    );
    refused(
        &with(
            serde_json::json!({ "model": { "turns": [ { "text": "a", "needs_more_work": "no" } ] } }),
        ),
        "$.model.turns[0].needs_more_work",
        "invalid type: string \"no\", expected a boolean",
    );
    refused(
        &with(serde_json::json!({ "model": { "turns": [ { "usage": { "input_tokens": 1 } } ] } })),
        "$.model.turns[0].usage",
        "missing field `output_tokens`",
    );
    refused(
        &with(serde_json::json!({ "task": null })),
        "$",
        "missing field `task`",
    );
}

#[test]
fn scripts_that_cannot_run_are_refused() {
    refused(
        &with(serde_json::json!({ "model": { "turns": [], "repeat": "last" } })),
        "$.model.turns",
        "empty, but repeat is \"last\"",
    );
    refused(
        &with(serde_json::json!({ "tools": { "t": { "results": [], "repeat": "cycle" } } })),
        "$.tools.t.results",
        "a repeating script needs at least one result",
    );
    refused(
        &with(serde_json::json!({ "verifier": { "verdicts": [], "repeat": "last" } })),
        "$.verifier.verdicts",
        "needs at least one verdict",
    );
    refused(
        &with(serde_json::json!({ "model": { "turns": [
            { "text": "a" }, { "error": "server", "text": "b" } ] } })),
        "$.model.turns[1]",
        "a turn is either a reply or an error: \"error\" cannot go with \"text\"",
    );
    refused(
        &with(
            serde_json::json!({ "model": { "turns": [ { "text": "a", "retry_after_ms": 5 } ] } }),
        ),
        "$.model.turns[0].retry_after_ms",
        "only allowed with \"error\"",
    );
    refused(
        &with(serde_json::json!({ "model": { "turns": [ { "text": "a", "message": "m" } ] } })),
        "$.model.turns[0].message",
        "only allowed with \"error\"",
    );
    refused(
        &with(
            serde_json::json!({ "tools": { "t": { "results": [ { "ok": 1, "error": "failed" } ] } } }),
        ),
        "$.tools.t.results[0]",
        "either \"ok\" or \"error\", not both",
    );
    refused(
        &with(
            serde_json::json!({ "tools": { "t": { "results": [ { "ok": 1 }, { "delay_ms": 5 } ] } } }),
        ),
        "$.tools.t.results[1]",
        "needs \"ok\" or \"error\"",
    );
    refused(
        &with(
            serde_json::json!({ "tools": { "t": { "results": [ { "ok": 1, "message": "m" } ] } } }),
        ),
        "$.tools.t.results[0].message",
        "only allowed with \"error\"",
    );
    refused(
        &with(
            serde_json::json!({ "tools": { "t": { "results": [ { "cancelled": true, "delay_ms": 5 } ] } } }),
        ),
        "$.tools.t.results[0]",
        "a cancelled result has nothing else: \"cancelled\" cannot go with \"delay_ms\"",
    );
    refused(
        &with(
            serde_json::json!({ "tools": { "t": { "results": [ { "cancelled": true, "ok": 1 } ] } } }),
        ),
        "$.tools.t.results[0]",
        "\"cancelled\" cannot go with \"ok\"",
    );
    refused(
        &with(serde_json::json!({ "tools": { "write_todos": { "results": [ { "ok": 1 } ] } } })),
        "$.tools.write_todos",
        "write_todos is built in",
    );
    refused(
        &with(serde_json::json!({ "policy": {} })),
        "$.verifier",
        "never used unless \"policy.verify_completion\" is true",
    );
    refused(
        &with(
            serde_json::json!({ "model": { "turns": [ { "tool_calls": [ { "name": "" } ] } ] } }),
        ),
        "$.model.turns[0].tool_calls[0].name",
        "must not be empty",
    );
    refused(
        &with(serde_json::json!({ "task": "  " })),
        "$.task",
        "must not be empty",
    );
}

#[test]
fn policies_the_kernel_refuses_are_named_with_their_path() {
    refused(
        &with(serde_json::json!({ "policy": { "verify_completion": true, "max_steps": 0 } })),
        "$.policy.max_steps",
        "must be at least 1, got 0",
    );
    refused(
        &with(serde_json::json!({ "policy": { "verify_completion": true,
            "tool_budgets": { "read_file": { "warn_at": 5, "block_at": 2 } } } })),
        "$.policy.tool_budgets.read_file.warn_at",
        "must not exceed block_at (2)",
    );
}

#[test]
fn bad_expectations_are_named_with_their_path() {
    refused(
        &with(serde_json::json!({ "expect": { "stepz": 3 } })),
        "$.expect.stepz",
        "unknown field `stepz`",
    );
    refused(
        &with(serde_json::json!({ "expect": { "reason": "finished" } })),
        "$.expect.reason",
        "unknown reason `finished`, expected one of `verified`",
    );
    refused(
        &with(serde_json::json!({ "expect": { "steps": { "min": 5, "max": 2 } } })),
        "$.expect.steps",
        "min (5) is greater than max (2)",
    );
    refused(
        &with(serde_json::json!({ "expect": { "nudges": { "most": 2 } } })),
        "$.expect.nudges",
        "unknown field `most`, expected `min` or `max`",
    );
    refused(
        &with(serde_json::json!({ "expect": { "nudges": -1 } })),
        "$.expect.nudges",
        "invalid type: integer `-1`, expected a count",
    );
    refused(
        &with(serde_json::json!({ "expect": { "outcome": "aborted", "reason": "verified" } })),
        "$.expect.reason",
        "reason `verified` means outcome `complete`, but outcome says `aborted`",
    );
    refused(
        &with(serde_json::json!({ "expect": { "rule": "no_such_rule" } })),
        "$.expect.rule",
        "unknown variant `no_such_rule`",
    );
}

#[test]
fn broken_json_gives_the_position() {
    let e = error("{ \"task\": \"t\",\n  \"model\": ");
    assert_eq!(e.path, "$.model");
    assert!(e.problem.starts_with("invalid JSON: EOF"), "{e}");
    assert_eq!(e.position, Some((2, 11)));
    let e = error(&format!("{} trailing", with(serde_json::json!({}))));
    assert_eq!(e.path, "$");
    assert!(e.problem.contains("trailing characters"), "{e}");
    assert!(e.position.is_some());
}

#[test]
fn null_is_a_valid_ok_result_and_absent_fields_default() {
    let s = Scenario::parse(
        r#"{ "task": "t", "model": { "turns": [ { "text": "a" } ] },
             "tools": { "t": { "results": [ { "ok": null } ] } } }"#,
    )
    .expect("valid");
    let tool = &s.file().tools["t"];
    assert_eq!(tool.results[0].ok, Some(serde_json::Value::Null));
    assert!(tool.idempotent);
    assert_eq!(s.name(), "scenario");
}

#[test]
fn a_tool_answered_from_outside_needs_no_results() {
    let s = Scenario::parse(
        r#"{ "task": "t", "model": { "turns": [ { "text": "a" } ] },
             "tools": { "ask": { "deferred": true }, "held": { "approval": true } } }"#,
    )
    .expect("a deferred tool without results is valid");
    assert!(s.file().tools["ask"].results.is_empty());
    assert_eq!(
        s.file().tools["ask"].hold(),
        Some(terminus_kernel::Hold::Deferred)
    );
    // A tool without results that repeats them still names what is missing.
    refused(
        &with(serde_json::json!({ "tools": { "t": { "repeat": "cycle" } } })),
        "$.tools.t.results",
        "a repeating script needs at least one result",
    );
}

#[test]
fn cancel_after_ms_is_a_checked_extension() {
    // `cancel_after_ms` (the host's kill switch, so `cancelled` is reachable offline) is an
    // extension of the format of `docs/design.md`: validated like every other field.
    let s = Scenario::parse(&with(serde_json::json!({ "cancel_after_ms": 250 }))).expect("valid");
    assert_eq!(s.file().cancel_after_ms, Some(250));
    assert_eq!(
        Scenario::parse(&with(serde_json::json!({})))
            .expect("valid")
            .file()
            .cancel_after_ms,
        None
    );
    refused(
        &with(serde_json::json!({ "cancel_after_ms": "soon" })),
        "$.cancel_after_ms",
        "invalid type: string \"soon\"",
    );
    refused(
        &with(serde_json::json!({ "cancel_after_ms": -5 })),
        "$.cancel_after_ms",
        "invalid value: integer `-5`",
    );
    refused(
        &with(serde_json::json!({ "cancel_after": 5 })),
        "$.cancel_after",
        "unknown field `cancel_after`",
    );
}

#[test]
fn context_policies_that_cannot_work_are_named_with_their_path() {
    refused(
        &with(serde_json::json!({ "context": { "window": 4000, "prune_at": 3900 } })),
        "$.context.prune_at",
        "is above window - reserve = 3500",
    );
    refused(
        &with(serde_json::json!({ "context": { "window": 4000, "prune_to": 3000 } })),
        "$.context.prune_to",
        "is above prune_at = 2666",
    );
    refused(
        &with(serde_json::json!({ "context": { "window": 0 } })),
        "$.context.window",
        "must be at least 1",
    );
    refused(
        &with(serde_json::json!({ "context": { "window": 4000, "max_tool_result_tokens": 5 } })),
        "$.context.max_tool_result_tokens",
        "is below 128",
    );
    refused(
        &with(serde_json::json!({ "context": { "window": 4000, "tokenizer": "gpt2-xl" } })),
        "$.context.tokenizer",
        "unknown tokenizer `gpt2-xl`",
    );
    refused(
        &with(serde_json::json!({ "context": { "window": 4000, "windw": 1 } })),
        "$.context.windw",
        "unknown field `windw`",
    );
    refused(
        &with(serde_json::json!({ "context": { "prune_at": 10 } })),
        "$.context",
        "missing field `window`",
    );
    refused(
        &with(serde_json::json!({ "tools": { "read_file": { "results": [
            { "error": "failed", "filler_tokens": 10 } ] } } })),
        "$.tools.read_file.results[0].filler_tokens",
        "only allowed with \"ok\"",
    );
    refused(
        &with(serde_json::json!({ "context": { "window": 4000, "keep": ["read_file", "grep"] } })),
        "$.context.keep[1]",
        "unknown tool `grep`: expected one of the scenario's tools (read_file, write_todos)",
    );
    refused(
        &with(serde_json::json!({ "context": { "window": 4000, "auto_checkpoint": {} } })),
        "$.context.auto_checkpoint",
        "policy.auto_checkpoints is 0, so no checkpoint is ever written",
    );
    refused(
        &with(serde_json::json!({ "policy": { "auto_checkpoints": 1 },
            "context": { "window": 4000, "auto_checkpoint": { "max_tokens": 0 } } })),
        "$.context.auto_checkpoint.max_tokens",
        "must be at least 1",
    );
    refused(
        &with(serde_json::json!({ "policy": { "auto_checkpoints": 1 },
            "context": { "window": 4000, "auto_checkpoint": { "model": "" } } })),
        "$.context.auto_checkpoint.model",
        "the model name is empty",
    );
    refused(
        &with(
            serde_json::json!({ "context": { "window": 4000, "auto_checkpoint": { "max": 2 } } }),
        ),
        "$.context.auto_checkpoint.max",
        "unknown field `max`",
    );
    refused(
        &with(serde_json::json!({ "context": { "window": 4000, "keep": "read_file" } })),
        "$.context.keep",
        "invalid type: string \"read_file\"",
    );
    let kept = Scenario::parse(&with(
        serde_json::json!({ "context": { "window": 4000, "keep": ["read_file", "write_todos"] } }),
    ))
    .expect("valid");
    assert_eq!(
        kept.file().context.as_ref().map(|c| c.keep.clone()),
        Some(vec!["read_file".to_owned(), "write_todos".to_owned()])
    );
    // Every tokenizer name the format documents is accepted.
    for name in ["heuristic", "o200k_base", "cl100k_base", "gpt-4o", "gpt-4"] {
        Scenario::parse(&with(
            serde_json::json!({ "context": { "window": 4000, "tokenizer": name } }),
        ))
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}
