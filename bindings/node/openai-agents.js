'use strict';
// terminus-kernel/openai-agents: an agent of the OpenAI Agents SDK (`@openai/agents`) run under
// the Terminus kernel: the kernel decides when the run ends, not `maxTurns`.
//
// `run(agent, input, { policy, verify, runner, ...runOptions })` calls the SDK's `Runner.run`
// with copies of the agent and its function tools wired to one `Machine`, through the SDK's own
// extension points:
// - a `Model` wrapper feeds every reply to the kernel as a `model_turn`. An empty reply or a
//   provider's error (classed with `providerErrorKind`) is retried inside the wrapper after the
//   kernel's backoff, or ends the run (`empty_responses`, `model_error`); a tool call written in
//   the reply's text becomes a real call when the kernel says so. After a stop the kernel
//   decided, the model is not called again.
// - a tool input guardrail on each function tool answers a call the kernel refused (a tool
//   excluded, a spent tool budget, a run that stopped) with the kernel's text instead of running
//   it; a tool output guardrail appends the kernel's budget warning.
// - `toolUseBehavior` feeds each tool batch's results as one `tool_results` event: a stop the
//   kernel decides there (a loop of identical calls, failing tools, a spent budget) ends the run
//   without another model call.
// A reply the SDK takes as the final output but the kernel refuses (`completion_requires` unmet,
// an open todo of `write_todos`, a no-op reply) ends one `Runner.run` only: `run` goes on with
// the conversation so far (`result.history`) and the kernel's nudge as a user message, until the
// kernel stops. A notice (a loop seen, a tool excluded) is given the same way after the batch's
// results. Resolves to the last `Runner.run`'s result, whose `history` is the whole conversation
// (nudges included), with the kernel's report as its property `terminus`.

const { Machine, providerErrorKind } = require('./index.js');
const { retryAfterMs } = require('./sdk-errors.js');
const { checkPolicy } = require('./adapter-policy.js');

function sdk() {
  try {
    return require('@openai/agents');
  } catch (e) {
    throw new Error(`terminus-kernel/openai-agents needs the \`@openai/agents\` package (npm install @openai/agents): ${e.message}`);
  }
}

const REFUSED_OPTIONS = {
  maxTurns: "the kernel's policy bounds the run (max_steps, max_model_calls, ...)",
  session: 'a session is not driven by terminus-kernel/openai-agents',
  stream: 'streaming is not driven by terminus-kernel/openai-agents',
  previousResponseId: 'server-side conversation state is not driven by terminus-kernel/openai-agents',
  conversationId: 'server-side conversation state is not driven by terminus-kernel/openai-agents',
};

/** The text of an assistant message item. */
function messageText(item) {
  if (typeof item.content === 'string') return item.content;
  return (item.content || [])
    .filter((part) => part && part.type === 'output_text')
    .map((part) => String(part.text || ''))
    .join('');
}

/**
 * The kernel's `model_turn` for a model's response (`{ output, usage }`): its text, its function
 * calls (arguments parsed from JSON; text that is not JSON is passed as it is), its usage when
 * the provider reported it, whether it carries reasoning, and `offered`, the tools' names.
 */
function turnOf(response, offered) {
  if (!response || !Array.isArray(response.output)) {
    throw new Error('turnOf: expected a model response with an `output` array');
  }
  const texts = [];
  const calls = [];
  let reasoning = false;
  response.output.forEach((item, index) => {
    if (!item || typeof item !== 'object') return;
    if (item.type === 'message' && item.role === 'assistant') texts.push(messageText(item));
    else if (item.type === 'function_call') {
      if (typeof item.callId !== 'string' || !item.callId) {
        throw new Error(`model response: output[${index}] (${JSON.stringify(item.name)}) has no callId`);
      }
      let args = item.arguments;
      try {
        args = typeof args === 'string' && args.trim() ? JSON.parse(args) : args && typeof args === 'object' ? args : {};
      } catch {
        // not JSON: the kernel gets the raw text (an invalid call)
      }
      calls.push({ id: item.callId, name: String(item.name), arguments: args });
    } else if (item.type === 'reasoning') reasoning = true;
  });
  const turn = { text: texts.join(''), tool_calls: calls };
  const usage = response.usage || {};
  if (usage.requests || usage.inputTokens || usage.outputTokens) {
    turn.usage = { input_tokens: Number(usage.inputTokens) || 0, output_tokens: Number(usage.outputTokens) || 0 };
  }
  if (reasoning) turn.reasoning = true;
  if (offered) turn.tools = [...offered];
  return { model_turn: turn };
}

const RETRIED = ['rate_limited', 'server', 'timeout'];

/**
 * The kernel's class of a failed model call (`{ kind, retry_after_ms }`), or `null` for an error
 * that is not a provider's (it propagates). The `openai` SDK's `APIError` keeps the HTTP status
 * (`status`), the body (`error`) and the headers: classed with the table every host shares
 * (`providerErrorKind`); a timeout or a refused connection has no status.
 */
function modelErrorKind(error) {
  if (!error || typeof error !== 'object') return null;
  const status = typeof error.status === 'number' ? error.status : typeof error.statusCode === 'number' ? error.statusCode : undefined;
  const retryAfter = retryAfterMs(error.headers);
  const out = {};
  const name = String(error.name || (error.constructor && error.constructor.name) || '');
  if (status !== undefined && status >= 400 && status < 600) {
    const body = error.error !== undefined ? JSON.stringify(error.error) : String(error.message || '');
    out.kind = providerErrorKind(status, body);
  } else if (/timeout/i.test(name) || name === 'AbortError') out.kind = 'timeout';
  else if (/ratelimit/i.test(name)) out.kind = 'rate_limited';
  else if (/connection/i.test(name) || error.code === 'ECONNREFUSED' || error.code === 'ECONNRESET') out.kind = 'server';
  else return null;
  if (retryAfter !== undefined && RETRIED.includes(out.kind)) out.retry_after_ms = retryAfter;
  return out;
}

async function digest(output) {
  const { createHash } = require('node:crypto');
  const text = typeof output === 'string' ? output : JSON.stringify(output) ?? String(output);
  return `sha256:${createHash('sha256').update(text).digest('hex')}`;
}

/** The text of a tool output as the SDK keeps it (a string, or `{ type: 'text', text }`). */
function outputText(output) {
  if (typeof output === 'string') return output;
  if (output && typeof output === 'object' && output.type === 'text') return String(output.text);
  return JSON.stringify(output) ?? '';
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** One run's machine and what it awaits: the glue's whole state. */
class KernelRun {
  constructor(machine, verify, deadline) {
    this.machine = machine;
    this.verify = verify;
    this.deadline = deadline;
    this.started = Date.now();
    this.report = null;
    this.call = { delay_ms: 0, tools: true };
    this.modelWanted = false;
    this.awaiting = new Map(); // call id -> tool name
    this.batch = false;
    this.refused = new Map();
    this.warnings = new Map();
    this.failed = new Map(); // call id -> { kind, message }
    this.messages = []; // nudges and notices for the conversation
    this.written = null;
    this.handover = false; // the last Runner.run ended for the kernel to go on
  }

  get ended() {
    return this.report !== null;
  }

  async verdict(command) {
    if (!this.verify) {
      const missing = (command.missing || []).map(String);
      return { complete: missing.length === 0, feedback: missing.join('; ') };
    }
    const answer = await this.verify({ claim: String(command.claim || ''), todos: command.todos || [], missing: command.missing || [] });
    if (!answer || typeof answer.complete !== 'boolean') {
      throw new Error(`verify: expected { complete: boolean, feedback?: string }, got ${JSON.stringify(answer)}`);
    }
    return { complete: answer.complete, feedback: String(answer.feedback || ''), ...(answer.missing ? { missing: answer.missing } : {}) };
  }

  async carryOut() {
    for (let command = this.machine.nextCommand(); command; command = this.machine.nextCommand()) {
      switch (command.command) {
        case 'nudge':
        case 'notice':
          this.messages.push(String(command.text));
          break;
        case 'call_model':
          this.call = { delay_ms: Number(command.delay_ms) || 0, tools: command.tools !== false };
          this.modelWanted = true;
          break;
        case 'run_tools':
          this.awaiting = new Map((command.calls || []).map((c) => [String(c.id), String(c.name)]));
          this.batch = true;
          this.refused = new Map((command.refused || []).map((r) => [String(r.id), String(r.text)]));
          this.warnings = new Map((command.warnings || []).map((w) => [String(w.id), String(w.text)]));
          if (command.written != null) this.written = { prose: String(command.written), calls: command.calls || [] };
          break;
        case 'verify':
          this.machine.handle({ verdict: await this.verdict(command) });
          break;
        case 'stop':
          this.report = command.report || this.machine.report();
          break;
        default:
          throw new Error(`terminus-kernel/openai-agents: unknown kernel command ${JSON.stringify(command)}`);
      }
    }
  }

  async feed(event) {
    if (this.ended) return;
    if (this.deadline) {
      this.machine.handle({ tick: Math.max(0, Date.now() - this.started) });
      await this.carryOut();
      if (this.ended) return;
    }
    this.modelWanted = false;
    this.machine.handle(event);
    await this.carryOut();
  }

  /** Feeds the out batch's results: `outputs`, a Map by call id (a call with none failed). */
  async feedResults(outputs) {
    if (!this.batch) return;
    const results = [];
    for (const [id, name] of this.awaiting) {
      if (this.failed.has(id)) results.push({ call_id: id, name, error: this.failed.get(id).kind, message: this.failed.get(id).message });
      else if (outputs.has(id)) results.push({ call_id: id, name, ok: await digest(outputs.get(id)) });
      else results.push({ call_id: id, name, error: 'failed', message: 'no result came back for this call' });
    }
    this.awaiting = new Map();
    this.refused = new Map();
    this.warnings = new Map();
    this.failed = new Map();
    this.batch = false;
    await this.feed({ tool_results: results });
  }

  stoppedText() {
    return `Not run: the run stopped (${(this.report && this.report.reason) || 'stopped'}).`;
  }
}

/** The `function_call_result` items of a conversation, by call id. */
function outputsIn(items) {
  const outputs = new Map();
  for (const item of items || []) {
    if (item && item.type === 'function_call_result') outputs.set(String(item.callId), outputText(item.output));
  }
  return outputs;
}

const STAND_IN = 'terminus-stop';

/**
 * The reply of a model call the kernel does not let happen: an empty assistant message (the SDK
 * ends a run only on a message), its id starting with `terminus-stop`; dropped from the
 * conversation when the run goes on.
 */
const standIn = (Usage) => ({
  output: [{ type: 'message', role: 'assistant', status: 'completed', id: `${STAND_IN}-${Date.now().toString(36)}`, content: [{ type: 'output_text', text: '' }] }],
  usage: new Usage(),
});

/** The agent's model with every call and reply going through the run's machine. */
class KernelModel {
  constructor(inner, run, handleModelErrors, Usage) {
    this.inner = inner;
    this.run = run;
    this.handleModelErrors = handleModelErrors;
    this.Usage = Usage;
  }

  async getResponse(request) {
    const run = this.run;
    if (run.batch && Array.isArray(request.input)) await run.feedResults(outputsIn(request.input));
    for (;;) {
      if (run.ended || !run.modelWanted) return standIn(this.Usage);
      const { delay_ms: delay, tools: withTools } = run.call;
      if (delay) await sleep(delay);
      const sent = withTools ? request : { ...request, tools: [], handoffs: [] };
      let response;
      try {
        response = await this.inner.getResponse(sent);
      } catch (error) {
        const kind = this.handleModelErrors ? modelErrorKind(error) : null;
        if (!kind) throw error;
        await run.feed({ model_error: kind });
        continue;
      }
      await run.feed(turnOf(response, (sent.tools || []).map((t) => t.name).filter((n) => typeof n === 'string')));
      if (run.written) {
        response = withWrittenCalls(response, run.written);
        run.written = null;
      }
      const output = response.output || [];
      const hasCalls = output.some((i) => i && i.type === 'function_call');
      const hasText = output.some((i) => i && i.type === 'message' && messageText(i).trim());
      if (!hasCalls && !hasText) {
        // An empty reply is never part of the conversation: retried here when the kernel says
        // so, else answered with no output (the kernel's nudge follows in the next Runner.run).
        if (!run.ended && run.modelWanted && !run.messages.length) continue;
        run.handover = !run.ended;
        return standIn(this.Usage);
      }
      run.handover = !hasCalls && !run.ended;
      return response;
    }
  }

  // eslint-disable-next-line require-yield
  async *getStreamedResponse() {
    throw new Error('terminus-kernel/openai-agents: streaming is not supported; use run()');
  }
}

/** `response` with the calls the model wrote in its text made function calls. */
function withWrittenCalls(response, { prose, calls }) {
  const output = [];
  if (prose.trim()) {
    output.push({ type: 'message', role: 'assistant', status: 'completed', content: [{ type: 'output_text', text: prose }] });
  }
  for (const item of response.output || []) if (!(item && item.type === 'message')) output.push(item);
  for (const call of calls) {
    output.push({ type: 'function_call', callId: String(call.id), name: String(call.name), arguments: JSON.stringify(call.arguments ?? {}), status: 'completed' });
  }
  return { ...response, output };
}

/** A copy of a function tool whose calls the kernel may refuse, with its warnings appended. */
function guarded(tool, run, agents) {
  const refuse = agents.defineToolInputGuardrail({
    name: 'terminus',
    run: async ({ toolCall }) => {
      const id = String(toolCall.callId);
      if (run.refused.has(id)) return agents.ToolGuardrailFunctionOutputFactory.rejectContent(run.refused.get(id));
      if (run.ended) return agents.ToolGuardrailFunctionOutputFactory.rejectContent(run.stoppedText());
      if (!run.awaiting.has(id)) return agents.ToolGuardrailFunctionOutputFactory.rejectContent('Not run: the kernel did not ask for this call.');
      return agents.ToolGuardrailFunctionOutputFactory.allow();
    },
  });
  const warn = agents.defineToolOutputGuardrail({
    name: 'terminus',
    run: async ({ toolCall, output }) => {
      const warning = run.warnings.get(String(toolCall.callId));
      if (warning === undefined) return agents.ToolGuardrailFunctionOutputFactory.allow();
      const text = outputText(output);
      return agents.ToolGuardrailFunctionOutputFactory.rejectContent(text ? `${text}\n\n${warning}` : warning);
    },
  });
  const invoke = async (context, input, details) => {
    try {
      return await tool.invoke(context, input, details);
    } catch (error) {
      // A tool without an errorFunction: the kernel counts the failure, the model reads it.
      const id = details && details.toolCall ? String(details.toolCall.callId) : undefined;
      if (id === undefined || !run.awaiting.has(id)) throw error;
      const message = String((error && error.message) || error);
      run.failed.set(id, { kind: 'failed', message });
      return `Error: ${message}`;
    }
  };
  return {
    ...tool,
    invoke,
    inputGuardrails: [refuse, ...(tool.inputGuardrails || [])],
    outputGuardrails: [...(tool.outputGuardrails || []), warn],
  };
}

/** The agent's own `toolUseBehavior` on a batch the kernel goes on after. */
async function usersBehavior(behavior, context, results) {
  if (behavior === undefined || behavior === 'run_llm_again') return { isFinalOutput: false, isInterrupted: undefined };
  if (behavior === 'stop_on_first_tool') return { isFinalOutput: true, isInterrupted: undefined, finalOutput: outputText(results[0].output) };
  if (behavior && Array.isArray(behavior.stopAtToolNames)) {
    const hit = results.find((r) => behavior.stopAtToolNames.includes(r.tool.name));
    return hit ? { isFinalOutput: true, isInterrupted: undefined, finalOutput: outputText(hit.output) } : { isFinalOutput: false, isInterrupted: undefined };
  }
  if (typeof behavior === 'function') return behavior(context, results);
  throw new Error(`agent.toolUseBehavior: not understood: ${JSON.stringify(behavior)}`);
}

/**
 * Runs `agent` on `input` under the kernel until it stops; resolves to the last `Runner.run`
 * result with the kernel's report as its property `terminus`.
 *
 * @param {import('@openai/agents').Agent} agent the agent (text output).
 * @param {string | Array} input the task, or the conversation to start from.
 * @param {object} [options] `policy` (the scenario `policy` fields), `verify` (the verifier when
 *   the policy asks for one), `handleModelErrors` (default true), `runner` (a `Runner` to run
 *   with: its config's model provider resolves a model name), and more options for `Runner.run`
 *   (`context`, `signal`, ...; not `maxTurns`, `session`, `stream`).
 */
async function run(agent, input, options = {}) {
  const agents = sdk();
  if (!(agent instanceof agents.Agent)) throw new Error('agent: expected an Agent of @openai/agents');
  if (typeof input !== 'string' && !Array.isArray(input)) throw new Error('input: expected a string or an array of items');
  const { policy, verify, handleModelErrors = true, runner = new agents.Runner({ tracingDisabled: true }), ...runOptions } = options || {};
  for (const [name, why] of Object.entries(REFUSED_OPTIONS)) {
    if (name in runOptions) throw new Error(`options.${name}: not accepted by run(): ${why}`);
  }
  if (verify !== undefined && typeof verify !== 'function') throw new Error('options.verify: expected a function');
  if (agent.outputType !== undefined && agent.outputType !== 'text') {
    throw new Error('agent.outputType: only text output is supported by terminus-kernel/openai-agents');
  }
  checkPolicy(policy, 'terminus-kernel/openai-agents');
  const task = typeof input === 'string' ? input : '';
  const machine = new Machine(policy ?? null, { task, name: agent.name });
  const kernel = new KernelRun(machine, verify, policy != null && policy.deadline_ms != null);
  await kernel.carryOut(); // the first command: call the model

  let inner = runner.config.model ?? agent.model;
  if (!inner || typeof inner === 'string') inner = await runner.config.modelProvider.getModel(inner || undefined);
  const model = new KernelModel(inner, kernel, handleModelErrors, agents.Usage);
  const behavior = agent.toolUseBehavior;
  const wired = agent.clone({
    model,
    tools: agent.tools.map((t) => (t && t.type === 'function' ? guarded(t, kernel, agents) : t)),
    toolUseBehavior: async (context, results) => {
      const outputs = new Map();
      for (const result of results) {
        const raw = result.runItem && result.runItem.rawItem;
        if (raw && raw.callId !== undefined) outputs.set(String(raw.callId), outputText(raw.output ?? result.output));
      }
      await kernel.feedResults(outputs);
      if (kernel.ended) return { isFinalOutput: true, isInterrupted: undefined, finalOutput: String(kernel.report.result ?? '') };
      if (kernel.messages.length) {
        kernel.handover = true; // a notice goes into the conversation before the next model call
        return { isFinalOutput: true, isInterrupted: undefined, finalOutput: '' };
      }
      return usersBehavior(behavior, context, results);
    },
  });
  const wiredRunner = runner.config.model === undefined ? runner : new agents.Runner({ ...runner.config, model: undefined });
  let items = input;
  let result;
  for (;;) {
    try {
      result = await wiredRunner.run(wired, items, { ...runOptions, maxTurns: null });
    } catch (error) {
      if (!kernel.ended) {
        await kernel.feed({ cancel: true });
        if (!kernel.ended) kernel.report = machine.report();
      }
      if (error && typeof error === 'object') error.terminus = kernel.report;
      throw error;
    }
    if (kernel.ended) break;
    if (kernel.batch) {
      await kernel.feedResults(outputsIn(result.history));
      if (kernel.ended) break;
    }
    if (!(kernel.handover && kernel.modelWanted)) {
      // The SDK ended the run (the agent's own toolUseBehavior): the kernel's run is cancelled.
      await kernel.feed({ cancel: true });
      break;
    }
    kernel.handover = false;
    const history = result.history.filter((item) => !(typeof item.id === 'string' && item.id.startsWith(STAND_IN)));
    items = [...history, ...kernel.messages.map((text) => agents.user(text))];
    kernel.messages = [];
  }
  result.terminus = kernel.report;
  return result;
}

module.exports = { run, turnOf, modelErrorKind };
