'use strict';
// The package's `Session` (the host core, `terminus_runtime::host::Session`): a tool turn
// through it in LangChain's message shape, a snapshot that goes on, and bad inputs refused with
// an `Error` naming their path, the session left as it was.

const test = require('node:test');
const assert = require('node:assert/strict');
const { Session } = require('terminus-kernel');

const human = { type: 'human', content: 'List the files.' };
const reply = { type: 'ai', id: 'r1', content: '', tool_calls: [{ id: 'c1', name: 'ls', args: { path: '/' } }] };
const result = { type: 'tool', id: 't1', tool_call_id: 'c1', content: 'a.txt', status: 'success' };
const answer = { type: 'ai', id: 'r2', content: 'One file: a.txt.' };

test('a tool turn and an answer through the session, across a snapshot', () => {
  const [session, first] = Session.start({}, [human], 0);
  assert.deepEqual(first, { jump: 'model', delay_ms: 0, tools: true });
  assert.equal(session.reply(reply, ['ls'], 0).jump, 'tools');
  assert.equal(session.reply(reply, ['ls'], 0), null); // fed already
  assert.ok(session.batchOut);
  const turn = session.turn();
  assert.deepEqual(turn.awaiting, [['c1', 'ls']]);
  assert.deepEqual(Session.gate(turn, 'c1', 'ls', true), { run: {} });
  assert.equal(Session.gate(turn, 'c1', 'ls', false).refuse.error, 'not_found');
  const again = Session.restore(session.snapshot());
  const step = again.results([reply, result], 0);
  // No notice came: none rides on the result (notice_to names a result only for notices).
  assert.deepEqual([step.jump, step.notice_to, step.notices], ['model', undefined, undefined]);
  const end = again.reply(answer, ['ls'], 0);
  assert.equal(end.jump, 'end');
  assert.ok(again.ended);
  assert.deepEqual([end.report.outcome, end.report.tool_calls], ['complete', 1]);
  assert.deepEqual(again.report().result, 'One file: a.txt.');
  assert.equal(again.finish([], 0), null);
});

test("a call of one of the output tools is the structured answer, the reply's text", () => {
  const [session] = Session.start({}, [human], 0);
  const structured = { type: 'ai', id: 'r1', content: '', tool_calls: [{ id: 'o1', name: 'Plan', args: { title: 'x' } }] };
  assert.throws(() => session.reply(structured, ['ls'], 0, 'Plan'), /outputTools: not an array of names/);
  const end = session.reply(structured, ['ls'], 0, ['Plan']);
  assert.deepEqual([end.jump, end.report.outcome, end.report.result], ['end', 'complete', '{"title":"x"}']);
  // Without the output tools' names it is a call of a tool the model call did not offer.
  const [other] = Session.start({}, [human], 0);
  assert.notEqual(other.reply(structured, ['ls'], 0).jump, 'end');
});

test('bad inputs throw an Error naming their path, the session unchanged', () => {
  const [session] = Session.start(null, [human]);
  const cases = [
    [() => Session.start({ max_stpes: 1 }, []), /policy\.max_stpes: unknown field/],
    [() => Session.start({}, {}), /messages: not an array/],
    [() => Session.start({}, [human], 0, 1.5), /scale: not a whole number/],
    [() => session.reply({ type: 'ai', content: '', tool_calls: [{ name: 'ls' }] }), /message\.tool_calls\[0\]: the call of `ls` has no id/],
    [() => session.reply(reply, ['ls', 3]), /offered\[1\]: not a tool or a name/],
    [() => session.results([() => 1]), /messages\[0\]: a function is not a message/],
    [() => session.reply(3), /message: a number is not a message/],
    [() => session.verdict([true]), /verdict: expected a boolean, a \[boolean, string\] pair or a verdict object/],
    [() => session.results([], -1), /nowMs: must be a whole number/],
    [() => session.results([], '5'), /nowMs: a string is not a number of milliseconds/],
    [() => session.modelError('server', '5'), /retryAfterMs: a string is not a number/],
    [() => session.modelError('flaky'), /kind: unknown variant `flaky`/],
    [() => session.modelError('server', 0.5), /retryAfterMs: must be a whole number/],
    [() => session.verdict({ complete: 'yes' }), /verdict\.complete: invalid type/],
    [() => session.verdict({ complete: true }), /verdict: no verification is pending/],
    [() => Session.gate({ awaiting: 3 }, 'c1', 'ls', true), /turn/],
    [() => Session.restore('{}'), /session: missing field `turn`/],
    [() => Session.restore(3), /snapshot: a number is not snapshot text/],
  ];
  for (const [call, message] of cases) assert.throws(call, message);
  assert.equal(session.reply(reply, ['ls']).jump, 'tools');
});

test('a LangChain JS message is read as it is: what the core does not read need not be JSON', () => {
  const { AIMessage, ToolMessage } = require('@langchain/core/messages');
  const [session] = Session.start({}, [human], 0);
  const call = new AIMessage({
    id: 'r1',
    content: '',
    tool_calls: [{ id: 'c1', name: 'ls', args: { path: '/' } }],
    response_metadata: { finish_reason: 'tool_calls', created: new Date(0), raw: 10n },
    additional_kwargs: { reasoning_content: 'List first.' },
  });
  assert.equal(session.reply(call, ['ls'], 0).jump, 'tools');
  const artifact = { bytes: new Uint8Array(4), count: 1n };
  const failed = new ToolMessage({ content: 'timed out', tool_call_id: 'c1', status: 'error', artifact, response_metadata: { terminus_error: 'timeout' } });
  assert.equal(session.results([call, failed], 0).jump, 'model');
  const { stats } = session.report();
  assert.deepEqual([stats.tool_calls, stats.tool_failures], [1, 1]);
  const cyclic = { type: 'ai', id: 'r2', content: 'x' };
  cyclic.self = cyclic;
  assert.throws(() => session.reply(cyclic), /message: not JSON/);
});

test('a tool schema is read where each framework keeps it, and types a written call', () => {
  const schema = { type: 'object', properties: { n: { type: 'integer' } } };
  const glm = { type: 'ai', id: 'r1', content: '<tool_call>count<arg_key>n</arg_key><arg_value>3</arg_value></tool_call>' };
  const shapes = [
    { type: 'function', function: { name: 'count', parameters: schema } }, // OpenAI
    { type: 'function', name: 'count', parameters: schema }, // OpenAI Agents
    { name: 'count', inputSchema: schema }, // MCP
    { name: 'count', inputSchema: { jsonSchema: schema } }, // the AI SDK's jsonSchema()
    { name: 'count', schema }, // LangChain with a JSON Schema
  ];
  const argumentsOf = (offered) => {
    const [session] = Session.start({}, [human]);
    return session.reply(glm, offered).written.tool_calls[0].arguments;
  };
  for (const shape of shapes) assert.deepEqual(argumentsOf([shape]), { n: 3 }, JSON.stringify(shape));
  // By name only, or a schema the host cannot give as JSON (a class instance): the value as written.
  assert.deepEqual(argumentsOf(['count']), { n: '3' });
  assert.deepEqual(argumentsOf([{ name: 'count', schema: new (class Zod {})() }]), { n: '3' });
  // What is not JSON in a schema is dropped; a schema that cannot be written is left out.
  const loose = { ...schema, default: undefined, describe: () => 'n' };
  assert.deepEqual(argumentsOf([{ name: 'count', parameters: loose }]), { n: 3 });
  const cyclic = { ...schema };
  cyclic.self = cyclic;
  assert.deepEqual(argumentsOf([{ name: 'count', parameters: cyclic }]), { n: '3' });
  const [session] = Session.start({}, [human]);
  assert.throws(() => session.reply(glm, [3]), /offered\[0\]: not a tool or a name/);
  assert.throws(() => session.reply(glm, 'count'), /offered: not an array of tools or names/);
});

test('a policy is checked and scaled once, as every run of an adapter takes it', () => {
  const policy = { max_steps: 2, budget_scale: { per_unit: { max_steps: 3 }, max: { max_steps: 50 } } };
  const checked = Session.checkPolicy(policy, 4);
  assert.deepEqual([checked.max_steps, checked.budget_scale.units], [14, 4]);
  // Started from it with no scale, a run keeps those budgets (it is not scaled again).
  const [session] = Session.start(checked, [human], 0);
  assert.equal(session.turn().started_ms, 0);
  assert.throws(() => Session.checkPolicy({ max_stpes: 1 }), /policy\.max_stpes: unknown field/);
  assert.equal(Session.checkPolicy({ auto_checkpoints: 1 }).auto_checkpoints, 1, 'a framework host writes checkpoints too');
  assert.throws(() => Session.checkPolicy({}, 3), /scale: scales nothing: the policy has no budget_scale/);
  assert.throws(() => Session.checkPolicy(checked, 5), /scaled for 4 units already, not 5/);
});
