'use strict';
// The host suite's data (`spec/hosts`) for the Node hosts' tests: the provider-error cases, the
// conversations, the report fields compared, a provider's failure as the SDKs throw it, and the
// registration of every conversation through one framework adapter.

const test = require('node:test');
const assert = require('node:assert/strict');
const { readFileSync, readdirSync } = require('node:fs');
const { join } = require('node:path');
const { runScenario } = require('terminus-kernel');
const { REPO } = require('./scenario_driver.js');

const read = (...path) => JSON.parse(readFileSync(join(REPO, 'spec', ...path), 'utf8'));
const suite = read('hosts', 'provider-errors.json');
const conversations = read('hosts', 'conversations.json');
/** The report's lists of the journal's last `JOURNAL_STEPS` steps (its counts are the run's). */
const WINDOWED = ['trace', 'tool_budget_events'];
const JOURNAL_STEPS = 16;
const COMPARED = ['outcome', 'reason', 'rule', 'steps', 'model_calls', 'tool_calls', 'nudges', 'verification_failures', 'no_ops', 'empty_responses', 'excluded_tools', 'entries', 'result', 'todos', 'stats', 'trace', 'tool_budget_events'];

/** The status and body of the suite's case of class `kind`. */
const caseOf = (kind) => suite.cases.find((c) => c.kind === kind);

/**
 * A provider's failure of class `kind` as LangChain's and OpenAI's SDKs throw it: an HTTP status
 * and body, the delay asked for as a `retry-after-ms` header, a timeout as a `TimeoutError`.
 */
function providerError(kind, retryAfterMs) {
  if (kind === 'timeout') return Object.assign(new Error('the request timed out'), { name: 'TimeoutError' });
  const { status, text } = caseOf(kind);
  const headers = retryAfterMs == null ? {} : { 'retry-after-ms': String(retryAfterMs) };
  return Object.assign(new Error(text), { status, headers });
}

/** The real model's recorded runs (`terminus eval`: its replies as they came), each with its scenario. */
const recordings = () => {
  const root = join(REPO, 'spec', 'eval', 'recordings');
  const under = (dir) => readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? under(join(dir, e.name)) : [join(dir, e.name)]));
  // Each trial's file (`TASK/CONDITION/N.json`; not the folder's manifest), with its run's scenario.
  const found = under(root).filter((f) => /\/\d+\.json$/.test(f)).sort()
    .map((f) => [f.slice(root.length + 1), JSON.parse(readFileSync(f, 'utf8')).scenario])
    .filter(([, scenario]) => scenario !== undefined);
  assert.ok(found.length >= 30, `${found.length} recordings`);
  return found;
};

/**
 * The thirty replies the real model's `complete` runs once ended on (`spec/eval/non-answers`), each
 * in a run nobody answers (`autonomous`) with the model giving the same reply again and again.
 */
const nonAnswers = () => {
  const root = join(REPO, 'spec', 'eval', 'non-answers');
  const files = readdirSync(root).filter((f) => f.endsWith('.json')).sort();
  assert.equal(files.length, 30, 'the thirty recorded non-answers');
  return files.map((f) => {
    const scenario = JSON.parse(readFileSync(join(root, f), 'utf8'));
    scenario.policy.autonomous = true;
    scenario.model.repeat = 'last';
    return [f, scenario];
  });
};

/**
 * Tool-call arguments as the transcript writes them (`spec/hosts/README.md`): compact JSON with
 * sorted keys; a string that holds JSON is read first, one that does not is itself.
 */
function argumentsText(args) {
  if (typeof args === 'string') {
    let parsed;
    try {
      parsed = JSON.parse(args);
    } catch {
      return args;
    }
    if (typeof parsed === 'string') return args;
    args = parsed;
  }
  const sorted = (v) => (Array.isArray(v) ? v.map(sorted) : v && typeof v === 'object' ? Object.fromEntries(Object.keys(v).sort().map((k) => [k, sorted(v[k])])) : v);
  return JSON.stringify(sorted(args));
}

/**
 * Registers one test per conversation: `play(scenario)` runs it through `framework` and resolves
 * to the report, or to `{ report, sent }` with what the framework's model was sent, call by call,
 * in the transcript's shape. The report must be `runScenario`'s (`terminus run --json`) on every
 * compared field, and `sent` its transcript, every message of every call, but for the
 * conversations `transcriptsLeftOut` names (name -> why); a last test checks that at least
 * `transcriptsAtLeast` runs had their transcript compared.
 * `skipped`: scenario name -> why it cannot match through this framework (printed).
 */
function throughEvery(framework, play, skipped = {}, skippedRecordings = {}, transcriptsLeftOut = {}, transcriptsAtLeast = 0) {
  const cases = [
    ...conversations.scenarios.map((name) => [`the conversation ${name}`, name, () => JSON.parse(readFileSync(join(REPO, 'spec', 'scenarios', `${name}.json`), 'utf8'))]),
    ...recordings().map(([file, scenario]) => [`the real model's recorded run ${file}`, file.split('/').slice(0, 2).join('/'), () => scenario]),
    ...nonAnswers().map(([file, scenario]) => [`the recorded non-answer ${file}`, `non-answers/${file}`, () => scenario]),
  ];
  let compared = 0; // the runs whose every model call was the transcript's
  for (const [label, name, load] of cases) {
    const why = name && (label.startsWith('the conversation') ? skipped : skippedRecordings)[name];
    test(`${label} through ${framework} gives terminus run's report`, why ? { skip: why } : {}, async () => {
      const scenario = load();
      const { report: expected, transcript } = runScenario(scenario, { transcript: true });
      const played = await play(scenario);
      const got = played && played.report !== undefined ? played.report : played;
      if (played && played.sent !== undefined && !transcriptsLeftOut[name]) {
        // What the model was sent, call by call, every message: what `terminus run` sends.
        assert.equal(played.sent.length, transcript.length, `${label}: model calls`);
        played.sent.forEach((call, i) => assert.deepEqual(call, transcript[i], `${label}: model call ${i + 1}`));
        compared += 1;
      }
      assert.ok(got && got.outcome, `${label}: the run gave no report`);
      // The host keeps the journal's last steps (a snapshot that does not grow with the run): the
      // windowed lists are the whole run's entries from the first step it kept on, every one.
      const from = got.trace && got.trace.length ? got.trace[0].step : 0;
      for (const key of COMPARED) {
        if (WINDOWED.includes(key)) {
          assert.equal(key in got, key in expected, `${label}: \`${key}\` present`);
          const [part, whole] = [got[key] || [], expected[key] || []];
          assert.deepEqual(part, whole.filter((e) => e.step >= from), `${label}: \`${key}\``);
        } else {
          assert.deepEqual(got[key], expected[key], `${label}: \`${key}\``);
        }
      }
      assert.equal(got.trace.length, Math.min(expected.trace.length, JOURNAL_STEPS), `${label}: the trace's window`);
      if (label.startsWith('the recorded non-answer')) {
        // Never accepted: the run ends `no_progress`, the replies counted as non-answers.
        assert.equal(expected.reason, 'no_progress', label);
        assert.ok(expected.stats.non_answers >= 1, label);
        assert.notEqual(expected.result, scenario.model.turns.at(-1).text, label);
      }
    });
  }
  // Registered last, so it runs after every run above (a file's tests run in order).
  test(`${framework} sent the model what terminus run sends in at least ${transcriptsAtLeast} runs`, () => {
    assert.ok(compared >= transcriptsAtLeast, `${compared} runs had their transcript compared`);
  });
}

module.exports = { suite, conversations, COMPARED, caseOf, providerError, throughEvery, argumentsText };
