'use strict';
// Seed 001's orchestrator in TypeScript (examples/seed-001/orchestrator.ts), compiled with the
// package's TypeScript (`tsc --strict`) and run on the package offline by examples/seed-001/run.sh: its scripted planner
// writes a cycle, is told so, then writes the plan it meant; the plan's agents run with their
// registry's error handling (the optional `reviews` has no data: skipped), and a second
// invocation of the same execution runs nothing again (the plan and the progress were kept).

const test = require('node:test');
const assert = require('node:assert/strict');
const { spawnSync } = require('node:child_process');
const { mkdtempSync } = require('node:fs');
const { tmpdir } = require('node:os');
const { join } = require('node:path');

const PACKAGE = join(__dirname, '..');
const RUN = join(PACKAGE, '..', '..', 'examples', 'seed-001', 'run.sh');

test('seed 001 in TypeScript: the planner is told of its cycle, the plan runs, a second invocation runs nothing again', () => {
  const dir = mkdtempSync(join(tmpdir(), 'terminus-seed-001-'));
  // The README's words: `bash examples/seed-001/run.sh` (here into a folder of the test's own).
  const run = () => spawnSync('bash', [RUN, '--context', dir, '--execution', 'bakery-1'], {
    encoding: 'utf8',
    timeout: 120_000,
    env: { ...process.env, TERMINUS_SEED_001_OUT: join(dir, 'out') },
  });
  const first = run();
  assert.equal(first.status, 0, first.stderr);
  const report = JSON.parse(first.stdout.trim().split('\n').pop());
  assert.equal(report.generation.source, 'after_feedback');
  assert.deepEqual(report.generation.rejections[0].problems, ['cycle: research -> summary -> research']);
  assert.deepEqual(
    report.agents.map((a) => [a.id, a.status]),
    [['research', 'complete'], ['competitors', 'complete'], ['reviews', 'skipped'], ['risks', 'complete'], ['summary', 'complete']],
  );
  assert.equal(report.reason, 'degraded');
  assert.equal(report.agents[4].result, 'report: Write the report from competitors: BreadCo (48 shops), Loaf & Co (9 shops) and risks: BreadCo opening vegan lines; flour prices');
  assert.match(first.stderr, /terminus: plan after_feedback after 2 model call\(s\)/);

  const second = run();
  assert.equal(second.status, 0, second.stderr);
  const again = JSON.parse(second.stdout.trim().split('\n').pop());
  assert.deepEqual(again.agents.map((a) => [a.id, a.status, a.attempts, a.result]), report.agents.map((a) => [a.id, a.status, a.attempts, a.result]));
  assert.doesNotMatch(second.stderr, /start|plan after_feedback/, 'nothing runs again, the model is not asked again');
});
