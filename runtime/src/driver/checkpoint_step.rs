//! A checkpoint written for the agent (the kernel's `Command::Checkpoint`, with
//! `policy.auto_checkpoints`): one model call with the kernel's prompt and no tools, whose reply
//! goes into the conversation after the kernel's note, and into the journal, before the model
//! call that follows.
//!
//! The kernel has already counted the checkpoint and reset the budgets it lifts, so a checkpoint
//! the model cannot write still stands: its text then says why it is empty. A crash before the
//! checkpoint is journaled leaves the command outstanding on replay, and the resumed run asks
//! again; once journaled (with the next step's append), a replay finds it written.

use super::{Driver, EventAndDetail, spans};
use crate::error::RunError;
use crate::message::Message;
use crate::model::{ModelError, ModelRequest, Purpose};
use terminus_kernel::{Entry, Key, Record};
use tokio::time::timeout;

/// What the model gave for a checkpoint written for the agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Summary<'a> {
    /// Its reply's text (empty when it wrote none).
    Reply(&'a str),
    /// The call failed: the kernel's class of the failure and its message.
    Failed {
        /// The class (`rate_limited`, `server`, ...).
        kind: &'a str,
        /// What the provider said.
        message: &'a str,
    },
    /// It did not answer in time.
    NoAnswer,
}

/// The checkpoint's text after the kernel's note: the summary, trimmed, or why there is none
/// (the checkpoint still stands: the kernel counted it). The one place of those words: the host
/// core and the bindings give them too.
pub fn summary_text(summary: Summary<'_>) -> String {
    match summary {
        Summary::Reply(text) if !text.trim().is_empty() => text.trim().to_owned(),
        Summary::Reply(_) => "(The model wrote no summary.)".to_owned(),
        Summary::Failed { kind, message } => {
            format!("(No summary: the model call failed: {kind}: {message}.)")
        }
        Summary::NoAnswer => "(No summary: the model did not answer in time.)".to_owned(),
    }
}

impl Driver {
    /// Writes the checkpoint the last step asked for, if any. `Some` is the event to feed
    /// instead of the model call (the kill switch or the deadline came first).
    pub(super) async fn checkpoint_step(&mut self) -> Result<Option<EventAndDetail>, RunError> {
        let Some(request) = self.checkpoint.take() else {
            return Ok(None);
        };
        let mut messages = match &self.window {
            Some(window) => window.messages(self.conversation.messages()).to_vec(),
            None => self.conversation.messages().to_vec(),
        };
        messages.push(Message::user(request.prompt.as_str()));
        let settings = &self.env.config.auto_checkpoint;
        let model_request = ModelRequest {
            messages: &messages,
            tools: &self.env.specs,
            tools_enabled: false,
            purpose: Purpose::Checkpoint {
                model: settings.model.as_deref(),
                max_tokens: settings.max_tokens,
            },
        };
        let answer = async {
            let answer = self.env.model.complete(model_request);
            match self.env.config.model_timeout {
                None => Some(answer.await),
                Some(limit) => timeout(limit, answer).await.ok(),
            }
        };
        let (raced, renewal) = self.race(answer).await?;
        self.renewal = renewal;
        let answer = match self.interrupted(raced) {
            Ok(answer) => answer,
            Err(event) => return Ok(Some(event)),
        };
        let text = match answer {
            Some(Err(ModelError::Fault(fault))) => return Err(fault.into()),
            Some(Ok(turn)) => summary_text(Summary::Reply(&turn.text)),
            Some(Err(ModelError::Failure(failure))) => summary_text(Summary::Failed {
                kind: failure.kind.as_str(),
                message: &failure.message,
            }),
            None => summary_text(Summary::NoAnswer),
        };
        let step = self.machine.stats().steps;
        spans::auto_checkpoint(step, &request.lifted, text.len());
        let record = Record {
            key: Key::written_checkpoint(step),
            entry: Entry::Checkpoint {
                note: request.note,
                text,
            },
        };
        self.conversation.apply(&record.entry, None)?;
        // Journaled with the next step's append, after the step that asked for it.
        self.carry.push(record);
        Ok(None)
    }
}
