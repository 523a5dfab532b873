'use strict';
// The host suite's conversations (`spec/hosts/conversations.json`) through the AI SDK adapter
// (`terminus-kernel/ai`'s `runAgent` over `generateText`): a scripted `MockLanguageModelV3`
// answers with the scenario's model turns (tool call ids the scenario's or `call-N-i`, N counting
// model calls from 1; a finish reason the AI SDK has no name for as its raw reason), throws its
// failures as the SDK does (an `APICallError` with the status and body of
// `spec/hosts/provider-errors.json`, the delay asked for as a `retry-after-ms` header, a timeout
// as a `TimeoutError`), and scripted tools answer with the scenario's results in call order (an
// error thrown with its class in `terminus_error`), `write_todos` as the runtime's built-in. The
// report must be `runScenario`'s on the fields the LangChain JS host test compares.

const { APICallError, tool, jsonSchema } = require('ai');
const { MockLanguageModelV3 } = require('ai/test');
const { runAgent } = require('terminus-kernel/ai');
const { Cursor, resultOf, writeTodos } = require('./scenario_driver.js');
const { caseOf, throughEvery } = require('./host_suite.js');

const UNIFIED = { stop: 'stop', length: 'length', content_filter: 'content-filter', tool_calls: 'tool-calls' };

/** A provider's failure of class `kind`, as the AI SDK throws it. */
function aiError(kind, retryAfterMs) {
  if (kind === 'timeout') return Object.assign(new Error('the request timed out'), { name: 'TimeoutError' });
  const { status, text } = caseOf(kind);
  const responseHeaders = retryAfterMs == null ? {} : { 'retry-after-ms': String(retryAfterMs) };
  return new APICallError({ message: text, url: 'http://scenario', requestBodyValues: {}, statusCode: status, responseHeaders, responseBody: text });
}

/** A mock model answering with a scenario's model turns, in order. */
function scenarioModel(script) {
  const turns = new Cursor(script.turns, script.repeat || 'none', 'model');
  let n = 0;
  return new MockLanguageModelV3({
    doGenerate: async () => {
      n += 1;
      const turn = turns.next();
      if (turn.error != null) throw aiError(turn.error, turn.retry_after_ms);
      const content = [];
      if (turn.reasoning) content.push({ type: 'reasoning', text: 'thinking' });
      if (turn.text) content.push({ type: 'text', text: turn.text });
      (turn.tool_calls || []).forEach((c, i) => {
        const input = typeof c.arguments === 'string' ? c.arguments : JSON.stringify(c.arguments ?? {});
        content.push({ type: 'tool-call', toolCallId: c.id ?? `call-${n}-${i}`, toolName: c.name, input });
      });
      const finishReason = turn.finish ? { unified: UNIFIED[turn.finish] ?? 'other', raw: turn.finish } : { unified: 'other', raw: undefined };
      const { input_tokens: input, output_tokens: output } = turn.usage || {};
      const usage = { inputTokens: { total: input, noCache: input, cacheRead: undefined, cacheWrite: undefined }, outputTokens: { total: output, text: output, reasoning: undefined } };
      return { content, finishReason, usage, warnings: [] };
    },
  });
}

/** A tool answering `answer(args)`: `{ ok }` as its output, `{ error, message }` thrown. */
function scripted(name, answer) {
  return tool({
    description: `The scenario's \`${name}\`.`,
    inputSchema: jsonSchema({ type: 'object', additionalProperties: true }),
    execute: async (args) => {
      const out = answer(args);
      if (out.error !== undefined) throw Object.assign(new Error(out.message), { terminus_error: out.error });
      return typeof out.ok === 'string' ? out.ok : JSON.stringify(out.ok);
    },
  });
}

async function play(scenario) {
  const tools = {};
  for (const [name, script] of Object.entries(scenario.tools || {})) {
    const results = new Cursor(script.results, script.repeat || 'none', `tool \`${name}\``);
    tools[name] = scripted(name, () => resultOf(results.next()));
  }
  tools.write_todos = scripted('write_todos', writeTodos);
  const { report } = await runAgent({ model: scenarioModel(scenario.model), tools, prompt: scenario.task, policy: scenario.policy || {}, scale: scenario.scale });
  return report;
}

throughEvery('the AI SDK', play);
