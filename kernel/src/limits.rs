//! The table of limits: every run-wide bound in one place.
//!
//! Each row names the policy field, the counter it bounds, how the counter meets the limit, the
//! rule that fires and the stop reason. The machine's guards (`core.rs`), the invariant checks
//! (`invariants.rs`), [`crate::Policy::step_bound`] and the guard column of
//! `spec/machine.md` all read this table, so adding a limit is a policy field, a row here, the
//! counter it bounds, and a test that reaches it.
//!
//! Per-tool bounds (`max_tool_failures`, `tool_budgets`) exclude one tool instead of stopping the
//! run; they live in the tool ledger (see [`crate::Exclusion`]).

use crate::policy::{OnVerificationLimit, Policy};
use crate::reason::{AbortReason, CompleteReason, Outcome};
use crate::rule::Rule;
use crate::stats::{Stats, Streaks};

/// How a counter meets its limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Meets {
    /// The N-th occurrence stops the run: it fires when the counter reaches the limit, so a live
    /// run is always below it.
    Reaches,
    /// N are allowed and one more stops the run: a live run is at most at the limit.
    Exceeds,
    /// A budget of N that is spent: it fires when one more is wanted at the limit, so a live run
    /// is at most at the limit.
    Spent,
    /// Like [`Meets::Reaches`], but the counter may jump past the limit in one event (a turn may
    /// report any number of tokens), so it has no upper bound.
    Crosses,
}

/// One row of the table.
#[derive(Debug, Clone, Copy)]
pub struct Limit {
    /// The policy field that sets the limit.
    pub field: &'static str,
    /// The counter it bounds, as `spec/machine.md` names it.
    pub counter: &'static str,
    /// How the counter meets it.
    pub meets: Meets,
    /// The rule that fires.
    pub rule: Rule,
    /// Whether spending it allows the one final-answer call of `final_answer_on_budget`.
    pub final_answer: bool,
    /// Which row it is (selects the policy field, the counter and the reason; a `match` on a
    /// constant, so the guards compile to plain comparisons).
    which: Which,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Which {
    Steps,
    Tokens,
    ModelCalls,
    NoOps,
    EmptyResponses,
    ModelRetries,
    Nudges,
    VerificationFailures,
    FailedToolTurns,
    Repeats,
}

/// The step budget: the `max_steps`-th step ends the run.
pub const STEPS: Limit = Limit {
    field: "max_steps",
    counter: "steps",
    meets: Meets::Reaches,
    rule: Rule::StepBudget,
    final_answer: true,
    which: Which::Steps,
};

/// The token budget: tokens spent reached it.
pub const TOKENS: Limit = Limit {
    field: "token_budget",
    counter: "tokens",
    meets: Meets::Crosses,
    rule: Rule::TokenBudget,
    final_answer: true,
    which: Which::Tokens,
};

/// The model-call budget (retries included).
pub const MODEL_CALLS: Limit = Limit {
    field: "max_model_calls",
    counter: "model_calls",
    meets: Meets::Spent,
    rule: Rule::ModelCallBudget,
    final_answer: true,
    which: Which::ModelCalls,
};

/// No-op turns in a row.
pub const NO_OPS: Limit = Limit {
    field: "max_no_ops",
    counter: "streaks.no_ops",
    meets: Meets::Reaches,
    rule: Rule::NoOpLimit,
    final_answer: false,
    which: Which::NoOps,
};

/// Empty replies in a row.
pub const EMPTY_RESPONSES: Limit = Limit {
    field: "max_empty_responses",
    counter: "streaks.empty_responses",
    meets: Meets::Reaches,
    rule: Rule::EmptyLimit,
    final_answer: false,
    which: Which::EmptyResponses,
};

/// Retryable model errors in a row.
pub const MODEL_RETRIES: Limit = Limit {
    field: "max_model_retries",
    counter: "streaks.model_retries",
    meets: Meets::Exceeds,
    rule: Rule::ModelRetryLimit,
    final_answer: false,
    which: Which::ModelRetries,
};

/// Refused completion claims (each answered with a nudge).
pub const NUDGES: Limit = Limit {
    field: "max_nudges",
    counter: "nudges",
    meets: Meets::Spent,
    rule: Rule::ClaimRefusedLimit,
    final_answer: false,
    which: Which::Nudges,
};

/// Verifier rejections; what the last one does is the policy's `on_verification_limit`.
pub const VERIFICATION_FAILURES: Limit = Limit {
    field: "max_verification_failures",
    counter: "verification_failures",
    meets: Meets::Reaches,
    rule: Rule::VerificationLimitAbort,
    final_answer: false,
    which: Which::VerificationFailures,
};

/// Tool turns in a row in which every executed call failed.
pub const FAILED_TOOL_TURNS: Limit = Limit {
    field: "max_consecutive_tool_failures",
    counter: "streaks.failed_tool_turns",
    meets: Meets::Reaches,
    rule: Rule::ToolFailureLimit,
    final_answer: false,
    which: Which::FailedToolTurns,
};

/// Occurrences in a row of the same window of successful tool turns (any period up to
/// `max_loop_period`).
pub const REPEATS: Limit = Limit {
    field: "max_repeats",
    counter: "streaks.repeats",
    meets: Meets::Reaches,
    rule: Rule::RepeatLimit,
    final_answer: false,
    which: Which::Repeats,
};

/// Every row, in the order the machine checks the run-wide budgets first.
pub const ALL: [Limit; 10] = [
    STEPS,
    TOKENS,
    MODEL_CALLS,
    NO_OPS,
    EMPTY_RESPONSES,
    MODEL_RETRIES,
    NUDGES,
    VERIFICATION_FAILURES,
    FAILED_TOOL_TURNS,
    REPEATS,
];

impl Limit {
    /// The limit under `policy` (`None`: unlimited).
    #[inline]
    pub fn value(&self, p: &Policy) -> Option<u64> {
        Some(u64::from(match self.which {
            Which::Steps => p.max_steps,
            Which::Tokens => return p.token_budget,
            Which::ModelCalls => p.max_model_calls,
            Which::NoOps => p.max_no_ops,
            Which::EmptyResponses => p.max_empty_responses,
            Which::ModelRetries => p.max_model_retries,
            Which::Nudges => p.max_nudges,
            Which::VerificationFailures => p.max_verification_failures,
            Which::FailedToolTurns => p.max_consecutive_tool_failures,
            Which::Repeats => p.max_repeats,
        }))
    }

    /// The counter's value.
    #[inline]
    pub fn count(&self, s: &Stats, k: &Streaks) -> u64 {
        u64::from(match self.which {
            Which::Steps => s.steps,
            Which::Tokens => return s.tokens(),
            Which::ModelCalls => s.model_calls,
            Which::NoOps => k.no_ops,
            Which::EmptyResponses => k.empty_responses,
            Which::ModelRetries => k.model_retries,
            Which::Nudges => s.nudges,
            Which::VerificationFailures => s.verification_failures,
            Which::FailedToolTurns => k.failed_tool_turns,
            Which::Repeats => k.repeats,
        })
    }

    /// How the run ends when it fires.
    pub fn outcome(&self, p: &Policy) -> Outcome {
        Outcome::Aborted(match self.which {
            Which::Steps => AbortReason::MaxSteps,
            Which::Tokens => AbortReason::TokenBudget,
            Which::ModelCalls => AbortReason::MaxModelCalls,
            Which::NoOps | Which::Repeats => AbortReason::NoProgress,
            Which::EmptyResponses => AbortReason::EmptyResponses,
            Which::ModelRetries => AbortReason::ModelError,
            Which::Nudges => AbortReason::Incomplete,
            Which::VerificationFailures => match p.on_verification_limit {
                OnVerificationLimit::Abort => AbortReason::VerificationLoop,
                OnVerificationLimit::Complete => {
                    return Outcome::Complete(CompleteReason::Forced);
                }
            },
            Which::FailedToolTurns => AbortReason::ToolFailures,
        })
    }

    /// Whether the limit fires for the counter value `count` (for a [`Meets::Spent`] budget:
    /// whether one more may not be spent).
    #[inline]
    pub fn fires_at(&self, policy: &Policy, count: u64) -> bool {
        self.value(policy).is_some_and(|limit| match self.meets {
            Meets::Reaches | Meets::Spent | Meets::Crosses => count >= limit,
            Meets::Exceeds => count > limit,
        })
    }

    /// Whether the limit fires for the counters as they are.
    #[inline]
    pub fn fires(&self, policy: &Policy, stats: &Stats, streaks: &Streaks) -> bool {
        self.fires_at(policy, self.count(stats, streaks))
    }

    /// The largest value the counter may have while the run is live. A final-answer call lets a
    /// run-wide budget be passed by the one call (and the one step) it takes.
    pub fn live_max(&self, policy: &Policy, finalizing: bool) -> Option<u64> {
        let limit = self.value(policy)?;
        if finalizing && self.meets == Meets::Crosses {
            return None; // the budget was crossed by any amount before the final-answer call
        }
        let max = match self.meets {
            Meets::Reaches | Meets::Crosses => limit.checked_sub(1)?,
            Meets::Exceeds | Meets::Spent => limit,
        };
        Some(if finalizing && self.final_answer {
            max.saturating_add(1)
        } else {
            max
        })
    }

    /// The largest value the counter may ever have, the final step included (`None` when the
    /// counter can pass its limit, as tokens can: one turn may report any number).
    pub fn bound(&self, policy: &Policy) -> Option<u64> {
        let limit = self.value(policy)?;
        let extra = u64::from(self.final_answer && policy.final_answer_on_budget);
        match self.meets {
            Meets::Reaches | Meets::Spent => Some(limit + extra),
            Meets::Exceeds => Some(limit + 1),
            Meets::Crosses => None,
        }
    }

    /// The guard under which the limit fires, in words for `spec/machine.md`.
    pub fn guard(&self) -> String {
        let (counter, field) = (self.counter, self.field);
        match self.meets {
            Meets::Reaches => format!("{counter} + 1 = {field}"),
            Meets::Crosses => format!("{counter} >= {field}"),
            Meets::Exceeds => format!("{counter} + 1 > {field}"),
            Meets::Spent => format!("{counter} = {field}"),
        }
    }

    /// The guard under which the limit does not fire, in words.
    pub fn below(&self) -> String {
        let (counter, field) = (self.counter, self.field);
        match self.meets {
            Meets::Reaches => format!("{counter} + 1 < {field}"),
            Meets::Crosses => format!("{counter} < {field}"),
            Meets::Exceeds => format!("{counter} + 1 <= {field}"),
            Meets::Spent => format!("{counter} < {field}"),
        }
    }
}

/// The row whose rule is `rule`, if the rule is a limit's.
pub fn of_rule(rule: Rule) -> Option<&'static Limit> {
    match rule {
        Rule::VerificationLimitForced => Some(&VERIFICATION_FAILURES),
        _ => ALL.iter().find(|l| l.rule == rule),
    }
}

/// The largest number of steps any run under `policy` can take: every model turn or error
/// answers one model call and every results or verdict event answers one turn, so
/// `steps <= 2 * model_calls`, and neither budget can be passed but by the final-answer call.
pub(crate) fn step_bound(policy: &Policy) -> u64 {
    let calls = MODEL_CALLS.value(policy).unwrap_or(u64::MAX);
    let steps = STEPS.value(policy).unwrap_or(u64::MAX);
    (2 * calls).min(steps) + u64::from(policy.final_answer_on_budget)
}
