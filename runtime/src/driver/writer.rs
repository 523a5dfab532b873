//! Journaling: a step's decisions, single records, a tool result now or with the next step, and
//! the check that a replayed append found what it wrote.

use super::Driver;
use crate::error::RunError;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use terminus_kernel::{
    Command, Entry, Key, Record, StepRecord, ToolBatch, ToolResult, decision_records, executed,
};

impl Driver {
    /// Journals what step `step` decided, before any of it is carried out: the transition, the
    /// guidance it emitted, its stop record, and an intent per executed tool call (the layout of
    /// `terminus_kernel::step_records`).
    pub(super) async fn journal_step(&self, step: &StepRecord) -> Result<(), RunError> {
        self.put_all(self.decisions(step)).await
    }

    pub(super) fn decisions(&self, step: &StepRecord) -> Vec<Record> {
        decision_records(step, &self.commands, |name| {
            self.env.tools.get(name).is_none_or(|t| t.idempotent())
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

    /// Appends the records of one step together (one transaction in durable stores).
    pub(super) async fn put_all(&self, records: Vec<Record>) -> Result<(), RunError> {
        let records: Vec<Arc<Record>> = records.into_iter().map(Arc::new).collect();
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
            self.duplicates.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }
}
