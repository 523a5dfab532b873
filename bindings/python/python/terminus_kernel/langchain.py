"""Terminus as a LangChain v1 agent middleware.

``TerminusMiddleware`` puts the kernel's :class:`~terminus_kernel.Machine` under an agent built
with ``langchain.agents.create_agent`` or ``deepagents.create_deep_agent``::

    from deepagents import create_deep_agent
    from terminus_kernel.langchain import TerminusMiddleware

    agent = create_deep_agent(
        model=model,
        middleware=[TerminusMiddleware({"completion_requires": ["write_file"]})],
    )
    state = agent.invoke({"messages": [{"role": "user", "content": "Write the plan"}]})
    state["terminus"]  # the kernel's report: outcome, reason, steps, model_calls, nudges, ...

Every model reply and every tool result goes through the machine:

- ``after_model`` feeds the reply as a ``model_turn``. A stop the kernel refuses (todos of
  ``write_todos`` still open, a ``completion_requires`` tool not yet run, an empty or no-op reply)
  is answered with the kernel's nudge as a user message and the loop jumps back to the model; a
  stop the kernel decides (complete, or a named abort such as ``max_steps``) jumps to the end of
  the graph, without an exception and so without ``GraphRecursionError``.
- ``wrap_tool_call`` answers a call of a tool the kernel excluded with the kernel's refusal
  instead of running it, and records each executed call's result for the kernel.
- ``before_model`` feeds the turn's results as one ``tool_results`` event before the next model
  call (the tools of one turn run in parallel tasks, so one event per turn is fed once they have
  all finished); a stop decided there (a repeated loop, failing tools) ends the graph.
- ``after_agent`` makes sure the final state always has the report: a graph that another
  middleware ended while the kernel was still live is cancelled and reported so.

The machine's snapshot lives in the graph state (a private key of this middleware's state
schema), so a thread resumed from a LangGraph checkpointer, in another process after a crash,
goes on with its counters and budgets. The final state has key ``"terminus"``: the report.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, NotRequired, Union

from langchain.agents.middleware import AgentMiddleware, AgentState, hook_config
from langchain.agents.middleware.types import (
    ModelRequest,
    ModelResponse,
    PrivateStateAttr,
)
from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    RemoveMessage,
    ToolMessage,
)
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.runtime import Runtime
from langgraph.types import Command

from terminus_kernel import Machine

__all__ = [
    "MACHINE_KEY",
    "REPORT_KEY",
    "TerminusMiddleware",
    "TerminusState",
    "Verifier",
    "model_turn_event",
]

REPORT_KEY = "terminus"
"""The state key of the kernel's report, set when the run stops."""

MACHINE_KEY = "terminus_machine"
"""The state key of the machine's snapshot (``Machine.snapshot()``): private, checkpointed."""

TURN_KEY = "terminus_turn"
"""The state key of what the current turn awaits (private): the calls to run, the refusals, the
next model call's settings, whether the run has ended."""

RESULTS_KEY = "terminus_results"
"""The state key where each executed tool call of the turn leaves its result (private)."""

_RESET = "reset"
"""Written to ``RESULTS_KEY`` to empty it once the turn's results are fed."""

_FINISH = {
    "stop": "stop",
    "end_turn": "stop",
    "stop_sequence": "stop",
    "length": "length",
    "max_tokens": "length",
    "content_filter": "content_filter",
    "tool_calls": "tool_calls",
    "tool_use": "tool_calls",
    "function_call": "tool_calls",
}
"""Providers' finish reasons (``finish_reason`` / ``stop_reason``) as the kernel's ``finish``."""

Verifier = Callable[[str], Union[bool, tuple[bool, str]]]
"""Judges a completion claim (the model's last substantive content): ``True``/``False``, or
``(complete, feedback)``. Asked only when the policy sets ``verify_completion``."""


def _collect_results(
    left: list[dict[str, Any]] | None, right: list[dict[str, Any]] | str | None
) -> list[dict[str, Any]]:
    """Reducer of ``RESULTS_KEY``: tool tasks of one turn each add their result; ``"reset"``
    empties the list once the kernel has them."""
    if right == _RESET:
        return []
    if right is None:
        return list(left or [])
    if not isinstance(right, list):
        raise TypeError(f"{RESULTS_KEY}: expected a list of tool results, got {type(right).__name__}")
    return [*(left or []), *right]


class TerminusState(AgentState):
    """The state this middleware adds to the agent's graph."""

    terminus: NotRequired[dict[str, Any] | None]
    terminus_machine: NotRequired[Annotated[str, PrivateStateAttr]]
    terminus_turn: NotRequired[Annotated[dict[str, Any], PrivateStateAttr]]
    terminus_results: NotRequired[
        Annotated[list[dict[str, Any]], PrivateStateAttr, _collect_results]
    ]


def _text(content: str | list[Any] | Any) -> str:
    """The visible text of a message's content (a string, or content blocks)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, Mapping) and block.get("type") == "text":
                parts.append(str(block.get("text", "")))
        return "".join(parts)
    raise TypeError(f"message content: expected a string or a list of blocks, got {type(content).__name__}")


def _digest(text: str) -> str:
    """A tool output as the kernel needs it: only its identity (the repeat detector compares
    results), so the checkpoint does not carry every output twice."""
    return "sha256:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def model_turn_event(message: AIMessage) -> dict[str, Any]:
    """The kernel's ``model_turn`` event for an ``AIMessage``: its text, its tool calls, its usage
    when the provider reported it (absent usage means unknown, not zero) and its finish reason.

    Raises:
        TypeError: ``message`` is not an ``AIMessage``.
        ValueError: a tool call has no id (its result could not be matched to it).
    """
    if not isinstance(message, AIMessage):
        raise TypeError(f"model_turn_event: expected an AIMessage, got {type(message).__name__}")
    calls = []
    for index, call in enumerate(message.tool_calls):
        if not call.get("id"):
            raise ValueError(
                f"model reply {message.id!r}: tool_calls[{index}] ({call.get('name')!r}) has no id"
            )
        calls.append({"id": call["id"], "name": call["name"], "arguments": call.get("args", {})})
    turn: dict[str, Any] = {"text": _text(message.content), "tool_calls": calls}
    usage = message.usage_metadata
    if usage is not None:
        turn["usage"] = {
            "input_tokens": int(usage.get("input_tokens", 0)),
            "output_tokens": int(usage.get("output_tokens", 0)),
        }
    meta = message.response_metadata or {}
    reason = meta.get("finish_reason") or meta.get("stop_reason")
    if isinstance(reason, str) and reason in _FINISH:
        turn["finish"] = _FINISH[reason]
    return {"model_turn": turn}


def _task(messages: Sequence[AnyMessage]) -> str:
    """The run's task, for the kernel's journal and explanation: the first user message."""
    for message in messages:
        if isinstance(message, HumanMessage):
            return _text(message.content)
    return ""


def _last_ai(messages: Sequence[AnyMessage]) -> AIMessage | None:
    for message in reversed(messages):
        if isinstance(message, AIMessage):
            return message
    return None


def _call_id(call: Mapping[str, Any], where: str) -> str:
    call_id = call.get("id")
    if not isinstance(call_id, str) or not call_id:
        raise ValueError(f"{where}: a call has no id: {call!r}")
    return call_id


@dataclass
class _Outcome:
    """What a hook returns to the graph once the kernel's commands are carried out."""

    messages: list[BaseMessage] = field(default_factory=list)
    jump: str | None = None
    delay_ms: int = 0


class TerminusMiddleware(AgentMiddleware[TerminusState, Any]):
    """A LangChain v1 ``AgentMiddleware`` that runs the agent loop under the Terminus kernel.

    Args:
        policy: the kernel's policy (the scenario ``policy`` fields, same names and defaults);
            an unknown or ill-typed field raises ``ValueError`` naming it, here, at construction.
        verifier: judges completion claims when the policy sets ``verify_completion``; without
            one, a claim that passes the rules (todos closed, ``completion_requires`` met) is
            complete.

    The report is in the final state under ``"terminus"``.
    """

    state_schema = TerminusState

    def __init__(
        self,
        policy: Mapping[str, Any] | None = None,
        *,
        verifier: Verifier | None = None,
    ) -> None:
        super().__init__()
        if policy is not None and not isinstance(policy, Mapping):
            raise TypeError(f"policy: expected a dict or None, got {type(policy).__name__}")
        if verifier is not None and not callable(verifier):
            raise TypeError(f"verifier: expected a callable, got {type(verifier).__name__}")
        self._policy: dict[str, Any] = dict(policy or {})
        Machine(self._policy)  # validates the policy now: a bad field fails here, not mid-run
        self._deadline = self._policy.get("deadline_ms") is not None
        self._verifier = verifier
        self.tools = []
        # Machines by the snapshot they were saved as: a hook whose state holds the snapshot the
        # previous hook wrote takes the live machine instead of restoring it.
        self._machines: OrderedDict[str, Machine] = OrderedDict()
        self._lock = threading.Lock()

    # ----- the machine in the state -----

    def _take(self, state: Mapping[str, Any]) -> Machine:
        snapshot = state.get(MACHINE_KEY)
        if not isinstance(snapshot, str):
            raise RuntimeError(
                f"TerminusMiddleware: the graph state has no machine ({MACHINE_KEY!r}); "
                "was the agent built with this middleware?"
            )
        with self._lock:
            machine = self._machines.pop(snapshot, None)
        return machine if machine is not None else Machine.restore(snapshot)

    def _keep(self, machine: Machine) -> str:
        snapshot = machine.snapshot()
        with self._lock:
            self._machines[snapshot] = machine
            while len(self._machines) > 64:
                self._machines.popitem(last=False)
        return snapshot

    def _tick(self, machine: Machine, turn: Mapping[str, Any]) -> None:
        if self._deadline:
            now = int(time.time() * 1000) - int(turn.get("started_ms", 0))
            machine.handle({"tick": max(now, 0)})

    def _verdict(self, command: Mapping[str, Any]) -> dict[str, Any]:
        """The verdict on a ``verify`` command: the verifier's, or the rules' (complete when the
        kernel says nothing is missing)."""
        if self._verifier is None:
            missing = [str(m) for m in command.get("missing") or []]
            return {"complete": not missing, "feedback": "; ".join(missing)}
        answer = self._verifier(str(command.get("claim", "")))
        if isinstance(answer, bool):
            return {"complete": answer, "feedback": ""}
        if (
            isinstance(answer, tuple)
            and len(answer) == 2
            and isinstance(answer[0], bool)
            and isinstance(answer[1], str)
        ):
            return {"complete": answer[0], "feedback": answer[1]}
        raise TypeError(f"verifier: expected a bool or a (bool, str) tuple, got {answer!r}")

    def _carry_out(self, machine: Machine, turn: dict[str, Any]) -> _Outcome:
        """Drains the kernel's commands and carries out each: guidance becomes a user message,
        a verification is answered, ``call_model`` and ``run_tools`` are recorded in ``turn``
        for the model and tool hooks, ``stop`` puts the report in ``turn``."""
        out = _Outcome()
        while (command := machine.next_command()) is not None:
            kind = command.get("command")
            if kind in ("nudge", "notice"):
                out.messages.append(
                    HumanMessage(
                        content=str(command["text"]),
                        id=f"terminus-{uuid.uuid4().hex}",
                        response_metadata={"terminus": kind},
                    )
                )
            elif kind == "call_model":
                delay = int(command.get("delay_ms", 0) or 0)
                turn["call"] = {"delay_ms": delay, "tools": bool(command.get("tools", True))}
                out.jump = "model"
            elif kind == "run_tools":
                calls = command.get("calls") or []
                turn["awaiting"] = {
                    _call_id(c, "run_tools"): str(c.get("name", "")) for c in calls
                }
                turn["refused"] = _refusals(command)
                turn["warnings"] = _warnings(command)
                out.jump = None
            elif kind == "verify":
                machine.handle({"verdict": self._verdict(command)})
            elif kind == "stop":
                report = command.get("report")
                turn["report"] = report if report is not None else machine.report()
                turn["ended"] = True
                out.jump = "end"
            else:
                raise RuntimeError(f"TerminusMiddleware: unknown kernel command {command!r}")
        return out

    def _update(
        self, machine: Machine, turn: dict[str, Any], out: _Outcome, extra: dict[str, Any]
    ) -> dict[str, Any]:
        update: dict[str, Any] = {MACHINE_KEY: self._keep(machine), **extra}
        report = turn.pop("report", None)
        if report is not None:
            update[REPORT_KEY] = report
        update[TURN_KEY] = turn
        if out.messages:
            update["messages"] = [*update.get("messages", []), *out.messages]
        if out.jump is not None:
            update["jump_to"] = out.jump
        return update

    # ----- hooks -----

    def before_agent(self, state: TerminusState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Starts a run: a new machine, unless the thread's state holds one still live (a
        thread resumed with new input goes on with its counters)."""
        turn = state.get(TURN_KEY)
        if isinstance(state.get(MACHINE_KEY), str) and isinstance(turn, Mapping) and not turn.get("ended"):
            return None
        machine = Machine(self._policy, task=_task(state.get("messages") or []))
        fresh: dict[str, Any] = {"started_ms": int(time.time() * 1000)}
        out = self._carry_out(machine, fresh)
        out.jump = None  # the first command is a model call: the graph goes there anyway
        return self._update(machine, fresh, out, {REPORT_KEY: None, RESULTS_KEY: _RESET})

    async def abefore_agent(
        self, state: TerminusState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        """Async ``before_agent``."""
        return self.before_agent(state, runtime)

    @hook_config(can_jump_to=["end"])
    def before_model(self, state: TerminusState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Feeds the finished tool turn's results; a stop decided on them ends the graph, and
        the kernel's notices go to the model before its next call."""
        turn = state.get(TURN_KEY)
        if not isinstance(turn, Mapping) or turn.get("ended") or not turn.get("awaiting"):
            return None
        turn = dict(turn)
        machine = self._take(state)
        results = self._results(state, turn)
        turn["awaiting"], turn["refused"], turn["warnings"] = {}, {}, {}
        out = self._feed(machine, turn, {"tool_results": results})
        if out.jump == "model":
            out.jump = None  # the graph is on its way to the model
        return self._update(machine, turn, out, {RESULTS_KEY: _RESET})

    async def abefore_model(
        self, state: TerminusState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        """Async ``before_model``."""
        return self.before_model(state, runtime)

    @hook_config(can_jump_to=["model", "end"])
    def after_model(self, state: TerminusState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Feeds the model's reply; carries out the kernel's answer (run the tools, nudge and go
        back to the model, retry, or stop)."""
        turn = state.get(TURN_KEY)
        if not isinstance(turn, Mapping) or turn.get("ended"):
            return None
        message = _last_ai(state.get("messages") or [])
        if message is None or (message.id is not None and message.id == turn.get("fed")):
            return None
        turn = dict(turn)
        turn["fed"] = message.id
        machine = self._take(state)
        out = self._feed(machine, turn, model_turn_event(message))
        extra: dict[str, Any] = {}
        if not message.tool_calls and not _text(message.content).strip() and message.id is not None:
            # An empty reply is an error (retried, or the run stops), never part of the
            # conversation: chat APIs refuse an empty assistant message.
            extra["messages"] = [RemoveMessage(id=message.id)]
        if out.jump == "end" and message.tool_calls:
            # The run stopped on a tool turn: each call gets an answer, so the history stays valid.
            reason = (turn.get("report") or {}).get("reason") or "stopped"
            extra["messages"] = [
                ToolMessage(
                    content=f"Not run: the run stopped ({reason}).",
                    tool_call_id=_call_id(call, "model reply"),
                    name=call["name"],
                    status="error",
                )
                for call in message.tool_calls
            ]
        return self._update(machine, turn, out, extra)

    async def aafter_model(
        self, state: TerminusState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        """Async ``after_model``."""
        return self.after_model(state, runtime)

    def after_agent(self, state: TerminusState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Makes sure the final state has the report: a run still live here was ended by
        something else than the kernel (another middleware's jump, a ``return_direct`` tool),
        and is cancelled."""
        turn = state.get(TURN_KEY)
        if not isinstance(turn, Mapping) or turn.get("ended"):
            return None
        turn = dict(turn)
        machine = self._take(state)
        extra: dict[str, Any] = {}
        messages: list[BaseMessage] = []
        if turn.get("awaiting"):
            results = self._results(state, turn)
            turn["awaiting"], turn["refused"], turn["warnings"] = {}, {}, {}
            extra[RESULTS_KEY] = _RESET
            messages += self._feed(machine, turn, {"tool_results": results}).messages
        if not turn.get("ended"):
            messages += self._feed(machine, turn, {"cancel": True}).messages
        return self._update(machine, turn, _Outcome(messages=messages), extra)

    async def aafter_agent(
        self, state: TerminusState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        """Async ``after_agent``."""
        return self.after_agent(state, runtime)

    def _feed(self, machine: Machine, turn: dict[str, Any], event: dict[str, Any]) -> _Outcome:
        """Feeds one event (after a clock reading when the policy has a deadline) and carries
        out the commands it brings."""
        if self._deadline:
            self._tick(machine, turn)
            early = self._carry_out(machine, turn)
            if turn.get("ended"):
                return early
        machine.handle(event)
        return self._carry_out(machine, turn)

    def _results(self, state: Mapping[str, Any], turn: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The turn's results, one per call the kernel said to run, in call order: from what
        ``wrap_tool_call`` recorded, else from the call's ``ToolMessage`` (a middleware outside
        this one answered it), else a failure saying no result came back."""
        awaiting: Mapping[str, str] = turn.get("awaiting") or {}
        recorded = {
            r["call_id"]: r
            for r in state.get(RESULTS_KEY) or []
            if isinstance(r, Mapping) and r.get("call_id") in awaiting
        }
        answered: dict[str, ToolMessage] = {}
        if len(recorded) < len(awaiting):
            for message in state.get("messages") or []:
                if isinstance(message, ToolMessage) and message.tool_call_id in awaiting:
                    answered[message.tool_call_id] = message
        results = []
        for call_id, name in awaiting.items():
            if call_id in recorded:
                results.append(dict(recorded[call_id]))
            elif call_id in answered:
                results.append(_result(call_id, name, answered[call_id]))
            else:
                results.append(
                    {
                        "call_id": call_id,
                        "name": name,
                        "error": "failed",
                        "message": "no result came back for this call",
                    }
                )
        return results

    # ----- the model call -----

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelResponse[Any] | AIMessage:
        """Waits the kernel's backoff delay before a retried call, and offers no tools to the
        final-answer call of a spent budget."""
        request, delay_ms = _model_call(request)
        if delay_ms:
            time.sleep(delay_ms / 1000)
        return handler(request)

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any] | AIMessage:
        """Async ``wrap_model_call``."""
        request, delay_ms = _model_call(request)
        if delay_ms:
            await asyncio.sleep(delay_ms / 1000)
        return await handler(request)

    # ----- tool calls -----

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        """Answers a refused call with the kernel's refusal (the tool does not run); runs any
        other and records its result for the kernel."""
        early = _before_tool(request)
        if early is not None:
            return early
        return _after_tool(request, handler(request))

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        """Async ``wrap_tool_call``."""
        early = _before_tool(request)
        if early is not None:
            return early
        return _after_tool(request, await handler(request))


def _model_call(request: ModelRequest[Any]) -> tuple[ModelRequest[Any], int]:
    turn = request.state.get(TURN_KEY) if isinstance(request.state, Mapping) else None
    call = turn.get("call") if isinstance(turn, Mapping) else None
    if not isinstance(call, Mapping):
        return request, 0
    if call.get("tools") is False:
        request = request.override(tools=[], tool_choice=None)
    return request, int(call.get("delay_ms", 0) or 0)


def _turn_of(request: ToolCallRequest) -> Mapping[str, Any]:
    state = request.state
    turn = state.get(TURN_KEY) if isinstance(state, Mapping) else None
    return turn if isinstance(turn, Mapping) else {}


def _before_tool(request: ToolCallRequest) -> ToolMessage | None:
    """The answer to a call that must not run: the kernel's refusal, or ``not_found`` for a tool
    the agent does not have."""
    call = request.tool_call
    call_id = _call_id(call, "tool call")
    turn = _turn_of(request)
    refusal = (turn.get("refused") or {}).get(call_id)
    if refusal is not None:
        return ToolMessage(
            content=str(refusal), tool_call_id=call_id, name=call["name"], status="error"
        )
    if request.tool is None and call_id in (turn.get("awaiting") or {}):
        return ToolMessage(
            content=f"Error: there is no tool named `{call['name']}`.",
            tool_call_id=call_id,
            name=call["name"],
            status="error",
            response_metadata={"terminus_error": "not_found"},
        )
    return None


def _result(call_id: str, name: str, message: ToolMessage) -> dict[str, Any]:
    """The kernel's result for a call answered by ``message``."""
    text = _text(message.content)
    kind = (message.response_metadata or {}).get("terminus_error")
    if message.status == "error" or kind is not None:
        return {
            "call_id": call_id,
            "name": name,
            "error": kind if isinstance(kind, str) else "failed",
            "message": text,
        }
    return {"call_id": call_id, "name": name, "ok": _digest(text)}


def _after_tool(request: ToolCallRequest, result: ToolMessage | Command[Any]) -> ToolMessage | Command[Any]:
    """Records the executed call's result for the kernel (in ``RESULTS_KEY``, beside the tool's
    own update) and appends the kernel's budget warning to what the model sees."""
    call = request.tool_call
    call_id = _call_id(call, "tool call")
    turn = _turn_of(request)
    awaiting = turn.get("awaiting") or {}
    if call_id not in awaiting:
        return result  # not a call the kernel is waiting for (e.g. no machine in this graph)
    warning = (turn.get("warnings") or {}).get(call_id)
    name = str(awaiting[call_id])
    if isinstance(result, ToolMessage):
        message = _warned(result, warning)
        return Command(update={"messages": [message], RESULTS_KEY: [_result(call_id, name, message)]})
    if isinstance(result, Command) and result.graph is None and isinstance(result.update, Mapping):
        update = dict(result.update)
        messages = list(update.get("messages") or [])
        for i, m in enumerate(messages):
            if isinstance(m, ToolMessage) and m.tool_call_id == call_id:
                messages[i] = _warned(m, warning)
                update["messages"] = messages
                update[RESULTS_KEY] = [_result(call_id, name, messages[i])]
                return Command(update=update, goto=result.goto, resume=result.resume)
        # A command without the call's message: the tool succeeded with a state update.
        update[RESULTS_KEY] = [{"call_id": call_id, "name": name, "ok": _digest(repr(sorted(update)))}]
        return Command(update=update, goto=result.goto, resume=result.resume)
    raise TypeError(
        f"tool call {call_id!r}: expected a ToolMessage or a Command from the tool, got {type(result).__name__}"
    )


def _warned(message: ToolMessage, warning: str | None) -> ToolMessage:
    if not warning:
        return message
    content = message.content
    if isinstance(content, str):
        content = f"{content}\n\n{warning}" if content else warning
    else:
        content = [*content, {"type": "text", "text": warning}]
    return message.model_copy(update={"content": content})


def _refusals(command: Mapping[str, Any]) -> dict[str, str]:
    """The refused calls of a ``run_tools`` command, by call id, with the text the model gets."""
    refused: dict[str, str] = {}
    for entry in command.get("refused") or []:
        if not isinstance(entry, Mapping):
            raise ValueError(f"run_tools.refused: expected objects, got {entry!r}")
        call_id = _call_id({"id": entry.get("id", entry.get("call_id"))}, "run_tools.refused")
        text = entry.get("text") or entry.get("message")
        if not isinstance(text, str):
            name = entry.get("name", "?")
            why = entry.get("why") or entry.get("reason") or "it is excluded"
            text = f"Not run: the tool `{name}` is excluded because {why}."
        refused[call_id] = text
    return refused


def _warnings(command: Mapping[str, Any]) -> dict[str, str]:
    """The budget warnings of a ``run_tools`` command, by call id."""
    warnings: dict[str, str] = {}
    for entry in command.get("warnings") or []:
        if isinstance(entry, Mapping) and isinstance(entry.get("text"), str):
            call_id = _call_id({"id": entry.get("id", entry.get("call_id"))}, "run_tools.warnings")
            warnings[call_id] = entry["text"]
    return warnings
