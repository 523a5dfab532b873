//! # terminus-store
//!
//! Durable journal stores for Terminus. Both keep the same two tables: `executions` (one row per
//! run: status, the claim — worker and lease expiry — the spec needed to resume it, the report
//! once it ended (without its trace, which is read back from the journal's transition entries:
//! a long run's trace is most of its report), and how many claims on it were refused) and `entries` (one row per journal
//! entry, primary key `(execution, checkpoint, idx)`, i.e. the idempotency key
//! `cp{checkpoint}:e{idx}`).
//!
//! - [`SqliteStore`]: the embedded default (`--journal FILE`). WAL mode. With
//!   [`Durability::Process`] (default, `synchronous=NORMAL`) a committed entry survives a killed
//!   process; with [`Durability::PowerLoss`] (`synchronous=FULL`) every commit is fsynced and
//!   survives power loss. The schema is created and migrated by the store (`PRAGMA user_version`).
//! - [`PostgresStore`]: for many workers on many machines (`--journal postgres://...`); the
//!   schema migrations ship with the crate (`migrations/`) and run on connect; workers poll for
//!   runnable executions with `FOR UPDATE SKIP LOCKED`.
//!
//! Both are a [`Durable`] store on a [`Backend`]: the backend holds only its SQL; encoding,
//! leases, the errors (each names the journal and what was being done, with the database's own
//! error as its source) are written once in [`Durable`]. Entries are stored as opaque JSON
//! text: the stores know keys, not entry types, so the journal model (in `terminus-kernel`) and
//! the stores evolve separately.
//!
//! Claiming is one atomic compare-and-set: an `UPDATE ... WHERE` that takes the row only if it
//! is free, already ours, or its lease has expired.

#![forbid(unsafe_code)]

mod backend;
mod durable;
mod postgres;
mod sqlite;

pub use crate::backend::{
    Backend, Claimed, Decided, ExecutionRow, Fault, ListFilter, ListedRow, RawEntry,
};
pub use crate::durable::Durable;
pub use crate::postgres::{Postgres, PostgresStore};
pub use crate::sqlite::{Durability, Sqlite, SqliteStore};

use std::sync::Arc;
use terminus_runtime::{Store, StoreError};

/// Opens the journal a `--journal` argument names: a `postgres://` (or `postgresql://`) URL is a
/// [`PostgresStore`]; anything else is the path of a SQLite file, created if missing.
pub async fn open(target: &str, durability: Durability) -> Result<Arc<dyn Store>, StoreError> {
    if target.starts_with("postgres://") || target.starts_with("postgresql://") {
        return Ok(Arc::new(PostgresStore::connect(target).await?));
    }
    Ok(Arc::new(SqliteStore::open(target, durability)?))
}
