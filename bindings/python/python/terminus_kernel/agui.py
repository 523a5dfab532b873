"""AG-UI events of a LangChain/LangGraph agent run under ``TerminusMiddleware``.

:func:`agui_events` runs a compiled agent graph (``langchain.agents.create_agent`` or
``deepagents.create_deep_agent`` with :class:`~terminus_kernel.langchain.TerminusMiddleware`) and
yields the run as AG-UI 1.0 events, objects of ``ag_ui.core`` (``pip install ag-ui-protocol``),
for the ``ag_ui.encoder.EventEncoder`` of your own server::

    from ag_ui.encoder import EventEncoder
    from terminus_kernel.agui import agui_events

    encoder = EventEncoder()
    async for event in agui_events(agent, {"messages": [...]}, thread_id="t1", run_id="r1"):
        yield encoder.encode(event)  # "data: {...}\\n\\n"

The mapping is the one ``terminus serve`` uses:

- ``RUN_STARTED`` first; then ``STATE_SNAPSHOT``, the run's state, as soon as the kernel has
  started (the middleware's ``before_agent``).
- Each model call is a step ``STEP_STARTED``/``STEP_FINISHED`` named ``model``: the reply's text
  as ``TEXT_MESSAGE_START``/``CONTENT``/``END`` (role ``assistant``; a reply the chat model
  streams, from the graph's ``messages`` stream, opens the step with its first piece and sends a
  ``TEXT_MESSAGE_CONTENT`` per piece as it comes), each tool call as
  ``TOOL_CALL_START``/``ARGS``/``END`` (the model's call id, the arguments as JSON text), and
  what the kernel does with the reply (a nudge: a ``user`` text message; the calls of a turn the
  run stopped on, answered "not run": ``TOOL_CALL_RESULT``; a notice the kernel appended to a
  tool result already sent, such as a loop seen: a ``system`` text message).
- Each run of the tools node is a step named ``tools``: a ``TOOL_CALL_RESULT`` per tool message.
- The run's state (status, kernel phase, step, counters, budgets, todos, excluded tools, per-tool
  budgets, the time since the start) follows the kernel: a ``STATE_DELTA`` (an RFC 6902 JSON
  Patch) whenever it changed. The state's kernel part and the diff are the runtime's, the ones
  ``terminus serve`` sends.
- The end: ``RUN_FINISHED`` with the kernel's report as ``result`` for a complete run;
  ``RUN_ERROR`` with the stop reason as ``code`` (``no_progress``, ``max_steps``, ...) for an
  aborted one; ``RUN_FINISHED`` with an ``interrupt`` outcome for a graph that paused on a
  LangGraph ``interrupt()``. An exception of the graph ends the stream with ``RUN_ERROR`` (code:
  the exception's class) instead of propagating, so the client always sees the run end.

The kernel's state is read from what the middleware keeps in the graph state: its machine's
snapshot (:data:`~terminus_kernel.langchain.MACHINE_KEY`, with the turn it awaits), and the report
(:data:`~terminus_kernel.langchain.REPORT_KEY`), from the graph's ``updates`` stream.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from ag_ui.core import (
    BaseEvent,
    Interrupt,
    RunErrorEvent,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunStartedEvent,
    StateDeltaEvent,
    StateSnapshotEvent,
    StepFinishedEvent,
    StepStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from terminus_kernel import Machine, _native
from terminus_kernel._native import Session
from terminus_kernel.langchain import MACHINE_KEY, NOTICE_KEY, REPORT_KEY

__all__ = ["AguiRun", "agui_events", "json_patch"]


def _text(content: str | list[Any]) -> str:
    """The visible text of a message's content (a string, or content blocks)."""
    if isinstance(content, str):
        return content
    return "".join(
        b if isinstance(b, str) else str(b.get("text", ""))
        for b in content
        if isinstance(b, str) or (isinstance(b, Mapping) and b.get("type") == "text")
    )



def json_patch(old: Any, new: Any) -> list[dict[str, Any]]:
    """The RFC 6902 operations that turn ``old`` into ``new`` (JSON values): objects key by key
    (in key order), anything else (arrays included) replaced whole; ``[]`` when they are equal.
    The runtime's diff, the one of ``terminus serve``'s ``STATE_DELTA``."""
    return _native.json_patch(old, new)


def _check_id(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"agui_events: {name} must be a string, got {type(value).__name__}")
    if not value.strip():
        raise ValueError(f"agui_events: {name} must not be empty")
    return value


class AguiRun:
    """The AG-UI events of one run, from the graph's ``updates`` stream: feed each chunk to
    :meth:`on_update` (and each ``messages`` chunk, a piece of a streamed reply, to
    :meth:`on_message`), then take the last events from :meth:`finish` (or :meth:`fail`).
    :func:`agui_events` drives it; use it directly to map a stream you run yourself.

    Raises:
        TypeError, ValueError: ``thread_id`` or ``run_id`` is not a non-empty string.
    """

    def __init__(self, *, thread_id: str, run_id: str) -> None:
        self.thread_id = _check_id("thread_id", thread_id)
        self.run_id = _check_id("run_id", run_id)
        self.state: dict[str, Any] | None = None
        self.report: dict[str, Any] | None = None
        self._started_ms: int | None = None
        self._step: str | None = None
        self._texts: set[str] = set()
        self._calls: set[str] = set()
        self._results: set[str] = set()
        self._interrupts: list[Interrupt] = []
        self._count = 0
        # The model step opened by a streamed reply's first piece, and its message being written.
        self._live_step = False
        self._streaming: str | None = None
        self._streamed: str | None = None

    def start(self) -> list[BaseEvent]:
        """``RUN_STARTED``."""
        return [RunStartedEvent(thread_id=self.thread_id, run_id=self.run_id)]

    def on_update(self, chunk: Any) -> list[BaseEvent]:
        """The events of one ``updates`` chunk (``{node: update}``).

        Raises:
            TypeError: ``chunk`` is not a mapping of node names to updates.
        """
        if not isinstance(chunk, Mapping):
            raise TypeError(
                f"AguiRun.on_update: expected a mapping of node names to updates, "
                f"got {type(chunk).__name__}"
            )
        events: list[BaseEvent] = []
        for node, update in chunk.items():
            if node == "__interrupt__":
                self._interrupts += self._interrupted(update)
                continue
            if node == "model" and self._live_step:
                # The step the reply's pieces opened: its text is sent, the rest follows.
                self._live_step = False
                self._streamed = self._streaming
                events += self._end_streaming()
            elif node in ("model", "tools"):
                events += self._close_step()
                self._step = str(node)
                events.append(StepStartedEvent(step_name=self._step))
            elif self._step == "model" and str(node).endswith(".after_model"):
                pass  # a middleware's answer to the reply: part of the model step
            else:
                events += self._close_step()
            # A node that wrote more than once (a model call whose middleware also updated the
            # state) gives a list of updates, in the order they were written.
            for part in update if isinstance(update, (list, tuple)) else [update]:
                if isinstance(part, Mapping):
                    events += self._messages(part.get("messages"))
                    events += self._kernel(part)
            if node == "tools":
                events += self._close_step()
        return events

    def on_message(self, message: Any, metadata: Any) -> list[BaseEvent]:
        """The events of one ``messages`` chunk (``(message, metadata)``): a piece of the model
        node's reply while it streams. Its first piece opens the ``model`` step and the text
        message (the reply's id); each piece is a ``TEXT_MESSAGE_CONTENT``; the message ends when
        the node's update arrives, whose text is then not sent again."""
        node = metadata.get("langgraph_node") if isinstance(metadata, Mapping) else None
        if node != "model" or not isinstance(message, AIMessage):
            return []
        text = _text(message.content)
        if not text:
            return []
        events: list[BaseEvent] = []
        if not self._live_step:
            events += self._end_streaming() + self._close_step()
            self._step, self._live_step = "model", True
            events.append(StepStartedEvent(step_name="model"))
        # A chunk without an id belongs to the message being streamed (else a fresh one).
        message_id = (
            self._streaming
            if not message.id and self._streaming
            else self._id("msg", message.id)
        )
        if self._streaming != message_id:
            events += self._end_streaming()
            self._streaming = message_id
            self._texts.add(message_id)
            events.append(TextMessageStartEvent(message_id=message_id, role="assistant"))
        events.append(TextMessageContentEvent(message_id=message_id, delta=text))
        return events

    def _end_streaming(self) -> list[BaseEvent]:
        if self._streaming is None:
            return []
        message_id, self._streaming = self._streaming, None
        return [TextMessageEndEvent(message_id=message_id)]

    def finish(self) -> list[BaseEvent]:
        """The events that end a stream that ran out: the last state, then ``RUN_FINISHED``
        (complete, or an interrupt) or ``RUN_ERROR`` (aborted: ``code`` is the reason; no
        report: ``no_report``)."""
        events = self._end_streaming() + self._close_step()
        if self._interrupts:
            events.append(
                RunFinishedEvent(
                    thread_id=self.thread_id,
                    run_id=self.run_id,
                    outcome=RunFinishedInterruptOutcome(interrupts=self._interrupts),
                )
            )
            return events
        report = self.report
        if report is None:
            events.append(
                RunErrorEvent(
                    message=(
                        "the graph ended without the kernel's report: "
                        "is TerminusMiddleware among its middleware?"
                    ),
                    code="no_report",
                )
            )
            return events
        if report.get("outcome") == "complete":
            events.append(
                RunFinishedEvent(thread_id=self.thread_id, run_id=self.run_id, result=report)
            )
        else:
            reason = str(report.get("reason") or report.get("outcome") or "aborted")
            events.append(
                RunErrorEvent(
                    message=f"the run stopped: {reason} ({report.get('outcome')})", code=reason
                )
            )
        return events

    def fail(self, error: BaseException) -> list[BaseEvent]:
        """The events that end a stream the graph broke off with ``error``: ``RUN_ERROR``, code
        the exception's class."""
        events = self._end_streaming() + self._close_step()
        message = str(error) or type(error).__name__
        events.append(RunErrorEvent(message=message, code=type(error).__name__))
        return events

    # ----- steps and messages -----

    def _close_step(self) -> list[BaseEvent]:
        if self._step is None:
            return []
        name, self._step = self._step, None
        return [StepFinishedEvent(step_name=name)]

    def _id(self, prefix: str, given: Any) -> str:
        if isinstance(given, str) and given:
            return given
        self._count += 1
        return f"{prefix}-{self._count}"

    def _messages(self, messages: Any) -> list[BaseEvent]:
        if isinstance(messages, BaseMessage):
            messages = [messages]
        if not isinstance(messages, Sequence) or isinstance(messages, (str, bytes)):
            return []
        events: list[BaseEvent] = []
        for message in messages:
            if isinstance(message, AIMessage):
                events += self._assistant(message)
            elif isinstance(message, ToolMessage):
                events += self._result(message)
            elif isinstance(message, HumanMessage) and (
                (message.response_metadata or {}).get("terminus") == "nudge"
            ):
                events += self._text(message, "user")
        return events

    def _text(self, message: BaseMessage, role: str) -> list[BaseEvent]:
        text = _text(message.content)
        message_id = self._id("msg", message.id)
        if not text or message_id in self._texts:
            return []
        self._texts.add(message_id)
        return [
            TextMessageStartEvent(message_id=message_id, role=role),
            TextMessageContentEvent(message_id=message_id, delta=text),
            TextMessageEndEvent(message_id=message_id),
        ]

    def _assistant(self, message: AIMessage) -> list[BaseEvent]:
        parent = message.id if isinstance(message.id, str) and message.id else None
        if self._streamed is not None:
            # The reply whose pieces were sent: its text is not sent again.
            parent, self._streamed = self._streamed, None
            if isinstance(message.id, str) and message.id:
                self._texts.add(message.id)
        events = self._text(message, "assistant")
        calls = [(c.get("id"), c.get("name"), c.get("args")) for c in message.tool_calls]
        calls += [(c.get("id"), c.get("name"), c.get("args")) for c in message.invalid_tool_calls]
        for call_id, name, args in calls:
            if not isinstance(call_id, str) or not call_id or call_id in self._calls:
                continue
            self._calls.add(call_id)
            text = args if isinstance(args, str) else json.dumps(args or {}, ensure_ascii=False)
            events += [
                ToolCallStartEvent(
                    tool_call_id=call_id, tool_call_name=str(name or ""), parent_message_id=parent
                ),
                ToolCallArgsEvent(tool_call_id=call_id, delta=text),
                ToolCallEndEvent(tool_call_id=call_id),
            ]
        return events

    def _result(self, message: ToolMessage) -> list[BaseEvent]:
        call_id = message.tool_call_id
        if not call_id or call_id in self._results:
            # A result the kernel amended with its notices (a loop seen, a tool excluded) was
            # sent already: the notice follows as a system message.
            notice = (message.response_metadata or {}).get(NOTICE_KEY)
            if not isinstance(notice, str) or not notice:
                return []
            notice_id = f"notice-{call_id}"
            if notice_id in self._texts:
                return []
            self._texts.add(notice_id)
            return [
                TextMessageStartEvent(message_id=notice_id, role="system"),
                TextMessageContentEvent(message_id=notice_id, delta=notice),
                TextMessageEndEvent(message_id=notice_id),
            ]
        self._results.add(call_id)
        return [
            ToolCallResultEvent(
                message_id=self._id(f"result-{call_id}", message.id),
                tool_call_id=call_id,
                content=_text(message.content),
                role="tool",
            )
        ]

    def _interrupted(self, update: Any) -> list[Interrupt]:
        items = update if isinstance(update, Sequence) else [update]
        interrupts = []
        for item in items:
            value = getattr(item, "value", item)
            interrupts.append(
                Interrupt(
                    id=self._id("interrupt", getattr(item, "id", None)),
                    reason="input_required",
                    message=value if isinstance(value, str) else None,
                    metadata={"value": value} if _jsonable(value) else None,
                )
            )
        return interrupts

    # ----- the kernel's state -----

    def _kernel(self, update: Mapping[str, Any]) -> list[BaseEvent]:
        report = update.get(REPORT_KEY)
        if isinstance(report, Mapping):
            self.report = dict(report)
        packed = update.get(MACHINE_KEY)
        if not isinstance(packed, bytes):
            if self.report is not None and self.state is not None:
                return self._move(self._ended(self.state))
            return []
        session = Session.unpack(packed, MACHINE_KEY)
        started = session.turn().get("started_ms")
        if isinstance(started, int):
            self._started_ms = started
        machine = session.machine()
        state = self._render(machine)
        if self.report is not None:
            state = self._ended(state)
        if self.state is None:
            self.state = state
            return [StateSnapshotEvent(snapshot=state)]
        return self._move(state)

    def _move(self, state: dict[str, Any]) -> list[BaseEvent]:
        patch = json_patch(self.state, state)
        self.state = state
        return [StateDeltaEvent(delta=patch)] if patch else []

    def _render(self, machine: Machine) -> dict[str, Any]:
        # The runtime's state, as `terminus serve` shows it: the deadline once the run's start
        # is known.
        elapsed = None
        if self._started_ms is not None:
            elapsed = max(int(time.time() * 1000) - self._started_ms, 0)
        return {"thread_id": self.thread_id, "run_id": self.run_id, **machine.state(elapsed)}

    def _ended(self, state: dict[str, Any]) -> dict[str, Any]:
        report = self.report or {}
        return {
            **state,
            "status": report.get("outcome"),
            "reason": report.get("reason"),
            "rule": report.get("rule"),
            "result": report.get("result"),
        }


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


async def agui_events(
    graph: Any,
    input: Any,
    *,
    thread_id: str,
    run_id: str,
    config: Mapping[str, Any] | None = None,
) -> AsyncIterator[BaseEvent]:
    """Runs ``graph`` (a compiled agent graph under ``TerminusMiddleware``) on ``input`` with
    ``astream(..., stream_mode=["updates", "messages"])`` and yields the run as ``ag_ui.core``
    events (see the module's docstring for the mapping): a reply the model streams goes out
    piece by piece as it comes. ``thread_id`` goes to the graph's config as
    ``configurable.thread_id`` (its checkpointer's thread) unless ``config`` sets one; ``run_id``
    names the run in ``RUN_STARTED`` and ``RUN_FINISHED``.

    Raises:
        TypeError: ``graph`` has no ``astream``, ``config`` is not a mapping, or an id is not a
            string (before any event).
        ValueError: an id is empty.
    """
    if not callable(getattr(graph, "astream", None)):
        raise TypeError(
            f"agui_events: graph must be a compiled LangGraph graph (with astream), "
            f"got {type(graph).__name__}"
        )
    if config is not None and not isinstance(config, Mapping):
        raise TypeError(f"agui_events: config must be a mapping, got {type(config).__name__}")
    run = AguiRun(thread_id=thread_id, run_id=run_id)
    merged: dict[str, Any] = dict(config or {})
    configurable = dict(merged.get("configurable") or {})
    configurable.setdefault("thread_id", run.thread_id)
    merged["configurable"] = configurable
    for event in run.start():
        yield event
    try:
        async for mode, chunk in graph.astream(input, merged, stream_mode=["updates", "messages"]):
            if mode == "messages":
                events = run.on_message(*chunk)
            else:
                events = run.on_update(chunk)
            for event in events:
                yield event
    except Exception as error:  # noqa: BLE001 (the stream ends with RUN_ERROR, not a break)
        for event in run.fail(error):
            yield event
        return
    for event in run.finish():
        yield event
