#!/usr/bin/env python3
"""A small MCP server (stdio, newline-delimited JSON-RPC) with one tool, `fetch_report`, that
answers "not ready, try again" until its READY_AT-th call (the first argument, default 5; 0:
never), then the report. The count is kept in `.fetch_report_calls` in the folder the server
starts in (the trial's folder), so each trial starts from zero: the poller and the tool that never
becomes ready of spec/eval/suite.toml."""

import pathlib
import sys

from one_tool_server import serve

COUNT = pathlib.Path(".fetch_report_calls")
READY_AT = int(sys.argv[1]) if len(sys.argv) > 1 else 5
REPORT = "Quarterly report: 4217 units shipped."
TOOL = {
    "name": "fetch_report",
    "description": "Fetch the quarterly report. It may not be ready yet.",
    "inputSchema": {"type": "object", "properties": {}},
}


def fetch(_arguments):
    calls = int(COUNT.read_text()) + 1 if COUNT.exists() else 1
    COUNT.write_text(str(calls))
    text = REPORT if 0 < READY_AT <= calls else "not ready, try again"
    return {"content": [{"type": "text", "text": text}]}


if __name__ == "__main__":
    serve("not-ready", TOOL, fetch)
