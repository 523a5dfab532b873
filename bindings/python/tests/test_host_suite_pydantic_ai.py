"""The host suite's conversations (``spec/hosts/conversations.json``) through the Pydantic AI
adapter: each scenario played by a real ``pydantic_ai.Agent`` under ``TerminusAgent`` (its
scripted model's replies as ``ModelResponse``s, its failures raised as Pydantic AI's
``ModelHTTPError``, its tools' results returned by Pydantic AI tools) gives the report
``terminus run`` gives for it, every counter."""

from __future__ import annotations

import os
from typing import Any

import pytest

if not os.environ.get("CI"):
    pytest.importorskip(
        "pydantic_ai", reason="pip install -r bindings/python/requirements-pydantic-ai.txt"
    )
pytest.importorskip("langchain")  # the shared pieces of the LangChain suite

from pydantic_ai import Agent, ToolReturn  # noqa: E402
from pydantic_ai.exceptions import ModelHTTPError  # noqa: E402
from pydantic_ai.messages import (  # noqa: E402
    ModelResponse,
    TextPart,
    ThinkingPart,
    ToolCallPart,
)
from pydantic_ai.models import Model  # noqa: E402
from pydantic_ai.tools import Tool  # noqa: E402
from pydantic_ai.usage import RequestUsage  # noqa: E402
from terminus_kernel.pydantic_ai import ERROR_KIND, TerminusAgent  # noqa: E402
from test_host_suite import (  # noqa: E402
    ERRORS,
    SUITE,
    Cursor,
    assert_terminus_runs_report,
    load_scenario,
    scripted_result,
    write_todos,
)

SKIPPED: dict[str, str] = {}
"""The conversations a framework cannot carry, with the reason (none for this one)."""

_FINISH = {"tool_calls": "tool_call"}
"""The scenario's finish reasons Pydantic AI names otherwise; one it has no name for
(``repetition``) is the provider's raw reason, in ``provider_details``."""

_KNOWN_FINISH = ("stop", "length", "content_filter", "tool_call", "error")


class ConversationModel(Model):
    """The scenario's model: each call takes its next turn (call ids ``call-{N}-{i}``, N the
    model calls so far, retries included)."""

    def __init__(self, turns: Cursor) -> None:
        super().__init__()
        self.turns = turns
        self.calls = 0

    @property
    def model_name(self) -> str:
        return "conversation"

    @property
    def system(self) -> str:
        return "conversation"

    async def request(self, messages: Any, settings: Any, params: Any) -> ModelResponse:
        self.calls += 1
        n = self.calls
        turn = self.turns.next()
        if "error" in turn:
            case = ERRORS[turn["error"]]
            retry = turn.get("retry_after_ms")
            raise ModelHTTPError(
                case["status"],
                self.model_name,
                case["text"],
                retry_after=None if retry is None else retry / 1000,
            )
        parts: list[Any] = [ThinkingPart("thinking")] if turn.get("reasoning") else []
        if turn.get("text"):
            parts.append(TextPart(turn["text"]))
        for i, call in enumerate(turn.get("tool_calls") or []):
            args = call.get("arguments", {})
            call_id = call.get("id") or f"call-{n}-{i}"
            parts.append(ToolCallPart(call["name"], args, tool_call_id=call_id))
        usage = turn.get("usage")
        finish = _FINISH.get(turn.get("finish"), turn.get("finish"))
        known = finish is None or finish in _KNOWN_FINISH
        return ModelResponse(
            parts=parts,
            # A turn without usage: the provider did not measure it.
            usage=RequestUsage(unmeasured_requests=1)
            if usage is None
            else RequestUsage(
                input_tokens=usage["input_tokens"], output_tokens=usage["output_tokens"]
            ),
            model_name=self.model_name,
            finish_reason=finish if known else None,
            provider_details=None if known else {"finish_reason": finish},
        )


def _tool(name: str, cursor: Cursor | None) -> Tool[Any]:
    """The scenario's tool: its next scripted result, a failure returned with its kernel class
    (``ToolReturn`` metadata, ``ERROR_KIND``); ``write_todos`` is the runtime's built-in."""

    def run(**arguments: Any) -> Any:
        text, kind = write_todos(arguments) if cursor is None else scripted_result(cursor.next())
        return text if kind is None else ToolReturn(text, metadata={ERROR_KIND: kind})

    schema = {"type": "object", "properties": {}, "additionalProperties": True}
    return Tool.from_schema(run, name, f"the scenario's {name}", schema)


@pytest.mark.parametrize("name", SUITE["scenarios"])
def test_the_conversation_through_pydantic_ai_gives_terminus_runs_report(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, scenario = load_scenario(name, SKIPPED)
    # The kernel's backoff is waited in real time by the adapter: recorded, not slept.
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    monkeypatch.setattr("terminus_kernel.pydantic_ai._sleep", sleep)
    scripts = scenario.get("tools") or {}
    tools = [_tool(n, Cursor(s, "results")) for n, s in sorted(scripts.items())]
    if "write_todos" not in scripts:
        tools.append(_tool("write_todos", None))
    model = ConversationModel(Cursor(scenario["model"], "turns"))
    agent = TerminusAgent(
        Agent(model, tools=tools), scenario.get("policy") or {}, scale=scenario.get("scale")
    )
    result = agent.run_sync(scenario["task"])
    assert_terminus_runs_report(result.terminus, path, waits)
    if name.startswith("rate-limited"):
        assert waits
