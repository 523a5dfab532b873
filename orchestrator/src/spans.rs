//! The plan's `tracing` span and its events (names in [`terminus_runtime::semconv`]), target
//! [`TARGET`] like the runtime's, so the telemetry layer exports them with the runs.
//!
//! The plan span is the parent of every agent's run span: each attempt's future is instrumented
//! with it, so the runtime's `invoke_agent` span, made inside, nests under it (the
//! orchestration's own loop runs in it too, so whatever the store traces nests under it). The
//! plan's events (a retry, a breaker opening, a skip, a degradation) are on the plan span, each
//! naming its agent: an agent's attempts are run spans of their own (a skipped agent may have
//! none), and the plan span is the one span that outlives them all. With no subscriber
//! installed, the span is never built and the events cost a callsite check.

use crate::breaker::Breaker;
use crate::error::OrchestrateError;
use crate::report::PlanReport;
use crate::schedule::Why;
use terminus_runtime::semconv::*;
use tracing::Span;
use tracing::field::Empty;

/// The span of a plan run (a resumed orchestration gets a span of its own).
pub(crate) fn plan(name: &str, execution: &str, agents: usize, resumed: bool) -> Span {
    tracing::info_span!(
        target: TARGET,
        SPAN_PLAN,
        otel.name = format!("{SPAN_PLAN} {name}"),
        otel.kind = "internal",
        otel.status_code = Empty,
        { TERMINUS_PLAN_NAME } = name,
        { TERMINUS_PLAN_EXECUTION } = execution,
        { TERMINUS_PLAN_AGENTS } = int(agents),
        { TERMINUS_RESUMED } = resumed,
        { TERMINUS_OUTCOME } = Empty,
        { TERMINUS_PLAN_REASON } = Empty,
        { TERMINUS_PLAN_ELAPSED_MS } = Empty,
        { ERROR_TYPE } = Empty,
    )
}

/// Records how the plan ended on its span: its outcome and reason, or the error. An aborted
/// plan is an error (`error.type` is its reason), as an aborted run is.
pub(crate) fn end_plan(span: &Span, result: &Result<PlanReport, OrchestrateError>) {
    if span.is_disabled() {
        return;
    }
    match result {
        Ok(report) => {
            span.record(TERMINUS_OUTCOME, report.outcome.as_str());
            span.record(TERMINUS_PLAN_REASON, report.reason.name());
            span.record(TERMINUS_PLAN_ELAPSED_MS, int(report.elapsed_ms));
            if !report.reason.is_complete() {
                span.record(ERROR_TYPE, report.reason.name());
                span.record("otel.status_code", "ERROR");
            }
        }
        Err(e) => {
            span.record(ERROR_TYPE, e.class());
            span.record("otel.status_code", "ERROR");
        }
    }
}

// Events take their field names as literals (the event macros read a leading `{ ... }` as a
// field set, not a constant); the tests below hold them to the constants.

/// A failed agent runs again after `delay_ms`.
pub(crate) fn retry(span: &Span, agent: &str, attempt: u32, delay_ms: u64, after: &str) {
    tracing::event!(
        target: TARGET,
        parent: span,
        tracing::Level::INFO,
        gen_ai.agent.name = agent,
        terminus.attempt = int(attempt),
        terminus.delay_ms = int(delay_ms),
        terminus.after = after,
        "agent_retry"
    );
}

/// An agent id's breaker opened (from `from`), admitting a probe at `until_ms`.
pub(crate) fn breaker_open(span: &Span, agent: &str, from: Breaker, until_ms: u64) {
    tracing::event!(
        target: TARGET,
        parent: span,
        tracing::Level::WARN,
        gen_ai.agent.name = agent,
        terminus.breaker.from = from.name(),
        terminus.breaker.until_ms = int(until_ms),
        "breaker_open"
    );
}

/// An agent ended skipped.
pub(crate) fn skipped(span: &Span, agent: &str, why: Option<&Why>, detail: &str) {
    tracing::event!(
        target: TARGET,
        parent: span,
        tracing::Level::WARN,
        gen_ai.agent.name = agent,
        terminus.why = why.map_or("", Why::name),
        terminus.detail = detail,
        "agent_skipped"
    );
}

/// An agent ended degraded: its `degraded_result` stands in for its result.
pub(crate) fn degraded(span: &Span, agent: &str, why: Option<&Why>, detail: &str) {
    tracing::event!(
        target: TARGET,
        parent: span,
        tracing::Level::WARN,
        gen_ai.agent.name = agent,
        terminus.why = why.map_or("", Why::name),
        terminus.detail = detail,
        "agent_degraded"
    );
}

/// A count as the signed integer OpenTelemetry attributes hold (`tracing`'s unsigned values
/// would arrive as strings).
fn int(n: impl TryInto<i64>) -> i64 {
    n.try_into().unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use terminus_runtime::semconv::*;

    #[test]
    fn the_literal_event_fields_are_the_constants() {
        let fields = [
            ("gen_ai.agent.name", GEN_AI_AGENT_NAME),
            ("terminus.attempt", TERMINUS_ATTEMPT),
            ("terminus.delay_ms", TERMINUS_DELAY_MS),
            ("terminus.after", TERMINUS_AFTER),
            ("terminus.breaker.from", TERMINUS_BREAKER_FROM),
            ("terminus.breaker.until_ms", TERMINUS_BREAKER_UNTIL_MS),
            ("terminus.why", TERMINUS_WHY),
            ("terminus.detail", TERMINUS_DETAIL),
            ("agent_retry", EVENT_AGENT_RETRY),
            ("breaker_open", EVENT_BREAKER_OPEN),
            ("agent_skipped", EVENT_AGENT_SKIPPED),
            ("agent_degraded", EVENT_AGENT_DEGRADED),
        ];
        for (literal, constant) in fields {
            assert_eq!(literal, constant);
        }
    }
}
