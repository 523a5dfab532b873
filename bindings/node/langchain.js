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
// Each hook gives the framework's messages to the host core (the package's `Session`, the same
// for every framework adapter) and carries its step out in LangGraph's terms: `beforeAgent`
// starts the run, `beforeModel` feeds the tool turn's results (a stop there ends the graph, the
// model not called; notices go on the turn's last tool result), `wrapModelCall` waits the
// kernel's backoff, offers no tools to a spent budget's final-answer call and gives a provider's
// error to the kernel (retried, or the run ends `model_error`), `afterModel` feeds the reply (a
// refused stop is nudged, a decided stop jumps to the end, an empty reply is removed, calls
// written in the text become calls, calls not to run are answered), `wrapToolCall` answers a
// refused call instead of running it and appends budget warnings, `afterAgent` cancels a run
// something else ended. The session's snapshot (`_terminus_machine`) and `Session.turn()`
// (`_terminus_turn`) live in the graph state, so a checkpointer keeps them; the final state has
// the report under `terminus`.

const crypto = require('node:crypto');
const { Session } = require('./index.js');
const { modelErrorKind } = require('./sdk-errors.js');
const { checkPolicy } = require('./adapter-policy.js');

function peers() {
  try {
    const [langchain, messages, langgraph, zod] = ['langchain', '@langchain/core/messages', '@langchain/langgraph', 'zod'].map(require);
    return { langchain, messages, langgraph, zod };
  } catch (e) {
    throw new Error(`terminus-kernel/langchain needs \`langchain\` (v1) and \`@langchain/core\` (npm install langchain @langchain/core): ${e.message}`);
  }
}

// The state's keys (the report; the session's snapshot; `Session.turn()`), and the keys of a
// message's `response_metadata`: a `ToolMessage`'s error class and the notices appended to it, the
// state update a stand-in `AIMessage` carries when a model error ended the run.
const [REPORT_KEY, MACHINE_KEY, TURN_KEY] = ['terminus', '_terminus_machine', '_terminus_turn'];
const [ERROR_KIND, NOTICE_KEY, STOP_KEY] = ['terminus_error', 'terminus_notice', 'terminus_stop'];

/** A content value as the core reads it: a string, or its blocks' types and texts (text, reasoning). */
const contentOf = (content) =>
  typeof content === 'string' ? content : Array.isArray(content) ? content.map((b) => (typeof b === 'string' ? b : { type: String(b && b.type), text: String((b && b.text) ?? '') })) : '';

/**
 * A LangChain JS message in the shape the host core reads (`terminus_runtime::host::messages`):
 * the fields the core uses, as JSON values.
 */
function wire(message) {
  const type = message.type ?? message._getType();
  const out = { type, id: message.id ?? null, content: contentOf(message.content) };
  const meta = message.response_metadata || {};
  if (type === 'ai') {
    out.tool_calls = (message.tool_calls || []).map((c) => ({ id: c.id ?? null, name: c.name, args: c.args ?? {} }));
    out.invalid_tool_calls = (message.invalid_tool_calls || []).map((c) => ({ id: c.id ?? null, name: c.name ?? null, args: c.args ?? null, error: c.error ?? null }));
    const usage = message.usage_metadata;
    if (usage) out.usage_metadata = { input_tokens: Math.trunc(usage.input_tokens || 0), output_tokens: Math.trunc(usage.output_tokens || 0) };
    out.response_metadata = Object.fromEntries(['finish_reason', 'stop_reason'].filter((k) => typeof meta[k] === 'string').map((k) => [k, meta[k]]));
    const extra = message.additional_kwargs || {};
    out.additional_kwargs = { reasoning: Boolean(extra.reasoning_content || extra.reasoning) };
  } else if (type === 'tool') {
    out.tool_call_id = message.tool_call_id;
    out.status = message.status ?? null;
    out.response_metadata = typeof meta[ERROR_KIND] === 'string' ? { [ERROR_KIND]: meta[ERROR_KIND] } : {};
  }
  return out;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * A LangChain JS v1 middleware that runs the agent loop under the Terminus kernel: `policy` (the
 * scenario `policy` fields; a bad field throws here), `options` `verifier`, `handleModelErrors`,
 * `scale` and `name` (see `langchain.d.ts`).
 */
function terminusMiddleware(policy, options = {}) {
  if (policy != null && (typeof policy !== 'object' || Array.isArray(policy))) {
    throw new TypeError('terminusMiddleware: `policy` must be an object or undefined');
  }
  const { langchain, messages: msgs, langgraph, zod } = peers();
  const thePolicy = { ...(policy || {}) };
  checkPolicy(thePolicy, 'terminusMiddleware');
  Session.start(thePolicy, [], 0, options.scale); // a bad scale throws here
  const { verifier } = options;
  const handleModelErrors = options.handleModelErrors !== false;
  const isAI = (m) => msgs.AIMessage.isInstance(m);

  const restore = (state) => {
    if (typeof state[MACHINE_KEY] === 'string') return Session.restore(state[MACHINE_KEY]);
    throw new Error(`terminusMiddleware: the graph state has no machine (${MACHINE_KEY}); was the agent built with this middleware?`);
  };

  /** The verifier's verdict on a step's `verify`. */
  const verdict = ({ claim }) => {
    const answer = verifier(String(claim ?? ''));
    const [complete, feedback] = typeof answer === 'boolean' ? [answer, ''] : Array.isArray(answer) && answer.length === 2 ? answer : [];
    if (typeof complete === 'boolean' && typeof feedback === 'string') return { complete, feedback };
    throw new TypeError(`verifier: expected a boolean or a [boolean, string] pair, got ${JSON.stringify(answer)}`);
  };
  const verified = (session, step) => {
    // Without a verifier, the rules' verdict: the host core's.
    for (; step && step.verify; ) step = verifier ? session.verdict(verdict(step.verify)) : session.verdictByRules();
    return step;
  };

  // The names of the tools each model call offered, by its reply's id (a tool call written in
  // the text runs only when it names one of them).
  const offered = new Map();
  const noteOffered = (request, reply) => {
    if (reply.id == null) reply.id = `terminus-reply-${crypto.randomUUID()}`; // its hook finds it
    offered.set(reply.id, (request.tools || []).map((t) => t && (t.name || (t.function && t.function.name))).filter((n) => typeof n === 'string' && n));
    while (offered.size > 256) offered.delete(offered.keys().next().value);
  };

  /** The state update: the snapshot, the turn, the report once the run ended, messages. */
  const update = (session, messages) => {
    const out = { [MACHINE_KEY]: session.snapshot(), [TURN_KEY]: session.turn() };
    if (session.ended) out[REPORT_KEY] = session.report();
    if (messages.length) out.messages = messages;
    return out;
  };

  /** `message` (the same id, so it replaces the original) with `text` appended. */
  const appended = (message, text, meta = message.response_metadata) => {
    const content = typeof message.content === 'string' ? (message.content ? `${message.content}\n\n${text}` : text) : [...message.content, { type: 'text', text }];
    const { id, tool_call_id, name, status, artifact } = message;
    return new msgs.ToolMessage({ id, content, tool_call_id, name, status, artifact, response_metadata: meta });
  };
  const answer = ({ content, tool_call_id, name, error }) =>
    new msgs.ToolMessage({ content, tool_call_id, name, status: 'error', response_metadata: error ? { [ERROR_KIND]: error } : {} });

  /** The step's messages: the answers, the notices on the tool message `notice_to`, the nudges. */
  const messagesOf = (step, last = []) => {
    const out = (step.answers || []).map(answer);
    const target = step.notice_to;
    const noticed = target && (step.notices || []).length && last.findLast((m) => msgs.ToolMessage.isInstance(m) && (m.id === target || m.tool_call_id === target));
    if (noticed) {
      const notice = step.notices.join('\n\n');
      out.push(appended(noticed, notice, { ...(noticed.response_metadata || {}), [NOTICE_KEY]: notice }));
    }
    const nudge = (content) => new msgs.HumanMessage({ content, id: `terminus-${crypto.randomUUID()}`, response_metadata: { terminus: 'nudge' } });
    return [...out, ...(step.nudges || []).map(nudge)];
  };

  /** The messages from the last reply on, for the core (the results after it). */
  const tail = (messages) => messages.slice(Math.max(messages.findLastIndex(isAI), 0)).map(wire);

  return langchain.createMiddleware({
    name: options.name || 'TerminusMiddleware',
    stateSchema: zod.z.object({ [REPORT_KEY]: zod.z.any().optional(), [MACHINE_KEY]: zod.z.string().optional(), [TURN_KEY]: zod.z.any().optional() }),

    beforeAgent: (state) => {
      const turn = state[TURN_KEY];
      if (typeof state[MACHINE_KEY] === 'string' && turn && !turn.ended) return undefined; // a live run goes on
      const first = (state.messages || []).find((m) => msgs.HumanMessage.isInstance(m));
      const [session] = Session.start(thePolicy, first ? [wire(first)] : [], Date.now(), options.scale);
      return { ...update(session, []), [REPORT_KEY]: null };
    },

    beforeModel: {
      canJumpTo: ['end'],
      hook: (state) => {
        const turn = state[TURN_KEY] || {};
        if (turn.ended || !(turn.batch || (turn.awaiting || []).length)) return undefined;
        const session = restore(state);
        const messages = state.messages || [];
        const step = verified(session, session.results(tail(messages)));
        const result = update(session, step ? messagesOf(step, messages) : []);
        if (session.ended) result.jumpTo = 'end';
        return result;
      },
    },

    wrapModelCall: async (request, handler) => {
      const state = request.state || {};
      const turn = state[TURN_KEY] || {};
      let [delay, tools] = [turn.delay_ms || 0, turn.tools !== false];
      let session = null; // restored at the first provider error: the errors go to the kernel
      for (;;) {
        if (delay > 0) await sleep(delay);
        const asked = tools ? request : { ...request, tools: [], toolChoice: undefined };
        let response;
        try {
          response = await handler(asked);
        } catch (error) {
          const kind = handleModelErrors ? modelErrorKind(error) : null;
          if (kind === null) throw error;
          session = session || restore(state);
          const step = session.modelError(kind.kind, kind.retry_after_ms);
          if (session.ended) {
            // The kernel gave up (`model_error`): a stand-in reply carrying the state update,
            // which `afterModel` applies and removes (a Command returned here, with no reply,
            // would reach the graph once per middleware wrapping this one).
            const id = `terminus-stop-${crypto.randomUUID()}`;
            return new msgs.AIMessage({ content: '', id, response_metadata: { [STOP_KEY]: update(session, messagesOf(step)) } });
          }
          [delay, tools] = [step.delay_ms, step.tools];
          continue;
        }
        if (!isAI(response)) return response;
        noteOffered(asked, response);
        // Errors fed before this reply: the state gets the session past them (the reply itself
        // is added by the model node, as for any reply).
        return session === null ? response : new langgraph.Command({ update: update(session, []) });
      }
    },

    afterModel: {
      canJumpTo: ['model', 'end'],
      hook: (state) => {
        const turn = state[TURN_KEY] || {};
        const messages = state.messages || [];
        let message = messages[messages.findLastIndex(isAI)];
        if (!message || !state[MACHINE_KEY]) return undefined;
        const stop = (message.response_metadata || {})[STOP_KEY];
        if (stop && message.id === messages.at(-1).id) {
          // The kernel stopped in `wrapModelCall`: the reply is its stand-in.
          return { ...stop, messages: [new msgs.RemoveMessage({ id: message.id }), ...(stop.messages || [])], jumpTo: 'end' };
        }
        if (turn.ended || (message.id != null && message.id === turn.fed)) return undefined;
        const session = restore(state);
        const given = message.id != null ? offered.get(message.id) : undefined;
        offered.delete(message.id);
        const step = verified(session, session.reply(wire(message), given ?? null));
        if (!step) return undefined;
        const out = [];
        if (step.written && message.id != null) {
          // Tool calls the model wrote in its text, which the kernel runs: the reply becomes a
          // tool turn (same id, so it replaces the reply) for the tools node to run.
          const { id, response_metadata, usage_metadata } = message;
          const tool_calls = step.written.tool_calls.map((c) => ({ id: c.id, name: c.name, args: c.arguments, type: 'tool_call' }));
          message = new msgs.AIMessage({ content: step.written.text, id, tool_calls, response_metadata, usage_metadata });
          out.push(message);
        }
        // An empty reply is an error (retried, or the run stops), never part of the conversation.
        if (step.drop_reply && message.id != null) out.push(new msgs.RemoveMessage({ id: message.id }));
        out.push(...messagesOf(step));
        const result = update(session, out);
        // Every call answered here: back to the model with the answers.
        const jump = step.jump === 'tools' && !(message.tool_calls || []).length ? 'model' : step.jump;
        if (jump === 'model' || jump === 'end') result.jumpTo = jump;
        return result;
      },
    },

    wrapToolCall: async (request, handler) => {
      const call = request.toolCall;
      const turn = (request.state && request.state[TURN_KEY]) || {};
      if (!(turn.awaiting || []).length && !Object.keys(turn.refused || {}).length) return handler(request);
      if (typeof call.id !== 'string' || !call.id) throw new Error(`tool call: a call has no id: ${JSON.stringify(call)}`);
      const gate = Session.gate(turn, call.id, call.name, Boolean(request.tool));
      if (gate.refuse) return answer(gate.refuse);
      const result = await handler(request);
      const { warning } = gate.run;
      return warning === undefined || !msgs.ToolMessage.isInstance(result) ? result : appended(result, warning);
    },

    afterAgent: (state) => {
      const turn = state[TURN_KEY] || {};
      if (!state[MACHINE_KEY] || turn.ended) return undefined;
      const session = restore(state);
      session.finish(tail(state.messages || []));
      return update(session, []);
    },
  });
}

module.exports = { terminusMiddleware, wire, modelErrorKind, REPORT_KEY, MACHINE_KEY, TURN_KEY, ERROR_KIND, NOTICE_KEY, STOP_KEY };
