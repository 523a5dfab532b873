//! The PostgreSQL backend (tokio-postgres): for many workers on many machines. Lease times use
//! the server's clock (`now()`), so workers on machines with skewed clocks agree on who holds a
//! claim. A connection that drops (a server restart, a killed backend, a network cut) is opened
//! again and the statement retried once: every statement here may run twice (appends skip
//! stored keys, claims by the same worker succeed again).

use crate::backend::{
    Backend, Claimed, Decided, ExecutionRow, Fault, ListFilter, ListedRow, RawEntry,
};
use crate::durable::{Durable, store_error};
use async_trait::async_trait;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use terminus_runtime::StoreError;
use tokio::sync::{MappedMutexGuard, Mutex, MutexGuard};
use tokio_postgres::{Client, NoTls, Row, Statement};

const MIGRATIONS: &[&str] = &[
    include_str!("../migrations/postgres_001_init.sql"),
    include_str!("../migrations/postgres_002_failure.sql"),
    include_str!("../migrations/postgres_003_conflicts.sql"),
    include_str!("../migrations/postgres_004_cells.sql"),
    include_str!("../migrations/postgres_005_suspended.sql"),
];

/// The executions (`Backend::executions`): each one's row, what its report or else its stop
/// entry says, and else counts of its journal (transitions, model answers, tool intents).
/// Parameters: outcome, reason, min steps.
const LIST: &str = "
SELECT id, name, live, failed, outcome, reason, rule, steps, model_calls, tool_calls, entries,
  suspended, decided
FROM (
  SELECT e.id AS id, e.created AS created,
    (e.held > 0) AS suspended, (e.held = 0 AND e.suspended_ms IS NOT NULL) AS decided,
    e.spec::jsonb ->> 'name' AS name,
    (e.worker IS NOT NULL AND e.lease_until >= now()) AS live,
    (e.failure IS NOT NULL) AS failed,
    COALESCE(e.report::jsonb ->> 'outcome', s.body::jsonb ->> 'outcome') AS outcome,
    COALESCE(e.report::jsonb ->> 'reason', s.body::jsonb ->> 'reason') AS reason,
    COALESCE(e.report::jsonb ->> 'rule', s.body::jsonb ->> 'rule') AS rule,
    COALESCE((e.report::jsonb ->> 'steps')::bigint, (s.body::jsonb -> 'stats' ->> 'steps')::bigint,
      (SELECT count(*) FROM terminus_entries t
       WHERE t.execution = e.id AND t.kind = 'transition')) AS steps,
    COALESCE((e.report::jsonb ->> 'model_calls')::bigint,
      (s.body::jsonb -> 'stats' ->> 'model_calls')::bigint,
      (SELECT count(*) FROM terminus_entries t
       WHERE t.execution = e.id AND t.kind IN ('assistant', 'model_error'))) AS model_calls,
    COALESCE((e.report::jsonb ->> 'tool_calls')::bigint,
      (s.body::jsonb -> 'stats' ->> 'tool_calls')::bigint,
      (SELECT count(*) FROM terminus_entries t
       WHERE t.execution = e.id AND t.kind = 'tool_call')) AS tool_calls,
    (SELECT count(*) FROM terminus_entries t WHERE t.execution = e.id) AS entries
  FROM terminus_executions e
  LEFT JOIN LATERAL (
    SELECT CASE WHEN t.kind = 'stop' THEN t.body END AS body FROM terminus_entries t
    WHERE t.execution = e.id AND t.kind IN ('stop', 'raised')
    ORDER BY t.checkpoint DESC, t.idx DESC LIMIT 1) s ON true
) listed
WHERE ($1::text IS NULL OR outcome = $1) AND ($2::text IS NULL OR reason = $2)
  AND steps >= $3::bigint
ORDER BY created, id";

/// A journal in a PostgreSQL database, shared by many workers.
pub type PostgresStore = Durable<Postgres>;

/// Connections to the server, up to `CONNECTIONS`, each opened when first needed and again
/// when it drops.
#[derive(Debug)]
pub struct Postgres {
    url: String,
    /// The URL without its password, for messages.
    shown: String,
    /// The first is opened by `connect`. A statement takes a free open one, else opens a slot
    /// nobody uses, else waits its turn on one: callers one after another (a single run) keep
    /// to the first connection, while concurrent callers (a host running many plans at once)
    /// go out side by side instead of queueing behind one round trip after another.
    conns: Vec<Mutex<Option<Conn>>>,
    /// The slot a caller that found none free waits on next.
    turn: AtomicUsize,
}

/// The most connections one store opens. Through one, 50 plans of 10 agents on a 2-core machine
/// saw their timeouts fire up to 4.7 s late, every write of every run queued behind the others
/// (`orchestrator/tests/load.rs`); a few let round trips overlap, and keep well under the
/// server's `max_connections` with many workers.
const CONNECTIONS: usize = 8;

/// Column `i` of `row` as `T`; a column of another type (a schema this build did not write) is
/// corrupt data, naming the column, never a panic (`Row::get` panics on a mismatch).
fn col<'a, T: tokio_postgres::types::FromSql<'a>>(row: &'a Row, i: usize) -> Result<T, Fault> {
    row.try_get(i).map_err(|e| {
        let name = row.columns().get(i).map_or("?", |c| c.name());
        Fault::Corrupt(format!("column `{name}`: {e}"))
    })
}

/// A number stored as a signed integer, for a field that cannot be negative.
fn unsigned<T: TryFrom<i64>>(n: i64, what: &str) -> Result<T, Fault> {
    T::try_from(n).map_err(|_| Fault::Corrupt(format!("{what} is out of range ({n})")))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Runs `$body` (an async block using `$c: &mut Client` and returning `Result<_, Fault>`) on
/// the connection; if it fails because the connection dropped, opens another and runs it once
/// more.
/// Runs `$body` (an async block using `$c: &mut Conn` and returning `Result<_, Fault>`) on the
/// connection; if it fails because the connection dropped, opens another and runs it once more,
/// with `$retried` (when named) true.
macro_rules! retrying {
    ($self:ident, $c:ident => $body:expr) => {
        retrying!($self, $c, _retried => $body)
    };
    ($self:ident, $c:ident, $retried:ident => $body:expr) => {
        async {
            let mut guard = $self.conn().await?;
            let first = {
                let $retried = false;
                let $c: &mut Conn = &mut guard;
                $body.await
            };
            match first {
                Err(fault) if guard.client.is_closed() || lost(&fault) => {
                    drop(fault);
                    *guard = Conn::open(&$self.url).await?;
                    let $retried = true;
                    let $c: &mut Conn = &mut guard;
                    $body.await
                }
                other => other,
            }
        }
        .await
    };
}

/// Whether `fault` says the connection is gone: closed, or ended by the server (an
/// administrator's command, a shutdown) before the client noticed.
fn lost(fault: &Fault) -> bool {
    let Fault::Db(cause) = fault else {
        return false;
    };
    let Some(e) = cause.get().downcast_ref::<tokio_postgres::Error>() else {
        return false;
    };
    e.is_closed()
        || e.code().is_some_and(|code| {
            let code = code.code();
            code.starts_with("08") || code.starts_with("57P")
        })
}

/// A connection and the statement every step runs, prepared once per connection.
#[derive(Debug)]
struct Conn {
    client: Client,
    /// The statements of every run, prepared once per connection (a statement given as text
    /// costs a round trip more: it is prepared, then run).
    prepared: HashMap<&'static str, Statement>,
}

/// The entries of one append, written in one statement; returns the keys it wrote (a key
/// already stored is left as it is, and not returned).
const INSERT: &str = "INSERT INTO terminus_entries (execution, checkpoint, idx, kind, body)
                      SELECT $1, * FROM unnest($2::bigint[], $3::int[], $4::text[], $5::text[])
                      ON CONFLICT DO NOTHING
                      RETURNING checkpoint, idx";

/// Inserts execution `$1` with spec `$2`, claimed by worker `$3` for `$4` milliseconds when
/// given, unless it exists.
const CREATE: &str = "INSERT INTO terminus_executions (id, spec, worker, lease_until)
                      VALUES ($1, $2, $3, CASE WHEN $3::text IS NULL THEN 'epoch'
                          ELSE now() + make_interval(secs => $4::float8 / 1000.0) END)
                      ON CONFLICT (id) DO NOTHING";

/// Marks execution `$1` done with report `$2`, freeing the claim of worker `$3` if it holds it.
const FINISH: &str = "UPDATE terminus_executions SET status = 'done', report = $2,
                             lease_until = CASE WHEN worker = $3 THEN 'epoch' ELSE lease_until END,
                             worker = CASE WHEN worker = $3 THEN NULL ELSE worker END
                      WHERE id = $1";

/// [`FINISH`] (report `$6`, worker `$7`) with the entries of [`INSERT`], in one statement (one
/// round trip, one commit): nothing is inserted when a key is stored already, and the report is
/// stored only when every entry was inserted. Updates one row when it wrote them. (Another
/// session inserting one of the keys after the statement's snapshot, which only a worker that
/// lost its lease can do, leaves the other entries written and no report.)
const FINISH_APPENDING: &str = "WITH fresh AS (
       SELECT NOT EXISTS (
         SELECT 1 FROM terminus_entries
         WHERE execution = $1
           AND (checkpoint, idx) IN (SELECT * FROM unnest($2::bigint[], $3::int[]))) AS ok),
     written AS (
       INSERT INTO terminus_entries (execution, checkpoint, idx, kind, body)
       SELECT $1, u.cp, u.idx, u.kind, u.body
       FROM unnest($2::bigint[], $3::int[], $4::text[], $5::text[]) AS u (cp, idx, kind, body),
            fresh
       WHERE fresh.ok
       ON CONFLICT DO NOTHING
       RETURNING 1)
     UPDATE terminus_executions SET status = 'done', report = $6,
            lease_until = CASE WHEN worker = $7 THEN 'epoch' ELSE lease_until END,
            worker = CASE WHEN worker = $7 THEN NULL ELSE worker END
     WHERE id = $1 AND (SELECT count(*) FROM written) = cardinality($2::bigint[])";

/// The columns of `entries`, one array each, as [`INSERT`] takes them.
struct Columns<'a> {
    checkpoints: Vec<i64>,
    indexes: Vec<i32>,
    kinds: Vec<&'a str>,
    bodies: Vec<&'a str>,
}

impl Columns<'_> {
    fn of(entries: &[RawEntry]) -> Result<Columns<'_>, Fault> {
        let (checkpoints, indexes) = entries
            .iter()
            .map(|e| {
                let index = i32::try_from(e.index)
                    .map_err(|_| Fault::Corrupt(format!("index {} is too large", e.index)))?;
                Ok((i64::from(e.checkpoint), index))
            })
            .collect::<Result<_, Fault>>()?;
        Ok(Columns {
            checkpoints,
            indexes,
            kinds: entries.iter().map(|e| e.kind).collect(),
            bodies: entries.iter().map(|e| e.body.as_str()).collect(),
        })
    }
}

impl Conn {
    async fn open(url: &str) -> Result<Conn, Fault> {
        let (client, connection) = tokio_postgres::connect(url, NoTls).await?;
        tokio::spawn(async move {
            // The connection ends when the client is dropped or the server goes away; the next
            // statement then finds the client closed and opens another.
            let _ = connection.await;
        });
        Ok(Conn {
            client,
            prepared: HashMap::new(),
        })
    }

    /// `sql`, prepared on this connection.
    async fn prepared(&mut self, sql: &'static str) -> Result<Statement, Fault> {
        if let Some(s) = self.prepared.get(sql) {
            return Ok(s.clone());
        }
        let s = self.client.prepare(sql).await?;
        self.prepared.insert(sql, s.clone());
        Ok(s)
    }
}

impl std::ops::Deref for Conn {
    type Target = Client;
    fn deref(&self) -> &Client {
        &self.client
    }
}

impl std::ops::DerefMut for Conn {
    fn deref_mut(&mut self) -> &mut Client {
        &mut self.client
    }
}

impl Durable<Postgres> {
    /// Connects to `url` (e.g. `postgres://postgres@127.0.0.1:5432/test`) and migrates the
    /// schema.
    pub async fn connect(url: &str) -> Result<PostgresStore, StoreError> {
        let shown = redact(url);
        let conn = Conn::open(url)
            .await
            .map_err(|f| store_error(&shown, f, || "connect".into()))?;
        let store = Durable::new(Postgres {
            url: url.to_owned(),
            shown,
            conns: std::iter::once(Some(conn))
                .chain(std::iter::repeat_with(|| None))
                .take(CONNECTIONS)
                .map(Mutex::new)
                .collect(),
            turn: AtomicUsize::new(0),
        });
        store.migrate().await?;
        Ok(store)
    }

    async fn migrate(&self) -> Result<(), StoreError> {
        let backend = &self.backend;
        let version = retrying!(backend, c => async {
            let tx = c.transaction().await?;
            // One migrator at a time across workers.
            tx.execute("SELECT pg_advisory_xact_lock(7265746)", &[]).await?;
            tx.batch_execute("CREATE TABLE IF NOT EXISTS terminus_schema (version INTEGER NOT NULL)")
                .await?;
            let version = match tx.query_opt("SELECT version FROM terminus_schema", &[]).await? {
                Some(r) => unsigned::<usize>(i64::from(col::<i32>(&r, 0)?), "the schema version")?,
                None => {
                    tx.execute("INSERT INTO terminus_schema (version) VALUES (0)", &[]).await?;
                    0
                }
            };
            if version > MIGRATIONS.len() {
                return Ok(version);
            }
            for (i, sql) in MIGRATIONS.iter().enumerate().skip(version) {
                tx.batch_execute(sql).await?;
                let v = i32::try_from(i + 1).unwrap_or(i32::MAX);
                tx.execute("UPDATE terminus_schema SET version = $1", &[&v]).await?;
            }
            tx.commit().await?;
            Ok::<_, Fault>(version)
        })
        .map_err(|f| self.fault(f, || "migrate the schema".into()))?;
        if version > MIGRATIONS.len() {
            return Err(StoreError::Corrupt {
                journal: backend.shown.clone(),
                what: format!(
                    "the schema version is {version}, newer than this build knows ({})",
                    MIGRATIONS.len()
                ),
            });
        }
        Ok(())
    }

    /// The schema version.
    pub async fn schema_version(&self) -> Result<u32, StoreError> {
        let backend = &self.backend;
        retrying!(backend, c => async {
            let row = c.query_one("SELECT version FROM terminus_schema", &[]).await?;
            unsigned(i64::from(col::<i32>(&row, 0)?), "the schema version")
        })
        .map_err(|f| self.fault(f, || "read the schema version".into()))
    }

    /// Deletes an execution and its entries (tests use this to start clean).
    pub async fn delete(&self, execution: &str) -> Result<(), StoreError> {
        let backend = &self.backend;
        retrying!(backend, c => async {
            c.execute("DELETE FROM terminus_executions WHERE id = $1", &[&execution])
                .await?;
            Ok::<_, Fault>(())
        })
        .map_err(|f| self.fault(f, || format!("delete execution `{execution}`")))
    }
}

impl Postgres {
    /// A connection for one statement (see `Postgres::conns`), opened first if it never was
    /// or dropped since its last statement.
    async fn conn(&self) -> Result<MappedMutexGuard<'_, Conn>, Fault> {
        let mut free: Option<MutexGuard<'_, Option<Conn>>> = None;
        for slot in &self.conns {
            if let Ok(guard) = slot.try_lock() {
                if guard.is_some() {
                    free = Some(guard);
                    break;
                }
                free.get_or_insert(guard);
            }
        }
        let mut guard = match free {
            Some(guard) => guard,
            None => {
                let i = self.turn.fetch_add(1, Ordering::Relaxed) % self.conns.len();
                self.conns[i].lock().await
            }
        };
        if guard.as_ref().is_none_or(|c| c.client.is_closed()) {
            *guard = Some(Conn::open(&self.url).await?);
        }
        MutexGuard::try_map(guard, Option::as_mut)
            .map_err(|_| Fault::Corrupt("a connection slot left empty".into()))
    }
}

#[async_trait]
impl Backend for Postgres {
    fn name(&self) -> &str {
        &self.shown
    }

    async fn create(
        &self,
        execution: &str,
        spec: String,
        claim: Option<(&str, Duration)>,
    ) -> Result<bool, Fault> {
        let (worker, lease) = match claim {
            Some((worker, lease)) => (Some(worker), ms(lease)),
            None => (None, 0.0),
        };
        retrying!(self, c, retried => async {
            let create = c.prepared(CREATE).await?;
            let n = c
                .execute(&create, &[&execution, &spec, &worker, &lease])
                .await?;
            if n == 1 || !retried {
                return Ok(n == 1);
            }
            // A retried insert can find the row its first attempt wrote before the answer was
            // lost: the same spec (it holds the start time, in milliseconds) is this creation.
            let row = c
                .query_opt("SELECT spec FROM terminus_executions WHERE id = $1", &[&execution])
                .await?;
            let stored = match row {
                Some(r) => col::<Option<String>>(&r, 0)?,
                None => None,
            };
            Ok::<_, Fault>(stored.as_ref() == Some(&spec))
        })
    }

    async fn row(&self, execution: &str) -> Result<Option<ExecutionRow>, Fault> {
        retrying!(self, c => async {
            let row = c
                .query_opt(
                    "SELECT status, worker, spec, report, failure, conflicts, held, suspended_ms,
                       paused_ms
                     FROM terminus_executions WHERE id = $1",
                    &[&execution],
                )
                .await?;
            row.map(|r| {
                Ok(ExecutionRow {
                    status: col(&r, 0)?,
                    worker: col(&r, 1)?,
                    spec: col(&r, 2)?,
                    report: col(&r, 3)?,
                    failure: col(&r, 4)?,
                    conflicts: unsigned(col(&r, 5)?, "conflicts")?,
                    held: u32::try_from(col::<i32>(&r, 6)?)
                        .map_err(|_| Fault::Corrupt("held is negative".into()))?,
                    suspended_ms: col(&r, 7)?,
                    paused_ms: col(&r, 8)?,
                })
            })
            .transpose()
        })
    }

    async fn append(
        &self,
        execution: &str,
        entries: Vec<RawEntry>,
    ) -> Result<Vec<Option<String>>, Fault> {
        let cols = Columns::of(&entries)?;
        retrying!(self, c => async {
            // One statement, its own transaction: one round trip and one commit per step.
            let insert = c.prepared(INSERT).await?;
            let written = c
                .query(
                    &insert,
                    &[&execution, &cols.checkpoints, &cols.indexes, &cols.kinds, &cols.bodies],
                )
                .await?;
            let mut fresh: HashMap<(i64, i32), usize> = HashMap::with_capacity(written.len());
            for r in &written {
                *fresh.entry((col(r, 0)?, col(r, 1)?)).or_default() += 1;
            }
            // The keys that were stored already (a replayed step): their stored bodies. A row
            // is never changed once written, so reading them after the commit is exact.
            let mut stored = HashMap::new();
            if written.len() < entries.len() {
                let rows = c
                    .query(
                        "SELECT checkpoint, idx, body FROM terminus_entries
                         WHERE execution = $1
                           AND (checkpoint, idx) IN (SELECT * FROM unnest($2::bigint[], $3::int[]))",
                        &[&execution, &cols.checkpoints, &cols.indexes],
                    )
                    .await?;
                for r in &rows {
                    stored.insert((col::<i64>(r, 0)?, col::<i32>(r, 1)?), col::<String>(r, 2)?);
                }
            }
            cols.checkpoints
                .iter()
                .zip(&cols.indexes)
                .map(|(&cp, &idx)| {
                    // Each written key once, in case a step named one key twice.
                    if let Some(n) = fresh.get_mut(&(cp, idx)).filter(|n| **n > 0) {
                        *n -= 1;
                        return Ok(None);
                    }
                    stored.get(&(cp, idx)).cloned().map(Some).ok_or_else(|| {
                        Fault::Corrupt(format!("entry cp{cp}:e{idx} was neither written nor found"))
                    })
                })
                .collect::<Result<Vec<_>, Fault>>()
        })
    }

    async fn page(
        &self,
        execution: &str,
        kind: Option<&'static str>,
        after: Option<(u32, u32)>,
        limit: u32,
    ) -> Result<Vec<(u32, u32, String)>, Fault> {
        let (cp, idx) = after.map_or((-1, -1), |(cp, idx)| {
            (i64::from(cp), i32::try_from(idx).unwrap_or(i32::MAX))
        });
        retrying!(self, c => async {
            let rows = c
                .query(
                    "SELECT checkpoint, idx, body FROM terminus_entries
                     WHERE execution = $1 AND ($2::text IS NULL OR kind = $2)
                       AND (checkpoint, idx) > ($3::bigint, $4::int)
                     ORDER BY checkpoint, idx LIMIT $5",
                    &[&execution, &kind, &cp, &idx, &i64::from(limit)],
                )
                .await?;
            rows.iter()
                .map(|r| {
                    Ok((
                        unsigned(col(r, 0)?, "a checkpoint")?,
                        unsigned(i64::from(col::<i32>(r, 1)?), "an index")?,
                        col(r, 2)?,
                    ))
                })
                .collect::<Result<Vec<_>, Fault>>()
        })
    }

    async fn count(&self, execution: &str) -> Result<u64, Fault> {
        retrying!(self, c => async {
            let row = c
                .query_one(
                    "SELECT count(*) FROM terminus_entries WHERE execution = $1",
                    &[&execution],
                )
                .await?;
            unsigned(col(&row, 0)?, "the entry count")
        })
    }

    async fn finish(
        &self,
        execution: &str,
        report: String,
        release: Option<&str>,
    ) -> Result<(), Fault> {
        retrying!(self, c => async {
            let finish = c.prepared(FINISH).await?;
            c.execute(&finish, &[&execution, &report, &release]).await?;
            Ok::<_, Fault>(())
        })
    }

    async fn finish_appending(
        &self,
        execution: &str,
        entries: Vec<RawEntry>,
        report: String,
        release: &str,
    ) -> Result<bool, Fault> {
        let cols = Columns::of(&entries)?;
        retrying!(self, c, retried => async {
            let finish = c.prepared(FINISH_APPENDING).await?;
            let n = c
                .execute(
                    &finish,
                    &[
                        &execution,
                        &cols.checkpoints,
                        &cols.indexes,
                        &cols.kinds,
                        &cols.bodies,
                        &report,
                        &release,
                    ],
                )
                .await?;
            if n == 1 || !retried {
                return Ok(n == 1);
            }
            // A retried statement can find what its first attempt committed before the answer
            // was lost: the same report stored is this finish.
            let row = c
                .query_opt(
                    "SELECT report FROM terminus_executions WHERE id = $1 AND status = 'done'",
                    &[&execution],
                )
                .await?;
            let stored = match row {
                Some(r) => col::<Option<String>>(&r, 0)?,
                None => None,
            };
            Ok::<_, Fault>(stored.as_deref() == Some(report.as_str()))
        })
    }

    async fn claim(
        &self,
        execution: &str,
        worker: &str,
        lease: Duration,
    ) -> Result<Claimed, Fault> {
        retrying!(self, c => async {
            let n = c
                .execute(
                    "UPDATE terminus_executions
                     SET worker = $2, lease_until = now() + make_interval(secs => $3::float8 / 1000.0),
                         status = CASE WHEN status IN ('done', 'failed') THEN status ELSE 'running' END,
                         suspended_ms = CASE WHEN held = 0 THEN NULL ELSE suspended_ms END
                     WHERE id = $1 AND (worker IS NULL OR worker = $2 OR lease_until < now())",
                    &[&execution, &worker, &ms(lease)],
                )
                .await?;
            if n == 1 {
                return Ok(Claimed::Taken);
            }
            let row = c
                .query_opt(
                    "UPDATE terminus_executions SET conflicts = conflicts + 1 WHERE id = $1
                     RETURNING worker",
                    &[&execution],
                )
                .await?;
            Ok::<_, Fault>(match row {
                None => Claimed::Missing,
                Some(r) => Claimed::HeldBy(col::<Option<String>>(&r, 0)?.unwrap_or_default()),
            })
        })
    }

    async fn claim_next(&self, worker: &str, lease: Duration) -> Result<Option<String>, Fault> {
        retrying!(self, c => async {
            let tx = c.transaction().await?;
            // Rows other workers are taking at this moment are skipped, not waited for.
            let row = tx
                .query_opt(
                    "SELECT id FROM terminus_executions
                     WHERE held = 0
                       AND (status = 'pending' OR (status = 'running' AND lease_until < now()))
                     ORDER BY created LIMIT 1 FOR UPDATE SKIP LOCKED",
                    &[],
                )
                .await?;
            let Some(row) = row else {
                tx.commit().await?;
                return Ok(None);
            };
            let id: String = col(&row, 0)?;
            tx.execute(
                "UPDATE terminus_executions SET worker = $2, status = 'running',
                        lease_until = now() + make_interval(secs => $3::float8 / 1000.0),
                        suspended_ms = NULL
                 WHERE id = $1",
                &[&id, &worker, &ms(lease)],
            )
            .await?;
            tx.commit().await?;
            Ok::<_, Fault>(Some(id))
        })
    }

    async fn renew(&self, execution: &str, worker: &str, lease: Duration) -> Result<bool, Fault> {
        retrying!(self, c => async {
            let n = c
                .execute(
                    "UPDATE terminus_executions
                     SET lease_until = now() + make_interval(secs => $3::float8 / 1000.0)
                     WHERE id = $1 AND worker = $2",
                    &[&execution, &worker, &ms(lease)],
                )
                .await?;
            if n == 0 {
                c.execute(
                    "UPDATE terminus_executions SET conflicts = conflicts + 1 WHERE id = $1",
                    &[&execution],
                )
                .await?;
            }
            Ok::<_, Fault>(n == 1)
        })
    }

    async fn release(&self, execution: &str, worker: &str) -> Result<(), Fault> {
        retrying!(self, c => async {
            c.execute(
                "UPDATE terminus_executions SET worker = NULL, lease_until = 'epoch'
                 WHERE id = $1 AND worker = $2",
                &[&execution, &worker],
            )
            .await?;
            Ok::<_, Fault>(())
        })
    }

    async fn suspend(
        &self,
        execution: &str,
        worker: &str,
        held: u32,
        at_ms: i64,
    ) -> Result<bool, Fault> {
        let held = i32::try_from(held).unwrap_or(i32::MAX);
        retrying!(self, c => async {
            let n = c
                .execute(
                    "UPDATE terminus_executions SET held = $3,
                            suspended_ms = coalesce(suspended_ms, $4), worker = NULL,
                            lease_until = 'epoch'
                     WHERE id = $1 AND worker = $2",
                    &[&execution, &worker, &held, &at_ms],
                )
                .await?;
            Ok::<_, Fault>(n == 1)
        })
    }

    async fn decide(&self, execution: &str, entry: RawEntry, at_ms: i64) -> Result<Decided, Fault> {
        let (cp, idx) = (
            i64::from(entry.checkpoint),
            i32::try_from(entry.index).unwrap_or(i32::MAX),
        );
        retrying!(self, c => async {
            let tx = c.transaction().await?;
            // The row locked: concurrent decisions on one execution count down one at a time.
            let Some(row) = tx
                .query_opt(
                    "SELECT held FROM terminus_executions WHERE id = $1 FOR UPDATE",
                    &[&execution],
                )
                .await?
            else {
                return Ok(Decided::Missing);
            };
            let held: i32 = col(&row, 0)?;
            let stored = tx
                .query_opt(
                    "SELECT body FROM terminus_entries
                     WHERE execution = $1 AND checkpoint = $2 AND idx = $3",
                    &[&execution, &cp, &idx],
                )
                .await?;
            if let Some(stored) = stored {
                return Ok(Decided::Stored(col(&stored, 0)?));
            }
            if held <= 0 {
                return Ok(Decided::NotSuspended);
            }
            tx.execute(
                "INSERT INTO terminus_entries (execution, checkpoint, idx, kind, body)
                 VALUES ($1, $2, $3, $4, $5)",
                &[&execution, &cp, &idx, &entry.kind, &entry.body],
            )
            .await?;
            tx.execute(
                "UPDATE terminus_executions SET held = held - 1,
                   paused_ms = paused_ms + CASE WHEN held = 1
                     THEN greatest(0, $2 - coalesce(suspended_ms, $2)) ELSE 0 END
                 WHERE id = $1",
                &[&execution, &at_ms],
            )
            .await?;
            tx.commit().await?;
            Ok::<_, Fault>(Decided::Written)
        })
    }

    async fn reopen(&self, execution: &str, entries: Vec<RawEntry>) -> Result<bool, Fault> {
        let cols = Columns::of(&entries)?;
        retrying!(self, c => async {
            let tx = c.transaction().await?;
            // The row locked: two raises of one execution, one after the other.
            let Some(row) = tx
                .query_opt(
                    "SELECT report IS NOT NULL FROM terminus_executions WHERE id = $1 FOR UPDATE",
                    &[&execution],
                )
                .await?
            else {
                return Ok(false);
            };
            let ended: bool = col(&row, 0)?;
            if !ended {
                return Ok(false);
            }
            let written = tx
                .query(
                    INSERT,
                    &[
                        &execution,
                        &cols.checkpoints,
                        &cols.indexes,
                        &cols.kinds,
                        &cols.bodies,
                    ],
                )
                .await?;
            if written.len() != entries.len() {
                // A key was stored: dropping the transaction rolls it back.
                return Ok(false);
            }
            tx.execute(
                "UPDATE terminus_executions SET status = 'running', report = NULL WHERE id = $1",
                &[&execution],
            )
            .await?;
            tx.commit().await?;
            Ok::<_, Fault>(true)
        })
    }

    async fn fail(&self, execution: &str, worker: &str, failure: String) -> Result<bool, Fault> {
        retrying!(self, c => async {
            let n = c
                .execute(
                    "UPDATE terminus_executions SET status = 'failed', failure = $3, worker = NULL,
                            lease_until = 'epoch'
                     WHERE id = $1 AND worker = $2 AND status != 'done'",
                    &[&execution, &worker, &failure],
                )
                .await?;
            Ok::<_, Fault>(n == 1)
        })
    }

    async fn executions(&self, filter: &ListFilter) -> Result<Vec<ListedRow>, Fault> {
        retrying!(self, c => async {
            let rows = c
                .query(LIST, &[&filter.outcome, &filter.reason, &filter.min_steps])
                .await?;
            rows.iter()
                .map(|r| {
                    Ok(ListedRow {
                        id: col(r, 0)?,
                        name: col(r, 1)?,
                        live: col(r, 2)?,
                        failed: col(r, 3)?,
                        outcome: col(r, 4)?,
                        reason: col(r, 5)?,
                        rule: col(r, 6)?,
                        steps: col(r, 7)?,
                        model_calls: col(r, 8)?,
                        tool_calls: col(r, 9)?,
                        entries: col(r, 10)?,
                        suspended: col(r, 11)?,
                        decided: col(r, 12)?,
                    })
                })
                .collect::<Result<Vec<_>, Fault>>()
        })
    }

    async fn cell(&self, key: &str) -> Result<Option<(u64, String)>, Fault> {
        retrying!(self, c => async {
            let row = c
                .query_opt("SELECT version, body FROM terminus_cells WHERE key = $1", &[&key])
                .await?;
            match row {
                Some(row) => Ok::<_, Fault>(Some((
                    unsigned(col(&row, 0)?, "a cell's version")?,
                    col::<String>(&row, 1)?,
                ))),
                None => Ok(None),
            }
        })
    }

    async fn put_cell(
        &self,
        key: &str,
        expected: Option<u64>,
        body: String,
    ) -> Result<Option<u64>, Fault> {
        let version = expected.map(|v| i64::try_from(v).unwrap_or(i64::MAX));
        retrying!(self, c => async {
            let n = match version {
                None => {
                    c.execute(
                        "INSERT INTO terminus_cells (key, version, body) VALUES ($1, 1, $2)
                         ON CONFLICT (key) DO NOTHING",
                        &[&key, &body],
                    )
                    .await?
                }
                Some(v) => {
                    c.execute(
                        "UPDATE terminus_cells SET version = version + 1, body = $3
                         WHERE key = $1 AND version = $2",
                        &[&key, &v, &body],
                    )
                    .await?
                }
            };
            Ok::<_, Fault>((n == 1).then(|| expected.map_or(1, |v| v + 1)))
        })
    }
}

/// The URL without its password, for messages.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let creds = &url[s + 3..at];
            match creds.split_once(':') {
                Some((user, _)) => format!("{}{}:***{}", &url[..s + 3], user, &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}
