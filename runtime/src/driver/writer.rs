//! Journaling: a step's decisions, single records, a tool result now or with the next step, and
//! the check that a replayed append found what it wrote.

use super::Driver;
use crate::error::RunError;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use terminus_kernel::{
    Command, Entry, Hold, Key, Record, StepRecord, ToolBatch, ToolResult, executed,
    held_decision_records,
};

/// What the run's journal holds and what its appends found (atomic: concurrent tool calls
/// journal their results while the driver is borrowed). The claim keeps other workers from
/// writing, so the entries are those replayed plus those this driver wrote, and the report's
/// count needs no query, unless the tally is unsure: an append found its key stored (a replay,
/// or a retried append whose first answer was lost, which wrote it), or an action was
/// abandoned while an append of its own may have been under way.
#[derive(Debug)]
pub(super) struct Tally {
    entries: AtomicU64,
    duplicates: AtomicU64,
    sure: AtomicBool,
}

impl Default for Tally {
    fn default() -> Tally {
        Tally::replayed(0)
    }
}

impl Tally {
    /// A tally of a journal that holds `entries` already (replayed).
    pub(super) fn replayed(entries: u64) -> Tally {
        Tally {
            entries: AtomicU64::new(entries),
            duplicates: AtomicU64::new(0),
            sure: AtomicBool::new(true),
        }
    }

    /// `n` entries written.
    pub(super) fn wrote(&self, n: u64) {
        self.entries.fetch_add(n, Ordering::Relaxed);
    }

    /// An append found its key stored with the same content: a duplicate, and perhaps this
    /// driver's own write whose first answer was lost.
    fn found_stored(&self) {
        self.duplicates.fetch_add(1, Ordering::Relaxed);
        self.unsure();
    }

    /// An append may have been written without this tally knowing.
    pub(super) fn unsure(&self) {
        self.sure.store(false, Ordering::Relaxed);
    }

    /// The entries the journal holds, when the tally is sure of them.
    pub(super) fn entries(&self) -> Option<u64> {
        self.sure
            .load(Ordering::Relaxed)
            .then(|| self.entries.load(Ordering::Relaxed))
    }

    /// Appends that found their key stored with the same content.
    pub(super) fn duplicates(&self) -> u64 {
        self.duplicates.load(Ordering::Relaxed)
    }
}

impl Driver {
    /// Journals what step `step` decided, before any of it is carried out: the transition, the
    /// guidance it emitted, its stop record, and an intent per executed tool call (the layout of
    /// `terminus_kernel::step_records`).
    pub(super) async fn journal_step(&self, step: &StepRecord) -> Result<(), RunError> {
        self.put_all(self.decisions(step)).await
    }

    pub(super) fn decisions(&self, step: &StepRecord) -> Vec<Record> {
        // A resumed batch's held calls are the journal's, whatever the tool set holds now.
        let journaled: Option<BTreeMap<&str, Option<Hold>>> =
            self.resumed_held.as_ref().and_then(|held| {
                let batch = self.commands.iter().find_map(|c| match c {
                    Command::RunTools(b) => Some(b),
                    _ => None,
                })?;
                Some(
                    executed(batch)
                        .zip(held)
                        // A call held after it ran was journaled with its intent.
                        .map(|(call, h)| {
                            let hold = h.as_ref().map(|h| h.hold);
                            (call.name.as_str(), hold.filter(|h| *h != Hold::Elicitation))
                        })
                        .collect(),
                )
            });
        held_decision_records(step, &self.commands, |name| {
            let idempotent = self.env.tools.get(name).is_none_or(|t| t.idempotent());
            let hold = match &journaled {
                Some(journaled) => journaled.get(name).copied().flatten(),
                None => self.env.tools.held(name),
            };
            (idempotent, hold)
        })
    }

    /// Appends `record`. A key already stored with the same content is a prevented duplicate;
    /// with other content, the journal is another run's.
    pub(super) async fn put(&self, record: Record) -> Result<(), RunError> {
        let record = Arc::new(record);
        let appended = self
            .env
            .store
            .append(&self.env.execution, Arc::clone(&record))
            .await?;
        self.check_appended(&record, &appended)
    }

    /// Journals a tool result now, or (`defer`) returns it, to journal with the step it feeds.
    pub(super) async fn put_result(
        &self,
        key: Key,
        result: ToolResult,
        defer: bool,
    ) -> Result<Option<Record>, RunError> {
        let record = Record {
            key,
            entry: Entry::ToolResult(result),
        };
        if defer {
            return Ok(Some(record));
        }
        self.put(record).await?;
        Ok(None)
    }

    /// Whether every executed call of `batch` may run again after a crash (its tool is
    /// idempotent, or there is no such tool and nothing runs).
    pub(super) fn may_rerun(&self, batch: &ToolBatch) -> bool {
        executed(batch).all(|call| {
            self.env
                .tools
                .get(&call.name)
                .is_none_or(|t| t.idempotent())
        })
    }

    /// Whether the commands of the last step only ask the model (with guidance in the
    /// conversation): nothing outside the run happens before the next step is journaled.
    pub(super) fn only_asks_the_model(&self) -> bool {
        self.commands.iter().all(|c| {
            matches!(
                c,
                Command::CallModel(_) | Command::Nudge(_) | Command::Notice(_)
            )
        })
    }

    /// Whether the commands of the last step stop the run (with guidance in the conversation,
    /// which a stopped run no longer reads): nothing outside the run happens before its report.
    pub(super) fn only_stops(&self) -> bool {
        self.commands.iter().any(|c| matches!(c, Command::Stop(_)))
            && self
                .commands
                .iter()
                .all(|c| matches!(c, Command::Stop(_) | Command::Nudge(_) | Command::Notice(_)))
    }

    /// Appends the records of one step together (one transaction in durable stores).
    pub(super) async fn put_all(&self, records: Vec<Record>) -> Result<(), RunError> {
        self.put_shared(records.into_iter().map(Arc::new).collect())
            .await
    }

    /// [`Driver::put_all`] of records already shared.
    pub(super) async fn put_shared(&self, records: Vec<Arc<Record>>) -> Result<(), RunError> {
        let appended = self
            .env
            .store
            .append_all(&self.env.execution, records.clone())
            .await?;
        if appended.len() != records.len() {
            return Err(RunError::Internal(
                "the store answered a different number of appends".into(),
            ));
        }
        for (record, appended) in records.iter().zip(&appended) {
            self.check_appended(record, appended)?;
        }
        Ok(())
    }

    pub(super) fn check_appended(
        &self,
        record: &Record,
        appended: &crate::journal::Appended,
    ) -> Result<(), RunError> {
        if appended.already_existed {
            if *appended.record != *record {
                return Err(RunError::Diverged(record.key));
            }
            self.tally.found_stored();
        } else {
            self.tally.wrote(1);
        }
        Ok(())
    }
}
