'use strict';
// terminus-kernel: the Terminus agent kernel for Node.js.
//
// A thin layer over the native addon (`src/lib.rs`, built by `npm run build`), which wraps
// `terminus_runtime::host::Host`: the same JSON vocabulary as the Rust runtime and the Python
// binding (`docs/embedding.md`). Values cross the boundary as JSON text, but for the common
// events: a model turn, tool results and a clock reading whose every field is one this file can
// prove valid (the fast path below) go to the addon as plain fields, and anything else, valid or
// not, goes as JSON text, read by the same `serde` code as in Rust and Python. Before an event,
// a policy or a scenario object is serialized it is checked to be JSON (plain objects and
// arrays, strings, finite numbers, booleans, null; an `undefined` property is absent, as in
// `JSON.stringify`); anything else throws an `Error` naming its path (`event.model_turn.text:
// a function is not JSON`) and the machine is left as it was. What the kernel refuses throws an
// `Error` naming the JSON path as well (`event.model_turn.tool_calls[0]: missing field `name``).

const { existsSync, readFileSync } = require('node:fs');
const { join } = require('node:path');

function isMusl() {
  if (process.platform !== 'linux') return false;
  try {
    const report = process.report && process.report.getReport();
    if (report && report.header) return !report.header.glibcVersionRuntime;
  } catch {
    // Fall back to the loader's name.
  }
  try {
    return readFileSync('/usr/bin/ldd', 'utf8').includes('musl');
  } catch {
    return false;
  }
}

function loadNative() {
  const { platform, arch } = process;
  const abis = platform === 'linux' ? (isMusl() ? ['musl'] : ['gnu']) : platform === 'win32' ? ['msvc'] : [''];
  const tried = [];
  for (const abi of abis) {
    const file = join(__dirname, `terminus-kernel.${platform}-${arch}${abi ? `-${abi}` : ''}.node`);
    tried.push(file);
    if (existsSync(file)) return require(file);
  }
  const universal = join(__dirname, `terminus-kernel.${platform}-universal.node`);
  tried.push(universal);
  if (existsSync(universal)) return require(universal);
  throw new Error(
    `terminus-kernel: no native addon for ${platform}-${arch}; build it with \`npm ci && npm run build\` ` +
      `in the package's folder (looked for ${tried.join(', ')})`,
  );
}

const native = loadNative();

/** How deep a value may nest (serde_json's own limit): deeper is refused, not recursed into. */
const MAX_DEPTH = 128;

/** Whether `value` is JSON as this package takes it (the fast check; no paths built). */
function isJson(value, depth) {
  switch (typeof value) {
    case 'string':
    case 'boolean':
      return true;
    case 'number':
      return Number.isFinite(value);
    case 'object': {
      if (value === null) return true;
      if (depth >= MAX_DEPTH) return false;
      if (Array.isArray(value)) {
        for (let i = 0; i < value.length; i++) {
          const item = value[i];
          if (item === undefined || !isJson(item, depth + 1)) return false;
        }
        return true;
      }
      const proto = Object.getPrototypeOf(value);
      if (proto !== Object.prototype && proto !== null) return false;
      for (const key in value) {
        if (!Object.prototype.hasOwnProperty.call(value, key)) continue;
        const item = value[key];
        if (item !== undefined && !isJson(item, depth + 1)) return false;
      }
      return true;
    }
    default:
      return false;
  }
}

function inputError(path, message) {
  const error = new Error(`${path}: ${message}`);
  error.code = 'InvalidArg';
  return error;
}

/** Throws the error naming where `value` is not JSON (the slow path, after `isJson` said no). */
function refuse(value, path, depth) {
  switch (typeof value) {
    case 'string':
    case 'boolean':
      return;
    case 'number':
      if (!Number.isFinite(value)) throw inputError(path, `${value} is not a JSON number`);
      return;
    case 'object': {
      if (value === null) return;
      if (depth >= MAX_DEPTH) throw inputError(path, `nested deeper than ${MAX_DEPTH} levels`);
      if (Array.isArray(value)) {
        for (let i = 0; i < value.length; i++) {
          const at = `${path}[${i}]`;
          if (value[i] === undefined) throw inputError(at, 'undefined is not JSON (in an array)');
          refuse(value[i], at, depth + 1);
        }
        return;
      }
      const proto = Object.getPrototypeOf(value);
      if (proto !== Object.prototype && proto !== null) {
        const kind = (proto && proto.constructor && proto.constructor.name) || 'object';
        throw inputError(path, `a ${kind} is not JSON (only plain objects)`);
      }
      for (const key of Object.keys(value)) {
        if (value[key] !== undefined) refuse(value[key], `${path}.${key}`, depth + 1);
      }
      return;
    }
    default:
      throw inputError(path, `a ${typeof value} is not JSON`);
  }
}

/** `value` as JSON text, or an `Error` naming the path (under `root`) of what is not JSON. */
function jsonText(root, value) {
  if (!isJson(value, 0)) {
    refuse(value, root, 0);
    // `isJson` and `refuse` agree; a value that changed in between (a getter) lands here.
    throw inputError(root, 'not JSON');
  }
  return JSON.stringify(value);
}

const HANDLED = ['step', 'observed', 'ignored'];

// The fast path. It takes an event only when serde would read it the same way, field by field;
// at the first field it is not sure of it answers AGAIN and the event goes the JSON way, which
// gives the error (or takes the event) exactly as before. So every error still comes from the
// JSON way, and the fast path only ever takes a subset of what that way takes.
//
// The addon's fast-path functions (`turn`, `turnCall`, `results`, `result`, `tick`) are
// functions of the module taking the machine's id (`_id`, its `NativeMachine`'s), not methods
// of `_native`: napi-rs registers a borrow of `this` at each call of a method, which cost an
// event nearly as much as the host's own work. Each array element and each string is a
// crossing of its own, so the common events go without an array and with one string: a turn
// of one call with an id as `turnCall` (the call's `arguments` as JSON text, empty if absent,
// then its `id` and `name`, all in one string, with the lengths of `id` and `name`), a single
// result as `result` (a number for its kind: 0 `ok` as a string, 1 `ok` as JSON text, 2 + k
// the error class k of TOOL_ERRORS with a `message`, 8 + k without; then the payload, empty if
// none, the `call_id` and the `name` in one string, with the lengths of `call_id` and `name`).
// Lengths count UTF-16 code units, as `.length` does; the addon splits the string from its end.

/** The addon's answer when it did not take the event (see `src/lib.rs`). */
const AGAIN = 0xffffffff;
/** The same, but it dropped the commands taken from answers (never, as the fast path builds events). */
const AGAIN_TAKEN = 0xfffffffe;
/** How many levels a tool call's `arguments` or a result's `ok` may nest here (deeper ones go the JSON way). */
const FAST_NESTING = 16;
/** What `mirror` answers for a value it does not copy. */
const NOPE = Symbol('not mirrored');
const FINISH = new Map([['stop', 1], ['length', 2], ['content_filter', 3], ['tool_calls', 4]]);
/** The tool error classes, each with its place in the kernel's `ToolErrorKind::ALL` (see `native.result`). */
const TOOL_ERRORS = new Map(
  ['permission_denied', 'not_found', 'auth_failed', 'timeout', 'invalid_arguments', 'failed'].map((kind, i) => [kind, i]),
);

/** A string serde reads as the same string: no unpaired surrogate (JSON text escapes them, serde refuses them). */
const wellFormed =
  typeof String.prototype.isWellFormed === 'function' ? (s) => s.isWellFormed() : (s) => !/\p{Cs}/u.test(s);

const { hasOwnProperty } = Object.prototype;

/** Whether `key` (from `for...in` over `value`) is `value`'s own, as `Object.keys` would give it. */
function hasOwn(value, key) {
  return hasOwnProperty.call(value, key);
}

/** A plain object (what `isJson` takes as an object). */
function plain(value) {
  if (typeof value !== 'object' || value === null) return false;
  const proto = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}

/** A string serde reads as a `String` (or null if not). */
function text(value) {
  return typeof value === 'string' && wellFormed(value) ? value : null;
}

/** A whole number serde reads as a `u64` and a JavaScript number holds exactly (or -1). */
function whole(value) {
  return typeof value === 'number' && Number.isSafeInteger(value) && value >= 0 ? value : -1;
}

/** Object keys whose order as JavaScript sorts them (UTF-16) is serde's (UTF-8 bytes). */
const SORTABLE = /^[\u0000-\ud7ff]*$/;

/**
 * A copy of `value` as serde gives it back (object keys sorted as serde sorts them, -0 as 0), or
 * NOPE where that is not sure: only strings, booleans, null, safe integers, arrays and plain
 * objects, nested at most FAST_NESTING levels. A tool call's `arguments` come back this way in
 * `run_tools` without the addon writing them (the addon confirms the command is the turn's).
 */
function mirror(value, depth) {
  switch (typeof value) {
    case 'string':
    case 'boolean':
      return value;
    case 'number':
      return Number.isSafeInteger(value) ? value + 0 : NOPE;
    case 'object': {
      if (value === null) return null;
      if (depth >= FAST_NESTING) return NOPE;
      if (Array.isArray(value)) {
        const out = new Array(value.length);
        for (let i = 0; i < value.length; i++) {
          const item = value[i];
          const copy = item === undefined ? NOPE : mirror(item, depth + 1);
          if (copy === NOPE) return NOPE;
          out[i] = copy;
        }
        return out;
      }
      const proto = Object.getPrototypeOf(value);
      if (proto !== Object.prototype && proto !== null) return NOPE;
      const keys = Object.keys(value);
      if (keys.length > 1) {
        for (let i = 0; i < keys.length; i++) if (!SORTABLE.test(keys[i])) return NOPE;
        keys.sort();
      }
      const out = {};
      for (let i = 0; i < keys.length; i++) {
        const key = keys[i];
        const item = value[key];
        if (item === undefined) continue;
        if (key === '__proto__') return NOPE;
        const copy = mirror(item, depth + 1);
        if (copy === NOPE) return NOPE;
        out[key] = copy;
      }
      return out;
    }
    default:
      return NOPE;
  }
}

/** `{"model_turn": turn}` through `native.turnCall` (one call with an id) or `native.turn`, or AGAIN. */
function fastTurn(machine, turn) {
  if (!plain(turn)) return AGAIN;
  let flags = 0;
  let body;
  let inputTokens = 0;
  let outputTokens = 0;
  let calls;
  for (const key in turn) {
    if (!hasOwn(turn, key)) return AGAIN; // inherited: JSON.stringify leaves it out, the JSON way decides
    const value = turn[key];
    if (value === undefined) continue; // absent, as in JSON.stringify
    switch (key) {
      case 'text':
        if (value === null) break;
        body = text(value);
        if (body === null) return AGAIN;
        break;
      case 'tool_calls':
        if (value === null) break;
        calls = fastCalls(machine, value);
        if (calls === null) return AGAIN;
        break;
      case 'needs_more_work':
        if (value === null) break;
        if (typeof value !== 'boolean') return AGAIN;
        flags |= value ? 2 : 1;
        break;
      case 'reasoning':
        if (value === null) break;
        if (typeof value !== 'boolean') return AGAIN;
        flags |= value ? 8 : 4;
        break;
      case 'finish': {
        if (value === null) break;
        const finish = FINISH.get(value);
        if (finish === undefined) return AGAIN;
        flags |= finish << 4;
        break;
      }
      case 'usage': {
        if (value === null) break;
        if (!plain(value)) return AGAIN;
        inputTokens = -1;
        outputTokens = -1;
        const usageKeys = Object.keys(value);
        for (let j = 0; j < usageKeys.length; j++) {
          const count = value[usageKeys[j]];
          if (count === undefined) continue;
          if (usageKeys[j] === 'input_tokens') inputTokens = whole(count);
          else if (usageKeys[j] === 'output_tokens') outputTokens = whole(count);
          else return AGAIN;
        }
        if (inputTokens < 0 || outputTokens < 0) return AGAIN;
        flags |= 0x80;
        break;
      }
      default:
        return AGAIN;
    }
  }
  if (calls === undefined) machine._turnCalls = null;
  else if (calls.length === 3 && calls[0] !== null) {
    // One call with an id (the common turn): no array, and its arguments (JSON text, empty if
    // absent), id and name in one string, with the lengths of the id and the name.
    const id = calls[0];
    const name = calls[1];
    const fields = (calls[2] === null ? '' : calls[2]) + id + name;
    return native.turnCall(machine._id, machine._taken, flags, body, inputTokens, outputTokens, fields, id.length, name.length);
  }
  return native.turn(machine._id, machine._taken, flags, body, inputTokens, outputTokens, calls);
}

/**
 * A turn's `tool_calls` as `native.turn` takes them (`id`, `name`, `arguments` JSON per call), or
 * null; in `machine._turnCalls` the calls as `run_tools` gives them back (null if not sure).
 */
function fastCalls(machine, calls) {
  if (!Array.isArray(calls)) return null;
  const out = new Array(calls.length * 3);
  let mirrored = new Array(calls.length);
  for (let i = 0; i < calls.length; i++) {
    const call = calls[i];
    if (!plain(call)) return null;
    let id = null;
    let name = null;
    let args = null;
    let copied = null;
    for (const key in call) {
      if (!hasOwn(call, key)) return null;
      const value = call[key];
      if (value === undefined) continue;
      switch (key) {
        case 'id':
          if (value === null) break;
          id = text(value);
          if (id === null) return null;
          break;
        case 'name':
          name = text(value);
          if (name === null) return null;
          break;
        case 'arguments': {
          if (value === null) break; // absent: `{}`
          const copy = mirror(value, 0);
          if (copy !== NOPE) {
            args = JSON.stringify(copy);
            copied = copy;
            break;
          }
          if (!isJson(value, MAX_DEPTH - FAST_NESTING)) return null;
          args = JSON.stringify(value);
          copied = NOPE;
          break;
        }
        default:
          return null;
      }
    }
    if (name === null) return null;
    out[3 * i] = id;
    out[3 * i + 1] = name;
    out[3 * i + 2] = args;
    if (mirrored !== null) {
      if (id === null || copied === NOPE) mirrored = null;
      else mirrored[i] = { id, name, arguments: copied === null ? {} : copied };
    }
  }
  machine._turnCalls = mirrored;
  return out;
}

/** `{"tool_results": results}` through `native.result` (one result) or `native.results`, or AGAIN. */
function fastResults(machine, results) {
  if (!Array.isArray(results)) return AGAIN;
  const out = results.length === 1 ? null : new Array(results.length * 4);
  for (let i = 0; i < results.length; i++) {
    const result = results[i];
    if (!plain(result)) return AGAIN;
    let callId = null;
    let name = null;
    let tag = null;
    let payload = null;
    let error = null;
    let message = null;
    for (const key in result) {
      if (!hasOwn(result, key)) return AGAIN;
      const value = result[key];
      if (value === undefined) continue;
      switch (key) {
        case 'call_id':
          callId = text(value);
          if (callId === null) return AGAIN;
          break;
        case 'name':
          name = text(value);
          if (name === null) return AGAIN;
          break;
        case 'ok':
          // Present even when null.
          if (typeof value === 'string') {
            if (!wellFormed(value)) return AGAIN;
            tag = 's';
            payload = value;
          } else {
            if (!isJson(value, MAX_DEPTH - FAST_NESTING)) return AGAIN;
            tag = 'j';
            payload = JSON.stringify(value);
          }
          break;
        case 'error':
          if (value === null) break;
          if (!TOOL_ERRORS.has(value)) return AGAIN;
          error = value;
          break;
        case 'message':
          if (value === null) break;
          message = text(value);
          if (message === null) return AGAIN;
          break;
        default:
          return AGAIN;
      }
    }
    if (callId === null || name === null) return AGAIN;
    if (tag === null) {
      // Neither `ok` nor `error` is the Host's error, given the JSON way.
      if (error === null) return AGAIN;
      tag = error;
      payload = message;
    } else if (error !== null || message !== null) {
      return AGAIN; // `ok` with `error` or `message`: the Host's error, given the JSON way
    }
    if (results.length === 1) {
      // One result (the common case): no array, the tag as a number, and the payload (empty
      // if none), call id and name in one string, with the lengths of the call id and the name.
      const code = tag === 's' ? 0 : tag === 'j' ? 1 : (payload === null ? 8 : 2) + TOOL_ERRORS.get(tag);
      const fields = (payload === null ? '' : payload) + callId + name;
      return native.result(machine._id, machine._taken, code, fields, callId.length, name.length);
    }
    out[4 * i] = callId;
    out[4 * i + 1] = name;
    out[4 * i + 2] = tag;
    out[4 * i + 3] = payload;
  }
  return native.results(machine._id, machine._taken, out);
}

/** The event through the addon's fast path, or AGAIN (nothing changed). */
function fastEvent(machine, event) {
  if (!plain(event)) return AGAIN;
  // Its one key (`for...in`, which builds no array of keys, also gives inherited keys: any
  // such key, or a second one, and the event goes the JSON way).
  let key = null;
  for (const k in event) {
    if (key !== null || !hasOwn(event, k)) return AGAIN;
    key = k;
  }
  if (key === null) return AGAIN;
  const value = event[key];
  switch (key) {
    case 'model_turn':
      return fastTurn(machine, value);
    case 'tool_results':
      return fastResults(machine, value);
    case 'tick': {
      const now = whole(value);
      return now < 0 ? AGAIN : native.tick(machine._id, machine._taken, now);
    }
    default:
      return AGAIN;
  }
}

/** A `call_model` command the addon's answer described (head 1: with tools, 2: without). */
function callModel(head) {
  return { command: 'call_model', delay_ms: 0, tools: head === 1 };
}

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

/** Milliseconds given as `what` (the addon checks they are whole and in range). */
function millis(what, ms) {
  if (typeof ms !== 'number') throw inputError(what, `a ${typeof ms} is not a number of milliseconds`);
  return ms;
}

/** A clock reading for the session (milliseconds; default now). */
function nowOf(nowMs) {
  return nowMs === undefined || nowMs === null ? Date.now() : millis('nowMs', nowMs);
}

/** Messages as JSON text for the host core: an array of messages (`messageText`). */
function messagesText(messages) {
  if (!Array.isArray(messages)) throw inputError('messages', 'not an array of messages');
  messages.forEach((m, i) => {
    if (m === null || typeof m !== 'object') throw inputError(`messages[${i}]`, `a ${m === null ? 'null' : typeof m} is not a message`);
  });
  return messageText('messages', messages);
}

/**
 * Messages as JSON text for the host core, which reads a framework's messages as they are:
 * plain JSON values, or objects of a class (a LangChain JS message) read by their own fields, not
 * by the class's `toJSON`, without LangChain's `lc_*` fields. What is not JSON in them (a
 * provider's object in the metadata, a tool's `artifact`, bytes) is left out: the core reads none
 * of it. A value with a cycle, or no message at all, throws an `Error` naming `root`.
 */
function messageText(root, value) {
  const plain = function (key, v) {
    const raw = this[key];
    if (typeof raw === 'bigint' || typeof raw === 'function' || typeof raw === 'symbol') return undefined;
    if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) return v;
    if (ArrayBuffer.isView(raw) || raw instanceof ArrayBuffer) return undefined;
    const proto = Object.getPrototypeOf(raw);
    if (proto === Object.prototype || proto === null) return v;
    return Object.fromEntries(Object.entries(raw).filter(([k]) => !k.startsWith('lc_') && k !== 'artifact'));
  };
  if (value === null || typeof value !== 'object') throw inputError(root, `a ${value === null ? 'null' : typeof value} is not a message`);
  let text;
  try {
    text = JSON.stringify(value, plain);
  } catch (e) {
    throw inputError(root, `not JSON: ${e.message}`);
  }
  return text;
}

/** A plain JSON object (not an instance of a class, such as a zod schema). */
const isPlain = (v) => v !== null && typeof v === 'object' && !Array.isArray(v) && [Object.prototype, null].includes(Object.getPrototypeOf(v));

/**
 * A tool's arguments' JSON Schema, where the frameworks keep it: `parameters` (OpenAI, OpenAI
 * Agents), `function.parameters`, `inputSchema` (MCP; the AI SDK's `jsonSchema()`, whose
 * `jsonSchema` is the schema), `schema` (LangChain with a JSON Schema). A schema the host cannot
 * give as JSON (a zod object) is left out: the adapter converts it, or the values stay as written.
 */
function schemaOf(tool) {
  for (const v of [tool.parameters, tool.function && tool.function.parameters, tool.inputSchema, tool.schema]) {
    if (v && isPlain(v.jsonSchema)) return v.jsonSchema;
    if (isPlain(v)) return v;
  }
  return undefined;
}

/**
 * The tools a model call offered, as JSON text for the core (each `name` or `{ name,
 * parameters }`): names, or tool objects as the framework has them (`name`, or `function.name`),
 * each with its schema ([`schemaOf`]). Entries without a name are skipped; null is undefined (the
 * host does not know).
 */
function offeredText(offered) {
  if (offered === undefined || offered === null) return undefined;
  if (!Array.isArray(offered)) throw inputError('offered', 'not an array of tools or names');
  const tools = [];
  offered.forEach((t, i) => {
    if (typeof t === 'string') {
      if (t) tools.push(t);
      return;
    }
    if (t === null || typeof t !== 'object') throw inputError(`offered[${i}]`, 'not a tool or a name');
    const name = t.name || (t.function && t.function.name);
    if (typeof name !== 'string' || !name) return;
    // The schema as JSON (what is not JSON in it, an `undefined` default, dropped); one that
    // cannot be written at all (a cycle) is left out, and the values stay as written.
    let parameters;
    try {
      const schema = schemaOf(t);
      parameters = schema && JSON.parse(JSON.stringify(schema));
    } catch {
      parameters = undefined;
    }
    tools.push(isPlain(parameters) ? { name, parameters } : name);
  });
  return jsonText('offered', tools);
}

const parsed = (text) => (text === null || text === undefined ? null : JSON.parse(text));

/**
 * The host core for a framework adapter (`terminus_runtime::host::Session`, as
 * `terminus_kernel._native.Session` in Python): one run, fed the framework's messages as they
 * are (OpenAI chat, LangChain, AI SDK, Pydantic AI, OpenAI Agents shapes, as plain JSON
 * values), answering each hook with a step: `jump` (`'model'`, `'tools'`, `'end'` or null),
 * `delay_ms`, `tools`, `nudges`, `notices` (for the tool message `notice_to`), `answers` (tool
 * messages instead of running those calls), `written` (the reply's calls written in its text),
 * `drop_reply`, `verify` (answer with `verdict`), `report`. Every bad input throws an `Error`
 * naming its path, and changes nothing.
 */
/** A policy as the core reads it: JSON text, or `undefined` for the defaults. */
function policyText(policy) {
  return policy === undefined || policy === null ? undefined : jsonText('policy', policy);
}

/** A task's size in units, checked: `undefined` when none. */
function scaleOf(scale) {
  if (scale !== undefined && scale !== null && !(Number.isSafeInteger(scale) && scale >= 0)) {
    throw inputError('scale', 'not a whole number of at least 0');
  }
  return scale ?? undefined;
}

class Session {
  constructor(native) {
    this._native = native;
  }

  /**
   * A run of the task of `messages` (the first user message) under `policy`, started at `nowMs`
   * (default now; the policy's deadline counts from it), the policy scaled for `scale` units
   * when given: `[session, firstStep]`.
   */
  static start(policy, messages, nowMs, scale) {
    const session = new Session(native.NativeSession.start(policyText(policy), messagesText(messages), nowOf(nowMs), scaleOf(scale)));
    return [session, JSON.parse(session._native.takeFirst())];
  }

  /**
   * `policy` as every run of a framework adapter takes it, checked and scaled once for `scale`
   * units (an object): what `start` refuses (a bad field, `auto_checkpoints`, a bad scale) throws
   * here, naming it, when the adapter is built, and no run scales it again.
   */
  static checkPolicy(policy, scale) {
    return JSON.parse(native.NativeSession.checkPolicy(policyText(policy), scaleOf(scale)));
  }

  /**
   * The model's reply (`offered`: the tools the call offered, or null: names, or tool objects as
   * the framework has them, each with its arguments' JSON Schema when it has one;
   * `outputTools`: the names of the framework's output tools, whose call is a structured answer,
   * read as the reply's text): a step, or `null` when that reply was fed already.
   */
  reply(message, offered, nowMs, outputTools) {
    const text = messageText('message', message);
    if (outputTools !== undefined && outputTools !== null) {
      if (!Array.isArray(outputTools)) throw inputError('outputTools', 'not an array of names');
      outputTools.forEach((n, i) => {
        if (typeof n !== 'string') throw inputError(`outputTools[${i}]`, 'not a string');
      });
    }
    const tools = offeredText(offered);
    return parsed(this._native.reply(text, tools, nowOf(nowMs), outputTools ?? undefined));
  }

  /** The results of the tool turn out, read after the last reply: a step, or `null`. */
  results(messages, nowMs) {
    return parsed(this._native.results(messagesText(messages), nowOf(nowMs)));
  }

  /** A failed model call of the kernel's class, with the delay the provider asked for. */
  modelError(kind, retryAfterMs, nowMs) {
    if (typeof kind !== 'string') throw inputError('kind', 'not a string');
    const retry = retryAfterMs === undefined || retryAfterMs === null ? undefined : millis('retryAfterMs', retryAfterMs);
    return JSON.parse(this._native.modelError(kind, retry, nowOf(nowMs)));
  }

  /** The verifier's verdict (`true`/`false`, `[complete, feedback]` or `{ complete, feedback?, missing? }`) on the step's `verify`. */
  verdict(verdict) {
    return JSON.parse(this._native.verdict(jsonText('verdict', verdict)));
  }

  /** The rules' verdict on the step's `verify`, for a host without a verifier. */
  verdictByRules() {
    return JSON.parse(this._native.verdictByRules());
  }

  /** Ends a run something else ended: the last step, or `null` when the run had ended. */
  finish(messages, nowMs) {
    return parsed(this._native.finish(messagesText(messages), nowOf(nowMs)));
  }

  /** What the run awaits, for the tool hooks (`Session.gate`). */
  turn() {
    return JSON.parse(this._native.turn());
  }

  /**
   * What a call about to run gets, from a `turn()`: `{ refuse: { tool_call_id, name, content,
   * error? } }` or `{ run: { warning? } }`.
   */
  static gate(turn, callId, name, hasTool) {
    if (typeof callId !== 'string') throw inputError('callId', 'not a string');
    if (typeof name !== 'string') throw inputError('name', 'not a string');
    return JSON.parse(native.NativeSession.gate(jsonText('turn', turn), callId, name, Boolean(hasTool)));
  }

  /** Whether the run ended. */
  get ended() {
    return this._native.ended;
  }

  /** Whether a tool turn waits for its results. */
  get batchOut() {
    return this._native.batchOut;
  }

  /** The report (as `Machine.report()`). */
  report() {
    return JSON.parse(this._native.report());
  }

  /** Why the run stopped and what to change: the text `terminus inspect` prints. */
  explain() {
    return this._native.explain();
  }

  /** The session as JSON text. */
  snapshot() {
    return this._native.snapshot();
  }

  /** A session saved by `snapshot()`; text that is not one throws an `Error` naming why. */
  static restore(snapshot) {
    if (typeof snapshot !== 'string') throw inputError('snapshot', `a ${typeof snapshot} is not snapshot text`);
    return new Session(native.NativeSession.restore(snapshot));
  }
}

/**
 * Runs a scenario (a path to a scenario file, or the scenario as an object) in process: the
 * report `terminus run --json` gives, but the execution id. Synchronous: it blocks the event
 * loop for the run (scripted delays included).
 */
function runScenario(pathOrObject) {
  if (typeof pathOrObject === 'string') return JSON.parse(native.runScenario(pathOrObject, false));
  if (pathOrObject instanceof URL) return JSON.parse(native.runScenario(require('node:url').fileURLToPath(pathOrObject), false));
  return JSON.parse(native.runScenario(jsonText('scenario', pathOrObject), true));
}

/**
 * The kernel's class of a provider failure (`rate_limited`, `server`, `timeout`, `auth`,
 * `bad_request`, `context_overflow`) from its HTTP status and the error's text or body: the
 * table every host shares (the command line's HTTP client and the Python binding give the same
 * class for the same failure). A status outside 100-599 throws.
 */
function providerErrorKind(status, text) {
  if (!Number.isInteger(status)) throw new TypeError(`status: ${status} is not an HTTP status (100-599)`);
  return native.providerErrorKind(status, String(text ?? ''));
}

/**
 * The delay a provider asked for, in milliseconds, from its `retry-after-ms` and `retry-after`
 * header values (seconds or an HTTP date), capped at 60 s, or `undefined` when neither says one:
 * the parser every host shares (the command line's HTTP client and the Python binding read the
 * same headers the same way). A value that is neither a string nor a finite number counts as
 * absent.
 */
function retryAfterMs(retryAfterMsHeader, retryAfterHeader) {
  const text = (v) => (typeof v === 'string' ? v : typeof v === 'number' && Number.isFinite(v) ? String(v) : null);
  const ms = native.retryAfterMs(text(retryAfterMsHeader), text(retryAfterHeader));
  return ms ?? undefined;
}

const { runPlan, generatePlan, PlanError } = require('./plan.js').makeRunPlan(native, jsonText);

/**
 * Whether `text`, taken for an agent's answer in a run nobody answers, only hands the task back
 * (asks for more, apologises, tells the reader to act, disclaims itself, closes courteously): the
 * kernel's own rule (docs/design.md, "What a final answer is"), for an agent whose reply does not
 * go through a `Session`.
 */
function isNonAnswer(text) {
  if (typeof text !== 'string') throw new TypeError('text: must be a string');
  return native.isNonAnswer(text);
}

module.exports = { Machine, Session, runScenario, runPlan, generatePlan, PlanError, isNonAnswer, providerErrorKind, retryAfterMs, version: require('./package.json').version };
