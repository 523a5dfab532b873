"""Terminus under a Pydantic AI agent.

``TerminusAgent`` runs a ``pydantic_ai.Agent`` with the kernel's
:class:`~terminus_kernel.Machine` deciding when the run ends::

    from pydantic_ai import Agent
    from terminus_kernel.pydantic_ai import TerminusAgent

    agent = TerminusAgent(Agent(model, tools=[...]), {"completion_requires": ["write_file"]})
    result = agent.run_sync("Write the plan to plan.md")
    result.terminus  # the kernel's report: outcome, reason, steps, model_calls, nudges, ...

It is built from Pydantic AI's own extension points, nothing patched:

- :class:`TerminusCapability`, a capability (``AbstractCapability``) that a plain ``Agent`` takes
  too (``Agent(..., capabilities=[TerminusCapability(policy)])``). Its ``wrap_node_run`` feeds
  each model response to the machine when the graph reaches its ``CallToolsNode`` and carries
  out the kernel's answer: the tools run, or a stop the kernel refuses (``completion_requires``
  unmet, open todos of a ``write_todos`` tool, a no-op reply) is answered with the kernel's nudge
  as a user prompt and the graph goes back to the model, or a stop the kernel decides ends the
  graph (``End``) without an exception. After the tools ran, their results (the next request's
  tool returns and retry prompts) go to the machine before the model is called again; a stop
  decided on them ends the run there, and the kernel's notices are added to that request.
  ``wrap_tool_execute`` answers a call of a tool the kernel excluded with the kernel's refusal
  instead of running it, and appends the kernel's budget warnings to text results.
- A ``WrapperModel`` (``get_wrapper_model``) around the agent's model: a provider error
  (:func:`model_error_kind`, classed by :func:`terminus_kernel.provider_error_kind`) and an
  empty reply go to the machine, which retries the call after its backoff or ends the run
  (``model_error``, ``empty_responses``); an empty reply never enters the history. On the
  kernel's final-answer call of a spent budget, the model is offered no tools.
- ``TerminusAgent``, a ``WrapperAgent`` that adds the capability to every run, lifts Pydantic
  AI's default ``request_limit`` (50 requests) when the caller gives no ``usage_limits`` and its
  tool retry limit (one retry) when the caller gives no ``retries``: the kernel's budgets
  (``max_steps``, ``max_model_calls``, ``token_budget``, ``max_tool_failures``, ...) end the run,
  not ``UsageLimitExceeded`` or ``UnexpectedModelBehavior``. With the capability alone, pass
  ``usage_limits=UsageLimits(request_limit=None)`` and ``retries={"tools": TOOL_RETRIES}``.

A structured answer (a call of one of Pydantic AI's output tools, ``output_type=...``) is the
model's completion claim: the kernel sees its arguments' JSON as the turn's text, and a claim
it refuses is answered ("Not accepted yet.") and nudged like a text answer.

The run's result is a :class:`TerminusRunResult`: Pydantic AI's ``AgentRunResult`` with the
kernel's report in ``result.terminus`` (``agent_run.result.terminus`` under ``agent.iter()``).
A run the kernel completes ends with the model's answer as its output, as without the kernel; a
run the kernel aborts ends with the report's ``result`` (the last substantive text, or ``""``)
as its output, not validated against ``output_type``: read ``result.terminus["outcome"]``
first. The adapter drives ``run``, ``run_sync`` and ``iter``; streamed runs (``run_stream``, an
``event_stream_handler``) are not under the kernel's retries.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai import CallToolsNode, ModelRequestNode, UsageLimits
from pydantic_ai.agent import AbstractAgent, WrapperAgent
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import (
    ModelAPIError,
    ModelAuthenticationError,
    ModelConnectionError,
    ModelContextWindowExceededError,
    ModelHTTPError,
    ModelRateLimitError,
    ModelRequestRejectedError,
    ModelRequestTimeout,
    ModelServerError,
    ModelTimeoutError,
    ModelUnavailableError,
)
from pydantic_ai.messages import (
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import Model
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.result import FinalResult
from pydantic_ai.run import AgentRunResult
from pydantic_graph import End

from terminus_kernel import Machine, provider_error_kind
from terminus_kernel._adapters import Verifier, check_policy, verdict

__all__ = [
    "TOOL_RETRIES",
    "TerminusAgent",
    "TerminusCapability",
    "TerminusRunResult",
    "Verifier",
    "model_error_kind",
    "model_turn_event",
    "tool_results_event",
]


_FINISH = {
    "stop": "stop",
    "length": "length",
    "content_filter": "content_filter",
    "tool_call": "tool_calls",
}
"""Pydantic AI's finish reasons as the kernel's ``finish`` (``error`` has no counterpart)."""

# The classes the kernel retries, which keep the delay the provider asked for.
_RETRIED = ("rate_limited", "server", "timeout")


@dataclass
class TerminusRunResult(AgentRunResult[Any]):
    """Pydantic AI's ``AgentRunResult`` with the kernel's report."""

    terminus: dict[str, Any] | None = None
    """The kernel's report (the fields of ``terminus run --json``: ``outcome``, ``reason``,
    ``steps``, ``model_calls``, ``tool_calls``, ``nudges``, ``result``, ...)."""


def model_turn_event(
    response: ModelResponse,
    *,
    offered: Sequence[str] | None = None,
    output_tools: Sequence[str] = (),
) -> dict[str, Any]:
    """The kernel's ``model_turn`` event for a ``ModelResponse``: its text, its tool calls, its
    usage when the provider measured it (unmeasured usage is unknown, not zero), its finish
    reason, whether it carries thinking, and the names of the tools the call offered. A call of
    one of ``output_tools`` (Pydantic AI's structured output) is the model's answer, not a tool
    call: its arguments' JSON is the turn's text.

    Raises:
        TypeError: ``response`` is not a ``ModelResponse``.
    """
    if not isinstance(response, ModelResponse):
        raise TypeError(
            f"model_turn_event: expected a ModelResponse, got {type(response).__name__}"
        )
    calls = []
    answers = []
    for part in response.parts:
        if isinstance(part, ToolCallPart) and part.tool_name in output_tools:
            answers.append(part.args_as_json_str())
        elif isinstance(part, ToolCallPart):
            try:
                arguments: Any = part.args_as_dict(raise_if_invalid=True)
            except ValueError:
                # Arguments that are not a JSON object: still a call (rule 1); the kernel sees the
                # raw text and Pydantic AI answers it with a retry prompt.
                arguments = part.args if isinstance(part.args, str) else ""
            calls.append({"id": part.tool_call_id, "name": part.tool_name, "arguments": arguments})
    text = "\n".join(
        [t for t in ["".join(p.content for p in response.parts if isinstance(p, TextPart))] if t]
        + answers
    )
    turn: dict[str, Any] = {"text": text, "tool_calls": calls}
    usage = response.usage
    if not usage.unmeasured_requests:
        turn["usage"] = {
            "input_tokens": int(usage.input_tokens),
            "output_tokens": int(usage.output_tokens),
        }
    if response.finish_reason in _FINISH:
        turn["finish"] = _FINISH[response.finish_reason]
    if any(isinstance(p, ThinkingPart) and p.content for p in response.parts):
        turn["reasoning"] = True
    if offered is not None:
        turn["tools"] = list(offered)
    return {"model_turn": turn}


_RETRY_CAUSES = {
    "validation_error": "invalid_arguments",
    "unknown_tool": "not_found",
    "unavailable_tool": "not_found",
}
"""The kernel's error class of a retried call, by Pydantic AI's retry cause (else ``failed``)."""


def _error_kind(part: ToolReturnPart | RetryPromptPart) -> str | None:
    """The kernel's error class of a tool's answer, ``None`` for a success."""
    if isinstance(part, RetryPromptPart):
        return "invalid_arguments" if isinstance(part.content, list) else "failed"
    if part.outcome == "success":
        return None
    if part.outcome == "denied":
        return "permission_denied"
    if part.outcome == "retried" and part.retry is not None:
        return _RETRY_CAUSES.get(str(part.retry.cause), "failed")
    return "failed"


def tool_results_event(request: ModelRequest, awaiting: Mapping[str, str]) -> dict[str, Any]:
    """The kernel's ``tool_results`` for the calls in ``awaiting`` (id to tool name), read from
    the request that answers them. A ``ToolReturnPart`` whose ``outcome`` is ``success`` is
    ``ok`` with the digest of what the model reads (the kernel compares outputs, it never reads
    them); any other outcome is an error: ``retried`` (a ``ModelRetry``, arguments that failed
    validation: ``invalid_arguments``, an unknown tool: ``not_found``), ``failed``, ``denied``
    (``permission_denied``). A ``RetryPromptPart`` is an error too, and a call with no answer
    ``failed``."""
    answered: dict[str, dict[str, Any]] = {}
    for part in request.parts:
        if not isinstance(part, ToolReturnPart | RetryPromptPart):
            continue
        call_id = part.tool_call_id
        if call_id not in awaiting or call_id in answered:
            continue
        name = awaiting[call_id]
        text = (
            part.model_response_str() if isinstance(part, ToolReturnPart) else part.model_response()
        )
        kind = _error_kind(part)
        if kind is None:
            digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
            answered[call_id] = {"call_id": call_id, "name": name, "ok": "sha256:" + digest}
        else:
            answered[call_id] = {"call_id": call_id, "name": name, "error": kind, "message": text}
    results = [
        answered.get(call_id)
        or {
            "call_id": call_id,
            "name": name,
            "error": "failed",
            "message": "no result came back for this call",
        }
        for call_id, name in awaiting.items()
    ]
    return {"tool_results": results}


def model_error_kind(error: BaseException) -> tuple[str, int | None] | None:
    """The kernel's class of a failed model call (``rate_limited``, ``server``, ``timeout``,
    ``auth``, ``bad_request``, ``context_overflow``) with the delay the provider asked for in
    milliseconds, or ``None`` for an exception that is not a provider's error (a bug: it
    propagates). A ``ModelHTTPError`` is classed from its status and body by the table every
    host shares (:func:`terminus_kernel.provider_error_kind`); Pydantic AI's other
    ``ModelAPIError`` categories by their class."""
    retry = getattr(error, "retry_after", None)
    retry_ms = int(retry * 1000) if isinstance(retry, int | float) and retry >= 0 else None
    if isinstance(error, ModelHTTPError) and 400 <= error.status_code < 600:
        body = error.body
        if isinstance(body, bytes):
            body = body.decode("utf-8", "replace")
        elif not isinstance(body, str):
            try:
                body = json.dumps(body)
            except (TypeError, ValueError):
                body = str(body)
        kind = provider_error_kind(error.status_code, body or str(error))
        return kind, retry_ms if kind in _RETRIED else None
    classes: list[tuple[type[BaseException] | tuple[type[BaseException], ...], str]] = [
        ((ModelTimeoutError, ModelRequestTimeout, TimeoutError), "timeout"),
        (ModelRateLimitError, "rate_limited"),
        (ModelContextWindowExceededError, "context_overflow"),
        (ModelAuthenticationError, "auth"),
        (ModelRequestRejectedError, "bad_request"),
        (
            (ModelConnectionError, ModelServerError, ModelUnavailableError, ConnectionError),
            "server",
        ),
    ]
    for cls, kind in classes:
        if isinstance(error, cls):
            return kind, retry_ms if kind in _RETRIED else None
    if isinstance(error, ModelAPIError):
        return "server", retry_ms
    return None


def _text(response: ModelResponse) -> str:
    return "".join(p.content for p in response.parts if isinstance(p, TextPart))


def _empty(response: ModelResponse) -> bool:
    """A reply with no tool call and no text (thinking alone is empty too)."""
    return (
        not any(isinstance(p, ToolCallPart) for p in response.parts) and not _text(response).strip()
    )


@dataclass
class _Run:
    """One run's machine and what its last commands asked."""

    machine: Machine
    started_ms: int
    deadline: bool
    verifier: Verifier | None
    #: The last model call's settings: backoff and whether tools are offered.
    call: dict[str, Any] = field(default_factory=lambda: {"delay_ms": 0, "tools": True})
    nudges: list[str] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)
    #: The calls of the batch out (id to tool name), refused ones, budget warnings.
    awaiting: dict[str, str] | None = None
    refused: dict[str, str] = field(default_factory=dict)
    warnings: dict[str, str] = field(default_factory=dict)
    #: The reply without the calls the model wrote in its text, when the kernel runs them.
    written: tuple[str, list[dict[str, Any]]] | None = None
    retry: bool = False
    report: dict[str, Any] | None = None
    #: The responses already fed (the model wrapper feeds the ones it retries or stops on).
    fed: set[int] = field(default_factory=set)
    #: Budget warnings for results that are not text, added to the next request.
    warnings_out: list[str] = field(default_factory=list)
    #: The empty reply that stands in for a model call the kernel stopped on.
    stand_in: ModelResponse | None = None
    #: The tools the last model call offered, and its output tools (structured output).
    offered: list[str] | None = None
    output_tools: list[str] = field(default_factory=list)

    @property
    def ended(self) -> bool:
        return self.report is not None

    def feed(self, event: dict[str, Any]) -> None:
        """Feeds one event (after a clock reading when the policy has a deadline) and drains the
        kernel's commands into this run."""
        self.nudges, self.notices, self.retry = [], [], False
        if self.deadline and not self.ended:
            now = int(time.time() * 1000) - self.started_ms
            self.machine.handle({"tick": max(now, 0)})
            self.drain()
            if self.ended:
                return
        self.machine.handle(event)
        self.drain()

    def drain(self) -> None:
        while (command := self.machine.next_command()) is not None:
            kind = command.get("command")
            if kind == "nudge":
                self.nudges.append(str(command["text"]))
            elif kind == "notice":
                self.notices.append(str(command["text"]))
            elif kind == "call_model":
                self.call = {
                    "delay_ms": int(command.get("delay_ms", 0) or 0),
                    "tools": bool(command.get("tools", True)),
                }
                self.retry = True
            elif kind == "run_tools":
                calls = command.get("calls") or []
                self.awaiting = {str(c["id"]): str(c["name"]) for c in calls}
                self.refused = {str(r["id"]): str(r["text"]) for r in command.get("refused") or []}
                self.warnings = {
                    str(w["id"]): str(w["text"]) for w in command.get("warnings") or []
                }
                written = command.get("written")
                self.written = (str(written), list(calls)) if written is not None else None
            elif kind == "verify":
                self.machine.handle({"verdict": self.verdict(command)})
            elif kind == "stop":
                report = command.get("report")
                self.report = report if isinstance(report, dict) else self.machine.report()
            else:
                raise RuntimeError(f"TerminusCapability: unknown kernel command {command!r}")

    def verdict(self, command: Mapping[str, Any]) -> dict[str, Any]:
        """The verdict on a ``verify`` command (:func:`terminus_kernel._adapters.verdict`)."""
        return verdict(self.verifier, command)

    def end(self) -> End[FinalResult[Any]]:
        """The graph's end on the kernel's stop: the report's result as the output."""
        result = (self.report or {}).get("result")
        return End(FinalResult(result if isinstance(result, str) else ""))


class _TerminusModel(WrapperModel):
    """The agent's model under the kernel: provider errors and empty replies go to the machine,
    which retries the call after its backoff or stops the run."""

    def __init__(self, wrapped: Model, run: _Run, handle_model_errors: bool) -> None:
        super().__init__(wrapped)
        self._run = run
        self._handle_model_errors = handle_model_errors

    async def request(self, messages, model_settings, model_request_parameters):  # type: ignore[no-untyped-def]
        run = self._run
        run.offered = [t.name for t in model_request_parameters.function_tools]
        run.output_tools = [t.name for t in model_request_parameters.output_tools]
        while True:
            if run.ended:
                # The kernel stopped on a failed or empty call: this stand-in ends the graph.
                run.stand_in = ModelResponse(parts=[])
                return run.stand_in
            params = model_request_parameters
            if not run.call.get("tools", True):
                # The kernel's final-answer call (a budget spent): no tools offered.
                params = dataclasses.replace(params, function_tools=[])
            delay_ms = int(run.call.get("delay_ms", 0) or 0)
            if delay_ms:
                await asyncio.sleep(delay_ms / 1000)
            try:
                response = await self.wrapped.request(messages, model_settings, params)
            except Exception as error:  # noqa: BLE001 (re-raised unless a provider's error)
                kind = model_error_kind(error) if self._handle_model_errors else None
                if kind is None:
                    raise
                event: dict[str, Any] = {"kind": kind[0]}
                if kind[1] is not None:
                    event["retry_after_ms"] = kind[1]
                run.feed({"model_error": event})
                continue
            if not _empty(response):
                run.call = {"delay_ms": 0, "tools": True}
                return response
            # An empty reply: retried as the kernel says (it never enters the history), or the
            # run stops; a silent turn the kernel nudges goes on to the graph with its nudge.
            run.feed(model_turn_event(response, offered=run.offered, output_tools=run.output_tools))
            run.fed.add(id(response))
            if not run.ended and (run.nudges or not run.retry):
                return response


@dataclass
class TerminusCapability(AbstractCapability[Any]):
    """A Pydantic AI capability that runs the agent loop under the Terminus kernel.

    Args:
        policy: the kernel's policy (the scenario ``policy`` fields, same names and defaults);
            an unknown or ill-typed field raises ``ValueError`` naming it, here, at construction.
        verifier: judges completion claims when the policy sets ``verify_completion``; without
            one, a claim the rules accept (todos closed, ``completion_requires`` met) is complete.
        handle_model_errors: a provider's error from the model call (see
            :func:`model_error_kind`) goes to the kernel, which retries it with its backoff or
            ends the run with ``model_error``; any other exception propagates. With ``False``,
            every exception propagates.

    Each run gets its own machine (``for_run``). Pydantic AI checks its ``request_limit``
    (default 50) before any capability hook: use :class:`TerminusAgent`, or pass
    ``usage_limits=UsageLimits(request_limit=None)``, to leave the run's end to the kernel.
    """

    policy: Mapping[str, Any] | None = None
    verifier: Verifier | None = None
    handle_model_errors: bool = True
    _run: _Run | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.policy is not None and not isinstance(self.policy, Mapping):
            raise TypeError(f"policy: expected a dict or None, got {type(self.policy).__name__}")
        if self.verifier is not None and not callable(self.verifier):
            raise TypeError(f"verifier: expected a callable, got {type(self.verifier).__name__}")
        self.policy = dict(self.policy or {})
        check_policy(dict(self.policy), "terminus_kernel.pydantic_ai")

    async def for_run(self, ctx: Any) -> TerminusCapability:
        """A fresh instance with the run's machine (the task is the run's prompt)."""
        fresh = TerminusCapability(
            dict(self.policy or {}),
            verifier=self.verifier,
            handle_model_errors=self.handle_model_errors,
            id=self.id,
        )
        prompt = ctx.prompt if isinstance(ctx.prompt, str) else ""
        policy = dict(self.policy or {})
        fresh._run = _Run(
            machine=Machine(policy, task=prompt),
            started_ms=int(time.time() * 1000),
            deadline=policy.get("deadline_ms") is not None,
            verifier=self.verifier,
        )
        fresh._run.drain()  # the first command: call the model
        return fresh

    def _live(self) -> _Run:
        if self._run is None:
            raise RuntimeError("TerminusCapability: no run (hooks are called on the run's copy)")
        return self._run

    def get_wrapper_model(self, model: Model) -> Model | None:
        """The model under the kernel's retries (see the module's documentation)."""
        if self._run is None:
            return None
        return _TerminusModel(model, self._run, self.handle_model_errors)

    async def wrap_run(self, ctx: Any, *, handler: Any) -> AgentRunResult[Any]:
        """Runs the graph and returns its result with the kernel's report; a run the graph ended
        while the kernel was live (an output tool, another capability) is cancelled."""
        result = await handler()
        run = self._live()
        if not run.ended:
            run.feed({"cancel": True})
        fields = {
            f.name: getattr(result, f.name) for f in dataclasses.fields(AgentRunResult) if f.init
        }
        return TerminusRunResult(**fields, terminus=run.report)

    async def wrap_node_run(self, ctx: Any, *, node: Any, handler: Any) -> Any:
        """Feeds each model response, and the tool results after the tools ran, and carries out
        the kernel's answer (see the module's documentation)."""
        if not isinstance(node, CallToolsNode):
            return await handler(node)
        run = self._live()
        response = node.model_response
        if run.ended:
            if response is run.stand_in and ctx.messages and ctx.messages[-1] is response:
                ctx.messages.pop()  # not the model's: no empty reply is left in the history
            return run.end()
        if id(response) not in run.fed:
            run.awaiting = None
            event = model_turn_event(response, offered=run.offered, output_tools=run.output_tools)
            run.feed(event)
            run.fed.add(id(response))
        run.fed.discard(id(response))
        answers = [c for c in response.tool_calls if c.tool_name in run.output_tools]
        if run.ended:
            if (run.report or {}).get("outcome") == "complete" and len(answers) == len(
                response.tool_calls
            ):
                # The answer the kernel accepted: Pydantic AI makes it the run's output.
                done = await handler(node)
                return done if isinstance(done, End) else run.end()
            self._answer_unrun(ctx, response)
            return run.end()
        if run.awaiting is None:
            # The kernel refused the stop (or retries a silent turn): the nudge goes to the model,
            # after an answer to each output call it refused.
            parts: list[Any] = [
                ToolReturnPart(c.tool_name, "Not accepted yet.", tool_call_id=c.tool_call_id)
                for c in answers
            ]
            parts += [UserPromptPart(text) for text in run.nudges]
            return ModelRequestNode(ModelRequest(parts=parts))
        if run.written is not None:
            # The model wrote its calls in its text: the reply becomes a tool turn.
            prose, calls = run.written
            written: list[Any] = [TextPart(prose)] if prose else []
            written += [
                ToolCallPart(c["name"], c.get("arguments") or {}, tool_call_id=str(c["id"]))
                for c in calls
            ]
            response = dataclasses.replace(response, parts=written)
            if ctx.messages and ctx.messages[-1] is node.model_response:
                ctx.messages[-1] = response
            node = CallToolsNode(response)
        awaiting = run.awaiting
        following = await handler(node)
        run.awaiting = None
        if not isinstance(following, ModelRequestNode):
            return following
        run.feed(tool_results_event(following.request, awaiting))
        if run.ended:
            # The stop decided on the results: the model is not called again. The results stay
            # in the history, so every call of the last reply has its answer.
            ctx.messages.append(following.request)
            return run.end()
        extra = [UserPromptPart(text) for text in [*run.warnings_out, *run.notices, *run.nudges]]
        run.warnings_out = []
        if extra:
            request = dataclasses.replace(
                following.request, parts=[*following.request.parts, *extra]
            )
            return ModelRequestNode(request)
        return following

    def _answer_unrun(self, ctx: Any, response: ModelResponse) -> None:
        """The run stopped on a tool turn: each call gets an answer, so the history stays valid
        for a next run."""
        calls = response.tool_calls
        if not calls:
            return
        reason = (self._live().report or {}).get("reason") or "stopped"
        ctx.messages.append(
            ModelRequest(
                parts=[
                    ToolReturnPart(
                        c.tool_name,
                        f"Not run: the run stopped ({reason}).",
                        tool_call_id=c.tool_call_id,
                    )
                    for c in calls
                ]
            )
        )

    async def wrap_tool_execute(
        self, ctx: Any, *, call: ToolCallPart, tool_def: Any, args: Any, handler: Any
    ) -> Any:
        """Answers a call the kernel refused with its refusal (the tool does not run); runs any
        other, with the kernel's budget warning appended to a text result."""
        run = self._live()
        refusal = run.refused.get(call.tool_call_id)
        if refusal is not None:
            return refusal
        result = await handler(args)
        warning = run.warnings.get(call.tool_call_id)
        if warning is not None and isinstance(result, str):
            return f"{result}\n\n{warning}" if result else warning
        if warning is not None:
            run.warnings_out.append(warning)
        return result


TOOL_RETRIES = 1_000_000
"""The tools' retry budget of a :class:`TerminusAgent` run (unless the caller gives
``retries``): a failing tool is the kernel's to bound (``max_tool_failures`` excludes it,
``max_consecutive_tool_failures`` ends the run), not Pydantic AI's ``Tool exceeded max retries``
exception after its default single retry."""


class TerminusAgent(WrapperAgent[Any, Any]):
    """A Pydantic AI agent whose runs are under the Terminus kernel: ``wrapped`` with a
    :class:`TerminusCapability` added to every run, no ``request_limit`` unless the caller gives
    ``usage_limits``, and no tool retry limit of its own unless the caller gives ``retries``
    (:data:`TOOL_RETRIES`): the kernel's budgets end the run. ``run``, ``run_sync`` and ``iter``
    return a :class:`TerminusRunResult` (``result.terminus``: the report).

    Args:
        wrapped: the agent.
        policy, verifier, handle_model_errors: as :class:`TerminusCapability`.
    """

    def __init__(
        self,
        wrapped: AbstractAgent[Any, Any],
        policy: Mapping[str, Any] | None = None,
        *,
        verifier: Verifier | None = None,
        handle_model_errors: bool = True,
    ) -> None:
        if not isinstance(wrapped, AbstractAgent):
            raise TypeError(f"wrapped: expected a pydantic_ai Agent, got {type(wrapped).__name__}")
        super().__init__(wrapped)
        self.capability = TerminusCapability(
            policy, verifier=verifier, handle_model_errors=handle_model_errors
        )

    @asynccontextmanager
    async def iter(self, user_prompt: Any = None, **kwargs: Any) -> AsyncIterator[Any]:  # type: ignore[override]
        kwargs["capabilities"] = [*(kwargs.get("capabilities") or []), self.capability]
        if kwargs.get("usage_limits") is None:
            kwargs["usage_limits"] = UsageLimits(request_limit=None)
        if kwargs.get("retries") is None:
            kwargs["retries"] = {"tools": TOOL_RETRIES}
        async with self.wrapped.iter(user_prompt, **kwargs) as agent_run:
            yield agent_run
