//! The run's `tracing` spans and events (names in [`crate::semconv`]). With no subscriber
//! installed, a span is never built: the macros check the callsite's interest first, so the
//! formatting below costs nothing then.

use super::Env;
use crate::budget::{BudgetWarning, ToolBudgetEvent};
use crate::context::{ContextPrune, SystemCut};
use crate::error::RunError;
use crate::message::Message;
use crate::report::Report;
use crate::semconv::*;
use crate::tool::ToolsChanged;
use terminus_kernel::{
    CallReason, Finish, ModelErrorKind, ModelTurn, StepRecord, ToolOutcome, Verdict, textcall,
};
use tracing::Span;
use tracing::field::Empty;

/// The span of a run (a resumed run gets a span of its own, with the same conversation id).
pub(super) fn run(env: &Env, resumed: bool) -> Span {
    let name = env.name.as_deref().unwrap_or("terminus");
    let span = tracing::info_span!(
        target: TARGET,
        SPAN_RUN,
        otel.name = format!("{SPAN_RUN} {name}"),
        otel.kind = "internal",
        otel.status_code = Empty,
        { GEN_AI_OPERATION_NAME } = SPAN_RUN,
        { GEN_AI_AGENT_NAME } = name,
        { GEN_AI_CONVERSATION_ID } = env.execution.as_str(),
        { GEN_AI_PROVIDER_NAME } = Empty,
        { GEN_AI_REQUEST_MODEL } = Empty,
        { GEN_AI_USAGE_INPUT_TOKENS } = Empty,
        { GEN_AI_USAGE_OUTPUT_TOKENS } = Empty,
        { ERROR_TYPE } = Empty,
        { TERMINUS_RESUMED } = resumed,
        { TERMINUS_OUTCOME } = Empty,
        { TERMINUS_STOP_REASON } = Empty,
        { TERMINUS_RULE } = Empty,
        { TERMINUS_TOTAL_ITERATIONS } = Empty,
        { TERMINUS_WAS_ABORTED } = Empty,
        { TERMINUS_MODEL_CALLS } = Empty,
        { TERMINUS_TOOL_CALLS } = Empty,
        { TERMINUS_NUDGES } = Empty,
        { TERMINUS_VERIFICATION_FAILURES } = Empty,
        { TERMINUS_EMPTY_RESPONSES } = Empty,
        { TERMINUS_DUPLICATES_PREVENTED } = Empty,
        { TERMINUS_EXCLUDED_TOOLS } = Empty,
        { TERMINUS_BUDGET_WARNINGS } = Empty,
    );
    if !span.is_disabled() {
        model_identity(&span, env);
    }
    span
}

fn model_identity(span: &Span, env: &Env) {
    if !env.model_info.provider.is_empty() {
        span.record(GEN_AI_PROVIDER_NAME, env.model_info.provider.as_str());
    }
    if !env.model_info.model.is_empty() {
        span.record(GEN_AI_REQUEST_MODEL, env.model_info.model.as_str());
    }
}

/// Records how the run ended on its span: the report's outcome and counters, or the error.
pub(super) fn end_run(span: &Span, result: &Result<Report, RunError>) {
    if span.is_disabled() {
        return;
    }
    match result {
        Ok(report) => {
            let aborted = !report.is_complete();
            span.record(TERMINUS_OUTCOME, report.outcome.outcome_str());
            span.record(TERMINUS_STOP_REASON, report.outcome.reason_str());
            span.record(TERMINUS_RULE, report.rule.name());
            span.record(TERMINUS_TOTAL_ITERATIONS, int(report.steps));
            span.record(TERMINUS_WAS_ABORTED, aborted);
            span.record(TERMINUS_MODEL_CALLS, int(report.model_calls));
            span.record(TERMINUS_TOOL_CALLS, int(report.tool_calls));
            span.record(TERMINUS_NUDGES, int(report.nudges));
            span.record(
                TERMINUS_VERIFICATION_FAILURES,
                int(report.verification_failures),
            );
            span.record(TERMINUS_EMPTY_RESPONSES, int(report.empty_responses));
            span.record(
                TERMINUS_DUPLICATES_PREVENTED,
                int(report.duplicates_prevented),
            );
            span.record(GEN_AI_USAGE_INPUT_TOKENS, int(report.stats.input_tokens));
            span.record(GEN_AI_USAGE_OUTPUT_TOKENS, int(report.stats.output_tokens));
            if !report.excluded_tools.is_empty() {
                span.record(TERMINUS_EXCLUDED_TOOLS, report.excluded_tools.join(","));
            }
            if !report.warnings.is_empty() {
                let budgets: Vec<&str> =
                    report.warnings.iter().map(|w| w.budget.as_str()).collect();
                span.record(TERMINUS_BUDGET_WARNINGS, budgets.join(","));
            }
            if aborted {
                // An aborted run is a run that failed at its task: the stop reason is its class.
                span.record(ERROR_TYPE, report.outcome.reason_str());
                span.record("otel.status_code", "ERROR");
            }
        }
        Err(e) => {
            span.record(ERROR_TYPE, e.class());
            span.record("otel.status_code", "ERROR");
        }
    }
}

/// The span of one model call.
pub(super) fn chat(env: &Env, number: u32, reason: CallReason, messages: &[Message]) -> Span {
    let model = if env.model_info.model.is_empty() {
        "model"
    } else {
        env.model_info.model.as_str()
    };
    let span = tracing::info_span!(
        target: TARGET,
        SPAN_CHAT,
        otel.name = format!("{SPAN_CHAT} {model}"),
        otel.kind = "client",
        otel.status_code = Empty,
        { GEN_AI_OPERATION_NAME } = SPAN_CHAT,
        { GEN_AI_PROVIDER_NAME } = Empty,
        { GEN_AI_REQUEST_MODEL } = Empty,
        { GEN_AI_CONVERSATION_ID } = env.execution.as_str(),
        { GEN_AI_RESPONSE_MODEL } = Empty,
        { GEN_AI_RESPONSE_ID } = Empty,
        { GEN_AI_RESPONSE_FINISH_REASONS } = Empty,
        { GEN_AI_USAGE_INPUT_TOKENS } = Empty,
        { GEN_AI_USAGE_OUTPUT_TOKENS } = Empty,
        { GEN_AI_INPUT_MESSAGES } = Empty,
        { GEN_AI_OUTPUT_MESSAGES } = Empty,
        { ERROR_TYPE } = Empty,
        { TERMINUS_MODEL_CALL } = int(number),
        { TERMINUS_CALL_REASON } = call_reason(reason),
    );
    if !span.is_disabled() {
        model_identity(&span, env);
        if env.config.capture_content {
            span.record(
                GEN_AI_INPUT_MESSAGES,
                serde_json::to_string(messages).unwrap_or_default(),
            );
        }
    }
    span
}

/// Records a model call's answer on its span.
pub(super) fn end_chat(span: &Span, capture: bool, turn: &ModelTurn) {
    if span.is_disabled() {
        return;
    }
    span.record(GEN_AI_RESPONSE_FINISH_REASONS, finish_reason(turn.finish));
    if let Some(usage) = turn.usage {
        span.record(GEN_AI_USAGE_INPUT_TOKENS, int(usage.input_tokens));
        span.record(GEN_AI_USAGE_OUTPUT_TOKENS, int(usage.output_tokens));
    }
    if capture {
        let reply = serde_json::json!([{
            "role": "assistant",
            "content": turn.text,
            "tool_calls": turn.tool_calls,
        }]);
        span.record(GEN_AI_OUTPUT_MESSAGES, reply.to_string());
    }
}

/// Records a failed or interrupted model call on its span (`error.type` is the kind).
pub(super) fn fail(span: &Span, class: &str) {
    if span.is_disabled() {
        return;
    }
    span.record(ERROR_TYPE, class);
    span.record("otel.status_code", "ERROR");
}

/// The class of a model error, as `error.type`.
pub(super) fn model_error(kind: ModelErrorKind) -> &'static str {
    kind.as_str()
}

/// The span of one tool execution.
pub(super) fn tool(name: &str, call_id: &str) -> Span {
    tracing::info_span!(
        target: TARGET,
        SPAN_TOOL,
        otel.name = format!("{SPAN_TOOL} {name}"),
        otel.kind = "internal",
        otel.status_code = Empty,
        { GEN_AI_OPERATION_NAME } = SPAN_TOOL,
        { GEN_AI_TOOL_NAME } = name,
        { GEN_AI_TOOL_CALL_ID } = call_id,
        { GEN_AI_TOOL_TYPE } = "function",
        { ERROR_TYPE } = Empty,
    )
}

/// Records a tool's outcome on its span: an error's kind as `error.type`.
pub(super) fn end_tool(span: &Span, outcome: &ToolOutcome) {
    if let ToolOutcome::Error { kind, .. } = outcome {
        fail(span, kind.as_str());
    }
}

/// The span of one verification.
pub(super) fn verify() -> Span {
    tracing::info_span!(
        target: TARGET,
        SPAN_VERIFY,
        otel.name = SPAN_VERIFY,
        otel.kind = "internal",
        otel.status_code = Empty,
        { TERMINUS_VERDICT } = Empty,
        { ERROR_TYPE } = Empty,
    )
}

/// Records the verdict on its span.
pub(super) fn end_verify(span: &Span, verdict: &Verdict) {
    if span.is_disabled() {
        return;
    }
    let word = if verdict.complete {
        "accepted"
    } else {
        "rejected"
    };
    span.record(TERMINUS_VERDICT, word);
}

// Events take their field names as literals (the event macros read a leading `{ ... }` as a
// field set, not a constant); `semconv`'s tests hold them to the constants.

/// The event of one kernel transition, on the run span.
pub(super) fn transition(record: &StepRecord) {
    tracing::event!(
        target: TARGET,
        tracing::Level::INFO,
        terminus.step = int(record.step),
        terminus.from = record.from.as_str(),
        terminus.to = record.to.as_str(),
        terminus.input = record.input.label(),
        terminus.rule = record.rule.name(),
        "transition"
    );
}

/// The event of a budget warning, on the run span.
pub(super) fn budget_warning(warning: &BudgetWarning) {
    tracing::event!(
        target: TARGET,
        tracing::Level::WARN,
        terminus.budget = warning.budget.as_str(),
        terminus.budget.used = int(warning.used),
        terminus.budget.limit = int(warning.limit),
        terminus.step = int(warning.step),
        "budget_warning"
    );
}

/// The event of a per-tool budget's warning or block, on the run span.
pub(super) fn tool_budget(event: &ToolBudgetEvent) {
    match event.block_at {
        Some(block_at) => tracing::event!(
            target: TARGET,
            tracing::Level::WARN,
            gen_ai.tool.name = event.tool.as_str(),
            terminus.tool_budget.kind = event.kind.as_str(),
            terminus.tool_budget.call = int(event.call),
            terminus.tool_budget.block_at = int(block_at),
            terminus.step = int(event.step),
            "tool_budget"
        ),
        None => tracing::event!(
            target: TARGET,
            tracing::Level::WARN,
            gen_ai.tool.name = event.tool.as_str(),
            terminus.tool_budget.kind = event.kind.as_str(),
            terminus.tool_budget.call = int(event.call),
            terminus.step = int(event.step),
            "tool_budget"
        ),
    }
}

/// The event of a prune of the model's view, on the run span.
pub(super) fn context_pruned(prune: &ContextPrune) {
    tracing::event!(
        target: TARGET,
        tracing::Level::INFO,
        terminus.model_call = int(prune.model_call),
        terminus.step = int(prune.step),
        terminus.context.messages_before = int(prune.messages_before),
        terminus.context.messages_after = int(prune.messages_after),
        terminus.context.tokens_before = int(prune.tokens_before),
        terminus.context.tokens_after = int(prune.tokens_after),
        "context_pruned"
    );
}

/// The event of a change of the tool list before a model call, on the run span: the names
/// added, removed and changed, comma-separated.
/// A model turn held tool calls written as text: recovered as real calls, or left to be nudged.
/// A checkpoint written for the agent after step `step`: the budgets it lifted and its length.
pub(super) fn auto_checkpoint(step: u32, lifted: &[String], chars: usize) {
    tracing::event!(
        target: TARGET,
        tracing::Level::INFO,
        terminus.step = int(step),
        terminus.auto_checkpoint.lifted = lifted.join(","),
        terminus.auto_checkpoint.chars = int(u64::try_from(chars).unwrap_or(u64::MAX)),
        "auto_checkpoint"
    );
}

pub(super) fn text_tool_calls(model_call: u32, recovery: &textcall::Recovery) {
    match recovery {
        textcall::Recovery::Ran { format, calls } => tracing::event!(
            target: TARGET,
            tracing::Level::INFO,
            terminus.model_call = int(model_call),
            terminus.text_tool_calls.format = format.as_str(),
            terminus.text_tool_calls.recovered = int(*calls),
            "text_tool_calls"
        ),
        textcall::Recovery::Nudged {
            format,
            names,
            unknown,
        } => tracing::event!(
            target: TARGET,
            tracing::Level::INFO,
            terminus.model_call = int(model_call),
            terminus.text_tool_calls.format = format.as_str(),
            terminus.text_tool_calls.names = names.join(","),
            terminus.text_tool_calls.unknown = unknown.join(","),
            "text_tool_calls"
        ),
    }
}

pub(super) fn tools_changed(change: &ToolsChanged) {
    tracing::event!(
        target: TARGET,
        tracing::Level::INFO,
        terminus.model_call = int(change.model_call),
        terminus.tools.added = change.added.join(","),
        terminus.tools.removed = change.removed.join(","),
        terminus.tools.changed = change.changed.join(","),
        "tools_changed"
    );
}

/// The event of a job a tool call waits for saying what it does, on the run span (the call's
/// own span is the tool's).
pub(super) fn job(status: &crate::jobs::JobStatus) {
    tracing::event!(
        target: TARGET,
        tracing::Level::INFO,
        gen_ai.tool.name = status.tool.as_str(),
        gen_ai.tool.call.id = status.call_id.as_str(),
        terminus.job = status.job.to_string(),
        terminus.job.status = status.status.as_str(),
        "job_status"
    );
}

/// The event of a system prompt cut to `max_system_tokens`, on the run span.
pub(super) fn system_cut(cut: &SystemCut) {
    tracing::event!(
        target: TARGET,
        tracing::Level::WARN,
        terminus.context.system_tokens = int(cut.total),
        terminus.context.system_shown = int(cut.shown),
        terminus.context.max_system_tokens = int(cut.max),
        "system_prompt_cut"
    );
}

/// A count as the signed integer OpenTelemetry attributes hold (`tracing`'s unsigned values
/// would arrive as strings).
fn int(n: impl Into<u64>) -> i64 {
    i64::try_from(n.into()).unwrap_or(i64::MAX)
}

/// The OpenTelemetry finish reason of a turn.
const fn finish_reason(finish: Finish) -> &'static str {
    match finish {
        Finish::Stop => "stop",
        Finish::Length => "length",
        Finish::ContentFilter => "content_filter",
        Finish::ToolCalls => "tool_calls",
        Finish::Repetition => "repetition",
    }
}

const fn call_reason(reason: CallReason) -> &'static str {
    match reason {
        CallReason::Start => "start",
        CallReason::AfterTools => "after_tools",
        CallReason::Retry { .. } => "retry",
        CallReason::Continue => "continue",
        CallReason::Nudge => "nudge",
        CallReason::VerifierRejected => "verifier_rejected",
        CallReason::FinalAnswer { .. } => "final_answer",
    }
}

#[cfg(test)]
mod tests {
    use crate::semconv::*;

    #[test]
    fn the_literal_event_fields_are_the_constants() {
        let fields = [
            ("terminus.step", TERMINUS_STEP),
            ("terminus.from", TERMINUS_FROM),
            ("terminus.to", TERMINUS_TO),
            ("terminus.input", TERMINUS_INPUT),
            ("terminus.rule", TERMINUS_RULE),
            ("terminus.budget", TERMINUS_BUDGET),
            ("terminus.budget.used", TERMINUS_BUDGET_USED),
            ("terminus.budget.limit", TERMINUS_BUDGET_LIMIT),
            ("transition", EVENT_TRANSITION),
            ("budget_warning", EVENT_BUDGET_WARNING),
            ("gen_ai.tool.name", GEN_AI_TOOL_NAME),
            ("terminus.model_call", TERMINUS_MODEL_CALL),
            ("terminus.tool_budget.kind", TERMINUS_TOOL_BUDGET_KIND),
            ("terminus.tool_budget.call", TERMINUS_TOOL_BUDGET_CALL),
            (
                "terminus.tool_budget.block_at",
                TERMINUS_TOOL_BUDGET_BLOCK_AT,
            ),
            (
                "terminus.context.messages_before",
                TERMINUS_CONTEXT_MESSAGES_BEFORE,
            ),
            (
                "terminus.context.messages_after",
                TERMINUS_CONTEXT_MESSAGES_AFTER,
            ),
            (
                "terminus.context.tokens_before",
                TERMINUS_CONTEXT_TOKENS_BEFORE,
            ),
            (
                "terminus.context.tokens_after",
                TERMINUS_CONTEXT_TOKENS_AFTER,
            ),
            (
                "terminus.context.system_tokens",
                TERMINUS_CONTEXT_SYSTEM_TOKENS,
            ),
            (
                "terminus.context.system_shown",
                TERMINUS_CONTEXT_SYSTEM_SHOWN,
            ),
            (
                "terminus.context.max_system_tokens",
                TERMINUS_CONTEXT_MAX_SYSTEM_TOKENS,
            ),
            ("tool_budget", EVENT_TOOL_BUDGET),
            ("context_pruned", EVENT_CONTEXT_PRUNED),
            ("system_prompt_cut", EVENT_SYSTEM_PROMPT_CUT),
            ("terminus.tools.added", TERMINUS_TOOLS_ADDED),
            ("terminus.tools.removed", TERMINUS_TOOLS_REMOVED),
            ("terminus.tools.changed", TERMINUS_TOOLS_CHANGED),
            ("tools_changed", EVENT_TOOLS_CHANGED),
        ];
        for (literal, constant) in fields {
            assert_eq!(literal, constant);
        }
    }
}
