'use strict';
// What every framework adapter checks of its policy when it is built (internal: not exported
// by the package's "exports").

const { Session } = require('./index.js');

/**
 * Checks `policy` and `scale` now, as the host core checks them at every run's start, so that a
 * bad one throws here, naming it, not mid-run: an unknown or ill-typed field,
 * `policy.auto_checkpoints` (a checkpoint written for the agent needs the host to ask its model
 * for a summary; `terminus agent` and a host driving `Machine` itself answer the `checkpoint`
 * command), a bad `scale`, and a `scale` the policy has no `budget_scale` for (it would change
 * nothing).
 */
function checkPolicy(policy, scale) {
  Session.start(policy ?? null, [], 0, scale);
}

module.exports = { checkPolicy };
