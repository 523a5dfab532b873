//! The report of a plan run (`docs/plans.md`, "The report"), and the progress lines.

use crate::breaker::Breaker;
use crate::generate::Generation;
use crate::schedule::{PlanReason, Status, Usage, Warning, Why};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt;
use terminus_runtime::Report;

/// How a plan run ended, agent by agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanReport {
    /// The orchestration's execution id.
    pub execution: String,
    /// The plan's name.
    pub name: String,
    /// `complete` or `aborted`.
    pub outcome: String,
    /// The plan's stop reason.
    pub reason: PlanReason,
    /// One per agent, in plan order.
    pub agents: Vec<AgentReport>,
    /// Model calls and tokens of every attempt.
    pub used: Usage,
    /// Plan time at the end (across resumes).
    pub elapsed_ms: u64,
    /// How a model wrote the plan, when one did (`terminus orchestrate --generate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<Generation>,
}

impl PlanReport {
    /// The exit code (`docs/design.md`, "Exit codes"): 0 complete, 1 aborted.
    pub fn exit_code(&self) -> u8 {
        if self.reason.is_complete() { 0 } else { 1 }
    }

    /// The report of a plan that never ran: its generator's model wrote no valid plan and
    /// there was no fallback (`aborted`, `no_valid_plan`), counted as every plan's end is.
    pub fn no_plan(execution: &str, name: &str, generation: Generation) -> PlanReport {
        let report = PlanReport {
            execution: execution.to_owned(),
            name: name.to_owned(),
            outcome: "aborted".into(),
            reason: PlanReason::NoValidPlan,
            agents: Vec::new(),
            used: Usage::default(),
            elapsed_ms: 0,
            generation: Some(generation),
        };
        crate::meters::plan_ended(&Ok(report.clone()));
        report
    }

    /// The report as one line of JSON.
    pub fn to_json_line(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }
}

/// One agent's part of a [`PlanReport`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentReport {
    /// Its id.
    pub id: String,
    /// Its status.
    pub status: Status,
    /// Runs made.
    pub attempts: u32,
    /// Its wall time in plan time (across resumes) from its first start to its end, over its
    /// attempts and the backoffs between them; absent if it never started (skipped on a
    /// dependency, refused by its breaker, not run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    /// Its result (a completed run's), its degraded result, or null.
    pub result: Option<Value>,
    /// Whether a dependency gave it a degraded result.
    pub degraded_input: bool,
    /// Why it did not complete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<Why>,
    /// The policy fields the plan's budget lowered for its last run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clamped: Vec<String>,
    /// The error of its last run, when it ended without a report (a fault of its adapters, the
    /// watchdog).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The execution of its last run (`inspect` explains it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_execution: Option<String>,
    /// Its last run's kernel report; absent if it never ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report: Option<Box<Report>>,
}

/// What happened, one progress line each.
#[derive(Debug, Clone, PartialEq)]
pub enum PlanEvent {
    /// An attempt starts (or resumes).
    Start {
        /// The agent.
        agent: String,
        /// The attempt.
        attempt: u32,
        /// Going on from the journal.
        resume: bool,
        /// As the breaker's half-open probe.
        probe: bool,
        /// Policy fields lowered.
        clamped: Vec<String>,
        /// A dependency's result was degraded.
        degraded_input: bool,
    },
    /// An attempt failed and runs again after `delay_ms`.
    Retry {
        /// The agent.
        agent: String,
        /// The next attempt.
        attempt: u32,
        /// The backoff.
        delay_ms: u64,
        /// The failed attempt's stop.
        after: String,
    },
    /// An agent id's breaker changed state.
    Breaker {
        /// The agent.
        agent: String,
        /// Before.
        from: Breaker,
        /// After.
        to: Breaker,
    },
    /// An agent ended.
    Ended {
        /// The agent.
        agent: String,
        /// How.
        status: Status,
        /// Runs made.
        attempts: u32,
        /// Why, when not complete.
        why: Option<String>,
    },
    /// A limit is 80 % used.
    Warn(Warning),
    /// The plan is stopping: running attempts are cancelled.
    Cancelling(PlanReason),
    /// The plan ended.
    Done(PlanReason),
}

impl fmt::Display for PlanEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlanEvent::Start {
                agent,
                attempt,
                resume,
                probe,
                clamped,
                degraded_input,
            } => {
                let verb = if *resume { "resume" } else { "start " };
                write!(f, "{verb} {agent} (attempt {attempt})")?;
                if *probe {
                    f.write_str(", half-open probe")?;
                }
                if *degraded_input {
                    f.write_str(", on degraded input")?;
                }
                if !clamped.is_empty() {
                    write!(f, ", clamped to the plan: {}", clamped.join(", "))?;
                }
                Ok(())
            }
            PlanEvent::Retry {
                agent,
                attempt,
                delay_ms,
                after,
            } => write!(
                f,
                "retry  {agent} (attempt {attempt}) in {delay_ms} ms, after {after}"
            ),
            PlanEvent::Breaker { agent, from, to } => {
                write!(f, "breaker {agent}: {from} -> {to}")
            }
            PlanEvent::Ended {
                agent,
                status,
                attempts,
                why,
            } => {
                let verb = match status {
                    Status::Complete => "done  ",
                    Status::Failed => "failed",
                    Status::Skipped => "skip  ",
                    Status::Degraded => "degrade",
                    Status::NotRun => "not run",
                };
                let runs = if *attempts == 1 {
                    "attempt"
                } else {
                    "attempts"
                };
                write!(f, "{verb} {agent} ({status}, {attempts} {runs})")?;
                if let Some(why) = why {
                    write!(f, ": {why}")?;
                }
                Ok(())
            }
            PlanEvent::Warn(Warning::Time {
                elapsed_ms,
                timeout_ms,
            }) => write!(
                f,
                "warning: {elapsed_ms} ms of the {timeout_ms} ms execution timeout used (80 %)"
            ),
            PlanEvent::Warn(Warning::Phases { level, max_phases }) => write!(
                f,
                "warning: phase {level} of at most {max_phases} starts (80 % of max_phases)"
            ),
            PlanEvent::Cancelling(reason) => {
                write!(
                    f,
                    "cancel running agents: the plan stops ({})",
                    reason.name()
                )
            }
            PlanEvent::Done(reason) => write!(f, "plan {reason}"),
        }
    }
}
