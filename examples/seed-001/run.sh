#!/usr/bin/env bash
# Seed 001's orchestrator in TypeScript (orchestrator.ts) on the terminus-kernel package:
# compiles it with the package's TypeScript (`tsc --strict`) into target/seed-001-ts (or
# $TERMINUS_SEED_001_OUT) and runs it with Node; the arguments go to it:
#   --model URL        the planner and the agents on an OpenAI-compatible server (llama-server
#                      on 127.0.0.1:8089, docs/plans.md); without it, scripted offline
#   --task TEXT        the task (a market report for a bakery chain by default)
#   --execution ID     the run's id (default seed-001-<unix ms>); the same id again goes on
#                      from the kept plan and progress without running what completed
#   --context DIR      where the plan and progress are kept (default: the current folder)
# The package's native addon and npm packages are built and installed first when absent.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
pkg="$root/bindings/node"
if [ ! -d "$pkg/node_modules/typescript" ]; then
  (cd "$pkg" && npm ci --prefer-offline --no-audit --no-fund --loglevel=error)
fi
if ! compgen -G "$pkg/terminus-kernel.*.node" >/dev/null; then
  (cd "$pkg" && npm run --silent build:debug)
fi
out=${TERMINUS_SEED_001_OUT:-$root/target/seed-001-ts}
mkdir -p "$out/node_modules"
ln -sfn "$pkg" "$out/node_modules/terminus-kernel"
cp "$here/orchestrator.ts" "$out/orchestrator.ts"
node "$pkg/node_modules/typescript/bin/tsc" --strict --target es2022 --module nodenext \
  --moduleResolution nodenext --skipLibCheck --typeRoots "$pkg/node_modules/@types" --types node \
  --outDir "$out" "$out/orchestrator.ts"
exec node "$out/orchestrator.js" "$@"
