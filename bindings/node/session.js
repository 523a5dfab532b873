'use strict';
// `Session`: the host core a framework adapter drives (`terminus_runtime::host::Session`).

const { native } = require('./loader.js');
const { inputError, jsonText } = require('./json.js');

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
   * units (an object): what `start` refuses (a bad field, a bad scale) throws
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

module.exports = { Session };
