//! The report of a finished run (`docs/design.md`, "The report").

use crate::budget::{BudgetWarning, ToolBudgetEvent};
use crate::context::{ContextPrune, ContextStats};
use crate::tool::ToolsChanged;
use serde::{Deserialize, Serialize};
use terminus_kernel::{Outcome, Rule, Stats, StepRecord, Stop, Todo};

/// How a run ended, with its counters and the path it took. Serialized, its first fields are
/// exactly the report of `docs/design.md`, "The report"; `rule`, `todos`, `stats` and `trace`
/// follow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// The execution id.
    pub execution: String,
    /// `"outcome"` (`complete` | `aborted`) and `"reason"` (the canonical stop reason).
    #[serde(flatten)]
    pub outcome: Outcome,
    /// Transitions taken.
    pub steps: u32,
    /// Model calls issued (retries included).
    pub model_calls: u32,
    /// Tool executions (calls refused because their tool is excluded are not counted).
    pub tool_calls: u32,
    /// Completion claims refused with a nudge.
    pub nudges: u32,
    /// Verifier rejections.
    pub verification_failures: u32,
    /// Turns that made no progress.
    pub no_ops: u32,
    /// Empty replies.
    pub empty_responses: u32,
    /// Tools excluded during the run, by name.
    pub excluded_tools: Vec<String>,
    /// Journal entries of the execution, as stored (the stop entry included).
    pub entries: u64,
    /// Appends that found their key already stored with the same content (a replayed step).
    pub duplicates_prevented: u64,
    /// The last substantive model content, or null.
    pub result: Option<String>,
    /// The rule that ended the run.
    pub rule: Rule,
    /// The todo list at the end.
    pub todos: Vec<Todo>,
    /// Every counter of the kernel.
    pub stats: Stats,
    /// Every transition, in order.
    pub trace: Vec<StepRecord>,
    /// What the context window did (prunes, cut results, the largest view), when the run had a
    /// context policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<ContextStats>,
    /// Each prune of the model's view, in order (absent when the view was never pruned). A
    /// resumed run lists the prunes since it was resumed: the window is not journaled.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub context_prunes: Vec<ContextPrune>,
    /// Budgets that passed 80 % during the run, in the order they did (absent when none did).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<BudgetWarning>,
    /// The warnings and blocks of per-tool budgets (`tool_budgets`), in the order the model was
    /// given them (absent when none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_budget_events: Vec<ToolBudgetEvent>,
    /// Each change of the tool list a [`crate::ToolSource`] reported (an MCP server's
    /// `notifications/tools/list_changed`), in order (absent when none). A resumed run lists
    /// the changes since it was resumed: the list is asked again, not journaled.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools_changed: Vec<ToolsChanged>,
    /// The parsed `result` of a run that completed verified under `policy.output_schema`
    /// (absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<serde_json::Value>,
    /// The task's size and the budgets it gave, when the policy was scaled
    /// (`policy.budget_scale`; absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale: Option<ScaleReport>,
}

/// The task's size and what it made of the scaled budgets (`docs/design.md`, "Budgets scaled
/// to the task").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScaleReport {
    /// The units the budgets were scaled for (the files in scope, say).
    pub units: u64,
    /// Each scaled budget as the run had it, by its `budget_scale` key: a number for a run-wide
    /// budget (`max_steps`), the tool's budget for `tool_budgets.NAME`.
    pub budgets: std::collections::BTreeMap<String, serde_json::Value>,
}

/// A tool budget's thresholds, the numbers a scale moves: `{"warn_at": 4, "block_at": 6}`, or
/// `{"tiers": [{"warn_at": 11, "block_at": 13}, ...]}`.
fn thresholds(budget: &terminus_kernel::ToolBudget) -> serde_json::Value {
    let mut out = serde_json::Map::new();
    let mut put = |key: &str, value: Option<u32>| {
        if let Some(v) = value {
            out.insert(key.to_owned(), v.into());
        }
    };
    put("warn_at", budget.warn_at);
    put("block_at", budget.block_at);
    put("hard_block_at", budget.hard_block_at);
    if !budget.tiers.is_empty() {
        let tiers: Vec<serde_json::Value> = budget
            .tiers
            .iter()
            .map(|t| {
                thresholds(&terminus_kernel::ToolBudget {
                    warn_at: t.warn_at,
                    block_at: t.block_at,
                    ..terminus_kernel::ToolBudget::default()
                })
            })
            .collect();
        out.insert("tiers".into(), tiers.into());
    }
    out.into()
}

impl ScaleReport {
    /// The scale of `policy`, if it was scaled.
    pub fn of(policy: &terminus_kernel::Policy) -> Option<ScaleReport> {
        let scale = policy.budget_scale.as_ref()?;
        let units = scale.units?;
        let budgets = scale
            .per_unit
            .keys()
            .filter_map(|field| {
                let value = match field.strip_prefix("tool_budgets.") {
                    Some(tool) => thresholds(policy.tool_budgets.get(tool)?),
                    None => terminus_kernel::catalog::scalable(field)?
                        .value(policy)?
                        .into(),
                };
                Some((field.clone(), value))
            })
            .collect();
        Some(ScaleReport { units, budgets })
    }

    /// One line: `7 units: max_steps 34, tool_budgets.read_file {"tiers":[...]}`.
    pub fn line(&self) -> String {
        let budgets: Vec<String> = self
            .budgets
            .iter()
            .map(|(field, value)| format!("{field} {value}"))
            .collect();
        format!("{} units: {}", self.units, budgets.join(", "))
    }
}

impl Report {
    /// The report of a run that ended with `stop`.
    pub fn new(
        execution: String,
        stop: Stop,
        todos: Vec<Todo>,
        trace: Vec<StepRecord>,
        entries: u64,
        duplicates_prevented: u64,
    ) -> Report {
        let s = stop.stats;
        Report {
            execution,
            outcome: stop.outcome,
            steps: s.steps,
            model_calls: s.model_calls,
            tool_calls: s.tool_calls,
            nudges: s.nudges,
            verification_failures: s.verification_failures,
            no_ops: s.no_ops,
            empty_responses: s.empty_responses,
            excluded_tools: stop.excluded_tools,
            entries,
            duplicates_prevented,
            result: stop.result,
            rule: stop.rule,
            todos,
            stats: s,
            trace,
            context: None,
            context_prunes: Vec::new(),
            warnings: Vec::new(),
            tool_budget_events: Vec::new(),
            tools_changed: Vec::new(),
            output: None,
            scale: None,
        }
    }

    /// Sets [`Report::output`] from the run's policy: the parsed `result` when the run completed
    /// verified under an `output_schema`.
    pub fn set_output(&mut self, policy: &terminus_kernel::Policy) {
        let schema = policy.output_schema.as_ref().map(|s| s.value());
        self.output = crate::output::report_output(schema, self.outcome, self.result.as_deref());
    }

    /// Sets [`Report::scale`] from the run's policy: its units and scaled budgets, if scaled.
    pub fn set_scale(&mut self, policy: &terminus_kernel::Policy) {
        self.scale = ScaleReport::of(policy);
    }

    /// Whether the run completed.
    pub fn is_complete(&self) -> bool {
        self.outcome.is_complete()
    }

    /// The process exit code (`docs/design.md`, "Exit codes"): 0 complete, 1 aborted.
    pub fn exit_code(&self) -> u8 {
        if self.is_complete() { 0 } else { 1 }
    }

    /// The report without its trace, every other field as it is: what a durable store keeps,
    /// since the trace is the journal's transition entries, in order (a long run's trace is
    /// most of its report).
    pub fn without_trace(&self) -> Report {
        Report {
            execution: self.execution.clone(),
            outcome: self.outcome,
            steps: self.steps,
            model_calls: self.model_calls,
            tool_calls: self.tool_calls,
            nudges: self.nudges,
            verification_failures: self.verification_failures,
            no_ops: self.no_ops,
            empty_responses: self.empty_responses,
            excluded_tools: self.excluded_tools.clone(),
            entries: self.entries,
            duplicates_prevented: self.duplicates_prevented,
            result: self.result.clone(),
            rule: self.rule,
            todos: self.todos.clone(),
            stats: self.stats,
            trace: Vec::new(),
            context: self.context,
            context_prunes: self.context_prunes.clone(),
            warnings: self.warnings.clone(),
            tool_budget_events: self.tool_budget_events.clone(),
            tools_changed: self.tools_changed.clone(),
            output: self.output.clone(),
            scale: self.scale.clone(),
        }
    }

    /// Writes the report as one line of JSON, without building it in memory first.
    pub fn write_json_line(&self, mut out: impl std::io::Write) -> std::io::Result<()> {
        serde_json::to_writer(&mut out, self)?;
        out.write_all(b"\n")
    }

    /// The report as one line of JSON.
    pub fn to_json_line(&self) -> String {
        // A report is plain data with string keys: serializing it cannot fail.
        serde_json::to_string(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }
}
