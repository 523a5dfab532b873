"""Bad input never crashes the interpreter and never half-applies: a malformed event raises
`ValueError` naming its JSON path and leaves the machine exactly as it was; a policy error names
the field; a bad snapshot or scenario is a `ValueError` too."""

from __future__ import annotations

import json
import math
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import REPO, load
from scenario_driver import drive
from terminus_kernel import Machine, run_scenario

# ----- events -----

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8)
    | st.sampled_from(
        ["stop", "length", "rate_limited", "not_found", "failed", "write_todos", "call-1-0"]
    )
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(
        st.sampled_from(
            ["text", "tool_calls", "name", "id", "arguments", "call_id", "ok", "error",
             "message", "kind", "complete", "feedback", "usage", "input_tokens", "finish",
             "needs_more_work", "retry_after_ms", "todos", "x"]
        )
        | st.text(max_size=5),
        children,
        max_size=5,
    ),
    max_leaves=20,
)
event_keys = st.sampled_from(
    ["model_turn", "model_error", "tool_results", "verdict", "tick", "cancel", "nope"]
)
events = (
    st.dictionaries(event_keys, json_values, min_size=0, max_size=2)
    | json_values
    | st.builds(lambda k, v: {k: v}, event_keys, json_values)
    # Python objects that are not JSON at all.
    | st.builds(lambda k: {k: {"text": object()}}, event_keys)
    | st.builds(lambda k: {k: {1, 2}}, event_keys)
)


def machines_in_every_phase() -> list[Machine]:
    """Machines waiting for a model turn, tool results, a verdict, and ended ones."""
    out = [Machine()]
    acting = Machine()
    acting.handle({"model_turn": {"tool_calls": [{"id": "c1", "name": "read_file"}]}})
    out.append(acting)
    verifying = Machine({"verify_completion": True})
    verifying.handle({"model_turn": {"text": "done", "needs_more_work": False}})
    out.append(verifying)
    ended = drive(load(REPO / "spec" / "scenarios" / "architect-stops-early.json")).machine
    out.append(ended)
    return out


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(event=events, which=st.integers(min_value=0, max_value=3))
def test_any_event_is_handled_or_refused_whole(event: object, which: int) -> None:
    machine = machines_in_every_phase()[which]
    before = machine.snapshot()
    try:
        handled = machine.handle(event)  # type: ignore[arg-type]
    except ValueError as e:
        assert str(e).startswith("event"), str(e)
        assert machine.snapshot() == before
        return
    assert handled in ("step", "observed", "ignored")
    # Whatever it did, the machine is still one the kernel can save and restore.
    assert Machine.restore(machine.snapshot()).snapshot() == machine.snapshot()


@pytest.mark.parametrize(
    ("event", "message"),
    [
        ({"model_turn": {"txt": "hi"}}, "event.model_turn.txt: unknown field"),
        ({"model_turn": {"text": 3}}, "event.model_turn.text: "),
        ({"model_turn": {"tool_calls": [{"id": "a"}]}}, "event.model_turn.tool_calls[0]: missing field `name`"),
        ({"model_turn": {"usage": {"input_tokens": 1}}}, "event.model_turn.usage: missing field `output_tokens`"),
        ({"model_turn": {"finish": "refusal"}}, "event.model_turn.finish: unknown variant `refusal`"),
        ({"model_error": {"kind": "teapot"}}, "event.model_error.kind: unknown variant `teapot`"),
        ({"tool_results": [{"call_id": "c", "name": "t"}]}, "event.tool_results[0]: needs `ok` or `error`"),
        ({"tool_results": [{"call_id": "c", "name": "t", "ok": 1, "error": "failed"}]}, "event.tool_results[0]: has both"),
        ({"tool_results": [{"call_id": "c", "name": "t", "error": "boom"}]}, "event.tool_results[0].error: unknown variant `boom`"),
        ({"verdict": {"complete": "yes"}}, "event.verdict.complete: "),
        ({"tick": -1}, "event.tick: "),
        ({"tick": 1.5}, "event.tick: "),
        ({"cancel": False}, "event.cancel: must be true"),
        ({"shout": 1}, "event: unknown variant `shout`"),
        ({}, "event: "),
        ("cancel", "event.cancel: invalid type: unit variant"),
    ],
)
def test_a_malformed_event_names_its_path(event: object, message: str) -> None:
    machine = Machine()
    before = machine.snapshot()
    with pytest.raises(ValueError) as raised:
        machine.handle(event)  # type: ignore[arg-type]
    assert str(raised.value).startswith(message), str(raised.value)
    assert machine.snapshot() == before


def test_an_unexpected_event_is_ignored_and_counted() -> None:
    machine = Machine()
    assert machine.handle({"verdict": {"complete": True}}) == "ignored"
    assert machine.stats["ignored_events"] == 1
    assert machine.stats["steps"] == 0
    assert machine.handle({"tick": 5}) == "observed"
    assert machine.handle({"cancel": True}) == "step"
    assert machine.phase == "Aborted"
    assert machine.handle({"model_turn": {"text": "late"}}) == "ignored"
    command = machine.next_command()
    assert command is not None and command["command"] == "stop"
    assert command["report"]["reason"] == "cancelled"


# ----- policies -----


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        ({"max_stpes": 3}, "policy.max_stpes: unknown field"),
        ({"max_steps": "ten"}, "policy.max_steps: "),
        ({"max_steps": -1}, "policy.max_steps: "),
        ({"max_steps": 0}, "policy.max_steps: must be at least 1, got 0"),
        ({"max_repeats": 1}, "policy.max_repeats: must be at least 2, got 1"),
        ({"verify_completion": "yes"}, "policy.verify_completion: "),
        ({"on_verification_limit": "shrug"}, "policy.on_verification_limit: unknown variant `shrug`"),
        ({"completion_requires": "write_file"}, "policy.completion_requires: "),
        ({"tool_budgets": {"read": {"warn_at": 5, "block_at": 2}}}, "policy.tool_budgets.read.warn_at: must not exceed block_at (2)"),
        ({"tool_budgets": {"read": {"block": 2}}}, "policy.tool_budgets.read.block: unknown field"),
        ({"retry_base_ms": 10, "retry_max_ms": 5}, "policy.retry_max_ms: must be at least retry_base_ms (10)"),
        ({"budget_scale": {"per_unit": {"max_stepz": 1}, "max": {"max_stepz": 9}}}, "policy.budget_scale.per_unit.max_stepz: unknown budget"),
        ({"budget_scale": {"per_unit": {"max_steps": 1}}}, "policy.budget_scale.max: has no bound for max_steps"),
        ({"budget_scale": {"per_unit": {"max_steps": -1}}}, "policy.budget_scale.per_unit.max_steps: "),
        ({"budget_scale": {"per_units": {}}}, "policy.budget_scale.per_units: unknown field"),
        ("max_steps", "policy: "),
    ],
)
def test_a_policy_error_names_the_field(policy: object, message: str) -> None:
    with pytest.raises(ValueError) as raised:
        Machine(policy)  # type: ignore[arg-type]
    assert str(raised.value).startswith(message), str(raised.value)


def test_policy_fields_and_defaults_are_the_scenario_format() -> None:
    assert Machine().report()["stats"]["steps"] == 0
    m = Machine({"max_model_calls": 1, "max_steps": 7, "seed": 3, "deadline_ms": None})
    m.next_command()
    m.handle({"model_turn": {"tool_calls": [{"id": "a", "name": "t"}]}})
    assert m.next_command()["command"] == "run_tools"
    m.handle({"tool_results": [{"call_id": "a", "name": "t", "ok": None}]})
    stop = m.next_command()
    assert stop["command"] == "stop"
    assert stop["report"]["reason"] == "max_model_calls"


@settings(max_examples=200, deadline=None)
@given(policy=st.dictionaries(st.text(max_size=12) | st.sampled_from(
    ["max_steps", "max_nudges", "tool_budgets", "seed", "completion_requires"]), json_values, max_size=3))
def test_any_policy_builds_a_machine_or_names_a_field(policy: dict) -> None:
    try:
        m = Machine(policy)
    except ValueError as e:
        assert str(e).startswith("policy"), str(e)
        return
    assert m.next_command()["command"] == "call_model"


# ----- snapshots and scenarios -----


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=40) | json_values.map(json.dumps))
def test_restore_refuses_what_is_not_a_snapshot(text: str) -> None:
    with pytest.raises(ValueError) as raised:
        Machine.restore(text)
    assert str(raised.value).startswith("snapshot"), str(raised.value)


def test_restore_refuses_a_tampered_snapshot() -> None:
    m = Machine()
    m.handle({"model_turn": {"tool_calls": [{"id": "a", "name": "t"}]}})
    saved = json.loads(m.snapshot())
    saved["trace"] = []
    with pytest.raises(ValueError, match="snapshot.trace"):
        Machine.restore(json.dumps(saved))
    saved = json.loads(m.snapshot())
    saved["machine"]["sm"]["shared_storage"]["stats"]["steps"] = 1000
    with pytest.raises(ValueError, match="snapshot"):
        Machine.restore(json.dumps(saved))


def test_run_scenario_refuses_a_bad_scenario_with_the_cli_message(tmp_path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{ "task": "t", "model": { "turns": [ { "txt": "hi" } ] } }')
    with pytest.raises(ValueError) as raised:
        run_scenario(bad)
    assert "$.model.turns[0].txt" in str(raised.value)
    assert str(bad) in str(raised.value)
    with pytest.raises(ValueError, match=r"\$\.model\.turns\[0\]\.txt"):
        run_scenario({"task": "t", "model": {"turns": [{"txt": "hi"}]}})
    with pytest.raises(ValueError, match="cannot read|No such file|not found"):
        run_scenario(tmp_path / "missing.json")


def test_run_scenario_refuses_a_script_that_runs_out() -> None:
    scenario = {"task": "t", "model": {"turns": [{"tool_calls": [{"name": "t"}]}]}}
    with pytest.raises(ValueError, match="model script exhausted after 1 turn"):
        run_scenario(scenario)


def test_run_scenario_takes_a_dict() -> None:
    report = run_scenario({"task": "t", "model": {"turns": [{"text": "Hello!"}]}})
    assert report["outcome"] == "complete" and report["reason"] == "answered"
    assert report["result"] == "Hello!"
    assert "execution" not in report
    assert not math.isnan(report["steps"])


# ----- the fast reader and the full reader agree -----


class Slow(dict):
    """A dict subclass: the binding's fast reader takes exact dicts only, so an event wrapped in
    this is read by the full (JSON) reader."""


valid_calls = st.lists(
    st.fixed_dictionaries(
        {"name": st.sampled_from(["read_file", "write_todos"])},
        optional={
            "id": st.none() | st.sampled_from(["a", "b"]),
            "arguments": st.none() | json_values,
        },
    ),
    max_size=3,
)
valid_turns = st.fixed_dictionaries(
    {},
    optional={
        "text": st.none() | st.text(max_size=6),
        "needs_more_work": st.none() | st.booleans(),
        "reasoning": st.none() | st.booleans(),
        "finish": st.none() | st.sampled_from(["stop", "length", "content_filter", "tool_calls", "x"]),
        "tool_calls": st.none() | valid_calls,
        "usage": st.none() | st.fixed_dictionaries({"input_tokens": st.integers(0, 9), "output_tokens": st.integers(0, 9)}),
    },
)
valid_results = st.lists(
    st.fixed_dictionaries(
        {"call_id": st.sampled_from(["a", "call-1-0"]), "name": st.sampled_from(["read_file", "t"])},
        optional={
            "ok": json_values,
            "error": st.none() | st.sampled_from(["failed", "not_found", "nope"]),
            "message": st.none() | st.text(max_size=4),
        },
    ),
    max_size=2,
)
near_valid_events = (
    st.builds(lambda t: {"model_turn": t}, valid_turns)
    | st.builds(lambda r: {"tool_results": r}, valid_results)
    | st.builds(lambda t: {"tick": t}, st.integers(-1, 2**64) | st.booleans())
    | st.builds(lambda c: {"cancel": c}, st.booleans() | st.none())
)


@settings(max_examples=400, deadline=None)
@given(first=near_valid_events, second=near_valid_events)
def test_the_fast_reader_agrees_with_the_full_reader(first: dict, second: dict) -> None:
    fast, full = Machine(), Machine()
    for event in (first, second):
        outcomes = []
        for machine, given_as in ((fast, event), (full, Slow(event))):
            try:
                outcomes.append(machine.handle(given_as))
            except ValueError as e:
                outcomes.append(("refused", str(e)))
            machine.next_command()
        assert outcomes[0] == outcomes[1]
        assert fast.snapshot() == full.snapshot()


def test_a_scale_scales_the_policy_and_a_bad_one_is_refused() -> None:
    policy = {"max_steps": 2, "budget_scale": {"per_unit": {"max_steps": 3}, "max": {"max_steps": 9}}}
    explained = Machine(policy, scale=2).explain()
    assert "scaled for 2 units (budget_scale): max_steps +3 a unit, at most 9" in explained, explained
    assert re.search(r"max_steps +0 / 8 ", explained), explained
    assert "scaled for no units yet" in Machine(policy).explain(), "unscaled: the base"
    with pytest.raises(OverflowError):
        Machine(policy, scale=-1)
    with pytest.raises(ValueError, match=r"^policy\.budget_scale\.max\.max_steps: must be at least max_steps \(10\)"):
        Machine({**policy, "max_steps": 10}, scale=1)


def test_a_framework_adapters_scale_is_checked_when_it_is_built() -> None:
    """``scale`` scales the policy's ``budget_scale`` at construction; a bad one raises there."""
    pytest.importorskip("langchain")
    from terminus_kernel.langchain import TerminusMiddleware

    with pytest.raises(ValueError, match=r"^scale: expected a whole number"):
        TerminusMiddleware({}, scale=-1)
    with pytest.raises(ValueError, match="budget_scale"):
        TerminusMiddleware({}, scale=3)
    scale = {"per_unit": {"max_steps": 2}, "max": {"max_steps": 40}}
    policy = {"max_steps": 6, "budget_scale": scale}
    assert TerminusMiddleware(policy, scale=5)._policy["max_steps"] == 16  # 6 + 2 x 5
