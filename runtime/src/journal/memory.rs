//! [`MemoryStore`]: the journal port held in memory, for tests, scenarios and the bindings'
//! plans (journals live as long as the value).

use super::{
    Appended, Cell, Cells, Claims, ExecutionFilter, ExecutionStatus, ExecutionSummary, Failure,
    Journal, Lease, Queue, RunSpec, StoreError, Suspension,
};
use crate::report::Report;
use async_trait::async_trait;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use terminus_kernel::{Entry, Key, Record};
use tokio::time::Instant;

#[derive(Debug, Default)]
struct Execution {
    /// Creation order, for listing oldest first.
    created: u64,
    spec: Option<RunSpec>,
    /// In key order.
    records: BTreeMap<Key, Arc<Record>>,
    claim: Option<(String, Instant)>,
    report: Option<Report>,
    failure: Option<Failure>,
    conflicts: u64,
    suspension: Suspension,
}

impl Execution {
    /// Gives the claim up if `worker` holds it.
    fn release(&mut self, worker: &str) {
        if self
            .claim
            .as_ref()
            .is_some_and(|(holder, _)| holder == worker)
        {
            self.claim = None;
        }
    }
}

/// The in-memory store: journals live as long as the value; clones share the same data. Leases
/// use tokio's clock, so tests with a paused clock can expire them.
#[derive(Debug, Clone, Default)]
pub struct MemoryStore {
    executions: Arc<Mutex<HashMap<String, Execution>>>,
    /// Executions created so far (each one's `created`).
    created: Arc<std::sync::atomic::AtomicU64>,
    cells: Arc<Mutex<HashMap<String, Cell>>>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }

    fn with<T>(&self, f: impl FnOnce(&mut HashMap<String, Execution>) -> T) -> T {
        // Every mutation under the lock is a single insert or assignment, so a lock poisoned by
        // a panic elsewhere still guards consistent data.
        let mut executions = self
            .executions
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        f(&mut executions)
    }

    fn with_execution<T>(&self, execution: &str, f: impl FnOnce(&mut Execution) -> T) -> T {
        self.with(|all| match all.get_mut(execution) {
            Some(e) => f(e),
            None => {
                let created = self
                    .created
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                f(all
                    .entry(execution.to_owned())
                    .or_insert_with(|| Execution {
                        created,
                        ..Execution::default()
                    }))
            }
        })
    }
}

#[async_trait]
impl Journal for MemoryStore {
    async fn append(&self, execution: &str, record: Arc<Record>) -> Result<Appended, StoreError> {
        Ok(self.with_execution(execution, |e| {
            if let Some(stored) = e.records.get(&record.key) {
                return Appended {
                    record: Arc::clone(stored),
                    already_existed: true,
                };
            }
            e.records.insert(record.key, Arc::clone(&record));
            Appended {
                record,
                already_existed: false,
            }
        }))
    }

    async fn create(&self, execution: &str, spec: &RunSpec) -> Result<bool, StoreError> {
        Ok(self.with_execution(execution, |e| {
            if e.spec.is_some() || !e.records.is_empty() {
                return false;
            }
            e.spec = Some(spec.clone());
            true
        }))
    }

    async fn spec(&self, execution: &str) -> Result<Option<RunSpec>, StoreError> {
        Ok(self.with(|all| all.get(execution).and_then(|e| e.spec.clone())))
    }

    async fn append_all(
        &self,
        execution: &str,
        records: Vec<Arc<Record>>,
    ) -> Result<Vec<Appended>, StoreError> {
        // One lock and one lookup for the whole step.
        Ok(self.with_execution(execution, |e| {
            records
                .into_iter()
                .map(|record| match e.records.get(&record.key) {
                    Some(stored) => Appended {
                        record: Arc::clone(stored),
                        already_existed: true,
                    },
                    None => {
                        e.records.insert(record.key, Arc::clone(&record));
                        Appended {
                            record,
                            already_existed: false,
                        }
                    }
                })
                .collect()
        }))
    }

    async fn page(
        &self,
        execution: &str,
        after: Option<Key>,
        limit: usize,
    ) -> Result<Vec<Arc<Record>>, StoreError> {
        use std::ops::Bound;
        Ok(self.with(|all| {
            let Some(e) = all.get(execution) else {
                return Vec::new();
            };
            let from = after.map_or(Bound::Unbounded, Bound::Excluded);
            e.records
                .range((from, Bound::Unbounded))
                .take(limit)
                .map(|(_, r)| Arc::clone(r))
                .collect()
        }))
    }

    async fn count(&self, execution: &str) -> Result<u64, StoreError> {
        Ok(self.with(|all| {
            all.get(execution)
                .map_or(0, |e| u64::try_from(e.records.len()).unwrap_or(u64::MAX))
        }))
    }

    async fn finish(&self, execution: &str, report: &Report) -> Result<(), StoreError> {
        self.with_execution(execution, |e| e.report = Some(report.clone()));
        Ok(())
    }

    async fn report(&self, execution: &str) -> Result<Option<Report>, StoreError> {
        Ok(self.with(|all| all.get(execution).and_then(|e| e.report.clone())))
    }

    async fn reopen(&self, execution: &str, records: Vec<Arc<Record>>) -> Result<bool, StoreError> {
        Ok(self.with(|all| {
            let Some(e) = all.get_mut(execution) else {
                return false;
            };
            if e.report.is_none() || records.iter().any(|r| e.records.contains_key(&r.key)) {
                return false;
            }
            for record in records {
                e.records.insert(record.key, record);
            }
            e.report = None;
            true
        }))
    }

    async fn decide(
        &self,
        execution: &str,
        record: Arc<Record>,
        at_unix_ms: u64,
    ) -> Result<Appended, StoreError> {
        self.with(|all| {
            let Some(e) = all.get_mut(execution) else {
                return Err(StoreError::NotFound(execution.to_owned()));
            };
            if let Some(stored) = e.records.get(&record.key) {
                return Ok(Appended {
                    record: Arc::clone(stored),
                    already_existed: true,
                });
            }
            if !e.suspension.is_suspended() {
                return Err(StoreError::NotSuspended(execution.to_owned()));
            }
            e.records.insert(record.key, Arc::clone(&record));
            e.suspension.decided(at_unix_ms);
            Ok(Appended {
                record,
                already_existed: false,
            })
        })
    }

    async fn suspension(&self, execution: &str) -> Result<Suspension, StoreError> {
        Ok(self.with(|all| all.get(execution).map(|e| e.suspension).unwrap_or_default()))
    }

    async fn executions(
        &self,
        filter: &ExecutionFilter,
    ) -> Result<Vec<ExecutionSummary>, StoreError> {
        let now = Instant::now();
        let mut listed: Vec<(u64, ExecutionSummary)> = self.with(|all| {
            all.iter()
                .map(|(id, e)| (e.created, summary(id, e, now)))
                .filter(|(_, s)| filter.matches(s))
                .collect()
        });
        listed.sort_by(|a, b| {
            a.0.cmp(&b.0)
                .then_with(|| a.1.execution.cmp(&b.1.execution))
        });
        Ok(listed.into_iter().map(|(_, s)| s).collect())
    }
}

/// The summary of an execution of the memory store, as the durable stores' query makes it.
fn summary(id: &str, e: &Execution, now: Instant) -> ExecutionSummary {
    let count = |f: fn(&Entry) -> bool| {
        let n = e.records.values().filter(|r| f(&r.entry)).count();
        u32::try_from(n).unwrap_or(u32::MAX)
    };
    // The last stop, unless a raise came after it (the run went on).
    let stop = e
        .records
        .values()
        .rev()
        .find_map(|r| match &r.entry {
            Entry::Stop(stop) => Some(Some(stop)),
            Entry::Raised { .. } => Some(None),
            _ => None,
        })
        .flatten();
    let (outcome, rule, steps, model_calls, tool_calls) = match (&e.report, stop) {
        (Some(r), _) => (
            Some(r.outcome),
            Some(r.rule),
            r.steps,
            r.model_calls,
            r.tool_calls,
        ),
        (None, Some(s)) => (
            Some(s.outcome),
            Some(s.rule),
            s.stats.steps,
            s.stats.model_calls,
            s.stats.tool_calls,
        ),
        (None, None) => (
            None,
            None,
            count(|e| matches!(e, Entry::Transition(_))),
            count(|e| matches!(e, Entry::Assistant(_) | Entry::ModelError { .. })),
            count(|e| matches!(e, Entry::ToolCall { .. })),
        ),
    };
    let status = if e.failure.is_some() {
        ExecutionStatus::Failed
    } else if outcome.is_some() {
        ExecutionStatus::Ended
    } else if e.claim.as_ref().is_some_and(|(_, expires)| *expires > now) {
        ExecutionStatus::Running
    } else if e.suspension.is_suspended() {
        ExecutionStatus::Suspended
    } else if e.records.is_empty() || e.suspension.is_decided() {
        ExecutionStatus::Waiting
    } else {
        ExecutionStatus::Interrupted
    };
    ExecutionSummary {
        execution: id.to_owned(),
        name: e.spec.as_ref().and_then(|s| s.name.clone()),
        status,
        outcome,
        rule,
        steps,
        model_calls,
        tool_calls,
        entries: u64::try_from(e.records.len()).unwrap_or(u64::MAX),
    }
}

#[async_trait]
impl Claims for MemoryStore {
    async fn claim(
        &self,
        execution: &str,
        worker: &str,
        duration: Duration,
    ) -> Result<Lease, StoreError> {
        let now = Instant::now();
        self.with(|all| {
            let Some(e) = all.get_mut(execution) else {
                return Err(StoreError::NotFound(execution.to_owned()));
            };
            if let Some((holder, expires)) = &e.claim
                && holder != worker
                && *expires > now
            {
                e.conflicts += 1;
                return Err(StoreError::Claimed {
                    execution: execution.to_owned(),
                    worker: holder.clone(),
                });
            }
            e.claim = Some((worker.to_owned(), now + duration));
            e.suspension.taken_up();
            Ok(Lease {
                execution: execution.to_owned(),
                worker: worker.to_owned(),
                duration,
            })
        })
    }

    async fn renew(&self, lease: &Lease) -> Result<(), StoreError> {
        let now = Instant::now();
        self.with(|all| {
            let e = all.get_mut(&lease.execution);
            match e {
                Some(Execution {
                    claim: Some((holder, expires)),
                    ..
                }) if *holder == lease.worker => {
                    *expires = now + lease.duration;
                    Ok(())
                }
                _ => {
                    if let Some(e) = e {
                        e.conflicts += 1;
                    }
                    Err(StoreError::LeaseLost {
                        execution: lease.execution.clone(),
                    })
                }
            }
        })
    }

    async fn suspend(
        &self,
        lease: &Lease,
        pending: u32,
        at_unix_ms: u64,
    ) -> Result<(), StoreError> {
        self.with(|all| match all.get_mut(&lease.execution) {
            Some(e)
                if e.claim
                    .as_ref()
                    .is_some_and(|(holder, _)| *holder == lease.worker) =>
            {
                e.suspension.pending = pending;
                // Suspended again before it was decided (a resume that found a call undecided):
                // the suspension goes on from its start.
                e.suspension.since_unix_ms.get_or_insert(at_unix_ms);
                e.claim = None;
                Ok(())
            }
            _ => Err(StoreError::LeaseLost {
                execution: lease.execution.clone(),
            }),
        })
    }

    async fn fail(&self, lease: &Lease, failure: &Failure) -> Result<(), StoreError> {
        self.with(|all| match all.get_mut(&lease.execution) {
            Some(e)
                if e.report.is_none()
                    && e.claim
                        .as_ref()
                        .is_some_and(|(holder, _)| *holder == lease.worker) =>
            {
                e.failure = Some(failure.clone());
                e.claim = None;
                Ok(())
            }
            _ => Err(StoreError::LeaseLost {
                execution: lease.execution.clone(),
            }),
        })
    }

    async fn failure(&self, execution: &str) -> Result<Option<Failure>, StoreError> {
        Ok(self.with(|all| all.get(execution).and_then(|e| e.failure.clone())))
    }

    async fn conflicts(&self, execution: &str) -> Result<u64, StoreError> {
        Ok(self.with(|all| all.get(execution).map_or(0, |e| e.conflicts)))
    }

    async fn release(&self, lease: &Lease) -> Result<(), StoreError> {
        self.with(|all| {
            if let Some(e) = all.get_mut(&lease.execution) {
                e.release(&lease.worker);
            }
        });
        Ok(())
    }

    async fn finish_with_step(
        &self,
        lease: &Lease,
        records: Vec<Arc<Record>>,
        report: &Report,
    ) -> Result<bool, StoreError> {
        Ok(self.with_execution(&lease.execution, |e| {
            if records.iter().any(|r| e.records.contains_key(&r.key)) {
                return false;
            }
            e.records.extend(records.into_iter().map(|r| (r.key, r)));
            e.report = Some(report.clone());
            e.release(&lease.worker);
            true
        }))
    }
}

#[async_trait]
impl Queue for MemoryStore {
    async fn claim_next(
        &self,
        worker: &str,
        duration: Duration,
    ) -> Result<Option<Lease>, StoreError> {
        let now = Instant::now();
        Ok(self.with(|all| {
            let mut waiting: Vec<(&String, &mut Execution)> = all
                .iter_mut()
                .filter(|(_, e)| {
                    e.spec.is_some()
                        && e.report.is_none()
                        && e.failure.is_none()
                        && !e.suspension.is_suspended()
                        && e.claim.as_ref().is_none_or(|(_, expires)| *expires <= now)
                })
                .collect();
            waiting.sort_by(|a, b| a.0.cmp(b.0));
            let (id, e) = waiting.into_iter().next()?;
            e.claim = Some((worker.to_owned(), now + duration));
            e.suspension.taken_up();
            Some(Lease {
                execution: id.clone(),
                worker: worker.to_owned(),
                duration,
            })
        }))
    }
}

#[async_trait]
impl Cells for MemoryStore {
    async fn cell(&self, key: &str) -> Result<Option<Cell>, StoreError> {
        let cells = self.cells.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(cells.get(key).cloned())
    }

    async fn put_cell(
        &self,
        key: &str,
        expected: Option<u64>,
        value: &serde_json::Value,
    ) -> Result<Option<u64>, StoreError> {
        let mut cells = self.cells.lock().unwrap_or_else(PoisonError::into_inner);
        if cells.get(key).map(|c| c.version) != expected {
            return Ok(None);
        }
        let version = expected.map_or(1, |v| v + 1);
        cells.insert(
            key.to_owned(),
            Cell {
                version,
                value: value.clone(),
            },
        );
        Ok(Some(version))
    }
}
