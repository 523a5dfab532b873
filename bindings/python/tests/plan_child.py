"""The process the kill-and-resume test of test_plan.py runs twice: a plan of host functions
whose progress is kept in a file after every change. Each call of an agent function is appended
to the calls file first; with KILL_IN set, that agent's function SIGKILLs the process (a Lambda
timed out mid-plan). Prints the report as JSON on the last line."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

from terminus_kernel import run_plan

PLAN = {
    "name": "resume",
    "limits": {
        "agent_max_retries": 5,
        "agent_retry_base_delay_ms": 20000,
        "circuit_breaker_failure_threshold": 2,
    },
    "agents": [
        {"id": "collect", "task": "Collect the sources."},
        {"id": "flaky", "retryable": True, "task": "Call the flaky service."},
        {"id": "analyse", "depends_on": ["collect"], "task": "Analyse {collect}"},
    ],
}


def main() -> None:
    progress_file, calls_file = Path(sys.argv[1]), Path(sys.argv[2])

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

    report = asyncio.run(
        run_plan(
            PLAN,
            execution="resume-1",
            progress=progress_file.read_text() if progress_file.exists() else None,
            on_progress=keep,
            on_event=lambda e: print(e["line"], file=sys.stderr),
            agents={"collect": collect, "flaky": flaky, "analyse": analyse},
        )
    )
    print(json.dumps(report))


if __name__ == "__main__":
    main()
