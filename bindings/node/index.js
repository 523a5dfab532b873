'use strict';
// terminus-kernel: the Terminus agent kernel for Node.js.
//
// A thin layer over the native addon (`src/lib.rs`, built by `npm run build`), which wraps
// `terminus_runtime::host::Host`: the same JSON vocabulary as the Rust runtime and the Python
// binding (`docs/embedding.md`). Values cross the boundary as JSON text. Before an event, a
// policy or a scenario object is serialized it is checked to be JSON (plain objects and arrays,
// strings, finite numbers, booleans, null; an `undefined` property is absent, as in
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

/**
 * The kernel: feed it events with `handle`, take its commands with `nextCommand`. The same
 * machine as `terminus_kernel.Machine` in Python and `terminus_runtime::host::Host` in Rust.
 */
class Machine {
  /**
   * @param {object | null} [policy] the scenario `policy` fields, same names and defaults.
   * @param {{ task?: string, name?: string | null }} [options] label the run in `explain()`.
   */
  constructor(policy, options) {
    const text = policy === undefined || policy === null ? undefined : jsonText('policy', policy);
    let task;
    let name;
    if (options !== undefined && options !== null) {
      if (typeof options !== 'object') throw inputError('options', 'not an object');
      ({ task, name } = options);
      if (task !== undefined && typeof task !== 'string') throw inputError('options.task', 'not a string');
      if (name !== undefined && name !== null && typeof name !== 'string') {
        throw inputError('options.name', 'not a string');
      }
    }
    this._native = new native.NativeMachine(text, task, name ?? undefined);
    /** How many commands wait in the kernel: `nextCommand` answers `null` without a call at 0. */
    this._pending = this._native.pending;
  }

  /**
   * Feeds one event; returns `"step"`, `"observed"` or `"ignored"`. A malformed event throws an
   * `Error` naming its JSON path and changes nothing.
   */
  handle(event) {
    const handled = this._native.handle(jsonText('event', event));
    this._pending = handled >>> 2;
    return HANDLED[handled & 3];
  }

  /** The next command, or `null` while the kernel waits for an event. */
  nextCommand() {
    if (this._pending === 0) return null;
    const text = this._native.nextCommand();
    this._pending = text === null ? 0 : this._pending - 1;
    return text === null ? null : JSON.parse(text);
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

  /** The whole machine as JSON text. */
  snapshot() {
    return this._native.snapshot();
  }

  /** A machine saved by `snapshot()`; text that is not one throws an `Error` naming why. */
  static restore(snapshot) {
    if (typeof snapshot !== 'string') throw inputError('snapshot', `a ${typeof snapshot} is not snapshot text`);
    const machine = Object.create(Machine.prototype);
    machine._native = native.NativeMachine.restore(snapshot);
    machine._pending = machine._native.pending;
    return machine;
  }

  toString() {
    const s = this.stats;
    return `<terminus-kernel Machine ${this.phase} steps=${s.steps} model_calls=${s.model_calls} tool_calls=${s.tool_calls}>`;
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

module.exports = { Machine, runScenario, version: require('./package.json').version };
