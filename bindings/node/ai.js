'use strict';
// terminus-kernel/ai: an agent of the Vercel AI SDK (`ai`'s `generateText`) run under the
// Terminus kernel.
//
// `runAgent({ model, tools, system, prompt, policy })` is a host loop with the AI SDK as its
// model client, every decision the host core's (the package's `Session`, the same for every
// framework adapter): each model call is one `generateText` step (`stopWhen: stepCountIs(1)`,
// `maxRetries: 0`: retries and backoff are the kernel's), and the tools are given to the model
// without their `execute`, so the SDK returns the calls and runs none of them. The reply goes to
// the session as the SDK's step content; its step says which calls run (a refused one, a tool
// excluded or a budget's block, gets the kernel's text instead; a budget's warning goes with a
// result), what the model is told (a refused stop, an open todo of `write_todos`,
// `completion_requires` unmet, an empty or no-op reply, is nudged as a user message and the
// loop goes back to the model) and when the run ends (`no_progress`, `empty_responses`, a
// budget): the loop returns the report. Resolves to `{ text, report, messages, session }`.

const { Session } = require('./index.js');
const { modelErrorKind } = require('./sdk-errors.js');
const { checkPolicy, verified, withNotices, checkpointMessage } = require('./adapter-policy.js');

function sdk() {
  try {
    return require('ai');
  } catch (e) {
    throw new Error(`terminus-kernel/ai needs the \`ai\` package (npm install ai): ${e.message}`);
  }
}

/** A value as JSON (what the transcript keeps of a tool's output). */
function asJson(value) {
  if (value === undefined) return null;
  try {
    const text = JSON.stringify(value);
    return text === undefined ? null : JSON.parse(text);
  } catch {
    return String(value);
  }
}

/** A tool's input schema as JSON Schema (the SDK's own conversion of a zod or Standard Schema), or the schema as given when the SDK cannot convert it. */
function inputSchemaOf(ai, tool) {
  try {
    return ai.asSchema(tool.inputSchema).jsonSchema;
  } catch {
    return tool.inputSchema;
  }
}

const sleep = (ms, signal) =>
  new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    if (signal) signal.addEventListener('abort', () => { clearTimeout(timer); resolve(); }, { once: true });
  });

/**
 * The reply of one `generateText` step as the host core reads it: the step's text, reasoning
 * and tool calls (an input that did not parse kept as its text: an invalid call), its finish
 * reason and usage, under a fresh `id`.
 */
function replyOf(result, id) {
  const content = [];
  for (const part of result.content || []) {
    if (part.type === 'text' || part.type === 'reasoning') content.push({ type: part.type, text: String(part.text ?? '') });
    else if (part.type === 'tool-call' && !part.providerExecuted) {
      const input = typeof part.input === 'string' ? part.input : asJson(part.input);
      content.push({ type: 'tool-call', toolCallId: part.toolCallId, toolName: part.toolName, input });
    }
  }
  const message = { role: 'assistant', id, content };
  // The provider's own reason when the SDK's unified one is `other` (a `repetition`).
  const reason = result.finishReason === 'other' && typeof result.rawFinishReason === 'string' ? result.rawFinishReason : result.finishReason;
  if (typeof reason === 'string') message.finishReason = reason;
  const usage = result.usage || {};
  if (Number.isInteger(usage.inputTokens) && Number.isInteger(usage.outputTokens)) {
    message.usage = { inputTokens: usage.inputTokens, outputTokens: usage.outputTokens };
  }
  return message;
}

/**
 * A tool-result part with the kernel's class of its failure, `kind` (none: the part as it is),
 * where the model's prompt keeps it: `providerOptions.terminus.error` (a provider reads only its
 * own key), as LangChain keeps it in a tool message's `response_metadata`.
 */
function classed(part, kind) {
  if (!kind) return part;
  const options = part.providerOptions || {};
  return { ...part, providerOptions: { ...options, terminus: { ...options.terminus, error: kind } } };
}

/** The kernel's class a tool-result part carries (`classed`), if any. */
const classOf = (part) => (part && part.type === 'tool-result' ? part.providerOptions?.terminus?.error : undefined);

/** A tool result's output: its text with `notice` appended. */
function withNotice(output, notice) {
  const shown = typeof output.value === 'string' ? output.value : JSON.stringify(output.value);
  return { type: output.type === 'error-text' || output.type === 'error-json' ? 'error-text' : 'text', value: withNotices(shown, [notice]) };
}

/**
 * Runs an agent of the AI SDK under the kernel.
 *
 * @param {object} options
 * @param {import('ai').LanguageModel} options.model the AI SDK model.
 * @param {Record<string, import('ai').Tool>} [options.tools] tools with `execute` (run when the
 *   kernel says so; a throw is a `failed` tool result, or of the kernel's class in the error's
 *   `terminus_error`).
 * @param {string} [options.system] the system prompt.
 * @param {string} [options.prompt] the task (the first user message).
 * @param {Array} [options.messages] the conversation to start from, instead of `prompt`.
 * @param {object} [options.policy] the kernel's policy (the scenario `policy` fields).
 * @param {number} [options.scale] the units the task counts, for a policy's scaled budgets.
 * @param {(request: {claim: string, todos: object[], missing: string[]}) => Promise<{complete: boolean, feedback?: string, missing?: string[]}>} [options.verify]
 *   the verifier, when the policy asks for one (default: the kernel's rules, `missing` empty).
 * @param {AbortSignal} [options.abortSignal] cancels the run (reason `cancelled`).
 * @param {object} [options.generateTextOptions] more options for every `generateText` call.
 * @returns {Promise<{ text: string, report: object, messages: Array, session: Session }>}
 */
async function runAgent(options) {
  const { model, tools = {}, system, prompt, messages: start, policy, scale, verify, abortSignal, generateTextOptions = {} } = options || {};
  if (!model) throw new Error('runAgent: `model` is required');
  const checked = checkPolicy(policy, scale);
  const ai = sdk();
  const messages = start ? [...start] : [{ role: 'user', content: String(prompt ?? '') }];
  let [session, step] = Session.start(checked, messages.filter((m) => m && m.role === 'user').slice(0, 1), Date.now());
  // The model sees every tool, none with `execute`: the SDK hands the calls back unrun.
  const declared = {};
  for (const [name, t] of Object.entries(tools)) {
    const { execute: _execute, ...rest } = t;
    declared[name] = rest;
  }
  // A failure's class rides on its result part (`classed`), for the core as `terminus_error`.
  const wire = (m) =>
    m.role !== 'tool' || !Array.isArray(m.content)
      ? m
      : { ...m, content: m.content.map((p) => (classOf(p) ? { ...p, terminus_error: classOf(p) } : p)) };
  let replyAt = -1; // where the last reply is in `messages` (-1: none kept)
  const tail = () => messages.slice(Math.max(replyAt, 0)).map(wire);
  const answerPart = ({ tool_call_id, name, content, error }) =>
    classed({ type: 'tool-result', toolCallId: tool_call_id, toolName: name, output: { type: 'error-text', value: content } }, error);
  // The verifier is asked the claim, the todos and what the rules find missing.
  const ask = verify && (({ claim, todos, missing }) => verify({ claim, todos, missing }));
  const checkpoints = []; // to write before the next model call
  /** Carries out a step's messages: the answers, the notices on `notice_to`, the nudges. */
  const say = (s, answeredBySdk = new Set()) => {
    const answers = (s.answers || []).filter((a) => !answeredBySdk.has(a.tool_call_id)).map(answerPart);
    if (answers.length) messages.push({ role: 'tool', content: answers });
    const notices = s.notices || [];
    if (notices.length) {
      const notice = withNotices('', notices);
      const target = s.notice_to && messages.slice(Math.max(replyAt, 0)).flatMap((m) => (m.role === 'tool' ? m.content : [])).findLast((p) => p.toolCallId === s.notice_to);
      if (target) target.output = withNotice(target.output, notice);
      else messages.push({ role: 'user', content: notice });
    }
    for (const nudge of s.nudges || []) messages.push({ role: 'user', content: nudge });
    if (s.checkpoint) checkpoints.push(s.checkpoint);
  };
  /**
   * A checkpoint written for the agent: the model asked for a summary, no tools; the reply is
   * not fed to the kernel, its text becomes the checkpoint's message.
   */
  const writeCheckpoint = async ({ prompt, note }) => {
    let summary;
    try {
      const result = await ai.generateText({
        ...generateTextOptions,
        model,
        system,
        messages: [...messages, { role: 'user', content: prompt }],
        tools: undefined, // none, whatever generateTextOptions gives
        toolChoice: undefined,
        stopWhen: ai.stepCountIs(1),
        maxRetries: 0,
        abortSignal,
      });
      summary = { text: result.text || '' };
    } catch (error) {
      if (abortSignal && abortSignal.aborted) return;
      const classed = modelErrorKind(error);
      if (classed === null) throw error;
      summary = { error: classed.kind, message: String((error && error.message) || error) };
    }
    messages.push({ role: 'user', content: checkpointMessage(note, summary) });
  };
  let text = '';
  let calls = []; // the tool calls of the last reply: { id, name, input }
  let answeredBySdk = new Set();
  let n = 0;
  for (;;) {
    if (abortSignal && abortSignal.aborted && !session.ended) step = (await verified(session, session.finish(tail(), Date.now()), ask)) || step;
    if (session.ended || step.jump === 'end') {
      const report = step.report || session.report();
      return { text: typeof report.result === 'string' ? report.result : text, report, messages, session };
    }
    if (step.jump === 'model' && session.batchOut) {
      // Calls answered here (every call of the reply invalid): their results go first.
      step = await verified(session, session.results(tail(), Date.now()), ask);
      say(step);
      continue;
    }
    if (step.jump === 'model') {
      for (const checkpoint of checkpoints.splice(0)) await writeCheckpoint(checkpoint);
      if (abortSignal && abortSignal.aborted) continue;
      if (step.delay_ms > 0) await sleep(step.delay_ms, abortSignal);
      if (abortSignal && abortSignal.aborted) continue;
      let result;
      try {
        result = await ai.generateText({
          ...generateTextOptions,
          model,
          system,
          messages,
          tools: declared,
          toolChoice: step.tools ? 'auto' : 'none',
          stopWhen: ai.stepCountIs(1),
          maxRetries: 0,
          abortSignal,
        });
      } catch (error) {
        if (abortSignal && abortSignal.aborted) continue;
        const classed = modelErrorKind(error);
        if (classed === null) throw error; // not a provider's error: a bug is not retried
        const { kind, retry_after_ms: retry } = classed;
        step = await verified(session, session.modelError(kind, retry ?? null, Date.now()), ask);
        say(step);
        continue;
      }
      const offered = step.tools ? Object.entries(tools).map(([name, t]) => ({ name, inputSchema: inputSchemaOf(ai, t) })) : [];
      const replied = replyOf(result, `terminus-reply-${++n}`);
      // The calls the SDK answered itself (an unknown tool, input that fails the tool's schema):
      // its answer stands, of the kernel's class.
      answeredBySdk = new Set();
      const invalid = new Map();
      for (const part of result.content || []) {
        if (part.type === 'tool-error' && !part.providerExecuted) answeredBySdk.add(part.toolCallId);
        if (part.type === 'tool-call' && part.invalid) invalid.set(part.toolCallId, ai.NoSuchToolError.isInstance(part.error) ? 'not_found' : 'invalid_arguments');
      }
      const kept = result.response.messages.map((m) =>
        m.role === 'tool' && Array.isArray(m.content) ? { ...m, content: m.content.map((p) => (p.type === 'tool-result' ? classed(p, invalid.get(p.toolCallId)) : p)) } : m,
      );
      replyAt = kept.length && kept[0].role === 'assistant' ? messages.length : -1;
      messages.push(...kept);
      if (result.text) text = result.text;
      step = await verified(session, session.reply(replied, offered, Date.now()), ask);
      if (step.written) {
        // The model wrote these calls in its text and the kernel runs them: its message becomes
        // a tool turn, so the results that follow answer calls it made.
        const content = step.written.text ? [{ type: 'text', text: step.written.text }] : [];
        for (const c of step.written.tool_calls) content.push({ type: 'tool-call', toolCallId: c.id, toolName: c.name, input: c.arguments });
        if (replyAt >= 0) messages[replyAt] = { ...messages[replyAt], content };
        else {
          replyAt = messages.length;
          messages.push({ role: 'assistant', content });
        }
        if (!step.written.text) text = '';
        calls = step.written.tool_calls.map((c) => ({ id: c.id, name: c.name, input: c.arguments }));
      } else {
        calls = replied.content.filter((p) => p.type === 'tool-call').map((p) => ({ id: p.toolCallId, name: p.toolName, input: p.input }));
      }
      if (step.drop_reply && replyAt >= 0) {
        messages.splice(replyAt, 1);
        replyAt = -1;
      }
      say(step, answeredBySdk);
      continue;
    }
    if (step.jump === 'tools') {
      const turn = session.turn();
      const answered = new Set([...answeredBySdk, ...(step.answers || []).map((a) => a.tool_call_id)]);
      const parts = [];
      for (const call of calls) {
        if (answered.has(call.id)) continue;
        const tool = Object.hasOwn(tools, call.name) ? tools[call.name] : undefined;
        const gate = Session.gate(turn, call.id, call.name, tool !== undefined);
        if (gate.refuse) {
          parts.push(answerPart(gate.refuse));
          continue;
        }
        let output;
        let error; // the kernel's class of a failure
        if (!tool || typeof tool.execute !== 'function') {
          // A call the kernel does not await (its gate lets the framework answer): no such tool.
          error = tool ? 'failed' : 'not_found';
          output = { type: 'error-text', value: tool ? `tool \`${call.name}\` has no execute` : `there is no tool named \`${call.name}\`` };
        } else {
          try {
            const value = asJson(await tool.execute(call.input, { toolCallId: call.id, messages, abortSignal }));
            output = typeof value === 'string' ? { type: 'text', value } : { type: 'json', value };
          } catch (e) {
            error = e && typeof e.terminus_error === 'string' ? e.terminus_error : 'failed';
            output = { type: 'error-text', value: String((e && e.message) || e) };
          }
        }
        if (gate.run.warning) output = withNotice(output, gate.run.warning);
        parts.push(classed({ type: 'tool-result', toolCallId: call.id, toolName: call.name, output }, error));
      }
      if (parts.length) messages.push({ role: 'tool', content: parts });
      if (abortSignal && abortSignal.aborted) continue;
      step = await verified(session, session.results(tail(), Date.now()), ask);
      if (!step) throw new Error('terminus-kernel/ai: the session awaited no tool results');
      say(step);
      continue;
    }
    throw new Error(`terminus-kernel/ai: the session gave no way on: ${JSON.stringify(step)}`);
  }
}

module.exports = { runAgent, modelErrorKind };
