//! The names of the attributes, spans and events a run emits through `tracing`.
//!
//! The `gen_ai.*` and `error.type` names are those of the OpenTelemetry semantic conventions for
//! generative AI (agent, inference and tool spans) as they stand; they are constants of our own
//! because the `opentelemetry-semantic-conventions` crate marks its `gen_ai` constants
//! deprecated while the conventions are in development. The `terminus.*` names are ours: the
//! run's outcome, stop reason, rule and counters, so a trace backend can filter runs as
//! `terminus.total_iterations >= 10` or `terminus.was_aborted = true`.
//!
//! Spans (the `otel.name` field gives the exported name):
//!
//! | span | exported name | when |
//! |---|---|---|
//! | [`SPAN_RUN`] | `invoke_agent {name}` | a run, from start (or resume) to stop |
//! | [`SPAN_CHAT`] | `chat {model}` | one model call (retries are calls of their own) |
//! | [`SPAN_TOOL`] | `execute_tool {tool}` | one tool execution |
//! | [`SPAN_VERIFY`] | `verify` | one verification (a verifier's model call is its child) |
//! | [`SPAN_PLAN`] | `plan {name}` | a multi-agent plan (the orchestrator), parent of its agents' run spans |
//!
//! Events on the run span: [`EVENT_TRANSITION`] (one per kernel transition: step, from, to,
//! input, rule) and [`EVENT_BUDGET_WARNING`] (a budget passed 80 %).
//!
//! Events on the plan span, each naming its agent ([`GEN_AI_AGENT_NAME`]):
//! [`EVENT_AGENT_RETRY`] (the next attempt, its backoff, how the failed one ended),
//! [`EVENT_BREAKER_OPEN`] (the agent id's circuit breaker opened), [`EVENT_AGENT_SKIPPED`] and
//! [`EVENT_AGENT_DEGRADED`] (why, as the report's `why` names it, and in words).
//!
//! Prompt and completion text ([`GEN_AI_INPUT_MESSAGES`], [`GEN_AI_OUTPUT_MESSAGES`]) are
//! recorded only when [`crate::RuntimeConfig::capture_content`] is on. No span ever carries a
//! credential: the runtime never sees one, and the model adapters record only the response's
//! model and id.

/// `gen_ai.operation.name`: `invoke_agent`, `chat` or `execute_tool`.
pub const GEN_AI_OPERATION_NAME: &str = "gen_ai.operation.name";
/// `gen_ai.provider.name`: `openai`, `anthropic`, or `terminus.scripted` for scenario files.
pub const GEN_AI_PROVIDER_NAME: &str = "gen_ai.provider.name";
/// `gen_ai.request.model`: the model asked for.
pub const GEN_AI_REQUEST_MODEL: &str = "gen_ai.request.model";
/// `gen_ai.response.model`: the model that answered, as the provider names it.
pub const GEN_AI_RESPONSE_MODEL: &str = "gen_ai.response.model";
/// `gen_ai.response.id`: the provider's id of the response.
pub const GEN_AI_RESPONSE_ID: &str = "gen_ai.response.id";
/// `gen_ai.response.finish_reasons`: why generation stopped (`stop`, `length`, `tool_calls`,
/// `content_filter`, `error`).
pub const GEN_AI_RESPONSE_FINISH_REASONS: &str = "gen_ai.response.finish_reasons";
/// `gen_ai.usage.input_tokens`: input tokens of a call (on the run span: of the whole run).
pub const GEN_AI_USAGE_INPUT_TOKENS: &str = "gen_ai.usage.input_tokens";
/// `gen_ai.usage.output_tokens`: output tokens of a call (on the run span: of the whole run).
pub const GEN_AI_USAGE_OUTPUT_TOKENS: &str = "gen_ai.usage.output_tokens";
/// `gen_ai.tool.name`: the tool executed.
pub const GEN_AI_TOOL_NAME: &str = "gen_ai.tool.name";
/// `gen_ai.tool.call.id`: the model's id of the tool call.
pub const GEN_AI_TOOL_CALL_ID: &str = "gen_ai.tool.call.id";
/// `gen_ai.tool.type`: `function` for every Terminus tool.
pub const GEN_AI_TOOL_TYPE: &str = "gen_ai.tool.type";
/// `gen_ai.agent.name`: the run's name (the scenario's, the agent's), or `terminus`.
pub const GEN_AI_AGENT_NAME: &str = "gen_ai.agent.name";
/// `gen_ai.conversation.id`: the execution id (a resumed run has the same).
pub const GEN_AI_CONVERSATION_ID: &str = "gen_ai.conversation.id";
/// `gen_ai.input.messages`: the messages sent, as JSON (only with content capture on).
pub const GEN_AI_INPUT_MESSAGES: &str = "gen_ai.input.messages";
/// `gen_ai.output.messages`: the reply, as JSON (only with content capture on).
pub const GEN_AI_OUTPUT_MESSAGES: &str = "gen_ai.output.messages";
/// `error.type`: the class of failure (a model error kind, a tool error kind, a stop reason of
/// an aborted run, `cancelled`, `deadline`).
pub const ERROR_TYPE: &str = "error.type";

/// `terminus.outcome`: `complete` or `aborted`.
pub const TERMINUS_OUTCOME: &str = "terminus.outcome";
/// `terminus.stop_reason`: the canonical stop reason (`docs/design.md`, "Stop reasons").
pub const TERMINUS_STOP_REASON: &str = "terminus.stop_reason";
/// `terminus.rule`: the kernel rule that ended the run, or fired at a transition.
pub const TERMINUS_RULE: &str = "terminus.rule";
/// `terminus.total_iterations`: the run's steps (transitions).
pub const TERMINUS_TOTAL_ITERATIONS: &str = "terminus.total_iterations";
/// `terminus.was_aborted`: whether the run ended aborted.
pub const TERMINUS_WAS_ABORTED: &str = "terminus.was_aborted";
/// `terminus.model_calls`: model calls of the run (retries included).
pub const TERMINUS_MODEL_CALLS: &str = "terminus.model_calls";
/// `terminus.tool_calls`: tool executions of the run.
pub const TERMINUS_TOOL_CALLS: &str = "terminus.tool_calls";
/// `terminus.nudges`: completion claims refused with a nudge.
pub const TERMINUS_NUDGES: &str = "terminus.nudges";
/// `terminus.verification_failures`: verifier rejections.
pub const TERMINUS_VERIFICATION_FAILURES: &str = "terminus.verification_failures";
/// `terminus.empty_responses`: empty model replies.
pub const TERMINUS_EMPTY_RESPONSES: &str = "terminus.empty_responses";
/// `terminus.duplicates_prevented`: journal appends that found their entry stored.
pub const TERMINUS_DUPLICATES_PREVENTED: &str = "terminus.duplicates_prevented";
/// `terminus.excluded_tools`: tools excluded during the run, comma-separated.
pub const TERMINUS_EXCLUDED_TOOLS: &str = "terminus.excluded_tools";
/// `terminus.budget_warnings`: budgets that passed 80 %, comma-separated.
pub const TERMINUS_BUDGET_WARNINGS: &str = "terminus.budget_warnings";
/// `terminus.resumed`: whether this span continues a run from its journal.
pub const TERMINUS_RESUMED: &str = "terminus.resumed";
/// `terminus.call_reason`: why the kernel asked for a model call (`turn`, `retry`,
/// `final_answer`, ...).
pub const TERMINUS_CALL_REASON: &str = "terminus.call_reason";
/// `terminus.model_call`: the model call's number in the run (1-based).
pub const TERMINUS_MODEL_CALL: &str = "terminus.model_call";
/// `terminus.verdict`: `accepted` or `rejected`.
pub const TERMINUS_VERDICT: &str = "terminus.verdict";
/// `terminus.step` on a transition event.
pub const TERMINUS_STEP: &str = "terminus.step";
/// `terminus.from` on a transition event: the state before.
pub const TERMINUS_FROM: &str = "terminus.from";
/// `terminus.to` on a transition event: the state after.
pub const TERMINUS_TO: &str = "terminus.to";
/// `terminus.input` on a transition event: the abstract input.
pub const TERMINUS_INPUT: &str = "terminus.input";
/// `terminus.budget` on a budget warning: `steps`, `model_calls`, `tokens` or `deadline`.
pub const TERMINUS_BUDGET: &str = "terminus.budget";
/// `terminus.budget.used` on a budget warning.
pub const TERMINUS_BUDGET_USED: &str = "terminus.budget.used";
/// `terminus.budget.limit` on a budget warning.
pub const TERMINUS_BUDGET_LIMIT: &str = "terminus.budget.limit";
/// `terminus.tool_budget.kind` on a tool budget event: `warn` or `block`.
pub const TERMINUS_TOOL_BUDGET_KIND: &str = "terminus.tool_budget.kind";
/// `terminus.tool_budget.call` on a tool budget event: the call's number for its tool.
pub const TERMINUS_TOOL_BUDGET_CALL: &str = "terminus.tool_budget.call";
/// `terminus.tool_budget.block_at` on a tool budget event, when the budget sets one.
pub const TERMINUS_TOOL_BUDGET_BLOCK_AT: &str = "terminus.tool_budget.block_at";
/// `terminus.context.messages_before` on a prune: messages of the conversation.
pub const TERMINUS_CONTEXT_MESSAGES_BEFORE: &str = "terminus.context.messages_before";
/// `terminus.context.messages_after` on a prune: messages of the view sent.
pub const TERMINUS_CONTEXT_MESSAGES_AFTER: &str = "terminus.context.messages_after";
/// `terminus.context.tokens_before` on a prune: tokens of the conversation as one request.
pub const TERMINUS_CONTEXT_TOKENS_BEFORE: &str = "terminus.context.tokens_before";
/// `terminus.context.tokens_after` on a prune: tokens of the view sent.
pub const TERMINUS_CONTEXT_TOKENS_AFTER: &str = "terminus.context.tokens_after";
/// `terminus.context.system_tokens` on a system prompt cut: tokens of the whole prompt.
pub const TERMINUS_CONTEXT_SYSTEM_TOKENS: &str = "terminus.context.system_tokens";
/// `terminus.context.system_shown` on a system prompt cut: tokens of it still shown.
pub const TERMINUS_CONTEXT_SYSTEM_SHOWN: &str = "terminus.context.system_shown";
/// `terminus.context.max_system_tokens` on a system prompt cut: the policy's limit.
pub const TERMINUS_CONTEXT_MAX_SYSTEM_TOKENS: &str = "terminus.context.max_system_tokens";
/// `terminus.tools.added` on a tool list change: the tools that appeared, comma-separated.
pub const TERMINUS_TOOLS_ADDED: &str = "terminus.tools.added";
/// `terminus.tools.removed` on a tool list change: the tools that are gone, comma-separated.
pub const TERMINUS_TOOLS_REMOVED: &str = "terminus.tools.removed";
/// `terminus.tools.changed` on a tool list change: the tools whose description or parameters
/// changed, comma-separated.
pub const TERMINUS_TOOLS_CHANGED: &str = "terminus.tools.changed";

/// `terminus.plan.name` on a plan span: the plan's name.
pub const TERMINUS_PLAN_NAME: &str = "terminus.plan.name";
/// `terminus.plan.execution` on a plan span: the orchestration's execution id (each agent's
/// attempt is the execution `{plan execution}/{agent}/{attempt}`).
pub const TERMINUS_PLAN_EXECUTION: &str = "terminus.plan.execution";
/// `terminus.plan.agents` on a plan span: how many agents the plan has.
pub const TERMINUS_PLAN_AGENTS: &str = "terminus.plan.agents";
/// `terminus.plan.reason` on a plan span: the plan's stop reason (`all_complete`, `degraded`,
/// `agent_failed`, `execution_timeout`, `max_phases`, `cancelled`; `docs/plans.md`).
pub const TERMINUS_PLAN_REASON: &str = "terminus.plan.reason";
/// `terminus.plan.elapsed_ms` on a plan span: plan time at the end (across resumes).
pub const TERMINUS_PLAN_ELAPSED_MS: &str = "terminus.plan.elapsed_ms";
/// `terminus.attempt` on a retry event: the attempt about to run (1-based).
pub const TERMINUS_ATTEMPT: &str = "terminus.attempt";
/// `terminus.delay_ms` on a retry event: the backoff before it.
pub const TERMINUS_DELAY_MS: &str = "terminus.delay_ms";
/// `terminus.after` on a retry event: how the failed attempt ended (its outcome and rule, or the
/// error of a run that ended without a report).
pub const TERMINUS_AFTER: &str = "terminus.after";
/// `terminus.breaker.from` on a breaker event: the state it left (`closed`, `half_open`).
pub const TERMINUS_BREAKER_FROM: &str = "terminus.breaker.from";
/// `terminus.breaker.until_ms` on a breaker event: when it admits a probe (Unix ms).
pub const TERMINUS_BREAKER_UNTIL_MS: &str = "terminus.breaker.until_ms";
/// `terminus.why` on a skip or degradation event: why the agent did not complete, as the plan
/// report's `why` names it (`run_failed`, `circuit_open`, `dependency_skipped`, `budget_spent`,
/// `plan_stopped`).
pub const TERMINUS_WHY: &str = "terminus.why";
/// `terminus.detail` on a skip or degradation event: the same in words (the progress line's).
pub const TERMINUS_DETAIL: &str = "terminus.detail";

/// The run span's `tracing` name (exported as `invoke_agent {name}`).
pub const SPAN_RUN: &str = "invoke_agent";
/// A model call's span.
pub const SPAN_CHAT: &str = "chat";
/// A tool execution's span.
pub const SPAN_TOOL: &str = "execute_tool";
/// A verification's span.
pub const SPAN_VERIFY: &str = "verify";
/// A plan's span (exported as `plan {name}`): the parent of its agents' run spans.
pub const SPAN_PLAN: &str = "plan";
/// The event of a kernel transition.
pub const EVENT_TRANSITION: &str = "transition";
/// The event of a budget passing 80 %.
pub const EVENT_BUDGET_WARNING: &str = "budget_warning";
/// The event of a per-tool budget's warning or block.
pub const EVENT_TOOL_BUDGET: &str = "tool_budget";
/// The event of a prune of the model's view.
pub const EVENT_CONTEXT_PRUNED: &str = "context_pruned";
/// The event of a system prompt cut to `max_system_tokens`.
pub const EVENT_SYSTEM_PROMPT_CUT: &str = "system_prompt_cut";
/// The event of a change of the tool list before a model call (an MCP server's
/// `notifications/tools/list_changed`).
pub const EVENT_TOOLS_CHANGED: &str = "tools_changed";
/// The event of a failed agent that runs again after its backoff, on the plan span.
pub const EVENT_AGENT_RETRY: &str = "agent_retry";
/// The event of an agent id's circuit breaker opening, on the plan span.
pub const EVENT_BREAKER_OPEN: &str = "breaker_open";
/// The event of an agent skipped (it failed or could not run, and yields no result), on the
/// plan span.
pub const EVENT_AGENT_SKIPPED: &str = "agent_skipped";
/// The event of an agent degraded (it failed or could not run, and its `degraded_result` stands
/// in for its result), on the plan span.
pub const EVENT_AGENT_DEGRADED: &str = "agent_degraded";
/// The `tracing` target of every span and event of the runtime and the orchestrator.
pub const TARGET: &str = "terminus";
