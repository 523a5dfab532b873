'use strict';
// Every conformance scenario driven through the Node `Machine` by a JS host of the scenario
// format gives the run `terminus run --json` gives: outcome, reason, rule, counters, result,
// trace, journal entries; `explain()` is the text `terminus inspect` prints for it; and
// `runScenario` is `terminus run --json` but the execution id.

const test = require('node:test');
const assert = require('node:assert/strict');
const { execFileSync, spawnSync } = require('node:child_process');
const { basename } = require('node:path');
const { runScenario } = require('..');
const { SCENARIOS, drive, load, terminusBinary, unsupported } = require('./scenario_driver.js');

// The report's fields a run decides (all but the execution id, which names a journal, and
// `context` and `context_prunes`, the runtime's window statistics).
const COMPARED = [
  'outcome', 'reason', 'rule', 'steps', 'model_calls', 'tool_calls', 'nudges',
  'verification_failures', 'no_ops', 'empty_responses', 'excluded_tools', 'entries',
  'duplicates_prevented', 'result', 'todos', 'stats', 'trace', 'warnings', 'tool_budget_events',
];

// `terminus inspect`'s text without its `context window:` section: what the runtime's window did
// (prunes, cut results) is the runtime's own, and this host keeps no window.
const withoutWindow = (text) => text.replace(/\ncontext window:\n(?: {2}.*\n)*/, '');

const pick = (report) => Object.fromEntries(COMPARED.map((k) => [k, report[k] === undefined ? null : report[k]]));

const binary = terminusBinary();
const printed = new Map();
/** `terminus run PATH --json`'s last line, parsed (cached per scenario). */
function cliReport(path) {
  if (!printed.has(path)) {
    const done = spawnSync(binary, ['run', path, '--json'], { encoding: 'utf8', timeout: 120_000 });
    assert.ok(done.status === 0 || done.status === 1, `terminus run ${path}: exit ${done.status}: ${done.stderr}`);
    const lines = done.stdout.trim().split('\n');
    const report = JSON.parse(lines[lines.length - 1]);
    assert.equal(done.status, report.outcome === 'complete' ? 0 : 1);
    printed.set(path, report);
  }
  return structuredClone(printed.get(path));
}

test('the suite is there', () => {
  assert.ok(SCENARIOS.length >= 40, `${SCENARIOS.length} scenarios`);
  const skipped = SCENARIOS.filter((p) => unsupported(load(p)) !== null);
  for (const p of skipped) console.log(`not driven by hand: ${basename(p)}: ${unsupported(load(p))}`);
  // Only these: the run a context window ends, and the recordings of jobs (MCP tasks).
  assert.deepStrictEqual(skipped.map((p) => basename(p)).sort(), [
    'context-exhausted.json',
    'task-cancelled.json',
    'task-waited-for.json',
  ]);
});

for (const path of SCENARIOS) {
  const name = basename(path, '.json');
  const scenario = load(path);
  const why = unsupported(scenario);
  const skip = why === null ? false : `${name}.json: ${why}`;

  test(`${name}: the Machine by hand gives the report of the runtime`, { skip }, () => {
    const byHand = drive(scenario).report;
    const byRuntime = runScenario(path);
    assert.ok(!('execution' in byRuntime));
    assert.ok(['complete', 'aborted'].includes(byHand.outcome), byHand.outcome);
    assert.deepStrictEqual(pick(byHand), pick(byRuntime));
    const expect = scenario.expect || {};
    for (const key of ['outcome', 'reason', 'rule', 'result']) {
      if (key in expect) assert.deepStrictEqual(byHand[key], expect[key], key);
    }
  });

  test(`${name}: the Machine by hand gives the report of terminus run --json`, { skip: skip || (binary === null && 'no `terminus` binary: build it with `cargo build -p terminus-cli` or set TERMINUS_BIN') }, () => {
    assert.deepStrictEqual(pick(drive(scenario).report), pick(cliReport(path)));
  });

  test(`${name}: runScenario is terminus run --json`, { skip: binary === null && 'no `terminus` binary' }, () => {
    const fromCli = cliReport(path);
    assert.ok(fromCli.execution, 'the command line names its execution');
    delete fromCli.execution;
    assert.deepStrictEqual(runScenario(path), fromCli);
  });

  test(`${name}: explain() is what terminus inspect prints`, { skip: skip || (binary === null && 'no `terminus` binary') }, () => {
    const text = execFileSync(binary, ['inspect', '--scenario', path], { encoding: 'utf8', timeout: 120_000 });
    assert.equal(drive(scenario).machine.explain(), withoutWindow(text));
  });
}

test('runScenario takes the scenario as an object too, and names a bad one', () => {
  const path = SCENARIOS.find((p) => basename(p) === 'explicit-done.json');
  assert.ok(path);
  const scenario = load(path);
  assert.deepStrictEqual(runScenario(scenario), runScenario(path));
  assert.throws(() => runScenario({ ...scenario, policy: { max_stpes: 1 } }), (e) => e instanceof Error && /max_stpes/.test(e.message));
  assert.throws(() => runScenario({ task: 1n }), (e) => e instanceof Error && e.message.startsWith('scenario.task: a bigint is not JSON'));
  assert.throws(() => runScenario('/nonexistent/scenario.json'), Error);
});
