'use strict';
// The fast path's single-call and single-result forms (`turnCall` and `result` in the addon: no
// array, the strings in one with their lengths) against the JSON way, as fast_path.test.js
// checks the general forms: the same answer or error, the same commands, the same machine.

const test = require('node:test');
const assert = require('node:assert/strict');
const { Machine } = require('..');

/** What `how` does with `event` on `machine`: its answer or its error, then every command. */
function outcome(machine, how, event) {
  let answer;
  try {
    answer = how === 'fast' ? machine.handle(event) : machine._handleJson(event);
  } catch (e) {
    answer = `Error: ${e.message}`;
  }
  const commands = [];
  for (let c; (c = machine.nextCommand()) !== null;) commands.push(JSON.stringify(c));
  return { answer, commands, snapshot: machine.snapshot() };
}

/** A machine waiting for a model turn, or (with `call`) for the result of that one call. */
function machine(call, policy) {
  const m = new Machine({ max_steps: 50, ...policy });
  while (m.nextCommand() !== null);
  if (call) {
    m.handle({ model_turn: { tool_calls: [call] } });
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
