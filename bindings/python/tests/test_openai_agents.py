"""``terminus_kernel.openai_agents.Terminus`` under the seed 000 architect, with a scripted
``agents.Model``: no network, no trace exported.

Needs the real kernel (``pip install ./bindings/python``) and the pinned peers
(``pip install -r bindings/python/requirements-openai-agents.txt``; the architect's script is
shared with the LangChain tests, so ``requirements-langchain.txt`` too). Under CI both must be
there; elsewhere the module is skipped when a peer is missing.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

if os.environ.get("CI"):
    import agents  # noqa: F401  (CI installs the pinned peers: a missing one is a failure)
    import langchain  # noqa: F401
else:
    pytest.importorskip(
        "agents", reason="pip install -r bindings/python/requirements-openai-agents.txt"
    )
    pytest.importorskip(
        "langchain", reason="pip install -r bindings/python/requirements-langchain.txt"
    )

sys.path.insert(0, str(Path(__file__).resolve().parent))

import seed_architect as seed  # noqa: E402
from agents import Runner  # noqa: E402
from agents.exceptions import MaxTurnsExceeded  # noqa: E402
from openai_agents_script import OFFLINE, Repo, ScriptedModel  # noqa: E402
from terminus_kernel import run_scenario  # noqa: E402
from terminus_kernel.openai_agents import (  # noqa: E402
    REPORT_ATTR,
    Terminus,
    _tool_error_kind,
    model_error_kind,
)

ARCHITECT_POLICY = {"completion_requires": ["write_file"]}
COMPARED = ("outcome", "reason", "steps", "model_calls", "tool_calls", "nudges", "result")


def run(
    script: list[seed.Turn],
    policy: dict[str, Any],
    *,
    repeat_last: bool = False,
    repo: Repo | None = None,
    model: ScriptedModel | None = None,
) -> tuple[Any, Repo, ScriptedModel]:
    """The architect with ``script`` under the kernel: the run's result, repository and model."""
    repo = repo or Repo()
    model = model or ScriptedModel(script, repeat_last=repeat_last)
    result = Terminus(policy).run_sync(repo.agent(model), seed.TASK, run_config=OFFLINE)
    return result, repo, model


def same_as_terminus_run(report: dict[str, Any], scenario: dict[str, Any]) -> None:
    """The report equals ``terminus run``'s for the same script on the compared counters."""
    expected = run_scenario(scenario)
    assert {k: report[k] for k in COMPARED} == {k: expected[k] for k in COMPARED}


def user_texts(result: Any) -> list[str]:
    """The user messages of the run's whole conversation, the task first."""
    return [
        item["content"]
        for item in result.to_input_list()
        if isinstance(item, dict) and item.get("role") == "user"
    ]


def assert_every_call_answered(result: Any) -> None:
    """Every function call of the conversation has exactly one output."""
    items = [i for i in result.to_input_list() if isinstance(i, dict)]
    calls = [i["call_id"] for i in items if i.get("type") == "function_call"]
    outputs = [i["call_id"] for i in items if i.get("type") == "function_call_output"]
    assert sorted(calls) == sorted(outputs)
    assert len(set(calls)) == len(calls)


# ----- the seed's bug, and its fix -----


def test_without_the_kernel_the_architect_stops_with_no_plan() -> None:
    repo = Repo()
    result = Runner.run_sync(
        repo.agent(ScriptedModel(seed.ARCHITECT)), seed.TASK, run_config=OFFLINE
    )
    assert result.final_output == seed.ARCHITECT[3]["text"]
    assert seed.PLAN_PATH not in repo.files
    assert repo.todos == [{"content": "write plan", "status": "in_progress"}]


def test_with_the_kernel_the_premature_stop_is_nudged_and_the_plan_written() -> None:
    result, repo, model = run(seed.ARCHITECT, ARCHITECT_POLICY)
    report = result.terminus
    assert (report["outcome"], report["reason"]) == ("complete", "answered")
    assert report["nudges"] == 1
    assert report["model_calls"] == len(seed.ARCHITECT) == len(model.calls)
    assert report["tool_calls"] == 5
    assert report["result"] == result.final_output == "Plan written to /plan.md."
    assert repo.files[seed.PLAN_PATH] == seed.PLAN_TEXT
    assert repo.todos == [{"content": "write plan", "status": "completed"}]
    # The nudge is in the conversation right after the refused stop, naming the missing tool.
    items = result.to_input_list()
    nudges = [i for i, item in enumerate(items) if item.get("role") == "user"][1:]
    assert len(nudges) == 1
    nudge = items[nudges[0]]
    assert "write_file" in nudge["content"]
    assert seed.ARCHITECT[3]["text"] in str(items[nudges[0] - 1]["content"])
    # The model's next call saw it.
    assert nudge in model.calls[4][0]
    assert_every_call_answered(result)
    same_as_terminus_run(report, seed.as_scenario(seed.ARCHITECT, ARCHITECT_POLICY))


# ----- stops the kernel decides end the run without an exception -----


def test_a_loop_on_one_identical_call_ends_no_progress_not_max_turns() -> None:
    result, repo, model = run(seed.looping(), {}, repeat_last=True)
    report = result.terminus
    assert (report["outcome"], report["reason"]) == ("aborted", "no_progress")
    # The stop is decided on the third turn's results: the model is not called a fourth time.
    assert report["model_calls"] == len(model.calls) == 3
    assert repo.runs == {"ls": 3}
    assert_every_call_answered(result)
    same_as_terminus_run(report, seed.as_scenario(seed.looping(), {}, repeat_last=True))


def test_without_the_kernel_the_same_loop_raises_max_turns_exceeded() -> None:
    repo = Repo()
    agent = repo.agent(ScriptedModel(seed.looping(), repeat_last=True))
    with pytest.raises(MaxTurnsExceeded):
        Runner.run_sync(agent, seed.TASK, run_config=OFFLINE)
    assert repo.runs == {"ls": 10}  # the SDK's default max_turns


def test_a_chain_longer_than_the_sdks_max_turns_completes() -> None:
    chain = [*seed.honest_chain(15), seed.text_turn("Read every part.")]
    result, repo, model = run(chain, {})
    report = result.terminus
    assert (report["outcome"], report["reason"]) == ("complete", "answered")
    assert report["model_calls"] == len(model.calls) == 16  # the SDK's default max_turns is 10
    assert repo.runs == {"read_file": 15}
    assert result.final_output == "Read every part."
    same_as_terminus_run(report, seed.as_scenario(chain, {}))


def test_a_long_chain_ends_max_steps_with_the_last_calls_not_run() -> None:
    chain = seed.honest_chain(seed.CHAIN_PARTS)
    result, repo, model = run(chain, {"max_steps": 21})
    report = result.terminus
    assert (report["outcome"], report["reason"]) == ("aborted", "max_steps")
    assert report["steps"] == 21
    assert report["model_calls"] == len(model.calls)
    assert repo.runs["read_file"] == report["tool_calls"]
    assert_every_call_answered(result)  # the last turn's calls were answered "not run"
    same_as_terminus_run(report, seed.as_scenario(chain, {"max_steps": 21}))


def test_empty_replies_end_empty_responses_and_stay_out_of_the_conversation() -> None:
    policy = {"retry_base_ms": 1, "retry_max_ms": 2}
    result, _, model = run([seed.EMPTY_TURN], policy, repeat_last=True)
    report = result.terminus
    assert (report["outcome"], report["reason"]) == ("aborted", "empty_responses")
    assert report["empty_responses"] == report["model_calls"] == len(model.calls) == 3
    assert not [i for i in result.to_input_list() if i.get("role") == "assistant"]
    same_as_terminus_run(report, seed.as_scenario([seed.EMPTY_TURN], policy, repeat_last=True))


def test_an_empty_reply_is_retried_and_the_answer_taken() -> None:
    script = [seed.EMPTY_TURN, seed.text_turn("The answer.")]
    result, _, model = run(script, {"retry_base_ms": 1, "retry_max_ms": 2})
    assert (result.terminus["reason"], result.final_output) == ("answered", "The answer.")
    assert result.terminus["empty_responses"] == 1
    assert len(model.calls) == 2
    same_as_terminus_run(result.terminus, seed.as_scenario(script, {"retry_base_ms": 1}))


def test_an_empty_reply_with_usage_is_nudged_and_left_out_of_the_conversation() -> None:
    script = [seed.text_turn("", usage=(100, 5)), seed.text_turn("The answer.")]
    result, _, model = run(script, {})
    assert (result.terminus["reason"], result.final_output) == ("answered", "The answer.")
    second = model.calls[1][0]
    assert not [i for i in second if i.get("role") == "assistant"]
    assert len([i for i in second if i.get("role") == "user"]) == 2  # the task and the nudge
    same_as_terminus_run(result.terminus, seed.as_scenario(script, {}))


def test_an_excluded_tools_call_is_refused_with_the_kernels_text() -> None:
    script = [
        seed.tools_turn(("deploy", {"env": "prod"})),
        seed.tools_turn(("deploy", {"env": "staging"})),
        seed.tools_turn(("deploy", {"env": "dev"})),
        seed.tools_turn(("deploy", {"env": "test"}), ("ls", {"path": "/src"})),
        seed.text_turn("Deploy is broken; I listed the sources."),
    ]
    result, repo, model = run(script, {})
    report = result.terminus
    assert (report["outcome"], report["reason"]) == ("complete", "answered")
    assert report["excluded_tools"] == ["deploy"]
    assert repo.runs == {"deploy": 3, "ls": 1}  # the fourth deploy did not run
    outputs = {
        i["call_id"]: i["output"]
        for i in result.to_input_list()
        if i.get("type") == "function_call_output"
    }
    refusal = outputs["call_3_0"]
    assert "deploy" in refusal and "excluded" in refusal.lower()
    # The kernel said so on the third failure's result, before the model's fourth call.
    third = outputs["call_2_0"]
    assert third in [i.get("output") for i in model.calls[3][0]]
    assert "\n\nThe tool `deploy` is now excluded" in third
    assert not [t for t in user_texts(result)[1:] if "deploy" in t]
    scenario = seed.as_scenario(script, {})
    scenario["tools"]["deploy"] = {
        "results": [{"error": "failed", "message": "connection reset by peer"}],
        "repeat": "last",
    }
    same_as_terminus_run(report, scenario)


# ----- the kernel's other commands -----


def test_a_tool_call_written_in_the_text_is_run_as_a_call() -> None:
    written = '{"name": "write_file", "arguments": {"file_path": "/plan.md", "content": "# Plan"}}'
    script = [seed.text_turn(written), seed.text_turn("Plan written.")]
    result, repo, _ = run(script, ARCHITECT_POLICY)
    report = result.terminus
    assert (report["outcome"], report["reason"]) == ("complete", "answered")
    assert report["stats"]["text_tool_calls"] == 1
    assert repo.files[seed.PLAN_PATH] == "# Plan"
    calls = [i for i in result.to_input_list() if i.get("type") == "function_call"]
    assert [(c["name"], c["call_id"]) for c in calls] == [("write_file", calls[0]["call_id"])]
    assert_every_call_answered(result)


def test_a_soft_tool_budget_warns_in_the_result_and_blocks_the_call() -> None:
    script = [
        seed.tools_turn(("read_file", {"file_path": "/src/part0.rs"})),
        seed.tools_turn(("read_file", {"file_path": "/src/part1.rs"})),
        seed.tools_turn(("read_file", {"file_path": "/src/part2.rs"}), ("ls", {"path": "/src"})),
        seed.text_turn("Enough reading."),
    ]
    policy = {"tool_budgets": {"read_file": {"warn_at": 2, "block_at": 3}}}
    result, repo, _ = run(script, policy)
    assert result.terminus["reason"] == "answered"
    assert repo.runs == {"read_file": 2, "ls": 1}  # the third read_file was blocked
    outputs = {
        i["call_id"]: i["output"]
        for i in result.to_input_list()
        if i.get("type") == "function_call_output"
    }
    assert outputs["call_1_0"].startswith("// part 1\n") and "read_file" in outputs["call_1_0"]
    assert outputs["call_1_0"] != "// part 1\n"  # the warning was appended
    assert "read_file" in outputs["call_2_0"] and "part 2" not in outputs["call_2_0"]
    same_as_terminus_run(result.terminus, seed.as_scenario(script, policy))


def test_a_verifier_is_asked_and_its_feedback_keeps_the_run_going() -> None:
    claims: list[str] = []

    def verifier(claim: str) -> tuple[bool, str]:
        claims.append(claim)
        return (len(claims) > 1, "the plan has no tests section")

    script = [seed.text_turn("Plan done."), seed.text_turn("Plan done, with tests.")]
    repo = Repo()
    agent = repo.agent(ScriptedModel(script))
    result = Terminus({"verify_completion": True}, verifier=verifier).run_sync(
        agent, seed.TASK, run_config=OFFLINE
    )
    assert (result.terminus["outcome"], result.terminus["reason"]) == ("complete", "verified")
    assert claims == ["Plan done.", "Plan done, with tests."]
    assert result.terminus["verification_failures"] == 1
    assert any("no tests section" in t for t in user_texts(result)[1:])


def test_a_verifier_that_raises_is_the_error_raised_and_the_run_is_cancelled() -> None:
    def verifier(claim: str) -> bool:
        raise RuntimeError("the verifier's store is down")

    agent = Repo().agent(ScriptedModel([seed.text_turn("Plan done.")]))
    with pytest.raises(RuntimeError, match="the verifier's store is down") as raised:
        Terminus({"verify_completion": True}, verifier=verifier).run_sync(
            agent, seed.TASK, run_config=OFFLINE
        )
    report = getattr(raised.value, REPORT_ATTR)
    assert (report["outcome"], report["reason"]) == ("aborted", "cancelled")
    assert report["stats"]["verifications"] == 0


def test_a_missing_tool_is_answered_not_found_and_a_tools_class_is_kept() -> None:
    class Refused(Exception):
        terminus_error = "permission_denied"

    result, _, _ = run([seed.tools_turn(("nope", {})), seed.text_turn("Done.")], {})
    assert (result.terminus["reason"], result.final_output) == ("answered", "Done.")
    outputs = {
        i["call_id"]: i["output"]
        for i in result.to_input_list()
        if i.get("type") == "function_call_output"
    }
    assert "nope" in outputs["call_0_0"]  # the kernel's answer, not ModelBehaviorError
    assert result.terminus["stats"]["tool_failures"] == 1
    assert _tool_error_kind(Refused()) == "permission_denied"
    assert _tool_error_kind(FileNotFoundError()) == "not_found"


def test_a_spent_deadline_ends_deadline() -> None:
    model = ScriptedModel(seed.ARCHITECT, sleep_s=0.03)
    result, _, _ = run([], {"deadline_ms": 20}, model=model)
    assert (result.terminus["outcome"], result.terminus["reason"]) == ("aborted", "deadline")


def test_the_agents_own_tool_use_behavior_ends_the_run_cancelled() -> None:
    repo = Repo()
    model = ScriptedModel(seed.ARCHITECT)
    agent = repo.agent(model).clone(tool_use_behavior="stop_on_first_tool")
    result = Terminus().run_sync(agent, seed.TASK, run_config=OFFLINE)
    # The first tool's output is the final output, as the SDK does it.
    assert result.final_output.startswith("/README.md\n/src/lib.rs\n")
    assert (result.terminus["outcome"], result.terminus["reason"]) == ("aborted", "cancelled")
    assert len(model.calls) == 1 and repo.runs == {"ls": 1}


# ----- provider errors -----


class StatusError(Exception):
    """The ``openai`` SDK's ``APIStatusError`` shape: a status and the response."""

    def __init__(self, status_code: int, text: str) -> None:
        super().__init__(f"Error code: {status_code}")
        self.status_code = status_code
        self.response: Any = type(
            "Response", (), {"status_code": status_code, "text": text, "headers": {}}
        )()


def test_a_rate_limit_is_retried_after_the_kernels_backoff() -> None:
    errors: list[BaseException] = [StatusError(429, '{"error": {"message": "slow down"}}')]
    model = ScriptedModel([seed.text_turn("Fine.")], errors=errors)
    result, _, _ = run([], {"retry_base_ms": 1, "retry_max_ms": 2}, model=model)
    assert (result.terminus["reason"], result.final_output) == ("answered", "Fine.")
    assert len(model.calls) == 2


def test_an_auth_error_ends_model_error_without_an_exception() -> None:
    model = ScriptedModel([seed.text_turn("never")], errors=[StatusError(401, "invalid api key")])
    result, _, _ = run([], {}, model=model)
    assert (result.terminus["outcome"], result.terminus["reason"]) == ("aborted", "model_error")
    assert len(model.calls) == 1
    assert model_error_kind(StatusError(401, "invalid api key")) == ("auth", None)


def test_an_exception_that_is_not_a_providers_propagates_with_the_report() -> None:
    model = ScriptedModel([seed.text_turn("never")], errors=[KeyError("bug")])
    with pytest.raises(KeyError) as caught:
        run([], {}, model=model)
    assert caught.value.terminus["reason"] == "cancelled"


# ----- bad input -----


def test_bad_arguments_are_refused_naming_them() -> None:
    with pytest.raises(ValueError, match="max_stpes"):
        Terminus({"max_stpes": 3})
    with pytest.raises(TypeError, match="policy"):
        Terminus(["max_steps"])  # type: ignore[arg-type]
    repo = Repo()
    agent = repo.agent(ScriptedModel([seed.text_turn("x")]))
    with pytest.raises(TypeError, match="max_turns"):
        Terminus().run_sync(agent, seed.TASK, max_turns=5)
    with pytest.raises(TypeError, match="agent"):
        Terminus().run_sync("architect", seed.TASK)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="output_type"):
        Terminus().run_sync(agent.clone(output_type=int), seed.TASK)


# ----- checkpoints written for the agent -----


class Summarizing(ScriptedModel):
    """``script``'s model, but a call whose last item is the kernel's checkpoint prompt gets
    ``summary``'s reply (or raises ``error``); the tools each such call offered are kept."""

    def __init__(self, script: list[seed.Turn], error: BaseException | None) -> None:
        super().__init__(script)
        self.summary = ScriptedModel([seed.text_turn("Read part 0 so far.")])
        self.error = error
        self.summaries: list[list[str]] = []

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[Any],
        model_settings: Any,
        tools: list[Any],
        *args: Any,
        **kwargs: Any,
    ) -> ModelResponse:
        asked = (system_instructions, input, model_settings, tools, *args)
        last = input if isinstance(input, str) else (input[-1] if input else {})
        content = last.get("content") if isinstance(last, dict) else last
        if isinstance(content, str) and content.startswith("Write a checkpoint"):
            self.summaries.append([t.name for t in tools])
            if self.error is not None:
                raise self.error
            return await self.summary.get_response(*asked, **kwargs)
        return await super().get_response(*asked, **kwargs)


@pytest.mark.parametrize("fails", [False, True], ids=["written", "failed"])
def test_a_checkpoint_is_asked_of_the_agent_without_tools_and_written_before_the_next_call(
    fails: bool,
) -> None:
    """``policy.auto_checkpoints``: once the read budget refused a call, the agent's model is
    asked for a summary (the kernel's prompt last, no tools, one turn); the summary, or why
    there is none (a provider's error), is a user message before the next call, and the run
    goes on."""
    reads = ["/src/part0.rs", "/src/part1.rs", "/src/part1.rs", "/src/part1.rs"]
    script = [*(seed.tools_turn(("read_file", {"file_path": p})) for p in reads)]
    script.append(seed.text_turn("part 0 and part 1 read."))
    error = StatusError(429, '{"error": {"message": "slow down"}}') if fails else None
    model = Summarizing(script, error)
    policy = {
        "auto_checkpoints": 1,
        "tool_budgets": {"read_file": {"block_at": 2, "reset_on": ["post_checkpoint"]}},
    }
    result, repo, _ = run(script, policy, model=model)
    report = result.terminus
    assert (report["outcome"], report["stats"]["auto_checkpoints"]) == ("complete", 1), report
    assert (report["stats"]["refused_calls"], report["tool_calls"]) == (2, 2), report
    assert repo.runs == {"read_file": 2}
    assert model.summaries == [[]], "asked once, with no tools"
    summary = (
        "(No summary: the model call failed: rate_limited: " if fails else "Read part 0 so far."
    )
    assert len([t for t in user_texts(result) if summary in t]) == 1, user_texts(result)
    assert_every_call_answered(result)
