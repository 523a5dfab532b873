"""Terminus under the OpenAI Agents SDK (``openai-agents``).

:class:`Terminus` runs an ``agents.Agent`` with the kernel's :class:`~terminus_kernel.Machine`
deciding when the run ends, instead of ``max_turns``::

    from agents import Agent, function_tool
    from terminus_kernel.openai_agents import Terminus

    agent = Agent(name="architect", instructions="...", tools=[read_file, write_file])
    result = await Terminus({"completion_requires": ["write_file"]}).run(agent, "Write the plan")
    result.final_output
    result.terminus  # the kernel's report: outcome, reason, steps, model_calls, nudges, ...

``run`` (``run_sync`` without an event loop) calls ``Runner.run`` with copies of the agent and
its function tools wired to one machine, through the SDK's own extension points:

- a ``Model`` wrapper feeds every reply to the kernel as a ``model_turn``. An empty reply or a
  provider's error (classed with :func:`terminus_kernel.provider_error_kind`) is retried inside
  the wrapper after the kernel's backoff, or ends the run (``empty_responses``,
  ``model_error``); a tool call written in the reply's text is made a real call when the kernel
  says so. After a stop the kernel decided, the wrapper does not call the model again.
- a tool input guardrail on each function tool answers a call the kernel refused (a tool
  excluded after its failures, a spent tool budget, a run that stopped) with the kernel's text,
  instead of running it; a tool output guardrail appends the kernel's budget warning.
- ``RunConfig.tool_error_formatter`` records which calls failed (the kernel counts failures per
  tool, and excludes a tool that keeps failing).
- ``tool_use_behavior`` feeds each tool batch's results as one ``tool_results`` event; a stop
  the kernel decides there (a loop of identical calls, failing tools, a spent budget) ends the
  run without another model call.

A reply the SDK takes as the final output but the kernel refuses (``completion_requires``
unmet, open todos of a ``write_todos`` tool, a no-op reply) ends one ``Runner.run`` only:
``run`` goes on with the conversation so far (``result.to_input_list()``) and the kernel's
nudge as a user message, and so on until the kernel stops. A notice of the kernel (a loop seen,
a tool excluded) is given the same way, after the batch's tool results. The result is the last
``Runner.run``'s: its ``to_input_list()`` is the whole conversation, nudges included, and its
attribute ``terminus`` is the kernel's report. ``max_turns`` is not used: the policy's budgets
(``max_steps``, ``max_model_calls``, ...) bound the run, so it never ends in
``MaxTurnsExceeded``.

The agent's ``output_type`` must be text (``None`` or ``str``); streaming, handoffs, sessions
and server-side conversation state are not driven by this module.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from agents import (
    Agent,
    FunctionTool,
    FunctionToolResult,
    Model,
    ModelResponse,
    ModelSettings,
    RunConfig,
    RunContextWrapper,
    Runner,
    RunResult,
    ToolGuardrailFunctionOutput,
    ToolInputGuardrail,
    ToolInputGuardrailData,
    ToolOutputGuardrail,
    ToolOutputGuardrailData,
    ToolsToFinalOutputResult,
    Usage,
)
from agents.models.interface import ModelTracing
from agents.run_config import ToolErrorFormatterArgs
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseReasoningItem,
)

from terminus_kernel import Machine
from terminus_kernel._adapters import Verifier, check_policy, verdict
from terminus_kernel._sdk_errors import sdk_error_kind

__all__ = [
    "REPORT_ATTR",
    "Terminus",
    "Verifier",
    "model_error_kind",
    "model_turn_event",
]

REPORT_ATTR = "terminus"
"""The attribute of the ``RunResult`` ``Terminus.run`` returns that holds the kernel's report."""


# Refused keyword arguments of ``Runner.run``, and why.
_REFUSED_KWARGS = {
    "max_turns": "the kernel's policy bounds the run (max_steps, max_model_calls, ...)",
    "session": "a session is not driven by terminus_kernel.openai_agents",
    "previous_response_id": "server-side conversation state is not driven by this module",
    "auto_previous_response_id": "server-side conversation state is not driven by this module",
    "conversation_id": "server-side conversation state is not driven by this module",
}


def _reply_text(item: ResponseOutputMessage) -> str:
    return "".join(part.text for part in item.content if isinstance(part, ResponseOutputText))


def model_turn_event(
    response: ModelResponse, offered: Sequence[str] | None = None
) -> dict[str, Any]:
    """The kernel's ``model_turn`` event for a model's ``ModelResponse``: its text, its function
    calls (arguments parsed from JSON; text that is not JSON is passed as it is, and the kernel
    answers it as invalid), its usage when the provider reported it (a response with no request
    counted and no token is unknown usage, not zero), whether it carries reasoning, and
    ``offered``, the names of the tools offered with the call.

    Raises:
        TypeError: ``response`` is not a ``ModelResponse``.
        ValueError: a function call has no ``call_id``.
    """
    if not isinstance(response, ModelResponse):
        raise TypeError(
            f"model_turn_event: expected a ModelResponse, got {type(response).__name__}"
        )
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    reasoning = False
    for index, item in enumerate(response.output):
        if isinstance(item, ResponseOutputMessage):
            texts.append(_reply_text(item))
        elif isinstance(item, ResponseFunctionToolCall):
            if not item.call_id:
                raise ValueError(f"model response: output[{index}] ({item.name!r}) has no call_id")
            try:
                arguments: Any = json.loads(item.arguments) if item.arguments.strip() else {}
            except json.JSONDecodeError:
                arguments = item.arguments
            calls.append({"id": item.call_id, "name": item.name, "arguments": arguments})
        elif isinstance(item, ResponseReasoningItem):
            reasoning = True
    turn: dict[str, Any] = {"text": "".join(texts), "tool_calls": calls}
    usage = response.usage
    if usage is not None and (usage.requests or usage.input_tokens or usage.output_tokens):
        turn["usage"] = {
            "input_tokens": int(usage.input_tokens),
            "output_tokens": int(usage.output_tokens),
        }
    if reasoning:
        turn["reasoning"] = True
    if offered is not None:
        turn["tools"] = list(offered)
    return {"model_turn": turn}


def model_error_kind(error: BaseException) -> tuple[str, int | None] | None:
    """The kernel's class of a failed model call with the delay the provider asked for (ms), or
    ``None`` for an exception that is not a provider's error (it propagates). The ``openai``
    SDK's ``APIStatusError`` keeps the HTTP status and response: they are classed with the
    table every host shares (:func:`terminus_kernel.provider_error_kind`); a timeout or a
    refused connection (``APITimeoutError``, ``APIConnectionError``) has no status."""
    return sdk_error_kind(error)


def _tool_error_kind(error: BaseException | None) -> str:
    """The kernel's class of a tool's exception."""
    if isinstance(error, PermissionError):
        return "permission_denied"
    if isinstance(error, FileNotFoundError | LookupError):
        return "not_found"
    if isinstance(error, TimeoutError):
        return "timeout"
    return "failed"


def _digest(output: Any) -> str:
    text = output if isinstance(output, str) else repr(output)
    return "sha256:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _task(input: str | Sequence[Any]) -> str:
    """The run's task for the kernel's explanation: the input's last user text."""
    if isinstance(input, str):
        return input
    for item in reversed(list(input)):
        if isinstance(item, Mapping) and item.get("role") == "user":
            content = item.get("content")
            if isinstance(content, str):
                return content
    return ""


def _stand_in() -> ModelResponse:
    """The reply of a model call the kernel does not let happen: no output, no usage."""
    return ModelResponse(output=[], usage=Usage(), response_id=None)


class _Run:
    """One run's machine and what it awaits: the glue's whole state."""

    def __init__(self, machine: Machine, verifier: Verifier | None, deadline: bool) -> None:
        self.machine = machine
        self.verifier = verifier
        self.deadline = deadline
        self.started = time.monotonic()
        self.report: dict[str, Any] | None = None
        self.call: dict[str, Any] = {"delay_ms": 0, "tools": True}
        self.model_wanted = False
        # The tool batch out: calls to run (id -> name), refusals and warnings by call id.
        self.awaiting: dict[str, str] = {}
        self.batch = False
        self.refused: dict[str, str] = {}
        self.warnings: dict[str, str] = {}
        self.failed: dict[str, tuple[str, str]] = {}
        # Text for the conversation before the next model call (nudges, notices).
        self.messages: list[str] = []
        self.written: tuple[str, list[dict[str, Any]]] | None = None
        # Whether the last Runner.run ended for the kernel to go on (a nudge, a notice, a
        # refused final output), not for the agent's own tool_use_behavior.
        self.handover = False

    @property
    def ended(self) -> bool:
        return self.report is not None

    def _verdict(self, command: Mapping[str, Any]) -> dict[str, Any]:
        """The verdict on a ``verify`` command (:func:`terminus_kernel._adapters.verdict`)."""
        return verdict(self.verifier, command)

    def carry_out(self) -> None:
        """Drains the kernel's commands into this run's state."""
        while (command := self.machine.next_command()) is not None:
            kind = command.get("command")
            if kind in ("nudge", "notice"):
                self.messages.append(str(command["text"]))
            elif kind == "call_model":
                self.call = {
                    "delay_ms": int(command.get("delay_ms", 0) or 0),
                    "tools": bool(command.get("tools", True)),
                }
                self.model_wanted = True
            elif kind == "run_tools":
                calls = command.get("calls") or []
                self.awaiting = {str(c["id"]): str(c["name"]) for c in calls}
                self.batch = True
                self.refused = {str(r["id"]): str(r["text"]) for r in command.get("refused") or []}
                self.warnings = {
                    str(w["id"]): str(w["text"]) for w in command.get("warnings") or []
                }
                if command.get("written") is not None:
                    self.written = (str(command["written"]), list(calls))
            elif kind == "verify":
                self.machine.handle({"verdict": self._verdict(command)})
            elif kind == "stop":
                report = command.get("report")
                self.report = report if report is not None else self.machine.report()
            else:
                raise RuntimeError(
                    f"terminus_kernel.openai_agents: unknown kernel command {command!r}"
                )

    def feed(self, event: dict[str, Any]) -> None:
        """Feeds one event (after a clock reading when the policy has a deadline)."""
        if self.ended:
            return
        if self.deadline:
            now = int((time.monotonic() - self.started) * 1000)
            self.machine.handle({"tick": max(now, 0)})
            self.carry_out()
            if self.ended:
                return
        self.model_wanted = False
        self.machine.handle(event)
        self.carry_out()

    def feed_results(self, outputs: Mapping[str, Any]) -> None:
        """Feeds the out batch's results: ``outputs`` by call id (a call with none failed)."""
        if not self.batch:
            return
        results: list[dict[str, Any]] = []
        for call_id, name in self.awaiting.items():
            if call_id in self.failed:
                kind, message = self.failed[call_id]
                results.append(
                    {"call_id": call_id, "name": name, "error": kind, "message": message}
                )
            elif call_id in outputs:
                results.append({"call_id": call_id, "name": name, "ok": _digest(outputs[call_id])})
            else:
                results.append(
                    {
                        "call_id": call_id,
                        "name": name,
                        "error": "failed",
                        "message": "no result came back for this call",
                    }
                )
        self.awaiting, self.refused, self.warnings, self.failed = {}, {}, {}, {}
        self.batch = False
        self.feed({"tool_results": results})

    def stopped_text(self) -> str:
        reason = (self.report or {}).get("reason") or "stopped"
        return f"Not run: the run stopped ({reason})."


class _KernelModel(Model):
    """The agent's model, with every call and reply going through the run's machine."""

    def __init__(self, inner: Model, run: _Run, handle_model_errors: bool) -> None:
        self.inner = inner
        self.run = run
        self.handle_model_errors = handle_model_errors

    async def close(self) -> None:
        await self.inner.close()

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[Any],
        model_settings: ModelSettings,
        tools: list[Any],
        output_schema: Any,
        handoffs: list[Any],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: Any | None,
    ) -> ModelResponse:
        run = self.run
        if run.batch and isinstance(input, list):
            # The results were not fed after the tools ran: they are in the conversation.
            run.feed_results(_outputs_in(input))
        while True:
            if run.ended or not run.model_wanted:
                return _stand_in()
            delay_ms, with_tools = run.call["delay_ms"], run.call["tools"]
            if delay_ms:
                await asyncio.sleep(delay_ms / 1000)
            offered_tools = tools if with_tools else []
            try:
                response = await self.inner.get_response(
                    system_instructions,
                    input,
                    model_settings,
                    offered_tools,
                    output_schema,
                    handoffs if with_tools else [],
                    tracing,
                    previous_response_id=previous_response_id,
                    conversation_id=conversation_id,
                    prompt=prompt,
                )
            except Exception as error:  # noqa: BLE001 (re-raised unless a provider's error)
                kind = model_error_kind(error) if self.handle_model_errors else None
                if kind is None:
                    raise
                event: dict[str, Any] = {"kind": kind[0]}
                if kind[1] is not None:
                    event["retry_after_ms"] = kind[1]
                run.feed({"model_error": event})
                continue
            names = [t.name for t in offered_tools if isinstance(getattr(t, "name", None), str)]
            run.feed(model_turn_event(response, names))
            if run.written is not None:
                response = _with_written_calls(response, *run.written)
                run.written = None
            has_calls = any(isinstance(i, ResponseFunctionToolCall) for i in response.output)
            has_text = any(
                isinstance(i, ResponseOutputMessage) and _reply_text(i).strip()
                for i in response.output
            )
            if not has_calls and not has_text:
                # An empty reply is never part of the conversation: retried here when the
                # kernel says so, else answered with no output (the kernel's nudge, if any,
                # follows in the next Runner.run).
                if not run.ended and run.model_wanted and not run.messages:
                    continue
                run.handover = not run.ended
                return _stand_in()
            run.handover = not has_calls and not run.ended
            return response

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError(
            "terminus_kernel.openai_agents: streaming is not supported; use Terminus.run"
        )


def _outputs_in(items: Sequence[Any]) -> dict[str, Any]:
    """The ``function_call_output`` items of a conversation, by call id."""
    outputs: dict[str, Any] = {}
    for item in items:
        if isinstance(item, Mapping) and item.get("type") == "function_call_output":
            outputs[str(item.get("call_id"))] = item.get("output")
    return outputs


def _with_written_calls(
    response: ModelResponse, prose: str, calls: list[dict[str, Any]]
) -> ModelResponse:
    """``response`` with the tool calls the model wrote in its text made function calls (the
    text keeps the prose around them)."""
    output: list[Any] = []
    if prose.strip():
        output.append(
            ResponseOutputMessage(
                id=f"msg_{uuid.uuid4().hex}",
                type="message",
                role="assistant",
                status="completed",
                content=[ResponseOutputText(text=prose, type="output_text", annotations=[])],
            )
        )
    output += [i for i in response.output if not isinstance(i, ResponseOutputMessage)]
    for call in calls:
        output.append(
            ResponseFunctionToolCall(
                id=f"fc_{call['id']}",
                call_id=str(call["id"]),
                type="function_call",
                name=str(call["name"]),
                arguments=json.dumps(call.get("arguments", {}), ensure_ascii=False),
            )
        )
    return dataclasses.replace(response, output=output)


def _guarded(tool: FunctionTool, run: _Run) -> FunctionTool:
    """A copy of ``tool`` whose calls the kernel may refuse, and whose results carry its
    budget warnings."""

    def refuse(data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
        call_id = data.context.tool_call_id
        refusal = run.refused.get(call_id)
        if refusal is not None:
            return ToolGuardrailFunctionOutput.reject_content(refusal)
        if run.ended:
            return ToolGuardrailFunctionOutput.reject_content(run.stopped_text())
        if call_id not in run.awaiting:
            return ToolGuardrailFunctionOutput.reject_content(
                "Not run: the kernel did not ask for this call."
            )
        return ToolGuardrailFunctionOutput.allow()

    def warn(data: ToolOutputGuardrailData) -> ToolGuardrailFunctionOutput:
        warning = run.warnings.get(data.context.tool_call_id)
        if warning is None:
            return ToolGuardrailFunctionOutput.allow()
        output = data.output if isinstance(data.output, str) else str(data.output)
        return ToolGuardrailFunctionOutput.reject_content(
            f"{output}\n\n{warning}" if output else warning
        )

    return dataclasses.replace(
        tool,
        tool_input_guardrails=[
            ToolInputGuardrail(guardrail_function=refuse, name="terminus"),
            *(tool.tool_input_guardrails or []),
        ],
        tool_output_guardrails=[
            *(tool.tool_output_guardrails or []),
            ToolOutputGuardrail(guardrail_function=warn, name="terminus"),
        ],
    )


class Terminus:
    """Runs OpenAI Agents SDK agents under the Terminus kernel.

    Args:
        policy: the kernel's policy (the scenario ``policy`` fields, same names and defaults);
            an unknown or ill-typed field raises ``ValueError`` naming it, here.
        verifier: judges completion claims when the policy sets ``verify_completion``; without
            one, a claim the rules accept (todos closed, ``completion_requires`` met) is complete.
        handle_model_errors: a provider's error from the model (see :func:`model_error_kind`)
            goes to the kernel, which retries it after its backoff or ends the run with
            ``model_error``; any other exception propagates. With ``False``, every exception
            propagates.

    One ``Terminus`` can run many agents, one after the other or at once: each run has its own
    machine.
    """

    def __init__(
        self,
        policy: Mapping[str, Any] | None = None,
        *,
        verifier: Verifier | None = None,
        handle_model_errors: bool = True,
    ) -> None:
        if policy is not None and not isinstance(policy, Mapping):
            raise TypeError(f"policy: expected a dict or None, got {type(policy).__name__}")
        if verifier is not None and not callable(verifier):
            raise TypeError(f"verifier: expected a callable, got {type(verifier).__name__}")
        self._policy: dict[str, Any] = dict(policy or {})
        check_policy(self._policy, "terminus_kernel.openai_agents")
        self._verifier = verifier
        self._handle_model_errors = bool(handle_model_errors)

    def run_sync(self, agent: Agent[Any], input: str | list[Any], **kwargs: Any) -> RunResult:
        """:meth:`run` from code without a running event loop."""
        return asyncio.run(self.run(agent, input, **kwargs))

    async def run(
        self,
        agent: Agent[Any],
        input: str | list[Any],
        *,
        run_config: RunConfig | None = None,
        **kwargs: Any,
    ) -> RunResult:
        """Runs ``agent`` on ``input`` until the kernel stops; returns the last ``Runner.run``
        result, with the kernel's report as its attribute ``terminus``. Other keyword arguments
        (``context``, ``hooks``, ``error_handlers``) go to ``Runner.run``; ``max_turns``,
        ``session``, ``previous_response_id``, ``auto_previous_response_id`` and
        ``conversation_id`` raise ``TypeError``.

        An exception from the SDK or a tool propagates with the report (the run cancelled) as
        its attribute ``terminus``.
        """
        if not isinstance(agent, Agent):
            raise TypeError(f"agent: expected an agents.Agent, got {type(agent).__name__}")
        if not isinstance(input, str | list):
            raise TypeError(
                f"input: expected a string or a list of items, got {type(input).__name__}"
            )
        for name, why in _REFUSED_KWARGS.items():
            if name in kwargs:
                raise TypeError(f"{name}: not accepted by Terminus.run: {why}")
        if agent.output_type not in (None, str):
            raise TypeError(
                f"agent.output_type: {agent.output_type!r} is not supported; "
                "terminus_kernel.openai_agents runs agents with a text output"
            )
        if run_config is not None and not isinstance(run_config, RunConfig):
            raise TypeError(f"run_config: expected a RunConfig, got {type(run_config).__name__}")
        config = run_config or RunConfig()
        machine = Machine(self._policy, task=_task(input), name=agent.name)
        run = _Run(machine, self._verifier, self._policy.get("deadline_ms") is not None)
        run.carry_out()  # the first command: call the model

        model = _KernelModel(_resolve_model(agent, config), run, self._handle_model_errors)
        user_formatter = config.tool_error_formatter

        def formatter(args: ToolErrorFormatterArgs[Any]) -> Any:
            if args.kind == "tool_exception":
                run.failed[args.call_id] = (_tool_error_kind(args.error), str(args.error or ""))
            elif args.kind == "tool_not_found":
                run.failed[args.call_id] = ("not_found", args.default_message)
            return user_formatter(args) if user_formatter is not None else None

        behavior = agent.tool_use_behavior

        async def after_tools(
            context: RunContextWrapper[Any], results: list[FunctionToolResult]
        ) -> ToolsToFinalOutputResult:
            outputs: dict[str, Any] = {}
            for result in results:
                raw = getattr(result.run_item, "raw_item", None)
                if isinstance(raw, Mapping) and raw.get("call_id") is not None:
                    outputs[str(raw["call_id"])] = result.output
            run.feed_results(outputs)
            if run.ended:
                return ToolsToFinalOutputResult(
                    is_final_output=True, final_output=(run.report or {}).get("result") or ""
                )
            if run.messages:
                run.handover = True
                # A notice goes into the conversation before the next model call: this
                # Runner.run ends here and the next one starts with it.
                return ToolsToFinalOutputResult(is_final_output=True, final_output="")
            return await _users_behavior(behavior, context, results)

        wired = agent.clone(
            model=model,
            tools=[_guarded(t, run) if isinstance(t, FunctionTool) else t for t in agent.tools],
            tool_use_behavior=after_tools,
        )
        config = dataclasses.replace(config, model=None, tool_error_formatter=formatter)
        items: str | list[Any] = input
        while True:
            try:
                result = await Runner.run(wired, items, max_turns=None, run_config=config, **kwargs)
            except BaseException as error:
                if not run.ended:
                    run.feed({"cancel": True})
                    if not run.ended:
                        run.report = machine.report()
                with contextlib.suppress(AttributeError):  # an exception without a __dict__
                    setattr(error, REPORT_ATTR, run.report)
                raise
            if run.ended:
                break
            if run.batch:
                run.feed_results(_outputs_in(result.to_input_list()))
                if run.ended:
                    break
            if not (run.handover and run.model_wanted):
                # The SDK ended the run (a tool_use_behavior of the agent's): the kernel's run
                # is cancelled, so the report says so.
                run.feed({"cancel": True})
                break
            run.handover = False
            items = result.to_input_list() + [
                {"role": "user", "content": text} for text in run.messages
            ]
            run.messages = []
        setattr(result, REPORT_ATTR, run.report)
        return result


async def _users_behavior(
    behavior: Any, context: RunContextWrapper[Any], results: list[FunctionToolResult]
) -> ToolsToFinalOutputResult:
    """The agent's own ``tool_use_behavior`` on a batch the kernel goes on after."""
    if behavior == "run_llm_again":
        return ToolsToFinalOutputResult(is_final_output=False)
    if behavior == "stop_on_first_tool":
        return ToolsToFinalOutputResult(is_final_output=True, final_output=results[0].output)
    if isinstance(behavior, Mapping):
        names = behavior.get("stop_at_tool_names", [])
        for result in results:
            if result.tool.name in names:
                return ToolsToFinalOutputResult(is_final_output=True, final_output=result.output)
        return ToolsToFinalOutputResult(is_final_output=False)
    if callable(behavior):
        answer = behavior(context, results)
        if asyncio.iscoroutine(answer) or hasattr(answer, "__await__"):
            answer = await answer
        return answer
    raise TypeError(f"agent.tool_use_behavior: not understood: {behavior!r}")


def _resolve_model(agent: Agent[Any], config: RunConfig) -> Model:
    """The model the SDK would call for ``agent`` under ``config``."""
    chosen = config.model if config.model is not None else agent.model
    if isinstance(chosen, Model):
        return chosen
    if chosen is not None and not isinstance(chosen, str):
        raise TypeError(
            f"agent.model: expected a str or an agents.Model, got {type(chosen).__name__}"
        )
    return config.model_provider.get_model(chosen)
