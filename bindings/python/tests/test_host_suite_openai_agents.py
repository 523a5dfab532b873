"""The host suite's conversations (``spec/hosts/conversations.json``) through the OpenAI Agents
SDK: each scenario played by a real ``agents.Agent`` under ``terminus_kernel.openai_agents``
(its scripted ``Model`` replying with Responses items, its failures raised as the ``openai``
SDK's ``APIStatusError``s, its function tools giving the scripted results) gives the report
``terminus run`` gives for it, every counter."""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import AsyncIterator
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
    SUITE,
    Cursor,
    assert_terminus_runs_report,
    load_scenario,
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


class ConversationModel(Model):
    """The scenario's model: each call takes its next turn, as Responses items."""

    def __init__(self, script: dict[str, Any]) -> None:
        self.turns = Cursor(script, "turns")
        self.calls = 0

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
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


@pytest.mark.parametrize("name", SUITE["scenarios"])
def test_the_conversation_through_openai_agents_gives_terminus_runs_report(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, scenario = load_scenario(name, SKIPPED)
    # The kernel's backoff is waited by the adapter (asyncio.sleep): recorded, not slept.
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    monkeypatch.setattr("terminus_kernel.openai_agents.asyncio.sleep", sleep)
    scripts = scenario.get("tools") or {}
    cursors = {n: Cursor(s, "results") for n, s in scripts.items()}
    tools = [scripted_tool(n, cursors.get(n)) for n in sorted({*scripts, "write_todos"})]
    agent = Agent(name="conversation", model=ConversationModel(scenario["model"]), tools=tools)
    config = RunConfig(
        tracing_disabled=True,
        # The tool's own message as its result (the default hides it).
        tool_error_formatter=lambda args: str(args.error) if args.error else None,
    )
    terminus = Terminus(scenario.get("policy") or {}, scale=scenario.get("scale"))
    result = terminus.run_sync(agent, scenario["task"], run_config=config)
    assert_terminus_runs_report(result.terminus, path, waits)
