"""Terminus under the OpenAI Agents SDK (``openai-agents``).

:class:`Terminus` runs an ``agents.Agent`` with the kernel deciding when the run ends, instead
of ``max_turns``::

    from agents import Agent, function_tool
    from terminus_kernel.openai_agents import Terminus

    agent = Agent(name="architect", instructions="...", tools=[read_file, write_file])
    result = await Terminus({"completion_requires": ["write_file"]}).run(agent, "Write the plan")
    result.final_output
    result.terminus  # the kernel's report: outcome, reason, steps, model_calls, nudges, ...

What each point decides is the host core's (``terminus_kernel._native.Session``, the same for
every framework adapter, ``docs/embedding.md``), which reads the SDK's items as they are; this
module carries its steps out through the SDK's own extension points. ``run`` (``run_sync``
without an event loop) calls ``Runner.run`` with copies of the agent and its function tools
wired to one session:

- a ``Model`` wrapper gives every reply (the ``ModelResponse``'s items, :func:`wire`) to the
  session. An empty reply or a provider's error (classed with
  :func:`terminus_kernel.provider_error_kind`) is retried inside the wrapper after the
  kernel's backoff, or ends the run (``empty_responses``, ``model_error``); a tool call written
  in the reply's text is made a real call when the kernel says so. After a stop the kernel
  decided, the wrapper does not call the model again.
- a tool input guardrail on each function tool answers a call the kernel refused (a tool
  excluded after its failures, a spent tool budget, arguments that are not JSON, a run that
  stopped) with the kernel's text, instead of running it; a tool output guardrail appends the
  kernel's budget warning.
- ``RunConfig.tool_error_formatter`` records which calls failed and their class (a tool's
  exception may carry it as its attribute ``terminus_error``, :data:`ERROR_KIND`); a call of a
  tool the agent lacks is answered ``not_found`` with the kernel's text, unless the caller's
  formatter gives one (``tool_not_found_behavior`` is set to ``"return_error_to_model"``).
- ``tool_use_behavior`` gives each tool batch's results (the ``function_call_output`` items) to
  the session; a stop the kernel decides there (a loop of identical calls, failing tools, a
  spent budget) ends the run without another model call.

A reply the SDK takes as the final output but the kernel refuses (``completion_requires``
unmet, open todos of a ``write_todos`` tool, a no-op reply) ends one ``Runner.run`` only:
``run`` goes on with the conversation so far (``result.to_input_list()``) and the kernel's
nudge as a user message, and so on until the kernel stops. A notice of the kernel on a tool
batch (a loop seen, a tool excluded, a budget nearly spent) is given the same way, appended to
the output of the batch's last result (the host core's ``notice_to``), as ``terminus run``
sends it: no user message stands between a tool result and the next reply. The result is the
last ``Runner.run``'s: its ``to_input_list()`` is the whole conversation, nudges included, and
its attribute ``terminus`` is the kernel's report. ``max_turns`` is not used: the policy's
budgets (``max_steps``, ``max_model_calls``, ...) bound the run, so it never ends in
``MaxTurnsExceeded``.

The agent's ``output_type`` must be text (``None`` or ``str``); streaming, handoffs, sessions
and server-side conversation state are not driven by this module.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
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
)

from terminus_kernel._adapters import Verifier, checked, verified
from terminus_kernel._native import Session, checkpoint_message, with_notices
from terminus_kernel._sdk_errors import sdk_error_kind

__all__ = [
    "ERROR_KIND",
    "REPORT_ATTR",
    "Terminus",
    "Verifier",
    "model_error_kind",
    "wire",
]

REPORT_ATTR = "terminus"
"""The attribute of the ``RunResult`` ``Terminus.run`` returns that holds the kernel's report."""

ERROR_KIND = "terminus_error"
"""The attribute a tool's exception may carry (a string): the kernel's error class for the
failed call (``not_found``, ``permission_denied``, ``invalid_arguments``, ...); without it the
class is read from the exception's type (``PermissionError``, ``LookupError``, ``TimeoutError``),
else ``failed``."""


# Refused keyword arguments of ``Runner.run``, and why.
_REFUSED_KWARGS = {
    "max_turns": "the kernel's policy bounds the run (max_steps, max_model_calls, ...)",
    "session": "a session is not driven by terminus_kernel.openai_agents",
    "previous_response_id": "server-side conversation state is not driven by this module",
    "auto_previous_response_id": "server-side conversation state is not driven by this module",
    "conversation_id": "server-side conversation state is not driven by this module",
}


def wire(response: ModelResponse) -> dict[str, Any]:
    """A ``ModelResponse`` in the shape the host core reads (``terminus_runtime::host::messages``):
    its output items' ``model_dump()``, its usage when the provider reported it (a response with
    no request counted and no token is unknown usage, not zero), and a fresh id (the SDK's chat
    completions models give every reply the same placeholder ids).

    Raises:
        TypeError: ``response`` is not a ``ModelResponse``.
    """
    if not isinstance(response, ModelResponse):
        raise TypeError(f"wire: expected a ModelResponse, got {type(response).__name__}")
    out: dict[str, Any] = {
        "output": [
            item.model_dump(exclude_none=True) if hasattr(item, "model_dump") else item
            for item in response.output
        ],
        "response_id": f"terminus-{uuid.uuid4().hex}",
    }
    usage = response.usage
    if usage is not None and (usage.requests or usage.input_tokens or usage.output_tokens):
        out["usage"] = {
            "input_tokens": int(usage.input_tokens),
            "output_tokens": int(usage.output_tokens),
        }
    return out


def model_error_kind(error: BaseException) -> tuple[str, int | None] | None:
    """The kernel's class of a failed model call with the delay the provider asked for (ms), or
    ``None`` for an exception that is not a provider's error (it propagates). The ``openai``
    SDK's ``APIStatusError`` keeps the HTTP status and response: they are classed with the
    table every host shares (:func:`terminus_kernel.provider_error_kind`); a timeout or a
    refused connection (``APITimeoutError``, ``APIConnectionError``) has no status."""
    return sdk_error_kind(error)


def _tool_error_kind(error: BaseException | None) -> str:
    """The kernel's class of a tool's exception (its ``terminus_error``, else its type's)."""
    marked = getattr(error, ERROR_KIND, None)
    if isinstance(marked, str) and marked:
        return marked
    if isinstance(error, PermissionError):
        return "permission_denied"
    if isinstance(error, FileNotFoundError | LookupError):
        return "not_found"
    if isinstance(error, TimeoutError):
        return "timeout"
    return "failed"


def _now() -> int:
    return int(time.monotonic() * 1000)


def _stand_in() -> ModelResponse:
    """The reply of a model call the kernel does not let happen: no output, no usage."""
    return ModelResponse(output=[], usage=Usage(), response_id=None)


class _Run:
    """One run's session and the glue's state around it: what the last step said, the calls
    answered instead of run, the failed calls' classes, the texts for the next ``Runner.run``."""

    def __init__(self, policy: Mapping[str, Any], input: str | list[Any], verifier: Any) -> None:
        items = [{"role": "user", "content": input}] if isinstance(input, str) else input
        self.session, step = Session.start(
            policy, [i for i in items if isinstance(i, Mapping)], _now()
        )
        self.verifier = verifier
        self.step: dict[str, Any] = step
        self.answers: dict[str, dict[str, Any]] = {}
        self.marks: dict[str, str] = {}
        # Nudges (and notices with no result to ride on), for the conversation before the next
        # model call.
        self.messages: list[str] = []
        # Checkpoints to write for the agent before the next model call (``prompt``, ``note``).
        self.checkpoints: list[dict[str, str]] = []
        # Notices for the output of a tool call (by its item's id, else its call id), appended
        # to it before the next model call.
        self.notices: dict[str, str] = {}
        # Whether the last Runner.run ended for the kernel to go on (a nudge, a notice, a
        # refused final output), not for the agent's own tool_use_behavior.
        self.handover = False

    @property
    def model_wanted(self) -> bool:
        return self.step.get("jump") == "model" and not self.session.ended

    def take(self, step: dict[str, Any] | None) -> dict[str, Any] | None:
        """Carries ``step`` out (its verifications answered by the verifier first)."""
        step = verified(self.session, self.verifier, step)
        if step is not None:
            self.step = step
            notice, target = with_notices("", step.get("notices", [])), step.get("notice_to")
            if notice and target:
                old = self.notices.get(target)
                self.notices[target] = with_notices(old or "", [notice])
            elif notice:
                self.messages.append(notice)
            self.messages += step.get("nudges", ())
            if step.get("checkpoint"):
                self.checkpoints.append(step["checkpoint"])
            self.answers.update({a["tool_call_id"]: a for a in step.get("answers", ())})
        return step

    def _marked(self, items: Sequence[Any]) -> list[dict[str, Any]]:
        """The ``function_call_output`` items of ``items``, a failed call's with its class."""
        marks = self.marks
        outputs = [
            {**o, ERROR_KIND: marks[o["call_id"]]} if o.get("call_id") in marks else dict(o)
            for o in _outputs_in(items)
        ]
        seen = {o.get("call_id") for o in outputs}
        # A failed call whose output is not among the items (a tool the agent lacks).
        outputs += [
            {"type": "function_call_output", "call_id": c, "output": "", ERROR_KIND: kind}
            for c, kind in self.marks.items()
            if c not in seen
        ]
        return outputs

    def results(self, items: Sequence[Any]) -> None:
        """Feeds the tool turn's results (the ``function_call_output`` items of ``items``)."""
        if self.session.batch_out:
            self.take(self.session.results(self._marked(items), _now()))
            self.marks.clear()

    def finish(self, items: Sequence[Any]) -> None:
        """Ends a run something else ended (the tool turn's results read from ``items``)."""
        self.take(self.session.finish(self._marked(items), _now()))


class _KernelModel(Model):
    """The agent's model: every call and reply goes through the run's session."""

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
        if isinstance(input, list) and run.session.batch_out:
            # The results were not fed after the tools ran (the SDK asks no tool_use_behavior
            # after a turn whose every call is of a tool the agent lacks): they are in the
            # conversation.
            run.results(input)
            if run.model_wanted and (run.notices or run.messages):
                # The kernel's texts go into the conversation first: the next Runner.run starts
                # with them, this call is not made.
                run.handover = True
                return _stand_in()
        while run.model_wanted:
            delay_ms, with_tools = int(run.step.get("delay_ms") or 0), run.step.get("tools", True)
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
                run.take(run.session.model_error(kind[0], kind[1], _now()))
                continue
            names = [t.name for t in offered_tools if isinstance(getattr(t, "name", None), str)]
            step = run.take(run.session.reply(wire(response), names, _now())) or {}
            written = step.get("written")
            if written is not None:
                response = _with_written_calls(response, written["text"], written["tool_calls"])
            if step.get("drop_reply"):
                # An empty reply is never part of the conversation: retried here when the
                # kernel says so, else answered with no output (the kernel's nudge, if any,
                # follows in the next Runner.run).
                if run.model_wanted and not run.messages:
                    continue
                run.handover = not run.session.ended
                return _stand_in()
            has_calls = any(isinstance(i, ResponseFunctionToolCall) for i in response.output)
            run.handover = not has_calls and not run.session.ended
            return response
        return _stand_in()

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError(
            "terminus_kernel.openai_agents: streaming is not supported; use Terminus.run"
        )


def _outputs_in(items: Sequence[Any]) -> list[Mapping[str, Any]]:
    """The ``function_call_output`` items of a conversation."""
    return [
        item
        for item in items
        if isinstance(item, Mapping) and item.get("type") == "function_call_output"
    ]


def _noticed(items: list[Any], notices: dict[str, str]) -> list[Any]:
    """``items`` with each notice appended to the output of its tool call (the last
    ``function_call_output`` of that id, else call id), a blank line between; a notice placed is
    taken out of ``notices``."""
    items = list(items)
    for at in range(len(items) - 1, -1, -1):
        item = items[at]
        if not isinstance(item, Mapping) or item.get("type") != "function_call_output":
            continue
        target = next((k for k in (item.get("id"), item.get("call_id")) if k in notices), None)
        if target is None:
            continue
        notice, output = notices.pop(target), item.get("output")
        if isinstance(output, str):
            output = with_notices(output, [notice])
        else:
            output = [*(output or []), {"type": "input_text", "text": notice}]
        items[at] = {**item, "output": output}
    return items


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
    """A copy of ``tool`` whose calls the kernel may answer instead (``Session.gate``), and whose
    results carry its budget warnings."""

    def refuse(data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
        call_id = data.context.tool_call_id
        answer = run.answers.pop(call_id, None)
        if answer is None:
            answer = Session.gate(run.session.turn(), call_id, tool.name, True).get("refuse")
        if answer is None:
            return ToolGuardrailFunctionOutput.allow()
        if answer.get("error"):
            run.marks[call_id] = answer["error"]
        return ToolGuardrailFunctionOutput.reject_content(answer["content"])

    def warn(data: ToolOutputGuardrailData) -> ToolGuardrailFunctionOutput:
        gate = Session.gate(run.session.turn(), data.context.tool_call_id, tool.name, True)
        warning = (gate.get("run") or {}).get("warning")
        if warning is None:
            return ToolGuardrailFunctionOutput.allow()
        output = data.output if isinstance(data.output, str) else str(data.output)
        return ToolGuardrailFunctionOutput.reject_content(with_notices(output, [warning]))

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
        scale: the task's size in units (the files in scope, say): the policy's ``budget_scale``
            scales its budgets for it, as ``terminus run --scale`` does.

    One ``Terminus`` can run many agents, one after the other or at once: each run has its own
    session.
    """

    def __init__(
        self,
        policy: Mapping[str, Any] | None = None,
        *,
        verifier: Verifier | None = None,
        handle_model_errors: bool = True,
        scale: int | None = None,
    ) -> None:
        if policy is not None and not isinstance(policy, Mapping):
            raise TypeError(f"policy: expected a dict or None, got {type(policy).__name__}")
        if verifier is not None and not callable(verifier):
            raise TypeError(f"verifier: expected a callable, got {type(verifier).__name__}")
        self._policy = checked(policy or {}, scale)  # a bad field or scale raises here
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
        run = _Run(self._policy, input, self._verifier)
        model = _KernelModel(_resolve_model(agent, config), run, self._handle_model_errors)
        user_formatter = config.tool_error_formatter

        def formatter(args: ToolErrorFormatterArgs[Any]) -> Any:
            answer = None
            if args.kind == "tool_exception":
                run.marks[args.call_id] = _tool_error_kind(args.error)
            elif args.kind == "tool_not_found":
                turn = run.session.turn()
                answer = Session.gate(turn, args.call_id, args.tool_name, False).get("refuse")
                run.marks[args.call_id] = (answer or {}).get("error") or "not_found"
            text = None if user_formatter is None else user_formatter(args)
            if text is None and answer is not None:
                # The caller's formatter left it to the default: the kernel's answer.
                text = answer["content"]
            return text

        behavior = agent.tool_use_behavior

        async def after_tools(
            context: RunContextWrapper[Any], results: list[FunctionToolResult]
        ) -> ToolsToFinalOutputResult:
            run.results([getattr(r.run_item, "raw_item", None) for r in results])
            if run.session.ended:
                return ToolsToFinalOutputResult(
                    is_final_output=True, final_output=run.session.report().get("result") or ""
                )
            if run.messages or run.notices or run.checkpoints:
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
        config = dataclasses.replace(
            config,
            model=None,
            tool_error_formatter=formatter,
            tool_not_found_behavior="return_error_to_model",
        )
        # A checkpoint written for the agent: its own model and instructions asked for a
        # summary, no tools, one turn; the reply is not fed to the kernel.
        writer = agent.clone(
            model=model.inner,
            tools=[],
            handoffs=[],
            input_guardrails=[],
            output_guardrails=[],
            tool_use_behavior="run_llm_again",
        )

        async def summarize(items: list[Any], checkpoint: dict[str, str]) -> str:
            prompt = {"role": "user", "content": checkpoint["prompt"]}
            try:
                written = await Runner.run(
                    writer, [*items, prompt], max_turns=1, run_config=config, **kwargs
                )
            except Exception as error:  # noqa: BLE001 (re-raised unless a provider's error)
                kind = model_error_kind(error) if self._handle_model_errors else None
                if kind is None:
                    run.finish([])
                    with contextlib.suppress(AttributeError):  # an exception without a __dict__
                        setattr(error, REPORT_ATTR, run.session.report())
                    raise
                return checkpoint_message(checkpoint["note"], failed=(kind[0], str(error)))
            return checkpoint_message(checkpoint["note"], str(written.final_output or ""))

        items: str | list[Any] = input
        while True:
            try:
                result = await Runner.run(wired, items, max_turns=None, run_config=config, **kwargs)
            except BaseException as error:
                run.finish([])
                with contextlib.suppress(AttributeError):  # an exception without a __dict__
                    setattr(error, REPORT_ATTR, run.session.report())
                raise
            if not run.session.ended:
                run.results(result.to_input_list())
            if run.session.ended:
                break
            if not (run.handover and run.model_wanted):
                # The SDK ended the run (a tool_use_behavior of the agent's): the kernel's run
                # is cancelled, so the report says so.
                run.finish(result.to_input_list())
                break
            run.handover = False
            items = _noticed(result.to_input_list(), run.notices)
            # A notice with no tool output to ride on (none is expected) is never dropped.
            texts = [*run.notices.values(), *run.messages]
            items += [{"role": "user", "content": text} for text in texts]
            run.messages, run.notices = [], {}
            for checkpoint in run.checkpoints:
                items.append({"role": "user", "content": await summarize(items, checkpoint)})
            run.checkpoints = []
        setattr(result, REPORT_ATTR, run.session.report())
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
