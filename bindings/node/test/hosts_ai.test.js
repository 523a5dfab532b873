'use strict';
// The host suite's conversations (`spec/hosts/conversations.json`) through the AI SDK adapter
// (`terminus-kernel/ai`'s `runAgent` over `generateText`): a scripted `MockLanguageModelV3`
// answers with the scenario's model turns (tool call ids the scenario's or `call-N-i`, N counting
// model calls from 1; a finish reason the AI SDK has no name for as its raw reason), throws its
// failures as the SDK does (an `APICallError` with the status and body of
// `spec/hosts/provider-errors.json`, the delay asked for as a `retry-after-ms` header, a timeout
// as a `TimeoutError`), and scripted tools answer with the scenario's results in call order (an
// error thrown with its class in `terminus_error`), `write_todos` as the runtime's built-in. The
// report must be `runScenario`'s on the fields the LangChain JS host test compares, and the
// model's prompt, call by call, `terminus run`'s transcript (`spec/hosts/README.md`).

const { APICallError, tool, jsonSchema } = require('ai');
const { MockLanguageModelV3 } = require('ai/test');
const { runAgent } = require('terminus-kernel/ai');
const { Cursor, resultOf, writeTodos } = require('./scenario_driver.js');
const { caseOf, throughEvery, argumentsText } = require('./host_suite.js');

const UNIFIED = { stop: 'stop', length: 'length', content_filter: 'content-filter', tool_calls: 'tool-calls' };

/** A provider's failure of class `kind`, as the AI SDK throws it. */
function aiError(kind, retryAfterMs) {
  if (kind === 'timeout') return Object.assign(new Error('the request timed out'), { name: 'TimeoutError' });
  const { status, text } = caseOf(kind);
  const responseHeaders = retryAfterMs == null ? {} : { 'retry-after-ms': String(retryAfterMs) };
  return new APICallError({ message: text, url: 'http://scenario', requestBodyValues: {}, statusCode: status, responseHeaders, responseBody: text });
}

/** The text of a tool result's output: its text, or its JSON. */
const outputText = (output) => (typeof output.value === 'string' ? output.value : JSON.stringify(output.value));

/**
 * A message of the model's prompt (`LanguageModelV3Prompt`) in the transcript's shape
 * (`spec/hosts/README.md`): role and text (reasoning left out), the calls of an assistant
 * message, one message per tool result with its tool (a failed call's result as `terminus run`
 * writes one: its class, from the part's `providerOptions.terminus.error`, then the tool's
 * words); no ids.
 */
function said(message) {
  if (message.role === 'system') return [{ role: 'system', text: message.content }];
  if (message.role === 'tool') {
    return message.content.map((part) => {
      const kind = part.providerOptions?.terminus?.error;
      const text = outputText(part.output);
      const failed = part.output.type === 'error-text' || part.output.type === 'error-json';
      return { role: 'tool', text: failed && kind ? `error (${kind}): ${text}` : text, tool: part.toolName };
    });
  }
  const text = message.content.filter((p) => p.type === 'text').map((p) => p.text).join('');
  const out = { role: message.role, text };
  const calls = message.content.filter((p) => p.type === 'tool-call').map((p) => `${p.toolName} ${argumentsText(p.input)}`);
  if (calls.length) out.calls = calls;
  return [out];
}

/** A mock model answering with a scenario's model turns, in order, recording what it was sent in `sent`. */
function scenarioModel(script, sent) {
  const turns = new Cursor(script.turns, script.repeat || 'none', 'model');
  let n = 0;
  return new MockLanguageModelV3({
    doGenerate: async ({ prompt }) => {
      sent.push(prompt.flatMap(said));
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

/** Plays a scenario through `runAgent`: the report and what the model was sent. */
async function play(scenario) {
  const tools = {};
  for (const [name, script] of Object.entries(scenario.tools || {})) {
    const results = new Cursor(script.results, script.repeat || 'none', `tool \`${name}\``);
    tools[name] = scripted(name, () => resultOf(results.next()));
  }
  tools.write_todos = scripted('write_todos', writeTodos);
  const sent = [];
  const model = scenarioModel(scenario.model, sent);
  const { report } = await runAgent({ model, tools, system: scenario.system_prompt, prompt: scenario.task, policy: scenario.policy || {}, scale: scenario.scale });
  return { report, sent };
}

// Compared: 43 conversations, the 120 recordings and the 30 non-answers.
throughEvery('the AI SDK', play, {}, {}, {
  'only-excluded-tools':
    "the AI SDK answers a call of a tool it was not given itself (NoSuchToolError: `Model tried to call unavailable tool 'send_email'. Available tools: write_todos.`), in the step's own messages: its text is the SDK's, not the host core's",
}, 193);
