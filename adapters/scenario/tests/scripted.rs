//! Scenarios through the library: the example files meet their expectations, scripts repeat and
//! run out as documented, tools answer in call order whatever their delays, undefined tools
//! answer `not_found`, and expectations report mismatches by path.

use serde_json::json;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use terminus_kernel::{
    AbortReason, Entry, ModelErrorKind, Outcome, Record, ToolErrorKind, ToolOutcome,
};
use terminus_runtime::{FaultKind, Journal, MemoryStore, RunError, Transition};
use terminus_scenario::Scenario;
use tokio::time::Instant;

fn examples() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../spec/scenarios");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("spec/scenarios exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files
}

#[tokio::test(start_paused = true)]
async fn the_example_scenarios_meet_their_expectations() {
    let files = examples();
    assert!(files.len() >= 4, "found {files:?}");
    for file in files {
        let scenario = Scenario::load(&file).unwrap_or_else(|e| panic!("{e}"));
        let expect = scenario
            .expect()
            .unwrap_or_else(|| panic!("{} has no expect block", file.display()))
            .clone();
        let report = scenario
            .run()
            .execution(scenario.name())
            .execute()
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let mismatches = expect.check(&report);
        assert!(mismatches.is_empty(), "{}: {mismatches:#?}", file.display());
    }
}

async fn journal_of(
    scenario: &Scenario,
) -> (Result<terminus_runtime::Report, RunError>, MemoryStore) {
    let store = MemoryStore::new();
    let result = scenario
        .run()
        .store(Arc::new(store.clone()))
        .execution("x")
        .execute()
        .await;
    (result, store)
}

fn tool_results(records: &[Arc<Record>]) -> Vec<Vec<(String, String, ToolOutcome)>> {
    records
        .iter()
        .filter_map(|r| match &r.entry {
            Entry::ToolResults { results } => Some(
                results
                    .iter()
                    .map(|r| (r.call_id.to_string(), r.name.to_string(), r.outcome.clone()))
                    .collect(),
            ),
            _ => None,
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn results_follow_call_order_whatever_the_delays_and_ids_are_deterministic() {
    let scenario = Scenario::parse(
        r#"{
        "task": "t",
        "model": { "turns": [
            { "tool_calls": [ { "name": "t", "arguments": {} }, { "name": "t", "id": "mine" },
                              { "name": "undefined_tool" } ] },
            { "text": "Done.", "needs_more_work": false } ] },
        "tools": { "t": { "results": [ { "ok": "first", "delay_ms": 300 }, { "ok": "second" } ] } }
    }"#,
    )
    .expect("valid");
    let start = Instant::now();
    let (report, store) = journal_of(&scenario).await;
    let report = report.expect("the run reaches a stop");
    assert_eq!(
        start.elapsed(),
        Duration::from_millis(300),
        "delays are real sleeps"
    );
    assert_eq!(report.excluded_tools, ["undefined_tool"]);
    let results = tool_results(&store.records("x").await.expect("stored"));
    assert_eq!(
        results,
        [vec![
            (
                "call-1-0".into(),
                "t".into(),
                ToolOutcome::ok(json!("first"))
            ),
            ("mine".into(), "t".into(), ToolOutcome::ok(json!("second"))),
            (
                "call-1-2".into(),
                "undefined_tool".into(),
                ToolOutcome::Error {
                    kind: ToolErrorKind::NotFound,
                    message: "there is no tool named `undefined_tool`".into()
                }
            ),
        ]]
    );
}

#[tokio::test]
async fn repeat_last_and_cycle_replay_their_scripts() {
    let scenario = Scenario::parse(
        r#"{
        "task": "t",
        "policy": { "max_tool_failures": 10 },
        "model": { "turns": [
            { "tool_calls": [ { "name": "c" }, { "name": "l" } ] },
            { "text": "Done.", "needs_more_work": false } ], "repeat": "cycle" },
        "tools": {
            "c": { "results": [ { "ok": "a" }, { "error": "failed", "message": "b" } ], "repeat": "cycle" },
            "l": { "results": [ { "ok": 1 }, { "ok": 2 } ], "repeat": "last" } },
        "expect": { "reason": "explicit", "model_calls": 2 }
    }"#,
    )
    .expect("valid");
    // The first run ends after two model calls; run the tools' scripts further by hand.
    let (report, _) = journal_of(&scenario).await;
    assert_eq!(report.expect("stops").model_calls, 2);
    let c = terminus_scenario::ScriptedTool::new("c", &scenario.file().tools["c"]);
    let l = terminus_scenario::ScriptedTool::new("l", &scenario.file().tools["l"]);
    use terminus_runtime::Tool as _;
    let mut seen = Vec::new();
    for _ in 0..3 {
        seen.push((
            c.call(serde_json::Value::Null).await.expect("cycles"),
            l.call(serde_json::Value::Null).await.expect("repeats"),
        ));
    }
    let failed = ToolOutcome::Error {
        kind: ToolErrorKind::Failed,
        message: "b".into(),
    };
    assert_eq!(
        seen,
        [
            (ToolOutcome::ok(json!("a")), ToolOutcome::ok(json!(1))),
            (failed, ToolOutcome::ok(json!(2))),
            (ToolOutcome::ok(json!("a")), ToolOutcome::ok(json!(2))),
        ]
    );
}

/// A script with `sees` or `not_sees` reads the conversation, so the runtime keeps it even with
/// no context window (without one, a scripted model reads nothing and none is kept); its
/// resumed run sees the journaled results too.
#[tokio::test]
async fn a_turn_that_checks_the_request_sees_the_conversation_live_and_resumed() {
    use terminus_runtime::Model as _;
    let scenario = Scenario::parse(
        r#"{
        "task": "t",
        "model": { "turns": [
            { "tool_calls": [ { "name": "read" } ] },
            { "tool_calls": [ { "name": "read" } ], "sees": [ "contents of a" ] },
            { "text": "Done.", "needs_more_work": false,
              "sees": [ "contents of a", "contents of b" ], "not_sees": [ "contents of c" ] } ] },
        "tools": { "read": { "results": [ { "ok": "contents of a" }, { "ok": "contents of b" } ] } }
    }"#,
    )
    .expect("valid");
    assert!(terminus_scenario::ScriptedModel::new(&scenario.file().model).reads_messages());
    let plain = Scenario::parse(
        r#"{ "task": "t", "model": { "turns": [ { "text": "Done.", "needs_more_work": false } ] } }"#,
    )
    .expect("valid");
    assert!(!terminus_scenario::ScriptedModel::new(&plain.file().model).reads_messages());

    let (report, store) = journal_of(&scenario).await;
    assert!(report.expect("stops").is_complete());
    // Cut after the second result and resume: the last turn's `sees` holds on the replayed
    // conversation.
    let records = store.records("x").await.expect("records");
    let cut = records
        .iter()
        .position(|r| r.entry.kind() == "tool_results" && r.key.checkpoint > 2)
        .expect("the second batch's results");
    let resumed = MemoryStore::new();
    let spec = store.spec("x").await.expect("spec").expect("a spec");
    assert!(resumed.create("x", &spec).await.expect("created"));
    resumed
        .append_all("x", records[..=cut + 1].to_vec())
        .await
        .expect("appended");
    let report = scenario
        .resume("x")
        .store(Arc::new(resumed))
        .execute()
        .await
        .expect("resumes");
    assert!(report.is_complete(), "{report:?}");
    assert_eq!(report.model_calls, 3);
}

#[tokio::test]
async fn running_out_of_a_none_script_names_the_script() {
    let cases = [
        (
            r#"{ "task": "t", "model": { "turns": [ { "text": "a", "needs_more_work": true } ] } }"#,
            "model script exhausted after 1 turn (repeat: \"none\")",
        ),
        (
            r#"{ "task": "t", "model": { "turns": [
                   { "tool_calls": [ { "name": "x" } ] }, { "tool_calls": [ { "name": "x" } ] } ] },
                 "tools": { "x": { "results": [ { "ok": 1 } ] } } }"#,
            "tool `x` script exhausted after 1 result (repeat: \"none\")",
        ),
        (
            r#"{ "task": "t", "policy": { "verify_completion": true },
                 "model": { "turns": [ { "text": "done" } ], "repeat": "last" },
                 "verifier": { "verdicts": [ { "complete": false }, { "complete": false } ] } }"#,
            "verifier script exhausted after 2 verdicts (repeat: \"none\")",
        ),
    ];
    for (json, message) in cases {
        let scenario = Scenario::parse(json).expect("valid");
        let (result, _) = journal_of(&scenario).await;
        match result {
            Err(RunError::Fault(fault)) => {
                assert_eq!(fault.kind, FaultKind::InvalidInput);
                assert_eq!(fault.message, message);
            }
            other => panic!("expected a fault for {json}, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn scripted_model_errors_reach_the_kernel() {
    let scenario = Scenario::parse(
        r#"{ "task": "t", "policy": { "retry_base_ms": 1, "retry_max_ms": 1 },
             "model": { "turns": [ { "error": "server" }, { "error": "rate_limited", "retry_after_ms": 5 },
                                   { "error": "auth" } ] } }"#,
    )
    .expect("valid");
    let lines = Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = Arc::clone(&lines);
    let store = MemoryStore::new();
    let report = scenario
        .run()
        .store(Arc::new(store.clone()))
        .execution("x")
        .observer(move |t: &Transition<'_>| {
            if let Ok(mut l) = sink.lock() {
                l.push(t.summary.to_owned());
            }
        })
        .execute()
        .await
        .expect("the run reaches a stop");
    assert_eq!(report.outcome, Outcome::Aborted(AbortReason::ModelError));
    assert_eq!(report.stats.model_errors, 3);
    assert_eq!(
        *lines.lock().expect("not poisoned"),
        [
            "server: scripted server error",
            "rate_limited: scripted rate_limited error",
            "auth: scripted auth error"
        ]
    );
    let journaled: Vec<(ModelErrorKind, Option<u64>)> = store
        .records("x")
        .await
        .expect("stored")
        .iter()
        .filter_map(|r| match r.entry {
            Entry::ModelError {
                error,
                retry_after_ms,
            } => Some((error, retry_after_ms)),
            _ => None,
        })
        .collect();
    assert_eq!(
        journaled,
        [
            (ModelErrorKind::Server, None),
            (ModelErrorKind::RateLimited, Some(5)),
            (ModelErrorKind::Auth, None)
        ]
    );
}

#[tokio::test]
async fn expectations_report_every_mismatch_by_path() {
    let scenario = Scenario::parse(
        r#"{ "task": "t", "model": { "turns": [ { "text": "Hi." } ] },
             "expect": { "outcome": "aborted", "reason": "incomplete", "rule": "claim_refused_limit",
                         "result": null, "excluded_tools": ["x"],
                         "steps": { "min": 2 }, "model_calls": { "max": 0 }, "nudges": 0,
                         "entries": { "min": 1, "max": 3 } } }"#,
    )
    .expect("valid");
    let (report, _) = journal_of(&scenario).await;
    let report = report.expect("the run reaches a stop");
    let mismatches = scenario.expect().expect("present").check(&report);
    assert_eq!(
        mismatches,
        [
            "$.expect.outcome: expected `aborted`, got `complete`",
            "$.expect.reason: expected `incomplete`, got `answered`",
            "$.expect.rule: expected `claim_refused_limit`, got `claim_answered`",
            "$.expect.result: expected null, got \"Hi.\"",
            "$.expect.excluded_tools: expected [\"x\"], got []",
            "$.expect.steps: expected at least 2, got 1",
            "$.expect.model_calls: expected at most 0, got 1",
            "$.expect.entries: expected between 1 and 3, got 4",
        ]
    );
}

#[tokio::test]
async fn the_transcript_is_what_the_model_was_sent_with_notices_on_the_last_result() {
    let scenario = Scenario::parse(
        r#"{
        "task": "Find the failing test.",
        "policy": { "max_repeats": 3 },
        "model": { "turns": [
            { "text": "Looking.", "tool_calls": [ { "name": "grep", "arguments": { "pattern": "FAIL", "in": "." } } ] }
        ], "repeat": "last" },
        "tools": { "grep": { "results": [ { "ok": "no matches" } ], "repeat": "last" } }
    }"#,
    )
    .expect("a valid scenario");
    let sent = terminus_scenario::sent::Sent::new();
    let report = scenario
        .with_sent(sent.clone())
        .run()
        .execute()
        .await
        .expect("the run reaches a stop");
    let calls = sent.calls();
    assert_eq!(
        u32::try_from(calls.len()).ok(),
        Some(report.stats.model_calls),
        "one entry a model call"
    );
    assert_eq!(
        calls[0],
        serde_json::json!([{ "role": "user", "text": "Find the failing test." }])
    );
    let call = r#"grep {"in":".","pattern":"FAIL"}"#;
    // The third call: the loop warning of the second tool turn rides on its result.
    assert_eq!(
        calls[2],
        serde_json::json!([
            { "role": "user", "text": "Find the failing test." },
            { "role": "assistant", "text": "Looking.", "calls": [call] },
            { "role": "tool", "text": "no matches", "tool": "grep" },
            { "role": "assistant", "text": "Looking.", "calls": [call] },
            { "role": "tool", "tool": "grep", "text": "no matches\n\nYour last tool turn repeated \
              the one before it: the same calls with the same results. If the same sequence \
              occurs 3 times in a row the run stops with no_progress; change course." },
        ])
    );
}
