//! The named rules of the machine: one per kind of transition. Every accepted input reports the
//! rule that fired. Each rule's row of the transition table ([`Rule::spec`]) and, for a rule that
//! ends the run, its stop path are in the stop catalog (`catalog.rs`).

use crate::phase::Phase;
use serde::{Deserialize, Serialize};

/// A kind of transition of the core machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    /// A turn with tool calls: run them (rule 1).
    ToolTurn,
    /// Every tool the turn asks for is excluded.
    AllToolsExcluded,
    /// An empty reply below the limit: retry with backoff (rule 6).
    EmptyRetry,
    /// The N-th empty reply in a row.
    EmptyLimit,
    /// A no-op turn below the limit: continuation guidance.
    NoOpContinue,
    /// A reply that is not an answer (the kernel's own words repeated, or under
    /// `policy.autonomous` a reply that only hands the task back), below the no-op limit:
    /// refused with its own guidance, never accepted (`docs/design.md`, "What a final answer is").
    NonAnswer,
    /// The N-th no-op turn in a row.
    NoOpLimit,
    /// A completion claim with work open: nudge (rule 5).
    ClaimRefused,
    /// A completion claim with work open after every nudge was spent.
    ClaimRefusedLimit,
    /// A completion claim, verification on: ask the verifier.
    ClaimVerify,
    /// `needs_more_work: false`, verification off.
    ClaimExplicit,
    /// A plain answer, verification off.
    ClaimAnswered,
    /// A retryable model error below the retry limit: retry with backoff.
    ModelRetry,
    /// A retryable model error past `max_model_retries`.
    ModelRetryLimit,
    /// A non-retryable model error.
    ModelFatal,
    /// The context window overflowed even after pruning.
    ContextOverflow,
    /// Tool results go back to the model.
    ToolResultsBack,
    /// An unrecoverable tool error with `on_unrecoverable_tool_error: stop`.
    UnrecoverableStop,
    /// The N-th failing tool turn in a row.
    ToolFailureLimit,
    /// A window of successful tool turns occurred `max_repeats` times in a row.
    RepeatLimit,
    /// A declared poller gave the same results `max_polls` times in a row.
    PollLimit,
    /// The verifier accepted the claim.
    VerdictAccepted,
    /// The verifier rejected the claim below the limit (rules 3, 4).
    VerdictRejected,
    /// The N-th verification failure, policy `complete`.
    VerificationLimitForced,
    /// The N-th verification failure, policy `abort`.
    VerificationLimitAbort,
    /// The step budget is spent (takes precedence over a non-terminal target).
    StepBudget,
    /// The token budget is spent (takes precedence over a non-terminal target).
    TokenBudget,
    /// The output-token budget is spent (takes precedence over a non-terminal target).
    OutputTokenBudget,
    /// The model-call budget is spent (a model call was due).
    ModelCallBudget,
    /// The tool-call budget cannot pay for the calls of a tool turn.
    ToolCallBudget,
    /// A budget is spent and the policy allows one final tool-less call.
    FinalAnswerCall,
    /// The final-answer call returned: stop with the budget's reason.
    FinalAnswerDone,
    /// The host's kill switch.
    Cancelled,
    /// A clock reading past the deadline.
    DeadlinePassed,
    /// A clock reading before the deadline: observed, not a step.
    ClockReading,
    /// The N-th tool turn in a row whose every call a tool budget refused.
    BlockedLimit,
    /// Tool results go back to the model after a checkpoint written for the agent: a budget
    /// that a checkpoint lifts refused calls in two turns and the agent posted none.
    AutoCheckpoint,
}

/// What the spec says about one rule, beyond what the model check observes of it (the states it
/// goes from and to, the inputs that fire it, the counters it touches, the commands it queues).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleSpec {
    /// The input that triggers it, in words.
    pub input: &'static str,
    /// The guard, in words over counters and limits; the bounds come from the table of limits
    /// (`crate::catalog`).
    pub guard: String,
    /// The rule of `docs/design.md` (1-8) or stop reason it encodes.
    pub cites: &'static str,
}

impl Rule {
    /// Every rule, in table order.
    pub const ALL: [Rule; 37] = [
        Rule::ToolTurn,
        Rule::AllToolsExcluded,
        Rule::EmptyRetry,
        Rule::EmptyLimit,
        Rule::NoOpContinue,
        Rule::NonAnswer,
        Rule::NoOpLimit,
        Rule::ClaimRefused,
        Rule::ClaimRefusedLimit,
        Rule::ClaimVerify,
        Rule::ClaimExplicit,
        Rule::ClaimAnswered,
        Rule::ModelRetry,
        Rule::ModelRetryLimit,
        Rule::ModelFatal,
        Rule::ContextOverflow,
        Rule::ToolResultsBack,
        Rule::UnrecoverableStop,
        Rule::ToolFailureLimit,
        Rule::RepeatLimit,
        Rule::PollLimit,
        Rule::VerdictAccepted,
        Rule::VerdictRejected,
        Rule::VerificationLimitForced,
        Rule::VerificationLimitAbort,
        Rule::StepBudget,
        Rule::TokenBudget,
        Rule::OutputTokenBudget,
        Rule::ModelCallBudget,
        Rule::ToolCallBudget,
        Rule::FinalAnswerCall,
        Rule::FinalAnswerDone,
        Rule::Cancelled,
        Rule::DeadlinePassed,
        Rule::ClockReading,
        Rule::BlockedLimit,
        Rule::AutoCheckpoint,
    ];

    /// The snake_case name used in traces and reports.
    pub fn name(self) -> &'static str {
        match self {
            Rule::ToolTurn => "tool_turn",
            Rule::AllToolsExcluded => "all_tools_excluded",
            Rule::EmptyRetry => "empty_retry",
            Rule::EmptyLimit => "empty_limit",
            Rule::NoOpContinue => "no_op_continue",
            Rule::NonAnswer => "non_answer",
            Rule::NoOpLimit => "no_op_limit",
            Rule::ClaimRefused => "claim_refused",
            Rule::ClaimRefusedLimit => "claim_refused_limit",
            Rule::ClaimVerify => "claim_verify",
            Rule::ClaimExplicit => "claim_explicit",
            Rule::ClaimAnswered => "claim_answered",
            Rule::ModelRetry => "model_retry",
            Rule::ModelRetryLimit => "model_retry_limit",
            Rule::ModelFatal => "model_fatal",
            Rule::ContextOverflow => "context_overflow",
            Rule::ToolResultsBack => "tool_results_back",
            Rule::UnrecoverableStop => "unrecoverable_stop",
            Rule::ToolFailureLimit => "tool_failure_limit",
            Rule::RepeatLimit => "repeat_limit",
            Rule::PollLimit => "poll_limit",
            Rule::VerdictAccepted => "verdict_accepted",
            Rule::VerdictRejected => "verdict_rejected",
            Rule::VerificationLimitForced => "verification_limit_forced",
            Rule::VerificationLimitAbort => "verification_limit_abort",
            Rule::StepBudget => "step_budget",
            Rule::TokenBudget => "token_budget",
            Rule::OutputTokenBudget => "output_token_budget",
            Rule::ModelCallBudget => "model_call_budget",
            Rule::ToolCallBudget => "tool_call_budget",
            Rule::FinalAnswerCall => "final_answer_call",
            Rule::FinalAnswerDone => "final_answer_done",
            Rule::Cancelled => "cancelled",
            Rule::DeadlinePassed => "deadline_passed",
            Rule::ClockReading => "clock_reading",
            Rule::BlockedLimit => "blocked_limit",
            Rule::AutoCheckpoint => "auto_checkpoint",
        }
    }
}

/// Every live state the host's kill switch and clock can stop.
const LIVE_TO_ABORTED: &[(Phase, Phase)] = &[
    (Phase::Exploring, Phase::Aborted),
    (Phase::Acting, Phase::Aborted),
    (Phase::Verifying, Phase::Aborted),
    (Phase::Nudged, Phase::Aborted),
];

/// A model turn (or model error) that ends the run, from either state that waits for one.
const TURN_TO_ABORTED: &[(Phase, Phase)] = &[
    (Phase::Exploring, Phase::Aborted),
    (Phase::Nudged, Phase::Aborted),
];

impl Rule {
    /// The transitions the rule makes, as (from, to) pairs of phases, in table order: the
    /// kernel's transition table without its guards, for diagrams (`terminus graph`). A rule
    /// that is not a step (`clock_reading`) has none. `kernel/tests/spec.rs` checks the table
    /// against the transitions the exhaustive model check observes, both ways.
    pub fn transitions(self) -> &'static [(Phase, Phase)] {
        use Phase::{Acting, Complete, Exploring, Nudged, Verifying};
        match self {
            Rule::ToolTurn => &[(Exploring, Acting), (Nudged, Acting)],
            Rule::EmptyRetry | Rule::ModelRetry => &[(Exploring, Exploring), (Nudged, Nudged)],
            Rule::NoOpContinue | Rule::NonAnswer | Rule::ClaimRefused => {
                &[(Exploring, Nudged), (Nudged, Nudged)]
            }
            Rule::ClaimVerify => &[(Exploring, Verifying), (Nudged, Verifying)],
            Rule::ClaimExplicit | Rule::ClaimAnswered => {
                &[(Exploring, Complete), (Nudged, Complete)]
            }
            Rule::AllToolsExcluded
            | Rule::EmptyLimit
            | Rule::NoOpLimit
            | Rule::ClaimRefusedLimit
            | Rule::ModelRetryLimit
            | Rule::ModelFatal
            | Rule::ContextOverflow
            | Rule::TokenBudget
            | Rule::OutputTokenBudget
            | Rule::ToolCallBudget
            | Rule::BlockedLimit => TURN_TO_ABORTED,
            Rule::ToolResultsBack | Rule::AutoCheckpoint => &[(Acting, Exploring)],
            Rule::UnrecoverableStop
            | Rule::ToolFailureLimit
            | Rule::RepeatLimit
            | Rule::PollLimit => &[(Acting, Phase::Aborted)],
            Rule::VerdictAccepted | Rule::VerificationLimitForced => &[(Verifying, Complete)],
            Rule::VerdictRejected => &[(Verifying, Nudged)],
            Rule::VerificationLimitAbort => &[(Verifying, Phase::Aborted)],
            Rule::StepBudget | Rule::ModelCallBudget | Rule::Cancelled | Rule::DeadlinePassed => {
                LIVE_TO_ABORTED
            }
            Rule::FinalAnswerCall => &[
                (Exploring, Exploring),
                (Acting, Exploring),
                (Verifying, Exploring),
                (Nudged, Exploring),
            ],
            Rule::FinalAnswerDone => &[(Exploring, Phase::Aborted)],
            Rule::ClockReading => &[],
        }
    }
}
