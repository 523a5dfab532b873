'use strict';
// terminus-kernel/openai-agents: an agent of the OpenAI Agents SDK (`@openai/agents`) run under
// the Terminus kernel: the kernel decides when the run ends, not `maxTurns`.
//
// `run(agent, input, { policy, verify, runner, ...runOptions })` calls the SDK's `Runner.run`
// with copies of the agent and its function tools wired to one host core `Session` (the
// package's, the same for every framework adapter: every decision is its), through the SDK's own
// extension points:
// - a `Model` wrapper gives every reply to the session. An empty reply or a
//   provider's error (classed with `providerErrorKind`) is retried inside the wrapper after the
//   kernel's backoff, or ends the run (`empty_responses`, `model_error`); a tool call written in
//   the reply's text becomes a real call when the kernel says so. After a stop the kernel
//   decided, the model is not called again.
// - a tool input guardrail on each function tool answers a call the kernel refused (a tool
//   excluded, a spent tool budget, a run that stopped) with the kernel's text instead of running
//   it; a tool output guardrail appends the kernel's budget warning.
// - `toolUseBehavior` gives each tool batch's results to the session: a stop the
//   kernel decides there (a loop of identical calls, failing tools, a spent budget) ends the run
//   without another model call.
// A tool's failure reaches the model as `terminus run` writes one, `error (KIND): MESSAGE` (a
// function call's result has no other place for its class).
// A reply the SDK takes as the final output but the kernel refuses (`completion_requires` unmet,
// an open todo of `write_todos`, a no-op reply) ends one `Runner.run` only: `run` goes on with
// the conversation so far (`result.history`) and the kernel's nudge as a user message, until the
// kernel stops. A notice (a loop seen, a tool excluded) is given the same way after the batch's
// results, appended to the batch's last result (the host core's `notice_to`; a user message
// when it has none). Resolves to the last `Runner.run`'s result, whose `history` is the whole
// conversation (nudges and notices included), with the kernel's report as its property
// `terminus`.

const { Session } = require('./index.js');
const { modelErrorKind } = require('./sdk-errors.js');
const { checkPolicy, verified, withNotices, failureText: failure, checkpointMessage } = require('./adapter-policy.js');

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

/** The text of a tool output as the SDK keeps it (a string, or `{ type: 'text', text }`). */
function outputText(output) {
  if (typeof output === 'string') return output;
  if (output && typeof output === 'object' && output.type === 'text') return String(output.text);
  return JSON.stringify(output) ?? '';
}

/**
 * A tool output with the kernel's `notice` appended after a blank line: to its text, or as a
 * text part of its own to a list of parts.
 */
function withNotice(output, notice) {
  if (Array.isArray(output)) return [...output, { type: 'input_text', text: notice }];
  const text = outputText(output);
  const shown = withNotices(text, [notice]);
  return typeof output === 'string' ? shown : { type: 'text', text: shown };
}

/** The finish reason of a reply: the Chat Completions model keeps its raw response (`providerData`). */
function finishOf(raw) {
  const choice = raw && Array.isArray(raw.choices) ? raw.choices[0] : undefined;
  return choice && typeof choice.finish_reason === 'string' ? choice.finish_reason : undefined;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** One run's session and what the glue keeps beside it. */
class KernelRun {
  constructor(session, step, verify) {
    this.session = session;
    this.step = step;
    // The verifier is asked the claim, the todos and what the rules find missing.
    this.ask = verify && (({ claim, todos, missing }) => verify({ claim, todos, missing }));
    this.answers = new Map(); // call id -> the session's answer: { content, error }
    this.failed = new Map(); // call id -> the kernel's class of a tool's failure
    this.messages = []; // nudges (and notices with no result to ride on), as user messages
    this.checkpoints = []; // checkpoints to write for the agent before the next model call
    this.notices = []; // notices for the batch's last result, `noticeTo`
    this.noticeTo = null;
    this.written = null;
    this.handover = false; // the last Runner.run ended for the kernel to go on
    this.replies = 0;
  }

  get ended() {
    return this.session.ended;
  }

  get report() {
    return this.session.report();
  }

  /** The kernel has something to tell the model before its next call. */
  get pending() {
    return this.messages.length > 0 || this.notices.length > 0 || this.checkpoints.length > 0;
  }

  /** The session wants the model called. */
  get modelWanted() {
    return !this.ended && this.step.jump === 'model';
  }

  /** Takes a step of the session: its verification answered, its messages and answers kept. */
  async take(step) {
    step = await verified(this.session, step, this.ask);
    if (!step) return;
    if (step.jump) this.step = step;
    if ((step.notices || []).length) {
      this.notices.push(...step.notices);
      this.noticeTo = step.notice_to;
    }
    this.messages.push(...(step.nudges || []));
    if (step.checkpoint) this.checkpoints.push(step.checkpoint);
    for (const a of step.answers || []) this.answers.set(a.tool_call_id, a);
    if (step.written) this.written = step.written;
  }

  /** The conversation's items as the core reads them: a failure's class on its result. */
  wire(items) {
    return (items || []).map((item) => {
      if (!item || item.type !== 'function_call_result') return item;
      const kind = this.failed.get(String(item.callId)) || (this.answers.get(String(item.callId)) || {}).error;
      return kind ? { ...item, terminus_error: kind } : item;
    });
  }

  /** Gives the session the results of the tool turn out, read from the conversation's `items`. */
  async results(items) {
    if (!this.session.batchOut || this.ended) return;
    await this.take(this.session.results(this.wire(items), Date.now()));
    this.failed = new Map();
  }

  /**
   * The conversation `history` for the next `Runner.run`, with what the kernel tells the model:
   * the notices on the result they go to (else a user message), then the nudges, as `user`
   * makes user messages.
   */
  carry(history, user) {
    const to = this.noticeTo;
    const at = this.notices.length ? history.findLastIndex((i) => i && i.type === 'function_call_result' && (i.id === to || i.callId === to)) : -1;
    const notice = withNotices('', this.notices);
    const items = history.map((item, i) => (i === at ? { ...item, output: withNotice(item.output, notice) } : item));
    const said = at < 0 ? [...this.notices, ...this.messages] : this.messages;
    [this.notices, this.noticeTo, this.messages] = [[], null, []];
    return [...items, ...said.map((text) => user(text))];
  }

  /**
   * `items` with the checkpoints the kernel asked for written after them: for each, the agent's
   * own model asked for a summary by `summarize(items with the prompt)` (a `Runner.run` of the
   * agent without tools, its text), its reply not fed to the kernel; the checkpoint's message
   * (`checkpointMessage`) a user message.
   */
  async checkpointed(items, user, summarize, handleModelErrors) {
    for (const { prompt, note } of this.checkpoints.splice(0)) {
      let summary;
      try {
        summary = { text: await summarize([...items, user(prompt)]) };
      } catch (error) {
        const kind = handleModelErrors ? modelErrorKind(error) : null;
        if (!kind) throw error;
        summary = { error: kind.kind, message: String((error && error.message) || error) };
      }
      items = [...items, user(checkpointMessage(note, summary))];
    }
    return items;
  }

  /** Ends a run something else ended (the SDK, a throw). */
  async finish(items) {
    await this.take(this.session.finish(this.wire(items), Date.now()));
  }
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

/** The agent's model with every call and reply going through the run's session. */
class KernelModel {
  constructor(inner, run, handleModelErrors, Usage) {
    this.inner = inner;
    this.run = run;
    this.handleModelErrors = handleModelErrors;
    this.Usage = Usage;
  }

  async getResponse(request) {
    const run = this.run;
    if (Array.isArray(request.input)) await run.results(request.input);
    for (;;) {
      if (!run.modelWanted) return standIn(this.Usage);
      const { delay_ms: delay, tools: withTools } = run.step;
      if (delay) await sleep(delay);
      const sent = withTools ? request : { ...request, tools: [], handoffs: [] };
      let response;
      try {
        response = await this.inner.getResponse(sent);
      } catch (error) {
        const kind = this.handleModelErrors ? modelErrorKind(error) : null;
        if (!kind) throw error;
        await run.take(run.session.modelError(kind.kind, kind.retry_after_ms ?? null, Date.now()));
        continue;
      }
      // The tools as the SDK sends them: each its name and its `parameters` schema.
      const offered = sent.tools || [];
      const usage = response.usage || {};
      const counted = usage.requests || usage.inputTokens || usage.outputTokens;
      const reply = { output: response.output || [], response_id: `terminus-reply-${++run.replies}` };
      if (counted) reply.usage = { inputTokens: Number(usage.inputTokens) || 0, outputTokens: Number(usage.outputTokens) || 0 };
      const finish = finishOf(response.providerData);
      if (finish) reply.finish_reason = finish;
      await run.take(run.session.reply(reply, offered, Date.now()));
      if (run.written) {
        response = withWrittenCalls(response, { prose: run.written.text, calls: run.written.tool_calls });
        run.written = null;
      }
      const output = response.output || [];
      const hasCalls = output.some((i) => i && i.type === 'function_call');
      const hasText = output.some((i) => i && i.type === 'message' && messageText(i).trim());
      if (!hasCalls && !hasText) {
        // An empty reply is never part of the conversation: retried here when the kernel says
        // so, else answered with no output (the kernel's nudge follows in the next Runner.run).
        if (run.modelWanted && !run.pending) continue;
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
  const { ToolGuardrailFunctionOutputFactory: out } = agents;
  const refuse = agents.defineToolInputGuardrail({
    name: 'terminus',
    run: async ({ toolCall }) => {
      const id = String(toolCall.callId);
      const answer = run.answers.get(id);
      const refused = ({ content, error }) => out.rejectContent(error ? failure(error, content) : content);
      if (answer) return refused(answer);
      const turn = run.session.turn();
      const gate = Session.gate(turn, id, String(toolCall.name), true);
      // Refused, the run stopped, or a call the kernel did not ask for: the core's answer.
      if (gate.refuse) return refused(gate.refuse);
      return out.allow();
    },
  });
  const warn = agents.defineToolOutputGuardrail({
    name: 'terminus',
    run: async ({ toolCall, output }) => {
      const gate = Session.gate(run.session.turn(), String(toolCall.callId), String(toolCall.name), true);
      const warning = gate.run && gate.run.warning;
      if (warning === undefined) return out.allow();
      const text = outputText(output);
      return out.rejectContent(withNotices(text, [warning]));
    },
  });
  const invoke = async (context, input, details) => {
    try {
      return await tool.invoke(context, input, details);
    } catch (error) {
      // A tool without an errorFunction: the kernel counts the failure (of the class in the
      // error's `terminus_error`, else `failed`), the model reads it.
      const id = details && details.toolCall ? String(details.toolCall.callId) : undefined;
      if (id === undefined || !run.session.turn().awaiting.some(([a]) => a === id)) throw error;
      const kind = typeof (error && error.terminus_error) === 'string' ? error.terminus_error : 'failed';
      run.failed.set(id, kind);
      return failure(kind, String((error && error.message) || error));
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
 * Refuses a policy that names a tool by a name the SDK changed: `tool()` makes every character
 * of a name but [A-Za-z0-9] an underscore (`get-sum` is sent as `get_sum`), so a policy naming
 * `get-sum` would wait for a call the model can never make. The error names the field.
 */
function sdkNamed(policy, tools) {
  const names = new Set((tools || []).map((t) => t && t.name));
  const named = [
    ...((policy && policy.completion_requires) || []).map((n, i) => [`completion_requires[${i}]`, n]),
    ...Object.entries((policy && policy.tool_budgets) || {}).flatMap(([n, budget]) => [
      [`tool_budgets.${n}`, n],
      ...((budget && budget.reset_on) || []).map((r, i) => [`tool_budgets.${n}.reset_on[${i}]`, r]),
    ]),
  ];
  for (const [at, name] of named) {
    const sent = String(name).replace(/\s/g, '_').replace(/[^A-Za-z0-9]/g, '_');
    if (!names.has(name) && names.has(sent)) {
      throw new Error(`policy.${at}: the agent has no tool \`${name}\`, but has \`${sent}\` (@openai/agents' tool() makes every character of a name but [A-Za-z0-9] an underscore): name it \`${sent}\` in the policy`);
    }
  }
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
  const { policy, scale, verify, handleModelErrors = true, runner = new agents.Runner({ tracingDisabled: true }), ...runOptions } = options || {};
  for (const [name, why] of Object.entries(REFUSED_OPTIONS)) {
    if (name in runOptions) throw new Error(`options.${name}: not accepted by run(): ${why}`);
  }
  if (verify !== undefined && typeof verify !== 'function') throw new Error('options.verify: expected a function');
  if (agent.outputType !== undefined && agent.outputType !== 'text') {
    throw new Error('agent.outputType: only text output is supported by terminus-kernel/openai-agents');
  }
  const checked = checkPolicy(policy, scale);
  sdkNamed(policy, agent.tools);
  const task = typeof input === 'string' ? [{ role: 'user', content: input }] : input.filter((i) => i && i.role === 'user').slice(0, 1);
  const kernel = new KernelRun(...Session.start(checked, task, Date.now()), verify);

  let inner = runner.config.model ?? agent.model;
  if (!inner || typeof inner === 'string') inner = await runner.config.modelProvider.getModel(inner || undefined);
  const model = new KernelModel(inner, kernel, handleModelErrors, agents.Usage);
  const behavior = agent.toolUseBehavior;
  const wired = agent.clone({
    model,
    tools: agent.tools.map((t) => (t && t.type === 'function' ? guarded(t, kernel, agents) : t)),
    toolUseBehavior: async (context, results) => {
      await kernel.results(results.map((r) => r.runItem && r.runItem.rawItem).filter(Boolean));
      if (kernel.ended) return { isFinalOutput: true, isInterrupted: undefined, finalOutput: String(kernel.report.result ?? '') };
      if (kernel.pending) {
        kernel.handover = true; // a notice goes into the conversation before the next model call
        return { isFinalOutput: true, isInterrupted: undefined, finalOutput: '' };
      }
      return usersBehavior(behavior, context, results);
    },
  });
  const wiredRunner = runner.config.model === undefined ? runner : new agents.Runner({ ...runner.config, model: undefined });
  // A checkpoint's summary: the agent's own model and instructions, no tools, one turn.
  const writer = agent.clone({ model: inner, tools: [], handoffs: [], inputGuardrails: [], outputGuardrails: [], toolUseBehavior: 'run_llm_again' });
  const summarize = async (conversation) => {
    const written = await wiredRunner.run(writer, conversation, { ...runOptions, maxTurns: 1 });
    return String(written.finalOutput ?? '');
  };
  let items = input;
  let result;
  for (;;) {
    try {
      result = await wiredRunner.run(wired, items, { ...runOptions, maxTurns: null });
    } catch (error) {
      if (!kernel.ended) await kernel.finish([]);
      if (error && typeof error === 'object') error.terminus = kernel.report;
      throw error;
    }
    if (kernel.ended) break;
    await kernel.results(result.history);
    if (kernel.ended) break;
    if (!(kernel.handover && kernel.modelWanted)) {
      // The SDK ended the run (the agent's own toolUseBehavior): the kernel's run is cancelled.
      await kernel.finish(result.history);
      break;
    }
    kernel.handover = false;
    const history = result.history.filter((item) => !(typeof item.id === 'string' && item.id.startsWith(STAND_IN)));
    try {
      items = await kernel.checkpointed(kernel.carry(history, agents.user), agents.user, summarize, handleModelErrors);
    } catch (error) {
      if (!kernel.ended) await kernel.finish([]);
      if (error && typeof error === 'object') error.terminus = kernel.report;
      throw error;
    }
  }
  result.terminus = kernel.report;
  return result;
}

module.exports = { run, modelErrorKind };
