"""``terminus_kernel.langchain.TerminusMiddleware`` under the seed 000 architect (DeepAgents) and
``langchain.agents.create_agent``, with a scripted model: no network.

Needs the real kernel (``pip install ./bindings/python``) and the pinned peers
(``pip install -r bindings/python/requirements-langchain.txt``). Under CI both must be there;
elsewhere the module is skipped when a peer is missing.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable
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
from langchain.agents import create_agent  # noqa: E402
from langchain.agents.middleware import AgentMiddleware  # noqa: E402
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage  # noqa: E402
from langchain_core.outputs import ChatGeneration, ChatResult  # noqa: E402
from langchain_core.tools import ToolException, tool  # noqa: E402
from langgraph.errors import GraphRecursionError  # noqa: E402
from pydantic import Field  # noqa: E402
from langgraph.prebuilt.tool_node import ToolCallRequest  # noqa: E402
from terminus_kernel import Machine, run_scenario  # noqa: E402
from terminus_kernel._native import Session, checkpoint_message  # noqa: E402
from terminus_kernel.langchain import (  # noqa: E402
    ERROR_KIND,
    MACHINE_KEY,
    NOTICE_KEY,
    REPORT_KEY,
    TerminusMiddleware,
    model_error_kind,
)

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

ARCHITECT_POLICY = {"completion_requires": ["write_file"]}
COMPARED = ("outcome", "reason", "steps", "model_calls", "tool_calls", "nudges", "result")


def run(
    script: list[seed.Turn],
    policy: dict[str, Any] | None,
    *,
    repeat_last: bool = False,
    tools: list[Any] | None = None,
) -> dict[str, Any]:
    """The architect with ``script``, under the middleware when ``policy`` is not None."""
    model = seed.ScriptedChatModel(script=script, repeat_last=repeat_last)
    middleware = [] if policy is None else [TerminusMiddleware(policy)]
    agent = seed.build_agent(model, middleware, tools=tools or [])
    return agent.invoke(seed.task_input())


def nudges(state: dict[str, Any]) -> list[HumanMessage]:
    """The kernel's nudges in the conversation."""
    return [
        m
        for m in state["messages"]
        if isinstance(m, HumanMessage) and m.response_metadata.get("terminus") == "nudge"
    ]


def notices(state: dict[str, Any]) -> list[str]:
    """The kernel's notices, appended to tool results."""
    return [
        m.response_metadata[NOTICE_KEY]
        for m in state["messages"]
        if isinstance(m, ToolMessage) and NOTICE_KEY in m.response_metadata
    ]


def assert_history_valid(state: dict[str, Any]) -> None:
    """Every tool call of every assistant message has exactly one answer."""
    answers: dict[str, int] = {}
    for m in state["messages"]:
        if isinstance(m, ToolMessage):
            answers[m.tool_call_id] = answers.get(m.tool_call_id, 0) + 1
    for m in state["messages"]:
        if isinstance(m, AIMessage):
            for call in m.tool_calls:
                assert answers.get(call["id"]) == 1, (
                    f"call {call['id']} has {answers.get(call['id'])} answers"
                )


def same_as_terminus_run(report: dict[str, Any], scenario: dict[str, Any]) -> None:
    """The middleware's report equals ``terminus run``'s for the same script, on every counter
    that does not depend on how the host stores its conversation."""
    expected = run_scenario(scenario)
    assert {k: report[k] for k in COMPARED} == {k: expected[k] for k in COMPARED}


# ----- the seed's bug, and its fix -----


def test_without_the_middleware_the_architect_stops_with_no_plan() -> None:
    state = run(seed.ARCHITECT, None)
    assert seed.PLAN_PATH not in state["files"]
    assert state["todos"] == [{"content": "write plan", "status": "in_progress"}]
    last = state["messages"][-1]
    assert isinstance(last, AIMessage) and not last.tool_calls
    assert last.content == seed.ARCHITECT[3]["text"]
    assert REPORT_KEY not in state


def test_with_the_middleware_the_premature_stop_is_nudged_and_the_plan_written() -> None:
    state = run(seed.ARCHITECT, ARCHITECT_POLICY)
    report = state[REPORT_KEY]
    assert report["outcome"] == "complete"
    assert report["reason"] == "answered"
    assert report["nudges"] == 1
    assert report["model_calls"] == len(seed.ARCHITECT)
    assert report["tool_calls"] == 5
    assert report["result"] == "Plan written to /plan.md."
    assert state["files"][seed.PLAN_PATH]["content"] == seed.PLAN_TEXT
    assert state["todos"] == [{"content": "write plan", "status": "completed"}]
    given = nudges(state)
    assert len(given) == 1
    assert "write_file" in given[0].content
    # The nudge follows the refused stop, and the model's next turn follows the nudge.
    index = state["messages"].index(given[0])
    assert state["messages"][index - 1].content == seed.ARCHITECT[3]["text"]
    assert isinstance(state["messages"][index + 1], AIMessage)
    assert_history_valid(state)
    same_as_terminus_run(report, seed.as_scenario(seed.ARCHITECT, ARCHITECT_POLICY))


def test_the_report_holds_the_kernels_snapshot_counters() -> None:
    state = run(seed.ARCHITECT, ARCHITECT_POLICY)
    assert MACHINE_KEY not in state  # private: in the checkpoint, not in the output
    report = state[REPORT_KEY]
    for key in ("steps", "entries", "excluded_tools", "empty_responses", "no_ops"):
        assert key in report


@pytest.mark.parametrize(
    ("script", "policy", "reason"),
    [
        (seed.looping(), {}, "no_progress"),
        (seed.honest_chain(seed.CHAIN_PARTS), {"max_steps": 21}, "max_steps"),
        ([seed.EMPTY_TURN], {"retry_base_ms": 1, "retry_max_ms": 2}, "empty_responses"),
    ],
)
def test_async_stops_are_the_sync_ones(
    script: list[seed.Turn], policy: dict[str, Any], reason: str
) -> None:
    model = seed.ScriptedChatModel(script=script, repeat_last=True)
    agent = seed.build_agent(model, [TerminusMiddleware(policy)])
    state = asyncio.run(agent.ainvoke(seed.task_input()))
    sync = run(script, policy, repeat_last=True)[REPORT_KEY]
    assert state[REPORT_KEY]["reason"] == reason
    assert {k: state[REPORT_KEY][k] for k in COMPARED} == {k: sync[k] for k in COMPARED}
    assert_history_valid(state)


def test_async_invoke_gives_the_same_report() -> None:
    model = seed.ScriptedChatModel(script=seed.ARCHITECT)
    agent = seed.build_agent(model, [TerminusMiddleware(ARCHITECT_POLICY)])
    state = asyncio.run(agent.ainvoke(seed.task_input()))
    sync = run(seed.ARCHITECT, ARCHITECT_POLICY)[REPORT_KEY]
    assert {k: state[REPORT_KEY][k] for k in COMPARED} == {k: sync[k] for k in COMPARED}
    assert seed.PLAN_PATH in state["files"]


# ----- stops the kernel decides end the loop without an exception -----


def test_a_loop_on_one_identical_call_ends_no_progress(tmp_path: Path) -> None:
    log = tmp_path / "model.log"
    model = seed.ScriptedChatModel(script=seed.looping(), repeat_last=True, log_path=str(log))
    state = seed.build_agent(model, [TerminusMiddleware({})]).invoke(seed.task_input())
    report = state[REPORT_KEY]
    # The stop is decided on the third turn's results: the model is not called a fourth time,
    # and the conversation ends with those results (no stand-in reply is left in it).
    assert len(log.read_text(encoding="utf-8").splitlines()) == 3
    assert isinstance(state["messages"][-1], ToolMessage)
    assert report["outcome"] == "aborted"
    assert report["reason"] == "no_progress"
    assert report["model_calls"] == 3  # max_repeats 3: the third identical turn stops the run
    told = notices(state)
    assert told and "same calls with the same results" in told[0]
    assert_history_valid(state)
    same_as_terminus_run(report, seed.as_scenario(seed.looping(), {}, repeat_last=True))


def test_a_long_honest_chain_ends_max_steps_without_graph_recursion_error() -> None:
    chain = seed.honest_chain(seed.CHAIN_PARTS)
    state = run(chain, {"max_steps": 21})
    report = state[REPORT_KEY]
    assert report["outcome"] == "aborted"
    assert report["reason"] == "max_steps"
    assert report["steps"] == 21
    assert_history_valid(state)  # the calls of the last turn were answered "not run"
    same_as_terminus_run(report, seed.as_scenario(chain, {"max_steps": 21}))


def test_without_the_middleware_the_same_chain_hits_langgraphs_recursion_limit() -> None:
    model = seed.ScriptedChatModel(script=seed.honest_chain(seed.CHAIN_PARTS))
    agent = seed.build_agent(model)
    with pytest.raises(GraphRecursionError):
        agent.invoke(seed.task_input(), {"recursion_limit": 25})


def test_the_kernel_stops_before_langgraphs_recursion_limit() -> None:
    model = seed.ScriptedChatModel(script=seed.honest_chain(seed.CHAIN_PARTS))
    agent = seed.build_agent(model, [TerminusMiddleware({"max_steps": 8})])
    state = agent.invoke(seed.task_input(), {"recursion_limit": 60})
    assert state[REPORT_KEY]["reason"] == "max_steps"


def test_empty_replies_end_empty_responses() -> None:
    policy = {"retry_base_ms": 1, "retry_max_ms": 2}
    state = run([seed.EMPTY_TURN], policy, repeat_last=True)
    report = state[REPORT_KEY]
    assert report["outcome"] == "aborted"
    assert report["reason"] == "empty_responses"
    assert report["empty_responses"] == 3
    assert report["model_calls"] == 3
    # Retried replies are not kept: no empty assistant message is left in the conversation.
    assert not [m for m in state["messages"] if isinstance(m, AIMessage)]


def test_a_premature_stop_past_max_nudges_ends_incomplete() -> None:
    stops = [seed.ARCHITECT[0], seed.text_turn("Done.")]
    state = run(stops, {**ARCHITECT_POLICY, "max_nudges": 2}, repeat_last=True)
    report = state[REPORT_KEY]
    assert report["outcome"] == "aborted"
    assert report["reason"] == "incomplete"
    assert report["nudges"] == 2
    assert seed.PLAN_PATH not in state["files"]


def test_a_spent_deadline_ends_deadline() -> None:
    model = seed.ScriptedChatModel(script=seed.ARCHITECT, sleep_s=0.03)
    agent = seed.build_agent(model, [TerminusMiddleware({"deadline_ms": 20})])
    report = agent.invoke(seed.task_input())[REPORT_KEY]
    assert (report["outcome"], report["reason"]) == ("aborted", "deadline")


def test_a_new_input_on_a_thread_whose_run_ended_starts_a_new_run() -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    script = [*seed.ARCHITECT, seed.text_turn("You are welcome.")]
    model = seed.ScriptedChatModel(script=script)
    agent = seed.build_agent(model, [TerminusMiddleware({})], InMemorySaver())
    config = {"configurable": {"thread_id": "t"}}
    first = agent.invoke(seed.task_input(), config)[REPORT_KEY]
    assert (first["outcome"], first["model_calls"], first["nudges"]) == ("complete", 7, 1)
    second = agent.invoke({"messages": [{"role": "user", "content": "Thanks."}]}, config)
    report = second[REPORT_KEY]
    # A new run with its own counters (the first one's todos were all closed).
    assert (report["outcome"], report["reason"]) == ("complete", "answered")
    assert (report["model_calls"], report["steps"], report["nudges"]) == (1, 1, 0)
    assert report["result"] == "You are welcome."


def test_a_run_interrupted_for_approval_resumes_with_its_counters() -> None:
    from deepagents import create_deep_agent
    from langchain.agents.middleware import TodoListMiddleware
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import Command

    saver = InMemorySaver()

    def architect() -> Any:
        # A new agent and middleware each time: the resumed run's machine comes from the state.
        return create_deep_agent(
            model=seed.ScriptedChatModel(script=seed.ARCHITECT),
            middleware=[TodoListMiddleware(), TerminusMiddleware(ARCHITECT_POLICY)],
            interrupt_on={"write_file": True},
            checkpointer=saver,
        )

    config = {"configurable": {"thread_id": "approval"}}
    paused = architect().invoke(seed.task_input(), config)
    assert paused.get("__interrupt__"), "the write_file call waits for approval"
    assert REPORT_KEY not in paused or paused[REPORT_KEY] is None
    state = architect().invoke(Command(resume={"decisions": [{"type": "approve"}]}), config)
    report = state[REPORT_KEY]
    expected = run(seed.ARCHITECT, ARCHITECT_POLICY)[REPORT_KEY]
    assert {k: report[k] for k in COMPARED} == {k: expected[k] for k in COMPARED}
    assert seed.PLAN_PATH in state["files"]


# ----- the machine restored from the state gives the same run -----


class ForgetMachines(AgentMiddleware):
    """Outside the middleware: empties its live machines after every model call, so each hook
    restores the machine from the snapshot in the state (as a new process does)."""

    def __init__(self, terminus: TerminusMiddleware) -> None:
        super().__init__()
        self.terminus = terminus

    def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        """Calls the model, then forgets."""
        response = handler(request)
        self.terminus._sessions.clear()
        return response


class AnswerFromScript(AgentMiddleware):
    """Inside the middleware: answers every model call itself (as a response cache does), so
    the model's own call never runs: the middleware reads the reply it gives."""

    def __init__(self, model: seed.ScriptedChatModel) -> None:
        super().__init__()
        self.model = model

    def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        """The scripted model's reply, without the handler."""
        return self.model.invoke(request.messages)


CASES = {
    "architect": (seed.ARCHITECT, ARCHITECT_POLICY),
    "loop": (seed.looping(), {}),
    # Long enough for the snapshot to pass COMPRESS_AT: restored from its compressed form.
    "chain": ([*seed.honest_chain(seed.CHAIN_PARTS), seed.text_turn("Read.")], {}),
}


@pytest.mark.parametrize("variant", ["forget", "answer"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_the_run_is_the_same_when_the_live_machine_is_not_at_hand(variant: str, case: str) -> None:
    """Restored from the state at every model step (``forget``), or with the replies given by a
    middleware inside it instead of the model (``answer``), the run is the same."""
    script, policy = CASES[case]
    expected = run(script, policy, repeat_last=case == "loop")
    model = seed.ScriptedChatModel(script=script, repeat_last=case == "loop")
    terminus = TerminusMiddleware(policy)
    if variant == "forget":
        stack = [ForgetMachines(terminus), terminus]
    else:
        stack = [terminus, AnswerFromScript(model)]
    state = seed.build_agent(model, stack).invoke(seed.task_input())
    assert {k: state[REPORT_KEY][k] for k in COMPARED} == {
        k: expected[REPORT_KEY][k] for k in COMPARED
    }
    assert notices(state) == notices(expected)
    assert_history_valid(state)


def test_a_graph_ended_by_another_middleware_still_reports_cancelled() -> None:
    from langchain.agents.middleware import ModelCallLimitMiddleware

    model = seed.ScriptedChatModel(script=seed.ARCHITECT)
    limit = ModelCallLimitMiddleware(run_limit=2, exit_behavior="end")
    state = seed.build_agent(model, [limit, TerminusMiddleware(ARCHITECT_POLICY)]).invoke(
        seed.task_input()
    )
    report = state[REPORT_KEY]
    assert (report["outcome"], report["reason"]) == ("aborted", "cancelled")
    assert (report["steps"], report["tool_calls"]) == (5, 2)  # two tool turns, then the cancel
    assert state["messages"][-1].content.startswith("Model call limits exceeded")


# ----- provider errors -----


class ProviderError(Exception):
    """A provider SDK's error: an HTTP status and the response's headers."""

    def __init__(self, status_code: int, message: str = "", retry_after: str | None = None):
        super().__init__(message or f"HTTP {status_code}")
        self.status_code = status_code
        self.response = type(
            "Response", (), {"headers": {"retry-after": retry_after} if retry_after else {}}
        )()


class FailingModel(seed.ScriptedChatModel):
    """The scripted model, whose first ``len(errors)`` calls raise those errors."""

    errors: list[Exception]
    calls: int = 0

    def _generate(
        self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> Any:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return super()._generate(messages, stop, run_manager, **kwargs)


FAST_RETRY = {"retry_base_ms": 1, "retry_max_ms": 2}


def test_a_rate_limited_model_call_is_retried_by_the_kernel() -> None:
    model = FailingModel(script=seed.ARCHITECT, errors=[ProviderError(429), ProviderError(503)])
    agent = seed.build_agent(model, [TerminusMiddleware({**ARCHITECT_POLICY, **FAST_RETRY})])
    report = agent.invoke(seed.task_input())[REPORT_KEY]
    assert (report["outcome"], report["nudges"]) == ("complete", 1)
    assert report["stats"]["model_errors"] == 2
    assert model.calls == len(seed.ARCHITECT) + 2


def test_an_auth_error_ends_model_error_without_an_exception() -> None:
    model = FailingModel(script=seed.ARCHITECT, errors=[ProviderError(401, "invalid x-api-key")])
    state = seed.build_agent(model, [TerminusMiddleware(FAST_RETRY)]).invoke(seed.task_input())
    report = state[REPORT_KEY]
    assert (report["outcome"], report["reason"]) == ("aborted", "model_error")
    assert model.calls == 1  # auth is not retried
    assert not [m for m in state["messages"] if isinstance(m, AIMessage)]  # no stand-in left


def test_retryable_errors_past_max_model_retries_end_model_error() -> None:
    errors: list[Exception] = [ProviderError(429, retry_after="0") for _ in range(10)]
    model = FailingModel(script=seed.ARCHITECT, errors=errors)
    policy = {**FAST_RETRY, "max_model_retries": 2}
    report = seed.build_agent(model, [TerminusMiddleware(policy)]).invoke(seed.task_input())[
        REPORT_KEY
    ]
    assert (report["outcome"], report["reason"]) == ("aborted", "model_error")
    assert model.calls == 3  # the call and two retries


def test_an_error_that_is_not_a_providers_propagates() -> None:
    model = FailingModel(script=seed.ARCHITECT, errors=[KeyError("bug")])
    with pytest.raises(KeyError, match="bug"):
        seed.build_agent(model, [TerminusMiddleware({})]).invoke(seed.task_input())
    model = FailingModel(script=seed.ARCHITECT, errors=[ProviderError(429)])
    middleware = TerminusMiddleware({}, handle_model_errors=False)
    with pytest.raises(ProviderError):
        seed.build_agent(model, [middleware]).invoke(seed.task_input())


def test_model_error_kind_classifies_provider_errors() -> None:
    assert model_error_kind(ProviderError(401)) == ("auth", None)
    assert model_error_kind(ProviderError(429, retry_after="1.5")) == ("rate_limited", 1500)
    assert model_error_kind(ProviderError(529)) == ("server", None)
    assert model_error_kind(ProviderError(400, "prompt is too long: 210000 tokens")) == (
        "context_overflow",
        None,
    )
    assert model_error_kind(ProviderError(422)) == ("bad_request", None)
    assert model_error_kind(TimeoutError()) == ("timeout", None)
    assert model_error_kind(ConnectionResetError()) == ("server", None)
    assert model_error_kind(ValueError("x")) is None


# ----- excluded tools are refused, not run -----


def test_an_excluded_tool_is_answered_with_the_kernels_refusal_and_not_run() -> None:
    runs: list[str] = []

    @tool
    def deploy(target: str) -> str:
        """Deploys the plan."""
        runs.append(target)
        raise ToolException(f"deploy to {target} failed")

    deploy.handle_tool_error = True
    script = [
        seed.tools_turn(("deploy", {"target": "a"})),
        seed.tools_turn(("deploy", {"target": "b"})),
        seed.tools_turn(("deploy", {"target": "c"})),
        seed.tools_turn(("deploy", {"target": "d"}), ("ls", {"path": "/"})),
        seed.text_turn("Deployment is not possible; the plan is in the repository."),
    ]
    state = run(script, {"max_tool_failures": 3}, tools=[deploy])
    report = state[REPORT_KEY]
    assert runs == ["a", "b", "c"]  # the fourth call was refused, never run
    assert report["excluded_tools"] == ["deploy"]
    assert report["tool_calls"] == 4  # three deploys and the ls
    assert report["outcome"] == "complete"
    refusal = next(
        m for m in state["messages"] if isinstance(m, ToolMessage) and m.tool_call_id == "call_3_0"
    )
    assert refusal.status == "error"
    assert "excluded" in refusal.content and "deploy" in refusal.content
    told = notices(state)  # the model was told when the tool was excluded
    assert len(told) == 1 and "`deploy` is now excluded" in told[0]
    third = next(
        m for m in state["messages"] if isinstance(m, ToolMessage) and m.tool_call_id == "call_2_0"
    )
    assert third.content.endswith(told[0])
    assert_history_valid(state)


def test_a_tool_budget_warns_in_the_result_then_refuses() -> None:
    read = seed.honest_chain(3)
    script = [
        read[0],
        read[1],
        seed.tools_turn(*read[2]["tool_calls"], ("ls", {"path": "/"})),
        seed.text_turn("Enough reading."),
    ]
    policy = {"tool_budgets": {"read_file": {"warn_at": 2, "block_at": 3}}}
    state = run(script, policy)
    results = {m.tool_call_id: m for m in state["messages"] if isinstance(m, ToolMessage)}
    assert "[budget]" not in results["call_0_0"].content
    assert results["call_1_0"].content.endswith(
        "[budget] This was call 2 of `read_file`, the last one allowed: "
        "further calls will be refused."
    )
    assert results["call_2_0"].status == "error" and "Not run" in results["call_2_0"].content
    assert results["call_2_1"].status == "success"
    report = state[REPORT_KEY]
    assert (report["outcome"], report["tool_calls"]) == ("complete", 3)


def test_a_turn_whose_every_call_a_budget_blocks_is_answered_and_the_run_goes_on() -> None:
    # Seed 004's read budget: warn, warn, block; the third read alone is refused with the
    # budget's text, the run goes on, the checkpoint lifts the block, and the next read runs.
    read = seed.honest_chain(4)
    script = [
        read[0],
        read[1],
        read[2],
        seed.tools_turn(("write_file", {"file_path": "/notes.md", "content": "two parts read"})),
        read[3],
        seed.text_turn("Enough reading."),
    ]
    policy = {
        "tool_budgets": {"read_file": {"warn_at": 2, "block_at": 3, "reset_on": ["write_file"]}}
    }
    state = run(script, policy)
    results = {m.tool_call_id: m for m in state["messages"] if isinstance(m, ToolMessage)}
    refused = results["call_2_0"]
    assert refused.status == "error"
    assert refused.content == (
        "Not run: the budget of `read_file` is spent: 2 calls since its last reset, and calls "
        "from the 3rd on are refused (`tool_budgets.read_file.block_at`). Post a checkpoint "
        "with `write_file` to lift the block: the calls count again from it."
    )
    assert results["call_4_0"].status == "success"
    report = state[REPORT_KEY]
    assert (report["outcome"], report["tool_calls"], report["stats"]["refused_calls"]) == (
        "complete",
        4,
        1,
    )
    assert_history_valid(state)


def test_a_call_with_arguments_that_are_not_json_is_answered_invalid_arguments() -> None:
    bad = {"text": "", "tool_calls": [], "invalid": [("write_file", '{"file_path": ')]}
    script = [
        {**bad, "usage": (100, 10)},
        seed.ARCHITECT[4],
        seed.text_turn("Plan written."),
    ]
    state = run(script, ARCHITECT_POLICY)
    report = state[REPORT_KEY]
    assert (report["outcome"], report["model_calls"], report["tool_calls"]) == ("complete", 3, 2)
    answer = next(m for m in state["messages"] if isinstance(m, ToolMessage))
    assert answer.tool_call_id == "bad_0_0" and answer.status == "error"
    # `terminus run`'s words for the same call.
    assert answer.content == (
        "the arguments must be a JSON object (EOF while parsing a value at line 1 column 14); "
        'the call was not run. Got: {"file_path": '
    )
    assert report["stats"]["tool_failures"] == 1
    assert seed.PLAN_PATH in state["files"]


def test_every_call_refused_ends_tool_failures() -> None:
    @tool
    def deploy(target: str) -> str:
        """Deploys the plan."""
        raise ToolException("no")

    deploy.handle_tool_error = True
    script = [seed.tools_turn(("deploy", {"target": "x"}))]
    state = run(script, {"max_tool_failures": 1}, repeat_last=True, tools=[deploy])
    assert state[REPORT_KEY]["reason"] == "tool_failures"
    assert_history_valid(state)


# ----- plain create_agent, a verifier -----


def structured_run(script: list[seed.Turn], policy: dict[str, Any]) -> dict[str, Any]:
    """``create_agent`` with a structured answer (``ToolStrategy``), tools ``ls`` and
    ``write_file``, under the middleware."""
    from langchain.agents.structured_output import ToolStrategy
    from pydantic import BaseModel

    class Plan(BaseModel):
        title: str

    @tool
    def ls(path: str) -> str:
        """Lists a folder."""
        return "/README.md"

    @tool
    def write_file(file_path: str, content: str) -> str:
        """Writes a file."""
        return f"wrote {file_path}"

    agent = create_agent(
        seed.ScriptedChatModel(script=script),
        [ls, write_file],
        response_format=ToolStrategy(Plan),
        middleware=[TerminusMiddleware(policy)],
    )
    return agent.invoke({"messages": [{"role": "user", "content": seed.TASK}]})


def test_a_structured_answer_is_the_claim_the_kernel_judges() -> None:
    """A structured answer (``response_format``'s output tool, answered within the model call)
    is the model's completion claim: accepted, the run is complete with it as the result, and
    the response's messages join the conversation in their order."""
    answer = seed.tools_turn(("Plan", {"title": "x"}))
    state = structured_run([seed.tools_turn(("ls", {"path": "/"})), answer], {})
    assert state["structured_response"].title == "x"
    kinds = [(m.type, [c["name"] for c in getattr(m, "tool_calls", [])]) for m in state["messages"]]
    assert kinds == [("human", []), ("ai", ["ls"]), ("tool", []), ("ai", ["Plan"]), ("tool", [])]
    report = state[REPORT_KEY]
    assert (report["outcome"], report["reason"], report["tool_calls"]) == ("complete", "answered", 1)
    assert report["result"] == '{"title":"x"}'
    assert_history_valid(state)


def test_a_structured_answer_before_a_required_tool_is_nudged() -> None:
    """Refused (``completion_requires`` unmet), the structured answer is nudged within the model
    step; the model writes the file and answers again, and that answer is the run's."""
    write = seed.tools_turn(("write_file", {"file_path": "/plan.md", "content": "# Plan"}))
    script = [
        seed.tools_turn(("Plan", {"title": "early"})),
        write,
        seed.tools_turn(("Plan", {"title": "done"})),
    ]
    state = structured_run(script, {"completion_requires": ["write_file"]})
    report = state[REPORT_KEY]
    assert (report["outcome"], report["nudges"], report["model_calls"]) == ("complete", 1, 3)
    assert state["structured_response"].title == "done"
    kinds = [m.type for m in state["messages"]]
    assert kinds == ["human", "ai", "tool", "human", "ai", "tool", "ai", "tool"]
    assert_history_valid(state)


def test_create_agent_with_the_middleware_refuses_a_stop_before_a_required_tool() -> None:
    written: dict[str, str] = {}

    @tool
    def write_file(file_path: str, content: str) -> str:
        """Writes a file."""
        written[file_path] = content
        return f"wrote {file_path}"

    script = [
        seed.text_turn("The plan is clear in my head."),
        seed.tools_turn(("write_file", {"file_path": "plan.md", "content": "# Plan"})),
        seed.text_turn("Plan written."),
    ]
    model = seed.ScriptedChatModel(script=script)
    agent = create_agent(
        model, tools=[write_file], middleware=[TerminusMiddleware(ARCHITECT_POLICY)]
    )
    state = agent.invoke({"messages": [{"role": "user", "content": seed.TASK}]})
    report = state[REPORT_KEY]
    assert written == {"plan.md": "# Plan"}
    assert (report["outcome"], report["reason"], report["nudges"]) == ("complete", "answered", 1)


def test_a_verifier_rejection_goes_back_to_the_model_with_its_feedback() -> None:
    claims: list[str] = []

    def verifier(claim: str) -> tuple[bool, str]:
        claims.append(claim)
        return (len(claims) > 1, "the plan has no test section")

    script = [
        seed.tools_turn(("write_file", {"file_path": seed.PLAN_PATH, "content": "# Plan"})),
        seed.text_turn("Plan written."),
        seed.text_turn("Plan written, with tests."),
    ]
    model = seed.ScriptedChatModel(script=script)
    middleware = TerminusMiddleware({"verify_completion": True}, verifier=verifier)
    state = seed.build_agent(model, [middleware]).invoke(seed.task_input())
    report = state[REPORT_KEY]
    assert claims == ["Plan written.", "Plan written, with tests."]
    assert (report["outcome"], report["reason"]) == ("complete", "verified")
    assert report["verification_failures"] == 1
    assert any("no test section" in m.content for m in nudges(state))


def test_a_verifiers_answer_that_is_no_verdict_is_a_clear_error() -> None:
    script = [
        seed.tools_turn(("write_file", {"file_path": seed.PLAN_PATH, "content": "# Plan"})),
        seed.text_turn("Plan written."),
    ]
    middleware = TerminusMiddleware({"verify_completion": True}, verifier=lambda claim: "yes")
    agent = seed.build_agent(seed.ScriptedChatModel(script=script), [middleware])
    with pytest.raises(ValueError, match=r"verdict: expected a boolean, a \[boolean, string\] pair"):
        agent.invoke(seed.task_input())


# ----- bad input -----


def test_a_bad_policy_is_refused_at_construction_naming_the_field() -> None:
    with pytest.raises(ValueError, match=r"policy\.max_stpes"):
        TerminusMiddleware({"max_stpes": 3})
    with pytest.raises(ValueError, match=r"policy\.max_steps"):
        TerminusMiddleware({"max_steps": "many"})
    with pytest.raises(TypeError, match="policy"):
        TerminusMiddleware(["max_steps"])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="verifier"):
        TerminusMiddleware({}, verifier="yes")  # type: ignore[arg-type]


def test_a_corrupt_snapshot_in_the_state_is_a_clear_error() -> None:
    middleware = TerminusMiddleware({})
    reply = AIMessage(content="done", id="r1")
    state: dict[str, Any] = {
        "messages": [HumanMessage(content=seed.TASK), reply],
        MACHINE_KEY: b"not a snapshot",
    }
    with pytest.raises(ValueError, match="terminus_machine: not a machine snapshot"):
        middleware.after_agent(state, None)  # type: ignore[arg-type]
    call = {"id": "c1", "name": "ls", "args": {}, "type": "tool_call"}
    state[MACHINE_KEY] = "text"
    request = ToolCallRequest(call, None, state, None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="terminus_machine: the state holds no machine"):
        middleware.wrap_tool_call(request, lambda r: ToolMessage(content="", tool_call_id="c1"))


def test_the_middleware_copies_and_pickles_with_its_policy() -> None:
    import copy
    import pickle

    middleware = TerminusMiddleware(ARCHITECT_POLICY)
    run_once = seed.build_agent(seed.ScriptedChatModel(script=seed.ARCHITECT), [middleware])
    run_once.invoke(seed.task_input())
    for twin in (copy.deepcopy(middleware), pickle.loads(pickle.dumps(middleware))):
        model = seed.ScriptedChatModel(script=seed.ARCHITECT)
        report = seed.build_agent(model, [twin]).invoke(seed.task_input())[REPORT_KEY]
        assert (report["outcome"], report["nudges"]) == ("complete", 1)


def test_the_core_reads_an_ai_message_as_the_middleware_passes_it() -> None:
    """The host core reads a LangChain message as it is: the text of its blocks, its calls, its
    usage (absent is unknown, not zero), its finish and reasoning."""
    message = AIMessage(
        id="r1",
        content=[{"type": "text", "text": "Reading."}],
        tool_calls=[
            {"id": "c1", "name": "read_file", "args": {"file_path": "/a"}, "type": "tool_call"}
        ],
        usage_metadata={"input_tokens": 5, "output_tokens": 2, "total_tokens": 7},
        response_metadata={"stop_reason": "tool_use"},
    )
    session, step = Session.start({"token_budget": 6}, [HumanMessage(content="Go")])
    assert step["jump"] == "model"
    step = session.reply(message, ["read_file"])
    # 7 tokens of a budget of 6: the usage was read; the run ends before the call runs, and the
    # call is answered so the history stays valid.
    assert step["jump"] == "end" and step["report"]["reason"] == "token_budget"
    assert [a["tool_call_id"] for a in step["answers"]] == ["c1"]
    assert session.reply(message) is None  # fed already
    session, _ = Session.start({}, [])
    thinking = AIMessage(id="r2", content=[{"type": "thinking", "thinking": "hmm"}])
    step = session.reply(thinking)
    assert step["jump"] == "model" and step["drop_reply"]  # an empty reply, retried
    assert session.machine().stats["empty_responses"] == 1
    nameless = AIMessage(
        content="", tool_calls=[{"id": None, "name": "ls", "args": {}, "type": "tool_call"}]
    )
    with pytest.raises(ValueError, match=r"tool_calls\[0\]"):
        session.reply(nameless)
    with pytest.raises(ValueError, match="message: a object is not JSON"):
        session.reply(object())


def test_what_the_core_does_not_read_of_a_message_need_not_be_json() -> None:
    """A provider's objects in a reply's metadata, a tool's artifact: the core reads only the
    fields it uses of a LangChain message, so neither is refused; the offered tools may be
    given as the model call has them (tool dicts here)."""
    session, _ = Session.start({}, [HumanMessage(content="Go")])
    call = {"id": "c1", "name": "read_file", "args": {"file_path": "/a"}, "type": "tool_call"}
    reply = AIMessage(
        id="r1",
        content="",
        tool_calls=[call],
        additional_kwargs={"parsed": object(), "reasoning_content": "I should read it."},
        response_metadata={"finish_reason": "tool_calls", "raw": object()},
    )
    offered = [{"type": "function", "function": {"name": "read_file"}}]
    assert session.reply(reply, offered)["jump"] == "tools"
    failed = ToolMessage(
        content="timed out",
        tool_call_id="c1",
        status="error",
        artifact=object(),
        response_metadata={ERROR_KIND: "timeout", "raw": object()},
    )
    assert session.results([reply, failed])["jump"] == "model"
    stats = session.machine().stats
    assert (stats["tool_calls"], stats["tool_failures"]) == (1, 1), stats
    journal = session.explain()
    assert "timeout" in journal, journal


def test_the_core_refuses_what_it_cannot_read_naming_it() -> None:
    """An object that is not a LangChain message, a tool list that is a string, a call without
    an id while the run awaits calls: each a ``ValueError`` saying what is wrong."""

    class Item:  # a `type` and a `content`, as an OpenAI Agents item has: not a message
        type, content, status = "message", "Done.", "incomplete"

    session, _ = Session.start({}, [HumanMessage(content="Go")])
    with pytest.raises(ValueError, match="message: a Item is not JSON"):
        session.reply(Item())
    reply = AIMessage(id="r1", content="", tool_calls=[{"id": "c1", "name": "ls", "args": {}}])
    with pytest.raises(ValueError, match="offered: expected a list of tools or names"):
        session.reply(reply, "ls")
    assert session.reply(reply, ["ls"])["jump"] == "tools"
    turn = session.turn()
    with pytest.raises(ValueError, match="call_id: the call of `ls` has no id"):
        Session.gate(turn, None, "ls", True)
    assert Session.gate(turn, "c1", "ls", True) == {"run": {}}
    session.results([reply, ToolMessage(content="a.txt", tool_call_id="c1")])
    assert Session.gate(session.turn(), None, "ls", True) == {"run": {}}  # nothing awaited


class RecordingModel(seed.ScriptedChatModel):
    """The scripted model, replying with the script's entries in call order (an empty reply is
    dropped from the conversation, so the conversation cannot count them), and keeping the
    messages each call was sent."""

    sent: list[list[Any]] = []

    def _generate(self, messages: list[Any], *args: Any, **kwargs: Any) -> Any:
        self.sent.append(list(messages))
        turn = self.script[min(len(self.sent), len(self.script)) - 1]
        inputs, outputs = turn["usage"]
        message = AIMessage(
            content=turn["text"],
            usage_metadata={
                "input_tokens": inputs,
                "output_tokens": outputs,
                "total_tokens": inputs + outputs,
            },
            response_metadata={"finish_reason": "stop"},
        )
        return ChatResult(generations=[ChatGeneration(message=message)])


def test_a_token_warning_with_no_tool_result_to_ride_on_reaches_the_model() -> None:
    # An empty reply whose 850 tokens pass 80 % of the budget: the kernel calls the model again,
    # telling it so. No tool result came to append the warning to: it is a message of its own,
    # as terminus run sends it (it was dropped before).
    script = [
        {"text": "", "tool_calls": [], "usage": (850, 0)},
        seed.text_turn("Done.", usage=(10, 2)),
    ]
    model = RecordingModel(script=script, sent=[])
    agent = create_agent(model, tools=[], middleware=[TerminusMiddleware({"token_budget": 1000})])
    state = agent.invoke({"messages": [{"role": "user", "content": seed.TASK}]})
    report = state[REPORT_KEY]
    assert report["outcome"] == "complete", (report["reason"], report["rule"], report["trace"])
    assert len(model.sent) == 2
    told = [m.content for m in model.sent[1] if isinstance(m, HumanMessage)]
    assert any(
        str(t).startswith("You have used 80 % of this run's token budget (850 of 1000 tokens)")
        for t in told
    ), told


# ----- checkpoints written for the agent -----

CHECKPOINT_POLICY = {
    "auto_checkpoints": 1,
    "tool_budgets": {"read_file": {"block_at": 2, "reset_on": ["post_checkpoint"]}},
    **FAST_RETRY,
}
READS = [
    seed.tools_turn(("read_file", {"path": "a.md"})),
    seed.tools_turn(("read_file", {"path": "b.md"})),
    seed.tools_turn(("read_file", {"path": "b.md"})),  # refused twice: the checkpoint is due
    seed.tools_turn(("read_file", {"path": "b.md"})),  # runs: the budget counts from it
    seed.text_turn("a.md holds the cache, b.md the tests."),
]


class CheckpointModel(seed.ScriptedChatModel):
    """The scripted model, whose checkpoint calls (the kernel's prompt last) are logged with the
    tools they were offered, and fail with ``error`` when it is set."""

    error: Exception | None = None
    summaries: list[tuple[str, int]] = Field(default_factory=list)

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self.model_copy(update={"bound": len(tools)})

    bound: int = -1

    def _generate(
        self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> Any:
        last = messages[-1]
        if isinstance(last, HumanMessage) and str(last.content).startswith("Write a checkpoint"):
            self.summaries.append((str(last.content), self.bound))
            if self.error is not None:
                raise self.error
            return ChatResult(generations=[ChatGeneration(message=AIMessage("Read a.md so far."))])
        return super()._generate(messages, stop, run_manager, **kwargs)


@tool
def read_file(path: str) -> str:
    """Reads a file."""
    return f"contents of {path}"


@pytest.mark.parametrize("fails", [False, True], ids=["written", "failed"])
def test_a_checkpoint_is_asked_of_the_model_without_tools_and_written_before_the_next_call(
    fails: bool,
) -> None:
    """``policy.auto_checkpoints``: after the second refused turn the model is asked for the
    summary with the kernel's prompt and no tools; the summary (or why there is none, a provider's
    error) is a user message before the next call, and the run goes on to its answer."""
    model = CheckpointModel(script=READS, error=ProviderError(429, "slow down") if fails else None)
    summaries = model.summaries  # shared with the copies ``bind_tools`` makes
    agent = create_agent(model, [read_file], middleware=[TerminusMiddleware(CHECKPOINT_POLICY)])
    state = agent.invoke({"messages": [{"role": "user", "content": "Read a.md and b.md."}]})
    report = state[REPORT_KEY]
    assert (report["outcome"], report["stats"]["auto_checkpoints"]) == ("complete", 1), report
    assert report["stats"]["refused_calls"] == 2 and report["tool_calls"] == 2, report
    # Asked once, with no tools (none bound, or an empty list).
    assert [bound <= 0 for _, bound in summaries] == [True], summaries
    written = [
        m.content
        for m in state["messages"]
        if isinstance(m, HumanMessage) and "\n\n" in str(m.content)
    ]
    summary = (
        "(No summary: the model call failed: rate_limited: slow down.)"
        if fails
        else "Read a.md so far."
    )
    checkpoints = [text for text in written if str(text).endswith("\n\n" + summary)]
    assert len(checkpoints) == 1, written
    # Its words are the runtime's, the ones `terminus run` writes.
    note = str(checkpoints[0])[: -len("\n\n" + summary)]
    failed = ("rate_limited", "slow down") if fails else None
    expected = checkpoint_message(note, None if fails else "Read a.md so far.", failed)
    assert checkpoints[0] == expected
    # The summary's reply is not part of the conversation: the kernel never saw it.
    replies = [m.content for m in state["messages"] if isinstance(m, AIMessage)]
    assert "Read a.md so far." not in replies
