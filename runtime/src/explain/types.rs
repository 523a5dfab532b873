//! The types of an explanation: what the store keeps of an execution besides its records
//! ([`Stored`]), and the [`Explanation`] with its parts (the path's steps, the rules' rows, the
//! tools, the verifier's feedback, the budgets). Plain data, serialized as JSON.

use crate::context::{ContextPrune, ContextStats};
use crate::{BudgetWarning, Failure, Report, RunSpec, ToolBudgetEvent};
use serde::Serialize;
use std::collections::BTreeMap;
use terminus_kernel::{Phase, Rule, Stats, StepRecord};

/// What the store keeps of an execution besides its records.
pub struct Stored<'a> {
    /// The execution id.
    pub execution: &'a str,
    /// What it was started with.
    pub spec: &'a RunSpec,
    /// Its report, once it ended.
    pub report: Option<&'a Report>,
    /// Why a worker gave up on it.
    pub failure: Option<&'a Failure>,
    /// Claims refused and leases lost.
    pub conflicts: u64,
}

/// One step of the path, with what happened at it.
#[derive(Debug, Clone, Serialize)]
pub struct PathStep {
    /// The step number (1-based).
    pub step: u32,
    /// The state before.
    pub from: Phase,
    /// The state after.
    pub to: Phase,
    /// The input, as the kernel classified it.
    pub input: &'static str,
    /// The rule that fired.
    pub rule: Rule,
    /// The rule's row of the transition table, for every step but the plain loop (a tool turn
    /// and its results going back).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<RuleRow>,
    /// The model's answer that made this step: `turn`, or the error's class.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<&'static str>,
    /// Tool executions this step started, by tool name.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<String>,
    /// Tool errors among the results that made this step.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_errors: Vec<ToolError>,
    /// The nudge this step sent (`continue`, `incomplete`, `verifier`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nudge: Option<&'static str>,
    /// The notices this step sent, in words.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notices: Vec<String>,
    /// The verdict that made this step: accepted or not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verdict: Option<bool>,
    /// Tokens reported so far, this step's turn included.
    pub tokens: u64,
    /// The model wrote its tool calls in its text: `recovered` (they ran) or `not_run`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub written: Option<&'static str>,
}

/// A rule's row of the transition table.
#[derive(Debug, Clone, Serialize)]
pub struct RuleRow {
    /// The input that triggers it.
    pub input: &'static str,
    /// Its guard, over counters and limits.
    pub guard: String,
    /// The rule of `docs/design.md` (1-8) or stop reason it encodes.
    pub cites: &'static str,
}

impl RuleRow {
    pub(super) fn of(rule: Rule) -> RuleRow {
        let spec = rule.spec();
        RuleRow {
            input: spec.input,
            guard: spec.guard,
            cites: spec.cites,
        }
    }
}

impl std::fmt::Display for RuleRow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.input)?;
        if self.guard != "-" {
            write!(f, " when {}", self.guard)?;
        }
        if self.cites != "-" {
            write!(f, "; {}", self.cites)?;
        }
        Ok(())
    }
}

/// One tool error, as the model was told it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ToolError {
    /// The step the result arrived with.
    pub step: u32,
    /// The tool.
    pub tool: String,
    /// The error's class.
    pub kind: &'static str,
    /// The tool's message.
    pub message: String,
}

/// What one tool did over the run.
#[derive(Debug, Clone, Serialize)]
pub struct ToolView {
    /// The tool.
    pub name: String,
    /// Executions.
    pub calls: u32,
    /// Executions that failed.
    pub failures: u32,
    /// Calls refused while it was excluded.
    pub refused: u32,
    /// Why it was excluded, if it was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub excluded: Option<String>,
    /// The step that excluded it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub excluded_at: Option<u32>,
    /// Its errors, in order.
    pub errors: Vec<ToolError>,
}

/// Feedback the verifier gave when it rejected a claim.
#[derive(Debug, Clone, Serialize)]
pub struct Feedback {
    /// What the verifier said is missing.
    pub missing: String,
    /// How many rejections said it.
    pub count: u32,
    /// At which steps.
    pub steps: Vec<u32>,
}

/// A bound of the policy and how much of it the run spent.
#[derive(Debug, Clone, Serialize)]
pub struct Budget {
    /// The policy field.
    pub field: &'static str,
    /// The counter it bounds.
    pub counter: &'static str,
    /// The counter at the end (unknown for the deadline: wall-clock time is not journaled).
    pub used: Option<u64>,
    /// The limit (`None`: unlimited).
    pub limit: Option<u64>,
    /// The counter met the limit.
    pub reached: bool,
    /// It is the bound that stopped the run.
    pub stopped: bool,
}

/// Everything `terminus inspect` says about an execution.
#[derive(Debug, Clone, Serialize)]
pub struct Explanation {
    /// The execution id.
    pub execution: String,
    /// The run's name.
    pub name: Option<String>,
    /// The task.
    pub task: String,
    /// `ended`, `stopped` (the stop is journaled, the report is not stored), `interrupted`,
    /// `waiting` or `failed`; `running` for a live run a host explains (the binding sets it).
    pub status: &'static str,
    /// Why a worker gave up on it.
    pub failure: Option<Failure>,
    /// `complete` or `aborted`.
    pub outcome: Option<&'static str>,
    /// The stop reason.
    pub reason: Option<&'static str>,
    /// The rule that ended the run.
    pub rule: Option<Rule>,
    /// That rule's row of the transition table.
    pub rule_spec: Option<RuleRow>,
    /// Why the run stopped and what to change, in one paragraph.
    pub why: String,
    /// Every counter at the end (as far as the journal goes, for a run that has not ended).
    pub stats: Option<Stats>,
    /// The last substantive model content.
    pub result: Option<String>,
    /// Every bound of the policy against what the run spent.
    pub budgets: Vec<Budget>,
    /// How the policy's budgets were scaled to the task (`budget_scale`, with the units the run
    /// was created for), so the limits above can be traced to the task's size.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scale: Option<terminus_kernel::BudgetScale>,
    /// Budgets that passed 80 % while the run went on (from its report).
    pub warnings: Vec<BudgetWarning>,
    /// The warnings and blocks of per-tool budgets (`tool_budgets`), in order: replayed from
    /// the journal through the kernel (deterministic, so they are what the run gave the model),
    /// or from the report where the journal is not replayed.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_budget_events: Vec<ToolBudgetEvent>,
    /// The per-tool budgets the run had (`policy.tool_budgets`, scaled if it was), so each
    /// warning and block above can name its tier and what lifts it.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub tool_budgets: std::collections::BTreeMap<String, terminus_kernel::ToolBudget>,
    /// What the context window did (from the report: the window is the runtime's, not
    /// journaled; unknown until the run has a report).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context: Option<ContextStats>,
    /// Each prune of the model's view (from the report, as `context`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub context_prunes: Vec<ContextPrune>,
    /// The path, a step a line, with what happened at each.
    pub path: Vec<PathStep>,
    /// Every transition, as the kernel records it.
    pub trace: Vec<StepRecord>,
    /// Verifier feedback, most repeated first.
    pub verifier_feedback: Vec<Feedback>,
    /// Tools the run called, or that were excluded.
    pub tools: Vec<ToolView>,
    /// Todos still pending or in progress at the end.
    pub open_todos: Vec<String>,
    /// `completion_requires` tools that never succeeded.
    pub missing_tools: Vec<String>,
    /// Model calls issued but never answered in the journal (in flight at a deadline or a
    /// cancel, or when the process died).
    pub unanswered_model_calls: u32,
    /// Journal entries.
    pub entries: u64,
    /// Journal entries by kind.
    pub entry_kinds: BTreeMap<String, u64>,
    /// Claims refused and leases lost.
    pub conflicts: u64,
    /// Why the journal could not be replayed through the kernel, if it could not (the streaks,
    /// the ledger and the todos are then unknown).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replay_error: Option<String>,
    /// The held calls of a suspended run's pending tool batch, with their decisions so far
    /// (`docs/approvals.md`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub held: Vec<crate::suspend::HeldState>,
}
