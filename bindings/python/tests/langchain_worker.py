"""One process of a checkpointed architect run, for the crash-and-resume tests.

``python langchain_worker.py SPEC.json`` runs (or, with ``"resume": true``, resumes) the thread
named in the spec with a SQLite checkpointer. The scripted model ends this process with
``os._exit(17)`` when it is asked for turn ``exit_at``; a process that finishes writes the final
state's report and file paths to ``out``. Every model call and every tool execution is logged with
the process id.

Spec keys: ``db``, ``thread``, ``script`` (``"architect"`` or ``"chain"``), ``policy``,
``exit_at`` (or null), ``resume``, ``model_log``, ``tool_log``, ``out``.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import seed_architect as seed  # noqa: E402
from langgraph.checkpoint.sqlite import SqliteSaver  # noqa: E402
from terminus_kernel.langchain import TerminusMiddleware  # noqa: E402

SCRIPTS = {"architect": seed.ARCHITECT, "chain": seed.honest_chain(40)}


def main(spec_path: str) -> int:
    """Runs one process of the spec's thread; returns the exit code."""
    spec: dict[str, Any] = json.loads(Path(spec_path).read_text(encoding="utf-8"))
    model = seed.ScriptedChatModel(
        script=SCRIPTS[spec["script"]],
        log_path=spec["model_log"],
        exit_at=spec.get("exit_at"),
    )
    conn = sqlite3.connect(spec["db"], check_same_thread=False)
    saver = SqliteSaver(conn)
    agent = seed.build_agent(
        model,
        middleware=[TerminusMiddleware(spec["policy"]), seed.ToolLog(spec["tool_log"])],
        checkpointer=saver,
    )
    config = {"configurable": {"thread_id": spec["thread"]}}
    payload = None if spec.get("resume") else seed.task_input()
    # Each step's checkpoint is written before the next step starts, so a crash loses no step.
    final = agent.invoke(payload, config, durability="sync")
    out = {"report": final.get("terminus"), "files": sorted(final.get("files") or {})}
    Path(spec["out"]).write_text(json.dumps(out), encoding="utf-8")
    conn.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
