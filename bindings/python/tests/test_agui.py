"""``terminus_kernel.agui``: the seed 000 architect under ``TerminusMiddleware``, with a scripted
model (no network), streamed as AG-UI events of ``ag-ui-protocol``.

Every event is checked with the SDK itself: it is an ``ag_ui.core`` event, and what
``EventEncoder`` writes parses back (the ``Event`` union) to the same event. The state is checked
with an RFC 6902 implementation that is not ours (``jsonpatch``), and the report against the one
the middleware left in the graph's checkpoint.

Needs the real kernel (``pip install ./bindings/python``) and the pinned peers
(``pip install -r bindings/python/requirements-agui.txt``). Under CI both must be there;
elsewhere the module is skipped when a peer is missing.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

if os.environ.get("CI"):
    import ag_ui  # noqa: F401  (CI installs the pinned peers: a missing one is a failure)
    import deepagents  # noqa: F401
else:
    pytest.importorskip("ag_ui", reason="pip install -r bindings/python/requirements-agui.txt")
    pytest.importorskip("deepagents", reason="pip install -r bindings/python/requirements-agui.txt")

sys.path.insert(0, str(Path(__file__).resolve().parent))

import jsonpatch  # noqa: E402
import seed_architect as seed  # noqa: E402
from ag_ui.core import BaseEvent, Event, EventType  # noqa: E402
from ag_ui.encoder import EventEncoder  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from langchain_core.messages import AIMessage  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.types import interrupt  # noqa: E402
from pydantic import TypeAdapter  # noqa: E402
from terminus_kernel.agui import AguiRun, agui_events, json_patch  # noqa: E402
from terminus_kernel.langchain import REPORT_KEY, TerminusMiddleware  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

ARCHITECT_POLICY = {"completion_requires": ["write_file"]}
EVENT = TypeAdapter(Event)


def stream(
    script: list[seed.Turn],
    policy: dict[str, Any] | None,
    *,
    repeat_last: bool = False,
    thread_id: str = "thread-1",
    tools: list[Any] | None = None,
    pieces: int = 0,
) -> tuple[list[BaseEvent], dict[str, Any]]:
    """The run's events, and the graph's final state from its checkpointer. With ``pieces``,
    the model streams its replies in pieces of that many characters."""
    model = seed.ScriptedChatModel(
        script=script,
        repeat_last=repeat_last,
        disable_streaming=not pieces,
        stream_pieces=pieces,
    )
    middleware = [] if policy is None else [TerminusMiddleware(policy)]
    agent = seed.build_agent(model, middleware, checkpointer=InMemorySaver(), tools=tools or [])

    async def collect() -> list[BaseEvent]:
        return [
            event
            async for event in agui_events(
                agent, seed.task_input(), thread_id=thread_id, run_id="run-1"
            )
        ]

    events = asyncio.run(collect())
    state = agent.get_state({"configurable": {"thread_id": thread_id}}).values
    return events, state


def of(events: list[BaseEvent], kind: EventType) -> list[Any]:
    return [e for e in events if e.type == kind]


def wire(event: BaseEvent) -> dict[str, Any]:
    """The event as JSON, as a client reads it."""
    return json.loads(event.model_dump_json(by_alias=True))


def assert_wire_round_trip(events: list[BaseEvent]) -> None:
    """Each event is an ``ag_ui.core`` event; its SSE frame parses back to the same event."""
    encoder = EventEncoder()
    for event in events:
        assert isinstance(event, BaseEvent)
        frame = encoder.encode(event)
        assert frame.startswith("data: ") and frame.endswith("\n\n"), frame
        data = json.loads(frame[len("data: ") : -2])
        assert data["type"] == event.type.value
        back = EVENT.validate_python(data)
        assert type(back) is type(event)
        assert back.model_dump(by_alias=True) == event.model_dump(by_alias=True)


def assert_order(events: list[BaseEvent]) -> None:
    """RUN_STARTED first, one RUN_FINISHED/RUN_ERROR last; steps balanced and not nested; each
    text message and tool call opened, fed and closed in order; a result after its call."""
    kinds = [e.type for e in events]
    assert kinds[0] == EventType.RUN_STARTED
    assert kinds[-1] in (EventType.RUN_FINISHED, EventType.RUN_ERROR)
    run_events = (EventType.RUN_STARTED, EventType.RUN_FINISHED, EventType.RUN_ERROR)
    assert sum(k in run_events for k in kinds) == 2
    step: str | None = None
    texts: dict[str, str] = {}
    calls: dict[str, str] = {}
    for event in events[1:-1]:
        if event.type == EventType.STEP_STARTED:
            assert step is None, f"step {event.step_name} opened inside {step}"
            step = event.step_name
        elif event.type == EventType.STEP_FINISHED:
            assert step == event.step_name
            step = None
        elif event.type == EventType.TEXT_MESSAGE_START:
            assert event.message_id not in texts
            texts[event.message_id] = "open"
        elif event.type == EventType.TEXT_MESSAGE_CONTENT:
            assert texts.get(event.message_id) == "open"
        elif event.type == EventType.TEXT_MESSAGE_END:
            assert texts.get(event.message_id) == "open"
            texts[event.message_id] = "closed"
        elif event.type == EventType.TOOL_CALL_START:
            assert event.tool_call_id not in calls
            calls[event.tool_call_id] = "open"
        elif event.type == EventType.TOOL_CALL_ARGS:
            assert calls.get(event.tool_call_id) == "open"
        elif event.type == EventType.TOOL_CALL_END:
            assert calls.get(event.tool_call_id) == "open"
            calls[event.tool_call_id] = "closed"
        elif event.type == EventType.TOOL_CALL_RESULT:
            assert calls.get(event.tool_call_id) == "closed"
            calls[event.tool_call_id] = "answered"
    assert step is None, f"step {step} never finished"
    assert set(texts.values()) <= {"closed"}
    assert set(calls.values()) <= {"closed", "answered"}


def replay_state(events: list[BaseEvent]) -> dict[str, Any]:
    """The state a client holds: the snapshot with every delta after it applied (``jsonpatch``,
    not the adapter's code)."""
    snapshots = [i for i, e in enumerate(events) if e.type == EventType.STATE_SNAPSHOT]
    assert len(snapshots) == 1
    first = snapshots[0]
    assert not of(events[:first], EventType.STATE_DELTA)
    state = events[first].snapshot
    for event in events[first + 1 :]:
        if event.type == EventType.STATE_DELTA:
            assert wire(event)["delta"], "an empty STATE_DELTA"
            state = jsonpatch.apply_patch(state, wire(event)["delta"])
    return state


def assert_state_is_the_report(state: dict[str, Any], report: dict[str, Any]) -> None:
    assert state["status"] == report["outcome"]
    assert state["reason"] == report["reason"]
    assert state["rule"] == report["rule"]
    assert state["result"] == report["result"]
    assert state["phase"] == {"complete": "Complete", "aborted": "Aborted"}[report["outcome"]]
    assert state["step"] == report["steps"]
    assert state["counters"] == report["stats"]
    assert state["todos"] == report["todos"]
    assert state["excluded_tools"] == report["excluded_tools"]
    assert (state["thread_id"], state["run_id"]) == ("thread-1", "run-1")


def model_calls(state: dict[str, Any]) -> dict[str, tuple[str, Any]]:
    """The tool calls of the model's replies in the final conversation: id to (name, args)."""
    return {
        call["id"]: (call["name"], call["args"])
        for m in state["messages"]
        if isinstance(m, AIMessage)
        for call in m.tool_calls
    }


# ----- a complete run -----


def test_the_architect_run_is_a_valid_agui_stream_ending_with_the_report() -> None:
    events, state = stream(seed.ARCHITECT, ARCHITECT_POLICY)
    assert_wire_round_trip(events)
    assert_order(events)
    report = state[REPORT_KEY]
    assert (report["outcome"], report["nudges"]) == ("complete", 1)
    finished = events[-1]
    assert finished.type == EventType.RUN_FINISHED
    assert (finished.thread_id, finished.run_id) == ("thread-1", "run-1")
    assert finished.result == report
    assert not of(events, EventType.RUN_ERROR)
    assert seed.PLAN_PATH in state["files"]


def test_tool_calls_carry_the_models_ids_names_and_arguments() -> None:
    events, state = stream(seed.ARCHITECT, ARCHITECT_POLICY)
    calls = model_calls(state)
    assert len(calls) == 5
    starts = of(events, EventType.TOOL_CALL_START)
    assert {e.tool_call_id: e.tool_call_name for e in starts} == {
        k: name for k, (name, _) in calls.items()
    }
    args: dict[str, str] = {}
    for event in of(events, EventType.TOOL_CALL_ARGS):
        args[event.tool_call_id] = args.get(event.tool_call_id, "") + event.delta
    assert {k: json.loads(v) for k, v in args.items()} == {k: a for k, (_, a) in calls.items()}
    results = of(events, EventType.TOOL_CALL_RESULT)
    assert sorted(e.tool_call_id for e in results) == sorted(calls)
    written = next(e for e in results if calls[e.tool_call_id][0] == "write_file")
    assert "/plan.md" in written.content


def test_steps_are_the_model_and_tools_nodes_and_hold_the_messages() -> None:
    events, _ = stream(seed.ARCHITECT, ARCHITECT_POLICY)
    names = [e.step_name for e in of(events, EventType.STEP_STARTED)]
    # Seven model calls, five of them with tools to run: six model steps, the premature stop
    # and its nudge in the same step as the call after it.
    assert names.count("model") == len(seed.ARCHITECT) - 1
    assert names.count("tools") == 5
    step = None
    for event in events:
        if event.type == EventType.STEP_STARTED:
            step = event.step_name
        elif event.type == EventType.STEP_FINISHED:
            step = None
        elif event.type in (EventType.TEXT_MESSAGE_START, EventType.TOOL_CALL_START):
            assert step == "model", event
        elif event.type == EventType.TOOL_CALL_RESULT:
            assert step == "tools", event


def test_the_premature_stop_and_the_kernels_nudge_are_text_messages() -> None:
    events, _ = stream(seed.ARCHITECT, ARCHITECT_POLICY)
    starts = of(events, EventType.TEXT_MESSAGE_START)
    text: dict[str, str] = {}
    for event in of(events, EventType.TEXT_MESSAGE_CONTENT):
        text[event.message_id] = text.get(event.message_id, "") + event.delta
    said = [(e.role, text[e.message_id]) for e in starts]
    assert said[0] == ("assistant", seed.ARCHITECT[3]["text"])
    assert said[1][0] == "user" and "write_file" in said[1][1]  # the nudge
    assert said[2] == ("assistant", "Plan written to /plan.md.")
    assert len(said) == 3


def said(events: list[BaseEvent]) -> list[tuple[str, str]]:
    """Each text message: its role and its whole text."""
    text: dict[str, str] = {}
    for event in of(events, EventType.TEXT_MESSAGE_CONTENT):
        text[event.message_id] = text.get(event.message_id, "") + event.delta
    return [(e.role, text[e.message_id]) for e in of(events, EventType.TEXT_MESSAGE_START)]


def test_a_streamed_reply_goes_out_piece_by_piece_in_its_model_step() -> None:
    events, _ = stream(seed.ARCHITECT, ARCHITECT_POLICY, pieces=6)
    assert_order(events)
    assert_wire_round_trip(events)
    plain, _ = stream(seed.ARCHITECT, ARCHITECT_POLICY)
    # The same messages, calls, steps and end as unstreamed; the replies' text in pieces.
    assert said(events) == said(plain)
    calls = [(e.tool_call_id, e.tool_call_name) for e in of(events, EventType.TOOL_CALL_START)]
    assert calls == [(e.tool_call_id, e.tool_call_name) for e in of(plain, EventType.TOOL_CALL_START)]
    steps = [e.step_name for e in of(events, EventType.STEP_STARTED)]
    assert steps == [e.step_name for e in of(plain, EventType.STEP_STARTED)]
    results = [(e.tool_call_id, e.content) for e in of(events, EventType.TOOL_CALL_RESULT)]
    assert results == [(e.tool_call_id, e.content) for e in of(plain, EventType.TOOL_CALL_RESULT)]
    assert (events[-1].type, events[-1].result["reason"]) == (
        plain[-1].type,
        plain[-1].result["reason"],
    )
    first = of(events, EventType.TEXT_MESSAGE_START)[0]
    pieces = [
        e.delta
        for e in of(events, EventType.TEXT_MESSAGE_CONTENT)
        if e.message_id == first.message_id
    ]
    assert len(pieces) > 1 and "".join(pieces) == seed.ARCHITECT[3]["text"]
    step = None
    for event in events:
        if event.type in (EventType.STEP_STARTED, EventType.STEP_FINISHED):
            step = event.step_name if event.type == EventType.STEP_STARTED else None
        elif event.type == EventType.TEXT_MESSAGE_CONTENT:
            assert step is not None, event


def test_the_budgets_are_the_catalogs_as_terminus_serve_shows_them() -> None:
    # Every budget the policy sets, named and measured by the kernel's catalog (the output-token
    # budget included, which no list in this module names), and nothing the policy leaves open.
    policy = {**ARCHITECT_POLICY, "max_steps": 30, "token_budget": 10**6, "max_output_tokens": 10**5}
    events, state = stream(seed.ARCHITECT, policy)
    first = of(events, EventType.STATE_SNAPSHOT)[0].snapshot
    assert set(first["budgets"]) == {"steps", "model_calls", "tokens", "output_tokens"}
    assert first["budgets"]["output_tokens"] == {
        "limit_field": "max_output_tokens",
        "spent": 0,
        "limit": 10**5,
        "left": 10**5,
    }
    final = replay_state(events)
    stats = state[REPORT_KEY]["stats"]
    assert final["budgets"]["tokens"]["spent"] == stats["input_tokens"] + stats["output_tokens"]
    assert final["budgets"]["output_tokens"]["spent"] == stats["output_tokens"]


def test_the_deltas_applied_to_the_snapshot_give_the_reports_state() -> None:
    events, state = stream(seed.ARCHITECT, {**ARCHITECT_POLICY, "max_steps": 30})
    first = of(events, EventType.STATE_SNAPSHOT)[0].snapshot
    assert (first["status"], first["phase"], first["step"]) == ("running", "Exploring", 0)
    assert first["budgets"]["steps"] == {
        "limit_field": "max_steps",
        "spent": 0,
        "limit": 30,
        "left": 30,
    }
    final = replay_state(events)
    report = state[REPORT_KEY]
    assert_state_is_the_report(final, report)
    assert final["budgets"]["steps"]["spent"] == report["steps"]
    assert final["budgets"]["model_calls"]["spent"] == report["model_calls"]
    assert final["todos"] == [{"content": "write plan", "status": "completed"}]
    # The phases the run went through, as the deltas said them.
    phases = [
        op["value"]
        for e in of(events, EventType.STATE_DELTA)
        for op in wire(e)["delta"]
        if op["path"] == "/phase"
    ]
    assert phases[-1] == "Complete"
    # The nudge within the model step it was given in: its message, and the count.
    nudged = [
        op["value"]
        for e in of(events, EventType.STATE_DELTA)
        for op in wire(e)["delta"]
        if op["path"] == "/counters/nudges"
    ]
    assert nudged == [1] == [report["nudges"]]


# ----- runs that do not complete -----


def test_a_loop_ends_with_run_error_no_progress() -> None:
    events, state = stream(seed.looping(), {}, repeat_last=True)
    assert_wire_round_trip(events)
    assert_order(events)
    report = state[REPORT_KEY]
    assert (report["outcome"], report["reason"]) == ("aborted", "no_progress")
    error = events[-1]
    assert error.type == EventType.RUN_ERROR
    assert error.code == "no_progress"
    assert "no_progress" in error.message
    assert not of(events, EventType.RUN_FINISHED)
    final = replay_state(events)
    assert_state_is_the_report(final, report)
    # The kernel's notice of the loop, appended to a result already sent, follows it.
    notices = [e for e in of(events, EventType.TEXT_MESSAGE_START) if e.role == "system"]
    assert len(notices) == 1
    content = next(
        e.delta
        for e in of(events, EventType.TEXT_MESSAGE_CONTENT)
        if e.message_id == notices[0].message_id
    )
    assert "same calls with the same results" in content
    assert len(of(events, EventType.TOOL_CALL_START)) == len(model_calls(state)) == 3


def test_a_max_steps_stop_answers_the_last_calls_and_names_the_reason() -> None:
    events, state = stream(seed.honest_chain(seed.CHAIN_PARTS), {"max_steps": 9})
    assert_wire_round_trip(events)
    assert_order(events)
    assert (events[-1].type, events[-1].code) == (EventType.RUN_ERROR, "max_steps")
    # Every call the model made has its result, the "not run" answers of the stop included.
    answered = {e.tool_call_id for e in of(events, EventType.TOOL_CALL_RESULT)}
    assert answered == set(model_calls(state))
    assert_state_is_the_report(replay_state(events), state[REPORT_KEY])


def test_an_exception_of_the_graph_ends_the_stream_with_run_error() -> None:
    # A script of one turn: the second model call raises IndexError (not a provider's error,
    # so the middleware lets it propagate).
    events, _ = stream([seed.tools_turn(("ls", {"path": "/"}))], {})
    assert_wire_round_trip(events)
    assert_order(events)
    error = events[-1]
    assert (error.type, error.code) == (EventType.RUN_ERROR, "IndexError")
    assert "turn 1" in error.message


def test_a_graph_paused_on_interrupt_finishes_with_an_interrupt_outcome() -> None:
    @tool
    def approve(plan: str) -> str:
        """Asks a person to approve the plan."""
        return str(interrupt({"approve": plan}))

    script = [seed.tools_turn(("approve", {"plan": "split the parser"})), seed.text_turn("Done.")]
    events, state = stream(script, {}, tools=[approve])
    assert_wire_round_trip(events)
    assert_order(events)
    finished = events[-1]
    assert finished.type == EventType.RUN_FINISHED
    assert finished.result is None
    (pending,) = finished.outcome.interrupts
    assert pending.reason == "input_required"
    assert pending.metadata == {"value": {"approve": "split the parser"}}
    # The call was made and is waiting: started and closed, with no result yet.
    assert [e.tool_call_id for e in of(events, EventType.TOOL_CALL_END)] == ["call_0_0"]
    assert not of(events, EventType.TOOL_CALL_RESULT)
    assert state[REPORT_KEY] is None  # the kernel's run is not over


def test_a_graph_without_the_middleware_ends_no_report() -> None:
    events, state = stream(seed.ARCHITECT, None)
    assert_wire_round_trip(events)
    assert_order(events)
    assert (events[-1].type, events[-1].code) == (EventType.RUN_ERROR, "no_report")
    assert not of(events, EventType.STATE_SNAPSHOT)
    assert REPORT_KEY not in state


# ----- bad input -----


def first_event(*args: Any, **kwargs: Any) -> BaseEvent:
    async def take() -> BaseEvent:
        return await anext(agui_events(*args, **kwargs))

    return asyncio.run(take())


def test_bad_arguments_raise_naming_the_problem() -> None:
    agent = seed.build_agent(seed.ScriptedChatModel(script=seed.ARCHITECT))
    with pytest.raises(ValueError, match="thread_id must not be empty"):
        first_event(agent, seed.task_input(), thread_id=" ", run_id="r")
    with pytest.raises(TypeError, match="run_id must be a string, got int"):
        first_event(agent, seed.task_input(), thread_id="t", run_id=3)
    with pytest.raises(TypeError, match="graph must be a compiled LangGraph graph"):
        first_event(object(), {}, thread_id="t", run_id="r")
    with pytest.raises(TypeError, match="config must be a mapping, got str"):
        first_event(agent, {}, thread_id="t", run_id="r", config="x")
    with pytest.raises(TypeError, match="expected a mapping of node names to updates, got list"):
        AguiRun(thread_id="t", run_id="r").on_update([("model", {})])
    with pytest.raises(ValueError, match=r"^new\.a: a key is not a string: 1$"):
        json_patch({"a": {}}, {"a": {1: 2}})
    with pytest.raises(ValueError, match=r"^old\.n: integer out of the 64-bit range$"):
        json_patch({"n": 2**64}, {})


# ----- the diff -----

JSON = st.recursive(
    # JSON integers as the wire carries them (64 bits; a bigger one raises, naming it).
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.sampled_from(["a", "b", "c/d", "e~f", ""]), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None)
@given(JSON, JSON)
def test_json_patch_applied_by_another_implementation_gives_the_new_value(
    old: Any, new: Any
) -> None:
    patch = json_patch(old, new)
    assert jsonpatch.apply_patch(old, patch) == new
    if json.dumps(old, sort_keys=True) == json.dumps(new, sort_keys=True):
        assert patch == []


def test_json_patch_is_key_by_key_and_escapes_pointers() -> None:
    old = {"a": 1, "b": [1, 2], "x/y": {"k~": True}, "gone": 0}
    new = {"a": 1, "b": [1, 3], "x/y": {"k~": 1}, "new": None}
    # In key order, as `terminus serve` writes its deltas (the runtime's diff).
    assert json_patch(old, new) == [
        {"op": "replace", "path": "/b", "value": [1, 3]},
        {"op": "remove", "path": "/gone"},
        {"op": "replace", "path": "/x~1y/k~0", "value": 1},
        {"op": "add", "path": "/new", "value": None},
    ]
