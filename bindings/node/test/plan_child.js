'use strict';
// The process the kill-and-resume test of plan.test.js runs twice: a plan of host functions
// whose progress is kept in a file after every change. Each call of an agent function is
// appended to the calls file first; with KILL_IN set, that agent's function SIGKILLs the
// process (a Lambda timed out mid-plan). Prints the report as JSON on the last line.

const { appendFileSync, existsSync, readFileSync, renameSync, writeFileSync } = require('node:fs');
const { runPlan } = require('..');

const [progressFile, callsFile] = process.argv.slice(2);
const plan = {
  name: 'resume',
  limits: { agent_max_retries: 5, agent_retry_base_delay_ms: 20000, circuit_breaker_failure_threshold: 2 },
  agents: [
    { id: 'collect', task: 'Collect the sources.' },
    { id: 'flaky', retryable: true, task: 'Call the flaky service.' },
    { id: 'analyse', depends_on: ['collect'], task: 'Analyse {collect}' },
  ],
};
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const called = (id) => {
  appendFileSync(callsFile, `${id}\n`);
  if (process.env.KILL_IN === id) process.kill(process.pid, 'SIGKILL');
};

runPlan(plan, {
  execution: 'resume-1',
  progress: existsSync(progressFile) ? readFileSync(progressFile, 'utf8') : undefined,
  // Written whole, then renamed: a kill mid-write leaves the last progress.
  onProgress: (progress) => {
    writeFileSync(`${progressFile}.tmp`, JSON.stringify(progress));
    renameSync(`${progressFile}.tmp`, progressFile);
  },
  onEvent: (event) => process.stderr.write(`${event.line}\n`),
  agents: {
    collect: async () => {
      called('collect');
      await sleep(300);
      return '3 sources';
    },
    flaky: async () => {
      called('flaky');
      throw new Error('the service is down');
    },
    analyse: async (task) => {
      called('analyse');
      return `analysis of ${task}`;
    },
  },
}).then(
  (report) => console.log(JSON.stringify(report)),
  (e) => {
    console.error(e);
    process.exitCode = 2;
  },
);
