"""The seed 000 architect for the OpenAI Agents SDK, with no network: a scripted ``agents.Model``
replying from the turns of ``seed_architect`` and function tools over an in-memory repository.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import seed_architect as seed
from agents import Agent, FunctionTool, Model, ModelResponse, RunConfig, Usage, function_tool
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)
from pydantic import BaseModel

OFFLINE = RunConfig(tracing_disabled=True)
"""Every run of the tests: no trace leaves the machine."""


class ScriptedModel(Model):
    """A model that replies ``script[n]`` to its ``n``-th call (the last entry again past the
    end with ``repeat_last``, else an ``IndexError`` naming the script), with the usage the
    turn says. ``errors`` are raised, in order, by the first calls; each call takes
    ``sleep_s`` seconds. Every call's input and
    offered tool names are kept in ``calls``."""

    def __init__(
        self,
        script: list[seed.Turn],
        *,
        repeat_last: bool = False,
        errors: list[BaseException] | None = None,
        sleep_s: float = 0.0,
    ) -> None:
        self.script = script
        self.sleep_s = sleep_s
        self.repeat_last = repeat_last
        self.errors = list(errors or [])
        self.calls: list[tuple[list[Any], list[str]]] = []
        self.replied = 0

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[Any],
        model_settings: Any,
        tools: list[Any],
        output_schema: Any,
        handoffs: list[Any],
        tracing: Any,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: Any | None,
    ) -> ModelResponse:
        items = [{"role": "user", "content": input}] if isinstance(input, str) else list(input)
        self.calls.append((items, [t.name for t in tools]))
        if self.sleep_s:
            await asyncio.sleep(self.sleep_s)
        if self.errors:
            raise self.errors.pop(0)
        index = self.replied
        self.replied += 1
        if index >= len(self.script) and not self.repeat_last:
            raise IndexError(
                f"scripted model: turn {index} asked of a script of {len(self.script)} turns"
            )
        turn = self.script[min(index, len(self.script) - 1)]
        output: list[Any] = []
        if turn["text"]:
            output.append(
                ResponseOutputMessage(
                    id=f"msg_{index}",
                    type="message",
                    role="assistant",
                    status="completed",
                    content=[
                        ResponseOutputText(text=turn["text"], type="output_text", annotations=[])
                    ],
                )
            )
        for j, (name, args) in enumerate(turn["tool_calls"]):
            output.append(
                ResponseFunctionToolCall(
                    id=f"fc_{index}_{j}",
                    call_id=f"call_{index}_{j}",
                    type="function_call",
                    name=name,
                    arguments=json.dumps(args),
                )
            )
        tokens_in, tokens_out = turn["usage"]
        usage = Usage(
            requests=1,
            input_tokens=tokens_in,
            output_tokens=tokens_out,
            total_tokens=tokens_in + tokens_out,
        )
        return ModelResponse(output=output, usage=usage, response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("scripted model: no streaming")


class Todo(BaseModel):
    content: str
    status: str


class Repo:
    """The architect's repository and todo list, and the tools over them."""

    def __init__(self, parts: int = seed.CHAIN_PARTS) -> None:
        self.files: dict[str, str] = dict(seed.SOURCE)
        self.files.update({f"/src/part{i}.rs": f"// part {i}\n" for i in range(parts)})
        self.todos: list[dict[str, str]] = []
        self.runs: dict[str, int] = {}

    def _ran(self, name: str) -> None:
        self.runs[name] = self.runs.get(name, 0) + 1

    def tools(self) -> list[FunctionTool]:
        @function_tool
        def ls(path: str) -> str:
            """List the files under a folder."""
            self._ran("ls")
            prefix = path.rstrip("/") + "/"
            return "\n".join(sorted(p for p in self.files if p.startswith(prefix)))

        @function_tool
        def read_file(file_path: str) -> str:
            """Read a file."""
            self._ran("read_file")
            if file_path not in self.files:
                raise FileNotFoundError(file_path)
            return self.files[file_path]

        @function_tool
        def write_file(file_path: str, content: str) -> str:
            """Write a file."""
            self._ran("write_file")
            self.files[file_path] = content
            return f"wrote {file_path}"

        @function_tool
        def write_todos(todos: list[Todo]) -> str:
            """Replace the todo list."""
            self._ran("write_todos")
            self.todos = [t.model_dump() for t in todos]
            return f"{len(todos)} todos"

        @function_tool
        def deploy(env: str) -> str:
            """Deploy the release (always fails: the broken tool)."""
            self._ran("deploy")
            raise RuntimeError("connection reset by peer")

        return [ls, read_file, write_file, write_todos, deploy]

    def agent(self, model: Model) -> Agent[Any]:
        return Agent(
            name="architect",
            instructions="You are a careful software architect.",
            model=model,
            tools=list(self.tools()),
        )
