'use strict';
// The host suite in Node. Its provider errors (`spec/hosts/provider-errors.json`): every
// JavaScript host classes each case as the command line's HTTP client does, through the table
// they share, with the error in the shapes the SDKs throw it (LangChain's and OpenAI's `status`,
// the AI SDK's `APICallError` with `statusCode` and `responseBody`). Its conversations
// (`spec/hosts/conversations.json`): each through LangChain JS's `createAgent` and the
// middleware gives `terminus run`'s report (below).

const test = require('node:test');
const assert = require('node:assert/strict');
const { providerErrorKind, retryAfterMs } = require('terminus-kernel');
const { modelErrorKind } = require('terminus-kernel/langchain');
const { suite, providerError, throughEvery, argumentsText } = require('./host_suite.js');

test('every provider-error case of the host suite gets its class in every JavaScript host', () => {
  // One reading of the SDKs' errors for every adapter.
  assert.equal(require('terminus-kernel/ai').modelErrorKind, modelErrorKind);
  assert.equal(require('terminus-kernel/openai-agents').modelErrorKind, modelErrorKind);
  assert.ok(suite.cases.length >= 15, 'the suite lost its cases');
  for (const { status, text, kind } of suite.cases) {
    const where = `${status} ${JSON.stringify(text)}`;
    assert.equal(providerErrorKind(status, text), kind, `core: ${where}`);
    const thrown = Object.assign(new Error(text), { status });
    assert.equal(modelErrorKind(thrown)?.kind, kind, `a status: ${where}`);
    const wrapped = Object.assign(new Error('the call failed'), { cause: thrown });
    assert.equal(modelErrorKind(wrapped)?.kind, kind, `wrapped: ${where}`);
    // The AI SDK's `APICallError`, alone and as a `RetryError`'s last error.
    const apiCallError = Object.assign(new Error('Bad request'), { name: 'AI_APICallError', statusCode: status, responseBody: text });
    assert.equal(modelErrorKind(apiCallError)?.kind, kind, `ai: ${where}`);
    const retryError = Object.assign(new Error('Failed after 3 attempts'), { name: 'AI_RetryError', lastError: apiCallError });
    assert.equal(modelErrorKind(retryError)?.kind, kind, `ai, retried: ${where}`);
    // The `openai` SDK's `APIError`: the body parsed, under `error`.
    let body;
    try {
      body = JSON.parse(text);
    } catch {
      body = text;
    }
    const apiError = Object.assign(new Error(`${status} status code`), { status, error: body, headers: {} });
    assert.equal(modelErrorKind(apiError)?.kind, kind, `openai: ${where}`);
  }
  // Not a provider's error: it propagates, in every adapter (a bug is not retried).
  assert.equal(modelErrorKind(new TypeError('a bug')), null);
  assert.equal(modelErrorKind(Object.assign(new Error('x'), { name: 'AI_APICallError' })), null);
  const refused = Object.assign(new Error('fetch failed'), { cause: Object.assign(new Error('connect'), { code: 'ECONNREFUSED' }) });
  assert.deepEqual(modelErrorKind(Object.assign(new Error('x'), { name: 'AI_APICallError', cause: refused })), { kind: 'server' });
  assert.deepEqual(modelErrorKind(Object.assign(new Error('aborted'), { name: 'AbortError' })), { kind: 'timeout' });
  const limited = Object.assign(new Error('slow'), { statusCode: 429, responseHeaders: { 'retry-after-ms': '250' } });
  assert.deepEqual(modelErrorKind(limited), { kind: 'rate_limited', retry_after_ms: 250 });
});

test('retry-after is read by the parser every host shares', () => {
  // Milliseconds rounded up, seconds, an HTTP date, the 60 s cap: as the command line reads them.
  assert.equal(retryAfterMs('250.2', '9'), 251);
  assert.equal(retryAfterMs(null, '0.5'), 500);
  assert.equal(retryAfterMs(undefined, 3600), 60000);
  assert.equal(retryAfterMs(null, 'soon'), undefined);
  assert.equal(retryAfterMs(), undefined);
  const in30s = new Date(Date.now() + 30000).toUTCString();
  const delay = retryAfterMs(null, in30s);
  assert.ok(delay >= 28000 && delay <= 30000, String(delay));
  // Through an SDK's error: the date form was dropped before.
  const limited = Object.assign(new Error('slow'), { statusCode: 429, responseHeaders: { 'retry-after': in30s } });
  const read = modelErrorKind(limited);
  assert.equal(read.kind, 'rate_limited');
  assert.ok(read.retry_after_ms >= 28000 && read.retry_after_ms <= 30000, JSON.stringify(read));
});

test('a status that is not one is refused, naming it', () => {
  assert.throws(() => providerErrorKind(42, 'x'), /status: 42 is not an HTTP status/);
  assert.throws(() => providerErrorKind(1e12, 'x'), /is not an HTTP status/);
  assert.throws(() => providerErrorKind('429', 'x'), /is not an HTTP status/);
});

// ----- the conversations (`spec/hosts/conversations.json`) through LangChain JS -----
//
// Each conversation runs through a real `createAgent` with `terminusMiddleware`: a scripted chat
// model answers with the scenario's model turns (ids `reply-N`, N counting model calls from 1,
// failed ones included; tool call ids the scenario's or `call-N-i`), throws its failures as the
// provider SDKs throw them (an HTTP status and body from `provider-errors.json`, the delay asked
// for as a `retry-after-ms` header, a timeout as a `TimeoutError`), and scripted tools answer
// with the scenario's results in call order (an error as a `ToolMessage` with status `error` and
// its class under `response_metadata.terminus_error`), `write_todos` as the runtime's built-in.
// The report must be `runScenario`'s (`terminus run --json`) for every field a run decides.

const { createAgent } = require('langchain');
const { BaseChatModel } = require('@langchain/core/language_models/chat_models');
const { AIMessage, ToolMessage } = require('@langchain/core/messages');
const { tool } = require('@langchain/core/tools');
const { z } = require('zod');
const { terminusMiddleware, REPORT_KEY } = require('terminus-kernel/langchain');
const { Cursor, resultOf, writeTodos } = require('./scenario_driver.js');

/**
 * A LangChain message in the transcript's shape (`spec/hosts/README.md`): role and text, the
 * calls of an assistant message, the tool of a tool message (a failed call's result as `terminus
 * run` writes one: its class, then the tool's words); no ids.
 */
function said(message) {
  const role = { system: 'system', human: 'user', ai: 'assistant', tool: 'tool' }[message._getType()];
  const text = typeof message.content === 'string' ? message.content : message.text;
  const out = { role, text };
  if (role === 'assistant') {
    const calls = [...(message.tool_calls || []), ...(message.invalid_tool_calls || [])].map((c) => `${c.name} ${argumentsText(c.args)}`);
    if (calls.length) out.calls = calls;
  }
  if (role === 'tool') {
    if (message.name) out.tool = message.name;
    const kind = message.response_metadata?.terminus_error;
    if (message.status === 'error' && kind) out.text = `error (${kind}): ${text}`;
  }
  return out;
}

/** A chat model answering with a scenario's model turns, in order. */
class ScenarioModel extends BaseChatModel {
  constructor(script) {
    super({});
    this.turns = new Cursor(script.turns, script.repeat || 'none', 'model');
    this.calls = 0;
    /** What each call was sent, in the transcript's shape. */
    this.sent = [];
  }

  _llmType() {
    return 'scenario';
  }

  bindTools() {
    return this;
  }

  async _generate(messages) {
    this.sent.push(messages.map(said));
    const n = ++this.calls;
    const turn = this.turns.next();
    if (turn.error != null) throw providerError(turn.error, turn.retry_after_ms);
    const calls = (turn.tool_calls || []).map((c, i) => ({ id: c.id ?? `call-${n}-${i}`, name: c.name, args: c.arguments ?? {} }));
    const text = turn.text ?? '';
    const fields = {
      id: `reply-${n}`,
      content: text,
      tool_calls: calls.filter((c) => typeof c.args !== 'string').map((c) => ({ ...c, type: 'tool_call' })),
      invalid_tool_calls: calls.filter((c) => typeof c.args === 'string').map((c) => ({ ...c, error: null, type: 'invalid_tool_call' })),
      response_metadata: turn.finish ? { finish_reason: turn.finish } : {},
      additional_kwargs: turn.reasoning ? { reasoning_content: 'thinking' } : {},
    };
    if (turn.usage) fields.usage_metadata = { ...turn.usage, total_tokens: turn.usage.input_tokens + turn.usage.output_tokens };
    return { generations: [{ text, message: new AIMessage(fields) }] };
  }
}

/** A tool answering `answer(args)`: `{ ok }` as its text, `{ error, message }` as an error message. */
function scripted(name, answer) {
  const run = async (args, config) => {
    const out = answer(args);
    if (out.error === undefined) return typeof out.ok === 'string' ? out.ok : JSON.stringify(out.ok);
    const meta = { terminus_error: out.error };
    return new ToolMessage({ content: out.message, tool_call_id: config.toolCall.id, name, status: 'error', response_metadata: meta });
  };
  return tool(run, { name, description: `The scenario's \`${name}\`.`, schema: z.object({}).passthrough() });
}

/** Plays a scenario through `createAgent` with the middleware: the final state's report. */
async function play(scenario) {
  const tools = Object.entries(scenario.tools || {}).map(([name, script]) => {
    const results = new Cursor(script.results, script.repeat || 'none', `tool \`${name}\``);
    return scripted(name, () => resultOf(results.next()));
  });
  tools.push(scripted('write_todos', writeTodos));
  const middleware = [terminusMiddleware(scenario.policy || {}, { scale: scenario.scale })];
  const model = new ScenarioModel(scenario.model);
  const agent = createAgent({ model, tools, middleware, systemPrompt: scenario.system_prompt });
  const state = await agent.invoke({ messages: [{ role: 'user', content: scenario.task }] }, { recursionLimit: 10_000 });
  return { report: state[REPORT_KEY], sent: model.sent };
}

// Compared: 43 conversations, the 120 recordings and the 30 non-answers.
throughEvery('LangChain JS', play, {}, {}, {
  'only-excluded-tools': 'LangChain answers a call of a tool it does not have itself (`Tool "send_email" not found`), before any middleware sees a result',
}, 193);
