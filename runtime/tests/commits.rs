//! One commit per agent step: a turn that calls tools which may run again is journaled with the
//! step its results feed, so a run of N such turns makes N appends (the task goes with the
//! first turn, the final answer with the report); a tool that must not run twice keeps its
//! result durable before the model is asked again (two appends per turn). Either way the
//! journal holds the same keys, and the run's other writes are two: created already claimed,
//! and its last step with its report and the claim given up.

mod common;

use async_trait::async_trait;
use common::{Script, calls, done};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use terminus_kernel::{Key, Policy, Record, ToolOutcome};
use terminus_runtime::{
    Appended, Cell, Cells, Claims, ExecutionFilter, ExecutionSummary, Failure, Fault, Journal,
    Lease, MemoryStore, Queue, Report, Run, RunSpec, StoreError, Tool, ToolSet,
};

/// A memory store that counts appends and the other writes of a run (each one transaction in
/// a durable store). `apart`: it cannot write a run's last step with its report (as a store
/// without [`Claims::finish_with_step`]).
#[derive(Default)]
struct Counting {
    inner: MemoryStore,
    appends: AtomicUsize,
    others: AtomicUsize,
    apart: bool,
    /// Single appends are written, then answered this much later (a slow network).
    slow: Option<Duration>,
    /// Every append is answered as found stored (as a retried append whose first answer was
    /// lost is), after writing it.
    answer_stored: bool,
}

impl Counting {
    fn other(&self) {
        self.others.fetch_add(1, Ordering::SeqCst);
    }

    fn answer(&self, appended: Appended) -> Appended {
        Appended {
            already_existed: appended.already_existed || self.answer_stored,
            ..appended
        }
    }
}

#[async_trait]
impl Journal for Counting {
    async fn create(&self, execution: &str, spec: &RunSpec) -> Result<bool, StoreError> {
        self.other();
        self.inner.create(execution, spec).await
    }
    async fn spec(&self, execution: &str) -> Result<Option<RunSpec>, StoreError> {
        self.inner.spec(execution).await
    }
    async fn append(&self, execution: &str, record: Arc<Record>) -> Result<Appended, StoreError> {
        self.appends.fetch_add(1, Ordering::SeqCst);
        let appended = self.inner.append(execution, record).await;
        if let Some(delay) = self.slow {
            tokio::time::sleep(delay).await;
        }
        appended.map(|a| self.answer(a))
    }
    async fn append_all(
        &self,
        execution: &str,
        records: Vec<Arc<Record>>,
    ) -> Result<Vec<Appended>, StoreError> {
        self.appends.fetch_add(1, Ordering::SeqCst);
        let appended = self.inner.append_all(execution, records).await?;
        Ok(appended.into_iter().map(|a| self.answer(a)).collect())
    }
    async fn page(
        &self,
        execution: &str,
        after: Option<Key>,
        limit: usize,
    ) -> Result<Vec<Arc<Record>>, StoreError> {
        self.inner.page(execution, after, limit).await
    }
    async fn count(&self, execution: &str) -> Result<u64, StoreError> {
        self.inner.count(execution).await
    }
    async fn finish(&self, execution: &str, report: &Report) -> Result<(), StoreError> {
        self.other();
        self.inner.finish(execution, report).await
    }
    async fn executions(
        &self,
        filter: &ExecutionFilter,
    ) -> Result<Vec<ExecutionSummary>, StoreError> {
        self.inner.executions(filter).await
    }
    async fn report(&self, execution: &str) -> Result<Option<Report>, StoreError> {
        self.inner.report(execution).await
    }

    async fn reopen(&self, execution: &str, records: Vec<Arc<Record>>) -> Result<bool, StoreError> {
        self.inner.reopen(execution, records).await
    }
}

#[async_trait]
impl Claims for Counting {
    async fn claim(&self, e: &str, w: &str, d: Duration) -> Result<Lease, StoreError> {
        self.other();
        self.inner.claim(e, w, d).await
    }
    async fn create_claimed(
        &self,
        e: &str,
        spec: &RunSpec,
        w: &str,
        d: Duration,
    ) -> Result<Option<Lease>, StoreError> {
        self.other();
        self.inner.create_claimed(e, spec, w, d).await
    }
    async fn finish_released(&self, lease: &Lease, report: &Report) -> Result<(), StoreError> {
        self.other();
        self.inner.finish_released(lease, report).await
    }
    async fn finish_with_step(
        &self,
        lease: &Lease,
        records: Vec<Arc<Record>>,
        report: &Report,
    ) -> Result<bool, StoreError> {
        if self.apart {
            return Ok(false);
        }
        self.other();
        self.inner.finish_with_step(lease, records, report).await
    }
    async fn renew(&self, lease: &Lease) -> Result<(), StoreError> {
        self.inner.renew(lease).await
    }
    async fn release(&self, lease: &Lease) -> Result<(), StoreError> {
        self.other();
        self.inner.release(lease).await
    }
    async fn fail(&self, lease: &Lease, failure: &Failure) -> Result<(), StoreError> {
        self.inner.fail(lease, failure).await
    }
    async fn failure(&self, execution: &str) -> Result<Option<Failure>, StoreError> {
        self.inner.failure(execution).await
    }
    async fn conflicts(&self, execution: &str) -> Result<u64, StoreError> {
        self.inner.conflicts(execution).await
    }
}

#[async_trait]
impl Queue for Counting {
    async fn claim_next(&self, w: &str, d: Duration) -> Result<Option<Lease>, StoreError> {
        self.inner.claim_next(w, d).await
    }
}

#[async_trait]
impl Cells for Counting {
    async fn cell(&self, key: &str) -> Result<Option<Cell>, StoreError> {
        self.inner.cell(key).await
    }
    async fn put_cell(
        &self,
        key: &str,
        expected: Option<u64>,
        value: &Value,
    ) -> Result<Option<u64>, StoreError> {
        self.inner.put_cell(key, expected, value).await
    }
}

/// Answers with its arguments; `idempotent` as told.
struct Read {
    idempotent: bool,
}

#[async_trait]
impl Tool for Read {
    fn idempotent(&self) -> bool {
        self.idempotent
    }
    async fn call(&self, arguments: Value) -> Result<ToolOutcome, Fault> {
        Ok(ToolOutcome::ok(arguments))
    }
}

/// Appends and records of a run of `turns` turns of `per_turn` calls each; its other writes
/// must be two (create and claim in one; the last step, the report and the release in one).
async fn run(turns: usize, per_turn: usize, idempotent: bool) -> (usize, Vec<Record>) {
    run_on(Counting::default(), turns, per_turn, idempotent).await
}

async fn run_on(
    store: Counting,
    turns: usize,
    per_turn: usize,
    idempotent: bool,
) -> (usize, Vec<Record>) {
    let mut script: Vec<_> = (0..turns)
        .map(|t| {
            let batch: Vec<(&str, Value)> = (0..per_turn)
                .map(|c| ("read", json!({ "file": t * 10 + c })))
                .collect();
            calls(&batch)
        })
        .collect();
    script.push(done("All read."));
    let store = Arc::new(store);
    let report = Run::new("Read the files", Policy::default(), Script::new(script))
        .tools(ToolSet::new().with("read", Arc::new(Read { idempotent })))
        .store(store.clone())
        .execution("x")
        .execute()
        .await
        .expect("the run reaches a stop");
    assert!(report.is_complete(), "{report:?}");
    assert_eq!(
        store.others.load(Ordering::SeqCst),
        2,
        "writes besides the appends"
    );
    assert_eq!(
        report.entries,
        store.inner.count("x").await.expect("count"),
        "the report counts the journal"
    );
    assert_eq!(store.inner.report("x").await.expect("report"), Some(report));
    store
        .inner
        .claim("x", "another worker", Duration::from_secs(30))
        .await
        .expect("the claim was given up with the report");
    let records = store
        .inner
        .records("x")
        .await
        .expect("records")
        .iter()
        .map(|r| (**r).clone())
        .collect();
    (store.appends.load(Ordering::SeqCst), records)
}

#[tokio::test]
async fn calls_that_may_run_again_make_one_commit_per_agent_step() {
    for per_turn in [1, 3] {
        let (appends, records) = run(10, per_turn, true).await;
        // One per turn (the task goes with the first; its results and the step they fed go
        // with the next turn); the final answer's step goes with the report.
        assert_eq!(appends, 10, "{per_turn} calls a turn");
        let (strict, strict_records) = run(10, per_turn, false).await;
        // A tool that must not run twice: its results are durable before the model is asked
        // again, so each turn is two commits (three results of a batch: one each, then the step).
        let per_result = if per_turn == 1 { 0 } else { per_turn };
        assert_eq!(strict, 10 * (2 + per_result), "{per_turn} calls a turn");
        let layout = |records: &[Record]| -> Vec<(String, &'static str)> {
            records
                .iter()
                .map(|r| (r.key.to_string(), r.entry.kind()))
                .collect()
        };
        // The same keys and kinds either way (the intents differ only in their tool's flag).
        assert_eq!(layout(&records), layout(&strict_records));
    }
}

#[tokio::test]
async fn a_store_that_cannot_finish_with_the_last_step_appends_it_apart() {
    let store = Counting {
        apart: true,
        ..Counting::default()
    };
    let (appends, records) = run_on(store, 10, 1, true).await;
    assert_eq!(
        appends,
        10 + 1,
        "the final answer's step is an append of its own"
    );
    let (_, together) = run(10, 1, true).await;
    assert_eq!(records, together, "the same journal either way");
}

/// The report counts what the journal holds even when the driver cannot know it from its own
/// appends: an append abandoned by a kill while its answer was on the way, and appends
/// answered as found stored after they were written.
#[tokio::test(start_paused = true)]
async fn the_report_counts_appends_it_was_not_told_about() {
    let slow = Arc::new(Counting {
        slow: Some(Duration::from_millis(200)),
        ..Counting::default()
    });
    let batch = calls(&[
        ("read", json!({ "file": 1 })),
        ("read", json!({ "file": 2 })),
    ]);
    let report = Run::new(
        "Read",
        Policy::default(),
        Script::new([batch, done("Read.")]),
    )
    .tools(ToolSet::new().with("read", Arc::new(Read { idempotent: false })))
    .store(slow.clone())
    .kill_switch(terminus_runtime::KillSwitch::after(Duration::from_millis(
        50,
    )))
    .execution("killed")
    .execute()
    .await
    .expect("the run reaches a stop");
    assert_eq!(
        report.outcome,
        terminus_kernel::Outcome::Aborted(terminus_kernel::AbortReason::Cancelled)
    );
    assert_eq!(
        report.entries,
        slow.inner.count("killed").await.expect("count"),
        "a result written while the kill came counts"
    );

    let retried = Arc::new(Counting {
        answer_stored: true,
        ..Counting::default()
    });
    let report = Run::new(
        "Read",
        Policy::default(),
        Script::new([calls(&[("read", json!({}))]), done("Read.")]),
    )
    .tools(ToolSet::new().with("read", Arc::new(Read { idempotent: true })))
    .store(retried.clone())
    .execution("retried")
    .execute()
    .await
    .expect("the run reaches a stop");
    assert!(report.duplicates_prevented > 0);
    assert_eq!(
        report.entries,
        retried.inner.count("retried").await.expect("count")
    );
}
