"""The process the kill-and-resume tests of test_plan.py run: a plan of host functions whose
progress is kept after every change, in a file (``plan_child.py PROGRESS.json CALLS``) or in a
journal (``PLAN_JOURNAL=1 plan_child.py SQLITE-FILE-OR-POSTGRES-URL CALLS``). Each call of an
agent function is appended to the calls file first; with KILL_IN set, that agent's function
SIGKILLs the process (a Lambda timed out mid-plan). PLAN_EXECUTION names the execution (default
``resume-1``) and PLAN_FLAKY the flaky agent's id (default ``flaky``: a breaker is shared by
every plan on a journal). Prints the report as JSON on the last line."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from terminus_kernel import run_plan

FLAKY = os.environ.get("PLAN_FLAKY", "flaky")
PLAN = {
    "name": "resume",
    "limits": {
        "agent_max_retries": 5,
        "agent_retry_base_delay_ms": 20000,
        "circuit_breaker_failure_threshold": 2,
    },
    "agents": [
        {"id": "collect", "task": "Collect the sources."},
        {"id": FLAKY, "retryable": True, "task": "Call the flaky service."},
        {"id": "analyse", "depends_on": ["collect"], "task": "Analyse {collect}"},
    ],
}


def main() -> None:
    where, calls_file = sys.argv[1], Path(sys.argv[2])
    progress_file = Path(where)

    def called(id_: str) -> None:
        with calls_file.open("a") as f:
            f.write(f"{id_}\n")
        if os.environ.get("KILL_IN") == id_:
            os.kill(os.getpid(), signal.SIGKILL)

    async def collect(task: str, context: object) -> str:
        called("collect")
        await asyncio.sleep(0.3)
        return "3 sources"

    async def flaky(task: str, context: object) -> str:
        called("flaky")
        raise RuntimeError("the service is down")

    async def analyse(task: str, context: object) -> str:
        called("analyse")
        return f"analysis of {task}"

    def keep(progress: dict) -> None:
        # Written whole, then renamed: a kill mid-write leaves the last progress.
        tmp = progress_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(progress))
        tmp.replace(progress_file)

    kept: dict[str, Any] = (
        {"journal": where}
        if os.environ.get("PLAN_JOURNAL")
        else {
            "progress": progress_file.read_text() if progress_file.exists() else None,
            "on_progress": keep,
        }
    )
    report = asyncio.run(
        run_plan(
            PLAN,
            execution=os.environ.get("PLAN_EXECUTION", "resume-1"),
            **kept,
            on_event=lambda e: print(e["line"], file=sys.stderr),
            agents={"collect": collect, FLAKY: flaky, "analyse": analyse},
        )
    )
    print(json.dumps(report))


if __name__ == "__main__":
    main()
