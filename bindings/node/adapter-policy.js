'use strict';
// What every framework adapter checks of its policy when it is built, how it has a step's
// verification answered, where the kernel's notices go in a text and how a failure reads (internal: not exported
// by the package's "exports").

const { Session } = require('./index.js');
const { native } = require('./loader.js');

/**
 * `policy` checked and scaled once for `scale` units, as every run of the adapter takes it (the
 * host core's `Session.checkPolicy`): a bad one throws here, naming it, not mid-run: an unknown
 * or ill-typed field, a bad `scale`, and a `scale` the policy has no `budget_scale` for (it
 * would change nothing). Runs start from the policy it returns, with no scale: none scales it
 * again.
 */
function checkPolicy(policy, scale) {
  return Session.checkPolicy(policy ?? null, scale);
}

/**
 * `step` with the verifications it asks answered, in turn, until one gives a step that asks none:
 * by `ask(step.verify)` (sync or async; the adapter's verifier, called in its framework's shape),
 * whose answer the host core reads as it is (`true`/`false`, `[complete, feedback]` or
 * `{ complete, feedback?, missing? }`; anything else throws, naming `verdict`), or without `ask`
 * by the rules (the host core's verdict). Returns the step the last verdict gave (`step` itself
 * when it asked none).
 */
async function verified(session, step, ask) {
  while (step && step.verify) step = ask ? session.verdict(await ask(step.verify)) : session.verdictByRules();
  return step;
}

/**
 * `content` with `notices` (a step's, or a tool's budget warning) after it: joined by blank
 * lines, after a blank line, or alone when `content` is empty; the host core's rule, the one
 * `terminus run` follows.
 */
function withNotices(content, notices) {
  return native.withNotices(String(content ?? ''), notices.map(String));
}

/** A tool's failure as the model reads it in `terminus run` (`error (KIND): MESSAGE`). */
function failureText(kind, message) {
  return native.failureText(String(kind), String(message));
}

/**
 * The user message a step's `checkpoint` adds before the next model call: its `note`, a blank
 * line, then the model's summary (`{ text }`, trimmed), or why there is none (`{ error: KIND,
 * message }` for a failed call, `null` for no answer in time); the words `terminus run` writes.
 */
function checkpointMessage(note, summary) {
  if (summary && summary.text !== undefined) return native.checkpointMessage(String(note), String(summary.text ?? ''), null, null);
  if (summary && summary.error) return native.checkpointMessage(String(note), null, String(summary.error), String(summary.message ?? ''));
  return native.checkpointMessage(String(note), null, null, null);
}

module.exports = { checkPolicy, verified, withNotices, failureText, checkpointMessage };
