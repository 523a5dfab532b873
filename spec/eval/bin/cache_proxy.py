#!/usr/bin/env python3
"""A loopback proxy in front of llama-server that prints, per chat completion, how much of the
prompt the server's prompt cache held: `timings.cache_n` (tokens reused) against
`timings.prompt_n` (tokens evaluated). Used to measure that the requests of one run keep a
byte-identical prefix (docs/performance.md, "Prompt cache"). Non-streamed requests only.

    cache_proxy.py LISTEN_PORT UPSTREAM_URL   # e.g. 8090 http://127.0.0.1:8089
"""

import http.server
import json
import sys
import urllib.request

PORT, UPSTREAM = int(sys.argv[1]), sys.argv[2].rstrip("/")


class Proxy(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        request = urllib.request.Request(UPSTREAM + self.path, data=body, method="POST")
        request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=600) as response:
                status, data = response.status, response.read()
        except urllib.error.HTTPError as e:
            status, data = e.code, e.read()
        try:
            timings = json.loads(data).get("timings") or {}
            cached, evaluated = timings.get("cache_n", 0), timings.get("prompt_n", 0)
            total = cached + evaluated
            share = 100.0 * cached / total if total else 0.0
            print(f"cache {cached} evaluated {evaluated} prompt {total} cached {share:.1f}%", flush=True)
        except (ValueError, AttributeError):
            pass
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


http.server.ThreadingHTTPServer(("127.0.0.1", PORT), Proxy).serve_forever()
