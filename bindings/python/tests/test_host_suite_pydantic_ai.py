"""The host suite's conversations (``spec/hosts/conversations.json``) through the Pydantic AI
adapter: each scenario played by a real ``pydantic_ai.Agent`` under ``TerminusAgent`` (its
scripted model's replies as ``ModelResponse``s, its failures raised as Pydantic AI's
``ModelHTTPError``, its tools' results returned by Pydantic AI tools) gives the report
``terminus run`` gives for it, every counter, and sends the model what ``terminus run`` sends it,
every message of every call (the transcript, in the shape of ``spec/hosts/README.md``)."""

from __future__ import annotations

import os
from pathlib import Path
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
    ModelMessage,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import Model  # noqa: E402
from pydantic_ai.tools import Tool  # noqa: E402
from pydantic_ai.usage import RequestUsage  # noqa: E402
from terminus_kernel.pydantic_ai import ERROR_KIND, TerminusAgent  # noqa: E402
from test_host_suite import (  # noqa: E402
    ERRORS,
    RECORDINGS,
    SUITE,
    Cursor,
    arguments,
    assert_terminus_runs_report,
    assert_transcript,
    load_scenario,
    recorded,
    scripted_result,
    write_todos,
)

SKIPPED: dict[str, str] = {}
"""The conversations a framework cannot carry, with the reason (none for this one)."""

_FINISH = {"tool_calls": "tool_call"}
"""The scenario's finish reasons Pydantic AI names otherwise; one it has no name for
(``repetition``) is the provider's raw reason, in ``provider_details``."""

_KNOWN_FINISH = ("stop", "length", "content_filter", "tool_call", "error")


def said(messages: list[ModelMessage]) -> list[dict[str, Any]]:
    """The messages of a model call in the transcript's shape (``spec/hosts/README.md``), as a
    chat API gets them (Pydantic AI's OpenAI chat model): each part of a request is a message of
    its own (the system prompt, a user prompt, a tool return as the text the model reads, a
    failure as ``error (KIND): MESSAGE`` from the class its metadata marks), a response is one
    assistant message (its texts, its calls; its thinking is not the transcript's); no ids. A
    part of another kind fails the call: nothing is left out unseen."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if isinstance(message, ModelResponse):
            texts: list[str] = []
            calls: list[str] = []
            for part in message.parts:
                if isinstance(part, TextPart):
                    texts.append(part.content)
                elif isinstance(part, ToolCallPart):
                    calls.append(f"{part.tool_name} {arguments(part.args)}")
                elif not isinstance(part, ThinkingPart):
                    raise AssertionError(f"a response part the transcript has no place for: {part}")
            reply: dict[str, Any] = {"role": "assistant", "text": "\n\n".join(texts)}
            if calls:
                reply["calls"] = calls
            out.append(reply)
            continue
        for part in message.parts:
            if isinstance(part, SystemPromptPart):
                out.append({"role": "system", "text": part.content})
            elif isinstance(part, UserPromptPart) and isinstance(part.content, str):
                out.append({"role": "user", "text": part.content})
            elif isinstance(part, ToolReturnPart):
                text = part.model_response_str()
                kind = (part.metadata or {}).get(ERROR_KIND)
                if kind:
                    text = f"error ({kind}): {text}"
                out.append({"role": "tool", "text": text, "tool": part.tool_name})
            else:
                raise AssertionError(f"a request part the transcript has no place for: {part}")
    return out


class ConversationModel(Model):
    """The scenario's model: each call takes its next turn (call ids ``call-{N}-{i}``, N the
    model calls so far, retries included), and records what it was sent."""

    def __init__(self, turns: Cursor) -> None:
        super().__init__()
        self.turns = turns
        self.calls = 0
        self.sent: list[list[dict[str, Any]]] = []

    @property
    def model_name(self) -> str:
        return "conversation"

    @property
    def system(self) -> str:
        return "conversation"

    async def request(self, messages: Any, settings: Any, params: Any) -> ModelResponse:
        self.sent.append(said(messages))
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
    (``ToolReturn`` metadata, ``ERROR_KIND``); ``write_todos`` is the runtime's built-in. One
    call at a time, in the reply's order (Pydantic AI runs a turn's calls at once otherwise): a
    scripted tool's results then go to its calls in the order ``terminus run`` gives them."""

    def run(**arguments: Any) -> Any:
        text, kind = write_todos(arguments) if cursor is None else scripted_result(cursor.next())
        return text if kind is None else ToolReturn(text, metadata={ERROR_KIND: kind})

    schema = {"type": "object", "properties": {}, "additionalProperties": True}
    return Tool.from_schema(run, name, f"the scenario's {name}", schema, sequential=True)


TRANSCRIPT_LEFT_OUT = {
    "only-excluded-tools": "Pydantic AI answers a call of a tool it does not have itself (a "
    "retry prompt, `Unknown tool name: ...`), before any capability hook sees the call",
}
"""The conversations whose transcript differs from ``terminus run``'s, with the reason."""


@pytest.mark.parametrize("name", SUITE["scenarios"])
def test_the_conversation_through_pydantic_ai_gives_terminus_runs_report_and_transcript(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, scenario = load_scenario(name, SKIPPED)
    sent = through_pydantic_ai(scenario, path, monkeypatch)
    if name in TRANSCRIPT_LEFT_OUT:
        return
    # What the model was sent, call by call, every message: what `terminus run` sends.
    assert_transcript(sent, path)


def test_the_transcripts_left_out_are_conversations_of_the_suite() -> None:
    assert set(TRANSCRIPT_LEFT_OUT) <= set(SUITE["scenarios"])
    assert len(SUITE["scenarios"]) - len(TRANSCRIPT_LEFT_OUT) - len(SKIPPED) >= 43


def through_pydantic_ai(
    scenario: dict[str, Any], path: Path, monkeypatch: pytest.MonkeyPatch
) -> list[list[dict[str, Any]]]:
    """Runs ``scenario`` (kept at ``path``) through a real ``pydantic_ai.Agent`` under
    ``TerminusAgent``, asserts ``terminus run``'s report and returns what the model was sent
    (the transcript)."""
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
        Agent(model, tools=tools, system_prompt=scenario.get("system_prompt") or ()),
        scenario.get("policy") or {},
        scale=scenario.get("scale"),
    )
    result = agent.run_sync(scenario["task"])
    assert_terminus_runs_report(result.terminus, path, waits)
    if scenario["name"].startswith("rate-limited"):
        assert waits
    return model.sent


@pytest.mark.parametrize("recording", RECORDINGS, ids=lambda p: "/".join(p.parts[-3:]))
def test_the_real_models_recorded_replies_through_pydantic_ai_give_terminus_runs_report_and_transcript(
    recording: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    scenario, path = recorded(recording, tmp_path)
    assert_transcript(through_pydantic_ai(scenario, path, monkeypatch), path)
