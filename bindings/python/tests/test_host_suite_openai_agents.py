"""The host suite's conversations (``spec/hosts/conversations.json``) through the OpenAI Agents
SDK: each scenario played by a real ``agents.Agent`` under ``terminus_kernel.openai_agents``
(its scripted ``Model`` replying with Responses items, its failures raised as the ``openai``
SDK's ``APIStatusError``s, its function tools giving the scripted results) gives the report
``terminus run`` gives for it, every counter, and sends the model what ``terminus run`` sends it,
every message of every call (the transcript, in the shape of ``spec/hosts/README.md``)."""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip(
    "agents", reason="pip install -r bindings/python/requirements-openai-agents.txt"
)
# The suite's script readers are shared with the LangChain suite.
pytest.importorskip(
    "langchain", reason="pip install -r bindings/python/requirements-langchain.txt"
)

sys.path.insert(0, str(Path(__file__).resolve().parent))

import httpx  # noqa: E402
import openai  # noqa: E402
from agents import Agent, FunctionTool, Model, ModelResponse, RunConfig, Usage  # noqa: E402
from agents import function_tool  # noqa: E402
from agents.models.chatcmpl_converter import Converter  # noqa: E402
from agents.run_config import ToolErrorFormatterArgs  # noqa: E402
from agents.tool_context import ToolContext  # noqa: E402
from openai.types.responses import (  # noqa: E402
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputRefusal,
    ResponseOutputText,
    ResponseReasoningItem,
)
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
    write_todos,
)
from terminus_kernel.openai_agents import ERROR_KIND, Terminus  # noqa: E402

SKIPPED = {
    "repetitive-replies": "an Agents SDK ModelResponse has no finish reason for a reply a "
    "streaming client cut for repeating itself (finish: repetition); Terminus.run does not stream",
}

_STATUS_ERRORS = {
    400: openai.BadRequestError,
    401: openai.AuthenticationError,
    403: openai.PermissionDeniedError,
    404: openai.NotFoundError,
    409: openai.ConflictError,
    422: openai.UnprocessableEntityError,
    429: openai.RateLimitError,
}


def provider_error(kind: str, retry_after_ms: int | None) -> openai.APIStatusError:
    """The ``openai`` SDK's error for a provider failure of the kernel class ``kind``."""
    case = ERRORS[kind]
    status, text = case["status"], case["text"]
    headers = {} if retry_after_ms is None else {"retry-after-ms": str(retry_after_ms)}
    request = httpx.Request("POST", "https://api.openai.invalid/v1/responses")
    response = httpx.Response(status, headers=headers, text=text, request=request)
    cls = _STATUS_ERRORS.get(status)
    if cls is None:
        cls = openai.InternalServerError if status >= 500 else openai.APIStatusError
    try:
        body: Any = json.loads(text)
    except ValueError:
        body = text
    return cls(f"Error code: {status} - {text}", response=response, body=body)


def said(
    system: str | None, items: str | list[Any], failed: Mapping[str, str]
) -> list[dict[str, Any]]:
    """The messages of a model call in the transcript's shape (``spec/hosts/README.md``), as the
    SDK's Chat Completions model sends them (its ``Converter``): the system instructions first,
    a reply's text and function calls one assistant message, each ``function_call_output`` a
    tool message of the tool its call named, a failed call's as ``error (KIND): MESSAGE`` from
    the class ``failed`` keeps by call id (the SDK's output has none); no ids. A message the
    transcript has no place for (a refusal, content that is not text) fails the call: nothing
    is left out unseen."""
    messages: list[Any] = Converter.items_to_messages(items)
    if system:
        messages.insert(0, {"role": "system", "content": system})
    names: dict[str, str] = {}
    out: list[dict[str, Any]] = []
    for message in messages:
        role, content = message["role"], message.get("content") or ""
        if message.get("refusal") or not isinstance(content, str):
            raise AssertionError(f"a message the transcript has no place for: {message}")
        entry: dict[str, Any] = {"role": role, "text": content}
        for call in message.get("tool_calls") or []:
            function = call["function"]
            entry.setdefault("calls", []).append(
                f"{function['name']} {arguments(function['arguments'])}"
            )
            names[call["id"]] = function["name"]
        if role == "tool":
            call_id = message["tool_call_id"]
            entry["tool"] = names[call_id]
            if call_id in failed:
                entry["text"] = f"error ({failed[call_id]}): {content}"
        out.append(entry)
    return out


class ConversationModel(Model):
    """The scenario's model: each call takes its next turn, as Responses items, and records what
    it was sent (``failed``: the class of each failed call, by call id, which the run's tool
    error formatter records)."""

    def __init__(self, script: dict[str, Any]) -> None:
        self.turns = Cursor(script, "turns")
        self.calls = 0
        self.failed: dict[str, str] = {}
        self.sent: list[list[dict[str, Any]]] = []

    async def get_response(
        self, system_instructions: str | None, input: str | list[Any], *args: Any, **kwargs: Any
    ) -> ModelResponse:
        self.sent.append(said(system_instructions, input, self.failed))
        self.calls += 1
        n = self.calls
        turn = self.turns.next()
        if "error" in turn:
            raise provider_error(turn["error"], turn.get("retry_after_ms"))
        output: list[Any] = []
        if turn.get("reasoning"):
            output.append(ResponseReasoningItem(id=f"rs-{n}", type="reasoning", summary=[]))
        finish = turn.get("finish")
        content: list[Any] = []
        if turn.get("text"):
            text = ResponseOutputText(text=turn["text"], type="output_text", annotations=[])
            content.append(text)
        if finish == "content_filter":
            # How the SDK's chat completions model gives a filtered completion.
            refusal = "Response withheld by the provider's content filter."
            content.append(ResponseOutputRefusal(refusal=refusal, type="refusal"))
        if content or finish == "length":
            status = "incomplete" if finish == "length" else "completed"
            output.append(
                ResponseOutputMessage(
                    id=f"msg-{n}", type="message", role="assistant", status=status, content=content
                )
            )
        for i, call in enumerate(turn.get("tool_calls") or []):
            args = call.get("arguments", {})
            output.append(
                ResponseFunctionToolCall(
                    id=f"fc-{n}-{i}",
                    call_id=call.get("id") or f"call-{n}-{i}",
                    type="function_call",
                    name=call["name"],
                    arguments=args if isinstance(args, str) else json.dumps(args or {}),
                )
            )
        usage = turn.get("usage")
        counted = Usage()
        if usage is not None:
            tokens_in, tokens_out = usage["input_tokens"], usage["output_tokens"]
            counted = Usage(
                requests=1,
                input_tokens=tokens_in,
                output_tokens=tokens_out,
                total_tokens=tokens_in + tokens_out,
            )
        return ModelResponse(output=output, usage=counted, response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("conversation model: no streaming")


class ToolFailed(Exception):
    """A scripted tool's failure, of the kernel's class (the adapter reads ``terminus_error``)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        setattr(self, ERROR_KIND, kind)


def scripted_tool(name: str, cursor: Cursor | None) -> FunctionTool:
    """A function tool taking any arguments and giving the scenario's next result for it
    (``write_todos``: the runtime's built-in)."""

    def run(ctx: ToolContext[Any]) -> str:
        if cursor is None:
            try:
                arguments = json.loads(ctx.tool_arguments or "{}")
            except ValueError:
                arguments = None
            text, kind = write_todos(arguments if isinstance(arguments, dict) else {})
            if kind is not None:
                raise ToolFailed(kind, text)
            return text
        spec = cursor.next()
        if spec.get("error") is not None:
            message = spec.get("message") or f"scripted {spec['error']} error"
            raise ToolFailed(spec["error"], message)
        value = spec.get("ok")
        text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
        return text + " log" * (spec.get("filler_tokens") or 0)

    tool = function_tool(run, name_override=name, strict_mode=False)
    schema = {"type": "object", "properties": {}, "additionalProperties": True}
    return dataclasses.replace(tool, params_json_schema=schema)


TRANSCRIPT_LEFT_OUT: dict[str, str] = {}
"""The conversations whose transcript differs from ``terminus run``'s, with the reason."""


@pytest.mark.parametrize("name", SUITE["scenarios"])
def test_the_conversation_through_openai_agents_gives_terminus_runs_report_and_transcript(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, scenario = load_scenario(name, SKIPPED)
    sent = through_openai_agents(scenario, path, monkeypatch)
    if name in TRANSCRIPT_LEFT_OUT:
        return
    # What the model was sent, call by call, every message: what `terminus run` sends.
    assert_transcript(sent, path)


def test_the_transcripts_left_out_are_conversations_of_the_suite() -> None:
    assert set(TRANSCRIPT_LEFT_OUT) <= set(SUITE["scenarios"])
    assert not set(TRANSCRIPT_LEFT_OUT) & set(SKIPPED)
    assert len(SUITE["scenarios"]) - len(TRANSCRIPT_LEFT_OUT) - len(SKIPPED) >= 43


def through_openai_agents(
    scenario: dict[str, Any], path: Path, monkeypatch: pytest.MonkeyPatch
) -> list[list[dict[str, Any]]]:
    """Runs ``scenario`` (kept at ``path``) through a real ``agents.Agent`` under ``Terminus``,
    asserts ``terminus run``'s report and returns what the model was sent (the transcript)."""
    # The kernel's backoff is waited by the adapter (asyncio.sleep): recorded, not slept.
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    monkeypatch.setattr("terminus_kernel.openai_agents.asyncio.sleep", sleep)
    scripts = scenario.get("tools") or {}
    cursors = {n: Cursor(s, "results") for n, s in scripts.items()}
    tools = [scripted_tool(n, cursors.get(n)) for n in sorted({*scripts, "write_todos"})]
    model = ConversationModel(scenario["model"])
    agent = Agent(
        name="conversation",
        model=model,
        tools=tools,
        instructions=scenario.get("system_prompt"),
    )

    def formatter(args: ToolErrorFormatterArgs[Any]) -> str | None:
        """The tool's own message as its result (the default hides it); the class of each
        failed call kept for the transcript."""
        if args.kind == "tool_not_found":
            model.failed[args.call_id] = "not_found"
        if args.kind != "tool_exception":
            return None
        model.failed[args.call_id] = getattr(args.error, ERROR_KIND)
        return str(args.error)

    config = RunConfig(tracing_disabled=True, tool_error_formatter=formatter)
    terminus = Terminus(scenario.get("policy") or {}, scale=scenario.get("scale"))
    result = terminus.run_sync(agent, scenario["task"], run_config=config)
    assert_terminus_runs_report(result.terminus, path, waits)
    return model.sent


@pytest.mark.parametrize("recording", RECORDINGS, ids=lambda p: "/".join(p.parts[-3:]))
def test_the_real_models_recorded_replies_through_openai_agents_give_terminus_runs_report_and_transcript(
    recording: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    scenario, path = recorded(recording, tmp_path)
    assert_transcript(through_openai_agents(scenario, path, monkeypatch), path)
