//! The commands the machine emits for its host to carry out, in order.

use crate::event::ToolCall;
use crate::input::NoOpKind;
use crate::ledger::Exclusion;
use crate::phase::CallReason;
use crate::reason::Outcome;
use crate::rule::Rule;
use crate::stats::Stats;
use crate::todo::Todo;
use serde::{Deserialize, Serialize};

/// Call the model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelCall {
    /// Wait this long first (backoff); 0 means now.
    pub delay_ms: u64,
    /// Why this call is made.
    pub reason: CallReason,
    /// Whether the model may call tools (false only for the final-answer call).
    pub tools: bool,
}

/// A budget warning that travels inside a tool result the model sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BudgetWarning {
    /// This call's number for its tool (1-based).
    pub call: u32,
    /// The call number that will be refused.
    pub block_at: Option<u32>,
    /// This is the last call before the block.
    pub last: bool,
    /// The tier of the budget that warns (`tiers[i]`), for a budget with tiers: the call's
    /// number and `block_at` are then as the tier counts. Absent from the JSON form otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<u8>,
}

/// Run the tool calls of a turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolBatch {
    /// Every call of the turn, in order.
    pub calls: Vec<ToolCall>,
    /// Calls not to execute (index into `calls`): their tool is excluded. The host gives the
    /// model a refusal result for each; they are not sent back in `Event::ToolResults`.
    pub refused: Vec<(usize, Exclusion)>,
    /// Calls that carry a budget warning (index into `calls`).
    pub warnings: Vec<(usize, BudgetWarning)>,
}

impl ToolBatch {
    /// Whether call `index` is refused.
    pub fn refusal(&self, index: usize) -> Option<Exclusion> {
        self.refused
            .iter()
            .find(|(i, _)| *i == index)
            .map(|(_, e)| *e)
    }

    /// The budget warning of call `index`.
    pub fn warning(&self, index: usize) -> Option<BudgetWarning> {
        self.warnings
            .iter()
            .find(|(i, _)| *i == index)
            .map(|(_, w)| *w)
    }
}

/// Which guidance a nudge carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NudgeKind {
    /// The last turn made no progress.
    Continue(NoOpKind),
    /// A completion claim was refused: work is open (rule 5).
    Incomplete,
    /// The verifier rejected the claim.
    VerifierRejected,
}

/// Continuation guidance for the model. It is the kernel's own text: the verifier never sees it
/// as evidence (rule 4).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Nudge {
    /// Why.
    pub kind: NudgeKind,
    /// The message to append to the conversation as a user message.
    pub text: String,
    /// Todos still `pending` or `in_progress`.
    pub open_todos: Vec<String>,
    /// `completion_requires` tools that have not succeeded yet.
    pub missing_tools: Vec<String>,
    /// What the verifier says is missing, deduplicated across rounds.
    pub missing_items: Vec<String>,
}

/// Something the model must be told before its next turn: the kernel's own words, added to the
/// conversation after the tool results.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind", deny_unknown_fields)]
#[non_exhaustive]
pub enum Notice {
    /// Tools this step excluded, with why (rule 7): their calls are refused from now on.
    Excluded {
        /// Each newly excluded tool and why, in ledger order.
        tools: Vec<(String, Exclusion)>,
        /// The message for the model.
        text: String,
    },
    /// A window of tool turns repeated for the first time (same calls, same results).
    Repeating {
        /// The window's length in tool turns.
        period: u32,
        /// How many times in a row it has occurred.
        times: u32,
        /// `max_repeats`: the occurrence that stops the run.
        limit: u32,
        /// The message for the model.
        text: String,
    },
    /// The run's tokens passed a share of `token_budget` (80 %, then 90 %): said once each, so
    /// the model can finish before the budget stops the run.
    TokenBudget {
        /// The share passed, in percent (80 or 90).
        percent: u8,
        /// Tokens used so far (input and output).
        used: u64,
        /// `token_budget`.
        budget: u64,
        /// The message for the model.
        text: String,
    },
}

impl Notice {
    /// The message for the model.
    pub fn text(&self) -> &str {
        match self {
            Notice::Excluded { text, .. }
            | Notice::Repeating { text, .. }
            | Notice::TokenBudget { text, .. } => text,
        }
    }
}

/// Reads a stored notice in today's form or in the one-tool form of journals written before
/// notices had kinds (one exclusion each).
pub(crate) fn any_notice<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Notice, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Form {
        Now(Notice),
        OneTool {
            tool: String,
            exclusion: Exclusion,
            text: String,
        },
    }
    Ok(match Form::deserialize(d)? {
        Form::Now(notice) => notice,
        Form::OneTool {
            tool,
            exclusion,
            text,
        } => Notice::Excluded {
            tools: vec![(tool, exclusion)],
            text,
        },
    })
}

/// Ask the verifier whether the task is complete.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerifyRequest {
    /// The model's completion claim (its last substantive content). Never a nudge (rule 4).
    pub claim: String,
    /// The todo list as the kernel tracks it.
    pub todos: Vec<Todo>,
}

/// The run ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stop {
    /// Outcome and reason.
    #[serde(flatten)]
    pub outcome: Outcome,
    /// The rule that fired.
    pub rule: Rule,
    /// The last substantive model content (the partial result of an aborted run).
    pub result: Option<String>,
    /// Every counter at the stop.
    pub stats: Stats,
    /// Excluded tools, by name.
    pub excluded_tools: Vec<String>,
}

/// How the note of every checkpoint written for the agent starts ([`CheckpointRequest::note`]):
/// a context window knows the checkpoint by it, and keeps the latest one in the model's view.
pub const CHECKPOINT_NOTE_START: &str = "A checkpoint was written for you";

/// Write a checkpoint for the agent (`policy.auto_checkpoints`): a tool budget that a checkpoint
/// lifts refused calls in two tool turns since its last reset, and the agent posted none; or the
/// run passed 90 % of `token_budget` with no checkpoint posted or written since 80 %. The
/// kernel has already counted it and reset the budgets it lifts; the host asks the model (with
/// `prompt`, no tools) for a summary of the findings so far and adds `note` followed by that
/// summary to the conversation, before the model call that follows. The summary is not a call
/// of any tool: `completion_requires` and the ledger never count it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointRequest {
    /// The tools whose budgets blocked them in two turns since their last reset, by name; empty
    /// when the token budget's 90 % called for it.
    pub blocked: Vec<String>,
    /// The budgets it resets (every budget with a `reset_on`, as a posted checkpoint would): their
    /// calls count again from here and their blocks are lifted.
    pub lifted: Vec<String>,
    /// What the host asks the model for: the kernel's words.
    pub prompt: String,
    /// What the conversation says before the summary: the kernel's words.
    pub note: String,
}

/// One command for the host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Command {
    /// Tell the model something (before the next model call).
    Notice(Notice),
    /// Append continuation guidance (before the next model call).
    Nudge(Box<Nudge>),
    /// Write a checkpoint for the agent (before the next model call); no event answers it.
    Checkpoint(Box<CheckpointRequest>),
    /// Call the model; answer with `Event::ModelTurn` or `Event::ModelError`.
    CallModel(ModelCall),
    /// Run tools; answer with `Event::ToolResults`.
    RunTools(ToolBatch),
    /// Ask the verifier; answer with `Event::Verdict`.
    Verify(VerifyRequest),
    /// The run ended; no further command will come.
    Stop(Box<Stop>),
}
