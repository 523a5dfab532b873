'use strict';
// `Machine`: the kernel, fed events and answering commands (`terminus_runtime::host::Host`).

const { native } = require('./loader.js');
const { inputError, jsonText } = require('./json.js');
const { HANDLED, AGAIN, AGAIN_TAKEN, fastEvent, callModel } = require('./fast.js');

/**
 * The kernel: feed it events with `handle`, take its commands with `nextCommand`. The same
 * machine as `terminus_kernel.Machine` in Python and `terminus_runtime::host::Host` in Rust.
 */
class Machine {
  /**
   * @param {object | null} [policy] the scenario `policy` fields, same names and defaults.
   * @param {{ task?: string, name?: string | null, scale?: number | null, journalSteps?: number | null }} [options]
   *   `task` and `name` label the run in `explain()`; `scale`, the task's size in units, scales
   *   the policy's `budget_scale`; `journalSteps`, how many of the run's last steps the machine
   *   keeps of its journal (16 by default, `null` for all).
   */
  constructor(policy, options) {
    const text = policy === undefined || policy === null ? undefined : jsonText('policy', policy);
    let task;
    let name;
    let scale;
    let journalSteps;
    if (options !== undefined && options !== null) {
      if (typeof options !== 'object') throw inputError('options', 'not an object');
      ({ task, name, scale, journalSteps } = options);
      if (task !== undefined && typeof task !== 'string') throw inputError('options.task', 'not a string');
      if (name !== undefined && name !== null && typeof name !== 'string') {
        throw inputError('options.name', 'not a string');
      }
      if (scale !== undefined && scale !== null && !(Number.isSafeInteger(scale) && scale >= 0)) {
        throw inputError('options.scale', 'not a whole number of at least 0');
      }
      if (journalSteps !== undefined && journalSteps !== null
        && !(Number.isSafeInteger(journalSteps) && journalSteps >= 1 && journalSteps <= 0xffffffff)) {
        throw inputError('options.journalSteps', 'not a whole number of at least 1');
      }
    }
    // The addon's convention: absent for the default, 0 for the whole journal.
    const journal = journalSteps === null ? 0 : journalSteps;
    this._native = new native.NativeMachine(text, task, name ?? undefined, scale ?? undefined, journal);
    /** The id the addon's fast-path functions take for `_native` (see `src/lib.rs`). */
    this._id = this._native.id;
    /** The calls of the last turn given the fast way, as its `run_tools` would give them. */
    this._turnCalls = null;
    this._answered(this._native.state);
  }

  /**
   * Takes the addon's answer (see `src/lib.rs`): how many commands wait (`nextCommand` answers
   * `null` without a call at 0), what the first is, and what the kernel did.
   */
  _answered(answer) {
    let code = answer;
    /** The first waiting command's JSON text, when the answer carried it. */
    this._headText = null;
    if (typeof answer === 'string') {
      const at = answer.indexOf('{');
      code = Number(answer.slice(0, at));
      this._headText = answer.slice(at);
    }
    /** How many commands wait in the kernel, less those handed out. */
    this._pending = code >>> 5;
    /**
     * What the first is: 0 none, 1 or 2 `call_model` (with or without tools), 3 another, 4
     * `run_tools` of the turn just given (`_turnCalls`, or from the addon if it is null).
     */
    this._head = (code >>> 2) & 7;
    if (this._head === 4 && this._turnCalls === null) this._head = 3;
    /** Commands handed out from answers that the addon still holds: it drops them at the next call. */
    this._taken = 0;
    return HANDLED[code & 3];
  }

  /**
   * Feeds one event; returns `"step"`, `"observed"` or `"ignored"`. A malformed event throws an
   * `Error` naming its JSON path and changes nothing.
   */
  handle(event) {
    const answer = fastEvent(this, event);
    if (answer === AGAIN) return this._handleJson(event);
    if (answer === AGAIN_TAKEN) {
      this._taken = 0;
      return this._handleJson(event);
    }
    return this._answered(answer);
  }

  /** `handle` the JSON way (every event can go this way; tests compare it with the fast path). */
  _handleJson(event) {
    const text = jsonText('event', event);
    const taken = this._taken;
    // The addon drops the taken commands first, even if it then refuses the event.
    this._taken = 0;
    return this._answered(this._native.handle(taken, text));
  }

  /** The next command, or `null` while the kernel waits for an event. */
  nextCommand() {
    if (this._pending === 0) return null;
    this._pending -= 1;
    const head = this._head;
    this._head = this._pending === 0 ? 0 : 3;
    if (head === 1 || head === 2) {
      this._taken += 1;
      return callModel(head);
    }
    if (head === 4) {
      const calls = this._turnCalls;
      this._turnCalls = null;
      this._taken += 1;
      return { command: 'run_tools', calls };
    }
    const headText = this._headText;
    if (headText !== null) {
      this._headText = null;
      this._taken += 1;
      return JSON.parse(headText);
    }
    const taken = this._taken;
    this._taken = 0;
    const text = this._native.nextCommand(taken);
    if (text === null) this._pending = 0;
    return text === null ? null : JSON.parse(text);
  }

  /** Drops the commands handed out from answers in the addon (before it saves its queue). */
  _sync() {
    if (this._taken > 0) {
      this._native.skip(this._taken);
      this._taken = 0;
    }
  }

  /** `Exploring`, `Acting`, `Verifying`, `Nudged`, `Complete` or `Aborted`. */
  get phase() {
    return this._native.phase;
  }

  /** Every counter of the kernel. */
  get stats() {
    return JSON.parse(this._native.stats());
  }

  /** The fields of `terminus run --json` but the execution id (null outcome while it runs). */
  report() {
    return JSON.parse(this._native.report());
  }

  /** Why the run stopped and what to change: the text `terminus inspect` prints. */
  explain() {
    return this._native.explain();
  }

  /**
   * Goes on with a run a budget stopped, with that budget raised (`{ max_steps: 40 }`): the step
   * the stop pre-empted is taken; returns `"step"`. A raise the kernel refuses throws an `Error`
   * saying why, and changes nothing.
   */
  raiseBudgets(budgets) {
    const text = jsonText('budgets', budgets);
    const taken = this._taken;
    this._taken = 0;
    return this._answered(this._native.raiseBudgets(taken, text));
  }

  /** The whole machine as JSON text. */
  snapshot() {
    this._sync();
    return this._native.snapshot();
  }

  /** A machine saved by `snapshot()`; text that is not one throws an `Error` naming why. */
  static restore(snapshot) {
    if (typeof snapshot !== 'string') throw inputError('snapshot', `a ${typeof snapshot} is not snapshot text`);
    const machine = Object.create(Machine.prototype);
    machine._native = native.NativeMachine.restore(snapshot);
    machine._id = machine._native.id;
    machine._turnCalls = null;
    machine._answered(machine._native.state);
    return machine;
  }

  toString() {
    const s = this.stats;
    return `<terminus-kernel Machine ${this.phase} steps=${s.steps} model_calls=${s.model_calls} tool_calls=${s.tool_calls}>`;
  }
}

module.exports = { Machine };
