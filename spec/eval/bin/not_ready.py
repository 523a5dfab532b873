#!/usr/bin/env python3
"""A small MCP server (stdio, newline-delimited JSON-RPC) with one tool, `fetch_report`, that
answers "not ready, try again" until its READY_AT-th call (the first argument, default 5; 0:
never), then the report. The count is kept in `.fetch_report_calls` in the folder the server
starts in (the trial's folder), so each trial starts from zero: the poller and the tool that never
becomes ready of spec/eval/suite.toml."""

import json
import pathlib
import sys

COUNT = pathlib.Path(".fetch_report_calls")
READY_AT = int(sys.argv[1]) if len(sys.argv) > 1 else 5
REPORT = "Quarterly report: 4217 units shipped."
TOOL = {
    "name": "fetch_report",
    "description": "Fetch the quarterly report. It may not be ready yet.",
    "inputSchema": {"type": "object", "properties": {}},
}


def answer(request_id, result=None, error=None):
    message = {"jsonrpc": "2.0", "id": request_id}
    if error is not None:
        message["error"] = error
    else:
        message["result"] = result
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def main():
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        method, request_id = request.get("method"), request.get("id")
        if request_id is None:
            continue  # a notification
        if method == "initialize":
            version = (request.get("params") or {}).get("protocolVersion", "2025-11-25")
            answer(request_id, {
                "protocolVersion": version,
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "not-ready", "version": "1.0.0"},
            })
        elif method == "tools/list":
            answer(request_id, {"tools": [TOOL]})
        elif method == "tools/call":
            calls = int(COUNT.read_text()) + 1 if COUNT.exists() else 1
            COUNT.write_text(str(calls))
            text = REPORT if 0 < READY_AT <= calls else "not ready, try again"
            answer(request_id, {"content": [{"type": "text", "text": text}]})
        elif method == "ping":
            answer(request_id, {})
        else:
            answer(request_id, error={"code": -32601, "message": f"no method {method}"})


if __name__ == "__main__":
    main()
