'use strict';
// What every framework adapter checks of its policy when it is built (internal: not exported
// by the package's "exports").

const { Machine } = require('./index.js');

/**
 * Validates `policy` now (a bad field fails here, not mid-run), and refuses what a framework
 * adapter does not carry out: `policy.auto_checkpoints` (a checkpoint written for the agent needs
 * the host to ask its model for a summary; `terminus agent` and a host driving `Machine` itself
 * answer the `checkpoint` command); and a `scale` the policy has no `budget_scale` for (as a
 * scenario's `scale`, and as the Python adapters: it would change nothing).
 */
function checkPolicy(policy, adapter, scale) {
  new Machine(policy ?? null, { scale });
  const fields = policy || {}; // an object: Machine refused anything else
  if (scale != null && !fields.budget_scale) throw new Error('scale: the policy has no budget_scale to scale by it');
  if (fields.auto_checkpoints) {
    throw new Error(
      `policy.auto_checkpoints: ${adapter} does not write checkpoints for the agent; leave it 0 here ` +
        '(terminus agent, or a host driving Machine and answering its `checkpoint` command, writes them)',
    );
  }
}

module.exports = { checkPolicy };
