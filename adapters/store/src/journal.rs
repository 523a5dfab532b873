//! The runtime's journal port ([`terminus_runtime::Store`]) on the durable stores: records are
//! kept as JSON under their `cp{n}:e{i}` key, the [`RunSpec`] and the [`Report`] as JSON in the
//! execution's row. [`open`] picks the store from a `--journal` argument.

use crate::{Durability, PostgresStore, RawEntry, SqliteStore, StoreError as RawError};
use async_trait::async_trait;
use std::sync::Arc;
use std::time::Duration;
use terminus_kernel::{Entry, Key, Record};
use terminus_runtime::{Appended, Failure, Lease, Report, RunSpec, Store, StoreError};

fn convert(e: RawError) -> StoreError {
    match e {
        RawError::Claimed { execution, worker } => StoreError::Claimed { execution, worker },
        RawError::LeaseLost { execution } => StoreError::LeaseLost { execution },
        RawError::NotFound(execution) => StoreError::NotFound(execution),
        RawError::Backend(message) => StoreError::Backend(message),
        RawError::Corrupt(message) => StoreError::Corrupt(message),
    }
}

fn raw(record: &Record) -> Result<RawEntry, StoreError> {
    let body = serde_json::to_string(&record.entry)
        .map_err(|e| StoreError::Backend(format!("cannot encode {}: {e}", record.key)))?;
    Ok(RawEntry {
        checkpoint: u64::from(record.key.checkpoint),
        index: record.key.index,
        kind: record.entry.kind().to_owned(),
        body,
    })
}

fn key_of(checkpoint: u64, index: u32) -> Result<Key, StoreError> {
    let checkpoint = u32::try_from(checkpoint)
        .map_err(|_| StoreError::Corrupt(format!("checkpoint {checkpoint} out of range")))?;
    Ok(Key::new(checkpoint, index))
}

fn record(e: RawEntry) -> Result<Arc<Record>, StoreError> {
    let key = key_of(e.checkpoint, e.index)?;
    let entry: Entry = serde_json::from_str(&e.body)
        .map_err(|err| StoreError::Corrupt(format!("entry {key}: {err}")))?;
    Ok(Arc::new(Record { key, entry }))
}

fn appended(record: &Arc<Record>, stored: crate::RawAppended) -> Result<Appended, StoreError> {
    if !stored.already_existed {
        return Ok(Appended {
            record: Arc::clone(record),
            already_existed: false,
        });
    }
    let entry: Entry = serde_json::from_str(&stored.body)
        .map_err(|err| StoreError::Corrupt(format!("entry {}: {err}", record.key)))?;
    Ok(Appended {
        record: Arc::new(Record {
            key: record.key,
            entry,
        }),
        already_existed: true,
    })
}

/// The rows for `records`, in order.
fn encode(records: &[Arc<Record>]) -> Result<Vec<RawEntry>, StoreError> {
    records.iter().map(|r| raw(r)).collect()
}

/// What the store answered for each of `records`.
fn decode(
    records: &[Arc<Record>],
    stored: Vec<crate::RawAppended>,
) -> Result<Vec<Appended>, StoreError> {
    if stored.len() != records.len() {
        return Err(StoreError::Backend(
            "the store answered a different number of appends".into(),
        ));
    }
    records
        .iter()
        .zip(stored)
        .map(|(r, s)| appended(r, s))
        .collect()
}

/// The one answer of a single-record `append_all`.
fn single(mut out: Vec<Appended>) -> Result<Appended, StoreError> {
    out.pop()
        .ok_or_else(|| StoreError::Backend("the store answered no append".into()))
}

fn spec_json(spec: &RunSpec) -> Result<String, StoreError> {
    serde_json::to_string(spec).map_err(|e| StoreError::Backend(format!("cannot encode spec: {e}")))
}

fn parse_spec(execution: &str, text: Option<String>) -> Result<Option<RunSpec>, StoreError> {
    text.map(|t| {
        serde_json::from_str(&t)
            .map_err(|e| StoreError::Corrupt(format!("the spec of `{execution}`: {e}")))
    })
    .transpose()
}

fn parse_report(execution: &str, text: Option<String>) -> Result<Option<Report>, StoreError> {
    text.map(|t| {
        serde_json::from_str(&t)
            .map_err(|e| StoreError::Corrupt(format!("the report of `{execution}`: {e}")))
    })
    .transpose()
}

fn failure_json(failure: &Failure) -> Result<String, StoreError> {
    serde_json::to_string(failure)
        .map_err(|e| StoreError::Backend(format!("cannot encode the failure: {e}")))
}

fn parse_failure(execution: &str, text: Option<String>) -> Result<Option<Failure>, StoreError> {
    text.map(|t| {
        serde_json::from_str(&t)
            .map_err(|e| StoreError::Corrupt(format!("the failure of `{execution}`: {e}")))
    })
    .transpose()
}

fn after(key: Option<Key>) -> Option<(u64, u32)> {
    key.map(|k| (u64::from(k.checkpoint), k.index))
}

fn limit(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn lease(execution: &str, worker: &str, duration: Duration) -> Lease {
    Lease {
        execution: execution.to_owned(),
        worker: worker.to_owned(),
        duration,
    }
}

#[async_trait]
impl Store for SqliteStore {
    async fn create(&self, execution: &str, spec: &RunSpec) -> Result<bool, StoreError> {
        SqliteStore::create(self, execution, Some(&spec_json(spec)?)).map_err(convert)
    }

    async fn spec(&self, execution: &str) -> Result<Option<RunSpec>, StoreError> {
        let row = self.execution(execution).map_err(convert)?;
        parse_spec(execution, row.and_then(|r| r.spec))
    }

    async fn append(&self, execution: &str, record: Arc<Record>) -> Result<Appended, StoreError> {
        single(self.append_all(execution, vec![record]).await?)
    }

    async fn append_all(
        &self,
        execution: &str,
        records: Vec<Arc<Record>>,
    ) -> Result<Vec<Appended>, StoreError> {
        let stored = SqliteStore::append(self, execution, &encode(&records)?).map_err(convert)?;
        decode(&records, stored)
    }

    async fn page(
        &self,
        execution: &str,
        after_key: Option<Key>,
        n: usize,
    ) -> Result<Vec<Arc<Record>>, StoreError> {
        SqliteStore::page(self, execution, after(after_key), limit(n))
            .map_err(convert)?
            .into_iter()
            .map(record)
            .collect()
    }

    async fn count(&self, execution: &str) -> Result<u64, StoreError> {
        SqliteStore::count(self, execution).map_err(convert)
    }

    async fn finish(&self, execution: &str, report: &Report) -> Result<(), StoreError> {
        SqliteStore::finish(self, execution, &report.to_json_line()).map_err(convert)
    }

    async fn report(&self, execution: &str) -> Result<Option<Report>, StoreError> {
        let row = self.execution(execution).map_err(convert)?;
        parse_report(execution, row.and_then(|r| r.report))
    }

    async fn claim(
        &self,
        execution: &str,
        worker: &str,
        duration: Duration,
    ) -> Result<Lease, StoreError> {
        SqliteStore::claim(self, execution, worker, duration).map_err(convert)?;
        Ok(lease(execution, worker, duration))
    }

    async fn renew(&self, l: &Lease) -> Result<(), StoreError> {
        SqliteStore::renew(self, &l.execution, &l.worker, l.duration).map_err(convert)
    }

    async fn release(&self, l: &Lease) -> Result<(), StoreError> {
        SqliteStore::release(self, &l.execution, &l.worker).map_err(convert)
    }

    async fn fail(&self, l: &Lease, failure: &Failure) -> Result<(), StoreError> {
        SqliteStore::fail(self, &l.execution, &l.worker, &failure_json(failure)?).map_err(convert)
    }

    async fn failure(&self, execution: &str) -> Result<Option<Failure>, StoreError> {
        let row = self.execution(execution).map_err(convert)?;
        parse_failure(execution, row.and_then(|r| r.failure))
    }

    async fn claim_next(
        &self,
        worker: &str,
        duration: Duration,
    ) -> Result<Option<Lease>, StoreError> {
        let id = SqliteStore::claim_next(self, worker, duration).map_err(convert)?;
        Ok(id.map(|id| lease(&id, worker, duration)))
    }
}

#[async_trait]
impl Store for PostgresStore {
    async fn create(&self, execution: &str, spec: &RunSpec) -> Result<bool, StoreError> {
        PostgresStore::create(self, execution, Some(&spec_json(spec)?), false)
            .await
            .map_err(convert)
    }

    async fn spec(&self, execution: &str) -> Result<Option<RunSpec>, StoreError> {
        let row = self.execution(execution).await.map_err(convert)?;
        parse_spec(execution, row.and_then(|r| r.spec))
    }

    async fn append(&self, execution: &str, record: Arc<Record>) -> Result<Appended, StoreError> {
        single(self.append_all(execution, vec![record]).await?)
    }

    async fn append_all(
        &self,
        execution: &str,
        records: Vec<Arc<Record>>,
    ) -> Result<Vec<Appended>, StoreError> {
        let stored = PostgresStore::append(self, execution, &encode(&records)?)
            .await
            .map_err(convert)?;
        decode(&records, stored)
    }

    async fn page(
        &self,
        execution: &str,
        after_key: Option<Key>,
        n: usize,
    ) -> Result<Vec<Arc<Record>>, StoreError> {
        PostgresStore::page(self, execution, after(after_key), limit(n))
            .await
            .map_err(convert)?
            .into_iter()
            .map(record)
            .collect()
    }

    async fn count(&self, execution: &str) -> Result<u64, StoreError> {
        PostgresStore::count(self, execution).await.map_err(convert)
    }

    async fn finish(&self, execution: &str, report: &Report) -> Result<(), StoreError> {
        PostgresStore::finish(self, execution, &report.to_json_line())
            .await
            .map_err(convert)
    }

    async fn report(&self, execution: &str) -> Result<Option<Report>, StoreError> {
        let row = self.execution(execution).await.map_err(convert)?;
        parse_report(execution, row.and_then(|r| r.report))
    }

    async fn claim(
        &self,
        execution: &str,
        worker: &str,
        duration: Duration,
    ) -> Result<Lease, StoreError> {
        PostgresStore::claim(self, execution, worker, duration)
            .await
            .map_err(convert)?;
        Ok(lease(execution, worker, duration))
    }

    async fn renew(&self, l: &Lease) -> Result<(), StoreError> {
        PostgresStore::renew(self, &l.execution, &l.worker, l.duration)
            .await
            .map_err(convert)
    }

    async fn release(&self, l: &Lease) -> Result<(), StoreError> {
        PostgresStore::release(self, &l.execution, &l.worker)
            .await
            .map_err(convert)
    }

    async fn fail(&self, l: &Lease, failure: &Failure) -> Result<(), StoreError> {
        PostgresStore::fail(self, &l.execution, &l.worker, &failure_json(failure)?)
            .await
            .map_err(convert)
    }

    async fn failure(&self, execution: &str) -> Result<Option<Failure>, StoreError> {
        let row = self.execution(execution).await.map_err(convert)?;
        parse_failure(execution, row.and_then(|r| r.failure))
    }

    async fn claim_next(
        &self,
        worker: &str,
        duration: Duration,
    ) -> Result<Option<Lease>, StoreError> {
        let id = PostgresStore::claim_next(self, worker, duration)
            .await
            .map_err(convert)?;
        Ok(id.map(|id| lease(&id, worker, duration)))
    }
}

/// Opens the journal a `--journal` argument names: a `postgres://` (or `postgresql://`) URL is a
/// [`PostgresStore`]; anything else is the path of a SQLite file, created if missing.
pub async fn open(target: &str, durability: Durability) -> Result<Arc<dyn Store>, StoreError> {
    if target.starts_with("postgres://") || target.starts_with("postgresql://") {
        let store = PostgresStore::connect(target).await.map_err(convert)?;
        return Ok(Arc::new(store));
    }
    let store = SqliteStore::open(target, durability).map_err(convert)?;
    Ok(Arc::new(store))
}
