"""A checkpointed architect killed in the middle of its run and resumed in a new process goes on
with the kernel's counters and budgets: the machine's snapshot is in the graph state, and so in
the SQLite checkpoint.

Each run is two processes of ``langchain_worker.py``: the first ends itself (``os._exit``) when the
model is asked for a given turn; the second resumes the thread from the checkpoint. Every model
call and tool execution is logged with its process id.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

if os.environ.get("CI"):
    import langgraph.checkpoint.sqlite  # noqa: F401  (CI installs the pinned peers)
else:
    pytest.importorskip(
        "langgraph.checkpoint.sqlite",
        reason="pip install -r bindings/python/requirements-langchain.txt",
    )

sys.path.insert(0, str(Path(__file__).resolve().parent))

import seed_architect as seed  # noqa: E402
from terminus_kernel.langchain import REPORT_KEY, TerminusMiddleware  # noqa: E402

WORKER = Path(__file__).resolve().parent / "langchain_worker.py"
COUNTERS = ("outcome", "reason", "steps", "model_calls", "tool_calls", "nudges", "result")
CRASH = 17


def process(spec: dict[str, Any], tmp: Path, name: str) -> subprocess.CompletedProcess[str]:
    """Runs one worker process on ``spec``."""
    path = tmp / f"{name}.json"
    path.write_text(json.dumps(spec), encoding="utf-8")
    return subprocess.run(
        [sys.executable, str(WORKER), str(path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def lines(path: Path) -> list[dict[str, Any]]:
    """A JSON-lines log."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def crash_and_resume(
    tmp: Path, script: str, policy: dict[str, Any], exit_at: int
) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]], tuple[int, int]]:
    """The thread run by a process that dies when the model is asked for turn ``exit_at``, then
    resumed by another: the final output, the model log, the tool log and the two pids."""
    spec = {
        "db": str(tmp / "checkpoints.db"),
        "thread": "architect-1",
        "script": script,
        "policy": policy,
        "exit_at": exit_at,
        "resume": False,
        "model_log": str(tmp / "model.log"),
        "tool_log": str(tmp / "tools.log"),
        "out": str(tmp / "out.json"),
    }
    first = process(spec, tmp, "first")
    assert first.returncode == CRASH, first.stderr
    assert not (tmp / "out.json").exists()
    second = process({**spec, "exit_at": None, "resume": True}, tmp, "second")
    assert second.returncode == 0, second.stderr
    out = json.loads((tmp / "out.json").read_text(encoding="utf-8"))
    model_log = lines(tmp / "model.log")
    pids = list(dict.fromkeys(entry["pid"] for entry in model_log))
    assert len(pids) == 2, pids
    return out, model_log, lines(tmp / "tools.log"), (pids[0], pids[1])


def uninterrupted(script: list[seed.Turn], policy: dict[str, Any]) -> dict[str, Any]:
    """The same thread's report in one process, with no crash."""
    model = seed.ScriptedChatModel(script=script)
    agent = seed.build_agent(model, [TerminusMiddleware(policy)])
    return agent.invoke(seed.task_input())[REPORT_KEY]


def assert_no_tool_ran_twice(tools: list[dict[str, Any]], report: dict[str, Any]) -> None:
    runs = Counter(entry["call_id"] for entry in tools)
    assert runs and max(runs.values()) == 1, runs
    assert len(tools) == report["tool_calls"]


def test_a_killed_architect_resumes_with_its_counters_and_finishes(tmp_path: Path) -> None:
    policy = {"completion_requires": ["write_file"]}
    # Turn 5 is asked after the nudge (turn 3 was the refused stop): the nudge is spent before the
    # kill, and the plan is written after it.
    out, model_log, tools, (first, second) = crash_and_resume(tmp_path, "architect", policy, 5)
    report = out["report"]
    expected = uninterrupted(seed.ARCHITECT, policy)
    assert {k: report[k] for k in COUNTERS} == {k: expected[k] for k in COUNTERS}
    assert (report["outcome"], report["nudges"]) == ("complete", 1)
    assert seed.PLAN_PATH in out["files"]
    # Both processes' model calls are counted: turns 0-4 in the first (and the call it died in),
    # 5-6 in the second.
    by_pid = Counter(entry["pid"] for entry in model_log)
    assert by_pid[first] == 6 and by_pid[second] == 2
    assert report["model_calls"] == len(seed.ARCHITECT)
    assert_no_tool_ran_twice(tools, report)
    assert {entry["pid"] for entry in tools} == {first, second}


def test_a_budget_spent_before_the_kill_stays_spent(tmp_path: Path) -> None:
    policy = {"max_model_calls": 6}
    out, model_log, tools, (first, second) = crash_and_resume(tmp_path, "chain", policy, 4)
    report = out["report"]
    assert (report["outcome"], report["reason"]) == ("aborted", "max_model_calls")
    assert report["model_calls"] == 6
    by_pid = Counter(entry["pid"] for entry in model_log)
    # The first process made 4 calls (and died asking for the fifth); the second only 2 more,
    # not a fresh budget of 6.
    assert by_pid[first] == 5 and by_pid[second] == 2
    assert_no_tool_ran_twice(tools, report)
    expected = uninterrupted(seed.honest_chain(seed.CHAIN_PARTS), policy)
    assert {k: report[k] for k in COUNTERS} == {k: expected[k] for k in COUNTERS}


FIXTURE = Path(__file__).resolve().parent / "fixtures" / "langchain-thread-plain-key.sqlite"
"""A thread the middleware checkpointed when its snapshot was a plain state key (beside a turn
key, since gone): the seed architect under ``SqliteSaver``, paused before its second tool turn
(``interrupt_before=["tools"]``, thread ``m``, policy ``completion_requires: [write_file]``)."""


def test_a_thread_checkpointed_with_the_snapshot_as_a_plain_key_resumes(tmp_path: Path) -> None:
    """The snapshot's channel reads a plain value as its start (LangGraph's migration path): a
    thread written before resumes with its counters, as an uninterrupted run ends."""
    import shutil
    import sqlite3

    from langgraph.checkpoint.sqlite import SqliteSaver

    policy = {"completion_requires": ["write_file"]}
    database = tmp_path / "thread.sqlite"
    shutil.copy(FIXTURE, database)
    conn = sqlite3.connect(database, check_same_thread=False)
    try:
        model = seed.ScriptedChatModel(script=seed.ARCHITECT)
        agent = seed.build_agent(model, [TerminusMiddleware(policy)], SqliteSaver(conn))
        config = {"configurable": {"thread_id": "m"}, "recursion_limit": 200}
        assert agent.get_state(config).next == ("tools",)
        state = agent.invoke(None, config)
    finally:
        conn.close()
    model = seed.ScriptedChatModel(script=seed.ARCHITECT)
    expected = seed.build_agent(model, [TerminusMiddleware(policy)]).invoke(seed.task_input())
    expected = expected[REPORT_KEY]
    report = state[REPORT_KEY]
    assert {k: report[k] for k in COUNTERS} == {k: expected[k] for k in COUNTERS}
    assert (report["outcome"], report["nudges"]) == ("complete", 1)
    assert seed.PLAN_PATH in state["files"]
