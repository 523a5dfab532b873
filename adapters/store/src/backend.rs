//! What a database must do to hold journals: the [`Backend`] trait. Its methods are the
//! statements the two stores have in common, in rows and JSON text; everything else (encoding
//! records, leases, errors that name the journal, the duplicate check) is written once, in
//! [`crate::Durable`].

use async_trait::async_trait;
use std::time::Duration;
use terminus_runtime::Cause;

/// One stored journal entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawEntry {
    /// The checkpoint of its key.
    pub checkpoint: u32,
    /// The index of its key.
    pub index: u32,
    /// The entry's kind, for queries and `inspect` (e.g. `event`, `tool_intent`).
    pub kind: &'static str,
    /// The entry, as JSON.
    pub body: String,
}

/// An execution's row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutionRow {
    /// `pending`, `running`, `done` or `failed`.
    pub status: String,
    /// The worker holding (or last holding) the claim.
    pub worker: Option<String>,
    /// The spec (JSON), as given at creation.
    pub spec: Option<String>,
    /// The report (JSON), once done.
    pub report: Option<String>,
    /// Why a worker gave up on it (JSON), once `failed`.
    pub failure: Option<String>,
    /// Claims refused and leases lost.
    pub conflicts: u64,
    /// Held calls waiting for a decision.
    pub held: u32,
    /// When the last suspension began (Unix ms), until a worker takes the execution up again.
    pub suspended_ms: Option<i64>,
    /// Milliseconds spent suspended.
    pub paused_ms: i64,
}

/// The filter of [`Backend::executions`], in the stored words.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListFilter {
    /// Only executions whose outcome is this (`complete` or `aborted`).
    pub outcome: Option<String>,
    /// Only executions whose stop reason is this (e.g. `max_steps`).
    pub reason: Option<String>,
    /// Only executions with at least this many steps.
    pub min_steps: i64,
}

/// One execution as [`Backend::executions`] lists it: its row, what its report (or, without
/// one, its stop entry) says, and counts of its entries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedRow {
    /// The execution id.
    pub id: String,
    /// The spec's `name`, if any.
    pub name: Option<String>,
    /// A worker holds an unexpired claim.
    pub live: bool,
    /// A worker marked it failed.
    pub failed: bool,
    /// `complete` or `aborted`, from the report or the stop entry.
    pub outcome: Option<String>,
    /// The stop reason, from the report or the stop entry.
    pub reason: Option<String>,
    /// The rule that ended it.
    pub rule: Option<String>,
    /// Steps: the report's, the stop entry's, or the transitions journaled.
    pub steps: i64,
    /// Model calls: the report's, the stop entry's, or the model answers journaled.
    pub model_calls: i64,
    /// Tool executions: the report's, the stop entry's, or the intents journaled.
    pub tool_calls: i64,
    /// Entries stored.
    pub entries: i64,
    /// Held calls wait for a decision.
    pub suspended: bool,
    /// Every held call of its last suspension is decided, and no worker took it up yet.
    pub decided: bool,
}

/// What [`Backend::decide`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decided {
    /// The decision is written, one held call fewer waiting.
    Written,
    /// Its key is stored already: the body stored under it.
    Stored(String),
    /// The execution is not suspended; nothing written.
    NotSuspended,
    /// There is no such execution.
    Missing,
}

/// What a claim's compare-and-set found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claimed {
    /// The claim is ours.
    Taken,
    /// Another worker holds an unexpired lease (the refusal was counted).
    HeldBy(String),
    /// There is no such execution.
    Missing,
}

/// Why a backend call failed.
#[derive(Debug)]
pub enum Fault {
    /// The database failed: its own error.
    Db(Cause),
    /// A row is not what this version writes (a column of another type, a number out of range).
    Corrupt(String),
}

impl From<rusqlite::Error> for Fault {
    fn from(e: rusqlite::Error) -> Fault {
        Fault::Db(Cause::new(e))
    }
}

impl From<tokio_postgres::Error> for Fault {
    fn from(e: tokio_postgres::Error) -> Fault {
        Fault::Db(Cause::new(e))
    }
}

/// The statements of a journal database. Each call is atomic: one statement or one
/// transaction. Lease times are the backend's to take (SQLite's from the host clock,
/// PostgreSQL's from the server's, so workers on skewed machines agree).
#[async_trait]
pub trait Backend: Send + Sync + 'static {
    /// The journal, for messages: a file, or a URL without its password.
    fn name(&self) -> &str;

    /// Inserts the execution with its spec, claimed by `claim`'s worker for its lease when
    /// given (one statement, so a new run is one commit before its first step), else
    /// unclaimed; false if it exists.
    async fn create(
        &self,
        execution: &str,
        spec: String,
        claim: Option<(&str, Duration)>,
    ) -> Result<bool, Fault>;

    /// The execution's row.
    async fn row(&self, execution: &str) -> Result<Option<ExecutionRow>, Fault>;

    /// Inserts the entries in one transaction, each unless its key is stored: for each, `None`
    /// when written, or the body already stored under its key.
    async fn append(
        &self,
        execution: &str,
        entries: Vec<RawEntry>,
    ) -> Result<Vec<Option<String>>, Fault>;

    /// Up to `limit` entries after the key `after` (exclusive), in key order; only those of
    /// kind `kind` when given.
    async fn page(
        &self,
        execution: &str,
        kind: Option<&'static str>,
        after: Option<(u32, u32)>,
        limit: u32,
    ) -> Result<Vec<(u32, u32, String)>, Fault>;

    /// How many entries the execution has.
    async fn count(&self, execution: &str) -> Result<u64, Fault>;

    /// Marks the execution done with its report, and in the same statement frees the claim of
    /// `release` (a worker) if that worker still holds it.
    async fn finish(
        &self,
        execution: &str,
        report: String,
        release: Option<&str>,
    ) -> Result<(), Fault>;

    /// Inserts the entries and marks the execution done with its report, freeing `release`'s
    /// claim if that worker still holds it, in one transaction, provided none of the entries'
    /// keys is stored: false, writing nothing, when one is.
    async fn finish_appending(
        &self,
        execution: &str,
        entries: Vec<RawEntry>,
        report: String,
        release: &str,
    ) -> Result<bool, Fault>;

    /// In one transaction, if the execution has a stored report and none of the entries' keys is
    /// stored: inserts the entries and clears the report, the execution running again under the
    /// claim it has (a raise). False, writing nothing, otherwise.
    async fn reopen(&self, execution: &str, entries: Vec<RawEntry>) -> Result<bool, Fault>;

    /// Takes the claim for `worker` if it is free, already the worker's, or expired; counts a
    /// refusal.
    async fn claim(&self, execution: &str, worker: &str, lease: Duration)
    -> Result<Claimed, Fault>;

    /// Takes the oldest runnable execution (not ended, and unclaimed or expired), if any.
    async fn claim_next(&self, worker: &str, lease: Duration) -> Result<Option<String>, Fault>;

    /// Extends `worker`'s claim; false (a lost lease, counted) if another worker holds it.
    async fn renew(&self, execution: &str, worker: &str, lease: Duration) -> Result<bool, Fault>;

    /// Frees `worker`'s claim, if it still holds it.
    async fn release(&self, execution: &str, worker: &str) -> Result<(), Fault>;

    /// Suspends the execution until `held` held calls are decided, from `at_ms`, and frees
    /// `worker`'s claim, in one statement; false if `worker` does not hold it.
    async fn suspend(
        &self,
        execution: &str,
        worker: &str,
        held: u32,
        at_ms: i64,
    ) -> Result<bool, Fault>;

    /// In one transaction: the entry unless its key is stored, if the execution is suspended,
    /// counting one held call fewer (the last adds the suspension's length, to `at_ms`, to its
    /// paused time).
    async fn decide(&self, execution: &str, entry: RawEntry, at_ms: i64) -> Result<Decided, Fault>;

    /// Marks the execution failed and frees the claim, if `worker` holds it and it is not done;
    /// false otherwise.
    async fn fail(&self, execution: &str, worker: &str, failure: String) -> Result<bool, Fault>;

    /// The executions that pass `filter`, oldest first (one query).
    async fn executions(&self, filter: &ListFilter) -> Result<Vec<ListedRow>, Fault>;

    /// The cell under `key`: its version and its body (JSON).
    async fn cell(&self, key: &str) -> Result<Option<(u64, String)>, Fault>;

    /// Writes the cell if its version is still `expected` (`None`: absent), one statement;
    /// the new version, or `None` when another writer came first.
    async fn put_cell(
        &self,
        key: &str,
        expected: Option<u64>,
        body: String,
    ) -> Result<Option<u64>, Fault>;
}

/// Milliseconds of a lease, saturating.
pub(crate) fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Unix time in milliseconds (SQLite leases compare across processes, so they use the wall
/// clock).
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
