'use strict';
// The process's telemetry (`telemetry` of the package): a plan run's spans reach a real OTLP
// decoder (the receiver of adapters/fixture, run by the Python of the peers' `otlp` virtualenv,
// which decodes with the pinned `opentelemetry-proto`) as `terminus orchestrate`'s do, and its
// metrics are Prometheus text. Each case runs telemetry_child.js in a process of its own: a
// process starts its telemetry once, from its environment.

const test = require('node:test');
const assert = require('node:assert/strict');
const { spawn, spawnSync } = require('node:child_process');
const { existsSync, mkdtempSync, readFileSync } = require('node:fs');
const { tmpdir } = require('node:os');
const { join } = require('node:path');
const readline = require('node:readline');

const REPO = join(__dirname, '..', '..', '..');
const CHILD = join(__dirname, 'telemetry_child.js');
const PEERS = process.env.TERMINUS_PEERS ?? join(REPO, 'target', 'peers');
const PYTHON = join(PEERS, 'otlp', 'bin', 'python');

function child(mode, env = {}) {
  const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('OTEL_')));
  const done = spawnSync(process.execPath, [CHILD, mode], { env: { ...base, ...env }, encoding: 'utf8', timeout: 60000 });
  assert.equal(done.status, 0, done.stderr);
  return JSON.parse(done.stdout.trim().split('\n').at(-1));
}

/** An OTLP/HTTP receiver on a free port: `{ endpoint, out, stop }`. */
async function receiver(t) {
  if (!existsSync(PYTHON)) {
    const why = `the OTLP receiver's virtualenv is not in ${join(PEERS, 'otlp')} (.ci/peers.sh)`;
    if (process.env.CI) assert.fail(why);
    t.skip(why);
    return null;
  }
  const out = join(mkdtempSync(join(tmpdir(), 'terminus-otlp-')), 'otlp.jsonl');
  const process_ = spawn(PYTHON, [join(REPO, 'adapters', 'fixture', 'otlp_receiver.py'), '0', out], { stdio: ['ignore', 'pipe', 'pipe'] });
  const first = await new Promise((resolve, reject) => {
    readline.createInterface({ input: process_.stdout }).once('line', resolve);
    process_.once('exit', (code) => reject(new Error(`the receiver exited (${code})`)));
  });
  assert.match(first, /^listening 127\.0\.0\.1:\d+$/);
  t.after(() => process_.kill('SIGTERM'));
  return { endpoint: `http://${first.replace('listening ', '')}`, out };
}

async function spans(out, name, withinMs = 10000) {
  const deadline = Date.now() + withinMs;
  for (;;) {
    const lines = existsSync(out) ? readFileSync(out, 'utf8').split('\n').filter(Boolean) : [];
    const found = lines.map((l) => JSON.parse(l)).filter((s) => s.name === name);
    if (found.length > 0 || Date.now() > deadline) return found;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

function metric(text, series) {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  assert.ok(line, `no series ${series} in:\n${text}`);
  return Number(line.split(' ').at(-1));
}

test('a plan run exports its span and events and records its metrics', async (t) => {
  const r = await receiver(t);
  if (!r) return;
  const ran = child('plan', { OTEL_EXPORTER_OTLP_ENDPOINT: r.endpoint, OTEL_SERVICE_NAME: 'terminus-node-test' });
  assert.deepEqual(ran.first, { exportingSpans: true, already: false });
  assert.deepEqual(ran.again, { exportingSpans: true, already: true });
  assert.deepEqual([ran.outcome, ran.reason], ['complete', 'degraded']);

  // Exported by the exit handler: the child never flushed.
  const found = await spans(r.out, 'plan traced');
  assert.equal(found.length, 1, JSON.stringify(found));
  const [plan] = found;
  assert.equal(plan.resource['service.name'], 'terminus-node-test');
  assert.equal(plan.attributes['terminus.plan.name'], 'traced');
  assert.equal(plan.attributes['terminus.plan.agents'], 3);
  assert.equal(plan.attributes['terminus.outcome'], 'complete');
  assert.equal(plan.attributes['terminus.plan.reason'], 'degraded');
  const events = plan.events.map((e) => `${e.name} ${e.attributes['gen_ai.agent.name']}`);
  assert.ok(events.includes('agent_retry flaky'), events.join(', '));
  assert.ok(events.includes('agent_degraded research'), events.join(', '));
  assert.equal(plan.events.find((e) => e.name === 'agent_retry').attributes['terminus.attempt'], 2);

  assert.equal(metric(ran.metrics, 'terminus_plans_total{outcome="complete",reason="degraded"}'), 1);
  assert.equal(metric(ran.metrics, 'terminus_agent_retries_total'), 1);
  assert.ok(ran.metrics.includes('terminus_agent_degradations_total{'), ran.metrics);
  assert.equal(metric(ran.metrics, 'terminus_agent_duration_seconds_count{status="complete"}'), 2);
});

test('without an endpoint no span is exported, and a shut down telemetry stays down', () => {
  const ran = child('lifecycle');
  assert.equal(ran.before, null);
  assert.equal(ran.exportingSpans, false);
  assert.equal(ran.after, 'string');
  assert.equal(ran.second, 'telemetry was shut down: a process starts it once');
});

test('an endpoint that is not a URL is refused naming the exporter', () => {
  const ran = child('bad', { OTEL_EXPORTER_OTLP_ENDPOINT: 'not a url' });
  assert.equal(ran.error, 'InvalidArg', JSON.stringify(ran));
  assert.match(ran.message, /^OTLP exporter/);
});
