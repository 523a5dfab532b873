'use strict';
// A hand-written host for the scenario format (a port of bindings/python/tests/scenario_driver.py):
// it plays a scenario's scripted model, tools and verifier against a `Machine`, the way the Rust
// runtime plays them, with a virtual clock instead of real sleeps.
//
// What it models: model turns and failures, `repeat` modes `none` / `last` / `cycle` of every
// script, the built-in `write_todos` tool, undefined tools (`not_found`), arguments that are not
// an object (`invalid_arguments`), `filler_tokens`, refused calls, the rule verifier (from the
// `verify` command's `missing`) and a scripted one, and time: a tool's `delay_ms` and a model
// call's backoff advance the clock, so `cancel_after_ms` and `policy.deadline_ms` fire where the
// runtime's race would fire them.
//
// What it does not model: the context window (`context`). Pruning does not change the kernel's
// path, but a window that ends the run does: `unsupported` names such a scenario and why.

const { readFileSync, readdirSync } = require('node:fs');
const { basename, join } = require('node:path');
const { Machine } = require('..');

const REPO = join(__dirname, '..', '..', '..');
const SCENARIO_DIR = join(REPO, 'spec', 'scenarios');
const SCENARIOS = readdirSync(SCENARIO_DIR)
  .filter((f) => f.endsWith('.json'))
  .sort()
  .map((f) => join(SCENARIO_DIR, f));
const TODO_STATUSES = ['pending', 'in_progress', 'completed', 'cancelled'];

/** A scenario file as an object, named after its file when it has no name (as the CLI does). */
function load(path) {
  const scenario = JSON.parse(readFileSync(path, 'utf8'));
  if (scenario.name === undefined) scenario.name = basename(path, '.json');
  return scenario;
}

class ScriptExhausted extends Error {}

/** Why this driver cannot reproduce the scenario's run, or `null` when it can. */
function unsupported(scenario) {
  if ('context' in scenario && (scenario.expect || {}).reason === 'context_exhausted') {
    return (
      "its context window ends the run (context_exhausted): whether the conversation fits is " +
      "the runtime's decision, made with its tokenizer, and this driver keeps no conversation"
    );
  }
  const results = Object.values(scenario.tools || {}).flatMap((t) => t.results || []);
  if (results.some((r) => r !== null && typeof r === 'object' && 'job' in r)) {
    return (
      "a tool's call starts a job (an MCP task), which the runtime that runs the tool " +
      'journals with the call; this driver runs no tool and journals no job'
    );
  }
  return null;
}

/** A script and how far it has been read. */
class Cursor {
  constructor(entries, repeat, what) {
    this.entries = entries;
    this.repeat = repeat;
    this.what = what;
    this.used = 0;
  }

  next() {
    const n = this.entries.length;
    let index;
    if (this.used < n) index = this.used;
    else if (this.repeat === 'last' && n) index = n - 1;
    else if (this.repeat === 'cycle' && n) index = this.used % n;
    else throw new ScriptExhausted(`${this.what} script exhausted after ${n}`);
    this.used += 1;
    return structuredClone(this.entries[index]);
  }
}

const isObject = (v) => typeof v === 'object' && v !== null && !Array.isArray(v);

/** The runtime's built-in `write_todos`: validates `todos` and says how many are open. */
function writeTodos(args) {
  const todos = isObject(args) ? args.todos : undefined;
  const valid =
    Array.isArray(todos) &&
    todos.every((t) => isObject(t) && typeof t.content === 'string' && TODO_STATUSES.includes(t.status));
  if (!valid) return { error: 'invalid_arguments', message: 'bad todos' };
  const open = todos.filter((t) => t.status === 'pending' || t.status === 'in_progress').length;
  return { ok: `Todo list updated: ${open} of ${todos.length} open.` };
}

const present = (v) => v !== undefined && v !== null;

/**
 * A scripted model turn as an event, with the names of the tools the call offered (as the runtime
 * offers them: the scenario's tools and `write_todos`, none to a tool-less call).
 */
function turnEvent(spec, offered) {
  // The host pulled the kill switch while the model answered this call.
  if (spec.cancelled) return { cancel: true };
  if ('error' in spec) {
    const error = { kind: spec.error };
    if (present(spec.retry_after_ms)) error.retry_after_ms = spec.retry_after_ms;
    return { model_error: error };
  }
  const turn = {};
  for (const key of ['text', 'needs_more_work', 'usage', 'finish', 'reasoning']) {
    if (present(spec[key])) turn[key] = spec[key];
  }
  turn.tools = offered;
  if ('tool_calls' in spec) {
    turn.tool_calls = spec.tool_calls.map((call) => {
      const out = {};
      for (const k of ['id', 'name', 'arguments']) if (k in call) out[k] = call[k];
      return out;
    });
  }
  return { model_turn: turn };
}

/** A scripted tool result as the tool's answer. */
function resultOf(spec) {
  if (present(spec.error)) {
    return { error: spec.error, message: spec.message || `scripted ${spec.error} error` };
  }
  let value = spec.ok === undefined ? null : spec.ok;
  if (present(spec.filler_tokens)) {
    const text = typeof value === 'string' ? value : JSON.stringify(value);
    value = text + ' log'.repeat(spec.filler_tokens);
  }
  return { ok: value };
}

/**
 * Runs `scenario` through a fresh machine. `between`, if given, is called after every event with
 * the machine and returns the machine to go on with (a snapshot test restores a copy there).
 * Returns `{ machine, report, path }`: `path` is every command the machine gave and every event
 * it was fed, in order.
 */
function drive(scenario, { between, maxEvents = 10_000 } = {}) {
  const toolNames = [...new Set([...Object.keys(scenario.tools || {}), 'write_todos'])].sort();
  // The whole journal: the report's trace and the explanation's path are compared with the
  // command line's for runs of any length.
  let machine = new Machine(scenario.policy, {
    task: scenario.task,
    name: scenario.name,
    scale: scenario.scale,
    journalSteps: null,
  });
  const model = new Cursor(scenario.model.turns, scenario.model.repeat || 'none', 'model');
  const tools = {};
  for (const [tool, s] of Object.entries(scenario.tools || {})) {
    tools[tool] = new Cursor(s.results, s.repeat || 'none', `tool \`${tool}\``);
  }
  const verifier = scenario.verifier
    ? new Cursor(scenario.verifier.verdicts, scenario.verifier.repeat || 'none', 'verifier')
    : null;
  const cancelAt = present(scenario.cancel_after_ms) ? scenario.cancel_after_ms : null;
  const deadline = present((scenario.policy || {}).deadline_ms) ? scenario.policy.deadline_ms : null;
  let now = 0;
  const path = [];

  // The event a wait of `elapsed` ms is cut short by (kill switch first, as in the runtime's
  // race), advancing the clock; null if it ends first.
  const interrupt = (elapsed) => {
    const ends = now + elapsed;
    if (cancelAt !== null && ends >= cancelAt && (deadline === null || cancelAt <= deadline)) {
      now = Math.max(now, cancelAt);
      return { cancel: true };
    }
    if (deadline !== null && ends >= deadline) {
      now = Math.max(now, deadline);
      return { tick: now };
    }
    now = ends;
    return null;
  };

  const feed = (event) => {
    path.push(['event', event]);
    machine.handle(event);
    if (between) machine = between(machine);
  };

  for (let i = 0; i < maxEvents; i++) {
    const command = machine.nextCommand();
    if (command === null) throw new Error(`the machine waits in ${machine.phase} with no command`);
    path.push(['command', command]);
    const kind = command.command;
    if (kind === 'nudge' || kind === 'notice') continue;
    if (kind === 'checkpoint') {
      // A checkpoint written for the agent: the scripted model's next reply is its summary,
      // which the conversation keeps (this driver keeps none).
      model.next();
      continue;
    }
    if (kind === 'stop') return { machine, report: command.report, path };
    if (kind === 'call_model') {
      const cut = interrupt(command.delay_ms);
      feed(cut !== null ? cut : turnEvent(model.next(), command.tools ? toolNames : []));
    } else if (kind === 'run_tools') {
      const results = [];
      let slowest = 0;
      let cancelled = false;
      for (const call of command.calls) {
        const tool = call.name;
        let answer;
        if (!isObject(call.arguments)) answer = { error: 'invalid_arguments', message: 'not an object' };
        else if (tool === 'write_todos') answer = writeTodos(call.arguments);
        else if (Object.hasOwn(tools, tool)) {
          const spec = tools[tool].next();
          // The host pulled the kill switch while this call ran.
          if (spec.cancelled) {
            cancelled = true;
            break;
          }
          slowest = Math.max(slowest, spec.delay_ms || 0);
          answer = resultOf(spec);
        } else answer = { error: 'not_found', message: `there is no tool named \`${tool}\`` };
        results.push({ call_id: call.id, name: tool, ...answer });
      }
      const cut = cancelled ? { cancel: true } : interrupt(slowest);
      feed(cut !== null ? cut : { tool_results: results });
    } else if (kind === 'verify') {
      let event;
      if (verifier !== null) {
        const verdict = verifier.next();
        event = { complete: verdict.complete, missing: verdict.missing || [] };
      } else {
        event = { complete: command.missing.length === 0, missing: command.missing };
      }
      feed({ verdict: event });
    } else {
      throw new Error(`unknown command ${JSON.stringify(command)}`);
    }
  }
  throw new Error(`no stop after ${maxEvents} events`);
}

/** The `terminus` binary: $TERMINUS_BIN, else the workspace's debug or release build, or null. */
function terminusBinary() {
  if (process.env.TERMINUS_BIN) return process.env.TERMINUS_BIN;
  const { existsSync } = require('node:fs');
  for (const profile of ['debug', 'release']) {
    const candidate = join(REPO, 'target', profile, 'terminus');
    if (existsSync(candidate)) return candidate;
  }
  return null;
}

module.exports = { REPO, SCENARIOS, Cursor, ScriptExhausted, drive, load, resultOf, terminusBinary, unsupported, writeTodos };
