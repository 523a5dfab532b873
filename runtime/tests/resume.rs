//! Resume: a run interrupted at any point goes on from its journal without calling the model or
//! tools again for what is journaled, with its counters (budgets are not renewed), the same
//! conversation, and in-doubt tool calls handled by the tool's idempotency.

mod common;

use async_trait::async_trait;
use common::{Script, calls, done};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use terminus_kernel::{Entry, Policy, ToolOutcome};
use terminus_runtime::{
    Fault, InDoubt, Journal, MemoryStore, Run, RunError, RuntimeConfig, StoreError, Tool, ToolSet,
};

/// A tool whose first `fail_first` calls are adapter faults (the process "dies" mid-call, after
/// the intent was journaled), then echoes. Counts every call.
#[derive(Debug)]
struct Flaky {
    fail_first: usize,
    idempotent: bool,
    calls: AtomicUsize,
}

impl Flaky {
    fn new(fail_first: usize, idempotent: bool) -> Arc<Flaky> {
        Arc::new(Flaky {
            fail_first,
            idempotent,
            calls: AtomicUsize::new(0),
        })
    }
}

#[async_trait]
impl Tool for Flaky {
    fn idempotent(&self) -> bool {
        self.idempotent
    }
    async fn call(&self, arguments: Value) -> Result<ToolOutcome, Fault> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        if n < self.fail_first {
            return Err(Fault::internal("the process died during the call"));
        }
        Ok(ToolOutcome::ok(arguments))
    }
}

fn policy() -> Policy {
    Policy {
        max_model_calls: 5,
        ..Policy::default()
    }
}

async fn keys_are_unique(store: &MemoryStore, execution: &str) -> usize {
    let records = store.records(execution).await.expect("stored");
    let keys: BTreeSet<_> = records.iter().map(|r| r.key).collect();
    assert_eq!(keys.len(), records.len(), "a key appears twice");
    assert_eq!(
        store.count(execution).await.expect("stored"),
        records.len() as u64
    );
    records.len()
}

#[tokio::test]
async fn an_interrupted_run_resumes_without_calling_the_model_again() {
    // The uninterrupted run, for comparison.
    let full = Script::new([
        calls(&[("echo", json!({ "v": "a" }))]),
        calls(&[("echo", json!({ "v": "b" }))]),
        done("a and b echoed"),
    ]);
    let echo = common::Echo::new(Duration::ZERO);
    let reference = Run::new("Echo a, then b", policy(), full.clone())
        .tools(ToolSet::new().with("echo", echo.clone()))
        .execute()
        .await
        .expect("a report");

    // The same run, whose model dies after two turns (its script runs out: an adapter fault).
    let store = MemoryStore::new();
    let first = Script::new([
        calls(&[("echo", json!({ "v": "a" }))]),
        calls(&[("echo", json!({ "v": "b" }))]),
    ]);
    let echo1 = common::Echo::new(Duration::ZERO);
    let err = Run::new("Echo a, then b", policy(), first.clone())
        .tools(ToolSet::new().with("echo", echo1.clone()))
        .store(Arc::new(store.clone()))
        .execution("x")
        .execute()
        .await
        .expect_err("the model died");
    assert!(matches!(err, RunError::Fault(_)), "{err}");
    assert_eq!(first.requests(), 3);
    let before = keys_are_unique(&store, "x").await;

    // Resume with a model that has only the last answer.
    let second = Script::new([done("a and b echoed")]);
    let echo2 = common::Echo::new(Duration::ZERO);
    let report = Run::resume("x", second.clone())
        .tools(ToolSet::new().with("echo", echo2.clone()))
        .store(Arc::new(store.clone()))
        .execute()
        .await
        .expect("a report");
    assert_eq!(second.requests(), 1, "journaled turns were asked for again");
    assert_eq!(
        echo2.calls.load(Ordering::SeqCst),
        0,
        "a journaled tool ran again"
    );
    assert_eq!(echo1.calls.load(Ordering::SeqCst), 2);
    // The same path, counters and result as the uninterrupted run.
    assert_eq!(report.outcome, reference.outcome);
    assert_eq!(report.stats, reference.stats);
    assert_eq!(report.trace, reference.trace);
    assert_eq!(report.result, reference.result);
    assert_eq!(report.model_calls, 3);
    // The resumed model saw exactly the conversation the uninterrupted one saw at that turn.
    let seen_full = full.seen.lock().expect("lock").clone();
    assert_eq!(second.last_messages(), seen_full[2]);
    // Nothing was written twice; the re-journaled last step counted as prevented duplicates.
    let after = keys_are_unique(&store, "x").await;
    assert!(after > before);
    assert_eq!(report.entries, after as u64);
    assert!(report.duplicates_prevented >= 1);
    assert_eq!(report.entries, reference.entries);

    // Resuming an ended execution runs nothing and returns its report.
    let third = Script::new([]);
    let again = Run::resume("x", third.clone())
        .store(Arc::new(store.clone()))
        .execute()
        .await
        .expect("the stored report");
    assert_eq!(again, report);
    assert_eq!(third.requests(), 0);
    assert_eq!(keys_are_unique(&store, "x").await, after);
}

/// Runs until the tool call dies after its intent was journaled, then resumes.
async fn in_doubt_run(
    idempotent: bool,
    in_doubt: InDoubt,
) -> (
    Result<terminus_runtime::Report, RunError>,
    Arc<Script>,
    Arc<Flaky>,
    MemoryStore,
) {
    let store = MemoryStore::new();
    let tool = Flaky::new(1, idempotent);
    let first = Script::new([calls(&[("pay", json!({"amount": 5}))])]);
    let err = Run::new("Pay 5", policy(), first)
        .tools(ToolSet::new().with("pay", tool.clone()))
        .store(Arc::new(store.clone()))
        .execution("p")
        .execute()
        .await
        .expect_err("the tool call died");
    assert_eq!(err.exit_code(), 3);
    let records = store.records("p").await.expect("stored");
    assert!(
        records
            .iter()
            .any(|r| matches!(r.entry, Entry::ToolCall { .. })),
        "the intent is journaled"
    );
    assert!(
        !records
            .iter()
            .any(|r| matches!(r.entry, Entry::ToolResult(_)))
    );
    let second = Script::new([done("Paid.")]);
    let resumed = Run::resume("p", second.clone())
        .tools(ToolSet::new().with("pay", tool.clone()))
        .store(Arc::new(store.clone()))
        .config(RuntimeConfig {
            in_doubt,
            ..RuntimeConfig::default()
        })
        .execute()
        .await;
    (resumed, second, tool, store)
}

#[tokio::test]
async fn an_in_doubt_call_of_an_idempotent_tool_runs_again() {
    let (report, model, tool, _) = in_doubt_run(true, InDoubt::AskModel).await;
    let report = report.expect("a report");
    assert_eq!(tool.calls.load(Ordering::SeqCst), 2, "re-run once");
    assert!(report.is_complete());
    assert_eq!(report.tool_calls, 1);
    let seen = model.last_messages();
    assert!(
        seen.iter().any(|m| m.content.contains("amount")),
        "the model sees the re-run's result: {seen:?}"
    );
}

#[tokio::test]
async fn an_in_doubt_call_of_a_non_idempotent_tool_is_not_run_again_and_the_model_is_told() {
    let (report, model, tool, store) = in_doubt_run(false, InDoubt::AskModel).await;
    let report = report.expect("a report");
    assert_eq!(tool.calls.load(Ordering::SeqCst), 1, "never run twice");
    assert_eq!(report.stats.tool_failures, 1);
    let seen = model.last_messages();
    assert!(
        seen.iter().any(|m| m.content.contains("in doubt")),
        "the model is told: {seen:?}"
    );
    // The answer is journaled: a later resume does not see the call in doubt again.
    let records = store.records("p").await.expect("stored");
    assert!(records.iter().any(|r| matches!(&r.entry, Entry::ToolResult(res) if matches!(&res.outcome, ToolOutcome::Error { message, .. } if message.starts_with("in doubt")))));
}

#[tokio::test]
async fn an_in_doubt_call_stops_the_run_when_configured_to() {
    let (report, model, tool, _) = in_doubt_run(false, InDoubt::Stop).await;
    let err = report.expect_err("stopped");
    assert!(
        matches!(&err, RunError::InDoubt { tool, .. } if tool == "pay"),
        "{err}"
    );
    assert_eq!(err.exit_code(), 3);
    assert_eq!(tool.calls.load(Ordering::SeqCst), 1);
    assert_eq!(model.requests(), 0);
}

#[tokio::test]
async fn resuming_an_unknown_execution_is_invalid_input() {
    let model = Script::new([]);
    let err = Run::resume("nope", model.clone())
        .store(Arc::new(MemoryStore::new()))
        .execute()
        .await
        .expect_err("unknown");
    assert!(
        matches!(&err, RunError::Store(StoreError::NotFound(id)) if id == "nope"),
        "{err:?}"
    );
    assert_eq!(err.exit_code(), 2);
    assert_eq!(model.requests(), 0);
}

/// A per-tool budget's warnings and blocks are in the report of a resumed run as in the
/// uninterrupted one: those of the replayed steps from the journal (through the kernel), the
/// rest as they happen.
#[tokio::test]
async fn a_resumed_run_reports_the_tool_budget_events_of_the_whole_run() {
    let policy = Policy {
        max_model_calls: 6,
        tool_budgets: [(
            "echo".to_owned(),
            terminus_kernel::ToolBudget {
                warn_at: Some(2),
                block_at: Some(3),
                ..terminus_kernel::ToolBudget::default()
            },
        )]
        .into(),
        ..Policy::default()
    };
    let turns = || {
        [
            calls(&[("echo", json!({ "v": "a" }))]),
            calls(&[("echo", json!({ "v": "b" }))]),
            calls(&[("echo", json!({ "v": "c" })), ("other", json!({}))]),
        ]
    };
    let tools = || {
        ToolSet::new()
            .with("echo", common::Echo::new(Duration::ZERO))
            .with("other", common::Echo::new(Duration::ZERO))
    };
    let reference = Run::new(
        "Echo",
        policy.clone(),
        Script::new(turns().into_iter().chain([done("echoed")])),
    )
    .tools(tools())
    .execute()
    .await
    .expect("a report");
    let kinds: Vec<(&str, u32, u32)> = reference
        .tool_budget_events
        .iter()
        .map(|e| (e.kind.as_str(), e.call, e.step))
        .collect();
    assert_eq!(kinds, [("warn", 2, 3), ("block", 3, 5)]);

    // The model dies after the three turns (the block among them), and the run is resumed.
    let store = MemoryStore::new();
    Run::new("Echo", policy, Script::new(turns()))
        .tools(tools())
        .store(Arc::new(store.clone()))
        .execution("budgets")
        .execute()
        .await
        .expect_err("the model died");
    let report = Run::resume("budgets", Script::new([done("echoed")]))
        .tools(tools())
        .store(Arc::new(store.clone()))
        .execute()
        .await
        .expect("a report");
    assert_eq!(report.trace, reference.trace);
    assert_eq!(report.tool_budget_events, reference.tool_budget_events);
}

/// Seed 004's read budget: `echo` blocks from its second call until `post` succeeds, and one
/// checkpoint may be written for the agent.
fn forgetful() -> Policy {
    let mut policy = Policy {
        auto_checkpoints: 1,
        max_repeats: 50,
        ..Policy::default()
    };
    policy.tool_budgets.insert(
        "echo".into(),
        terminus_kernel::ToolBudget {
            block_at: Some(2),
            reset_on: vec!["post".into()],
            ..terminus_kernel::ToolBudget::default()
        },
    );
    policy
}

const SUMMARY: &str = "Echoed a. Left: echo b, then say done.";

/// The turns of the forgetful agent up to its checkpoint (echo a; echo b refused twice) and the
/// checkpoint's reply, then the rest of the run.
fn forgetful_turns() -> (Vec<common::Answer>, Vec<common::Answer>) {
    let echo = |v: &str| calls(&[("echo", json!({ "v": v }))]);
    (
        vec![echo("a"), echo("b"), echo("b"), common::text(SUMMARY)],
        vec![echo("b"), done("a and b echoed")],
    )
}

fn checkpoint_entries(records: &[Arc<terminus_kernel::Record>]) -> Vec<(String, String)> {
    records
        .iter()
        .filter_map(|r| match &r.entry {
            Entry::Checkpoint { note, text } => Some((note.clone(), text.clone())),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_checkpoint_written_for_the_agent_is_journaled_and_never_asked_for_twice() {
    let (before, after) = forgetful_turns();
    let full = Script::new(before.iter().chain(&after).cloned());
    let store = MemoryStore::new();
    let reference = Run::new("Echo a, then b", forgetful(), full.clone())
        .tools(ToolSet::new().with("echo", common::Echo::new(Duration::ZERO)))
        .store(Arc::new(store.clone()))
        .execution("ref")
        .execute()
        .await
        .expect("a report");
    assert_eq!(reference.stats.auto_checkpoints, 1);
    assert_eq!(reference.stats.refused_calls, 2);
    assert_eq!(reference.stats.tool_calls, 2);
    // The kernel counts its own model calls; the checkpoint's is the runtime's sixth request.
    assert_eq!(reference.stats.model_calls, 5);
    assert_eq!(full.requests(), 6);
    let seen = full.seen.lock().expect("lock").clone();
    let enabled = full.tools_enabled.lock().expect("lock").clone();
    // The checkpoint request: no tools, the kernel's prompt last.
    assert!(!enabled[3], "the checkpoint was asked with tools");
    let prompt = seen[3].last().expect("a prompt");
    assert!(
        prompt.content.starts_with("Write a checkpoint"),
        "{prompt:?}"
    );
    // The next turn's conversation holds the note and the summary, once.
    let note = seen[4]
        .iter()
        .filter(|m| {
            m.content
                .starts_with(terminus_kernel::CHECKPOINT_NOTE_START)
        })
        .collect::<Vec<_>>();
    assert_eq!(note.len(), 1, "{:?}", seen[4]);
    assert!(note[0].content.ends_with(SUMMARY), "{}", note[0].content);
    assert!(note[0].content.contains("`echo`"), "{}", note[0].content);
    let written = checkpoint_entries(&store.records("ref").await.expect("stored"));
    assert_eq!(written.len(), 1);
    assert_eq!(written[0].1, SUMMARY);

    // The model dies at the call after the checkpoint: the checkpoint is journaled (with what
    // the run carried) and a resume does not ask for it again.
    let (written, rest, resumed) = die_then_resume(&store, "x", &before, after.clone()).await;
    assert_eq!(written, 1);
    assert_eq!(
        rest.requests(),
        2,
        "the written checkpoint was asked for again"
    );
    assert_eq!(rest.seen.lock().expect("lock")[0], seen[4]);
    assert_eq!(
        (&resumed.outcome, &resumed.stats, &resumed.trace),
        (&reference.outcome, &reference.stats, &reference.trace)
    );
    keys_are_unique(&store, "x").await;

    // The model dies at the checkpoint call itself: nothing of it is journaled, and the resume
    // asks again, with the same conversation.
    let rest = before[3..].iter().chain(&after).cloned().collect();
    let (written, again, resumed) = die_then_resume(&store, "y", &before[..3], rest).await;
    assert_eq!(written, 0);
    assert_eq!(again.requests(), 3);
    assert_eq!(again.seen.lock().expect("lock")[0], seen[3]);
    assert_eq!(
        (&resumed.outcome, &resumed.stats, &resumed.trace),
        (&reference.outcome, &reference.stats, &reference.trace)
    );
    assert_eq!(
        checkpoint_entries(&store.records("y").await.expect("stored")).len(),
        1
    );
}

/// Runs the forgetful agent as `execution` with a model that has only `first` (it dies when they
/// run out), then resumes it with a model that has `rest`: the checkpoints the dead run had
/// journaled, the resumed model and the report.
async fn die_then_resume(
    store: &MemoryStore,
    execution: &str,
    first: &[common::Answer],
    rest: Vec<common::Answer>,
) -> (usize, Arc<Script>, terminus_runtime::Report) {
    let echo = || ToolSet::new().with("echo", common::Echo::new(Duration::ZERO));
    Run::new("Echo a, then b", forgetful(), Script::new(first.to_vec()))
        .tools(echo())
        .store(Arc::new(store.clone()))
        .execution(execution)
        .execute()
        .await
        .expect_err("the model died");
    let written = checkpoint_entries(&store.records(execution).await.expect("stored")).len();
    let model = Script::new(rest);
    let report = Run::resume(execution, model.clone())
        .tools(echo())
        .store(Arc::new(store.clone()))
        .execute()
        .await
        .expect("a report");
    (written, model, report)
}
