'use strict';
// What every framework adapter checks of its policy when it is built (internal: not exported
// by the package's "exports").

const { Session } = require('./index.js');

/**
 * `policy` checked and scaled once for `scale` units, as every run of the adapter takes it (the
 * host core's `Session.checkPolicy`): a bad one throws here, naming it, not mid-run: an unknown
 * or ill-typed field, `policy.auto_checkpoints` (a checkpoint written for the agent needs the
 * host to ask its model for a summary; `terminus agent` and a host driving `Machine` itself
 * answer the `checkpoint` command), a bad `scale`, and a `scale` the policy has no
 * `budget_scale` for (it would change nothing). Runs start from the policy it returns, with no
 * scale: none scales it again.
 */
function checkPolicy(policy, scale) {
  return Session.checkPolicy(policy ?? null, scale);
}

module.exports = { checkPolicy };
