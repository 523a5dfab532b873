"""Tool calls a model writes in its text (as Qwen2.5-Coder-1.5B does): the seed 000 architect
under DeepAgents, every call written as a fenced JSON block instead of through the tool
interface.

Without the middleware the first reply, an unexecuted call, is taken for the answer and no plan
is written. With it the kernel recovers each call (``policy.text_tool_calls``, default ``run``),
the reply becomes a tool turn the tools node runs, and the plan is written; a call of a tool not
offered is nudged with the closest offered names; under ``nudge`` nothing runs and the run ends
``no_progress``. The report equals ``terminus run``'s for the same script.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

if os.environ.get("CI"):
    import deepagents  # noqa: F401  (CI installs the pinned peers: a missing one is a failure)
else:
    pytest.importorskip(
        "deepagents", reason="pip install -r bindings/python/requirements-langchain.txt"
    )

sys.path.insert(0, str(Path(__file__).resolve().parent))

import seed_architect as seed  # noqa: E402
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage  # noqa: E402
from terminus_kernel import Machine, run_scenario  # noqa: E402
from terminus_kernel.langchain import REPORT_KEY, TerminusMiddleware  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

POLICY = {"completion_requires": ["write_file"]}
COMPARED = ("outcome", "reason", "steps", "model_calls", "tool_calls", "nudges", "result")


def written(name: str, args: dict[str, Any]) -> seed.Turn:
    """A reply whose tool call is written in its text, fenced, as the real model writes it."""
    call = json.dumps({"name": name, "arguments": args}, indent=2)
    return seed.text_turn(f"```json\n{call}\n```", usage=(120, 20))


ARCHITECT_AS_TEXT: list[seed.Turn] = [
    written("ls", {"path": "/"}),
    written("read_file", {"file_path": "/src/lib.rs"}),
    written("write_file", {"file_path": seed.PLAN_PATH, "content": seed.PLAN_TEXT}),
    seed.text_turn("Plan written to /plan.md."),
]


def run(script: list[seed.Turn], policy: dict[str, Any] | None, **kw: Any) -> dict[str, Any]:
    model = seed.ScriptedChatModel(script=script, **kw)
    middleware = [] if policy is None else [TerminusMiddleware(policy)]
    return seed.build_agent(model, middleware).invoke(seed.task_input())


def test_without_the_middleware_the_written_call_is_taken_for_the_answer() -> None:
    state = run(ARCHITECT_AS_TEXT, None)
    assert seed.PLAN_PATH not in state["files"]
    last = state["messages"][-1]
    assert isinstance(last, AIMessage) and not last.tool_calls
    assert last.content.startswith("```json")


def test_with_the_middleware_every_written_call_runs_and_the_plan_is_written() -> None:
    state = run(ARCHITECT_AS_TEXT, POLICY)
    report = state[REPORT_KEY]
    assert (report["outcome"], report["reason"]) == ("complete", "answered")
    assert report["tool_calls"] == 3
    assert report["stats"]["text_tool_calls"] == 3
    assert report["result"] == "Plan written to /plan.md."
    assert state["files"][seed.PLAN_PATH]["content"] == seed.PLAN_TEXT
    # Each written reply became a tool turn: its calls, each answered once, its prose empty.
    replies = [m for m in state["messages"] if isinstance(m, AIMessage) and m.tool_calls]
    assert [r.tool_calls[0]["name"] for r in replies] == ["ls", "read_file", "write_file"]
    assert all(r.content == "" for r in replies)
    answered = [m.tool_call_id for m in state["messages"] if isinstance(m, ToolMessage)]
    assert answered == [r.tool_calls[0]["id"] for r in replies]
    assert not any("```json" in str(m.content) for m in state["messages"] if isinstance(m, AIMessage))
    scenario = seed.as_scenario(ARCHITECT_AS_TEXT, POLICY)
    # The same script through `terminus run`, which offers the scenario's tools.
    for name in ("ls", "read_file", "write_file"):
        scenario["tools"].setdefault(name, {"results": [{"ok": "x"}], "repeat": "last"})
    expected = run_scenario(scenario)
    assert {k: report[k] for k in COMPARED} == {k: expected[k] for k in COMPARED}
    assert expected["stats"]["text_tool_calls"] == 3


def test_a_written_call_of_a_tool_not_offered_is_nudged_with_the_closest_names() -> None:
    script = [written("read_directory", {"path": "/"}), *ARCHITECT_AS_TEXT]
    state = run(script, POLICY)
    report = state[REPORT_KEY]
    assert (report["outcome"], report["reason"]) == ("complete", "answered")
    assert report["no_ops"] == 1
    given = [
        m
        for m in state["messages"]
        if isinstance(m, HumanMessage) and m.response_metadata.get("terminus") == "nudge"
    ]
    assert len(given) == 1
    text = str(given[0].content)
    assert "`read_directory`" in text and "closest offered tools" in text
    assert "`read_file`" in text
    assert state["files"][seed.PLAN_PATH]["content"] == seed.PLAN_TEXT


def test_under_nudge_nothing_runs_and_a_model_that_only_writes_calls_ends_no_progress() -> None:
    policy = {**POLICY, "text_tool_calls": "nudge", "max_no_ops": 3}
    state = run([written("ls", {"path": "/"})], policy, repeat_last=True)
    report = state[REPORT_KEY]
    assert (report["outcome"], report["reason"]) == ("aborted", "no_progress")
    assert report["tool_calls"] == 0 and report["model_calls"] == 3
    assert report["result"] is None, "an unexecuted call is never the result"
    assert seed.PLAN_PATH not in state["files"]


def test_the_machine_by_hand_gets_the_recovered_calls_in_run_tools() -> None:
    m = Machine({})
    assert m.next_command() == {"command": "call_model", "delay_ms": 0, "tools": True}
    text = 'Reading.\n<tool_call>{"name": "read_file", "arguments": {"path": "a"}}</tool_call>'
    m.handle({"model_turn": {"text": text, "tools": ["read_file", "write_file"]}})
    command = m.next_command()
    assert command == {
        "command": "run_tools",
        "calls": [{"id": "text-1-0", "name": "read_file", "arguments": {"path": "a"}}],
        "written": "Reading.",
    }
    m.handle({"tool_results": [{"call_id": "text-1-0", "name": "read_file", "ok": "x"}]})
    assert m.stats["text_tool_calls"] == 1


def xml(name: str, args: dict[str, str]) -> seed.Turn:
    """A reply whose tool call is written in Qwen3-Coder's XML: every value as text."""
    params = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in args.items())
    text = f"<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>"
    return seed.text_turn(text, usage=(120, 20))


def test_xml_values_are_typed_by_the_frameworks_tool_schemas() -> None:
    """DeepAgents' ``read_file`` takes ``offset`` and ``limit`` as integers: the written call's
    ``"0"`` and ``"20"`` reach the tools node as 0 and 20, as a correct engine would give them,
    and the plan's text stays text though it is written as XML too."""
    script = [
        xml("ls", {"path": "/"}),
        xml("read_file", {"file_path": "/src/lib.rs", "offset": "0", "limit": "20"}),
        xml("write_file", {"file_path": seed.PLAN_PATH, "content": "1"}),
        seed.text_turn("Plan written to /plan.md."),
    ]
    state = run(script, POLICY)
    report = state[REPORT_KEY]
    assert (report["outcome"], report["reason"]) == ("complete", "answered")
    assert report["stats"]["text_tool_calls"] == 3
    calls = [m.tool_calls[0] for m in state["messages"] if isinstance(m, AIMessage) and m.tool_calls]
    assert [(c["name"], c["args"]) for c in calls] == [
        ("ls", {"path": "/"}),
        ("read_file", {"file_path": "/src/lib.rs", "offset": 0, "limit": 20}),
        ("write_file", {"file_path": seed.PLAN_PATH, "content": "1"}),
    ]
    assert state["files"][seed.PLAN_PATH]["content"] == "1"


class PydanticAiToolDefinition:
    """The fields of Pydantic AI's ``ToolDefinition`` the core reads."""

    name = "count"
    parameters_json_schema = {"type": "object", "properties": {"n": {"type": "integer"}}}


class OpenAiAgentsFunctionTool:
    """The fields of OpenAI Agents' ``FunctionTool`` the core reads."""

    name = "count"
    params_json_schema = {"type": "object", "properties": {"n": {"type": "integer"}}}


def test_a_tool_schema_is_read_where_each_framework_keeps_it() -> None:
    from langchain_core.tools import StructuredTool
    from terminus_kernel._native import Session

    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    shapes: list[Any] = [
        {"type": "function", "function": {"name": "count", "parameters": schema}},
        {"name": "count", "parameters": schema},
        {"name": "count", "input_schema": schema},
        {"name": "count", "inputSchema": schema},
        PydanticAiToolDefinition(),
        OpenAiAgentsFunctionTool(),
        StructuredTool.from_function(func=lambda n: n, name="count", description="counts", args_schema=schema),
    ]
    reply = {"role": "assistant", "id": "r1", "content": "<tool_call>count<arg_key>n</arg_key><arg_value>3</arg_value></tool_call>"}
    for shape in shapes:
        session, _ = Session.start({}, [HumanMessage(content="Go")])
        step = session.reply(reply, [shape])
        assert step["written"]["tool_calls"][0]["arguments"] == {"n": 3}, shape
    # By name only: the value as written.
    session, _ = Session.start({}, [HumanMessage(content="Go")])
    step = session.reply(reply, ["count"])
    assert step["written"]["tool_calls"][0]["arguments"] == {"n": "3"}
    # A tool dict whose schema is not an object is refused, naming it.
    session, _ = Session.start({}, [HumanMessage(content="Go")])
    with pytest.raises(ValueError, match=r"offered\[1\]: the tool's schema is not a JSON object"):
        session.reply(reply, ["ls", {"name": "count", "parameters": "n: int"}])


class CountedTool:
    """A tool object whose schema is a property that counts its reads (LangChain's ``args`` is
    one: it builds the schema at each read)."""

    name = "count"

    def __init__(self) -> None:
        self.reads = 0

    @property
    def parameters_json_schema(self) -> dict[str, Any]:
        self.reads += 1
        return {"type": "object", "properties": {"n": {"type": "integer"}}}


def test_a_tool_objects_schema_is_read_once_for_every_model_call() -> None:
    """A framework offers the same tool objects at every model call: the core reads each one's
    schema once, and a new object (another tool) is read anew."""
    from terminus_kernel._native import Session

    reply = {"role": "assistant", "content": "<tool_call>count<arg_key>n</arg_key><arg_value>3</arg_value></tool_call>"}
    tool, other = CountedTool(), CountedTool()
    for n in range(3):
        session, _ = Session.start({}, [HumanMessage(content="Go")])
        step = session.reply({**reply, "id": f"r{n}"}, [tool])
        assert step["written"]["tool_calls"][0]["arguments"] == {"n": 3}
    assert tool.reads == 1
    session, _ = Session.start({}, [HumanMessage(content="Go")])
    session.reply({**reply, "id": "r9"}, [other, tool])
    assert (other.reads, tool.reads) == (1, 1)
