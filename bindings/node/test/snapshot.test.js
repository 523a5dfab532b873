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

// A run whose only tool needs a person's approval (docs/approvals.md): the host holds the call,
// keeps only the snapshot while it waits (the suspension), restores it and feeds the decision
// as the call's result. Returns the stopped machine and how often the model asked for the tool.
function heldRun(decide) {
  let m = new Machine(undefined, { task: 'Drop the staging database.' });
  assert.equal(m.nextCommand().command, 'call_model');
  let asked = 0;
  const ask = () => {
    asked += 1;
    m.handle({ model_turn: { tool_calls: [
      { id: `drop-${asked}`, name: 'drop_database', arguments: { name: `staging-${asked}` } }] } });
  };
  ask();
  for (;;) {
    const command = m.nextCommand();
    assert.ok(command, `the machine waits in ${m.phase} with no command`);
    if (command.command === 'nudge' || command.command === 'notice') continue;
    if (command.command === 'stop') return { m, asked };
    if (command.command === 'call_model') {
      if (asked < 3) ask();
      else m.handle({ model_turn: { text: 'Done.', needs_more_work: false } });
      continue;
    }
    assert.equal(command.command, 'run_tools');
    const held = command.calls;
    // Suspended: only the snapshot survives until a person decides.
    const text = m.snapshot();
    const { phase, stats } = m;
    m = Machine.restore(text);
    assert.equal(m.phase, 'Acting');
    assert.equal(phase, 'Acting');
    assert.deepStrictEqual(m.stats, stats);
    assert.equal(m.nextCommand(), null, 'a restored suspension waits for the results');
    m.handle({ tool_results: held.map(decide) });
  }
}

test('a denied call across a suspension ends the run bounded', () => {
  const { m, asked } = heldRun((c) => ({
    call_id: c.id, name: c.name, error: 'permission_denied', message: 'denied: not on Fridays' }));
  const report = m.report();
  // Denied once, then excluded: the next ask is refused without asking anyone.
  assert.equal(report.outcome, 'aborted');
  assert.equal(report.reason, 'tool_failures');
  assert.equal(report.stats.tool_failures, 1);
  assert.ok(report.stats.refused_calls >= 1);
  assert.equal(asked, 2);
});

test('an approved call across a suspension runs and the run goes on', () => {
  const { m, asked } = heldRun((c) => ({ call_id: c.id, name: c.name, ok: 'dropped' }));
  const report = m.report();
  assert.equal(report.outcome, 'complete');
  assert.equal(report.stats.tool_calls, 3);
  assert.equal(asked, 3);
});

test('the snapshot is the same size after 4x the tool turns: the journal keeps its last steps', () => {
  const policy = { max_steps: 10000, max_model_calls: 10000 };
  const turns = (machine, n) => {
    for (let i = 0; i < n; i++) {
      assert.equal(machine.nextCommand().command, 'call_model');
      machine.handle({
        model_turn: {
          tool_calls: [{ id: `c${i}`, name: 'read', arguments: { i } }],
          usage: { input_tokens: 100 + i, output_tokens: 7 },
        },
      });
      assert.equal(machine.nextCommand().command, 'run_tools');
      machine.handle({ tool_results: [{ call_id: `c${i}`, name: 'read', ok: i }] });
    }
    return machine;
  };
  const short = turns(new Machine(policy), 25).snapshot().length;
  const long = turns(new Machine(policy), 100);
  assert.ok(long.snapshot().length - short < 256, `${short} then ${long.snapshot().length}`);
  const whole = turns(new Machine(policy, { journalSteps: null }), 100);
  assert.ok(whole.snapshot().length > 10 * long.snapshot().length);
  const { trace, ...counts } = long.report();
  const { trace: all, ...wholeCounts } = whole.report();
  assert.deepEqual(counts, wholeCounts);
  assert.deepEqual(trace, all.slice(-16));
  assert.equal(turns(Machine.restore(long.snapshot()), 3).snapshot(), turns(long, 3).snapshot());
  assert.throws(() => new Machine(null, { journalSteps: 0 }), /options\.journalSteps/);
});
