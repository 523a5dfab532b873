"""Generated scenarios: for any scenario Hypothesis writes (scripted turns of every kind, tools
that succeed and fail, todos, a verifier, every repeat mode, tight limits), the Python host
driving `Machine` and the runtime (`run_scenario`) give the same report, or both refuse the
scenario because a script ran out."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scenario_driver import ScriptExhausted, drive
from terminus_kernel import run_scenario

repeat = st.sampled_from(["none", "last", "cycle"])
usage = st.none() | st.builds(
    lambda i, o: {"input_tokens": i, "output_tokens": o},
    st.integers(0, 400),
    st.integers(0, 50),
)
todos = st.lists(
    st.builds(
        lambda c, s: {"content": c, "status": s},
        st.sampled_from(["plan", "code", "test"]),
        st.sampled_from(["pending", "in_progress", "completed", "cancelled"]),
    ),
    max_size=3,
)
call = st.one_of(
    st.builds(
        lambda name, path: {"name": name, "arguments": {"path": path}},
        st.sampled_from(["read_file", "write_file", "undefined_tool"]),
        st.sampled_from(["a", "b"]),
    ),
    st.builds(lambda t: {"name": "write_todos", "arguments": {"todos": t}}, todos),
    st.just({"name": "read_file", "arguments": "not an object"}),
)


def _turn(kind: str, text: str, nmw: bool | None, calls: list, u: Any, err: str) -> dict:
    if kind == "error":
        return {"error": err}
    turn: dict[str, Any] = {}
    if kind == "tools":
        turn["tool_calls"] = calls
    if kind in ("tools", "text"):
        turn["text"] = text
    if kind == "empty":
        return {"text": "", "usage": {"input_tokens": 0, "output_tokens": 0}}
    if nmw is not None:
        turn["needs_more_work"] = nmw
    if u is not None:
        turn["usage"] = u
    return turn


turn = st.builds(
    _turn,
    st.sampled_from(["tools", "tools", "text", "empty", "error", "silent"]),
    st.sampled_from(["", "Working.", "Done."]),
    st.sampled_from([None, True, False]),
    st.lists(call, min_size=1, max_size=3),
    usage,
    st.sampled_from(["rate_limited", "server", "timeout", "auth", "bad_request"]),
)
result = st.one_of(
    st.builds(lambda v: {"ok": v}, st.sampled_from(["ok", "data", None, 1])),
    st.builds(
        lambda k: {"error": k, "message": "no"},
        st.sampled_from(
            ["permission_denied", "not_found", "auth_failed", "timeout", "invalid_arguments", "failed"]
        ),
    ),
)
tool_script = st.builds(
    lambda r, rep: {"results": r, "repeat": rep}, st.lists(result, min_size=1, max_size=3), repeat
)
policy = st.fixed_dictionaries(
    {"retry_base_ms": st.just(1), "retry_max_ms": st.just(4)},
    optional={
        "max_steps": st.integers(3, 40),
        "max_model_calls": st.integers(1, 20),
        "max_no_ops": st.integers(1, 4),
        "max_nudges": st.integers(0, 3),
        "max_verification_failures": st.integers(1, 3),
        "on_verification_limit": st.sampled_from(["complete", "abort"]),
        "verify_completion": st.booleans(),
        "completion_requires": st.sampled_from([[], ["write_file"]]),
        "max_tool_failures": st.integers(1, 3),
        "max_consecutive_tool_failures": st.integers(1, 4),
        "on_unrecoverable_tool_error": st.sampled_from(["stop", "exclude"]),
        "max_repeats": st.integers(2, 4),
        "max_empty_responses": st.integers(1, 3),
        "max_model_retries": st.integers(0, 3),
        "token_budget": st.integers(100, 2000),
        "final_answer_on_budget": st.booleans(),
        "tool_budgets": st.sampled_from([{}, {"read_file": {"warn_at": 1, "block_at": 3}}]),
    },
)
scenario = st.builds(
    lambda p, turns, rep, tools, verdicts: {
        "name": "generated",
        "task": "Do the thing.",
        "policy": p,
        "model": {"turns": turns, "repeat": rep},
        "tools": tools,
        # A verifier script is only valid with verification on.
        **({"verifier": verdicts} if verdicts and p.get("verify_completion") else {}),
    },
    policy,
    st.lists(turn, min_size=1, max_size=8),
    repeat,
    st.fixed_dictionaries({}, optional={"read_file": tool_script, "write_file": tool_script}),
    st.none()
    | st.builds(
        lambda v, rep: {"verdicts": v, "repeat": rep},
        st.lists(
            st.builds(
                lambda c, m: {"complete": c, "missing": m},
                st.booleans(),
                st.sampled_from([[], ["tests"], ["tests", "docs"]]),
            ),
            min_size=1,
            max_size=3,
        ),
        repeat,
    ),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(s=scenario)
def test_generated_scenarios_run_the_same_by_hand_and_in_the_runtime(s: dict) -> None:
    try:
        by_hand = drive(s).report
    except ScriptExhausted:
        by_hand = None
    try:
        by_runtime = run_scenario(s)
    except ValueError as e:
        assert "exhausted" in str(e), str(e)
        by_runtime = None
    assert (by_hand is None) == (by_runtime is None), (by_hand, by_runtime)
    if by_hand is not None and by_runtime is not None:
        by_runtime.pop("context", None)
        assert by_hand == by_runtime
