//! The PostgreSQL store (tokio-postgres). Lease times use the server's clock (`now()`), so
//! workers on machines with skewed clocks agree on who holds a claim.

use crate::{ExecutionRow, RawAppended, RawEntry, StoreError};
use std::time::Duration;
use tokio::sync::Mutex;
use tokio_postgres::{Client, NoTls};

const MIGRATIONS: &[&str] = &[
    include_str!("../migrations/postgres_001_init.sql"),
    include_str!("../migrations/postgres_002_failure.sql"),
];

/// A journal in a PostgreSQL database, shared by many workers.
#[derive(Debug)]
pub struct PostgresStore {
    client: Mutex<Client>,
}

fn backend(e: tokio_postgres::Error) -> StoreError {
    StoreError::Backend(e.to_string())
}

/// Column `i` of `row` as `T`; a column of another type (a schema this build did not write) is
/// `Corrupt`, naming the column, never a panic (`Row::get` panics on a mismatch).
fn col<'a, T: tokio_postgres::types::FromSql<'a>>(
    row: &'a tokio_postgres::Row,
    i: usize,
) -> Result<T, StoreError> {
    row.try_get(i).map_err(|e| {
        let name = row.columns().get(i).map_or("?", |c| c.name());
        StoreError::Corrupt(format!("column `{name}`: {e}"))
    })
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

impl PostgresStore {
    /// Connects to `url` (e.g. `postgres://postgres@127.0.0.1:5432/test`) and migrates the schema.
    pub async fn connect(url: &str) -> Result<PostgresStore, StoreError> {
        let (client, connection) = tokio_postgres::connect(url, NoTls)
            .await
            .map_err(|e| StoreError::Backend(format!("cannot connect to {}: {e}", redact(url))))?;
        tokio::spawn(async move {
            // The connection ends when the client is dropped or the server goes away; queries
            // then fail with a backend error, which is how the run learns of it.
            let _ = connection.await;
        });
        let store = PostgresStore {
            client: Mutex::new(client),
        };
        store.migrate().await?;
        Ok(store)
    }

    async fn migrate(&self) -> Result<(), StoreError> {
        let mut client = self.client.lock().await;
        let tx = client.transaction().await.map_err(backend)?;
        // One migrator at a time across workers.
        tx.execute("SELECT pg_advisory_xact_lock(7265746)", &[])
            .await
            .map_err(backend)?;
        tx.batch_execute("CREATE TABLE IF NOT EXISTS terminus_schema (version INTEGER NOT NULL)")
            .await
            .map_err(backend)?;
        let row = tx
            .query_opt("SELECT version FROM terminus_schema", &[])
            .await
            .map_err(backend)?;
        let version = match row {
            Some(r) => usize::try_from(col::<i32>(&r, 0)?).unwrap_or(0),
            None => {
                tx.execute("INSERT INTO terminus_schema (version) VALUES (0)", &[])
                    .await
                    .map_err(backend)?;
                0
            }
        };
        if version > MIGRATIONS.len() {
            return Err(StoreError::Corrupt(format!(
                "schema version {version} is newer than this build knows"
            )));
        }
        for (i, sql) in MIGRATIONS.iter().enumerate().skip(version) {
            tx.batch_execute(sql).await.map_err(backend)?;
            let v = i32::try_from(i + 1).unwrap_or(i32::MAX);
            tx.execute("UPDATE terminus_schema SET version = $1", &[&v])
                .await
                .map_err(backend)?;
        }
        tx.commit().await.map_err(backend)
    }

    /// The schema version.
    pub async fn schema_version(&self) -> Result<u32, StoreError> {
        let client = self.client.lock().await;
        let row = client
            .query_one("SELECT version FROM terminus_schema", &[])
            .await
            .map_err(backend)?;
        Ok(u32::try_from(col::<i32>(&row, 0)?).unwrap_or(0))
    }

    /// Creates the execution with its spec (status `pending` when `runnable_by_workers`, else
    /// `running`); returns false if it exists.
    pub async fn create(
        &self,
        execution: &str,
        spec: Option<&str>,
        runnable_by_workers: bool,
    ) -> Result<bool, StoreError> {
        let status = if runnable_by_workers {
            "pending"
        } else {
            "running"
        };
        let client = self.client.lock().await;
        let n = client
            .execute(
                "INSERT INTO terminus_executions (id, spec, status) VALUES ($1, $2, $3) ON CONFLICT (id) DO NOTHING",
                &[&execution, &spec, &status],
            )
            .await
            .map_err(backend)?;
        Ok(n == 1)
    }

    /// The execution's row.
    pub async fn execution(&self, execution: &str) -> Result<Option<ExecutionRow>, StoreError> {
        let client = self.client.lock().await;
        let row = client
            .query_opt(
                "SELECT id, status, worker, (extract(epoch FROM lease_until) * 1000)::bigint, spec, report,
                        failure FROM terminus_executions WHERE id = $1",
                &[&execution],
            )
            .await
            .map_err(backend)?;
        row.map(|r| {
            Ok(ExecutionRow {
                id: col(&r, 0)?,
                status: col(&r, 1)?,
                worker: col(&r, 2)?,
                lease_until_ms: col(&r, 3)?,
                spec: col(&r, 4)?,
                report: col(&r, 5)?,
                failure: col(&r, 6)?,
            })
        })
        .transpose()
    }

    /// One atomic compare-and-set: takes the claim if free, ours, or expired (server clock).
    pub async fn claim(
        &self,
        execution: &str,
        worker: &str,
        lease: Duration,
    ) -> Result<(), StoreError> {
        let client = self.client.lock().await;
        let n = client
            .execute(
                "UPDATE terminus_executions
                 SET worker = $2, lease_until = now() + make_interval(secs => $3::float8 / 1000.0),
                     status = CASE WHEN status IN ('done', 'failed') THEN status ELSE 'running' END
                 WHERE id = $1 AND (worker IS NULL OR worker = $2 OR lease_until < now())",
                &[&execution, &worker, &ms(lease)],
            )
            .await
            .map_err(backend)?;
        if n == 1 {
            return Ok(());
        }
        let row = client
            .query_opt(
                "SELECT worker FROM terminus_executions WHERE id = $1",
                &[&execution],
            )
            .await
            .map_err(backend)?;
        match row {
            None => Err(StoreError::NotFound(execution.to_owned())),
            Some(r) => Err(StoreError::Claimed {
                execution: execution.to_owned(),
                worker: col::<Option<String>>(&r, 0)?.unwrap_or_default(),
            }),
        }
    }

    /// Takes one runnable execution (pending, or running with an expired lease) for `worker`,
    /// skipping rows other workers are taking at the same moment.
    pub async fn claim_next(
        &self,
        worker: &str,
        lease: Duration,
    ) -> Result<Option<String>, StoreError> {
        let mut client = self.client.lock().await;
        let tx = client.transaction().await.map_err(backend)?;
        let row = tx
            .query_opt(
                "SELECT id FROM terminus_executions
                 WHERE status = 'pending' OR (status = 'running' AND lease_until < now())
                 ORDER BY created LIMIT 1 FOR UPDATE SKIP LOCKED",
                &[],
            )
            .await
            .map_err(backend)?;
        let Some(row) = row else {
            tx.commit().await.map_err(backend)?;
            return Ok(None);
        };
        let id: String = col(&row, 0)?;
        tx.execute(
            "UPDATE terminus_executions SET worker = $2, status = 'running',
                    lease_until = now() + make_interval(secs => $3::float8 / 1000.0) WHERE id = $1",
            &[&id, &worker, &ms(lease)],
        )
        .await
        .map_err(backend)?;
        tx.commit().await.map_err(backend)?;
        Ok(Some(id))
    }

    /// Extends our claim; `LeaseLost` if another worker took it.
    pub async fn renew(
        &self,
        execution: &str,
        worker: &str,
        lease: Duration,
    ) -> Result<(), StoreError> {
        let client = self.client.lock().await;
        let n = client
            .execute(
                "UPDATE terminus_executions SET lease_until = now() + make_interval(secs => $3::float8 / 1000.0)
                 WHERE id = $1 AND worker = $2",
                &[&execution, &worker, &ms(lease)],
            )
            .await
            .map_err(backend)?;
        StoreError::unless_held(n, execution)
    }

    /// Gives the claim up (if we still hold it).
    pub async fn release(&self, execution: &str, worker: &str) -> Result<(), StoreError> {
        let client = self.client.lock().await;
        client
            .execute(
                "UPDATE terminus_executions SET worker = NULL, lease_until = 'epoch' WHERE id = $1 AND worker = $2",
                &[&execution, &worker],
            )
            .await
            .map_err(backend)?;
        Ok(())
    }

    /// Marks the execution failed with `failure` (JSON) and frees the claim, if `worker` still
    /// holds it; `LeaseLost` otherwise.
    pub async fn fail(
        &self,
        execution: &str,
        worker: &str,
        failure: &str,
    ) -> Result<(), StoreError> {
        let client = self.client.lock().await;
        let n = client
            .execute(
                "UPDATE terminus_executions SET status = 'failed', failure = $3, worker = NULL,
                        lease_until = 'epoch' WHERE id = $1 AND worker = $2 AND status != 'done'",
                &[&execution, &worker, &failure],
            )
            .await
            .map_err(backend)?;
        StoreError::unless_held(n, execution)
    }

    /// Marks the execution done with its report.
    pub async fn finish(&self, execution: &str, report: &str) -> Result<(), StoreError> {
        let client = self.client.lock().await;
        client
            .execute(
                "UPDATE terminus_executions SET status = 'done', report = $2 WHERE id = $1",
                &[&execution, &report],
            )
            .await
            .map_err(backend)?;
        Ok(())
    }

    /// Appends entries in one transaction; an existing key returns the stored body.
    pub async fn append(
        &self,
        execution: &str,
        entries: &[RawEntry],
    ) -> Result<Vec<RawAppended>, StoreError> {
        let mut client = self.client.lock().await;
        let tx = client.transaction().await.map_err(backend)?;
        let insert = tx
            .prepare(
                "INSERT INTO terminus_entries (execution, checkpoint, idx, kind, body) VALUES ($1, $2, $3, $4, $5)
                 ON CONFLICT DO NOTHING",
            )
            .await
            .map_err(backend)?;
        let mut out = Vec::with_capacity(entries.len());
        for e in entries {
            let cp = i64::try_from(e.checkpoint)
                .map_err(|_| StoreError::Corrupt("checkpoint too large".into()))?;
            let idx = i32::try_from(e.index)
                .map_err(|_| StoreError::Corrupt("index too large".into()))?;
            let n = tx
                .execute(&insert, &[&execution, &cp, &idx, &e.kind, &e.body])
                .await
                .map_err(backend)?;
            if n == 1 {
                out.push(RawAppended {
                    already_existed: false,
                    body: e.body.clone(),
                });
            } else {
                let row = tx
                    .query_one(
                        "SELECT body FROM terminus_entries WHERE execution = $1 AND checkpoint = $2 AND idx = $3",
                        &[&execution, &cp, &idx],
                    )
                    .await
                    .map_err(backend)?;
                out.push(RawAppended {
                    already_existed: true,
                    body: col(&row, 0)?,
                });
            }
        }
        tx.commit().await.map_err(backend)?;
        Ok(out)
    }

    /// Up to `limit` entries after `after` (exclusive), in key order.
    pub async fn page(
        &self,
        execution: &str,
        after: Option<(u64, u32)>,
        limit: u32,
    ) -> Result<Vec<RawEntry>, StoreError> {
        let (cp, idx) = match after {
            Some((cp, idx)) => (i64::try_from(cp).unwrap_or(i64::MAX), i64::from(idx)),
            None => (-1, -1),
        };
        let client = self.client.lock().await;
        let rows = client
            .query(
                "SELECT checkpoint, idx, kind, body FROM terminus_entries
                 WHERE execution = $1 AND (checkpoint, idx) > ($2::bigint, $3::int)
                 ORDER BY checkpoint, idx LIMIT $4",
                &[
                    &execution,
                    &cp,
                    &i32::try_from(idx).unwrap_or(i32::MAX),
                    &i64::from(limit),
                ],
            )
            .await
            .map_err(backend)?;
        rows.iter()
            .map(|r| {
                Ok(RawEntry {
                    checkpoint: u64::try_from(col::<i64>(r, 0)?).unwrap_or(0),
                    index: u32::try_from(col::<i32>(r, 1)?).unwrap_or(0),
                    kind: col(r, 2)?,
                    body: col(r, 3)?,
                })
            })
            .collect()
    }

    /// Entries stored for the execution.
    pub async fn count(&self, execution: &str) -> Result<u64, StoreError> {
        let client = self.client.lock().await;
        let row = client
            .query_one(
                "SELECT count(*) FROM terminus_entries WHERE execution = $1",
                &[&execution],
            )
            .await
            .map_err(backend)?;
        Ok(u64::try_from(col::<i64>(&row, 0)?).unwrap_or(0))
    }

    /// Deletes an execution and its entries (tests use this to start clean).
    pub async fn delete(&self, execution: &str) -> Result<(), StoreError> {
        let client = self.client.lock().await;
        client
            .execute(
                "DELETE FROM terminus_executions WHERE id = $1",
                &[&execution],
            )
            .await
            .map_err(backend)?;
        Ok(())
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
