'use strict';
// terminus-kernel/ai: an agent of the Vercel AI SDK (`ai`'s `generateText`) run under the
// Terminus kernel.
//
// `runAgent({ model, tools, system, prompt, policy })` is the kernel's host loop with the AI SDK
// as its model client: every `call_model` command of the kernel is one `generateText` step
// (`stopWhen: stepCountIs(1)`, `maxRetries: 0`: retries and backoff are the kernel's), and the
// tools are given to the model without their `execute`, so the SDK returns the calls and runs
// none of them: the kernel says which calls run (`run_tools`), which are refused (a tool
// excluded, a budget's block: the model gets the kernel's text instead), and what warning goes
// with a result. So the AI SDK's own loop and `stopWhen` never end a run the kernel has not
// stopped: a reply that stops too early (an open todo of `write_todos`, `completion_requires`
// unmet, an empty or no-op reply) is answered with the kernel's nudge as a user message and the
// loop goes back to the model; a stop the kernel decides (`no_progress`, `empty_responses`, a
// budget) ends the loop and returns its report. Resolves to `{ text, report, messages }`.

const { Machine, providerErrorKind } = require('./index.js');
const { retryAfterMs } = require('./sdk-errors.js');
const { checkPolicy } = require('./adapter-policy.js');

function sdk() {
  try {
    return require('ai');
  } catch (e) {
    throw new Error(`terminus-kernel/ai needs the \`ai\` package (npm install ai): ${e.message}`);
  }
}

const FINISH = { stop: 'stop', length: 'length', 'content-filter': 'content_filter', 'tool-calls': 'tool_calls' };

/** A value as JSON (what the kernel and the transcript keep of a tool's output). */
function asJson(value) {
  if (value === undefined) return null;
  try {
    const text = JSON.stringify(value);
    return text === undefined ? null : JSON.parse(text);
  } catch {
    return String(value);
  }
}

/** The kernel's `model_turn` of one `generateText` step. */
function turnOf(result) {
  const turn = {
    text: result.text || '',
    tool_calls: (result.toolCalls || []).map((call) => ({
      id: call.toolCallId,
      name: call.toolName,
      arguments: asJson(call.input),
    })),
  };
  const usage = result.usage || {};
  if (Number.isInteger(usage.inputTokens) && Number.isInteger(usage.outputTokens)) {
    turn.usage = { input_tokens: usage.inputTokens, output_tokens: usage.outputTokens };
  }
  if (FINISH[result.finishReason]) turn.finish = FINISH[result.finishReason];
  if (result.reasoningText) turn.reasoning = true;
  return turn;
}

/**
 * The kernel's `model_error` of a failed call: a timeout, an `APICallError` by its status and body
 * (the table every host shares, `providerErrorKind`), else a failed connection (`server`).
 */
function modelErrorOf(error) {
  const e = error && error.lastError ? error.lastError : error; // a RetryError wraps the last one
  const status = e && typeof e.statusCode === 'number' ? e.statusCode : undefined;
  const message = String((e && e.message) || '');
  const out = {};
  if (e && (e.name === 'AbortError' || e.name === 'TimeoutError')) out.kind = 'timeout';
  else if (status !== undefined && status >= 400 && status < 600) {
    // The table every host shares, on the response body when the SDK kept it.
    const body = typeof e.responseBody === 'string' && e.responseBody.trim() ? e.responseBody : message;
    out.kind = providerErrorKind(status, body);
  } else out.kind = 'server'; // no status: the connection failed
  const retry = retryAfterMs(e && e.responseHeaders);
  if (retry !== undefined) out.retry_after_ms = retry;
  return out;
}

const sleep = (ms, signal) =>
  new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    if (signal) signal.addEventListener('abort', () => { clearTimeout(timer); resolve(); }, { once: true });
  });

/**
 * Runs an agent of the AI SDK under the kernel.
 *
 * @param {object} options
 * @param {import('ai').LanguageModel} options.model the AI SDK model.
 * @param {Record<string, import('ai').Tool>} [options.tools] tools with `execute` (run when the
 *   kernel says so; a throw is a `failed` tool result).
 * @param {string} [options.system] the system prompt.
 * @param {string} [options.prompt] the task (the first user message).
 * @param {Array} [options.messages] the conversation to start from, instead of `prompt`.
 * @param {object} [options.policy] the kernel's policy (the scenario `policy` fields).
 * @param {(request: {claim: string, todos: object[], missing: string[]}) => Promise<{complete: boolean, feedback?: string, missing?: string[]}>} [options.verify]
 *   the verifier, when the policy asks for one (default: the kernel's rules, `missing` empty).
 * @param {AbortSignal} [options.abortSignal] cancels the run (the kernel's `cancel`).
 * @param {object} [options.generateTextOptions] more options for every `generateText` call.
 * @returns {Promise<{ text: string, report: object, messages: Array, machine: Machine }>}
 */
async function runAgent(options) {
  const { model, tools = {}, system, prompt, messages: start, policy, verify, abortSignal, generateTextOptions = {} } = options || {};
  if (!model) throw new Error('runAgent: `model` is required');
  checkPolicy(policy, 'runAgent');
  const ai = sdk();
  const machine = new Machine(policy, { task: typeof prompt === 'string' ? prompt : '' });
  const messages = start ? [...start] : [{ role: 'user', content: String(prompt ?? '') }];
  // The model sees every tool, none with `execute`: the SDK hands the calls back unrun.
  const declared = {};
  for (const [name, t] of Object.entries(tools)) {
    const { execute: _execute, ...rest } = t;
    declared[name] = rest;
  }
  let text = '';
  // Calls the SDK answered itself (input that fails the tool's schema): id -> its error text.
  let answeredBySdk = new Map();
  const cancel = () => machine.handle({ cancel: true });
  for (;;) {
    if (abortSignal && abortSignal.aborted && machine.phase !== 'Complete' && machine.phase !== 'Aborted') cancel();
    const command = machine.nextCommand();
    if (command === null) throw new Error(`terminus-kernel/ai: the kernel waits in ${machine.phase} with no command`);
    switch (command.command) {
      case 'call_model': {
        if (command.delay_ms > 0) await sleep(command.delay_ms, abortSignal);
        if (abortSignal && abortSignal.aborted) break;
        let result;
        try {
          result = await ai.generateText({
            ...generateTextOptions,
            model,
            system,
            messages,
            tools: declared,
            toolChoice: command.tools ? 'auto' : 'none',
            stopWhen: ai.stepCountIs(1),
            maxRetries: 0,
            abortSignal,
          });
        } catch (error) {
          if (abortSignal && abortSignal.aborted) break;
          machine.handle({ model_error: modelErrorOf(error) });
          break;
        }
        messages.push(...result.response.messages);
        answeredBySdk = new Map();
        for (const message of result.response.messages) {
          if (message.role !== 'tool') continue;
          for (const part of message.content) {
            if (part.type !== 'tool-result') continue;
            const value = part.output && part.output.value;
            answeredBySdk.set(part.toolCallId, typeof value === 'string' ? value : JSON.stringify(value ?? null));
          }
        }
        if (result.text) text = result.text;
        // The names offered, so that a tool call the model wrote in its text runs only when it
        // names one of them.
        machine.handle({ model_turn: { ...turnOf(result), tools: command.tools ? Object.keys(tools) : [] } });
        break;
      }
      case 'run_tools': {
        if (command.written != null) {
          // The model wrote these calls in its text and the kernel runs them: its message
          // becomes a tool turn, so the results that follow answer calls it made.
          for (let i = messages.length - 1; i >= 0; i--) {
            if (messages[i].role !== 'assistant') continue;
            const content = command.written ? [{ type: 'text', text: command.written }] : [];
            for (const call of command.calls) content.push({ type: 'tool-call', toolCallId: call.id, toolName: call.name, input: call.arguments });
            messages[i] = { ...messages[i], content };
            break;
          }
          if (text && !command.written) text = '';
        }
        const warnings = new Map((command.warnings || []).map((w) => [w.id, w.text]));
        const parts = [];
        const results = [];
        for (const call of command.calls) {
          const tool = tools[call.name];
          let result;
          if (answeredBySdk.has(call.id)) {
            // The SDK refused the input and told the model so; the kernel counts the failure.
            results.push({ call_id: call.id, name: call.name, error: 'invalid_arguments', message: answeredBySdk.get(call.id) });
            continue;
          }
          if (!tool) result = { error: 'not_found', message: `there is no tool named \`${call.name}\`` };
          else if (typeof tool.execute !== 'function') result = { error: 'failed', message: `tool \`${call.name}\` has no execute` };
          else {
            try {
              const output = await tool.execute(call.arguments, { toolCallId: call.id, messages, abortSignal });
              result = { ok: asJson(output) };
            } catch (e) {
              result = { error: 'failed', message: String((e && e.message) || e) };
            }
          }
          results.push({ call_id: call.id, name: call.name, ...result });
          const warning = warnings.get(call.id);
          let output;
          if ('error' in result) output = { type: 'error-text', value: result.message };
          else if (warning) {
            const shown = typeof result.ok === 'string' ? result.ok : JSON.stringify(result.ok);
            output = { type: 'text', value: `${shown}\n\n${warning}` };
          } else output = typeof result.ok === 'string' ? { type: 'text', value: result.ok } : { type: 'json', value: result.ok };
          parts.push({ type: 'tool-result', toolCallId: call.id, toolName: call.name, output });
        }
        for (const refused of command.refused || []) {
          if (answeredBySdk.has(refused.id)) continue;
          parts.push({ type: 'tool-result', toolCallId: refused.id, toolName: refused.name, output: { type: 'error-text', value: refused.text } });
        }
        if (parts.length) messages.push({ role: 'tool', content: parts });
        if (abortSignal && abortSignal.aborted) cancel();
        else machine.handle({ tool_results: results });
        break;
      }
      case 'verify': {
        const verdict = verify
          ? await verify({ claim: command.claim, todos: command.todos, missing: command.missing })
          : { complete: command.missing.length === 0, missing: command.missing };
        machine.handle({ verdict });
        break;
      }
      case 'nudge':
      case 'notice':
        messages.push({ role: 'user', content: command.text });
        break;
      case 'stop': {
        const report = command.report;
        return { text: typeof report.result === 'string' ? report.result : text, report, messages, machine };
      }
      default:
        throw new Error(`terminus-kernel/ai: unknown command ${JSON.stringify(command)}`);
    }
  }
}

module.exports = { runAgent, turnOf, modelErrorOf };
