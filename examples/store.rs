//! A run that dies half-way, resumed from its journal, and the journal read through the `Store`
//! port. The journal (SQLite here, from `terminus_store::open`; a `postgres://` URL gives
//! PostgreSQL) holds every step before it is carried out, so the resumed run asks the model only
//! for what it never answered and runs no tool twice. Then what a dashboard would read: the
//! executions (`Journal::executions`), one execution's records page by page (`Journal::page`)
//! and its report.
//!
//! `cargo run -p terminus-examples --example store`

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use terminus_examples::Scripted;
use terminus_kernel::{ModelTurn, Policy, ToolCall};
use terminus_runtime::{
    ExecutionFilter, Fault, Model, ModelError, ModelRequest, Run, RunError, ToolSet,
};
use terminus_tools::{ToolFailure, native};

/// Calls of the `stamp` tool, over both processes' worth of runs.
static STAMPS: AtomicU32 = AtomicU32::new(0);

#[derive(Deserialize, schemars::JsonSchema)]
struct Stamp {
    /// What to stamp.
    page: String,
}

fn tools() -> ToolSet {
    let stamp = native("Stamps a page.", |args: Stamp| async move {
        let n = STAMPS.fetch_add(1, Ordering::SeqCst) + 1;
        Ok::<_, ToolFailure>(format!("{} stamped (stamp {n})", args.page))
    });
    ToolSet::new().with("stamp", Arc::new(stamp))
}

fn stamp(id: &str, page: &str) -> ModelTurn {
    ModelTurn {
        tool_calls: vec![ToolCall::new(id, "stamp", json!({ "page": page }))],
        ..ModelTurn::default()
    }
}

/// The first process's model: it answers once, then the process dies (here: the adapter
/// cannot go on, so the run stops with a fault and leaves its journal as it was).
struct DiesAfterOne(Scripted, AtomicU32);

#[async_trait]
impl Model for DiesAfterOne {
    async fn complete(&self, request: ModelRequest<'_>) -> Result<ModelTurn, ModelError> {
        if self.1.fetch_add(1, Ordering::SeqCst) == 1 {
            return Err(Fault::internal("the process was killed").into());
        }
        self.0.complete(request).await
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let (_dir, store) = terminus_examples::temp_journal().await;
    let task = "Stamp page a, then page b, then say what was stamped.";

    // The first process: one tool turn, then it dies before the model's second answer.
    let first = Arc::new(DiesAfterOne(
        Scripted::new(vec![stamp("c1", "a")]),
        AtomicU32::new(0),
    ));
    let died = Run::new(task, Policy::default(), first)
        .tools(tools())
        .store(store.clone())
        .execution("stamps")
        .execute()
        .await;
    let Err(RunError::Fault(fault)) = died else {
        panic!("the first process should have died: {died:?}");
    };
    println!("first process: {fault}");

    // The second process: the task, the policy and the first tool turn come from the journal.
    // Its model is asked only for what the first never answered.
    let second = Arc::new(Scripted::new(vec![
        stamp("c2", "b"),
        ModelTurn {
            text: "Pages a and b are stamped.".into(),
            ..ModelTurn::default()
        },
    ]));
    let report = Run::resume("stamps", second)
        .tools(tools())
        .store(store.clone())
        .execute()
        .await
        .expect("the resumed run");
    println!(
        "resumed: {} ({}): {:?}, {} model calls, the stamp tool called {} times in all",
        report.outcome.outcome_str(),
        report.outcome.reason_str(),
        report.result,
        report.model_calls,
        STAMPS.load(Ordering::SeqCst)
    );
    assert_eq!(STAMPS.load(Ordering::SeqCst), 2, "a page was stamped twice");

    // What the journal holds, through the port.
    for run in store
        .executions(&ExecutionFilter::all())
        .await
        .expect("the executions")
    {
        println!(
            "execution {}: {:?}, {} steps, {} entries",
            run.execution, run.status, run.steps, run.entries
        );
    }
    let mut after = None;
    let mut kinds = Vec::new();
    loop {
        let page = store.page("stamps", after, 16).await.expect("a page");
        let Some(last) = page.last() else { break };
        after = Some(last.key);
        for record in &page {
            // In JSON an entry names its kind in its `entry` field.
            let entry = serde_json::to_value(&record.entry).expect("an entry is JSON");
            let kind = entry["entry"].as_str().unwrap_or("?");
            kinds.push(format!("{} {kind}", record.key));
        }
    }
    println!("records: {}", kinds.join(", "));
    let stored = store.report("stamps").await.expect("the report");
    assert_eq!(
        stored.as_ref(),
        Some(&report),
        "the stored report is the run's"
    );
    println!("the stored report is the run's: {}", stored.is_some());
}
