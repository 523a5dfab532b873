//! The runtime's store traits ([`Journal`], [`Claims`], [`Queue`]) written once over any
//! [`Backend`]: records are kept as JSON under their `cp{n}:e{i}` key, the [`RunSpec`], the
//! [`Report`] and the [`Failure`] as JSON in the execution's row, and every failure names the
//! journal and what was being done.

use crate::backend::{
    Backend, Claimed, Decided, ExecutionRow, Fault, ListFilter, ListedRow, RawEntry,
};
use async_trait::async_trait;
use serde::de::DeserializeOwned;
use std::sync::Arc;
use std::time::Duration;
use terminus_kernel::{Entry, Key, Outcome, Record, Rule, StepRecord};
use terminus_runtime::{
    Appended, Cause, Cell, Cells, Claims, ExecutionFilter, ExecutionStatus, ExecutionSummary,
    Failure, Journal, Lease, Queue, Report, RunSpec, StoreError, Suspension,
};

/// A journal store on a database [`Backend`]: [`crate::SqliteStore`] and
/// [`crate::PostgresStore`] are this type on their backends.
#[derive(Debug)]
pub struct Durable<B> {
    pub(crate) backend: B,
}

impl<B: Backend> Durable<B> {
    /// A store on `backend`.
    pub fn new(backend: B) -> Durable<B> {
        Durable { backend }
    }

    /// The backend, for its own statements (maintenance, tests).
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// The execution's row as stored (status, claim, conflicts), for operators and tests.
    pub async fn execution(&self, execution: &str) -> Result<Option<ExecutionRow>, StoreError> {
        self.backend
            .row(execution)
            .await
            .map_err(|f| self.fault(f, || format!("read execution `{execution}`")))
    }

    /// The error for `fault`, naming the journal and `action` (what was being done).
    pub(crate) fn fault(&self, fault: Fault, action: impl FnOnce() -> String) -> StoreError {
        store_error(self.backend.name(), fault, action)
    }

    fn corrupt(&self, what: String) -> StoreError {
        StoreError::Corrupt {
            journal: self.backend.name().to_owned(),
            what,
        }
    }

    /// A value that cannot be encoded (it never happens for the runtime's own types, but a
    /// host's `serde_json::Value` is not checked).
    fn encoding(&self, what: &str, e: serde_json::Error) -> StoreError {
        StoreError::Backend {
            journal: self.backend.name().to_owned(),
            action: format!("encode {what}"),
            source: Cause::new(e),
        }
    }

    /// Column `what` of `execution`'s row, parsed.
    async fn column<T: DeserializeOwned>(
        &self,
        execution: &str,
        what: &str,
        pick: fn(ExecutionRow) -> Option<String>,
    ) -> Result<Option<T>, StoreError> {
        let Some(text) = self.execution(execution).await?.and_then(pick) else {
            return Ok(None);
        };
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| self.corrupt(format!("the {what} of execution `{execution}`: {e}")))
    }

    /// The summary of a listed row; stored words this build does not know are corrupt data.
    fn summary(&self, row: ListedRow) -> Result<ExecutionSummary, StoreError> {
        let id = row.id;
        let corrupt = |what: String| self.corrupt(format!("execution `{id}`: {what}"));
        let outcome = match (&row.outcome, &row.reason) {
            (Some(outcome), Some(reason)) => Some(
                serde_json::from_value::<Outcome>(
                    serde_json::json!({ "outcome": outcome, "reason": reason }),
                )
                .map_err(|e| corrupt(format!("outcome `{outcome}` ({reason}): {e}")))?,
            ),
            _ => None,
        };
        let rule = row
            .rule
            .map(|r| {
                serde_json::from_value::<Rule>(serde_json::Value::String(r.clone()))
                    .map_err(|e| corrupt(format!("rule `{r}`: {e}")))
            })
            .transpose()?;
        let count = |n: i64, what: &str| {
            u32::try_from(n).map_err(|_| corrupt(format!("{what} out of range ({n})")))
        };
        let status = if row.failed {
            ExecutionStatus::Failed
        } else if outcome.is_some() {
            ExecutionStatus::Ended
        } else if row.live {
            ExecutionStatus::Running
        } else if row.suspended {
            ExecutionStatus::Suspended
        } else if row.entries == 0 || row.decided {
            ExecutionStatus::Waiting
        } else {
            ExecutionStatus::Interrupted
        };
        Ok(ExecutionSummary {
            name: row.name,
            status,
            outcome,
            rule,
            steps: count(row.steps, "steps")?,
            model_calls: count(row.model_calls, "model calls")?,
            tool_calls: count(row.tool_calls, "tool calls")?,
            entries: u64::try_from(row.entries)
                .map_err(|_| corrupt(format!("entries out of range ({})", row.entries)))?,
            execution: id.clone(),
        })
    }

    /// The transitions of `execution`, in order, read from its journal page by page; there
    /// must be `steps` of them.
    async fn trace(&self, execution: &str, steps: u32) -> Result<Vec<StepRecord>, StoreError> {
        const PAGE: u32 = 4096;
        let mut trace = Vec::with_capacity(usize::try_from(steps).unwrap_or(0));
        let mut after = None;
        loop {
            let rows = self
                .backend
                .page(execution, Some("transition"), after, PAGE)
                .await
                .map_err(|f| self.fault(f, || format!("read the trace of `{execution}`")))?;
            let full = rows.len() >= PAGE as usize;
            for (checkpoint, index, body) in rows {
                let key = Key::new(checkpoint, index);
                after = Some((checkpoint, index));
                match serde_json::from_str::<Entry>(&body) {
                    Ok(Entry::Transition(step)) => trace.push(step),
                    Ok(other) => {
                        return Err(self.corrupt(format!(
                            "entry {key} of `{execution}` is stored as a transition but holds \
                             a {} entry",
                            other.kind()
                        )));
                    }
                    Err(e) => {
                        return Err(self.corrupt(format!("entry {key} of `{execution}`: {e}")));
                    }
                }
            }
            if !full {
                break;
            }
        }
        if trace.len() != usize::try_from(steps).unwrap_or(usize::MAX) {
            return Err(self.corrupt(format!(
                "the report of `{execution}` counts {steps} steps; its journal holds {} \
                 transitions",
                trace.len()
            )));
        }
        Ok(trace)
    }

    /// Inserts `execution`, claimed by `claim`'s worker when given: false if it exists.
    async fn insert(
        &self,
        execution: &str,
        spec: &RunSpec,
        claim: Option<(&str, Duration)>,
    ) -> Result<bool, StoreError> {
        let spec = serde_json::to_string(spec).map_err(|e| self.encoding("the spec", e))?;
        self.backend
            .create(execution, spec, claim)
            .await
            .map_err(|f| self.fault(f, || format!("create execution `{execution}`")))
    }

    /// Stores the report, freeing `release`'s claim in the same statement when given.
    async fn store_report(
        &self,
        execution: &str,
        report: &Report,
        release: Option<&str>,
    ) -> Result<(), StoreError> {
        // The trace is the journal's transition entries: `report` reads it back from there.
        self.backend
            .finish(execution, report.without_trace().to_json_line(), release)
            .await
            .map_err(|f| self.fault(f, || format!("store the report of `{execution}`")))
    }

    /// The stored rows of `records`.
    fn raw(&self, records: &[Arc<Record>]) -> Result<Vec<RawEntry>, StoreError> {
        records
            .iter()
            .map(|r| {
                let body = serde_json::to_string(&r.entry)
                    .map_err(|e| self.encoding(&format!("entry {}", r.key), e))?;
                Ok(RawEntry {
                    checkpoint: r.key.checkpoint,
                    index: r.key.index,
                    kind: r.entry.kind(),
                    body,
                })
            })
            .collect()
    }

    /// An append that found `key` stored with `body`.
    fn found(&self, key: Key, body: &str) -> Result<Appended, StoreError> {
        let entry: Entry =
            serde_json::from_str(body).map_err(|e| self.corrupt(format!("entry {key}: {e}")))?;
        Ok(Appended {
            record: Arc::new(Record { key, entry }),
            already_existed: true,
        })
    }

    fn held(&self, held: bool, execution: &str) -> Result<(), StoreError> {
        if held {
            Ok(())
        } else {
            Err(StoreError::LeaseLost {
                execution: execution.to_owned(),
            })
        }
    }
}

/// The error for `fault` of `journal`, naming what was being done (`action`).
pub(crate) fn store_error(
    journal: &str,
    fault: Fault,
    action: impl FnOnce() -> String,
) -> StoreError {
    match fault {
        Fault::Db(source) => StoreError::Backend {
            journal: journal.to_owned(),
            action: action(),
            source,
        },
        Fault::Corrupt(what) => StoreError::Corrupt {
            journal: journal.to_owned(),
            what,
        },
    }
}

fn lease(execution: &str, worker: &str, duration: Duration) -> Lease {
    Lease {
        execution: execution.to_owned(),
        worker: worker.to_owned(),
        duration,
    }
}

#[async_trait]
impl<B: Backend> Journal for Durable<B> {
    async fn create(&self, execution: &str, spec: &RunSpec) -> Result<bool, StoreError> {
        self.insert(execution, spec, None).await
    }

    async fn spec(&self, execution: &str) -> Result<Option<RunSpec>, StoreError> {
        self.column(execution, "spec", |r| r.spec).await
    }

    async fn append(&self, execution: &str, record: Arc<Record>) -> Result<Appended, StoreError> {
        let mut out = self.append_all(execution, vec![record]).await?;
        out.pop()
            .ok_or_else(|| self.corrupt("an append was answered with nothing".into()))
    }

    async fn append_all(
        &self,
        execution: &str,
        records: Vec<Arc<Record>>,
    ) -> Result<Vec<Appended>, StoreError> {
        let rows = self.raw(&records)?;
        let first = records.first().map(|r| r.key);
        let stored = self.backend.append(execution, rows).await.map_err(|f| {
            self.fault(f, || match first {
                Some(key) => format!("append {key}.. to execution `{execution}`"),
                None => format!("append to execution `{execution}`"),
            })
        })?;
        if stored.len() != records.len() {
            return Err(self.corrupt(format!(
                "{} appends were answered with {} results",
                records.len(),
                stored.len()
            )));
        }
        records
            .into_iter()
            .zip(stored)
            .map(|(record, stored)| match stored {
                None => Ok(Appended {
                    record,
                    already_existed: false,
                }),
                Some(body) => self.found(record.key, &body),
            })
            .collect()
    }

    async fn page(
        &self,
        execution: &str,
        after: Option<Key>,
        limit: usize,
    ) -> Result<Vec<Arc<Record>>, StoreError> {
        let rows = self
            .backend
            .page(
                execution,
                None,
                after.map(|k| (k.checkpoint, k.index)),
                u32::try_from(limit).unwrap_or(u32::MAX),
            )
            .await
            .map_err(|f| self.fault(f, || format!("read the journal of `{execution}`")))?;
        rows.into_iter()
            .map(|(checkpoint, index, body)| {
                let key = Key::new(checkpoint, index);
                let entry: Entry = serde_json::from_str(&body)
                    .map_err(|e| self.corrupt(format!("entry {key} of `{execution}`: {e}")))?;
                Ok(Arc::new(Record { key, entry }))
            })
            .collect()
    }

    async fn count(&self, execution: &str) -> Result<u64, StoreError> {
        self.backend
            .count(execution)
            .await
            .map_err(|f| self.fault(f, || format!("count the entries of `{execution}`")))
    }

    async fn finish(&self, execution: &str, report: &Report) -> Result<(), StoreError> {
        self.store_report(execution, report, None).await
    }

    async fn report(&self, execution: &str) -> Result<Option<Report>, StoreError> {
        let Some(mut report) = self
            .column::<Report>(execution, "report", |r| r.report)
            .await?
        else {
            return Ok(None);
        };
        // Reports stored before the trace was left out keep theirs.
        if report.trace.is_empty() && report.steps > 0 {
            report.trace = self.trace(execution, report.steps).await?;
        }
        Ok(Some(report))
    }

    async fn reopen(&self, execution: &str, records: Vec<Arc<Record>>) -> Result<bool, StoreError> {
        let rows = self.raw(&records)?;
        self.backend
            .reopen(execution, rows)
            .await
            .map_err(|f| self.fault(f, || format!("reopen execution `{execution}` for a raise")))
    }

    async fn decide(
        &self,
        execution: &str,
        record: Arc<Record>,
        at_unix_ms: u64,
    ) -> Result<Appended, StoreError> {
        let Some(entry) = self.raw(std::slice::from_ref(&record))?.pop() else {
            return Err(self.corrupt("a decision encoded to nothing".into()));
        };
        let at = i64::try_from(at_unix_ms).unwrap_or(i64::MAX);
        let decided = self
            .backend
            .decide(execution, entry, at)
            .await
            .map_err(|f| {
                self.fault(f, || {
                    format!("record the decision {} of `{execution}`", record.key)
                })
            })?;
        match decided {
            Decided::Written => Ok(Appended {
                record,
                already_existed: false,
            }),
            Decided::Stored(body) => self.found(record.key, &body),
            Decided::NotSuspended => Err(StoreError::NotSuspended(execution.to_owned())),
            Decided::Missing => Err(StoreError::NotFound(execution.to_owned())),
        }
    }

    async fn suspension(&self, execution: &str) -> Result<Suspension, StoreError> {
        let Some(row) = self.execution(execution).await? else {
            return Ok(Suspension::default());
        };
        Ok(Suspension {
            pending: row.held,
            since_unix_ms: row.suspended_ms.and_then(|ms| u64::try_from(ms).ok()),
            paused_ms: u64::try_from(row.paused_ms).unwrap_or(0),
        })
    }

    async fn executions(
        &self,
        filter: &ExecutionFilter,
    ) -> Result<Vec<ExecutionSummary>, StoreError> {
        let list = ListFilter {
            outcome: filter
                .complete
                .map(|c| if c { "complete" } else { "aborted" }.to_owned()),
            reason: filter.reason.map(|r| r.reason_str().to_owned()),
            min_steps: i64::from(filter.min_steps.unwrap_or(0)),
        };
        let rows = self
            .backend
            .executions(&list)
            .await
            .map_err(|f| self.fault(f, || "list the executions".to_owned()))?;
        rows.into_iter().map(|row| self.summary(row)).collect()
    }
}

#[async_trait]
impl<B: Backend> Claims for Durable<B> {
    async fn claim(
        &self,
        execution: &str,
        worker: &str,
        duration: Duration,
    ) -> Result<Lease, StoreError> {
        let claimed = self
            .backend
            .claim(execution, worker, duration)
            .await
            .map_err(|f| self.fault(f, || format!("claim execution `{execution}`")))?;
        match claimed {
            Claimed::Taken => Ok(lease(execution, worker, duration)),
            Claimed::HeldBy(holder) => Err(StoreError::Claimed {
                execution: execution.to_owned(),
                worker: holder,
            }),
            Claimed::Missing => Err(StoreError::NotFound(execution.to_owned())),
        }
    }

    async fn create_claimed(
        &self,
        execution: &str,
        spec: &RunSpec,
        worker: &str,
        duration: Duration,
    ) -> Result<Option<Lease>, StoreError> {
        let created = self
            .insert(execution, spec, Some((worker, duration)))
            .await?;
        Ok(created.then(|| lease(execution, worker, duration)))
    }

    async fn finish_released(&self, l: &Lease, report: &Report) -> Result<(), StoreError> {
        self.store_report(&l.execution, report, Some(&l.worker))
            .await
    }

    async fn finish_with_step(
        &self,
        l: &Lease,
        records: Vec<Arc<Record>>,
        report: &Report,
    ) -> Result<bool, StoreError> {
        let rows = self.raw(&records)?;
        // The trace is the journal's transition entries, as in `store_report`.
        let report = report.without_trace().to_json_line();
        self.backend
            .finish_appending(&l.execution, rows, report, &l.worker)
            .await
            .map_err(|f| {
                self.fault(f, || {
                    format!("store the last step and the report of `{}`", l.execution)
                })
            })
    }

    async fn renew(&self, l: &Lease) -> Result<(), StoreError> {
        let held = self
            .backend
            .renew(&l.execution, &l.worker, l.duration)
            .await
            .map_err(|f| self.fault(f, || format!("renew the claim on `{}`", l.execution)))?;
        self.held(held, &l.execution)
    }

    async fn release(&self, l: &Lease) -> Result<(), StoreError> {
        self.backend
            .release(&l.execution, &l.worker)
            .await
            .map_err(|f| self.fault(f, || format!("release the claim on `{}`", l.execution)))
    }

    async fn suspend(&self, l: &Lease, pending: u32, at_unix_ms: u64) -> Result<(), StoreError> {
        let at = i64::try_from(at_unix_ms).unwrap_or(i64::MAX);
        let held = self
            .backend
            .suspend(&l.execution, &l.worker, pending, at)
            .await
            .map_err(|f| self.fault(f, || format!("suspend `{}`", l.execution)))?;
        self.held(held, &l.execution)
    }

    async fn fail(&self, l: &Lease, failure: &Failure) -> Result<(), StoreError> {
        let text = serde_json::to_string(failure).map_err(|e| self.encoding("the failure", e))?;
        let held = self
            .backend
            .fail(&l.execution, &l.worker, text)
            .await
            .map_err(|f| self.fault(f, || format!("mark `{}` failed", l.execution)))?;
        self.held(held, &l.execution)
    }

    async fn failure(&self, execution: &str) -> Result<Option<Failure>, StoreError> {
        self.column(execution, "failure", |r| r.failure).await
    }

    async fn conflicts(&self, execution: &str) -> Result<u64, StoreError> {
        Ok(self.execution(execution).await?.map_or(0, |r| r.conflicts))
    }
}

#[async_trait]
impl<B: Backend> Queue for Durable<B> {
    async fn claim_next(
        &self,
        worker: &str,
        duration: Duration,
    ) -> Result<Option<Lease>, StoreError> {
        let id = self
            .backend
            .claim_next(worker, duration)
            .await
            .map_err(|f| self.fault(f, || "claim a waiting execution".to_owned()))?;
        Ok(id.map(|id| lease(&id, worker, duration)))
    }
}

#[async_trait]
impl<B: Backend> Cells for Durable<B> {
    async fn cell(&self, key: &str) -> Result<Option<Cell>, StoreError> {
        let Some((version, body)) = self
            .backend
            .cell(key)
            .await
            .map_err(|f| self.fault(f, || format!("read cell `{key}`")))?
        else {
            return Ok(None);
        };
        let value = serde_json::from_str(&body)
            .map_err(|e| self.corrupt(format!("the value of cell `{key}`: {e}")))?;
        Ok(Some(Cell { version, value }))
    }

    async fn put_cell(
        &self,
        key: &str,
        expected: Option<u64>,
        value: &serde_json::Value,
    ) -> Result<Option<u64>, StoreError> {
        let body = value.to_string();
        self.backend
            .put_cell(key, expected, body)
            .await
            .map_err(|f| self.fault(f, || format!("write cell `{key}`")))
    }
}
