'use strict';
// The seed 004 pattern with the real `ai` package (`generateText`) and its mock language model
// (`MockLanguageModelV3` of `ai/test`), run by `terminus-kernel/ai`'s `runAgent`: a Claude-style
// workflow with a read budget (warn, warn, block) and an early stop with an open todo, nudged to
// the end; a loop on one identical call ends `no_progress`; empty replies end `empty_responses`.

const test = require('node:test');
const assert = require('node:assert/strict');
const { tool } = require('ai');
const { MockLanguageModelV3 } = require('ai/test');
const { z } = require('zod');
const { runAgent } = require('terminus-kernel/ai');

const USAGE = {
  inputTokens: { total: 100, noCache: 100, cacheRead: undefined, cacheWrite: undefined },
  outputTokens: { total: 20, text: 20, reasoning: undefined },
};

/** One reply of the mock model: text and tool calls (`[name, args]` or `[name, args, id]`). */
function reply({ text, calls = [], usage = USAGE }) {
  const content = [];
  if (text) content.push({ type: 'text', text });
  calls.forEach(([name, args, id], i) => {
    content.push({ type: 'tool-call', toolCallId: id || `${name}-${i}-${Math.random().toString(36).slice(2, 8)}`, toolName: name, input: JSON.stringify(args) });
  });
  return {
    content,
    finishReason: { unified: calls.length ? 'tool-calls' : 'stop', raw: undefined },
    usage,
    warnings: [],
  };
}

/** A mock model playing `replies` in order (the last one again once they run out). */
function scripted(replies) {
  let i = 0;
  const prompts = [];
  const model = new MockLanguageModelV3({
    doGenerate: async (options) => {
      prompts.push(options.prompt);
      const next = replies[Math.min(i, replies.length - 1)];
      i += 1;
      return reply(typeof next === 'function' ? next(options) : next);
    },
  });
  return { model, prompts, calls: () => i };
}

/** What the model was shown last, as text (every message part's text or tool output). */
function shown(prompt) {
  return JSON.stringify(prompt);
}

function workflowTools(log) {
  const todoSchema = z.object({
    todos: z.array(z.object({ content: z.string(), status: z.enum(['pending', 'in_progress', 'completed', 'cancelled']) })),
  });
  return {
    write_todos: tool({
      description: 'Replace the todo list.',
      inputSchema: todoSchema,
      execute: async ({ todos }) => {
        log.push(['write_todos', todos.map((t) => t.status)]);
        const open = todos.filter((t) => t.status === 'pending' || t.status === 'in_progress').length;
        return `Todo list updated: ${open} of ${todos.length} open.`;
      },
    }),
    read_file: tool({
      description: 'Read a file.',
      inputSchema: z.object({ path: z.string() }),
      execute: async ({ path }) => {
        log.push(['read_file', path]);
        return `contents of ${path}`;
      },
    }),
    write_file: tool({
      description: 'Write a file.',
      inputSchema: z.object({ path: z.string(), content: z.string() }),
      execute: async ({ path }) => {
        log.push(['write_file', path]);
        return `wrote ${path}`;
      },
    }),
  };
}

test('seed 004: a read budget warns, warns, blocks; an early stop with an open todo is nudged to the end', async () => {
  const log = [];
  const todos = (a, b) => ({ todos: [{ content: 'read the sources', status: a }, { content: 'write REPORT.md', status: b }] });
  const { model, prompts, calls } = scripted([
    { calls: [['write_todos', todos('in_progress', 'pending')]] },
    { calls: [['read_file', { path: 'a.ts' }]] },
    { calls: [['read_file', { path: 'b.ts' }]] }, // warned
    { calls: [['read_file', { path: 'c.ts' }]] }, // warned
    { calls: [['read_file', { path: 'd.ts' }], ['write_todos', todos('completed', 'pending')]] }, // read blocked
    { text: 'I have read enough; the review is done.' }, // an early stop: a todo is open
    { calls: [['write_file', { path: 'REPORT.md', content: '# Review' }]] },
    { calls: [['write_todos', todos('completed', 'completed')]] },
    { text: 'REPORT.md is written; every todo is done.' },
  ]);
  const { text, report, messages } = await runAgent({
    model,
    tools: workflowTools(log),
    system: 'You are a careful code reviewer.',
    prompt: 'Review the sources and write REPORT.md.',
    policy: { max_steps: 30, tool_budgets: { read_file: { warn_at: 2, block_at: 4 } } },
  });
  assert.equal(report.outcome, 'complete');
  // A final text reply with nothing left open: the kernel takes it as the answer.
  assert.equal(report.reason, 'answered');
  assert.equal(report.nudges, 1, 'the early stop was refused once');
  assert.equal(text, 'REPORT.md is written; every todo is done.');
  assert.equal(calls(), 9, 'the model was called for every reply, the early stop included');
  // Three reads ran; the fourth was refused by the kernel and never executed.
  assert.deepStrictEqual(log.filter(([n]) => n === 'read_file').map(([, p]) => p), ['a.ts', 'b.ts', 'c.ts']);
  assert.ok(log.some(([n, p]) => n === 'write_file' && p === 'REPORT.md'));
  assert.equal(report.todos.length, 2);
  assert.ok(report.todos.every((t) => t.status === 'completed'), JSON.stringify(report.todos));
  // What the model saw: the warnings with the second and third reads, the refusal of the
  // fourth, and the nudge after the early stop.
  const toolOutputs = messages.filter((m) => m.role === 'tool').flatMap((m) => m.content);
  const readOutputs = toolOutputs.filter((p) => p.toolName === 'read_file');
  assert.equal(readOutputs.length, 4);
  assert.equal(readOutputs[0].output.value, 'contents of a.ts');
  assert.equal(readOutputs[1].output.value, 'contents of b.ts\n\n[budget] This was call 2 of `read_file`; from call 4 on, calls will be refused.');
  assert.equal(readOutputs[2].output.value, 'contents of c.ts\n\n[budget] This was call 3 of `read_file`, the last one allowed: further calls will be refused.');
  assert.equal(readOutputs[3].output.type, 'error-text', 'the blocked read is answered with the refusal');
  assert.match(readOutputs[3].output.value, /read_file/);
  // The model was shown the warnings and the refusal in its next requests.
  assert.ok(shown(prompts[3]).includes('This was call 2 of `read_file`'));
  assert.ok(shown(prompts[5]).includes(readOutputs[3].output.value.slice(0, 30)));
  const nudgeAt = messages.findIndex((m) => m.role === 'user' && m !== messages[0]);
  assert.ok(nudgeAt > 0, 'a nudge went into the conversation');
  assert.ok(shown(prompts[6]).includes(messages[nudgeAt].content.slice(0, 40)), 'the model saw the nudge');
  assert.equal(report.stats.nudges, 1);
});

test('seed 004: a loop on one identical call ends no_progress (the AI SDK never runs on)', async () => {
  const log = [];
  const { model, calls } = scripted([{ calls: [['read_file', { path: 'same.ts' }]] }]);
  const { report } = await runAgent({
    model,
    tools: workflowTools(log),
    prompt: 'Find the bug.',
    policy: { max_steps: 50 },
  });
  assert.equal(report.outcome, 'aborted');
  assert.equal(report.reason, 'no_progress');
  assert.ok(calls() < 50, `${calls()} model calls`);
  assert.equal(report.model_calls, calls());
  assert.ok(log.length >= 2 && log.every(([n, p]) => n === 'read_file' && p === 'same.ts'));
});

test('seed 004: empty replies end empty_responses', async () => {
  // A blank reply (the kernel's rule 6, as in spec/scenarios/empty-responses.json): no
  // content and zero usage; each is retried with backoff, never taken as an answer.
  const nothing = {
    inputTokens: { total: 0, noCache: 0, cacheRead: undefined, cacheWrite: undefined },
    outputTokens: { total: 0, text: 0, reasoning: undefined },
  };
  const { model, calls } = scripted([{ text: '', usage: nothing }]);
  const { report, text } = await runAgent({
    model,
    prompt: 'Say something.',
    policy: { max_empty_responses: 3, retry_base_ms: 1, retry_max_ms: 4 },
  });
  assert.equal(report.outcome, 'aborted');
  assert.equal(report.reason, 'empty_responses');
  assert.equal(report.rule, 'empty_limit');
  assert.equal(report.empty_responses, 3);
  assert.equal(calls(), 3);
  assert.equal(text, '');
});

test('a failed model call is the kernel\'s to retry, with its backoff', async () => {
  const { APICallError } = require('ai');
  let n = 0;
  const model = new MockLanguageModelV3({
    doGenerate: async () => {
      n += 1;
      if (n === 1) {
        throw new APICallError({ message: 'slow down', url: 'http://x', requestBodyValues: {}, statusCode: 429, responseHeaders: { 'retry-after-ms': '1' }, isRetryable: true });
      }
      return reply({ text: 'Hello.' });
    },
  });
  const { report, text } = await runAgent({ model, prompt: 'Greet.', policy: {} });
  assert.equal(report.outcome, 'complete');
  assert.equal(text, 'Hello.');
  assert.equal(n, 2);
  assert.equal(report.stats.model_calls, 2);
});

test('an error that is not a provider\'s propagates: a bug is not retried as a server error', async () => {
  let n = 0;
  const model = new MockLanguageModelV3({
    doGenerate: async () => {
      n += 1;
      throw new TypeError('a bug in the model adapter');
    },
  });
  await assert.rejects(runAgent({ model, prompt: 'Greet.', policy: {} }), /a bug in the model adapter/);
  assert.equal(n, 1);
});

test('a call whose input fails the tool schema is answered once (by the SDK) and counted as a failure', async () => {
  const log = [];
  const { model } = scripted([
    { calls: [['read_file', { path: 5 }, 'bad-1']] },
    { calls: [['read_file', { path: 'a.ts' }, 'good-1']] },
    { text: 'a.ts is fine.' },
  ]);
  const { report, messages } = await runAgent({ model, tools: workflowTools(log), prompt: 'Read a.ts.' });
  assert.equal(report.outcome, 'complete');
  assert.deepStrictEqual(log, [['read_file', 'a.ts']], 'the invalid call never ran');
  const answers = messages.filter((m) => m.role === 'tool').flatMap((m) => m.content).filter((p) => p.toolCallId === 'bad-1');
  assert.equal(answers.length, 1);
  assert.equal(answers[0].output.type, 'error-text');
  assert.equal(report.stats.tool_failures, 1, JSON.stringify(report.stats));
});

test('a tool call the model writes in its text runs, and its message becomes a tool turn', async () => {
  // Qwen2.5-Coder-1.5B's way: the call as fenced JSON in the reply's text, no tool call part.
  const log = [];
  const written = '```json\n{"name": "write_file", "arguments": {"path": "plan.md", "content": "# Plan"}}\n```';
  const { model, prompts } = scripted([{ text: written }, { text: 'plan.md is written.' }]);
  const { report, text, messages } = await runAgent({
    model,
    tools: workflowTools(log),
    prompt: 'Write the plan to plan.md.',
    policy: { completion_requires: ['write_file'] },
  });
  assert.deepEqual([report.outcome, report.reason], ['complete', 'answered']);
  assert.equal(report.stats.text_tool_calls, 1);
  assert.deepEqual(log, [['write_file', 'plan.md']]);
  assert.equal(text, 'plan.md is written.');
  // The second request shows the model its call as a call, answered by its result.
  const second = prompts[1];
  const call = second.flatMap((m) => (Array.isArray(m.content) ? m.content : [])).find((p) => p.type === 'tool-call');
  assert.ok(call && call.toolName === 'write_file', shown(second));
  assert.ok(!shown(second).includes('```json'), 'the written call is not left as text');
  assert.ok(messages.some((m) => m.role === 'tool'));
});

test('a written call of a tool that is not offered is nudged with the closest names', async () => {
  const log = [];
  const { model, prompts } = scripted([
    { text: '{"name": "read_directory", "arguments": {"path": "."}}' },
    { text: 'Nothing to read.' },
  ]);
  const { report } = await runAgent({ model, tools: workflowTools(log), prompt: 'Look around.' });
  assert.equal(report.no_ops, 1);
  assert.deepEqual(log, []);
  assert.match(shown(prompts[1]), /read_directory.*closest offered tools/);
});

test('a claim the verifier rejects is nudged with its feedback; an abort ends the run cancelled', async () => {
  const claims = [];
  const { model, prompts } = scripted([{ text: 'Done already.' }, { text: 'Done, checked twice.' }]);
  const verify = async ({ claim }) => {
    claims.push(claim);
    return claims.length === 1 ? { complete: false, feedback: 'check it twice' } : { complete: true };
  };
  const { report } = await runAgent({ model, prompt: 'Check it.', policy: { verify_completion: true }, verify });
  assert.deepEqual([report.outcome, report.reason, report.verification_failures], ['complete', 'verified', 1]);
  assert.deepEqual(claims, ['Done already.', 'Done, checked twice.']);
  assert.match(shown(prompts[1]), /check it twice/);

  const abort = new AbortController();
  const log = [];
  const tools = workflowTools(log);
  const read = tools.read_file;
  tools.read_file = { ...read, execute: async (args, ctx) => (abort.abort(), read.execute(args, ctx)) };
  const looping = scripted([{ calls: [['read_file', { path: 'a.ts' }]] }]);
  const cancelled = await runAgent({ model: looping.model, tools, prompt: 'Read.', abortSignal: abort.signal });
  assert.deepEqual([cancelled.report.outcome, cancelled.report.reason, cancelled.report.tool_calls], ['aborted', 'cancelled', 1]);
  assert.equal(looping.calls(), 1);
});

test('an answer of the verifier that is no verdict throws the host core error, naming verdict', async () => {
  const { model } = scripted([{ text: 'Done already.' }]);
  const verify = async () => ({ complete: true, score: 3 });
  await assert.rejects(runAgent({ model, prompt: 'Check it.', policy: { verify_completion: true }, verify }), /verdict\.score: unknown field, expected one of `complete`, `feedback`, `missing`/);
});

test('a reply whose only call has input that is not JSON is answered, and the run goes on', async () => {
  const log = [];
  let n = 0;
  const model = new MockLanguageModelV3({
    doGenerate: async () => {
      n += 1;
      if (n === 1) {
        const bad = reply({ calls: [['read_file', {}, 'bad-1']] });
        bad.content[0].input = '{"path": ';
        return bad;
      }
      return n === 2 ? reply({ calls: [['read_file', { path: 'a.ts' }, 'good-1']] }) : reply({ text: 'a.ts is fine.' });
    },
  });
  const { report, messages } = await runAgent({ model, tools: workflowTools(log), prompt: 'Read a.ts.' });
  assert.equal(report.outcome, 'complete', JSON.stringify(report));
  assert.deepStrictEqual(log, [['read_file', 'a.ts']], 'the call with broken input never ran');
  const answers = messages.filter((m) => m.role === 'tool').flatMap((m) => m.content).filter((p) => p.toolCallId === 'bad-1');
  assert.equal(answers.length, 1, 'answered once');
  assert.equal(report.stats.tool_failures, 1, JSON.stringify(report.stats));
  assert.equal(n, 3);
});

test('a checkpoint written for the agent: the model asked without tools; a failed call says why and the run goes on', async () => {
  // policy.auto_checkpoints: after the second turn the read budget refused, the model is asked
  // for a summary (the kernel's prompt last, no tools) before the next call.
  const { APICallError } = require('ai');
  const reads = ['a.md', 'b.md', 'b.md', 'b.md'];
  for (const fails of [false, true]) {
    const asked = []; // per call: [the last message's text, the tools offered]
    let n = 0;
    const model = new MockLanguageModelV3({
      doGenerate: async ({ prompt, tools }) => {
        const last = prompt.at(-1);
        const text = last.role === 'user' ? last.content.map((p) => p.text || '').join('') : '';
        asked.push([text, (tools || []).length]);
        if (text.startsWith('Write a checkpoint')) {
          if (fails) throw new APICallError({ message: 'slow down', url: 'http://x', requestBodyValues: {}, statusCode: 429 });
          return reply({ text: 'Read a.md so far.' });
        }
        n += 1;
        return n <= reads.length ? reply({ calls: [['read_file', { path: reads[n - 1] }]] }) : reply({ text: 'a.md holds the cache, b.md the tests.' });
      },
    });
    const read_file = tool({ description: 'Reads a file.', inputSchema: z.object({ path: z.string() }), execute: async ({ path }) => `contents of ${path}` });
    const policy = { auto_checkpoints: 1, tool_budgets: { read_file: { block_at: 2, reset_on: ['post_checkpoint'] } } };
    const { report, messages } = await runAgent({ model, prompt: 'Read a.md and b.md.', tools: { read_file }, policy });
    assert.deepEqual([report.outcome, report.stats.auto_checkpoints, report.stats.refused_calls, report.tool_calls], ['complete', 1, 2, 2]);
    const checkpoints = asked.filter(([text]) => text.startsWith('Write a checkpoint'));
    assert.deepEqual(checkpoints.map(([, tools]) => tools), [0], 'asked once, with no tools');
    const summary = fails ? '(No summary: the model call failed: rate_limited: slow down.)' : 'Read a.md so far.';
    const written = messages.filter((m) => m.role === 'user' && typeof m.content === 'string' && m.content.endsWith(`\n\n${summary}`));
    assert.equal(written.length, 1, JSON.stringify(messages));
    assert.ok(!messages.some((m) => m.role === 'assistant' && JSON.stringify(m.content).includes('Read a.md so far.')), 'the summary reply is not kept');
  }
});
