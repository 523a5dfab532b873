//! The journal port: where a run's records live, and the claim on an execution.
//!
//! The journal *model* (what is recorded, under which deterministic `cp{checkpoint}:e{index}`
//! key, and how a journal is replayed into a machine) is the kernel's:
//! [`terminus_kernel::Record`], [`terminus_kernel::Key`], [`terminus_kernel::step_records`],
//! [`terminus_kernel::recover`]. Checkpoint `n` holds what happened at step `n`; the runtime
//! writes, for each step:
//!
//! - once the machine took the step, in one append (one transaction in a durable store): `e0` the
//!   event, `e1` the transition, `e2..` the nudges and notices it emitted, `e15` the stop record
//!   of the last step, and `e16 + j` one intent per executed tool call, all written before any
//!   of its commands is carried out. The task (`cp0:e0`) goes with the first step: before the
//!   model's first answer there is nothing to resume;
//! - `e16 + k + j` the result of executed call `j` (of `k`), so a crash leaves each call not
//!   started, in doubt or done ([`terminus_kernel::CallState`]). A result is written as soon as
//!   it arrives when its tool must not run twice (several such calls: one append each; a lone
//!   call: with the step it feeds). When every call of the batch may run again, the results and
//!   the step they feed go with the next step's append (one commit per agent step): a crash
//!   before it leaves them in doubt, and a resume runs them again;
//! - the last step (the one whose commands stop the run) goes with the report and the claim's
//!   release ([`Claims::finish_with_step`]): one commit, when the store can. A crash before it
//!   leaves the run going from the step before, as any crash during an action does.
//!
//! Because the kernel is deterministic, a replay writes exactly the same keys: an append whose
//! key is already stored returns the stored record with [`Appended::already_existed`] set, and the
//! runtime counts it in the report's `duplicates_prevented` instead of writing it twice.
//!
//! A [`Store`] also keeps, per execution, the [`RunSpec`] (what [`terminus_kernel::recover`]
//! needs besides the records: the policy), the claim (worker and lease) and the final
//! [`Report`]. [`MemoryStore`] (`journal/memory.rs`) is the in-memory store; durable stores
//! implement the same traits.

use crate::report::Report;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;
use terminus_kernel::{Key, Outcome, Policy, Record, Rule};

mod memory;
pub use memory::MemoryStore;

/// What a run was started with: with the records, enough to resume it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSpec {
    /// The task.
    pub task: String,
    /// A name for the run (the scenario's name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The system prompt, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    /// The policy.
    pub policy: Policy,
    /// What the host needs to rebuild its adapters on resume, opaque to the runtime (the
    /// `terminus` command line stores the scenario here, so `resume` needs only the journal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<serde_json::Value>,
    /// When the run first started, Unix milliseconds: a resumed run's deadline counts from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_unix_ms: Option<u64>,
}

/// What an append did.
#[derive(Debug, Clone, PartialEq)]
pub struct Appended {
    /// The stored record: the new one, or the one already stored under its key.
    pub record: Arc<Record>,
    /// The key was already stored; nothing was written.
    pub already_existed: bool,
}

/// A claim on an execution: one worker runs it until the lease expires or is released.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The execution.
    pub execution: String,
    /// The worker holding it.
    pub worker: String,
    /// How long a claim or renewal lasts.
    pub duration: Duration,
}

/// Why a worker gave up on an execution it claimed but could not run (its stored scenario or
/// config no longer parses, a tool server cannot start, it was stored by a program that is not
/// the worker's). A failed execution is never claimed by a worker again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    /// The exit code of the contract that says what kind of failure it is (2 invalid input, 3
    /// internal or storage error).
    pub exit_code: u8,
    /// What went wrong, in words a user can act on.
    pub reason: String,
    /// The worker that gave up.
    pub worker: String,
}

/// What a storage backend reported (a SQLite or PostgreSQL error, an I/O error): kept whole as
/// the [`std::error::Error::source`] of a [`StoreError`], never flattened to text. Clones share it.
#[derive(Debug, Clone)]
pub struct Cause(Arc<dyn std::error::Error + Send + Sync + 'static>);

impl Cause {
    /// Wraps a backend's error.
    pub fn new(error: impl std::error::Error + Send + Sync + 'static) -> Cause {
        Cause(Arc::new(error))
    }

    /// The backend's error, to downcast (`cause.get().downcast_ref::<rusqlite::Error>()`).
    pub fn get(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        &*self.0
    }
}

impl std::fmt::Display for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for Cause {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

/// A storage failure. Messages name the journal (a file, or a URL without its password) so a
/// user with several can tell which failed; the backend's own error is the
/// [`source`](std::error::Error::source) of [`StoreError::Backend`], and also shown in the
/// message, since most hosts print only that.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// Another worker holds an unexpired claim on the execution (exit code 4).
    #[error("execution `{execution}` is claimed by another worker ({worker})")]
    Claimed {
        /// The execution.
        execution: String,
        /// The worker that holds it.
        worker: String,
    },
    /// The lease expired and another worker claimed the execution (exit code 4).
    #[error("the claim on execution `{execution}` was lost to another worker")]
    LeaseLost {
        /// The execution.
        execution: String,
    },
    /// The execution does not exist (exit code 2).
    #[error("no execution `{0}` in the journal")]
    NotFound(String),
    /// The store itself failed: I/O, a full disk, a read-only or vanished file, a connection
    /// that could not be re-established (exit code 3).
    #[error("journal {journal}: cannot {action}: {source}")]
    Backend {
        /// The journal: its file, or its URL without the password.
        journal: String,
        /// What was being done, e.g. "append to execution `x`".
        action: String,
        /// The backend's error.
        #[source]
        source: Cause,
    },
    /// A decision was given for an execution that is not suspended (exit code 2).
    #[error("execution `{0}` is not suspended: it waits for no decision")]
    NotSuspended(String),
    /// Stored data is not what this version writes (exit code 3).
    #[error("journal {journal}: stored data is corrupt: {what}")]
    Corrupt {
        /// The journal: its file, or its URL without the password.
        journal: String,
        /// What is wrong, naming the row or column.
        what: String,
    },
}

/// Where an execution stands, as [`Journal::executions`] lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExecutionStatus {
    /// Stored (`terminus submit`) and never run: no journal entry yet.
    Waiting,
    /// A worker holds an unexpired claim on it: it is running now (or its worker died less than a
    /// lease ago).
    Running,
    /// It has entries but never reached its stop, and nobody holds it: resume it to continue.
    Interrupted,
    /// It reached its stop: its report is stored (or its stop entry is, when the process died
    /// before storing the report).
    Ended,
    /// A worker gave up on it ([`Claims::fail`]); it is never run again.
    Failed,
    /// It waits for decisions on held calls ([`Claims::suspend`]): no worker claims it until
    /// every one is decided (then it is `waiting` again).
    Suspended,
}

impl ExecutionStatus {
    /// The snake_case name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Waiting => "waiting",
            Self::Running => "running",
            Self::Interrupted => "interrupted",
            Self::Ended => "ended",
            Self::Failed => "failed",
            Self::Suspended => "suspended",
        }
    }
}

impl std::fmt::Display for ExecutionStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a suspended execution stands with its decisions, and how long its suspensions lasted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Suspension {
    /// Held calls not yet decided (0: not suspended).
    pub pending: u32,
    /// When the last suspension began, Unix milliseconds, while it lasts or until a worker
    /// claims the execution again.
    pub since_unix_ms: Option<u64>,
    /// Milliseconds spent suspended, each suspension from its start to its last decision: a
    /// resumed run's deadline does not count them.
    pub paused_ms: u64,
}

impl Suspension {
    /// Whether held calls wait for a decision.
    pub const fn is_suspended(&self) -> bool {
        self.pending > 0
    }

    /// Whether every held call of the last suspension is decided and no worker took it up
    /// yet: it is `waiting` for one.
    pub const fn is_decided(&self) -> bool {
        self.pending == 0 && self.since_unix_ms.is_some()
    }

    /// One held call decided at `at_unix_ms`: the last ends the suspension and counts its
    /// length (what a durable store's `decide` statement does in SQL).
    pub fn decided(&mut self, at_unix_ms: u64) {
        self.pending = self.pending.saturating_sub(1);
        if self.pending == 0
            && let Some(since) = self.since_unix_ms
        {
            self.paused_ms = self
                .paused_ms
                .saturating_add(at_unix_ms.saturating_sub(since));
        }
    }

    /// A worker claimed the execution: a decided suspension is over (a claim of a suspended
    /// one changes nothing: the run suspends again at once).
    pub fn taken_up(&mut self) {
        if self.pending == 0 {
            self.since_unix_ms = None;
        }
    }
}

/// One execution of a journal, as [`Journal::executions`] lists it (`terminus runs`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutionSummary {
    /// The execution id.
    pub execution: String,
    /// The run's name (the scenario's), if its spec has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Where it stands.
    pub status: ExecutionStatus,
    /// How it ended, once it did (`"outcome"` and `"reason"` in JSON).
    #[serde(default, flatten, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<Outcome>,
    /// The rule that ended it, once it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<Rule>,
    /// Transitions taken (so far, for a run that has not ended).
    pub steps: u32,
    /// Model calls: the report's count once it ended; before, the calls answered in the journal.
    pub model_calls: u32,
    /// Tool executions: the report's count once it ended; before, the intents journaled.
    pub tool_calls: u32,
    /// Journal entries stored.
    pub entries: u64,
}

/// Which executions [`Journal::executions`] lists; the default lists every one. Like the filters
/// of trace tools (Langfuse's `wasAborted = true`, `metadata.totalIterations >= 10`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ExecutionFilter {
    /// Only executions that ended complete (`Some(true)`) or aborted (`Some(false)`).
    pub complete: Option<bool>,
    /// Only executions that ended with this stop reason.
    pub reason: Option<Outcome>,
    /// Only executions that took at least this many steps.
    pub min_steps: Option<u32>,
}

impl ExecutionFilter {
    /// Every execution.
    pub fn all() -> ExecutionFilter {
        ExecutionFilter::default()
    }

    /// Only executions that ended complete (`true`) or aborted (`false`).
    pub fn complete(mut self, complete: bool) -> ExecutionFilter {
        self.complete = Some(complete);
        self
    }

    /// Only executions that ended with `reason`.
    pub fn reason(mut self, reason: Outcome) -> ExecutionFilter {
        self.reason = Some(reason);
        self
    }

    /// Only executions that took at least `steps` steps.
    pub fn min_steps(mut self, steps: u32) -> ExecutionFilter {
        self.min_steps = Some(steps);
        self
    }

    /// Whether `summary` passes the filter (what the stores' queries select).
    pub fn matches(&self, summary: &ExecutionSummary) -> bool {
        let outcome = summary.outcome;
        self.complete
            .is_none_or(|c| outcome.is_some_and(|o| o.is_complete() == c))
            && self
                .reason
                .is_none_or(|r| outcome.is_some_and(|o| o.reason_str() == r.reason_str()))
            && self.min_steps.is_none_or(|n| summary.steps >= n)
    }
}

/// The records of executions: what a run appends, replays and reports. Every method is atomic
/// on its own.
#[async_trait]
pub trait Journal: Send + Sync {
    /// Records a new execution with its spec. Returns false, writing nothing, if the execution
    /// already exists.
    async fn create(&self, execution: &str, spec: &RunSpec) -> Result<bool, StoreError>;

    /// The spec of `execution`, if it exists.
    async fn spec(&self, execution: &str) -> Result<Option<RunSpec>, StoreError>;

    /// Appends `record` unless its key is already stored: then nothing is written and the
    /// stored record comes back with `already_existed = true`.
    async fn append(&self, execution: &str, record: Arc<Record>) -> Result<Appended, StoreError>;

    /// Appends several records, in order, as [`Journal::append`] does for each, all or none:
    /// durable stores write them in one transaction (one commit per agent step).
    async fn append_all(
        &self,
        execution: &str,
        records: Vec<Arc<Record>>,
    ) -> Result<Vec<Appended>, StoreError>;

    /// Up to `limit` records of `execution` whose keys come after `after` (all when `None`),
    /// in key order. Long journals are read page by page, never all at once.
    async fn page(
        &self,
        execution: &str,
        after: Option<Key>,
        limit: usize,
    ) -> Result<Vec<Arc<Record>>, StoreError>;

    /// Every record of `execution`, in key order (for tests and small journals; resuming pages).
    async fn records(&self, execution: &str) -> Result<Vec<Arc<Record>>, StoreError> {
        let mut out: Vec<Arc<Record>> = Vec::new();
        loop {
            let page = self
                .page(execution, out.last().map(|r| r.key), 1024)
                .await?;
            if page.is_empty() {
                return Ok(out);
            }
            out.extend(page);
        }
    }

    /// How many records `execution` has.
    async fn count(&self, execution: &str) -> Result<u64, StoreError>;

    /// Stores the report of an execution that ended.
    async fn finish(&self, execution: &str, report: &Report) -> Result<(), StoreError>;

    /// The report of `execution`, if it ended.
    async fn report(&self, execution: &str) -> Result<Option<Report>, StoreError>;

    /// Goes on with an execution that ended (a raise, `terminus resume --raise`): in one
    /// transaction, appends `records` (none of whose keys may be stored) and clears the stored
    /// report, so that the execution is resumable again (listed `interrupted`, claimable by any
    /// worker). False, writing nothing, when the execution has no stored report (it has not
    /// ended, or another raise came first) or one of the keys is stored.
    async fn reopen(&self, execution: &str, records: Vec<Arc<Record>>) -> Result<bool, StoreError>;

    /// Appends the decision `record` on a held call of suspended `execution`
    /// (`docs/approvals.md`) unless its key is stored (then, as [`Journal::append`], the stored
    /// record comes back with `already_existed`, whether or not the execution is still
    /// suspended). A new decision counts down the held calls waiting; the last one ends the
    /// suspension, adding its length (to `at_unix_ms`) to [`Suspension::paused_ms`]. One
    /// transaction in a durable store. An execution that is not suspended is
    /// [`StoreError::NotSuspended`], nothing written.
    async fn decide(
        &self,
        execution: &str,
        record: Arc<Record>,
        at_unix_ms: u64,
    ) -> Result<Appended, StoreError> {
        let _ = (record, at_unix_ms);
        Err(StoreError::NotSuspended(execution.to_owned()))
    }

    /// Where `execution` stands with its held calls (the default: never suspended).
    async fn suspension(&self, execution: &str) -> Result<Suspension, StoreError> {
        let _ = execution;
        Ok(Suspension::default())
    }

    /// The executions of the journal that pass `filter`, oldest first, one summary each (what
    /// `terminus runs` lists). Durable stores select in SQL, reading each execution's row, its
    /// stop entry and its entry counts, never its whole journal.
    async fn executions(
        &self,
        filter: &ExecutionFilter,
    ) -> Result<Vec<ExecutionSummary>, StoreError>;
}

/// Who runs an execution: one worker at a time, under a lease.
#[async_trait]
pub trait Claims: Journal {
    /// Claims `execution` for `worker` for `duration` (one compare-and-set). Fails with
    /// [`StoreError::Claimed`] while another worker's lease is unexpired; the same worker may
    /// claim again.
    async fn claim(
        &self,
        execution: &str,
        worker: &str,
        duration: Duration,
    ) -> Result<Lease, StoreError>;

    /// Records a new execution (as [`Journal::create`]) already claimed by `worker` for
    /// `duration`: `None`, writing nothing, if the execution exists. Durable stores write both
    /// in one commit; the default creates, then claims.
    async fn create_claimed(
        &self,
        execution: &str,
        spec: &RunSpec,
        worker: &str,
        duration: Duration,
    ) -> Result<Option<Lease>, StoreError> {
        if !self.create(execution, spec).await? {
            return Ok(None);
        }
        self.claim(execution, worker, duration).await.map(Some)
    }

    /// Stores the report (as [`Journal::finish`]) and gives the claim up if the worker still
    /// holds it. Durable stores write both in one commit; the default finishes, then releases.
    async fn finish_released(&self, lease: &Lease, report: &Report) -> Result<(), StoreError> {
        self.finish(&lease.execution, report).await?;
        self.release(lease).await
    }

    /// Appends `records` (the step that stopped the run, as [`Journal::append_all`] would),
    /// stores the report and gives the claim up (as [`Claims::finish_released`]), all in one
    /// commit, provided none of the records' keys is stored yet. Returns false, storing no
    /// report, when one is (a resumed run's last step), or when the store cannot write them
    /// together (the default): the caller then appends them with [`Journal::append_all`],
    /// which checks each, and finishes. Nothing else is written then either, unless another
    /// writer raced for the same keys (a worker that lost its lease): PostgreSQL may then keep
    /// the records that did not collide.
    async fn finish_with_step(
        &self,
        lease: &Lease,
        records: Vec<Arc<Record>>,
        report: &Report,
    ) -> Result<bool, StoreError> {
        let _ = (lease, records, report);
        Ok(false)
    }

    /// Extends the lease. Fails with [`StoreError::LeaseLost`] if the worker no longer holds it.
    async fn renew(&self, lease: &Lease) -> Result<(), StoreError>;

    /// Suspends the execution `lease` holds until `pending` held calls are decided
    /// ([`Journal::decide`]), from `at_unix_ms` (or from the start of a suspension not yet
    /// decided: a resume that finds a call undecided suspends again), and gives the claim up, in
    /// one commit: no worker claims it meanwhile ([`Queue::claim_next`]); a claim by id ([`Claims::claim`], a resume)
    /// still may. Fails with [`StoreError::LeaseLost`] if the worker no longer holds the claim.
    /// The default only gives the claim up: the store cannot keep a suspension, so the next
    /// claim finds the calls undecided and suspends again at once, running nothing.
    async fn suspend(
        &self,
        lease: &Lease,
        pending: u32,
        at_unix_ms: u64,
    ) -> Result<(), StoreError> {
        let _ = (pending, at_unix_ms);
        self.release(lease).await
    }

    /// Gives the claim up (a no-op if the worker no longer holds it).
    async fn release(&self, lease: &Lease) -> Result<(), StoreError>;

    /// Marks the execution `lease` holds as failed with `failure` and gives the claim up: it
    /// ends without a report, and no worker claims it again. Fails with
    /// [`StoreError::LeaseLost`] if the worker no longer holds the claim (nothing is written).
    async fn fail(&self, lease: &Lease, failure: &Failure) -> Result<(), StoreError>;

    /// Why `execution` failed, if a worker marked it failed.
    async fn failure(&self, execution: &str) -> Result<Option<Failure>, StoreError>;

    /// How many times a worker was refused `execution` or lost its claim on it (each an exit
    /// code 4 for some process), so operators can see executions fought over.
    async fn conflicts(&self, execution: &str) -> Result<u64, StoreError>;
}

/// Executions waiting for any worker (what `terminus submit` stores and `terminus worker` runs).
#[async_trait]
pub trait Queue: Send + Sync {
    /// Claims one execution that is waiting for a worker (not ended, not failed, and unclaimed
    /// or with an expired lease), if any.
    async fn claim_next(
        &self,
        worker: &str,
        duration: Duration,
    ) -> Result<Option<Lease>, StoreError>;
}

/// A value kept in a [`Cells`] store, with the version a compare-and-set names.
#[derive(Debug, Clone, PartialEq)]
pub struct Cell {
    /// Starts at 1 and grows by one with every write.
    pub version: u64,
    /// The value, as written.
    pub value: serde_json::Value,
}

/// Small shared values beside the journals, each a JSON document under a key, written by
/// compare-and-set so that every process on the same store agrees: an orchestrator's circuit
/// breakers (one per agent id) and a plan's progress live here.
#[async_trait]
pub trait Cells: Send + Sync {
    /// The value under `key`, if one was written.
    async fn cell(&self, key: &str) -> Result<Option<Cell>, StoreError>;

    /// Writes `value` under `key` if the stored version is still `expected` (`None`: no value
    /// may be stored yet). Returns the new version, or `None`, writing nothing, when another
    /// writer came first: read the cell again and decide again.
    async fn put_cell(
        &self,
        key: &str,
        expected: Option<u64>,
        value: &serde_json::Value,
    ) -> Result<Option<u64>, StoreError>;
}

/// Where journals live: the journal, its claims, its queue and its cells. Implemented for every
/// type that implements the four; a host holds an `Arc<dyn Store>`.
pub trait Store: Journal + Claims + Queue + Cells {}

impl<T: Journal + Claims + Queue + Cells + ?Sized> Store for T {}
