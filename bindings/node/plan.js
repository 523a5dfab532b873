'use strict';
// `runPlan`: a multi-agent plan whose agents are your own async functions, run by the
// orchestrator of `terminus orchestrate` (the native `NativePlan`, over
// `terminus_orchestrator::LocalPlan`). Every decision is the orchestrator's: which agent starts
// and with which task (its dependencies' results filled in), its share of the plan's budget
// and its deadline, retries with backoff, the circuit breaker, skips and degraded results, the
// execution timeout and the phase cap, and the report. This file only carries the acts out on
// Node's event loop: it calls your functions, aborts them at their deadline or when the plan
// stops, and keeps the progress where you say after every change.

const { readFileSync } = require('node:fs');
const { dirname, resolve } = require('node:path');
const { fileURLToPath } = require('node:url');

/** A plan that cannot run: `problems` holds one `PATH: PROBLEM` line each. */
class PlanError extends Error {
  constructor(what, problems) {
    super(`${what}: ${problems.length} problem(s); nothing was run\n${problems.join('\n')}`);
    this.name = 'PlanError';
    this.code = 'InvalidArg';
    this.problems = problems;
  }
}

function messageOf(error) {
  if (error instanceof Error) return error.message || error.name;
  try {
    return typeof error === 'string' ? error : JSON.stringify(error) ?? String(error);
  } catch {
    return String(error);
  }
}

function makeRunPlan(native, jsonText) {
  /** The plan's JSON text, the folder its file scenarios are read from, and its name in errors. */
  function planSource(plan, root = 'plan') {
    if (plan instanceof URL) plan = fileURLToPath(plan);
    if (typeof plan === 'string') {
      let text;
      try {
        text = readFileSync(plan, 'utf8');
      } catch (e) {
        throw new PlanError(plan, [`cannot read it: ${e.message}`]);
      }
      return { text, base: dirname(resolve(plan)), what: plan };
    }
    if (plan === null || typeof plan !== 'object' || Array.isArray(plan)) {
      throw new TypeError(`${root}: must be a file path, a URL or an object`);
    }
    return { text: jsonText(root, plan), base: process.cwd(), what: root };
  }

  /**
   * Runs `plan` (a plan file's path or URL, or the plan as an object, in the format of
   * `terminus orchestrate`) to its report. See `index.d.ts` for the options.
   */
  async function runPlan(plan, options = {}) {
    if (options === null || typeof options !== 'object') throw new TypeError('options: must be an object');
    const { text, base, what } = planSource(plan);
    const agents = options.agents ?? {};
    if (agents === null || typeof agents !== 'object') throw new TypeError('options.agents: must be an object of functions');
    for (const [id, fn] of Object.entries(agents)) {
      if (typeof fn !== 'function') throw new TypeError(`options.agents.${id}: must be a function (task, context) => result`);
    }
    let progress = options.progress ?? null;
    if (progress !== null && typeof progress !== 'string') progress = jsonText('options.progress', progress);
    if (options.execution !== undefined && typeof options.execution !== 'string') throw new TypeError('options.execution: must be a string');
    let journal = options.journal ?? null;
    if (journal instanceof URL && journal.protocol === 'file:') journal = fileURLToPath(journal);
    if (journal !== null && typeof journal !== 'string') throw new TypeError('options.journal: must be a SQLite file path or a postgres:// URL');
    let run;
    try {
      run = native.NativePlan.start(text, base, options.execution ?? null, progress, Object.keys(agents), journal);
    } catch (e) {
      const about = /^(progress|journal)\b/.exec(e.message)?.[1];
      throw new PlanError(about ? `options.${about}` : what, e.message.split('\n'));
    }
    const onProgress = options.onProgress;
    const onEvent = options.onEvent;
    const signal = options.signal;
    const started = performance.now();
    const before = run.elapsedBefore();
    const now = () => before + Math.floor(performance.now() - started);

    const running = new Map(); // index -> AbortController
    const ended = []; // { index, outcome }, fed once the acts are taken
    let wake = null;
    const notify = () => {
      if (wake) {
        const w = wake;
        wake = null;
        w();
      }
    };
    let cancelled = signal?.aborted ?? false;
    const onAbort = () => {
      cancelled = true;
      notify();
    };
    signal?.addEventListener('abort', onAbort, { once: true });

    function launch(act) {
      const controller = new AbortController();
      running.set(act.index, controller);
      let settled = false;
      const settle = (outcome) => {
        if (settled) return;
        settled = true;
        clearTimeout(deadline);
        running.delete(act.index);
        ended.push({ index: act.index, outcome });
        notify();
      };
      // Past the attempt's limit (a function's deadline, a scenario's deadline and the
      // watchdog's grace: the orchestrator's choice), the attempt failed with the orchestrator's
      // words, and a function is told through `context.signal`.
      const scenario = act.program === 'scenario';
      const deadline = setTimeout(() => {
        controller.abort(new Error(act.overdue));
        settle({ error: act.overdue });
      }, act.limit_ms);
      // A function the plan stops has failed (it may go on; its result is not taken); a
      // scenario's run is killed by the orchestrator and ends with its report.
      controller.signal.addEventListener('abort', () => {
        if (!scenario && controller.signal.reason?.name === 'PlanStopped') settle({ error: messageOf(controller.signal.reason) });
      });
      const used = { model_calls: 0, tokens: 0 };
      let attempt;
      if (scenario) {
        attempt = run
          .scenarioAttempt(act.index)
          .run()
          .then((report) => ({ report: JSON.parse(report) }));
      } else {
        const context = {
          agent: act.agent,
          attempt: act.attempt,
          execution: act.execution,
          grant: act.grant,
          resume: act.resume,
          signal: controller.signal,
          used,
        };
        attempt = Promise.resolve()
          .then(() => agents[act.agent](act.task, context))
          .then((result) => {
            try {
              return { result: JSON.parse(jsonText(`the result of ${act.agent}`, result === undefined ? null : result)), used };
            } catch (e) {
              return { error: messageOf(e) };
            }
          });
      }
      attempt.then(settle, (e) => settle({ error: messageOf(e) }));
    }

    try {
      for (;;) {
        if (cancelled) {
          cancelled = false;
          run.cancel(now());
        }
        let text;
        while ((text = run.next(now())) !== null) {
          const act = JSON.parse(text);
          switch (act.act) {
            case 'start':
              launch(act);
              break;
            case 'cancel':
              for (const controller of running.values()) {
                const reason = new Error('the plan stopped');
                reason.name = 'PlanStopped';
                controller.abort(reason);
              }
              break;
            case 'save':
              // Kept (and read back) before the plan goes on.
              await run.save();
              if (onProgress) await onProgress(JSON.parse(run.progress()));
              break;
            case 'event':
              if (onEvent) onEvent({ kind: act.kind, agent: act.agent, line: act.line });
              break;
            case 'done':
              if (options.generation !== undefined) act.report.generation = options.generation;
              return act.report;
            default:
              throw new Error(`runPlan: unknown act ${act.act}`);
          }
        }
        if (ended.length > 0) {
          const { index, outcome } = ended.shift();
          run.finished(index, JSON.stringify(outcome));
          continue;
        }
        if (cancelled) continue;
        const at = run.nextWake();
        await new Promise((resolve) => {
          wake = resolve;
          if (at !== null) {
            const timer = setTimeout(resolve, Math.max(0, at - now()));
            wake = () => {
              clearTimeout(timer);
              resolve();
            };
          }
        });
        wake = null;
      }
    } finally {
      signal?.removeEventListener('abort', onAbort);
      for (const controller of running.values()) {
        const reason = new Error('runPlan ended');
        reason.name = 'PlanStopped';
        controller.abort(reason);
      }
    }
  }

  /**
   * Asks `options.model` for a plan for `task` from the generator file `file` (a path, URL or
   * object, the format of `terminus orchestrate --generate`): each rejected plan goes back to
   * the model with its problems, at most `generator.max_attempts` calls, then the fallback.
   * Resolves to `{ plan, generation, report }`: the plan object to give `runPlan` (with
   * `{ generation }`), or `plan` null and the report of the plan that never ran
   * (`no_valid_plan`).
   */
  async function generatePlan(file, task, options = {}) {
    if (options === null || typeof options !== 'object') throw new TypeError('options: must be an object');
    if (typeof task !== 'string') throw new TypeError('task: must be a string');
    if (typeof options.model !== 'function') throw new TypeError('options.model: must be a function (messages) => text');
    if (options.execution !== undefined && typeof options.execution !== 'string') throw new TypeError('options.execution: must be a string');
    const { text, base, what } = planSource(file, 'file');
    let generator;
    try {
      generator = native.NativeGenerator.start(text, base, task);
    } catch (e) {
      throw new PlanError(what, e.message.split('\n'));
    }
    for (;;) {
      const step = JSON.parse(generator.step(options.execution ?? null));
      if (step.ask !== undefined) {
        // How the call ended, as it ended: the orchestrator reads the output.
        let ended;
        try {
          ended = JSON.stringify({ output: await options.model(step.ask) });
        } catch (e) {
          ended = JSON.stringify({ error: messageOf(e) });
        }
        generator.answer(ended);
        continue;
      }
      if (step.run !== undefined) return { plan: step.run, generation: step.generation, report: null };
      return { plan: null, generation: step.generation, report: step.no_plan };
    }
  }

  return { runPlan, generatePlan, PlanError };
}

module.exports = { makeRunPlan, PlanError };
