'use strict';
// The fast path (`fast.js` takes a model turn, tool results or a clock reading apart and gives
// the addon its fields) against the JSON way (`_handleJson`: the event as JSON text, read by
// serde): for every event here, valid or not, both give the same answer or the same error, leave
// the same machine and queue the same commands, to the key order of their JSON. The events are
// those only the fast path reads field by field: numbers past u32 or past 2^53, missing,
// null and unknown fields, strings serde refuses, odd arguments and results.

const test = require('node:test');
const assert = require('node:assert/strict');
const { Machine } = require('..');

/** What `how` does with `event` on `machine`: its answer or its error, then every command. */
function outcome(machine, how, event) {
  let answer;
  try {
    answer = how === 'fast' ? machine.handle(event) : machine._handleJson(event);
  } catch (e) {
    assert.ok(e instanceof Error, `${how}: threw a ${typeof e}`);
    answer = `Error: ${e.message}`;
  }
  const commands = [];
  for (let c; (c = machine.nextCommand()) !== null;) commands.push(JSON.stringify(c));
  return { answer, commands, snapshot: machine.snapshot() };
}

/**
 * A machine waiting for a model turn (`turn`, or null), for the results of calls `a` and `b` of
 * `t` (`results`), or for the result of the one call `waiting` (an object).
 */
function machine(waiting, policy) {
  const m = new Machine({ max_steps: 50, ...policy });
  while (m.nextCommand() !== null);
  const calls = waiting === 'results' ? [{ id: 'a', name: 't' }, { id: 'b', name: 't' }] : waiting && typeof waiting === 'object' ? [waiting] : null;
  if (calls) {
    m.handle({ model_turn: { tool_calls: calls } });
    while (m.nextCommand() !== null);
  }
  return m;
}

/** Counts the calls of the JSON way into the addon on `m`. */
function countJson(m) {
  const count = { json: 0 };
  const handle = m._native.handle.bind(m._native);
  m._native.handle = (...args) => {
    count.json += 1;
    return handle(...args);
  };
  return count;
}

const turn = (fields) => ({ model_turn: fields });
const call = (fields) => turn({ tool_calls: [{ id: 'c1', name: 'read_file', ...fields }] });
const results = (...rs) => ({ tool_results: rs });
const ok = (fields) => results({ call_id: 'a', name: 't', ok: 'x', ...fields }, { call_id: 'b', name: 't', ok: 1 });

const TURNS = [
  turn({}),
  turn({ text: 'done', needs_more_work: false }),
  turn({ text: null, tool_calls: null, needs_more_work: null, usage: null, finish: null, reasoning: null }),
  turn({ text: undefined, extra: undefined }),
  turn({ text: 'hi', reasoning: true, finish: 'length' }),
  ...['stop', 'length', 'content_filter', 'tool_calls', 'refusal', '', 'toString', 3].map((finish) => turn({ text: 'x', finish })),
  turn({ needs_more_work: 'yes' }),
  turn({ reasoning: 1 }),
  turn({ text: 3 }),
  turn({ text: '\ud800 lone' }),
  turn({ text: 'a pair \ud83d\ude00 and \u0000 and é' }),
  turn({ txt: 'hi' }),
  turn({ txt: null }),
  // Usage: u64 counts, past u32, past 2^53, not whole, negative, missing, extra.
  turn({ text: 'x', usage: { input_tokens: 2 ** 32 + 5, output_tokens: 0 } }),
  turn({ text: 'x', usage: { input_tokens: Number.MAX_SAFE_INTEGER, output_tokens: 1 } }),
  turn({ text: 'x', usage: { input_tokens: 2 ** 53 + 2, output_tokens: 1 } }),
  turn({ text: 'x', usage: { input_tokens: 2 ** 64, output_tokens: 1 } }),
  turn({ text: 'x', usage: { input_tokens: 1.5, output_tokens: 1 } }),
  turn({ text: 'x', usage: { input_tokens: -1, output_tokens: 1 } }),
  turn({ text: 'x', usage: { input_tokens: -0, output_tokens: 1 } }),
  turn({ text: 'x', usage: { input_tokens: 1 } }),
  turn({ text: 'x', usage: { input_tokens: 1, output_tokens: null } }),
  turn({ text: 'x', usage: { input_tokens: 1, output_tokens: 2, total: 3 } }),
  turn({ text: 'x', usage: { input_tokens: 1, output_tokens: 2, total: undefined } }),
  turn({ text: 'x', usage: { input_tokens: '1', output_tokens: 2 } }),
  turn({ text: 'x', usage: [1, 2] }),
  // Tool calls: ids given or not, names missing, extra fields, odd arguments.
  call({}),
  call({ id: null }),
  call({ id: undefined, arguments: undefined }),
  call({ name: null }),
  call({ name: undefined }),
  call({ name: 3 }),
  call({ id: 7 }),
  call({ id: '\udc00' }),
  call({ extra: 1 }),
  call({ arguments: null }),
  call({ arguments: 'a string' }),
  call({ arguments: [1, 'two', null, true, [], {}] }),
  call({ arguments: { b: 1, a: 2, 10: 3, 9: 4, B: 5, é: 6, z: { y: 1, x: [{ d: 1, c: 2 }] } } }),
  call({ arguments: { '\ue000': 1, '\ud83d\ude00': 2, a: 3 } }),
  call({ arguments: JSON.parse('{"__proto__": {"a": 1}, "b": 2}') }),
  call({ arguments: { f: 0.1, g: 1e21, h: -0, i: 2 ** 60, j: -(2 ** 63), k: 1e-7 } }),
  call({ arguments: { u: undefined, v: 1 } }),
  call({ arguments: { bad: '\ud800' } }),
  call({ arguments: { '\ud800': 1 } }),
  call({ arguments: { nan: NaN } }),
  call({ arguments: { f: () => 1 } }),
  call({ arguments: new Date(0) }),
  call({ arguments: Object.create(null) }),
  call({ arguments: { deep: JSON.parse('['.repeat(40) + ']'.repeat(40)) } }),
  turn({ tool_calls: [{ name: 'a' }, { id: 'x', name: 'b', arguments: { p: 1 } }] }),
  turn({ tool_calls: [{ id: 'x', name: 'a' }, { id: 'x', name: 'a' }] }),
  turn({ tool_calls: [] }),
  turn({ tool_calls: [null] }),
  turn({ tool_calls: 'read_file' }),
  turn({ tool_calls: [, { name: 'a' }] }), // eslint-disable-line no-sparse-arrays
  // Not a turn the fast path takes at all.
  { model_turn: { text: 'x' }, tick: 1 },
  { model_turn: { text: 'x' }, tick: undefined },
  { model_turn: null },
  { model_turn: [] },
  { model_turn: new (class Turn {})() },
  { tick: 5 },
  { tick: 2 ** 32 + 1 },
  { tick: 2 ** 53 },
  { tick: 2 ** 64 },
  { tick: -0 },
  { tick: -1 },
  { tick: 0.5 },
  { tick: '5' },
  { tick: null },
  { cancel: true },
  { cancel: false },
];

const RESULTS = [
  ok({}),
  ok({ ok: null }),
  ok({ ok: undefined, error: 'failed' }),
  ok({ ok: { z: 1, a: [0.5, 'x', null] } }),
  ok({ ok: 2 ** 64 }),
  ok({ ok: '\ud800' }),
  ok({ ok: { bad: '\udfff' } }),
  ok({ ok: [1, undefined] }),
  ok({ ok: new Map() }),
  ok({ ok: 'x', error: 'failed' }),
  ok({ ok: 'x', error: null }),
  ok({ ok: 'x', message: 'm' }),
  ok({ ok: 'x', message: null }),
  ok({ ok: undefined }),
  ...['permission_denied', 'not_found', 'auth_failed', 'timeout', 'invalid_arguments', 'failed', 'teapot', 'constructor', 1]
    .map((error) => ok({ ok: undefined, error, message: 'why' })),
  ok({ ok: undefined, error: 'timeout', message: null }),
  ok({ ok: undefined, error: 'timeout', message: 3 }),
  ok({ ok: undefined, error: 'timeout', message: 'lone \udbff' }),
  ok({ call_id: 3 }),
  ok({ call_id: null }),
  ok({ call_id: undefined }),
  ok({ name: undefined }),
  ok({ extra: true }),
  ok({ extra: undefined }),
  results(),
  results({ call_id: 'b', name: 't', ok: 1 }, { call_id: 'a', name: 't', ok: 2 }),
  results({ call_id: 'zz', name: 't', ok: 1 }, { call_id: 'b', name: 't', ok: 2 }),
  results(null),
  results([]),
  { tool_results: {} },
  { tool_results: 'x' },
];

test('the fast path and the JSON way agree on every event, valid or not', () => {
  const cases = [...TURNS.map((e) => ['turn', e]), ...RESULTS.map((e) => ['results', e])];
  const answers = new Set();
  for (const [waiting, event] of cases) {
    for (const policy of [{}, { tool_budgets: { read_file: { warn_at: 1 } }, verify_completion: true }]) {
      const fast = outcome(machine(waiting, policy), 'fast', event);
      const json = outcome(machine(waiting, policy), 'json', event);
      assert.deepStrictEqual(fast, json, `${waiting} ${JSON.stringify(event)}`);
      answers.add(fast.answer.startsWith('Error') ? 'error' : fast.answer);
    }
  }
  // Every answer reached: taken as a step, observed, ignored, and refused.
  assert.deepStrictEqual([...answers].sort(), ['error', 'ignored', 'observed', 'step']);
});

test('a malformed field names its path the same way on both paths', () => {
  const cases = [
    [turn({ text: 3 }), 'event.model_turn.text: invalid type: integer `3`, expected a string'],
    [turn({ text: 'x', usage: { input_tokens: 1.5, output_tokens: 1 } }), 'event.model_turn.usage.input_tokens: invalid type: floating point `1.5`, expected u64'],
    [turn({ text: 'x', usage: { input_tokens: -1, output_tokens: 1 } }), 'event.model_turn.usage.input_tokens: invalid value: integer `-1`, expected u64'],
    [turn({ text: 'x', usage: { input_tokens: 2 ** 64, output_tokens: 1 } }), 'event.model_turn.usage.input_tokens: invalid type: floating point'],
    [turn({ text: 'x', usage: { input_tokens: 1, output_tokens: 2, total: 3 } }), 'event.model_turn.usage.total: unknown field'],
    [turn({ text: 'x', usage: { input_tokens: 1 } }), 'event.model_turn.usage: missing field `output_tokens`'],
    [call({ extra: 1 }), 'event.model_turn.tool_calls[0].extra: unknown field'],
    [call({ name: null }), 'event.model_turn.tool_calls[0].name: invalid type: null, expected a string'],
    [call({ id: 7 }), 'event.model_turn.tool_calls[0].id: invalid type: integer `7`, expected a string'],
    [turn({ text: '\ud800' }), 'event.model_turn.text: unexpected end of hex escape'],
    [call({ arguments: { nan: NaN } }), 'event.model_turn.tool_calls[0].arguments.nan: NaN is not a JSON number'],
    [{ tick: 2 ** 64 }, 'event.tick: invalid type: floating point'],
    [{ tick: 0.5 }, 'event.tick: invalid type: floating point `0.5`, expected u64'],
    [ok({ call_id: 3 }), 'event.tool_results[0].call_id: invalid type: integer `3`, expected a string'],
    [ok({ extra: true }), 'event.tool_results[0].extra: unknown field'],
    [ok({ ok: undefined, error: 'teapot' }), 'event.tool_results[0].error: unknown variant `teapot`'],
    [ok({ ok: 'x', message: 'm' }), 'event.tool_results[0].message: goes with `error`, not `ok`'],
  ];
  for (const [event, message] of cases) {
    for (const how of ['fast', 'json']) {
      const m = machine(event.tool_results ? 'results' : 'turn');
      const before = m.snapshot();
      const got = outcome(m, how, event);
      assert.ok(got.answer.startsWith(`Error: ${message}`), `${how}: ${got.answer} does not start with ${message}`);
      assert.equal(got.snapshot, before, `${how}: ${message}`);
    }
  }
});

test('the common events take the fast path: no JSON text, commands without a call', () => {
  const m = machine('turn');
  const count = countJson(m);
  for (let i = 0; i < 20; i++) {
    assert.equal(m.handle({ tick: i }), 'observed');
    const args = { path: `f${i}`, opts: { b: 1, a: [1, 'x', null, false] } };
    const event = {
      model_turn: {
        text: 'reading', tool_calls: [{ id: `c${i}`, name: 'read_file', arguments: args }],
        usage: { input_tokens: 2 ** 33, output_tokens: 7 }, finish: 'tool_calls', reasoning: false,
      },
    };
    assert.equal(m.handle(event), 'step');
    // The event changed after it was given: the command is what was given.
    args.path = 'changed';
    const command = m.nextCommand();
    assert.equal(
      JSON.stringify(command),
      `{"command":"run_tools","calls":[{"id":"c${i}","name":"read_file","arguments":{"opts":{"a":[1,"x",null,false],"b":1},"path":"f${i}"}}]}`,
    );
    assert.equal(m.nextCommand(), null);
    assert.equal(m.handle({ tool_results: [{ call_id: `c${i}`, name: 'read_file', ok: `content ${i}` }] }), 'step');
    assert.deepStrictEqual(m.nextCommand(), { command: 'call_model', delay_ms: 0, tools: true });
    assert.equal(m.nextCommand(), null);
  }
  assert.equal(count.json, 0);
  assert.equal(m.stats.steps, 40);
  assert.equal(m.stats.input_tokens, 20 * 2 ** 33);
  // What the fast path does not take goes the JSON way.
  m.handle({ model_error: { kind: 'server' } });
  assert.equal(count.json, 1);
});

test('commands handed out without a call are gone from a snapshot, the others stay', () => {
  const m = machine('turn', { tool_budgets: { t: { warn_at: 1 } } });
  // A run_tools with a budget warning comes from the addon as JSON text, in the answer.
  m.handle({ model_turn: { tool_calls: [{ id: 'a', name: 't' }] } });
  const copy = Machine.restore(m.snapshot());
  const first = m.nextCommand();
  assert.equal(first.command, 'run_tools');
  assert.equal(first.warnings.length, 1);
  assert.deepStrictEqual(copy.nextCommand(), first);
  assert.equal(Machine.restore(m.snapshot()).nextCommand(), null);
  m.handle({ tool_results: [{ call_id: 'a', name: 't', ok: 1 }] });
  const saved = m.snapshot();
  assert.deepStrictEqual(m.nextCommand(), { command: 'call_model', delay_ms: 0, tools: true });
  // Taken here, dropped in the addon at the snapshot.
  assert.equal(Machine.restore(m.snapshot()).nextCommand(), null);
  assert.deepStrictEqual(Machine.restore(saved).nextCommand(), { command: 'call_model', delay_ms: 0, tools: true });
  // A model error's backoff: call_model with a delay, from the addon.
  const n = machine('turn', { retry_base_ms: 100 });
  n.handle({ model_error: { kind: 'server' } });
  const retry = n.nextCommand();
  assert.equal(retry.command, 'call_model');
  assert.ok(retry.delay_ms > 0, JSON.stringify(retry));
  assert.equal(n.nextCommand(), null);
});

// The single-call and single-result forms (`turnCall` and `result` in the addon: no array, the
// strings in one with their lengths) against the JSON way.

const IDS = ['c1', '', 'é', 'a\ud83d\ude00', '\ud83d\ude00', '日本語', 'x'.repeat(300)];
const NAMES = ['read_file', '', 'ü', 'n\ud83d\ude00'];
const ARGS = [undefined, null, {}, { path: 'f' }, { b: 1, a: [1, 'x', null, true] }, { p: 'ü\ud83d\ude00' }, 'text', [1, 2], { bad: '\ud800' }, { n: 1.5 }];
const POLICIES = [{}, { tool_budgets: { read_file: { warn_at: 1 } }, verify_completion: true }];

test('a turn of one call: the fast path and the JSON way agree', () => {
  for (const policy of POLICIES) {
    for (const id of IDS) {
      for (const name of NAMES) {
        for (const args of ARGS) {
          const event = { model_turn: { text: 'x', tool_calls: [{ id, name, arguments: args }] } };
          const fast = outcome(machine(null, policy), 'fast', event);
          const json = outcome(machine(null, policy), 'json', event);
          assert.deepStrictEqual(fast, json, JSON.stringify(event));
        }
      }
    }
  }
});

test('a single result: the fast path and the JSON way agree', () => {
  const kinds = ['permission_denied', 'not_found', 'auth_failed', 'timeout', 'invalid_arguments', 'failed'];
  const results = [];
  for (const id of IDS) {
    for (const name of NAMES) {
      results.push({ call_id: id, name, ok: 'out \ud83d\ude00' }, { call_id: id, name, ok: '' }, { call_id: id, name, ok: null });
      results.push({ call_id: id, name, ok: { z: 1, a: ['é'] } }, { call_id: id, name, ok: 7 });
    }
  }
  for (const error of kinds) {
    for (const message of [undefined, null, '', 'why \ud83d\ude00']) results.push({ call_id: 'é', name: 'ü', error, message });
  }
  results.push({ call_id: 'a', name: 't', ok: 'x', error: 'failed' }, { call_id: 'a', name: 't', error: 'teapot' });
  results.push({ call_id: 'a', name: 't', ok: 'x', message: 'm' }, { call_id: 'a', name: 't' }, { call_id: 'a', name: 't', ok: '\ud800' });
  for (const policy of POLICIES) {
    for (const result of results) {
      // Waiting for the results of the call the result names (or of another one).
      for (const call of [{ id: result.call_id, name: result.name }, { id: 'other', name: 'read_file' }]) {
        const event = { tool_results: [result] };
        const fast = outcome(machine(call, policy), 'fast', event);
        const json = outcome(machine(call, policy), 'json', event);
        assert.deepStrictEqual(fast, json, JSON.stringify(event));
      }
    }
  }
});

test('a turn of one call with an id and a single result take the fast path', () => {
  const m = machine(null);
  const count = countJson(m);
  for (const [id, name] of [['é', 'ü'], ['a\ud83d\ude00', 'n\ud83d\ude00'], ['', '']]) {
    assert.equal(m.handle({ model_turn: { tool_calls: [{ id, name, arguments: { p: 'ü' } }] } }), 'step');
    assert.deepStrictEqual(m.nextCommand(), { command: 'run_tools', calls: [{ id, name, arguments: { p: 'ü' } }] });
    assert.equal(m.nextCommand(), null);
    assert.equal(m.handle({ tool_results: [{ call_id: id, name, error: 'timeout' }] }), 'step');
    while (m.nextCommand() !== null);
  }
  assert.equal(count.json, 0);
});
