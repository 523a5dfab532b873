"""The machine's snapshot does not grow with the run: a machine keeps only the last
``journal_steps`` steps of its journal (with the tally of the rest), so the snapshot that
``TerminusMiddleware`` keeps in the graph state, and a checkpointer writes at every step, is the
same size after 10 tool turns and after 40.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from terminus_kernel import Machine

sys.path.insert(0, str(Path(__file__).resolve().parent))

SLACK = 256
"""Bytes a longer run may add: longer numbers (steps, ids, tokens, the clock), never a step."""


def drive(machine: Machine, turns: int) -> Machine:
    """``turns`` tool turns, each with its own call and usage (no loop)."""
    for i in range(turns):
        assert machine.next_command() == {"command": "call_model", "delay_ms": 0, "tools": True}
        machine.handle(
            {
                "model_turn": {
                    "tool_calls": [{"id": f"c{i}", "name": "read", "arguments": {"i": i}}],
                    "usage": {"input_tokens": 100 + i, "output_tokens": 7},
                }
            }
        )
        assert machine.next_command()["command"] == "run_tools"
        machine.handle({"tool_results": [{"call_id": f"c{i}", "name": "read", "ok": i}]})
    return machine


POLICY = {"max_steps": 10_000, "max_model_calls": 10_000}


def test_a_machines_snapshot_is_the_same_size_after_4x_the_turns() -> None:
    short = drive(Machine(POLICY, task="t"), 25)
    long = drive(Machine(POLICY, task="t"), 100)
    assert len(long.snapshot()) - len(short.snapshot()) < SLACK
    # The counts are the whole run's; the trace is the last steps'.
    whole = drive(Machine(POLICY, task="t", journal_steps=None), 100)
    assert len(whole.snapshot()) > 10 * len(long.snapshot())
    report, full = long.report(), whole.report()
    assert {k: v for k, v in report.items() if k != "trace"} == {
        k: v for k, v in full.items() if k != "trace"
    }
    assert report["trace"] == full["trace"][-16:]
    # Restored, it goes on as the live one does.
    copy = drive(Machine.restore(long.snapshot()), 3)
    assert copy.snapshot() == drive(long, 3).snapshot()


if os.environ.get("CI"):
    import deepagents  # noqa: F401  (CI installs the pinned peers)
    HAVE_PEERS = True
else:
    try:
        import deepagents  # noqa: F401

        HAVE_PEERS = True
    except ImportError:
        HAVE_PEERS = False


def state_after(turns: int) -> dict[str, Any]:
    """The final state of the architect's stack under the middleware, after ``turns`` tool turns
    (each reading another file) and an answer."""
    import seed_architect as seed
    from langgraph.checkpoint.memory import InMemorySaver
    from terminus_kernel.langchain import TerminusMiddleware

    script = [*seed.honest_chain(turns), seed.text_turn("All parts read.")]
    model = seed.ScriptedChatModel(script=script)
    middleware = [TerminusMiddleware({"max_steps": 4 * turns + 10})]
    agent = seed.build_agent(model, middleware, InMemorySaver())
    # The checkpointed state: the private keys too, as a saver writes them.
    config = {"configurable": {"thread_id": "t"}}
    agent.invoke({**seed.task_input(), "files": seed.seed_files(turns)}, config)
    return agent.get_state(config).values


@pytest.mark.skipif(not HAVE_PEERS, reason="pip install -r bindings/python/requirements-langchain.txt")
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_the_middlewares_state_is_the_same_size_after_4x_the_turns() -> None:
    from terminus_kernel.langchain import MACHINE_KEY, REPORT_KEY

    short, long = state_after(10), state_after(40)
    assert (short[REPORT_KEY]["tool_calls"], long[REPORT_KEY]["tool_calls"]) == (10, 40)
    sizes = [len(s[MACHINE_KEY]) for s in (short, long)]
    assert sizes[1] - sizes[0] < SLACK, sizes
