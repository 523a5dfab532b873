//! The conversation the model sees, built one way: from the journal's entries through
//! [`Conversation::apply`]. The live path applies each entry as it journals it and the replay
//! applies the entries it reads, so a resumed run and an uninterrupted one cannot disagree about
//! what the model was told.

use crate::error::RunError;
use crate::message::Message;
use crate::tool::render_outcome;
use std::collections::BTreeMap;
use terminus_kernel::{
    BlockedBy, BudgetWarning, Entry, Exclusion, Policy, Tier, TierCount, ToolBatch, ToolBudget,
    ToolResult, edited_note,
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
    /// The last result of the tool turn just answered (its place in `messages`), which the
    /// kernel's notices of that step ride on; `None` once anything else happened.
    ride: Option<usize>,
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
            ride: None,
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
        if !matches!(
            entry,
            Entry::ToolResults { .. } | Entry::Nudge(_) | Entry::Notice(_)
        ) {
            self.ride = None;
        }
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
            // A notice of a tool turn's step rides on its last result, as the host core puts it
            // (`host::Step::notice_to`): one place for it whatever runs the model, and no user
            // message between a tool result and the next reply (which some chat APIs refuse).
            // Any other notice (after a model error, a nudge alone) is a message of its own.
            Entry::Notice(notice) => match self.ride.and_then(|at| self.messages.get_mut(at)) {
                Some(result) => *result = result.with_kernel_text(notice.text()),
                None => self.messages.push(Message::kernel(notice.text())),
            },
            Entry::Checkpoint { note, text } => {
                self.messages
                    .push(Message::kernel(crate::message::checkpoint_text(note, text)));
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
        self.ride = None;
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
            let warning = batch
                .warning(i)
                .map(|w| budget_warning_text(&call.name, w, &self.budgets));
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
            self.ride = Some(self.messages.len() - 1);
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
    let Exclusion::Budget(block) = exclusion else {
        return format!("Not run: the tool `{tool}` is excluded because {exclusion}.");
    };
    let at = block.at;
    let made = match at.saturating_sub(1) {
        1 => "1 call".to_owned(),
        n => format!("{n} calls"),
    };
    let bound = match block.by {
        BlockedBy::Bound(bound) => bound,
        BlockedBy::Tier { index, .. } => {
            let tier = budgets
                .get(tool)
                .and_then(|b| b.tiers.get(usize::from(index)));
            return tier_refusal_text(tool, usize::from(index), tier, &made, at);
        }
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

/// The refusal of a call a tier of its budget blocks (`tier`: the policy's, if it has it).
fn tier_refusal_text(tool: &str, index: usize, tier: Option<&Tier>, made: &str, at: u32) -> String {
    let field = format!("tool_budgets.{tool}.tiers[{index}].block_at");
    let Some(tier) = tier else {
        return format!(
            "Not run: the budget of `{tool}` is spent: {made}, and calls from the {} on are \
             refused (`{field}`).",
            ordinal(at)
        );
    };
    let label = tier.label(index);
    let counted = match tier.count {
        TierCount::Run => "in this run",
        TierCount::SinceLift => "since it was last lifted",
    };
    let lifts = if tier.reset_on.is_empty() {
        format!("Nothing lifts this block: go on without `{tool}`.")
    } else {
        let tools: Vec<String> = tier.reset_on.iter().map(|t| format!("`{t}`")).collect();
        format!("Call {} to lift the block.", tools.join(" or "))
    };
    format!(
        "Not run: {label} of `{tool}`'s budget is reached: {made} {counted}, and calls from the \
         {} on are refused (`{field}`). {lifts}",
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

/// The warning appended to a tool result when its tool's budget is nearly spent (`budgets`, the
/// policy's `tool_budgets`, give a tier's own text).
pub fn budget_warning_text(
    tool: &str,
    w: BudgetWarning,
    budgets: &BTreeMap<String, ToolBudget>,
) -> String {
    let tier = w.tier.map(usize::from).and_then(|index| {
        let tier = budgets.get(tool)?.tiers.get(index)?;
        Some((index, tier))
    });
    if let Some((index, tier)) = tier {
        let own = tier
            .warning
            .as_deref()
            .map(|t| format!(" {t}"))
            .unwrap_or_default();
        let lifts = match tier.reset_on.as_slice() {
            [] => String::new(),
            tools => {
                let tools: Vec<String> = tools.iter().map(|t| format!("`{t}`")).collect();
                format!(" (lifted by {})", tools.join(" or "))
            }
        };
        let label = tier.label(index);
        return match w.block_at {
            Some(_) if w.last => format!(
                "[budget] This was call {} of `{tool}`, the last one {label} allows{lifts}: \
                 further calls will be refused.{own}",
                w.call
            ),
            Some(block_at) => format!(
                "[budget] This was call {} of `{tool}`; from call {block_at} on, {label} \
                 refuses calls{lifts}.{own}",
                w.call
            ),
            None => format!(
                "[budget] This was call {} of `{tool}` ({label}); use it sparingly.{own}",
                w.call
            ),
        };
    }
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

    #[test]
    fn a_tier_warns_in_its_own_words_and_its_refusal_names_what_lifts_it() {
        let policy: Policy = serde_json::from_value(serde_json::json!({
            "tool_budgets": { "read_file": { "tiers": [
                { "name": "checkpoint", "warn_at": 8, "block_at": 10,
                  "reset_on": ["post_checkpoint"] },
                { "name": "hard stop", "warn_at": 13, "block_at": 14, "reset_on": ["post_plan"],
                  "warning": "FINAL WARNING: post your plan now." }
            ] } }
        }))
        .unwrap_or_default();
        let budgets = &policy.tool_budgets;
        let warn = |call, block_at, tier| BudgetWarning {
            call,
            block_at: Some(block_at),
            last: block_at == call + 1,
            tier: Some(tier),
        };
        assert_eq!(
            budget_warning_text("read_file", warn(8, 10, 0), budgets),
            "[budget] This was call 8 of `read_file`; from call 10 on, the checkpoint tier \
             refuses calls (lifted by `post_checkpoint`)."
        );
        assert_eq!(
            budget_warning_text("read_file", warn(13, 14, 1), budgets),
            "[budget] This was call 13 of `read_file`, the last one the hard stop tier allows \
             (lifted by `post_plan`): further calls will be refused. FINAL WARNING: post your \
             plan now."
        );
        let block = Exclusion::Budget(terminus_kernel::Block {
            by: BlockedBy::Tier { index: 1, call: 14 },
            at: 14,
        });
        assert_eq!(
            refusal_text("read_file", block, budgets),
            "Not run: the hard stop tier of `read_file`'s budget is reached: 13 calls in this \
             run, and calls from the 14th on are refused \
             (`tool_budgets.read_file.tiers[1].block_at`). Call `post_plan` to lift the block."
        );
    }
}
