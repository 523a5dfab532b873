'use strict';
// `terminus-kernel/langchain` under LangChain JS `createAgent` (the real `langchain` package,
// pinned) with a scripted chat model: no network. The seed 000 architect (explores, writes a
// todo in progress, stops early without `write_file`): without the middleware it ends with no
// plan; with it the stop is nudged once and the plan written. A loop on one identical call ends
// `no_progress`, empty replies end `empty_responses`, and a long honest chain ends `max_steps`
// with no exception (LangGraph's recursion error without the middleware).

const test = require('node:test');
const assert = require('node:assert/strict');
const { createAgent, humanInTheLoopMiddleware, todoListMiddleware, toolStrategy } = require('langchain');
const { BaseChatModel } = require('@langchain/core/language_models/chat_models');
const { AIMessage, HumanMessage, ToolMessage } = require('@langchain/core/messages');
const { tool } = require('@langchain/core/tools');
const { Command, GraphRecursionError, MemorySaver } = require('@langchain/langgraph');
const { z } = require('zod');
const { runScenario } = require('terminus-kernel');
const { terminusMiddleware, REPORT_KEY, NOTICE_KEY } = require('terminus-kernel/langchain');

const TASK = 'Write an implementation plan for this repository to /plan.md.';
const PLAN_PATH = '/plan.md';
const PLAN_TEXT = '# Plan\n\n1. Split the parser out of lib.rs.\n2. Add tests for each rule.\n';
const CHAIN_PARTS = 40;

const toolsTurn = (...calls) => ({ text: '', calls, usage: [120, 20] });
const textTurn = (text) => ({ text, calls: [], usage: [150, 12] });
const EMPTY_TURN = { text: '', calls: [], usage: [0, 0] };

const ARCHITECT = [
  toolsTurn(['ls', { path: '/' }]),
  toolsTurn(['read_file', { file_path: '/src/lib.rs' }]),
  toolsTurn(['write_todos', { todos: [{ content: 'write plan', status: 'in_progress' }] }]),
  // The premature stop: a todo is open and no plan was written.
  textTurn('I have explored the repository. I will now write the plan.'),
  toolsTurn(['write_file', { file_path: PLAN_PATH, content: PLAN_TEXT }]),
  toolsTurn(['write_todos', { todos: [{ content: 'write plan', status: 'completed' }] }]),
  textTurn('Plan written to /plan.md.'),
];
const ARCHITECT_POLICY = { completion_requires: ['write_file'] };
const honestChain = (n) => Array.from({ length: n }, (_, i) => toolsTurn(['read_file', { file_path: `/src/part${i}.rs` }]));
const looping = () => [toolsTurn(['ls', { path: '/src' }])];

/**
 * A chat model replying from a script: the reply to a conversation is `script[n]`, `n` the number
 * of assistant messages already in it (past the end, the last entry again when `repeatLast`), or
 * with `byCalls` the number of calls made before.
 */
class ScriptedChatModel extends BaseChatModel {
  constructor(script, { repeatLast = false, failures = [], byCalls = false } = {}) {
    super({});
    this.script = script;
    this.repeatLast = repeatLast;
    this.failures = [...failures]; // errors thrown by the first calls, in order
    this.byCalls = byCalls;
    this.calls = 0;
  }

  _llmType() {
    return 'scripted';
  }

  bindTools() {
    return this; // the script decides which tools are called
  }

  async _generate(messages) {
    const index = this.byCalls ? this.calls : messages.filter((m) => AIMessage.isInstance(m)).length;
    this.calls += 1;
    if (this.failures.length) throw this.failures.shift();
    if (index >= this.script.length && !this.repeatLast) {
      throw new Error(`scripted model: turn ${index} asked of a script of ${this.script.length} turns`);
    }
    const turn = this.script[Math.min(index, this.script.length - 1)];
    const toolCalls = turn.calls.map(([name, args], j) => ({ id: `call_${index}_${j}`, name, args, type: 'tool_call' }));
    const [input, output] = turn.usage;
    // Calls whose input did not parse, as a chat model gives them (`turn.invalid`: [name, raw]).
    const invalid = (turn.invalid || []).map(([name, args], j) => ({ id: `bad_${index}_${j}`, name, args, error: 'not JSON', type: 'invalid_tool_call' }));
    const message = new AIMessage({
      content: turn.text,
      tool_calls: toolCalls,
      invalid_tool_calls: invalid,
      usage_metadata: { input_tokens: input, output_tokens: output, total_tokens: input + output },
      response_metadata: { finish_reason: toolCalls.length ? 'tool_calls' : 'stop' },
    });
    return { generations: [{ text: turn.text, message }] };
  }
}

/** The repository the architect explores (and writes its plan into). */
function repository() {
  const files = { '/src/lib.rs': 'fn main() {}\n', '/README.md': '# demo\n' };
  const reads = [];
  for (let i = 0; i < CHAIN_PARTS; i++) files[`/src/part${i}.rs`] = `// part ${i}\n`;
  const ls = tool(async ({ path }) => Object.keys(files).filter((f) => f.startsWith(path)).sort().join('\n'), {
    name: 'ls',
    description: 'List files under a path.',
    schema: z.object({ path: z.string() }),
  });
  const readFile = tool(
    async ({ file_path }) => {
      reads.push(file_path);
      if (!(file_path in files)) throw new Error(`no such file: ${file_path}`);
      return files[file_path];
    },
    { name: 'read_file', description: 'Read a file.', schema: z.object({ file_path: z.string() }) },
  );
  const writeFile = tool(
    async ({ file_path, content }) => {
      files[file_path] = content;
      return `Wrote ${file_path}.`;
    },
    { name: 'write_file', description: 'Write a file.', schema: z.object({ file_path: z.string(), content: z.string() }) },
  );
  return { files, reads, tools: [ls, readFile, writeFile] };
}

/**
 * The architect: `createAgent` with the scripted model, a todo list and `middleware` after it.
 * LangGraph's `recursionLimit` counts graph steps (four a tool turn here: the model, two
 * after-model hooks, the tools), so its default 25 ends a run of six turns: the runs under the
 * kernel raise it, and the kernel's `max_steps` ends them first.
 */
async function run(script, policy, { repeatLast = false, config = { recursionLimit: 250 }, options, failures } = {}) {
  const model = new ScriptedChatModel(script, { repeatLast, failures });
  const repo = repository();
  const middleware = [todoListMiddleware()];
  if (policy !== null) middleware.push(terminusMiddleware(policy, options));
  const agent = createAgent({ model, tools: repo.tools, systemPrompt: 'You are a careful software architect.', middleware });
  const state = await agent.invoke({ messages: [{ role: 'user', content: TASK }] }, config);
  return { state, files: repo.files, reads: repo.reads, model };
}

const nudges = (state) =>
  state.messages.filter((m) => HumanMessage.isInstance(m) && m.response_metadata && m.response_metadata.terminus === 'nudge');

/** Every tool call of every assistant message has exactly one answer. */
function assertHistoryValid(state) {
  const answers = new Map();
  for (const m of state.messages) if (ToolMessage.isInstance(m)) answers.set(m.tool_call_id, (answers.get(m.tool_call_id) || 0) + 1);
  for (const m of state.messages) {
    if (!AIMessage.isInstance(m)) continue;
    for (const call of m.tool_calls || []) assert.equal(answers.get(call.id), 1, `call ${call.id} has ${answers.get(call.id)} answers`);
  }
}

/** The same run as a scenario for `runScenario` (`terminus run`): each tool answers `ok`. */
function asScenario(script, policy, { repeatLast = false } = {}) {
  const turns = script.map((turn) => {
    const entry = { usage: { input_tokens: turn.usage[0], output_tokens: turn.usage[1] } };
    if (turn.text || !turn.calls.length) entry.text = turn.text;
    if (turn.calls.length) entry.tool_calls = turn.calls.map(([name, args]) => ({ name, arguments: args }));
    return entry;
  });
  const names = [...new Set(script.flatMap((t) => t.calls.map(([n]) => n)).filter((n) => n !== 'write_todos'))].sort();
  return {
    name: 'seed-000-architect',
    task: TASK,
    policy,
    model: { turns, repeat: repeatLast ? 'last' : 'none' },
    tools: Object.fromEntries(names.map((n) => [n, { results: [{ ok: `${n} output` }], repeat: 'last' }])),
  };
}

const COMPARED = ['outcome', 'reason', 'steps', 'model_calls', 'tool_calls', 'nudges', 'result'];
const pick = (report) => Object.fromEntries(COMPARED.map((k) => [k, report[k]]));

test('without the middleware the architect stops with no plan', async () => {
  const { state, files } = await run(ARCHITECT, null);
  assert.ok(!(PLAN_PATH in files));
  assert.deepEqual(state.todos, [{ content: 'write plan', status: 'in_progress' }]);
  const last = state.messages.at(-1);
  assert.ok(AIMessage.isInstance(last) && !(last.tool_calls || []).length);
  assert.equal(last.content, ARCHITECT[3].text);
  assert.equal(state[REPORT_KEY], undefined);
});

test('with the middleware the premature stop is nudged once and the plan written', async () => {
  const { state, files, model } = await run(ARCHITECT, ARCHITECT_POLICY);
  const report = state[REPORT_KEY];
  assert.equal(report.outcome, 'complete');
  assert.equal(report.reason, 'answered');
  assert.equal(report.nudges, 1);
  assert.equal(report.model_calls, ARCHITECT.length);
  assert.equal(model.calls, ARCHITECT.length);
  assert.equal(report.tool_calls, 5);
  assert.equal(report.result, 'Plan written to /plan.md.');
  assert.equal(files[PLAN_PATH], PLAN_TEXT);
  assert.deepEqual(state.todos, [{ content: 'write plan', status: 'completed' }]);
  const given = nudges(state);
  assert.equal(given.length, 1);
  assert.match(given[0].content, /write_file/);
  // The nudge follows the refused stop, and the model's next turn follows the nudge.
  const index = state.messages.indexOf(given[0]);
  assert.equal(state.messages[index - 1].content, ARCHITECT[3].text);
  assert.ok(AIMessage.isInstance(state.messages[index + 1]));
  assertHistoryValid(state);
  assert.deepEqual(pick(report), pick(runScenario(asScenario(ARCHITECT, ARCHITECT_POLICY))));
});

test('a reply with a valid call and one whose input is not JSON runs the valid one (no other middleware)', async () => {
  // Without another middleware's afterModel hook LangChain JS routes on the last message: the
  // kernel's answer to the bad call must not end the graph before the valid call runs.
  const script = [{ ...toolsTurn(['ls', { path: '/src' }]), invalid: [['ls', '{"path": ']] }, textTurn('Listed.')];
  const model = new ScriptedChatModel(script);
  const repo = repository();
  const agent = createAgent({ model, tools: repo.tools, middleware: [terminusMiddleware({})] });
  const state = await agent.invoke({ messages: [{ role: 'user', content: TASK }] }, { recursionLimit: 50 });
  const report = state[REPORT_KEY];
  assert.deepEqual([report.outcome, report.reason, report.tool_calls, model.calls], ['complete', 'answered', 2, 2]);
  const results = state.messages.filter((m) => ToolMessage.isInstance(m)).map((m) => [m.tool_call_id, m.status]);
  assert.deepEqual(results, [['bad_0_0', 'error'], ['call_0_0', 'success']]);
  assertHistoryValid(state);
});

test('every reply streamed keeps its id in the state, a nudged stop included', async () => {
  const repo = repository();
  const agent = createAgent({ model: new ScriptedChatModel(ARCHITECT), tools: repo.tools, middleware: [todoListMiddleware(), terminusMiddleware(ARCHITECT_POLICY)] });
  const streamed = new Set();
  let final;
  const input = { messages: [{ role: 'user', content: TASK }] };
  for await (const [mode, chunk] of await agent.stream(input, { streamMode: ['messages', 'values'], recursionLimit: 250 })) {
    if (mode === 'values') final = chunk;
    else if (AIMessage.isInstance(chunk[0]) || chunk[0]._getType() === 'ai') streamed.add(chunk[0].id);
  }
  assert.equal(final[REPORT_KEY].nudges, 1);
  const kept = final.messages.filter((m) => AIMessage.isInstance(m)).map((m) => m.id);
  assert.equal(kept.length, ARCHITECT.length);
  // Each reply streamed under one id, the one the state keeps (a client keys its messages by it).
  assert.deepEqual([...streamed].sort(), [...kept].sort());
});

test('a loop on one identical call ends no_progress, the model not called again', async () => {
  const { state, model } = await run(looping(), {}, { repeatLast: true });
  const report = state[REPORT_KEY];
  assert.equal(report.outcome, 'aborted');
  assert.equal(report.reason, 'no_progress');
  assert.equal(report.model_calls, 3); // max_repeats 3: the third identical turn stops the run
  assert.equal(model.calls, 3); // decided on the third turn's results, before a fourth call
  assert.ok(ToolMessage.isInstance(state.messages.at(-1)));
  const told = state.messages.filter((m) => ToolMessage.isInstance(m) && m.response_metadata && m.response_metadata[NOTICE_KEY]);
  assert.ok(told.length >= 1, 'the kernel\'s notice is appended to a tool result');
  assert.match(told[0].content, /same calls with the same results/);
  assertHistoryValid(state);
  assert.deepEqual(pick(report), pick(runScenario(asScenario(looping(), {}, { repeatLast: true }))));
});

test('empty replies end empty_responses, none kept in the conversation', async () => {
  const policy = { retry_base_ms: 1, retry_max_ms: 2 };
  const { state, model } = await run([EMPTY_TURN], policy, { repeatLast: true });
  const report = state[REPORT_KEY];
  assert.equal(report.outcome, 'aborted');
  assert.equal(report.reason, 'empty_responses');
  assert.equal(report.empty_responses, 3);
  assert.equal(report.model_calls, 3);
  assert.equal(model.calls, 3);
  assert.equal(state.messages.filter((m) => AIMessage.isInstance(m)).length, 0);
});

test('a long honest chain ends max_steps with no exception', async () => {
  const chain = honestChain(CHAIN_PARTS);
  const { state } = await run(chain, { max_steps: 21 });
  const report = state[REPORT_KEY];
  assert.equal(report.outcome, 'aborted');
  assert.equal(report.reason, 'max_steps');
  assert.equal(report.steps, 21);
  assertHistoryValid(state); // the last turn's calls were answered "not run"
  assert.match(state.messages.at(-1).content, /Not run: the run stopped \(max_steps\)/);
  assert.deepEqual(pick(report), pick(runScenario(asScenario(chain, { max_steps: 21 }))));
});

test('without the middleware the same chain hits LangGraph\'s recursion limit', async () => {
  await assert.rejects(run(honestChain(CHAIN_PARTS), null, { config: { recursionLimit: 25 } }), (e) => e instanceof GraphRecursionError || e.name === 'GraphRecursionError');
});

test('the kernel stops before LangGraph\'s recursion limit', async () => {
  const { state } = await run(honestChain(CHAIN_PARTS), { max_steps: 8 }, { config: { recursionLimit: 60 } });
  assert.equal(state[REPORT_KEY].reason, 'max_steps');
});

test('a read budget warns, then the kernel refuses the call: the tool does not run', async () => {
  const script = [
    ...honestChain(3), // reads part0 .. part2
    // The fourth read, alone in its turn, is refused with the budget's text; the run goes on.
    toolsTurn(['read_file', { file_path: '/src/part3.rs' }]),
    toolsTurn(['write_file', { file_path: PLAN_PATH, content: PLAN_TEXT }]),
    textTurn('Plan written.'),
  ];
  const policy = { ...ARCHITECT_POLICY, tool_budgets: { read_file: { warn_at: 2, block_at: 4 } } };
  const { state, reads, files } = await run(script, policy);
  assert.deepEqual(reads, ['/src/part0.rs', '/src/part1.rs', '/src/part2.rs']); // the fourth is refused, not run
  const results = state.messages.filter((m) => ToolMessage.isInstance(m) && m.name === 'read_file');
  assert.equal(results.length, 4);
  assert.match(results[1].content, /^\/\/ part 1\n\n\n\[budget\] This was call 2 of `read_file`/);
  assert.match(results[2].content, /the last one allowed/);
  assert.equal(results[3].status, 'error');
  assert.ok(!results[3].content.includes('// part 3'));
  assert.equal(
    results[3].content,
    'Not run: the budget of `read_file` is spent: 3 calls since its last reset, and calls from the 4th on are refused (`tool_budgets.read_file.block_at`). Nothing in this run lifts it: go on without `read_file`.',
  );
  const report = state[REPORT_KEY];
  assert.equal(report.outcome, 'complete');
  assert.equal(report.stats.refused_calls, 1);
  assert.equal(files[PLAN_PATH], PLAN_TEXT);
  assertHistoryValid(state);
});

test('a claim the verifier rejects is answered with its feedback and the loop goes on', async () => {
  const claims = [];
  const verifier = (claim) => {
    claims.push(claim);
    return claims.length > 1 ? true : [false, 'the risks section'];
  };
  const script = [textTurn('Done.'), textTurn('Done, with the risks section.')];
  const { state } = await run(script, { verify_completion: true }, { options: { verifier } });
  assert.deepEqual(claims, ['Done.', 'Done, with the risks section.']);
  const report = state[REPORT_KEY];
  assert.equal(report.outcome, 'complete');
  assert.equal(report.reason, 'verified');
  assert.equal(report.verification_failures, 1);
  const asks = state.messages.filter((m) => HumanMessage.isInstance(m) && /the risks section/.test(m.content));
  assert.equal(asks.length, 1);
});

test('an answer of the verifier that is no verdict throws the host core error, naming verdict', async () => {
  const script = [textTurn('Done.')];
  await assert.rejects(
    run(script, { verify_completion: true }, { options: { verifier: () => 'yes' } }),
    /^Error: verdict: expected a boolean, a \[boolean, string\] pair or a verdict object, got "yes"/,
  );
});

test('a new input on a thread whose run ended starts a new run (a checkpointer)', async () => {
  const script = [...ARCHITECT, textTurn('You are welcome.')];
  const repo = repository();
  const agent = createAgent({
    model: new ScriptedChatModel(script),
    tools: repo.tools,
    middleware: [todoListMiddleware(), terminusMiddleware({})],
    checkpointer: new MemorySaver(),
  });
  const config = { configurable: { thread_id: 't' }, recursionLimit: 250 };
  const first = (await agent.invoke({ messages: [{ role: 'user', content: TASK }] }, config))[REPORT_KEY];
  assert.deepEqual([first.outcome, first.model_calls, first.nudges], ['complete', 7, 1]);
  const report = (await agent.invoke({ messages: [{ role: 'user', content: 'Thanks.' }] }, config))[REPORT_KEY];
  // A new run with its own counters (the first one's todos were all closed).
  assert.deepEqual([report.outcome, report.reason, report.model_calls, report.steps, report.nudges], ['complete', 'answered', 1, 1, 0]);
  assert.equal(report.result, 'You are welcome.');
});

test('a run interrupted for approval resumes with its counters from the checkpoint', async () => {
  const saver = new MemorySaver();
  const repo = repository();
  // A new agent and middleware each time: the resumed run's machine comes from the state.
  const architect = () =>
    createAgent({
      model: new ScriptedChatModel(ARCHITECT),
      tools: repo.tools,
      middleware: [todoListMiddleware(), terminusMiddleware(ARCHITECT_POLICY), humanInTheLoopMiddleware({ interruptOn: { write_file: true } })],
      checkpointer: saver,
    });
  const config = { configurable: { thread_id: 'approval' }, recursionLimit: 250 };
  const paused = await architect().invoke({ messages: [{ role: 'user', content: TASK }] }, config);
  assert.ok(paused.__interrupt__ && paused.__interrupt__.length, 'the write_file call waits for approval');
  assert.ok(!(PLAN_PATH in repo.files));
  assert.equal(paused[REPORT_KEY], null);
  const state = await architect().invoke(new Command({ resume: { decisions: [{ type: 'approve' }] } }), config);
  const expected = (await run(ARCHITECT, ARCHITECT_POLICY)).state[REPORT_KEY];
  assert.deepEqual(pick(state[REPORT_KEY]), pick(expected));
  assert.equal(repo.files[PLAN_PATH], PLAN_TEXT);
});

/** A provider's HTTP error, as the provider SDKs throw it (`status`, `headers`). */
function httpError(status, headers = {}) {
  return Object.assign(new Error(`HTTP ${status}`), { status, headers });
}

test('a rate limit is retried by the kernel after its backoff; the run goes on', async () => {
  const failures = [httpError(429, { 'retry-after-ms': '5' }), httpError(503)];
  const { state, model, files } = await run(ARCHITECT, { ...ARCHITECT_POLICY, retry_base_ms: 1, retry_max_ms: 5 }, { failures });
  const report = state[REPORT_KEY];
  assert.equal(report.outcome, 'complete');
  assert.equal(report.stats.model_errors, 2);
  assert.equal(model.calls, ARCHITECT.length + 2);
  assert.equal(report.nudges, 1);
  assert.equal(files[PLAN_PATH], PLAN_TEXT);
});

test('an auth error ends the run model_error, without an exception', async () => {
  const { state, model } = await run(ARCHITECT, ARCHITECT_POLICY, { failures: [httpError(401)] });
  const report = state[REPORT_KEY];
  assert.equal(report.outcome, 'aborted');
  assert.equal(report.reason, 'model_error');
  assert.equal(model.calls, 1);
  assert.equal(state.messages.filter((m) => AIMessage.isInstance(m)).length, 0); // no stand-in left
});

test('an error that is not a provider\'s propagates', async () => {
  await assert.rejects(run(ARCHITECT, ARCHITECT_POLICY, { failures: [new TypeError('a bug')] }), /a bug/);
});

test('a bad policy field throws at construction', () => {
  assert.throws(() => terminusMiddleware({ max_stpes: 3 }), /max_stpes/);
});

// ----- tool calls the model writes in its text (as Qwen2.5-Coder-1.5B does) -----

const written = (name, args) => textTurn('```json\n' + JSON.stringify({ name, arguments: args }, null, 2) + '\n```');
const ARCHITECT_AS_TEXT = [
  written('ls', { path: '/' }),
  written('read_file', { file_path: '/src/lib.rs' }),
  written('write_file', { file_path: PLAN_PATH, content: PLAN_TEXT }),
  textTurn('Plan written to /plan.md.'),
];

test('without the middleware a call written as text is taken for the answer', async () => {
  const { state, files } = await run(ARCHITECT_AS_TEXT, null);
  assert.equal(files[PLAN_PATH], undefined);
  const last = state.messages[state.messages.length - 1];
  assert.ok(AIMessage.isInstance(last) && !(last.tool_calls || []).length);
  assert.ok(String(last.content).startsWith('```json'));
});

test('with the middleware every call written as text runs and the plan is written', async () => {
  const { state, files } = await run(ARCHITECT_AS_TEXT, ARCHITECT_POLICY);
  const report = state[REPORT_KEY];
  assert.deepEqual([report.outcome, report.reason], ['complete', 'answered']);
  assert.equal(report.tool_calls, 3);
  assert.equal(report.stats.text_tool_calls, 3);
  assert.equal(files[PLAN_PATH], PLAN_TEXT);
  const replies = state.messages.filter((m) => AIMessage.isInstance(m) && (m.tool_calls || []).length);
  assert.deepEqual(replies.map((r) => r.tool_calls[0].name), ['ls', 'read_file', 'write_file']);
  assert.ok(replies.every((r) => r.content === ''));
  assertHistoryValid(state);
  const scenario = asScenario(ARCHITECT_AS_TEXT, ARCHITECT_POLICY);
  for (const name of ['ls', 'read_file', 'write_file']) scenario.tools[name] = { results: [{ ok: 'x' }], repeat: 'last' };
  const expected = runScenario(scenario);
  assert.deepEqual(pick(report), pick(expected));
});

test('a call written as text of a tool not offered is nudged with the closest names', async () => {
  const { state, files } = await run([written('read_directory', { path: '/' }), ...ARCHITECT_AS_TEXT], ARCHITECT_POLICY);
  const report = state[REPORT_KEY];
  assert.equal(report.reason, 'answered');
  assert.equal(report.no_ops, 1);
  const given = nudges(state);
  assert.equal(given.length, 1);
  assert.match(String(given[0].content), /`read_directory`.*closest offered tools: `read_file`/s);
  assert.equal(files[PLAN_PATH], PLAN_TEXT);
});

/**
 * `createAgent` with a structured answer (`toolStrategy`) under the middleware; `script(name)`
 * the model's turns, `name` the output tool's (`toolStrategy` numbers them: `extract-1`, ...).
 */
async function structuredRun(script, policy) {
  const repo = repository();
  const strategy = toolStrategy(z.object({ title: z.string() }).describe('Plan'));
  const model = new ScriptedChatModel(script(strategy[0].name), { byCalls: true });
  const agent = createAgent({ model, tools: repo.tools, responseFormat: strategy, middleware: [terminusMiddleware(policy)] });
  return agent.invoke({ messages: [{ role: 'user', content: TASK }] }, { recursionLimit: 50 });
}

test('a structured answer is the claim the kernel judges: accepted, the run is complete with it', async () => {
  const state = await structuredRun((plan) => [toolsTurn(['ls', { path: '/' }]), toolsTurn([plan, { title: 'x' }])], {});
  assert.deepEqual(state.structuredResponse, { title: 'x' });
  const report = state[REPORT_KEY];
  assert.deepEqual([report.outcome, report.reason, report.tool_calls, report.result], ['complete', 'answered', 1, '{"title":"x"}']);
  const kinds = state.messages.map((m) => [m.type, (m.tool_calls || []).length]);
  assert.deepEqual(kinds.slice(0, 5), [['human', 0], ['ai', 1], ['tool', 0], ['ai', 1], ['tool', 0]]);
  assert.ok(!state.messages.some((m) => m.response_metadata && m.response_metadata.terminus_stop), 'the carried update is applied and gone');
  assertHistoryValid(state);
});

test('a structured answer before a required tool is nudged and the model asked again', async () => {
  const write = toolsTurn(['write_file', { file_path: PLAN_PATH, content: PLAN_TEXT }]);
  const script = (plan) => [toolsTurn([plan, { title: 'early' }]), write, toolsTurn([plan, { title: 'done' }])];
  const state = await structuredRun(script, { completion_requires: ['write_file'] });
  const report = state[REPORT_KEY];
  assert.deepEqual([report.outcome, report.nudges, report.model_calls, report.result], ['complete', 1, 3, '{"title":"done"}']);
  assert.deepEqual(state.structuredResponse, { title: 'done' });
  assert.equal(nudges(state).length, 1);
  assertHistoryValid(state);
});

test('values a format writes as text are typed by the tool schema: an XML call gives a number its number', async () => {
  const got = [];
  const count = tool(async ({ n, label }) => {
    got.push([n, label]);
    return `counted ${n}`;
  }, { name: 'count', description: 'Count.', schema: z.object({ n: z.number(), label: z.string() }) });
  const xml = '<tool_call>\n<function=count>\n<parameter=n>\n3\n</parameter>\n<parameter=label>\n7\n</parameter>\n</function>\n</tool_call>';
  const model = new ScriptedChatModel([textTurn(xml), textTurn('Counted to 3.')]);
  const agent = createAgent({ model, tools: [count], middleware: [terminusMiddleware({})] });
  const state = await agent.invoke({ messages: [{ role: 'user', content: 'Count to 3.' }] }, { recursionLimit: 50 });
  assert.deepEqual([state[REPORT_KEY].outcome, state[REPORT_KEY].stats.text_tool_calls], ['complete', 1]);
  const call = state.messages.find((m) => AIMessage.isInstance(m) && (m.tool_calls || []).length).tool_calls[0];
  // As a correct engine gives them: the number a number, the string a string though it reads as one.
  assert.deepEqual(call.args, { n: 3, label: '7' });
  assert.deepEqual(got, [[3, '7']]);
  assertHistoryValid(state);
});

test('a token warning with no tool result to ride on reaches the model as a message of its own', async () => {
  // An empty reply whose 850 tokens pass 80 % of the budget: the kernel calls the model again,
  // telling it so; no tool result came to append the warning to (it was dropped before).
  class Recording extends ScriptedChatModel {
    constructor(script) {
      super(script, { byCalls: true });
      this.sent = [];
    }
    async _generate(messages) {
      this.sent.push([...messages]);
      return super._generate(messages);
    }
  }
  const model = new Recording([{ text: '', calls: [], usage: [850, 0] }, { text: 'Done.', calls: [], usage: [10, 2] }]);
  const agent = createAgent({ model, tools: [], middleware: [terminusMiddleware({ token_budget: 1000 })] });
  const state = await agent.invoke({ messages: [{ role: 'user', content: TASK }] }, { recursionLimit: 50 });
  assert.equal(state[REPORT_KEY].outcome, 'complete', JSON.stringify(state[REPORT_KEY].reason));
  assert.equal(model.sent.length, 2);
  const told = model.sent[1].filter((m) => HumanMessage.isInstance(m)).map((m) => String(m.content));
  assert.ok(
    told.some((t) => t.startsWith("You have used 80 % of this run's token budget (850 of 1000 tokens)")),
    JSON.stringify(told),
  );
});

test('a checkpoint written for the agent: the model asked without tools; a failed call says why and the run goes on', async () => {
  // policy.auto_checkpoints: once the read budget refused a call, the agent's model is asked for
  // a summary (the kernel's prompt last, no tools); the summary, or why there is none (a
  // provider's error), is a user message before the next call, and the run goes on.
  const reads = ['/src/part0.rs', '/src/part1.rs', '/src/part1.rs', '/src/part1.rs'];
  const script = [...reads.map((p) => toolsTurn(['read_file', { file_path: p }])), textTurn('part 0 and part 1 read.')];
  for (const fails of [false, true]) {
    const summaries = []; // the tools each summary call offered
    class Summarizing extends ScriptedChatModel {
      constructor() {
        super(script);
        this.offered = [];
      }
      bindTools(tools) {
        const bound = Object.create(this);
        bound.offered = tools;
        return bound;
      }
      async _generate(messages) {
        const last = messages.at(-1);
        if (HumanMessage.isInstance(last) && String(last.content).startsWith('Write a checkpoint')) {
          summaries.push(this.offered.length);
          if (fails) throw httpError(429);
          const message = new AIMessage({ content: 'Read part 0 so far.', usage_metadata: { input_tokens: 90, output_tokens: 6, total_tokens: 96 } });
          return { generations: [{ text: message.content, message }] };
        }
        return super._generate(messages);
      }
    }
    const model = new Summarizing();
    const repo = repository();
    const policy = { auto_checkpoints: 1, tool_budgets: { read_file: { block_at: 2, reset_on: ['post_checkpoint'] } } };
    const agent = createAgent({ model, tools: repo.tools, middleware: [terminusMiddleware(policy)] });
    const state = await agent.invoke({ messages: [{ role: 'user', content: TASK }] }, { recursionLimit: 100 });
    const report = state[REPORT_KEY];
    assert.deepEqual([report.outcome, report.stats.auto_checkpoints, report.stats.refused_calls, report.tool_calls], ['complete', 1, 2, 2], JSON.stringify(report));
    assert.deepEqual(repo.reads, ['/src/part0.rs', '/src/part1.rs']);
    assert.deepEqual(summaries, [0], 'asked once, with no tools');
    const summary = fails ? '(No summary: the model call failed: rate_limited: HTTP 429.)' : 'Read part 0 so far.';
    const written = state.messages.filter((m) => HumanMessage.isInstance(m) && String(m.content).endsWith(`\n\n${summary}`));
    assert.equal(written.length, 1, JSON.stringify(state.messages.map((m) => m.content)));
    assert.ok(!state.messages.some((m) => AIMessage.isInstance(m) && String(m.content).includes('Read part 0 so far.')), 'the summary reply is not kept');
    assertHistoryValid(state);
  }
});
