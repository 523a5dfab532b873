'use strict';
// `snapshot()` / `Machine.restore()` at every step of every conformance scenario gives the same
// path: the same commands, the same events, the same report.

const test = require('node:test');
const assert = require('node:assert/strict');
const { basename } = require('node:path');
const { Machine } = require('..');
const { SCENARIOS, drive, load, unsupported } = require('./scenario_driver.js');

for (const path of SCENARIOS) {
  const scenario = load(path);
  const why = unsupported(scenario);
  const name = basename(path, '.json');
  test(`${name}: restore at every step gives the same path`, { skip: why ? `${name}.json: ${why}` : false }, () => {
    let restored = 0;
    const throughASnapshot = (machine) => {
      const text = machine.snapshot();
      const copy = Machine.restore(text);
      // The copy is the same machine: same snapshot, same state, same counters.
      assert.equal(copy.snapshot(), text);
      assert.equal(copy.phase, machine.phase);
      assert.deepStrictEqual(copy.stats, machine.stats);
      assert.deepStrictEqual(copy.report(), machine.report());
      restored += 1;
      return copy;
    };
    const straight = drive(scenario);
    const resumed = drive(scenario, { between: throughASnapshot });
    assert.ok(restored > 0);
    assert.ok(restored >= straight.report.steps, `${restored} restores for ${straight.report.steps} steps`);
    assert.deepStrictEqual(resumed.path, straight.path);
    assert.deepStrictEqual(resumed.report, straight.report);
    assert.equal(resumed.machine.explain(), straight.machine.explain());
  });
}

test('a snapshot taken with commands pending keeps them', () => {
  const m = new Machine({ completion_requires: ['write_file'] }, { task: 'plan' });
  m.handle({ model_turn: { text: 'I will write it.', needs_more_work: false } });
  // A refused claim queues the nudge, then the next model call.
  const copy = Machine.restore(m.snapshot());
  const nudge = m.nextCommand();
  assert.equal(nudge.command, 'nudge');
  assert.deepStrictEqual(copy.nextCommand(), nudge);
  const call = { command: 'call_model', delay_ms: 0, tools: true };
  assert.deepStrictEqual(copy.nextCommand(), call);
  assert.deepStrictEqual(m.nextCommand(), call);
  assert.equal(copy.nextCommand(), null);
  assert.equal(m.nextCommand(), null);
});

test('a live machine explains where it is and reports its counters so far', () => {
  const m = new Machine(null, { task: 't', name: 'live' });
  assert.equal(m.nextCommand().command, 'call_model');
  assert.equal(m.handle({ model_turn: { tool_calls: [{ name: 'read_file', arguments: {} }] } }), 'step');
  const text = m.explain();
  assert.match(text, /status {4}running/);
  assert.match(text, /it is at step 1, waiting for the tool call\(s\) read_file/);
  const report = m.report();
  assert.equal(report.outcome, null);
  assert.equal(report.reason, null);
  assert.equal(report.steps, 1);
  assert.equal(report.model_calls, 1);
  assert.deepStrictEqual(m.nextCommand(), {
    command: 'run_tools',
    calls: [{ id: 'call-1-0', name: 'read_file', arguments: {} }],
  });
});

test('the ES module entry point gives the same Machine', async () => {
  const esm = await import('../index.mjs');
  assert.equal(esm.Machine, Machine);
  assert.equal(esm.default.Machine, Machine);
  assert.equal(typeof esm.runScenario, 'function');
});
