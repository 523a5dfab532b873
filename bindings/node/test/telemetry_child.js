'use strict';
// The process the telemetry tests of telemetry.test.js run (a process starts its telemetry once,
// from its environment): `node telemetry_child.js MODE`.
// - `plan`: starts the telemetry twice, runs a plan whose `flaky` agent fails once and is retried
//   and whose `research` agent fails and is degraded, and exits without shutting the telemetry
//   down (the exit handler flushes). Prints one JSON line: what each `start` said, the report's
//   outcome and reason, and the metrics as Prometheus text.
// - `lifecycle`: the metrics before `start`, `shutdown` then `start` again. Prints one JSON line.
// - `bad`: `start` with what the environment gives; prints the error's code and message.

const { runPlan, telemetry } = require('..');

const plan = {
  name: 'traced',
  limits: { agent_max_retries: 2, agent_retry_base_delay_ms: 10 },
  agents: [
    { id: 'research', on_error: 'skip', degraded_result: 'no research available', task: 'Research the competitors.' },
    { id: 'flaky', retryable: true, task: 'Call the flaky service.' },
    { id: 'summary', depends_on: ['research', 'flaky'], task: 'Sum up {research}, {flaky}' },
  ],
};

async function planMode() {
  const first = telemetry.start();
  const again = telemetry.start();
  let flakyCalls = 0;
  const report = await runPlan(plan, {
    agents: {
      research: async () => {
        throw new Error('the search service refused the key');
      },
      flaky: async () => {
        flakyCalls += 1;
        if (flakyCalls === 1) throw new Error('the service is down');
        return '42 units';
      },
      summary: async (task) => `summary of: ${task}`,
    },
  });
  console.log(JSON.stringify({ first, again, outcome: report.outcome, reason: report.reason, metrics: telemetry.metrics() }));
}

async function lifecycle() {
  const before = telemetry.metrics() ?? null;
  const started = telemetry.start();
  await telemetry.flush();
  await telemetry.shutdown();
  await telemetry.shutdown();
  let second = null;
  try {
    telemetry.start();
  } catch (e) {
    second = e.message;
  }
  console.log(JSON.stringify({ before, exportingSpans: started.exportingSpans, after: typeof telemetry.metrics(), second }));
}

function bad() {
  try {
    telemetry.start();
    console.log(JSON.stringify({ error: null }));
  } catch (e) {
    console.log(JSON.stringify({ error: e.code, message: e.message }));
  }
}

const modes = { plan: planMode, lifecycle, bad };
Promise.resolve(modes[process.argv[2]]()).catch((e) => {
  console.error(e);
  process.exit(1);
});
