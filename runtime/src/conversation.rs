//! The conversation the model sees, built one way: from the journal's entries through
//! [`Conversation::apply`]. The live path applies each entry as it journals it and the replay
//! applies the entries it reads, so a resumed run and an uninterrupted one cannot disagree about
//! what the model was told.

use crate::error::RunError;
use crate::message::Message;
use crate::tool::render_outcome;
use std::collections::BTreeMap;
use terminus_kernel::{
    Block, BudgetWarning, Entry, Exclusion, Policy, ToolBatch, ToolBudget, ToolResult, edited_note,
};

/// The messages of a run, in order: the system prompt, the task, then what the entries add.
///
/// A conversation nothing reads (`read` false: a scripted model, a rule verifier, no context
/// window, no captured content) keeps only its start: entries are checked as they are applied
/// but add no message, so a run's memory does not grow with its length for nothing.
#[derive(Debug, Clone, Default)]
pub(crate) struct Conversation {
    messages: Vec<Message>,
    kept: bool,
    /// The policy's tool budgets, for the text of a call a budget refused.
    budgets: BTreeMap<String, ToolBudget>,
    /// Held calls approved with edited arguments, by call id, until their result comes: the
    /// result says what they ran with.
    edited: BTreeMap<String, serde_json::Value>,
}

impl Conversation {
    /// The start of every run: the system prompt (if any), then the task; `read` says whether
    /// anything will read what follows.
    pub(crate) fn new(
        system: Option<&str>,
        task: &str,
        read: bool,
        policy: &Policy,
    ) -> Conversation {
        let mut messages = Vec::with_capacity(if read { 64 } else { 2 });
        if let Some(system) = system {
            messages.push(Message::system(system));
        }
        messages.push(Message::user(task));
        Conversation {
            messages,
            kept: read,
            budgets: if read {
                policy.tool_budgets.clone()
            } else {
                BTreeMap::new()
            },
            edited: BTreeMap::new(),
        }
    }

    /// The messages, oldest first.
    pub(crate) fn messages(&self) -> &[Message] {
        &self.messages
    }

    /// Adds what one journal entry tells the model: a model turn with content or calls, the
    /// results of a tool batch (`batch` is the batch they answer: the one the last step issued),
    /// and the kernel's nudges and notices. Other entries add nothing.
    pub(crate) fn apply(
        &mut self,
        entry: &Entry,
        batch: Option<&ToolBatch>,
    ) -> Result<(), RunError> {
        match entry {
            Entry::ToolResults { results } => {
                let Some(batch) = batch else {
                    return Err(RunError::Internal(
                        "tool results with no batch they answer".into(),
                    ));
                };
                self.push_tool_messages(batch, results)?;
            }
            _ if !self.kept => {}
            Entry::Decided { call_id, decision } => {
                if let Some(arguments) = decision.edited() {
                    self.edited.insert(call_id.to_string(), arguments.clone());
                }
            }
            Entry::Assistant(turn)
                if !turn.text.trim().is_empty() || !turn.tool_calls.is_empty() =>
            {
                self.messages.push(Message::assistant(
                    turn.text.clone(),
                    turn.tool_calls.clone(),
                ));
            }
            Entry::Nudge(nudge) => self.messages.push(Message::kernel(nudge.text.clone())),
            Entry::Notice(notice) => self.messages.push(Message::kernel(notice.text())),
            Entry::Checkpoint { note, text } => {
                self.messages
                    .push(Message::kernel(format!("{note}\n\n{text}")));
            }
            _ => {}
        }
        Ok(())
    }

    /// The messages a tool batch produces, in call order: a refusal for each refused call, and
    /// each executed call's result (with its budget warning) from `results`, which are in the
    /// order of the executed calls.
    fn push_tool_messages(
        &mut self,
        batch: &ToolBatch,
        results: &[ToolResult],
    ) -> Result<(), RunError> {
        let mut results = results.iter();
        for (i, call) in batch.calls.iter().enumerate() {
            if !self.kept {
                // Checked all the same: each executed call has its result.
                if batch.refusal(i).is_none() && results.next().is_none() {
                    return Err(RunError::Internal("a tool call has no outcome".into()));
                }
                continue;
            }
            if let Some(exclusion) = batch.refusal(i) {
                // Refused calls are not executed and not sent back to the kernel, but the model
                // gets an answer for each (chat APIs require one per call).
                let text = refusal_text(&call.name, exclusion, &self.budgets);
                self.messages.push(Message::tool_refusal(
                    call.id.clone(),
                    call.name.clone(),
                    text,
                ));
                continue;
            }
            let Some(result) = results.next() else {
                return Err(RunError::Internal("a tool call has no outcome".into()));
            };
            let warning = batch.warning(i).map(|w| budget_warning_text(&call.name, w));
            let mut content = render_outcome(&result.outcome);
            if let Some(arguments) = self.edited.remove(result.call_id.as_str()) {
                content = format!("{}\n{content}", edited_note(&arguments));
            }
            self.messages.push(Message::tool_result(
                result.call_id.clone(),
                result.name.clone(),
                content,
                warning.as_deref(),
            ));
        }
        Ok(())
    }
}

/// What the model is told instead of the result of a call the kernel refused: its tool is
/// excluded, or a bound of its budget (`budgets`, the policy's `tool_budgets`) is reached; for a
/// budget, what was spent and what lifts the block.
pub fn refusal_text(
    tool: &str,
    exclusion: Exclusion,
    budgets: &BTreeMap<String, ToolBudget>,
) -> String {
    let Exclusion::Budget(Block { bound, at }) = exclusion else {
        return format!("Not run: the tool `{tool}` is excluded because {exclusion}.");
    };
    let made = match at.saturating_sub(1) {
        1 => "1 call".to_owned(),
        n => format!("{n} calls"),
    };
    let field = format!("tool_budgets.{tool}.{}", bound.field);
    if !bound.resets {
        return format!(
            "Not run: the budget of `{tool}` is spent for the whole run: {made}, and calls \
             from the {} on are refused (`{field}`). Nothing lifts this block: go on without \
             `{tool}`.",
            ordinal(at)
        );
    }
    let resets: Vec<String> = budgets
        .get(tool)
        .map(|b| b.reset_on.iter().map(|t| format!("`{t}`")).collect())
        .unwrap_or_default();
    let lifts = if resets.is_empty() {
        format!("Nothing in this run lifts it: go on without `{tool}`.")
    } else {
        format!(
            "Post a checkpoint with {} to lift the block: the calls count again from it.",
            resets.join(" or ")
        )
    };
    format!(
        "Not run: the budget of `{tool}` is spent: {made} since its last reset, and calls \
         from the {} on are refused (`{field}`). {lifts}",
        ordinal(at)
    )
}

/// `1st`, `2nd`, `3rd`, `4th`, ..., `11th`, `21st`.
pub(crate) fn ordinal(n: u32) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

/// The warning appended to a tool result when its tool's budget is nearly spent.
pub fn budget_warning_text(tool: &str, w: BudgetWarning) -> String {
    match w.block_at {
        Some(_) if w.last => format!(
            "[budget] This was call {} of `{tool}`, the last one allowed: further calls will be refused.",
            w.call
        ),
        Some(block_at) => format!(
            "[budget] This was call {} of `{tool}`; from call {block_at} on, calls will be refused.",
            w.call
        ),
        None => format!(
            "[budget] This was call {} of `{tool}`; use it sparingly.",
            w.call
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use terminus_kernel::{ModelTurn, ToolCall, ToolOutcome};

    fn call() -> ToolCall {
        ToolCall {
            id: "call-1-0".into(),
            name: "read".into(),
            arguments: serde_json::json!({ "file": 1 }).into(),
        }
    }

    fn turn_and_results(conversation: &mut Conversation) -> Result<(), RunError> {
        let batch = ToolBatch {
            calls: vec![call()],
            refused: Vec::new(),
            warnings: Vec::new(),
        };
        conversation.apply(
            &Entry::Assistant(ModelTurn {
                tool_calls: vec![call()],
                ..ModelTurn::default()
            }),
            None,
        )?;
        conversation.apply(
            &Entry::ToolResults {
                results: vec![ToolResult {
                    call_id: "call-1-0".into(),
                    name: "read".into(),
                    outcome: ToolOutcome::Ok(serde_json::json!("contents").into()),
                }],
            },
            Some(&batch),
        )?;
        // Results for a batch with one call more than they answer.
        let two = ToolBatch {
            calls: vec![call(), call()],
            ..batch
        };
        conversation.apply(
            &Entry::ToolResults {
                results: Vec::new(),
            },
            Some(&two),
        )
    }

    #[test]
    fn a_conversation_nothing_reads_keeps_its_start_and_still_checks_the_results() {
        let mut read = Conversation::new(Some("system"), "task", true, &Policy::default());
        let mut unread = Conversation::new(Some("system"), "task", false, &Policy::default());
        assert!(turn_and_results(&mut read).is_err());
        assert!(turn_and_results(&mut unread).is_err());
        // The turn and its result, then nothing of the batch without results.
        assert_eq!(read.messages().len(), 2 + 2);
        let start: Vec<&str> = unread
            .messages()
            .iter()
            .map(|m| m.content.as_str())
            .collect();
        assert_eq!(start, ["system", "task"]);
    }
}
