"""Terminus as a LangChain v1 agent middleware.

``TerminusMiddleware`` puts the kernel under an agent built with
``langchain.agents.create_agent`` or ``deepagents.create_deep_agent``::

    from deepagents import create_deep_agent
    from terminus_kernel.langchain import TerminusMiddleware

    agent = create_deep_agent(
        model=model,
        middleware=[TerminusMiddleware({"completion_requires": ["write_file"]})],
    )
    state = agent.invoke({"messages": [{"role": "user", "content": "Write the plan"}]})
    state["terminus"]  # the kernel's report: outcome, reason, steps, model_calls, nudges, ...

What each hook decides is the host core's (``terminus_kernel._native.Session``, the same for
every framework adapter, ``docs/embedding.md``); this module carries its steps out in LangGraph's
terms, in three hooks that add no graph node per step:

- ``wrap_model_call`` is the kernel's model step. It feeds the tool turn's results first (the
  tools of a turn run in parallel tasks: the first point where all have finished), then calls the
  model, feeds the reply and carries out the step within the same call: a stop the kernel refuses
  is nudged and the model called again, an empty reply is dropped and the call retried after the
  kernel's backoff, a provider's error retried or the run ended ``model_error``, calls written in
  the text become calls. The reply, the nudges and the answers to calls not run go into the
  conversation in order, with the session's snapshot. A stop ends the graph by LangGraph's own
  routing (every call answered, a last reply without calls), never ``GraphRecursionError``.
- ``wrap_tool_call`` answers a refused call with the kernel's refusal and appends budget warnings.
- ``before_agent`` starts the run; ``after_agent`` makes sure the final state has the report (a
  run something else ended is cancelled).

The middleware sees the replies of the model calls it wraps: put it outside (before, in the
``middleware`` list) any middleware that answers a model call without calling the model.

The session's snapshot lives in the graph state (a private key of this middleware's state
schema), so a thread resumed from a LangGraph checkpointer, in another process after a crash,
goes on with its counters and budgets. It is written once per model step, and is the same size
whatever the run's length. Whether a crash can make a tool run again is LangGraph's durability:
with ``invoke(..., durability="sync")`` every step's checkpoint is written before the next step
starts, so no finished tool runs twice; with the default ``"async"`` the steps since the last
checkpoint written (their tools included) run again on resume."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
import zlib
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from typing import Annotated, Any, NotRequired

from langchain.agents.middleware import AgentMiddleware, AgentState
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

from terminus_kernel._adapters import Verifier, check_policy, scaled, verified
from terminus_kernel._native import Session
from terminus_kernel._sdk_errors import sdk_error_kind

__all__ = [
    "MACHINE_KEY",
    "NOTICE_KEY",
    "REPORT_KEY",
    "TerminusMiddleware",
    "TerminusState",
    "Verifier",
    "model_error_kind",
    "wire",
]

REPORT_KEY = "terminus"
"""The state key of the kernel's report, set when the run stops."""

MACHINE_KEY = "terminus_machine"
"""The state key of the run's host core (``Session.snapshot()`` as bytes, compressed from
``COMPRESS_AT`` on): private, checkpointed. It holds what the run awaits too (``Session.turn()``:
the calls to run, their refusals and warnings), which the tool hook reads."""

ERROR_KIND = "terminus_error"
"""A ``ToolMessage.response_metadata`` key: the kernel's error class for a failed call (default
``failed`` for a ``status="error"`` message)."""

NOTICE_KEY = "terminus_notice"
"""A ``ToolMessage.response_metadata`` key: the kernel's notices appended to that result."""

STAND_IN = "terminus-stop-"
"""The id prefix of the empty reply a model call that the kernel stopped gives instead of
calling the model: the graph ends on it, and ``after_agent`` removes it."""


def _last(value: bytes, writes: Sequence[bytes]) -> bytes:
    """The snapshot channel's reducer: the last snapshot written."""
    return writes[-1] if writes else value


try:
    # A checkpoint holds the snapshot only as the write of the step that changed it (a
    # `DeltaChannel`, as DeepAgents keeps its messages and files), not again in every checkpoint
    # as a plain key is: a checkpointer stores what the middleware adds about once per model
    # step (`docs/performance.md`).
    from langgraph.channels.delta import DeltaChannel

    _SnapshotChannel: Any = DeltaChannel(_last, bytes)
except ImportError:  # a LangGraph without it: a plain key, written whole into every checkpoint
    _SnapshotChannel = None


class TerminusState(AgentState):
    """The state this middleware adds to the agent's graph."""

    terminus: NotRequired[dict[str, Any] | None]
    terminus_machine: NotRequired[Annotated[bytes, _SnapshotChannel, PrivateStateAttr]]


def wire(message: BaseMessage) -> dict[str, Any]:
    """A LangChain message in the shape the host core reads (its ``model_dump()`` fields the
    core uses; ``terminus_runtime::host::messages``)."""
    kind = message.type
    out: dict[str, Any] = {"type": kind, "id": message.id, "content": message.content}
    if isinstance(message, AIMessage):
        out["tool_calls"] = [
            {"id": c.get("id"), "name": c["name"], "args": c.get("args", {})}
            for c in message.tool_calls
        ]
        out["invalid_tool_calls"] = [
            {k: c.get(k) for k in ("id", "name", "args", "error")}
            for c in message.invalid_tool_calls
        ]
        if message.usage_metadata is not None:
            usage = message.usage_metadata
            out["usage_metadata"] = {
                "input_tokens": int(usage.get("input_tokens", 0)),
                "output_tokens": int(usage.get("output_tokens", 0)),
            }
        meta = message.response_metadata or {}
        out["response_metadata"] = {
            k: meta[k] for k in ("finish_reason", "stop_reason") if isinstance(meta.get(k), str)
        }
        extra = message.additional_kwargs or {}
        out["additional_kwargs"] = {
            "reasoning": bool(extra.get("reasoning_content") or extra.get("reasoning"))
        }
    elif isinstance(message, ToolMessage):
        out["tool_call_id"] = message.tool_call_id
        out["status"] = message.status
        kind_ = (message.response_metadata or {}).get(ERROR_KIND)
        out["response_metadata"] = {ERROR_KIND: kind_} if isinstance(kind_, str) else {}
    return out


def model_error_kind(error: BaseException) -> tuple[str, int | None] | None:
    """The kernel's class of a failed model call and the delay the provider asked for, or
    ``None`` for an exception that is not a provider's error: the adapters' one mapping,
    ``terminus_kernel._sdk_errors.sdk_error_kind``."""
    return sdk_error_kind(error)


COMPRESS_AT = 1024
"""Snapshots from this size (bytes) on are kept zlib-compressed in the state. The snapshot keeps
the machine and the last steps of the run's journal (``Machine``'s ``journal_steps``), so its
size does not grow with the run, but a checkpointer stores it again at every step: compressed
(about 6 times smaller, for some 50 us a step), every checkpoint stays small; only a snapshot too
small to gain from it is kept as it is."""


def _pack(snapshot: str) -> bytes:
    """The state's form of a snapshot: its UTF-8 text (a JSON object, so it starts with ``{``),
    or that text zlib-compressed (a zlib stream never starts with ``{``)."""
    data = snapshot.encode("utf-8")
    return zlib.compress(data, 1) if len(data) >= COMPRESS_AT else data


def _unpack(snapshot: bytes) -> str:
    """The session's snapshot text from the state's form."""
    try:
        if snapshot[:1] == b"{":
            return snapshot.decode("utf-8")
        return zlib.decompress(snapshot).decode("utf-8")
    except (zlib.error, UnicodeDecodeError) as e:
        raise ValueError(f"{MACHINE_KEY}: not a machine snapshot ({e})") from e


def _text(content: str | list[Any]) -> str:
    """The visible text of a message's content (a string, or content blocks)."""
    if isinstance(content, str):
        return content
    return "".join(
        b if isinstance(b, str) else str(b.get("text", ""))
        for b in content
        if isinstance(b, str) or (isinstance(b, Mapping) and b.get("type") == "text")
    )


def _has_machine(state: Mapping[str, Any]) -> bool:
    """Whether the state holds a snapshot (the channel's empty value is none)."""
    snapshot = state.get(MACHINE_KEY)
    return isinstance(snapshot, bytes) and bool(snapshot)


def _now() -> int:
    return int(time.time() * 1000)


def _tail(messages: Sequence[AnyMessage]) -> list[dict[str, Any]]:
    """The messages from the last reply on, for the core (the results after it)."""
    return [wire(m) for m in messages[_last_reply(messages) or 0 :]]


def _answer(a: Mapping[str, Any]) -> ToolMessage:
    """A call the kernel answered instead of running it."""
    meta = {ERROR_KIND: a["error"]} if a.get("error") else {}
    return ToolMessage(
        content=a["content"],
        tool_call_id=a["tool_call_id"],
        name=a["name"],
        status="error",
        response_metadata=meta,
    )


def _nudge(text: str) -> HumanMessage:
    return HumanMessage(
        content=text, id=f"terminus-{uuid.uuid4().hex}", response_metadata={"terminus": "nudge"}
    )


def _last_reply(messages: Sequence[BaseMessage]) -> int | None:
    """The index of the last AI message."""
    for index in range(len(messages) - 1, -1, -1):
        if isinstance(messages[index], AIMessage):
            return index
    return None


def _last_result(messages: Sequence[BaseMessage], target: str) -> int | None:
    """The index of the last tool message of id (else call id) ``target``."""
    for index in range(len(messages) - 1, -1, -1):
        m = messages[index]
        if isinstance(m, ToolMessage) and target in (m.id, m.tool_call_id):
            return index
    return None


def _claim(response: ModelResponse[Any], index: int) -> dict[str, Any]:
    """The reply at ``index`` as the core reads it. A structured answer (``response_format``'s
    output tool, called and answered within the model call: the response's structured answer) is
    the model's completion claim: its arguments' JSON is the reply's text, not a tool call."""
    message: AIMessage = response.result[index]  # type: ignore[assignment]
    out = wire(message)
    if response.structured_response is None:
        return out
    answered = {m.tool_call_id for m in response.result if isinstance(m, ToolMessage)}
    claims = [json.dumps(c["args"]) for c in message.tool_calls if c.get("id") in answered]
    out["tool_calls"] = [c for c in out["tool_calls"] if c["id"] not in answered]
    out["content"] = "\n".join([t for t in [_text(message.content)] if t] + claims)
    return out


def _offered(request: ModelRequest[Any]) -> list[str]:
    """The names of the tools a model call offers (a call written in the text runs only when
    it names one of them)."""
    names = (
        (t.get("name") or (t.get("function") or {}).get("name"))
        if isinstance(t, Mapping)
        else getattr(t, "name", None)
        for t in request.tools or []
    )
    return [n for n in names if isinstance(n, str) and n]


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
        scale: the task's size in units (the files in scope, say): the policy's ``budget_scale``
            scales its budgets for it, as ``terminus run --scale`` does.

    What each hook decides is the host core's (``terminus_kernel._native.Session``, the same
    for every framework adapter); this class carries its steps out in LangGraph's terms. The
    report is in the final state under ``"terminus"``.
    """

    state_schema = TerminusState

    def __init__(
        self,
        policy: Mapping[str, Any] | None = None,
        *,
        verifier: Verifier | None = None,
        handle_model_errors: bool = True,
        scale: int | None = None,
    ) -> None:
        super().__init__()
        if policy is not None and not isinstance(policy, Mapping):
            raise TypeError(f"policy: expected a dict or None, got {type(policy).__name__}")
        if verifier is not None and not callable(verifier):
            raise TypeError(f"verifier: expected a callable, got {type(verifier).__name__}")
        self._policy: dict[str, Any] = dict(policy or {})
        check_policy(self._policy, "TerminusMiddleware")
        self._policy = scaled(self._policy, scale)
        Session.start(self._policy, [])  # an unknown or ill-typed field raises here
        self._verifier = verifier
        self._handle_model_errors = bool(handle_model_errors)
        self.tools = []
        # Live sessions by the snapshot in the state they belong to: a model call whose state
        # holds the snapshot the previous one wrote takes the live session instead of restoring
        # it; and what each snapshot's run awaits, for the tool hook.
        self._machines: OrderedDict[bytes, Session] = OrderedDict()
        self._turns: OrderedDict[bytes, dict[str, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        """A copy (``copy.deepcopy``, pickling) has the policy, not the live sessions."""
        state = dict(self.__dict__)
        state["_machines"], state["_turns"] = OrderedDict(), OrderedDict()
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    # ----- the session in the state -----

    def _snapshot(self, state: Mapping[str, Any]) -> bytes:
        snapshot = state.get(MACHINE_KEY)
        if not (isinstance(snapshot, bytes) and snapshot):
            raise RuntimeError(
                f"TerminusMiddleware: the graph state has no machine ({MACHINE_KEY!r}); "
                "was the agent built with this middleware?"
            )
        return snapshot

    def _take(self, state: Mapping[str, Any]) -> Session:
        """The run's session: the live one for the state's snapshot, else restored from it."""
        snapshot = self._snapshot(state)
        with self._lock:
            session = self._machines.pop(snapshot, None)
        return session if session is not None else Session.restore(_unpack(snapshot))

    def _turn(self, state: Mapping[str, Any]) -> dict[str, Any]:
        """What the run of the state's snapshot awaits (``Session.turn()``)."""
        snapshot = self._snapshot(state)
        with self._lock:
            turn = self._turns.get(snapshot)
        if turn is None:
            turn = Session.restore(_unpack(snapshot)).turn()
            self._remember(snapshot, turn, None)
        return turn

    def _remember(self, snapshot: bytes, turn: dict[str, Any], session: Session | None) -> None:
        with self._lock:
            self._turns[snapshot] = turn
            if session is not None:
                self._machines[snapshot] = session
            for cache in (self._machines, self._turns):
                while len(cache) > 256:
                    cache.popitem(last=False)

    def _update(self, session: Session) -> dict[str, Any]:
        """The state update: the snapshot, and the report once the run ended."""
        snapshot = _pack(session.snapshot())
        self._remember(snapshot, session.turn(), session)
        update: dict[str, Any] = {MACHINE_KEY: snapshot}
        if session.ended:
            update[REPORT_KEY] = session.report()
        return update

    # ----- run start and end -----

    def before_agent(self, state: TerminusState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Starts a run: a new session, unless the thread's state holds one still live (a
        thread resumed with new input goes on with its counters)."""
        if _has_machine(state) and not self._turn(state).get("ended"):
            return None
        first = next((m for m in state.get("messages") or [] if isinstance(m, HumanMessage)), None)
        session, _ = Session.start(self._policy, [wire(first)] if first else [], _now())
        return {**self._update(session), REPORT_KEY: None}

    def after_agent(self, state: TerminusState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Removes the stand-in reply a stop left, and makes sure the final state has the
        report: a run still live here was ended by something else than the kernel (another
        middleware's jump, a ``return_direct`` tool), and is cancelled."""
        messages = state.get("messages") or []
        stand_ins = [
            m.id for m in messages if isinstance(m, AIMessage) and (m.id or "").startswith(STAND_IN)
        ]
        update: dict[str, Any] = {}
        if _has_machine(state) and not self._turn(state).get("ended"):
            session = self._take(state)
            kept = [m for m in messages if m.id not in stand_ins]
            session.finish(_tail(kept), _now())
            update = self._update(session)
        if stand_ins:
            update["messages"] = [RemoveMessage(id=i) for i in stand_ins if i is not None]
        return update or None

    # ----- the model step -----

    def _model_step(
        self, request: ModelRequest[Any]
    ) -> Generator[tuple[ModelRequest[Any], int], ModelResponse[Any] | AIMessage, Any]:
        """The kernel's model step, as a generator the sync and async hooks drive: it yields
        each model call to make (the request and the backoff before it), is sent the call's
        response (or thrown its error), and returns the hook's answer."""
        state = request.state
        session = self._take(state)
        history = list(state.get("messages") or [])
        sent = list(request.messages)  # what the model is sent of it (other middlewares' view)
        added: list[BaseMessage] = []  # the step's messages, in the conversation's order
        replaced: list[BaseMessage] = []  # messages of the state amended in place (same id)
        response: ModelResponse[Any] | None = None

        def carry(step: Mapping[str, Any]) -> None:
            added.extend(_answer(a) for a in step.get("answers", ()))
            notices, target = step.get("notices"), step.get("notice_to")
            for seq in (added, history) if notices and target else ():
                hit = _last_result(seq, target)
                if hit is not None:
                    old = seq[hit]
                    seq[hit] = _noticed(old, notices)  # type: ignore[arg-type]
                    if seq is history:  # the state's message, amended in place
                        replaced.append(seq[hit])
                        sent[:] = [
                            seq[hit] if m is old or (old.id is not None and m.id == old.id) else m
                            for m in sent
                        ]
                    break
            added.extend(_nudge(text) for text in step.get("nudges", ()))

        while True:
            if not session.ended and session.batch_out:
                # The tool turn's results (or the answers to a reply's calls) go first.
                results = session.results(_tail([*history, *added]), _now())
                carry(verified(session, self._verifier, results) or {})
            if session.ended:
                break
            turn = session.turn()
            delay, tools = int(turn.get("delay_ms", 0) or 0), turn.get("tools") is not False
            asked = request.override(messages=[*sent, *added])
            if not tools:
                asked = asked.override(tools=[], tool_choice=None)
            try:
                reply = yield asked, delay
            except Exception as error:  # noqa: BLE001 (re-raised unless a provider's error)
                kind = model_error_kind(error) if self._handle_model_errors else None
                if kind is None:
                    raise
                step = session.model_error(kind[0], kind[1], _now())
            else:
                response = (
                    reply if isinstance(reply, ModelResponse) else ModelResponse(result=[reply])
                )
                index = _last_reply(response.result)
                if index is None:  # not a reply the kernel reads: passed on as it is
                    added.extend(response.result)
                    break
                message: AIMessage = response.result[index]  # type: ignore[assignment]
                fed = session.reply(_claim(response, index), _offered(asked), _now())
                step = verified(session, self._verifier, fed) or {"jump": "tools"}
                written = step.get("written")
                if written is not None:
                    # Tool calls the model wrote in its text, which the kernel runs.
                    calls = [
                        dict(id=c["id"], name=c["name"], args=c["arguments"], type="tool_call")
                        for c in written["tool_calls"]
                    ]
                    message = message.model_copy(
                        update={"content": written["text"], "tool_calls": calls}
                    )
                # The response's messages in their order (a structured answer's tool message after
                # its reply), the reply as the kernel took it. An empty reply is an error
                # (retried, or the run stops), never part of the conversation: chat APIs refuse
                # an empty assistant message.
                dropped = bool(step.get("drop_reply"))
                added.extend(
                    message if i == index else m
                    for i, m in enumerate(response.result)
                    if not (dropped and i == index)
                )
            carry(step)
            if step.get("jump") != "model":
                break
        every = [*history, *added]
        last = _last_reply(every)
        open_calls = last is None or bool(every[last].tool_calls)  # type: ignore[union-attr]
        if session.ended and (not added or open_calls):
            # The graph ends on a reply without calls (and a model call answers with one): a
            # stand-in, removed by `after_agent`.
            added.append(AIMessage(content="", id=f"{STAND_IN}{uuid.uuid4().hex}"))
        update = self._update(session)
        if replaced:
            update["messages"] = replaced
        structured = response.structured_response if response is not None else None
        return ExtendedModelResponse(
            model_response=ModelResponse(result=added, structured_response=structured),
            command=Command(update=update),
        )

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]:
        """The kernel's model step (the module's docs): the tool results fed, the model called
        (again after a nudge, an empty reply, a provider's error), the reply fed."""
        step = self._model_step(request)
        try:
            asked, delay_ms = next(step)
            while True:
                if delay_ms:
                    time.sleep(delay_ms / 1000)
                try:
                    response = handler(asked)
                except Exception as error:  # noqa: BLE001 (given to the step)
                    asked, delay_ms = step.throw(error)
                else:
                    asked, delay_ms = step.send(response)
        except StopIteration as done:
            return done.value

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]:
        """Async ``wrap_model_call``."""
        step = self._model_step(request)
        try:
            asked, delay_ms = next(step)
            while True:
                if delay_ms:
                    await asyncio.sleep(delay_ms / 1000)
                try:
                    response = await handler(asked)
                except Exception as error:  # noqa: BLE001 (given to the step)
                    asked, delay_ms = step.throw(error)
                else:
                    asked, delay_ms = step.send(response)
        except StopIteration as done:
            return done.value

    # ----- tool calls -----

    def _before_tool(self, request: ToolCallRequest) -> tuple[ToolMessage | None, str | None]:
        """The answer to a call that must not run (the kernel's refusal, or ``not_found`` for a
        tool the agent does not have), or the budget warning for its result."""
        call = request.tool_call
        turn = self._turn(request.state)
        if not turn.get("awaiting") and not turn.get("refused"):
            return None, None
        if not isinstance(call.get("id"), str) or not call.get("id"):
            raise ValueError(f"tool call: a call has no id: {dict(call)!r}")
        gate = Session.gate(turn, call["id"], call["name"], request.tool is not None)
        refuse = gate.get("refuse")
        if refuse is None:
            return None, (gate.get("run") or {}).get("warning")
        return _answer({**refuse, "tool_call_id": call["id"], "name": call["name"]}), None

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        """Answers a refused call with the kernel's refusal (the tool does not run); runs any
        other, with the kernel's budget warning appended to its result."""
        early, warning = self._before_tool(request)
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
        early, warning = self._before_tool(request)
        if early is not None:
            return early
        result = await handler(request)
        return result if warning is None else _warned(request, result, warning)


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
