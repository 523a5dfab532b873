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
    assert restored >= straight.report["steps"]
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


def _held_run(decide) -> tuple[Machine, int]:
    """A run whose only tool needs a person's approval (`docs/approvals.md`): the host holds the
    call, snapshots the machine (the suspension: its process may end here), restores it later and
    feeds the decision as the call's result. Returns the machine at its stop and the number of
    times the model asked for the tool."""
    m = Machine(task="Drop the staging database.")
    assert m.next_command()["command"] == "call_model"
    asked = 0

    def ask() -> None:
        nonlocal asked
        asked += 1
        m.handle({"model_turn": {"tool_calls": [
            {"id": f"drop-{asked}", "name": "drop_database", "arguments": {"name": f"staging-{asked}"}}]}})

    ask()
    while True:
        command = m.next_command()
        assert command is not None, m.phase
        kind = command["command"]
        if kind in ("nudge", "notice"):
            continue
        if kind == "stop":
            return m, asked
        if kind == "call_model":
            if asked < 3:
                ask()
            else:
                m.handle({"model_turn": {"text": "Done.", "needs_more_work": False}})
            continue
        assert kind == "run_tools"
        held = command["calls"]  # the calls to run (refused ones are listed apart)
        # Suspended: nothing but the snapshot survives until a person decides.
        text = m.snapshot()
        phase, stats = m.phase, m.stats
        del m
        m = Machine.restore(text)
        assert m.phase == phase == "Acting" and m.stats == stats
        assert m.next_command() is None, "a restored suspension waits for the results"
        m.handle({"tool_results": [decide(c) for c in held]})


def test_a_denied_call_across_a_suspension_ends_the_run_bounded() -> None:
    denied = lambda c: {"call_id": c["id"], "name": c["name"], "error": "permission_denied",
                        "message": "denied: not on Fridays"}
    m, asked = _held_run(denied)
    report = m.report()
    # Denied once, then excluded: the model's next ask is refused without asking anyone.
    assert report["outcome"] == "aborted" and report["reason"] == "tool_failures", report
    assert report["stats"]["tool_failures"] == 1 and report["stats"]["refused_calls"] >= 1
    assert asked == 2


def test_an_approved_call_across_a_suspension_runs_and_the_run_goes_on() -> None:
    approved = lambda c: {"call_id": c["id"], "name": c["name"], "ok": "dropped"}
    m, asked = _held_run(approved)
    report = m.report()
    assert report["outcome"] == "complete", report
    assert report["stats"]["tool_calls"] == asked == 3


def test_the_policy_is_the_machines_own_and_survives_a_snapshot() -> None:
    machine = Machine({"max_steps": 7, "auto_checkpoints": 1})
    assert machine.policy["max_steps"] == 7
    assert machine.policy["auto_checkpoints"] == 1
    assert machine.policy["max_nudges"] == 3  # a default, filled in
    assert Machine.restore(machine.snapshot()).policy == machine.policy
