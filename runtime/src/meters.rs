//! Metrics, through the `metrics` facade: nothing is recorded (and nothing costs more than a
//! check) until the host installs a recorder, as `terminus worker --metrics-addr` does with its
//! Prometheus endpoint. The names are constants here so hosts and tests spell them alike; the
//! plan metrics ([`PLANS`] to [`AGENT_SECONDS`]) are recorded by the orchestrator
//! (`terminus-orchestrator`), named here so that one list holds every name a host serves.

use crate::budget::{BudgetWarning, ToolBudgetEvent};
use crate::error::RunError;
use crate::journal::StoreError;
use crate::report::Report;
use std::time::Duration;

/// Runs that ended with a report, by `outcome` and `reason`.
pub const RUNS: &str = "terminus_runs_total";
/// Runs that ended without a report, by `class` ([`RunError::class`]).
pub const RUN_ERRORS: &str = "terminus_run_errors_total";
/// Steps per run (a histogram).
pub const RUN_STEPS: &str = "terminus_run_steps";
/// Completion claims refused with a nudge.
pub const NUDGES: &str = "terminus_nudges_total";
/// Verifier rejections.
pub const VERIFICATION_FAILURES: &str = "terminus_verification_failures_total";
/// Empty model replies.
pub const EMPTY_RESPONSES: &str = "terminus_empty_responses_total";
/// Journal appends that found their entry already stored.
pub const DUPLICATES_PREVENTED: &str = "terminus_duplicates_prevented_total";
/// Claims refused because another live worker holds the execution.
pub const RESUME_CONFLICTS: &str = "terminus_resume_conflicts_total";
/// Tools excluded during runs, by `tool`.
pub const EXCLUDED_TOOLS: &str = "terminus_excluded_tools_total";
/// Budgets that passed 80 %, by `budget`.
pub const BUDGET_WARNINGS: &str = "terminus_budget_warnings_total";
/// Per-tool budget warnings and blocks (`tool_budgets`), by `tool` and `kind` (`warn`,
/// `block`).
pub const TOOL_BUDGET_EVENTS: &str = "terminus_tool_budget_events_total";
/// Prunes of the model's view by the context window.
pub const CONTEXT_PRUNES: &str = "terminus_context_prunes_total";
/// System prompts cut to the context policy's `max_system_tokens`.
pub const SYSTEM_PROMPT_CUTS: &str = "terminus_system_prompt_cuts_total";
/// Model-call latency in seconds (a histogram), by `outcome` (`ok`, `error`, `interrupted`).
pub const MODEL_CALL_SECONDS: &str = "terminus_model_call_duration_seconds";
/// Plans that ended with a report, by `outcome` (`complete`, `aborted`) and `reason` (the plan's
/// stop reason).
pub const PLANS: &str = "terminus_plans_total";
/// Plans that ended without a report, by `class` (`store`, `claimed`, `lease_lost`, `corrupt`).
/// A new durable plan refused because its execution id is in use never started: not counted.
pub const PLAN_ERRORS: &str = "terminus_plan_errors_total";
/// Failed agents that run again after their backoff.
pub const AGENT_RETRIES: &str = "terminus_agent_retries_total";
/// Circuit breakers that opened.
pub const BREAKER_OPENINGS: &str = "terminus_breaker_openings_total";
/// Agents skipped (no result), by `why` (the plan report's `why`).
pub const AGENT_SKIPS: &str = "terminus_agent_skips_total";
/// Agents degraded (their `degraded_result` stands in), by `why`.
pub const AGENT_DEGRADATIONS: &str = "terminus_agent_degradations_total";
/// An agent's wall time in seconds from its first start to its end, over its attempts (a
/// histogram), by `status`.
pub const AGENT_SECONDS: &str = "terminus_agent_duration_seconds";

pub(crate) fn run_ended(result: &Result<Report, RunError>) {
    match result {
        Ok(report) => report_counters(report),
        Err(e) => metrics::counter!(RUN_ERRORS, "class" => e.class()).increment(1),
    }
}

fn report_counters(report: &Report) {
    metrics::counter!(
        RUNS,
        "outcome" => report.outcome.outcome_str(),
        "reason" => report.outcome.reason_str()
    )
    .increment(1);
    metrics::histogram!(RUN_STEPS).record(f64::from(report.steps));
    metrics::counter!(NUDGES).increment(report.nudges.into());
    metrics::counter!(VERIFICATION_FAILURES).increment(report.verification_failures.into());
    metrics::counter!(EMPTY_RESPONSES).increment(report.empty_responses.into());
    metrics::counter!(DUPLICATES_PREVENTED).increment(report.duplicates_prevented);
    for tool in &report.excluded_tools {
        metrics::counter!(EXCLUDED_TOOLS, "tool" => tool.clone()).increment(1);
    }
}

/// A claim another worker holds (a run or resume that could not start).
pub(crate) fn claim_refused(error: &RunError) {
    if matches!(error, RunError::Store(StoreError::Claimed { .. })) {
        metrics::counter!(RESUME_CONFLICTS).increment(1);
    }
}

pub(crate) fn budget_warning(warning: &BudgetWarning) {
    metrics::counter!(BUDGET_WARNINGS, "budget" => warning.budget.as_str()).increment(1);
}

pub(crate) fn tool_budget(event: &ToolBudgetEvent) {
    metrics::counter!(
        TOOL_BUDGET_EVENTS,
        "tool" => event.tool.clone(),
        "kind" => event.kind.as_str()
    )
    .increment(1);
}

pub(crate) fn context_pruned() {
    metrics::counter!(CONTEXT_PRUNES).increment(1);
}

pub(crate) fn system_cut() {
    metrics::counter!(SYSTEM_PROMPT_CUTS).increment(1);
}

pub(crate) fn model_call(outcome: &'static str, took: Duration) {
    metrics::histogram!(MODEL_CALL_SECONDS, "outcome" => outcome).record(took.as_secs_f64());
}
