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
// for every framework adapter) and carries its step out in LangGraph's terms, with no graph node
// of its own per step but `afterModel`: `beforeAgent` starts the run, `wrapModelCall` is the kernel's
// model step (the results and the reply fed, retries, answers, nudges), `afterModel` goes back to
// the model when the step says so, `wrapToolCall` gates each call, `afterAgent` cancels a run
// something else ended. What each does, in full: README.md, "LangChain JS".

const crypto = require('node:crypto');
const { Session } = require('./index.js');
const { modelErrorKind } = require('./sdk-errors.js');
const { checkPolicy, verified, withNotices, checkpointMessage } = require('./adapter-policy.js');

function peers() {
  try {
    const [langchain, messages, langgraph, zod, schemas] = ['langchain', '@langchain/core/messages', '@langchain/langgraph', 'zod', '@langchain/core/utils/json_schema'].map(require);
    return { langchain, messages, langgraph, zod, toJsonSchema: schemas.toJsonSchema };
  } catch (e) {
    throw new Error(`terminus-kernel/langchain needs \`langchain\` (v1) and \`@langchain/core\` (npm install langchain @langchain/core): ${e.message}`);
  }
}

// The state's keys (the report; the session's snapshot; `Session.turn()`), and the keys of a
// message's `response_metadata`: a `ToolMessage`'s error class and the notices appended to it, the
// state update a stand-in `AIMessage` carries (a model step with no reply of the model's).
const [REPORT_KEY, MACHINE_KEY, TURN_KEY] = ['terminus', '_terminus_machine', '_terminus_turn'];
const [ERROR_KIND, NOTICE_KEY, STOP_KEY] = ['terminus_error', 'terminus_notice', 'terminus_stop'];
/** How many live sessions a middleware keeps (one a run in flight; the oldest go first). */
const LIVE_MAX = 256;

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
  const { langchain, messages: msgs, langgraph, zod, toJsonSchema } = peers();
  const thePolicy = { ...(policy || {}) };
  const checked = checkPolicy(thePolicy, options.scale); // a bad field or scale throws here
  const { verifier } = options;
  const handleModelErrors = options.handleModelErrors !== false;
  const isAI = (m) => msgs.AIMessage.isInstance(m);

  // The session each snapshot this middleware wrote came from, live: the next hook in this
  // process takes it instead of restoring the snapshot (about 300 us a model step). Taken once: a
  // second hook on the same snapshot (a branch, a replay from a checkpoint) restores it. The
  // oldest go past LIVE_MAX.
  const live = new Map();
  const restore = (state) => {
    const snapshot = state[MACHINE_KEY];
    if (typeof snapshot !== 'string') {
      throw new Error(`terminusMiddleware: the graph state has no machine (${MACHINE_KEY}); was the agent built with this middleware?`);
    }
    const kept = live.get(snapshot);
    if (kept === undefined) return Session.restore(snapshot);
    live.delete(snapshot);
    return kept;
  };

  // The verifier judges the claim alone (a boolean or a [boolean, string] pair).
  const ask = verifier && ((verify) => verifier(String(verify.claim ?? '')));

  /** The state update: the snapshot, the turn, the report once the run ended, messages. */
  const update = (session, messages, again = false) => {
    const snapshot = session.snapshot();
    live.set(snapshot, session); // the session is not used again by the hook that wrote it
    if (live.size > LIVE_MAX) live.delete(live.keys().next().value);
    const out = { [MACHINE_KEY]: snapshot, [TURN_KEY]: again ? { ...session.turn(), again } : session.turn() };
    if (session.ended) out[REPORT_KEY] = session.report();
    if (messages.length) out.messages = messages;
    return out;
  };

  /** `message` (the same id, so it replaces the original) with `text` appended. */
  const appended = (message, text, meta = message.response_metadata) => {
    const content = typeof message.content === 'string' ? withNotices(message.content, [text]) : [...message.content, { type: 'text', text }];
    const { id, tool_call_id, name, status, artifact } = message;
    return new msgs.ToolMessage({ id, content, tool_call_id, name, status, artifact, response_metadata: meta });
  };
  const answer = ({ content, tool_call_id, name, error }) =>
    new msgs.ToolMessage({ content, tool_call_id, name, status: 'error', response_metadata: error ? { [ERROR_KIND]: error } : {} });
  const nudge = (content) => new msgs.HumanMessage({ content, id: `terminus-${crypto.randomUUID()}`, response_metadata: { terminus: 'nudge' } });
  /** A reply's visible text (its text blocks), for a checkpoint's summary. */
  const replyText = (m) =>
    typeof m.content === 'string' ? m.content : (m.content || []).map((b) => (typeof b === 'string' ? b : b && b.type === 'text' ? b.text || '' : '')).join('');
  const isResult = (target) => (m) => msgs.ToolMessage.isInstance(m) && (m.id === target || m.tool_call_id === target);

  /** The messages from the last reply on, for the core (the results after it). */
  const tail = (messages) => messages.slice(Math.max(messages.findLastIndex(isAI), 0));
  /**
   * The tools a model call offers (a call written in the text runs only when it names one), a
   * zod schema given as JSON Schema (LangChain's own conversion) so that values a format writes
   * as text are typed by it.
   */
  const offered = (request) =>
    (request.tools || []).map((t) => {
      if (!t || typeof t !== 'object' || !t.schema || !toJsonSchema) return t;
      try {
        return { name: t.name, parameters: toJsonSchema(t.schema) };
      } catch {
        return t;
      }
    });

  /** A structured answer (`responseFormat`): the model node's `{ structuredResponse, messages }`. */
  const structuredOf = (reply) => reply && !isAI(reply) && 'structuredResponse' in reply && Array.isArray(reply.messages);
  /** `message` again, its `response_metadata` `meta` (and no id: the state gives it one). */
  const clone = (m, meta) =>
    new msgs.AIMessage({ content: m.content, name: m.name, tool_calls: m.tool_calls, invalid_tool_calls: m.invalid_tool_calls, additional_kwargs: m.additional_kwargs, usage_metadata: m.usage_metadata, response_metadata: meta });
  /**
   * A structured answer fed as the model's completion claim (its output tool's call, answered
   * within the model call, is the reply's text): accepted, the run ends with it as the result;
   * refused, it is nudged and the model called again. The model node adds the answer's messages
   * itself and takes no Command with them: the step's update rides on its last message, as a
   * stand-in's does, and `afterModel` applies it.
   */
  const structured = async (session, response, names, replaced) => {
    const message = response.messages.find(isAI);
    const answered = new Set(response.messages.filter((m) => msgs.ToolMessage.isInstance(m)).map((m) => m.tool_call_id));
    const outputs = (message.tool_calls || []).filter((c) => answered.has(c.id)).map((c) => c.name);
    const step = (await verified(session, session.reply(message, names, Date.now(), outputs), ask)) || {};
    const tail = response.messages.at(-1);
    const nudges = (step.nudges || []).map(nudge);
    const carried = update(session, [...replaced, clone(tail, tail.response_metadata), ...nudges], step.jump === 'model');
    const stand = clone(tail, { ...(tail.response_metadata || {}), [STOP_KEY]: carried });
    return { ...response, messages: [...response.messages.slice(0, -1), stand] };
  };

  return langchain.createMiddleware({
    name: options.name || 'TerminusMiddleware',
    stateSchema: zod.z.object({ [REPORT_KEY]: zod.z.any().optional(), [MACHINE_KEY]: zod.z.string().optional(), [TURN_KEY]: zod.z.any().optional() }),

    beforeAgent: (state) => {
      const turn = state[TURN_KEY];
      if (typeof state[MACHINE_KEY] === 'string' && turn && !turn.ended) return undefined; // a live run goes on
      const first = (state.messages || []).find((m) => msgs.HumanMessage.isInstance(m));
      const [session] = Session.start(checked, first ? [first] : [], Date.now());
      return { ...update(session, []), [REPORT_KEY]: null };
    },

    // The kernel's model step: the tool turn's results fed, the model called (again after an
    // empty reply or a provider's error), the reply fed, the step carried out; the messages the
    // step adds (answers, a nudge) go to the state, and the next call is the next step's.
    wrapModelCall: async (request, handler) => {
      const state = request.state || {};
      const session = restore(state);
      const history = state.messages || [];
      const sent = [...request.messages];
      const [added, replaced] = [[], []]; // the step's messages in order; state messages amended
      let last = null; // the handler's last reply, which the model node adds itself
      const checkpoints = []; // to write before the next model call
      const carry = (step) => {
        added.push(...(step.answers || []).map(answer));
        if (step.checkpoint) checkpoints.push(step.checkpoint);
        const old = step.notice_to && (step.notices || []).length && history.findLast(isResult(step.notice_to));
        if (old) {
          const notice = withNotices('', step.notices);
          const noticed = appended(old, notice, { ...(old.response_metadata || {}), [NOTICE_KEY]: notice });
          replaced.push(noticed);
          sent.splice(0, sent.length, ...sent.map((m) => (m === old || (m.id != null && m.id === old.id) ? noticed : m)));
        }
        added.push(...(step.nudges || []).map(nudge));
      };
      let again = false; // back to the model in the next step, after the messages added
      for (;;) {
        if (!added.length && !session.ended && session.batchOut) carry((await verified(session, session.results(tail(history)), ask)) || {});
        if (session.ended) break;
        for (const { prompt, note } of checkpoints.splice(0)) {
          // A checkpoint written for the agent: the model asked for a summary, no tools; the
          // reply is not fed to the kernel (nor kept: removed as the handler's last reply), its
          // text becomes the checkpoint's message.
          const asked = { ...request, messages: [...sent, ...added, new msgs.HumanMessage(prompt)], tools: [], toolChoice: undefined };
          let summary;
          try {
            const reply = await handler(asked);
            if (isAI(reply)) {
              if (reply.id == null) reply.id = `terminus-reply-${crypto.randomUUID()}`;
              last = reply;
            }
            summary = { text: isAI(reply) ? replyText(reply) : '' };
          } catch (error) {
            const kind = handleModelErrors ? modelErrorKind(error) : null;
            if (kind === null) throw error;
            summary = { error: kind.kind, message: String((error && error.message) || error) };
          }
          added.push(nudge(checkpointMessage(note, summary)));
        }
        if (added.length) {
          again = true;
          break;
        }
        const turn = session.turn();
        if (turn.delay_ms > 0) await sleep(turn.delay_ms);
        const asked = { ...request, messages: sent, ...(turn.tools === false ? { tools: [], toolChoice: undefined } : {}) };
        let reply;
        try {
          reply = await handler(asked);
        } catch (error) {
          const kind = handleModelErrors ? modelErrorKind(error) : null;
          if (kind === null) throw error;
          carry(session.modelError(kind.kind, kind.retry_after_ms));
          continue;
        }
        if (structuredOf(reply)) return structured(session, reply, offered(asked), replaced);
        if (!isAI(reply)) return reply;
        if (reply.id == null) reply.id = `terminus-reply-${crypto.randomUUID()}`;
        last = reply;
        const step = (await verified(session, session.reply(reply, offered(asked)), ask)) || { jump: 'tools' };
        let message = reply;
        if (step.written) {
          // Tool calls the model wrote in its text, which the kernel runs.
          const { id, response_metadata, usage_metadata } = reply;
          const tool_calls = step.written.tool_calls.map((c) => ({ id: c.id, name: c.name, args: c.arguments, type: 'tool_call' }));
          message = new msgs.AIMessage({ content: step.written.text, id, tool_calls, response_metadata, usage_metadata });
        }
        // An empty reply is an error (retried, or the run stops), never part of the conversation.
        if (!step.drop_reply) added.push(message);
        carry(step);
        if (step.jump !== 'model') break;
      }
      if (!last) {
        // No reply in this step (the run ended before the call or on a provider's error, or the
        // results gave messages to send first): a stand-in reply carrying the state update, which
        // `afterModel` applies and removes (a Command with no reply would reach the graph once per
        // middleware wrapping this one).
        const id = `terminus-stop-${crypto.randomUUID()}`;
        return new msgs.AIMessage({ content: '', id, response_metadata: { [STOP_KEY]: update(session, [...replaced, ...added], again) } });
      }
      // The model node adds the handler's last reply itself, first: the update's messages follow
      // it (it is removed when the kernel dropped it).
      const dropped = added[0] && added[0].id === last.id ? [] : [new msgs.RemoveMessage({ id: last.id })];
      return new langgraph.Command({ update: update(session, [...replaced, ...dropped, ...added], again) });
    },

    // A stand-in's update applied; back to the model when the step said so (a refused stop
    // nudged, every call answered), else LangGraph's routing: a stop ends the graph.
    afterModel: {
      canJumpTo: ['model'],
      hook: (state) => {
        const stand = (state.messages || []).findLast(isAI); // another afterModel may add after it
        const carried = stand && (stand.response_metadata || {})[STOP_KEY];
        const out = carried ? { ...carried, messages: [new msgs.RemoveMessage({ id: stand.id }), ...(carried.messages || [])] } : undefined;
        return ((carried || state)[TURN_KEY] || {}).again ? { ...out, jumpTo: 'model' } : out;
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

module.exports = { terminusMiddleware, modelErrorKind, REPORT_KEY, MACHINE_KEY, TURN_KEY, ERROR_KIND, NOTICE_KEY, STOP_KEY };
