//! The stop catalog: every way a run can stop, and every run-wide bound, in one place.
//!
//! Two tables, both checked at compile time:
//!
//! - [`ALL`], the table of limits: one [`Limit`] per run-wide bound, naming the policy field, the
//!   counter it bounds, how the counter meets the limit, the rule that fires and the stop reason.
//!   The machine's guards (`core.rs`, through `BUDGETS` and the `Limit` constants), the
//!   invariant checks (`invariants.rs`), [`crate::Policy::step_bound`], the guard column of
//!   `spec/machine.md` and the runtime's explanation (`terminus inspect`) read it.
//! - [`RULES`], one [`Row`] per [`Rule`] in [`Rule::ALL`] order: the rule's row of the transition
//!   table ([`Rule::spec`]: input, guard, citation) and, for a rule that ends the run, its
//!   [`StopPath`]: the outcome, the limit it enforces, the explanation template the runtime fills
//!   ([`Explain`]) and the budget warning at 80 % it gives first ([`WARNINGS`]).
//!
//! Adding a limit with its own stop reason is: the policy field (`policy.rs`), the reason
//! (`reason.rs`), the rule (`rule.rs`), and here a `Limit` constant with its arms, its place in
//! [`ALL`] (and `BUDGETS` for a run-wide budget), its row in [`RULES`] (and [`WARNINGS`] when it
//! warns). The compiler and the catalog's tests name every place that is missing.
//!
//! Per-tool bounds (`max_tool_failures`, `tool_budgets`) exclude one tool instead of stopping the
//! run; they live in the tool ledger (see [`crate::Exclusion`]).

use crate::policy::{OnVerificationLimit, Policy, PolicyError};
use crate::reason::{AbortReason, CompleteReason, Outcome};
use crate::rule::{Rule, RuleSpec};
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
    /// Whether `terminus inspect` lists it when the policy leaves it unset (a limit added after
    /// the explanation's format was fixed is listed only when set, so that older explanations
    /// keep their bytes).
    pub listed_unset: bool,
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
    ToolCalls,
}

/// The step budget: the `max_steps`-th step ends the run.
pub const STEPS: Limit = Limit {
    field: "max_steps",
    counter: "steps",
    meets: Meets::Reaches,
    rule: Rule::StepBudget,
    final_answer: true,
    listed_unset: true,
    which: Which::Steps,
};

/// The token budget: tokens spent reached it.
pub const TOKENS: Limit = Limit {
    field: "token_budget",
    counter: "tokens",
    meets: Meets::Crosses,
    rule: Rule::TokenBudget,
    final_answer: true,
    listed_unset: true,
    which: Which::Tokens,
};

/// The model-call budget (retries included).
pub const MODEL_CALLS: Limit = Limit {
    field: "max_model_calls",
    counter: "model_calls",
    meets: Meets::Spent,
    rule: Rule::ModelCallBudget,
    final_answer: true,
    listed_unset: true,
    which: Which::ModelCalls,
};

/// The tool-call budget: a tool turn whose calls would take the executions past it stops the run
/// before they run, so the count never passes the limit.
pub const TOOL_CALLS: Limit = Limit {
    field: "max_tool_calls",
    counter: "tool_calls",
    meets: Meets::Spent,
    rule: Rule::ToolCallBudget,
    final_answer: true,
    listed_unset: false,
    which: Which::ToolCalls,
};

/// No-op turns in a row.
pub const NO_OPS: Limit = Limit {
    field: "max_no_ops",
    counter: "streaks.no_ops",
    meets: Meets::Reaches,
    rule: Rule::NoOpLimit,
    final_answer: false,
    listed_unset: true,
    which: Which::NoOps,
};

/// Empty replies in a row.
pub const EMPTY_RESPONSES: Limit = Limit {
    field: "max_empty_responses",
    counter: "streaks.empty_responses",
    meets: Meets::Reaches,
    rule: Rule::EmptyLimit,
    final_answer: false,
    listed_unset: true,
    which: Which::EmptyResponses,
};

/// Retryable model errors in a row.
pub const MODEL_RETRIES: Limit = Limit {
    field: "max_model_retries",
    counter: "streaks.model_retries",
    meets: Meets::Exceeds,
    rule: Rule::ModelRetryLimit,
    final_answer: false,
    listed_unset: true,
    which: Which::ModelRetries,
};

/// Refused completion claims (each answered with a nudge).
pub const NUDGES: Limit = Limit {
    field: "max_nudges",
    counter: "nudges",
    meets: Meets::Spent,
    rule: Rule::ClaimRefusedLimit,
    final_answer: false,
    listed_unset: true,
    which: Which::Nudges,
};

/// Verifier rejections; what the last one does is the policy's `on_verification_limit`.
pub const VERIFICATION_FAILURES: Limit = Limit {
    field: "max_verification_failures",
    counter: "verification_failures",
    meets: Meets::Reaches,
    rule: Rule::VerificationLimitAbort,
    final_answer: false,
    listed_unset: true,
    which: Which::VerificationFailures,
};

/// Tool turns in a row in which every executed call failed.
pub const FAILED_TOOL_TURNS: Limit = Limit {
    field: "max_consecutive_tool_failures",
    counter: "streaks.failed_tool_turns",
    meets: Meets::Reaches,
    rule: Rule::ToolFailureLimit,
    final_answer: false,
    listed_unset: true,
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
    listed_unset: true,
    which: Which::Repeats,
};

/// Every row, in the order the machine checks the run-wide budgets first.
pub const ALL: [Limit; 11] = [
    STEPS,
    TOKENS,
    MODEL_CALLS,
    TOOL_CALLS,
    NO_OPS,
    EMPTY_RESPONSES,
    MODEL_RETRIES,
    NUDGES,
    VERIFICATION_FAILURES,
    FAILED_TOOL_TURNS,
    REPEATS,
];

/// The run-wide budgets a stopped run can go on from, raised (`terminus resume --raise`): each
/// stops a run before the step it pre-empts, and the machine keeps that step (see
/// [`crate::Machine::raise`]).
pub const RAISABLE: [&Limit; 5] = [&STEPS, &MODEL_CALLS, &TOKENS, &TOOL_CALLS, &NUDGES];

/// The raisable budget whose policy field is `field`.
pub fn raisable(field: &str) -> Option<&'static Limit> {
    RAISABLE.iter().copied().find(|l| l.field == field)
}

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
            Which::ToolCalls => return p.max_tool_calls.map(u64::from),
        }))
    }

    /// Sets the limit under `policy` to `to` (a raise: `Some` for an optional budget).
    pub fn set(&self, p: &mut Policy, to: u64) -> Result<(), PolicyError> {
        let small = || {
            u32::try_from(to).map_err(|_| PolicyError {
                field: self.field.to_owned(),
                problem: format!("{to} is over the largest value, {}", u32::MAX),
            })
        };
        match self.which {
            Which::Steps => p.max_steps = small()?,
            Which::Tokens => p.token_budget = Some(to),
            Which::ModelCalls => p.max_model_calls = small()?,
            Which::NoOps => p.max_no_ops = small()?,
            Which::EmptyResponses => p.max_empty_responses = small()?,
            Which::ModelRetries => p.max_model_retries = small()?,
            Which::Nudges => p.max_nudges = small()?,
            Which::VerificationFailures => p.max_verification_failures = small()?,
            Which::FailedToolTurns => p.max_consecutive_tool_failures = small()?,
            Which::Repeats => p.max_repeats = small()?,
            Which::ToolCalls => p.max_tool_calls = Some(small()?),
        }
        Ok(())
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
            Which::ToolCalls => s.tool_calls,
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
            Which::ToolCalls => AbortReason::ToolCallBudget,
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

/// What a step is about to spend of the run-wide budgets besides the step itself (checked
/// before it, in [`BUDGETS`] order).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Spend {
    /// Model calls the step issues (0 or 1).
    pub(crate) model_calls: u64,
    /// Tool calls the step executes.
    pub(crate) tool_calls: u64,
}

impl Spend {
    /// A step that issues no model call and runs no tool.
    pub(crate) const NOTHING: Spend = Spend {
        model_calls: 0,
        tool_calls: 0,
    };
    /// A step that calls the model.
    pub(crate) const MODEL_CALL: Spend = Spend {
        model_calls: 1,
        tool_calls: 0,
    };
}

/// The run-wide budgets, in the order the machine checks them before every non-terminal step:
/// the first that [`Limit::stops`] the step ends the run (or makes the one final-answer call).
pub(crate) const BUDGETS: [&Limit; 4] = [&STEPS, &TOKENS, &MODEL_CALLS, &TOOL_CALLS];

impl Limit {
    /// Whether this run-wide budget stops a step that spends `spend`, checked before the step.
    /// An occurrence limit is checked where its counter grows, never here.
    #[inline(always)]
    pub(crate) fn stops(&self, p: &Policy, s: &Stats, k: &Streaks, spend: Spend) -> bool {
        match self.which {
            Which::Steps => self.fires_at(p, u64::from(s.steps) + 1),
            Which::Tokens => self.fires(p, s, k),
            Which::ModelCalls => spend.model_calls > 0 && self.fires(p, s, k),
            Which::ToolCalls => {
                spend.tool_calls > 0
                    && self.fires_at(p, u64::from(s.tool_calls) + spend.tool_calls - 1)
            }
            Which::NoOps
            | Which::EmptyResponses
            | Which::ModelRetries
            | Which::Nudges
            | Which::VerificationFailures
            | Which::FailedToolTurns
            | Which::Repeats => false,
        }
    }

    /// Whether the counters agree that this limit ended a run: a run-wide budget was spent
    /// before the step it would have allowed, an occurrence limit is at its bound.
    pub(crate) fn ended(&self, p: &Policy, s: &Stats, k: &Streaks) -> bool {
        if self.which == Which::ToolCalls {
            // The turn it refused is not counted: any count within the budget agrees.
            return self.value(p).is_some_and(|limit| self.count(s, k) <= limit);
        }
        match self.meets {
            Meets::Spent | Meets::Crosses => self.fires(p, s, k),
            Meets::Reaches | Meets::Exceeds => self.bound(p).is_some_and(|b| self.count(s, k) == b),
        }
    }

    /// Whether the counters agree that the budget was spent before a final-answer call that is
    /// now awaited (that call and its step are already counted).
    pub(crate) fn spent_before_final(&self, p: &Policy, s: &Stats, k: &Streaks) -> bool {
        match self.which {
            Which::Steps | Which::Tokens => self.fires(p, s, k),
            Which::ModelCalls => self.value(p).is_some_and(|limit| self.count(s, k) > limit),
            Which::ToolCalls => self.value(p).is_some_and(|limit| self.count(s, k) <= limit),
            Which::NoOps
            | Which::EmptyResponses
            | Which::ModelRetries
            | Which::Nudges
            | Which::VerificationFailures
            | Which::FailedToolTurns
            | Which::Repeats => false,
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

impl Policy {
    /// The largest number of steps (accepted events) any run under this policy can take.
    ///
    /// Derivation (`spec/machine.md`, "Step bound"): every model turn or model error answers one
    /// model call; every tool-results or verdict event answers one turn; cancel and deadline end
    /// the run in one step. So `steps <= 2 * model_calls`, and the machine never issues more than
    /// `max_model_calls` calls, nor takes a non-terminal step at `max_steps`. With
    /// `final_answer_on_budget` one more call and one more step are allowed.
    pub fn step_bound(&self) -> u64 {
        let calls = MODEL_CALLS.value(self).unwrap_or(u64::MAX);
        let steps = STEPS.value(self).unwrap_or(u64::MAX);
        (2 * calls).min(steps) + u64::from(self.final_answer_on_budget)
    }
}

/// A guard of the transition table, in words; the bounds come from the table of limits.
#[derive(Debug, Clone, Copy)]
pub enum Guard {
    /// Words, as they are.
    Text(&'static str),
    /// `{before}{the limit's guard}{after}`: the limit fires.
    At(&'static str, &'static Limit, &'static str),
    /// `{before}{the limit's guard below it}`: the limit does not fire.
    Below(&'static str, &'static Limit),
}

impl Guard {
    /// The guard in words.
    pub fn text(&self) -> String {
        match self {
            Guard::Text(text) => (*text).to_owned(),
            Guard::At(before, limit, after) => format!("{before}{}{after}", limit.guard()),
            Guard::Below(before, limit) => format!("{before}{}", limit.below()),
        }
    }
}

/// Which explanation of `terminus inspect` (the runtime's `explain`) a stop path gets: each
/// variant is one paragraph template there, filled with the run's own names and numbers. Not
/// `#[non_exhaustive]`, so the runtime's `match` has no fallback: a new variant is a compile
/// error until it has its paragraph.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Explain {
    /// A run-wide budget was spent: "The run spent its {noun} budget ({field} ...)".
    Budget {
        /// What the budget counts, e.g. `model-call`.
        noun: &'static str,
    },
    /// The final-answer call's answer: explained as the budget it followed.
    AsTheBudget,
    /// The wall-clock deadline passed.
    Deadline,
    /// The host's kill switch.
    Cancelled,
    /// A window of tool turns repeated `max_repeats` times.
    Loop,
    /// `max_no_ops` no-op turns in a row.
    NoProgress,
    /// Claims refused with nudges until `max_nudges` were spent.
    Incomplete,
    /// The verifier rejected `max_verification_failures` claims; the policy aborts.
    VerificationLoop,
    /// The model asked only for excluded tools.
    AllExcluded,
    /// Failing tool turns in a row.
    ToolFailures,
    /// An unrecoverable tool error, the policy stops.
    Unrecoverable,
    /// Empty replies in a row.
    EmptyReplies,
    /// Retryable model errors past the retries.
    RetriesSpent,
    /// A non-retryable model error.
    ModelFatal,
    /// The context window overflowed.
    ContextExhausted,
    /// The verifier accepted a claim.
    Verified,
    /// `needs_more_work: false`, verification off.
    Explicit,
    /// A plain answer, verification off.
    Answered,
    /// The verifier rejected `max_verification_failures` claims; the policy completes.
    Forced,
}

/// How a rule ends the run.
#[derive(Debug, Clone, Copy)]
pub struct StopPath {
    /// The outcome (`None`: the spent budget's, for the final-answer call's answer).
    pub outcome: Option<Outcome>,
    /// The limit it enforces, if any.
    pub limit: Option<&'static Limit>,
    /// The explanation it gets.
    pub explain: Explain,
}

/// One rule's row of the catalog.
#[derive(Debug, Clone, Copy)]
pub struct Row {
    /// The rule.
    pub rule: Rule,
    /// The input that triggers it, in words.
    pub input: &'static str,
    /// Its guard.
    pub guard: Guard,
    /// The rule of `docs/design.md` (1-8) or stop reason it encodes.
    pub cites: &'static str,
    /// How it ends the run, for a rule that does.
    pub stop: Option<StopPath>,
}

const fn row(rule: Rule, input: &'static str, guard: Guard, cites: &'static str) -> Row {
    Row {
        rule,
        input,
        guard,
        cites,
        stop: None,
    }
}

const fn stop(
    rule: Rule,
    input: &'static str,
    guard: Guard,
    cites: &'static str,
    outcome: Option<Outcome>,
    limit: Option<&'static Limit>,
    explain: Explain,
) -> Row {
    Row {
        rule,
        input,
        guard,
        cites,
        stop: Some(StopPath {
            outcome,
            limit,
            explain,
        }),
    }
}

const fn aborted(reason: AbortReason) -> Option<Outcome> {
    Some(Outcome::Aborted(reason))
}

const fn complete(reason: CompleteReason) -> Option<Outcome> {
    Some(Outcome::Complete(reason))
}

const ANY_STEP: &str = "any accepted input with a non-terminal target";
const TURN_OR_ERROR: &str = "turn(any), model_error(any)";

/// One row per rule, in [`Rule::ALL`] order (checked at compile time).
pub const RULES: [Row; Rule::ALL.len()] = [
    row(
        Rule::ToolTurn,
        "turn(tools)",
        Guard::Text("some call's tool is not excluded"),
        "rule 1",
    ),
    stop(
        Rule::AllToolsExcluded,
        "turn(tools)",
        Guard::Text("every call's tool is excluded"),
        "`tool_failures`, rule 7",
        aborted(AbortReason::ToolFailures),
        None,
        Explain::AllExcluded,
    ),
    row(
        Rule::EmptyRetry,
        "turn(empty)",
        Guard::Below("", &EMPTY_RESPONSES),
        "rule 6",
    ),
    stop(
        Rule::EmptyLimit,
        "turn(empty)",
        Guard::At("", &EMPTY_RESPONSES, ""),
        "`empty_responses`, rule 6",
        aborted(AbortReason::EmptyResponses),
        Some(&EMPTY_RESPONSES),
        Explain::EmptyReplies,
    ),
    row(
        Rule::NoOpContinue,
        "turn(no-op)",
        Guard::Below("", &NO_OPS),
        "rule 2",
    ),
    stop(
        Rule::NoOpLimit,
        "turn(no-op)",
        Guard::At("", &NO_OPS, ""),
        "`no_progress`",
        aborted(AbortReason::NoProgress),
        Some(&NO_OPS),
        Explain::NoProgress,
    ),
    row(
        Rule::ClaimRefused,
        "turn(claim)",
        Guard::Below(
            "todos open or a `completion_requires` tool never succeeded; ",
            &NUDGES,
        ),
        "rule 5, rule 8",
    ),
    stop(
        Rule::ClaimRefusedLimit,
        "turn(claim)",
        Guard::At("work open; ", &NUDGES, ""),
        "`incomplete`, rule 5",
        aborted(AbortReason::Incomplete),
        Some(&NUDGES),
        Explain::Incomplete,
    ),
    row(
        Rule::ClaimVerify,
        "turn(claim)",
        Guard::Text("nothing open; verify_completion or output_schema"),
        "rules 2, 4",
    ),
    stop(
        Rule::ClaimExplicit,
        "turn(claim)",
        Guard::Text("nothing open; verification off; needs_more_work = false"),
        "`explicit`, rule 2",
        complete(CompleteReason::Explicit),
        None,
        Explain::Explicit,
    ),
    stop(
        Rule::ClaimAnswered,
        "turn(claim)",
        Guard::Text("nothing open; verification off; needs_more_work absent"),
        "`answered`, rule 2",
        complete(CompleteReason::Answered),
        None,
        Explain::Answered,
    ),
    row(
        Rule::ModelRetry,
        "model_error(retryable)",
        Guard::Below("", &MODEL_RETRIES),
        "rule 6",
    ),
    stop(
        Rule::ModelRetryLimit,
        "model_error(retryable)",
        Guard::At("", &MODEL_RETRIES, ""),
        "`model_error`",
        aborted(AbortReason::ModelError),
        Some(&MODEL_RETRIES),
        Explain::RetriesSpent,
    ),
    stop(
        Rule::ModelFatal,
        "model_error(fatal)",
        Guard::Text("-"),
        "`model_error`",
        aborted(AbortReason::ModelError),
        None,
        Explain::ModelFatal,
    ),
    stop(
        Rule::ContextOverflow,
        "model_error(context_overflow)",
        Guard::Text("-"),
        "`context_exhausted`",
        aborted(AbortReason::ContextExhausted),
        None,
        Explain::ContextExhausted,
    ),
    row(
        Rule::ToolResultsBack,
        "tool_results",
        Guard::Text("no stop guard below fires"),
        "rules 1, 7, 8",
    ),
    stop(
        Rule::UnrecoverableStop,
        "tool_results",
        Guard::Text("an unrecoverable error class; on_unrecoverable_tool_error = stop"),
        "`unrecoverable_tool_error`, rule 7",
        aborted(AbortReason::UnrecoverableToolError),
        None,
        Explain::Unrecoverable,
    ),
    stop(
        Rule::ToolFailureLimit,
        "tool_results",
        Guard::At("every execution failed; ", &FAILED_TOOL_TURNS, ""),
        "`tool_failures`, rule 7",
        aborted(AbortReason::ToolFailures),
        Some(&FAILED_TOOL_TURNS),
        Explain::ToolFailures,
    ),
    stop(
        Rule::RepeatLimit,
        "tool_results",
        Guard::At(
            "every call succeeded, and the last k tool turns (k <= max_loop_period) repeat the k before them, same calls and results; ",
            &REPEATS,
            "",
        ),
        "`no_progress` (a loop)",
        aborted(AbortReason::NoProgress),
        Some(&REPEATS),
        Explain::Loop,
    ),
    stop(
        Rule::VerdictAccepted,
        "verdict",
        Guard::Text("accepted"),
        "`verified`",
        complete(CompleteReason::Verified),
        None,
        Explain::Verified,
    ),
    row(
        Rule::VerdictRejected,
        "verdict",
        Guard::Below("rejected; ", &VERIFICATION_FAILURES),
        "rules 3, 4",
    ),
    stop(
        Rule::VerificationLimitForced,
        "verdict",
        Guard::At(
            "rejected; ",
            &VERIFICATION_FAILURES,
            "; on_verification_limit = complete",
        ),
        "`forced`, rule 3",
        complete(CompleteReason::Forced),
        Some(&VERIFICATION_FAILURES),
        Explain::Forced,
    ),
    stop(
        Rule::VerificationLimitAbort,
        "verdict",
        Guard::At(
            "rejected; ",
            &VERIFICATION_FAILURES,
            "; on_verification_limit = abort",
        ),
        "`verification_loop`, rule 3",
        aborted(AbortReason::VerificationLoop),
        Some(&VERIFICATION_FAILURES),
        Explain::VerificationLoop,
    ),
    stop(
        Rule::StepBudget,
        ANY_STEP,
        Guard::At("", &STEPS, ""),
        "`max_steps`",
        aborted(AbortReason::MaxSteps),
        Some(&STEPS),
        Explain::Budget { noun: "step" },
    ),
    stop(
        Rule::TokenBudget,
        ANY_STEP,
        Guard::At("", &TOKENS, ""),
        "`token_budget`",
        aborted(AbortReason::TokenBudget),
        Some(&TOKENS),
        Explain::Budget { noun: "token" },
    ),
    stop(
        Rule::ModelCallBudget,
        "any accepted input whose target calls the model",
        Guard::At("", &MODEL_CALLS, ""),
        "`max_model_calls`",
        aborted(AbortReason::MaxModelCalls),
        Some(&MODEL_CALLS),
        Explain::Budget { noun: "model-call" },
    ),
    stop(
        Rule::ToolCallBudget,
        "turn(tools)",
        Guard::Text("tool_calls + the turn's runnable calls > max_tool_calls"),
        "`tool_call_budget`",
        aborted(AbortReason::ToolCallBudget),
        Some(&TOOL_CALLS),
        Explain::Budget { noun: "tool-call" },
    ),
    row(
        Rule::FinalAnswerCall,
        "any input that spends a budget",
        Guard::Text("a budget above is spent; final_answer_on_budget"),
        "budget stops",
    ),
    stop(
        Rule::FinalAnswerDone,
        TURN_OR_ERROR,
        Guard::Text("waiting for the final answer"),
        "budget stops",
        None,
        None,
        Explain::AsTheBudget,
    ),
    stop(
        Rule::Cancelled,
        "cancel",
        Guard::Text("-"),
        "`cancelled`",
        aborted(AbortReason::Cancelled),
        None,
        Explain::Cancelled,
    ),
    stop(
        Rule::DeadlinePassed,
        "tick",
        Guard::Text("now >= deadline_ms"),
        "`deadline`",
        aborted(AbortReason::Deadline),
        None,
        Explain::Deadline,
    ),
    row(
        Rule::ClockReading,
        "tick",
        Guard::Text("now < deadline_ms"),
        "-",
    ),
];

// Every rule has its row, at its place: a rule added to `Rule::ALL` without a row here, or a
// row out of order, fails the build.
const _: () = {
    let mut i = 0;
    while i < RULES.len() {
        assert!(
            RULES[i].rule as usize == i,
            "RULES is out of Rule::ALL order"
        );
        assert!(
            Rule::ALL[i] as usize == i,
            "Rule::ALL is out of declaration order"
        );
        i += 1;
    }
};

impl Rule {
    /// The rule's row of the catalog.
    pub const fn row(self) -> &'static Row {
        &RULES[self as usize]
    }

    /// The rule's row of the transition table.
    pub fn spec(self) -> RuleSpec {
        let row = self.row();
        RuleSpec {
            input: row.input,
            guard: row.guard.text(),
            cites: row.cites,
        }
    }
}

/// How the run that ended by `rule` with `outcome` stopped: the rule's stop path, or for the
/// final-answer call's answer the path of the budget that was spent.
pub fn stop_path(rule: Rule, outcome: Outcome) -> Option<&'static StopPath> {
    if rule == Rule::FinalAnswerDone {
        return ALL
            .iter()
            .find(|l| l.final_answer && l.outcome(&Policy::default()) == outcome)
            .and_then(|l| l.rule.row().stop.as_ref());
    }
    rule.row().stop.as_ref()
}

/// A budget the runtime warns about once it passes 80 % (`terminus_runtime::Budget`), in the
/// order the warnings are checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Warning {
    /// Its name in reports, spans and metrics (`steps`, `model_calls`, ...).
    pub name: &'static str,
    /// The rule that stops the run when it is spent.
    pub rule: Rule,
}

/// Every budget that warns at 80 %, in the order the warnings are checked.
pub const WARNINGS: [Warning; 5] = [
    Warning {
        name: "steps",
        rule: Rule::StepBudget,
    },
    Warning {
        name: "model_calls",
        rule: Rule::ModelCallBudget,
    },
    Warning {
        name: "tokens",
        rule: Rule::TokenBudget,
    },
    Warning {
        name: "deadline",
        rule: Rule::DeadlinePassed,
    },
    Warning {
        name: "tool_calls",
        rule: Rule::ToolCallBudget,
    },
];

impl Warning {
    /// The policy field that sets it.
    pub fn field(&self) -> &'static str {
        match self.limit() {
            Some(limit) => limit.field,
            None => "deadline_ms",
        }
    }

    /// The limit of the counters it watches (`None`: the wall-clock deadline).
    pub fn limit(&self) -> Option<&'static Limit> {
        self.rule.row().stop.and_then(|s| s.limit)
    }

    /// What is spent and its limit, if the policy sets one; `elapsed_ms` is the wall-clock
    /// time since the start, which the kernel does not keep.
    pub fn spent(&self, policy: &Policy, stats: &Stats, elapsed_ms: u64) -> Option<(u64, u64)> {
        match self.limit() {
            Some(limit) => limit
                .value(policy)
                .map(|max| (limit.count(stats, &Streaks::default()), max)),
            None => policy.deadline_ms.map(|max| (elapsed_ms, max)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::phase::Phase;

    #[test]
    fn every_stop_reason_has_a_stop_path() {
        let outcomes: Vec<Outcome> = RULES
            .iter()
            .filter_map(|r| r.stop.and_then(|s| s.outcome))
            .collect();
        for reason in AbortReason::ALL {
            assert!(
                outcomes.contains(&Outcome::Aborted(reason)),
                "no stop path ends `{}`",
                reason.as_str()
            );
        }
        for reason in CompleteReason::ALL {
            assert!(
                outcomes.contains(&Outcome::Complete(reason)),
                "no stop path ends `{}`",
                reason.as_str()
            );
        }
    }

    #[test]
    fn every_stop_path_goes_to_a_terminal_state_and_only_those() {
        for row in RULES {
            let ends = row
                .rule
                .transitions()
                .iter()
                .any(|(_, to)| to.is_terminal());
            assert_eq!(ends, row.stop.is_some(), "{}", row.rule.name());
            let terminal = [Phase::Complete, Phase::Aborted];
            if let Some(StopPath {
                outcome: Some(outcome),
                ..
            }) = row.stop
            {
                let to = if outcome.is_complete() {
                    terminal[0]
                } else {
                    terminal[1]
                };
                assert!(
                    row.rule.transitions().iter().all(|(_, t)| *t == to),
                    "{}",
                    row.rule.name()
                );
            }
        }
    }

    #[test]
    fn every_limit_is_the_limit_of_its_rules_stop_path() {
        for limit in &ALL {
            let path = limit.rule.row().stop.and_then(|s| s.limit);
            assert_eq!(path.map(|l| l.field), Some(limit.field), "{}", limit.field);
        }
        for budget in BUDGETS {
            assert!(ALL.iter().any(|l| l.field == budget.field));
        }
    }

    #[test]
    fn the_final_answer_budgets_are_the_budget_reasons() {
        let p = Policy::default();
        for reason in AbortReason::ALL {
            let path = stop_path(Rule::FinalAnswerDone, Outcome::Aborted(reason));
            assert_eq!(path.is_some(), reason.is_budget(), "{}", reason.as_str());
            if let Some(path) = path {
                assert!(matches!(path.explain, Explain::Budget { .. }));
                assert_eq!(
                    path.limit.map(|l| l.outcome(&p)),
                    Some(Outcome::Aborted(reason))
                );
            }
        }
    }

    #[test]
    fn every_warning_names_a_budget_of_the_policy() {
        let p = Policy {
            deadline_ms: Some(10),
            token_budget: Some(10),
            max_tool_calls: Some(10),
            ..Policy::default()
        };
        for w in WARNINGS {
            assert!(w.rule.row().stop.is_some(), "{}", w.name);
            assert!(w.spent(&p, &Stats::default(), 1).is_some(), "{}", w.name);
            assert!(!w.field().is_empty());
        }
    }
}
