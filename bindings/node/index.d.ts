// Types of `terminus-kernel`: the JSON vocabulary of the embedding contract (docs/embedding.md).
// Keys inside events, commands and reports stay snake_case, as in Rust and Python.

/** Any JSON value. */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/**
 * A tool a model call offered, as a framework has it: its `name` (or OpenAI's `function.name`)
 * and its arguments' JSON Schema in `parameters`, `function.parameters`, `inputSchema` (or the AI
 * SDK's `inputSchema.jsonSchema`) or `schema`, when it is plain JSON.
 */
export interface OfferedTool {
  name?: string;
  function?: { name?: string; parameters?: Json };
  parameters?: Json;
  inputSchema?: Json | { jsonSchema: Json };
  schema?: unknown;
  [key: string]: unknown;
}

/** The scenario `policy` fields, same names and defaults (docs/design.md, "The policy"). */
export interface Policy {
  max_steps?: number;
  max_model_calls?: number;
  max_no_ops?: number;
  max_nudges?: number;
  max_verification_failures?: number;
  on_verification_limit?: string;
  verify_completion?: boolean;
  completion_requires?: string[];
  max_tool_failures?: number;
  max_consecutive_tool_failures?: number;
  on_unrecoverable_tool_error?: string;
  max_repeats?: number;
  /** Tools polled for a job's status: their identical results are waiting, not a loop (bounded by `max_polls`). */
  pollers?: string[];
  max_polls?: number;
  max_loop_period?: number;
  max_empty_responses?: number;
  max_model_retries?: number;
  retry_base_ms?: number;
  retry_max_ms?: number;
  deadline_ms?: number | null;
  token_budget?: number | null;
  max_output_tokens?: number | null;
  tool_budgets?: { [tool: string]: ToolBudget };
  max_blocked_turns?: number;
  seed?: number;
  final_answer_on_budget?: boolean;
  /** Nobody is there to answer: a reply that only asks for more, apologises or tells the
   * reader to act is not an answer (docs/design.md, "What a final answer is"). Default false. */
  autonomous?: boolean;
  [field: string]: Json | undefined;
}

/** A tool's budget: the single-tier keys, or `tiers` (docs/design.md, "Tool budget tiers"). */
export interface ToolBudget {
  warn_at?: number | null;
  block_at?: number | null;
  hard_block_at?: number | null;
  reset_on?: string[];
  tiers?: Tier[];
}

/** One tier: its warnings from `warn_at`, its block from `block_at` until a `reset_on` tool succeeds. */
export interface Tier {
  name?: string;
  warn_at?: number;
  block_at?: number;
  reset_on?: string[];
  /** `run` (default): calls since the run's start; `since_lift`: since the tier's last lift. */
  count?: 'run' | 'since_lift';
  /** The warning's own text. */
  warning?: string;
}

export type Finish = 'stop' | 'length' | 'content_filter' | 'tool_calls';
export type ModelErrorKind = 'rate_limited' | 'server' | 'timeout' | 'auth' | 'bad_request' | 'context_overflow';
export type ToolErrorKind = 'permission_denied' | 'not_found' | 'auth_failed' | 'timeout' | 'invalid_arguments' | 'failed';

export interface ToolCallIn {
  /** Default `call-{model call}-{index}`. */
  id?: string | null;
  name: string;
  /** Default `{}`. */
  arguments?: Json;
}

export interface ModelTurn {
  text?: string | null;
  tool_calls?: ToolCallIn[] | null;
  needs_more_work?: boolean | null;
  usage?: { input_tokens: number; output_tokens: number } | null;
  finish?: Finish | null;
  reasoning?: boolean | null;
}

export type ToolResultIn =
  | { call_id: string; name: string; ok: Json }
  | { call_id: string; name: string; error: ToolErrorKind; message?: string | null };

/** One event: an object with exactly one of these keys. */
export type Event =
  | { model_turn: ModelTurn }
  | { model_error: { kind: ModelErrorKind; retry_after_ms?: number | null } }
  | { tool_results: ToolResultIn[] }
  | { verdict: { complete: boolean; feedback?: string | null; missing?: string[] | null } }
  | { tick: number }
  | { cancel: true };

export interface CallOut {
  id: string;
  name: string;
  arguments: Json;
}

export interface Todo {
  content: string;
  status: 'pending' | 'in_progress' | 'completed' | 'cancelled';
  [key: string]: Json;
}

/** Every counter of the kernel (`stats` and the report's `stats`). */
export interface Stats {
  steps: number;
  model_calls: number;
  tool_calls: number;
  nudges: number;
  [counter: string]: Json;
}

/** The fields of `terminus run --json` but the execution id. */
export interface Report {
  /** `complete` or `aborted`; null while the run goes on. */
  outcome: 'complete' | 'aborted' | null;
  /** Why it stopped (`explicit`, `max_steps`, `no_progress`, `empty_responses`, ...). */
  reason: string | null;
  rule: string | null;
  steps: number;
  model_calls: number;
  tool_calls: number;
  nudges: number;
  verification_failures: number;
  no_ops: number;
  empty_responses: number;
  excluded_tools: string[];
  entries: number;
  duplicates_prevented: number;
  result: string | null;
  todos: Todo[];
  stats: Stats;
  trace: Json[];
  /** Each warning or block of a per-tool budget (`tool_budgets`), in order; absent when none. */
  tool_budget_events?: { tool: string; kind: 'warn' | 'block'; call: number; block_at?: number; bound?: string; tier?: number; step: number }[];
  /** The task's size and the budgets it gave, when the policy was scaled. */
  scale?: { units: number; budgets: { [field: string]: Json } };
  [field: string]: Json;
}

/** One command for the host. */
export type Command =
  | { command: 'call_model'; delay_ms: number; tools: boolean }
  | {
      command: 'run_tools';
      calls: CallOut[];
      refused?: (CallOut & { text: string })[];
      warnings?: { id: string; text: string }[];
    }
  | { command: 'verify'; claim: string; todos: Todo[]; missing: string[] }
  | { command: 'nudge'; text: string }
  | { command: 'notice'; text: string }
  | {
      /** With `policy.auto_checkpoints`: ask the model with `prompt` (no tools) for a summary,
       * then add `note`, a blank line and the summary to the conversation. */
      command: 'checkpoint';
      prompt: string;
      note: string;
      blocked: string[];
      lifted: string[];
    }
  | { command: 'stop'; report: Report };

export type Phase = 'Exploring' | 'Acting' | 'Verifying' | 'Nudged' | 'Complete' | 'Aborted';

/** The kernel: feed it events with `handle`, take its commands with `nextCommand`. */
export declare class Machine {
  /**
   * A run under `policy`. An unknown or ill-typed field throws an `Error` naming it
   * (`policy.max_stpes: unknown field, ...`). `task` and `name` only label the run in `explain()`;
   * `scale`, the task's size in units, scales the policy's `budget_scale` (see `Policy`).
   * `journalSteps`: how many of the run's last steps the machine keeps of its journal (16 by
   * default, `null` for all): they make the report's `trace` and the explanation's path, while
   * every count stays the whole run's, so that `snapshot()` does not grow with the run.
   */
  constructor(
    policy?: Policy | null,
    options?: { task?: string; name?: string | null; scale?: number | null; journalSteps?: number | null },
  );
  /**
   * Feeds one event. A malformed event throws an `Error` naming its JSON path
   * (`event.model_turn.tool_calls[0]: missing field \`name\``) and changes nothing.
   */
  handle(event: Event): 'step' | 'observed' | 'ignored';
  /** The next command, or `null` while the kernel waits for an event. */
  nextCommand(): Command | null;
  /** The current state. */
  readonly phase: Phase;
  /** Every counter of the kernel. */
  readonly stats: Stats;
  /** The report (while the run goes on: `outcome`, `reason`, `rule` null, counters so far). */
  report(): Report;
  /** Why the run stopped and what to change: the text of `terminus inspect`. */
  explain(): string;
  /**
   * Goes on with a run a budget stopped, with that budget raised (`{ max_steps: 40 }`:
   * `max_steps`, `max_model_calls`, `token_budget`, `max_output_tokens`, `max_tool_calls` or
   * `max_nudges` to its new value): the step the stop pre-empted is taken, and its commands follow. A raise that does not
   * lift the budget that stopped the run throws an `Error` saying why, and changes nothing.
   */
  raiseBudgets(budgets: Record<string, number>): 'step';
  /** The whole machine as JSON text. */
  snapshot(): string;
  /** A machine saved by `snapshot()`; text that is not one throws an `Error`. */
  static restore(snapshot: string): Machine;
}

/** A call the host answers itself instead of running it (a tool message with status error). */
export interface Answer {
  tool_call_id: string;
  name: string;
  content: string;
  /** The kernel's error class, for the message's `response_metadata.terminus_error`. */
  error?: ToolErrorKind;
}

/** What a host does after one of its hooks (`Session`). */
export interface Step {
  /** Where it goes; `null`: nothing changes. */
  jump: 'model' | 'tools' | 'end' | null;
  /** Wait this long before the model call. */
  delay_ms: number;
  /** Whether the model call offers tools. */
  tools: boolean;
  /** User messages to add before the next model call: the kernel's guidance and its notices that
   * have no tool result to ride on (a token warning after an empty reply), in its order. */
  nudges?: string[];
  /** Texts to append to the tool message `notice_to` (its id, else its call id). */
  notices?: string[];
  notice_to?: string;
  /** Calls to answer with these tool messages instead of running them. */
  answers?: Answer[];
  /** With `outputTools` given to `reply`: the output calls (a structured answer) not taken as the
   * run's answer, each with its result ("Not accepted yet." before the nudge, "Not run: ..." when
   * the run stopped), for a framework that does not answer those calls itself. */
  claims?: Answer[];
  /** The reply rewritten as a tool turn (its calls were written in its text). */
  written?: { text: string; tool_calls: CallOut[] };
  /** The reply is empty: remove it from the conversation. */
  drop_reply?: boolean;
  /** With `policy.auto_checkpoints`: before the next model call (after the nudges), ask the model
   * with the conversation and `prompt` as a last user message, no tools, then add the user
   * message `checkpointMessage(note, reply)` makes; nothing is fed back. */
  checkpoint?: { prompt: string; note: string };
  /** Ask the verifier, then `Session.verdict`. */
  verify?: { claim: string; todos: Todo[]; missing: string[] };
  /** The report, once the run ended. */
  report?: Report;
}

/** What the run awaits (`Session.turn()`), for the tool hooks. */
export interface Turn {
  started_ms: number;
  awaiting?: [string, string][];
  refused?: Record<string, string>;
  warnings?: Record<string, string>;
  batch: boolean;
  delay_ms: number;
  tools: boolean;
  ended: boolean;
  fed?: string;
}

/** What a tool call about to run gets (`Session.gate`). */
export type Gate = { refuse: Answer } | { run: { warning?: string } };

/**
 * The host core for a framework adapter: one run, fed the framework's messages as they are
 * (OpenAI chat, LangChain, AI SDK, Pydantic AI or OpenAI Agents shapes, as JSON values),
 * answering each hook with a `Step`. Every bad input throws an `Error` naming its path.
 */
export declare class Session {
  /**
   * A run of the task of `messages` (the first user message) under `policy`, started at `nowMs`
   * (default now), the policy scaled for `scale` units when given: the session and its first step.
   */
  static start(policy: Policy | null | undefined, messages: Json[], nowMs?: number | null, scale?: number | null): [Session, Step];
  /**
   * `policy` checked and scaled once for `scale` units, as every run of a framework adapter takes
   * it: what `start` refuses throws here, naming it.
   */
  static checkPolicy(policy: Policy | null | undefined, scale?: number | null): Policy;
  /**
   * The model's reply (`offered`: the tools the call offered, names or tool objects as the
   * framework has them, each with its arguments' JSON Schema where the framework keeps it, which
   * types the values of a call written as text; `outputTools`: the framework's output tools, whose
   * call is a structured answer, the reply's text): a step, or `null` if fed already.
   */
  reply(message: Json, offered?: Array<string | OfferedTool> | null, nowMs?: number | null, outputTools?: string[] | null): Step | null;
  /** The results of the tool turn out, read after the last reply: a step, or `null`. */
  results(messages: Json[], nowMs?: number | null): Step | null;
  /** A failed model call of the kernel's class. */
  modelError(kind: ModelErrorKind, retryAfterMs?: number | null, nowMs?: number | null): Step;
  /** The verifier's verdict on the step's `verify`: the step goes on. */
  verdict(verdict: boolean | [boolean, string] | { complete: boolean; feedback?: string | null; missing?: string[] | null }): Step;
  /** The rules' verdict on the step's `verify`, for a host without a verifier. */
  verdictByRules(): Step;
  /** Ends a run something else ended: the last step, or `null` when the run had ended. */
  finish(messages: Json[], nowMs?: number | null): Step | null;
  /** What the run awaits. */
  turn(): Turn;
  /** What a call about to run gets, from a `turn()`. */
  static gate(turn: Turn, callId: string, name: string, hasTool: boolean): Gate;
  /** Whether the run ended. */
  readonly ended: boolean;
  /** Whether a tool turn waits for its results. */
  readonly batchOut: boolean;
  /** The report. */
  report(): Report;
  /** Why the run stopped and what to change: the text of `terminus inspect`. */
  explain(): string;
  /** The session as JSON text. */
  snapshot(): string;
  /** A session saved by `snapshot()`; text that is not one throws an `Error`. */
  static restore(snapshot: string): Session;
}

/**
 * Runs a scenario (a file path, or the scenario object) in process: the report `terminus run
 * --json` gives, but the execution id. Synchronous.
 */
export declare function runScenario(scenario: string | URL | { [key: string]: Json }): Report;
/** A message of a transcript: what a model was sent, in one shape for every host. */
export interface SentMessage {
  role: 'system' | 'user' | 'assistant' | 'tool';
  text: string;
  /** An assistant message's tool calls, each `NAME ARGUMENTS` (compact JSON, sorted keys). */
  calls?: string[];
  /** A tool message's tool. */
  tool?: string;
}
/** The report and what the scripted model was sent, call by call: the host suite's reference. */
export declare function runScenario(scenario: string | URL | { [key: string]: Json }, options: { transcript: true }): { report: Report; transcript: SentMessage[][] };

/** An agent's share of the plan's budget, as the orchestrator grants it. */
export interface Grant {
  /** Its deadline (ms): past it the attempt failed and `context.signal` aborts. */
  deadline_ms: number;
  /** The model calls it may make. */
  model_calls: number;
  /** The tokens it may spend, when the plan or its policy bounds them. */
  tokens: number | null;
  /** The fields the plan's budget lowered. */
  clamped: string[];
}

/** What an agent function is given besides its task. */
export interface PlanAgentContext {
  /** The agent's id. */
  agent: string;
  /** The attempt, from 1. */
  attempt: number;
  /** The attempt's execution id (`{execution}/{agent}/{attempt}`). */
  execution: string;
  /** Its share of the plan's budget. */
  grant: Grant;
  /** The attempt was running when the process stopped; this goes on with it. */
  resume: boolean;
  /** Aborts at the deadline or when the plan stops. */
  signal: AbortSignal;
  /** What the agent spent: set it and the plan's budget counts it. */
  used: { model_calls: number; tokens: number };
}

/** One progress line of a plan (the command line's). */
export interface PlanEvent {
  kind: 'start' | 'retry' | 'breaker' | 'ended' | 'warning' | 'cancelling' | 'done';
  agent: string | null;
  line: string;
}

/** A plan's progress: the cells `terminus orchestrate --journal` keeps. */
export interface PlanProgress {
  execution: string;
  cells: { [key: string]: Json };
}

/** One agent's part of a plan's report. */
export interface AgentReport {
  id: string;
  status: 'complete' | 'failed' | 'skipped' | 'degraded' | 'not_run';
  attempts: number;
  duration_ms?: number;
  result: Json;
  degraded_input: boolean;
  why?: { why: string; [key: string]: Json };
  clamped?: string[];
  error?: string;
  last_execution?: string;
  report?: Report;
}

/** A plan's report: that of `terminus orchestrate --json`. */
export interface PlanReport {
  execution: string;
  name: string;
  outcome: 'complete' | 'aborted';
  reason: 'all_complete' | 'degraded' | 'agent_failed' | 'execution_timeout' | 'max_phases' | 'cancelled' | 'no_valid_plan';
  agents: AgentReport[];
  used: { model_calls: number; tokens: number };
  elapsed_ms: number;
  generation?: Generation;
}

export interface RunPlanOptions {
  /**
   * The host's agents by id: each returns its result (JSON) or throws (the attempt failed). A
   * text result that is empty or only hands the task back (`isNonAnswer`) fails the attempt.
   */
  agents?: { [id: string]: (task: string, context: PlanAgentContext) => Json | Promise<Json> };
  /** The run's execution id (default: the plan's name). */
  execution?: string;
  /** Progress an earlier run kept (`onProgress`): what completed does not run again. */
  progress?: PlanProgress | string;
  /**
   * A journal that keeps the progress instead (a SQLite file, created if missing, or a
   * `postgres://` URL), under the keys `terminus orchestrate --journal` uses, each change read
   * back before the plan goes on: a run of the same `execution` goes on from it, and one of a
   * plan that ended gives its report. Not with `progress`.
   */
  journal?: string | URL;
  /** Keep the progress (awaited before the plan goes on). */
  onProgress?: (progress: PlanProgress) => void | Promise<void>;
  /** Each progress line. */
  onEvent?: (event: PlanEvent) => void;
  /** Cancels the plan (`cancelled`). */
  signal?: AbortSignal;
  /** What `generatePlan` gave: set as the report's `generation`. */
  generation?: Generation;
}

/** How a model wrote the plan (the report's `generation` under `terminus orchestrate --generate`). */
export interface Generation {
  source: 'first_try' | 'after_feedback' | 'fallback' | 'no_plan';
  attempts: number;
  max_attempts: number;
  rejections: { attempt: number; problems: string[]; reply?: string; cut?: boolean }[];
  plan: { id: string; depends_on?: string[]; task?: string }[];
  reply?: string;
}

/** A chat message the plan's model is asked with. */
export interface PlanMessage {
  role: 'system' | 'user' | 'assistant';
  content: string;
}

/**
 * Asks `options.model` for a plan for `task` from a generator file (the format of `terminus
 * orchestrate --generate`): each rejected plan goes back to the model with its problems, at most
 * `generator.max_attempts` calls, then the fallback. `plan` is null when none was valid and there
 * is no fallback; `report` is then the report of the plan that never ran (`no_valid_plan`).
 */
export declare function generatePlan(
  file: string | URL | { [key: string]: Json },
  task: string,
  options: { model: (messages: PlanMessage[]) => string | { text: string; cut?: boolean } | Promise<string | { text: string; cut?: boolean }>; execution?: string },
): Promise<{ plan: { [key: string]: Json } | null; generation: Generation; report: PlanReport | null }>;

/**
 * Runs a multi-agent plan (a plan file's path or URL, or the plan object) whose agents are your
 * functions (and the plan's scenario agents), with every decision of `terminus orchestrate`:
 * dependencies, budgets, deadlines, retries, the circuit breaker, skips and degradation.
 */
export declare function runPlan(plan: string | URL | { [key: string]: Json }, options?: RunPlanOptions): Promise<PlanReport>;

/**
 * Whether `text`, taken for an agent's answer in a run nobody answers, only hands the task back:
 * the kernel's rule of what a final answer is.
 */
export declare function isNonAnswer(text: string): boolean;

/** A plan that cannot run: one `PATH: PROBLEM` line per problem. */
export declare class PlanError extends Error {
  code: 'InvalidArg';
  problems: string[];
}

/**
 * The kernel's class of a provider failure from its HTTP status and the error's text or body:
 * the table every host shares. A status outside 100-599 throws.
 */
export declare function providerErrorKind(status: number, text: string): ModelErrorKind;

/**
 * The delay a provider asked for, in milliseconds, from its `retry-after-ms` and `retry-after`
 * header values (seconds or an HTTP date), capped at 60 s; `undefined` when neither says one.
 */
export declare function retryAfterMs(retryAfterMs?: string | null, retryAfter?: string | null): number | undefined;

/** What `telemetry.start()` set up. */
export interface TelemetryStarted {
  /** Whether spans are exported over OTLP (an endpoint variable is set). */
  exportingSpans: boolean;
  /** Whether an earlier call had started it already (nothing was done this time). */
  already: boolean;
}

/**
 * The process's telemetry: the spans and metrics of `runPlan`, those `terminus orchestrate`
 * makes. `start()` once, early: spans go over OTLP HTTP/protobuf to the endpoint of the standard
 * `OTEL_EXPORTER_OTLP_*` variables (plain `http://`), metrics are recorded for `metrics()`.
 */
export declare const telemetry: {
  /** Starts it from the `OTEL_*` variables; a second call does nothing and says so. */
  start(): TelemetryStarted;
  /** The metrics recorded since `start()`, as Prometheus text; `undefined` before. */
  metrics(): string | undefined;
  /** Sends the spans batched so far. */
  flush(): Promise<void>;
  /** Flushes and stops the span exporter, for good (it also runs at the process's exit). */
  shutdown(): Promise<void>;
};

export declare const version: string;
