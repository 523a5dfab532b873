"""`snapshot()` / `Machine.restore()` at every step of every conformance scenario gives the same
path: the same commands, the same events, the same report."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import SCENARIOS, load
from scenario_driver import drive, unsupported
from terminus_kernel import Machine


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_restore_at_every_step_gives_the_same_path(path: Path) -> None:
    scenario = load(path)
    if (why := unsupported(scenario)) is not None:
        pytest.skip(f"{path.name}: {why}")
    restored = 0

    def through_a_snapshot(machine: Machine) -> Machine:
        nonlocal restored
        text = machine.snapshot()
        copy = Machine.restore(text)
        # The copy is the same machine: same snapshot, same state, same counters.
        assert copy.snapshot() == text
        assert copy.phase == machine.phase
        assert copy.stats == machine.stats
        assert copy.report() == machine.report()
        restored += 1
        return copy

    straight = drive(scenario)
    resumed = drive(scenario, between=through_a_snapshot)
    assert restored == straight.report["steps"] or restored > 0
    assert resumed.path == straight.path
    assert resumed.report == straight.report
    assert resumed.machine.explain() == straight.machine.explain()


def test_a_snapshot_taken_with_commands_pending_keeps_them() -> None:
    m = Machine({"completion_requires": ["write_file"]}, task="plan")
    m.handle({"model_turn": {"text": "I will write it.", "needs_more_work": False}})
    # A refused claim queues the nudge, then the next model call.
    copy = Machine.restore(m.snapshot())
    assert m.next_command() == copy.next_command()
    assert copy.next_command() == m.next_command() == {
        "command": "call_model",
        "delay_ms": 0,
        "tools": True,
    }
    assert copy.next_command() is None and m.next_command() is None


def test_a_live_machine_explains_where_it_is() -> None:
    m = Machine(task="t", name="live")
    assert m.next_command()["command"] == "call_model"
    m.handle({"model_turn": {"tool_calls": [{"name": "read_file", "arguments": {}}]}})
    text = m.explain()
    assert "status    running" in text
    assert "it is at step 1, waiting for the tool call(s) read_file" in text
    report = m.report()
    assert report["outcome"] is None and report["reason"] is None
    assert report["steps"] == 1 and report["model_calls"] == 1
