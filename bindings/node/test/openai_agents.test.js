'use strict';
// `terminus-kernel/openai-agents` under the OpenAI Agents SDK (`@openai/agents`, pinned) with a
// scripted `Model`: no network, tracing disabled. The seed 000 architect (explores, writes a todo
// in progress, stops early without `write_file`): without the kernel it ends with no plan; with it
// the stop is nudged once and the plan written. A loop on one identical call ends `no_progress`
// (the SDK alone: `MaxTurnsExceededError`), a chain longer than the SDK's default `maxTurns` (10)
// completes, a longer one ends `max_steps`, and empty replies end `empty_responses`: each report
// equals `terminus run`'s for the same script.

const test = require('node:test');
const assert = require('node:assert/strict');
const { Agent, MaxTurnsExceededError, Runner, Usage, tool } = require('@openai/agents');
const { z } = require('zod');
const { runScenario } = require('terminus-kernel');
const { run, modelErrorKind } = require('terminus-kernel/openai-agents');

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
 * A model replying `script[n]` to its `n`-th call (past the end, the last entry again when
 * `repeatLast`, else an error naming the script); `errors` are thrown by the first calls. Every
 * call's input is kept in `inputs`.
 */
class ScriptedModel {
  constructor(script, { repeatLast = false, errors = [] } = {}) {
    this.script = script;
    this.repeatLast = repeatLast;
    this.errors = [...errors];
    this.inputs = [];
    this.replied = 0;
  }

  async getResponse(request) {
    this.inputs.push(typeof request.input === 'string' ? [{ role: 'user', content: request.input }] : [...request.input]);
    if (this.errors.length) throw this.errors.shift();
    const index = this.replied++;
    if (index >= this.script.length && !this.repeatLast) {
      throw new Error(`scripted model: turn ${index} asked of a script of ${this.script.length} turns`);
    }
    const turn = this.script[Math.min(index, this.script.length - 1)];
    const output = [];
    if (turn.text) output.push({ type: 'message', role: 'assistant', status: 'completed', content: [{ type: 'output_text', text: turn.text }] });
    turn.calls.forEach(([name, args], j) => {
      output.push({ type: 'function_call', callId: `call_${index}_${j}`, name, arguments: JSON.stringify(args), status: 'completed' });
    });
    const [inputTokens, outputTokens] = turn.usage;
    return { output, usage: new Usage({ requests: 1, inputTokens, outputTokens, totalTokens: inputTokens + outputTokens }) };
  }

  // eslint-disable-next-line require-yield
  async *getStreamedResponse() {
    throw new Error('scripted model: no streaming');
  }
}

/** The repository the architect explores, its todo list, and the tools over them. */
function repository() {
  const files = { '/src/lib.rs': 'fn main() {}\n', '/README.md': '# demo\n' };
  for (let i = 0; i < CHAIN_PARTS; i++) files[`/src/part${i}.rs`] = `// part ${i}\n`;
  const state = { files, todos: [], runs: {} };
  const ran = (name) => {
    state.runs[name] = (state.runs[name] || 0) + 1;
  };
  state.tools = [
    tool({
      name: 'ls',
      description: 'List the files under a folder.',
      parameters: z.object({ path: z.string() }),
      execute: async ({ path }) => {
        ran('ls');
        const prefix = path.endsWith('/') ? path : `${path}/`;
        return Object.keys(files).filter((f) => f.startsWith(prefix)).sort().join('\n');
      },
    }),
    tool({
      name: 'read_file',
      description: 'Read a file.',
      parameters: z.object({ file_path: z.string() }),
      execute: async ({ file_path }) => {
        ran('read_file');
        if (!(file_path in files)) throw new Error(`no such file: ${file_path}`);
        return files[file_path];
      },
    }),
    tool({
      name: 'write_file',
      description: 'Write a file.',
      parameters: z.object({ file_path: z.string(), content: z.string() }),
      execute: async ({ file_path, content }) => {
        ran('write_file');
        files[file_path] = content;
        return `wrote ${file_path}`;
      },
    }),
    tool({
      name: 'write_todos',
      description: 'Replace the todo list.',
      parameters: z.object({ todos: z.array(z.object({ content: z.string(), status: z.string() })) }),
      execute: async ({ todos }) => {
        ran('write_todos');
        state.todos = todos;
        return `${todos.length} todos`;
      },
    }),
  ];
  return state;
}

function architect(model, repo) {
  return new Agent({ name: 'architect', instructions: 'You are a careful software architect.', model, tools: repo.tools });
}

/** The architect with `script` under the kernel. */
async function runUnder(script, policy, { repeatLast = false, model } = {}) {
  const repo = repository();
  const scripted = model || new ScriptedModel(script, { repeatLast });
  const result = await run(architect(scripted, repo), TASK, { policy });
  return { result, report: result.terminus, repo, model: scripted };
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

const textOf = (item) => (typeof item.content === 'string' ? item.content : (item.content || []).map((p) => p.text || '').join(''));
const userTexts = (history) => history.filter((i) => i.role === 'user').map(textOf);

/** Every function call of the conversation has exactly one result. */
function assertEveryCallAnswered(history) {
  const calls = history.filter((i) => i.type === 'function_call').map((i) => i.callId);
  const results = history.filter((i) => i.type === 'function_call_result').map((i) => i.callId);
  assert.deepEqual([...results].sort(), [...calls].sort());
  assert.equal(new Set(calls).size, calls.length);
}

test('without the kernel the architect stops with no plan', async () => {
  const repo = repository();
  const result = await new Runner({ tracingDisabled: true }).run(architect(new ScriptedModel(ARCHITECT), repo), TASK);
  assert.equal(result.finalOutput, ARCHITECT[3].text);
  assert.ok(!(PLAN_PATH in repo.files));
  assert.deepEqual(repo.todos, [{ content: 'write plan', status: 'in_progress' }]);
});

test('with the kernel the premature stop is nudged once and the plan written', async () => {
  const { result, report, repo, model } = await runUnder(ARCHITECT, ARCHITECT_POLICY);
  assert.equal(report.outcome, 'complete');
  assert.equal(report.reason, 'answered');
  assert.equal(report.nudges, 1);
  assert.equal(report.model_calls, ARCHITECT.length);
  assert.equal(model.inputs.length, ARCHITECT.length);
  assert.equal(report.tool_calls, 5);
  assert.equal(report.result, 'Plan written to /plan.md.');
  assert.equal(result.finalOutput, 'Plan written to /plan.md.');
  assert.equal(repo.files[PLAN_PATH], PLAN_TEXT);
  assert.deepEqual(repo.todos, [{ content: 'write plan', status: 'completed' }]);
  // The nudge follows the refused stop in the conversation, and the model's next call saw it.
  const history = result.history;
  const nudges = history.map((item, i) => [item, i]).filter(([item]) => item.role === 'user').slice(1);
  assert.equal(nudges.length, 1);
  const [nudge, at] = nudges[0];
  assert.match(textOf(nudge), /write_file/);
  assert.equal(textOf(history[at - 1]), ARCHITECT[3].text);
  assert.ok(model.inputs[4].some((item) => item.role === 'user' && textOf(item) === textOf(nudge)));
  assertEveryCallAnswered(history);
  assert.deepEqual(pick(report), pick(runScenario(asScenario(ARCHITECT, ARCHITECT_POLICY))));
});

test('a loop on one identical call ends no_progress, never MaxTurnsExceededError', async () => {
  const { result, report, repo, model } = await runUnder(looping(), {}, { repeatLast: true });
  assert.equal(report.outcome, 'aborted');
  assert.equal(report.reason, 'no_progress');
  // The stop is decided on the third turn's results: the model is not called a fourth time.
  assert.equal(report.model_calls, 3);
  assert.equal(model.inputs.length, 3);
  assert.deepEqual(repo.runs, { ls: 3 });
  assertEveryCallAnswered(result.history);
  assert.deepEqual(pick(report), pick(runScenario(asScenario(looping(), {}, { repeatLast: true }))));
});

test('without the kernel the same loop throws MaxTurnsExceededError', async () => {
  const repo = repository();
  const agent = architect(new ScriptedModel(looping(), { repeatLast: true }), repo);
  await assert.rejects(new Runner({ tracingDisabled: true }).run(agent, TASK), MaxTurnsExceededError);
  assert.deepEqual(repo.runs, { ls: 10 }); // the SDK's default maxTurns
});

test('a chain longer than the SDK default maxTurns completes', async () => {
  const chain = [...honestChain(15), textTurn('Read every part.')];
  const { result, report, repo, model } = await runUnder(chain, {});
  assert.equal(report.reason, 'answered');
  assert.equal(report.model_calls, 16);
  assert.equal(model.inputs.length, 16);
  assert.deepEqual(repo.runs, { read_file: 15 });
  assert.equal(result.finalOutput, 'Read every part.');
  assert.deepEqual(pick(report), pick(runScenario(asScenario(chain, {}))));
});

test('a long chain ends max_steps, the last calls answered not run', async () => {
  const chain = honestChain(CHAIN_PARTS);
  const { result, report, repo, model } = await runUnder(chain, { max_steps: 21 });
  assert.equal(report.outcome, 'aborted');
  assert.equal(report.reason, 'max_steps');
  assert.equal(report.steps, 21);
  assert.equal(report.model_calls, model.inputs.length);
  assert.equal(repo.runs.read_file, report.tool_calls);
  assertEveryCallAnswered(result.history);
  const last = result.history.filter((i) => i.type === 'function_call_result').at(-1);
  assert.match(JSON.stringify(last.output), /Not run: the run stopped \(max_steps\)\./);
  assert.deepEqual(pick(report), pick(runScenario(asScenario(chain, { max_steps: 21 }))));
});

test('empty replies end empty_responses and stay out of the conversation', async () => {
  const policy = { retry_base_ms: 1, retry_max_ms: 2 };
  const { result, report, model } = await runUnder([EMPTY_TURN], policy, { repeatLast: true });
  assert.equal(report.reason, 'empty_responses');
  assert.equal(report.empty_responses, 3);
  assert.equal(model.inputs.length, 3);
  // No reply of the model's: the run ends on the kernel's empty stand-in (the SDK ends a run
  // only on a message).
  const replies = result.history.filter((i) => i.role === 'assistant');
  assert.deepEqual(replies.map((i) => [i.id.startsWith('terminus-stop'), textOf(i)]), [[true, '']]);
  assert.deepEqual(pick(report), pick(runScenario(asScenario([EMPTY_TURN], policy, { repeatLast: true }))));
});

test('a provider error is classed, retried after the backoff, or ends model_error', async () => {
  const limited = Object.assign(new Error('429 slow down'), { status: 429, error: { message: 'slow down' }, headers: {} });
  const retried = await runUnder([], { retry_base_ms: 1, retry_max_ms: 2 }, { model: new ScriptedModel([textTurn('Fine.')], { errors: [limited] }) });
  assert.equal(retried.report.reason, 'answered');
  assert.equal(retried.model.inputs.length, 2);
  const denied = Object.assign(new Error('401'), { status: 401, error: { message: 'invalid api key' }, headers: {} });
  assert.deepEqual(modelErrorKind(denied), { kind: 'auth' });
  const failed = await runUnder([], {}, { model: new ScriptedModel([textTurn('never')], { errors: [denied] }) });
  assert.equal(failed.report.reason, 'model_error');
  assert.equal(failed.model.inputs.length, 1);
  assert.equal(modelErrorKind(new TypeError('a bug')), null);
});

test('bad arguments are refused naming them', async () => {
  const repo = repository();
  const agent = architect(new ScriptedModel([textTurn('x')]), repo);
  await assert.rejects(run(agent, TASK, { policy: { max_stpes: 3 } }), /max_stpes/);
  await assert.rejects(run(agent, TASK, { maxTurns: 5 }), /options\.maxTurns/);
  await assert.rejects(run('architect', TASK), /agent: expected an Agent/);
  await assert.rejects(run(agent, 42), /input: expected a string/);
});

test('a policy naming a tool by the name tool() changed is refused, naming the field', async () => {
  const sum = tool({ name: 'get-sum', description: 'Adds.', parameters: z.object({}), execute: async () => '3' });
  assert.equal(sum.name, 'get_sum'); // the SDK's renaming, which the check reads the same way
  const agent = new Agent({ name: 'adder', instructions: 'Add.', model: new ScriptedModel([textTurn('3')]), tools: [sum] });
  await assert.rejects(run(agent, 'Add 1 and 2.', { policy: { completion_requires: ['get-sum'] } }), /policy\.completion_requires\[0\]: the agent has no tool `get-sum`, but has `get_sum`/);
  await assert.rejects(run(agent, 'Add 1 and 2.', { policy: { tool_budgets: { 'get-sum': { warn_at: 2 } } } }), /policy\.tool_budgets\.get-sum: the agent has no tool `get-sum`/);
  await assert.rejects(run(agent, 'Add 1 and 2.', { policy: { tool_budgets: { write: { warn_at: 2, reset_on: ['get-sum'] } } } }), /policy\.tool_budgets\.write\.reset_on\[0\]: the agent has no tool `get-sum`/);
  const report = (await run(agent, 'Add 1 and 2.', { policy: { tool_budgets: { get_sum: { warn_at: 2 } } } })).terminus;
  assert.equal(report.outcome, 'complete', 'the name the SDK sends is accepted');
});

test('an empty reply with usage is a no-op: nudged, and the run goes on without it', async () => {
  const script = [{ text: '', calls: [], usage: [100, 5] }, textTurn('The answer.')];
  const { result, report, model } = await runUnder(script, {});
  assert.equal(report.reason, 'answered');
  assert.equal(result.finalOutput, 'The answer.');
  assert.equal(model.inputs.length, 2);
  // The second call saw the kernel's nudge and no empty assistant message before it.
  const second = model.inputs[1];
  assert.ok(!second.some((i) => i.role === 'assistant'));
  assert.equal(second.filter((i) => i.role === 'user').length, 2);
  assert.deepEqual(pick(report), pick(runScenario(asScenario(script, {}))));
});

test('a tool without an errorFunction fails, is excluded, and its next call refused', async () => {
  const repo = repository();
  let deploys = 0;
  const deploy = tool({
    name: 'deploy',
    description: 'Deploy the release.',
    parameters: z.object({ env: z.string() }),
    errorFunction: null,
    execute: async () => {
      deploys += 1;
      throw new Error('connection reset by peer');
    },
  });
  const script = [
    toolsTurn(['deploy', { env: 'prod' }]),
    toolsTurn(['deploy', { env: 'staging' }]),
    toolsTurn(['deploy', { env: 'dev' }]),
    toolsTurn(['deploy', { env: 'test' }], ['ls', { path: '/src' }]),
    textTurn('Deploy is broken; I listed the sources.'),
  ];
  const agent = new Agent({ name: 'deployer', instructions: 'Deploy.', model: new ScriptedModel(script), tools: [deploy, ...repo.tools] });
  const result = await run(agent, TASK, { policy: {} });
  assert.equal(result.terminus.reason, 'answered');
  assert.deepEqual(result.terminus.excluded_tools, ['deploy']);
  assert.equal(deploys, 3); // the fourth call was refused, not run
  assert.deepEqual(repo.runs, { ls: 1 });
  const refusal = result.history.find((i) => i.type === 'function_call_result' && i.callId === 'call_3_0');
  assert.match(JSON.stringify(refusal.output), /deploy/);
  assert.match(JSON.stringify(refusal.output), /exclu/i);
  const scenario = asScenario(script, {});
  scenario.tools.deploy = { results: [{ error: 'failed', message: 'connection reset by peer' }], repeat: 'last' };
  assert.deepEqual(pick(result.terminus), pick(runScenario(scenario)));
});

test("a tool's failure reads as terminus run writes it, its class the core's (an unknown one is failed)", async () => {
  const failing = (kind) =>
    tool({
      name: `deploy_${kind}`,
      description: 'Deploy the release.',
      parameters: z.object({ env: z.string() }),
      errorFunction: null,
      execute: async () => {
        throw Object.assign(new Error('no access to prod'), { terminus_error: kind });
      },
    });
  const script = [toolsTurn(['deploy_permission_denied', { env: 'prod' }], ['deploy_weird', { env: 'prod' }]), textTurn('Neither deploy ran.')];
  const agent = new Agent({ name: 'deployer', instructions: 'Deploy.', model: new ScriptedModel(script), tools: [failing('permission_denied'), failing('weird')] });
  const result = await run(agent, TASK, { policy: {} });
  const output = (id) => JSON.stringify(result.history.find((i) => i.type === 'function_call_result' && i.callId === id).output);
  assert.match(output('call_0_0'), /error \(permission_denied\): no access to prod/);
  assert.match(output('call_0_1'), /error \(failed\): no access to prod/);
  assert.equal(result.terminus.stats.tool_failures, 2);
});

test('a final output the verifier rejects goes on with its feedback', async () => {
  const claims = [];
  const verify = async ({ claim }) => {
    claims.push(claim);
    return claims.length === 1 ? { complete: false, feedback: 'check it twice' } : { complete: true };
  };
  const repo = repository();
  const model = new ScriptedModel([textTurn('Done already.'), textTurn('Done, checked twice.')]);
  const result = await run(architect(model, repo), TASK, { policy: { verify_completion: true }, verify });
  assert.deepEqual([result.terminus.reason, result.terminus.verification_failures], ['verified', 1]);
  assert.deepEqual(claims, ['Done already.', 'Done, checked twice.']);
  assert.equal(result.finalOutput, 'Done, checked twice.');
  assert.ok(model.inputs[1].some((item) => item.role === 'user' && /check it twice/.test(textOf(item))));
});

test('an answer of the verifier that is no verdict throws the host core error, naming verdict', async () => {
  const model = new ScriptedModel([textTurn('Done already.')]);
  const verify = async () => ({ complete: 'yes' });
  await assert.rejects(run(architect(model, repository()), TASK, { policy: { verify_completion: true }, verify }), /verdict\.complete: invalid type: string "yes", expected a boolean/);
});

test('the ES module exports the same functions', async () => {
  const esm = await import('terminus-kernel/openai-agents');
  assert.equal(esm.run, run);
  assert.equal(esm.modelErrorKind, modelErrorKind);
});

test('a checkpoint written for the agent: its model asked without tools; a failed call says why and the run goes on', async () => {
  // policy.auto_checkpoints: after the second turn the read budget refused, the agent's own model
  // is asked for a summary (the kernel's prompt last, no tools) before the next call.
  const reads = ['/src/lib.rs', '/README.md', '/README.md', '/README.md'];
  for (const fails of [false, true]) {
    const summaries = []; // per summary call: the tools it offered
    const inner = new ScriptedModel([...reads.map((p) => toolsTurn(['read_file', { file_path: p }])), textTurn('lib.rs has main; README.md is a title.')]);
    const model = {
      async getResponse(request) {
        const last = Array.isArray(request.input) ? request.input.at(-1) : null;
        if (last && last.role === 'user' && textOf(last).startsWith('Write a checkpoint')) {
          summaries.push((request.tools || []).length);
          if (fails) throw Object.assign(new Error('429 slow down'), { status: 429, error: { message: 'slow down' }, headers: {} });
          return { output: [{ type: 'message', role: 'assistant', status: 'completed', content: [{ type: 'output_text', text: 'Read lib.rs so far.' }] }], usage: new Usage({ requests: 1 }) };
        }
        return inner.getResponse(request);
      },
      async *getStreamedResponse() {
        throw new Error('no streaming');
      },
    };
    const policy = { auto_checkpoints: 1, tool_budgets: { read_file: { block_at: 2, reset_on: ['post_checkpoint'] } } };
    const { result, report } = await runUnder([], policy, { model });
    assert.deepEqual([report.outcome, report.stats.auto_checkpoints, report.stats.refused_calls, report.tool_calls], ['complete', 1, 2, 2]);
    assert.deepEqual(summaries, [0], 'asked once, with no tools');
    const summary = fails ? '(No summary: the model call failed: rate_limited: 429 slow down.)' : 'Read lib.rs so far.';
    const written = userTexts(result.history).filter((t) => t.endsWith(`\n\n${summary}`));
    assert.equal(written.length, 1, JSON.stringify(userTexts(result.history)));
  }
});
