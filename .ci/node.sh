#!/usr/bin/env bash
# The Node.js binding's tests: installs the pinned npm packages of bindings/node (its
# package-lock.json, with `npm ci`), builds the native addon with napi-rs's CLI and runs the
# `node --test` suite.
#
# `npm ci` prefers npm's own cache (~/.npm), so a machine that has installed the pins once
# installs them again without the network. The build profile is cargo's `dev` by default, so
# the addon reuses what `cargo test --workspace` compiled; TERMINUS_NODE_PROFILE=release builds
# it as `npm run build` does. The equivalence tests compare with the `terminus` binary of
# target/debug, built here if absent (or $TERMINUS_BIN). Extra arguments go to `node --test`
# (`.ci/node.sh --test-name-pattern=explicit`).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
profile=${TERMINUS_NODE_PROFILE:-dev}
cd "$root/bindings/node"

echo "node: $(node --version), npm $(npm --version)"
echo "node: npm ci (bindings/node/package-lock.json)"
npm ci --prefer-offline --no-audit --no-fund --loglevel=error

echo "node: napi build (cargo profile $profile)"
if [ "$profile" = release ]; then
  npm run --silent build
else
  npm run --silent build:debug
fi

if [ -z "${TERMINUS_BIN:-}" ]; then
  (cd "$root" && cargo build --quiet -p terminus-cli)
  export TERMINUS_BIN="$root/target/debug/terminus"
fi

node --test "$@" test/*.test.js
