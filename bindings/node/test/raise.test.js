'use strict';
// `Machine#raiseBudgets`: a run a budget stopped goes on with that budget raised, the step the
// stop pre-empted taken once, on the path `terminus resume --raise` takes; a raise the kernel
// refuses throws and changes nothing.

const test = require('node:test');
const assert = require('node:assert/strict');
const { Machine } = require('..');

const TURNS = [
  ...[0, 1, 2, 3, 4].map((i) => ({ tool_calls: [{ id: `c${i}`, name: 'read', arguments: { file: i } }] })),
  { text: 'All five files read.', needs_more_work: false },
];

/** Answers the machine's commands until it waits for nothing; the commands it gave. */
function answer(machine, turns) {
  const seen = [];
  for (let command = machine.nextCommand(); command !== null; command = machine.nextCommand()) {
    seen.push(command.command);
    if (command.command === 'call_model') {
      machine.handle({ model_turn: turns.shift() });
    } else if (command.command === 'run_tools') {
      machine.handle({ tool_results: command.calls.map((c) => ({ call_id: c.id, name: c.name, ok: 'contents' })) });
    }
  }
  return seen;
}

function stopped() {
  const machine = new Machine({ max_steps: 6 }, { task: 'Read the five files.', name: 'raise' });
  const turns = [...TURNS];
  assert.equal(answer(machine, turns).at(-1), 'stop');
  const report = machine.report();
  assert.deepStrictEqual([report.reason, report.steps, report.tool_calls], ['max_steps', 6, 3]);
  return { machine, turns };
}

test('a raised machine takes the pre-empted step and finishes', () => {
  const { machine, turns } = stopped();
  assert.equal(machine.raiseBudgets({ max_steps: 40 }), 'step');
  assert.equal(machine.phase, 'Exploring');
  assert.equal(answer(machine, turns)[0], 'call_model');
  const report = machine.report();
  assert.equal(report.outcome, 'complete');
  assert.deepStrictEqual([report.tool_calls, report.model_calls, report.steps], [5, 6, 12]);
  const raised = report.trace[6];
  assert.deepStrictEqual([raised.from, raised.input, raised.rule], ['Aborted', 'raise', 'tool_results_back']);
  assert.match(machine.explain(), /raised max_steps=40/);
  assert.deepStrictEqual(Machine.restore(machine.snapshot()).report(), report);
});

test('a refused raise throws and changes nothing', () => {
  const cases = [
    [{ max_model_calls: 99 }, /`max_model_calls` did not stop the run/],
    [{ max_steps: 6 }, /does not raise max_steps \(it is 6\)/],
    [{ max_no_ops: 9 }, /`max_no_ops` is not a budget a raise can lift/],
    [{}, /no budget to raise/],
    [{ max_steps: -1 }, /budgets/],
    [{ max_steps: '40' }, /budgets/],
  ];
  for (const [budgets, says] of cases) {
    const { machine } = stopped();
    const before = machine.snapshot();
    assert.throws(() => machine.raiseBudgets(budgets), says, JSON.stringify(budgets));
    assert.equal(machine.snapshot(), before, JSON.stringify(budgets));
  }
  const live = new Machine({ max_steps: 6 });
  assert.throws(() => live.raiseBudgets({ max_steps: 40 }), /the run has not stopped/);
});
