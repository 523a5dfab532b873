//! The stop catalog: every way a run can stop, and every bound, in one place.
//!
//! Three tables, checked at compile time:
//!
//! - [`ALL`], the table of run-wide limits: one [`Limit`] row per bound, holding everything about
//!   it as data or functions: the policy field, the counter it bounds and how the counter meets
//!   the limit, when the machine checks it, the rule that fires and its row of the transition
//!   table, the stop reason, the explanation, whether a raise may lift it, the warning it gives
//!   at 80 % and the least value a policy may set ([`Limit::min`], which
//!   [`crate::Policy::validate`] reads: no list of minimums elsewhere). Every list of limits is derived from the rows: the budgets checked before each step
//!   ([`budgets`]), the raisable ones ([`RAISABLE`]), the warnings ([`WARNINGS`]) and the limits'
//!   rows of [`RULES`]. The budgets checked before each step are also the ones
//!   `policy.budget_scale` may scale ([`scalable`]). The machine's guards (`core.rs`), the invariant checks
//!   (`invariants.rs`), [`crate::Policy::step_bound`], the guard column of `spec/machine.md` and
//!   the runtime's explanation (`terminus inspect`) read them.
//! - [`TOOL_BOUNDS`], the per-tool bounds of `tool_budgets` (kept in `tool_budget.rs`, beside
//!   the budget they bound, and re-exported here): one [`ToolBound`] row each (its field, the
//!   calls it counts, whether a reset lifts it), and [`TIER_BLOCK_AT`], a tier's block. A call
//!   at a bound is refused with the bound's text and the run goes on (see `docs/design.md`,
//!   "Budget blocks" and "Tool budget tiers").
//! - [`RULES`], one [`Row`] per [`Rule`] in [`Rule::ALL`] order: the rule's row of the transition
//!   table ([`Rule::spec`]: input, guard, citation) and, for a rule that ends the run, its
//!   [`StopPath`]. The rows of the limits' rules come from [`ALL`].
//!
//! Adding a run-wide limit is its row here (in [`ALL`]), its policy field (`policy.rs`) and, for
//! a rule of its own, the rule (`rule.rs`) and, for a stop reason of its own, the reason
//! (`reason.rs`): the kernel's code of `max_output_tokens` is those four files. The suites then
//! ask for what shows it: a `reaches_REASON` test, a scenario that ends with it (conformance,
//! `terminus inspect`), a policy of the model check that reaches its rule, and the generated
//! `spec/machine.md`. Adding a per-tool bound is its row in [`TOOL_BOUNDS`] and its field of
//! [`crate::ToolBudget`] (both in `tool_budget.rs`). The compiler and the catalog's tests name
//! every place that is missing.
//!
//! The policy (`policy.rs`) is data; the catalog reads it, and the scale (`scale.rs`) and the
//! checks (`validate.rs`) read both: no module imports itself through others
//! (`kernel/tests/modules.rs`).
//!
//! `max_tool_failures` excludes one tool instead of stopping the run; it lives in the tool ledger
//! (see [`crate::Exclusion`]).

use crate::policy::{OnVerificationLimit, Policy, PolicyError};
use crate::reason::{AbortReason, CompleteReason, Outcome};
use crate::rule::{Rule, RuleSpec};
use crate::stats::{Stats, Streaks};
pub use crate::tool_budget::{
    BLOCK_AT, HARD_BLOCK_AT, TIER_BLOCK_AT, TOOL_BOUNDS, TierBound, ToolBound,
};

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

/// What a step spends of a run-wide budget, which the machine checks before every step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Spends {
    /// One of it a step (steps).
    Step,
    /// Nothing known beforehand: the counter grows with what the model reports (tokens).
    Reported,
    /// The model calls the step issues (0 or 1).
    ModelCalls,
    /// The tool calls the step executes (any number).
    ToolCalls,
}

impl Spends {
    /// How much a step that spends `spend` takes of it.
    #[inline(always)]
    const fn of(self, spend: Spend) -> u64 {
        match self {
            Spends::Step => 1,
            Spends::Reported => 0,
            Spends::ModelCalls => spend.model_calls,
            Spends::ToolCalls => spend.tool_calls,
        }
    }
}

/// When the machine checks a limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Checked {
    /// Before every non-terminal step, against what the step is about to spend (a run-wide
    /// budget, [`budgets`]): the step it would allow is pre-empted.
    Before(Spends),
    /// Where its counter grows (an occurrence limit).
    Where,
}

/// Where a limit's policy field is kept.
#[derive(Clone, Copy)]
pub enum Slot {
    /// A required `u32`.
    Count(fn(&Policy) -> &u32, fn(&mut Policy) -> &mut u32),
    /// An optional `u32` (`None`: unlimited).
    MaybeCount(
        fn(&Policy) -> &Option<u32>,
        fn(&mut Policy) -> &mut Option<u32>,
    ),
    /// An optional `u64` (`None`: unlimited).
    MaybeAmount(
        fn(&Policy) -> &Option<u64>,
        fn(&mut Policy) -> &mut Option<u64>,
    ),
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Slot::Count(..) => "Count",
            Slot::MaybeCount(..) => "MaybeCount",
            Slot::MaybeAmount(..) => "MaybeAmount",
        })
    }
}

/// The warning a budget gives once it passes 80 % (`terminus_runtime::Budget`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Warns {
    /// Its name in reports, spans and metrics (`steps`, `model_calls`, ...).
    pub name: &'static str,
    /// Its place in the order the warnings are checked, which is also its bit in the set of
    /// warnings given that a host saves with a run: never reused, never moved.
    pub place: u8,
}

/// When `terminus inspect` lists a limit among a run's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Listed {
    /// Always.
    Always,
    /// When the policy sets it.
    WhenSet,
    /// When its counter is above 0.
    WhenCounted,
}

/// How a limit's rule ends the run, and its row of the transition table.
#[derive(Debug, Clone, Copy)]
pub struct Stops {
    /// The input that triggers the rule, in words.
    pub input: &'static str,
    /// The words before and after the limit's guard.
    pub guard: (&'static str, &'static str),
    /// The rule of `docs/design.md` or the stop reason it encodes.
    pub cites: &'static str,
    /// The explanation it gets.
    pub explain: Explain,
}

/// One row of the table of run-wide limits.
#[derive(Debug, Clone, Copy)]
pub struct Limit {
    /// The policy field that sets the limit.
    pub field: &'static str,
    /// The counter it bounds, as `spec/machine.md` names it.
    pub counter: &'static str,
    /// How the counter meets it.
    pub meets: Meets,
    /// When the machine checks it.
    pub checked: Checked,
    /// The rule that fires.
    pub rule: Rule,
    /// How the rule ends the run, and its row of the transition table.
    pub stops: Stops,
    /// Whether spending it allows the one final-answer call of `final_answer_on_budget`.
    pub final_answer: bool,
    /// Whether `terminus resume --raise` can lift it: a stopped run goes on under a higher
    /// limit (see [`crate::Machine::raise`]).
    pub raisable: bool,
    /// The warning it gives at 80 %, if it gives one.
    pub warns: Option<Warns>,
    /// When `terminus inspect` lists it (a limit added after the explanation's format was fixed
    /// is listed only when set, or only when it counted something, so that older explanations
    /// keep their bytes).
    pub listed: Listed,
    /// Where the policy keeps it.
    pub slot: Slot,
    /// The smallest value [`Policy::validate`] accepts: 1 for a limit whose N-th occurrence
    /// stops the run, 2 where the first occurrence cannot be one yet (a repeat, an identical
    /// poll), 0 where none at all is a meaningful limit (no nudge, no retry).
    pub min: u64,
    /// The counter's value.
    pub counted: fn(&Stats, &Streaks) -> u64,
    /// How the run ends when it fires.
    pub ends: Ends,
}

/// How the run ends when a limit fires.
#[derive(Clone, Copy)]
pub enum Ends {
    /// Aborted with this reason.
    Aborted(AbortReason),
    /// As the policy says (`on_verification_limit`).
    ByPolicy {
        /// The outcome under the default policy.
        default: Outcome,
        /// The outcome under a policy.
        under: fn(&Policy) -> Outcome,
    },
}

impl std::fmt::Debug for Ends {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ends::Aborted(reason) => write!(f, "Aborted({})", reason.as_str()),
            Ends::ByPolicy { default, .. } => write!(f, "ByPolicy({default:?})"),
        }
    }
}

/// A required `u32` field of the policy, as a [`Slot`].
macro_rules! count {
    ($field:ident) => {
        Slot::Count(|p| &p.$field, |p| &mut p.$field)
    };
}

/// An optional field of the policy, as a [`Slot`].
macro_rules! maybe {
    ($kind:ident $field:ident) => {
        Slot::$kind(|p| &p.$field, |p| &mut p.$field)
    };
}

const ANY_STEP: &str = "any accepted input with a non-terminal target";
const TURN_OR_ERROR: &str = "turn(any), model_error(any)";

/// The step budget: the `max_steps`-th step ends the run.
pub const STEPS: Limit = Limit {
    field: "max_steps",
    counter: "steps",
    meets: Meets::Reaches,
    checked: Checked::Before(Spends::Step),
    rule: Rule::StepBudget,
    stops: Stops {
        input: ANY_STEP,
        guard: ("", ""),
        cites: "`max_steps`",
        explain: Explain::Budget { noun: "step" },
    },
    final_answer: true,
    raisable: true,
    warns: Some(Warns {
        name: "steps",
        place: 0,
    }),
    listed: Listed::Always,
    slot: count!(max_steps),
    min: 1,
    counted: |s, _| u64::from(s.steps),
    ends: Ends::Aborted(AbortReason::MaxSteps),
};

/// The token budget: tokens spent reached it.
pub const TOKENS: Limit = Limit {
    field: "token_budget",
    counter: "tokens",
    meets: Meets::Crosses,
    checked: Checked::Before(Spends::Reported),
    rule: Rule::TokenBudget,
    stops: Stops {
        input: ANY_STEP,
        guard: ("", ""),
        cites: "`token_budget`",
        explain: Explain::Budget { noun: "token" },
    },
    final_answer: true,
    raisable: true,
    warns: Some(Warns {
        name: "tokens",
        place: 2,
    }),
    listed: Listed::Always,
    slot: maybe!(MaybeAmount token_budget),
    min: 0,
    counted: |s, _| s.tokens(),
    ends: Ends::Aborted(AbortReason::TokenBudget),
};

/// The model-call budget (retries included).
pub const MODEL_CALLS: Limit = Limit {
    field: "max_model_calls",
    counter: "model_calls",
    meets: Meets::Spent,
    checked: Checked::Before(Spends::ModelCalls),
    rule: Rule::ModelCallBudget,
    stops: Stops {
        input: "any accepted input whose target calls the model",
        guard: ("", ""),
        cites: "`max_model_calls`",
        explain: Explain::Budget { noun: "model-call" },
    },
    final_answer: true,
    raisable: true,
    warns: Some(Warns {
        name: "model_calls",
        place: 1,
    }),
    listed: Listed::Always,
    slot: count!(max_model_calls),
    min: 1,
    counted: |s, _| u64::from(s.model_calls),
    ends: Ends::Aborted(AbortReason::MaxModelCalls),
};

/// The tool-call budget: a tool turn whose calls would take the executions past it stops the run
/// before they run, so the count never passes the limit.
pub const TOOL_CALLS: Limit = Limit {
    field: "max_tool_calls",
    counter: "tool_calls",
    meets: Meets::Spent,
    checked: Checked::Before(Spends::ToolCalls),
    rule: Rule::ToolCallBudget,
    stops: Stops {
        input: "turn(tools)",
        guard: ("", ""),
        cites: "`tool_call_budget`",
        explain: Explain::Budget { noun: "tool-call" },
    },
    final_answer: true,
    raisable: true,
    warns: Some(Warns {
        name: "tool_calls",
        place: 4,
    }),
    listed: Listed::WhenSet,
    slot: maybe!(MaybeCount max_tool_calls),
    min: 1,
    counted: |s, _| u64::from(s.tool_calls),
    ends: Ends::Aborted(AbortReason::ToolCallBudget),
};

/// No-op turns in a row.
pub const NO_OPS: Limit = Limit {
    field: "max_no_ops",
    counter: "streaks.no_ops",
    meets: Meets::Reaches,
    checked: Checked::Where,
    rule: Rule::NoOpLimit,
    stops: Stops {
        input: "turn(no-op)",
        guard: ("", ""),
        cites: "`no_progress`",
        explain: Explain::NoProgress,
    },
    final_answer: false,
    raisable: false,
    warns: None,
    listed: Listed::Always,
    slot: count!(max_no_ops),
    min: 1,
    counted: |_, k| u64::from(k.no_ops),
    ends: Ends::Aborted(AbortReason::NoProgress),
};

/// Empty replies in a row.
pub const EMPTY_RESPONSES: Limit = Limit {
    field: "max_empty_responses",
    counter: "streaks.empty_responses",
    meets: Meets::Reaches,
    checked: Checked::Where,
    rule: Rule::EmptyLimit,
    stops: Stops {
        input: "turn(empty)",
        guard: ("", ""),
        cites: "`empty_responses`, rule 6",
        explain: Explain::EmptyReplies,
    },
    final_answer: false,
    raisable: false,
    warns: None,
    listed: Listed::Always,
    slot: count!(max_empty_responses),
    min: 1,
    counted: |_, k| u64::from(k.empty_responses),
    ends: Ends::Aborted(AbortReason::EmptyResponses),
};

/// Retryable model errors in a row.
pub const MODEL_RETRIES: Limit = Limit {
    field: "max_model_retries",
    counter: "streaks.model_retries",
    meets: Meets::Exceeds,
    checked: Checked::Where,
    rule: Rule::ModelRetryLimit,
    stops: Stops {
        input: "model_error(retryable)",
        guard: ("", ""),
        cites: "`model_error`",
        explain: Explain::RetriesSpent,
    },
    final_answer: false,
    raisable: false,
    warns: None,
    listed: Listed::Always,
    slot: count!(max_model_retries),
    min: 0,
    counted: |_, k| u64::from(k.model_retries),
    ends: Ends::Aborted(AbortReason::ModelError),
};

/// Refused completion claims (each answered with a nudge).
pub const NUDGES: Limit = Limit {
    field: "max_nudges",
    counter: "nudges",
    meets: Meets::Spent,
    checked: Checked::Where,
    rule: Rule::ClaimRefusedLimit,
    stops: Stops {
        input: "turn(claim)",
        guard: ("work open; ", ""),
        cites: "`incomplete`, rule 5",
        explain: Explain::Incomplete,
    },
    final_answer: false,
    raisable: true,
    warns: None,
    listed: Listed::Always,
    slot: count!(max_nudges),
    min: 0,
    counted: |s, _| u64::from(s.nudges),
    ends: Ends::Aborted(AbortReason::Incomplete),
};

/// Verifier rejections; what the last one does is the policy's `on_verification_limit` (the
/// rule here is the one of the default policy, `abort`; `complete` fires
/// [`Rule::VerificationLimitForced`]).
pub const VERIFICATION_FAILURES: Limit = Limit {
    field: "max_verification_failures",
    counter: "verification_failures",
    meets: Meets::Reaches,
    checked: Checked::Where,
    rule: Rule::VerificationLimitAbort,
    stops: Stops {
        input: "verdict",
        guard: ("rejected; ", "; on_verification_limit = abort"),
        cites: "`verification_loop`, rule 3",
        explain: Explain::VerificationLoop,
    },
    final_answer: false,
    raisable: false,
    warns: None,
    listed: Listed::Always,
    slot: count!(max_verification_failures),
    min: 1,
    counted: |s, _| u64::from(s.verification_failures),
    ends: Ends::ByPolicy {
        default: Outcome::Aborted(AbortReason::VerificationLoop),
        under: |p| match p.on_verification_limit {
            OnVerificationLimit::Abort => Outcome::Aborted(AbortReason::VerificationLoop),
            OnVerificationLimit::Complete => Outcome::Complete(CompleteReason::Forced),
        },
    },
};

/// Tool turns in a row in which every executed call failed.
pub const FAILED_TOOL_TURNS: Limit = Limit {
    field: "max_consecutive_tool_failures",
    counter: "streaks.failed_tool_turns",
    meets: Meets::Reaches,
    checked: Checked::Where,
    rule: Rule::ToolFailureLimit,
    stops: Stops {
        input: "tool_results",
        guard: ("every execution failed; ", ""),
        cites: "`tool_failures`, rule 7",
        explain: Explain::ToolFailures,
    },
    final_answer: false,
    raisable: false,
    warns: None,
    listed: Listed::Always,
    slot: count!(max_consecutive_tool_failures),
    min: 1,
    counted: |_, k| u64::from(k.failed_tool_turns),
    ends: Ends::Aborted(AbortReason::ToolFailures),
};

/// Occurrences in a row of the same window of successful tool turns (any period up to
/// `max_loop_period`).
pub const REPEATS: Limit = Limit {
    field: "max_repeats",
    counter: "streaks.repeats",
    meets: Meets::Reaches,
    checked: Checked::Where,
    rule: Rule::RepeatLimit,
    stops: Stops {
        input: "tool_results",
        guard: (
            "every call succeeded, and the last k tool turns (k <= max_loop_period) repeat the k before them, same calls and results; ",
            "",
        ),
        cites: "`no_progress` (a loop)",
        explain: Explain::Loop,
    },
    final_answer: false,
    raisable: false,
    warns: None,
    listed: Listed::Always,
    slot: count!(max_repeats),
    min: 2,
    counted: |_, k| u64::from(k.repeats),
    ends: Ends::Aborted(AbortReason::NoProgress),
};

/// Polls in a row (tool turns of declared pollers only, `policy.pollers`) that got the same
/// results: a job that did not become ready within the wait the policy allows.
pub const POLLS: Limit = Limit {
    field: "max_polls",
    counter: "streaks.polls",
    meets: Meets::Reaches,
    checked: Checked::Where,
    rule: Rule::PollLimit,
    stops: Stops {
        input: "tool_results",
        guard: (
            "every call succeeded and names a declared poller (`pollers`), with the same results as the poll before; ",
            "",
        ),
        cites: "`poll_limit` (long-running tools)",
        explain: Explain::Polls,
    },
    final_answer: false,
    raisable: false,
    warns: None,
    listed: Listed::WhenCounted,
    slot: count!(max_polls),
    min: 2,
    counted: |_, k| u64::from(k.polls),
    ends: Ends::Aborted(AbortReason::PollLimit),
};

/// Tool turns in a row whose every call a tool budget refused (each answered with its budget's
/// text): a model that keeps calling only blocked tools.
pub const BLOCKED_TURNS: Limit = Limit {
    field: "max_blocked_turns",
    counter: "streaks.blocked_turns",
    meets: Meets::Reaches,
    checked: Checked::Where,
    rule: Rule::BlockedLimit,
    stops: Stops {
        input: "turn(tools)",
        guard: ("every call refused, some by a tool budget; ", ""),
        cites: "`no_progress` (budget blocks)",
        explain: Explain::Blocked,
    },
    final_answer: false,
    raisable: false,
    warns: None,
    listed: Listed::WhenCounted,
    slot: count!(max_blocked_turns),
    min: 1,
    counted: |_, k| u64::from(k.blocked_turns),
    ends: Ends::Aborted(AbortReason::NoProgress),
};

/// The output-token budget: tokens the model wrote (the costly ones, and the ones a rambling
/// model spends) reached it, whatever the prompt's size.
pub const OUTPUT_TOKENS: Limit = Limit {
    field: "max_output_tokens",
    counter: "output_tokens",
    meets: Meets::Crosses,
    checked: Checked::Before(Spends::Reported),
    rule: Rule::OutputTokenBudget,
    stops: Stops {
        input: ANY_STEP,
        guard: ("", ""),
        cites: "`max_output_tokens`",
        explain: Explain::Budget {
            noun: "output-token",
        },
    },
    final_answer: true,
    raisable: true,
    warns: Some(Warns {
        name: "output_tokens",
        place: 5,
    }),
    listed: Listed::WhenSet,
    slot: maybe!(MaybeAmount max_output_tokens),
    min: 0,
    counted: |s, _| s.output_tokens,
    ends: Ends::Aborted(AbortReason::OutputTokenBudget),
};

/// Every run-wide limit. The order is the order in which the machine checks the budgets before a
/// step ([`budgets`]) and in which explanations list them.
pub const ALL: [&Limit; 14] = [
    &STEPS,
    &TOKENS,
    &OUTPUT_TOKENS,
    &MODEL_CALLS,
    &TOOL_CALLS,
    &NO_OPS,
    &EMPTY_RESPONSES,
    &MODEL_RETRIES,
    &NUDGES,
    &VERIFICATION_FAILURES,
    &FAILED_TOOL_TURNS,
    &REPEATS,
    &POLLS,
    &BLOCKED_TURNS,
];

/// A list derived from the rows of [`ALL`].
#[derive(Clone, Copy)]
enum List {
    Budgets,
    Raisable,
    Warns,
}

impl List {
    /// Whether the list holds `l`.
    const fn holds(self, l: &Limit) -> bool {
        match self {
            List::Budgets => matches!(l.checked, Checked::Before(_)),
            List::Raisable => l.raisable,
            List::Warns => l.warns.is_some(),
        }
    }
}

/// The rows of [`ALL`] in `list`, in order.
const fn rows<const N: usize>(list: List) -> [&'static Limit; N] {
    let mut out: [&'static Limit; N] = [&STEPS; N];
    let (mut i, mut n) = (0, 0);
    while i < ALL.len() {
        if list.holds(ALL[i]) {
            assert!(n < N, "a derived list of limits is too short");
            out[n] = ALL[i];
            n += 1;
        }
        i += 1;
    }
    assert!(n == N, "a derived list of limits is too long");
    out
}

/// How many rows of [`ALL`] are in `list`.
const fn count_rows(list: List) -> usize {
    let (mut i, mut n) = (0, 0);
    while i < ALL.len() {
        if list.holds(ALL[i]) {
            n += 1;
        }
        i += 1;
    }
    n
}

/// The run-wide budgets, in the order the machine checks them before every non-terminal step:
/// the first that [`Limit::stops`] the step ends the run (or makes the one final-answer call).
pub(crate) const BUDGETS: [&Limit; count_rows(List::Budgets)] = rows(List::Budgets);

/// The run-wide budgets a stopped run can go on from, raised (`terminus resume --raise`): each
/// stops a run before the step it pre-empts, and the machine keeps that step (see
/// [`crate::Machine::raise`]).
pub const RAISABLE: [&Limit; count_rows(List::Raisable)] = rows(List::Raisable);

/// The run-wide budgets checked before each step ([`Checked::Before`]).
pub fn budgets() -> &'static [&'static Limit] {
    &BUDGETS
}

/// The budget whose policy field is `field`, if `policy.budget_scale` may scale it: the
/// run-wide budgets a step spends ([`budgets`]), which grow with the work a task holds (an
/// occurrence limit such as `max_no_ops` bounds a streak, whatever the task's size).
pub fn scalable(field: &str) -> Option<&'static Limit> {
    BUDGETS.iter().copied().find(|l| l.field == field)
}

/// The raisable budget whose policy field is `field`.
pub fn raisable(field: &str) -> Option<&'static Limit> {
    RAISABLE.iter().copied().find(|l| l.field == field)
}

impl Limit {
    /// The limit under `policy` (`None`: unlimited).
    #[inline(always)]
    pub fn value(&self, p: &Policy) -> Option<u64> {
        match self.slot {
            Slot::Count(get, _) => Some(u64::from(*get(p))),
            Slot::MaybeCount(get, _) => get(p).map(u64::from),
            Slot::MaybeAmount(get, _) => *get(p),
        }
    }

    /// Sets the limit under `policy` to `to` (a raise: `Some` for an optional budget).
    pub fn set(&self, p: &mut Policy, to: u64) -> Result<(), PolicyError> {
        let small = || {
            u32::try_from(to).map_err(|_| PolicyError {
                field: self.field.to_owned(),
                problem: format!("{to} is over the largest value, {}", u32::MAX),
            })
        };
        match self.slot {
            Slot::Count(_, put) => *put(p) = small()?,
            Slot::MaybeCount(_, put) => *put(p) = Some(small()?),
            Slot::MaybeAmount(_, put) => *put(p) = Some(to),
        }
        Ok(())
    }

    /// Whether `terminus inspect` lists it, under `policy` with its counter at `count`.
    pub fn listed(&self, policy: &Policy, count: Option<u64>) -> bool {
        match self.listed {
            Listed::Always => true,
            Listed::WhenSet => self.value(policy).is_some(),
            Listed::WhenCounted => count.is_some_and(|c| c > 0),
        }
    }

    /// The counter's value.
    #[inline(always)]
    pub fn count(&self, s: &Stats, k: &Streaks) -> u64 {
        (self.counted)(s, k)
    }

    /// How the run ends when it fires.
    pub fn outcome(&self, p: &Policy) -> Outcome {
        match self.ends {
            Ends::Aborted(reason) => Outcome::Aborted(reason),
            Ends::ByPolicy { under, .. } => under(p),
        }
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
        match (self.meets, self.checked) {
            (Meets::Spent, Checked::Before(Spends::ToolCalls)) => {
                format!("{counter} + the turn's runnable calls > {field}")
            }
            (Meets::Reaches, _) => format!("{counter} + 1 = {field}"),
            (Meets::Crosses, _) => format!("{counter} >= {field}"),
            (Meets::Exceeds, _) => format!("{counter} + 1 > {field}"),
            (Meets::Spent, _) => format!("{counter} = {field}"),
        }
    }

    /// The guard under which the limit does not fire, in words.
    pub fn below(&self) -> String {
        let (counter, field) = (self.counter, self.field);
        match (self.meets, self.checked) {
            (Meets::Spent, Checked::Before(Spends::ToolCalls)) => {
                format!("{counter} + the turn's runnable calls <= {field}")
            }
            (Meets::Reaches, _) => format!("{counter} + 1 < {field}"),
            (Meets::Crosses | Meets::Spent, _) => format!("{counter} < {field}"),
            (Meets::Exceeds, _) => format!("{counter} + 1 <= {field}"),
        }
    }

    /// The rule's row of the catalog, made from the limit's own row.
    const fn rule_row(&'static self) -> Row {
        let outcome = match self.ends {
            Ends::Aborted(reason) => Outcome::Aborted(reason),
            Ends::ByPolicy { default, .. } => default,
        };
        Row {
            rule: self.rule,
            input: self.stops.input,
            guard: Guard::At(self.stops.guard.0, self, self.stops.guard.1),
            cites: self.stops.cites,
            stop: Some(StopPath {
                outcome: Some(outcome),
                limit: Some(self),
                explain: self.stops.explain,
            }),
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

impl Limit {
    /// Whether this run-wide budget stops a step that spends `spend`, checked before the step.
    /// An occurrence limit is checked where its counter grows, never here.
    #[inline(always)]
    pub(crate) fn stops(&self, p: &Policy, s: &Stats, k: &Streaks, spend: Spend) -> bool {
        let Checked::Before(spends) = self.checked else {
            return false;
        };
        let n = spends.of(spend);
        match self.meets {
            // The step's own spending takes the counter to the limit.
            Meets::Reaches | Meets::Exceeds => self.fires_at(p, self.count(s, k) + n),
            // Spent already, whatever the step spends.
            Meets::Crosses => self.fires(p, s, k),
            // The step wants `n` more, and the last of them is past the budget.
            Meets::Spent => n > 0 && self.fires_at(p, self.count(s, k) + n - 1),
        }
    }

    /// Whether the counters agree that this limit ended a run: a run-wide budget was spent
    /// before the step it would have allowed, an occurrence limit is at its bound.
    pub(crate) fn ended(&self, p: &Policy, s: &Stats, k: &Streaks) -> bool {
        match (self.meets, self.checked) {
            // The turn it refused is not counted, and wanted any number: any count within the
            // budget agrees.
            (Meets::Spent, Checked::Before(Spends::ToolCalls)) => {
                self.value(p).is_some_and(|limit| self.count(s, k) <= limit)
            }
            (Meets::Spent | Meets::Crosses, _) => self.fires(p, s, k),
            (Meets::Reaches | Meets::Exceeds, _) => {
                self.bound(p).is_some_and(|b| self.count(s, k) == b)
            }
        }
    }

    /// Whether the counters agree that the budget was spent before a final-answer call that is
    /// now awaited (that call and its step are already counted).
    pub(crate) fn spent_before_final(&self, p: &Policy, s: &Stats, k: &Streaks) -> bool {
        let Checked::Before(spends) = self.checked else {
            return false;
        };
        match spends {
            Spends::Step | Spends::Reported => self.fires(p, s, k),
            // The final-answer call is one more model call.
            Spends::ModelCalls => self.value(p).is_some_and(|limit| self.count(s, k) > limit),
            Spends::ToolCalls => self.value(p).is_some_and(|limit| self.count(s, k) <= limit),
        }
    }
}

/// The row whose rule is `rule`, if the rule is a limit's.
pub fn of_rule(rule: Rule) -> Option<&'static Limit> {
    match rule {
        Rule::VerificationLimitForced => Some(&VERIFICATION_FAILURES),
        _ => ALL.iter().copied().find(|l| l.rule == rule),
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
    /// A declared poller gave the same results `max_polls` times in a row.
    Polls,
    /// `max_no_ops` no-op turns in a row.
    NoProgress,
    /// Claims refused with nudges until `max_nudges` were spent.
    Incomplete,
    /// The verifier rejected `max_verification_failures` claims; the policy aborts.
    VerificationLoop,
    /// The model asked only for excluded tools.
    AllExcluded,
    /// The model kept calling only tools its budgets block.
    Blocked,
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

/// The rows of the rules that are not a limit's own (a limit's rule has its row in the limit,
/// [`ALL`]), in [`Rule::ALL`] order.
const PLAIN: [Row; Rule::ALL.len() - ALL.len()] = [
    row(
        Rule::ToolTurn,
        "turn(tools)",
        Guard::Text(
            "some call runs; or every call is refused, some by a tool budget, and streaks.blocked_turns + 1 < max_blocked_turns",
        ),
        "rule 1",
    ),
    stop(
        Rule::AllToolsExcluded,
        "turn(tools)",
        Guard::Text("every call's tool is excluded for failures"),
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
    row(
        Rule::NoOpContinue,
        "turn(no-op)",
        Guard::Below("", &NO_OPS),
        "rule 2",
    ),
    row(
        Rule::NonAnswer,
        "turn(no-op)",
        Guard::Below(
            "not an answer (the kernel's words repeated; autonomous: only hands the task back); ",
            &NO_OPS,
        ),
        "final answer",
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
    row(
        Rule::AutoCheckpoint,
        "tool_results",
        Guard::Text(
            "no stop guard below fires; a checkpoint is due (a budget with reset_on refused calls in two turns since its reset) and auto_checkpoints > stats.auto_checkpoints",
        ),
        "budget blocks (a checkpoint written for the agent)",
    ),
];

/// One row per rule, in [`Rule::ALL`] order: the plain rows and the limits' rows, each at its
/// rule's place (checked at compile time: every rule has exactly one row).
pub const RULES: [Row; Rule::ALL.len()] = {
    let mut out = [PLAIN[0]; Rule::ALL.len()];
    let mut set = [false; Rule::ALL.len()];
    let mut i = 0;
    while i < PLAIN.len() {
        let at = PLAIN[i].rule as usize;
        assert!(!set[at], "two rows for one rule");
        out[at] = PLAIN[i];
        set[at] = true;
        i += 1;
    }
    let mut i = 0;
    while i < ALL.len() {
        let at = ALL[i].rule as usize;
        assert!(!set[at], "a limit's rule has a plain row too");
        out[at] = ALL[i].rule_row();
        set[at] = true;
        i += 1;
    }
    let mut i = 0;
    while i < set.len() {
        assert!(set[i], "a rule has no row");
        i += 1;
    }
    out
};

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

/// The wall-clock deadline's warning: the deadline is no limit of [`ALL`] (the kernel keeps no
/// clock of its own), so its warning is listed here.
const DEADLINE: Warns = Warns {
    name: "deadline",
    place: 3,
};

/// Every budget that warns at 80 %, in the order the warnings are checked ([`Warns::place`]):
/// the limits' warnings and the deadline's.
pub const WARNINGS: [Warning; count_rows(List::Warns) + 1] = {
    let mut out = [Warning {
        name: DEADLINE.name,
        rule: Rule::DeadlinePassed,
    }; count_rows(List::Warns) + 1];
    let mut set = [false; count_rows(List::Warns) + 1];
    set[DEADLINE.place as usize] = true;
    let mut i = 0;
    while i < ALL.len() {
        if let Some(w) = ALL[i].warns {
            let at = w.place as usize;
            assert!(at < out.len() && !set[at], "two warnings at one place");
            out[at] = Warning {
                name: w.name,
                rule: ALL[i].rule,
            };
            set[at] = true;
        }
        i += 1;
    }
    out
};

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
            max_output_tokens: Some(10),
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
