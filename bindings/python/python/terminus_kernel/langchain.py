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
every framework adapter, which reads LangChain's messages as they are); this module carries its
steps out in LangGraph's terms, in hooks that add no graph node per step: ``before_agent``
starts the run; ``wrap_model_call`` is the kernel's model step (the tool turn's results fed, the
model called, the reply fed and its step carried out: a refused stop nudged and the model called
again, an empty reply dropped and retried, a provider's error retried or the run ended, calls
written in the text made calls, a checkpoint written for the agent with
``policy.auto_checkpoints``: the model asked for a summary without tools, as ``terminus agent``
asks it); ``wrap_tool_call`` answers a refused call with the kernel's
refusal and appends budget warnings; ``after_agent`` makes sure the final state has the report.
A stop ends the graph by LangGraph's own routing, never ``GraphRecursionError``. The session's
snapshot lives in the graph state (a private key), so a thread resumed from a checkpointer goes
on with its counters. In full, with what LangGraph's durability modes mean for tools in flight
at a crash: the project's ``docs/embedding.md``, ``TerminusMiddleware``."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from typing import Annotated, Any, NotRequired, TypeVar

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

from terminus_kernel._adapters import Verifier, checked, verified
from terminus_kernel._native import Session, SessionCache, checkpoint_message, with_notices
from terminus_kernel._sdk_errors import sdk_error_kind

__all__ = [
    "MACHINE_KEY",
    "NOTICE_KEY",
    "REPORT_KEY",
    "TerminusMiddleware",
    "TerminusState",
    "Verifier",
    "model_error_kind",
]

REPORT_KEY = "terminus"
"""The state key of the kernel's report, set when the run stops."""

MACHINE_KEY = "terminus_machine"
"""The state key of the run's host core (``Session.pack()``): private, checkpointed. It holds
what the run awaits too (``Session.turn()``: the calls to run, their refusals and warnings)."""

ERROR_KIND = "terminus_error"
"""A ``ToolMessage.response_metadata`` key: the kernel's error class for a failed call (default
``failed`` for a ``status="error"`` message)."""

NOTICE_KEY = "terminus_notice"
"""A ``ToolMessage.response_metadata`` key: the kernel's notices appended to that result."""

STAND_IN = "terminus-stop-"
"""The id prefix of the empty reply a model step the kernel stopped without a reply of the
model's gives: the graph ends on it, and ``after_agent`` removes it."""


_Message = TypeVar("_Message", bound=BaseMessage)


def _last(value: bytes, writes: Sequence[bytes]) -> bytes:
    """The snapshot channel's reducer: the last snapshot written."""
    return writes[-1] if writes else value


try:
    # A checkpoint holds the snapshot only as the write of the step that changed it (a
    # `DeltaChannel`, as DeepAgents keeps its messages and files), not again in every checkpoint
    # as a plain key is (`docs/performance.md`).
    from langgraph.channels.delta import DeltaChannel

    _SnapshotChannel: Any = DeltaChannel(_last, bytes)
except ImportError:  # a LangGraph without it: a plain key, written whole into every checkpoint
    _SnapshotChannel = None


class TerminusState(AgentState):
    """The state this middleware adds to the agent's graph."""

    terminus: NotRequired[dict[str, Any] | None]
    terminus_machine: NotRequired[Annotated[bytes, _SnapshotChannel, PrivateStateAttr]]


model_error_kind = sdk_error_kind
"""The kernel's class of a failed model call and the delay the provider asked for, or ``None``
for an exception that is not a provider's error (the adapters' one mapping)."""


def _now() -> int:
    return int(time.time() * 1000)


def _tail(messages: Sequence[AnyMessage]) -> list[AnyMessage]:
    """The messages from the last reply on, for the core (the results after it)."""
    return list(messages[_last_reply(messages) or 0 :])


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


def _appended(message: _Message, text: str, **meta: str) -> _Message:
    """``message`` (the same id, so it replaces the original) with ``text`` appended (and
    ``meta`` in its ``response_metadata``)."""
    content = message.content
    if isinstance(content, str):
        content = with_notices(content, [text])
    else:
        content = [*content, {"type": "text", "text": text}]
    metadata = {**message.response_metadata, **meta}
    return message.model_copy(update={"content": content, "response_metadata": metadata})


def _reply_text(response: ModelResponse[Any] | AIMessage) -> str:
    """The visible text of a model call's reply (its last AI message), for a checkpoint."""
    messages = response.result if isinstance(response, ModelResponse) else [response]
    index = _last_reply(messages)
    if index is None:
        return ""
    content = messages[index].content
    if isinstance(content, str):
        return content
    return "".join(
        b if isinstance(b, str) else str(b.get("text", "")) if b.get("type") == "text" else ""
        for b in content
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

    The report is in the final state under ``"terminus"``.
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
        self._policy = checked(policy or {}, scale)  # a bad field or scale raises here
        self._verifier = verifier
        self._handle_model_errors = bool(handle_model_errors)
        self.tools = []
        # The sessions by the snapshot in the state they belong to: a hook whose state holds the
        # snapshot the previous one wrote takes the live session instead of restoring it.
        self._sessions = SessionCache(MACHINE_KEY)

    def _live(self, state: Mapping[str, Any]) -> bool:
        """Whether the state holds a run that goes on (the channel's empty value is none)."""
        snapshot = state.get(MACHINE_KEY)
        return bool(snapshot) and not self._sessions.turn(snapshot).get("ended")

    def _update(self, session: Session) -> dict[str, Any]:
        """The state update: the snapshot, and the report once the run ended."""
        update: dict[str, Any] = {MACHINE_KEY: self._sessions.save(session)}
        if session.ended:
            update[REPORT_KEY] = session.report()
        return update

    # ----- run start and end -----

    def before_agent(self, state: TerminusState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Starts a run: a new session, unless the thread's state holds one still live (a
        thread resumed with new input goes on with its counters)."""
        if self._live(state):
            return None
        first = next((m for m in state.get("messages") or [] if isinstance(m, HumanMessage)), None)
        session, _ = Session.start(self._policy, [first] if first else [], _now())
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
        if self._live(state):
            session = self._sessions.take(state.get(MACHINE_KEY))
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
        session = self._sessions.take(state.get(MACHINE_KEY))
        history = list(state.get("messages") or [])
        sent = list(request.messages)  # what the model is sent of it (other middlewares' view)
        added: list[BaseMessage] = []  # the step's messages, in the conversation's order
        replaced: list[BaseMessage] = []  # messages of the state amended in place (same id)
        response: ModelResponse[Any] | None = None

        checkpoints: list[Mapping[str, str]] = []  # to write before the next model call

        def carry(step: Mapping[str, Any]) -> None:
            added.extend(_answer(a) for a in step.get("answers", ()))
            if step.get("checkpoint"):
                checkpoints.append(step["checkpoint"])
            notice, target = with_notices("", step.get("notices", [])), step.get("notice_to")
            for seq in (added, history) if notice and target else ():
                hit = _last_result(seq, target)
                if hit is not None:
                    old = seq[hit]
                    seq[hit] = _appended(old, notice, terminus_notice=notice)
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
            while checkpoints:
                # A checkpoint written for the agent: the model asked for a summary, no tools;
                # the reply is not fed to the kernel, its text becomes the checkpoint's message.
                checkpoint = checkpoints.pop(0)
                prompt = HumanMessage(content=checkpoint["prompt"])
                summarize = request.override(
                    messages=[*sent, *added, prompt], tools=[], tool_choice=None
                )
                try:
                    summary = yield summarize, 0
                except Exception as error:  # noqa: BLE001 (re-raised unless a provider's error)
                    kind = model_error_kind(error) if self._handle_model_errors else None
                    if kind is None:
                        raise
                    text = checkpoint_message(checkpoint["note"], failed=(kind[0], str(error)))
                else:
                    text = checkpoint_message(checkpoint["note"], _reply_text(summary))
                added.append(_nudge(text))
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
                # A structured answer (`response_format`'s output tool, called and answered in
                # the model call) is the reply's text for the core, not a call.
                done = {m.tool_call_id for m in response.result if isinstance(m, ToolMessage)}
                outputs = [c["name"] for c in message.tool_calls if c["id"] in done]
                outputs = outputs if response.structured_response is not None else []
                fed = session.reply(message, asked.tools or [], _now(), outputs)
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
        tool the agent does not have), else the budget warning for its result."""
        call, turn = request.tool_call, self._sessions.turn(request.state.get(MACHINE_KEY))
        gate = Session.gate(turn, call.get("id"), call["name"], request.tool is not None)
        if "refuse" in gate:
            return _answer(gate["refuse"]), None
        return None, gate["run"].get("warning")

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        """Answers a refused call with the kernel's refusal (the tool does not run); runs any
        other, with the kernel's budget warning appended to its result."""
        refusal, warning = self._before_tool(request)
        return refusal or _warned(request, handler(request), warning)

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        """Async ``wrap_tool_call``."""
        refusal, warning = self._before_tool(request)
        return refusal or _warned(request, await handler(request), warning)


def _warned(
    request: ToolCallRequest, result: ToolMessage | Command[Any], warning: str | None
) -> ToolMessage | Command[Any]:
    """``result`` with the kernel's budget warning (if any) appended to the call's message."""
    if warning is None:
        return result
    if isinstance(result, ToolMessage):
        return _appended(result, warning)
    if isinstance(result, Command) and isinstance(result.update, Mapping):
        messages = list(result.update.get("messages") or [])
        for i, m in enumerate(messages):
            if isinstance(m, ToolMessage) and m.tool_call_id == request.tool_call["id"]:
                messages[i] = _appended(m, warning)
                update = {**result.update, "messages": messages}
                return Command(
                    graph=result.graph, update=update, goto=result.goto, resume=result.resume
                )
    return result
