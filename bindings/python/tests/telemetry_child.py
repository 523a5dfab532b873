"""The process the telemetry tests of test_telemetry.py run (a process starts its telemetry once,
from its environment): ``telemetry_child.py MODE``.

- ``plan``: starts the telemetry twice, runs a plan whose ``flaky`` agent fails once and is
  retried and whose ``research`` agent fails and is degraded, and exits without shutting the
  telemetry down (the exit handler flushes). Prints one JSON line: what each ``start`` said, the
  report's outcome and reason, and the metrics as Prometheus text.
- ``lifecycle``: the metrics before ``start``, ``shutdown`` then ``start`` again. Prints one JSON
  line: ``metrics_before`` (null), whether spans were exported, and the error of the second start.
- ``bad``: ``start`` with what the environment gives; prints the exception's class and message.
"""

from __future__ import annotations

import asyncio
import json
import sys

from terminus_kernel import run_plan, telemetry

PLAN = {
    "name": "traced",
    "limits": {"agent_max_retries": 2, "agent_retry_base_delay_ms": 10},
    "agents": [
        {
            "id": "research",
            "on_error": "skip",
            "degraded_result": "no research available",
            "task": "Research the competitors.",
        },
        {"id": "flaky", "retryable": True, "task": "Call the flaky service."},
        {"id": "summary", "depends_on": ["research", "flaky"], "task": "Sum up {research}, {flaky}"},
    ],
}


def plan() -> None:
    first = telemetry.start()
    again = telemetry.start()
    calls = {"flaky": 0}

    async def research(task: str, context: object) -> str:
        raise RuntimeError("the search service refused the key")

    async def flaky(task: str, context: object) -> str:
        calls["flaky"] += 1
        if calls["flaky"] == 1:
            raise RuntimeError("the service is down")
        return "42 units"

    async def summary(task: str, context: object) -> str:
        return f"summary of: {task}"

    report = asyncio.run(
        run_plan(PLAN, agents={"research": research, "flaky": flaky, "summary": summary})
    )
    print(
        json.dumps(
            {
                "first": [first.exporting_spans, first.already],
                "again": [again.exporting_spans, again.already],
                "outcome": report["outcome"],
                "reason": report["reason"],
                "metrics": telemetry.metrics_text(),
            }
        )
    )


def lifecycle() -> None:
    before = telemetry.metrics_text()
    started = telemetry.start()
    telemetry.flush()
    telemetry.shutdown()
    telemetry.shutdown()
    try:
        telemetry.start()
        error = None
    except RuntimeError as e:
        error = str(e)
    print(
        json.dumps(
            {
                "metrics_before": before,
                "exporting_spans": started.exporting_spans,
                "metrics_after": telemetry.metrics_text(),
                "second_start": error,
            }
        )
    )


def bad() -> None:
    try:
        telemetry.start()
        print(json.dumps({"error": None}))
    except Exception as e:  # noqa: BLE001 - the class is what the test checks
        print(json.dumps({"error": type(e).__name__, "message": str(e)}))


if __name__ == "__main__":
    {"plan": plan, "lifecycle": lifecycle, "bad": bad}[sys.argv[1]]()
