//! The plan's metrics, through the `metrics` facade, named in [`terminus_runtime::meters`]
//! ([`PLANS`] to [`AGENT_SECONDS`]): nothing is recorded (and nothing costs more than a check)
//! until the host installs a recorder. Every label is a fixed word, never an agent id or a
//! plan name, so a series per value stays bounded.

use crate::error::OrchestrateError;
use crate::report::PlanReport;
use crate::schedule::{Status, Why};
use std::time::Duration;
use terminus_runtime::meters::{
    AGENT_DEGRADATIONS, AGENT_RETRIES, AGENT_SECONDS, AGENT_SKIPS, BREAKER_OPENINGS, PLAN_ERRORS,
    PLANS,
};

/// A plan ended: its outcome and reason, or its error's class.
pub(crate) fn plan_ended(result: &Result<PlanReport, OrchestrateError>) {
    match result {
        Ok(report) => {
            let outcome = if report.reason.is_complete() {
                "complete"
            } else {
                "aborted"
            };
            metrics::counter!(PLANS, "outcome" => outcome, "reason" => report.reason.name())
                .increment(1);
        }
        Err(e) => metrics::counter!(PLAN_ERRORS, "class" => e.class()).increment(1),
    }
}

/// A failed agent runs again.
pub(crate) fn retry() {
    metrics::counter!(AGENT_RETRIES).increment(1);
}

/// A breaker opened.
pub(crate) fn breaker_open() {
    metrics::counter!(BREAKER_OPENINGS).increment(1);
}

/// An agent ended: skipped or degraded ones are counted by why, and an agent that ran is timed
/// from its first start to its end.
pub(crate) fn agent_ended(status: Status, why: Option<&Why>, took: Option<Duration>) {
    let why = why.map_or("", Why::name);
    match status {
        Status::Skipped => metrics::counter!(AGENT_SKIPS, "why" => why).increment(1),
        Status::Degraded => metrics::counter!(AGENT_DEGRADATIONS, "why" => why).increment(1),
        Status::Complete | Status::Failed | Status::NotRun => {}
    }
    if let Some(took) = took {
        metrics::histogram!(AGENT_SECONDS, "status" => status.name()).record(took.as_secs_f64());
    }
}
