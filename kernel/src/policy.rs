//! The run policy: every limit of `docs/design.md` ("The policy"), with conservative defaults
//! documented in one place.

use crate::json::Json;
use crate::textcall::TextToolCalls;
use crate::tool_budget::ToolBudget;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// What to do when verification failed `max_verification_failures` times.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnVerificationLimit {
    /// End `Complete` with reason `forced`.
    Complete,
    /// End `Aborted` with reason `verification_loop` (default: an unverified claim is not done).
    #[default]
    Abort,
}

/// What to do when a tool fails with permission denied, not found or authentication failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnUnrecoverable {
    /// End the run with `unrecoverable_tool_error`.
    Stop,
    /// Exclude the tool at once (it is never retried) and tell the model (default).
    #[default]
    Exclude,
}

/// The default of [`Policy::max_blocked_turns`].
pub(crate) const DEFAULT_BLOCKED_TURNS: u32 = 3;

/// The default of [`Policy::max_polls`].
pub(crate) const DEFAULT_MAX_POLLS: u32 = 10;

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's `skip_serializing_if` passes a reference
const fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's `skip_serializing_if` passes a reference
const fn is_false(b: &bool) -> bool {
    !*b
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's `skip_serializing_if` passes a reference
const fn is_default_blocked_turns(n: &u32) -> bool {
    *n == DEFAULT_BLOCKED_TURNS
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's `skip_serializing_if` passes a reference
const fn is_default_max_polls(n: &u32) -> bool {
    *n == DEFAULT_MAX_POLLS
}

/// Every limit of a run. All fields are optional in JSON; [`Policy::default`] documents the
/// defaults. A limit `N` on a bad event means its N-th occurrence stops the run (or excludes the
/// tool); a budget `N` (steps, model calls, nudges) means N may be spent.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Policy {
    /// Step budget: transitions a run may take (LangGraph's `recursion_limit`, default 25 there;
    /// ours is 200 because a tool turn takes two steps).
    pub max_steps: u32,
    /// Model-call budget, retries included (`mcpMaxIterations`). Default 50.
    pub max_model_calls: u32,
    /// The N-th no-op turn in a row aborts with `no_progress`. Default 3.
    pub max_no_ops: u32,
    /// Completion claims that may be refused with a nudge before `incomplete`. Default 3.
    pub max_nudges: u32,
    /// The N-th verifier rejection ends the run per `on_verification_limit`. Default 3.
    pub max_verification_failures: u32,
    /// What the N-th verification failure does. Default `abort`.
    pub on_verification_limit: OnVerificationLimit,
    /// Ask the verifier before accepting a completion claim. Default false.
    pub verify_completion: bool,
    /// A JSON Schema the completion claim must meet: the claim's text must be JSON valid
    /// against it. A schema implies verification (see [`Policy::verifies`]): the host checks
    /// the claim against it before the configured verifier, and a claim that fails is a
    /// verification failure (bounded by `max_verification_failures`). Default none (and then
    /// absent from the JSON form).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Json>,
    /// Tools that must have succeeded once before the run may complete (rule 5).
    pub completion_requires: Vec<String>,
    /// The N-th failure of one tool excludes it. Default 3.
    pub max_tool_failures: u32,
    /// The N-th tool turn in a row where every call failed aborts with `tool_failures`. Default 5.
    pub max_consecutive_tool_failures: u32,
    /// What an unrecoverable tool error does. Default `exclude`.
    pub on_unrecoverable_tool_error: OnUnrecoverable,
    /// A window of tool turns (the same calls with the same results) that occurs this many times
    /// in a row is no progress: `max_repeats: 3` stops the third identical turn, or the sixth turn
    /// of a two-turn loop. Only turns in which every call succeeded count; a failing turn belongs
    /// to the failure counters. Default 3.
    pub max_repeats: u32,
    /// Tools that are polled for a job's status (`docs/design.md`, "Long-running tools"): a tool
    /// turn whose every call names one of them and succeeded is a poll, kept out of the repeat
    /// detector, so the same "not ready" result again is waiting, not a loop; the same results
    /// `max_polls` times in a row end the run `poll_limit`. A tool not listed keeps the loop
    /// rule exactly. Default none (and then absent from the JSON form).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pollers: Vec<String>,
    /// The N-th poll in a row that got the same results as the one before it ends the run
    /// `poll_limit` (at least 2). Default 10 (and then absent from the JSON form).
    #[serde(skip_serializing_if = "is_default_max_polls")]
    pub max_polls: u32,
    /// The longest loop the repeat detector looks for, in tool turns (1 to
    /// [`MAX_LOOP_PERIOD`](crate::MAX_LOOP_PERIOD)). Default 8.
    pub max_loop_period: u32,
    /// The N-th empty reply in a row aborts with `empty_responses`. Default 3.
    pub max_empty_responses: u32,
    /// Retries allowed for retryable model errors in a row; one more aborts. Default 3.
    pub max_model_retries: u32,
    /// First backoff delay in milliseconds. Default 500.
    pub retry_base_ms: u64,
    /// Backoff cap in milliseconds. Default 30000.
    pub retry_max_ms: u64,
    /// Wall-clock deadline in milliseconds from the start of the run. Default none.
    pub deadline_ms: Option<u64>,
    /// Total tokens (input + output) the run may spend. Default none.
    pub token_budget: Option<u64>,
    /// Output tokens (what the model wrote) the run may spend: the costly part of a run, and the
    /// part a rambling model spends. Default none (and then absent from the JSON form).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u64>,
    /// Tool executions the run may make: a tool turn whose calls would take it past the budget
    /// stops the run with `tool_call_budget` instead of running them. Default none (and then
    /// absent from the JSON form).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tool_calls: Option<u32>,
    /// Soft per-tool call budgets.
    pub tool_budgets: BTreeMap<String, ToolBudget>,
    /// The N-th tool turn in a row whose every call a tool budget refused aborts with
    /// `no_progress` (each refused call is answered with its budget's text, and the run goes on
    /// until then). Default 3 (and then absent from the JSON form).
    #[serde(skip_serializing_if = "is_default_blocked_turns")]
    pub max_blocked_turns: u32,
    /// Checkpoints the host may write for the agent in a run (see [`crate::CheckpointRequest`]):
    /// when a tool budget that a checkpoint lifts (`reset_on`) has refused calls in two tool
    /// turns since its last reset and the agent has still posted none, the kernel asks the host
    /// for a summary of the findings so far and counts it as the checkpoint. At most one per
    /// block; 0 (the default, and then absent from the JSON form): never.
    #[serde(skip_serializing_if = "is_zero_u32")]
    pub auto_checkpoints: u32,
    /// Seed of the backoff jitter, so a run replays exactly. Default 0.
    pub seed: u64,
    /// When a budget (`max_steps`, `max_model_calls`, `token_budget`, `max_tool_calls`) is spent, make one last
    /// tool-less model call for a final answer; the stop reason still names the budget. Default false.
    pub final_answer_on_budget: bool,
    /// What a tool call written in the reply's text does (see [`crate::textcall`]): `run`
    /// (default) runs a call of an offered tool, `nudge` tells the model to use the tool
    /// interface, `off` reads the text as before. Absent from the JSON form when `run`.
    #[serde(skip_serializing_if = "TextToolCalls::is_default")]
    pub text_tool_calls: TextToolCalls,
    /// Budgets scaled to the task's size (see [`BudgetScale`] and [`Policy::scaled`]). Default
    /// none (and then absent from the JSON form).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget_scale: Option<BudgetScale>,
    /// Nobody is there to answer the agent (a batch job, an eval, a worker): a reply that only
    /// asks the user for more, apologises for not understanding the task or tells the reader to
    /// make the next call is a no-op ([`crate::NoOpKind::NonAnswer`]), never the answer.
    /// Default false (and then absent from the JSON form): a conversational agent may end its
    /// turn with a question.
    #[serde(skip_serializing_if = "is_false")]
    pub autonomous: bool,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            max_steps: 200,
            max_model_calls: 50,
            max_no_ops: 3,
            max_nudges: 3,
            max_verification_failures: 3,
            on_verification_limit: OnVerificationLimit::Abort,
            verify_completion: false,
            output_schema: None,
            completion_requires: Vec::new(),
            max_tool_failures: 3,
            max_consecutive_tool_failures: 5,
            on_unrecoverable_tool_error: OnUnrecoverable::Exclude,
            max_repeats: 3,
            pollers: Vec::new(),
            max_polls: DEFAULT_MAX_POLLS,
            max_loop_period: 8,
            max_empty_responses: 3,
            max_model_retries: 3,
            retry_base_ms: 500,
            retry_max_ms: 30_000,
            deadline_ms: None,
            token_budget: None,
            max_output_tokens: None,
            max_tool_calls: None,
            tool_budgets: BTreeMap::new(),
            max_blocked_turns: DEFAULT_BLOCKED_TURNS,
            auto_checkpoints: 0,
            seed: 0,
            final_answer_on_budget: false,
            text_tool_calls: TextToolCalls::Run,
            budget_scale: None,
            autonomous: false,
        }
    }
}

/// A policy that cannot be run, with the field at fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyError {
    /// The field name, e.g. `max_steps` or `tool_budgets.read_file.block_at`.
    pub field: String,
    /// What is wrong with it.
    pub problem: String,
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "policy.{}: {}", self.field, self.problem)
    }
}

impl std::error::Error for PolicyError {}

impl Policy {
    /// Whether completion claims go to verification: `verify_completion`, or an
    /// `output_schema` the claim must meet.
    #[inline]
    pub fn verifies(&self) -> bool {
        self.verify_completion || self.output_schema.is_some()
    }
}

/// How a policy's budgets grow with the task's size. Every budget it scales needs a hard bound
/// (`max`), so that no size, however large, gives an unbounded run; with the bound, the scaled
/// value is exact (a product past the range of the field is above the bound, so it is the
/// bound), and no arithmetic wraps or saturates silently.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BudgetScale {
    /// What each unit adds to a budget, by the budget's policy field (`max_steps`,
    /// `max_model_calls`, `max_tool_calls`, `token_budget`: the budgets a step spends), or by
    /// `tool_budgets.NAME` for a tool's budget: each of its thresholds (`warn_at`, `block_at`,
    /// `hard_block_at`, each tier's) moves that many calls later per unit, together.
    pub per_unit: BTreeMap<String, u64>,
    /// The hard bound of each scaled budget, by field: one for every field of `per_unit`, at
    /// least the policy's own value (the base); for a tool's budget, the bound of its largest
    /// threshold (the others move as far as it does).
    pub max: BTreeMap<String, u64>,
    /// The units the budgets were scaled for, set by [`Policy::scaled`]: a policy that has it
    /// holds the scaled budgets already (absent from the JSON form until then).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub units: Option<u64>,
}
