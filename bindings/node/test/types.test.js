'use strict';
// The package's TypeScript types compile a host's use of them (test/types.ts, `tsc --strict`),
// `terminus-kernel/langchain` in `langchain`'s `createAgent` and `terminus-kernel/openai-agents`
// with an `@openai/agents` `Agent` included.

const test = require('node:test');
const assert = require('node:assert/strict');
const { spawnSync } = require('node:child_process');
const { join } = require('node:path');

test('index.d.ts, ai.d.ts, langchain.d.ts and openai-agents.d.ts type a TypeScript host (tsc --noEmit --strict)', () => {
  const tsc = join(__dirname, '..', 'node_modules', 'typescript', 'bin', 'tsc');
  const done = spawnSync(process.execPath, [
    tsc, '--noEmit', '--strict', '--target', 'es2022', '--module', 'nodenext',
    '--moduleResolution', 'nodenext', '--skipLibCheck', join(__dirname, 'types.ts'),
  ], { cwd: join(__dirname, '..'), encoding: 'utf8' });
  assert.equal(done.status, 0, done.stdout + done.stderr);
});
