//! Stop reasons: the canonical names of every way a run can end (`docs/design.md`, "Stop reasons";
//! `spec/machine.md`).

use serde::{Deserialize, Serialize};
use std::fmt;

/// Why a run ended in `Complete`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CompleteReason {
    /// The verifier accepted a completion claim.
    Verified,
    /// The model declared it is done (`needs_more_work: false`, no tool calls), verification off.
    Explicit,
    /// A plain substantive answer with no tool calls and no opinion on `needs_more_work`.
    Answered,
    /// Verification failed `max_verification_failures` times and the policy completes anyway.
    Forced,
}

/// Why a run ended in `Aborted`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum AbortReason {
    /// The step budget is spent.
    MaxSteps,
    /// The model-call budget is spent.
    MaxModelCalls,
    /// The run's wall-clock deadline passed.
    Deadline,
    /// The host's kill switch.
    Cancelled,
    /// `max_no_ops` turns in a row made no progress, or a window of successful tool turns (the
    /// same calls with the same results, any period up to `max_loop_period`) occurred
    /// `max_repeats` times in a row.
    NoProgress,
    /// The model kept stopping with work open after `max_nudges` nudges.
    Incomplete,
    /// Verification failed `max_verification_failures` times and the policy aborts.
    VerificationLoop,
    /// Every tool the model asked for is excluded, or `max_consecutive_tool_failures` failing
    /// tool turns in a row.
    ToolFailures,
    /// A tool failed with an unrecoverable error class and the policy says stop.
    UnrecoverableToolError,
    /// `max_empty_responses` empty replies in a row.
    EmptyResponses,
    /// A non-retryable model error, or retryable ones past `max_model_retries`.
    ModelError,
    /// The conversation cannot fit the context window even after pruning.
    ContextExhausted,
    /// The run's token budget is spent.
    TokenBudget,
    /// The run's output-token budget (`max_output_tokens`) is spent.
    OutputTokenBudget,
    /// The run's tool-call budget (`max_tool_calls`) cannot pay for the next tool turn.
    ToolCallBudget,
    /// A declared poller (`policy.pollers`) gave the same results `max_polls` times in a row:
    /// the job it waits for did not become ready within the wait the policy allows.
    PollLimit,
}

impl CompleteReason {
    /// Every complete reason, in table order.
    pub const ALL: [CompleteReason; 4] =
        [Self::Verified, Self::Explicit, Self::Answered, Self::Forced];

    /// The canonical snake_case name (the JSON form).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Verified => "verified",
            Self::Explicit => "explicit",
            Self::Answered => "answered",
            Self::Forced => "forced",
        }
    }
}

impl AbortReason {
    /// Every abort reason, in table order.
    pub const ALL: [AbortReason; 16] = [
        Self::MaxSteps,
        Self::MaxModelCalls,
        Self::Deadline,
        Self::Cancelled,
        Self::NoProgress,
        Self::Incomplete,
        Self::VerificationLoop,
        Self::ToolFailures,
        Self::UnrecoverableToolError,
        Self::EmptyResponses,
        Self::ModelError,
        Self::ContextExhausted,
        Self::TokenBudget,
        Self::ToolCallBudget,
        Self::PollLimit,
        Self::OutputTokenBudget,
    ];

    /// The canonical snake_case name (the JSON form).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::MaxSteps => "max_steps",
            Self::MaxModelCalls => "max_model_calls",
            Self::Deadline => "deadline",
            Self::Cancelled => "cancelled",
            Self::NoProgress => "no_progress",
            Self::Incomplete => "incomplete",
            Self::VerificationLoop => "verification_loop",
            Self::ToolFailures => "tool_failures",
            Self::UnrecoverableToolError => "unrecoverable_tool_error",
            Self::EmptyResponses => "empty_responses",
            Self::ModelError => "model_error",
            Self::ContextExhausted => "context_exhausted",
            Self::TokenBudget => "token_budget",
            Self::ToolCallBudget => "tool_call_budget",
            Self::PollLimit => "poll_limit",
            Self::OutputTokenBudget => "output_token_budget",
        }
    }

    /// Whether this reason is a budget that `final_answer_on_budget` may soften with one last
    /// tool-less model call.
    pub const fn is_budget(self) -> bool {
        matches!(
            self,
            Self::MaxSteps
                | Self::MaxModelCalls
                | Self::TokenBudget
                | Self::OutputTokenBudget
                | Self::ToolCallBudget
        )
    }
}

/// How a run ended: the outcome and its named reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(tag = "outcome", content = "reason", rename_all = "snake_case")]
pub enum Outcome {
    /// The run finished its task.
    Complete(CompleteReason),
    /// The run was stopped by a named limit or fault.
    Aborted(AbortReason),
}

impl Outcome {
    /// `"complete"` or `"aborted"`.
    pub const fn outcome_str(self) -> &'static str {
        match self {
            Self::Complete(_) => "complete",
            Self::Aborted(_) => "aborted",
        }
    }

    /// The canonical reason name.
    pub const fn reason_str(self) -> &'static str {
        match self {
            Self::Complete(r) => r.as_str(),
            Self::Aborted(r) => r.as_str(),
        }
    }

    /// Whether the run completed.
    pub const fn is_complete(self) -> bool {
        matches!(self, Self::Complete(_))
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.outcome_str(), self.reason_str())
    }
}
