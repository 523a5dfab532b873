//! The SQLite backend (rusqlite, bundled SQLite): the embedded default. Statements run on
//! tokio's blocking pool, never on the async executor (a write can wait up to the busy timeout
//! for another process's transaction).

use crate::backend::{
    Backend, Claimed, ExecutionRow, Fault, ListFilter, ListedRow, RawEntry, millis, now_ms,
};
use crate::durable::Durable;
use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use terminus_runtime::{Cause, StoreError};

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
    include_str!("../migrations/sqlite_003_conflicts.sql"),
    include_str!("../migrations/sqlite_004_cells.sql"),
];

/// The executions (`Backend::executions`): each one's row, what its report or else its stop
/// entry says, and else counts of its journal (transitions, model answers, tool intents).
/// Parameters: now (ms), outcome, reason, min steps.
const LIST: &str = "
SELECT id, name, live, failed, outcome, reason, rule, steps, model_calls, tool_calls, entries
FROM (
  SELECT e.id AS id, e.created_ms AS created,
    json_extract(e.spec, '$.name') AS name,
    (e.worker IS NOT NULL AND e.lease_until_ms >= ?1) AS live,
    (e.failure IS NOT NULL) AS failed,
    COALESCE(json_extract(e.report, '$.outcome'), json_extract(s.body, '$.outcome')) AS outcome,
    COALESCE(json_extract(e.report, '$.reason'), json_extract(s.body, '$.reason')) AS reason,
    COALESCE(json_extract(e.report, '$.rule'), json_extract(s.body, '$.rule')) AS rule,
    COALESCE(json_extract(e.report, '$.steps'), json_extract(s.body, '$.stats.steps'),
      (SELECT count(*) FROM entries t WHERE t.execution = e.id AND t.kind = 'transition'))
      AS steps,
    COALESCE(json_extract(e.report, '$.model_calls'), json_extract(s.body, '$.stats.model_calls'),
      (SELECT count(*) FROM entries t
       WHERE t.execution = e.id AND t.kind IN ('assistant', 'model_error'))) AS model_calls,
    COALESCE(json_extract(e.report, '$.tool_calls'), json_extract(s.body, '$.stats.tool_calls'),
      (SELECT count(*) FROM entries t WHERE t.execution = e.id AND t.kind = 'tool_call'))
      AS tool_calls,
    (SELECT count(*) FROM entries t WHERE t.execution = e.id) AS entries
  FROM executions e LEFT JOIN entries s ON s.execution = e.id AND s.kind = 'stop'
)
WHERE (?2 IS NULL OR outcome = ?2) AND (?3 IS NULL OR reason = ?3) AND steps >= ?4
ORDER BY created, id";

/// How long a statement waits for another process's write transaction.
const BUSY: Duration = Duration::from_secs(10);

/// A journal in one SQLite file.
pub type SqliteStore = Durable<Sqlite>;

/// One SQLite connection, shared behind a mutex by the calls of one store.
#[derive(Debug)]
pub struct Sqlite {
    conn: Arc<Mutex<Connection>>,
    path: String,
    /// The file the connection opened: SQLite goes on writing into a file deleted or replaced
    /// under it (another process then sees none of it), so every call first checks the path
    /// still names this file.
    file: Arc<FileId>,
}

/// Which file a path named when the journal was opened.
#[derive(Debug, PartialEq, Eq)]
struct FileId {
    path: std::path::PathBuf,
    id: Option<(u64, u64)>,
}

impl FileId {
    fn of(path: &Path) -> FileId {
        FileId {
            // Absolute, so a host that changes directory still checks the same path.
            path: std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned()),
            id: Self::id(path),
        }
    }

    #[cfg(unix)]
    fn id(path: &Path) -> Option<(u64, u64)> {
        use std::os::unix::fs::MetadataExt as _;
        std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
    }

    #[cfg(not(unix))]
    fn id(path: &Path) -> Option<(u64, u64)> {
        std::fs::metadata(path).ok().map(|_| (0, 0))
    }

    /// An error if the path no longer names the file that was opened.
    fn check(&self) -> Result<(), Fault> {
        if Self::id(&self.path) == self.id {
            return Ok(());
        }
        Err(Fault::Db(Cause::new(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            "the journal file was deleted or replaced while in use; nothing more is written to \
             it, since no other process could read it",
        ))))
    }
}

fn lock(conn: &Mutex<Connection>) -> MutexGuard<'_, Connection> {
    // Every mutation is a single statement or a transaction, so a poisoned lock still guards a
    // consistent connection.
    conn.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Durable<Sqlite> {
    /// Opens (creating if needed) the journal at `path` and migrates its schema.
    pub fn open(path: impl AsRef<Path>, durability: Durability) -> Result<SqliteStore, StoreError> {
        let path = path.as_ref();
        let name = path.display().to_string();
        let failed = |action: &str, e: rusqlite::Error| StoreError::Backend {
            journal: name.clone(),
            action: action.to_owned(),
            source: Cause::new(e),
        };
        let conn = Connection::open(path).map_err(|e| failed("open the file", e))?;
        conn.busy_timeout(BUSY)
            .map_err(|e| failed("set the busy timeout", e))?;
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
                    if f.code == rusqlite::ErrorCode::DatabaseBusy && waited.elapsed() < BUSY =>
                {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => return Err(failed("set WAL mode", e)),
            }
        }
        let store = Durable::new(Sqlite {
            conn: Arc::new(Mutex::new(conn)),
            path: name,
            file: Arc::new(FileId::of(path)),
        });
        store.migrate()?;
        Ok(store)
    }

    fn migrate(&self) -> Result<(), StoreError> {
        let backend = &self.backend;
        let failed = |e: rusqlite::Error| StoreError::Backend {
            journal: backend.path.clone(),
            action: "migrate the schema".into(),
            source: Cause::new(e),
        };
        let mut conn = lock(&backend.conn);
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(failed)?;
        let version: i64 = tx
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(failed)?;
        let version = usize::try_from(version).unwrap_or(usize::MAX);
        if version > MIGRATIONS.len() {
            return Err(StoreError::Corrupt {
                journal: backend.path.clone(),
                what: format!(
                    "the schema version is {version}, newer than this build knows ({})",
                    MIGRATIONS.len()
                ),
            });
        }
        for (i, sql) in MIGRATIONS.iter().enumerate().skip(version) {
            tx.execute_batch(sql).map_err(failed)?;
            tx.pragma_update(None, "user_version", i64::try_from(i + 1).unwrap_or(0))
                .map_err(failed)?;
        }
        tx.commit().map_err(failed)
    }

    /// The schema version (`PRAGMA user_version`).
    pub fn schema_version(&self) -> Result<u32, StoreError> {
        self.unchecked(|c| c.query_row("PRAGMA user_version", [], |r| r.get(0)))
    }

    /// Runs raw SQL on the journal's own connection (tests and maintenance only: a `PRAGMA`
    /// holds for this connection alone).
    #[doc(hidden)]
    pub fn execute_unchecked(&self, sql: &str) -> Result<(), StoreError> {
        self.unchecked(|c| c.execute_batch(sql))
    }

    fn unchecked<T>(
        &self,
        f: impl FnOnce(&Connection) -> rusqlite::Result<T>,
    ) -> Result<T, StoreError> {
        f(&lock(&self.backend.conn)).map_err(|e| StoreError::Backend {
            journal: self.backend.path.clone(),
            action: "run a maintenance statement".into(),
            source: Cause::new(e),
        })
    }
}

impl Sqlite {
    /// Runs `f` on the connection on the blocking pool.
    async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<T, Fault> + Send + 'static,
    ) -> Result<T, Fault> {
        let (conn, file) = (Arc::clone(&self.conn), Arc::clone(&self.file));
        tokio::task::spawn_blocking(move || {
            file.check()?;
            f(&mut lock(&conn))
        })
        .await
        .map_err(|e| Fault::Db(Cause::new(e)))?
    }
}

fn count(n: i64, what: &str) -> Result<u64, Fault> {
    u64::try_from(n).map_err(|_| Fault::Corrupt(format!("{what} is negative ({n})")))
}

#[async_trait]
impl Backend for Sqlite {
    fn name(&self) -> &str {
        &self.path
    }

    async fn create(&self, execution: &str, spec: String) -> Result<bool, Fault> {
        let execution = execution.to_owned();
        self.run(move |c| {
            let n = c.execute(
                "INSERT INTO executions (id, created_ms, spec) VALUES (?1, ?2, ?3)
                 ON CONFLICT(id) DO NOTHING",
                params![execution, now_ms(), spec],
            )?;
            Ok(n == 1)
        })
        .await
    }

    async fn row(&self, execution: &str) -> Result<Option<ExecutionRow>, Fault> {
        let execution = execution.to_owned();
        self.run(move |c| {
            Ok(c.query_row(
                "SELECT status, worker, spec, report, failure, conflicts
                 FROM executions WHERE id = ?1",
                [execution],
                |r| {
                    Ok(ExecutionRow {
                        status: r.get(0)?,
                        worker: r.get(1)?,
                        spec: r.get(2)?,
                        report: r.get(3)?,
                        failure: r.get(4)?,
                        conflicts: {
                            let n: i64 = r.get(5)?;
                            u64::try_from(n)
                                .map_err(|_| rusqlite::Error::IntegralValueOutOfRange(5, n))?
                        },
                    })
                },
            )
            .optional()?)
        })
        .await
    }

    async fn append(
        &self,
        execution: &str,
        entries: Vec<RawEntry>,
    ) -> Result<Vec<Option<String>>, Fault> {
        let execution = execution.to_owned();
        self.run(move |c| {
            let tx = c.transaction()?;
            let mut out = Vec::with_capacity(entries.len());
            {
                let mut insert = tx.prepare_cached(
                    "INSERT INTO entries (execution, checkpoint, idx, kind, body)
                     VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT DO NOTHING",
                )?;
                let mut select = tx.prepare_cached(
                    "SELECT body FROM entries WHERE execution = ?1 AND checkpoint = ?2 AND idx = ?3",
                )?;
                for e in &entries {
                    let params = params![execution, e.checkpoint, e.index, e.kind, e.body];
                    if insert.execute(params)? == 1 {
                        out.push(None);
                    } else {
                        out.push(Some(select.query_row(
                            params![execution, e.checkpoint, e.index],
                            |r| r.get(0),
                        )?));
                    }
                }
            }
            tx.commit()?;
            Ok(out)
        })
        .await
    }

    async fn page(
        &self,
        execution: &str,
        after: Option<(u32, u32)>,
        limit: u32,
    ) -> Result<Vec<(u32, u32, String)>, Fault> {
        let execution = execution.to_owned();
        let (cp, idx) = after.map_or((-1, -1), |(cp, idx)| (i64::from(cp), i64::from(idx)));
        self.run(move |c| {
            let mut stmt = c.prepare_cached(
                "SELECT checkpoint, idx, body FROM entries
                 WHERE execution = ?1 AND (checkpoint > ?2 OR (checkpoint = ?2 AND idx > ?3))
                 ORDER BY checkpoint, idx LIMIT ?4",
            )?;
            let rows = stmt.query_map(params![execution, cp, idx, limit], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?))
            })?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
        .await
    }

    async fn count(&self, execution: &str) -> Result<u64, Fault> {
        let execution = execution.to_owned();
        self.run(move |c| {
            let n: i64 = c.query_row(
                "SELECT count(*) FROM entries WHERE execution = ?1",
                [execution],
                |r| r.get(0),
            )?;
            count(n, "the entry count")
        })
        .await
    }

    async fn finish(&self, execution: &str, report: String) -> Result<(), Fault> {
        let execution = execution.to_owned();
        self.run(move |c| {
            c.execute(
                "UPDATE executions SET status = 'done', report = ?2 WHERE id = ?1",
                params![execution, report],
            )?;
            Ok(())
        })
        .await
    }

    async fn claim(
        &self,
        execution: &str,
        worker: &str,
        lease: Duration,
    ) -> Result<Claimed, Fault> {
        let (execution, worker) = (execution.to_owned(), worker.to_owned());
        self.run(move |c| {
            let now = now_ms();
            let until = now.saturating_add(millis(lease));
            let n = c.execute(
                "UPDATE executions SET worker = ?2, lease_until_ms = ?3,
                        status = CASE WHEN status IN ('done', 'failed') THEN status ELSE 'running' END
                 WHERE id = ?1 AND (worker IS NULL OR worker = ?2 OR lease_until_ms < ?4)",
                params![execution, worker, until, now],
            )?;
            if n == 1 {
                return Ok(Claimed::Taken);
            }
            let holder: Option<Option<String>> = c
                .query_row(
                    "UPDATE executions SET conflicts = conflicts + 1 WHERE id = ?1 RETURNING worker",
                    [&execution],
                    |r| r.get(0),
                )
                .optional()?;
            Ok(match holder {
                None => Claimed::Missing,
                Some(holder) => Claimed::HeldBy(holder.unwrap_or_default()),
            })
        })
        .await
    }

    async fn claim_next(&self, worker: &str, lease: Duration) -> Result<Option<String>, Fault> {
        let worker = worker.to_owned();
        self.run(move |c| {
            let now = now_ms();
            let until = now.saturating_add(millis(lease));
            // One immediate transaction: SQLite has one writer at a time, so two workers cannot
            // take the same row.
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let id: Option<String> = tx
                .query_row(
                    "SELECT id FROM executions WHERE status NOT IN ('done', 'failed')
                     AND spec IS NOT NULL AND (worker IS NULL OR lease_until_ms < ?1)
                     ORDER BY created_ms, id LIMIT 1",
                    [now],
                    |r| r.get(0),
                )
                .optional()?;
            if let Some(id) = &id {
                tx.execute(
                    "UPDATE executions SET worker = ?2, lease_until_ms = ?3, status = 'running'
                     WHERE id = ?1",
                    params![id, worker, until],
                )?;
            }
            tx.commit()?;
            Ok(id)
        })
        .await
    }

    async fn renew(&self, execution: &str, worker: &str, lease: Duration) -> Result<bool, Fault> {
        let (execution, worker) = (execution.to_owned(), worker.to_owned());
        self.run(move |c| {
            let until = now_ms().saturating_add(millis(lease));
            let n = c.execute(
                "UPDATE executions SET lease_until_ms = ?3 WHERE id = ?1 AND worker = ?2",
                params![execution, worker, until],
            )?;
            if n == 0 {
                c.execute(
                    "UPDATE executions SET conflicts = conflicts + 1 WHERE id = ?1",
                    [&execution],
                )?;
            }
            Ok(n == 1)
        })
        .await
    }

    async fn release(&self, execution: &str, worker: &str) -> Result<(), Fault> {
        let (execution, worker) = (execution.to_owned(), worker.to_owned());
        self.run(move |c| {
            c.execute(
                "UPDATE executions SET worker = NULL, lease_until_ms = 0
                 WHERE id = ?1 AND worker = ?2",
                params![execution, worker],
            )?;
            Ok(())
        })
        .await
    }

    async fn fail(&self, execution: &str, worker: &str, failure: String) -> Result<bool, Fault> {
        let (execution, worker) = (execution.to_owned(), worker.to_owned());
        self.run(move |c| {
            let n = c.execute(
                "UPDATE executions SET status = 'failed', failure = ?3, worker = NULL,
                        lease_until_ms = 0
                 WHERE id = ?1 AND worker = ?2 AND status != 'done'",
                params![execution, worker, failure],
            )?;
            Ok(n == 1)
        })
        .await
    }

    async fn executions(&self, filter: &ListFilter) -> Result<Vec<ListedRow>, Fault> {
        let filter = filter.clone();
        self.run(move |c| {
            let mut stmt = c.prepare_cached(LIST)?;
            let rows = stmt.query_map(
                params![now_ms(), filter.outcome, filter.reason, filter.min_steps],
                |r| {
                    Ok(ListedRow {
                        id: r.get(0)?,
                        name: r.get(1)?,
                        live: r.get(2)?,
                        failed: r.get(3)?,
                        outcome: r.get(4)?,
                        reason: r.get(5)?,
                        rule: r.get(6)?,
                        steps: r.get(7)?,
                        model_calls: r.get(8)?,
                        tool_calls: r.get(9)?,
                        entries: r.get(10)?,
                    })
                },
            )?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        })
        .await
    }

    async fn cell(&self, key: &str) -> Result<Option<(u64, String)>, Fault> {
        let key = key.to_owned();
        self.run(move |c| {
            let row: Option<(i64, String)> = c
                .query_row(
                    "SELECT version, body FROM cells WHERE key = ?1",
                    [&key],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()?;
            row.map(|(v, body)| Ok((count(v, "a cell's version")?, body)))
                .transpose()
        })
        .await
    }

    async fn put_cell(
        &self,
        key: &str,
        expected: Option<u64>,
        body: String,
    ) -> Result<Option<u64>, Fault> {
        let key = key.to_owned();
        self.run(move |c| {
            let n = match expected {
                None => c.execute(
                    "INSERT INTO cells (key, version, body) VALUES (?1, 1, ?2)
                     ON CONFLICT (key) DO NOTHING",
                    params![key, body],
                )?,
                Some(v) => c.execute(
                    "UPDATE cells SET version = version + 1, body = ?3
                     WHERE key = ?1 AND version = ?2",
                    params![key, i64::try_from(v).unwrap_or(i64::MAX), body],
                )?,
            };
            Ok((n == 1).then(|| expected.map_or(1, |v| v + 1)))
        })
        .await
    }
}
