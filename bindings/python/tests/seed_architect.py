"""The seed 000 architect in its own stack, with no network: a scripted chat model driving
``deepagents.create_deep_agent``.

The architect explores the repository (``ls``, ``read_file``), writes a todo in progress, and then
stops with plain text without calling ``write_file``: the seed's bug. Its script goes on after
that stop (write the plan, close the todo, say it is done), so an agent that refuses the premature
stop gets a plan, and one that accepts it does not.

The scripted model picks its reply from the conversation it is given (the number of assistant
messages in it), not from a counter of its own, so a process that resumes a thread from a
checkpoint gets the same reply for the same turn as the process that started it.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from langchain.agents.middleware import AgentMiddleware, TodoListMiddleware
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command
from pydantic import ConfigDict

TASK = "Write an implementation plan for this repository to /plan.md."
PLAN_PATH = "/plan.md"
PLAN_TEXT = "# Plan\n\n1. Split the parser out of lib.rs.\n2. Add tests for each rule.\n"
SOURCE = {"/src/lib.rs": "fn main() {}\n", "/README.md": "# demo\n"}

Turn = dict[str, Any]
"""One scripted reply: ``{"text": str, "tool_calls": [(name, args), ...], "usage": (in, out)}``,
and optionally ``"invalid": [(name, raw arguments text), ...]`` (calls whose arguments are not
JSON)."""


def tools_turn(*calls: tuple[str, dict[str, Any]], text: str = "") -> Turn:
    """A reply that calls tools."""
    return {"text": text, "tool_calls": list(calls), "usage": (120, 20)}


def text_turn(text: str, usage: tuple[int, int] = (150, 12)) -> Turn:
    """A reply with text and no tool call."""
    return {"text": text, "tool_calls": [], "usage": usage}


EMPTY_TURN: Turn = {"text": "", "tool_calls": [], "usage": (0, 0)}
"""Empty content with zero usage (rule 6)."""

ARCHITECT: list[Turn] = [
    tools_turn(("ls", {"path": "/"})),
    tools_turn(("read_file", {"file_path": "/src/lib.rs"})),
    tools_turn(("write_todos", {"todos": [{"content": "write plan", "status": "in_progress"}]})),
    # The premature stop: a todo is open and no plan was written.
    text_turn("I have explored the repository. I will now write the plan."),
    tools_turn(("write_file", {"file_path": PLAN_PATH, "content": PLAN_TEXT})),
    tools_turn(("write_todos", {"todos": [{"content": "write plan", "status": "completed"}]})),
    text_turn("Plan written to /plan.md."),
]
"""The architect's script: the premature stop is turn 3 (0-based)."""


def honest_chain(length: int) -> list[Turn]:
    """``length`` tool turns, each reading a different file: real progress, never a repeat."""
    return [tools_turn(("read_file", {"file_path": f"/src/part{i}.rs"})) for i in range(length)]


def looping() -> list[Turn]:
    """The same call forever (the script repeats its last turn)."""
    return [tools_turn(("ls", {"path": "/src"}))]


class ScriptedChatModel(BaseChatModel):
    """A chat model that replies from a script, with no network.

    The reply to a conversation is ``script[n]``, where ``n`` is the number of assistant messages
    already in it; past the end, the last entry repeats when ``repeat_last`` is set, and a
    ``IndexError`` names the script otherwise. A call takes ``sleep_s`` seconds. Every call is
    appended to ``log_path`` (one JSON line: the process id and the turn index), and a call whose
    index is ``exit_at`` ends the process at once with ``os._exit(17)`` before replying (a crash
    in the middle of a run).

    With ``disable_streaming=False`` and ``stream_pieces`` set, a reply streamed (under a
    streaming callback, such as LangGraph's ``messages`` stream) comes as chunks of its text of
    that many characters, the last with its tool calls and usage.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    script: list[Turn]
    repeat_last: bool = False
    log_path: str | None = None
    exit_at: int | None = None
    sleep_s: float = 0.0
    disable_streaming: bool = True
    stream_pieces: int = 0

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | Any],
        *,
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> Runnable[Any, AIMessage]:
        """The script decides which tools are called: binding changes nothing."""
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        index = sum(1 for m in messages if isinstance(m, AIMessage))
        if self.log_path is not None:
            with open(self.log_path, "a", encoding="utf-8") as log:
                log.write(json.dumps({"pid": os.getpid(), "turn": index}) + "\n")
        if self.exit_at is not None and index == self.exit_at:
            os._exit(17)
        if self.sleep_s:
            time.sleep(self.sleep_s)
        if index >= len(self.script) and not self.repeat_last:
            raise IndexError(
                f"scripted model: turn {index} asked of a script of {len(self.script)} turns"
            )
        turn = self.script[min(index, len(self.script) - 1)]
        calls = [
            {"id": f"call_{index}_{j}", "name": name, "args": args, "type": "tool_call"}
            for j, (name, args) in enumerate(turn["tool_calls"])
        ]
        invalid = [
            {
                "id": f"bad_{index}_{j}",
                "name": name,
                "args": raw,
                "error": "not JSON",
                "type": "invalid_tool_call",
            }
            for j, (name, raw) in enumerate(turn.get("invalid", []))
        ]
        input_tokens, output_tokens = turn["usage"]
        message = AIMessage(
            content=turn["text"],
            tool_calls=calls,
            invalid_tool_calls=invalid,
            usage_metadata={
                "input_tokens": input_tokens,
                "output_tokens": output_tokens,
                "total_tokens": input_tokens + output_tokens,
            },
            response_metadata={"finish_reason": "tool_calls" if calls else "stop"},
        )
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        message = self._generate(messages, stop, run_manager, **kwargs).generations[0].message
        assert isinstance(message, AIMessage)
        text = str(message.content)
        size = max(self.stream_pieces, 1)
        pieces = [text[i : i + size] for i in range(0, len(text), size)] or [""]
        for n, piece in enumerate(pieces):
            last = n == len(pieces) - 1
            calls = [
                {
                    "name": c["name"],
                    "args": json.dumps(c["args"]),
                    "id": c["id"],
                    "index": j,
                    "type": "tool_call_chunk",
                }
                for j, c in enumerate(message.tool_calls)
            ]
            chunk = ChatGenerationChunk(
                message=AIMessageChunk(
                    content=piece,
                    tool_call_chunks=calls if last else [],
                    usage_metadata=message.usage_metadata if last else None,
                    response_metadata=message.response_metadata if last else {},
                )
            )
            if run_manager is not None:
                run_manager.on_llm_new_token(piece, chunk=chunk)
            yield chunk


class ToolLog(AgentMiddleware):
    """Appends one JSON line per tool execution (process id, call id, tool) to a file, after the
    tool ran: the evidence that no tool runs twice across a crash and a resume."""

    def __init__(self, path: str | Path) -> None:
        super().__init__()
        self.path = str(path)

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        """Runs the tool, then logs it."""
        result = handler(request)
        with open(self.path, "a", encoding="utf-8") as log:
            entry = {
                "pid": os.getpid(),
                "call_id": request.tool_call["id"],
                "name": request.tool_call["name"],
            }
            log.write(json.dumps(entry) + "\n")
        return result


def seed_files(parts: int = 0) -> dict[str, Any]:
    """The repository the architect explores, as DeepAgents file state, with ``parts`` more
    source files (``/src/part{i}.rs``) for the long chain to read."""
    from deepagents.backends.utils import create_file_data

    files = dict(SOURCE)
    files.update({f"/src/part{i}.rs": f"// part {i}\n" for i in range(parts)})
    return {path: create_file_data(text) for path, text in files.items()}


def build_agent(
    model: BaseChatModel,
    middleware: Sequence[AgentMiddleware] = (),
    checkpointer: Any = None,
    tools: Sequence[Any] = (),
) -> Any:
    """The architect: ``create_deep_agent`` with the scripted model, a todo list (``write_todos``;
    DeepAgents no longer adds one by default) and the given middleware after it."""
    from deepagents import create_deep_agent

    return create_deep_agent(
        model=model,
        tools=list(tools),
        system_prompt="You are a careful software architect.",
        middleware=[TodoListMiddleware(), *middleware],
        checkpointer=checkpointer,
    )


CHAIN_PARTS = 40
"""Source files the long chain can read (``honest_chain`` up to this length)."""


def task_input() -> dict[str, Any]:
    """The input of a run: the task and the repository's files."""
    return {
        "messages": [{"role": "user", "content": TASK}],
        "files": seed_files(CHAIN_PARTS),
    }


def as_scenario(
    script: list[Turn], policy: dict[str, Any], *, repeat_last: bool = False
) -> dict[str, Any]:
    """The same run as a scenario file for ``run_scenario`` (``terminus run``): the script's turns,
    and each tool answering ``ok`` with one fixed output (``write_todos`` is built in)."""
    turns = []
    for turn in script:
        entry: dict[str, Any] = {
            "usage": {"input_tokens": turn["usage"][0], "output_tokens": turn["usage"][1]}
        }
        if turn["text"] or not turn["tool_calls"]:
            entry["text"] = turn["text"]
        if turn["tool_calls"]:
            entry["tool_calls"] = [
                {"name": name, "arguments": args} for name, args in turn["tool_calls"]
            ]
        turns.append(entry)
    names = {n for turn in script for n, _ in turn["tool_calls"] if n != "write_todos"}
    return {
        "name": "seed-000-architect",
        "task": TASK,
        "policy": policy,
        "model": {"turns": turns, "repeat": "last" if repeat_last else "none"},
        "tools": {n: {"results": [{"ok": f"{n} output"}], "repeat": "last"} for n in sorted(names)},
    }
