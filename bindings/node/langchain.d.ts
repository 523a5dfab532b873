// Types of `terminus-kernel/langchain`: the kernel as a LangChain JS v1 agent middleware.
import type { AgentMiddleware } from 'langchain';
import type { Json, Policy, Report } from './index';

export interface TerminusMiddlewareOptions {
  /**
   * Judges a completion claim (the model's last substantive content) when the policy sets
   * `verify_completion`: `true`/`false`, or `[complete, feedback]`. Default: the kernel's rules.
   */
  verifier?: (claim: string) => boolean | [boolean, string];
  /**
   * A provider's error from the model call goes to the kernel (retried after its backoff, or the
   * run ends `model_error`); `false`: every exception propagates. Default `true`.
   */
  handleModelErrors?: boolean;
  /** The task's size in units: the policy's `budget_scale` scales its budgets. */
  scale?: number;
  /** The middleware's name (default `TerminusMiddleware`). */
  name?: string;
}

/**
 * A middleware for `createAgent` that runs the agent loop under the Terminus kernel: a refused
 * stop is nudged and the loop goes back to the model, a stop the kernel decides ends the graph
 * without an exception, and the final state has the report under `terminus`.
 * An unknown or ill-typed policy field throws here.
 */
export declare function terminusMiddleware(policy?: Policy | null, options?: TerminusMiddlewareOptions): AgentMiddleware;

/** The state key of the kernel's report, set when the run stops (`null` while it runs). */
export declare const REPORT_KEY: 'terminus';
/** The state key of the run's session (`Session.snapshot()`, JSON text). */
export declare const MACHINE_KEY: '_terminus_machine';
/** The state key of what the run awaits (`Session.turn()`: calls to run, refusals, warnings, the next call). */
export declare const TURN_KEY: '_terminus_turn';
/** A `ToolMessage.response_metadata` key: the kernel's error class for a failed call. */
export declare const ERROR_KIND: 'terminus_error';
/** A `ToolMessage.response_metadata` key: the kernel's notices appended to that result. */
export declare const NOTICE_KEY: 'terminus_notice';

/** An `AIMessage.response_metadata` key: the state update a stand-in reply carries (a model step with no reply of the model's: a stop, or messages to add before the next call). */
export declare const STOP_KEY: 'terminus_stop';

/**
 * The kernel's `model_error` for a failed model call (by HTTP status, LangChain's
 * `lc_error_code`, or the error's class), or `null` for an error that is not a provider's.
 */
export declare function modelErrorKind(error: unknown): { kind: string; retry_after_ms?: number } | null;

/** The report in a final state, once the run stopped. */
export type TerminusState = { terminus?: Report | null };
