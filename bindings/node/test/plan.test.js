'use strict';
// Multi-agent plans from Node (`runPlan`): every conformance plan of spec/plans gives the report
// `terminus orchestrate --json` gives (but the wall times); an invalid plan is refused with the
// command line's problems; the host's own functions are started, retried, skipped and degraded
// by the orchestrator; and a process killed mid-plan (SIGKILL) goes on from its kept progress
// without running a completed agent again, its breaker as it was.

const test = require('node:test');
const assert = require('node:assert/strict');
const { spawnSync } = require('node:child_process');
const { mkdtempSync, readFileSync, readdirSync } = require('node:fs');
const { tmpdir } = require('node:os');
const { basename, join } = require('node:path');
const { runPlan, generatePlan, isNonAnswer, PlanError } = require('..');
const { terminusBinary } = require('./scenario_driver.js');

const PLANS = join(__dirname, '..', '..', '..', 'spec', 'plans');
const binary = terminusBinary();

/** The report without its wall times (the only fields two runs of a plan may differ in). */
function timeless(report) {
  const copy = structuredClone(report);
  delete copy.elapsed_ms;
  for (const agent of copy.agents) delete agent.duration_ms;
  return copy;
}

function orchestrate(args) {
  const env = { ...process.env };
  // The plans set the limits they depend on (as the command line's own test runs them).
  for (const name of Object.keys(env)) if (/^(ORCHESTRATOR|AGENT|CIRCUIT_BREAKER)_/.test(name)) delete env[name];
  return spawnSync(binary, ['orchestrate', ...args], { encoding: 'utf8', timeout: 120_000, env });
}

const plans = readdirSync(PLANS).filter((f) => f.endsWith('.json'));

test('the conformance plans are here', () => {
  assert.ok(plans.length >= 9, plans.join(', '));
});

for (const file of plans) {
  test(`${basename(file, '.json')}: runPlan gives terminus orchestrate's report`, async () => {
    const path = join(PLANS, file);
    const done = orchestrate([path, '--json', '--execution', 'conformance']);
    assert.ok(done.status === 0 || done.status === 1, `exit ${done.status}: ${done.stderr}`);
    const cli = JSON.parse(done.stdout.trim().split('\n').pop());
    const lines = [];
    const report = await runPlan(path, { execution: 'conformance', onEvent: (e) => lines.push(e.line) });
    assert.deepEqual(timeless(report), timeless(cli));
    assert.equal(done.status, report.outcome === 'complete' ? 0 : 1);
    // The progress lines are the command line's (its stderr, without the plan times), as many.
    const printed = done.stderr
      .split('\n')
      .map((l) => /^\[\s*\d+ ms\] (.*)$/.exec(l)?.[1])
      .filter((l) => l !== undefined);
    assert.equal(lines.length, printed.length, `${lines.join('\n')}\n---\n${printed.join('\n')}`);
    // A time warning says when it was given: a wall time.
    const masked = (l) => l.replace(/^warning: \d+ ms of/, 'warning: N ms of');
    for (const line of lines.map(masked)) {
      assert.ok(printed.map(masked).includes(line), `${line} not in:\n${printed.join('\n')}`);
    }
  });
}

const invalid = readdirSync(join(PLANS, 'invalid')).filter((f) => f.endsWith('.json'));

for (const file of invalid) {
  test(`invalid/${basename(file, '.json')}: runPlan refuses it with the command line's problems`, async () => {
    const path = join(PLANS, 'invalid', file);
    const done = orchestrate([path, '--json']);
    assert.equal(done.status, 2, done.stderr);
    const prefix = `terminus: ${path}: `;
    const expected = done.stderr
      .split('\n')
      .filter((l) => l.startsWith(prefix) && !l.endsWith('problem(s); nothing was run'))
      .map((l) => l.slice(prefix.length));
    assert.ok(expected.length > 0, done.stderr);
    let called = 0;
    await assert.rejects(
      runPlan(path, { onEvent: () => called++ }),
      (e) => e instanceof PlanError && e.code === 'InvalidArg' && assert.deepEqual(e.problems, expected) === undefined,
    );
    assert.equal(called, 0, 'nothing ran');
  });
}

test('host functions: results flow through tasks, a failing skip agent degrades, a retryable one is retried', async () => {
  const calls = {};
  const count = (id) => (calls[id] = (calls[id] ?? 0) + 1);
  const report = await runPlan(
    {
      name: 'research',
      limits: { agent_max_retries: 2, agent_retry_base_delay_ms: 1 },
      agents: [
        { id: 'research', task: 'Research {topic}.', retryable: true },
        { id: 'reviews', on_error: 'skip', degraded_result: 'no reviews', task: 'Read the reviews.' },
        { id: 'summary', depends_on: ['research', 'reviews'], task: 'Summarize {research} and {reviews}.' },
      ],
    },
    {
      agents: {
        research: async (_task, context) => {
          count('research');
          if (context.attempt === 1) throw new Error('rate limited');
          context.used.model_calls = 2;
          return 'three findings';
        },
        reviews: async () => {
          count('reviews');
          throw new Error('the reviews site is down');
        },
        summary: (task, context) => {
          count('summary');
          assert.ok(context.grant.deadline_ms > 0);
          return { text: task, attempt: context.attempt };
        },
      },
    },
  );
  assert.deepEqual(calls, { research: 2, reviews: 1, summary: 1 });
  assert.equal(report.outcome, 'complete');
  assert.equal(report.reason, 'degraded');
  const [research, reviews, summary] = report.agents;
  assert.deepEqual([research.status, research.attempts], ['complete', 2]);
  assert.deepEqual([reviews.status, reviews.error, reviews.result], ['degraded', 'the reviews site is down', 'no reviews']);
  assert.deepEqual(summary.result, { text: 'Summarize three findings and no reviews.', attempt: 1 });
  assert.equal(summary.degraded_input, true);
  assert.deepEqual(report.used, { model_calls: 2, tokens: 0 });
});

test('a text result that hands the task back, or empty text, is a failed attempt; data is taken as it is', async () => {
  const replies = ["I'm sorry, I don't understand. Could you please provide more details?", '  ', 'The sum is 5.'];
  const plan = {
    name: 'answers',
    limits: { agent_max_retries: 3, agent_retry_base_delay_ms: 1 },
    agents: [
      { id: 'sum', task: 'Sum 2 and 3.', retryable: true },
      { id: 'once', task: 'Say hello.', on_error: 'skip', degraded_result: 'no greeting' },
      { id: 'data', task: 'Give the rows.' },
    ],
  };
  const report = await runPlan(plan, {
    agents: {
      sum: async () => replies.shift(),
      once: async () => 'Please provide the name of the person to greet.',
      data: async () => ({ rows: [], text: '' }),
    },
  });
  assert.equal(replies.length, 0);
  const [sum, once, data] = report.agents;
  assert.deepEqual([sum.status, sum.attempts, sum.result], ['complete', 3, 'The sum is 5.']);
  assert.deepEqual([once.status, once.result], ['degraded', 'no greeting']);
  assert.equal(once.error, 'the result is not an answer (it hands the task back): "Please provide the name of the person to greet."');
  assert.deepEqual([data.status, data.result], ['complete', { rows: [], text: '' }]);
});

test('a function past its deadline fails and is told through its signal; the host cancels with a signal', async () => {
  let aborted = null;
  const report = await runPlan(
    { name: 'slow', agents: [{ id: 'slow', estimated_duration_ms: 1, task: 'wait' }] },
    {
      agents: {
        slow: (_task, context) =>
          new Promise((resolve) => {
            context.signal.addEventListener('abort', () => {
              aborted = context.signal.reason.message;
              setTimeout(() => resolve('too late'), 10);
            });
          }),
      },
    },
  );
  assert.equal(report.reason, 'agent_failed');
  assert.match(report.agents[0].error, /^the agent outlived its deadline of \d+ ms$/);
  assert.equal(aborted, report.agents[0].error);

  const controller = new AbortController();
  const cancelled = await runPlan(
    { name: 'cancel', agents: [{ id: 'wait', task: 'wait' }, { id: 'next', depends_on: ['wait'], task: 'next' }] },
    {
      signal: controller.signal,
      agents: {
        wait: (_task, context) => {
          setTimeout(() => controller.abort(), 20);
          return new Promise((resolve) => context.signal.addEventListener('abort', () => resolve('late')));
        },
        next: () => assert.fail('nothing starts once the plan is cancelled'),
      },
    },
  );
  assert.equal(cancelled.reason, 'cancelled');
  assert.deepEqual(
    cancelled.agents.map((a) => [a.id, a.status]),
    [['wait', 'failed'], ['next', 'not_run']],
  );
});

test('bad options and bad results are named', async () => {
  const plan = { name: 'p', agents: [{ id: 'a', task: 'x' }] };
  await assert.rejects(runPlan(plan), (e) => e instanceof PlanError && /agent `a` has no scenario: give it a function/.test(e.problems[0]));
  await assert.rejects(runPlan(plan, { agents: { a: 'no' } }), /options\.agents\.a: must be a function/);
  await assert.rejects(runPlan(plan, { agents: { a: () => 1, b: () => 2 } }), (e) => e instanceof PlanError && e.problems[0] === 'a function for `b`: the plan has no agent `b`');
  await assert.rejects(runPlan({ name: 'p', agents: [{ id: 'a', agent: 'live.toml', task: 'x' }] }), (e) => /\$\.agents\[0\]\.agent: a live agent config runs under `terminus orchestrate`/.test(e.message));
  await assert.rejects(
    runPlan(plan, { agents: { a: () => 1 }, progress: { execution: 'other', cells: {} } }),
    (e) => e instanceof PlanError && e.problems[0] === 'progress: $.execution: the progress is of execution `other`, not `p`',
  );
  const report = await runPlan(plan, { agents: { a: () => ({ at: new Date(0) }) } });
  assert.equal(report.reason, 'agent_failed');
  assert.match(report.agents[0].error, /^the result of a\.at: a Date is not JSON/);
});

/**
 * Runs plan_child.js killed inside `analyse`, then again to its end (`where` is the progress
 * file, or the journal with `journal` set), and checks the calls over both processes.
 */
function killAndResume(where, { journal = false, execution = 'resume-1', flaky = 'flaky', afterKill = () => {} } = {}) {
  const dir = mkdtempSync(join(tmpdir(), 'terminus-plan-'));
  const calls = join(dir, 'calls.txt');
  const child = join(__dirname, 'plan_child.js');
  const env = { ...process.env, PLAN_EXECUTION: execution, PLAN_FLAKY: flaky, ...(journal ? { PLAN_JOURNAL: '1' } : {}) };
  delete env.KILL_IN;
  if (!journal) delete env.PLAN_JOURNAL;
  const first = spawnSync(process.execPath, [child, where, calls], {
    encoding: 'utf8',
    timeout: 60_000,
    env: { ...env, KILL_IN: 'analyse' },
  });
  assert.equal(first.signal, 'SIGKILL', first.stderr);
  assert.deepEqual(readFileSync(calls, 'utf8').trim().split('\n').sort(), ['analyse', 'collect', 'flaky']);
  afterKill();

  const second = spawnSync(process.execPath, [child, where, calls], { encoding: 'utf8', timeout: 60_000, env });
  assert.equal(second.status, 0, second.stderr);
  const report = JSON.parse(second.stdout.trim().split('\n').pop());
  const count = {};
  for (const id of readFileSync(calls, 'utf8').trim().split('\n')) count[id] = (count[id] ?? 0) + 1;
  // `collect` completed before the kill: it is not called again, and its result still reaches
  // `analyse` (whose attempt was cut by the kill: it runs again, told it resumes).
  assert.equal(count.collect, 1);
  assert.equal(count.analyse, 2);
  const byId = Object.fromEntries(report.agents.map((a) => [a.id, a]));
  assert.equal(byId.collect.result, '3 sources');
  assert.equal(byId.analyse.result, 'analysis of Analyse 3 sources');
  // `flaky` failed once before the kill and once after: the second failure in a row opens its
  // breaker (threshold 2), so no third attempt, though 5 retries were allowed.
  assert.equal(count.flaky, 2);
  assert.deepEqual([byId[flaky].status, byId[flaky].attempts], ['failed', 2]);
  assert.ok(second.stderr.includes(`breaker ${flaky}: closed -> open`), second.stderr);
  assert.equal(report.reason, 'agent_failed');
  return { report, calls, child, env };
}

test('a process killed mid-plan (SIGKILL) goes on from its progress: nothing completed runs again, the breaker is as it was', () => {
  const dir = mkdtempSync(join(tmpdir(), 'terminus-plan-'));
  const progress = join(dir, 'progress.json');
  killAndResume(progress, {
    afterKill: () => {
      const kept = JSON.parse(readFileSync(progress, 'utf8'));
      assert.deepEqual(kept.cells['breaker/flaky'], { state: 'closed', failures: 1 });
    },
  });
});

/** A plan that ended, run again on its journal: no function is called, the same report. */
function endedRunsNothing({ report, calls, child, env }, where) {
  const before = readFileSync(calls, 'utf8');
  const third = spawnSync(process.execPath, [child, where, calls], { encoding: 'utf8', timeout: 60_000, env });
  assert.equal(third.status, 0, third.stderr);
  assert.equal(readFileSync(calls, 'utf8'), before, 'nothing called again');
  assert.deepEqual(JSON.parse(third.stdout.trim().split('\n').pop()), report);
}

test('a process killed mid-plan goes on from its SQLite journal (the keys of terminus orchestrate); an ended plan gives its report again', () => {
  const journal = join(mkdtempSync(join(tmpdir(), 'terminus-plan-')), 'plans.db');
  endedRunsNothing(killAndResume(journal, { journal: true }), journal);
});

test('a process killed mid-plan goes on from its PostgreSQL journal', (t) => {
  const url = process.env.TERMINUS_PG_URL;
  if (!url) return t.skip('TERMINUS_PG_URL is unset: the PostgreSQL journal is not tried');
  // Its own execution and breaker: the database outlives the test.
  const unique = `${process.pid}-${Date.now()}`;
  endedRunsNothing(killAndResume(url, { journal: true, execution: `resume-${unique}`, flaky: `flaky-${unique}` }), url);
});

test('a journal that cannot be opened, or given with progress, is named; nothing runs', async () => {
  const plan = { name: 'p', agents: [{ id: 'a', task: 'x' }] };
  let called = 0;
  const agents = { a: () => (called++, 1) };
  const dir = mkdtempSync(join(tmpdir(), 'terminus-plan-'));
  await assert.rejects(
    runPlan(plan, { agents, journal: join(dir, 'no', 'such', 'folder', 'plans.db') }),
    (e) => e instanceof PlanError && /^options\.journal: /.test(e.message) && /^journal `/.test(e.problems[0]),
  );
  await assert.rejects(
    runPlan(plan, { agents, journal: join(dir, 'plans.db'), progress: { execution: 'p', cells: {} } }),
    (e) => e instanceof PlanError && e.problems[0] === 'journal: give it or `progress`, not both: the journal keeps the progress',
  );
  await assert.rejects(runPlan(plan, { agents, journal: 3 }), /options\.journal: must be/);
  assert.equal(called, 0);
});

// Seed 001's shape (orchestrator/tests/generate.rs): a research agent that may be skipped with
// a degraded default, an analysis that retries, a report; here all three are host functions.
const GENERATOR = {
  name: 'seed-001',
  registry: [
    { id: 'research', description: 'Finds sources on the topic.', task: 'Do the research part.', on_error: 'skip', degraded_result: [] },
    { id: 'analysis', description: 'Analyses what research found.', task: 'Do the analysis part.', retryable: true },
    { id: 'report', description: 'Writes the report.', task: 'Do the report part.' },
  ],
  generator: { max_attempts: 3 },
  fallback: [{ id: 'research' }, { id: 'report', depends_on: ['research'], task: 'Report on {research}' }],
};
const CYCLE = JSON.stringify({ agents: [
  { id: 'research', depends_on: ['report'] },
  { id: 'analysis', depends_on: ['research'], task: 'Analyse {research}' },
  { id: 'report', depends_on: ['analysis'], task: 'Report on {analysis}' },
] });
const MISSING = JSON.stringify({ agents: [
  { id: 'analysis', depends_on: ['research'], task: 'Analyse {research}' },
  { id: 'report', depends_on: ['analysis'] },
] });
const VALID = 'Here is the plan:\n```json\n' + JSON.stringify({ agents: [
  { id: 'research', depends_on: [], task: 'Find sources on the site.' },
  { id: 'analysis', depends_on: ['research'], task: 'Analyse {research}' },
  { id: 'report', depends_on: ['analysis'], task: 'Report on {analysis}' },
] }) + '\n```';
const FUNCTIONS = {
  research: async () => 'sources: a, b',
  analysis: async (task) => `findings of [${task}]`,
  report: async (task) => `report of [${task}]`,
};

test('generatePlan: a cycle, then a missing dependency, are named back to the model; the valid plan runs', async () => {
  const replies = [CYCLE, MISSING, VALID];
  const asked = [];
  const { plan, generation, report } = await generatePlan(GENERATOR, 'Audit the site.', {
    model: async (messages) => {
      asked.push(messages);
      return replies.shift();
    },
  });
  assert.equal(report, null);
  assert.equal(generation.source, 'after_feedback');
  assert.equal(generation.attempts, 3);
  assert.deepEqual(generation.rejections.map((r) => r.problems), [
    ['cycle: research -> analysis -> report -> research'],
    ['$.agents[0].depends_on[0]: no agent `research` in the plan'],
  ]);
  // The third request holds both rejections, each with its problem.
  const third = asked[2].map((m) => m.content).join('\n');
  assert.ok(third.includes('cycle: research -> analysis -> report -> research'), third);
  assert.ok(third.includes('no agent `research` in the plan'), third);
  const ran = await runPlan(plan, { agents: FUNCTIONS, generation });
  assert.equal(ran.reason, 'all_complete');
  assert.equal(ran.agents[2].result, 'report of [Report on findings of [Analyse sources: a, b]]');
  assert.deepEqual(ran.generation, generation);
});

test('generatePlan: a model that never writes a valid plan ends with the fallback after the bound, or no_valid_plan', async () => {
  let calls = 0;
  const model = async () => {
    calls += 1;
    if (calls === 2) throw new Error('the server is down');
    return CYCLE;
  };
  const fell = await generatePlan(GENERATOR, 'Audit the site.', { model });
  assert.equal(calls, 3, 'max_attempts model calls');
  assert.equal(fell.generation.source, 'fallback');
  assert.deepEqual(fell.generation.rejections.map((r) => r.attempt), [1, 2, 3]);
  assert.ok(fell.generation.rejections[1].problems[0].includes('the server is down'), JSON.stringify(fell.generation.rejections[1]));
  const ran = await runPlan(fell.plan, { agents: { research: FUNCTIONS.research, report: FUNCTIONS.report } });
  assert.deepEqual(ran.agents.map((a) => a.id), ['research', 'report']);
  assert.equal(ran.reason, 'all_complete');

  const { fallback, ...without } = GENERATOR;
  void fallback;
  calls = 0;
  const none = await generatePlan(without, 'Audit the site.', { model: async () => (calls++, MISSING), execution: 'g-1' });
  assert.equal(calls, 3);
  assert.equal(none.plan, null);
  assert.deepEqual([none.report.outcome, none.report.reason, none.report.execution], ['aborted', 'no_valid_plan', 'g-1']);
  assert.equal(none.report.generation.source, 'no_plan');
});

test('generatePlan: a bad generator file is refused before the model is asked, every problem named', async () => {
  let asked = 0;
  const bad = { ...GENERATOR, generator: { max_attempts: 0 }, registry: [{ ...GENERATOR.registry[0], description: ' ' }, ...GENERATOR.registry.slice(1)] };
  await assert.rejects(
    generatePlan(bad, 'Audit the site.', { model: async () => (asked++, VALID) }),
    (e) => e instanceof PlanError && assert.deepEqual(e.problems, [
      '$.registry[0].description: empty: the model chooses agents by their description',
      '$.generator.max_attempts: 0 is out of range 1..=10',
    ]) === undefined,
  );
  await assert.rejects(generatePlan({ registry: 3 }, 'x', { model: async () => '' }), (e) => e instanceof PlanError && /^\$\.registry: /.test(e.problems[0]));
  await assert.rejects(generatePlan(GENERATOR, 'x', {}), /options\.model: must be a function/);
  assert.equal(asked, 0);
});

test('isNonAnswer is the kernel rule: every recorded non-answer is one, answers are not', () => {
  const root = join(__dirname, '..', '..', '..', 'spec', 'eval', 'non-answers');
  const files = readdirSync(root).filter((f) => f.endsWith('.json'));
  assert.ok(files.length >= 29);
  // The replies the recordings ended on hand back on their own, but one: an echo of the kernel's
  // own words, which needs the run's guidance to be seen.
  let handed = 0;
  for (const f of files) {
    const turns = JSON.parse(readFileSync(join(root, f), 'utf8')).model.turns;
    if (isNonAnswer(turns[turns.length - 1].text)) handed += 1;
  }
  assert.ok(handed >= 28, `${handed} of ${files.length}`);
  assert.equal(isNonAnswer("Unfortunately, as a language model, I don't have access to any information about the company."), true);
  assert.equal(isNonAnswer('competitors: BreadCo (48 shops), Loaf & Co (9 shops)'), false);
  assert.equal(isNonAnswer('The sum is 5555. Let me know if you need anything else!'), false);
  assert.throws(() => isNonAnswer(3), /text: must be a string/);
});
