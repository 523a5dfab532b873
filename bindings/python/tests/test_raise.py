"""`Machine.raise_budgets`: a run a budget stopped goes on with that budget raised, the step the
stop pre-empted taken once; the path is the one `terminus resume --raise` takes, step for step;
a raise that does not lift the budget that stopped the run raises `ValueError` and changes
nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import cli
from terminus_kernel import Machine

TURNS: list[dict[str, Any]] = [
    {"tool_calls": [{"id": f"c{i}", "name": "read", "arguments": {"file": i}}]} for i in range(5)
] + [{"text": "All five files read.", "needs_more_work": False}]


def answer(machine: Machine, turns: list[dict[str, Any]]) -> list[str]:
    """Answers the machine's commands (the turns in order, every read ok) until it waits for
    nothing; returns the commands it gave."""
    seen = []
    while (command := machine.next_command()) is not None:
        seen.append(command["command"])
        if command["command"] == "call_model":
            machine.handle({"model_turn": turns.pop(0)})
        elif command["command"] == "run_tools":
            results = [
                {"call_id": c["id"], "name": c["name"], "ok": "contents"}
                for c in command["calls"]
            ]
            machine.handle({"tool_results": results})
    return seen


def stopped() -> tuple[Machine, list[dict[str, Any]]]:
    machine = Machine({"max_steps": 6}, task="Read the five files.", name="raise")
    turns = list(TURNS)
    assert answer(machine, turns)[-1] == "stop"
    report = machine.report()
    assert (report["reason"], report["steps"], report["tool_calls"]) == ("max_steps", 6, 3)
    return machine, turns


def test_a_raised_machine_takes_the_pre_empted_step_and_finishes() -> None:
    machine, turns = stopped()
    assert machine.raise_budgets({"max_steps": 40}) == "step"
    assert machine.phase == "Exploring"
    # The pre-empted results go back: the next command asks the model for the fourth turn.
    assert answer(machine, turns)[0] == "call_model"
    report = machine.report()
    assert report["outcome"] == "complete"
    assert (report["tool_calls"], report["model_calls"], report["steps"]) == (5, 6, 12)
    raised = report["trace"][6]
    assert (raised["from"], raised["input"], raised["rule"]) == (
        "Aborted",
        "raise",
        "tool_results_back",
    )
    assert "raised max_steps=40" in machine.explain()
    # A snapshot after the raise restores to the same machine.
    assert Machine.restore(machine.snapshot()).report() == report


@pytest.mark.parametrize(
    ("budgets", "says"),
    [
        ({"max_model_calls": 99}, "`max_model_calls` did not stop the run"),
        ({"max_steps": 6}, "does not raise max_steps (it is 6)"),
        ({"max_no_ops": 9}, "`max_no_ops` is not a budget a raise can lift"),
        ({}, "no budget to raise"),
        ({"max_steps": -1}, "budgets"),
        ({"max_steps": "40"}, "budgets"),
        ([40], "budgets"),
    ],
)
def test_a_refused_raise_raises_value_error_and_changes_nothing(budgets: Any, says: str) -> None:
    machine, _ = stopped()
    before = machine.snapshot()
    with pytest.raises(ValueError, match=None) as refused:
        machine.raise_budgets(budgets)
    assert says in str(refused.value)
    assert machine.snapshot() == before


def test_a_live_run_cannot_be_raised() -> None:
    machine = Machine({"max_steps": 6})
    with pytest.raises(ValueError, match="the run has not stopped"):
        machine.raise_budgets({"max_steps": 40})


def test_the_path_is_the_one_terminus_resume_raise_takes(terminus: Path, tmp_path: Path) -> None:
    machine, turns = stopped()
    machine.raise_budgets({"max_steps": 40})
    answer(machine, turns)
    scenario = {
        "name": "raise",
        "task": "Read the five files.",
        "policy": {"max_steps": 6},
        "model": {"turns": TURNS},
        "tools": {"read": {"results": [{"ok": "contents"}], "repeat": "last"}},
    }
    path = tmp_path / "raise.json"
    path.write_text(json.dumps(scenario))
    journal = str(tmp_path / "j.db")
    ran = cli(terminus, "run", str(path), "--journal", journal, "--execution", "e1")
    assert ran.returncode == 1, ran.stderr
    raised = cli(
        terminus, "resume", "--journal", journal, "--execution", "e1", "--raise",
        "max_steps=40", "--json",
    )
    assert raised.returncode == 0, raised.stderr
    report = json.loads(raised.stdout.strip().splitlines()[-1])
    mine = machine.report()
    assert mine["trace"] == report["trace"]
    for field in ("outcome", "reason", "steps", "model_calls", "tool_calls", "result", "stats"):
        assert mine[field] == report[field], field
