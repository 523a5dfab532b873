"""``terminus_kernel.pydantic_ai`` under the seed 000 architect in Pydantic AI, with Pydantic
AI's scripted ``FunctionModel``: no network.

Needs the real kernel (``pip install ./bindings/python``) and the pinned peers
(``pip install -r bindings/python/requirements-pydantic-ai.txt``, and requirements-langchain.txt
for the architect's script). Under CI both must be there; elsewhere the module is skipped when a
peer is missing.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from pydantic_core import to_json

if os.environ.get("CI"):
    import pydantic_ai  # noqa: F401  (CI installs the pinned peers: a missing one is a failure)
else:
    pytest.importorskip(
        "pydantic_ai", reason="pip install -r bindings/python/requirements-pydantic-ai.txt"
    )
    pytest.importorskip(
        "deepagents", reason="pip install -r bindings/python/requirements-langchain.txt"
    )

sys.path.insert(0, str(Path(__file__).resolve().parent))

import seed_architect as seed  # noqa: E402
from pydantic_ai import Agent, ModelRetry, UsageLimitExceeded, UsageLimits  # noqa: E402
from pydantic_ai.exceptions import ModelHTTPError, UnexpectedModelBehavior  # noqa: E402
from pydantic_ai.messages import (  # noqa: E402
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402
from pydantic_ai.usage import RequestUsage  # noqa: E402
from terminus_kernel import run_scenario  # noqa: E402
from terminus_kernel._native import Session  # noqa: E402
from terminus_kernel.pydantic_ai import (  # noqa: E402
    TerminusAgent,
    TerminusCapability,
    TerminusRunResult,
    model_error_kind,
    wire,
)

ARCHITECT_POLICY = {"completion_requires": ["write_file"]}
COMPARED = ("outcome", "reason", "steps", "model_calls", "tool_calls", "nudges", "result")


class Scripted(FunctionModel):
    """Pydantic AI's ``FunctionModel`` replying from a seed script (``seed.Turn`` entries).

    The reply is ``script[n]``: ``n`` counts the replies already in the conversation
    (``by_history``), or this model's calls; past the end the last entry repeats when
    ``repeat_last`` is set, else an ``IndexError`` names the script. A turn's usage is the
    script's, zero included (``FunctionModel`` would estimate a zero usage)."""

    def __init__(
        self, script: list[seed.Turn], *, repeat_last: bool = False, by_history: bool = True
    ) -> None:
        self.script = script
        self.repeat_last = repeat_last
        self.by_history = by_history
        self.calls = 0
        self.last: seed.Turn | None = None
        super().__init__(self._reply)

    def _reply(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        index = (
            sum(1 for m in messages if isinstance(m, ModelResponse))
            if self.by_history
            else self.calls
        )
        self.calls += 1
        if index >= len(self.script) and not self.repeat_last:
            raise IndexError(
                f"scripted model: turn {index} asked of a script of {len(self.script)} turns"
            )
        turn = self.script[min(index, len(self.script) - 1)]
        self.last = turn
        parts: list[Any] = [TextPart(turn["text"])] if turn["text"] else []
        parts += [
            ToolCallPart(name, args, tool_call_id=f"call_{index}_{j}")
            for j, (name, args) in enumerate(turn["tool_calls"])
        ]
        usage = RequestUsage(input_tokens=turn["usage"][0], output_tokens=turn["usage"][1])
        return ModelResponse(parts=parts, usage=usage)

    async def request(self, messages: Any, settings: Any, params: Any) -> ModelResponse:
        response = await super().request(messages, settings, params)
        if self.last is not None and self.last["usage"] == (0, 0):
            response.usage = RequestUsage()
        return response


class Repo:
    """The architect's tools over an in-memory repository; ``runs`` counts each tool's runs."""

    def __init__(self) -> None:
        self.files = dict(seed.SOURCE)
        self.files.update({f"/src/part{i}.rs": f"// part {i}\n" for i in range(80)})
        self.runs: dict[str, int] = {}

    def agent(self, model: FunctionModel, *, flaky: bool = False) -> Agent[None, str]:
        agent: Agent[None, str] = Agent(
            model, system_prompt="You are a careful software architect."
        )

        def ran(name: str) -> None:
            self.runs[name] = self.runs.get(name, 0) + 1

        @agent.tool_plain
        def ls(path: str) -> str:
            """Lists the files under a folder."""
            ran("ls")
            return "\n".join(p for p in sorted(self.files) if p.startswith(path))

        @agent.tool_plain
        def read_file(file_path: str) -> str:
            """Reads a file."""
            ran("read_file")
            if file_path not in self.files:
                raise ModelRetry(f"{file_path}: no such file")
            return self.files[file_path]

        @agent.tool_plain
        def write_file(file_path: str, content: str) -> str:
            """Writes a file."""
            ran("write_file")
            self.files[file_path] = content
            return f"wrote {file_path}"

        @agent.tool_plain
        def write_todos(todos: list[dict[str, str]]) -> str:
            """Replaces the todo list."""
            ran("write_todos")
            return f"{len(todos)} todos"

        if flaky:

            @agent.tool_plain
            def deploy() -> str:
                """Deploys (always fails)."""
                ran("deploy")
                raise ModelRetry("deploy: the cluster is down")

        return agent


def kernel_run(
    script: list[seed.Turn],
    policy: dict[str, Any],
    *,
    repeat_last: bool = False,
    repo: Repo | None = None,
    by_history: bool = True,
    flaky: bool = False,
) -> tuple[TerminusRunResult, Repo]:
    repo = repo or Repo()
    model = Scripted(script, repeat_last=repeat_last, by_history=by_history)
    agent = TerminusAgent(repo.agent(model, flaky=flaky), policy)
    result = agent.run_sync(seed.TASK)
    assert isinstance(result, TerminusRunResult)
    return result, repo


def same_as_terminus_run(report: dict[str, Any], scenario: dict[str, Any]) -> None:
    """The adapter's report equals ``terminus run``'s for the same script, on every counter
    that does not depend on how the host stores its conversation."""
    expected = run_scenario(scenario)
    assert {k: report[k] for k in COMPARED} == {k: expected[k] for k in COMPARED}


def user_prompts(result: Any) -> list[str]:
    """The user prompts of the run's history, the task first."""
    return [
        p.content
        for m in result.all_messages()
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, UserPromptPart)
    ]


def assert_history_valid(result: Any) -> None:
    """Every tool call of every reply has exactly one answer in the history."""
    answers: dict[str, int] = {}
    for m in result.all_messages():
        if isinstance(m, ModelRequest):
            for p in m.parts:
                call_id = getattr(p, "tool_call_id", None)
                if call_id is not None:
                    answers[call_id] = answers.get(call_id, 0) + 1
    for m in result.all_messages():
        if isinstance(m, ModelResponse):
            for call in m.tool_calls:
                assert answers.get(call.tool_call_id) == 1, call


# ----- the seed's bug, and its fix -----


def test_without_the_adapter_the_architect_stops_with_no_plan() -> None:
    repo = Repo()
    result = repo.agent(Scripted(seed.ARCHITECT)).run_sync(seed.TASK)
    assert result.output == seed.ARCHITECT[3]["text"]
    assert seed.PLAN_PATH not in repo.files
    assert "write_file" not in repo.runs
    assert not hasattr(result, "terminus")


def test_with_the_adapter_the_premature_stop_is_nudged_and_the_plan_written() -> None:
    result, repo = kernel_run(seed.ARCHITECT, ARCHITECT_POLICY)
    report = result.terminus
    assert report is not None
    assert (report["outcome"], report["reason"]) == ("complete", "answered")
    assert report["nudges"] == 1
    assert report["model_calls"] == len(seed.ARCHITECT)
    assert report["tool_calls"] == 5
    assert report["result"] == "Plan written to /plan.md."
    assert result.output == "Plan written to /plan.md."
    assert repo.files[seed.PLAN_PATH] == seed.PLAN_TEXT
    prompts = user_prompts(result)
    assert prompts[0] == seed.TASK
    assert len(prompts) == 2 and "write_file" in prompts[1]
    # The nudge follows the refused stop; the model's next turn follows the nudge.
    messages = result.all_messages()
    at = next(
        i
        for i, m in enumerate(messages)
        if isinstance(m, ModelRequest) and getattr(m.parts[0], "content", None) == prompts[1]
    )
    assert messages[at - 1].text == seed.ARCHITECT[3]["text"]
    assert isinstance(messages[at + 1], ModelResponse)
    assert_history_valid(result)
    same_as_terminus_run(report, seed.as_scenario(seed.ARCHITECT, ARCHITECT_POLICY))


def test_the_capability_on_a_plain_agent_and_iter_give_the_same_report() -> None:
    repo = Repo()
    agent = repo.agent(Scripted(seed.ARCHITECT))

    async def iterate() -> Any:
        async with agent.iter(
            seed.TASK,
            capabilities=[TerminusCapability(ARCHITECT_POLICY)],
            usage_limits=UsageLimits(request_limit=None),
        ) as agent_run:
            nodes = [type(node).__name__ async for node in agent_run]
        return agent_run.result, nodes

    result, nodes = asyncio.run(iterate())
    assert isinstance(result, TerminusRunResult)
    assert nodes[-1] == "End"
    expected = kernel_run(seed.ARCHITECT, ARCHITECT_POLICY)[0].terminus
    assert {k: result.terminus[k] for k in COMPARED} == {k: expected[k] for k in COMPARED}
    assert seed.PLAN_PATH in repo.files


class PlanDone(BaseModel):
    """A structured answer: where the plan is."""

    plan_path: str


def test_a_structured_answer_is_a_claim_the_kernel_judges() -> None:
    early = {"text": "", "tool_calls": [("final_result", {"plan_path": "none"})], "usage": (9, 9)}
    done = {
        "text": "",
        "tool_calls": [("final_result", {"plan_path": "/plan.md"})],
        "usage": (9, 9),
    }
    script = [*seed.ARCHITECT[:3], early, *seed.ARCHITECT[4:6], done]
    repo = Repo()
    agent = repo.agent(Scripted(script))
    result = TerminusAgent(agent, ARCHITECT_POLICY).run_sync(seed.TASK, output_type=PlanDone)
    report = result.terminus
    assert result.output == PlanDone(plan_path="/plan.md")
    assert (report["outcome"], report["reason"], report["nudges"]) == ("complete", "answered", 1)
    assert repo.files[seed.PLAN_PATH] == seed.PLAN_TEXT
    assert report["result"] == to_json({"plan_path": "/plan.md"}).decode()
    assert_history_valid(result)  # the refused answer was answered too
    # The same run as a scenario: each structured answer is the turn's text.
    as_text = [
        seed.text_turn(to_json(t["tool_calls"][0][1]).decode(), t["usage"])
        if t in (early, done)
        else t
        for t in script
    ]
    same_as_terminus_run(report, seed.as_scenario(as_text, ARCHITECT_POLICY))


def test_a_bad_policy_is_refused_at_construction() -> None:
    with pytest.raises(ValueError, match=r"policy\.max_stpes"):
        TerminusCapability({"max_stpes": 3})
    with pytest.raises(TypeError, match="policy"):
        TerminusCapability(["max_steps"])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="wrapped"):
        TerminusAgent("not an agent")  # type: ignore[arg-type]


# ----- stops the kernel decides end the run without an exception -----


def test_a_loop_on_one_identical_call_ends_no_progress() -> None:
    model = Scripted(seed.looping(), repeat_last=True)
    repo = Repo()
    result = TerminusAgent(repo.agent(model), {}).run_sync(seed.TASK)
    report = result.terminus
    assert (report["outcome"], report["reason"]) == ("aborted", "no_progress")
    # The stop is decided on the third turn's results: the model is not called a fourth time.
    assert model.calls == 3 and report["model_calls"] == 3
    assert repo.runs == {"ls": 3}
    assert result.output == ""
    assert isinstance(result.all_messages()[-1], ModelRequest)  # ends with those results
    assert_history_valid(result)
    same_as_terminus_run(report, seed.as_scenario(seed.looping(), {}, repeat_last=True))


LONG = 60
"""Tool turns of the long chain: more than Pydantic AI's default ``request_limit`` (50)."""


def test_without_the_adapter_a_long_chain_hits_pydantic_ais_request_limit() -> None:
    chain = [*seed.honest_chain(LONG), seed.text_turn("Read them all.")]
    with pytest.raises(UsageLimitExceeded, match="request_limit of 50"):
        Repo().agent(Scripted(chain)).run_sync(seed.TASK)


def test_with_the_adapter_a_long_chain_completes_past_the_request_limit() -> None:
    chain = [*seed.honest_chain(LONG), seed.text_turn("Read them all.")]
    policy = {"max_model_calls": 100}
    result, repo = kernel_run(chain, policy)
    report = result.terminus
    assert (report["outcome"], report["reason"]) == ("complete", "answered")
    assert report["model_calls"] == LONG + 1 > 50
    assert repo.runs == {"read_file": LONG}
    assert result.output == "Read them all."
    same_as_terminus_run(report, seed.as_scenario(chain, policy))


def test_the_kernels_budget_ends_a_long_chain() -> None:
    chain = seed.honest_chain(LONG)
    result, repo = kernel_run(chain, {"max_model_calls": 55})
    report = result.terminus
    assert (report["outcome"], report["reason"]) == ("aborted", "max_model_calls")
    assert report["model_calls"] == 55
    assert repo.runs == {"read_file": 55}  # the 55th call's tool ran; no 56th model call
    assert_history_valid(result)
    same_as_terminus_run(report, seed.as_scenario(chain, {"max_model_calls": 55}))


# ----- empty replies -----


def test_without_the_adapter_empty_replies_raise() -> None:
    with pytest.raises(UnexpectedModelBehavior):
        Repo().agent(Scripted([seed.EMPTY_TURN], repeat_last=True)).run_sync(seed.TASK)


def test_empty_replies_end_empty_responses() -> None:
    policy = {"retry_base_ms": 1, "retry_max_ms": 2}
    result, _ = kernel_run([seed.EMPTY_TURN], policy, repeat_last=True)
    report = result.terminus
    assert (report["outcome"], report["reason"]) == ("aborted", "empty_responses")
    assert report["empty_responses"] == 3 and report["model_calls"] == 3
    # Retried replies are not kept: no empty reply is left in the history.
    assert not [m for m in result.all_messages() if isinstance(m, ModelResponse)]
    same_as_terminus_run(report, seed.as_scenario([seed.EMPTY_TURN], policy, repeat_last=True))


def test_an_empty_reply_is_retried_and_the_run_goes_on() -> None:
    script = [seed.EMPTY_TURN, seed.text_turn("Hello.")]
    policy = {"retry_base_ms": 1, "retry_max_ms": 2}
    result, _ = kernel_run(script, policy, by_history=False)
    report = result.terminus
    assert (report["outcome"], report["reason"], report["model_calls"]) == (
        "complete",
        "answered",
        2,
    )
    assert result.output == "Hello."
    assert [m.text for m in result.all_messages() if isinstance(m, ModelResponse)] == ["Hello."]
    same_as_terminus_run(report, seed.as_scenario(script, policy))


# ----- an excluded tool's call is refused -----


def test_a_call_of_an_excluded_tool_is_refused_not_run() -> None:
    deploy = ("deploy", {})
    script = [
        seed.tools_turn(deploy),
        seed.tools_turn(deploy),
        seed.tools_turn(deploy, ("ls", {"path": "/src"})),
        seed.text_turn("The cluster is down; I could not deploy."),
    ]
    result, repo = kernel_run(script, {"max_tool_failures": 2}, flaky=True)
    report = result.terminus
    assert repo.runs == {"deploy": 2, "ls": 1}  # the third call was not run
    assert report["excluded_tools"] == ["deploy"]
    answers = {
        p.tool_call_id: p.content
        for m in result.all_messages()
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, ToolReturnPart)
    }
    refusal = answers["call_2_0"]
    assert "deploy" in refusal and refusal != "deploy: the cluster is down"
    assert (report["outcome"], report["reason"]) == ("complete", "answered")
    assert_history_valid(result)
    scenario = seed.as_scenario(script, {"max_tool_failures": 2})
    scenario["tools"]["deploy"] = {
        "results": [{"error": "failed", "message": "deploy: the cluster is down"}],
        "repeat": "last",
    }
    same_as_terminus_run(report, scenario)


def test_a_tool_budget_warns_then_blocks_and_the_blocked_call_does_not_run() -> None:
    chain = [*seed.honest_chain(4), seed.text_turn("Read enough.")]
    policy = {"tool_budgets": {"read_file": {"warn_at": 2, "block_at": 3}}}
    result, repo = kernel_run(chain, policy)
    report = result.terminus
    answers = {
        p.tool_call_id: str(p.content)
        for m in result.all_messages()
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, ToolReturnPart)
    }
    assert repo.runs == {"read_file": 2}
    assert report["stats"]["refused_calls"] == 2
    assert answers["call_1_0"].startswith("// part 1\n") and "read_file" in answers["call_1_0"]
    assert not answers["call_2_0"].startswith("// part")
    assert_history_valid(result)
    same_as_terminus_run(report, seed.as_scenario(chain, policy))


def test_a_budget_warning_on_a_result_that_is_not_text_goes_to_the_next_request() -> None:
    script = [seed.tools_turn(("size", {"path": "/README.md"})), seed.text_turn("7 bytes.")]
    agent: Agent[None, str] = Agent(Scripted(script))

    @agent.tool_plain
    def size(path: str) -> dict[str, int]:
        """The size of a file."""
        return {"bytes": 7}

    policy = {"tool_budgets": {"size": {"warn_at": 1, "block_at": 5}}}
    result = TerminusAgent(agent, policy).run_sync("How big is the README?")
    warnings = user_prompts(result)[1:]
    assert len(warnings) == 1 and "size" in warnings[0]
    last_request = [m for m in result.all_messages() if isinstance(m, ModelRequest)][-1]
    assert isinstance(last_request.parts[0], ToolReturnPart)
    assert last_request.parts[0].content == {"bytes": 7}
    assert isinstance(last_request.parts[-1], UserPromptPart)


def test_a_verifier_judges_the_claim_and_its_feedback_goes_to_the_model() -> None:
    repo = Repo()
    claims: list[str] = []

    def plan_exists(claim: str) -> tuple[bool, str]:
        claims.append(claim)
        return seed.PLAN_PATH in repo.files, f"{seed.PLAN_PATH} does not exist"

    # No todos: the premature stop reaches the verifier, which refuses it.
    script = [*seed.ARCHITECT[:2], seed.ARCHITECT[3], seed.ARCHITECT[4], seed.ARCHITECT[6]]
    agent = TerminusAgent(
        repo.agent(Scripted(script)), {"verify_completion": True}, verifier=plan_exists
    )
    result = agent.run_sync(seed.TASK)
    report = result.terminus
    assert (report["outcome"], report["reason"]) == ("complete", "verified")
    assert report["verification_failures"] == 1
    assert claims == [seed.ARCHITECT[3]["text"], seed.ARCHITECT[6]["text"]]
    assert any(f"{seed.PLAN_PATH} does not exist" in p for p in user_prompts(result))
    assert repo.files[seed.PLAN_PATH] == seed.PLAN_TEXT


def test_a_spent_deadline_ends_deadline() -> None:
    def slow(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        time.sleep(0.03)
        return ModelResponse(parts=[ToolCallPart("ls", {"path": "/"})])

    result = TerminusAgent(Repo().agent(FunctionModel(slow)), {"deadline_ms": 20}).run_sync("hi")
    assert (result.terminus["outcome"], result.terminus["reason"]) == ("aborted", "deadline")


# ----- tool calls written in the text (as Qwen2.5-Coder-1.5B writes many) -----


def written(name: str, args: dict[str, Any]) -> seed.Turn:
    """A reply whose tool call is written in its text, fenced, as the real model writes it."""
    call = json.dumps({"name": name, "arguments": args}, indent=2)
    return seed.text_turn(f"```json\n{call}\n```", usage=(120, 20))


ARCHITECT_AS_TEXT: list[seed.Turn] = [
    written("ls", {"path": "/"}),
    written("write_file", {"file_path": seed.PLAN_PATH, "content": seed.PLAN_TEXT}),
    seed.text_turn("Plan written to /plan.md."),
]


def test_without_the_adapter_a_written_call_is_taken_for_the_answer() -> None:
    repo = Repo()
    result = repo.agent(Scripted(ARCHITECT_AS_TEXT)).run_sync(seed.TASK)
    assert result.output == ARCHITECT_AS_TEXT[0]["text"]
    assert repo.runs == {}


def test_a_call_written_in_the_text_runs_as_a_tool_call() -> None:
    result, repo = kernel_run(ARCHITECT_AS_TEXT, ARCHITECT_POLICY)
    report = result.terminus
    assert (report["outcome"], report["reason"]) == ("complete", "answered")
    assert repo.runs == {"ls": 1, "write_file": 1}
    assert repo.files[seed.PLAN_PATH] == seed.PLAN_TEXT
    assert report["stats"]["text_tool_calls"] == 2
    # The replies became tool turns in the history: no fenced call is left as text.
    replies = [m for m in result.all_messages() if isinstance(m, ModelResponse)]
    assert [len(m.tool_calls) for m in replies] == [1, 1, 0]
    assert not any("```json" in (m.text or "") for m in replies)
    assert_history_valid(result)
    scenario = seed.as_scenario(ARCHITECT_AS_TEXT, ARCHITECT_POLICY)
    # The same script through `terminus run`, which offers the scenario's tools.
    for name in ("ls", "read_file", "write_file"):
        scenario["tools"].setdefault(name, {"results": [{"ok": "x"}], "repeat": "last"})
    same_as_terminus_run(report, scenario)


# ----- provider errors -----


def test_provider_errors_are_classed_by_the_shared_table() -> None:
    assert model_error_kind(ModelHTTPError(429, "m", {"error": "slow down"})) == (
        "rate_limited",
        None,
    )
    assert model_error_kind(ModelHTTPError(401, "m", "bad key")) == ("auth", None)
    too_long = {"error": {"code": "context_length_exceeded", "message": "too long"}}
    assert model_error_kind(ModelHTTPError(400, "m", too_long))[0] == "context_overflow"
    assert model_error_kind(ModelHTTPError(503, "m", None, headers={"retry-after": "2"})) == (
        "server",
        2000,
    )
    assert model_error_kind(ValueError("a bug")) is None


def test_a_failing_provider_is_retried_then_ends_model_error() -> None:
    calls = 0

    def fail(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        nonlocal calls
        calls += 1
        raise ModelHTTPError(503, "scripted", {"error": "overloaded"})

    policy = {"retry_base_ms": 1, "retry_max_ms": 2, "max_model_retries": 2}
    result = TerminusAgent(Agent(FunctionModel(fail)), policy).run_sync("hi")
    report = result.terminus
    assert (report["outcome"], report["reason"]) == ("aborted", "model_error")
    assert calls == 3  # the first call and two retries
    assert not [m for m in result.all_messages() if isinstance(m, ModelResponse)]
    scenario = {
        "name": "overloaded",
        "task": "hi",
        "policy": policy,
        "model": {"turns": [{"error": "server"}], "repeat": "last"},
    }
    same_as_terminus_run(report, scenario)


def test_a_non_provider_error_propagates() -> None:
    def bug(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise ZeroDivisionError("a bug in the model function")

    with pytest.raises(ZeroDivisionError):
        TerminusAgent(Agent(FunctionModel(bug)), {}).run_sync("hi")


def test_the_core_reads_a_response_text_calls_finish_and_unmeasured_usage() -> None:
    response = ModelResponse(
        parts=[TextPart("Reading."), ToolCallPart("ls", {"path": "/"}, tool_call_id="c1")],
        usage=RequestUsage(unmeasured_requests=1),
        finish_reason="tool_call",
    )
    message = wire(response)
    assert message == {
        "kind": "response",
        "parts": [
            {"part_kind": "text", "content": "Reading."},
            {
                "part_kind": "tool-call",
                "tool_call_id": "c1",
                "tool_name": "ls",
                "args": {"path": "/"},
            },
        ],
        "finish_reason": "tool_call",
    }  # no usage: unmeasured is unknown, not zero
    session, _ = Session.start({}, [], 0)
    step = session.reply(message, ["ls"])
    assert step["jump"] == "tools"
    assert session.turn()["awaiting"] == [("c1", "ls")]
    assert session.report()["trace"][-1]["rule"] == "tool_turn"
    # A structured answer (an output tool's call) is the reply's text, not a call.
    session, _ = Session.start({}, [], 0)
    answer = ModelResponse(parts=[ToolCallPart("final_result", {"a": 1}, tool_call_id="c2")])
    step = session.reply(wire(answer), ["ls"], 0, ["final_result"])
    assert step["jump"] == "end" and step["report"]["result"] == '{"a":1}', step


# ----- a real model: Qwen2.5-Coder-1.5B under llama-server on 127.0.0.1 -----

COMPLETE = {"verified", "explicit", "answered", "forced"}
ABORTED = {
    "max_steps", "max_model_calls", "deadline", "cancelled", "no_progress", "incomplete",
    "verification_loop", "tool_failures", "unrecoverable_tool_error", "empty_responses",
    "model_error", "context_exhausted", "token_budget",
}  # fmt: skip


def test_a_real_model_run_ends_with_a_named_reason_and_consistent_counters(
    tmp_path: Path,
) -> None:
    import httpx
    from llama_server import llama_server
    from openai import AsyncOpenAI
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    with llama_server(tmp_path) as url:
        requests: list[str] = []
        ran: list[str] = []

        async def count(request: httpx.Request) -> None:
            requests.append(request.url.path)

        async def run() -> TerminusRunResult:
            http = httpx.AsyncClient(event_hooks={"request": [count]}, timeout=120)
            # No retries in the SDK: every retry is the kernel's, and every request is counted.
            client = AsyncOpenAI(
                base_url=f"{url}/v1", api_key="none", http_client=http, max_retries=0
            )
            model = OpenAIChatModel("qwen", provider=OpenAIProvider(openai_client=client))
            agent: Agent[None, str] = Agent(model, model_settings={"max_tokens": 40, "seed": 1})

            @agent.tool_plain
            def write_file(path: str, content: str) -> str:
                """Writes content to the file at path."""
                ran.append(path)
                return "ok"

            # One short run: two model calls at most (about 10 tokens a second on two cores).
            policy = {"completion_requires": ["write_file"], "max_model_calls": 2}
            try:
                return await TerminusAgent(agent, policy).run("Write hi to a.txt.")
            finally:
                await http.aclose()

        started = time.monotonic()
        result = asyncio.run(run())
        elapsed = time.monotonic() - started

    report = result.terminus
    assert report is not None, "the result carries the kernel's report"
    assert report["reason"] in (COMPLETE if report["outcome"] == "complete" else ABORTED), report
    assert report["outcome"] in ("complete", "aborted")
    # Every model call the kernel counted went to the server, and no more.
    assert report["model_calls"] == len(requests) <= 2, (report, requests)
    assert all(path.endswith("/chat/completions") for path in requests)
    assert report["steps"] >= report["model_calls"]
    # Every call the kernel ran has one answer in the history, and each success ran the tool
    # once (a call whose arguments failed validation is answered without running it).
    answers = [
        p
        for m in result.all_messages()
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, ToolReturnPart) and not str(p.content).startswith("Not run")
    ]
    assert report["tool_calls"] == len(answers)
    assert len(ran) == sum(1 for p in answers if p.outcome == "success")
    assert_history_valid(result)
    assert report["nudges"] <= 3
    assert isinstance(result.output, str)
    print(
        f"real run: {report['outcome']}/{report['reason']}, {len(requests)} calls, {elapsed:.1f} s"
    )


@pytest.mark.parametrize("fails", [False, True], ids=["written", "failed"])
def test_a_checkpoint_is_asked_of_the_model_without_tools_and_written_before_the_next_call(
    fails: bool,
) -> None:
    """``policy.auto_checkpoints``: after the second turn the read budget refused, the agent's
    model is asked for a summary (the kernel's prompt last, no tools); the summary, or why there
    is none (a provider's error), is a user prompt before the next call, and the run goes on."""
    reads = ["/src/lib.rs", "/README.md", "/README.md", "/README.md"]
    summaries: list[int] = []  # the tools each summary call offered
    replies = 0

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        nonlocal replies
        last = messages[-1].parts[-1] if isinstance(messages[-1], ModelRequest) else None
        if isinstance(last, UserPromptPart) and str(last.content).startswith("Write a checkpoint"):
            summaries.append(len(info.function_tools))
            if fails:
                raise ModelHTTPError(429, "scripted", {"error": "slow down"})
            return ModelResponse(parts=[TextPart("Read lib.rs so far.")])
        replies += 1
        if replies <= len(reads):
            path = reads[replies - 1]
            return ModelResponse(parts=[ToolCallPart("read_file", {"file_path": path})])
        return ModelResponse(parts=[TextPart("lib.rs has main; README.md is a title.")])

    policy = {
        "auto_checkpoints": 1,
        "tool_budgets": {"read_file": {"block_at": 2, "reset_on": ["post_checkpoint"]}},
    }
    result = TerminusAgent(Repo().agent(FunctionModel(reply)), policy).run_sync(seed.TASK)
    report = result.terminus
    assert (report["outcome"], report["stats"]["auto_checkpoints"]) == ("complete", 1), report
    assert (report["stats"]["refused_calls"], report["tool_calls"]) == (2, 2), report
    assert summaries == [0], "asked once, with no tools"
    summary = (
        "(No summary: the model call failed: rate_limited: "
        if fails
        else "\n\nRead lib.rs so far."
    )
    assert len([p for p in user_prompts(result) if summary in str(p)]) == 1, user_prompts(result)
    assert_history_valid(result)
