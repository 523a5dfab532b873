"""A one-tool MCP server over stdio (newline-delimited JSON-RPC), for the eval's small tool
servers: `serve(name, tool, call)` answers `initialize`, `tools/list`, `ping` and `tools/call`
(with `call(arguments)` returning the result object)."""

import json
import sys


def answer(request_id, result=None, error=None):
    message = {"jsonrpc": "2.0", "id": request_id}
    if error is not None:
        message["error"] = error
    else:
        message["result"] = result
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def serve(name, tool, call):
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        method, request_id = request.get("method"), request.get("id")
        if request_id is None:
            continue  # a notification
        params = request.get("params") or {}
        if method == "initialize":
            answer(request_id, {
                "protocolVersion": params.get("protocolVersion", "2025-11-25"),
                "capabilities": {"tools": {}},
                "serverInfo": {"name": name, "version": "1.0.0"},
            })
        elif method == "tools/list":
            answer(request_id, {"tools": [tool]})
        elif method == "tools/call":
            answer(request_id, call(params.get("arguments") or {}))
        elif method == "ping":
            answer(request_id, {})
        else:
            answer(request_id, error={"code": -32601, "message": f"no method {method}"})
