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
terms. ``after_model`` feeds the reply: a stop the kernel refuses is nudged and the loop goes back
to the model, a stop it decides ends the graph without an exception (never
``GraphRecursionError``). ``wrap_model_call`` feeds the tool turn's results first (the tools of a
turn run in parallel tasks: the first point where all have finished; a stop decided on them does
not call the model), waits the kernel's backoff, and gives a provider's error to the kernel
(retried, or the run ends ``model_error``). ``wrap_tool_call`` answers a refused call with the
kernel's refusal and appends budget warnings. ``before_agent`` starts the run; ``after_agent``
makes sure the final state has the report (a run something else ended is cancelled).

The session's snapshot lives in the graph state (a private key of this middleware's state
schema), so a thread resumed from a LangGraph checkpointer, in another process after a crash,
goes on with its counters and budgets. Whether a crash can make a tool run again is LangGraph's
durability: with ``invoke(..., durability="sync")`` every step's checkpoint is written before
the next step starts, so no finished tool runs twice; with the default ``"async"`` the steps
since the last checkpoint written (their tools included) run again on resume."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
import zlib
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
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
``COMPRESS_AT`` on): private, checkpointed."""

TURN_KEY = "terminus_turn"
"""The state key of what the run awaits (private): ``Session.turn()`` (the calls to run, their
refusals and warnings, the next model call's settings, whether the run ended), which the tool
hook reads, and the id of a stand-in reply."""

ERROR_KIND = "terminus_error"
"""A ``ToolMessage.response_metadata`` key: the kernel's error class for a failed call (default
``failed`` for a ``status="error"`` message)."""

NOTICE_KEY = "terminus_notice"
"""A ``ToolMessage.response_metadata`` key: the kernel's notices appended to that result."""


class TerminusState(AgentState):
    """The state this middleware adds to the agent's graph."""

    terminus: NotRequired[dict[str, Any] | None]
    terminus_machine: NotRequired[Annotated[bytes, PrivateStateAttr]]
    terminus_turn: NotRequired[Annotated[dict[str, Any], PrivateStateAttr]]


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
size does not grow with the run (about 12 KB raw, 2 KB packed, on a chain of tool turns), but a
checkpointer stores it again at every step: compressed (about 6 times smaller, for some 50 us a
step), every checkpoint stays small; only a snapshot too small to gain from it is kept as it is."""


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


def _now() -> int:
    return int(time.time() * 1000)


def _turn(state: Any) -> Mapping[str, Any]:
    turn = state.get(TURN_KEY) if isinstance(state, Mapping) else None
    return turn if isinstance(turn, Mapping) else {}


def _batch_out(turn: Mapping[str, Any]) -> bool:
    return bool(turn.get("awaiting") or turn.get("batch"))


def _tail(messages: Sequence[AnyMessage]) -> list[dict[str, Any]]:
    """The messages from the last reply on, for the core (the results after it)."""
    start = 0
    for index in range(len(messages) - 1, -1, -1):
        if isinstance(messages[index], AIMessage):
            start = index
            break
    return [wire(m) for m in messages[start:]]


def _last_ai(messages: Sequence[AnyMessage]) -> tuple[int, AIMessage | None]:
    for index in range(len(messages) - 1, -1, -1):
        if isinstance(messages[index], AIMessage):
            return index, messages[index]  # type: ignore[return-value]
    return -1, None


def _messages(step: Mapping[str, Any], last: Sequence[AnyMessage] = ()) -> list[BaseMessage]:
    """The step's messages: the answers to calls, the notices on the turn's last tool result
    (``notice_to``, found in ``last``), the nudges."""
    out: list[BaseMessage] = [
        ToolMessage(
            content=a["content"],
            tool_call_id=a["tool_call_id"],
            name=a["name"],
            status="error",
            response_metadata={ERROR_KIND: a["error"]} if a.get("error") else {},
        )
        for a in step.get("answers", ())
    ]
    notices, target = step.get("notices"), step.get("notice_to")
    if notices and target:
        for m in reversed(last):
            if isinstance(m, ToolMessage) and target in (m.id, m.tool_call_id):
                out.append(_noticed(m, notices))
                break
    out += [
        HumanMessage(
            content=text,
            id=f"terminus-{uuid.uuid4().hex}",
            response_metadata={"terminus": "nudge"},
        )
        for text in step.get("nudges", ())
    ]
    return out


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
        # Live sessions by the snapshot in the state they belong to (and the last reply fed):
        # a hook whose state holds the snapshot the previous hook wrote takes the live session
        # instead of restoring it. One may be past its snapshot (the tool results fed before
        # the model call, the state not written yet): a process that misses it restores the
        # snapshot and feeds the same results from the state again.
        self._machines: OrderedDict[tuple[bytes, str | None], Session] = OrderedDict()
        self._lock = threading.Lock()
        # The names of the tools each model call offered, by its reply's id (a tool call
        # written in the text runs only when it names one of them).
        self._offered: OrderedDict[str, list[str]] = OrderedDict()

    def __getstate__(self) -> dict[str, Any]:
        """A copy (``copy.deepcopy``, pickling) has the policy, not the live sessions."""
        state = dict(self.__dict__)
        state["_machines"] = OrderedDict()
        state["_offered"] = OrderedDict()
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    # ----- the session in the state -----

    def _take(self, state: Mapping[str, Any]) -> Session:
        """The run's session: the live one for the state's snapshot, else restored from it."""
        snapshot = state.get(MACHINE_KEY)
        if not isinstance(snapshot, bytes):
            raise RuntimeError(
                f"TerminusMiddleware: the graph state has no machine ({MACHINE_KEY!r}); "
                "was the agent built with this middleware?"
            )
        with self._lock:
            session = self._machines.pop((snapshot, _turn(state).get("fed")), None)
        return session if session is not None else Session.restore(_unpack(snapshot))

    def _keep(self, key: tuple[bytes, str | None], session: Session) -> None:
        with self._lock:
            self._machines[key] = session
            while len(self._machines) > 256:
                self._machines.popitem(last=False)

    def _update(
        self, session: Session, messages: list[BaseMessage], **extra: Any
    ) -> dict[str, Any]:
        """The state update: the snapshot, the turn, the report once the run ended, messages."""
        snapshot = _pack(session.snapshot())
        turn = {**session.turn(), **extra}
        self._keep((snapshot, turn.get("fed")), session)
        update: dict[str, Any] = {MACHINE_KEY: snapshot, TURN_KEY: turn}
        if session.ended:
            update[REPORT_KEY] = session.report()
        if messages:
            update["messages"] = messages
        return update

    def _verified(self, session: Session, step: dict[str, Any] | None) -> dict[str, Any] | None:
        """The step, with the verifications it asks answered by the verifier."""
        return verified(session, self._verifier, step)

    # ----- run start and end -----

    def before_agent(self, state: TerminusState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Starts a run: a new session, unless the thread's state holds one still live (a
        thread resumed with new input goes on with its counters)."""
        turn = state.get(TURN_KEY)
        if isinstance(state.get(MACHINE_KEY), bytes) and isinstance(turn, Mapping):
            if not turn.get("ended"):
                return None
        first = next((m for m in state.get("messages") or [] if isinstance(m, HumanMessage)), None)
        session, _ = Session.start(self._policy, [wire(first)] if first else [], _now())
        return {**self._update(session, []), REPORT_KEY: None}

    def after_agent(self, state: TerminusState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Makes sure the final state has the report: a run still live here was ended by
        something else than the kernel (another middleware's jump, a ``return_direct`` tool),
        and is cancelled."""
        turn = _turn(state)
        if not turn or turn.get("ended"):
            return None
        session = self._take(state)
        session.finish(_tail(state.get("messages") or []), _now())
        return self._update(session, [])

    # ----- the model's reply -----

    @hook_config(can_jump_to=["model", "end"])
    def after_model(self, state: TerminusState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Feeds the model's reply; carries out the core's step (run the tools, nudge and go
        back to the model, retry, or stop)."""
        turn = _turn(state)
        messages = state.get("messages") or []
        index, message = _last_ai(messages)
        if not turn or message is None:
            return None
        if turn.get("ended"):
            # The kernel stopped before this model call: the reply is the stand-in that call
            # returned instead of calling the model.
            if message.id is not None and message.id == turn.get("stand_in"):
                return {"messages": [RemoveMessage(id=message.id)], "jump_to": "end"}
            return None
        if message.id is not None and message.id == turn.get("fed"):
            return None
        session = self._take(state)
        out: list[BaseMessage] = []
        if session.batch_out:
            # The results were not fed before the model call (this process did not make it, or
            # a middleware outside this one answered it): they still go first.
            early = self._verified(session, session.results(_tail(messages[:index]), _now()))
            out += _messages(early or {}, messages[:index])
        with self._lock:
            offered = self._offered.pop(message.id, None) if message.id else None
        step = self._verified(session, session.reply(wire(message), offered, _now())) or {}
        written = step.get("written")
        if written is not None and message.id:
            # Tool calls the model wrote in its text, which the kernel runs: the reply becomes a
            # tool turn (same id, so it replaces the reply) for the tools node to run.
            calls = [
                {"id": c["id"], "name": c["name"], "args": c["arguments"], "type": "tool_call"}
                for c in written["tool_calls"]
            ]
            message = message.model_copy(update={"content": written["text"], "tool_calls": calls})
            out.append(message)
        if step.get("drop_reply") and message.id:
            # An empty reply is an error (retried, or the run stops), never part of the
            # conversation: chat APIs refuse an empty assistant message.
            out.append(RemoveMessage(id=message.id))
        out += _messages(step)
        update = self._update(session, out)
        jump = step.get("jump")
        if jump == "tools" and not message.tool_calls:
            jump = "model"  # every call was answered here: back to the model with the answers
        if jump in ("model", "end"):
            update["jump_to"] = jump
        return update

    # ----- the model call -----

    def _before_call(
        self, request: ModelRequest[Any]
    ) -> tuple[ModelRequest[Any], int, dict[str, Any] | None, AIMessage | None]:
        """Feeds the finished tool turn's results before the model call: the request to send
        (with the kernel's notices), the backoff delay, the state update, and the stand-in reply
        when the kernel stopped (then the model is not called)."""
        state = request.state
        turn = _turn(state)
        update: dict[str, Any] | None = None
        stand_in: AIMessage | None = None
        if _batch_out(turn) and not turn.get("ended"):
            session = self._take(state)
            messages = state.get("messages") or []
            step = session.batch_out and self._verified(
                session, session.results(_tail(messages), _now())
            )
            if step and (step.get("notices") or step.get("nudges") or session.ended):
                amended = _messages(step, messages)
                noticed = {m.id: m for m in amended if isinstance(m, ToolMessage) and m.id}
                if noticed:
                    request = request.override(
                        messages=[noticed.get(m.id, m) for m in request.messages]
                    )
                extra: dict[str, Any] = {}
                if session.ended:
                    stand_in = AIMessage(content="", id=f"terminus-stop-{uuid.uuid4().hex}")
                    extra["stand_in"] = stand_in.id
                update = self._update(session, amended, **extra)
                turn = update[TURN_KEY]
            else:
                # The common case (the kernel only says: call the model): nothing to write
                # yet; the reply's hook takes the session as it is now.
                self._keep((state[MACHINE_KEY], turn.get("fed")), session)
                turn = session.turn()
        if turn.get("tools") is False:
            request = request.override(tools=[], tool_choice=None)
        return request, int(turn.get("delay_ms", 0) or 0), update, stand_in

    def _on_model_error(
        self, request: ModelRequest[Any], error: Exception, update: dict[str, Any] | None
    ) -> tuple[int, dict[str, Any], AIMessage | None]:
        """Feeds a failed model call (re-raising an error that is not a provider's): the delay
        before the retry, the state update, the stand-in when the kernel stopped."""
        kind = model_error_kind(error)
        if kind is None:
            raise error
        session = self._take({**request.state, **(update or {})})
        step = session.model_error(kind[0], kind[1], _now())
        stand_in: AIMessage | None = None
        extra: dict[str, Any] = {}
        if session.ended:
            stand_in = AIMessage(content="", id=f"terminus-stop-{uuid.uuid4().hex}")
            extra["stand_in"] = stand_in.id
        return int(step["delay_ms"]), self._update(session, _messages(step), **extra), stand_in

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
                delay_ms, update, stand_in = self._on_model_error(request, error, update)
        return self._respond(request, response if stand_in is None else None, stand_in, update)

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
                delay_ms, update, stand_in = self._on_model_error(request, error, update)
        return self._respond(request, response if stand_in is None else None, stand_in, update)

    def _respond(
        self,
        request: ModelRequest[Any],
        response: Any,
        stand_in: AIMessage | None,
        update: dict[str, Any] | None,
    ) -> Any:
        """The model call's answer: the reply (its offered tools noted by its id) or the
        stand-in, with the state update when there is one."""
        if stand_in is not None:
            response = ModelResponse(result=[stand_in])
        else:
            names = [
                n
                for t in request.tools or []
                if isinstance(
                    n := (t.get("name") or (t.get("function") or {}).get("name"))
                    if isinstance(t, Mapping)
                    else getattr(t, "name", None),
                    str,
                )
                and n
            ]
            replies = response.result if isinstance(response, ModelResponse) else [response]
            with self._lock:
                for reply in replies:
                    if isinstance(reply, AIMessage) and reply.id:
                        self._offered[reply.id] = names
                while len(self._offered) > 256:
                    self._offered.popitem(last=False)
        if update is None:
            return response
        return ExtendedModelResponse(model_response=response, command=Command(update=update))

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
    if not turn.get("awaiting") and not turn.get("refused"):
        return None, None
    if not isinstance(call.get("id"), str) or not call.get("id"):
        raise ValueError(f"tool call: a call has no id: {dict(call)!r}")
    gate = Session.gate(dict(turn), call["id"], call["name"], request.tool is not None)
    refuse = gate.get("refuse")
    if refuse is None:
        return None, (gate.get("run") or {}).get("warning")
    meta = {ERROR_KIND: refuse["error"]} if refuse.get("error") else {}
    message = ToolMessage(
        content=refuse["content"],
        tool_call_id=call["id"],
        name=call["name"],
        status="error",
        response_metadata=meta,
    )
    return message, None


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
