//! The journal: the runtime writes the kernel's journal model (keys and records exactly as
//! `terminus_kernel::step_records` lays them out, events write-ahead, intents before execution,
//! results as they arrive), the kernel's `recover` rebuilds the run's machine from any prefix,
//! appends are idempotent, and claims keep a second worker out.

mod common;

use common::{Script, calls, done, text};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use terminus_kernel::{
    CallState, Command, Entry, Handled, Key, Machine, Phase, Policy, Record, ToolOutcome, recover,
    step_records,
};
use terminus_runtime::{
    Claims, Journal, MemoryStore, Report, Run, RunError, RunSpec, StoreError, ToolSet,
};

async fn two_tool_run(store: &MemoryStore, execution: &str) -> Report {
    let model = Script::new([
        calls(&[("echo", json!({ "v": "a" })), ("echo", json!({ "v": "b" }))]),
        done("Both echoed."),
    ]);
    Run::new("Echo a and b", Policy::default(), model)
        .tools(ToolSet::new().with("echo", common::Echo::new(Duration::ZERO)))
        .store(Arc::new(store.clone()))
        .execution(execution)
        .execute()
        .await
        .expect("the run reaches a stop")
}

async fn records(store: &MemoryStore, execution: &str) -> Vec<Record> {
    store
        .records(execution)
        .await
        .expect("stored")
        .iter()
        .map(|r| (**r).clone())
        .collect()
}

fn layout(records: &[Record]) -> Vec<(String, &'static str)> {
    records
        .iter()
        .map(|r| (r.key.to_string(), r.entry.kind()))
        .collect()
}

#[tokio::test]
async fn every_fact_is_journaled_under_its_deterministic_key() {
    let store = MemoryStore::new();
    let report = two_tool_run(&store, "x1").await;
    let records = records(&store, "x1").await;
    let want = [
        ("cp0:e0", "user"),
        ("cp1:e0", "assistant"),
        ("cp1:e1", "transition"),
        ("cp1:e16", "tool_call"),
        ("cp1:e17", "tool_call"),
        ("cp1:e18", "tool_result"),
        ("cp1:e19", "tool_result"),
        ("cp2:e0", "tool_results"),
        ("cp2:e1", "transition"),
        ("cp3:e0", "assistant"),
        ("cp3:e1", "transition"),
        ("cp3:e15", "stop"),
    ];
    let got = layout(&records);
    let got: Vec<(&str, &str)> = got.iter().map(|(k, w)| (k.as_str(), *w)).collect();
    assert_eq!(got, want);
    assert_eq!(report.entries, 12);
    assert_eq!(report.duplicates_prevented, 0);
    let Entry::ToolResult(result) = &records[6].entry else {
        panic!("expected a result");
    };
    assert_eq!(
        (result.call_id.as_str(), &result.outcome),
        ("call-1-1", &ToolOutcome::ok(json!({ "v": "b" })))
    );
    // The spec and the report are kept with the execution.
    let spec = store.spec("x1").await.expect("stored").expect("created");
    assert!(
        spec.started_unix_ms
            .is_some_and(|ms| ms > 1_700_000_000_000)
    );
    assert_eq!(
        spec,
        RunSpec {
            task: "Echo a and b".into(),
            name: None,
            system: None,
            policy: Policy::default(),
            host: None,
            started_unix_ms: spec.started_unix_ms,
        }
    );
    assert_eq!(store.report("x1").await.expect("stored"), Some(report));

    // The same run writes the same keys again.
    let again = MemoryStore::new();
    two_tool_run(&again, "x1").await;
    let keys = |r: &[Record]| r.iter().map(|r| r.key).collect::<Vec<_>>();
    assert_eq!(keys(&self::records(&again, "x1").await), keys(&records));
}

#[tokio::test]
async fn the_journal_is_the_kernels_step_records_plus_results() {
    let store = MemoryStore::new();
    let model = Script::new([
        text("Done?"),
        calls(&[("echo", json!({ "n": 1 })), ("nope", json!({ "n": 2 }))]),
        done("Done."),
    ]);
    let policy = Policy {
        completion_requires: vec!["echo".into()],
        ..Policy::default()
    };
    Run::new("t", policy.clone(), model)
        .tools(ToolSet::new().with("echo", common::Echo::new(Duration::ZERO)))
        .store(Arc::new(store.clone()))
        .execution("s1")
        .execute()
        .await
        .expect("the run reaches a stop");
    let journal = records(&store, "s1").await;
    // Re-drive a fresh machine with the journaled events and rebuild what the kernel says each
    // step records; the runtime's journal must hold exactly that, plus the tool results.
    let mut machine = Machine::new(policy).expect("valid");
    let mut expected = vec![journal[0].clone()];
    let _first: Vec<Command> = std::iter::from_fn(|| machine.poll_command()).collect();
    for record in journal
        .iter()
        .filter(|r| r.key.index == 0 && r.key.checkpoint > 0)
    {
        let event = record.entry.to_event().expect("e0 is an event");
        let Handled::Step(step) = machine.handle(event.clone()) else {
            panic!("every journaled event is a step");
        };
        let commands: Vec<Command> = std::iter::from_fn(|| machine.poll_command()).collect();
        expected.extend(step_records(&event, &step, &commands, |_| true));
    }
    let without_results: Vec<Record> = journal
        .iter()
        .filter(|r| !matches!(r.entry, Entry::ToolResult(_)))
        .cloned()
        .collect();
    expected.sort_by_key(|r| r.key);
    assert_eq!(without_results, expected);
    assert!(
        journal
            .iter()
            .any(|r| matches!(&r.entry, Entry::Nudge(_)) && r.key == Key::guidance(1, 0)),
        "the refused claim's nudge is journaled"
    );
    assert!(
        journal.iter().any(|r| matches!(&r.entry, Entry::Notice(_))),
        "the exclusion notice is journaled"
    );
}

#[tokio::test]
async fn recovery_rebuilds_the_machine_from_any_prefix() {
    let store = MemoryStore::new();
    let report = two_tool_run(&store, "r1").await;
    let journal = records(&store, "r1").await;
    let all = recover(Policy::default(), journal.clone()).expect("a valid journal");
    assert_eq!(all.machine.stats(), report.stats);
    assert_eq!(all.machine.outcome(), Some(report.outcome));
    assert_eq!(all.task, "Echo a and b");
    assert_eq!(all.records, 12);

    // A crash after the intents, before any result: both calls are in doubt, the machine
    // waits for their results.
    let before =
        |key: Key| -> Vec<Record> { journal.iter().filter(|r| r.key < key).cloned().collect() };
    let cut = recover(Policy::default(), before(Key::result(1, 2, 0))).expect("a prefix");
    assert_eq!(cut.machine.phase(), Phase::Acting);
    assert_eq!(
        cut.calls,
        [
            CallState::InDoubt { idempotent: true },
            CallState::InDoubt { idempotent: true }
        ]
    );

    // The second call finished, the first did not: only the first is in doubt.
    let mut partial = before(Key::result(1, 2, 0));
    partial.extend(
        journal
            .iter()
            .filter(|r| r.key == Key::result(1, 2, 1))
            .cloned(),
    );
    let cut = recover(Policy::default(), partial).expect("a prefix");
    assert_eq!(cut.calls[0], CallState::InDoubt { idempotent: true });
    assert!(matches!(&cut.calls[1], CallState::Done(r) if r.call_id == "call-1-1"));
}

#[tokio::test]
async fn an_append_under_an_existing_key_returns_the_stored_record() {
    let store = MemoryStore::new();
    let first = Arc::new(Record {
        key: Key::event(1),
        entry: Entry::Cancel,
    });
    let second = Arc::new(Record {
        key: Key::event(1),
        entry: Entry::Tick { now_ms: 5 },
    });
    let a = store.append("e", first.clone()).await.expect("stored");
    assert!(!a.already_existed);
    let b = store.append("e", second).await.expect("stored");
    assert!(b.already_existed);
    assert_eq!(b.record, first);
    assert_eq!(store.count("e").await.expect("stored"), 1);
}

#[tokio::test]
async fn running_an_execution_twice_is_refused_and_writes_nothing() {
    let store = MemoryStore::new();
    two_tool_run(&store, "once").await;
    let model = Script::new([text("again")]);
    let err = Run::new("t", Policy::default(), model.clone())
        .store(Arc::new(store.clone()))
        .execution("once")
        .execute()
        .await
        .expect_err("the execution exists");
    assert!(
        matches!(&err, RunError::ExecutionExists(id) if id == "once"),
        "{err:?}"
    );
    assert_eq!(err.exit_code(), 2);
    assert_eq!(model.requests(), 0);
    assert_eq!(store.count("once").await.expect("stored"), 12);
}

#[tokio::test]
async fn an_execution_claimed_by_another_worker_is_not_resumed() {
    let store = MemoryStore::new();
    let spec = RunSpec {
        task: "t".into(),
        name: None,
        system: None,
        policy: Policy::default(),
        host: None,
        started_unix_ms: None,
    };
    assert!(store.create("busy", &spec).await.expect("stored"));
    store
        .claim("busy", "other-worker", Duration::from_secs(30))
        .await
        .expect("free");
    let model = Script::new([text("never")]);
    let err = Run::resume("busy", model.clone())
        .store(Arc::new(store.clone()))
        .execute()
        .await
        .expect_err("claimed");
    assert!(
        matches!(&err, RunError::Store(StoreError::Claimed { execution, worker })
            if execution == "busy" && worker == "other-worker"),
        "{err:?}"
    );
    assert_eq!(err.exit_code(), 4);
    assert_eq!(
        store.conflicts("busy").await.expect("read"),
        1,
        "the refused resume is counted in the store"
    );
    assert_eq!(model.requests(), 0);
    assert_eq!(store.count("busy").await.expect("stored"), 0);
    // `run` of an id that exists is refused before any claim or model call.
    let err = Run::new("t", Policy::default(), model.clone())
        .store(Arc::new(store.clone()))
        .execution("busy")
        .execute()
        .await
        .expect_err("exists");
    assert!(
        matches!(&err, RunError::ExecutionExists(id) if id == "busy"),
        "{err:?}"
    );
    assert_eq!(model.requests(), 0);
}

#[tokio::test(start_paused = true)]
async fn an_interrupted_tool_turn_leaves_its_call_in_doubt_until_the_cancel_step() {
    let store = MemoryStore::new();
    let kill = terminus_runtime::KillSwitch::new();
    let model = Script::new([calls(&[("echo", json!({ "n": 1 }))])]);
    let run = Run::new("t", Policy::default(), model)
        .tools(ToolSet::new().with("echo", common::Echo::new(Duration::from_secs(60))))
        .store(Arc::new(store.clone()))
        .execution("k1")
        .kill_switch(kill.clone())
        .execute();
    let handle = tokio::spawn(run);
    tokio::time::sleep(Duration::from_secs(1)).await;
    kill.kill();
    let report = handle
        .await
        .expect("no panic")
        .expect("the run reaches a stop");
    let journal = records(&store, "k1").await;
    let got = layout(&journal);
    let got: Vec<(&str, &str)> = got.iter().map(|(k, w)| (k.as_str(), *w)).collect();
    assert_eq!(
        got,
        [
            ("cp0:e0", "user"),
            ("cp1:e0", "assistant"),
            ("cp1:e1", "transition"),
            ("cp1:e16", "tool_call"),
            ("cp2:e0", "cancel"),
            ("cp2:e1", "transition"),
            ("cp2:e15", "stop"),
        ]
    );
    assert_eq!(report.entries, 7);
    let recovered = recover(Policy::default(), journal).expect("valid");
    assert_eq!(recovered.machine.stats(), report.stats);
}

#[tokio::test]
async fn the_report_json_has_the_contract_fields() {
    let store = MemoryStore::new();
    let report = two_tool_run(&store, "j1").await;
    let value: serde_json::Value =
        serde_json::from_str(&report.to_json_line()).expect("valid JSON");
    for field in [
        "execution",
        "outcome",
        "reason",
        "steps",
        "model_calls",
        "tool_calls",
        "nudges",
        "verification_failures",
        "no_ops",
        "empty_responses",
        "excluded_tools",
        "entries",
        "duplicates_prevented",
        "result",
    ] {
        assert!(value.get(field).is_some(), "missing {field}");
    }
    assert_eq!(value["outcome"], "complete");
    assert_eq!(value["reason"], "explicit");
    assert_eq!(value["result"], "Both echoed.");
    assert_eq!(value["entries"], 12);
    let back: Report = serde_json::from_value(value).expect("round trips");
    assert_eq!(back, report);
}
