'use strict';
// terminus-kernel/langchain: the Terminus kernel as a LangChain JS v1 agent middleware
// (`createMiddleware` of `langchain`, for `createAgent`), the counterpart of the Python
// `terminus_kernel.langchain.TerminusMiddleware`.
//
//   const { createAgent } = require('langchain');
//   const { terminusMiddleware } = require('terminus-kernel/langchain');
//   const agent = createAgent({ model, tools, middleware: [terminusMiddleware({ completion_requires: ['write_file'] })] });
//   const state = await agent.invoke({ messages: [{ role: 'user', content: 'Write the plan' }] });
//   state.terminus; // the kernel's report: outcome, reason, steps, model_calls, nudges, ...
//
// Every model reply and every tool result goes through a `Machine`:
// - `beforeAgent` starts the run's machine (a thread whose run is still live goes on with it).
// - `beforeModel` feeds the finished tool turn's results (the `ToolMessage` answering each call
//   the kernel said to run) as one `tool_results` event: the tools of a turn run in parallel
//   tasks, and this is the first point where they have all finished. A stop decided on them (a
//   repeated loop, failing tools, a spent budget) jumps to the end: the model is not called. The
//   kernel's notices (a tool excluded, a loop seen) are appended to the turn's last tool result.
// - `wrapModelCall` waits the kernel's backoff before a retried call, offers no tools to the
//   final-answer call of a spent budget, and (`handleModelErrors`, default on) gives a provider's
//   error to the kernel (`model_error`, by HTTP status): retried after the kernel's backoff, or
//   the run ends with `model_error`, without an exception; any other exception propagates.
// - `afterModel` feeds the reply as a `model_turn`. A stop the kernel refuses (open todos of
//   `write_todos`, `completion_requires` unmet, an empty or no-op reply) is answered with the
//   kernel's nudge as a user message and the loop jumps back to the model; a stop the kernel
//   decides jumps to the end, without an exception (so without LangGraph's recursion error). An
//   empty reply is removed from the conversation (chat APIs refuse empty assistant messages); the
//   calls of a reply the run stopped on are answered "not run", so the history stays valid.
// - `wrapToolCall` answers a call of a tool the kernel excluded with the kernel's refusal instead
//   of running it, and appends the kernel's budget warnings to results.
// - `afterAgent` makes sure the final state has the report: a run still live there was ended by
//   something other than the kernel, and is cancelled.
//
// The machine's snapshot (JSON text) is kept in the graph state under `_terminus_machine` and
// what the run awaits under `_terminus_turn` (keys of this middleware's state schema, so a
// checkpointer keeps them); each hook restores the machine from the state. The final state has
// key `terminus`: the report.

const crypto = require('node:crypto');
const { Machine, providerErrorKind } = require('./index.js');
const { checkPolicy } = require('./adapter-policy.js');

function peers() {
  try {
    return {
      langchain: require('langchain'),
      messages: require('@langchain/core/messages'),
      langgraph: require('@langchain/langgraph'),
      zod: require('zod'),
    };
  } catch (e) {
    throw new Error(`terminus-kernel/langchain needs \`langchain\` (v1) and \`@langchain/core\` (npm install langchain @langchain/core): ${e.message}`);
  }
}

const REPORT_KEY = 'terminus';
const MACHINE_KEY = '_terminus_machine';
const TURN_KEY = '_terminus_turn';
/** A `ToolMessage.response_metadata` key: the kernel's error class for a failed call. */
const ERROR_KIND = 'terminus_error';
/** A `ToolMessage.response_metadata` key: the kernel's notices appended to that result. */
const NOTICE_KEY = 'terminus_notice';
/** An `AIMessage.response_metadata` key: the state update of a run stopped by a model error. */
const STOP_KEY = 'terminus_stop';

const FINISH = {
  stop: 'stop',
  end_turn: 'stop',
  stop_sequence: 'stop',
  length: 'length',
  max_tokens: 'length',
  content_filter: 'content_filter',
  tool_calls: 'tool_calls',
  tool_use: 'tool_calls',
  function_call: 'tool_calls',
};

/** The visible text of a message's content (a string, or content blocks). */
function textOf(content) {
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) {
    return content
      .map((block) => (typeof block === 'string' ? block : block && block.type === 'text' ? String(block.text ?? '') : ''))
      .join('');
  }
  return '';
}

const isAI = (m, msgs) => msgs.AIMessage.isInstance(m);
const isTool = (m, msgs) => msgs.ToolMessage.isInstance(m);
const isHuman = (m, msgs) => msgs.HumanMessage.isInstance(m);

/** The kernel's `model_turn` event for an `AIMessage`. */
function modelTurnEvent(message) {
  const calls = (message.tool_calls || []).map((call, index) => {
    if (!call.id) throw new Error(`model reply ${message.id}: tool_calls[${index}] (${call.name}) has no id`);
    return { id: call.id, name: call.name, arguments: call.args ?? {} };
  });
  for (const bad of message.invalid_tool_calls || []) {
    if (typeof bad.id === 'string' && bad.id) {
      calls.push({ id: bad.id, name: bad.name || '', arguments: typeof bad.args === 'string' ? bad.args : '' });
    }
  }
  const turn = { text: textOf(message.content), tool_calls: calls };
  const usage = message.usage_metadata;
  if (usage) turn.usage = { input_tokens: Math.trunc(usage.input_tokens || 0), output_tokens: Math.trunc(usage.output_tokens || 0) };
  const meta = message.response_metadata || {};
  const reason = meta.finish_reason || meta.stop_reason;
  if (typeof reason === 'string' && FINISH[reason]) turn.finish = FINISH[reason];
  const extra = message.additional_kwargs || {};
  const reasoned =
    (Array.isArray(message.content) && message.content.some((b) => b && (b.type === 'reasoning' || b.type === 'thinking'))) ||
    Boolean(extra.reasoning_content || extra.reasoning);
  if (reasoned) turn.reasoning = true;
  return { model_turn: turn };
}

/** Whether a tool batch of the kernel's waits for its results to be fed. */
function batchOut(turn) {
  return Boolean(turn.batch || (turn.awaiting && Object.keys(turn.awaiting).length));
}

/** The kernel's result for a call answered by `message` (`ok` is the output's digest). */
function toolResult(callId, name, message) {
  const text = textOf(message.content);
  const kind = (message.response_metadata || {})[ERROR_KIND];
  if (message.status === 'error' || kind !== undefined) {
    return { call_id: callId, name, error: typeof kind === 'string' ? kind : 'failed', message: text };
  }
  return { call_id: callId, name, ok: 'sha256:' + crypto.createHash('sha256').update(text, 'utf8').digest('hex') };
}

function callId(call, where) {
  if (typeof call.id !== 'string' || !call.id) throw new Error(`${where}: a call has no id: ${JSON.stringify(call)}`);
  return call.id;
}

// The classes the kernel retries, which keep the delay the provider asked for.
const RETRIED = new Set(['rate_limited', 'server', 'timeout']);

/**
 * The kernel's `model_error` of a failed model call (`{ kind, retry_after_ms? }`), or `null` for an
 * exception that is not a provider's error (it propagates). Reads the HTTP status of the provider
 * SDKs' errors (`status`, `statusCode`, `response.status`, also on a wrapped `cause`) and classes
 * it with the table every host shares (`providerErrorKind`, with the response body when the SDK
 * kept it), else LangChain's `lc_error_code`, else the class (a timeout, a connection failure).
 */
function modelErrorKind(error) {
  for (let e = error, depth = 0; e && depth < 4; e = e.cause, depth++) {
    const status = [e.status, e.statusCode, e.response && e.response.status].find((v) => Number.isInteger(v));
    const headers = e.headers || (e.response && e.response.headers) || {};
    const header = (name) => (typeof headers.get === 'function' ? headers.get(name) : headers[name]);
    let retry;
    const ms = Number(header('retry-after-ms'));
    const seconds = Number(header('retry-after'));
    if (header('retry-after-ms') != null && Number.isFinite(ms) && ms >= 0) retry = Math.round(ms);
    else if (header('retry-after') != null && Number.isFinite(seconds) && seconds >= 0) retry = Math.round(seconds * 1000);
    const out = (kind) => (retry === undefined ? { kind } : { kind, retry_after_ms: retry });
    if (status !== undefined && status >= 400 && status < 600) {
      const body = typeof e.responseBody === 'string' && e.responseBody.trim() ? e.responseBody : String(e.message || '');
      const kind = providerErrorKind(status, body);
      return RETRIED.has(kind) ? out(kind) : { kind };
    }
    if (e.lc_error_code === 'MODEL_RATE_LIMIT') return out('rate_limited');
    if (e.lc_error_code === 'MODEL_AUTHENTICATION') return { kind: 'auth' };
    if (e.lc_error_code === 'CONTEXT_OVERFLOW') return { kind: 'context_overflow' };
    const name = String(e.name || (e.constructor && e.constructor.name) || '');
    if (/timeout/i.test(name) || e.code === 'ETIMEDOUT') return { kind: 'timeout' };
    if (/ratelimit/i.test(name)) return out('rate_limited');
    if (/connect(ion)?error/i.test(name) || ['ECONNRESET', 'ECONNREFUSED', 'EAI_AGAIN'].includes(e.code)) return { kind: 'server' };
  }
  return null;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * A LangChain JS v1 middleware that runs the agent loop under the Terminus kernel.
 *
 * @param {object} [policy] the kernel's policy (the scenario `policy` fields); an unknown or
 *   ill-typed field throws here, at construction.
 * @param {object} [options]
 * @param {(claim: string) => boolean | [boolean, string]} [options.verifier] judges completion
 *   claims when the policy sets `verify_completion` (default: the kernel's rules).
 * @param {boolean} [options.handleModelErrors] a provider's error from the model call goes to the
 *   kernel (retried with its backoff, or the run ends `model_error`); `false`: every exception
 *   propagates (for an outer retry or fallback middleware). Default `true`.
 * @param {string} [options.name] the middleware's name (default `TerminusMiddleware`).
 */
function terminusMiddleware(policy, options = {}) {
  if (policy != null && (typeof policy !== 'object' || Array.isArray(policy))) {
    throw new TypeError('terminusMiddleware: `policy` must be an object or undefined');
  }
  const { langchain, messages: msgs, langgraph, zod } = peers();
  const { Command } = langgraph;
  const { z } = zod;
  const thePolicy = { ...(policy || {}) };
  checkPolicy(thePolicy, 'terminusMiddleware');
  const deadline = thePolicy.deadline_ms != null;
  const verifier = options.verifier;
  const handleModelErrors = options.handleModelErrors !== false;
  const AIMessageOf = (response) => (msgs.AIMessage.isInstance(response) ? response : null);

  const restore = (state) => {
    const snapshot = state[MACHINE_KEY];
    if (typeof snapshot !== 'string') {
      throw new Error(`terminusMiddleware: the graph state has no machine (${MACHINE_KEY}); was the agent built with this middleware?`);
    }
    return Machine.restore(snapshot);
  };

  const verdict = (command) => {
    if (!verifier) {
      const missing = (command.missing || []).map(String);
      return { complete: missing.length === 0, feedback: missing.join('; ') };
    }
    const answer = verifier(String(command.claim ?? ''));
    if (typeof answer === 'boolean') return { complete: answer, feedback: '' };
    if (Array.isArray(answer) && answer.length === 2 && typeof answer[0] === 'boolean' && typeof answer[1] === 'string') {
      return { complete: answer[0], feedback: answer[1] };
    }
    throw new TypeError(`verifier: expected a boolean or a [boolean, string] pair, got ${JSON.stringify(answer)}`);
  };

  // The names of the tools each model call offered, by its reply's id, for the reply's hook (a
  // tool call written in the text runs only when it names one of them).
  const offered = new Map();
  const noteOffered = (request, response) => {
    const reply = AIMessageOf(response);
    if (reply === null) return;
    // A reply without an id gets one here (the graph would give it one): its hook finds it.
    if (reply.id == null) reply.id = `terminus-reply-${crypto.randomUUID()}`;
    const names = (request.tools || [])
      .map((t) => (t && (t.name || (t.function && t.function.name))) || null)
      .filter((n) => typeof n === 'string' && n.length > 0);
    offered.set(reply.id, names);
    while (offered.size > 256) offered.delete(offered.keys().next().value);
  };

  /** Drains the kernel's commands into `turn`; returns the messages, notices and the jump. */
  const carryOut = (machine, turn) => {
    const out = { messages: [], notices: [], jump: undefined };
    for (let command = machine.nextCommand(); command !== null; command = machine.nextCommand()) {
      switch (command.command) {
        case 'nudge':
          out.messages.push(
            new msgs.HumanMessage({ content: String(command.text), id: `terminus-${crypto.randomUUID()}`, response_metadata: { terminus: 'nudge' } }),
          );
          break;
        case 'notice':
          out.notices.push(String(command.text));
          break;
        case 'call_model':
          turn.call = { delay_ms: Math.trunc(command.delay_ms || 0), tools: command.tools !== false };
          out.jump = 'model';
          break;
        case 'run_tools':
          turn.awaiting = Object.fromEntries((command.calls || []).map((c) => [callId(c, 'run_tools'), String(c.name)]));
          // A batch is out until its results are fed, even one that runs no call (every call
          // refused by a budget: the kernel then waits for an empty result list).
          turn.batch = true;
          turn.refused = Object.fromEntries((command.refused || []).map((r) => [callId(r, 'run_tools.refused'), String(r.text)]));
          turn.warnings = Object.fromEntries((command.warnings || []).map((w) => [callId(w, 'run_tools.warnings'), String(w.text)]));
          // The model wrote these calls in its text: the reply gets them as calls.
          if (command.written != null) out.written = [String(command.written), command.calls || []];
          out.jump = undefined;
          break;
        case 'verify':
          machine.handle({ verdict: verdict(command) });
          break;
        case 'stop':
          turn.report = command.report ?? machine.report();
          turn.ended = true;
          out.jump = 'end';
          break;
        default:
          throw new Error(`terminusMiddleware: unknown kernel command ${JSON.stringify(command)}`);
      }
    }
    return out;
  };

  /** Feeds one event (after a clock reading when the policy has a deadline). */
  const feed = (machine, turn, event) => {
    if (deadline) {
      machine.handle({ tick: Math.max(Date.now() - (turn.started_ms || 0), 0) });
      const early = carryOut(machine, turn);
      if (turn.ended) return early;
    }
    machine.handle(event);
    return carryOut(machine, turn);
  };

  /** Feeds the awaited calls' results, read from the `ToolMessage`s after the last reply. */
  const feedResults = (machine, turn, messages) => {
    const awaiting = turn.awaiting || {};
    const answered = new Map();
    let last = null;
    for (let i = messages.length - 1; i >= 0; i--) {
      const m = messages[i];
      if (isTool(m, msgs)) {
        if (m.tool_call_id in awaiting && !answered.has(m.tool_call_id)) {
          answered.set(m.tool_call_id, m);
          last = last || m;
        }
      } else if (isAI(m, msgs)) break;
    }
    const results = Object.entries(awaiting).map(([id, name]) =>
      answered.has(id)
        ? toolResult(id, name, answered.get(id))
        : { call_id: id, name, error: 'failed', message: 'no result came back for this call' },
    );
    turn.awaiting = {};
    turn.refused = {};
    turn.warnings = {};
    delete turn.batch;
    return { out: feed(machine, turn, { tool_results: results }), last };
  };

  /** The state update: the snapshot, the turn, the report once the run stopped, messages. */
  const update = (machine, turn, messages) => {
    const { report, ...rest } = turn;
    const out = { [MACHINE_KEY]: machine.snapshot(), [TURN_KEY]: rest };
    if (report !== undefined) out[REPORT_KEY] = report;
    if (messages && messages.length) out.messages = messages;
    return out;
  };

  /** `message` (the same id, so it replaces the original) with the kernel's notices appended. */
  const noticed = (message, notices) => {
    const notice = notices.join('\n\n');
    const text = textOf(message.content);
    return new msgs.ToolMessage({
      id: message.id,
      content: text ? `${text}\n\n${notice}` : notice,
      tool_call_id: message.tool_call_id,
      name: message.name,
      status: message.status,
      artifact: message.artifact,
      response_metadata: { ...(message.response_metadata || {}), [NOTICE_KEY]: notice },
    });
  };

  const lastAI = (messages) => {
    for (let i = messages.length - 1; i >= 0; i--) if (isAI(messages[i], msgs)) return messages[i];
    return null;
  };

  const task = (messages) => {
    const first = (messages || []).find((m) => isHuman(m, msgs));
    return first ? textOf(first.content) : '';
  };

  const stateSchema = z.object({
    [REPORT_KEY]: z.any().optional(),
    [MACHINE_KEY]: z.string().optional(),
    [TURN_KEY]: z.any().optional(),
  });

  return langchain.createMiddleware({
    name: options.name || 'TerminusMiddleware',
    stateSchema,

    beforeAgent: (state) => {
      const turn = state[TURN_KEY];
      if (typeof state[MACHINE_KEY] === 'string' && turn && !turn.ended) return undefined; // a live run goes on
      const machine = new Machine(thePolicy, { task: task(state.messages) });
      const fresh = { started_ms: Date.now() };
      carryOut(machine, fresh); // the first command: call the model
      return { ...update(machine, fresh, []), [REPORT_KEY]: null };
    },

    beforeModel: {
      canJumpTo: ['end'],
      hook: (state) => {
        const turn = { ...(state[TURN_KEY] || {}) };
        if (turn.ended || !batchOut(turn)) return undefined;
        const machine = restore(state);
        const notices = turn.notices || [];
        delete turn.notices;
        const { out, last } = feedResults(machine, turn, state.messages || []);
        const all = [...notices, ...out.notices];
        const messages = [];
        if (all.length && last) messages.push(noticed(last, all));
        messages.push(...out.messages);
        const result = update(machine, turn, messages);
        if (turn.ended) result.jumpTo = 'end';
        return result;
      },
    },

    wrapModelCall: async (request, handler) => {
      const state = request.state || {};
      let turn = state[TURN_KEY] || {};
      let call = turn.call || {};
      let machine = null; // restored at the first provider error: the errors go to the kernel
      for (;;) {
        if (call.delay_ms > 0) await sleep(call.delay_ms);
        const asked = call.tools === false ? { ...request, tools: [], toolChoice: undefined } : request;
        let response;
        try {
          response = await handler(asked);
        } catch (error) {
          const kind = handleModelErrors ? modelErrorKind(error) : null;
          if (kind === null) throw error;
          if (machine === null) {
            machine = restore(state);
            turn = { ...turn };
          }
          const out = feed(machine, turn, { model_error: kind });
          if (out.notices.length) turn.notices = [...(turn.notices || []), ...out.notices];
          if (turn.ended) {
            // The kernel gave up (`model_error`): a stand-in reply carrying the state update,
            // which `afterModel` applies and removes the reply (a Command returned here, with no
            // reply, would reach the graph once per middleware wrapping this one).
            const id = `terminus-stop-${crypto.randomUUID()}`;
            return new msgs.AIMessage({ content: '', id, response_metadata: { [STOP_KEY]: update(machine, turn, []) } });
          }
          call = turn.call || {};
          continue;
        }
        noteOffered(asked, response);
        if (machine === null) return response;
        // Errors were fed before this reply: the state gets the machine past them (the reply
        // itself is added by the model node, as for any reply).
        if (AIMessageOf(response) === null) return response;
        return new Command({ update: update(machine, turn, []) });
      }
    },

    afterModel: {
      canJumpTo: ['model', 'end'],
      hook: (state) => {
        const turn = { ...(state[TURN_KEY] || {}) };
        const messages = state.messages || [];
        let message = lastAI(messages);
        if (!message || !state[MACHINE_KEY]) return undefined;
        const stop = (message.response_metadata || {})[STOP_KEY];
        if (stop && message.id === messages[messages.length - 1].id) {
          // The kernel stopped in `wrapModelCall`: the reply is its stand-in.
          return { ...stop, messages: [new msgs.RemoveMessage({ id: message.id })], jumpTo: 'end' };
        }
        if (turn.ended) return undefined;
        if (message.id != null && message.id === turn.fed) return undefined;
        const machine = restore(state);
        turn.fed = message.id;
        const event = modelTurnEvent(message);
        if (message.id != null && offered.has(message.id)) {
          event.model_turn.tools = offered.get(message.id);
          offered.delete(message.id);
        }
        const out = feed(machine, turn, event);
        const replies = [];
        if (out.written && message.id != null) {
          // Tool calls the model wrote in its text, which the kernel runs: the reply becomes a
          // tool turn (same id, so it replaces the reply) for the tools node to run.
          const [content, written] = out.written;
          message = new msgs.AIMessage({
            content,
            id: message.id,
            tool_calls: written.map((c) => ({ id: c.id, name: c.name, args: c.arguments, type: 'tool_call' })),
            response_metadata: message.response_metadata,
            usage_metadata: message.usage_metadata,
          });
          replies.push(message);
        }
        const calls = [...(message.tool_calls || []), ...(message.invalid_tool_calls || []).filter((c) => c.id)];
        if (!calls.length && !textOf(message.content).trim() && message.id) {
          // An empty reply is an error (retried, or the run stops), never part of the conversation.
          replies.push(new msgs.RemoveMessage({ id: message.id }));
        }
        if (out.jump === 'end' && calls.length) {
          const reason = (turn.report && turn.report.reason) || 'stopped';
          for (const call of calls) {
            replies.push(new msgs.ToolMessage({ content: `Not run: the run stopped (${reason}).`, tool_call_id: callId(call, 'model reply'), name: call.name, status: 'error' }));
          }
        }
        if (out.jump === undefined) {
          // Calls with unparsable arguments are not run by the tools node: answered here.
          for (const bad of message.invalid_tool_calls || []) {
            if (!bad.id) continue;
            const refused = (turn.refused || {})[bad.id];
            if (refused === undefined && !(bad.id in (turn.awaiting || {}))) continue;
            const content = refused !== undefined ? refused : `Error: the arguments of \`${bad.name}\` are not valid JSON${bad.error ? ` (${bad.error})` : ''}. Call it again with a JSON object.`;
            replies.push(new msgs.ToolMessage({ content, tool_call_id: bad.id, name: bad.name || '', status: 'error', response_metadata: refused !== undefined ? {} : { [ERROR_KIND]: 'invalid_arguments' } }));
          }
          if (!(message.tool_calls || []).length) out.jump = 'model';
        }
        if (out.notices.length) turn.notices = [...(turn.notices || []), ...out.notices];
        replies.push(...out.messages);
        const result = update(machine, turn, replies);
        if (out.jump !== undefined) result.jumpTo = out.jump;
        return result;
      },
    },

    wrapToolCall: async (request, handler) => {
      const call = request.toolCall;
      const turn = (request.state && request.state[TURN_KEY]) || {};
      const id = call.id;
      const refusal = (turn.refused || {})[id];
      if (refusal !== undefined) {
        return new msgs.ToolMessage({ content: String(refusal), tool_call_id: id, name: call.name, status: 'error' });
      }
      if (!request.tool && id in (turn.awaiting || {})) {
        return new msgs.ToolMessage({
          content: `Error: there is no tool named \`${call.name}\`.`,
          tool_call_id: id,
          name: call.name,
          status: 'error',
          response_metadata: { [ERROR_KIND]: 'not_found' },
        });
      }
      const result = await handler(request);
      const warning = (turn.warnings || {})[id];
      if (warning === undefined || !msgs.ToolMessage.isInstance(result)) return result;
      const content = typeof result.content === 'string'
        ? (result.content ? `${result.content}\n\n${warning}` : warning)
        : [...result.content, { type: 'text', text: warning }];
      return new msgs.ToolMessage({ id: result.id, content, tool_call_id: result.tool_call_id, name: result.name, status: result.status, artifact: result.artifact, response_metadata: result.response_metadata });
    },

    afterAgent: (state) => {
      const turn = { ...(state[TURN_KEY] || {}) };
      if (!state[MACHINE_KEY] || turn.ended) return undefined;
      const machine = restore(state);
      if (batchOut(turn)) feedResults(machine, turn, state.messages || []);
      if (!turn.ended) feed(machine, turn, { cancel: true });
      return update(machine, turn, []);
    },
  });
}

module.exports = { terminusMiddleware, modelTurnEvent, modelErrorKind, toolResult, REPORT_KEY, MACHINE_KEY, TURN_KEY, ERROR_KIND, NOTICE_KEY, STOP_KEY };
