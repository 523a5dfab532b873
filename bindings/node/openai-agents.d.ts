// Types of `terminus-kernel/openai-agents`: an OpenAI Agents SDK agent run under the kernel.
import type { Agent, AgentInputItem, RunResult, Runner } from '@openai/agents';
import type { Policy, Report, Todo } from './index';

export interface RunOptions {
  /** The kernel's policy: the scenario `policy` fields. */
  policy?: Policy | null;
  /** The units the task counts, for the policy's budgets scaled to the task. */
  scale?: number | null;
  /** The verifier when the policy asks for one (default: the kernel's rules). */
  verify?: (request: { claim: string; todos: Todo[]; missing: string[] }) =>
    | { complete: boolean; feedback?: string; missing?: string[] }
    | Promise<{ complete: boolean; feedback?: string; missing?: string[] }>;
  /** A provider's error goes to the kernel (retried or `model_error`); default true. */
  handleModelErrors?: boolean;
  /** The Runner to run with (default: `new Runner({ tracingDisabled: true })`). */
  runner?: Runner;
  /** More options for `Runner.run` (`context`, `signal`, ...): not `maxTurns`, `session`,
   * `stream`, `previousResponseId`, `conversationId`. */
  [option: string]: unknown;
}

/** The last `Runner.run`'s result, with the kernel's report. */
export type TerminusRunResult<TAgent extends Agent<any, any>> = RunResult<any, TAgent> & {
  /** The kernel's report (`outcome`, `reason`, `steps`, `model_calls`, `nudges`, ...). */
  terminus: Report;
};

/**
 * Runs `agent` under the kernel: every model reply goes through the host core's `Session`, a final output the
 * kernel refuses goes on with its nudge as a user message, a refused tool call is answered with
 * the kernel's text, and the run ends when the kernel stops it (never `MaxTurnsExceededError`).
 */
export declare function run<TAgent extends Agent<any, any>>(
  agent: TAgent,
  input: string | AgentInputItem[],
  options?: RunOptions,
): Promise<TerminusRunResult<TAgent>>;

/** The kernel's class of a failed model call, or `null` for an error that is not a provider's. */
export declare function modelErrorKind(error: unknown): { kind: string; retry_after_ms?: number } | null;
