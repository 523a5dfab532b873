'use strict';
// Bad input never crashes the process and never half-applies: a malformed event throws an
// `Error` naming its JSON path and leaves the machine exactly as it was; a policy error names the
// field; a bad snapshot or scenario throws an `Error` too.

const test = require('node:test');
const assert = require('node:assert/strict');
const { join } = require('node:path');
const { Machine } = require('..');
const { REPO, drive, load } = require('./scenario_driver.js');

/** A small deterministic generator (mulberry32), so a failure can be replayed by its seed. */
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const KEYS = ['text', 'tool_calls', 'name', 'id', 'arguments', 'call_id', 'ok', 'error', 'message',
  'kind', 'complete', 'feedback', 'usage', 'input_tokens', 'output_tokens', 'finish',
  'needs_more_work', 'retry_after_ms', 'missing', 'x', ''];
const EVENT_KEYS = ['model_turn', 'model_error', 'tool_results', 'verdict', 'tick', 'cancel', 'nope'];
const WORDS = ['stop', 'length', 'rate_limited', 'not_found', 'failed', 'write_todos', 'call-1-0', 'c1', 'read_file', '', 'é\u0000'];

function generator(seed) {
  const r = rng(seed);
  const pickOne = (xs) => xs[Math.floor(r() * xs.length)];
  const scalar = () => pickOne([
    () => null, () => true, () => false, () => Math.floor(r() * 200) - 50, () => r() * 1e6,
    () => 2 ** 70, () => -(2 ** 64), () => pickOne(WORDS), () => pickOne(WORDS),
    // Not JSON: each must be refused, naming where it is.
    () => NaN, () => Infinity, () => 10n, () => Symbol('s'), () => () => 1, () => new Date(0),
    () => new Map([[1, 2]]), () => undefined,
  ])();
  const value = (depth) => {
    if (depth > 3 || r() < 0.4) return scalar();
    if (r() < 0.35) return Array.from({ length: Math.floor(r() * 4) }, () => value(depth + 1));
    const object = {};
    for (let i = Math.floor(r() * 5); i > 0; i--) object[pickOne(KEYS)] = value(depth + 1);
    return object;
  };
  const event = () => {
    const shape = r();
    if (shape < 0.55) return { [pickOne(EVENT_KEYS)]: value(0) };
    if (shape < 0.7) {
      const e = {};
      for (let i = Math.floor(r() * 3); i > 0; i--) e[pickOne(EVENT_KEYS)] = value(1);
      return e;
    }
    if (shape < 0.8) return value(0);
    if (shape < 0.9) {
      // A cycle, or nesting past any limit.
      const e = { model_turn: { tool_calls: [{ name: 'read_file', arguments: {} }] } };
      if (r() < 0.5) e.model_turn.tool_calls[0].arguments.self = e;
      else {
        let deep = {};
        e.model_turn.tool_calls[0].arguments = deep;
        for (let i = 0; i < 300; i++) deep = deep.a = {};
      }
      return e;
    }
    // Nearly right: a valid event with one field broken.
    const valid = [
      { model_turn: { text: 'hi', tool_calls: [{ id: 'c1', name: 'read_file', arguments: { p: 1 } }] } },
      { tool_results: [{ call_id: 'c1', name: 'read_file', ok: 'x' }] },
      { verdict: { complete: true, missing: [] } },
      { model_error: { kind: 'server', retry_after_ms: 5 } },
    ][Math.floor(r() * 4)];
    const [key] = Object.keys(valid);
    const inner = valid[key];
    const target = Array.isArray(inner) ? inner[0] : inner;
    target[pickOne(Object.keys(target).concat(['x']))] = scalar();
    return valid;
  };
  return event;
}

/** Machines waiting for a model turn, tool results, a verdict, and an ended one. */
function machinesInEveryPhase() {
  const out = [new Machine()];
  const acting = new Machine();
  acting.handle({ model_turn: { tool_calls: [{ id: 'c1', name: 'read_file' }] } });
  out.push(acting);
  const verifying = new Machine({ verify_completion: true });
  verifying.handle({ model_turn: { text: 'done', needs_more_work: false } });
  out.push(verifying);
  out.push(drive(load(join(REPO, 'spec', 'scenarios', 'architect-stops-early.json'))).machine);
  return out;
}

test('any generated event is handled or refused whole, and never crashes the process', () => {
  const machines = machinesInEveryPhase();
  const next = generator(29);
  const counts = { refused: 0, step: 0, observed: 0, ignored: 0 };
  const N = 600;
  for (let i = 0; i < N; i++) {
    const machine = machines[i % machines.length];
    const event = next();
    const before = machine.snapshot();
    let handled;
    try {
      handled = machine.handle(event);
    } catch (e) {
      assert.ok(e instanceof Error, `event ${i}: threw a ${typeof e}`);
      assert.match(e.message, /^event(\.|\[|:)/, `event ${i}: ${e.message}`);
      assert.equal(machine.snapshot(), before, `event ${i} changed the machine: ${e.message}`);
      counts.refused += 1;
      continue;
    }
    assert.ok(['step', 'observed', 'ignored'].includes(handled), handled);
    counts[handled] += 1;
    // Whatever it did, the machine is still one the kernel can save and restore.
    assert.equal(Machine.restore(machine.snapshot()).snapshot(), machine.snapshot());
    while (machine.nextCommand() !== null);
  }
  // The generator reaches both sides: most events are refused, some are taken.
  assert.ok(counts.refused > N / 2, JSON.stringify(counts));
  assert.ok(counts.step + counts.observed + counts.ignored > 0, JSON.stringify(counts));
});

const CASES = [
  [{ model_turn: { txt: 'hi' } }, 'event.model_turn.txt: unknown field'],
  [{ model_turn: { text: 3 } }, 'event.model_turn.text: invalid type: integer `3`, expected a string'],
  [{ model_turn: { tool_calls: [{ id: 'a' }] } }, 'event.model_turn.tool_calls[0]: missing field `name`'],
  [{ model_turn: { usage: { input_tokens: 1 } } }, 'event.model_turn.usage: missing field `output_tokens`'],
  [{ model_turn: { finish: 'refusal' } }, 'event.model_turn.finish: unknown variant `refusal`'],
  [{ model_error: { kind: 'teapot' } }, 'event.model_error.kind: unknown variant `teapot`'],
  [{ tool_results: [{ call_id: 'c', name: 't' }] }, 'event.tool_results[0]: needs `ok` or `error`'],
  [{ tool_results: [{ call_id: 'c', name: 't', ok: 1, error: 'failed' }] }, 'event.tool_results[0]: has both'],
  [{ tool_results: [{ call_id: 'c', name: 't', error: 'boom' }] }, 'event.tool_results[0].error: unknown variant `boom`'],
  [{ verdict: { complete: 'yes' } }, 'event.verdict.complete: '],
  [{ tick: -1 }, 'event.tick: '],
  [{ tick: 1.5 }, 'event.tick: '],
  [{ cancel: false }, 'event.cancel: must be true'],
  [{ shout: 1 }, 'event: unknown variant `shout`'],
  [{}, 'event: '],
  ['cancel', 'event.cancel: invalid type: unit variant'],
  // What is not JSON at all, named where it is.
  [{ model_turn: { text: () => 'hi' } }, 'event.model_turn.text: a function is not JSON'],
  [{ tick: 10n }, 'event.tick: a bigint is not JSON'],
  [{ tick: NaN }, 'event.tick: NaN is not a JSON number'],
  [{ tool_results: [{ call_id: 'c', name: 't', ok: [1, undefined] }] }, 'event.tool_results[0].ok[1]: undefined is not JSON'],
  [{ tool_results: [{ call_id: 'c', name: 't', ok: new Date(0) }] }, 'event.tool_results[0].ok: a Date is not JSON'],
  [{ model_turn: { tool_calls: [{ name: 'x', arguments: { s: Symbol('s') } }] } }, 'event.model_turn.tool_calls[0].arguments.s: a symbol is not JSON'],
  [undefined, 'event: a undefined is not JSON'],
];

test('a malformed event names its path and changes nothing', () => {
  for (const [event, message] of CASES) {
    const machine = new Machine();
    const before = machine.snapshot();
    assert.throws(() => machine.handle(event), (e) => {
      assert.ok(e instanceof Error);
      assert.ok(e.message.startsWith(message), `${e.message} does not start with ${message}`);
      return true;
    });
    assert.equal(machine.snapshot(), before);
  }
});

test('a cycle or a too deep value is refused, not recursed into', () => {
  const machine = new Machine();
  const before = machine.snapshot();
  const event = { model_turn: { tool_calls: [{ name: 'x', arguments: {} }] } };
  event.model_turn.tool_calls[0].arguments.again = event;
  assert.throws(() => machine.handle(event), /^Error: event\.model_turn\.tool_calls\[0\]\.arguments\.again(\.model_turn\.tool_calls\[0\]\.arguments\.again)*.*: nested deeper than 128 levels$/);
  let deep = [];
  const root = { tool_results: [{ call_id: 'c', name: 't', ok: deep }] };
  for (let i = 0; i < 100_000; i++) deep = deep[0] = [];
  assert.throws(() => machine.handle(root), /nested deeper than 128 levels/);
  assert.equal(machine.snapshot(), before);
});

test('an unexpected event is ignored and counted', () => {
  const machine = new Machine();
  assert.equal(machine.handle({ verdict: { complete: true } }), 'ignored');
  assert.equal(machine.stats.ignored_events, 1);
  assert.equal(machine.stats.steps, 0);
  assert.equal(machine.handle({ tick: 5 }), 'observed');
  assert.equal(machine.handle({ cancel: true }), 'step');
  assert.equal(machine.phase, 'Aborted');
  assert.equal(machine.handle({ model_turn: { text: 'late' } }), 'ignored');
  // The queued call_model of the start, then the stop.
  let command;
  while ((command = machine.nextCommand()) !== null && command.command !== 'stop');
  assert.equal(command.command, 'stop');
  assert.equal(command.report.reason, 'cancelled');
});

const POLICIES = [
  [{ max_stpes: 3 }, 'policy.max_stpes: unknown field'],
  [{ max_steps: 'ten' }, 'policy.max_steps: '],
  [{ max_steps: -1 }, 'policy.max_steps: '],
  [{ max_steps: 0 }, 'policy.max_steps: must be at least 1, got 0'],
  [{ max_repeats: 1 }, 'policy.max_repeats: must be at least 2, got 1'],
  [{ verify_completion: 'yes' }, 'policy.verify_completion: '],
  [{ on_verification_limit: 'shrug' }, 'policy.on_verification_limit: unknown variant `shrug`'],
  [{ completion_requires: 'write_file' }, 'policy.completion_requires: '],
  [{ tool_budgets: { read: { warn_at: 5, block_at: 2 } } }, 'policy.tool_budgets.read.warn_at: must not exceed block_at (2)'],
  [{ tool_budgets: { read: { block: 2 } } }, 'policy.tool_budgets.read.block: unknown field'],
  [{ retry_base_ms: 10, retry_max_ms: 5 }, 'policy.retry_max_ms: must be at least retry_base_ms (10)'],
  ['max_steps', 'policy: '],
  [{ max_steps: Infinity }, 'policy.max_steps: Infinity is not a JSON number'],
];

test('a policy error names the field', () => {
  for (const [policy, message] of POLICIES) {
    assert.throws(() => new Machine(policy), (e) => e instanceof Error && e.message.startsWith(message) || assert.fail(`${e.message} !~ ${message}`));
  }
});

test('policy fields and defaults are the scenario format', () => {
  assert.equal(new Machine().report().stats.steps, 0);
  const m = new Machine({ max_model_calls: 1, max_steps: 7, seed: 3, deadline_ms: null });
  m.nextCommand();
  m.handle({ model_turn: { tool_calls: [{ id: 'a', name: 't' }] } });
  assert.equal(m.nextCommand().command, 'run_tools');
  m.handle({ tool_results: [{ call_id: 'a', name: 't', ok: null }] });
  const stop = m.nextCommand();
  assert.equal(stop.command, 'stop');
  assert.equal(stop.report.reason, 'max_model_calls');
});

test('restore refuses what is not a snapshot, and a tampered one', () => {
  const next = rng(4);
  const texts = ['', '{}', '[]', 'null', '{"terminus_snapshot": 2}', 'not json', '{"terminus_snapshot": 1}'];
  for (let i = 0; i < 100; i++) texts.push(JSON.stringify({ terminus_snapshot: Math.floor(next() * 3), machine: next() }));
  for (const text of texts) {
    assert.throws(() => Machine.restore(text), (e) => e instanceof Error && e.message.startsWith('snapshot'));
  }
  for (const notText of [undefined, null, 3, {}, Buffer.from('{}')]) {
    assert.throws(() => Machine.restore(notText), (e) => e instanceof Error && e.message.startsWith('snapshot'));
  }
  const m = new Machine();
  m.handle({ model_turn: { tool_calls: [{ id: 'a', name: 't' }] } });
  const saved = JSON.parse(m.snapshot());
  saved.trace = [];
  assert.throws(() => Machine.restore(JSON.stringify(saved)), /snapshot\.trace/);
});

test('a scale scales the policy, and a bad one names options.scale', () => {
  const policy = { max_steps: 2, budget_scale: { per_unit: { max_steps: 3 }, max: { max_steps: 9 } } };
  const explained = new Machine(policy, { scale: 2 }).explain();
  assert.match(explained, /scaled for 2 units \(budget_scale\): max_steps \+3 a unit, at most 9/);
  assert.match(explained, /max_steps +0 \/ 8 /);
  for (const scale of [-1, 1.5, '2', 2 ** 60]) {
    assert.throws(() => new Machine(policy, { scale }), /^Error: options\.scale: not a whole number of at least 0$/);
  }
  assert.throws(() => new Machine({ ...policy, max_steps: 10 }, { scale: 1 }), /policy\.budget_scale\.max\.max_steps: must be at least max_steps \(10\)/);
});

test('framework adapters refuse a scale without a budget_scale, and a bad one, when they are built', async () => {
  // As a scenario's `scale` and the Python adapters' `scale`: without a `budget_scale` it would
  // change nothing, so it is refused rather than silently ignored.
  const { terminusMiddleware } = require('terminus-kernel/langchain');
  const { runAgent } = require('terminus-kernel/ai');
  const { run } = require('terminus-kernel/openai-agents');
  const { Agent } = require('@openai/agents');
  const unscaled = /^Error: scale: scales nothing: the policy has no budget_scale$/;
  assert.throws(() => terminusMiddleware({ max_steps: 6 }, { scale: 3 }), unscaled);
  assert.throws(() => terminusMiddleware({}, { scale: -1 }), /^Error: scale: not a whole number of at least 0/);
  await assert.rejects(runAgent({ model: {}, prompt: 'x', policy: {}, scale: 2 }), unscaled);
  await assert.rejects(run(new Agent({ name: 'a' }), 'x', { policy: {}, scale: 2 }), unscaled);
  const policy = { max_steps: 6, budget_scale: { per_unit: { max_steps: 2 }, max: { max_steps: 40 } } };
  assert.ok(terminusMiddleware(policy, { scale: 5 }));
  assert.ok(terminusMiddleware({ max_steps: 6 }));
});
