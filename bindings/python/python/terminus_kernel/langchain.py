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
  instead of running it (and a call of a tool the agent does not have with ``not_found``), and
  appends the kernel's budget warnings to results.
- ``wrap_model_call`` feeds the turn's tool results (the ``ToolMessage`` answering each call the
  kernel said to run, as the model will see it) as one ``tool_results`` event before the model is
  called again; the tools of a turn run in parallel tasks, so this is the first point where they
  have all finished. A stop decided on them (a repeated loop, failing tools, a spent budget or
  deadline) does not call the model: the graph ends there. The kernel's notices (a tool excluded,
  a loop seen) are appended to the turn's last tool result, so the model reads them in order.
  A provider's error from the call goes to the kernel too: retried after the kernel's backoff,
  or the run ends with ``model_error`` (``handle_model_errors=False`` lets it propagate).
- ``before_agent`` starts the run's machine; ``after_agent`` makes sure the final state always
  has the report (a graph another middleware ended while the kernel was live is cancelled).

The machine's snapshot lives in the graph state (a private key of this middleware's state
schema), so a thread resumed from a LangGraph checkpointer, in another process after a crash,
goes on with its counters and budgets. The final state has key ``"terminus"``: the report.

The kernel's counters always agree with the checkpoint a thread resumes from. Whether a crash
can make a tool run again is LangGraph's durability: with ``invoke(..., durability="sync")``
every step's checkpoint is written before the next step starts, so no finished tool runs twice;
with the default ``"async"`` the checkpoints still being written when the process dies are
lost, and the steps since the last one written (their tools included) run again on resume.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
import time
import uuid
import zlib
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, NotRequired

from langchain.agents.middleware import AgentMiddleware, AgentState, hook_config
from langchain.agents.middleware.types import (
    ExtendedModelResponse,
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
from terminus_kernel._adapters import Verifier, check_policy, verdict
from terminus_kernel._sdk_errors import sdk_error_kind

__all__ = [
    "MACHINE_KEY",
    "NOTICE_KEY",
    "REPORT_KEY",
    "TerminusMiddleware",
    "TerminusState",
    "Verifier",
    "model_error_kind",
    "model_turn_event",
    "tool_result",
]

REPORT_KEY = "terminus"
"""The state key of the kernel's report, set when the run stops."""

MACHINE_KEY = "terminus_machine"
"""The state key of the machine's snapshot (``Machine.snapshot()`` as bytes, compressed from
``COMPRESS_AT`` on): private, checkpointed."""

TURN_KEY = "terminus_turn"
"""The state key of what the run awaits (private): the calls to run and their refusals and
warnings, the next model call's settings, whether the run has ended."""

ERROR_KIND = "terminus_error"
"""A ``ToolMessage.response_metadata`` key: the kernel's error class for a failed call (default
``failed`` for a ``status="error"`` message)."""

NOTICE_KEY = "terminus_notice"
"""A ``ToolMessage.response_metadata`` key: the kernel's notices appended to that result."""

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



class TerminusState(AgentState):
    """The state this middleware adds to the agent's graph."""

    terminus: NotRequired[dict[str, Any] | None]
    terminus_machine: NotRequired[Annotated[bytes, PrivateStateAttr]]
    terminus_turn: NotRequired[Annotated[dict[str, Any], PrivateStateAttr]]


def _text(content: str | list[Any]) -> str:
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
    raise TypeError(
        f"message content: expected a string or a list of blocks, got {type(content).__name__}"
    )


def model_turn_event(message: AIMessage) -> dict[str, Any]:
    """The kernel's ``model_turn`` event for an ``AIMessage``: its text, its tool calls, its usage
    when the provider reported it (absent usage means unknown, not zero), its finish reason, and
    whether it carries reasoning output.

    Raises:
        TypeError: ``message`` is not an ``AIMessage``.
        ValueError: a tool call has no id (its result could not be matched to it).
    """
    if not isinstance(message, AIMessage):
        raise TypeError(f"model_turn_event: expected an AIMessage, got {type(message).__name__}")
    calls: list[dict[str, Any]] = []
    for index, call in enumerate(message.tool_calls):
        if not call.get("id"):
            raise ValueError(
                f"model reply {message.id!r}: tool_calls[{index}] ({call.get('name')!r}) has no id"
            )
        calls.append({"id": call["id"], "name": call["name"], "arguments": call.get("args", {})})
    for bad in _invalid_calls(message):
        # Arguments that are not valid JSON: still a tool call (rule 1), answered with an
        # ``invalid_arguments`` error by ``after_model``; the kernel sees the raw text.
        calls.append({"id": bad["id"], "name": bad["name"], "arguments": bad["args"]})
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
    if _reasoned(message):
        turn["reasoning"] = True
    return {"model_turn": turn}


def _invalid_calls(message: AIMessage) -> list[dict[str, Any]]:
    """The reply's tool calls whose arguments could not be parsed and that have an id to answer
    (``id``, ``name``, raw ``args`` text, ``error``)."""
    return [
        {
            "id": call["id"],
            "name": call.get("name") or "",
            "args": call.get("args") if isinstance(call.get("args"), str) else "",
            "error": call.get("error") or "",
        }
        for call in message.invalid_tool_calls
        if isinstance(call.get("id"), str) and call.get("id")
    ]


def _reasoned(message: AIMessage) -> bool:
    """Whether the reply carries reasoning (thinking) output: a reply with reasoning and no
    content is an empty reply to retry, not a silent turn."""
    if isinstance(message.content, list):
        for block in message.content:
            if isinstance(block, Mapping) and block.get("type") in ("reasoning", "thinking"):
                return True
    extra = message.additional_kwargs or {}
    return bool(extra.get("reasoning_content") or extra.get("reasoning"))


def tool_result(call_id: str, name: str, message: ToolMessage) -> dict[str, Any]:
    """The kernel's result for a call answered by ``message``: an error (class from
    ``response_metadata["terminus_error"]``, else ``failed``) when its status is ``"error"``,
    else ``ok`` with the output's digest (the kernel compares outputs, it never reads them, so
    the checkpoint does not carry every output twice)."""
    text = _text(message.content)
    kind = (message.response_metadata or {}).get(ERROR_KIND)
    if message.status == "error" or kind is not None:
        return {
            "call_id": call_id,
            "name": name,
            "error": kind if isinstance(kind, str) else "failed",
            "message": text,
        }
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    return {"call_id": call_id, "name": name, "ok": "sha256:" + digest}


def model_error_kind(error: BaseException) -> tuple[str, int | None] | None:
    """The kernel's class of a failed model call and the delay the provider asked for, or
    ``None`` for an exception that is not a provider's error: the adapters' one mapping,
    ``terminus_kernel._sdk_errors.sdk_error_kind``."""
    return sdk_error_kind(error)


COMPRESS_AT = 1024
"""Snapshots from this size (bytes) on are kept zlib-compressed in the state. The snapshot keeps
the machine and the last steps of the run's journal (``Machine``'s ``journal_steps``), so its
size does not grow with the run (about 14 KB on a chain of tool turns), but a checkpointer
stores it again at every step: compressed (about 6 times smaller, for some 50 us a step), every
checkpoint stays small; only a snapshot too small to gain from it is kept as it is."""


def _pack(snapshot: str) -> bytes:
    """The state's form of a snapshot: its UTF-8 text (a JSON object, so it starts with ``{``),
    or that text zlib-compressed (a zlib stream never starts with ``{``)."""
    data = snapshot.encode("utf-8")
    return zlib.compress(data, 1) if len(data) >= COMPRESS_AT else data


def _unpack(snapshot: bytes) -> str:
    """The machine's snapshot text from the state's form."""
    try:
        if snapshot[:1] == b"{":
            return snapshot.decode("utf-8")
        return zlib.decompress(snapshot).decode("utf-8")
    except (zlib.error, UnicodeDecodeError) as e:
        raise ValueError(f"{MACHINE_KEY}: not a machine snapshot ({e})") from e


def _task(messages: Sequence[AnyMessage]) -> str:
    """The run's task, for the kernel's journal and explanation: the first user message."""
    for message in messages:
        if isinstance(message, HumanMessage):
            return _text(message.content)
    return ""


def _last_ai(messages: Sequence[AnyMessage]) -> tuple[int, AIMessage | None]:
    """The last assistant message and its index (``-1, None`` when there is none)."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, AIMessage):
            return index, message
    return -1, None


def _call_id(call: Mapping[str, Any], where: str) -> str:
    call_id = call.get("id")
    if not isinstance(call_id, str) or not call_id:
        raise ValueError(f"{where}: a call has no id: {dict(call)!r}")
    return call_id


def _turn(state: Any) -> Mapping[str, Any]:
    turn = state.get(TURN_KEY) if isinstance(state, Mapping) else None
    return turn if isinstance(turn, Mapping) else {}


@dataclass
class _Outcome:
    """What the kernel's commands ask of the graph."""

    messages: list[BaseMessage] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)
    jump: str | None = None
    #: The reply's prose and the calls, when the model wrote its tool calls in its text.
    written: tuple[str, list[Any]] | None = None


class TerminusMiddleware(AgentMiddleware[TerminusState, Any]):
    """A LangChain v1 ``AgentMiddleware`` that runs the agent loop under the Terminus kernel.

    Args:
        policy: the kernel's policy (the scenario ``policy`` fields, same names and defaults);
            an unknown or ill-typed field raises ``ValueError`` naming it, here, at construction.
        verifier: judges completion claims when the policy sets ``verify_completion``; without
            one, a claim the rules accept (todos closed, ``completion_requires`` met) is complete.
        handle_model_errors: a provider's error from the model call (see
            :func:`model_error_kind`) goes to the kernel, which retries it with its backoff or
            ends the run with ``model_error``; any other exception propagates. With ``False``,
            every exception propagates (for an outer retry or fallback middleware).

    The report is in the final state under ``"terminus"``.
    """

    state_schema = TerminusState

    def __init__(
        self,
        policy: Mapping[str, Any] | None = None,
        *,
        verifier: Verifier | None = None,
        handle_model_errors: bool = True,
    ) -> None:
        super().__init__()
        if policy is not None and not isinstance(policy, Mapping):
            raise TypeError(f"policy: expected a dict or None, got {type(policy).__name__}")
        if verifier is not None and not callable(verifier):
            raise TypeError(f"verifier: expected a callable, got {type(verifier).__name__}")
        self._policy: dict[str, Any] = dict(policy or {})
        check_policy(self._policy, "TerminusMiddleware")
        self._deadline = self._policy.get("deadline_ms") is not None
        self._verifier = verifier
        self._handle_model_errors = bool(handle_model_errors)
        self.tools = []
        # Live machines by the snapshot in the state they belong to: a hook whose state holds
        # the snapshot the previous hook wrote takes the live machine instead of restoring it.
        # An entry with a turn is a machine already past its snapshot: the tool results were
        # fed before the model call, and the state keeps the snapshot of before them until the
        # reply is fed (a process that misses the entry restores the snapshot and feeds the same
        # results from the state again, to the same machine).
        # Such an entry is keyed by its snapshot and the tool turn's reply (two runs can have
        # equal snapshots, never the same reply).
        self._machines: OrderedDict[
            tuple[bytes, str | None], tuple[Machine, dict[str, Any] | None]
        ] = OrderedDict()
        self._lock = threading.Lock()
        # The names of the tools each model call offered, by its reply's id, for the reply's
        # hook (a tool call written in the text runs only when it names one of them).
        self._offered: OrderedDict[str, list[str]] = OrderedDict()

    def __getstate__(self) -> dict[str, Any]:
        """A copy (``copy.deepcopy``, pickling) has the policy, not the live machines."""
        state = dict(self.__dict__)
        state["_machines"] = OrderedDict()
        state["_offered"] = OrderedDict()
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    # ----- the machine in the state -----

    def _take(self, state: Mapping[str, Any]) -> tuple[Machine, dict[str, Any] | None]:
        """The run's machine, and the turn it has reached when it is past the state's snapshot."""
        snapshot = state.get(MACHINE_KEY)
        if not isinstance(snapshot, bytes):
            raise RuntimeError(
                f"TerminusMiddleware: the graph state has no machine ({MACHINE_KEY!r}); "
                "was the agent built with this middleware?"
            )
        reply = _turn(state).get("fed")
        with self._lock:
            entry = self._machines.pop((snapshot, reply), None) if reply else None
            if entry is None:
                entry = self._machines.pop((snapshot, None), None)
        return entry if entry is not None else (Machine.restore(_unpack(snapshot)), None)

    def _put(self, state: Mapping[str, Any], machine: Machine, turn: dict[str, Any]) -> None:
        """Keeps a machine that is past the state's snapshot, with the turn it has reached."""
        self._store((state[MACHINE_KEY], _turn(state).get("fed")), machine, turn)

    def _store(
        self, key: tuple[bytes, str | None], machine: Machine, turn: dict[str, Any] | None
    ) -> None:
        with self._lock:
            self._machines[key] = (machine, turn)
            while len(self._machines) > 256:
                self._machines.popitem(last=False)

    def _keep(self, machine: Machine) -> bytes:
        snapshot = _pack(machine.snapshot())
        self._store((snapshot, None), machine, None)
        return snapshot

    def _verdict(self, command: Mapping[str, Any]) -> dict[str, Any]:
        """The verdict on a ``verify`` command (:func:`terminus_kernel._adapters.verdict`)."""
        return verdict(self._verifier, command)

    def _carry_out(self, machine: Machine, turn: dict[str, Any]) -> _Outcome:
        """Drains the kernel's commands: a nudge becomes a user message, a notice is kept for
        the turn's last tool result, a verification is answered, ``call_model`` and
        ``run_tools`` are recorded in ``turn`` for the model and tool hooks, ``stop`` puts the
        report in ``turn``."""
        out = _Outcome()
        while (command := machine.next_command()) is not None:
            kind = command.get("command")
            if kind == "nudge":
                out.messages.append(
                    HumanMessage(
                        content=str(command["text"]),
                        id=f"terminus-{uuid.uuid4().hex}",
                        response_metadata={"terminus": "nudge"},
                    )
                )
            elif kind == "notice":
                out.notices.append(str(command["text"]))
            elif kind == "call_model":
                turn["call"] = {
                    "delay_ms": int(command.get("delay_ms", 0) or 0),
                    "tools": bool(command.get("tools", True)),
                }
                out.jump = "model"
            elif kind == "run_tools":
                calls = command.get("calls") or []
                turn["awaiting"] = {_call_id(c, "run_tools"): str(c["name"]) for c in calls}
                # A batch is out until its results are fed, even one that runs no call (every
                # call refused by a budget: the kernel then waits for an empty result list).
                turn["batch"] = True
                turn["refused"] = {
                    _call_id(r, "run_tools.refused"): str(r["text"])
                    for r in command.get("refused") or []
                }
                turn["warnings"] = {
                    _call_id(w, "run_tools.warnings"): str(w["text"])
                    for w in command.get("warnings") or []
                }
                if command.get("written") is not None:
                    # The model wrote these calls in its text: the reply gets them as calls.
                    out.written = (str(command["written"]), list(calls))
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

    def _feed(self, machine: Machine, turn: dict[str, Any], event: dict[str, Any]) -> _Outcome:
        """Feeds one event (after a clock reading when the policy has a deadline) and carries
        out the commands it brings."""
        if self._deadline:
            now = int(time.time() * 1000) - int(turn.get("started_ms", 0))
            machine.handle({"tick": max(now, 0)})
            early = self._carry_out(machine, turn)
            if turn.get("ended"):
                return early
        machine.handle(event)
        return self._carry_out(machine, turn)

    def _feed_results(
        self, machine: Machine, turn: dict[str, Any], messages: Sequence[AnyMessage]
    ) -> tuple[_Outcome, ToolMessage | None]:
        """Feeds the awaited calls' results, read from the ``ToolMessage`` answering each (a
        call with none failed: no result came back); returns what the kernel asks and the
        turn's last tool result (where its notices go)."""
        awaiting: Mapping[str, str] = turn.get("awaiting") or {}
        answered: dict[str, ToolMessage] = {}
        last: ToolMessage | None = None
        for message in reversed(messages):
            if isinstance(message, ToolMessage):
                if message.tool_call_id in awaiting and message.tool_call_id not in answered:
                    answered[message.tool_call_id] = message
                    last = last or message
            elif isinstance(message, AIMessage):
                break
        results = [
            tool_result(call_id, name, answered[call_id])
            if call_id in answered
            else {
                "call_id": call_id,
                "name": name,
                "error": "failed",
                "message": "no result came back for this call",
            }
            for call_id, name in awaiting.items()
        ]
        turn["awaiting"], turn["refused"], turn["warnings"] = {}, {}, {}
        turn.pop("batch", None)
        return self._feed(machine, turn, {"tool_results": results}), last

    def _update(
        self, machine: Machine, turn: dict[str, Any], messages: list[BaseMessage]
    ) -> dict[str, Any]:
        update: dict[str, Any] = {MACHINE_KEY: self._keep(machine)}
        report = turn.pop("report", None)
        if report is not None:
            update[REPORT_KEY] = report
        update[TURN_KEY] = turn
        if messages:
            update["messages"] = messages
        return update

    # ----- run start and end -----

    def before_agent(self, state: TerminusState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Starts a run: a new machine, unless the thread's state holds one still live (a
        thread resumed with new input goes on with its counters)."""
        turn = state.get(TURN_KEY)
        if isinstance(state.get(MACHINE_KEY), bytes) and isinstance(turn, Mapping):
            if not turn.get("ended"):
                return None
        machine = Machine(self._policy, task=_task(state.get("messages") or []))
        fresh: dict[str, Any] = {"started_ms": int(time.time() * 1000)}
        self._carry_out(machine, fresh)  # the first command: call the model
        return {**self._update(machine, fresh, []), REPORT_KEY: None}

    async def abefore_agent(
        self, state: TerminusState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        """Async ``before_agent``."""
        return self.before_agent(state, runtime)

    def after_agent(self, state: TerminusState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Makes sure the final state has the report: a run still live here was ended by
        something else than the kernel (another middleware's jump, a ``return_direct`` tool),
        and is cancelled."""
        turn = dict(_turn(state))
        if not turn or turn.get("ended"):
            return None
        machine, reached = self._take(state)
        turn = reached if reached is not None else turn
        if _batch_out(turn):
            self._feed_results(machine, turn, state.get("messages") or [])
        if not turn.get("ended"):
            self._feed(machine, turn, {"cancel": True})
        return self._update(machine, turn, [])

    async def aafter_agent(
        self, state: TerminusState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        """Async ``after_agent``."""
        return self.after_agent(state, runtime)

    # ----- the model's reply -----

    @hook_config(can_jump_to=["model", "end"])
    def after_model(self, state: TerminusState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Feeds the model's reply; carries out the kernel's answer (run the tools, nudge and go
        back to the model, retry, or stop)."""
        turn = dict(_turn(state))
        messages = state.get("messages") or []
        index, message = _last_ai(messages)
        if not turn or message is None:
            return None
        if turn.get("ended"):
            # The kernel stopped before this model call (in ``wrap_model_call``): the reply is the
            # stand-in that call returned instead of calling the model.
            if message.id is not None and message.id == turn.get("stand_in"):
                return {"messages": [RemoveMessage(id=message.id)], "jump_to": "end"}
            return None
        if message.id is not None and message.id == turn.get("fed"):
            return None
        machine, reached = self._take(state)
        turn = reached if reached is not None else turn
        update_messages: list[BaseMessage] = []
        if _batch_out(turn):
            # The results were not fed before the model call (this process did not make it, or
            # a middleware outside this one answered it): they still go first.
            early, last = self._feed_results(machine, turn, messages[:index])
            update_messages += early.messages
            if early.notices and last is not None:
                update_messages.append(_noticed(last, early.notices))
        turn["fed"] = message.id
        invalid = _invalid_calls(message)
        if not turn.get("ended"):
            event = model_turn_event(message)
            with self._lock:
                offered = self._offered.pop(message.id, None) if message.id else None
            if offered is not None:
                event["model_turn"]["tools"] = offered
            out = self._feed(machine, turn, event)
        else:
            out = _Outcome(jump="end")
        if out.written is not None and message.id:
            # Tool calls the model wrote in its text, which the kernel runs: the reply becomes a
            # tool turn (same id, so it replaces the reply) for the tools node to run.
            text, calls = out.written
            message = message.model_copy(
                update={
                    "content": text,
                    "tool_calls": [
                        {"id": c["id"], "name": c["name"], "args": c["arguments"], "type": "tool_call"}
                        for c in calls
                    ],
                }
            )
            update_messages.append(message)
        if (
            not (message.tool_calls or invalid)
            and not _text(message.content).strip()
            and message.id
        ):
            # An empty reply is an error (retried, or the run stops), never part of the
            # conversation: chat APIs refuse an empty assistant message.
            update_messages.append(RemoveMessage(id=message.id))
        if out.jump == "end" and (message.tool_calls or invalid):
            # The run stopped on a tool turn: each call gets an answer, so the history stays valid.
            reason = (turn.get("report") or {}).get("reason") or "stopped"
            update_messages += [
                ToolMessage(
                    content=f"Not run: the run stopped ({reason}).",
                    tool_call_id=_call_id(call, "model reply"),
                    name=call["name"],
                    status="error",
                )
                for call in [*message.tool_calls, *invalid]
            ]
        if invalid and out.jump is None:
            # The tools node runs only the parsed calls: the kernel's other calls are answered
            # here (an error the model can fix, or the kernel's refusal), and with none parsed
            # the loop goes back to the model.
            awaiting = turn.get("awaiting") or {}
            refused = turn.get("refused") or {}
            for call in invalid:
                if call["id"] in refused:
                    content, meta = str(refused[call["id"]]), {}
                elif call["id"] in awaiting:
                    detail = f" ({call['error']})" if call["error"] else ""
                    content = (
                        f"Error: the arguments of `{call['name']}` are not valid JSON{detail}. "
                        "Call it again with a JSON object."
                    )
                    meta = {ERROR_KIND: "invalid_arguments"}
                else:
                    continue
                update_messages.append(
                    ToolMessage(
                        content=content,
                        tool_call_id=call["id"],
                        name=call["name"],
                        status="error",
                        response_metadata=meta,
                    )
                )
            if not message.tool_calls:
                out.jump = "model"
        update_messages += out.messages
        update = self._update(machine, turn, update_messages)
        if out.jump is not None:
            update["jump_to"] = out.jump
        return update

    async def aafter_model(
        self, state: TerminusState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        """Async ``after_model``."""
        return self.after_model(state, runtime)

    # ----- the model call -----

    def _before_call(
        self, request: ModelRequest[Any]
    ) -> tuple[ModelRequest[Any], int, dict[str, Any] | None, AIMessage | None]:
        """Feeds the finished tool turn's results before the model call: the request to send
        (with the kernel's notices), the backoff delay, the state update, and the stand-in reply
        when the kernel stopped (then the model is not called)."""
        state = request.state
        turn = dict(_turn(state))
        update: dict[str, Any] | None = None
        stand_in: AIMessage | None = None
        if _batch_out(turn) and not turn.get("ended"):
            machine, reached = self._take(state)
            if reached is not None:  # this call was tried before: the results are in
                self._put(state, machine, reached)
                turn = reached
            else:
                out, last = self._feed_results(machine, turn, state.get("messages") or [])
                if out.notices or out.messages or turn.get("ended"):
                    amended: list[BaseMessage] = list(out.messages)
                    if out.notices and last is not None:
                        copy = _noticed(last, out.notices)
                        amended.append(copy)
                        request = request.override(
                            messages=[copy if m.id == last.id else m for m in request.messages]
                        )
                    if turn.get("ended"):
                        stand_in = AIMessage(content="", id=f"terminus-stop-{uuid.uuid4().hex}")
                        turn["stand_in"] = stand_in.id
                    update = self._update(machine, turn, amended)
                else:
                    # The common case (the kernel only says: call the model): nothing to write
                    # yet; the reply's hook takes the machine as it is now.
                    self._put(state, machine, dict(turn))
        call = turn.get("call")
        if not isinstance(call, Mapping):
            return request, 0, update, stand_in
        if call.get("tools") is False:
            request = request.override(tools=[], tool_choice=None)
        return request, int(call.get("delay_ms", 0) or 0), update, stand_in

    def _on_model_error(
        self, request: ModelRequest[Any], error: Exception, update: dict[str, Any] | None
    ) -> tuple[int | None, dict[str, Any], AIMessage | None]:
        """Feeds a failed model call (re-raising an error that is not a provider's): the delay
        before the retry (``None`` when the kernel stopped), the state update, the stand-in."""
        kind = model_error_kind(error)
        if kind is None:
            raise error
        view = {**request.state, **(update or {})}
        machine, reached = self._take(view)
        turn = reached if reached is not None else dict(_turn(view))
        event: dict[str, Any] = {"kind": kind[0]}
        if kind[1] is not None:
            event["retry_after_ms"] = kind[1]
        out = self._feed(machine, turn, {"model_error": event})
        stand_in: AIMessage | None = None
        if turn.get("ended"):
            stand_in = AIMessage(content="", id=f"terminus-stop-{uuid.uuid4().hex}")
            turn["stand_in"] = stand_in.id
        delay = None if stand_in is not None else int((turn.get("call") or {}).get("delay_ms", 0))
        return delay, self._update(machine, turn, out.messages), stand_in

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]:
        """Feeds the tool results first (a stop there answers with a stand-in, not the model),
        waits the kernel's backoff before a retried call, offers no tools to the final-answer
        call of a spent budget, and (``handle_model_errors``) retries a provider error as the
        kernel says, or stops the run with ``model_error``."""
        request, delay_ms, update, stand_in = self._before_call(request)
        while stand_in is None:
            if delay_ms:
                time.sleep(delay_ms / 1000)
            try:
                response = handler(request)
                break
            except Exception as error:  # noqa: BLE001 (re-raised unless a provider's error)
                if not self._handle_model_errors:
                    raise
                retry, update, stand_in = self._on_model_error(request, error, update)
                delay_ms = retry or 0
        if stand_in is not None:
            response = ModelResponse(result=[stand_in])
        else:
            self._note_offered(request, response)
        if update is None:
            return response
        return ExtendedModelResponse(model_response=response, command=Command(update=update))

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]:
        """Async ``wrap_model_call``."""
        request, delay_ms, update, stand_in = self._before_call(request)
        while stand_in is None:
            if delay_ms:
                await asyncio.sleep(delay_ms / 1000)
            try:
                response = await handler(request)
                break
            except Exception as error:  # noqa: BLE001 (re-raised unless a provider's error)
                if not self._handle_model_errors:
                    raise
                retry, update, stand_in = self._on_model_error(request, error, update)
                delay_ms = retry or 0
        if stand_in is not None:
            response = ModelResponse(result=[stand_in])
        else:
            self._note_offered(request, response)
        if update is None:
            return response
        return ExtendedModelResponse(model_response=response, command=Command(update=update))

    def _note_offered(self, request: ModelRequest[Any], response: Any) -> None:
        """Keeps the names of the tools the call offered, by the reply's id."""
        names = _tool_names(request.tools)
        replies = response.result if isinstance(response, ModelResponse) else [response]
        with self._lock:
            for reply in replies:
                if isinstance(reply, AIMessage) and reply.id:
                    self._offered[reply.id] = names
            while len(self._offered) > 256:
                self._offered.popitem(last=False)

    # ----- tool calls -----

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        """Answers a refused call with the kernel's refusal (the tool does not run); runs any
        other, with the kernel's budget warning appended to its result."""
        early, warning = _before_tool(request)
        if early is not None:
            return early
        result = handler(request)
        return result if warning is None else _warned(request, result, warning)

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        """Async ``wrap_tool_call``."""
        early, warning = _before_tool(request)
        if early is not None:
            return early
        result = await handler(request)
        return result if warning is None else _warned(request, result, warning)


def _batch_out(turn: Mapping[str, Any]) -> bool:
    """Whether a tool batch of the kernel's waits for its results to be fed."""
    return bool(turn.get("awaiting") or turn.get("batch"))


def _tool_names(tools: Sequence[Any] | None) -> list[str]:
    """The names of a model request's tools (tool objects, or provider-format dicts)."""
    names: list[str] = []
    for tool in tools or []:
        if isinstance(tool, Mapping):
            name = tool.get("name") or (tool.get("function") or {}).get("name")
        else:
            name = getattr(tool, "name", None)
        if isinstance(name, str) and name:
            names.append(name)
    return names


def _noticed(message: ToolMessage, notices: list[str]) -> ToolMessage:
    """``message`` (the same id, so it is replaced in place) with the kernel's notices appended."""
    notice = "\n\n".join(notices)
    text = _text(message.content)
    return message.model_copy(
        update={
            "content": f"{text}\n\n{notice}" if text else notice,
            "response_metadata": {**message.response_metadata, NOTICE_KEY: notice},
        }
    )


def _before_tool(request: ToolCallRequest) -> tuple[ToolMessage | None, str | None]:
    """The answer to a call that must not run (the kernel's refusal, or ``not_found`` for a
    tool the agent does not have), or the budget warning for its result."""
    call = request.tool_call
    turn = _turn(request.state)
    awaiting = turn.get("awaiting")
    if not awaiting and not turn.get("refused"):
        return None, None
    call_id = _call_id(call, "tool call")
    refusal = (turn.get("refused") or {}).get(call_id)
    if refusal is not None:
        message = ToolMessage(
            content=str(refusal), tool_call_id=call_id, name=call["name"], status="error"
        )
        return message, None
    if request.tool is None and call_id in (awaiting or {}):
        message = ToolMessage(
            content=f"Error: there is no tool named `{call['name']}`.",
            tool_call_id=call_id,
            name=call["name"],
            status="error",
            response_metadata={ERROR_KIND: "not_found"},
        )
        return message, None
    return None, (turn.get("warnings") or {}).get(call_id)


def _warned(
    request: ToolCallRequest, result: ToolMessage | Command[Any], warning: str
) -> ToolMessage | Command[Any]:
    """``result`` with the kernel's budget warning appended to the call's message."""
    call_id = request.tool_call["id"]

    def amend(message: ToolMessage) -> ToolMessage:
        content = message.content
        if isinstance(content, str):
            content = f"{content}\n\n{warning}" if content else warning
        else:
            content = [*content, {"type": "text", "text": warning}]
        return message.model_copy(update={"content": content})

    if isinstance(result, ToolMessage):
        return amend(result)
    if isinstance(result, Command) and isinstance(result.update, Mapping):
        messages = list(result.update.get("messages") or [])
        for i, m in enumerate(messages):
            if isinstance(m, ToolMessage) and m.tool_call_id == call_id:
                messages[i] = amend(m)
                update = {**result.update, "messages": messages}
                return Command(
                    graph=result.graph, update=update, goto=result.goto, resume=result.resume
                )
    return result
