//! # terminus-store
//!
//! Durable journal stores for Terminus. Both keep the same two tables: `executions` (one row per
//! run: status, the claim — worker and lease expiry — the spec needed to resume it, and the
//! report once it ended) and `entries` (one row per journal entry, primary key
//! `(execution, checkpoint, idx)`, i.e. the idempotency key `cp{checkpoint}:e{idx}`).
//!
//! - [`SqliteStore`]: the embedded default (`--journal FILE`). WAL mode. With
//!   [`Durability::Process`] (default, `synchronous=NORMAL`) a committed entry survives a killed
//!   process; with [`Durability::PowerLoss`] (`synchronous=FULL`) every commit is fsynced and
//!   survives power loss. The schema is created and migrated by the store (`PRAGMA user_version`).
//! - [`PostgresStore`]: for many workers on many machines (`--journal postgres://...`); the
//!   schema migrations ship with the crate (`migrations/`) and run on connect; workers poll for
//!   runnable executions with `FOR UPDATE SKIP LOCKED`.
//!
//! Entries are stored as opaque JSON text: the stores know keys, not entry types, so the journal
//! model (in `terminus-kernel`) and the stores evolve separately.
//!
//! Claiming is one atomic compare-and-set: an `INSERT ... ON CONFLICT DO UPDATE ... WHERE` that
//! takes the row only if it is free, already ours, or its lease has expired.

#![forbid(unsafe_code)]

mod journal;
mod postgres;
mod sqlite;

pub use crate::journal::open;
pub use crate::postgres::PostgresStore;
pub use crate::sqlite::{Durability, SqliteStore};

use std::fmt;

/// One stored journal entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawEntry {
    /// The checkpoint of its key.
    pub checkpoint: u64,
    /// The index of its key.
    pub index: u32,
    /// The entry's kind, for queries and `inspect` (e.g. `event`, `tool_intent`).
    pub kind: String,
    /// The entry, as JSON.
    pub body: String,
}

impl RawEntry {
    /// Its key, `cp{checkpoint}:e{index}`.
    pub fn key(&self) -> String {
        format!("cp{}:e{}", self.checkpoint, self.index)
    }
}

/// What an append did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawAppended {
    /// The key was already stored; nothing was written and `body` is the stored entry.
    pub already_existed: bool,
    /// The stored body.
    pub body: String,
}

/// An execution's row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutionRow {
    /// Its id.
    pub id: String,
    /// `pending`, `running`, `done` or `failed`.
    pub status: String,
    /// The worker holding (or last holding) the claim.
    pub worker: Option<String>,
    /// When the claim expires, unix milliseconds.
    pub lease_until_ms: i64,
    /// What the run needs to be resumed (the scenario), as given at creation.
    pub spec: Option<String>,
    /// The report, once done.
    pub report: Option<String>,
    /// Why a worker gave up on it (JSON), once `failed`.
    pub failure: Option<String>,
}

/// A store failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreError {
    /// Another live worker holds the execution.
    Claimed {
        /// The execution.
        execution: String,
        /// The worker holding it.
        worker: String,
    },
    /// Our claim was taken over (it had expired).
    LeaseLost {
        /// The execution.
        execution: String,
    },
    /// The execution does not exist.
    NotFound(String),
    /// The database failed (I/O, disk full, connection lost, locked too long).
    Backend(String),
    /// A stored row is not what this version wrote.
    Corrupt(String),
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Claimed { execution, worker } => {
                write!(
                    f,
                    "execution `{execution}` is claimed by another worker ({worker})"
                )
            }
            StoreError::LeaseLost { execution } => {
                write!(
                    f,
                    "the claim on execution `{execution}` was lost to another worker"
                )
            }
            StoreError::NotFound(e) => write!(f, "no execution `{e}` in the journal"),
            StoreError::Backend(e) => write!(f, "storage failed: {e}"),
            StoreError::Corrupt(e) => write!(f, "stored data is corrupt: {e}"),
        }
    }
}

impl std::error::Error for StoreError {}

impl StoreError {
    /// `Ok` when an update guarded by our claim changed the row (`updated` rows), else
    /// `LeaseLost`: another worker took the execution.
    pub(crate) fn unless_held(updated: u64, execution: &str) -> Result<(), StoreError> {
        if updated == 1 {
            Ok(())
        } else {
            Err(StoreError::LeaseLost {
                execution: execution.to_owned(),
            })
        }
    }
}

/// Unix time in milliseconds (leases compare across processes, so they use the wall clock).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
