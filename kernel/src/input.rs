//! The abstract input alphabet of the core machine.
//!
//! The [`crate::Machine`] decodes each concrete [`crate::Event`] (with its payload: text, tool
//! calls, results) into one [`Input`]: a small `Copy` value that carries only what a transition
//! decides on. The core state machine sees nothing else, which is what lets `spec/machine.md` and
//! the exhaustive model check enumerate it.

use serde::{Deserialize, Serialize};

/// Why a turn without tool calls and without usable content is empty (rule 6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EmptyKind {
    /// Finish `stop` with no content and zero usage: the provider returned nothing.
    Blank,
    /// Finish `length` before any content: truncated.
    Truncated,
    /// Finish `content_filter`: the provider filtered the reply.
    Filtered,
    /// The model produced reasoning but no content.
    ReasoningOnly,
}

/// Why a turn made no progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NoOpKind {
    /// No tool calls and no content, but the model did spend (or did not report) tokens.
    Silent,
    /// Content, but `needs_more_work: true` and no tool call: saying it is not done does nothing.
    NeedsMoreWork,
    /// Content cut off by the length limit (finish `length`): never an answer.
    Truncated,
    /// Content partly filtered (finish `content_filter`): never an answer.
    Filtered,
    /// The reply is, or ends with, a tool call written as text that did not run (see
    /// [`crate::textcall`]): never a claim, never an answer.
    TextCall,
    /// The reply repeated the same text over and over and was cut (finish `repetition`).
    Repetitive,
    /// The reply repeats the kernel's own words (its nudges, notices, guidance) in whole or in
    /// large part (see [`crate::answer::Said`]): never an answer.
    Echo,
    /// Under `policy.autonomous`: the reply only asks for more, apologises for not
    /// understanding, tells the reader to act or closes courteously (see
    /// [`crate::answer::hands_back`]): nobody is there to answer, so it is not an answer.
    NonAnswer,
    /// The reply is only a tool's result that the model wrote itself, in the tag its chat
    /// template gives a tool's answer (`<tool_response>...</tool_response>`; see
    /// [`crate::answer::imagined_result`]): no tool ran, so it reports nothing, and it is never
    /// an answer (in any run, autonomous or not).
    ImaginedResult,
}

impl NoOpKind {
    /// Whether the turn had substantive text that is not an answer (an echo, a hand-back, an
    /// imagined tool result): counted in `stats.non_answers`, never the run's result.
    pub const fn is_non_answer(self) -> bool {
        matches!(
            self,
            NoOpKind::Echo | NoOpKind::NonAnswer | NoOpKind::ImaginedResult
        )
    }
}

/// What a completion claim still lacks (rule 5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Gate {
    /// Some todo is `pending` or `in_progress`.
    pub open_todos: bool,
    /// Some tool of `completion_requires` has not succeeded yet (from the tool ledger, rule 8).
    pub missing_required: bool,
}

impl Gate {
    /// Nothing is open.
    pub const CLEAR: Gate = Gate {
        open_todos: false,
        missing_required: false,
    };

    /// Whether the claim must be refused: some work is still open.
    pub const fn refuses(self) -> bool {
        self.open_todos || self.missing_required
    }
}

/// The classification of one model turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TurnKind {
    /// The turn requested tools (rule 1: never completes the run). `runnable` calls will run,
    /// `refused` calls are refused: their tool is excluded, or a bound of its budget is reached
    /// (`blocked` of them).
    Tools {
        /// Calls that will be executed.
        runnable: u32,
        /// Calls refused (their tool is excluded, or its budget blocks the call).
        refused: u32,
        /// Of the refused calls, those a tool budget blocks (answered with the budget's text; a
        /// budget block does not end the run as an exclusion for failures does). Absent from the
        /// JSON form while 0.
        #[serde(default, skip_serializing_if = "is_zero")]
        blocked: u32,
    },
    /// Empty reply: an error, retried with backoff (rule 6).
    Empty(EmptyKind),
    /// No progress (no tool call, no usable content).
    NoOp(NoOpKind),
    /// A completion claim: substantive content, no tool call, `needs_more_work` not true.
    Claim {
        /// `needs_more_work: false` was given (otherwise it was absent).
        explicit: bool,
        /// What is still open.
        gate: Gate,
    },
}

/// How a model error is handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorClass {
    /// Rate limited, server error, timeout: retried with backoff.
    Retryable {
        /// A delay the provider asked for, in milliseconds.
        retry_after_ms: Option<u64>,
    },
    /// Authentication or bad request: retrying cannot help.
    Fatal,
    /// The conversation does not fit the context window even after pruning.
    ContextOverflow,
}

/// The summary of one batch of tool results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Batch {
    /// Results that were errors.
    pub failed: u32,
    /// Every executed call failed (a failing turn).
    pub all_failed: bool,
    /// Some call failed with an unrecoverable class (permission denied, not found, auth failed).
    pub unrecoverable: bool,
    /// How many times in a row the latest window of successful tool turns (same calls, same
    /// results, any period up to `max_loop_period`) has now occurred: 1 when nothing repeats,
    /// and always 1 for a turn with a failed call or a poll.
    pub repeats: u32,
    /// For a poll (every call names a declared poller, `policy.pollers`, and succeeded): how
    /// many polls in a row have now got these same results, counting this one; 0 for any other
    /// turn. Absent from the JSON form while 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub polls: u32,
    /// A checkpoint is due (`policy.auto_checkpoints` on): a tool budget that a checkpoint lifts
    /// (`reset_on`) has refused calls in two tool turns since its last reset, and these results
    /// did not lift it. Absent from the JSON form while false.
    #[serde(default, skip_serializing_if = "is_false")]
    pub checkpoint: bool,
}

/// One input of the core machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Input {
    /// A model turn, with the tokens it reported (0 when unknown).
    Turn {
        /// The classification.
        kind: TurnKind,
        /// Input tokens reported.
        input_tokens: u64,
        /// Output tokens reported.
        output_tokens: u64,
    },
    /// The model call failed.
    ModelError(ErrorClass),
    /// The results of the tool calls of the last turn.
    ToolResults(Batch),
    /// The verifier's verdict on the last completion claim.
    Verdict {
        /// Whether the claim was accepted.
        accepted: bool,
    },
    /// A clock reading, already compared with the deadline.
    Tick {
        /// The deadline has passed.
        deadline_passed: bool,
    },
    /// The host's kill switch.
    Cancel,
    /// A budget that stopped the run was raised from outside (see [`crate::Machine::raise`]):
    /// never an event of the agent's loop.
    Raise,
}

impl Input {
    /// A short label for traces and the spec table.
    pub const fn label(&self) -> &'static str {
        match self {
            Input::Turn { kind, .. } => match kind {
                TurnKind::Tools { .. } => "turn(tools)",
                TurnKind::Empty(_) => "turn(empty)",
                TurnKind::NoOp(_) => "turn(no-op)",
                TurnKind::Claim { .. } => "turn(claim)",
            },
            Input::ModelError(ErrorClass::Retryable { .. }) => "model_error(retryable)",
            Input::ModelError(ErrorClass::Fatal) => "model_error(fatal)",
            Input::ModelError(ErrorClass::ContextOverflow) => "model_error(context_overflow)",
            Input::ToolResults(_) => "tool_results",
            Input::Verdict { .. } => "verdict",
            Input::Tick { .. } => "tick",
            Input::Cancel => "cancel",
            Input::Raise => "raise",
        }
    }
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's `skip_serializing_if` passes a reference
const fn is_zero(n: &u32) -> bool {
    *n == 0
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's `skip_serializing_if` passes a reference
const fn is_false(b: &bool) -> bool {
    !*b
}
