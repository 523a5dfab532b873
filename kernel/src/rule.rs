//! The named rules of the machine: one per kind of transition, with the metadata `spec/machine.md`
//! is generated from. Every accepted input reports the rule that fired.

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
    /// The same calls with the same results `max_repeats` turns in a row.
    RepeatLimit,
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
    /// The model-call budget is spent (a model call was due).
    ModelCallBudget,
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
}

/// What the spec says about one rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RuleSpec {
    /// The input that triggers it.
    pub input: &'static str,
    /// The guard, in words over counters and limits.
    pub guard: &'static str,
    /// Counters it increments (totals and streaks) or resets.
    pub counters: &'static str,
    /// The command it emits.
    pub command: &'static str,
    /// The DESIGN.md rule or stop reason it encodes.
    pub cites: &'static str,
}

impl Rule {
    /// Every rule, in table order.
    pub const ALL: [Rule; 31] = [
        Rule::ToolTurn,
        Rule::AllToolsExcluded,
        Rule::EmptyRetry,
        Rule::EmptyLimit,
        Rule::NoOpContinue,
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
        Rule::VerdictAccepted,
        Rule::VerdictRejected,
        Rule::VerificationLimitForced,
        Rule::VerificationLimitAbort,
        Rule::StepBudget,
        Rule::TokenBudget,
        Rule::ModelCallBudget,
        Rule::FinalAnswerCall,
        Rule::FinalAnswerDone,
        Rule::Cancelled,
        Rule::DeadlinePassed,
        Rule::ClockReading,
    ];

    /// The snake_case name used in traces and reports.
    pub fn name(self) -> &'static str {
        match self {
            Rule::ToolTurn => "tool_turn",
            Rule::AllToolsExcluded => "all_tools_excluded",
            Rule::EmptyRetry => "empty_retry",
            Rule::EmptyLimit => "empty_limit",
            Rule::NoOpContinue => "no_op_continue",
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
            Rule::VerdictAccepted => "verdict_accepted",
            Rule::VerdictRejected => "verdict_rejected",
            Rule::VerificationLimitForced => "verification_limit_forced",
            Rule::VerificationLimitAbort => "verification_limit_abort",
            Rule::StepBudget => "step_budget",
            Rule::TokenBudget => "token_budget",
            Rule::ModelCallBudget => "model_call_budget",
            Rule::FinalAnswerCall => "final_answer_call",
            Rule::FinalAnswerDone => "final_answer_done",
            Rule::Cancelled => "cancelled",
            Rule::DeadlinePassed => "deadline_passed",
            Rule::ClockReading => "clock_reading",
        }
    }

    /// The rule's row of the transition table.
    pub fn spec(self) -> RuleSpec {
        let r = |input, guard, counters, command, cites| RuleSpec {
            input,
            guard,
            counters,
            command,
            cites,
        };
        match self {
            Rule::ToolTurn => r(
                "turn(tools)",
                "some call's tool is not excluded",
                "steps, tool_calls += runnable, refused_calls += refused; streaks.no_ops = 0, streaks.empty_responses = 0",
                "RunTools",
                "rule 1",
            ),
            Rule::AllToolsExcluded => r(
                "turn(tools)",
                "every call's tool is excluded",
                "steps, refused_calls",
                "Stop",
                "`tool_failures`, rule 7",
            ),
            Rule::EmptyRetry => r(
                "turn(empty)",
                "streaks.empty_responses + 1 < max_empty_responses",
                "steps, model_calls, empty_responses, streaks.empty_responses",
                "CallModel(retry, backoff)",
                "rule 6",
            ),
            Rule::EmptyLimit => r(
                "turn(empty)",
                "streaks.empty_responses + 1 = max_empty_responses",
                "steps, empty_responses, streaks.empty_responses",
                "Stop",
                "`empty_responses`, rule 6",
            ),
            Rule::NoOpContinue => r(
                "turn(no-op)",
                "streaks.no_ops + 1 < max_no_ops",
                "steps, model_calls, no_ops, continuations, streaks.no_ops; streaks.empty_responses = 0",
                "Nudge(continue), CallModel",
                "rule 2",
            ),
            Rule::NoOpLimit => r(
                "turn(no-op)",
                "streaks.no_ops + 1 = max_no_ops",
                "steps, no_ops, streaks.no_ops",
                "Stop",
                "`no_progress`",
            ),
            Rule::ClaimRefused => r(
                "turn(claim)",
                "todos open or a `completion_requires` tool never succeeded; nudges < max_nudges",
                "steps, model_calls, nudges",
                "Nudge(incomplete), CallModel",
                "rule 5, rule 8",
            ),
            Rule::ClaimRefusedLimit => r(
                "turn(claim)",
                "work open; nudges = max_nudges",
                "steps",
                "Stop",
                "`incomplete`, rule 5",
            ),
            Rule::ClaimVerify => r(
                "turn(claim)",
                "nothing open; verify_completion",
                "steps",
                "Verify",
                "rules 2, 4",
            ),
            Rule::ClaimExplicit => r(
                "turn(claim)",
                "nothing open; verification off; needs_more_work = false",
                "steps",
                "Stop",
                "`explicit`, rule 2",
            ),
            Rule::ClaimAnswered => r(
                "turn(claim)",
                "nothing open; verification off; needs_more_work absent",
                "steps",
                "Stop",
                "`answered`, rule 2",
            ),
            Rule::ModelRetry => r(
                "model_error(retryable)",
                "streaks.model_retries + 1 <= max_model_retries",
                "steps, model_calls, model_errors, streaks.model_retries",
                "CallModel(retry, backoff)",
                "rule 6",
            ),
            Rule::ModelRetryLimit => r(
                "model_error(retryable)",
                "streaks.model_retries + 1 > max_model_retries",
                "steps, model_errors, streaks.model_retries",
                "Stop",
                "`model_error`",
            ),
            Rule::ModelFatal => r(
                "model_error(fatal)",
                "-",
                "steps, model_errors",
                "Stop",
                "`model_error`",
            ),
            Rule::ContextOverflow => r(
                "model_error(context_overflow)",
                "-",
                "steps, model_errors",
                "Stop",
                "`context_exhausted`",
            ),
            Rule::ToolResultsBack => r(
                "tool_results",
                "no stop guard below fires",
                "steps, model_calls, tool_failures, failed_tool_turns?, repeats?, streaks",
                "CallModel (results first, rule 1)",
                "rules 1, 7, 8",
            ),
            Rule::UnrecoverableStop => r(
                "tool_results",
                "an unrecoverable error class; on_unrecoverable_tool_error = stop",
                "steps, tool_failures",
                "Stop",
                "`unrecoverable_tool_error`, rule 7",
            ),
            Rule::ToolFailureLimit => r(
                "tool_results",
                "every execution failed; streaks.failed_tool_turns + 1 = max_consecutive_tool_failures",
                "steps, tool_failures, failed_tool_turns, streaks.failed_tool_turns",
                "Stop",
                "`tool_failures`, rule 7",
            ),
            Rule::RepeatLimit => r(
                "tool_results",
                "same calls and results as the previous turn; streaks.repeats + 1 = max_repeats",
                "steps, repeats, streaks.repeats",
                "Stop",
                "`no_progress` (tight loop)",
            ),
            Rule::VerdictAccepted => r(
                "verdict",
                "accepted",
                "steps, verifications",
                "Stop",
                "`verified`",
            ),
            Rule::VerdictRejected => r(
                "verdict",
                "rejected; verification_failures + 1 < max_verification_failures",
                "steps, model_calls, verifications, verification_failures",
                "Nudge(verifier), CallModel",
                "rules 3, 4",
            ),
            Rule::VerificationLimitForced => r(
                "verdict",
                "rejected; verification_failures + 1 = max; on_verification_limit = complete",
                "steps, verifications, verification_failures",
                "Stop",
                "`forced`, rule 3",
            ),
            Rule::VerificationLimitAbort => r(
                "verdict",
                "rejected; verification_failures + 1 = max; on_verification_limit = abort",
                "steps, verifications, verification_failures",
                "Stop",
                "`verification_loop`, rule 3",
            ),
            Rule::StepBudget => r(
                "any accepted input with a non-terminal target",
                "steps + 1 = max_steps",
                "steps",
                "Stop",
                "`max_steps`",
            ),
            Rule::TokenBudget => r(
                "any accepted input with a non-terminal target",
                "tokens >= token_budget",
                "steps",
                "Stop",
                "`token_budget`",
            ),
            Rule::ModelCallBudget => r(
                "any accepted input whose target calls the model",
                "model_calls = max_model_calls",
                "steps",
                "Stop",
                "`max_model_calls`",
            ),
            Rule::FinalAnswerCall => r(
                "any input that spends a budget",
                "final_answer_on_budget; not already finalizing",
                "steps, model_calls",
                "CallModel(final answer, no tools)",
                "budget stops",
            ),
            Rule::FinalAnswerDone => r(
                "turn(any), model_error(any)",
                "finalizing",
                "steps",
                "Stop (the budget's reason)",
                "budget stops",
            ),
            Rule::Cancelled => r("cancel", "-", "steps", "Stop", "`cancelled`"),
            Rule::DeadlinePassed => r("tick", "now >= deadline_ms", "steps", "Stop", "`deadline`"),
            Rule::ClockReading => r(
                "tick",
                "now < deadline_ms",
                "none (not a step)",
                "none",
                "-",
            ),
        }
    }
}
