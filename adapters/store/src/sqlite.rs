//! The SQLite store (rusqlite, bundled SQLite).

use crate::{ExecutionRow, RawAppended, RawEntry, StoreError, now_ms};
use rusqlite::{Connection, OptionalExtension, params};
use std::path::Path;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// What a committed entry survives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// A killed process (WAL, `synchronous=NORMAL`): the default.
    #[default]
    Process,
    /// Power loss (WAL, `synchronous=FULL`: every commit is fsynced).
    PowerLoss,
}

const MIGRATIONS: &[&str] = &[
    include_str!("../migrations/sqlite_001_init.sql"),
    include_str!("../migrations/sqlite_002_failure.sql"),
];

/// A journal in one SQLite file. Calls are short and synchronous; the connection is behind a
/// mutex so the store can be shared.
#[derive(Debug)]
pub struct SqliteStore {
    conn: Mutex<Connection>,
}

fn backend(e: rusqlite::Error) -> StoreError {
    StoreError::Backend(e.to_string())
}

impl SqliteStore {
    /// Opens (creating if needed) the journal at `path` and migrates its schema.
    pub fn open(path: impl AsRef<Path>, durability: Durability) -> Result<SqliteStore, StoreError> {
        let path = path.as_ref();
        let conn = Connection::open(path)
            .map_err(|e| StoreError::Backend(format!("{}: {e}", path.display())))?;
        conn.busy_timeout(Duration::from_secs(10))
            .map_err(backend)?;
        let sync = match durability {
            Durability::Process => "NORMAL",
            Durability::PowerLoss => "FULL",
        };
        let pragmas =
            format!("PRAGMA journal_mode=WAL; PRAGMA synchronous={sync}; PRAGMA foreign_keys=ON;");
        // While another connection recovers the WAL of a process that was killed, setting the
        // journal mode can answer SQLITE_BUSY without calling the busy handler: wait as the
        // busy timeout would, rather than fail a process that merely started at that moment.
        let waited = std::time::Instant::now();
        loop {
            match conn.execute_batch(&pragmas) {
                Ok(()) => break,
                Err(rusqlite::Error::SqliteFailure(f, _))
                    if f.code == rusqlite::ErrorCode::DatabaseBusy
                        && waited.elapsed() < Duration::from_secs(10) =>
                {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => return Err(StoreError::Backend(format!("{}: {e}", path.display()))),
            }
        }
        let store = SqliteStore {
            conn: Mutex::new(conn),
        };
        store.migrate()?;
        Ok(store)
    }

    fn conn(&self) -> MutexGuard<'_, Connection> {
        // Every mutation is a single statement or a transaction, so a poisoned lock still guards
        // a consistent connection.
        self.conn.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The schema version (`PRAGMA user_version`).
    pub fn schema_version(&self) -> Result<u32, StoreError> {
        self.conn()
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(backend)
    }

    fn migrate(&self) -> Result<(), StoreError> {
        let mut conn = self.conn();
        let tx = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(backend)?;
        let version: i64 = tx
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(backend)?;
        let version = usize::try_from(version).unwrap_or(usize::MAX);
        if version > MIGRATIONS.len() {
            return Err(StoreError::Corrupt(format!(
                "the journal has schema version {version}, newer than this build knows ({})",
                MIGRATIONS.len()
            )));
        }
        for (i, sql) in MIGRATIONS.iter().enumerate().skip(version) {
            tx.execute_batch(sql).map_err(backend)?;
            tx.pragma_update(
                None,
                "user_version",
                i64::try_from(i + 1).unwrap_or(i64::MAX),
            )
            .map_err(backend)?;
        }
        tx.commit().map_err(backend)
    }

    /// Runs raw SQL on the journal (tests and maintenance only).
    #[doc(hidden)]
    pub fn execute_unchecked(&self, sql: &str) -> Result<(), StoreError> {
        self.conn().execute_batch(sql).map_err(backend)
    }

    /// Creates the execution with its spec; returns false if it exists.
    pub fn create(&self, execution: &str, spec: Option<&str>) -> Result<bool, StoreError> {
        let n = self
            .conn()
            .execute(
                "INSERT INTO executions (id, created_ms, spec) VALUES (?1, ?2, ?3) ON CONFLICT(id) DO NOTHING",
                params![execution, now_ms(), spec],
            )
            .map_err(backend)?;
        Ok(n == 1)
    }

    /// The execution's row.
    pub fn execution(&self, execution: &str) -> Result<Option<ExecutionRow>, StoreError> {
        self.conn()
            .query_row(
                "SELECT id, status, worker, lease_until_ms, spec, report, failure FROM executions WHERE id = ?1",
                [execution],
                |r| {
                    Ok(ExecutionRow {
                        id: r.get(0)?,
                        status: r.get(1)?,
                        worker: r.get(2)?,
                        lease_until_ms: r.get(3)?,
                        spec: r.get(4)?,
                        report: r.get(5)?,
                        failure: r.get(6)?,
                    })
                },
            )
            .optional()
            .map_err(backend)
    }

    /// Claims the execution for `worker` for `lease`: one atomic compare-and-set that succeeds
    /// only if the execution is unclaimed, already ours, or its lease expired.
    pub fn claim(&self, execution: &str, worker: &str, lease: Duration) -> Result<(), StoreError> {
        let now = now_ms();
        let until = now.saturating_add(i64::try_from(lease.as_millis()).unwrap_or(i64::MAX));
        let conn = self.conn();
        let n = conn
            .execute(
                "UPDATE executions SET worker = ?2, lease_until_ms = ?3, status = CASE WHEN status IN ('done', 'failed') THEN status ELSE 'running' END
                 WHERE id = ?1 AND (worker IS NULL OR worker = ?2 OR lease_until_ms < ?4)",
                params![execution, worker, until, now],
            )
            .map_err(backend)?;
        if n == 1 {
            return Ok(());
        }
        let holder: Option<Option<String>> = conn
            .query_row(
                "SELECT worker FROM executions WHERE id = ?1",
                [execution],
                |r| r.get(0),
            )
            .optional()
            .map_err(backend)?;
        match holder {
            None => Err(StoreError::NotFound(execution.to_owned())),
            Some(worker) => Err(StoreError::Claimed {
                execution: execution.to_owned(),
                worker: worker.unwrap_or_default(),
            }),
        }
    }

    /// Takes one runnable execution (not done, and unclaimed or with an expired lease) for
    /// `worker`, oldest first, in one immediate transaction (SQLite has one writer at a time, so
    /// two workers cannot take the same row).
    pub fn claim_next(&self, worker: &str, lease: Duration) -> Result<Option<String>, StoreError> {
        let now = now_ms();
        let until = now.saturating_add(i64::try_from(lease.as_millis()).unwrap_or(i64::MAX));
        let mut conn = self.conn();
        let tx = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(backend)?;
        let id: Option<String> = tx
            .query_row(
                "SELECT id FROM executions WHERE status NOT IN ('done', 'failed') AND spec IS NOT NULL
                 AND (worker IS NULL OR lease_until_ms < ?1) ORDER BY created_ms, id LIMIT 1",
                [now],
                |r| r.get(0),
            )
            .optional()
            .map_err(backend)?;
        if let Some(id) = &id {
            tx.execute(
                "UPDATE executions SET worker = ?2, lease_until_ms = ?3, status = 'running' WHERE id = ?1",
                params![id, worker, until],
            )
            .map_err(backend)?;
        }
        tx.commit().map_err(backend)?;
        Ok(id)
    }

    /// Extends our claim; fails with `LeaseLost` if another worker took it.
    pub fn renew(&self, execution: &str, worker: &str, lease: Duration) -> Result<(), StoreError> {
        let until = now_ms().saturating_add(i64::try_from(lease.as_millis()).unwrap_or(i64::MAX));
        let n = self
            .conn()
            .execute(
                "UPDATE executions SET lease_until_ms = ?3 WHERE id = ?1 AND worker = ?2",
                params![execution, worker, until],
            )
            .map_err(backend)?;
        StoreError::unless_held(n as u64, execution)
    }

    /// Gives the claim up (if we still hold it).
    pub fn release(&self, execution: &str, worker: &str) -> Result<(), StoreError> {
        self.conn()
            .execute(
                "UPDATE executions SET worker = NULL, lease_until_ms = 0 WHERE id = ?1 AND worker = ?2",
                params![execution, worker],
            )
            .map_err(backend)?;
        Ok(())
    }

    /// Marks the execution failed with `failure` (JSON) and frees the claim, if `worker` still
    /// holds it; `LeaseLost` otherwise.
    pub fn fail(&self, execution: &str, worker: &str, failure: &str) -> Result<(), StoreError> {
        let n = self
            .conn()
            .execute(
                "UPDATE executions SET status = 'failed', failure = ?3, worker = NULL, lease_until_ms = 0
                 WHERE id = ?1 AND worker = ?2 AND status != 'done'",
                params![execution, worker, failure],
            )
            .map_err(backend)?;
        StoreError::unless_held(n as u64, execution)
    }

    /// Marks the execution done with its report.
    pub fn finish(&self, execution: &str, report: &str) -> Result<(), StoreError> {
        self.conn()
            .execute(
                "UPDATE executions SET status = 'done', report = ?2 WHERE id = ?1",
                params![execution, report],
            )
            .map_err(backend)?;
        Ok(())
    }

    /// Appends entries in one transaction. For each, whether its key already existed (then the
    /// stored body is returned instead of the new one and nothing is written).
    pub fn append(
        &self,
        execution: &str,
        entries: &[RawEntry],
    ) -> Result<Vec<RawAppended>, StoreError> {
        let mut conn = self.conn();
        let tx = conn.transaction().map_err(backend)?;
        let mut out = Vec::with_capacity(entries.len());
        {
            let mut insert = tx
                .prepare_cached(
                    "INSERT INTO entries (execution, checkpoint, idx, kind, body) VALUES (?1, ?2, ?3, ?4, ?5)
                     ON CONFLICT DO NOTHING",
                )
                .map_err(backend)?;
            let mut select = tx
                .prepare_cached("SELECT body FROM entries WHERE execution = ?1 AND checkpoint = ?2 AND idx = ?3")
                .map_err(backend)?;
            for e in entries {
                let cp = i64::try_from(e.checkpoint)
                    .map_err(|_| StoreError::Corrupt("checkpoint too large".into()))?;
                let n = insert
                    .execute(params![execution, cp, e.index, e.kind, e.body])
                    .map_err(backend)?;
                if n == 1 {
                    out.push(RawAppended {
                        already_existed: false,
                        body: e.body.clone(),
                    });
                } else {
                    let body: String = select
                        .query_row(params![execution, cp, e.index], |r| r.get(0))
                        .map_err(backend)?;
                    out.push(RawAppended {
                        already_existed: true,
                        body,
                    });
                }
            }
        }
        tx.commit().map_err(backend)?;
        Ok(out)
    }

    /// Up to `limit` entries after `after` (exclusive), in key order: a long journal is read in
    /// pages, never all at once.
    pub fn page(
        &self,
        execution: &str,
        after: Option<(u64, u32)>,
        limit: u32,
    ) -> Result<Vec<RawEntry>, StoreError> {
        let (cp, idx) = match after {
            Some((cp, idx)) => (i64::try_from(cp).unwrap_or(i64::MAX), i64::from(idx)),
            None => (-1, -1),
        };
        let conn = self.conn();
        let mut stmt = conn
            .prepare_cached(
                "SELECT checkpoint, idx, kind, body FROM entries
                 WHERE execution = ?1 AND (checkpoint > ?2 OR (checkpoint = ?2 AND idx > ?3))
                 ORDER BY checkpoint, idx LIMIT ?4",
            )
            .map_err(backend)?;
        let rows = stmt
            .query_map(params![execution, cp, idx, limit], |r| {
                let cp: i64 = r.get(0)?;
                Ok(RawEntry {
                    checkpoint: u64::try_from(cp).unwrap_or(0),
                    index: r.get(1)?,
                    kind: r.get(2)?,
                    body: r.get(3)?,
                })
            })
            .map_err(backend)?;
        rows.collect::<Result<Vec<_>, _>>().map_err(backend)
    }

    /// Entries stored for the execution.
    pub fn count(&self, execution: &str) -> Result<u64, StoreError> {
        let n: i64 = self
            .conn()
            .query_row(
                "SELECT count(*) FROM entries WHERE execution = ?1",
                [execution],
                |r| r.get(0),
            )
            .map_err(backend)?;
        Ok(u64::try_from(n).unwrap_or(0))
    }
}
