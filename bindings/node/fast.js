'use strict';
// The machine's fast path: the common events (a model turn, tool results, a clock reading)
// handed to the addon as plain fields when this file can prove every field valid.

const { native } = require('./loader.js');
const { MAX_DEPTH, isJson } = require('./json.js');

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

module.exports = { HANDLED, AGAIN, AGAIN_TAKEN, fastEvent, callModel };
