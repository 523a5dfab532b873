'use strict';
// The host suite's conversations (`spec/hosts/conversations.json`) through the OpenAI Agents JS
// adapter (`terminus-kernel/openai-agents`'s `run` over `@openai/agents`' `Runner`): a scripted
// `Model` answers with the scenario's model turns as Responses items (tool call ids the
// scenario's or `call-N-i`, N counting model calls from 1; reasoning as a `reasoning` item, a
// finish reason in the raw response, `providerData`, as the Chat Completions model keeps it),
// throws its failures as the `openai` SDK does (an HTTP status and body from
// `spec/hosts/provider-errors.json`, the delay asked for as a `retry-after-ms` header, a timeout
// as a `TimeoutError`), and scripted function tools (no `errorFunction`, named as the scenario
// names them) answer with the scenario's results in call order (an error thrown with its class
// in `terminus_error`),
// `write_todos` as the runtime's built-in. The report must be `runScenario`'s on the fields the
// LangChain JS host test compares, and the model's requests, call by call, `terminus run`'s
// transcript (`spec/hosts/README.md`).

const { Agent, Usage, tool } = require('@openai/agents');
const { run } = require('terminus-kernel/openai-agents');
const { Cursor, resultOf, writeTodos } = require('./scenario_driver.js');
const { providerError, throughEvery, argumentsText } = require('./host_suite.js');

/** The text of an item's content: a string, or its text parts (`input_text`, `output_text`). */
const textOf = (content) => (typeof content === 'string' ? content : content.filter((p) => p.type === 'input_text' || p.type === 'output_text').map((p) => p.text).join(''));

/**
 * A model request (`ModelRequest`) in the transcript's shape (`spec/hosts/README.md`): the
 * system instructions (the OpenAI models send none when empty), then the input items: a message
 * as its role and text, an assistant message with the function calls after it as one assistant
 * message with calls (as the Chat Completions model sends them), a function call's result as a
 * tool message with its tool; reasoning items left out; no ids.
 */
function said(request) {
  const out = request.systemInstructions ? [{ role: 'system', text: request.systemInstructions }] : [];
  let turn = null; // the assistant message the next function calls belong to
  for (const item of typeof request.input === 'string' ? [{ role: 'user', content: request.input }] : request.input) {
    if (item.type === 'reasoning') continue;
    if (item.type === 'function_call') {
      if (!turn) out.push((turn = { role: 'assistant', text: '' }));
      (turn.calls ||= []).push(`${item.name} ${argumentsText(item.arguments)}`);
      continue;
    }
    if (item.type === 'function_call_result') {
      out.push({ role: 'tool', text: typeof item.output === 'string' ? item.output : item.output.text, tool: item.name });
    } else {
      out.push({ role: item.role, text: textOf(item.content) });
    }
    turn = item.role === 'assistant' ? out.at(-1) : null;
  }
  return out;
}

/** A `Model` answering with a scenario's model turns, in order, recording what it was sent in `sent`. */
class ScenarioModel {
  constructor(script) {
    this.turns = new Cursor(script.turns, script.repeat || 'none', 'model');
    this.calls = 0;
    /** What each call was sent, in the transcript's shape. */
    this.sent = [];
  }

  async getResponse(request) {
    this.sent.push(said(request));
    const n = ++this.calls;
    const turn = this.turns.next();
    if (turn.error != null) throw providerError(turn.error, turn.retry_after_ms);
    const output = [];
    if (turn.reasoning) output.push({ type: 'reasoning', id: `rs-${n}`, content: [{ type: 'input_text', text: 'thinking' }] });
    if (turn.text) output.push({ type: 'message', role: 'assistant', status: 'completed', content: [{ type: 'output_text', text: turn.text }] });
    (turn.tool_calls || []).forEach((c, i) => {
      const args = typeof c.arguments === 'string' ? c.arguments : JSON.stringify(c.arguments ?? {});
      output.push({ type: 'function_call', callId: c.id ?? `call-${n}-${i}`, name: c.name, arguments: args, status: 'completed' });
    });
    const { input_tokens: inputTokens = 0, output_tokens: outputTokens = 0 } = turn.usage || {};
    const usage = turn.usage ? new Usage({ requests: 1, inputTokens, outputTokens, totalTokens: inputTokens + outputTokens }) : new Usage();
    // A finish reason as the Chat Completions model keeps it: in the raw response.
    return { output, usage, providerData: turn.finish ? { choices: [{ finish_reason: turn.finish }] } : undefined };
  }

  // eslint-disable-next-line require-yield
  async *getStreamedResponse() {
    throw new Error('scenario model: no streaming');
  }
}

/**
 * A function tool named `name` answering `answer(args)`: `{ ok }` as its output, `{ error,
 * message }` thrown.
 */
function scripted(name, answer) {
  const made = tool({
    name,
    description: `The scenario's \`${name}\`.`,
    parameters: { type: 'object', properties: {}, required: [], additionalProperties: true },
    strict: false,
    errorFunction: null,
    execute: async (args) => {
      const out = answer(args);
      if (out.error !== undefined) throw Object.assign(new Error(out.message), { terminus_error: out.error });
      return typeof out.ok === 'string' ? out.ok : JSON.stringify(out.ok);
    },
  });
  // `tool()` makes every character of the name but [A-Za-z0-9] a `_` (`get-sum`: `get_sum`);
  // the tool keeps the scenario's name, as an MCP server's tool does in the SDK (the recorded
  // runs' `get-sum`, which the model calls by that name, in its text too).
  return { ...made, name };
}

/** Plays a scenario through the adapter's `run`: the report and what the model was sent. */
async function play(scenario) {
  const tools = Object.entries(scenario.tools || {}).map(([name, script]) => {
    const results = new Cursor(script.results, script.repeat || 'none', `tool \`${name}\``);
    return scripted(name, () => resultOf(results.next()));
  });
  tools.push(scripted('write_todos', writeTodos));
  const model = new ScenarioModel(scenario.model);
  const agent = new Agent({ name: 'scenario', instructions: scenario.system_prompt, model, tools });
  const result = await run(agent, scenario.task, { policy: scenario.policy || {}, scale: scenario.scale });
  return { report: result.terminus, sent: model.sent };
}

// Compared: 43 conversations, the 120 recordings and the 30 non-answers.
throughEvery('OpenAI Agents JS', play, {
  'only-excluded-tools':
    'the Agents SDK throws ModelBehaviorError on a call of a tool the agent does not have: there is no result to give the model',
}, {}, {}, 193);
