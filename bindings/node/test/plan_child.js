'use strict';
// The process the kill-and-resume tests of plan.test.js run: a plan of host functions whose
// progress is kept after every change, in a file (`node plan_child.js PROGRESS.json CALLS`) or
// in a journal (`PLAN_JOURNAL=1 node plan_child.js SQLITE-FILE-OR-POSTGRES-URL CALLS`). Each
// call of an agent function is appended to the calls file first; with KILL_IN set, that agent's
// function SIGKILLs the process (a Lambda timed out mid-plan). PLAN_EXECUTION names the
// execution (default `resume-1`) and PLAN_FLAKY the
// flaky agent's id (default `flaky`: a breaker is shared by every plan on a journal). Prints the report as JSON on the last line.

const { appendFileSync, existsSync, readFileSync, renameSync, writeFileSync } = require('node:fs');
const { runPlan } = require('..');

const [where, callsFile] = process.argv.slice(2);
const flakyId = process.env.PLAN_FLAKY ?? 'flaky';
const progressFile = where;
const plan = {
  name: 'resume',
  limits: { agent_max_retries: 5, agent_retry_base_delay_ms: 20000, circuit_breaker_failure_threshold: 2 },
  agents: [
    { id: 'collect', task: 'Collect the sources.' },
    { id: flakyId, retryable: true, task: 'Call the flaky service.' },
    { id: 'analyse', depends_on: ['collect'], task: 'Analyse {collect}' },
  ],
};
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const called = (id) => {
  appendFileSync(callsFile, `${id}\n`);
  if (process.env.KILL_IN === id) process.kill(process.pid, 'SIGKILL');
};

const keep = process.env.PLAN_JOURNAL
  ? { journal: where }
  : {
      progress: existsSync(progressFile) ? readFileSync(progressFile, 'utf8') : undefined,
      // Written whole, then renamed: a kill mid-write leaves the last progress.
      onProgress: (progress) => {
        writeFileSync(`${progressFile}.tmp`, JSON.stringify(progress));
        renameSync(`${progressFile}.tmp`, progressFile);
      },
    };

runPlan(plan, {
  execution: process.env.PLAN_EXECUTION ?? 'resume-1',
  ...keep,
  onEvent: (event) => process.stderr.write(`${event.line}\n`),
  agents: {
    collect: async () => {
      called('collect');
      await sleep(300);
      return '3 sources';
    },
    [flakyId]: async () => {
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
