// Types of `terminus-kernel/ai`: an AI SDK agent (`generateText`) run under the kernel.
import type { LanguageModel, ModelMessage, Tool, generateText } from 'ai';
import type { Policy, Report, Session, Todo } from './index';

export interface RunAgentOptions {
  /** The AI SDK model. */
  model: LanguageModel;
  /**
   * Tools with `execute`: run when the kernel says so (a throw is a `failed` result, or of the
   * kernel's class in the error's `terminus_error`).
   */
  tools?: Record<string, Tool>;
  /** The system prompt. */
  system?: string;
  /** The task: the first user message. */
  prompt?: string;
  /** The conversation to start from, instead of `prompt`. */
  messages?: ModelMessage[];
  /** The kernel's policy: the scenario `policy` fields. */
  policy?: Policy | null;
  /** The units the task counts, for the policy's budgets scaled to the task. */
  scale?: number | null;
  /** The verifier when the policy asks for one (default: the kernel's rules). */
  verify?: (request: { claim: string; todos: Todo[]; missing: string[] }) =>
    | { complete: boolean; feedback?: string; missing?: string[] }
    | Promise<{ complete: boolean; feedback?: string; missing?: string[] }>;
  /** Cancels the run: the kernel's `cancel` (reason `cancelled`). */
  abortSignal?: AbortSignal;
  /** More options for every `generateText` call (not `model`, `messages`, `tools`, `stopWhen`). */
  generateTextOptions?: Partial<Parameters<typeof generateText>[0]>;
}

export interface RunAgentResult {
  /** The final answer: the report's `result`, else the last text the model gave. */
  text: string;
  /** The kernel's report (`outcome`, `reason`, `steps`, `model_calls`, `nudges`, ...). */
  report: Report;
  /**
   * The conversation as the model saw it, nudges and tool results included (a failed result's
   * class in its part's `providerOptions.terminus.error`).
   */
  messages: ModelMessage[];
  /** The host core's session of the run, ended. */
  session: Session;
}

/**
 * Runs `generateText` under the kernel: one SDK step per `call_model`, tools run only as the
 * kernel says, a refused stop re-enters the loop with the kernel's nudge, and the run ends when
 * the kernel stops it.
 */
export declare function runAgent(options: RunAgentOptions): Promise<RunAgentResult>;
