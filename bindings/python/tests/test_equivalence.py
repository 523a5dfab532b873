"""Every conformance scenario driven through `Machine` by the Python host of the scenario format
gives the run `terminus run` gives: outcome, reason, rule, counters, result, trace, journal
entries; and `explain()` is the text `terminus inspect` prints for it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import SCENARIOS, cli, load
from scenario_driver import drive, unsupported
from terminus_kernel import run_scenario

#: The report's fields a run decides (all but the execution id, which names a journal, and
#: `context` and `context_prunes`, the runtime's window statistics).
COMPARED = [
    "outcome",
    "reason",
    "rule",
    "steps",
    "model_calls",
    "tool_calls",
    "nudges",
    "verification_failures",
    "no_ops",
    "empty_responses",
    "excluded_tools",
    "entries",
    "duplicates_prevented",
    "result",
    "todos",
    "stats",
    "trace",
    "warnings",
    "tool_budget_events",
]


def _without_window(text: str) -> str:
    """`terminus inspect`'s text without its `context window:` section: what the runtime's
    window did (prunes, cut results) is the runtime's own, and the hand driver keeps no window."""
    return re.sub(r"\ncontext window:\n(?:  .*\n)*", "", text, count=1)


SUPPORTED = [p for p in SCENARIOS if unsupported(load(p)) is None]


def test_the_suite_is_there() -> None:
    assert len(SCENARIOS) >= 40
    skipped = {p.name: unsupported(load(p)) for p in SCENARIOS if p not in SUPPORTED}
    # Printed with -s / -rA: the scenarios the hand driver leaves to the runtime, and why.
    for name, why in skipped.items():
        print(f"not driven by hand: {name}: {why}")
    # Only these: the run a context window ends, and the recordings of jobs (MCP tasks).
    assert sorted(skipped) == [
        "context-exhausted.json",
        "task-cancelled.json",
        "task-waited-for.json",
    ], skipped


def _skip_unsupported(path: Path) -> dict:
    scenario = load(path)
    why = unsupported(scenario)
    if why is not None:
        pytest.skip(f"{path.name}: {why}")
    return scenario


def _pick(report: dict) -> dict:
    return {k: report.get(k) for k in COMPARED}


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_machine_matches_the_runtime(path: Path) -> None:
    scenario = _skip_unsupported(path)
    by_hand = drive(scenario).report
    by_runtime = run_scenario(path)
    assert "execution" not in by_runtime
    assert by_hand["outcome"] in ("complete", "aborted")
    assert _pick(by_hand) == _pick(by_runtime)
    expect = scenario.get("expect") or {}
    for key in ("outcome", "reason", "rule", "result"):
        if key in expect:
            assert by_hand[key] == expect[key], key


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_run_scenario_matches_the_command_line(path: Path, terminus: Path) -> None:
    done = cli(terminus, "run", str(path), "--json")
    assert done.returncode in (0, 1), done.stderr
    printed = json.loads(done.stdout.strip().splitlines()[-1])
    assert printed.pop("execution")
    assert done.returncode == (0 if printed["outcome"] == "complete" else 1)
    in_process = run_scenario(str(path))
    # The window's statistics are the runtime's own; both ran the same runtime.
    assert printed == in_process


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_machine_matches_the_command_line(path: Path, terminus: Path) -> None:
    scenario = _skip_unsupported(path)
    done = cli(terminus, "run", str(path), "--json")
    printed = json.loads(done.stdout.strip().splitlines()[-1])
    assert _pick(drive(scenario).report) == _pick(printed)


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_explain_is_what_inspect_prints(path: Path, terminus: Path) -> None:
    scenario = _skip_unsupported(path)
    done = cli(terminus, "inspect", "--scenario", str(path))
    assert done.returncode == 0, done.stderr
    run = drive(scenario)
    assert run.machine.explain() == _without_window(done.stdout)
