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
//
// The rooms: `loader.js` (the addon), `json.js` (the JSON check), `fast.js` (the fast path),
// `machine.js` (`Machine`), `session.js` (`Session`, the host core of the framework adapters),
// `plan.js` (`runPlan`, `generatePlan`), `telemetry.js` (`telemetry`); this file, the functions of the module and its exports.

const { native } = require('./loader.js');
const { jsonText } = require('./json.js');
const { Machine } = require('./machine.js');
const { Session } = require('./session.js');

/**
 * Runs a scenario (a path to a scenario file, or the scenario as an object) in process: the
 * report `terminus run --json` gives, but the execution id. Synchronous: it blocks the event
 * loop for the run (scripted delays included). With `{ transcript: true }`, `{ report,
 * transcript }`: the report and what the scripted model was sent, call by call (each message
 * `{ role, text }`, with `calls` or `tool`), the host suite's reference.
 */
function runScenario(pathOrObject, options = {}) {
  const transcript = options.transcript === true;
  if (typeof pathOrObject === 'string') return JSON.parse(native.runScenario(pathOrObject, false, transcript));
  if (pathOrObject instanceof URL) return JSON.parse(native.runScenario(require('node:url').fileURLToPath(pathOrObject), false, transcript));
  return JSON.parse(native.runScenario(jsonText('scenario', pathOrObject), true, transcript));
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

const telemetry = require('./telemetry.js').makeTelemetry(native);

module.exports = { Machine, Session, runScenario, runPlan, generatePlan, PlanError, telemetry, isNonAnswer, providerErrorKind, retryAfterMs, version: require('./package.json').version };
