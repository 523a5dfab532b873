"""Terminus under a Pydantic AI agent.

``TerminusAgent`` runs a ``pydantic_ai.Agent`` with the kernel deciding when the run ends::

    from pydantic_ai import Agent
    from terminus_kernel.pydantic_ai import TerminusAgent

    agent = TerminusAgent(Agent(model, tools=[...]), {"completion_requires": ["write_file"]})
    result = agent.run_sync("Write the plan to plan.md")
    result.terminus  # the kernel's report: outcome, reason, steps, model_calls, nudges, ...

What each hook decides is the host core's (``terminus_kernel._native.Session``, the same for
every framework adapter, ``docs/embedding.md``), fed Pydantic AI's messages (:func:`wire`); this
module carries its steps out with Pydantic AI's own extension points, nothing patched:

- :class:`TerminusCapability`, a capability (``AbstractCapability``) that a plain ``Agent`` takes
  too (``Agent(..., capabilities=[TerminusCapability(policy)])``). Its ``wrap_node_run`` carries
  out the core's step on each model response when the graph reaches its ``CallToolsNode``: the
  tools run, or a stop the kernel refuses (``completion_requires`` unmet, open todos of a
  ``write_todos`` tool, a no-op reply) is answered with the kernel's nudge as a user prompt and
  the graph goes back to the model, or a stop the kernel decides ends the graph (``End``)
  without an exception. After the tools ran, their results (the next request's
  tool returns and retry prompts) go to the core before the model is called again; a stop
  decided on them ends the run there, and the kernel's notices are appended to the turn's last
  tool return (the host core's ``notice_to``), as ``terminus run`` sends them, its nudges added
  to that request as user prompts. ``wrap_tool_execute`` answers a call of a tool the kernel
  excluded with the kernel's refusal instead of running it, and appends the kernel's budget
  warnings to text results (the warning of another result follows it as a user prompt). A tool
  marks a failure's class for the kernel by returning ``ToolReturn(text,
  metadata={"terminus_error": kind})`` (``ERROR_KIND``); a ``ModelRetry`` it raises is
  ``failed``.
- A ``WrapperModel`` (``get_wrapper_model``) around the agent's model: a provider error
  (:func:`model_error_kind`, classed by :func:`terminus_kernel.provider_error_kind`) and each
  reply go to the core, which retries the call after its backoff or ends the run
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
it refuses is answered (the host core's "Not accepted yet.") and nudged like a text answer.

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
import json
import time
from collections.abc import AsyncIterator, Mapping
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
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import Model, ModelRequestParameters
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.result import FinalResult
from pydantic_ai.run import AgentRunResult
from pydantic_graph import End

from terminus_kernel import provider_error_kind
from terminus_kernel._adapters import Verifier, checked, verified
from terminus_kernel._native import Session, checkpoint_message, with_notices

__all__ = [
    "ERROR_KIND",
    "TOOL_RETRIES",
    "TerminusAgent",
    "TerminusCapability",
    "TerminusRunResult",
    "Verifier",
    "model_error_kind",
    "wire",
]

ERROR_KIND = "terminus_error"
"""A ``ToolReturn.metadata`` key: the kernel's error class of a tool's failure (``failed``,
``invalid_arguments``, ``not_found``, ``permission_denied``, ``auth_failed``, ``timeout``)."""

# The classes the kernel retries, which keep the delay the provider asked for.
_RETRIED = ("rate_limited", "server", "timeout")


@dataclass
class TerminusRunResult(AgentRunResult[Any]):
    """Pydantic AI's ``AgentRunResult`` with the kernel's report."""

    terminus: dict[str, Any] | None = None
    """The kernel's report (the fields of ``terminus run --json``: ``outcome``, ``reason``,
    ``steps``, ``model_calls``, ``tool_calls``, ``nudges``, ``result``, ...)."""


def wire(message: ModelMessage) -> dict[str, Any]:
    """A Pydantic AI message in the shape the host core reads (its fields the core uses;
    ``terminus_runtime::host::messages``): a response's text, tool calls, thinking, finish reason,
    and its usage when the provider measured it (unmeasured usage is unknown, not zero); a
    request's user prompts and tool answers (the text the model reads, the ``outcome``, the
    retry's cause, the class a tool marked in its metadata). A call of an output tool (Pydantic
    AI's structured output) is the model's answer: the core reads it as the reply's text when
    ``Session.reply`` is given the output tools' names."""
    if isinstance(message, ModelResponse):
        calls = [p for p in message.parts if isinstance(p, ToolCallPart)]
        text = "".join(p.content for p in message.parts if isinstance(p, TextPart))
        parts: list[dict[str, Any]] = [{"part_kind": "text", "content": text}]
        parts += [
            {"part_kind": "thinking", "content": p.content}
            for p in message.parts
            if isinstance(p, ThinkingPart)
        ]
        parts += [
            {
                "part_kind": "tool-call",
                "tool_call_id": c.tool_call_id,
                "tool_name": c.tool_name,
                "args": c.args,
            }
            for c in calls
        ]
        # A reason Pydantic AI has no name for: the provider's own.
        raw = (message.provider_details or {}).get("finish_reason")
        out: dict[str, Any] = {
            "kind": "response",
            "parts": parts,
            "finish_reason": message.finish_reason or raw,
        }
        usage = message.usage
        if not usage.unmeasured_requests:
            out["usage"] = {
                "input_tokens": int(usage.input_tokens),
                "output_tokens": int(usage.output_tokens),
            }
        return out
    parts = []
    for part in message.parts:
        if isinstance(part, UserPromptPart):
            content = part.content
            if not isinstance(content, str):
                content = "".join(c for c in content if isinstance(c, str))
            parts.append({"part_kind": "user-prompt", "content": content})
        elif isinstance(part, ToolReturnPart):
            meta = part.metadata if isinstance(part.metadata, Mapping) else {}
            kind = meta.get(ERROR_KIND)
            parts.append(
                {
                    "part_kind": "tool-return",
                    "tool_call_id": part.tool_call_id,
                    "tool_name": part.tool_name,
                    "content": part.model_response_str(),
                    "outcome": part.outcome,
                    "retry": None if part.retry is None else {"cause": str(part.retry.cause)},
                    "metadata": {ERROR_KIND: kind} if isinstance(kind, str) else {},
                }
            )
        elif isinstance(part, RetryPromptPart):
            errors = part.content
            parts.append(
                {
                    "part_kind": "retry-prompt",
                    "tool_call_id": part.tool_call_id,
                    "tool_name": part.tool_name,
                    "content": errors
                    if isinstance(errors, str)
                    else [{"msg": str(e.get("msg", ""))} for e in errors],
                }
            )
    return {"kind": "request", "parts": parts}


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


def _now() -> int:
    return int(time.time() * 1000)


_sleep = asyncio.sleep
"""How the adapter waits the kernel's backoff (a test records it instead)."""


@dataclass
class _Run:
    """One run's session, the step it gave each reply, and what the hooks keep between them."""

    session: Session
    verifier: Verifier | None
    #: ``Session.turn()``: the next model call's settings, the refusals and warnings of the
    #: tool turn out (what the tool hook reads).
    turn: dict[str, Any] = field(default_factory=dict)
    #: The step of each reply fed, by the response's ``id()``, until its node runs.
    steps: dict[int, dict[str, Any]] = field(default_factory=dict)
    #: Budget warnings for results that are not text, added to the next request.
    warnings_out: list[str] = field(default_factory=list)
    #: The empty reply that stands in for a model call the kernel stopped on.
    stand_in: ModelResponse | None = None
    #: The tools the last model call offered, and its output tools (structured output).
    offered: list[str] | None = None
    output_tools: list[str] = field(default_factory=list)
    #: The model under the kernel, and the settings of its last call (for a checkpoint).
    model: _TerminusModel | None = None
    settings: tuple[Any, Any] | None = None

    def verified(self, step: dict[str, Any] | None) -> dict[str, Any]:
        """The step, with the verifications it asks answered by the verifier."""
        step = verified(self.session, self.verifier, step)
        self.turn = self.session.turn()
        return step or {}

    def reply(self, response: ModelResponse) -> dict[str, Any]:
        """Feeds a model response; its step is kept for its node."""
        message = wire(response)
        step = self.verified(self.session.reply(message, self.offered, _now(), self.output_tools))
        self.steps[id(response)] = step
        return step

    def report(self) -> dict[str, Any] | None:
        return self.session.report() if self.session.ended else None

    def end(self) -> End[FinalResult[Any]]:
        """The graph's end on the kernel's stop: the report's result as the output."""
        result = (self.report() or {}).get("result")
        return End(FinalResult(result if isinstance(result, str) else ""))


class _TerminusModel(WrapperModel):
    """The agent's model under the kernel: provider errors and empty replies go to the session,
    which retries the call after its backoff or stops the run."""

    def __init__(self, wrapped: Model, run: _Run, handle_model_errors: bool) -> None:
        super().__init__(wrapped)
        self._run = run
        self._handle_model_errors = handle_model_errors
        if run is not None:
            run.model = self

    def _provider_error(self, error: Exception) -> tuple[str, int | None]:
        """The kernel's class of a failed model call (and the delay the provider asked for);
        ``error`` raised again when it is not a provider's (or errors are not handled)."""
        kind = model_error_kind(error) if self._handle_model_errors else None
        if kind is None:
            raise error
        return kind

    async def checkpoint(self, messages: list[Any], checkpoint: Mapping[str, str]) -> str:
        """A checkpoint written for the agent: the model asked with ``messages`` (the prompt
        last) for a summary, no tools, as the run's last call was made; the reply is not fed to
        the kernel. Its message (``checkpoint_message``)."""
        settings, params = self._run.settings or (None, None)
        if params is None:
            params = ModelRequestParameters()
        params = dataclasses.replace(
            params, function_tools=[], output_tools=[], output_mode="text", allow_text_output=True
        )
        try:
            response = await self.wrapped.request(messages, settings, params)
        except Exception as error:  # noqa: BLE001 (re-raised unless a provider's error)
            kind = self._provider_error(error)
            return checkpoint_message(checkpoint["note"], failed=(kind[0], str(error)))
        text = "".join(p.content for p in response.parts if isinstance(p, TextPart))
        return checkpoint_message(checkpoint["note"], text)

    async def request(self, messages, model_settings, model_request_parameters):  # type: ignore[no-untyped-def]
        run = self._run
        run.output_tools = [t.name for t in model_request_parameters.output_tools]
        while True:
            if run.session.ended:
                # The kernel stopped on a failed or empty call: this stand-in ends the graph.
                run.stand_in = ModelResponse(parts=[])
                return run.stand_in
            params = model_request_parameters
            if not run.turn.get("tools", True):
                # The kernel's final-answer call (a budget spent): no tools offered.
                params = dataclasses.replace(params, function_tools=[])
            run.offered = [t.name for t in params.function_tools]
            run.settings = (model_settings, params)
            delay_ms = int(run.turn.get("delay_ms", 0) or 0)
            if delay_ms:
                await _sleep(delay_ms / 1000)
            try:
                response = await self.wrapped.request(messages, model_settings, params)
            except Exception as error:  # noqa: BLE001 (re-raised unless a provider's error)
                kind = self._provider_error(error)
                run.verified(run.session.model_error(kind[0], kind[1], _now()))
                continue
            step = run.reply(response)
            if not step.get("drop_reply"):
                return response
            # An empty reply: retried as the kernel says (it never enters the history), or the
            # run stops; a silent turn the kernel nudges goes on to the graph with its nudge.
            if not run.session.ended and (step.get("nudges") or step.get("jump") != "model"):
                return response
            run.steps.pop(id(response), None)


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
        scale: the task's size in units (the files in scope, say): the policy's ``budget_scale``
            scales its budgets for it, as ``terminus run --scale`` does.

    Each run gets its own session (``for_run``). Pydantic AI checks its ``request_limit``
    (default 50) before any capability hook: use :class:`TerminusAgent`, or pass
    ``usage_limits=UsageLimits(request_limit=None)``, to leave the run's end to the kernel.
    """

    policy: Mapping[str, Any] | None = None
    verifier: Verifier | None = None
    handle_model_errors: bool = True
    scale: int | None = None
    _run: _Run | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.policy is not None and not isinstance(self.policy, Mapping):
            raise TypeError(f"policy: expected a dict or None, got {type(self.policy).__name__}")
        if self.verifier is not None and not callable(self.verifier):
            raise TypeError(f"verifier: expected a callable, got {type(self.verifier).__name__}")
        # Checked and scaled once, here: the capability keeps the scaled policy (a copy is not
        # scaled again).
        self.policy, self.scale = checked(self.policy or {}, self.scale), None

    async def for_run(self, ctx: Any) -> TerminusCapability:
        """A fresh instance with the run's session (the task is the run's prompt)."""
        fresh = TerminusCapability(
            dict(self.policy or {}),
            verifier=self.verifier,
            handle_model_errors=self.handle_model_errors,
            id=self.id,
        )
        prompt = ctx.prompt if isinstance(ctx.prompt, str) else ""
        task = {"kind": "request", "parts": [{"part_kind": "user-prompt", "content": prompt}]}
        session, _ = Session.start(dict(self.policy or {}), [task], _now())
        fresh._run = _Run(session=session, verifier=self.verifier, turn=session.turn())
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
        while the kernel was live (an output tool, another capability) is finished: the results
        of its tool turn out, then cancelled."""
        result = await handler()
        run = self._live()
        if not run.session.ended:
            messages = result.all_messages()
            last = max(
                (i for i, m in enumerate(messages) if isinstance(m, ModelResponse)), default=-1
            )
            run.session.finish([wire(m) for m in messages[last + 1 :]], _now())
        fields = {
            f.name: getattr(result, f.name) for f in dataclasses.fields(AgentRunResult) if f.init
        }
        return TerminusRunResult(**fields, terminus=run.report())

    async def wrap_node_run(self, ctx: Any, *, node: Any, handler: Any) -> Any:
        """Carries out the step of each model response, and feeds the tool results after the
        tools ran (see the module's documentation)."""
        if not isinstance(node, CallToolsNode):
            return await handler(node)
        run = self._live()
        response = node.model_response
        step = run.steps.pop(id(response), None)
        if step is None:
            if run.session.ended:
                if response is run.stand_in and ctx.messages and ctx.messages[-1] is response:
                    ctx.messages.pop()  # not the model's: no empty reply is left in the history
                return run.end()
            step = run.reply(response)  # not through the model wrapper (a streamed response)
            run.steps.pop(id(response), None)
        answers = [c for c in response.tool_calls if c.tool_name in run.output_tools]
        if run.session.ended:
            report = run.report() or {}
            if report.get("outcome") == "complete" and len(answers) == len(response.tool_calls):
                # The answer the kernel accepted: Pydantic AI makes it the run's output.
                done = await handler(node)
                return done if isinstance(done, End) else run.end()
            # Each call gets an answer (the core's), so the history stays valid for a next run.
            parts = _answers(step) + _answers(step, "claims")
            if parts:
                ctx.messages.append(ModelRequest(parts=parts))
            return run.end()
        if step.get("jump") != "tools":
            # The kernel refused the stop (or retries a silent turn, or answered every call):
            # the nudge goes to the model, after the core's answer to each output call it
            # refused and to each call it did not run.
            request = ModelRequest(parts=_answers(step, "claims") + _answers(step))
            if run.session.batch_out:
                return await self._results(ctx, ModelRequestNode(request))
            if step.get("drop_reply") and ctx.messages and ctx.messages[-1] is response:
                ctx.messages.pop()  # an empty reply never enters the history: its nudge follows
            nudges = [UserPromptPart(text) for text in step.get("nudges", ())]
            return ModelRequestNode(ModelRequest(parts=[*request.parts, *nudges]))
        written = step.get("written")
        if written is not None:
            # The model wrote its calls in its text: the reply becomes a tool turn.
            parts = [TextPart(written["text"])] if written["text"] else []
            parts += [
                ToolCallPart(c["name"], c.get("arguments") or {}, tool_call_id=str(c["id"]))
                for c in written["tool_calls"]
            ]
            response = dataclasses.replace(response, parts=parts)
            if ctx.messages and ctx.messages[-1] is node.model_response:
                ctx.messages[-1] = response
            node = CallToolsNode(response)
        following = await handler(node)
        if not isinstance(following, ModelRequestNode):
            return following
        return await self._results(ctx, following)

    async def _results(self, ctx: Any, following: ModelRequestNode[Any, Any]) -> Any:
        """Feeds the tool turn's results (the request that answers it) and carries out the step:
        a stop ends the run there (the results stay in the history, so every call of the last
        reply has its answer), else the kernel's notices ride on the turn's last tool return
        (``notice_to``) and its nudges (and the warnings of results that are not text) follow
        as user prompts."""
        run = self._live()
        step = run.verified(run.session.results([wire(following.request)], _now()))
        if run.session.ended:
            ctx.messages.append(following.request)
            return run.end()
        texts = [*run.warnings_out, *step.get("nudges", ())]
        run.warnings_out = []
        notice = with_notices("", step.get("notices", []))
        checkpoint = step.get("checkpoint")
        if not texts and not notice and not checkpoint:
            return following
        parts: list[Any] = list(following.request.parts)
        if notice:
            at = _last_return(parts, step.get("notice_to"))
            if at is None:
                texts.insert(0, notice)  # no tool return to ride on (none is expected): not lost
            else:
                parts[at] = _appended(parts[at], notice)
        parts += [UserPromptPart(text) for text in texts]
        if checkpoint:
            # Written before the next model call, after the nudges: asked of the model with the
            # history and this request, the kernel's prompt last.
            asked = ModelRequest(parts=[*parts, UserPromptPart(checkpoint["prompt"])])
            if run.model is None:  # no model under the kernel to ask: it says why
                text = checkpoint_message(checkpoint["note"])
            else:
                text = await run.model.checkpoint([*ctx.messages, asked], checkpoint)
            parts.append(UserPromptPart(text))
        return dataclasses.replace(
            following, request=dataclasses.replace(following.request, parts=parts)
        )

    async def wrap_tool_execute(
        self, ctx: Any, *, call: ToolCallPart, tool_def: Any, args: Any, handler: Any
    ) -> Any:
        """Answers a call the kernel refused with its refusal (the tool does not run); runs any
        other, with the kernel's budget warning appended to a text result."""
        run = self._live()
        gate = Session.gate(run.turn, call.tool_call_id, call.tool_name, True)
        if gate.get("refuse") is not None:
            return gate["refuse"]["content"]
        result = await handler(args)
        warning = (gate.get("run") or {}).get("warning")
        if warning is not None and isinstance(result, str):
            return with_notices(result, [warning])
        if warning is not None:
            run.warnings_out.append(warning)
        return result


def _last_return(parts: list[Any], call_id: str | None) -> int | None:
    """The index of the last tool return of ``parts`` that answers ``call_id``."""
    for index in range(len(parts) - 1, -1, -1):
        part = parts[index]
        if isinstance(part, ToolReturnPart) and part.tool_call_id == call_id:
            return index
    return None


def _appended(part: ToolReturnPart, text: str) -> ToolReturnPart:
    """``part`` with the kernel's ``text`` after its content, a blank line between (how
    ``terminus run`` appends a notice to a result); a content that is not text becomes the text
    the model reads of it, its files kept."""
    content = part.content
    if not isinstance(content, str):
        files = part.files
        value = part.model_response_str(wrap_if_error=False)
        content = with_notices(value, [text])
        return dataclasses.replace(part, content=[content, *files] if files else content)
    return dataclasses.replace(part, content=with_notices(content, [text]))


def _answers(step: Mapping[str, Any], key: str = "answers") -> list[ToolReturnPart]:
    """The step's answers to calls (not run; ``claims``: to output calls not taken as the
    run's answer), as tool returns."""
    return [
        ToolReturnPart(
            a["name"],
            a["content"],
            tool_call_id=a["tool_call_id"],
            metadata={ERROR_KIND: a["error"]} if a.get("error") else None,
        )
        for a in step.get(key, ())
    ]


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
        policy, verifier, handle_model_errors, scale: as :class:`TerminusCapability`.
    """

    def __init__(
        self,
        wrapped: AbstractAgent[Any, Any],
        policy: Mapping[str, Any] | None = None,
        *,
        verifier: Verifier | None = None,
        handle_model_errors: bool = True,
        scale: int | None = None,
    ) -> None:
        if not isinstance(wrapped, AbstractAgent):
            raise TypeError(f"wrapped: expected a pydantic_ai Agent, got {type(wrapped).__name__}")
        super().__init__(wrapped)
        self.capability = TerminusCapability(
            policy, verifier=verifier, handle_model_errors=handle_model_errors, scale=scale
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
